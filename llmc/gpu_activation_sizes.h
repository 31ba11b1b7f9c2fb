// gpu_activation_sizes.h: the GPU trainer's activation buffers (gpt_gpu.cuh's GPUActs and GPUScratch,
// context_parallel.cuh's CPGPU) as sizes and offsets, before anything is allocated: each buffer of a
// layer and of a stage's ends at a micro-batch B x T (T: the rank's positions), which of a layer's buffers
// its recompute policy (recompute.h) leaves to the scratch's one shared copy, the layout of one
// micro-batch's activations and of the scratch in one allocation each (every buffer 256-byte aligned),
// and the activation bytes of a rank's memory line: one micro-batch's activations (a pipeline: the sets of
// each chunk its runtime allocates), the scratch and context parallel's buffers. gpt_gpu.cuh lays its buffers out with
// these layouts, so its memory line and check and the planner (plan_model.h) are one formula; nothing
// here allocates or runs.
#ifndef LLMC_GPU_ACTIVATION_SIZES_H
#define LLMC_GPU_ACTIVATION_SIZES_H

#include <stddef.h>
#include <string.h>

#include "model.h"      // defines: GPTConfig, ParamHolding
#include "pp_layout.h"  // defines: PPRankSets, pp_stage_of
#include "recompute.h"  // defines: RecomputePolicy, RecomputeKind, recompute_layer

#define GPU_FLOATX_BYTES 2  // the compute type's (precision.cuh's floatX: bf16)

// A layer's buffers' elements in GPUActs's order: GPU_ACT_BF floatX ones (the
// 4 after the layer's output only with a split backward, the gathered K and V
// only with context parallel: else 0), GPU_ACT_F32 fp32  ones.
#define GPU_ACT_BF 13
#define GPU_ACT_F32 5
#define GPU_ACT_FCH_GELU 6
#define GPU_ACT_RESIDUAL3 7
#define GPU_ACT_KV 12
static void gpu_layer_elems(const GPTConfig *c, int B, int T, int split, int tp, int sp, int cp,
                            size_t bf[GPU_ACT_BF], size_t f32[GPU_ACT_F32]) {
    size_t C = c->channels, Cl = C / tp, NH = c->num_heads / tp, N = (size_t)B * T, Nl = sp ? N / tp : N;
    size_t S = split ? 1 : 0, KV = cp > 1 ? N * (size_t)cp * 2 * Cl : 0;
    size_t b[GPU_ACT_BF] = {N * C, N * 3 * Cl, N * Cl, Nl * C, N * C, N * 4 * Cl, N * 4 * Cl, Nl * C,
                            S * N * C, S * N * 4 * Cl, S * N * C, S * N * 3 * Cl, KV};
    size_t f[GPU_ACT_F32] = {Nl, Nl, Nl, Nl, (size_t)B * NH * T};
    memcpy(bf, b, sizeof(b));
    memcpy(f32, f, sizeof(f));
}
// Whether a layer of recompute kind `kind` leaves its buffer s (f32: an fp32
// one) to the scratch's shared copy: selective the GELU output; full all but
// the layer's output (the next one's input) and a split backward's gradients
// (the gathered K and V too: its recomputed forward gathers them again).
static inline int gpu_act_shared(int s, int f32, RecomputeKind kind) {
    if (kind == RECOMPUTE_FULL) return f32 || s < GPU_ACT_RESIDUAL3 || s == GPU_ACT_KV;
    return kind == RECOMPUTE_SELECTIVE && !f32 && s == GPU_ACT_FCH_GELU;
}

// The column-reduction scratch of the LayerNorm backward's parameter pass (N rows of C: 2 partial sums of
// each LN_ROWS_PER_CHUNK rows) and of the bias gradients' column sums (one of each COLSUM_ROWS_PER_CHUNK).
#define LN_ROWS_PER_CHUNK 128  // rows summed by one block of the parameter-gradient pass (layernorm.cuh)
#define COLSUM_ROWS_PER_CHUNK 256  // (colsum.cuh)
static inline size_t layernorm_scratch_floats(int N, int C) {
    return 2 * (((size_t)N + LN_ROWS_PER_CHUNK - 1) / LN_ROWS_PER_CHUNK) * (size_t)C;
}
static inline size_t colsum_scratch_floats(int N, int C) {
    return (((size_t)N + COLSUM_ROWS_PER_CHUNK - 1) / COLSUM_ROWS_PER_CHUNK) * (size_t)C;
}

// Device bytes of context parallel's shared buffers (context_parallel.cuh's CPGPU) for B sequences of T
// positions over cp ranks, C channels (Cl of them on the rank): the gathered K | V pieces, their gradients
// in both orders, the rank's wpe rows and gradient, the positions.
static inline size_t cp_gpu_bytes(int cp, int B, int T, int C, int Cl) {
    size_t kv = (size_t)B * T * 2 * Cl, Tl = (size_t)(T / cp);
    return kv * GPU_FLOATX_BYTES + 2 * kv * sizeof(float) + Tl * C * (GPU_FLOATX_BYTES + sizeof(float)) +
           (Tl + 2 * (size_t)T) * sizeof(int);
}

