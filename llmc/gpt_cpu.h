// gpt_cpu.h: the GPT-2 model on the CPU in fp32: parameters and gradients as
// flat buffers laid out by model.h's table, activations for one micro-batch,
// forward (with the classifier's backward fused in when training), backward,
// and GPT-2 weight initialisation. A pipeline stage runs a contiguous range of
// layers on one micro-batch's activations (gpt_stage_*); the backward can run
// its input gradients (B) and its weight gradients (W) apart.
//
// Tensor parallel (tensor_parallel.h): with a tensor group of tp > 1 ranks the
// model holds its slice of every split tensor (model.h) and runs its heads
// and MLP columns; each block half's partial output is completed over the
// group (all-reduce, or with sequence parallel reduce-scatter, the region's
// input then all-gathered), the token embedding and the classifier run over
// the rank's slice of the vocabulary, and the loss is a vocabulary-parallel
// softmax cross-entropy that never gathers the logits. With tp = 1 every
// step is the single-process arithmetic.
//
// Activation recompute (recompute.h): a layer whose policy is selective keeps
// neither its softmax probabilities nor its GELU output, full keeps only its
// input (the layer before's output); their buffers are one shared copy per
// activation set (gpt_activation_sizes.h's gpt_act_shared), which the backward
// fills again right before the layer's backward (and a split backward's
// weight gradients) read it, with the forward's own code: the same bits.
//
// Sharded state (ZeroSharding, zero_shard.h), by ZeRO stage: the model owns
// its weights, gradients and AdamW state and updates them (gpt_update);
// zero_cpu.h only communicates, through the hooks.
//   0: everything whole; AdamW m and v over the whole buffer.
//   1: AdamW m and v of one shard (zero_shard.h) of the flat buffer only; the
//      shard's reduced gradients stay at their place in grads (grad_shard
//      points there).
//   2: also the reduced gradients of the shard in a buffer of their own
//      (grad_shard); grads holds a pass's gradients until they are reduced.
//   3: also the fp32 weights: the shard's (param_shard) are the master copy,
//      params holds only the segments gathered for a pass.
// params and grads are zeroed mappings (utils.h's map_zeroed) whose released
// ranges hold no memory and read as zero.
//
// Hooks (model.h's GPTHooks) let a distributed layer (ZeRO, overlapped
// gradient reduction) act at segment boundaries.
#ifndef LLMC_GPT_CPU_H
#define LLMC_GPT_CPU_H

#include <string.h>

#include "ckpt_stage.h"            // defines: ckpt_stage_chunks, ckpt_stage_chunk
#include "context_parallel.h"      // defines: CPContext, cp_attention_*, cp_local_wpe, cp_local_dwpe, cp_add_dwpe
#include "cpu_layers.h"            // defines: the layers (encoder_*, layernorm_*, attention_*, ...)
#include "gpt_activation_sizes.h"  // defines: gpt_activation_sizes, gpt_attention_scratch_floats, gpt_act_shared, gpt_act_slot_floats, GPT_ACT_PER_LAYER, GPT_ACT_SINGLES
#include "model.h"                 // defines: GPTConfig, ParamLayout, LayerTensors, GPTHooks
#include "model_init.h"            // defines: gpt2_init_params (for the trainers)
#include "optimizer.h"             // defines: AdamWConfig, adamw_update_range, adamw_update_staged, ADAMW_GRADS_LOCAL, ...
#include "rand.h"                  // defines: Rng
#include "recompute.h"             // defines: RecomputePolicy, RecomputeKind, recompute_layer
#include "tensor_parallel.h"       // defines: TPContext, tp_all_reduce, tp_*_rows, tp_sample_token
#include "zero_shard.h"            // defines: ZeroSharding, zero_sharding, ShardMap, shard_map_init

// One micro-batch's activations for a stage: layers [l0, l1) of the model
// (all of them for one process), with the embeddings when l0 == 0 and ln_f,
// the classifier and the loss when l1 == L. Per-layer arrays are indexed by
// the global layer (NULL outside [l0, l1)). N = B * T positions; with tensor
// parallelism Cl = C/tp, NHl = NH/tp (this rank's heads and MLP columns),
// Vl = this rank's real vocabulary ids, and Nl = N/tp rows between the
// tensor-parallel regions under sequence parallel (else N). A layer that
// recomputes (recompute.h) points its dropped buffers at the set's shared copy.
typedef struct {
    float **ln1, **ln1_mean, **ln1_rstd;   // (N,C) (Nl) (Nl): ln1 whole, all-gathered under sequence parallel
    float **qkv;                           // (N,3Cl)
    float **atty;                          // (N,Cl) attention output before projection
    float **att;                           // (B,NHl,T,T) softmax probabilities (context parallel: context_parallel.h's)
    float **residual2;                     // (Nl,C) after the attention block
    float **ln2, **ln2_mean, **ln2_rstd;   // (N,C) (Nl) (Nl)
    float **fch, **fch_gelu;               // (N,4Cl)
    float **residual3;                     // (Nl,C) output of the layer (l1-1's: the stage's output)
    // split backward only (the weight gradients run later, from these):
    float **dmlp_out;                      // (N,C) gradient at the layer's output (the MLP projection's)
    float **dfch;                          // (N,4Cl) gradient at the MLP's hidden pre-activation
    float **datt_out;                      // (N,C) gradient at the attention projection's output
    float **dqkv_l;                        // (N,3Cl) gradient at qkv
    float *encoded;                        // (Nl,C) the stage's input: the embeddings, or the activation received
    float *lnf, *lnf_mean, *lnf_rstd;      // (N,C) (Nl) (Nl)          last stage
    float *logits;                         // (N,Vl): logits, or dlogits after a training forward; last stage
    float *losses;                         // (N)                       last stage
    float *dlnf;                           // (N,C) (its first Nl rows) last stage
    float *dresidual;                      // (Nl,C) residual-stream gradient; after the backward: the stage input's
    // backward scratch
    float *dln;                            // (N,C) a LayerNorm's output gradient (a partial sum before completion)
    float *dbig;                           // (N,4Cl) MLP hidden gradient
    float *dqkv;                           // (N,3Cl)
    float *datty;                          // (N,Cl)
    float *partial;                        // (N,C) tensor parallel: a partial output, or the residual gradient gathered
    CPActs *cp;                            // context parallel: each layer's gathered K, V and probabilities
    float *att_scratch;                    // threads * T * T (context parallel: none)
    float *memory;
    size_t num_floats;
    int B, T, l0, l1, split;               // capacity and the stage this set serves
    int trained;       // 1 when it holds a training forward (dlogits ready on the last stage)
    const int *inputs;  // the micro-batch of the forward (B*T), for the embedding backward
} GPTActivations;

