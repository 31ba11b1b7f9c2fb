// checkpoint.h: training checkpoints, shared by both trainers: the on-disk
// format, the asynchronous writer (a background thread per rank, the commit on
// rank 0), and the strict reader that resumes a run on any layout.
//
// A checkpoint is a directory CKPT_DIR/step_NNNNNNNN/ (N: optimizer steps done):
//   manifest.json  format and version, step, model config, the flags a resume
//                  must keep (checked against the command line), the batch and
//                  the layout it was written on, the tensor table (the global
//                  flat order, model.h), the data loader's global position,
//                  the training data's identity and the sampling RNG, and for
//                  each data file its size, CRC32C, the writing rank's buffer
//                  ("layout": its tensor-parallel slice and the segments it
//                  holds) and the ranges of that buffer the file holds; last,
//                  its own CRC32C (ckpt_manifest.h: the seal, the limits and
//                  the rules the reader checks it against);
//   rank_RRRRR.bin the fp32 master weights ("params") and AdamW moments
//                  ("adam_m", "adam_v") over those ranges, each range's three
//                  states one after the other (raw little-endian fp32, or one
//                  zstd stream of those bytes with --ckpt-compress).
// Each element is written once: rank r writes its ZeRO shard (zero_shard.h)
// of its buffer at every stage (at ZeRO-0, where every data rank holds
// everything, that is 1/dp of the writing each), tensor rank 0 alone the
// tensors every tensor rank holds. The format is layout-free: a reader
// rebuilds each file's buffer from its "layout", maps its ranges onto the
// global order (param_map.h) and takes what its own buffer needs, so a run
// continues on another number of ranks, ZeRO stage, pipeline or tensor
// layout. (Version 1, which had no "layout", wrote ranges of the whole model.)
//
// Atomic: every file is written into step_N.tmp/ and fsynced, the manifest last;
// then the directory is renamed into place and CKPT_DIR fsynced; then `latest`
// (naming the step directory) is replaced by rename. A crash at any moment
// leaves the previous complete checkpoint loadable; what it leaves half
// written is removed when the next run starts.
//
// The directory is the run's own (ckpt_dir.h): a run takes its lock at start
// (ckpt_dir_claim; a second run on it is refused), and nothing in it is ever
// removed through a symbolic link or unless the writer wrote it.
//
// Asynchronous: at a checkpoint step every rank copies what it writes into a
// host staging buffer (the trainer's ckpt_stage, allocated page-aligned and
// pre-faulted once) and training goes on: on the CPU the training threads
// make the copy at the step boundary (they are idle there anyway), or, where
// a core is spare, the thread makes it beside the next forward and backward
// and the next update waits for it (ckpt_before_update); either takes each
// chunk's CRC32C while it is in cache (ckpt_stage.h). On the GPU a
// device-to-host copy into pinned memory is queued on a side stream, the next
// update waits for it on the device, and the loop hands the buffer to the
// thread at the next step boundary. The thread then (compresses,) writes,
// with O_DIRECT where the file system takes it, and fsyncs; where the node
// has no core beside the training threads it runs at the lowest priority
// (nice 19), on the time they leave idle. What each
// checkpoint cost the run (the steps it overlapped, against the steps before
// it) goes to the JSON log (ckpt_step_cost). At each later step boundary the ranks
// sum three flags (writes finished, writes failed, preemption signal): once
// every rank's file is durable, the files' records are gathered to rank 0,
// whose thread commits (manifest, renames, `latest`, deleting checkpoints
// beyond --ckpt-keep). A checkpoint due while the previous one is still being
// written waits for it, and says so.
//
// Tests only: LLMC_TEST_CKPT_FAULT=POINT:STEP makes the writer SIGKILL its own
// process at POINT (after-data, before-manifest, after-manifest, after-rename)
// of the first checkpoint at a step >= STEP, or (POINT write-error) fail the
// data file's write as a full disk would, (latest-error) `latest`'s, (POINT
// slow-MS) sleep MS ms after the data file, a slow disk the loop must not wait
// for, (crawl-MS) sleep MS ms before each chunk of it, a disk whose write
// takes long enough to report its progress, or (direct-refused) fail its
// first O_DIRECT write with EINVAL, as a file system that takes the flag but
// not the write (tests/test_checkpoint.sh, tests/test_ckpt_dir.sh).
#ifndef LLMC_CHECKPOINT_H
#define LLMC_CHECKPOINT_H

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#ifdef LLMC_ZSTD
#include <zstd.h>
#endif

#include "ckpt_dir.h"       // defines: CKPT_FILE_MAX, CKPT_NAME_MAX, CKPT_LATEST_FILE, CKPT_PATH_MAX, ...
#include "ckpt_stage.h"     // defines: ckpt_stage_chunks, ckpt_stage_crc
#include "ckpt_manifest.h"  // defines: CKPT_STATES, CKPT_FORMAT, CKPT_VERSION, CKPT_STATE_NAMES, ...
#include "comm.h"           // defines: Comm, comm_size, GRID_DP, GRID_TP, ...
#include "crc32c.h"         // defines: crc32c_update
#include "dataloader.h"     // defines: DataLoaderState, DataSetId, DataLoader, dataloader_identity, ...
#include "file_io.h"        // defines: fsync_dir_err, make_dirs
#include "json.h"           // defines: JsonValue, json_int64, json_get, JSON_ARRAY, ...
#include "logger.h"         // defines: Logger, logger_ckpt, logger_ckpt_cost
#include "model.h"          // defines: ParamLayout, param_segment_held, GPTConfig, param_tp_problem, ...
#include "param_map.h"      // defines: ParamMap, param_map_runs, param_map_init, param_map_free
#include "train_options.h"  // defines: TrainOptions, TRAIN_FLAGS
#include "train_setup.h"    // defines: BatchPlan
#include "zero_shard.h"     // defines: ShardMap

#define CKPT_ERR_MAX 1400
#define CKPT_CHUNK ((size_t)8 << 20)  // bytes per read, write, compression call
#define CKPT_DIRECT_ALIGN 4096         // O_DIRECT writes: the buffer's address, the offsets and lengths multiples of this
#define CKPT_PROGRESS_S 5.0            // a data file's write longer than this says how far it got, this often

// The flags a resume must keep (checked against the command line), by their
// names in TRAIN_FLAGS: the weights' init and the data order, the schedule,
// the optimizer, the sequence length. The total batch is checked too (the
// batch plan's, in tokens); B, accumulation, ranks and ZeRO stage may change,
// and so may --steps (a run is extended; its schedule's length, the
// checkpoint's "lr-decay-steps", is kept unless --lr-decay-steps is given).
static const char *const CKPT_KEPT_FLAGS[] = {
    "seed", "shuffle", "lr-schedule", "lr", "min-lr-frac", "warmup-steps", "decay-frac", "seq-len",
    "weight-decay", "grad-clip", "beta1", "beta2", "eps",
};
#define CKPT_NUM_KEPT_FLAGS ((int)(sizeof(CKPT_KEPT_FLAGS) / sizeof(CKPT_KEPT_FLAGS[0])))

// ---------------------------------------------------------------------------
// what a rank writes and holds

typedef struct { int64_t lo, hi; } CkptRange;

// Ranges of a rank's own flat buffer (model.h's layout of what it holds), in
// the order it keeps them (a ZeRO shard is one; a tensor-parallel rank's
// shard without the replicated tensors it leaves to tensor rank 0 is several).
typedef struct {
    int n, cap;
    CkptRange *r;
} CkptPieces;

// Appends [lo, hi) (joined to the last range when adjacent; nothing when empty).
static inline void ckpt_pieces_add(CkptPieces *p, int64_t lo, int64_t hi) {
    if (hi <= lo) return;
    if (p->n > 0 && p->r[p->n - 1].hi == lo) {
        p->r[p->n - 1].hi = hi;
        return;
    }
    if (p->n == p->cap) {
        p->cap = p->cap ? 2 * p->cap : 8;
        p->r = (CkptRange *)reallocCheck(p->r, sizeof(CkptRange) * (size_t)p->cap);
        CHECK(p->r != NULL, "out of memory");
    }
    p->r[p->n++] = (CkptRange){lo, hi};
}

static inline void ckpt_pieces_free(CkptPieces *p) {
    free(p->r);
    memset(p, 0, sizeof(*p));
}

static inline CkptPieces ckpt_pieces_copy(const CkptPieces *p) {
    CkptPieces c = {0, 0, NULL};
    for (int k = 0; k < p->n; k++) ckpt_pieces_add(&c, p->r[k].lo, p->r[k].hi);
    return c;
}

static inline int64_t ckpt_pieces_elems(const CkptPieces *p) {
    int64_t n = 0;
    for (int k = 0; k < p->n; k++) n += p->r[k].hi - p->r[k].lo;
    return n;
}

static inline CkptPieces ckpt_one_piece(int64_t lo, int64_t hi) {
    CkptPieces p = {0, 0, NULL};
    ckpt_pieces_add(&p, lo, hi);
    return p;
}

// What a rank's buffer is, as the manifest records it for each file: its
// tensor-parallel slice and the segments it holds (layers as ranges), from
// which any reader rebuilds its layout and param_map.h's mapping.
typedef struct {
    int tp, tp_rank, embeddings, lnf;
    CkptPieces layers;  // the held layers, as ranges [l0, l1)
} CkptLayout;

static inline CkptLayout ckpt_layout_of(const ParamLayout *pl) {
    CkptLayout c = {pl->tp, pl->tp_rank, param_segment_held(pl, 0), param_segment_held(pl, pl->cfg.num_layers + 1),
                    {0, 0, NULL}};
    for (int l = 0; l < pl->cfg.num_layers; l++)
        if (param_segment_held(pl, l + 1)) ckpt_pieces_add(&c.layers, l, l + 1);
    return c;
}

// The layout cl describes of the model cfg into *pl; NULL, or why it is not
// one (a damaged or foreign manifest).
static inline const char *ckpt_layout_params(const CkptLayout *cl, const GPTConfig *cfg, ParamLayout *pl) {
    if (cl->tp < 1 || cl->tp > cfg->num_heads || cl->tp_rank < 0 || cl->tp_rank >= cl->tp ||
        param_tp_problem(cfg, cl->tp) || (cl->embeddings != 0 && cl->embeddings != 1) || (cl->lnf != 0 && cl->lnf != 1))
        return "a file's layout does not split this model";
    unsigned char *layers = (unsigned char *)callocCheck((size_t)cfg->num_layers, 1);
    int64_t last = -1;
    for (int k = 0; k < cl->layers.n; k++) {
        const CkptRange *q = &cl->layers.r[k];
        if (q->lo <= last || q->hi <= q->lo || q->hi > cfg->num_layers) {
            free(layers);
            return "a file's layout lists layers the model does not have";
        }
        for (int64_t l = q->lo; l < q->hi; l++) layers[l] = 1;
        last = q->hi;
    }
    ParamHolding h = {cl->embeddings, cl->lnf, layers};
    param_layout_init_held(pl, cfg, &h, cl->tp, cl->tp_rank);
    free(layers);
    return NULL;
}

typedef struct {
    CkptLayout layout;             // the rank's buffer, which the ranges below are in
    CkptPieces write;              // what this rank writes, for every state
    CkptPieces hold[CKPT_STATES];  // what it holds of each state (read back on resume)
} CkptRanges;

// For the rank whose layout is pl, by ZeRO stage: the moments are whole at
// stage 0, the fp32 weights below stage params_sharded_from (the CPU
// trainer's are the model's own weights, sharded at 3; the GPU trainer's
// master copy is sharded with the moments, at 1). It writes its shard, but
// for the replicated tensors of a tensor-parallel slice other than rank 0's
// (tensor rank 0 writes them), so each element is written once.
static inline CkptRanges ckpt_ranges(const ShardMap *sm, int stage, int params_sharded_from, const ParamLayout *pl) {
    CkptRanges r;
    memset(&r, 0, sizeof(r));
    r.layout = ckpt_layout_of(pl);
    if (pl->tp_rank == 0) {
        ckpt_pieces_add(&r.write, sm->begin, sm->end);
    } else {
        for (int t = 0; t < pl->num_tensors; t++) {
            const ParamTensor *x = &pl->tensors[t];
            int64_t end = t + 1 < pl->num_tensors ? pl->tensors[t + 1].offset : pl->num_elements;
            int64_t a = x->offset > sm->begin ? x->offset : sm->begin, b = end < sm->end ? end : sm->end;
            if (x->split != SPLIT_NONE) ckpt_pieces_add(&r.write, a, b);
        }
    }
    for (int s = 0; s < CKPT_STATES; s++) {
        int sharded = s == 0 ? stage >= params_sharded_from : stage >= 1;
        r.hold[s] = sharded ? ckpt_one_piece(sm->begin, sm->end) : ckpt_one_piece(0, sm->num_elements);
    }
    return r;
}

static inline void ckpt_ranges_free(CkptRanges *r) {
    ckpt_pieces_free(&r->layout.layers);
    ckpt_pieces_free(&r->write);
    for (int s = 0; s < CKPT_STATES; s++) ckpt_pieces_free(&r->hold[s]);
}

// ---------------------------------------------------------------------------
// the manifest's run description (the parts known when a checkpoint is staged)

// The position a checkpoint restores besides the tensors.
typedef struct {
    int64_t step;           // optimizer steps done
    DataLoaderState data;   // the training loader's position (global)
    Rng sample_rng;         // the sampling RNG's state
    int64_t lr_decay_steps; // the schedule's length (flags' "lr-decay-steps"; a version without it: "steps")
} CkptPoint;

