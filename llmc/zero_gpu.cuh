// zero_gpu.cuh: data parallelism with ZeRO-0 or ZeRO-1 for the GPU trainer
// (gpt_gpu.cuh), over a device data group (comm_nccl.cuh or comm_staged.cuh)
// and its host group (comm.h: scalars and the final weights).
//
//   --zero 0: after the last micro-step's backward the fp32 gradients are
//             all-reduced in buckets of --bucket-mb; every rank holds the full
//             master weights and AdamW state and updates all of them.
//   --zero 1: the gradients are reduce-scattered in place in buckets, so each
//             rank holds the sum of its shard (shard.h) at its place in the
//             full buffer; the model holds master weights and AdamW moments of
//             that shard only (gpu_gpt_init's shard), updates them, and the
//             updated bf16 weights are all-gathered in buckets.
// The gradients are the mean over the whole global batch already (the loss
// scale counts every rank's tokens), so the reductions are plain sums.
// No overlap with the backward: gpt_gpu.cuh has no per-layer hook, so every
// bucket starts once the backward is done (all of them in flight at once).
#ifndef LLMC_ZERO_GPU_CUH
#define LLMC_ZERO_GPU_CUH

#include <math.h>

#include "comm.h"
#include "gpt_gpu.cuh"
#include "shard.h"

typedef struct {
    GPTGPU *model;
    CommGroup *dp;        // device data group
    CommGroup *host_dp;   // the same ranks on host buffers
    int stage;
    ShardMap map;         // this rank's shard of the flat buffer (the model holds it at stage 1)
    int64_t bucket_elems;
    int64_t num_buckets;
    CommRequest *reqs;    // one per bucket
    size_t *counts;       // scratch: dp->size counts
} ZeroGPU;

// The model's shard for gpu_gpt_init: this rank's at stage 1, all of it at stage 0.
static inline int zero_gpu_shard_rank(int stage, const CommGroup *dp) { return stage >= 1 ? dp->rank : 0; }
static inline int zero_gpu_shard_world(int stage, const CommGroup *dp) { return stage >= 1 ? dp->size : 1; }

static inline void zero_gpu_init(ZeroGPU *z, GPTGPU *model, CommGroup *dp, CommGroup *host_dp, int stage,
                                 double bucket_mb) {
    memset(z, 0, sizeof(*z));
    CHECK(stage == 0 || stage == 1, "ZeRO stage %d on the GPU", stage);
    z->model = model;
    z->dp = dp;
    z->host_dp = host_dp;
    z->stage = stage;
    shard_map_init(&z->map, model->layout.num_elements, dp->rank, dp->size);
    z->bucket_elems = zero_bucket_elems(bucket_mb);
    z->num_buckets = ceil_div_i64(z->map.num_elements, z->bucket_elems);
    z->reqs = (CommRequest *)mallocCheck(sizeof(CommRequest) * (size_t)z->num_buckets);
    z->counts = (size_t *)mallocCheck(sizeof(size_t) * (size_t)dp->size);
}

// The memory this rank holds (shard.h's formula): bf16 weights, fp32
// gradients, fp32 master weights + AdamW m, v.
static inline ZeroMemory zero_gpu_memory(const ZeroGPU *z) {
    return zero_memory(z->stage, &z->map, sizeof(bf16), sizeof(float), 3 * sizeof(float));
}

static inline void zero_gpu_bucket(const ZeroGPU *z, int64_t b, int64_t *lo, int64_t *hi) {
    *lo = b * z->bucket_elems;
    *hi = shard_clip(*lo + z->bucket_elems, z->map.num_elements);
}

// After the last micro-step's backward: reduces the gradients (stage 0: all of
// them; stage 1: this rank's shard) and returns the global gradient norm.
static inline float zero_gpu_reduce_grads(ZeroGPU *z) {
    NVTX_RANGE("reduce_grads");
    float *g = z->model->grads;
    for (int64_t b = 0; b < z->num_buckets; b++) {
        int64_t lo, hi, plo, phi;
        zero_gpu_bucket(z, b, &lo, &hi);
        if (z->stage == 0) {
            z->reqs[b] = comm_all_reduce_start(z->dp, g + lo, (size_t)(hi - lo), COMM_F32);
        } else {
            shard_piece(&z->map, lo, hi, &plo, &phi);
            shard_counts(&z->map, lo, hi, z->counts);
            z->reqs[b] = comm_reduce_scatter_start(z->dp, g + lo, g + plo, z->counts, COMM_F32);
        }
    }
    comm_wait_all(z->reqs, (int)z->num_buckets);
    double ss = gpu_gpt_grad_sumsq(z->model);  // the model's shard: all at stage 0
    if (z->stage == 1) comm_all_reduce(z->host_dp, &ss, 1, COMM_F64);
    return (float)sqrt(ss);
}

// After the AdamW step on the shard: every rank gets every updated bf16 weight.
static inline void zero_gpu_gather_weights(ZeroGPU *z) {
    if (z->stage == 0) return;
    NVTX_RANGE("gather_weights");
    bf16 *w = z->model->params_bf16;
    for (int64_t b = 0; b < z->num_buckets; b++) {
        int64_t lo, hi;
        zero_gpu_bucket(z, b, &lo, &hi);
        shard_counts(&z->map, lo, hi, z->counts);
        z->reqs[b] = comm_all_gather_start(z->dp, NULL, w + lo, z->counts, COMM_BF16);
    }
    comm_wait_all(z->reqs, (int)z->num_buckets);
}

// The full fp32 master weights into host (num_elements) on every rank (collective).
static inline void zero_gpu_get_params(ZeroGPU *z, float *host) {
    gpu_gpt_get_params(z->model, host);  // this rank's shard (all at stage 0)
    if (z->stage == 0) return;
    shard_counts(&z->map, 0, z->map.num_elements, z->counts);
    CommRequest r = comm_all_gather_start(z->host_dp, NULL, host, z->counts, COMM_F32);
    comm_wait(&r);
}

static inline void zero_gpu_free(ZeroGPU *z) {
    free(z->reqs);
    free(z->counts);
    memset(z, 0, sizeof(*z));
}

#endif  // LLMC_ZERO_GPU_CUH