// A checkpoint's staging copy the next update makes of [lo, hi) (ckpt_stage.h's layout, crcs: its chunks' CRC32Cs).
typedef struct {
    float *staging;
    int64_t lo, hi;
    uint32_t *crcs;
} GPTStaged;

typedef struct {
    GPTConfig cfg;
    ParamLayout layout;   // what this rank holds (the whole model, a pipeline rank's stages, a tensor slice)
    TPContext tp;         // the tensor group (size 1: none)
    CPContext cp;         // the context group (size 1: none): the activations hold the rank's positions
    RecomputePolicy recompute;  // which layers recompute their activations in the backward (zeroed: none)
    ZeroSharding sharding;  // what it holds of its state (see the top of the file)
    ShardMap shard;  // the range [shard.begin, shard.end) whose AdamW state (stage >= 1: gradients; 3: weights) it holds
    float *params;   // (layout.num_elements) stage 3: the segments gathered only
    float *grads;    // (layout.num_elements) a pass's gradients (stage >= 2: until reduced)
    float *adam_m, *adam_v;  // (shard.shard) each, indexed from shard.begin
    float *grad_shard;   // stage >= 1: the shard's reduced gradients, indexed from shard.begin (stage 1: in grads)
    float *param_shard;  // stage 3: (shard.shard) the shard's weights (the master copy), indexed from shard.begin
    GPTStaged *staged;   // the next update's staging copies (gpt_stage_in_update), sorted by lo
    int num_staged, cap_staged;
    // the classifier's weights when the layout lacks the embeddings (a
    // pipeline's last stage): a copy of wte (its vocabulary slice) and its
    // gradient, kept equal to the first stage's by the pipeline (pipeline.h); NULL otherwise
    float *tied_wte, *tied_dwte;
    GPTActivations acts;  // the whole model's, for gpt_forward / gpt_backward
    GPTHooks hooks;
} GPT;

// Elements of the classifier's weights: wte, or this rank's vocabulary slice of it.
static inline size_t gpt_wte_elems(const GPT *m) {
    return (size_t)m->cfg.padded_vocab_size / (size_t)m->tp.size * (size_t)m->cfg.channels;
}

// The model's part `held` names (NULL: all of it), at tensor-parallel slice
// tp (tp_none(): whole tensors), holding the state of sharding sh. params and
// grads are zeroed mappings: a page takes memory once written, so a
// distributed layer that uses part of them (ZeRO-2/3) holds only that part.
// The trainer then writes the weights into params and calls gpt_shard_params.
static void gpt_init_held(GPT *m, const GPTConfig *cfg, const ParamHolding *held, TPContext tp, ZeroSharding sh) {
    memset(m, 0, sizeof(*m));
    m->cfg = *cfg;
    m->tp = tp;
    m->cp = cp_none();
    param_layout_init_held(&m->layout, cfg, held, tp.size, tp.rank);
    const int64_t n = m->layout.num_elements;
    m->params = map_zeroed(sizeof(float) * (size_t)n);
    m->grads = map_zeroed(sizeof(float) * (size_t)n);
    if (held && held->lnf && !held->embeddings) {
        m->tied_wte = map_zeroed(sizeof(float) * gpt_wte_elems(m));
        m->tied_dwte = map_zeroed(sizeof(float) * gpt_wte_elems(m));
    }
    CHECK(sh.stage >= 0 && sh.stage <= 3, "ZeRO stage %d", sh.stage);
    m->sharding = sh;
    shard_map_init(&m->shard, n, sh.rank, sh.world);
    m->adam_m = (float *)callocCheck((size_t)m->shard.shard, sizeof(float));
    m->adam_v = (float *)callocCheck((size_t)m->shard.shard, sizeof(float));
    if (sh.stage == 1) m->grad_shard = m->grads + m->shard.begin;
    if (sh.stage >= 2) m->grad_shard = (float *)callocCheck((size_t)m->shard.shard, sizeof(float));
    if (sh.stage == 3) m->param_shard = (float *)callocCheck((size_t)m->shard.shard, sizeof(float));
}
static void gpt_init(GPT *m, const GPTConfig *cfg) { gpt_init_held(m, cfg, NULL, tp_none(), zero_sharding(0, 0, 1)); }

// Once the trainer has written the weights into params (whole, the same on
// every rank of the data group): at stage 3 the shard's become the master
// copy and params is released (the distributed layer gathers segments into it).
static void gpt_shard_params(GPT *m) {
    if (m->sharding.stage < 3) return;
    memcpy(m->param_shard, m->params + m->shard.begin, sizeof(float) * (size_t)(m->shard.end - m->shard.begin));
    release_range(m->params, 0, m->layout.num_elements);
}

// The classifier's weights (tied to the token embedding) and their gradient.
static inline float *gpt_wte(const GPT *m) {
    return m->tied_wte ? m->tied_wte : m->params + param_tensor(&m->layout, PK_WTE, -1)->offset;
}
static inline float *gpt_dwte(const GPT *m) {
    return m->tied_dwte ? m->tied_dwte : m->grads + param_tensor(&m->layout, PK_WTE, -1)->offset;
}

static void gpt_activations_free(GPTActivations *a) {
    free(a->memory);
    free(a->ln1);  // the per-layer pointer arrays share one allocation
    cp_acts_free(a->cp);
    memset(a, 0, sizeof(*a));
}