// What the manifest describes of the run, the same for every checkpoint of it.
typedef struct {
    const TrainOptions *o;
    const GPTConfig *cfg;
    const ParamLayout *pl;
    const BatchPlan *plan;
    const Comm *comm;
    const char *trainer;  // "train_gpt" | "train_gptcu"
    int lr_decay_steps;   // the schedule's length (the loop's: --lr-decay-steps, --steps or the resumed one's)
} CkptRun;

static inline const FlagSpec *ckpt_flag_spec(const char *name) {
    for (int i = 0; i < FLAGS_COUNT(TRAIN_FLAGS); i++)
        if (strcmp(TRAIN_FLAGS[i].name, name) == 0) return &TRAIN_FLAGS[i];
    DIE("checkpoint flag '%s' is not in TRAIN_FLAGS", name);
}

// A growing string for the manifest.
typedef struct { char *s; size_t len, cap; } CkptText;

static inline void ckpt_text(CkptText *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static inline void ckpt_text(CkptText *t, const char *fmt, ...) {
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(t->s ? t->s + t->len : NULL, t->s ? t->cap - t->len : 0, fmt, ap);
        va_end(ap);
        CHECK(k >= 0, "formatting the manifest failed");
        if (t->s && t->len + (size_t)k < t->cap) { t->len += (size_t)k; return; }
        t->cap = (t->cap + (size_t)k + 1) * 2;
        t->s = (char *)reallocCheck(t->s, t->cap);
        CHECK(t->s != NULL, "out of memory");
    }
}

// One data file's record (gathered from its rank to rank 0 as doubles). The
// file holds, for each piece in turn, its range of every state one after the
// other: piece k of len_k elements starts at 3 * (len_0 + ... + len_{k-1}) elements.
typedef struct {
    CkptLayout layout;  // the writing rank's buffer
    CkptPieces pieces;  // the ranges of that buffer, for each state (none: no file)
    int64_t bytes;      // on disk
    uint32_t crc32c;    // of the bytes on disk
} CkptFileRecord;

static inline void ckpt_record_free(CkptFileRecord *f) {
    ckpt_pieces_free(&f->pieces);
    ckpt_pieces_free(&f->layout.layers);
}

// manifest.json of a checkpoint at point p of the data set ds whose data
// files are files[0..world) (empty ranges: no file), sealed (ckpt_manifest.h);
// *nranges: the ranges it lists.
static inline char *ckpt_manifest_json(const CkptRun *run, const CkptPoint *p, const DataSetId *ds,
                                       const CkptFileRecord *files, int world, int compress, int64_t *nranges) {
    CkptText t = {NULL, 0, 0};
    const GPTConfig *c = run->cfg;
    ckpt_text(&t, "{\n  \"format\": \"%s\",\n  \"version\": %d,\n  \"step\": %lld,\n  \"trainer\": \"%s\",\n", CKPT_FORMAT,
              CKPT_VERSION, (long long)p->step, run->trainer);
    ckpt_text(&t, "  \"model\": {\"max_seq_len\": %d, \"vocab_size\": %d, \"padded_vocab_size\": %d, \"num_layers\": %d, "
              "\"num_heads\": %d, \"channels\": %d},\n", c->max_seq_len, c->vocab_size, c->padded_vocab_size,
              c->num_layers, c->num_heads, c->channels);
    ckpt_text(&t, "  \"flags\": {");
    for (int i = 0; i < CKPT_NUM_KEPT_FLAGS; i++) {
        char v[FLAG_STR_MAX + 8];
        flag_value_json(ckpt_flag_spec(CKPT_KEPT_FLAGS[i]), run->o, v, sizeof(v));
        ckpt_text(&t, "%s\"%s\": %s", i ? ", " : "", CKPT_KEPT_FLAGS[i], v);
    }
    ckpt_text(&t, ", \"lr-decay-steps\": %d, \"steps\": %d", run->lr_decay_steps, run->o->steps);
    ckpt_text(&t, "},\n  \"batch\": {\"total_tokens\": %lld, \"B\": %d, \"T\": %d, \"accum\": %d},\n",
              run->plan->total_tokens, run->plan->B, run->plan->T, run->plan->accum);
    ckpt_text(&t, "  \"layout\": {\"ranks\": %d, \"dp\": %d, \"tp\": %d, \"pp\": %d, \"zero\": %d},\n", run->comm->world,
              comm_size(run->comm, GRID_DP), comm_size(run->comm, GRID_TP), comm_size(run->comm, GRID_PP), run->o->zero);
    int64_t N = run->pl->num_elements;
    ckpt_text(&t, "  \"tensors\": [");
    for (int s = 0; s < CKPT_STATES; s++)
        ckpt_text(&t, "%s{\"name\": \"%s\", \"shape\": [%lld], \"dtype\": \"f32\"}", s ? ", " : "", CKPT_STATE_NAMES[s],
                  (long long)N);
    ckpt_text(&t, "],\n  \"parameters\": [\n");  // where each model tensor lies in the flat order
    for (int i = 0; i < run->pl->num_tensors; i++) {
        const ParamTensor *pt = &run->pl->tensors[i];
        ckpt_text(&t, "    {\"name\": \"%s\", \"shape\": [%lld, %lld], \"offset\": %lld}%s\n", pt->name,
                  (long long)pt->shape[0], (long long)pt->shape[1], (long long)pt->offset,
                  i + 1 < run->pl->num_tensors ? "," : "");
    }
    ckpt_text(&t, "  ],\n  \"files\": [\n");
    int first = 1;
    *nranges = 0;
    for (int r = 0; r < world; r++) {
        const CkptFileRecord *f = &files[r];
        int64_t total = ckpt_pieces_elems(&f->pieces), at = 0;
        if (total == 0) continue;
        ckpt_text(&t, "%s    {\"file\": \"rank_%05d.bin\", \"bytes\": %lld, \"crc32c\": %u, \"compression\": \"%s\", "
                  "\"raw_bytes\": %lld, \"layout\": {\"tp\": %d, \"tp_rank\": %d, \"embeddings\": %d, \"lnf\": %d, "
                  "\"layers\": [", first ? "" : ",\n", r, (long long)f->bytes, f->crc32c, compress > 0 ? "zstd" : "none",
                  (long long)(total * CKPT_STATES * 4), f->layout.tp, f->layout.tp_rank, f->layout.embeddings,
                  f->layout.lnf);
        for (int k = 0; k < f->layout.layers.n; k++)
            ckpt_text(&t, "%s[%lld, %lld]", k ? ", " : "", (long long)f->layout.layers.r[k].lo,
                      (long long)f->layout.layers.r[k].hi);
        ckpt_text(&t, "]}, \"ranges\": [");
        for (int k = 0; k < f->pieces.n; k++) {
            const CkptRange *q = &f->pieces.r[k];
            int64_t n = q->hi - q->lo;
            for (int s = 0; s < CKPT_STATES; s++)
                ckpt_text(&t, "%s{\"tensor\": \"%s\", \"lo\": %lld, \"hi\": %lld, \"offset\": %lld}",
                          k || s ? ", " : "", CKPT_STATE_NAMES[s], (long long)q->lo, (long long)q->hi,
                          (long long)((CKPT_STATES * at + s * n) * 4));
            at += n;
        }
        *nranges += CKPT_STATES * f->pieces.n;
        ckpt_text(&t, "]}");
        first = 0;
    }
    const DataLoaderState *d = &p->data;
    ckpt_text(&t, "\n  ],\n  \"data\": {\"epoch\": %lld, \"sample\": %lld, \"dropped\": %lld, \"num_samples\": %lld, "
              "\"T\": %d, \"shuffle\": %d, \"seed\": \"%llu\"},\n", (long long)d->epoch, (long long)d->sample,
              (long long)d->dropped, (long long)d->num_samples, d->T, d->shuffle, (unsigned long long)d->seed);
    ckpt_text(&t, "  \"data_set\": {\"shards\": %lld, \"tokens\": %lld, \"list_crc32c\": %u, "
              "\"contents_crc32c\": %u},\n",
              (long long)ds->shards, (long long)ds->tokens, ds->list_crc32c, ds->contents_crc32c);
    ckpt_text(&t, "  \"sample_rng\": [\"%llu\", \"%llu\", \"%llu\", \"%llu\"],\n",
              (unsigned long long)p->sample_rng.s[0], (unsigned long long)p->sample_rng.s[1],
              (unsigned long long)p->sample_rng.s[2], (unsigned long long)p->sample_rng.s[3]);
    char seal[64];
    ckpt_seal_line(t.s, t.len, seal, sizeof(seal));
    ckpt_text(&t, "%s", seal);
    return t.s;
}

// ---------------------------------------------------------------------------
// writing files (errors returned as a message naming the file, for the thread)

typedef struct {
    char *err;  // (CKPT_ERR_MAX)
    const char *kill_point;  // LLMC_TEST_CKPT_FAULT's point for this checkpoint, or NULL
    const char *progress;    // the data file whose write reports its progress on stdout (rank 0's), or NULL
} CkptIO;

static inline int ckpt_io_fail(CkptIO *io, const char *what, const char *path, int err) {
    snprintf(io->err, CKPT_ERR_MAX, "checkpoint: %s '%s' failed: %s", what, path, strerror(err));
    return 0;
}

// Tests only: dies by SIGKILL at the named point of the writing.
static inline void ckpt_kill_point(const CkptIO *io, const char *point) {
    if (io->kill_point && strcmp(io->kill_point, point) == 0) {
        fprintf(stderr, "LLMC_TEST_CKPT_FAULT: killed at %s\n", point);
        fflush(stderr);
        raise(SIGKILL);
    }
}

// Before each chunk of a data file (done of n bytes, t0 its start): crawl-MS's
// sleep, and every CKPT_PROGRESS_S seconds (*next_s) a line on how far the
// write got.
static inline void ckpt_write_progress(const CkptIO *io, size_t done, size_t n, double t0, double *next_s) {
    if (io->kill_point && strncmp(io->kill_point, "crawl-", 6) == 0) {
        int ms = atoi(io->kill_point + 6);
        struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
    }
    double t = wall_seconds() - t0;
    if (!io->progress || t < *next_s) return;
    printf("checkpoint: writing %s: %.0f of %.0f MB (%.0f%%) after %.0f s\n", io->progress, done / 1e6, n / 1e6,
           100.0 * (double)done / (double)(n ? n : 1), t);
    fflush(stdout);
    *next_s += CKPT_PROGRESS_S;
}

static inline int ckpt_write_all(int fd, const void *buf, size_t n) {
    const char *p = (const char *)buf;
    while (n > 0) {
        ssize_t k = write(fd, p, n);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) return errno;
        if (k == 0) return EIO;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

// O_DIRECT on fd (on = 1) or off: 1 when it is now on. A direct write goes
// from the buffer to the disk with no copy into the page cache, the largest
// CPU cost of a buffered one (taken from the training threads where no core
// is spare). A file system may refuse the flag (EINVAL: 0, buffered writes).
static inline int ckpt_direct(int fd, int on) {
    int fl = fcntl(fd, F_GETFL);
    return fl >= 0 && fcntl(fd, F_SETFL, on ? fl | O_DIRECT : fl & ~O_DIRECT) == 0 && on;
}

// Writes data[0..n) to fd, the new file path, zstd-compressed at level
// compress > 0, fsynced and closed (removed on a failure). crc_known: raw
// data whose CRC32C *crc already holds (the staging copy's). Raw data from a
// CKPT_DIRECT_ALIGN-aligned buffer goes with O_DIRECT where the file system
// takes it (the tail that is not a whole block, and everything after a
// direct write it refuses with EINVAL, buffered; *direct says whether any
// went direct; NULL: buffered). Returns 1 with its size and CRC32C, or 0
// (io->err).
static inline int ckpt_write_fd(CkptIO *io, int fd, const char *path, const void *data, size_t n, int compress,
                                int *direct, int64_t *bytes, uint32_t *crc, int crc_known) {
    int err = 0;
    double t0 = wall_seconds(), next_s = CKPT_PROGRESS_S;
    *bytes = 0;
    if (!crc_known) *crc = 0;
    if (compress <= 0) {
        int on = direct && n >= CKPT_DIRECT_ALIGN && (uintptr_t)data % CKPT_DIRECT_ALIGN == 0 && ckpt_direct(fd, 1);
        int refuse = on && io->kill_point && strcmp(io->kill_point, "direct-refused") == 0;  // (tests)
        if (direct) *direct = 0;
        for (size_t off = 0; off < n && !err;) {
            size_t len = n - off < CKPT_CHUNK ? n - off : CKPT_CHUNK;
            if (on && len % CKPT_DIRECT_ALIGN != 0) {  // the last chunk's whole blocks direct, then its tail buffered
                if (len > CKPT_DIRECT_ALIGN) len -= len % CKPT_DIRECT_ALIGN;
                else on = ckpt_direct(fd, 0);
            }
            ckpt_write_progress(io, off, n, t0, &next_s);
            err = refuse ? EINVAL : ckpt_write_all(fd, (const char *)data + off, len);
            if (err == EINVAL && on) {  // the flag taken, the write refused: this chunk again, and the rest, buffered
                ckpt_direct(fd, 0);
                on = refuse = 0;
                err = lseek(fd, (off_t)off, SEEK_SET) < 0 ? errno : 0;
                continue;
            }
            if (on && !err) *direct = 1;
            if (!crc_known) *crc = crc32c_update(*crc, (const char *)data + off, len);
            off += len;
        }
        *bytes = (int64_t)n;
    } else {
#ifdef LLMC_ZSTD
        ZSTD_CCtx *cc = ZSTD_createCCtx();
        CHECK(cc != NULL, "out of memory");
        ZSTD_CCtx_setParameter(cc, ZSTD_c_compressionLevel, compress);
        ZSTD_CCtx_setPledgedSrcSize(cc, n);
        size_t out_cap = ZSTD_CStreamOutSize();
        char *out = (char *)mallocCheck(out_cap);
        ZSTD_inBuffer in = {data, n, 0};
        size_t left;
        do {
            ckpt_write_progress(io, in.pos, n, t0, &next_s);
            ZSTD_outBuffer ob = {out, out_cap, 0};
            left = ZSTD_compressStream2(cc, &ob, &in, ZSTD_e_end);
            CHECK(!ZSTD_isError(left), "zstd compression failed: %s", ZSTD_getErrorName(left));
            *crc = crc32c_update(*crc, out, ob.pos);
            *bytes += (int64_t)ob.pos;
            err = ckpt_write_all(fd, out, ob.pos);
        } while (left != 0 && !err);
        free(out);
        ZSTD_freeCCtx(cc);
#else
        DIE("--ckpt-compress needs a build with zstd");
#endif
    }
    if (!err && fsync(fd) != 0) err = errno;
    if (close(fd) != 0 && !err) err = errno;
    if (err) {
        unlink(path);
        return ckpt_io_fail(io, "writing", path, err);
    }
    return 1;
}

// The same into path, created (never over an existing file or a link).
static inline int ckpt_write_file(CkptIO *io, const char *path, const void *data, size_t n, int compress,
                                  int *direct, int64_t *bytes, uint32_t *crc, int crc_known) {
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) return ckpt_io_fail(io, "creating", path, errno);
    return ckpt_write_fd(io, fd, path, data, n, compress, direct, bytes, crc, crc_known);
}

