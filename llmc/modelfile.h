// modelfile.h: llm.c's model file format, so weights move between this
// program, llm.c and PyTorch (dev/reference/gpt_reference.py).
//   header: 256 int32: [0] 20240326 magic, [1] version (3: fp32, 5: bf16),
//           [2] maxT, [3] V, [4] L, [5] NH, [6] C, [7] Vp
//   then the 16 tensors in GPT-2 order, each with all layers stacked:
//   wte (Vp,C) wpe (maxT,C) ln1w (L,C) ln1b (L,C) qkvw (L,3C,C) qkvb (L,3C)
//   attprojw (L,C,C) attprojb (L,C) ln2w (L,C) ln2b (L,C) fcw (L,4C,C)
//   fcb (L,4C) fcprojw (L,C,4C) fcprojb (L,C) lnfw (C) lnfb (C)
// Our flat buffer is per-layer contiguous (model.h); these functions convert.
// Writes go through file_io.h's AtomicOut, so a file is complete or absent.
// A header is checked (bounds on every dimension, model.h) and the file's size
// against the header before any tensor is allocated or read.
#ifndef LLMC_MODELFILE_H
#define LLMC_MODELFILE_H

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "file_io.h"    // defines: open_input, AtomicOut, atomic_out_write, atomic_out_open, ...
#include "model.h"      // defines: ParamKind, NUM_PARAM_KINDS, PK_WTE, PK_WPE, ...
#include "param_map.h"  // defines: param_slice_from_global

#define MODELFILE_MAGIC 20240326
#define MODELFILE_FP32 3
#define MODELFILE_BF16 5

// The file's tensor order: kinds, each over all layers when per-layer.
static const ParamKind MODELFILE_ORDER[NUM_PARAM_KINDS] = {
    PK_WTE, PK_WPE, PK_LN1W, PK_LN1B, PK_QKVW, PK_QKVB, PK_ATTPROJW, PK_ATTPROJB,
    PK_LN2W, PK_LN2B, PK_FCW, PK_FCB, PK_FCPROJW, PK_FCPROJB, PK_LNFW, PK_LNFB,
};

// Calls visit(tensor, ctx) for every tensor in file order.
static void modelfile_for_each(const ParamLayout *pl, void (*visit)(const ParamTensor *, void *), void *ctx) {
    for (int k = 0; k < NUM_PARAM_KINDS; k++) {
        ParamKind kind = MODELFILE_ORDER[k];
        int layers = kind < PER_LAYER_KINDS ? pl->cfg.num_layers : 1;
        for (int l = 0; l < layers; l++) visit(param_tensor(pl, kind, kind < PER_LAYER_KINDS ? l : -1), ctx);
    }
}

// Reads only the header: fills cfg, returns the version. Any problem is a
// usage error naming the file.
static int modelfile_read_config(const char *path, GPTConfig *cfg) {
    FILE *f = open_input(path, "--model", NULL);
    int header[256];
    freadExact(header, sizeof(int), 256, f, path);
    fclose(f);
    if (header[0] != MODELFILE_MAGIC) die_usage("'%s' is not an llm.c model file (bad magic %d)", path, header[0]);
    if (header[1] != MODELFILE_FP32 && header[1] != MODELFILE_BF16)
        die_usage("'%s': unsupported model file version %d (want 3 fp32 or 5 bf16)", path, header[1]);
    cfg->max_seq_len = header[2];
    cfg->vocab_size = header[3];
    cfg->num_layers = header[4];
    cfg->num_heads = header[5];
    cfg->channels = header[6];
    cfg->padded_vocab_size = header[7] ? header[7] : header[3];
    const char *problem = gpt_config_problem(cfg);
    if (problem) die_usage("'%s': bad model header (%s)", path, problem);
    if (!header[7]) cfg->padded_vocab_size = pad_vocab(header[3]);
    return header[1];
}

typedef struct {
    FILE *f;
    const char *path;
    const ParamLayout *local, *global;
    float *params;   // (local->num_elements)
    float *scratch;  // a split tensor's global values
    int version;
} ModelFileIO;

// n values at dst from the file: fp32, or bf16 read into the first half of
// dst's own storage and widened back to front.
static void modelfile_read_values(ModelFileIO *io, float *dst, int64_t n) {
    if (io->version == MODELFILE_FP32) {
        freadExact(dst, sizeof(float), (size_t)n, io->f, io->path);
        return;
    }
    uint16_t *bf = (uint16_t *)dst;
    freadExact(bf, sizeof(uint16_t), (size_t)n, io->f, io->path);
    for (int64_t i = n - 1; i >= 0; i--) {
        uint32_t bits = (uint32_t)bf[i] << 16;
        memcpy(&dst[i], &bits, sizeof(bits));
    }
}

// One tensor of the file (a tensor of the global layout): into the rank's
// buffer where it holds it (its slice of a split tensor), else skipped.
static void modelfile_read_tensor(const ParamTensor *g, void *ctx) {
    ModelFileIO *io = (ModelFileIO *)ctx;
    int at = io->local->tensor_at[g->id];
    if (at < 0) {
        if (fseek(io->f, (long)(g->numel * (io->version == MODELFILE_FP32 ? 4 : 2)), SEEK_CUR) != 0)
            die_usage("cannot seek in '%s'", io->path);
        return;
    }
    const ParamTensor *t = &io->local->tensors[at];
    if (t->split == SPLIT_NONE) {
        modelfile_read_values(io, io->params + t->offset, t->numel);
        return;
    }
    modelfile_read_values(io, io->scratch, g->numel);
    param_slice_from_global(io->local, io->global, t, io->scratch, io->params);
}