// Buffers for layers [l0, l1) of model m at micro-batch B x T (split: keeps
// what the weight gradients need for a later gpt_stage_backward_weights).
static void gpt_activations_alloc(GPTActivations *a, const GPT *m, int B, int T, int l0, int l1, int split) {
    if (a->memory && B <= a->B && T == a->T && l0 == a->l0 && l1 == a->l1 && split == a->split) return;
    gpt_activations_free(a);
    size_t L = m->cfg.num_layers;
    float ***slots[GPT_ACT_PER_LAYER] = {&a->ln1, &a->ln1_mean, &a->ln1_rstd, &a->qkv, &a->atty, &a->att,
                                         &a->residual2, &a->ln2, &a->ln2_mean, &a->ln2_rstd, &a->fch, &a->fch_gelu,
                                         &a->residual3, &a->dmlp_out, &a->dfch, &a->datt_out, &a->dqkv_l};
    float **singles[GPT_ACT_SINGLES] = {&a->encoded, &a->lnf, &a->lnf_mean, &a->lnf_rstd, &a->logits, &a->losses,
                                        &a->dlnf, &a->dresidual, &a->dln, &a->dbig, &a->dqkv, &a->datty,
                                        &a->partial};
    size_t sizes[GPT_ACT_PER_LAYER], single_sizes[GPT_ACT_SINGLES];
    gpt_activation_sizes(&m->cfg, B, T, split, (size_t)l1 == L, m->tp.size, m->tp.sp, m->cp.size, sizes,
                         single_sizes);
    size_t scratch = gpt_attention_scratch_floats(T, m->cp.size);
    a->num_floats = scratch;
    for (int s = 0; s < GPT_ACT_PER_LAYER; s++)
        a->num_floats += (size_t)gpt_act_slot_floats(sizes[s], s, &m->recompute, l0, l1);
    for (int s = 0; s < GPT_ACT_SINGLES; s++) a->num_floats += single_sizes[s];
    a->memory = (float *)alignedMallocCheck(sizeof(float) * a->num_floats);
    float **ptrs = (float **)callocCheck((size_t)GPT_ACT_PER_LAYER * L, sizeof(float *));
    float *cursor = a->memory;
    for (int s = 0; s < GPT_ACT_PER_LAYER; s++) {
        *slots[s] = ptrs + s * L;
        float *shared = NULL;  // the slot's copy the recomputing layers share
        for (int l = l0; l < l1 && sizes[s]; l++) {
            float **p = &(*slots[s])[l];
            if (!gpt_act_shared(s, recompute_layer(&m->recompute, l))) *p = cursor, cursor += sizes[s];
            else if (shared) *p = shared;
            else *p = shared = cursor, cursor += sizes[s];
        }
    }
    for (int s = 0; s < GPT_ACT_SINGLES; s++) {
        *singles[s] = single_sizes[s] ? cursor : NULL;
        cursor += single_sizes[s];
    }
    a->att_scratch = cursor;
    a->B = B, a->T = T, a->l0 = l0, a->l1 = l1, a->split = split;
    a->trained = 0;
}

static void gpt_alloc_activations(GPT *m, int B, int T) {
    gpt_activations_alloc(&m->acts, m, B, T, 0, m->cfg.num_layers, 0);
}

static void gpt_free(GPT *m) {
    gpt_activations_free(&m->acts);
    munmap(m->params, sizeof(float) * (size_t)m->layout.num_elements);
    munmap(m->grads, sizeof(float) * (size_t)m->layout.num_elements);
    if (m->tied_wte) {
        munmap(m->tied_wte, sizeof(float) * gpt_wte_elems(m));
        munmap(m->tied_dwte, sizeof(float) * gpt_wte_elems(m));
    }
    free(m->adam_m);
    free(m->adam_v);
    if (m->sharding.stage >= 2) free(m->grad_shard);
    free(m->param_shard);
    free(m->staged);
    param_layout_free(&m->layout);
    memset(m, 0, sizeof(*m));
}

// ---------------------------------------------------------------------------
// the tensor-parallel pieces (each one the single-process arithmetic at tp = 1)

// A LayerNorm of the rank's Nl rows of x into out (N,C): rows [r0, r0+Nl),
// the whole all-gathered under sequence parallel.
static void gpt_layernorm_gathered(GPT *m, float *out, float *mean, float *rstd, const float *x, const float *w,
                                   const float *b, int N, int C) {
    int Nl = tp_rows(&m->tp, N);
    layernorm_forward(out + (size_t)tp_row0(&m->tp, N) * C, mean, rstd, x, w, b, Nl, C);
    if (m->tp.sp) tp_gather_rows(&m->tp, out, N, C, COMM_F32);
}

// A row-parallel linear layer's output plus the residual stream:
// out (Nl,C) = residual + bias + inp (N,IC) @ weight^T, the product's partial
// sums (this rank's IC columns) completed over the tensor group.
static void gpt_row_parallel_forward(GPT *m, GPTActivations *a, float *out, const float *inp, const float *weight,
                                     const float *bias, const float *residual, int N, int IC, int C) {
    if (m->tp.size == 1) {
        linear_forward(out, inp, weight, bias, residual, N, IC, C);
        return;
    }
    linear_forward(a->partial, inp, weight, NULL, NULL, N, IC, C);
    float *sum = a->partial;
    if (m->tp.sp) {
        tp_reduce_scatter_rows(&m->tp, a->partial, out, N, C, COMM_F32);
        sum = out;
    } else {
        tp_all_reduce(&m->tp, a->partial, (size_t)N * C, COMM_F32);
    }
    int Nl = tp_rows(&m->tp, N);
#pragma omp parallel for
    for (int i = 0; i < Nl; i++)
        for (int j = 0; j < C; j++)
            out[(size_t)i * C + j] = residual[(size_t)i * C + j] + bias[j] + sum[(size_t)i * C + j];
}

// The residual gradient the row-parallel layers read: dres (Nl,C) itself, or
// under sequence parallel all-gathered into a->partial (N,C).
static const float *gpt_dres_gathered(GPT *m, GPTActivations *a, const float *dres, int N, int C) {
    if (!m->tp.sp) return dres;
    memcpy(a->partial + (size_t)tp_row0(&m->tp, N) * C, dres, sizeof(float) * (size_t)tp_rows(&m->tp, N) * C);
    tp_gather_rows(&m->tp, a->partial, N, C, COMM_F32);
    return a->partial;
}

// A column-parallel layer's input gradient dln (N,C) completed over the
// tensor group: all-reduced in place, or reduce-scattered into its first Nl rows.
static void gpt_column_parallel_complete(GPT *m, GPTActivations *a, float *dln, int N, int C) {
    if (m->tp.size == 1) return;
    if (!m->tp.sp) {
        tp_all_reduce(&m->tp, dln, (size_t)N * C, COMM_F32);
        return;
    }
    memcpy(a->partial, dln, sizeof(float) * (size_t)N * C);
    tp_reduce_scatter_rows(&m->tp, a->partial, dln, N, C, COMM_F32);
}