// `latest` in dir names the step directory `name`: written to a temporary
// made by mkstemp (latest.tmp.XXXXXX), fsynced, renamed, the directory
// fsynced. Returns 1, or 0 (io->err) -- a failed write like any other.
static inline int ckpt_write_latest(CkptIO *io, const char *dir, const char *name) {
    char path[CKPT_FILE_MAX], tmp[CKPT_FILE_MAX + 16], text[CKPT_NAME_MAX];
    snprintf(path, sizeof(path), "%s/" CKPT_LATEST_FILE, dir);
    snprintf(tmp, sizeof(tmp), "%s.tmp.XXXXXX", path);
    if (io->kill_point && strcmp(io->kill_point, "latest-error") == 0) return ckpt_io_fail(io, "writing", path, ENOSPC);
    int fd = mkstemp(tmp), err;
    if (fd < 0) return ckpt_io_fail(io, "creating a file next to", path, errno);
    int64_t bytes;
    uint32_t crc;
    int len = snprintf(text, sizeof(text), "%s\n", name);
    if (fchmod(fd, 0644) != 0) {
        err = errno;
        close(fd);
        unlink(tmp);
        return ckpt_io_fail(io, "creating", tmp, err);
    }
    if (!ckpt_write_fd(io, fd, tmp, text, (size_t)len, 0, NULL, &bytes, &crc, 0)) return 0;
    if (rename(tmp, path) != 0) {
        err = errno;
        unlink(tmp);
        return ckpt_io_fail(io, "renaming the new", path, err);
    }
    if ((err = fsync_dir_err(dir)) != 0) return ckpt_io_fail(io, "syncing", dir, err);
    return 1;
}

// ---------------------------------------------------------------------------
// the writer

typedef enum { CKPT_JOB_NONE, CKPT_JOB_WRITE, CKPT_JOB_COMMIT, CKPT_JOB_EXIT } CkptJob;
// STAGING: the trainer's copy into the staging buffer is in flight (GPU), the write not yet handed to the thread.
typedef enum { CKPT_IDLE, CKPT_STAGING, CKPT_WRITING, CKPT_COMMITTING } CkptPhase;

// The exit status of a run that a signal stopped (SIGTERM, SIGUSR1 or SIGINT
// with --ckpt-dir): its checkpoint is committed, or none was due (the signal
// came before the first step), and --resume auto continues it. A job script
// requeues on this status alone (scripts/train_slurm.sbatch). 75: sysexits.h's
// EX_TEMPFAIL, "try again later".
#define CKPT_EXIT_SIGNAL 75

static volatile sig_atomic_t ckpt_signal_received = 0;  // SIGTERM / SIGUSR1 / SIGINT: checkpoint and exit
static inline void ckpt_on_signal(int sig) {
    if (sig == SIGINT && ckpt_signal_received) {  // a second Ctrl-C: exit at once, as without --ckpt-dir
        static const char line[] = "\ninterrupted again: exiting at once, without a checkpoint\n";
        if (write(STDERR_FILENO, line, sizeof(line) - 1) < 0) {}
        signal(SIGINT, SIG_DFL);
        raise(SIGINT);
    }
    ckpt_signal_received = sig;
}

// Preemption and Ctrl-C (--ckpt-dir): SIGTERM, SIGUSR1 and SIGINT are caught
// from the start of main, before MPI's start-up and the resume's load, so one
// that comes during start-up is not the default's silent exit (143, 138, 130):
// the run stops before its first step (ckpt_stop_before_first_step), later at
// the next step boundary after a checkpoint, and exits CKPT_EXIT_SIGNAL. A
// second SIGINT exits at once. SA_RESTART: a read or write that the signal
// interrupts goes on.
static inline void ckpt_catch_preemption(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = ckpt_on_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
}

// What a checkpoint cost the run: the steps from the one that staged it to
// the one at whose end it was committed (on rank 0), against the median
// (nearest rank: the lower middle of an even count) of the last
// CKPT_BASELINE_STEPS steps before it that overlapped no checkpoint (the
// loop's first step, the warm-up, left out).
#define CKPT_BASELINE_STEPS 5
typedef struct {
    int open;          // its steps are still being counted
    int ends;          // it was committed in the step now running: that step is its last
    int64_t step;      // the checkpoint (steps done when staged)
    int first, steps;  // its steps: first (0-based), how many so far
    double step_ms;    // their wall time
    double stall_ms;   // the loop's stall in the staging (and the wait for the copy)
    double baseline_ms;  // the median step before it (-1: no step overlapped no checkpoint)
} CkptCost;

typedef struct {
    CkptRun run;
    const char *dir;
    int every, keep, compress;
    CommGroup *dp;
    int rank, world;
    CkptRanges ranges;
    float *staging;             // (3 x write's elements, the file's order): what this rank writes, from the trainer
    void (*wait_staged)(void *ctx);  // the trainer's: waits for its queued staging copy (NULL: stage copies at once)
    void (*stage)(void *ctx, float *staging, int64_t lo, int64_t hi, uint32_t *crcs);  // the trainer's copy into staging
    uint32_t *chunk_crcs;       // the copy's chunks' CRC32Cs (ckpt_stage.h), when the copy takes them (CPU, raw data)
    double stall_ms;            // what the checkpoint in flight has cost the loop so far
    int stall_open;             // its copy is not known done yet: its JSON record is still to come
    int low_priority;           // no core spare beside the training threads: the thread runs at nice 19
    int thread_copies;          // a core is spare and stage copies at once (CPU): the thread makes the copy
    int copy_pending;           // the thread's copy of the checkpoint in flight is not known done (the update waits)
    CkptCost cost;              // the checkpoint in flight's cost
    CkptCost ended[2];          // those committed in the step now running (the one before and one staged in it)
    double clean_ms[CKPT_BASELINE_STEPS];  // the last steps that overlapped no checkpoint (a ring)
    int clean_n;                // steps put in the ring
    int warm;                   // a step has run (the first, the warm-up, is no baseline)
    Logger *log;
    void *ctx;
    const char *kill_spec;      // LLMC_TEST_CKPT_FAULT
    // the checkpoint in flight (phase changes only on the training thread)
    CkptPhase phase;
    CkptPoint point;
    double staged_at, write_s;  // wall clock when staged; seconds its data took to write (this rank)
    double write_cpu_s;         // the thread's CPU seconds for it (its copy, CRC, writes)
    int direct;                 // some of its data file went with O_DIRECT (this rank)
    int64_t last_staged;        // step of the last checkpoint staged (-1: none)
    CkptFileRecord mine;        // this rank's file (set by the thread)
    CkptFileRecord *files;      // (world) every rank's, gathered (rank 0)
    DataSetId data_set;         // the training data's identity (rank 0, for the manifest)
    // the thread, and what it hands back (under mu)
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    CkptJob job;
    int job_done, job_failed;
    int copied;                 // the thread's copy of the checkpoint in flight is done
    char err[CKPT_ERR_MAX];
} CkptWriter;

static inline const char *ckpt_kill_point_for(const CkptWriter *w, int64_t step) {
    static char point[64];
    if (!w->kill_spec) return NULL;
    const char *colon = strchr(w->kill_spec, ':');
    if (!colon || (size_t)(colon - w->kill_spec) >= sizeof(point) || atoll(colon + 1) > step) return NULL;
    snprintf(point, sizeof(point), "%.*s", (int)(colon - w->kill_spec), w->kill_spec);
    return point;
}

// A CPU trainer's staging buffer for what this rank writes (the ranges'
// write), aligned for O_DIRECT and touched now, once, so that no checkpoint
// pays the first-touch page faults (1.5 GB: 360k of them). free() frees it.
static inline float *ckpt_staging_alloc(const CkptRanges *ranges) {
    size_t bytes = sizeof(float) * CKPT_STATES * (size_t)(ckpt_pieces_elems(&ranges->write) + 1);
    bytes = (bytes + CKPT_DIRECT_ALIGN - 1) / CKPT_DIRECT_ALIGN * CKPT_DIRECT_ALIGN;
    void *p = NULL;
    CHECK(posix_memalign(&p, CKPT_DIRECT_ALIGN, bytes) == 0, "out of memory allocating %zu bytes of checkpoint staging",
          bytes);
    memset(p, 0, bytes);
    return (float *)p;
}

// The trainer's copy of each piece this rank writes into its place in staging
// (and its chunks' CRC32Cs, wanted).
static inline void ckpt_stage_pieces(CkptWriter *w) {
    int64_t at = 0, chunks = 0;
    for (int k = 0; k < w->ranges.write.n; k++) {
        const CkptRange *q = &w->ranges.write.r[k];
        w->stage(w->ctx, w->staging + CKPT_STATES * at, q->lo, q->hi, w->chunk_crcs ? w->chunk_crcs + chunks : NULL);
        at += q->hi - q->lo;
        chunks += ckpt_stage_chunks(q->hi - q->lo);
    }
}

// The CRC32C of the staged data, from its chunks'.
static inline uint32_t ckpt_staged_crc(const CkptWriter *w) {
    uint32_t crc = 0;
    int64_t chunks = 0;
    for (int k = 0; k < w->ranges.write.n; k++) {
        int64_t n = w->ranges.write.r[k].hi - w->ranges.write.r[k].lo;
        crc = ckpt_stage_crc(crc, w->chunk_crcs + chunks, n);
        chunks += ckpt_stage_chunks(n);
    }
    return crc;
}

// The thread's WRITE job: (thread_copies: the copy into staging, beside
// the next step's forward and backward; the update waits for it) this rank's
// data file into step_N.tmp/.
static inline int ckpt_do_write(CkptWriter *w, CkptIO *io) {
    char tmp_dir[CKPT_PATH_MAX], path[CKPT_FILE_MAX];
    double cpu0 = thread_cpu_seconds();
    if (w->thread_copies) {
        ckpt_stage_pieces(w);
        pthread_mutex_lock(&w->mu);
        w->copied = 1;
        pthread_cond_broadcast(&w->cv);
        pthread_mutex_unlock(&w->mu);
    }
    ckpt_step_dir(tmp_dir, sizeof(tmp_dir), w->dir, w->point.step, ".tmp");
    double t0 = wall_seconds();
    int err = ckpt_make_tmp_dir(tmp_dir);
    if (err) return ckpt_io_fail(io, "creating", tmp_dir, err);
    w->mine.pieces = w->ranges.write;  // (the record borrows the writer's ranges)
    w->mine.layout = w->ranges.layout;
    w->mine.bytes = 0;
    w->mine.crc32c = 0;
    int64_t total = ckpt_pieces_elems(&w->ranges.write);
    if (total > 0) {
        snprintf(path, sizeof(path), "%s/rank_%05d.bin", tmp_dir, w->rank);
        size_t n = sizeof(float) * (size_t)total * CKPT_STATES;
        if (io->kill_point && strcmp(io->kill_point, "write-error") == 0) return ckpt_io_fail(io, "writing", path, ENOSPC);
        io->progress = w->rank == 0 ? path : NULL;
        if (w->chunk_crcs) w->mine.crc32c = ckpt_staged_crc(w);
        int ok = ckpt_write_file(io, path, w->staging, n, w->compress, &w->direct, &w->mine.bytes, &w->mine.crc32c,
                                 w->chunk_crcs != NULL);
        io->progress = NULL;
        if (!ok) return 0;
    }
    if (io->kill_point && strncmp(io->kill_point, "slow-", 5) == 0) {  // a slow disk: the loop must not wait for it
        struct timespec ts = {atoi(io->kill_point + 5) / 1000, (long)(atoi(io->kill_point + 5) % 1000) * 1000000L};
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
    }
    w->write_s = wall_seconds() - t0;
    w->write_cpu_s = thread_cpu_seconds() - cpu0;
    ckpt_kill_point(io, "after-data");
    return 1;
}

