// gpt_cpu.h: the GPT-2 model on the CPU in fp32: parameters and gradients as
// flat buffers laid out by model.h's table, activations for one micro-batch,
// forward (with the classifier's backward fused in when training), backward,
// and GPT-2 weight initialisation.
//
// Hooks (model.h's GPTHooks) let a distributed layer (ZeRO, overlapped
// gradient reduction) act at segment boundaries.
#ifndef LLMC_GPT_CPU_H
#define LLMC_GPT_CPU_H

#include <string.h>

#include "cpu_layers.h"
#include "model.h"
#include "model_init.h"

typedef struct {
    // per layer (L of each), pointers into one allocation
    float **ln1, **ln1_mean, **ln1_rstd;   // (N,C) (N) (N)
    float **qkv;                           // (N,3C)
    float **atty;                          // (N,C) attention output before projection
    float **att;                           // (B,NH,T,T) softmax probabilities
    float **residual2;                     // (N,C) after the attention block
    float **ln2, **ln2_mean, **ln2_rstd;   // (N,C) (N) (N)
    float **fch, **fch_gelu;               // (N,4C)
    float **residual3;                     // (N,C) output of the layer
    float *encoded;                        // (N,C)
    float *lnf, *lnf_mean, *lnf_rstd;      // (N,C) (N) (N)
    float *logits;                         // (N,V): logits, or dlogits after a training forward
    float *losses;                         // (N)
    // backward scratch
    float *dresidual;                      // (N,C) gradient of the residual stream
    float *dln;                            // (N,C)
    float *dbig;                           // (N,4C) MLP hidden gradient
    float *dqkv;                           // (N,3C)
    float *datty;                          // (N,C)
    float *dlnf;                           // (N,C)
    float *att_scratch;                    // threads * T * T
    float *memory;
    size_t num_floats;
} GPTActivations;

typedef struct {
    GPTConfig cfg;
    ParamLayout layout;
    float *params;   // (layout.num_elements)
    float *grads;    // (layout.num_elements)
    GPTActivations acts;
    int B, T;        // activation capacity
    int trained_batch;  // 1 when acts hold a training forward (dlogits ready for backward)
    const int *inputs;  // the batch of the last forward (B*T)
    GPTHooks hooks;
} GPT;

static void gpt_init(GPT *m, const GPTConfig *cfg) {
    memset(m, 0, sizeof(*m));
    m->cfg = *cfg;
    param_layout_init(&m->layout, cfg);
    m->params = (float *)alignedMallocCheck(sizeof(float) * (size_t)m->layout.num_elements);
    m->grads = (float *)alignedMallocCheck(sizeof(float) * (size_t)m->layout.num_elements);
    memset(m->params, 0, sizeof(float) * (size_t)m->layout.num_elements);
    memset(m->grads, 0, sizeof(float) * (size_t)m->layout.num_elements);
}

static void gpt_activations_free(GPTActivations *a) {
    free(a->memory);
    free(a->ln1);  // the per-layer pointer arrays share one allocation
    memset(a, 0, sizeof(*a));
}

// Floats of each activation buffer at micro-batch B x T: GPT_ACT_PER_LAYER
// buffers repeated per layer, then GPT_ACT_SINGLES used once (the order of the
// slots in gpt_alloc_activations). With B * T < 2^31 (train_setup.h) each fits
// in size_t; their sum over the layers need not (gpt_activation_floats).
#define GPT_ACT_PER_LAYER 13
#define GPT_ACT_SINGLES 13
static void gpt_activation_sizes(const GPTConfig *c, int B, int T, size_t per_layer[GPT_ACT_PER_LAYER],
                                 size_t single[GPT_ACT_SINGLES]) {
    size_t C = c->channels, NH = c->num_heads, V = c->vocab_size;
    size_t N = (size_t)B * T;
    size_t layer[GPT_ACT_PER_LAYER] = {N * C, N, N, N * 3 * C, N * C, (size_t)B * NH * T * T, N * C,
                                       N * C, N, N, N * 4 * C, N * 4 * C, N * C};
    size_t once[GPT_ACT_SINGLES] = {N * C, N * C, N, N, N * V, N, N * C, N * C, N * 4 * C, N * 3 * C, N * C, N * C,
                                    (size_t)omp_threads() * T * T};
    memcpy(per_layer, layer, sizeof(layer));
    memcpy(single, once, sizeof(once));
}

// All activation floats at B x T, in double so that a shape far too big for
// memory is measured, not wrapped (the memory check before any allocation).
static double gpt_activation_floats(const GPTConfig *c, int B, int T) {
    size_t per_layer[GPT_ACT_PER_LAYER], single[GPT_ACT_SINGLES];
    gpt_activation_sizes(c, B, T, per_layer, single);
    double total = 0.0;
    for (int s = 0; s < GPT_ACT_PER_LAYER; s++) total += (double)per_layer[s] * c->num_layers;
    for (int s = 0; s < GPT_ACT_SINGLES; s++) total += (double)single[s];
    return total;
}

