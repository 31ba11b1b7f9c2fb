// adamw.cuh: the fused multi-tensor AdamW on the GPU over a range [begin, end)
// of the flat parameter buffer (model.h), so a ZeRO shard is just a range.
// fp32 master weights, fp32 gradients and fp32 moments; the bf16 copy the
// model computes with is written from the updated master weight with
// stochastic rounding (random bits hashed from seed and element index: the
// same on every run). The arithmetic follows llmc/optimizer.h
// (torch.optim.AdamW's order). One launch updates every tensor: the host
// cuts the range into chunks that never cross a tensor, each with its
// weight-decay flag, and block b updates chunk b.
#ifndef LLMC_ADAMW_CUH
#define LLMC_ADAMW_CUH

#include "cuda_common.cuh"
#include "model.h"
#include "optimizer.h"

#define ADAMW_CHUNK 8192  // elements per block

typedef struct {
    int64_t offset;  // first element (index into the flat buffer)
    int32_t len;     // elements, <= ADAMW_CHUNK
    int32_t decay;   // 1: apply weight decay
} AdamWChunk;

typedef struct {
    int64_t begin, end;
    int num_chunks;
    AdamWChunk *d_chunks;
} AdamWPlan;

// Chunks of [begin, end): each tensor plus its alignment gap (gaps stay zero).
static inline void adamw_plan_init(AdamWPlan *ap, const ParamLayout *pl, int64_t begin, int64_t end) {
    int cap = 0;
    for (int pass = 0; pass < 2; pass++) {
        AdamWChunk *h = pass ? (AdamWChunk *)mallocCheck(sizeof(AdamWChunk) * (size_t)cap) : NULL;
        int n = 0;
        for (int ti = 0; ti < pl->num_tensors; ti++) {
            const ParamTensor *t = &pl->tensors[ti];
            int64_t t_end = ti + 1 < pl->num_tensors ? pl->tensors[ti + 1].offset : pl->num_elements;
            int64_t lo = t->offset > begin ? t->offset : begin, hi = t_end < end ? t_end : end;
            for (int64_t o = lo; o < hi; o += ADAMW_CHUNK, n++) {
                if (!h) continue;
                h[n].offset = o;
                h[n].len = (int32_t)(hi - o < ADAMW_CHUNK ? hi - o : ADAMW_CHUNK);
                h[n].decay = t->decay;
            }
        }
        if (!h) { cap = n; continue; }
        ap->begin = begin;
        ap->end = end;
        ap->num_chunks = n;
        ap->d_chunks = (AdamWChunk *)cudaMallocCheck(sizeof(AdamWChunk) * (size_t)n);
        CUDA_CHECK(cudaMemcpy(ap->d_chunks, h, sizeof(AdamWChunk) * (size_t)n, cudaMemcpyHostToDevice));
        free(h);
    }
}

static inline void adamw_plan_free(AdamWPlan *ap) {
    CUDA_CHECK(cudaFree(ap->d_chunks));
    memset(ap, 0, sizeof(*ap));
}

typedef struct {
    float beta1, beta2, eps, step_size, bc2_sqrt, decay_factor, grad_scale;
    uint64_t seed;
} AdamWArgs;

// params, params_bf16, grads: indexed like the flat buffer; m, v: from begin.
__global__ void adamw_kernel(float *params, bf16 *params_bf16, const float *grads, float *m, float *v,
                             const AdamWChunk *chunks, int64_t begin, AdamWArgs a) {
    AdamWChunk ch = chunks[blockIdx.x];
    float decay = ch.decay ? a.decay_factor : 1.0f;
    for (int k = threadIdx.x; k < ch.len; k += blockDim.x) {
        int64_t i = ch.offset + k;
        float gi = grads[i] * a.grad_scale;
        float p = params[i] * decay;
        float mi = m[i - begin] + (1.0f - a.beta1) * (gi - m[i - begin]);
        float vi = a.beta2 * v[i - begin] + (1.0f - a.beta2) * gi * gi;
        m[i - begin] = mi;
        v[i - begin] = vi;
        float denom = sqrtf(vi) / a.bc2_sqrt + a.eps;
        p = p - a.step_size * (mi / denom);
        params[i] = p;
        params_bf16[i] = bf16_stochastic(p, hash_u32(a.seed, (uint64_t)i));
    }
}

// One AdamW step (cfg as llmc/optimizer.h) on the plan's range. seed varies per
// step (the caller mixes in the step number) so rounding noise is fresh.
static inline void gpu_adamw_update(const AdamWPlan *ap, float *params, bf16 *params_bf16, const float *grads,
                                    float *m, float *v, const AdamWConfig *cfg, float grad_scale, uint64_t seed,
                                    cudaStream_t s) {
    AdamWArgs a;
    a.beta1 = cfg->beta1;
    a.beta2 = cfg->beta2;
    a.eps = cfg->eps;
    a.step_size = cfg->lr / (1.0f - powf(cfg->beta1, (float)cfg->step));
    a.bc2_sqrt = sqrtf(1.0f - powf(cfg->beta2, (float)cfg->step));
    a.decay_factor = 1.0f - cfg->lr * cfg->weight_decay;
    a.grad_scale = grad_scale;
    a.seed = seed;
    adamw_kernel<<<ap->num_chunks, 256, 0, s>>>(params, params_bf16, grads, m, v, ap->d_chunks, ap->begin, a);
    CUDA_CHECK_LAUNCH();
}

#endif  // LLMC_ADAMW_CUH
