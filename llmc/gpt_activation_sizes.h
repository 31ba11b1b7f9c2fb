// gpt_activation_sizes.h: the CPU model's activation buffers (gpt_cpu.h's GPTActivations) as sizes, before
// anything is allocated: each buffer of a layer and of the ends at a micro-batch B x T (gpt_cpu.h lays them
// out in this order), context parallel's buffers beside them (context_parallel.h's), the floats of the whole
// model or of one pipeline stage, and the floats a pipeline rank holds at its schedule's peak. The trainer's
// memory line and check (train_gpt.c) and the planner (rank_memory.h, plan.c) use these formulas; nothing
// here allocates or runs.
#ifndef LLMC_GPT_ACTIVATION_SIZES_H
#define LLMC_GPT_ACTIVATION_SIZES_H

#include <string.h>

#include "model.h"        // defines: GPTConfig
#include "pp_layout.h"    // defines: PPLayout
#include "pp_schedule.h"  // defines: PPKind, pp_peak_alive_theory, pp_stage_of
#include "utils.h"        // defines: omp_threads

// The activation buffers: GPT_ACT_PER_LAYER per layer of the stage (the last
// GPT_ACT_SPLIT of them only with a split backward), then GPT_ACT_SINGLES once
// (the ends' only on the first or last stage), in the order of the slots in
// gpt_activations_alloc. With B * T < 2^31 (train_setup.h) each fits in
// size_t; their sum over the layers need not (gpt_activation_floats). T is the
// rank's positions of a sequence: with context parallel (cp > 1) the
// probabilities are context_parallel.h's (against every position), not here.
#define GPT_ACT_PER_LAYER 17
#define GPT_ACT_SPLIT 4
#define GPT_ACT_SINGLES 13
static void gpt_activation_sizes(const GPTConfig *c, int B, int T, int split, int last, int tp, int sp, int cp,
                                 size_t per_layer[GPT_ACT_PER_LAYER], size_t single[GPT_ACT_SINGLES]) {
    size_t C = c->channels, Cl = C / tp, NH = c->num_heads / tp;
    size_t V = tp > 1 ? (size_t)c->padded_vocab_size / tp : (size_t)c->vocab_size;  // (a slice's real ids: at most)
    size_t N = (size_t)B * T, Nl = sp ? N / tp : N, S = split ? 1 : 0, E = last ? 1 : 0, P = tp > 1 ? 1 : 0;
    size_t att = cp > 1 ? 0 : (size_t)B * NH * T * T;
    size_t layer[GPT_ACT_PER_LAYER] = {N * C, Nl, Nl, N * 3 * Cl, N * Cl, att, Nl * C,
                                       N * C, Nl, Nl, N * 4 * Cl, N * 4 * Cl, Nl * C,
                                       S * N * C, S * N * 4 * Cl, S * N * C, S * N * 3 * Cl};
    size_t once[GPT_ACT_SINGLES] = {Nl * C, E * N * C, E * Nl, E * Nl, E * N * V, E * N, E * N * C, Nl * C,
                                    N * C, N * 4 * Cl, N * 3 * Cl, N * Cl, P * N * C};
    memcpy(per_layer, layer, sizeof(layer));
    memcpy(single, once, sizeof(once));
}

// The attention backward's scratch beside the buffers (gpt_cpu.h's att_scratch): a thread's T x T
// scores (context parallel: none here; context_parallel.h has its own).
static inline size_t gpt_attention_scratch_floats(int T, int cp) {
    return cp > 1 ? 0 : (size_t)omp_threads() * T * T;
}

// Context parallel's buffers (context_parallel.h) for micro-batches of B sequences of T positions (the
// whole sequence) over cp ranks, the rank holding Cl channels and NHl heads: a layer's, kept from its
// forward to its backward (every position's K and V, B x T x 2Cl, and the probabilities of the rank's
// T/cp queries against them, B x NHl x T/cp x T) ...
static inline double cp_layer_act_floats(int B, int T, int cp, int Cl, int NHl) {
    return (double)B * T * 2 * Cl + (double)B * NHl * (T / cp) * T;
}
// ... and those the micro-batches share: the gathered pieces and the K | V gradients (B x T x 2Cl each), a
// thread's score gradients (T/2cp x T), the rank's rows of wpe and their gradient (T/cp x C each).
static inline double cp_shared_act_floats(int B, int T, int cp, int C, int Cl) {
    return 2.0 * B * T * 2 * Cl + (double)omp_threads() * (T / (2 * cp)) * T + 2.0 * (T / cp) * C;
}

// Activation floats of a stage of `layers` layers at B sequences of T
// positions over cp context ranks (the rank's T/cp of them, and context
// parallel's layer buffers), in double so that a shape far too big for
// memory is measured, not wrapped (the memory check before any allocation);
// the attention's scratch and context parallel's shared buffers not included.
static double gpt_stage_activation_floats(const GPTConfig *c, int B, int T, int layers, int split, int last, int tp,
                                          int sp, int cp) {
    size_t per_layer[GPT_ACT_PER_LAYER], single[GPT_ACT_SINGLES];
    gpt_activation_sizes(c, B, T / cp, split, last, tp, sp, cp, per_layer, single);
    double total = 0.0;
    for (int s = 0; s < GPT_ACT_PER_LAYER; s++) total += (double)per_layer[s] * layers;
    for (int s = 0; s < GPT_ACT_SINGLES; s++) total += (double)single[s];
    if (cp > 1) total += layers * cp_layer_act_floats(B, T, cp, c->channels / tp, c->num_heads / tp);
    return total;
}
// Context parallel's shared buffers on a rank (none without it).
static double cp_rank_shared_floats(const GPTConfig *c, int B, int T, int tp, int cp) {
    return cp > 1 ? cp_shared_act_floats(B, T, cp, c->channels, c->channels / tp) : 0.0;
}
static double gpt_activation_floats(const GPTConfig *c, int B, int T, int tp, int sp, int cp) {
    return gpt_stage_activation_floats(c, B, T, c->num_layers, 0, 1, tp, sp, cp) +
           (double)gpt_attention_scratch_floats(T / cp, cp) + cp_rank_shared_floats(c, B, T, tp, cp);
}

// Activation floats pipeline rank `rank`'s micro-batches in flight need at
// the schedule's peak of m micro-batches (the memory check and line; the
// allocation grows to it as it runs): that many sets of its average chunk,
// each with the ends' buffers (an over-estimate for a middle stage), and
// context parallel's shared buffers once.
static double pipeline_rank_activation_floats(const GPTConfig *cfg, const PPLayout *layout, PPKind kind, int rank,
                                              int m, int B, int T, int tp, int sp, int cp) {
    int peak = pp_peak_alive_theory(kind, layout->pp, layout->v, m, rank), layers = 0;
    for (int c = 0; c < layout->v; c++) {
        int g = pp_stage_of(layout->pp, rank, c);
        layers += layout->first_layer[g + 1] - layout->first_layer[g];
    }
    return (double)peak * gpt_stage_activation_floats(cfg, B, T, (layers + layout->v - 1) / layout->v,
                                                      kind == PP_ZB1P, 1, tp, sp, cp) +
           cp_rank_shared_floats(cfg, B, T, tp, cp);
}

#endif  // LLMC_GPT_ACTIVATION_SIZES_H
