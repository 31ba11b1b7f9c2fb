// adamw.cuh: the fused multi-tensor AdamW on the GPU over a range [begin, end)
// of the flat parameter buffer (model.h), so a ZeRO shard is just a range.
// fp32 master weights, fp32 gradients and fp32 moments; the floatX copy the
// model computes with is written from the updated master weight with
// stochastic rounding (random bits hashed from seed and element index: the
// same on every run). The arithmetic follows llmc/optimizer.h
// (torch.optim.AdamW's order). One launch updates every tensor: the host
// cuts the range into chunks that never cross a tensor, each with its
// weight-decay flag, and block b updates chunk b: 4 elements per thread with
// float4 loads and stores (the floatX copy as one 8-byte store) when that chunk
// of all five arrays is aligned for it (tested in the kernel, per chunk; a
// shard whose start is not a multiple of 4 goes element by element), the last
// len % 4 elements one by one. The same per-element arithmetic either way.
#ifndef LLMC_ADAMW_CUH
#define LLMC_ADAMW_CUH

// tests/test_kernels_emulated.cpp runs this header, launcher and plan
// included, on the CPU through tests/cuda_emulator.h.
#include "cuda_common.cuh"  // defines: cudaMallocCheck, CUDA_CHECK, hash_u32, launch_kernel, ...
#include "model.h"          // defines: ParamLayout, ParamTensor
#include "optimizer.h"      // defines: AdamWConfig
#include "param_map.h"      // defines: ParamMap, param_map_global_of

#define ADAMW_CHUNK 8192  // elements per block

typedef struct {
    int64_t offset;  // first element (index into the flat buffer)
    int64_t global;  // its place in the whole model's order (param_map.h), which seeds its rounding
    int32_t len;     // elements, <= ADAMW_CHUNK
    int32_t decay;   // 1: apply weight decay
} AdamWChunk;

typedef struct {
    int64_t begin, end;
    int num_chunks;
    AdamWChunk *d_chunks;
} AdamWPlan;

