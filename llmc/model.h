// model.h: the GPT-2 model's shape (GPTConfig, named presets) and the layout of
// its parameters in ONE flat buffer, described by a table of tensors (name,
// shape, offset, weight-decay flag, tensor-parallel split). Sharding,
// checkpoints, communication and the optimizer all work on ranges of this
// buffer, on the CPU and on the GPU alike.
//
// Layout (per-layer contiguous, so a layer -- or a pipeline stage of layers --
// is one range):
//   wte (Vp, C) | wpe (maxT, C) | layer 0 | layer 1 | ... | ln_f.weight (C) | ln_f.bias (C)
//   layer l = ln_1.w (C) ln_1.b (C) attn.qkv.w (3C, C) attn.qkv.b (3C)
//             attn.proj.w (C, C) attn.proj.b (C) ln_2.w (C) ln_2.b (C)
//             mlp.fc.w (4C, C) mlp.fc.b (4C) mlp.proj.w (C, 4C) mlp.proj.b (C)
// Every tensor starts at a multiple of PARAM_ALIGN elements (gaps are zero and
// stay zero under AdamW). A rank that holds part of the model (a pipeline
// stage's segments, a tensor-parallel slice of each tensor) lays out what it
// holds the same way in its own buffer; param_map.h maps that buffer onto the
// whole model's (the global flat order). llm.c's model file stores the same
// tensors in "all layers of one kind together" order; modelfile.h converts.
#ifndef LLMC_MODEL_H
#define LLMC_MODEL_H

#include <stdint.h>
#include <string.h>

#include "utils.h"  // defines: round_up_i64, mallocCheck, CHECK

#define PARAM_ALIGN 64        // elements; keeps every tensor 256-byte aligned
#define VOCAB_PAD_MULTIPLE 128

// Upper bounds on every dimension, from flags and model-file headers alike.
// Within them every size below is exact in int64 (the largest tensor, wte, is
// at most 2^24 x 2^16 elements; a layer at most 12 x 2^32), so only the memory
// check (train_setup.h) stands between a shape and its allocation.
#define GPT_MAX_LAYERS 1024
#define GPT_MAX_CHANNELS 65536
#define GPT_MAX_HEADS 4096
#define GPT_MAX_VOCAB (1 << 24)
#define GPT_MAX_SEQ_LEN (1 << 20)

typedef struct {
    int max_seq_len;        // maxT: rows of wpe
    int vocab_size;         // V: real tokens
    int padded_vocab_size;  // Vp: V rounded up to VOCAB_PAD_MULTIPLE (rows of wte)
    int num_layers;         // L
    int num_heads;          // NH
    int channels;           // C
} GPTConfig;

// The kinds of tensor in a layer, in layout order. Kinds below PER_LAYER_KINDS
// repeat per layer; the others appear once.
typedef enum {
    PK_LN1W, PK_LN1B, PK_QKVW, PK_QKVB, PK_ATTPROJW, PK_ATTPROJB,
    PK_LN2W, PK_LN2B, PK_FCW, PK_FCB, PK_FCPROJW, PK_FCPROJB,
    PER_LAYER_KINDS,
    PK_WTE = PER_LAYER_KINDS, PK_WPE, PK_LNFW, PK_LNFB,
    NUM_PARAM_KINDS
} ParamKind;

// How a tensor is split over the ranks of a tensor-parallel group (rows and
// cols of its global shape; param_map.h turns this into global ranges).
typedef enum {
    SPLIT_NONE,  // replicated: every rank holds all of it
    SPLIT_ROWS,  // rank r holds rows [r*R/tp, (r+1)*R/tp) (column-parallel matmuls, biases, wte's vocabulary)
    SPLIT_QKV,   // rows in three parts (q, k, v): rank r holds its heads' rows of each
    SPLIT_COLS,  // rank r holds columns [r*K/tp, (r+1)*K/tp) of every row (row-parallel matmuls)
} ParamSplit;