// The thread's COMMIT job (rank 0): manifest, rename, `latest`, older checkpoints beyond --ckpt-keep.
static inline int ckpt_do_commit(CkptWriter *w, CkptIO *io) {
    char tmp_dir[CKPT_PATH_MAX], final_dir[CKPT_PATH_MAX], path[CKPT_FILE_MAX];
    ckpt_step_dir(tmp_dir, sizeof(tmp_dir), w->dir, w->point.step, ".tmp");
    ckpt_step_dir(final_dir, sizeof(final_dir), w->dir, w->point.step, "");
    int64_t nranges;
    char *manifest = ckpt_manifest_json(&w->run, &w->point, &w->data_set, w->files, w->world, w->compress, &nranges);
    ckpt_kill_point(io, "before-manifest");
    snprintf(path, sizeof(path), "%s/manifest.json", tmp_dir);
    if (strlen(manifest) > CKPT_MANIFEST_MAX_BYTES || nranges > CKPT_MAX_RANGES) {  // (what a reader would refuse)
        snprintf(io->err, CKPT_ERR_MAX, "checkpoint: '%.1000s' would be %zu bytes with %lld ranges, more than a reader "
                 "takes (%zu bytes, %d ranges)", path, strlen(manifest), (long long)nranges, CKPT_MANIFEST_MAX_BYTES,
                 CKPT_MAX_RANGES);
        free(manifest);
        return 0;
    }
    int64_t bytes;
    uint32_t crc;
    int ok = ckpt_write_file(io, path, manifest, strlen(manifest), 0, NULL, &bytes, &crc, 0);
    free(manifest);
    if (!ok) return 0;
    int err = fsync_dir_err(tmp_dir);
    if (err) return ckpt_io_fail(io, "syncing", tmp_dir, err);
    ckpt_kill_point(io, "after-manifest");
    const char *doing = "", *final_name = strrchr(final_dir, '/') + 1;
    if ((err = ckpt_dir_commit(w->dir, strrchr(tmp_dir, '/') + 1, final_name, &doing)) != 0)
        return ckpt_io_fail(io, doing, final_dir, err);
    if ((err = fsync_dir_err(w->dir)) != 0) return ckpt_io_fail(io, "syncing", w->dir, err);
    ckpt_kill_point(io, "after-rename");
    if (!ckpt_write_latest(io, w->dir, final_name)) return 0;
    if (w->keep > 0) ckpt_prune(w->dir, w->point.step, w->keep);
    return 1;
}

static inline void *ckpt_thread_main(void *arg) {
    CkptWriter *w = (CkptWriter *)arg;
    // (no spare core: the training threads' idle time only; lowering its own priority never needs a privilege)
    if (w->low_priority) setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 19);
#ifdef _OPENMP
    if (w->thread_copies) omp_set_num_threads(1);  // (its copy on its own core, not a team beside the training threads)
#endif
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (w->job == CKPT_JOB_NONE || w->job_done) pthread_cond_wait(&w->cv, &w->mu);
        CkptJob job = w->job;
        if (job == CKPT_JOB_EXIT) break;
        pthread_mutex_unlock(&w->mu);
        char err[CKPT_ERR_MAX] = "";
        CkptIO io = {err, ckpt_kill_point_for(w, w->point.step), NULL};
        int ok = job == CKPT_JOB_WRITE ? ckpt_do_write(w, &io) : ckpt_do_commit(w, &io);
        pthread_mutex_lock(&w->mu);
        w->job_done = 1;
        w->job_failed = !ok;
        if (!ok) snprintf(w->err, sizeof(w->err), "%s", err);
        pthread_cond_broadcast(&w->cv);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