// Chunks of [begin, end): each tensor plus its alignment gap (gaps stay zero).
// map: the layout's buffer onto the global order (NULL: the whole model, the
// same order), so an element's stochastic rounding is the same whichever rank
// updates it (a row of a tensor-parallel slice: numbered from its row's start).
static inline void adamw_plan_init(AdamWPlan *ap, const ParamLayout *pl, int64_t begin, int64_t end,
                                   const ParamMap *map) {
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
                h[n].global = map ? param_map_global_of(map, o) : o;
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

// The kernel's scalars for one step: bias corrections folded into the step
// size and the second-moment denominator, decoupled decay as a factor.
static inline AdamWArgs adamw_args(const AdamWConfig *cfg, float grad_scale, uint64_t seed) {
    AdamWArgs a;
    a.beta1 = cfg->beta1;
    a.beta2 = cfg->beta2;
    a.eps = cfg->eps;
    a.step_size = cfg->lr / (1.0f - powf(cfg->beta1, (float)cfg->step));
    a.bc2_sqrt = sqrtf(1.0f - powf(cfg->beta2, (float)cfg->step));
    a.decay_factor = 1.0f - cfg->lr * cfg->weight_decay;
    a.grad_scale = grad_scale;
    a.seed = seed;
    return a;
}

// One element: p, m, v updated in place; returns the new master weight.
__device__ __forceinline__ float adamw_elem(float *p, float g, float *m, float *v, float decay, const AdamWArgs &a) {
    float gi = g * a.grad_scale;
    float pi = *p * decay;
    float mi = *m + (1.0f - a.beta1) * (gi - *m);
    float vi = a.beta2 * *v + (1.0f - a.beta2) * gi * gi;
    *m = mi;
    *v = vi;
    float denom = sqrtf(vi) / a.bc2_sqrt + a.eps;
    *p = pi - a.step_size * (mi / denom);
    return *p;
}

// params, params_compute, grads: indexed like the flat buffer; m, v: from begin.
__global__ void adamw_kernel(float *__restrict__ params, floatX *__restrict__ params_compute,
                             const float *__restrict__ grads, float *__restrict__ m, float *__restrict__ v,
                             const AdamWChunk *__restrict__ chunks, int64_t begin, AdamWArgs a) {
    AdamWChunk ch = chunks[blockIdx.x];
    float decay = ch.decay ? a.decay_factor : 1.0f;
    const int64_t o = ch.offset, ob = ch.offset - begin;
    int done = 0;
    // whole chunk, uniform per block: every array 16-byte aligned here (the floatX copy 8-byte)
    if ((((uintptr_t)(params + o) | (uintptr_t)(grads + o) | (uintptr_t)(m + ob) | (uintptr_t)(v + ob)) & 15u) == 0 &&
        ((uintptr_t)(params_compute + o) & 7u) == 0) {
        int nq = ch.len / 4;
        for (int k = threadIdx.x; k < nq; k += blockDim.x) {
            int64_t i = o + 4 * (int64_t)k;
            float4 p4 = *reinterpret_cast<const float4 *>(params + i);
            float4 g4 = *reinterpret_cast<const float4 *>(grads + i);
            float4 m4 = *reinterpret_cast<const float4 *>(m + (i - begin));
            float4 v4 = *reinterpret_cast<const float4 *>(v + (i - begin));
            float pf[4] = {p4.x, p4.y, p4.z, p4.w}, gf[4] = {g4.x, g4.y, g4.z, g4.w};
            float mf[4] = {m4.x, m4.y, m4.z, m4.w}, vf[4] = {v4.x, v4.y, v4.z, v4.w};
            uint32_t hb[4];
#pragma unroll
            for (int j = 0; j < 4; j++) {
                float p = adamw_elem(&pf[j], gf[j], &mf[j], &vf[j], decay, a);
                hb[j] = floatX_bits(to_floatX_stochastic(p, hash_u32(a.seed, (uint64_t)(ch.global + (i - o) + j))));
            }
            *reinterpret_cast<float4 *>(params + i) = make_float4(pf[0], pf[1], pf[2], pf[3]);
            *reinterpret_cast<float4 *>(m + (i - begin)) = make_float4(mf[0], mf[1], mf[2], mf[3]);
            *reinterpret_cast<float4 *>(v + (i - begin)) = make_float4(vf[0], vf[1], vf[2], vf[3]);
            *reinterpret_cast<uint2 *>(params_compute + i) = make_uint2(hb[0] | (hb[1] << 16), hb[2] | (hb[3] << 16));
        }
        done = nq * 4;
    }
    for (int k = done + threadIdx.x; k < ch.len; k += blockDim.x) {
        int64_t i = o + k;
        float pf = params[i], mf = m[i - begin], vf = v[i - begin];
        float p = adamw_elem(&pf, grads[i], &mf, &vf, decay, a);
        params[i] = pf;
        m[i - begin] = mf;
        v[i - begin] = vf;
        params_compute[i] = to_floatX_stochastic(p, hash_u32(a.seed, (uint64_t)(ch.global + (i - o))));
    }
}

// One AdamW step (cfg as llmc/optimizer.h) on the plan's range. seed varies per
// step (the caller mixes in the step number) so rounding noise is fresh.
static inline void gpu_adamw_update(const AdamWPlan *ap, float *params, floatX *params_compute, const float *grads,
                                    float *m, float *v, const AdamWConfig *cfg, float grad_scale, uint64_t seed,
                                    cudaStream_t s) {
    AdamWArgs a = adamw_args(cfg, grad_scale, seed);
    if (ap->num_chunks == 0) return;
    launch_kernel(adamw_kernel, ap->num_chunks, 256, 0, s, params, params_compute, grads, m, v, ap->d_chunks, ap->begin,
                  a);
    CUDA_CHECK_LAUNCH();
}

// The floatX copy of the plan's master weights exactly as the AdamW step seeded
// `seed` rounded them (a resumed run rebuilds it from a checkpoint's fp32
// weights). params, params_compute: indexed like the flat buffer.
__global__ void adamw_round_kernel(floatX *__restrict__ params_compute, const float *__restrict__ params,
                                   const AdamWChunk *__restrict__ chunks, uint64_t seed) {
    AdamWChunk ch = chunks[blockIdx.x];
    for (int k = threadIdx.x; k < ch.len; k += blockDim.x)
        params_compute[ch.offset + k] = to_floatX_stochastic(params[ch.offset + k], hash_u32(seed, (uint64_t)(ch.global + k)));
}
static inline void gpu_adamw_round_like_step(const AdamWPlan *ap, floatX *params_compute, const float *params,
                                             uint64_t seed, cudaStream_t s) {
    if (ap->num_chunks == 0) return;
    launch_kernel(adamw_round_kernel, ap->num_chunks, 256, 0, s, params_compute, params, ap->d_chunks, seed);
    CUDA_CHECK_LAUNCH();
}

#endif  // LLMC_ADAMW_CUH