typedef struct {
    char name[48];      // Hugging Face style name, e.g. "h.3.attn.c_attn.weight"
    ParamKind kind;
    int layer;          // -1 for wte, wpe, ln_f
    int id;             // the tensor's place in the whole model's order (param_tensor_id)
    int ndim;           // 1 or 2
    int64_t shape[2];   // rows, cols (cols = 1 for 1-D): this rank's (local) shape
    int64_t numel;
    int64_t offset;     // elements from the start of this rank's flat buffer
    int decay;          // 1: weight decay applies (2-D tensors only)
    ParamSplit split;   // how the global tensor is split over the tensor-parallel group
} ParamTensor;

// What a rank holds of the model (a pipeline stage's parts): the embeddings
// (wte, wpe), some of the layers, ln_f.
typedef struct {
    int embeddings;               // wte and wpe
    int lnf;                      // ln_f
    const unsigned char *layers;  // (L): 1 where the layer is held; NULL: every layer
} ParamHolding;

// The parameters a rank holds, laid out in ONE flat buffer: the held tensors
// in the whole model's order (wte, wpe, layers ascending, ln_f), each at its
// local shape (its tensor-parallel slice), each starting at a multiple of
// PARAM_ALIGN. The whole model on one rank is the global layout: its offsets
// are the global flat order that checkpoints, model files and the param_map.h
// mapping refer to.
typedef struct {
    GPTConfig cfg;              // the whole model's shape
    int tp, tp_rank;            // tensor parallel: tensors split over tp ranks, this rank's slice (1, 0: whole)
    int num_tensors;            // tensors held
    ParamTensor *tensors;       // held, in layout order
    int *tensor_at;             // (4 + 12L): the index in tensors of each tensor id, -1 when not held
    int64_t *segment_lo;        // (L + 2): each segment's range [lo, hi) of the buffer; -1 when not held
    int64_t *segment_hi;
    int64_t num_params;         // sum of numel (parameters held)
    int64_t num_elements;       // length of the flat buffer, alignment gaps included
    int64_t layer_stride;       // elements per layer (every layer has the same size)
} ParamLayout;

// ---------------------------------------------------------------------------
// configs

static inline int pad_vocab(int V) { return (int)round_up_i64(V, VOCAB_PAD_MULTIPLE); }  // V <= GPT_MAX_VOCAB

// Named presets; returns 0 if name is not one. d12 = GPT-2 124M, d24 = 350M,
// d36 = 774M, d48 = 1558M.
static inline int gpt_config_preset(const char *name, GPTConfig *cfg) {
    static const struct { const char *name; int L, C, NH; } presets[] = {
        {"d12", 12, 768, 12}, {"d24", 24, 1024, 16}, {"d36", 36, 1280, 20}, {"d48", 48, 1600, 25},
    };
    for (size_t i = 0; i < sizeof(presets) / sizeof(presets[0]); i++) {
        if (strcmp(name, presets[i].name) == 0) {
            cfg->num_layers = presets[i].L;
            cfg->channels = presets[i].C;
            cfg->num_heads = presets[i].NH;
            cfg->max_seq_len = 1024;
            cfg->vocab_size = 50257;
            cfg->padded_vocab_size = pad_vocab(50257);
            return 1;
        }
    }
    return 0;
}

// Validates a config; returns NULL if fine, else a static message.
static inline const char *gpt_config_problem(const GPTConfig *c) {
    if (c->num_layers < 1 || c->num_layers > GPT_MAX_LAYERS) return "n-layer must be in [1, 1024]";
    if (c->channels < 1 || c->channels > GPT_MAX_CHANNELS) return "n-embd must be in [1, 65536]";
    if (c->num_heads < 1 || c->num_heads > GPT_MAX_HEADS) return "n-head must be in [1, 4096]";
    if (c->channels % c->num_heads != 0) return "n-embd must be a multiple of n-head";
    if (c->vocab_size < 2 || c->vocab_size > GPT_MAX_VOCAB) return "vocab-size must be in [2, 16777216]";
    if (c->padded_vocab_size < c->vocab_size) return "padded vocab smaller than vocab";
    if (c->padded_vocab_size > GPT_MAX_VOCAB) return "padded vocab must be <= 16777216";
    if (c->max_seq_len < 1 || c->max_seq_len > GPT_MAX_SEQ_LEN) return "max-seq-len must be in [1, 1048576]";
    return NULL;
}

