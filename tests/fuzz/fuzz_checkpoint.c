// fuzz_checkpoint.c: the checkpoint reader (llmc/ckpt_reader.h, llmc/ckpt_manifest.h, llmc/json.h)
// on arbitrary manifests and data files, against a fixed tiny run and its training data: any
// damage or conflict must come back as an error naming the file (never a crash, a read out of
// bounds, or an allocation the files cannot back), and a checkpoint that reads fills every
// element of the run's tensors exactly once. Then the same files as --model
// (llmc/model_source.h: the shape from the manifest, the weights alone): read, or one usage error.
// Input: a little-endian uint32 n, then n & 0x3fffffff bytes of manifest.json, then the bytes of
// rank_00000.bin (the seeds are real checkpoints of the run below, and edited copies). Unless
// bit 31 of n is set, the manifest is re-sealed first (its "manifest_crc32c" line rewritten to
// match the bytes before it), so that mutations reach the checks behind the seal; bit 30 set
// runs with --resume-data-changed 1.
#include "llmc/checkpoint.h"
#include "llmc/model_source.h"
#include "tests/fuzz/fuzz_harness.h"

// The run the seeds were written by: this command line over a shard 'tokens.bin' of 4000 uint16
// tokens (7i + 3) mod 16, with --ckpt-every 1; the seeds hold step_00000002/ (valid_tiny: format
// version 2; valid_v3) and damaged or edited copies of it.
static char *FUZZ_RUN_ARGS[] = {(char *)"train_gpt", (char *)"--data-train", (char *)"x", (char *)"--n-layer",
                                (char *)"1", (char *)"--n-embd", (char *)"8", (char *)"--n-head", (char *)"2",
                                (char *)"--vocab-size", (char *)"16", (char *)"--max-seq-len", (char *)"8",
                                (char *)"--seq-len", (char *)"8", (char *)"--batch-size", (char *)"1",
                                (char *)"--steps", (char *)"2", (char *)"--ckpt-dir", (char *)"x"};
#define FUZZ_NO_SEAL (1u << 31)
#define FUZZ_DATA_CHANGED (1u << 30)

static TrainOptions fuzz_opts;
static GPTConfig fuzz_cfg;
static BatchPlan fuzz_plan;
static ParamLayout fuzz_layout;
static ParamMap fuzz_map;
static CkptRun fuzz_run_desc;
static DataLoader fuzz_train;
static DataSetId fuzz_data_set;
static float *fuzz_state[CKPT_STATES];

static void set_up_run(void) {
    train_options_parse((int)(sizeof(FUZZ_RUN_ARGS) / sizeof(FUZZ_RUN_ARGS[0])), FUZZ_RUN_ARGS, &fuzz_opts, "fuzz");
    int from_file;
    fuzz_cfg = train_build_config(&fuzz_opts, &from_file);
    fuzz_plan = train_batch_plan(&fuzz_opts, &fuzz_cfg, 1);
    param_layout_init(&fuzz_layout, &fuzz_cfg);
    param_map_init(&fuzz_map, &fuzz_layout);
    Comm one_rank;  // (the layout the run records: one rank)
    memset(&one_rank, 0, sizeof(one_rank));
    one_rank.world = 1;
    for (int d = 0; d < GRID_DIMS; d++) one_rank.grid.size[d] = 1;
    fuzz_run_desc = ckpt_run_of(&fuzz_opts, &fuzz_cfg, &fuzz_layout, &fuzz_plan, &one_rank, "train_gpt");
    for (int s = 0; s < CKPT_STATES; s++)
        fuzz_state[s] = (float *)mallocCheck(sizeof(float) * (size_t)fuzz_layout.num_elements);
    char path[512];
    snprintf(path, sizeof(path), "%s/tokens.bin", fuzz_scratch_dir());
    ShardWriter *w = shard_writer_open(path, 2, 0);
    for (uint32_t i = 0; i < 4000; i++) {
        uint32_t token = (7 * i + 3) % 16;
        shard_writer_append(w, &token, 1);
    }
    shard_writer_close(w);
    dataloader_init(&fuzz_train, path, fuzz_plan.B, fuzz_plan.T, 0, 1, fuzz_opts.shuffle, (uint64_t)fuzz_opts.seed,
                    fuzz_cfg.vocab_size, 0);
    fuzz_data_set = dataloader_identity(&fuzz_train, fuzz_train.num_shards);
}