static inline void ckpt_submit(CkptWriter *w, CkptJob job) {
    pthread_mutex_lock(&w->mu);
    w->job = job;
    w->job_done = 0;
    w->job_failed = 0;
    w->copied = 0;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

// Whether the thread's job is done (block: wait for it); *failed: whether it
// failed. Not blocking, it does not wait for the lock either: a thread at
// nice 19 that holds it may not run again for a while (it is then not done).
static inline int ckpt_job_done(CkptWriter *w, int block, int *failed) {
    *failed = 0;
    if (block)
        pthread_mutex_lock(&w->mu);
    else if (pthread_mutex_trylock(&w->mu) != 0)
        return 0;
    while (block && !w->job_done) pthread_cond_wait(&w->cv, &w->mu);
    int done = w->job_done;
    *failed = w->job_failed;
    pthread_mutex_unlock(&w->mu);
    return done;
}

// A start-up step that may refuse the run: every rank learns whether any
// failed; those that did say why (one line each), and every rank exits 2.
static inline void ckpt_claim_agree(CommGroup *g, int ok, const char *err) {
    double failed = !ok;
    comm_all_reduce(g, &failed, 1, COMM_F64);
    if (failed == 0) return;
    if (!ok) fprintf(stderr, "error: %s\n", err);
    fflush(stderr);
    comm_barrier(g);
    exit(EXIT_USAGE);
}

// At start-up, before anything is written or read (--ckpt-dir given;
// collective over g, every rank): rank 0 creates the directory, takes its
// lock and tidies it (ckpt_dir.h); then every other rank shares the lock. A
// directory another run holds, or one that is not writable, ends the run
// here: one line, exit 2.
static inline void ckpt_dir_claim(const char *dir, CommGroup *g) {
    if (strlen(dir) > CKPT_PATH_MAX - 32) die_usage("--ckpt-dir '%s' is too long", dir);
    char err[CKPT_ERR_MAX] = "";
    int ok = 1;
    if (g->rank == 0) {
        make_dirs(dir, "--ckpt-dir");
        if (access(dir, W_OK) != 0) {
            snprintf(err, sizeof(err), "--ckpt-dir: directory '%s' is not writable", dir);
            ok = 0;
        } else if ((ok = ckpt_lock_take(dir, err, sizeof(err))) != 0) {
            ckpt_dir_tidy(dir);
        }
    }
    ckpt_claim_agree(g, ok, err);
    if (g->rank != 0) ok = ckpt_lock_share(dir, err, sizeof(err));
    ckpt_claim_agree(g, ok, err);
}

// The cores this process may run on less the training threads on them:
// train_threads per rank, times the node's ranks when every rank may run on
// every core (a rank bound to its own cores counts its own threads).
static inline int ckpt_spare_cores(int train_threads, int *cores) {
    cpu_set_t set;
    int online = (int)sysconf(_SC_NPROCESSORS_ONLN), ranks = 1;
    *cores = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : online;
    LaunchInfo li = launch_detect();
    if (*cores >= online && li.local_world > 1) ranks = li.local_world;
    return *cores - train_threads * ranks;
}

// Starts the writer (--ckpt-dir given, claimed by ckpt_dir_claim): takes the
// identity of the training data (rank 0, whose thread writes the manifest),
// starts the thread, at the lowest priority when no core is spare beside the
// train_threads a step keeps busy, and says which. (The trainer caught
// SIGTERM, SIGUSR1 and SIGINT at its start: ckpt_catch_preemption.)
static inline void ckpt_writer_init(CkptWriter *w, const CkptRun *run, CommGroup *dp, const DataLoader *train,
                                    const CkptRanges *ranges, float *staging, void (*wait_staged)(void *), void *ctx,
                                    int train_threads) {
    CHECK(ckpt_lock_fd >= 0, "ckpt_writer_init: the checkpoint directory was not claimed (ckpt_dir_claim)");
    memset(w, 0, sizeof(*w));
    const TrainOptions *o = run->o;
    w->run = *run;
    w->dir = o->ckpt_dir;
    w->every = o->ckpt_every;
    w->keep = o->ckpt_keep;
    w->compress = o->ckpt_compress;
    w->dp = dp;
    w->rank = dp->rank;
    w->world = dp->size;
    w->ranges = *ranges;
    w->staging = staging;
    w->wait_staged = wait_staged;
    w->ctx = ctx;
    w->kill_spec = getenv("LLMC_TEST_CKPT_FAULT");
    w->last_staged = -1;
    w->files = (CkptFileRecord *)callocCheck((size_t)w->world, sizeof(CkptFileRecord));
    if (w->rank == 0) w->data_set = dataloader_identity(train, train->num_shards);
    int cores, spare = ckpt_spare_cores(train_threads, &cores);
    w->low_priority = spare < 1;
    w->thread_copies = spare >= 1 && !wait_staged;
    if (!wait_staged && w->compress <= 0) {  // (the CPU's copy takes each chunk's CRC32C while it is in cache)
        int64_t chunks = 0;
        for (int k = 0; k < w->ranges.write.n; k++) chunks += ckpt_stage_chunks(w->ranges.write.r[k].hi - w->ranges.write.r[k].lo);
        w->chunk_crcs = (uint32_t *)mallocCheck(sizeof(uint32_t) * (size_t)(chunks > 0 ? chunks : 1));
    }
    if (w->rank == 0) {
        if (spare >= 1)
            printf("checkpoint: the writer has %d core%s beside %d training thread%s a rank (%d cores)%s\n", spare,
                   spare > 1 ? "s" : "", train_threads, train_threads > 1 ? "s" : "", cores,
                   w->thread_copies ? ": it copies each checkpoint beside the next step" : "");
        else
            printf("checkpoint: no core spare beside %d training thread%s a rank (%d cores): the writer runs at "
                   "nice 19, on their idle time\n", train_threads, train_threads > 1 ? "s" : "", cores);
        fflush(stdout);
    }
    CHECK(pthread_mutex_init(&w->mu, NULL) == 0 && pthread_cond_init(&w->cv, NULL) == 0, "pthread init failed");
    CHECK(pthread_create(&w->thread, NULL, ckpt_thread_main, w) == 0, "starting the checkpoint thread failed");
}

// A failed write or commit: the rank that failed says why, rank 0 removes the
// .tmp directory (every rank's thread is done with it), and the run stops.
static inline void ckpt_fail(CkptWriter *w, int failed_here) {
    if (failed_here) {
        fprintf(stderr, "error: %s\n", w->err);
        fflush(stderr);
    }
    comm_barrier(w->dp);
    if (w->rank == 0) {
        char tmp_name[CKPT_NAME_MAX];
        int dfd = ckpt_open_dir(w->dir);
        snprintf(tmp_name, sizeof(tmp_name), "step_%08lld.tmp", (long long)w->point.step);
        if (dfd >= 0) {
            ckpt_remove_step(dfd, tmp_name);
            close(dfd);
        }
    }
    exit(EXIT_FAILURE);
}

// Every rank's data file is durable: the records go to rank 0, whose thread
// commits. A record travels as doubles: pieces, bytes, CRC32C, the layout's
// tp, tp_rank, embeddings, ln_f and layer ranges, then the pieces and the
// layer ranges.
static inline void ckpt_start_commit(CkptWriter *w) {
    const CkptFileRecord *me = &w->mine;
    int n = 8 + 2 * me->pieces.n + 2 * me->layout.layers.n;
    double *mine = (double *)mallocCheck(sizeof(double) * (size_t)n);
    double head[8] = {(double)me->pieces.n, (double)me->bytes, (double)me->crc32c, (double)me->layout.tp,
                      (double)me->layout.tp_rank, (double)me->layout.embeddings, (double)me->layout.lnf,
                      (double)me->layout.layers.n};
    memcpy(mine, head, sizeof(head));
    for (int k = 0; k < me->pieces.n; k++) mine[8 + 2 * k] = (double)me->pieces.r[k].lo, mine[9 + 2 * k] = (double)me->pieces.r[k].hi;
    for (int k = 0, at = 8 + 2 * me->pieces.n; k < me->layout.layers.n; k++)
        mine[at + 2 * k] = (double)me->layout.layers.r[k].lo, mine[at + 2 * k + 1] = (double)me->layout.layers.r[k].hi;
    size_t *counts = (size_t *)mallocCheck(sizeof(size_t) * (size_t)w->world);
    double *lens = (double *)mallocCheck(sizeof(double) * (size_t)w->world), len = (double)n;
    for (int r = 0; r < w->world; r++) counts[r] = 1;
    CommRequest req = comm_all_gather_start(w->dp, &len, lens, counts, COMM_F64);
    comm_wait(&req);
    size_t total = 0;
    for (int r = 0; r < w->world; r++) total += counts[r] = (size_t)lens[r];
    double *all = (double *)mallocCheck(sizeof(double) * total);
    req = comm_all_gather_start(w->dp, mine, all, counts, COMM_F64);
    comm_wait(&req);
    const double *a = all;
    for (int r = 0; r < w->world; a += counts[r], r++) {
        CkptFileRecord *f = &w->files[r];
        ckpt_record_free(f);
        f->bytes = (int64_t)a[1];
        f->crc32c = (uint32_t)a[2];
        f->layout.tp = (int)a[3], f->layout.tp_rank = (int)a[4], f->layout.embeddings = (int)a[5], f->layout.lnf = (int)a[6];
        int np = (int)a[0], nl = (int)a[7];
        for (int k = 0; k < np; k++) ckpt_pieces_add(&f->pieces, (int64_t)a[8 + 2 * k], (int64_t)a[9 + 2 * k]);
        for (int k = 0; k < nl; k++)
            ckpt_pieces_add(&f->layout.layers, (int64_t)a[8 + 2 * np + 2 * k], (int64_t)a[9 + 2 * np + 2 * k]);
    }
    free(all);
    free(lens);
    free(counts);
    free(mine);
    if (w->rank == 0) {
        w->phase = CKPT_COMMITTING;
        ckpt_submit(w, CKPT_JOB_COMMIT);
    } else {
        w->phase = CKPT_IDLE;
    }
}

// Rank 0: logs the commit it found done.
static inline void ckpt_log_commit(CkptWriter *w, Logger *log, int64_t at_step) {
    double total = 0;
    for (int r = 0; r < w->world; r++) total += (double)w->files[r].bytes;
    double raw = (double)w->run.pl->num_elements * CKPT_STATES * 4, secs = wall_seconds() - w->staged_at;
    char dir[CKPT_PATH_MAX];
    ckpt_step_dir(dir, sizeof(dir), w->dir, w->point.step, "");
    printf("checkpoint %s committed at step %lld: %.1f MB on disk (%.2fx compression), rank 0 wrote at %.0f MB/s "
           "(%s; its writer's CPU time %.2f s), %.2f s after staging\n", dir, (long long)at_step, total / 1e6,
           raw / (total > 0 ? total : 1), (double)w->mine.bytes / 1e6 / (w->write_s > 0 ? w->write_s : 1e-9),
           w->direct ? "O_DIRECT" : "through the page cache", w->write_cpu_s, secs);
    fflush(stdout);
    logger_ckpt(log, w->point.step, "committed", 0.0, total, secs);
    w->phase = CKPT_IDLE;
    CkptCost *slot = w->ended[0].open ? &w->ended[1] : &w->ended[0];
    *slot = w->cost;  // (its record follows the step's line: ckpt_step_cost)
    slot->ends = 1;
    w->cost.open = 0;
}

// The copy of the checkpoint in flight is done: its stall (staging, plus
// the waits for the copy, extra_ms the last) goes to the JSON log.
static inline void ckpt_stall_close(CkptWriter *w, double extra_ms) {
    if (!w->stall_open) return;
    w->stall_ms += extra_ms;
    w->stall_open = 0;
    w->cost.stall_ms = w->stall_ms;
    logger_ckpt(w->log, w->point.step, "staged", w->stall_ms, 0.0, 0.0);
}

// A staged checkpoint whose copy was in flight (GPU): the copy is done by
// now (it ran beside a whole step; the wait makes sure), the thread writes it.
static inline void ckpt_hand_to_thread(CkptWriter *w) {
    if (w->phase != CKPT_STAGING) return;
    if (w->wait_staged) {
        double t0 = wall_seconds();
        w->wait_staged(w->ctx);
        ckpt_stall_close(w, (wall_seconds() - t0) * 1e3);
    }
    w->phase = CKPT_WRITING;
    ckpt_submit(w, CKPT_JOB_WRITE);
}

// Drives the checkpoint in flight to the end (a new one is due, or the run
// ends): waits for this rank's file, then (collectively) for every rank's,
// then rank 0 waits for its commit.
static inline void ckpt_drain(CkptWriter *w, Logger *log, int64_t at_step) {
    int failed;
    ckpt_hand_to_thread(w);
    if (w->phase == CKPT_WRITING) {
        ckpt_job_done(w, 1, &failed);
        w->copy_pending = 0;
        ckpt_stall_close(w, 0.0);  // (the run's end, or the next checkpoint, waited for all of it)
        double f[2] = {1.0, (double)failed};
        comm_all_reduce(w->dp, f, 2, COMM_F64);
        if (f[1] > 0) ckpt_fail(w, failed);
        ckpt_start_commit(w);
    }
    if (w->phase == CKPT_COMMITTING) {
        ckpt_job_done(w, 1, &failed);
        if (failed) ckpt_fail(w, 1);
        ckpt_log_commit(w, log, at_step);
    }
}

// Before the first step (at step `start`, 0 or the resumed checkpoint's): 1
// when a rank caught a signal during start-up. Nothing has been trained since
// `start`, so no checkpoint is written: rank 0 says so, and the run stops.
// Collective over the ranks.
static inline int ckpt_stop_before_first_step(CkptWriter *w, int64_t start) {
    double caught = (double)(ckpt_signal_received != 0);
    comm_all_reduce(w->dp, &caught, 1, COMM_F64);
    if (caught == 0) return 0;
    if (w->rank == 0) {
        if (start > 0)
            printf("checkpoint: signal received before the first step: no checkpoint written (nothing trained since "
                   "step_%08lld, which stays the newest); exiting\n", (long long)start);
        else
            printf("checkpoint: signal received before the first step: no checkpoint written (none exists yet: "
                   "--resume auto starts afresh); exiting\n");
        fflush(stdout);
    }
    return 1;
}

// At the boundary after `steps_done` optimizer steps: progresses the
// checkpoint in flight, stages a new one when one is due (every --ckpt-every
// steps, at the end of the run, or after a preemption signal) through
// stage(ctx, staging, lo, hi, crcs), and, at the end or on a signal, waits for its
// commit. Collective over the data ranks. Returns 1 when the run must stop
// (preempted: the checkpoint is committed). The JSON log gets the stall.
static inline int ckpt_step_boundary(CkptWriter *w, int64_t steps_done, int final, const DataLoader *train,
                                     const Rng *sample_rng, void (*stage)(void *, float *, int64_t, int64_t, uint32_t *),
                                     Logger *log) {
    double t0 = wall_seconds();
    ckpt_hand_to_thread(w);
    CkptPhase phase = w->phase;  // (its job's done and failed flags below)
    int failed = 0, done = phase != CKPT_IDLE && ckpt_job_done(w, 0, &failed);
    // flags summed over the ranks: writes finished, writes failed, commit failed (rank 0), signal received
    double f[4] = {(double)(phase == CKPT_WRITING && done), (double)(phase == CKPT_WRITING && failed),
                   (double)(phase == CKPT_COMMITTING && failed), (double)(ckpt_signal_received != 0)};
    comm_all_reduce(w->dp, f, 4, COMM_F64);
    if (f[2] > 0) ckpt_fail(w, w->rank == 0);
    if (f[1] > 0) {
        ckpt_job_done(w, 1, &failed);  // every thread finishes before the directory goes
        ckpt_fail(w, failed);
    }
    if (phase == CKPT_WRITING && f[0] == w->world) ckpt_start_commit(w);
    if (phase == CKPT_COMMITTING && done && !failed) ckpt_log_commit(w, log, steps_done);
    int preempt = f[3] > 0;
    int due = (w->every > 0 && steps_done % w->every == 0) || final || preempt;
    if (!due || steps_done == w->last_staged) return 0;
    if (preempt && w->rank == 0) {
        printf("checkpoint: preemption signal received: checkpointing at step %lld, then exiting%s\n",
               (long long)steps_done, ckpt_signal_received == SIGINT ? " (Ctrl-C again exits at once)" : "");
        fflush(stdout);
    }
    if (w->phase != CKPT_IDLE) {
        if (w->rank == 0) {
            printf("checkpoint: step %lld waits for step_%08lld to be written\n", (long long)steps_done,
                   (long long)w->point.step);
            fflush(stdout);
        }
        ckpt_drain(w, log, steps_done);
    }
    CkptPoint p = {steps_done, dataloader_state(train), *sample_rng, w->run.lr_decay_steps};
    w->point = p;
    w->stage = stage;
    w->log = log;
    w->last_staged = steps_done;
    w->phase = CKPT_STAGING;
    if (w->thread_copies) {  // (the thread copies, then writes; the update waits for the copy: ckpt_before_update)
        w->copy_pending = 1;
        w->phase = CKPT_WRITING;
        ckpt_submit(w, CKPT_JOB_WRITE);
    } else {
        ckpt_stage_pieces(w);  // (GPU: queued)
        if (!w->wait_staged) ckpt_hand_to_thread(w);
    }
    w->staged_at = wall_seconds();
    double stall_ms = (w->staged_at - t0) * 1e3;
    if (w->rank == 0) {
        printf("checkpoint step_%08lld staged (training stalled %.2f ms); %s in the background\n",
               (long long)steps_done, stall_ms, w->wait_staged ? "copying to host memory, then writing" : "writing");
        fflush(stdout);
    }
    w->stall_ms = stall_ms;
    w->stall_open = 1;
    CkptCost c = {1, 0, steps_done, (int)(steps_done - 1), 0, 0.0, stall_ms, -1.0};
    if (w->clean_n > 0) {
        int n = w->clean_n < CKPT_BASELINE_STEPS ? w->clean_n : CKPT_BASELINE_STEPS;
        double v[CKPT_BASELINE_STEPS];
        memcpy(v, w->clean_ms, sizeof(double) * (size_t)n);
        c.baseline_ms = quantile(v, n, 0.5);
    }
    w->cost = c;
    if (!w->wait_staged && !w->copy_pending) ckpt_stall_close(w, 0.0);  // (the copy is done)
    if (final || preempt) ckpt_drain(w, log, steps_done);
    return preempt;
}

// Before the update, which rewrites what a checkpoint's copy reads: waits
// for the thread's copy of the checkpoint staged at the boundary before
// (thread_copies; done long before, as a rule: it ran beside the step's
// forward and backward); the wait is the checkpoint's stall. w: NULL, none.
static inline void ckpt_before_update(CkptWriter *w) {
    if (!w || !w->copy_pending) return;
    double t0 = wall_seconds();
    pthread_mutex_lock(&w->mu);
    while (!w->copied) pthread_cond_wait(&w->cv, &w->mu);
    pthread_mutex_unlock(&w->mu);
    w->copy_pending = 0;
    ckpt_stall_close(w, (wall_seconds() - t0) * 1e3);
}

// After step `step` (0-based) took ms (this rank's wall time, its line
// logged): counts it to the checkpoints it overlapped (the one committed in
// it, the one in flight), else to the baseline; logs a checkpoint's cost once
// its last step is done:
//   {"step":N,"ckpt":"cost","stall_ms":x,"first_step":F,"steps":n,"step_ms":x,"baseline_ms":x,"lost_ms":x}
// step_ms: the wall time of steps F..F+n-1 (the step records' "ms", whose
// "step" counts steps done, as F does; F is the step that staged it, the last
// the one it was committed in); lost_ms:
// step_ms - n x baseline_ms, what it took from the run (null, with
// baseline_ms, when no step but the first before it overlapped no checkpoint).
static inline void ckpt_step_cost(CkptWriter *w, int step, double ms) {
    int counted = 0;
    CkptCost *all[3] = {&w->ended[0], &w->ended[1], &w->cost};
    for (int k = 0; k < 3; k++) {
        CkptCost *c = all[k];
        if (!c->open || step < c->first) continue;
        c->steps++;
        c->step_ms += ms;
        counted = 1;
        if (!c->ends) continue;
        logger_ckpt_cost(w->log, c->step, c->stall_ms, c->first + 1, c->steps, c->step_ms, c->baseline_ms);
        c->open = 0;
    }
    if (!counted && w->warm) w->clean_ms[w->clean_n++ % CKPT_BASELINE_STEPS] = ms;
    w->warm = 1;
}

static inline void ckpt_writer_free(CkptWriter *w) {
    ckpt_submit(w, CKPT_JOB_EXIT);
    CHECK(pthread_join(w->thread, NULL) == 0, "joining the checkpoint thread failed");
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    for (int r = 0; r < w->world; r++) ckpt_record_free(&w->files[r]);
    free(w->files);
    free(w->chunk_crcs);
    memset(w, 0, sizeof(*w));
}

// ---------------------------------------------------------------------------
// the reader

// A checkpoint's manifest, parsed and checked against this run. Errors go to
// err (a message naming the file); damaged (vs. conflicting) says whether
// --resume auto may skip it for an older one.
typedef struct {
    char dir[CKPT_PATH_MAX];
    JsonValue *root;
    int version;
    CkptPoint point;
    DataSetId data_set;                // its training data's identity (version 3)
    char data_change[CKPT_ERR_MAX];    // how this run's data differs, accepted (--resume-data-changed); "": none
    char *err;
    int damaged;
} CkptReader;

static inline int ckpt_reader_fail(CkptReader *r, int damaged, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static inline int ckpt_reader_fail(CkptReader *r, int damaged, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->err, CKPT_ERR_MAX, fmt, ap);
    va_end(ap);
    r->damaged = damaged;
    return 0;
}

// Reads a whole small file (the manifest, `latest`) into a NUL-terminated buffer; NULL: errno.
static inline char *ckpt_slurp(const char *path, size_t max_bytes, size_t *len) {
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return NULL;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || (size_t)st.st_size > max_bytes) {
        close(fd);
        errno = EINVAL;
        return NULL;
    }
    char *buf = (char *)mallocCheck((size_t)st.st_size + 1);
    size_t got = 0;
    while (got < (size_t)st.st_size) {
        ssize_t k = read(fd, buf + got, (size_t)st.st_size - got);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        got += (size_t)k;
    }
    close(fd);
    buf[got] = '\0';
    *len = got;
    return buf;
}

static inline int ckpt_get_int(CkptReader *r, const JsonValue *obj, const char *key, int64_t lo, int64_t hi,
                               int64_t *out) {
    if (json_int64(json_get(obj, key), lo, hi, out)) return 1;
    return ckpt_reader_fail(r, 1, "%s/manifest.json: '%s' is missing or not an integer in [%lld, %lld]", r->dir, key,
                            (long long)lo, (long long)hi);
}

// The ranges the 'files' of a manifest list.
static inline int64_t ckpt_count_ranges(const JsonValue *root) {
    const JsonValue *files = json_get(root, "files");
    int64_t n = 0;
    for (int i = 0; files && files->type == JSON_ARRAY && i < files->count; i++) {
        const JsonValue *jr = json_get(&files->items[i], "ranges");
        n += jr ? jr->count : 0;
    }
    return n;
}