// ---------------------------------------------------------------------------
// parameter table

// The global shape of a kind's tensor, and how tensor parallelism splits it.
static inline ParamSplit param_kind_split(ParamKind k) {
    switch (k) {
        case PK_WTE: case PK_FCW: case PK_FCB: return SPLIT_ROWS;
        case PK_QKVW: case PK_QKVB: return SPLIT_QKV;
        case PK_ATTPROJW: case PK_FCPROJW: return SPLIT_COLS;
        default: return SPLIT_NONE;  // wpe, LayerNorms, the biases added after a row-parallel matmul
    }
}

static inline void param_kind_shape(const GPTConfig *c, ParamKind k, int64_t shape[2]) {
    int64_t C = c->channels;
    switch (k) {
        case PK_WTE: shape[0] = c->padded_vocab_size; shape[1] = C; return;
        case PK_WPE: shape[0] = c->max_seq_len; shape[1] = C; return;
        case PK_QKVW: shape[0] = 3 * C; shape[1] = C; return;
        case PK_QKVB: shape[0] = 3 * C; shape[1] = 1; return;
        case PK_ATTPROJW: shape[0] = C; shape[1] = C; return;
        case PK_FCW: shape[0] = 4 * C; shape[1] = C; return;
        case PK_FCB: shape[0] = 4 * C; shape[1] = 1; return;
        case PK_FCPROJW: shape[0] = C; shape[1] = 4 * C; return;
        default: shape[0] = C; shape[1] = 1; return;  // layernorm weights/biases, C-sized biases
    }
}

static inline const char *param_kind_suffix(ParamKind k) {
    static const char *suffix[NUM_PARAM_KINDS] = {
        "ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
        "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
        "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias",
        "wte.weight", "wpe.weight", "ln_f.weight", "ln_f.bias",
    };
    return suffix[k];
}

// Tensor ids: the whole model's order, wte 0, wpe 1, layer l's kind k 2 + 12 l + k, ln_f 2 + 12 L and 3 + 12 L.
static inline int param_num_tensor_ids(const GPTConfig *c) { return 4 + PER_LAYER_KINDS * c->num_layers; }
static inline int param_tensor_id(const GPTConfig *c, ParamKind k, int layer) {
    if (k == PK_WTE) return 0;
    if (k == PK_WPE) return 1;
    if (k == PK_LNFW) return 2 + PER_LAYER_KINDS * c->num_layers;
    if (k == PK_LNFB) return 3 + PER_LAYER_KINDS * c->num_layers;
    return 2 + layer * PER_LAYER_KINDS + (int)k;
}

// Why tp does not split this model's tensors evenly (NULL: it does).
static inline const char *param_tp_problem(const GPTConfig *c, int tp) {
    if (c->num_heads % tp != 0) return "n-head is not a multiple of the tensor-parallel size";
    if (c->channels % tp != 0) return "n-embd is not a multiple of the tensor-parallel size";
    if (c->padded_vocab_size % tp != 0) return "the padded vocabulary is not a multiple of the tensor-parallel size";
    return NULL;
}

static inline void param_layout_add(ParamLayout *pl, ParamKind k, int layer, int64_t *cursor) {
    ParamTensor *t = &pl->tensors[pl->num_tensors];
    memset(t, 0, sizeof(*t));
    t->kind = k;
    t->layer = layer;
    t->id = param_tensor_id(&pl->cfg, k, layer);
    t->split = pl->tp > 1 ? param_kind_split(k) : SPLIT_NONE;
    param_kind_shape(&pl->cfg, k, t->shape);
    t->ndim = t->shape[1] == 1 ? 1 : 2;
    if (t->split == SPLIT_ROWS || t->split == SPLIT_QKV) t->shape[0] /= pl->tp;
    if (t->split == SPLIT_COLS) t->shape[1] /= pl->tp;
    t->numel = t->shape[0] * t->shape[1];
    t->decay = t->ndim == 2;
    t->offset = *cursor;
    if (layer >= 0) snprintf(t->name, sizeof(t->name), "h.%d.%s", layer, param_kind_suffix(k));
    else snprintf(t->name, sizeof(t->name), "%s", param_kind_suffix(k));
    *cursor = round_up_i64(*cursor + t->numel, PARAM_ALIGN);
    pl->num_params += t->numel;
    pl->tensor_at[t->id] = pl->num_tensors++;
}