static void gpt_alloc_activations(GPT *m, int B, int T) {
    GPTActivations *a = &m->acts;
    if (a->memory && B <= m->B && T == m->T) return;
    gpt_activations_free(a);
    size_t L = m->cfg.num_layers;
    float ***slots[GPT_ACT_PER_LAYER] = {&a->ln1, &a->ln1_mean, &a->ln1_rstd, &a->qkv, &a->atty, &a->att,
                                         &a->residual2, &a->ln2, &a->ln2_mean, &a->ln2_rstd, &a->fch, &a->fch_gelu,
                                         &a->residual3};
    float **singles[GPT_ACT_SINGLES] = {&a->encoded, &a->lnf, &a->lnf_mean, &a->lnf_rstd, &a->logits, &a->losses,
                                        &a->dresidual, &a->dln, &a->dbig, &a->dqkv, &a->datty, &a->dlnf,
                                        &a->att_scratch};
    size_t sizes[GPT_ACT_PER_LAYER], single_sizes[GPT_ACT_SINGLES];
    gpt_activation_sizes(&m->cfg, B, T, sizes, single_sizes);
    const int nslots = GPT_ACT_PER_LAYER, nsingles = GPT_ACT_SINGLES;
    a->num_floats = 0;
    for (int s = 0; s < nslots; s++) a->num_floats += sizes[s] * L;
    for (int s = 0; s < nsingles; s++) a->num_floats += single_sizes[s];
    a->memory = (float *)alignedMallocCheck(sizeof(float) * a->num_floats);
    float **ptrs = (float **)mallocCheck(sizeof(float *) * nslots * L);
    float *cursor = a->memory;
    for (int s = 0; s < nslots; s++) {
        *slots[s] = ptrs + s * L;
        for (size_t l = 0; l < L; l++) { (*slots[s])[l] = cursor; cursor += sizes[s]; }
    }
    for (int s = 0; s < nsingles; s++) {
        *singles[s] = cursor;
        cursor += single_sizes[s];
    }
    m->B = B;
    m->T = T;
}

static void gpt_free(GPT *m) {
    gpt_activations_free(&m->acts);
    free(m->params);
    free(m->grads);
    param_layout_free(&m->layout);
    memset(m, 0, sizeof(*m));
}

// Forward pass over inputs (B,T). With targets, returns the mean loss over the
// B*T positions (and acts.losses holds each); without, returns 0 and
// acts.logits holds the (B,T,V) logits. When dloss != 0 (training), the
// classifier's backward runs here too, fused with the softmax: logits become
// dloss * (softmax - onehot) and the wte gradient of the classifier is
// accumulated, ready for gpt_backward. dloss is d(objective)/d(loss at one
// position): 1/(B*T) for one micro-batch, 1/(B*T*accum*ranks) with accumulation.
static float gpt_forward(GPT *m, const int *inputs, const int *targets, int B, int T, float dloss) {
    const GPTConfig *c = &m->cfg;
    int L = c->num_layers, C = c->channels, NH = c->num_heads, V = c->vocab_size;
    CHECK(T <= c->max_seq_len, "sequence length %d exceeds max_seq_len %d", T, c->max_seq_len);
    for (int i = 0; i < B * T; i++)
        CHECK(inputs[i] >= 0 && inputs[i] < V, "input token %d out of range [0, %d)", inputs[i], V);
    gpt_alloc_activations(m, B, T);
    GPTActivations *a = &m->acts;
    const ParamLayout *pl = &m->layout;
    int N = B * T;
    float *wte = m->params + param_tensor(pl, PK_WTE, -1)->offset;
    float *wpe = m->params + param_tensor(pl, PK_WPE, -1)->offset;

    gpt_hooks_params_needed(&m->hooks, 0, 0);
    encoder_forward(a->encoded, inputs, wte, wpe, B, T, C);
    for (int l = 0; l < L; l++) {
        gpt_hooks_params_needed(&m->hooks, l + 1, 0);
        LayerTensors w = layer_tensors(pl, m->params, l);
        float *residual = l == 0 ? a->encoded : a->residual3[l - 1];
        layernorm_forward(a->ln1[l], a->ln1_mean[l], a->ln1_rstd[l], residual, w.ln1w, w.ln1b, N, C);
        linear_forward(a->qkv[l], a->ln1[l], w.qkvw, w.qkvb, NULL, N, C, 3 * C);
        attention_forward(a->atty[l], a->att[l], NULL, a->qkv[l], B, T, C, NH);
        linear_forward(a->residual2[l], a->atty[l], w.attprojw, w.attprojb, residual, N, C, C);
        layernorm_forward(a->ln2[l], a->ln2_mean[l], a->ln2_rstd[l], a->residual2[l], w.ln2w, w.ln2b, N, C);
        linear_forward(a->fch[l], a->ln2[l], w.fcw, w.fcb, NULL, N, C, 4 * C);
        gelu_forward(a->fch_gelu[l], a->fch[l], (size_t)N * 4 * C);
        linear_forward(a->residual3[l], a->fch_gelu[l], w.fcprojw, w.fcprojb, a->residual2[l], N, 4 * C, C);
    }
    gpt_hooks_params_needed(&m->hooks, L + 1, 0);
    float *lnfw = m->params + param_tensor(pl, PK_LNFW, -1)->offset;
    float *lnfb = m->params + param_tensor(pl, PK_LNFB, -1)->offset;
    layernorm_forward(a->lnf, a->lnf_mean, a->lnf_rstd, a->residual3[L - 1], lnfw, lnfb, N, C);
    // classifier over the V real rows of wte (tied weights)
    matmul(0, 1, N, V, C, 1.0f, a->lnf, C, wte, C, 0.0f, a->logits, V);
    m->inputs = inputs;
    m->trained_batch = 0;
    if (!targets) return 0.0f;
    for (int i = 0; i < N; i++)
        CHECK(targets[i] >= 0 && targets[i] < V, "target token %d out of range [0, %d)", targets[i], V);
    double total = softmax_crossentropy(a->logits, a->losses, targets, N, V, dloss);
    if (dloss != 0.0f) {
        float *dwte = m->grads + param_tensor(pl, PK_WTE, -1)->offset;
        // dlnf (N,C) = dlogits @ wte[:V]; dwte[:V] += dlogits^T @ lnf
        matmul(0, 0, N, C, V, 1.0f, a->logits, V, wte, C, 0.0f, a->dlnf, C);
        matmul(1, 0, V, C, N, 1.0f, a->logits, V, a->lnf, C, 1.0f, dwte, C);
        m->trained_batch = 1;
    }
    return (float)(total / N);
}

