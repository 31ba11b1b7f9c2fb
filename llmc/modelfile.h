// modelfile.h: llm.c's model file format, so weights move between this
// program, llm.c and PyTorch (dev/reference/gpt_reference.py).
//   header: 256 int32: [0] 20240326 magic, [1] version (3: fp32, 5: bf16),
//           [2] maxT, [3] V, [4] L, [5] NH, [6] C, [7] Vp
//   then the 16 tensors in GPT-2 order, each with all layers stacked:
//   wte (Vp,C) wpe (maxT,C) ln1w (L,C) ln1b (L,C) qkvw (L,3C,C) qkvb (L,3C)
//   attprojw (L,C,C) attprojb (L,C) ln2w (L,C) ln2b (L,C) fcw (L,4C,C)
//   fcb (L,4C) fcprojw (L,C,4C) fcprojb (L,C) lnfw (C) lnfb (C)
// Our flat buffer is per-layer contiguous (model.h); these functions convert.
// Writes go to PATH.tmp and are renamed into place, so a file is complete or absent.
#ifndef LLMC_MODELFILE_H
#define LLMC_MODELFILE_H

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "model.h"

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
    FILE *f = fopenCheck(path, "rb");
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
    cfg->padded_vocab_size = header[7] ? header[7] : pad_vocab(header[3]);
    const char *problem = gpt_config_problem(cfg);
    if (problem) die_usage("'%s': bad model header (%s)", path, problem);
    return header[1];
}

typedef struct { FILE *f; const char *path; float *params; int version; } ModelFileIO;

static void modelfile_read_tensor(const ParamTensor *t, void *ctx) {
    ModelFileIO *io = (ModelFileIO *)ctx;
    float *dst = io->params + t->offset;
    if (io->version == MODELFILE_FP32) {
        freadExact(dst, sizeof(float), (size_t)t->numel, io->f, io->path);
        return;
    }
    // bf16: read into the first half of the tensor's own storage, widen back to front
    uint16_t *bf = (uint16_t *)dst;
    freadExact(bf, sizeof(uint16_t), (size_t)t->numel, io->f, io->path);
    for (int64_t i = t->numel - 1; i >= 0; i--) {
        uint32_t bits = (uint32_t)bf[i] << 16;
        memcpy(&dst[i], &bits, sizeof(bits));
    }
}

// Loads a model file whose config equals pl->cfg into params (the flat buffer).
static void modelfile_load(const char *path, const ParamLayout *pl, float *params) {
    GPTConfig cfg;
    int version = modelfile_read_config(path, &cfg);
    if (memcmp(&cfg, &pl->cfg, sizeof(cfg)) != 0) die_usage("'%s': model shape differs from the configured model", path);
    size_t elem = version == MODELFILE_FP32 ? 4 : 2;
    struct stat st;
    if (stat(path, &st) != 0) die_usage("cannot stat '%s'", path);
    size_t want = 256 * sizeof(int) + (size_t)pl->num_params * elem;
    if ((size_t)st.st_size != want)
        die_usage("'%s' has %lld bytes, expected %zu for this model (truncated or wrong file)", path,
                  (long long)st.st_size, want);
    FILE *f = fopenCheck(path, "rb");
    fseek(f, 256 * sizeof(int), SEEK_SET);
    memset(params, 0, sizeof(float) * (size_t)pl->num_elements);
    ModelFileIO io = {f, path, params, version};
    modelfile_for_each(pl, modelfile_read_tensor, &io);
    fclose(f);
}

static void modelfile_write_tensor(const ParamTensor *t, void *ctx) {
    ModelFileIO *io = (ModelFileIO *)ctx;
    fwriteExact(io->params + t->offset, sizeof(float), (size_t)t->numel, io->f, io->path);
}

// Writes params as an fp32 (version 3) model file, atomically.
static void modelfile_save(const char *path, const ParamLayout *pl, const float *params) {
    char tmp[FILENAME_MAX];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    if (!f) die_usage("cannot write model file '%s'", tmp);
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
    fwriteExact(header, sizeof(int), 256, f, tmp);
    ModelFileIO io = {f, tmp, (float *)params, MODELFILE_FP32};
    modelfile_for_each(pl, modelfile_write_tensor, &io);
    if (fflush(f) != 0 || fsync(fileno(f)) != 0) die_usage("writing '%s' failed", tmp);
    fcloseCheck(f, tmp);
    if (rename(tmp, path) != 0) die_usage("cannot rename '%s' to '%s'", tmp, path);
}

#endif  // LLMC_MODELFILE_H