// The manifest m[0..n) re-sealed (what follows its last seal line replaced by a matching one;
// unchanged without one), malloc'd, in *out.
static size_t reseal(const uint8_t *m, size_t n, char **out) {
    const char *line = CKPT_SEAL_LINE;
    size_t k = strlen(line), keep = n;
    for (size_t i = n >= k ? n - k + 1 : 0; i-- > 0;)
        if (memcmp(m + i, line, k) == 0) {
            keep = i + 1;
            break;
        }
    char seal[64] = "";
    if (keep < n) ckpt_seal_line((const char *)m, keep, seal, sizeof(seal));
    *out = (char *)mallocCheck(keep + strlen(seal) + 1);
    memcpy(*out, m, keep);
    memcpy(*out + keep, seal, strlen(seal));
    return keep + strlen(seal);
}

static void fuzz_one(const uint8_t *data, size_t size) {
    if (size < 4) return;
    uint32_t n;
    memcpy(&n, data, 4);
    size_t manifest_len = (n & 0x3fffffffu) <= size - 4 ? (n & 0x3fffffffu) : size - 4;
    char dir[512], path[64];  // (dir: well inside CKPT_PATH_MAX)
    snprintf(dir, sizeof(dir), "%s/step_00000002", fuzz_scratch_dir());
    mkdir(dir, 0755);
    snprintf(path, sizeof(path), "step_00000002/manifest.json");
    if (n & FUZZ_NO_SEAL) {
        fuzz_write_file(path, data + 4, manifest_len);
    } else {
        char *m;
        size_t len = reseal(data + 4, manifest_len, &m);
        fuzz_write_file(path, (const uint8_t *)m, len);
        free(m);
    }
    snprintf(path, sizeof(path), "step_00000002/rank_00000.bin");
    fuzz_write_file(path, data + 4 + manifest_len, size - 4 - manifest_len);
    fuzz_run_desc.set.resume_data_changed = (n & FUZZ_DATA_CHANGED) != 0;
    CkptTargets t;
    memset(&t, 0, sizeof(t));
    t.map = &fuzz_map;
    for (int s = 0; s < CKPT_STATES; s++) {
        t.dst[s] = fuzz_state[s];
        t.hold[s] = ckpt_one_piece(0, fuzz_layout.num_elements);
    }
    CkptReader r;
    char err[CKPT_ERR_MAX];
    int ok = ckpt_read(&r, dir, &fuzz_run_desc, &fuzz_train, &fuzz_data_set, &t, err);
    if (!ok && strstr(err, dir) == NULL) abort();  // every error names the checkpoint's file
    if (ok)
        for (int s = 0; s < CKPT_STATES; s++)
            if (t.filled[s] != fuzz_layout.num_params * 4) abort();  // every parameter (not the gaps) once
    for (int s = 0; s < CKPT_STATES; s++) ckpt_pieces_free(&t.hold[s]);
    ckpt_reader_close(&r);
    GPTConfig model;  // as --model: its shape, then (this run's shape) its weights, or exit 2
    model_checkpoint_open(&r, dir, &model, err);
    ckpt_reader_close(&r);
    if (memcmp(&model, &fuzz_cfg, sizeof(model)) == 0) model_checkpoint_load(dir, &fuzz_layout, fuzz_state[0]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!fuzz_state[0]) set_up_run();  // outside fuzz_run: kept for every input
    fuzz_run(fuzz_one, NULL, data, size);
    return 0;
}