// The layout of what `held` names (NULL: the whole model) at tensor-parallel
// slice tp_rank of tp (param_tp_problem(cfg, tp) must be NULL).
static inline void param_layout_init_held(ParamLayout *pl, const GPTConfig *cfg, const ParamHolding *held, int tp,
                                          int tp_rank) {
    memset(pl, 0, sizeof(*pl));
    pl->cfg = *cfg;
    pl->tp = tp, pl->tp_rank = tp_rank;
    int L = cfg->num_layers, ids = param_num_tensor_ids(cfg);
    pl->tensors = (ParamTensor *)mallocCheck(sizeof(ParamTensor) * (size_t)ids);
    pl->tensor_at = (int *)mallocCheck(sizeof(int) * (size_t)ids);
    for (int i = 0; i < ids; i++) pl->tensor_at[i] = -1;
    pl->segment_lo = (int64_t *)mallocCheck(sizeof(int64_t) * (size_t)(L + 2));
    pl->segment_hi = (int64_t *)mallocCheck(sizeof(int64_t) * (size_t)(L + 2));
    for (int s = 0; s < L + 2; s++) pl->segment_lo[s] = pl->segment_hi[s] = -1;
    int64_t cursor = 0;
    if (!held || held->embeddings) {
        pl->segment_lo[0] = cursor;
        param_layout_add(pl, PK_WTE, -1, &cursor);
        param_layout_add(pl, PK_WPE, -1, &cursor);
        pl->segment_hi[0] = cursor;
    }
    for (int l = 0; l < L; l++) {
        int64_t begin = cursor;
        if (held && held->layers && !held->layers[l]) continue;
        pl->segment_lo[l + 1] = cursor;
        for (int k = 0; k < PER_LAYER_KINDS; k++) param_layout_add(pl, (ParamKind)k, l, &cursor);
        pl->segment_hi[l + 1] = cursor;
        pl->layer_stride = cursor - begin;
    }
    if (!held || held->lnf) {
        pl->segment_lo[L + 1] = cursor;
        param_layout_add(pl, PK_LNFW, -1, &cursor);
        param_layout_add(pl, PK_LNFB, -1, &cursor);
        pl->segment_hi[L + 1] = cursor;
    }
    pl->num_elements = cursor;
}

// The whole model on one rank: the global flat order.
static inline void param_layout_init(ParamLayout *pl, const GPTConfig *cfg) {
    param_layout_init_held(pl, cfg, NULL, 1, 0);
}

static inline void param_layout_free(ParamLayout *pl) {
    free(pl->tensors);
    free(pl->tensor_at);
    free(pl->segment_lo);
    free(pl->segment_hi);
    memset(pl, 0, sizeof(*pl));
}

// The tensor of a kind (layer >= 0 for per-layer kinds, ignored otherwise), or NULL when not held.
static inline const ParamTensor *param_tensor_held(const ParamLayout *pl, ParamKind k, int layer) {
    int at = pl->tensor_at[param_tensor_id(&pl->cfg, k, layer)];
    return at < 0 ? NULL : &pl->tensors[at];
}
// The same, held (a bug otherwise).
static inline const ParamTensor *param_tensor(const ParamLayout *pl, ParamKind k, int layer) {
    const ParamTensor *t = param_tensor_held(pl, k, layer);
    CHECK(t, "tensor kind %d of layer %d is not held here", (int)k, layer);
    return t;
}

// ---------------------------------------------------------------------------
// segments: the unit of ZeRO-3 gathering and of overlapped gradient reduction.
// Segment 0 = embeddings (wte, wpe), 1..L = transformer layers 0..L-1,
// L+1 = ln_f; each held one is one contiguous range of the flat buffer.

static inline int param_num_segments(const ParamLayout *pl) { return pl->cfg.num_layers + 2; }
static inline int param_segment_held(const ParamLayout *pl, int s) {
    return s >= 0 && s < param_num_segments(pl) && pl->segment_lo[s] >= 0;
}