// The manifest's text parsed into r->root within the limits (bytes, values,
// ranges: ckpt_manifest.h), its format and version checked, and (version 3)
// its seal. Returns 1, or 0 with r->err.
static inline int ckpt_reader_parse(CkptReader *r, const char *path) {
    struct stat st;
    if (stat(path, &st) == 0 && S_ISREG(st.st_mode) && (size_t)st.st_size > CKPT_MANIFEST_MAX_BYTES)
        return ckpt_reader_fail(r, 1, "%s: %lld bytes, more than the %zu a manifest may have", path,
                                (long long)st.st_size, CKPT_MANIFEST_MAX_BYTES);
    size_t len;
    char *text = ckpt_slurp(path, CKPT_MANIFEST_MAX_BYTES, &len);
    if (!text) return ckpt_reader_fail(r, 1, "%s: cannot read it (%s): not a complete checkpoint", path, strerror(errno));
    char jerr[256];
    r->root = json_parse(text, len, CKPT_MANIFEST_MAX_VALUES, jerr, sizeof(jerr));
    int64_t version = 0, sealed = 0, nranges = 0;
    const JsonValue *root = r->root, *fmt = json_get(root, "format");
    int ok = 1, found;
    if (!root) ok = ckpt_reader_fail(r, 1, "%s: %s", path, jerr);
    else if ((nranges = ckpt_count_ranges(root)) > CKPT_MAX_RANGES)
        ok = ckpt_reader_fail(r, 1, "%s: its 'files' list %lld 'ranges', more than the %d a checkpoint may have", path,
                              (long long)nranges, CKPT_MAX_RANGES);
    else if (!fmt || fmt->type != JSON_STRING || strcmp(fmt->text, CKPT_FORMAT) != 0)
        ok = ckpt_reader_fail(r, 1, "%s: not an %s manifest", path, CKPT_FORMAT);
    else if (!ckpt_get_int(r, root, "version", 0, INT32_MAX, &version)) ok = 0;
    else if (version < 1 || version > CKPT_VERSION)
        ok = ckpt_reader_fail(r, 0, "%s: format version %lld, this program reads versions 1 to %d", path,
                              (long long)version, CKPT_VERSION);
    else if (version >= 3 && (strcmp(root->items[root->count - 1].key, CKPT_SEAL_KEY) != 0 ||
                              !json_int64(&root->items[root->count - 1], 0, UINT32_MAX, &sealed)))
        ok = ckpt_reader_fail(r, 1, "%s: '%s' is missing, not an integer in [0, %u] or not the last member", path,
                              CKPT_SEAL_KEY, UINT32_MAX);
    else if (version >= 3) {
        uint32_t crc = ckpt_seal_crc(text, len, &found);
        if (!found || crc != (uint32_t)sealed)
            ok = ckpt_reader_fail(r, 1, "%s: its CRC32C %u does not match its '%s' %lld (damaged or edited)", path,
                                  crc, CKPT_SEAL_KEY, (long long)sealed);
    }
    free(text);
    r->version = (int)version;
    return ok;
}

// The three states' names, shapes and dtypes (each the flat buffer of the
// model whose whole layout is pl, in fp32) and the table of parameters
// (names, shapes, offsets) against pl.
static inline int ckpt_check_tensor_table(CkptReader *r, const char *path, const ParamLayout *pl) {
    const JsonValue *root = r->root, *ts = json_get(root, "tensors");
    if (!ts || ts->type != JSON_ARRAY || ts->count != CKPT_STATES)
        return ckpt_reader_fail(r, 1, "%s: 'tensors' is not a list of %d", path, CKPT_STATES);
    int64_t N = pl->num_elements, n;
    for (int s = 0; s < CKPT_STATES; s++) {
        const JsonValue *name = json_get(&ts->items[s], "name"), *shape = json_get(&ts->items[s], "shape");
        const JsonValue *dtype = json_get(&ts->items[s], "dtype");
        if (!name || name->type != JSON_STRING || strcmp(name->text, CKPT_STATE_NAMES[s]) != 0)
            return ckpt_reader_fail(r, 1, "%s: 'tensors' entry %d is not named '%s'", path, s, CKPT_STATE_NAMES[s]);
        if (!shape || shape->type != JSON_ARRAY || shape->count != 1 || !json_int64(&shape->items[0], N, N, &n))
            return ckpt_reader_fail(r, 1, "%s: 'tensors' entry %d (%s) has not the 'shape' [%lld] of this model's flat "
                                    "buffer", path, s, CKPT_STATE_NAMES[s], (long long)N);
        if (!dtype || dtype->type != JSON_STRING || strcmp(dtype->text, "f32") != 0)
            return ckpt_reader_fail(r, 1, "%s: 'tensors' entry %d (%s) has not the 'dtype' \"f32\"", path, s,
                                    CKPT_STATE_NAMES[s]);
    }
    // the tensor table: the flat order this program lays out
    const JsonValue *params = json_get(root, "parameters");
    if (!params || params->type != JSON_ARRAY || params->count != pl->num_tensors)
        return ckpt_reader_fail(r, 1, "%s: 'parameters' is not the table of %d tensors", path, pl->num_tensors);
    for (int i = 0; i < params->count; i++) {
        const ParamTensor *pt = &pl->tensors[i];
        const JsonValue *name = json_get(&params->items[i], "name"), *shape = json_get(&params->items[i], "shape");
        int64_t off, d0, d1;
        if (!name || name->type != JSON_STRING || strcmp(name->text, pt->name) != 0 ||
            !json_int64(json_get(&params->items[i], "offset"), 0, INT64_MAX, &off) || off != pt->offset)
            return ckpt_reader_fail(r, 0, "%s: parameter %d is not %s at offset %lld of the flat order", path, i,
                                    pt->name, (long long)pt->offset);
        if (!shape || shape->type != JSON_ARRAY || shape->count != 2 ||
            !json_int64(&shape->items[0], pt->shape[0], pt->shape[0], &d0) ||
            !json_int64(&shape->items[1], pt->shape[1], pt->shape[1], &d1))
            return ckpt_reader_fail(r, 1, "%s: parameter %d (%s) has not the 'shape' [%lld, %lld] of this model's", path,
                                    i, pt->name, (long long)pt->shape[0], (long long)pt->shape[1]);
    }
    return 1;
}

// The batch and the tensors against this run: the total batch (kept), the
// writer's batch plan (B x T x data ranks x accumulation = the total: its
// batches of plan[0] samples, plan[1] a step, of T plan[2]), the tensor table.
static inline int ckpt_check_model_tables(CkptReader *r, const char *path, const CkptRun *run, int64_t plan[3]) {
    const JsonValue *root = r->root, *batch = json_get(root, "batch");
    int64_t total = 0, B = 0, T = 0, accum = 0, dp = 0, tokens;
    if (!ckpt_get_int(r, batch, "total_tokens", 1, INT64_MAX, &total)) return 0;
    if (total != run->plan->total_tokens)
        return ckpt_reader_fail(r, 0, "%s: written with a total batch of %lld tokens, this run has %lld: resume "
                                "with --total-batch-tokens %lld (a multiple of batch-size x seq-len x ranks)", path,
                                (long long)total, run->plan->total_tokens, (long long)total);
    if (!ckpt_get_int(r, batch, "B", 1, INT32_MAX, &B) || !ckpt_get_int(r, batch, "T", 1, INT32_MAX, &T) ||
        !ckpt_get_int(r, batch, "accum", 1, INT32_MAX, &accum) ||
        !ckpt_get_int(r, json_get(root, "layout"), "dp", 1, INT32_MAX, &dp))
        return 0;
    if (__builtin_mul_overflow(B * T, dp, &tokens) || __builtin_mul_overflow(tokens, accum, &tokens) || tokens != total)
        return ckpt_reader_fail(r, 1, "%s: 'batch' B %lld x T %lld x 'layout' dp %lld x accum %lld is not its "
                                "total_tokens %lld", path, (long long)B, (long long)T, (long long)dp,
                                (long long)accum, (long long)total);
    plan[0] = B * dp, plan[1] = total / T, plan[2] = T;
    return ckpt_check_tensor_table(r, path, run->pl);
}

// The data position (against the step and the writer's batch plan, as
// ckpt_check_model_tables gives it), the data set's identity (version 3) and
// the sampling RNG into r.
static inline int ckpt_read_position(CkptReader *r, const char *path, const int64_t plan[3]) {
    const JsonValue *root = r->root, *data = json_get(root, "data");
    int64_t epoch = 0, sample = 0, dropped = 0, num_samples = 0, T = 0, shuffle = 0;
    uint64_t seed;
    if (!ckpt_get_int(r, data, "epoch", 0, INT64_MAX / 2, &epoch) ||
        !ckpt_get_int(r, data, "sample", 0, INT64_MAX / 2, &sample) ||
        (r->version >= 3 && !ckpt_get_int(r, data, "dropped", -INT64_MAX / 2, INT64_MAX / 2, &dropped)) ||
        !ckpt_get_int(r, data, "num_samples", 1, INT64_MAX / 2, &num_samples) ||
        !ckpt_get_int(r, data, "T", 1, INT32_MAX, &T) || !ckpt_get_int(r, data, "shuffle", 0, 1, &shuffle))
        return 0;
    if (!json_u64_string(json_get(data, "seed"), &seed))
        return ckpt_reader_fail(r, 1, "%s: data 'seed' is missing or not a decimal string", path);
    if (T != plan[2]) return ckpt_reader_fail(r, 1, "%s: data 'T' %lld is not the batch's %lld", path, (long long)T,
                                              (long long)plan[2]);
    DataLoaderState ds = {epoch, sample, dropped, seed, num_samples, (int32_t)T, (int32_t)shuffle};
    char why[CKPT_ERR_MAX / 2];
    if (ckpt_position_problem(&ds, r->version >= 3, r->point.step, plan[1], plan[0], why, sizeof(why)))
        return ckpt_reader_fail(r, 1, "%s: %s", path, why);
    r->point.data = ds;
    if (r->version >= 3) {
        const JsonValue *set = json_get(root, "data_set");
        int64_t v[4];
        const char *keys[4] = {"shards", "tokens", "list_crc32c", "contents_crc32c"};
        const int64_t hi[4] = {INT32_MAX, INT64_MAX / 2, UINT32_MAX, UINT32_MAX};
        for (int k = 0; k < 4; k++)
            if (!ckpt_get_int(r, set, keys[k], k < 2, hi[k], &v[k])) return 0;
        DataSetId id = {v[0], v[1], (uint32_t)v[2], (uint32_t)v[3]};
        r->data_set = id;
    }
    const JsonValue *rng = json_get(root, "sample_rng");
    if (!rng || rng->type != JSON_ARRAY || rng->count != 4)
        return ckpt_reader_fail(r, 1, "%s: 'sample_rng' is not 4 decimal strings", path);
    for (int i = 0; i < 4; i++)
        if (!json_u64_string(&rng->items[i], &r->point.sample_rng.s[i]))
            return ckpt_reader_fail(r, 1, "%s: 'sample_rng' is not 4 decimal strings", path);
    return 1;
}

// The manifest's "model" keys, and where a GPTConfig holds each.
static const char *const CKPT_MODEL_KEYS[] = {"max_seq_len", "vocab_size", "padded_vocab_size", "num_layers",
                                              "num_heads", "channels"};
#define CKPT_NUM_MODEL_KEYS ((int)(sizeof(CKPT_MODEL_KEYS) / sizeof(CKPT_MODEL_KEYS[0])))
static inline int *ckpt_model_field(GPTConfig *c, int key) {
    int *fields[CKPT_NUM_MODEL_KEYS] = {&c->max_seq_len, &c->vocab_size, &c->padded_vocab_size, &c->num_layers,
                                        &c->num_heads, &c->channels};
    return fields[key];
}

// Opens dir's manifest and checks it against itself: format, version, seal,
// step (against the directory's name when it is a step_N); *model: the
// model's shape it records (unchecked). Returns 1, or 0 with r->err.
static inline int ckpt_manifest_open(CkptReader *r, const char *dir, GPTConfig *model, char *err) {
    memset(r, 0, sizeof(*r));
    r->err = err;
    snprintf(r->dir, sizeof(r->dir), "%s", dir);
    char path[CKPT_FILE_MAX];
    snprintf(path, sizeof(path), "%s/manifest.json", dir);
    if (!ckpt_reader_parse(r, path)) return 0;
    const JsonValue *root = r->root;
    int64_t step = 0;
    if (!ckpt_get_int(r, root, "step", 0, INT32_MAX, &step)) return 0;
    r->point.step = step;
    size_t end = strlen(r->dir);  // the directory's own name (a copy under another name is not checked)
    while (end > 1 && r->dir[end - 1] == '/') end--;
    size_t start = end;
    while (start > 0 && r->dir[start - 1] != '/') start--;
    char name[CKPT_PATH_MAX];
    snprintf(name, sizeof(name), "%.*s", (int)(end - start), r->dir + start);
    int64_t named = ckpt_parse_step_name(name);
    if (named >= 0 && named != step)
        return ckpt_reader_fail(r, 1, "%s: 'step' %lld is not the step of its directory %s", path, (long long)step,
                                name);
    const JsonValue *jm = json_get(root, "model");
    for (int i = 0; i < CKPT_NUM_MODEL_KEYS; i++) {
        int64_t v = 0;
        if (!ckpt_get_int(r, jm, CKPT_MODEL_KEYS[i], 0, INT32_MAX, &v)) return 0;
        *ckpt_model_field(model, i) = (int)v;
    }
    return 1;
}

