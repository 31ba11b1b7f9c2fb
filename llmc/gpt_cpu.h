// gpt_cpu.h: the GPT-2 model on the CPU in fp32: parameters and gradients as
// flat buffers laid out by model.h's table, activations for one micro-batch,
// forward (with the classifier's backward fused in when training), backward,
// and GPT-2 weight initialisation. A pipeline stage runs a contiguous range of
// layers on one micro-batch's activations (gpt_stage_*); the backward can run
// its input gradients (B) and its weight gradients (W) apart.
//
// Hooks (model.h's GPTHooks) let a distributed layer (ZeRO, overlapped
// gradient reduction) act at segment boundaries.
#ifndef LLMC_GPT_CPU_H
#define LLMC_GPT_CPU_H

#include <string.h>

#include "cpu_layers.h"
#include "model.h"
#include "model_init.h"

// One micro-batch's activations for a stage: layers [l0, l1) of the model
// (all of them for one process), with the embeddings when l0 == 0 and ln_f,
// the classifier and the loss when l1 == L. Per-layer arrays are indexed by
// the global layer (NULL outside [l0, l1)). N = B * T.
typedef struct {
    float **ln1, **ln1_mean, **ln1_rstd;   // (N,C) (N) (N)
    float **qkv;                           // (N,3C)
    float **atty;                          // (N,C) attention output before projection
    float **att;                           // (B,NH,T,T) softmax probabilities
    float **residual2;                     // (N,C) after the attention block
    float **ln2, **ln2_mean, **ln2_rstd;   // (N,C) (N) (N)
    float **fch, **fch_gelu;               // (N,4C)
    float **residual3;                     // (N,C) output of the layer (l1-1's: the stage's output)
    // split backward only (the weight gradients run later, from these):
    float **dmlp_out;                      // (N,C) gradient at the layer's output (the MLP projection's)
    float **dfch;                          // (N,4C) gradient at the MLP's hidden pre-activation
    float **datt_out;                      // (N,C) gradient at the attention projection's output
    float **dqkv_l;                        // (N,3C) gradient at qkv
    float *encoded;                        // (N,C) the stage's input: the embeddings, or the activation received
    float *lnf, *lnf_mean, *lnf_rstd;      // (N,C) (N) (N)            last stage
    float *logits;                         // (N,V): logits, or dlogits after a training forward; last stage
    float *losses;                         // (N)                       last stage
    float *dlnf;                           // (N,C)                     last stage
    float *dresidual;                      // (N,C) residual-stream gradient; after the backward: the stage input's
    // backward scratch
    float *dln;                            // (N,C)
    float *dbig;                           // (N,4C) MLP hidden gradient
    float *dqkv;                           // (N,3C)
    float *datty;                          // (N,C)
    float *att_scratch;                    // threads * T * T
    float *memory;
    size_t num_floats;
    int B, T, l0, l1, split;               // capacity and the stage this set serves
    int trained;       // 1 when it holds a training forward (dlogits ready on the last stage)
    const int *inputs;  // the micro-batch of the forward (B*T), for the embedding backward
} GPTActivations;

typedef struct {
    GPTConfig cfg;
    ParamLayout layout;   // what this rank holds (the whole model, or a pipeline rank's stages)
    float *params;   // (layout.num_elements)
    float *grads;    // (layout.num_elements)
    // the classifier's weights when the layout lacks the embeddings (a
    // pipeline's last stage): a copy of wte (Vp, C) and its gradient, kept
    // equal to the first stage's by the pipeline (pipeline.h); NULL otherwise
    float *tied_wte, *tied_dwte;
    GPTActivations acts;  // the whole model's, for gpt_forward / gpt_backward
    GPTHooks hooks;
} GPT;

