// zero_shard.h: ZeRO shards of the flat parameter buffer (model.h) and the memory
// each rank holds at each ZeRO stage. Shared by the CPU and GPU trainers.
//
// The flat buffer of N elements is padded up to world * S, with S = ceil(N /
// world) rounded up to PARAM_ALIGN, so any model works on any number of ranks:
// rank r owns [r*S, (r+1)*S) clipped to [0, N) (the last ranks may own
// padding only). Shards are ranges in rank order, so any range [lo, hi) of the
// buffer splits into one piece per rank, in rank order: exactly the counts of a
// reduce-scatter / all-gather (comm.h), and a shard is a range that
// optimizer.h's adamw_update_range updates in place.
//
// Memory per rank (bytes), with N elements, S = N / ranks (padded):
//   stage 0: params P*N + grads G*N + optimizer state O*N
//   stage 1: params P*N + grads G*N + O*S      (optimizer state and master weights sharded)
//   stage 2: params P*N + grads G*S + O*S      (gradients sharded too)
//   stage 3: params P*S + grads G*S + O*S      (parameters sharded too)
// CPU fp32 trainer: P = 4, G = 4, O = 8 (AdamW m + v; the fp32 params are the
// master copy). Mixed precision: O = 12 (fp32 master copy + m + v).
//
// Ownership: the model (gpt_cpu.h's GPT, gpt_gpu.cuh's GPTGPU), made with a
// ZeroSharding, owns its weights, gradients and AdamW state, sharded as its
// stage says, and updates its shard (gpt_update, gpu_gpt_update); checkpoints
// stage and load the model's state. The ZeRO layer only decides what is
// reduced and gathered when, and moves the data, through the model's hooks
// (model.h's GPTHooks). Each trainer compiles one backend, with the same
// verbs and struct shape: zero_cpu.h (CPU, MPI) and zero_gpu.cuh (GPU, NCCL
// or staged MPI). Both mains build the model with its sharding, set its
// weights, then attach the ZeRO layer; the pipeline drives the step:
//   Zero { model, dp, stage, map, bucket_elems, num_segments, reduce_now, reduced, inflight,
//          num_inflight, cap_inflight, counts, ... }   the layer: its fields begin with these (dp:
//                           the replica group; map: this rank's shard), the backend's follow
//   zero_init(z, model, dp, stage, bucket_mb)   takes over the model's hooks
//   zero_memory(z)          this rank's bytes by the formula above
//   zero_begin_step(z)      before the step's first pass (gradients cleared as the stage needs)
//   zero_begin_pass(z, last)  before a pass that writes gradients; last: the step's last of its segments
//   zero_wait_grads(z)      completes every reduction still in flight
//   zero_tp_sum_replicated(z)  sums the replicated tensors' reduced pieces over the tensor group
//   zero_reduced_grads(z, lo, hi, &plo, &phi)   where this rank's reduced gradient of [lo, hi) is
//   zero_grad_sumsq_owned(z)   this rank's part of the squared gradient norm (no communication)
//   zero_gather_params(z)   after the model's update: the updated weights reach every rank
//   zero_free(z)            completes what is in flight and gives the hooks back
// The gradients of a step are finished in one order on both (pipeline_cpu.h,
// pipeline_gpu.cuh): zero_wait_grads, zero_tp_sum_replicated, the tied
// embedding's gradient added (pipeline.h's pipeline_tie_grads), then the norm.
#ifndef LLMC_ZERO_SHARD_H
#define LLMC_ZERO_SHARD_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "model.h"  // defines: PARAM_ALIGN, param_num_segments

// What a model holds of its state (gpt_cpu.h's GPT, gpt_gpu.cuh's GPTGPU):
// its ZeRO stage and the shard of stage >= 1; (rank 0, world 1) at stage 0,
// where the model holds everything.
typedef struct {
    int stage;        // 0..3
    int rank, world;
} ZeroSharding;

static inline ZeroSharding zero_sharding(int stage, int rank, int world) {
    ZeroSharding sh = {stage, stage >= 1 ? rank : 0, stage >= 1 ? world : 1};
    return sh;
}

typedef struct {
    int rank, world;
    int64_t num_elements;  // N
    int64_t shard;         // S: elements per rank, padding included
    int64_t begin, end;    // this rank's range, clipped to [0, N) (begin == end: padding only)
} ShardMap;