// Opens dir's manifest and checks it against itself (ckpt_manifest_open) and
// against this run: step, model, kept flags, batch, tensors, data position.
// Returns 1, or 0 with r->err.
static inline int ckpt_reader_open(CkptReader *r, const char *dir, const CkptRun *run, char *err) {
    GPTConfig have, want = *run->cfg;
    if (!ckpt_manifest_open(r, dir, &have, err)) return 0;
    const JsonValue *root = r->root;
    char path[CKPT_FILE_MAX];
    snprintf(path, sizeof(path), "%s/manifest.json", dir);
    int64_t step = r->point.step;
    if (step > run->o->steps)
        return ckpt_reader_fail(r, 0, "%s: the checkpoint is at step %lld, past this run's --steps %d: give --steps %lld "
                                "or more (%lld: evaluate, sample and save only; more: train on)", path, (long long)step,
                                run->o->steps, (long long)step, (long long)step);
    for (int i = 0; i < CKPT_NUM_MODEL_KEYS; i++)
        if (*ckpt_model_field(&have, i) != *ckpt_model_field(&want, i))
            return ckpt_reader_fail(r, 0, "%s: a model with %s %d, this run's has %d", path, CKPT_MODEL_KEYS[i],
                                    *ckpt_model_field(&have, i), *ckpt_model_field(&want, i));
    // the flags a resume keeps: compared as the manifest writes them
    const JsonValue *flags = json_get(root, "flags");
    for (int i = 0; i < CKPT_NUM_KEPT_FLAGS; i++) {
        const FlagSpec *f = ckpt_flag_spec(CKPT_KEPT_FLAGS[i]);
        const JsonValue *v = json_get(flags, f->name);
        char want[FLAG_STR_MAX + 8], got[FLAG_STR_MAX + 8];
        flag_value_json(f, run->o, want, sizeof(want));
        if (!v || (v->type != JSON_NUMBER && v->type != JSON_STRING))
            return ckpt_reader_fail(r, 1, "%s: flag '%s' is missing", path, f->name);
        if (v->type == JSON_STRING) snprintf(got, sizeof(got), "\"%s\"", v->text);
        else snprintf(got, sizeof(got), "%s", v->text);
        if (strcmp(want, got) != 0)
            return ckpt_reader_fail(r, 0, "%s: written with --%s %s, this run has --%s %s (a resume keeps it: "
                                    "resume with --%s %s)", path, f->name, got, f->name, want, f->name, got);
    }
    // the schedule's length (a manifest before it was recorded: its run's --steps, the length then)
    int64_t decay = 0;
    if (!ckpt_get_int(r, flags, json_get(flags, "lr-decay-steps") ? "lr-decay-steps" : "steps", 0, INT32_MAX, &decay))
        return 0;
    r->point.lr_decay_steps = decay;
    int64_t plan[3] = {0, 0, 0};
    return ckpt_check_model_tables(r, path, run, plan) && ckpt_read_position(r, path, plan);
}

static inline void ckpt_reader_close(CkptReader *r) { json_free(r->root); }

// Where a file's bytes go: for each state, this rank's destination over the
// pieces of `hold` (ranges of its own buffer), one after the other.
typedef struct {
    int64_t global, n, at;  // global elements [global, global + n) are dst[at .. at + n)
} CkptSpan;

typedef struct {
    float *dst[CKPT_STATES];       // (the elements of hold[s]): piece k at the sum of the earlier pieces' lengths
    CkptPieces hold[CKPT_STATES];  // ranges of the reader's buffer
    const ParamMap *map;           // the reader's buffer onto the global order
    int64_t filled[CKPT_STATES];   // bytes copied (every element of the spans exactly once when complete)
    // (ckpt_read_tensors) each state's hold as global spans, sorted by global, and their elements
    CkptSpan *spans[CKPT_STATES];
    int nspans[CKPT_STATES];
    int64_t want[CKPT_STATES];
} CkptTargets;

// One copy from a file into the targets: n elements at raw byte offset off.
typedef struct {
    int64_t off, n, at;
    int state;
} CkptCopy;

typedef struct {
    CkptSpan *s;
    int n, cap;
    int64_t piece_lo, piece_at;  // the hold piece being mapped: its first element and where it starts in dst
} CkptSpanList;
static inline void ckpt_span_run(void *ctx, int64_t local, int64_t global, int64_t n) {
    CkptSpanList *l = (CkptSpanList *)ctx;
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 64;
        l->s = (CkptSpan *)reallocCheck(l->s, sizeof(CkptSpan) * (size_t)l->cap);
        CHECK(l->s != NULL, "out of memory");
    }
    l->s[l->n++] = (CkptSpan){global, n, l->piece_at + (local - l->piece_lo)};
}
static inline int ckpt_span_cmp(const void *a, const void *b) {
    int64_t x = ((const CkptSpan *)a)->global, y = ((const CkptSpan *)b)->global;
    return (x > y) - (x < y);
}

// The targets' global spans, from the reader's map (alignment gaps are in no
// span: dst keeps them, zero, as the pieces' elements one after the other).
static inline void ckpt_targets_spans(CkptTargets *t) {
    for (int s = 0; s < CKPT_STATES; s++) {
        CkptSpanList l = {NULL, 0, 0, 0, 0};
        for (int k = 0; k < t->hold[s].n; k++) {
            l.piece_lo = t->hold[s].r[k].lo;
            param_map_runs(t->map, t->hold[s].r[k].lo, t->hold[s].r[k].hi, ckpt_span_run, &l);
            l.piece_at += t->hold[s].r[k].hi - t->hold[s].r[k].lo;
        }
        if (l.n > 0) qsort(l.s, (size_t)l.n, sizeof(CkptSpan), ckpt_span_cmp);  // (a state held nowhere: none)
        t->spans[s] = l.s, t->nspans[s] = l.n, t->want[s] = 0;
        for (int i = 0; i < l.n; i++) t->want[s] += l.s[i].n;
    }
}

static inline void ckpt_targets_free_spans(CkptTargets *t) {
    for (int s = 0; s < CKPT_STATES; s++) {
        free(t->spans[s]);
        t->spans[s] = NULL;
    }
}

// A file's global run [g, g + n) of state s at raw byte offset off: a copy
// for each overlap with the targets' spans.
typedef struct {
    CkptTargets *t;
    int state;
    int64_t lo, off;  // the file range's first local element and its byte offset
    CkptCopy *c;
    int n, cap;
} CkptCopyList;
static inline void ckpt_copy_run(void *ctx, int64_t local, int64_t g, int64_t n) {
    CkptCopyList *l = (CkptCopyList *)ctx;
    const CkptSpan *sp = l->t->spans[l->state];
    int ns = l->t->nspans[l->state], lo = 0, hi = ns;
    while (lo < hi) {  // the first span ending after g
        int mid = (lo + hi) / 2;
        if (sp[mid].global + sp[mid].n <= g) lo = mid + 1;
        else hi = mid;
    }
    for (int i = lo; i < ns && sp[i].global < g + n; i++) {
        int64_t a = g > sp[i].global ? g : sp[i].global, z = g + n < sp[i].global + sp[i].n ? g + n : sp[i].global + sp[i].n;
        if (z <= a) continue;
        if (l->n == l->cap) {
            l->cap = l->cap ? 2 * l->cap : 64;
            l->c = (CkptCopy *)reallocCheck(l->c, sizeof(CkptCopy) * (size_t)l->cap);
            CHECK(l->c != NULL, "out of memory");
        }
        l->c[l->n++] = (CkptCopy){l->off + (local + (a - g) - l->lo) * 4, z - a, sp[i].at + (a - sp[i].global), l->state};
    }
}
static inline int ckpt_copy_cmp(const void *a, const void *b) {
    int64_t x = ((const CkptCopy *)a)->off, y = ((const CkptCopy *)b)->off;
    return (x > y) - (x < y);
}

// Raw bytes [pos, pos+n) of a file: copied where the copies (sorted by
// offset; *next: the first not yet wholly done) say.
static inline void ckpt_scatter(CkptTargets *t, const CkptCopy *copies, int ncopies, int *next, int64_t pos,
                                const char *bytes, int64_t n) {
    for (int i = *next; i < ncopies && copies[i].off < pos + n; i++) {
        const CkptCopy *c = &copies[i];
        int64_t b0 = c->off, b1 = c->off + c->n * 4, a = pos > b0 ? pos : b0, z = pos + n < b1 ? pos + n : b1;
        if (z > a) {
            memcpy((char *)(t->dst[c->state] + c->at) + (a - b0), bytes + (a - pos), (size_t)(z - a));
            t->filled[c->state] += z - a;
        }
        if (b1 <= pos + n && i == *next) (*next)++;
    }
}

// The writing rank's buffer a 'files' entry describes ("layout"; without
// one, version 1: the whole model) as its layout in *pl. 1, or 0 with r->err.
static inline int ckpt_file_layout(CkptReader *r, const JsonValue *entry, const GPTConfig *cfg, ParamLayout *pl) {
    const JsonValue *jl = json_get(entry, "layout");
    if (!jl) {
        param_layout_init(pl, cfg);
        return 1;
    }
    int64_t v[4];
    const char *keys[4] = {"tp", "tp_rank", "embeddings", "lnf"};
    for (int k = 0; k < 4; k++)
        if (jl->type != JSON_OBJECT || !ckpt_get_int(r, jl, keys[k], 0, GPT_MAX_HEADS, &v[k])) return 0;
    const JsonValue *jlayers = json_get(jl, "layers");
    if (!jlayers || jlayers->type != JSON_ARRAY || jlayers->count > cfg->num_layers)
        return ckpt_reader_fail(r, 1, "%s/manifest.json: a file's layout has no list of layers", r->dir);
    CkptLayout cl = {(int)v[0], (int)v[1], (int)v[2], (int)v[3], {0, 0, NULL}};
    for (int k = 0; k < jlayers->count; k++) {
        const JsonValue *q = &jlayers->items[k];
        int64_t lo = -1, hi = -1;
        if (q->type != JSON_ARRAY || q->count != 2 || !json_int64(&q->items[0], 0, cfg->num_layers, &lo) ||
            !json_int64(&q->items[1], 0, cfg->num_layers, &hi) || hi <= lo) {
            ckpt_pieces_free(&cl.layers);
            return ckpt_reader_fail(r, 1, "%s/manifest.json: a file's layout lists a bad layer range", r->dir);
        }
        ckpt_pieces_add(&cl.layers, lo, hi);
    }
    const char *why = ckpt_layout_params(&cl, cfg, pl);
    ckpt_pieces_free(&cl.layers);
    if (why) return ckpt_reader_fail(r, 1, "%s/manifest.json: %s", r->dir, why);
    return 1;
}

// Reads one data file: its size and CRC32C against the manifest, its bytes
// (decompressed) into the targets: its ranges (of the writing rank's buffer)
// mapped onto the global order, where they meet the targets' spans. A file
// that holds nothing the targets need is not opened. Returns 1, or 0 with
// r->err (damaged).
static inline int ckpt_read_file(CkptReader *r, const JsonValue *entry, CkptTargets *t, const GPTConfig *cfg) {
    const JsonValue *name = json_get(entry, "file"), *comp = json_get(entry, "compression");
    const JsonValue *jr = json_get(entry, "ranges");
    if (!name || name->type != JSON_STRING || strchr(name->text, '/') || !comp || comp->type != JSON_STRING ||
        (strcmp(comp->text, "none") != 0 && strcmp(comp->text, "zstd") != 0) || !jr || jr->type != JSON_ARRAY ||
        jr->count < 1)
        return ckpt_reader_fail(r, 1, "%s/manifest.json: a bad 'files' entry", r->dir);
    int64_t bytes = 0, raw_bytes = 0, crc = 0;
    if (!ckpt_get_int(r, entry, "bytes", 0, INT64_MAX / 2, &bytes) ||
        !ckpt_get_int(r, entry, "raw_bytes", 0, INT64_MAX / 2, &raw_bytes) ||
        !ckpt_get_int(r, entry, "crc32c", 0, UINT32_MAX, &crc))
        return 0;
    int zstd = strcmp(comp->text, "zstd") == 0;
    if (!zstd && raw_bytes != bytes)
        return ckpt_reader_fail(r, 1, "%s/manifest.json: '%s' is uncompressed but its sizes differ", r->dir, name->text);
    ParamLayout wl;  // the writer's buffer
    if (!ckpt_file_layout(r, entry, cfg, &wl)) return 0;
    CkptFileRange *rs = (CkptFileRange *)mallocCheck(sizeof(CkptFileRange) * (size_t)jr->count);
    int ok = 1;
    for (int i = 0; i < jr->count && ok; i++) {
        const JsonValue *tn = json_get(&jr->items[i], "tensor");
        CkptFileRange *q = &rs[i];
        q->state = -1;
        for (int k = 0; k < CKPT_STATES && tn && tn->type == JSON_STRING; k++)
            if (strcmp(tn->text, CKPT_STATE_NAMES[k]) == 0) q->state = k;
        if (q->state < 0) ok = ckpt_reader_fail(r, 1, "%s/manifest.json: '%s' holds an unknown tensor", r->dir, name->text);
        else if (!ckpt_get_int(r, &jr->items[i], "lo", 0, wl.num_elements, &q->lo) ||
                 !ckpt_get_int(r, &jr->items[i], "hi", q->lo, wl.num_elements, &q->hi) ||
                 !ckpt_get_int(r, &jr->items[i], "offset", 0, raw_bytes, &q->off))
            ok = 0;
    }
    char why[CKPT_ERR_MAX / 2];
    if (ok && ckpt_tiling_problem(rs, jr->count, raw_bytes, why, sizeof(why)))
        ok = ckpt_reader_fail(r, 1, "%s/manifest.json: 'ranges' of '%s': %s", r->dir, name->text, why);
    ParamMap wmap;
    param_map_init(&wmap, &wl);
    CkptCopyList cl = {t, 0, 0, 0, NULL, 0, 0};
    for (int i = 0; i < jr->count && ok; i++) {
        cl.state = rs[i].state, cl.lo = rs[i].lo, cl.off = rs[i].off;
        param_map_runs(&wmap, rs[i].lo, rs[i].hi, ckpt_copy_run, &cl);
    }
    free(rs);
    param_map_free(&wmap);
    param_layout_free(&wl);
    if (!ok || cl.n == 0) {  // (a file this rank needs nothing of)
        free(cl.c);
        return ok;
    }
    qsort(cl.c, (size_t)cl.n, sizeof(CkptCopy), ckpt_copy_cmp);
    int next = 0;
    char path[CKPT_FILE_MAX];
    if (strlen(name->text) > 255) {
        free(cl.c);
        return ckpt_reader_fail(r, 1, "%s/manifest.json: a file name is too long", r->dir);
    }
    snprintf(path, sizeof(path), "%s/%s", r->dir, name->text);
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    struct stat st;
    if (fd < 0) {
        free(cl.c);
        return ckpt_reader_fail(r, 1, "%s: missing or unreadable (%s)", path, strerror(errno));
    }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        free(cl.c);
        return ckpt_reader_fail(r, 1, "%s: not a regular file", path);
    }
    if ((int64_t)st.st_size != bytes) {
        close(fd);
        free(cl.c);
        return ckpt_reader_fail(r, 1, "%s: %lld bytes, the manifest says %lld (truncated or damaged)", path,
                                (long long)st.st_size, (long long)bytes);
    }
    char *buf = (char *)mallocCheck(CKPT_CHUNK);
    uint32_t got_crc = 0;
    int64_t pos = 0, raw_pos = 0;