// The model's part `held` names (NULL: all of it). params and grads are
// zeroed mappings: a page takes memory once written, so a distributed layer
// that uses part of them (ZeRO-2/3) holds only that part.
static void gpt_init_held(GPT *m, const GPTConfig *cfg, const ParamHolding *held) {
    memset(m, 0, sizeof(*m));
    m->cfg = *cfg;
    param_layout_init_held(&m->layout, cfg, held, 1, 0);
    m->params = map_zeroed(sizeof(float) * (size_t)m->layout.num_elements);
    m->grads = map_zeroed(sizeof(float) * (size_t)m->layout.num_elements);
    if (held && held->lnf && !held->embeddings) {
        size_t n = (size_t)cfg->padded_vocab_size * (size_t)cfg->channels;
        m->tied_wte = map_zeroed(sizeof(float) * n);
        m->tied_dwte = map_zeroed(sizeof(float) * n);
    }
}
static void gpt_init(GPT *m, const GPTConfig *cfg) { gpt_init_held(m, cfg, NULL); }

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
    memset(a, 0, sizeof(*a));
}

// The activation buffers: GPT_ACT_PER_LAYER per layer of the stage (the last
// GPT_ACT_SPLIT of them only with a split backward), then GPT_ACT_SINGLES once
// (the ends' only on the first or last stage), in the order of the slots in
// gpt_activations_alloc. With B * T < 2^31 (train_setup.h) each fits in
// size_t; their sum over the layers need not (gpt_activation_floats).
#define GPT_ACT_PER_LAYER 17
#define GPT_ACT_SPLIT 4
#define GPT_ACT_SINGLES 12
static void gpt_activation_sizes(const GPTConfig *c, int B, int T, int split, int first, int last,
                                 size_t per_layer[GPT_ACT_PER_LAYER], size_t single[GPT_ACT_SINGLES]) {
    size_t C = c->channels, NH = c->num_heads, V = c->vocab_size;
    size_t N = (size_t)B * T, S = split ? 1 : 0, E = last ? 1 : 0;
    (void)first;  // the first stage's input is its embeddings: the same (N,C) as any stage's
    size_t layer[GPT_ACT_PER_LAYER] = {N * C, N, N, N * 3 * C, N * C, (size_t)B * NH * T * T, N * C,
                                       N * C, N, N, N * 4 * C, N * 4 * C, N * C,
                                       S * N * C, S * N * 4 * C, S * N * C, S * N * 3 * C};
    size_t once[GPT_ACT_SINGLES] = {N * C, E * N * C, E * N, E * N, E * N * V, E * N, E * N * C, N * C,
                                    N * C, N * 4 * C, N * 3 * C, N * C};
    memcpy(per_layer, layer, sizeof(layer));
    memcpy(single, once, sizeof(once));
}

// Activation floats of a stage of `layers` layers at B x T, in double so that a
// shape far too big for memory is measured, not wrapped (the memory check
// before any allocation); the attention rows' scratch not included.
static double gpt_stage_activation_floats(const GPTConfig *c, int B, int T, int layers, int split, int first,
                                          int last) {
    size_t per_layer[GPT_ACT_PER_LAYER], single[GPT_ACT_SINGLES];
    gpt_activation_sizes(c, B, T, split, first, last, per_layer, single);
    double total = 0.0;
    for (int s = 0; s < GPT_ACT_PER_LAYER; s++) total += (double)per_layer[s] * layers;
    for (int s = 0; s < GPT_ACT_SINGLES; s++) total += (double)single[s];
    return total;
}
static double gpt_activation_floats(const GPTConfig *c, int B, int T) {
    return gpt_stage_activation_floats(c, B, T, c->num_layers, 0, 1, 1) + (double)omp_threads() * T * T;
}