// Backward pass of the last training forward; accumulates into m->grads.
static void gpt_backward(GPT *m) {
    CHECK(m->trained_batch, "gpt_backward without a training forward (dloss != 0)");
    const GPTConfig *c = &m->cfg;
    int L = c->num_layers, C = c->channels, NH = c->num_heads;
    int B = m->B, T = m->T, N = B * T;
    GPTActivations *a = &m->acts;
    const ParamLayout *pl = &m->layout;
    float *dres = a->dresidual;

    gpt_hooks_params_needed(&m->hooks, L + 1, 1);
    float *lnfw = m->params + param_tensor(pl, PK_LNFW, -1)->offset;
    float *dlnfw = m->grads + param_tensor(pl, PK_LNFW, -1)->offset;
    float *dlnfb = m->grads + param_tensor(pl, PK_LNFB, -1)->offset;
    memset(dres, 0, sizeof(float) * (size_t)N * C);
    layernorm_backward(dres, dlnfw, dlnfb, a->dlnf, a->residual3[L - 1], lnfw, a->lnf_mean, a->lnf_rstd, N, C);
    gpt_hooks_grads_ready(&m->hooks, L + 1);

    for (int l = L - 1; l >= 0; l--) {
        gpt_hooks_params_needed(&m->hooks, l + 1, 1);
        LayerTensors w = layer_tensors(pl, m->params, l);
        LayerTensors g = layer_tensors(pl, m->grads, l);
        float *residual = l == 0 ? a->encoded : a->residual3[l - 1];
        // dres: gradient w.r.t. the layer output residual3 = residual2 + mlp(ln2(residual2))
        linear_backward(a->dbig, g.fcprojw, g.fcprojb, dres, a->fch_gelu[l], w.fcprojw, N, 4 * C, C, 0);
        gelu_backward_inplace(a->dbig, a->fch[l], (size_t)N * 4 * C);
        linear_backward(a->dln, g.fcw, g.fcb, a->dbig, a->ln2[l], w.fcw, N, C, 4 * C, 0);
        layernorm_backward(dres, g.ln2w, g.ln2b, a->dln, a->residual2[l], w.ln2w, a->ln2_mean[l], a->ln2_rstd[l], N, C);
        // dres: gradient w.r.t. residual2 = residual + attn(ln1(residual))
        linear_backward(a->datty, g.attprojw, g.attprojb, dres, a->atty[l], w.attprojw, N, C, C, 0);
        attention_backward(a->dqkv, a->att_scratch, a->datty, a->qkv[l], a->att[l], B, T, C, NH);
        linear_backward(a->dln, g.qkvw, g.qkvb, a->dqkv, a->ln1[l], w.qkvw, N, C, 3 * C, 0);
        layernorm_backward(dres, g.ln1w, g.ln1b, a->dln, residual, w.ln1w, a->ln1_mean[l], a->ln1_rstd[l], N, C);
        gpt_hooks_grads_ready(&m->hooks, l + 1);
    }
    gpt_hooks_params_needed(&m->hooks, 0, 1);
    float *dwte = m->grads + param_tensor(pl, PK_WTE, -1)->offset;
    float *dwpe = m->grads + param_tensor(pl, PK_WPE, -1)->offset;
    encoder_backward(dwte, dwpe, dres, m->inputs, B, T, C);
    gpt_hooks_grads_ready(&m->hooks, 0);
    m->trained_batch = 0;
}

static void gpt_zero_grad(GPT *m) { memset(m->grads, 0, sizeof(float) * (size_t)m->layout.num_elements); }

#endif  // LLMC_GPT_CPU_H
