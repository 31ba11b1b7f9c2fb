// rank_memory.h: the host memory one CPU-trainer rank holds in a dp x cp x tp x pp
// layout, before anything is allocated: its weights, gradients and AdamW state
// (zero_shard.h's formula over the ZeRO shard of what the rank holds), the
// last pipeline stage's copy of the tied wte and its gradient, and the
// activations (gpt_activation_sizes.h: gpt_cpu.h's buffers at the rank's T/cp
// positions under the recompute policy, with context parallel's gathered K, V
// and probabilities; a pipeline rank's activation sets, pp_rank_sets'). train_gpt.c
// checks it against the memory available and the planner (plan.c) predicts
// with it, so the two are the same formula. Only formulas: it includes no
// trainer runtime.
#ifndef LLMC_RANK_MEMORY_H
#define LLMC_RANK_MEMORY_H

#include "gpt_activation_sizes.h"  // defines: gpt_activation_floats, pipeline_rank_activation_floats
#include "model.h"                 // defines: GPTConfig, ParamHolding, ParamLayout, param_layout_init_held
#include "pp_layout.h"             // defines: PPLayout, pp_holding
#include "pp_schedule.h"           // defines: PPKind
#include "recompute.h"             // defines: RecomputePolicy
#include "utils.h"                 // defines: mallocCheck
#include "zero_shard.h"            // defines: ShardMap, shard_map_init, shard_memory

// One rank's place in the layout and its micro-batch.
typedef struct {
    int zero;                  // ZeRO stage over the data ranks
    int dp, dp_rank;           // the ranks ZeRO shards over (data x context), this one's index
    int tp, tp_rank, sp;       // tensor-parallel ranks, this one's index, sequence parallel
    int cp;                    // context-parallel ranks (each holds T/cp positions of every sequence)
    const PPLayout *pipeline;  // the stages (NULL: not pipelined)
    PPKind schedule;
    int pipe_rank;
    int accum, B, T;  // micro-batches a step (a pipeline's in flight), micro-batch shape (T: the whole sequence)
    RecomputePolicy recompute;  // which layers keep their activations (recompute.h)
    const PPRankSets *sets;     // a pipeline rank's activation sets (NULL: counted for the CPU trainer's lists)
} RankPlace;

typedef struct {
    double params, grads, optimizer;  // bytes of the rank's buffer (ZeRO's shard of them where sharded)
    double tied;                      // the last stage's wte copy and its gradient (pipelined, not on stage 0)
    double activations;               // bytes
    // at ZeRO-2/3 the released full buffers in use at once (zero_cpu.h): a micro-step's full gradient
    // before its reductions finish, and (ZeRO-3) the gathered embeddings and two layers' weights
    double transient;
} RankMemory;

static inline double rank_memory_total(const RankMemory *m) {
    return m->params + m->grads + m->optimizer + m->tied + m->activations + m->transient;
}

static RankMemory cpu_rank_memory(const GPTConfig *cfg, const RankPlace *p) {
    unsigned char *layers = (unsigned char *)mallocCheck((size_t)cfg->num_layers);
    ParamHolding holding = {1, 1, NULL};  // everything, or the rank's pipeline stages
    if (p->pipeline) holding = pp_holding(p->pipeline, p->pipe_rank, -1, cfg->num_layers, layers);
    ParamLayout pl;
    param_layout_init_held(&pl, cfg, &holding, p->tp, p->tp_rank);
    ShardMap sm;
    shard_map_init(&sm, pl.num_elements, p->dp_rank, p->dp);
    ZeroMemory zm = shard_memory(p->zero, &sm, 4, 4, 8);
    RankMemory m = {zm.params, zm.grads, zm.optimizer, 0, 0, 0};
    if (p->zero >= 2) m.transient = 4.0 * (double)(sm.num_elements - sm.shard);
    if (p->zero >= 3) {
        int64_t lo = 0, hi = 0;
        if (holding.embeddings) param_segment_range(&pl, 0, &lo, &hi);
        m.transient += 4.0 * ((double)(hi - lo) + 2.0 * (double)pl.layer_stride);
    }
    if (holding.lnf && !holding.embeddings) m.tied = 2 * 4.0 * cfg->padded_vocab_size / p->tp * cfg->channels;
    m.activations = 4.0 * (p->pipeline ? pipeline_rank_activation_floats(cfg, p->pipeline, p->schedule, p->pipe_rank,
                                                                         p->accum, p->sets, p->B, p->T, p->tp, p->sp, p->cp,
                                                                         &p->recompute)
                                       : gpt_activation_floats(cfg, p->B, p->T, p->tp, p->sp, p->cp, &p->recompute));
    param_layout_free(&pl);
    free(layers);
    return m;
}

#endif  // LLMC_RANK_MEMORY_H