// The token and position embeddings of this rank's rows into a->encoded
// (Nl,C): over the rank's vocabulary slice (a token outside it adds zeros),
// completed over the tensor group, then the positions added.
static void gpt_embedding_forward(GPT *m, GPTActivations *a, const int *inputs, const float *wpe, int B, int T) {
    int C = m->cfg.channels, N = B * T;
    if (m->tp.size == 1) {
        encoder_forward(a->encoded, inputs, gpt_wte(m), wpe, B, T, C);
        return;
    }
    int v0, vreal;
    tp_vocab_slice(&m->cfg, &m->tp, &v0, &vreal);
    const float *wte = gpt_wte(m);
    float *sum = m->tp.sp ? a->partial : a->encoded;
#pragma omp parallel for
    for (int i = 0; i < N; i++) {
        int t = inputs[i] - v0;
        float *o = sum + (size_t)i * C;
        if (t >= 0 && t < vreal) memcpy(o, wte + (size_t)t * C, sizeof(float) * (size_t)C);
        else memset(o, 0, sizeof(float) * (size_t)C);
    }
    if (m->tp.sp) tp_reduce_scatter_rows(&m->tp, a->partial, a->encoded, N, C, COMM_F32);
    else tp_all_reduce(&m->tp, a->encoded, (size_t)N * C, COMM_F32);
    int Nl = tp_rows(&m->tp, N), r0 = tp_row0(&m->tp, N);
    for (int i = 0; i < Nl; i++) {
        const float *p = wpe + (size_t)((r0 + i) % T) * C;
        float *o = a->encoded + (size_t)i * C;
        for (int j = 0; j < C; j++) o[j] += p[j];
    }
}

// The classifier's loss over this rank's vocabulary slice of the logits
// (N, vreal): each row's maximum and sum of exponentials, and the target's
// logit, are reduced over the tensor group (the logits are never gathered);
// losses (N) on every rank. With dloss, the logits become dloss * (softmax -
// onehot) on the slice. Returns the sum of the losses.
static double gpt_vocab_parallel_crossentropy(GPT *m, float *logits, float *losses, const int *targets, int N,
                                              int vreal, int v0, float dloss) {
    TPContext *tp = &m->tp;
    float *mx = (float *)mallocCheck(sizeof(float) * (size_t)N * (tp->size + 1)), *gathered = mx + N;
    double *sums = (double *)mallocCheck(sizeof(double) * 2 * (size_t)N);  // sum of exponentials, target logit
#pragma omp parallel for
    for (int i = 0; i < N; i++) mx[i] = vreal > 0 ? vec_max(logits + (size_t)i * vreal, vreal) : -INFINITY;
    for (int r = 0; r < tp->size; r++) tp->counts[r] = (size_t)N;
    CommRequest q = comm_all_gather_start(tp->group, mx, gathered, tp->counts, COMM_F32);
    comm_wait(&q);
#pragma omp parallel for
    for (int i = 0; i < N; i++) {
        float g = -INFINITY;
        for (int r = 0; r < tp->size; r++) g = gathered[(size_t)r * N + i] > g ? gathered[(size_t)r * N + i] : g;
        mx[i] = g;
        float *row = logits + (size_t)i * vreal;
        int t = targets[i] - v0;
        sums[N + i] = t >= 0 && t < vreal ? row[t] : 0.0;
        // (with dloss the row keeps exp(logit - max), scaled below as softmax_crossentropy does)
        sums[i] = vreal > 0 ? vec_exp_sum(row, vreal, g, 1.0f, dloss != 0.0f) : 0.0;
    }
    tp_all_reduce(tp, sums, 2 * (size_t)N, COMM_F64);
    double total = 0.0;
#pragma omp parallel for reduction(+ : total)
    for (int i = 0; i < N; i++) {
        float lse = mx[i] + logf((float)sums[i]);
        losses[i] = lse - (float)sums[N + i];
        total += losses[i];
        if (dloss == 0.0f || vreal == 0) continue;
        float *row = logits + (size_t)i * vreal, scale = dloss / (float)sums[i];
        for (int v = 0; v < vreal; v++) row[v] *= scale;
        int t = targets[i] - v0;
        if (t >= 0 && t < vreal) row[t] -= dloss;
    }
    free(mx);
    free(sums);
    return total;
}

// A token from row `row` of the last logits-only forward on the last stage.
static int gpt_sample_row(GPT *m, const GPTActivations *a, int row, const SampleParams *sp, Rng *rng) {
    int v0, vreal;
    tp_vocab_slice(&m->cfg, &m->tp, &v0, &vreal);
    return tp_sample_token(&m->tp, &m->cfg, a->logits + (size_t)row * vreal, sp, rng);
}

// ---------------------------------------------------------------------------
// forward and backward

// Runs a sequence of kernels (the variadic argument: statements) in one
// OpenMP team when `team` is set, so that they share its threads (cpu_layers.h)
// instead of each forking its own. `team` holds without tensor parallelism
// (and, in the backward, without a split backward): then the collectives and
// copies among the statements do nothing, and no single-threaded step is left
// in the team; a layer is then one team, its attention included, unless
// context parallelism exchanges around the attention (then the stretches
// before and after it are). Otherwise the statements run as they are, each
// kernel with its own team.
#define GPT_TEAM(team, ...)                            \
    do {                                               \
        if (team) {                                    \
            _Pragma("omp parallel") { __VA_ARGS__; }   \
        } else {                                       \
            __VA_ARGS__;                               \
        }                                              \
    } while (0)

// Layer l's slot of a micro-batch's context-parallel attention state (context_parallel.h's CPActs; the
// slots a set holds: gpt_activation_sizes.h's cp_act_slots).
static inline int gpt_cp_slot(const GPT *m, int l) {
    return recompute_layer(&m->recompute, l) == RECOMPUTE_NONE ? l : m->cfg.num_layers;
}

// Layer l's attention over its qkv into out (N,Cl), keeping what its backward
// reads: the probabilities in a->att[l], or under context parallelism the
// gathered K, V and probabilities in the micro-batch's CPActs (the layer's
// slot, or the recomputing layers' shared one).
static void gpt_attention_forward(GPT *m, GPTActivations *a, int l, float *out, int B, int T) {
    int tp = m->tp.size, Cl = m->cfg.channels / tp, NHl = m->cfg.num_heads / tp;
    if (m->cp.size > 1) cp_attention_forward(&m->cp, &a->cp, gpt_cp_slot(m, l), out, a->qkv[l], B);
    else attention_forward(out, a->att[l], NULL, a->qkv[l], B, T, Cl, NHl);
}

// One layer's pass on a micro-batch: what its stretches of kernels below
// read. Each stretch is a function so that GPT_TEAM runs one, or the whole
// layer, in a team (its kernels work-share the team's threads).
typedef struct {
    GPT *m;
    GPTActivations *a;
    int l, B, T, N, Nl, C, Cl, NHl;  // N = B*T rows, Nl of them the rank's (sequence parallel); Cl, NHl the rank's
    int split;                       // backward: input gradients only (gpt_stage_backward_weights adds the rest)
    LayerTensors w, g;               // the layer's weights; (backward) its gradients
    float *residual;                 // (N,C) the layer's input
    float *dres;                     // backward: (Nl,C) the residual stream's gradient, accumulated into
} LayerPass;