// Loads a model file whose config equals pl->cfg into params (the flat buffer
// of pl: the whole model, or what a rank holds of it).
static void modelfile_load(const char *path, const ParamLayout *pl, float *params) {
    GPTConfig cfg;
    int version = modelfile_read_config(path, &cfg);
    if (memcmp(&cfg, &pl->cfg, sizeof(cfg)) != 0) die_usage("'%s': model shape differs from the configured model", path);
    size_t elem = version == MODELFILE_FP32 ? 4 : 2;
    int64_t size;
    FILE *f = open_input(path, "--model", &size);
    ParamLayout global;
    param_layout_init(&global, &cfg);
    int64_t want = 256 * (int64_t)sizeof(int) + global.num_params * (int64_t)elem;  // exact within model.h's bounds
    if (size != want)
        die_usage("'%s' has %lld bytes, expected %lld for this model (truncated or wrong file)", path,
                  (long long)size, (long long)want);
    if (fseek(f, 256 * sizeof(int), SEEK_SET) != 0) die_usage("cannot seek in '%s'", path);
    memset(params, 0, sizeof(float) * (size_t)pl->num_elements);
    float *scratch = NULL;
    if (pl->tp > 1) {
        int64_t most = 0;
        for (int k = 0; k < global.num_tensors; k++)
            if (global.tensors[k].numel > most) most = global.tensors[k].numel;
        scratch = (float *)mallocCheck(sizeof(float) * (size_t)most);
    }
    ModelFileIO io = {f, path, pl, &global, params, scratch, version};
    modelfile_for_each(&global, modelfile_read_tensor, &io);
    free(scratch);
    param_layout_free(&global);
    fclose(f);
}

// Where a writer gets the weights: fetch fills dst (hi - lo floats) with [lo, hi)
// of the global flat order. On the ranks that do not write the file dst is
// NULL: they only serve the writer (param_gather.h's fetch sends their pieces).
typedef void (*ModelFileFetch)(void *ctx, int64_t lo, int64_t hi, float *dst);
#define MODELFILE_CHUNK_ELEMS ((int64_t)1 << 22)  // floats fetched and written at a time (16 MB)

typedef struct {
    AtomicOut *out;  // NULL: this rank only serves fetches
    ModelFileFetch fetch;
    void *ctx;
    float *chunk;    // (MODELFILE_CHUNK_ELEMS) on the writer
} ModelFileWriter;

static void modelfile_write_tensor(const ParamTensor *t, void *ctx) {
    ModelFileWriter *w = (ModelFileWriter *)ctx;
    for (int64_t lo = t->offset, end = t->offset + t->numel; lo < end; lo += MODELFILE_CHUNK_ELEMS) {
        int64_t hi = end - lo < MODELFILE_CHUNK_ELEMS ? end : lo + MODELFILE_CHUNK_ELEMS;
        w->fetch(w->ctx, lo, hi, w->chunk);
        if (w->out) atomic_out_write(w->out, w->chunk, sizeof(float) * (size_t)(hi - lo));
    }
}

// Writes an fp32 (version 3) model file, atomically, fetching the weights
// chunk by chunk in file order, so no rank holds more than one chunk of
// another's. Called on every rank that serves fetches, in the same order;
// path is NULL on all but the one that writes.
static void modelfile_save_streamed(const char *path, const ParamLayout *pl, ModelFileFetch fetch, void *ctx) {
    AtomicOut out;
    float *chunk = NULL;
    if (path) {
        atomic_out_open(&out, path);
        int header[256] = {0};
        const GPTConfig *c = &pl->cfg;
        header[0] = MODELFILE_MAGIC;
        header[1] = MODELFILE_FP32;
        header[2] = c->max_seq_len;
        header[3] = c->vocab_size;
        header[4] = c->num_layers;
        header[5] = c->num_heads;
        header[6] = c->channels;
        header[7] = c->padded_vocab_size;
        atomic_out_write(&out, header, sizeof(header));
        chunk = (float *)mallocCheck(sizeof(float) * (size_t)MODELFILE_CHUNK_ELEMS);
    }
    ModelFileWriter w = {path ? &out : NULL, fetch, ctx, chunk};
    modelfile_for_each(pl, modelfile_write_tensor, &w);
    if (path) {
        atomic_out_commit(&out);
        free(chunk);
    }
}

static void modelfile_fetch_local(void *ctx, int64_t lo, int64_t hi, float *dst) {
    memcpy(dst, (const float *)ctx + lo, sizeof(float) * (size_t)(hi - lo));
}

// Writes params (the whole flat buffer, in this process) as an fp32 model file, atomically.
static void modelfile_save(const char *path, const ParamLayout *pl, const float *params) {
    modelfile_save_streamed(path, pl, modelfile_fetch_local, (void *)params);
}

#endif  // LLMC_MODELFILE_H