#ifdef LLMC_ZSTD
    ZSTD_DCtx *dc = zstd ? ZSTD_createDCtx() : NULL;
    char *out = zstd ? (char *)mallocCheck(ZSTD_DStreamOutSize()) : NULL;
#else
    if (zstd) {
        close(fd);
        free(buf);
        free(cl.c);
        return ckpt_reader_fail(r, 0, "%s: zstd-compressed, and this program was built without zstd", path);
    }
#endif
    while (ok && pos < bytes) {
        size_t want = bytes - pos < (int64_t)CKPT_CHUNK ? (size_t)(bytes - pos) : CKPT_CHUNK;
        ssize_t k = read(fd, buf, want);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) { ok = ckpt_reader_fail(r, 1, "%s: read failed at byte %lld", path, (long long)pos); break; }
        got_crc = crc32c_update(got_crc, buf, (size_t)k);
        pos += k;
        if (!zstd) {
            ckpt_scatter(t, cl.c, cl.n, &next, raw_pos, buf, k);
            raw_pos += k;
            continue;
        }
#ifdef LLMC_ZSTD
        ZSTD_inBuffer in = {buf, (size_t)k, 0};
        while (ok && in.pos < in.size) {
            ZSTD_outBuffer ob = {out, ZSTD_DStreamOutSize(), 0};
            size_t rc = ZSTD_decompressStream(dc, &ob, &in);
            if (ZSTD_isError(rc) || raw_pos + (int64_t)ob.pos > raw_bytes) {
                ok = ckpt_reader_fail(r, 1, "%s: corrupt zstd data", path);
                break;
            }
            ckpt_scatter(t, cl.c, cl.n, &next, raw_pos, out, (int64_t)ob.pos);
            raw_pos += (int64_t)ob.pos;
        }
#endif
    }
#ifdef LLMC_ZSTD
    if (dc) ZSTD_freeDCtx(dc);
    free(out);
#endif
    close(fd);
    free(buf);
    free(cl.c);
    if (!ok) return 0;
    if (got_crc != (uint32_t)crc)
        return ckpt_reader_fail(r, 1, "%s: CRC32C %u does not match the manifest's %u (damaged)", path, got_crc,
                                (unsigned)crc);
    if (raw_pos != raw_bytes)
        return ckpt_reader_fail(r, 1, "%s: %lld bytes decompressed, the manifest says %lld", path, (long long)raw_pos,
                                (long long)raw_bytes);
    return 1;
}

// Fills this rank's ranges (t->hold) of every state from the files that
// overlap them. Returns 1 when every element came from exactly one file.
static inline int ckpt_read_tensors(CkptReader *r, CkptTargets *t, const GPTConfig *cfg) {
    const JsonValue *files = json_get(r->root, "files");
    if (!files || files->type != JSON_ARRAY) return ckpt_reader_fail(r, 1, "%s/manifest.json: no 'files'", r->dir);

    ckpt_targets_spans(t);
    int ok = 1;
    for (int s = 0; s < CKPT_STATES; s++) t->filled[s] = 0;
    for (int i = 0; i < files->count && ok; i++) ok = ckpt_read_file(r, &files->items[i], t, cfg);
    for (int s = 0; s < CKPT_STATES && ok; s++)
        if (t->filled[s] != t->want[s] * 4)
            ok = ckpt_reader_fail(r, 1, "%s/manifest.json: the files do not cover %s [%lld, %lld)%s exactly once",
                                  r->dir, CKPT_STATE_NAMES[s], (long long)t->hold[s].r[0].lo,
                                  (long long)t->hold[s].r[0].hi, t->hold[s].n > 1 ? " and the rest" : "");
    ckpt_targets_free_spans(t);
    return ok;
}

// The training data against the checkpoint's: the same data set (its
// identity, version 3, where `have` is given: rank 0; its sample count
// everywhere) unless --resume-data-changed says go on (r->data_change then
// says how it differs, and the run continues at the same global sample of
// the new data's order), and a position that starts one of this run's batches.
static inline int ckpt_check_data(CkptReader *r, const CkptRun *run, const DataLoader *train, const DataSetId *have) {
    DataLoaderState *d = &r->point.data;
    char why[CKPT_ERR_MAX / 2];
    const char *change = NULL;
    if (have && r->version >= 3) {
        DataSetId prefix;
        int more = r->data_set.shards < have->shards;
        if (more) prefix = dataloader_identity(train, (int)r->data_set.shards);
        change = ckpt_data_set_change(&r->data_set, have, more ? &prefix : NULL, train->pattern, why, sizeof(why));
    }
    if (!change && d->num_samples != train->num_samples) {
        snprintf(why, sizeof(why), "the training data had %lld samples, '%.400s' has %lld", (long long)d->num_samples,
                 train->pattern, (long long)train->num_samples);
        change = why;
    }
    if (change && !run->o->resume_data_changed)
        return ckpt_reader_fail(r, 0, "%s/manifest.json: %s (--resume-data-changed 1 continues on it anyway)", r->dir,
                                change);
    if (change) {  // the same samples read so far, counted in epochs of the new data's size
        snprintf(r->data_change, sizeof(r->data_change), "%s", change);
        int64_t more;
        if (__builtin_mul_overflow(d->epoch, train->num_samples - d->num_samples, &more) ||
            __builtin_add_overflow(d->dropped, more, &d->dropped))
            return ckpt_reader_fail(r, 0, "%s/manifest.json: epoch %lld of %lld samples cannot continue on %lld",
                                    r->dir, (long long)d->epoch, (long long)d->num_samples,
                                    (long long)train->num_samples);
        d->num_samples = train->num_samples;
    }
    int64_t per_batch = (int64_t)train->B * train->world;
    if (d->sample % per_batch != 0)
        return ckpt_reader_fail(r, 0, "%s/manifest.json: the data continues at global sample %lld, which is not a "
                                "multiple of batch-size x ranks = %lld", r->dir, (long long)d->sample,
                                (long long)per_batch);
    if (d->sample / per_batch >= train->batches_per_epoch)
        return ckpt_reader_fail(r, 0, "%s/manifest.json: the data continues at global sample %lld, past the last of "
                                "the %lld batches of batch-size x ranks = %lld samples in an epoch of '%s'", r->dir,
                                (long long)d->sample, (long long)train->batches_per_epoch, (long long)per_batch,
                                train->pattern);
    return 1;
}

// Reads this rank's part of the checkpoint in dir into t, checked against
// the run and its training data (have: its identity, on rank 0; NULL
// elsewhere). 1: read; 0: r->err says why (r->damaged: the checkpoint is
// damaged rather than of another run).
static inline int ckpt_read(CkptReader *r, const char *dir, const CkptRun *run, const DataLoader *train,
                            const DataSetId *have, CkptTargets *t, char *err) {
    int ok = ckpt_reader_open(r, dir, run, err) && ckpt_check_data(r, run, train, have);
    if (ok) ok = ckpt_read_tensors(r, t, run->cfg);
    return ok;
}

// `latest` is a hint (--resume auto takes the newest complete step
// directory): one that cannot be read or names anything but a step directory
// of the run's own there is one warning line.
static inline void ckpt_check_latest(const char *dir) {
    char path[CKPT_FILE_MAX], why[CKPT_WHY_MAX] = "";
    snprintf(path, sizeof(path), "%s/" CKPT_LATEST_FILE, dir);
    size_t len;
    char *name = ckpt_slurp(path, 4096, &len);
    if (!name && errno == ENOENT) return;  // (none yet)
    if (!name) {
        snprintf(why, sizeof(why), "%s", errno == EINVAL ? "not a small regular file" : strerror(errno));
    } else {
        name[strcspn(name, "\n")] = '\0';
        ckpt_printable(name);
        int dfd = ckpt_open_dir(dir);
        char entry_why[CKPT_WHY_MAX];
        if (ckpt_parse_step_name(name) < 0 || dfd < 0 || ckpt_step_entry(dfd, name, entry_why) != CKPT_OWN)
            snprintf(why, sizeof(why), "it names '%.100s', which is not a checkpoint directory of this run there", name);
        if (dfd >= 0) close(dfd);
        free(name);
    }
    if (why[0]) ckpt_warn("resume: ignoring %s (%s): taking the newest complete checkpoint", path, why);
}

// --resume: finds the checkpoint (auto: the newest complete one in
// --ckpt-dir, skipping damaged ones, saying so; else the directory given)
// and reads this rank's part of it into t (its hold ranges), and *point.
// Returns 1, or 0 for a fresh start (auto, and none there). Bad input (a
// damaged checkpoint given by name, one of another run): one line from the
// rank that found it, every rank exits 2.
// Collective over the data ranks.
static inline int ckpt_resume(const CkptRun *run, CommGroup *dp, const DataLoader *train, CkptTargets *t,
                              CkptPoint *point) {
    const TrainOptions *o = run->o;
    int auto_mode = strcmp(o->resume, "auto") == 0, n = 1;
    int64_t *steps = NULL;
    char dir[CKPT_PATH_MAX], err[CKPT_ERR_MAX];
    if (auto_mode) {
        if (dp->rank == 0) ckpt_check_latest(o->ckpt_dir);
        steps = ckpt_list_steps(o->ckpt_dir, &n);
        if (n == 0) {
            if (dp->rank == 0) printf("resume: no checkpoint in %s: starting fresh\n", o->ckpt_dir);
            free(steps);
            return 0;
        }
    }
    DataSetId have;  // the training data's identity (rank 0 checks it)
    if (dp->rank == 0) have = dataloader_identity(train, train->num_shards);
    for (int i = 0; i < n; i++) {
        if (auto_mode) ckpt_step_dir(dir, sizeof(dir), o->ckpt_dir, steps[i], "");
        else snprintf(dir, sizeof(dir), "%s", o->resume);
        CkptReader r;
        int ok = ckpt_read(&r, dir, run, train, dp->rank == 0 ? &have : NULL, t, err);
        if (ok) *point = r.point;
        ckpt_reader_close(&r);
        double f[2] = {(double)!ok, (double)(!ok && !r.damaged)};  // ranks that failed; of those, on a conflict (not damage)
        comm_all_reduce(dp, f, 2, COMM_F64);
        if (f[0] == 0) {
            if (dp->rank == 0 && r.version < 3)
                printf("resume: %s is a format version %d checkpoint: no manifest checksum or data set identity to "
                       "check\n", dir, r.version);
            if (dp->rank == 0 && r.data_change[0])
                fprintf(stderr, "warning: %s/manifest.json: %s; continuing on it (--resume-data-changed 1) at global "
                        "sample %lld of epoch %lld\n", dir, r.data_change, (long long)point->data.sample,
                        (long long)point->data.epoch);
            free(steps);
            return 1;
        }
        if (!auto_mode || f[1] > 0) {
            if (!ok) fprintf(stderr, "error: %s\n", err);
            fflush(stderr);
            comm_barrier(dp);
            exit(EXIT_USAGE);
        }
        if (dp->rank == 0)
            printf("resume: skipping %s: %s\n", dir, ok ? "damaged (another rank's files)" : err);
    }
    if (dp->rank == 0) printf("resume: no complete checkpoint in %s: starting fresh\n", o->ckpt_dir);
    free(steps);
    return 0;
}

#endif  // LLMC_CHECKPOINT_H