// ln1 (N,C), then qkv (N,3Cl).
static void layer_qkv_forward(const LayerPass *p) {
    GPTActivations *a = p->a;
    int l = p->l;
    gpt_layernorm_gathered(p->m, a->ln1[l], a->ln1_mean[l], a->ln1_rstd[l], p->residual, p->w.ln1w, p->w.ln1b, p->N,
                           p->C);
    linear_forward(a->qkv[l], a->ln1[l], p->w.qkvw, p->w.qkvb, NULL, p->N, p->C, 3 * p->Cl);
}

// After the attention: residual2 = residual + proj(atty), ln2, fch and its
// GELU (N,4Cl), and (not `recompute`) residual3 = residual2 + proj(fch_gelu).
static void layer_out_forward(const LayerPass *p, int recompute) {
    GPT *m = p->m;
    GPTActivations *a = p->a;
    const LayerTensors *w = &p->w;
    int l = p->l, N = p->N, C = p->C, Cl = p->Cl;
    gpt_row_parallel_forward(m, a, a->residual2[l], a->atty[l], w->attprojw, w->attprojb, p->residual, N, Cl, C);
    gpt_layernorm_gathered(m, a->ln2[l], a->ln2_mean[l], a->ln2_rstd[l], a->residual2[l], w->ln2w, w->ln2b, N, C);
    linear_act_forward(a->fch[l], a->fch_gelu[l], a->ln2[l], w->fcw, w->fcb, NULL, N, C, 4 * Cl);
    if (!recompute)
        gpt_row_parallel_forward(m, a, a->residual3[l], a->fch_gelu[l], w->fcprojw, w->fcprojb, a->residual2[l], N,
                                 4 * Cl, C);
}

// Layer l's forward on a micro-batch (B,T) from its input (the stage's, or
// the layer before's output) to residual3[l]. With `recompute` (its buffers
// filled again before its backward) it stops before the MLP's projection:
// nothing after it is read by the backward, and its output is kept.
static void gpt_layer_forward(GPT *m, GPTActivations *a, int l, int B, int T, int recompute) {
    int C = m->cfg.channels, Cl = C / m->tp.size, N = B * T;
    const int team = m->tp.size == 1;  // (GPT_TEAM)
    LayerTensors w = layer_tensors(&m->layout, m->params, l);
    float *residual = l == a->l0 ? a->encoded : a->residual3[l - 1];
    LayerPass p = {m, a, l, B, T, N, N, C, Cl, m->cfg.num_heads / m->tp.size, 0, w, w, residual, NULL};
    if (team && m->cp.size == 1) {  // the attention in the same team (context parallel's exchanges run outside one)
        GPT_TEAM(1, layer_qkv_forward(&p); gpt_attention_forward(m, a, l, a->atty[l], B, T);
                 layer_out_forward(&p, recompute));
    } else {
        GPT_TEAM(team, layer_qkv_forward(&p));
        gpt_attention_forward(m, a, l, a->atty[l], B, T);
        GPT_TEAM(team, layer_out_forward(&p, recompute));
    }
}

// What layer l's backward reads and its recompute policy did not keep, filled
// again by the forward's code: the whole layer (full), or the GELU output and,
// when `attention` (the attention's backward follows), the probabilities
// (selective; the attention's output, kept, is written to a scratch buffer).
static void gpt_layer_recompute(GPT *m, GPTActivations *a, int l, int attention) {
    int B = a->B, T = a->T, N = B * T, Cl = m->cfg.channels / m->tp.size;
    RecomputeKind kind = recompute_layer(&m->recompute, l);
    if (kind == RECOMPUTE_FULL) gpt_layer_forward(m, a, l, B, T, 1);
    if (kind != RECOMPUTE_SELECTIVE) return;
    if (attention) gpt_attention_forward(m, a, l, a->datty, B, T);
    gelu_forward(a->fch_gelu[l], a->fch[l], (size_t)N * 4 * Cl);
}

// Forward of layers [a->l0, a->l1) on one micro-batch (B,T). The first stage
// embeds inputs; any other reads its input from a->encoded (what the stage
// before sent). The last stage, with targets, returns the mean loss over the
// B*T positions (a->losses holds each); without, returns 0 and a->logits
// holds the (B,T,V) logits (the rank's vocabulary slice); when dloss != 0
// (training) the classifier's backward runs here too, fused with the softmax:
// logits become dloss * (softmax - onehot), dlnf is ready and the wte gradient
// of the classifier is accumulated. dloss is d(objective)/d(loss at one
// position): 1/(B*T) for one micro-batch, 1/(B*T*accum*ranks) with
// accumulation. Other stages return 0 and leave their output in a->residual3[l1 - 1].
static float gpt_stage_forward(GPT *m, GPTActivations *a, const int *inputs, const int *targets, int B, int T,
                               float dloss) {
    const GPTConfig *c = &m->cfg;
    int L = c->num_layers, C = c->channels, tp = m->tp.size;
    int V = c->vocab_size, l0 = a->l0, l1 = a->l1;
    CHECK(T <= c->max_seq_len, "sequence length %d exceeds max_seq_len %d", T, c->max_seq_len);
    CHECK(B <= a->B && T == a->T, "micro-batch %d x %d does not fit the activations (%d x %d)", B, T, a->B, a->T);
    const ParamLayout *pl = &m->layout;
    int N = B * T;
    const int team = tp == 1;  // (GPT_TEAM)
    a->trained = 0;
    if (l0 == 0) {
        for (int i = 0; i < N; i++)
            CHECK(inputs[i] >= 0 && inputs[i] < V, "input token %d out of range [0, %d)", inputs[i], V);
        const float *wpe = m->params + param_tensor(pl, PK_WPE, -1)->offset;
        gpt_hooks_params_needed(&m->hooks, 0, HOOK_FORWARD);
        gpt_hooks_prefetch(&m->hooks, pl, 1);
        if (m->cp.size > 1) wpe = cp_local_wpe(&m->cp, wpe);
        gpt_embedding_forward(m, a, inputs, wpe, B, T);
        a->inputs = inputs;
    }
    for (int l = l0; l < l1; l++) {
        gpt_hooks_params_needed(&m->hooks, l + 1, HOOK_FORWARD);
        gpt_hooks_prefetch(&m->hooks, pl, l + 1 < l1 ? l + 2 : L + 1);
        gpt_layer_forward(m, a, l, B, T, 0);
    }
    if (l1 < L) {
        a->trained = dloss != 0.0f;
        return 0.0f;
    }
    gpt_hooks_params_needed(&m->hooks, L + 1, HOOK_FORWARD);
    float *wte = gpt_wte(m);
    float *lnfw = m->params + param_tensor(pl, PK_LNFW, -1)->offset;
    float *lnfb = m->params + param_tensor(pl, PK_LNFB, -1)->offset;
    float *last_out = l1 > l0 ? a->residual3[l1 - 1] : a->encoded;
    // classifier over the real rows of wte (tied weights; with tensor parallelism the rank's vocabulary slice)
    int v0 = 0, vreal = V;
    if (tp > 1) tp_vocab_slice(c, &m->tp, &v0, &vreal);
    GPT_TEAM(team,
        gpt_layernorm_gathered(m, a->lnf, a->lnf_mean, a->lnf_rstd, last_out, lnfw, lnfb, N, C);
        matmul_team(0, 1, N, vreal, C, 1.0f, a->lnf, C, wte, C, 0.0f, a->logits, vreal));
    if (!targets) return 0.0f;
    for (int i = 0; i < N; i++)
        CHECK(targets[i] >= 0 && targets[i] < V, "target token %d out of range [0, %d)", targets[i], V);
    double total = tp > 1 ? gpt_vocab_parallel_crossentropy(m, a->logits, a->losses, targets, N, vreal, v0, dloss)
                          : softmax_crossentropy(a->logits, a->losses, targets, N, V, dloss);
    if (dloss != 0.0f) {
        float *dwte = gpt_dwte(m);
        // dlnf (N,C) = dlogits @ wte[:V]; dwte[:V] += dlogits^T @ lnf (the rank's slice: dlnf a partial sum)
        GPT_TEAM(team,
            matmul_team(0, 0, N, C, vreal, 1.0f, a->logits, vreal, wte, C, 0.0f, a->dlnf, C);
            matmul_team(1, 0, vreal, C, N, 1.0f, a->logits, vreal, a->lnf, C, 1.0f, dwte, C));
        gpt_column_parallel_complete(m, a, a->dlnf, N, C);
        a->trained = 1;
    }
    return (float)(total / N);
}

