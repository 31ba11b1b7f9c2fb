// ckpt_format.h: what a training checkpoint is on disk, shared by the writer
// (ckpt_writer.h) and the reader (ckpt_reader.h): the ranges each rank holds
// and writes, the run's description, each data file's record and the
// manifest's text.
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
#ifndef LLMC_CKPT_FORMAT_H
#define LLMC_CKPT_FORMAT_H

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"           // defines: FLAG_STR_MAX
#include "ckpt_manifest.h"  // defines: CKPT_STATES, CKPT_FORMAT, CKPT_VERSION, CKPT_STATE_NAMES, ckpt_seal_line
#include "dataloader.h"     // defines: DataLoaderState, DataSetId
#include "model.h"          // defines: ParamLayout, param_segment_held, GPTConfig, param_tp_problem, ...
#include "rand.h"           // defines: Rng
#include "utils.h"          // defines: CHECK, reallocCheck, callocCheck, array_room
#include "zero_shard.h"     // defines: ShardMap

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
    array_room(p->r, p->n, p->cap, 8);
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

// What the checkpoint code takes of the run's flags (checkpoint.h fills it
// from the trainer's options).
#define CKPT_FLAG_JSON_MAX (FLAG_STR_MAX + 8)
typedef struct {
    char dir[FLAG_STR_MAX];     // --ckpt-dir ("": none)
    int every, keep, compress;  // --ckpt-every, --ckpt-keep, --ckpt-compress
    int writer_cores;           // --ckpt-writer-cores (-1: auto, counted at start-up)
    char resume[FLAG_STR_MAX];  // --resume: "", "auto" or a checkpoint directory
    int resume_data_changed;    // --resume-data-changed
    int steps;                  // --steps
    int zero;                   // --zero
    char kept[CKPT_NUM_KEPT_FLAGS][CKPT_FLAG_JSON_MAX];  // CKPT_KEPT_FLAGS' values, as the manifest writes them (JSON)
} CkptSettings;

// What the manifest describes of the run, the same for every checkpoint of it.
typedef struct {
    CkptSettings set;
    const GPTConfig *cfg;
    const ParamLayout *pl;
    long long total_tokens;  // the batch plan: tokens a step over all ranks, B x T x data ranks x accum
    int B, T, accum;
    int ranks, dp, tp, pp;   // the layout: ranks, and the data, tensor and pipeline sizes of the grid
    const char *trainer;     // "train_gpt" | "train_gptcu"
    int lr_decay_steps;      // the schedule's length (the loop's: --lr-decay-steps, --steps or the resumed one's)
} CkptRun;

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
    for (int i = 0; i < CKPT_NUM_KEPT_FLAGS; i++)
        ckpt_text(&t, "%s\"%s\": %s", i ? ", " : "", CKPT_KEPT_FLAGS[i], run->set.kept[i]);
    ckpt_text(&t, ", \"lr-decay-steps\": %d, \"steps\": %d", run->lr_decay_steps, run->set.steps);
    ckpt_text(&t, "},\n  \"batch\": {\"total_tokens\": %lld, \"B\": %d, \"T\": %d, \"accum\": %d},\n",
              run->total_tokens, run->B, run->T, run->accum);
    ckpt_text(&t, "  \"layout\": {\"ranks\": %d, \"dp\": %d, \"tp\": %d, \"pp\": %d, \"zero\": %d},\n", run->ranks,
              run->dp, run->tp, run->pp, run->set.zero);
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

#endif  // LLMC_CKPT_FORMAT_H