static inline int64_t shard_clip(int64_t x, int64_t n) { return x < n ? x : n; }

static inline void shard_map_init(ShardMap *sm, int64_t num_elements, int rank, int world) {
    sm->rank = rank;
    sm->world = world;
    sm->num_elements = num_elements;
    sm->shard = round_up_i64(ceil_div_i64(num_elements, world), PARAM_ALIGN);
    sm->begin = shard_clip(sm->shard * rank, num_elements);
    sm->end = shard_clip(sm->shard * (rank + 1), num_elements);
}

// counts[r] (world entries): elements of [lo, hi) that rank r owns.
static inline void shard_counts(const ShardMap *sm, int64_t lo, int64_t hi, size_t *counts) {
    for (int r = 0; r < sm->world; r++) {
        int64_t b = shard_clip(sm->shard * r, sm->num_elements), e = shard_clip(sm->shard * (r + 1), sm->num_elements);
        int64_t a = lo > b ? lo : b, z = hi < e ? hi : e;
        counts[r] = z > a ? (size_t)(z - a) : 0;
    }
}

// This rank's piece of [lo, hi): [*plo, *phi) (empty when plo == phi).
static inline void shard_piece(const ShardMap *sm, int64_t lo, int64_t hi, int64_t *plo, int64_t *phi) {
    *plo = lo > sm->begin ? lo : sm->begin;
    *phi = hi < sm->end ? hi : sm->end;
    if (*phi < *plo) *phi = *plo;
}

// Elements per reduction bucket of bucket_mb MB of fp32 gradients (at least PARAM_ALIGN).
static inline int64_t zero_bucket_elems(double bucket_mb) {
    int64_t n = (int64_t)(bucket_mb * 1e6 / sizeof(float));
    return n < PARAM_ALIGN ? PARAM_ALIGN : n;
}

// The start of every backend's zero_init (the verbs' struct shape: z a Zero of
// either backend, model its model, dp a CommGroup): the model's sharding
// checked against stage and the group, then the common fields set and the
// scratch both backends use allocated (counts: dp->size; reduced:
// num_segments). A macro because the two Zero structs are distinct types.
#define ZERO_INIT_COMMON(z, model_, dp_, stage_, bucket_mb_)                                                     \
    do {                                                                                                        \
        memset((z), 0, sizeof(*(z)));                                                                           \
        CHECK((stage_) >= 0 && (stage_) <= 3, "ZeRO stage %d", (stage_));                                        \
        CHECK((model_)->sharding.stage == (stage_) &&                                                           \
                  (model_)->sharding.world == ((stage_) >= 1 ? (dp_)->size : 1),                                \
              "the model is sharded for ZeRO-%d over %d ranks, not ZeRO-%d over %d", (model_)->sharding.stage,  \
              (model_)->sharding.world, (stage_), (dp_)->size);                                                 \
        (z)->model = (model_);                                                                                  \
        (z)->dp = (dp_);                                                                                        \
        (z)->stage = (stage_);                                                                                  \
        shard_map_init(&(z)->map, (model_)->layout.num_elements, (dp_)->rank, (dp_)->size);                     \
        (z)->bucket_elems = zero_bucket_elems(bucket_mb_);                                                      \
        (z)->num_segments = param_num_segments(&(model_)->layout);                                              \
        (z)->counts = (size_t *)mallocCheck(sizeof(size_t) * (size_t)(dp_)->size);                              \
        (z)->reduced = (unsigned char *)callocCheck((size_t)(z)->num_segments, 1);                              \
    } while (0)

typedef struct {
    double params, grads, optimizer;  // bytes this rank holds
} ZeroMemory;

// The memory formula above for one rank.
static inline ZeroMemory shard_memory(int stage, const ShardMap *sm, double param_bytes, double grad_bytes,
                                     double state_bytes) {
    double n = (double)sm->num_elements, s = (double)sm->shard;
    ZeroMemory zm = {param_bytes * (stage >= 3 ? s : n), grad_bytes * (stage >= 2 ? s : n),
                     state_bytes * (stage >= 1 ? s : n)};
    return zm;
}

#endif  // LLMC_ZERO_SHARD_H