static inline void param_segment_range(const ParamLayout *pl, int s, int64_t *lo, int64_t *hi) {
    CHECK(param_segment_held(pl, s), "segment %d is not held here", s);
    *lo = pl->segment_lo[s];
    *hi = pl->segment_hi[s];
}

static inline int64_t layer_offset(const ParamLayout *pl, int layer) {
    CHECK(param_segment_held(pl, layer + 1), "layer %d is not held here", layer);
    return pl->segment_lo[layer + 1];
}

// The segment holding a tensor of kind k (layer as for param_tensor).
static inline int param_segment_of(const ParamLayout *pl, ParamKind k, int layer) {
    if (k < PER_LAYER_KINDS) return layer + 1;
    return k == PK_LNFW || k == PK_LNFB ? pl->cfg.num_layers + 1 : 0;
}

// Hooks let a distributed layer (ZeRO, overlapped gradient reduction) act at
// segment boundaries without the model code knowing about communication. Both
// models (gpt_cpu.h, gpt_gpu.cuh) call them, with meanings that do not depend
// on the order of the calls (a pipeline stage runs its micro-batches' passes
// in any order its schedule says).
typedef enum {
    HOOK_FORWARD,   // the weights will be read (forward)
    HOOK_BACKWARD,  // the weights will be read and the gradients written (backward)
    HOOK_GRADS,     // only the gradients will be written (the weight gradients of a split backward)
} HookUse;
typedef struct {
    void *ctx;
    // before work that reads segment s's weights or writes its gradients is
    // done (CPU) or queued (GPU): the segment is made resident
    void (*params_needed)(void *ctx, int segment, HookUse use);
    // the pass will need segment s next: it may be made resident ahead (ZeRO-3's gather)
    void (*prefetch)(void *ctx, int segment);
    // called when a segment's gradients for this pass are complete (GPU: queued on the model's stream)
    void (*grads_ready)(void *ctx, int segment);
} GPTHooks;

static inline void gpt_hooks_params_needed(const GPTHooks *h, int segment, HookUse use) {
    if (h->params_needed) h->params_needed(h->ctx, segment, use);
}
static inline void gpt_hooks_prefetch(const GPTHooks *h, const ParamLayout *pl, int segment) {
    if (h->prefetch && param_segment_held(pl, segment)) h->prefetch(h->ctx, segment);
}
static inline void gpt_hooks_grads_ready(const GPTHooks *h, int segment) {
    if (h->grads_ready) h->grads_ready(h->ctx, segment);
}

// Pointers to one layer's tensors inside a flat buffer (parameters or gradients).
typedef struct {
    float *ln1w, *ln1b, *qkvw, *qkvb, *attprojw, *attprojb;
    float *ln2w, *ln2b, *fcw, *fcb, *fcprojw, *fcprojb;
} LayerTensors;

static inline LayerTensors layer_tensors(const ParamLayout *pl, float *base, int l) {
    LayerTensors t;
    float **slots[PER_LAYER_KINDS] = {&t.ln1w, &t.ln1b, &t.qkvw, &t.qkvb, &t.attprojw, &t.attprojb,
                                      &t.ln2w, &t.ln2b, &t.fcw, &t.fcb, &t.fcprojw, &t.fcprojb};
    for (int k = 0; k < PER_LAYER_KINDS; k++) *slots[k] = base + param_tensor(pl, (ParamKind)k, l)->offset;
    return t;
}

// ---------------------------------------------------------------------------
// FLOP accounting (model FLOPs, as in the PaLM paper's MFU): per token,
// 6 * (matmul parameters, classifier over the real vocabulary included, wpe and
// layernorms excluded) + 12 * L * C * T for attention scores and values.
static inline double gpt_flops_per_token(const GPTConfig *c, int T) {
    double C = c->channels, L = c->num_layers;
    double matmul_params = L * (12.0 * C * C) + (double)c->vocab_size * C;
    return 6.0 * matmul_params + 12.0 * L * C * T;
}

#endif  // LLMC_MODEL_H
