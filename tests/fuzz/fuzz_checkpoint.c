// fuzz_checkpoint.c: the checkpoint reader (llmc/checkpoint.h, llmc/json.h) on
// arbitrary manifests and data files, against a fixed tiny run: any damage or
// conflict must come back as an error naming the file (never a crash, a read
// out of bounds, or an allocation the files cannot back), and a checkpoint
// that reads fills every element of the run's tensors exactly once.
// Input: a little-endian uint32 n, then n bytes of manifest.json, then the
// bytes of rank_00000.bin (the seeds are a real checkpoint of the run below).
#include "llmc/checkpoint.h"
#include "tests/fuzz/fuzz_harness.h"

// The run the seeds were written by: this command line over a shard of 4000 uint16 tokens
// (7i + 3) mod 16, with --ckpt-every 1; the seeds hold step_00000002/ (valid_tiny) and damaged
// copies of it.
static char *FUZZ_RUN_ARGS[] = {(char *)"train_gpt", (char *)"--data-train", (char *)"x", (char *)"--n-layer",
                                (char *)"1", (char *)"--n-embd", (char *)"8", (char *)"--n-head", (char *)"2",
                                (char *)"--vocab-size", (char *)"16", (char *)"--max-seq-len", (char *)"8",
                                (char *)"--seq-len", (char *)"8", (char *)"--batch-size", (char *)"1",
                                (char *)"--steps", (char *)"2", (char *)"--ckpt-dir", (char *)"x"};

static TrainOptions fuzz_opts;
static GPTConfig fuzz_cfg;
static BatchPlan fuzz_plan;
static ParamLayout fuzz_layout;
static ParamMap fuzz_map;
static CkptRun fuzz_run_desc;
static float *fuzz_state[CKPT_STATES];

static void set_up_run(void) {
    train_options_parse((int)(sizeof(FUZZ_RUN_ARGS) / sizeof(FUZZ_RUN_ARGS[0])), FUZZ_RUN_ARGS, &fuzz_opts, "fuzz");
    int from_file;
    fuzz_cfg = train_build_config(&fuzz_opts, &from_file);
    fuzz_plan = train_batch_plan(&fuzz_opts, &fuzz_cfg, 1);
    param_layout_init(&fuzz_layout, &fuzz_cfg);
    param_map_init(&fuzz_map, &fuzz_layout);
    CkptRun run = {&fuzz_opts, &fuzz_cfg, &fuzz_layout, &fuzz_plan, NULL, "train_gpt"};
    fuzz_run_desc = run;
    for (int s = 0; s < CKPT_STATES; s++)
        fuzz_state[s] = (float *)mallocCheck(sizeof(float) * (size_t)fuzz_layout.num_elements);
}

static void fuzz_one(const uint8_t *data, size_t size) {
    if (size < 4) return;
    uint32_t n;
    memcpy(&n, data, 4);
    size_t manifest_len = n <= size - 4 ? n : size - 4;
    char dir[512], path[64];  // (dir: well inside CKPT_PATH_MAX)
    snprintf(dir, sizeof(dir), "%s/step_00000002", fuzz_scratch_dir());
    mkdir(dir, 0755);
    snprintf(path, sizeof(path), "step_00000002/manifest.json");
    fuzz_write_file(path, data + 4, manifest_len);
    snprintf(path, sizeof(path), "step_00000002/rank_00000.bin");
    fuzz_write_file(path, data + 4 + manifest_len, size - 4 - manifest_len);
    CkptTargets t;
    memset(&t, 0, sizeof(t));
    t.map = &fuzz_map;
    for (int s = 0; s < CKPT_STATES; s++) {
        t.dst[s] = fuzz_state[s];
        t.hold[s] = ckpt_one_piece(0, fuzz_layout.num_elements);
    }
    CkptReader r;
    char err[CKPT_ERR_MAX];
    int ok = ckpt_reader_open(&r, dir, &fuzz_run_desc, err) && ckpt_read_tensors(&r, &t, &fuzz_cfg);
    if (!ok && strstr(err, dir) == NULL) abort();  // every error names the checkpoint's file
    if (ok)
        for (int s = 0; s < CKPT_STATES; s++)
            if (t.filled[s] != fuzz_layout.num_params * 4) abort();  // every parameter (not the gaps) once
    for (int s = 0; s < CKPT_STATES; s++) ckpt_pieces_free(&t.hold[s]);
    ckpt_reader_close(&r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!fuzz_state[0]) set_up_run();  // outside fuzz_run: kept for every input
    fuzz_run(fuzz_one, NULL, data, size);
    return 0;
}