// The weight gradients of layer l from its activations and the output
// gradients douts (the layer's own buffers with a split backward, the shared
// scratch right after the input gradients without). Row-parallel biases take
// the rank's rows of their output gradient (all of them without sequence parallel).
typedef struct { const float *dmlp_out, *dfch, *datt_out, *dqkv; } LayerDouts;
static void gpt_layer_weight_grads(GPT *m, const GPTActivations *a, int l, LayerDouts d, int N) {
    int C = m->cfg.channels, Cl = C / m->tp.size, Nl = tp_rows(&m->tp, N), r0 = tp_row0(&m->tp, N);
    LayerTensors g = layer_tensors(&m->layout, m->grads, l);
    linear_backward_weight(g.fcprojw, NULL, d.dmlp_out, a->fch_gelu[l], N, 4 * Cl, C);
    column_sum_accumulate(g.fcprojb, d.dmlp_out + (size_t)r0 * C, Nl, C);
    linear_backward_weight(g.fcw, g.fcb, d.dfch, a->ln2[l], N, C, 4 * Cl);
    linear_backward_weight(g.attprojw, NULL, d.datt_out, a->atty[l], N, Cl, C);
    column_sum_accumulate(g.attprojb, d.datt_out + (size_t)r0 * C, Nl, C);
    linear_backward_weight(g.qkvw, g.qkvb, d.dqkv, a->ln1[l], N, C, 3 * Cl);
}

// The embeddings' gradient (first stage): from the residual gradient at layer
// 0's input (the rank's rows: its positions' wpe rows; its vocabulary slice of
// wte, from every position's gradient).
static void gpt_embedding_backward(GPT *m, GPTActivations *a) {
    const ParamLayout *pl = &m->layout;
    gpt_hooks_params_needed(&m->hooks, 0, HOOK_GRADS);
    float *dwpe_all = m->grads + param_tensor(pl, PK_WPE, -1)->offset;
    float *dwpe = m->cp.size > 1 ? cp_local_dwpe(&m->cp) : dwpe_all;  // (the rank's positions' rows)
    int C = m->cfg.channels, B = a->B, T = a->T, N = B * T;
    if (m->tp.size == 1) {
        encoder_backward(gpt_dwte(m), dwpe, a->dresidual, a->inputs, B, T, C);
        if (m->cp.size > 1) cp_add_dwpe(&m->cp, dwpe_all);
        gpt_hooks_grads_ready(&m->hooks, 0);
        return;
    }
    int Nl = tp_rows(&m->tp, N), r0 = tp_row0(&m->tp, N), v0, vreal;
    for (int i = 0; i < Nl; i++) {
        float *p = dwpe + (size_t)((r0 + i) % T) * C;
        const float *d = a->dresidual + (size_t)i * C;
        for (int j = 0; j < C; j++) p[j] += d[j];
    }
    const float *dfull = gpt_dres_gathered(m, a, a->dresidual, N, C);
    tp_vocab_slice(&m->cfg, &m->tp, &v0, &vreal);
    float *dwte = gpt_dwte(m);
    for (int i = 0; i < N; i++) {  // (in position order, as encoder_backward adds them)
        int t = a->inputs[i] - v0;
        if (t < 0 || t >= vreal) continue;
        float *p = dwte + (size_t)t * C;
        const float *d = dfull + (size_t)i * C;
        for (int j = 0; j < C; j++) p[j] += d[j];
    }
    if (m->cp.size > 1) cp_add_dwpe(&m->cp, dwpe_all);
    gpt_hooks_grads_ready(&m->hooks, 0);
}

// The MLP's backward from dout (N,C), the gradient of residual3: dbig (N,4Cl)
// through GELU, (not split) fcproj's and fc's weight gradients, ln2's into
// dres (+=).
static void layer_mlp_backward(const LayerPass *p, const float *dout) {
    GPT *m = p->m;
    GPTActivations *a = p->a;
    const LayerTensors *w = &p->w, *g = &p->g;
    int l = p->l, N = p->N, Nl = p->Nl, C = p->C, Cl = p->Cl;
    linear_act_backward_input(a->dbig, a->fch[l], dout, w->fcprojw, N, 4 * Cl, C);
    if (!p->split) {
        linear_backward_weight(g->fcprojw, NULL, dout, a->fch_gelu[l], N, 4 * Cl, C);
        column_sum_accumulate(g->fcprojb, p->dres, Nl, C);
    }
    if (p->split) memcpy(a->dfch[l], a->dbig, sizeof(float) * (size_t)N * 4 * Cl);
    linear_backward_input(a->dln, a->dbig, w->fcw, N, C, 4 * Cl);
    if (!p->split) linear_backward_weight(g->fcw, g->fcb, a->dbig, a->ln2[l], N, C, 4 * Cl);
    gpt_column_parallel_complete(m, a, a->dln, N, C);
    layernorm_backward(p->dres, g->ln2w, g->ln2b, a->dln, a->residual2[l], w->ln2w, a->ln2_mean[l], a->ln2_rstd[l],
                       Nl, C);
}