// The layouts below give each buffer its offset in the allocation (a bump allocator, every buffer
// 256-byte aligned) through place (NULL: only count), by kind: a layer's floatX buffer s or fp32 buffer
// s (GPU_BUF_SHARED: the scratch's shared copy of a recomputing layer), a stage's end s, a scratch
// part s, the scratch's shared copy of layer buffer s (floatX, then fp32).
typedef enum { GPU_BUF_LAYER_BF, GPU_BUF_LAYER_F32, GPU_BUF_END, GPU_BUF_SCRATCH, GPU_BUF_SHARED_BF,
               GPU_BUF_SHARED_F32 } GPUBufKind;
typedef void (*GPUBufPlace)(void *ctx, GPUBufKind kind, int s, int layer, size_t offset);
#define GPU_BUF_SHARED ((size_t)-1)
static inline size_t gpu_take(size_t *off, size_t bytes) {
    size_t at = (*off + 255) / 256 * 256;
    *off = at + bytes;
    return at;
}

// The ends of a stage's activations, in GPUActs's order: the input (the embeddings, or the activation
// the stage before sent), the residual stream's gradient (fp32), and on the last stage ln_f's statistics
// and the classifier's gradient into it.
#define GPU_ACT_ENDS 5
// One micro-batch's activations of layers [l0, l1) (all of them: the whole model): each floatX buffer of
// each layer, each fp32 one, then the ends. Returns the bytes.
static size_t gpu_acts_layout(const GPTConfig *c, int B, int T, int l0, int l1, const RecomputePolicy *rp, int split,
                              int tp, int sp, int cp, GPUBufPlace place, void *ctx) {
    size_t C = c->channels, N = (size_t)B * T, Nl = sp ? N / tp : N, off = 0;
    size_t bf[GPU_ACT_BF], f32[GPU_ACT_F32];
    gpu_layer_elems(c, B, T, split, tp, sp, cp, bf, f32);
    for (int s = 0; s < GPU_ACT_BF; s++)
        for (int l = l0; l < l1 && bf[s]; l++) {
            size_t at = gpu_act_shared(s, 0, recompute_layer(rp, l)) ? GPU_BUF_SHARED
                                                                     : gpu_take(&off, bf[s] * GPU_FLOATX_BYTES);
            if (place) place(ctx, GPU_BUF_LAYER_BF, s, l, at);
        }
    for (int s = 0; s < GPU_ACT_F32; s++)
        for (int l = l0; l < l1; l++) {
            size_t at = gpu_act_shared(s, 1, recompute_layer(rp, l)) ? GPU_BUF_SHARED
                                                                     : gpu_take(&off, f32[s] * sizeof(float));
            if (place) place(ctx, GPU_BUF_LAYER_F32, s, l, at);
        }
    size_t last = l1 == c->num_layers;
    size_t ends[GPU_ACT_ENDS] = {Nl * C * GPU_FLOATX_BYTES, Nl * C * 4, last * Nl * 4, last * Nl * 4,
                                 last * Nl * C * GPU_FLOATX_BYTES};
    for (int s = 0; s < GPU_ACT_ENDS; s++)
        if (ends[s]) {
            size_t at = gpu_take(&off, ends[s]);
            if (place) place(ctx, GPU_BUF_END, s, -1, at);
        }
    return off;
}