// Buffers for layers [l0, l1) at micro-batch B x T (split: keeps what the
// weight gradients need for a later gpt_stage_backward_weights).
static void gpt_activations_alloc(GPTActivations *a, const GPTConfig *cfg, int B, int T, int l0, int l1, int split) {
    if (a->memory && B <= a->B && T == a->T && l0 == a->l0 && l1 == a->l1 && split == a->split) return;
    gpt_activations_free(a);
    size_t L = cfg->num_layers;
    float ***slots[GPT_ACT_PER_LAYER] = {&a->ln1, &a->ln1_mean, &a->ln1_rstd, &a->qkv, &a->atty, &a->att,
                                         &a->residual2, &a->ln2, &a->ln2_mean, &a->ln2_rstd, &a->fch, &a->fch_gelu,
                                         &a->residual3, &a->dmlp_out, &a->dfch, &a->datt_out, &a->dqkv_l};
    float **singles[GPT_ACT_SINGLES] = {&a->encoded, &a->lnf, &a->lnf_mean, &a->lnf_rstd, &a->logits, &a->losses,
                                        &a->dlnf, &a->dresidual, &a->dln, &a->dbig, &a->dqkv, &a->datty};
    size_t sizes[GPT_ACT_PER_LAYER], single_sizes[GPT_ACT_SINGLES];
    gpt_activation_sizes(cfg, B, T, split, l0 == 0, (size_t)l1 == L, sizes, single_sizes);
    size_t scratch = (size_t)omp_threads() * T * T;
    a->num_floats = scratch;
    for (int s = 0; s < GPT_ACT_PER_LAYER; s++) a->num_floats += sizes[s] * (size_t)(l1 - l0);
    for (int s = 0; s < GPT_ACT_SINGLES; s++) a->num_floats += single_sizes[s];
    a->memory = (float *)alignedMallocCheck(sizeof(float) * a->num_floats);
    float **ptrs = (float **)callocCheck((size_t)GPT_ACT_PER_LAYER * L, sizeof(float *));
    float *cursor = a->memory;
    for (int s = 0; s < GPT_ACT_PER_LAYER; s++) {
        *slots[s] = ptrs + s * L;
        for (int l = l0; l < l1 && sizes[s]; l++) { (*slots[s])[l] = cursor; cursor += sizes[s]; }
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
    gpt_activations_alloc(&m->acts, &m->cfg, B, T, 0, m->cfg.num_layers, 0);
}

static void gpt_free(GPT *m) {
    gpt_activations_free(&m->acts);
    munmap(m->params, sizeof(float) * (size_t)m->layout.num_elements);
    munmap(m->grads, sizeof(float) * (size_t)m->layout.num_elements);
    if (m->tied_wte) {
        size_t n = (size_t)m->cfg.padded_vocab_size * (size_t)m->cfg.channels;
        munmap(m->tied_wte, sizeof(float) * n);
        munmap(m->tied_dwte, sizeof(float) * n);
    }
    param_layout_free(&m->layout);
    memset(m, 0, sizeof(*m));
}

// Forward of layers [a->l0, a->l1) on one micro-batch (B,T). The first stage
// embeds inputs; any other reads its input from a->encoded (what the stage
// before sent). The last stage, with targets, returns the mean loss over the
// B*T positions (a->losses holds each); without, returns 0 and a->logits
// holds the (B,T,V) logits; when dloss != 0 (training) the classifier's
// backward runs here too, fused with the softmax: logits become dloss *
// (softmax - onehot), dlnf is ready and the wte gradient of the classifier is
// accumulated. dloss is d(objective)/d(loss at one position): 1/(B*T) for one
// micro-batch, 1/(B*T*accum*ranks) with accumulation. Other stages return 0
// and leave their output in a->residual3[l1 - 1].
static float gpt_stage_forward(GPT *m, GPTActivations *a, const int *inputs, const int *targets, int B, int T,
                               float dloss) {
    const GPTConfig *c = &m->cfg;
    int L = c->num_layers, C = c->channels, NH = c->num_heads, V = c->vocab_size, l0 = a->l0, l1 = a->l1;
    CHECK(T <= c->max_seq_len, "sequence length %d exceeds max_seq_len %d", T, c->max_seq_len);
    CHECK(B <= a->B && T == a->T, "micro-batch %d x %d does not fit the activations (%d x %d)", B, T, a->B, a->T);
    const ParamLayout *pl = &m->layout;
    int N = B * T;
    a->trained = 0;
    if (l0 == 0) {
        for (int i = 0; i < N; i++)
            CHECK(inputs[i] >= 0 && inputs[i] < V, "input token %d out of range [0, %d)", inputs[i], V);
        float *wpe = m->params + param_tensor(pl, PK_WPE, -1)->offset;
        gpt_hooks_params_needed(&m->hooks, 0, HOOK_FORWARD);
        gpt_hooks_prefetch(&m->hooks, pl, 1);
        encoder_forward(a->encoded, inputs, gpt_wte(m), wpe, B, T, C);
        a->inputs = inputs;
    }
    for (int l = l0; l < l1; l++) {
        gpt_hooks_params_needed(&m->hooks, l + 1, HOOK_FORWARD);
        gpt_hooks_prefetch(&m->hooks, pl, l + 1 < l1 ? l + 2 : L + 1);
        LayerTensors w = layer_tensors(pl, m->params, l);
        float *residual = l == l0 ? a->encoded : a->residual3[l - 1];
        layernorm_forward(a->ln1[l], a->ln1_mean[l], a->ln1_rstd[l], residual, w.ln1w, w.ln1b, N, C);
        linear_forward(a->qkv[l], a->ln1[l], w.qkvw, w.qkvb, NULL, N, C, 3 * C);
        attention_forward(a->atty[l], a->att[l], NULL, a->qkv[l], B, T, C, NH);
        linear_forward(a->residual2[l], a->atty[l], w.attprojw, w.attprojb, residual, N, C, C);
        layernorm_forward(a->ln2[l], a->ln2_mean[l], a->ln2_rstd[l], a->residual2[l], w.ln2w, w.ln2b, N, C);
        linear_forward(a->fch[l], a->ln2[l], w.fcw, w.fcb, NULL, N, C, 4 * C);
        gelu_forward(a->fch_gelu[l], a->fch[l], (size_t)N * 4 * C);
        linear_forward(a->residual3[l], a->fch_gelu[l], w.fcprojw, w.fcprojb, a->residual2[l], N, 4 * C, C);
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
    layernorm_forward(a->lnf, a->lnf_mean, a->lnf_rstd, last_out, lnfw, lnfb, N, C);
    // classifier over the V real rows of wte (tied weights)
    matmul(0, 1, N, V, C, 1.0f, a->lnf, C, wte, C, 0.0f, a->logits, V);
    if (!targets) return 0.0f;
    for (int i = 0; i < N; i++)
        CHECK(targets[i] >= 0 && targets[i] < V, "target token %d out of range [0, %d)", targets[i], V);
    double total = softmax_crossentropy(a->logits, a->losses, targets, N, V, dloss);
    if (dloss != 0.0f) {
        float *dwte = gpt_dwte(m);
        // dlnf (N,C) = dlogits @ wte[:V]; dwte[:V] += dlogits^T @ lnf
        matmul(0, 0, N, C, V, 1.0f, a->logits, V, wte, C, 0.0f, a->dlnf, C);
        matmul(1, 0, V, C, N, 1.0f, a->logits, V, a->lnf, C, 1.0f, dwte, C);
        a->trained = 1;
    }
    return (float)(total / N);
}

// The weight gradients of layer l from its activations and the output
// gradients douts (the layer's own buffers with a split backward, the shared
// scratch right after the input gradients without).
typedef struct { const float *dmlp_out, *dfch, *datt_out, *dqkv; } LayerDouts;
static void gpt_layer_weight_grads(GPT *m, const GPTActivations *a, int l, LayerDouts d, int N) {
    int C = m->cfg.channels;
    LayerTensors g = layer_tensors(&m->layout, m->grads, l);
    linear_backward_weight(g.fcprojw, g.fcprojb, d.dmlp_out, a->fch_gelu[l], N, 4 * C, C);
    linear_backward_weight(g.fcw, g.fcb, d.dfch, a->ln2[l], N, C, 4 * C);
    linear_backward_weight(g.attprojw, g.attprojb, d.datt_out, a->atty[l], N, C, C);
    linear_backward_weight(g.qkvw, g.qkvb, d.dqkv, a->ln1[l], N, C, 3 * C);
}

// The embeddings' gradient (first stage): from the residual gradient at layer 0's input.
static void gpt_embedding_backward(GPT *m, GPTActivations *a) {
    const ParamLayout *pl = &m->layout;
    gpt_hooks_params_needed(&m->hooks, 0, HOOK_GRADS);
    float *dwpe = m->grads + param_tensor(pl, PK_WPE, -1)->offset;
    encoder_backward(gpt_dwte(m), dwpe, a->dresidual, a->inputs, a->B, a->T, m->cfg.channels);
    gpt_hooks_grads_ready(&m->hooks, 0);
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
    int L = c->num_layers, C = c->channels, NH = c->num_heads, l0 = a->l0, l1 = a->l1, split = a->split;
    int B = a->B, T = a->T, N = B * T;
    const ParamLayout *pl = &m->layout;
    float *dres = a->dresidual;
    if (l1 == L) {
        gpt_hooks_params_needed(&m->hooks, L + 1, HOOK_BACKWARD);
        gpt_hooks_prefetch(&m->hooks, pl, l1 > l0 ? l1 : 0);
        float *lnfw = m->params + param_tensor(pl, PK_LNFW, -1)->offset;
        float *dlnfw = m->grads + param_tensor(pl, PK_LNFW, -1)->offset;
        float *dlnfb = m->grads + param_tensor(pl, PK_LNFB, -1)->offset;
        float *last_out = l1 > l0 ? a->residual3[l1 - 1] : a->encoded;
        memset(dres, 0, sizeof(float) * (size_t)N * C);
        layernorm_backward(dres, dlnfw, dlnfb, a->dlnf, last_out, lnfw, a->lnf_mean, a->lnf_rstd, N, C);
        gpt_hooks_grads_ready(&m->hooks, L + 1);
    }
    for (int l = l1 - 1; l >= l0; l--) {
        gpt_hooks_params_needed(&m->hooks, l + 1, HOOK_BACKWARD);
        if (l > l0) gpt_hooks_prefetch(&m->hooks, pl, l);
        LayerTensors w = layer_tensors(pl, m->params, l);
        LayerTensors g = layer_tensors(pl, m->grads, l);
        float *residual = l == l0 ? a->encoded : a->residual3[l - 1];
        LayerDouts d = {dres, split ? a->dfch[l] : a->dbig, dres, split ? a->dqkv_l[l] : a->dqkv};
        if (split) {
            memcpy(a->dmlp_out[l], dres, sizeof(float) * (size_t)N * C);
            d.dmlp_out = a->dmlp_out[l];
        }
        // dres: gradient w.r.t. the layer output residual3 = residual2 + mlp(ln2(residual2))
        linear_backward_input(a->dbig, dres, w.fcprojw, N, 4 * C, C);
        if (!split) linear_backward_weight(g.fcprojw, g.fcprojb, dres, a->fch_gelu[l], N, 4 * C, C);
        gelu_backward_inplace(a->dbig, a->fch[l], (size_t)N * 4 * C);
        if (split) memcpy(a->dfch[l], a->dbig, sizeof(float) * (size_t)N * 4 * C);
        linear_backward_input(a->dln, a->dbig, w.fcw, N, C, 4 * C);
        if (!split) linear_backward_weight(g.fcw, g.fcb, a->dbig, a->ln2[l], N, C, 4 * C);
        layernorm_backward(dres, g.ln2w, g.ln2b, a->dln, a->residual2[l], w.ln2w, a->ln2_mean[l], a->ln2_rstd[l], N, C);
        // dres: gradient w.r.t. residual2 = residual + attn(ln1(residual))
        if (split) {
            memcpy(a->datt_out[l], dres, sizeof(float) * (size_t)N * C);
            d.datt_out = a->datt_out[l];
        }
        linear_backward_input(a->datty, dres, w.attprojw, N, C, C);
        if (!split) linear_backward_weight(g.attprojw, g.attprojb, dres, a->atty[l], N, C, C);
        attention_backward((float *)d.dqkv, a->att_scratch, a->datty, a->qkv[l], a->att[l], B, T, C, NH);
        linear_backward_input(a->dln, d.dqkv, w.qkvw, N, C, 3 * C);
        if (!split) linear_backward_weight(g.qkvw, g.qkvb, d.dqkv, a->ln1[l], N, C, 3 * C);
        layernorm_backward(dres, g.ln1w, g.ln1b, a->dln, residual, w.ln1w, a->ln1_mean[l], a->ln1_rstd[l], N, C);
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
        gpt_hooks_params_needed(&m->hooks, l + 1, HOOK_GRADS);
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

#endif  // LLMC_GPT_CPU_H