// The attention projection's backward from dout (N,C), the gradient of
// residual2: datty (N,Cl), (not split) its weight gradients.
static void layer_attproj_backward(const LayerPass *p, const float *dout) {
    GPTActivations *a = p->a;
    int l = p->l;
    linear_backward_input(a->datty, dout, p->w.attprojw, p->N, p->Cl, p->C);
    if (!p->split) {
        linear_backward_weight(p->g.attprojw, NULL, dout, a->atty[l], p->N, p->Cl, p->C);
        column_sum_accumulate(p->g.attprojb, p->dres, p->Nl, p->C);
    }
}

// The attention's backward from datty: dqkv (N,3Cl) overwritten.
static void layer_attention_backward(const LayerPass *p, const float *dqkv) {
    GPTActivations *a = p->a;
    int l = p->l;
    if (p->m->cp.size > 1)
        cp_attention_backward(&p->m->cp, a->cp, gpt_cp_slot(p->m, l), (float *)dqkv, a->datty, a->qkv[l], p->B);
    else attention_backward((float *)dqkv, a->att_scratch, a->datty, a->qkv[l], a->att[l], p->B, p->T, p->Cl, p->NHl);
}

// qkv's backward from dqkv: (not split) its weight gradients, ln1's into dres (+=).
static void layer_qkv_backward(const LayerPass *p, const float *dqkv) {
    GPT *m = p->m;
    GPTActivations *a = p->a;
    const LayerTensors *w = &p->w, *g = &p->g;
    int l = p->l, N = p->N, C = p->C, Cl = p->Cl;
    linear_backward_input(a->dln, dqkv, w->qkvw, N, C, 3 * Cl);
    if (!p->split) linear_backward_weight(g->qkvw, g->qkvb, dqkv, a->ln1[l], N, C, 3 * Cl);
    gpt_column_parallel_complete(m, a, a->dln, N, C);
    layernorm_backward(p->dres, g->ln1w, g->ln1b, a->dln, p->residual, w->ln1w, a->ln1_mean[l], a->ln1_rstd[l], p->Nl,
                       C);
}

// Backward of the training forward a holds, through layers [a->l0, a->l1):
// the gradient enters from the loss (last stage) or in a->dresidual (what the
// stage after sent) and leaves in a->dresidual (the stage's input gradient).
// Without a->split the weight gradients accumulate into m->grads as it goes
// (and the embeddings' on the first stage); with it only the input gradients
// (and the LayerNorms', which come with them) are computed, and
// gpt_stage_backward_weights adds the rest later, to the same numbers.
static void gpt_stage_backward(GPT *m, GPTActivations *a) {
    CHECK(a->trained, "gpt_stage_backward without a training forward (dloss != 0)");
    const GPTConfig *c = &m->cfg;
    int L = c->num_layers, C = c->channels, Cl = C / m->tp.size, NHl = c->num_heads / m->tp.size;
    int l0 = a->l0, l1 = a->l1, split = a->split;
    int B = a->B, T = a->T, N = B * T, Nl = tp_rows(&m->tp, N);
    const int team = m->tp.size == 1 && !split;  // (GPT_TEAM)
    const ParamLayout *pl = &m->layout;
    float *dres = a->dresidual;
    if (l1 == L) {
        gpt_hooks_params_needed(&m->hooks, L + 1, HOOK_BACKWARD);
        gpt_hooks_prefetch(&m->hooks, pl, l1 > l0 ? l1 : 0);
        float *lnfw = m->params + param_tensor(pl, PK_LNFW, -1)->offset;
        float *dlnfw = m->grads + param_tensor(pl, PK_LNFW, -1)->offset;
        float *dlnfb = m->grads + param_tensor(pl, PK_LNFB, -1)->offset;
        float *last_out = l1 > l0 ? a->residual3[l1 - 1] : a->encoded;
        memset(dres, 0, sizeof(float) * (size_t)Nl * C);
        layernorm_backward(dres, dlnfw, dlnfb, a->dlnf, last_out, lnfw, a->lnf_mean, a->lnf_rstd, Nl, C);
        gpt_hooks_grads_ready(&m->hooks, L + 1);
    }
    for (int l = l1 - 1; l >= l0; l--) {
        gpt_hooks_params_needed(&m->hooks, l + 1, HOOK_BACKWARD);
        if (l > l0) gpt_hooks_prefetch(&m->hooks, pl, l);
        LayerTensors w = layer_tensors(pl, m->params, l);
        LayerTensors g = layer_tensors(pl, m->grads, l);
        float *residual = l == l0 ? a->encoded : a->residual3[l - 1];
        gpt_layer_recompute(m, a, l, 1);
        // dres: gradient w.r.t. the layer output residual3 = residual2 + mlp(ln2(residual2))
        const float *dout = gpt_dres_gathered(m, a, dres, N, C);
        LayerDouts d = {dout, split ? a->dfch[l] : a->dbig, NULL, split ? a->dqkv_l[l] : a->dqkv};
        if (split) {
            memcpy(a->dmlp_out[l], dout, sizeof(float) * (size_t)N * C);
            d.dmlp_out = a->dmlp_out[l];
        }
        LayerPass p = {m, a, l, B, T, N, Nl, C, Cl, NHl, split, w, g, residual, dres};
        if (team && m->cp.size == 1) {  // one team for the layer: dout stays dres (no sequence parallel or split)
            GPT_TEAM(1, layer_mlp_backward(&p, dout); layer_attproj_backward(&p, dout);
                     layer_attention_backward(&p, d.dqkv); layer_qkv_backward(&p, d.dqkv));
        } else {
            GPT_TEAM(team, layer_mlp_backward(&p, dout));
            // dres: gradient w.r.t. residual2 = residual + attn(ln1(residual))
            dout = gpt_dres_gathered(m, a, dres, N, C);
            d.datt_out = dout;
            if (split) {
                memcpy(a->datt_out[l], dout, sizeof(float) * (size_t)N * C);
                d.datt_out = a->datt_out[l];
            }
            GPT_TEAM(team, layer_attproj_backward(&p, dout));
            layer_attention_backward(&p, d.dqkv);
            GPT_TEAM(team, layer_qkv_backward(&p, d.dqkv));
        }
        if (!split) gpt_hooks_grads_ready(&m->hooks, l + 1);
    }
    if (!split && l0 == 0) gpt_embedding_backward(m, a);
    a->trained = 0;
}