// The buffers one pass uses and the next may reuse (shared by all micro-batches), in GPUScratch's order:
// ln_f's output, the logits, the projection, the residual's gradient in floatX, a LayerNorm's input
// gradient, the MLP's, qkv's and attention's output gradients, attention's backward scratch, the column
// reductions', the tensor group's partial sum and its loss statistics (tp > 1); then the recomputing
// layers' shared copies (those any layer of the model uses). last: the rank runs the classifier.
#define GPU_SCRATCH_PARTS 14
static size_t gpu_scratch_layout(const GPTConfig *c, int B, int T, const RecomputePolicy *rp, int last, int tp,
                                 int sp, int cp, GPUBufPlace place, void *ctx) {
    size_t C = c->channels, Cl = C / tp, NH = c->num_heads / tp, Vl = (size_t)c->padded_vocab_size / tp;
    size_t N = (size_t)B * T, off = 0, P = tp > 1 ? 1 : 0, E = last ? 1 : 0, X = GPU_FLOATX_BYTES;
    size_t scratch = layernorm_scratch_floats((int)N, (int)C), cs = colsum_scratch_floats((int)N, 4 * (int)C);
    if (cs > scratch) scratch = cs;
    size_t parts[GPU_SCRATCH_PARTS] = {E * N * C * X, E * N * Vl * X, N * C * X, N * C * X, N * C * X,
                                       N * 4 * Cl * X, N * 3 * Cl * X, N * Cl * X, (size_t)B * NH * T * 4,
                                       scratch * 4, P * N * C * 4, E * P * tp * N * 4, E * P * N * 4,
                                       E * P * 2 * N * 4};
    for (int s = 0; s < GPU_SCRATCH_PARTS; s++)
        if (parts[s]) {
            size_t at = gpu_take(&off, parts[s]);
            if (place) place(ctx, GPU_BUF_SCRATCH, s, -1, at);
        }
    size_t bf[GPU_ACT_BF], f32[GPU_ACT_F32];
    gpu_layer_elems(c, B, T, 0, tp, sp, cp, bf, f32);  // (a split backward's buffers are never shared)
    for (int s = 0; s < GPU_ACT_BF + GPU_ACT_F32; s++) {
        int f = s >= GPU_ACT_BF, k = f ? s - GPU_ACT_BF : s, used = 0;
        for (int l = 0; l < c->num_layers; l++) used |= gpu_act_shared(k, f, recompute_layer(rp, l));
        size_t bytes = used ? (f ? f32[k] * sizeof(float) : bf[k] * X) : 0;
        if (!bytes) continue;
        size_t at = gpu_take(&off, bytes);
        if (place) place(ctx, f ? GPU_BUF_SHARED_F32 : GPU_BUF_SHARED_BF, k, -1, at);
    }
    return off;
}

// Device bytes of one micro-batch's activations of layers [l0, l1) (with its encoder index on stage 0).
static size_t gpu_acts_bytes(const GPTConfig *c, int B, int T, int l0, int l1, const RecomputePolicy *rp, int split,
                             int tp, int sp, int cp) {
    return gpu_acts_layout(c, B, T, l0, l1, rp, split, tp, sp, cp, NULL, NULL) +
           (l0 == 0 ? sizeof(int) * (3 * (size_t)B * T + 1) : 0);
}

// What a layer keeps of a micro-batch's activations, on average over the
// model's layers (their recompute policies differ under full:K).
static size_t gpu_layer_acts_bytes(const GPTConfig *c, int B, int T, const RecomputePolicy *rp, int split, int tp,
                                   int sp, int cp) {
    size_t bf[GPU_ACT_BF], f32[GPU_ACT_F32], total = 0;
    gpu_layer_elems(c, B, T, split, tp, sp, cp, bf, f32);
    for (int l = 0; l < c->num_layers; l++) {
        RecomputeKind kind = recompute_layer(rp, l);
        for (int s = 0; s < GPU_ACT_BF; s++)
            if (!gpu_act_shared(s, 0, kind)) total += (bf[s] * GPU_FLOATX_BYTES + 255) / 256 * 256;
        for (int s = 0; s < GPU_ACT_F32; s++)
            if (!gpu_act_shared(s, 1, kind)) total += (f32[s] * sizeof(float) + 255) / 256 * 256;
    }
    return total / (size_t)c->num_layers;
}

// The activation bytes of a rank holding `held` (NULL: the whole model) at micro-batches of B x T (T the
// rank's positions, T x cp the whole sequence): one micro-batch's activations of the whole model, or of a
// pipeline rank (pipe) its sets (pp_layout.h's PPRankSets: those of each chunk its runtime allocates) of
// each chunk's layers, with the scratch and context parallel's shared buffers (cp > 1), those also into
// *context. The GPU trainer's memory line and check.
static size_t gpu_rank_activation_bytes(const GPTConfig *cfg, const ParamHolding *held, int B, int T, int cp,
                                        const RecomputePolicy *rp, int split, int tp, int sp, const PPRankSets *pipe,
                                        size_t *context) {
    int last = !held || held->lnf;
    size_t sets = 0;
    if (!pipe) sets = gpu_acts_bytes(cfg, B, T, 0, cfg->num_layers, rp, split, tp, sp, cp);
    for (int c = 0; pipe && c < pipe->layout->v; c++) {
        const int *first_layer = pipe->layout->first_layer, g = pp_stage_of(pipe->layout->pp, pipe->rank, c);
        sets += (size_t)pipe->sets[c] * gpu_acts_bytes(cfg, B, T, first_layer[g], first_layer[g + 1], rp, split, tp,
                                                       sp, cp);
    }
    *context = cp > 1 ? cp_gpu_bytes(cp, B, T * cp, cfg->channels, cfg->channels / tp) : 0;
    return sets + gpu_scratch_layout(cfg, B, T, rp, last, tp, sp, cp, NULL, NULL) + *context;
}

#endif  // LLMC_GPU_ACTIVATION_SIZES_H
