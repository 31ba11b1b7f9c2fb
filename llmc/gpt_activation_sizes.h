// gpt_activation_sizes.h: the CPU model's activation buffers (gpt_cpu.h's GPTActivations) as sizes, before
// anything is allocated: each buffer of a layer and of the ends at a micro-batch B x T (gpt_cpu.h lays them
// out in this order), which of a layer's buffers its recompute policy (recompute.h) leaves to the set's one
// shared copy, context parallel's buffers beside them (context_parallel.h's), the floats of the whole model
// or of one pipeline stage, and the floats of the activation sets a pipeline rank allocates. The trainer's
// memory line and check (train_gpt.c) and the planner (rank_memory.h, plan.c) use these formulas; nothing
// here allocates or runs.
#ifndef LLMC_GPT_ACTIVATION_SIZES_H
#define LLMC_GPT_ACTIVATION_SIZES_H

#include <string.h>

#include "model.h"        // defines: GPTConfig
#include "pp_layout.h"    // defines: PPLayout, PPRankSets, pp_rank_sets_count
#include "pp_schedule.h"  // defines: PPKind, pp_stage_of
#include "recompute.h"    // defines: RecomputePolicy, RecomputeKind, recompute_layer, recompute_any
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
#define GPT_ACT_ATT 5        // the softmax probabilities
#define GPT_ACT_FCH_GELU 11  // the GELU output (the slots before it: all but the layer's output)
#define GPT_ACT_RESIDUAL3 12  // the layer's output
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

// Context parallel's buffers (context_parallel.h) for micro-batches of B sequences of T positions (the
// whole sequence) over cp ranks, the rank holding Cl channels and NHl heads: a slot's, kept from a layer's
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
// The slots of context parallel's layer buffers a micro-batch of layers [l0, l1) holds under policy p:
// one per layer that keeps its attention state, and one the layers that recompute it share.
static inline int cp_act_slots(const RecomputePolicy *p, int l0, int l1) {
    int slots = recompute_any(p, l0, l1);
    for (int l = l0; l < l1; l++) slots += recompute_layer(p, l) == RECOMPUTE_NONE;
    return slots;
}

// Activation floats of a stage of layers [l0, l1) at B sequences of T
// positions over cp context ranks (the rank's T/cp of them, and context
// parallel's slots) under recompute policy p, in double so that a shape far
// too big for memory is measured, not wrapped (the memory check before any
// allocation); the attention's scratch and context parallel's shared buffers
// not included.
static double gpt_stage_activation_floats(const GPTConfig *c, int B, int T, int l0, int l1, const RecomputePolicy *p,
                                          int split, int last, int tp, int sp, int cp) {
    size_t per_layer[GPT_ACT_PER_LAYER], single[GPT_ACT_SINGLES];
    gpt_activation_sizes(c, B, T / cp, split, last, tp, sp, cp, per_layer, single);
    double total = 0.0;
    for (int s = 0; s < GPT_ACT_PER_LAYER; s++) total += gpt_act_slot_floats(per_layer[s], s, p, l0, l1);
    for (int s = 0; s < GPT_ACT_SINGLES; s++) total += (double)single[s];
    if (cp > 1)
        total += cp_act_slots(p, l0, l1) * cp_layer_act_floats(B, T, cp, c->channels / tp, c->num_heads / tp);
    return total;
}
// Context parallel's shared buffers on a rank (none without it).
static double cp_rank_shared_floats(const GPTConfig *c, int B, int T, int tp, int cp) {
    return cp > 1 ? cp_shared_act_floats(B, T, cp, c->channels, c->channels / tp) : 0.0;
}
static double gpt_activation_floats(const GPTConfig *c, int B, int T, int tp, int sp, int cp,
                                    const RecomputePolicy *p) {
    return gpt_stage_activation_floats(c, B, T, 0, c->num_layers, p, 0, 1, tp, sp, cp) +
           (double)gpt_attention_scratch_floats(T / cp, cp) + cp_rank_shared_floats(c, B, T, tp, cp);
}

// Activation floats of pipeline rank `rank`'s sets for m micro-batches (the
// memory check and line): the sets of each chunk the runtime allocates
// (sets, or NULL: pp_layout.h's pp_rank_sets_count of the CPU trainer's lists, not fused),
// each with the ends' buffers (an over-estimate for a middle stage), and
// context parallel's shared buffers once.
static double pipeline_rank_activation_floats(const GPTConfig *cfg, const PPLayout *layout, PPKind kind, int rank,
                                              int m, const PPRankSets *sets, int B, int T, int tp, int sp,
                                              int cp, const RecomputePolicy *p) {
    PPRankSets counted;
    if (!sets) counted = pp_rank_sets_count(layout, kind, rank, m, 0), sets = &counted;
    double total = 0.0;
    for (int c = 0; c < layout->v; c++) {
        int g = pp_stage_of(layout->pp, rank, c);
        total += sets->sets[c] * gpt_stage_activation_floats(cfg, B, T, layout->first_layer[g],
                                                            layout->first_layer[g + 1], p, kind == PP_ZB1P, 1, tp,
                                                            sp, cp);
    }
    return total + cp_rank_shared_floats(cfg, B, T, tp, cp);
}

#endif  // LLMC_GPT_ACTIVATION_SIZES_H
