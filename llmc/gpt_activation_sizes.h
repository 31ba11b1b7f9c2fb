// gpt_activation_sizes.h: the CPU model's activation buffers (gpt_cpu.h's GPTActivations) as sizes, before
// anything is allocated: each buffer of a layer and of the ends at a micro-batch B x T (gpt_cpu.h lays them
// out in this order), which of a layer's buffers its recompute policy (recompute.h) leaves to the set's one
// shared copy, the floats of the whole model or of one pipeline stage, and the floats a pipeline rank
// holds at its schedule's peak. The trainer's memory line and check (train_gpt.c) and the planner
// (rank_memory.h, plan.c) use these formulas; nothing here allocates or runs.
#ifndef LLMC_GPT_ACTIVATION_SIZES_H
#define LLMC_GPT_ACTIVATION_SIZES_H

#include <string.h>

#include "model.h"        // defines: GPTConfig
#include "pp_layout.h"    // defines: PPLayout
#include "pp_schedule.h"  // defines: PPKind, pp_peak_alive_theory, pp_stage_of
#include "recompute.h"    // defines: RecomputePolicy, RecomputeKind, recompute_layer
#include "utils.h"        // defines: omp_threads

// The activation buffers: GPT_ACT_PER_LAYER per layer of the stage (the last
// GPT_ACT_SPLIT of them only with a split backward), then GPT_ACT_SINGLES once
// (the ends' only on the first or last stage), in the order of the slots in
// gpt_activations_alloc. With B * T < 2^31 (train_setup.h) each fits in
// size_t; their sum over the layers need not (gpt_activation_floats).
#define GPT_ACT_PER_LAYER 17
#define GPT_ACT_SPLIT 4
#define GPT_ACT_SINGLES 13
#define GPT_ACT_ATT 5        // the softmax probabilities
#define GPT_ACT_FCH_GELU 11  // the GELU output (the slots before it: all but the layer's output)
#define GPT_ACT_RESIDUAL3 12  // the layer's output
static void gpt_activation_sizes(const GPTConfig *c, int B, int T, int split, int last, int tp, int sp,
                                 size_t per_layer[GPT_ACT_PER_LAYER], size_t single[GPT_ACT_SINGLES]) {
    size_t C = c->channels, Cl = C / tp, NH = c->num_heads / tp;
    size_t V = tp > 1 ? (size_t)c->padded_vocab_size / tp : (size_t)c->vocab_size;  // (a slice's real ids: at most)
    size_t N = (size_t)B * T, Nl = sp ? N / tp : N, S = split ? 1 : 0, E = last ? 1 : 0, P = tp > 1 ? 1 : 0;
    size_t layer[GPT_ACT_PER_LAYER] = {N * C, Nl, Nl, N * 3 * Cl, N * Cl, (size_t)B * NH * T * T, Nl * C,
                                       N * C, Nl, Nl, N * 4 * Cl, N * 4 * Cl, Nl * C,
                                       S * N * C, S * N * 4 * Cl, S * N * C, S * N * 3 * Cl};
    size_t once[GPT_ACT_SINGLES] = {Nl * C, E * N * C, E * Nl, E * Nl, E * N * V, E * N, E * N * C, Nl * C,
                                    N * C, N * 4 * Cl, N * 3 * Cl, N * Cl, P * N * C};
    memcpy(per_layer, layer, sizeof(layer));
    memcpy(single, once, sizeof(once));
}

// Whether a layer of recompute kind `kind` leaves per-layer slot s to the
// set's one shared copy (recomputed before its backward reads it): selective
// the probabilities and the GELU output, full everything before the layer's
// output (the next layer's input, kept; so are a split backward's gradients).
static inline int gpt_act_shared(int s, RecomputeKind kind) {
    if (kind == RECOMPUTE_FULL) return s <= GPT_ACT_FCH_GELU;
    return kind == RECOMPUTE_SELECTIVE && (s == GPT_ACT_ATT || s == GPT_ACT_FCH_GELU);
}

// Floats of per-layer slot s over layers [l0, l1) under policy p: the layers'
// own buffers, and the shared copy when any of them uses it.
static inline double gpt_act_slot_floats(size_t size, int s, const RecomputePolicy *p, int l0, int l1) {
    double own = 0.0;
    int shared = 0;
    for (int l = l0; l < l1; l++) {
        if (gpt_act_shared(s, recompute_layer(p, l))) shared = 1;
        else own += (double)size;
    }
    return own + (shared ? (double)size : 0.0);
}

// Activation floats of a stage of layers [l0, l1) at B x T under recompute
// policy p, in double so that a shape far too big for memory is measured, not
// wrapped (the memory check before any allocation); the attention rows'
// scratch not included.
static double gpt_stage_activation_floats(const GPTConfig *c, int B, int T, int l0, int l1, const RecomputePolicy *p,
                                          int split, int last, int tp, int sp) {
    size_t per_layer[GPT_ACT_PER_LAYER], single[GPT_ACT_SINGLES];
    gpt_activation_sizes(c, B, T, split, last, tp, sp, per_layer, single);
    double total = 0.0;
    for (int s = 0; s < GPT_ACT_PER_LAYER; s++) total += gpt_act_slot_floats(per_layer[s], s, p, l0, l1);
    for (int s = 0; s < GPT_ACT_SINGLES; s++) total += (double)single[s];
    return total;
}
static double gpt_activation_floats(const GPTConfig *c, int B, int T, int tp, int sp, const RecomputePolicy *p) {
    return gpt_stage_activation_floats(c, B, T, 0, c->num_layers, p, 0, 1, tp, sp) + (double)omp_threads() * T * T;
}

// Activation floats pipeline rank `rank`'s micro-batches in flight need at
// the schedule's peak of m micro-batches (the memory check and line; the
// allocation grows to it as it runs): that many sets of its largest chunk,
// each with the ends' buffers (an over-estimate for a middle stage).
static double pipeline_rank_activation_floats(const GPTConfig *cfg, const PPLayout *layout, PPKind kind, int rank,
                                              int m, int B, int T, int tp, int sp, const RecomputePolicy *p) {
    int peak = pp_peak_alive_theory(kind, layout->pp, layout->v, m, rank);
    double largest = 0.0;
    for (int c = 0; c < layout->v; c++) {
        int g = pp_stage_of(layout->pp, rank, c);
        double f = gpt_stage_activation_floats(cfg, B, T, layout->first_layer[g], layout->first_layer[g + 1], p,
                                               kind == PP_ZB1P, 1, tp, sp);
        if (f > largest) largest = f;
    }
    return (double)peak * largest;
}

#endif  // LLMC_GPT_ACTIVATION_SIZES_H