// The weight gradients a split gpt_stage_backward left (W of a zero-bubble
// schedule); a->dresidual must still hold the stage input's gradient.
static void gpt_stage_backward_weights(GPT *m, GPTActivations *a) {
    CHECK(a->split, "gpt_stage_backward_weights without a split backward");
    int N = a->B * a->T;
    for (int l = a->l1 - 1; l >= a->l0; l--) {
        // (a recomputing layer's forward reads its weights)
        gpt_hooks_params_needed(&m->hooks, l + 1,
                                recompute_layer(&m->recompute, l) == RECOMPUTE_FULL ? HOOK_BACKWARD : HOOK_GRADS);
        gpt_layer_recompute(m, a, l, 0);
        gpt_layer_weight_grads(m, a, l, (LayerDouts){a->dmlp_out[l], a->dfch[l], a->datt_out[l], a->dqkv_l[l]}, N);
        gpt_hooks_grads_ready(&m->hooks, l + 1);
    }
    if (a->l0 == 0) gpt_embedding_backward(m, a);
}

// The whole model on one micro-batch (one process, or every data rank).
static float gpt_forward(GPT *m, const int *inputs, const int *targets, int B, int T, float dloss) {
    gpt_alloc_activations(m, B, T);
    return gpt_stage_forward(m, &m->acts, inputs, targets, B, T, dloss);
}
static void gpt_backward(GPT *m) { gpt_stage_backward(m, &m->acts); }

static void gpt_zero_grad(GPT *m) { memset(m->grads, 0, sizeof(float) * (size_t)m->layout.num_elements); }

// ---------------------------------------------------------------------------
// the sharded state: the update, checkpoints

// Where the fp32 weights and the AdamW moments live, as pointers indexed like
// the flat buffer (valid over the shard; the weights at stage < 3 over all of it).
static inline void gpt_state_views(GPT *m, float *views[3]) {
    views[0] = m->param_shard ? m->param_shard - m->shard.begin : m->params;
    views[1] = m->adam_m - m->shard.begin;
    views[2] = m->adam_v - m->shard.begin;
}

// AdamW on [lo, hi) of the shard, its results also into staging when given (adamw_update_staged).
static inline void gpt_update_range(GPT *m, int64_t lo, int64_t hi, const AdamWConfig *ac, float grad_scale,
                                    const GPTStaged *staged) {
    if (hi <= lo) return;
    const int64_t begin = m->shard.begin;
    float *views[3];
    gpt_state_views(m, views);
    // stage 0: the whole gradient, zeroed as read (the next step needs no zeroing pass); else the shard's
    float *grads = m->grad_shard ? m->grad_shard + (lo - begin) : m->grads;
    int flags = m->grad_shard ? ADAMW_GRADS_LOCAL : ADAMW_ZERO_GRADS;
    float *mm = m->adam_m + (lo - begin), *vv = m->adam_v + (lo - begin);
    if (staged)
        adamw_update_staged(&m->layout, views[0], grads, flags, mm, vv, lo, hi, ac, grad_scale, staged->staging,
                            staged->crcs);
    else
        adamw_update_range(&m->layout, views[0], grads, flags, mm, vv, lo, hi, ac, grad_scale);
}

// One AdamW step over the shard (the reduced gradients: the distributed layer
// completed them), with the staging copies asked for (gpt_stage_in_update).
// The updated weights are the shard's: the distributed layer shares them.
static void gpt_update(GPT *m, const AdamWConfig *ac, float grad_scale) {
    int64_t at = m->shard.begin;
    for (int k = 0; k < m->num_staged; k++) {  // (the ranges between the staged ones: the update alone)
        gpt_update_range(m, at, m->staged[k].lo, ac, grad_scale, NULL);
        gpt_update_range(m, m->staged[k].lo, m->staged[k].hi, ac, grad_scale, &m->staged[k]);
        at = m->staged[k].hi;
    }
    gpt_update_range(m, at, m->shard.end, ac, grad_scale, NULL);
    m->num_staged = 0;
}

// Copies [lo, hi) (inside the shard) of the weights, m and v, one after the
// other, into staging (ckpt_stage.h's chunks, their CRC32Cs into crcs unless
// NULL), the chunks shared by the threads of the calling one's team: the
// training threads at the step boundary, where they are idle, or the
// checkpoint writer alone. Taken one at a time: a thread that loses its
// core (a shared machine) holds the others back by one chunk at most.
static void gpt_stage_state(GPT *m, float *staging, int64_t lo, int64_t hi, uint32_t *crcs) {
    float *views[3];
    gpt_state_views(m, views);
    const float *src[3] = {views[0] + lo, views[1] + lo, views[2] + lo};
    const int64_t chunks = ckpt_stage_chunks(hi - lo);
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t k = 0; k < chunks; k++) ckpt_stage_chunk(staging, src, hi - lo, k, crcs);
}

// The next gpt_update also writes its results over [lo, hi) (inside the
// shard; after the ranges asked for before it) into staging as
// gpt_stage_state would copy them, with their chunks' CRC32Cs into crcs
// unless NULL: a checkpoint due after that update costs its stores alone.
static void gpt_stage_in_update(GPT *m, float *staging, int64_t lo, int64_t hi, uint32_t *crcs) {
    if (hi <= lo) return;
    CHECK(m->num_staged == 0 || m->staged[m->num_staged - 1].hi <= lo, "staging ranges out of order");
    if (m->num_staged == m->cap_staged) {
        m->cap_staged = m->cap_staged ? 2 * m->cap_staged : 4;
        m->staged = (GPTStaged *)reallocCheck(m->staged, sizeof(GPTStaged) * (size_t)m->cap_staged);
    }
    m->staged[m->num_staged++] = (GPTStaged){staging, lo, hi, crcs};
}

// Installs the states over holds[s] (inside the shard; the weights at stage
// < 3: anywhere in the buffer) from states[s].
static void gpt_load_state(GPT *m, float *const states[3], const int64_t holds[3][2]) {
    float *views[3];
    gpt_state_views(m, views);
    for (int s = 0; s < 3; s++)
        memcpy(views[s] + holds[s][0], states[s], sizeof(float) * (size_t)(holds[s][1] - holds[s][0]));
}

#endif  // LLMC_GPT_CPU_H
