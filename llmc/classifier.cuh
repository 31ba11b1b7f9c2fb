// classifier.cuh: the fused softmax + cross-entropy + its backward over the
// logits (N, Vp) that the classifier matmul wrote (floatX). One block per row
// reads the row once into registers (thread t holds the 8-element chunks t,
// t + 1024, ...: 7 of them for Vp = 50304), takes the max, then the sum of
// exponentials (fp32, exp2 on the special-function unit, fixed-order block
// reductions), writes the loss, and in training overwrites the row in place
// with dloss * (softmax - onehot) (padded columns [V, Vp) set to 0), so the
// logits are read once and written once: the next matmuls read the dlogits
// from the same buffer. Chunks move as 16-byte vectors when Vp % 8 == 0 and
// the logits are 16-byte aligned (tested at launch), else element by element;
// rows longer than 65536 re-read the row from memory instead of holding it.
#ifndef LLMC_CLASSIFIER_CUH
#define LLMC_CLASSIFIER_CUH

// tests/test_kernels_emulated.cpp runs this header on the CPU through
// tests/cuda_emulator.h (LLMC_CUDA_EMULATION: the PTX helper is the emulator's).
#include "cuda_common.cuh"  // defines: block_max, reg_barrier_row, block_sum, aligned16, ...

#define CLASSIFIER_THREADS 1024
#define CLASSIFIER_MAX_NV 8  // chunks per thread held in registers: rows up to 8 * 1024 * 8 = 65536

// The chunk of row x starting at element e0, elements at or past V (the
// padding, or past the row) replaced by -inf: they drop out of the max, add
// exp(-inf) = 0 to the sum and come out as dlogits 0, with no test per element.
template <bool VEC>
__device__ __forceinline__ uint4 cls_load(const floatX *x, int e0, int V, int Vp) {
    uint4 v;
    if constexpr (VEC) v = e0 < Vp ? ld_floatX8(x + e0) : make_uint4(0u, 0u, 0u, 0u);
    else v = ld_floatX8_n(x + e0, Vp - e0);
    if (e0 + 8 > V) {
        uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int j = 0; j < 8; j++)
            if (e0 + j >= V) w[j / 2] = j % 2 ? (w[j / 2] & 0x0000ffffu) | 0xff800000u : (w[j / 2] & 0xffff0000u) | 0xff80u;
        v = make_uint4(w[0], w[1], w[2], w[3]);
    }
    return v;
}

// Chunk k of this thread: from the registers r (NV > 0) or re-read from row x.
template <int NV, bool VEC>
__device__ __forceinline__ uint4 cls_chunk(const uint4 (&r)[NV > 0 ? NV : 1], const floatX *x, int k, int V, int Vp) {
    if constexpr (NV > 0) return r[k];
    else return cls_load<VEC>(x, (k * CLASSIFIER_THREADS + (int)threadIdx.x) * 8, V, Vp);
}

__device__ __forceinline__ floatX2 u32_as_floatX2(uint32_t u) {
    floatX2 h;
    memcpy(&h, &u, sizeof(h));
    return h;
}

#define CLS_LOG2E 1.4426950408889634f

#ifndef LLMC_CUDA_EMULATION
// 2^x by the special-function unit (ex2.approx: ~2 ulp, subnormal results flushed to 0).
__device__ __forceinline__ float cls_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
#endif

// logits (N, Vp) floatX in/out; losses (N) fp32; targets (N).
template <int NV, bool VEC>
__global__ void __launch_bounds__(CLASSIFIER_THREADS)
    fused_classifier_kernel(floatX *logits, float *losses, const int *targets, int V, int Vp, float dloss,
                            int write_dlogits) {
    __shared__ float scratch[32];
    const int t = threadIdx.x;
    const int64_t row = blockIdx.x;
    floatX *x = logits + row * Vp;
    const int nk = NV > 0 ? NV : (Vp + 8 * CLASSIFIER_THREADS - 1) / (8 * CLASSIFIER_THREADS);
    uint4 r[NV > 0 ? NV : 1];
    if constexpr (NV > 0) {
#pragma unroll
        for (int k = 0; k < NV; k++) r[k] = cls_load<VEC>(x, (k * CLASSIFIER_THREADS + t) * 8, V, Vp);  // all in flight
    }
    const int y = targets[row];
    // read before the barriers in block_max: no thread writes the row before then
    const float xy = t == 0 ? to_float(x[y]) : 0.0f;
    // the max on the packed pairs (exact in floatX; no unpacking)
    floatX2 m2 = to_floatX2(-INFINITY, -INFINITY);
#pragma unroll
    for (int k = 0; k < nk; k++) {
        uint4 c = cls_chunk<NV, VEC>(r, x, k, V, Vp);
        m2 = __hmax2(__hmax2(m2, u32_as_floatX2(c.x)), __hmax2(u32_as_floatX2(c.y), __hmax2(u32_as_floatX2(c.z), u32_as_floatX2(c.w))));
    }
    float mx = block_max(fmaxf(__low2float(m2), __high2float(m2)), scratch);
    reg_barrier_row<NV>(r);  // see reg_barrier
    // sum of exp(x - mx) = 2^(x log2e - mx log2e); per chunk a fixed pairwise order
    const float mxl = mx * CLS_LOG2E;
    float sum = 0.0f;
#pragma unroll
    for (int k = 0; k < nk; k++) {
        float f[8];
        floatX8_unpack(f, cls_chunk<NV, VEC>(r, x, k, V, Vp));
#pragma unroll
        for (int j = 0; j < 8; j++) f[j] = cls_exp2(fmaf(f[j], CLS_LOG2E, -mxl));
        sum += ((f[0] + f[1]) + (f[2] + f[3])) + ((f[4] + f[5]) + (f[6] + f[7]));
    }
    sum = block_sum(sum, scratch);
    reg_barrier_row<NV>(r);
    const float lse = mx + logf(sum);
    if (t == 0) losses[row] = lse - xy;
    if (!write_dlogits) return;
    // dlogits = dloss * softmax (0 in the padding), minus dloss at the target
    const float lsel = lse * CLS_LOG2E;
#pragma unroll
    for (int k = 0; k < nk; k++) {
        int e0 = (k * CLASSIFIER_THREADS + t) * 8;
        if (e0 >= Vp) continue;
        float f[8];
        // (NV = 0: re-read, this thread's own chunk, not yet written)
        floatX8_unpack_prmt(f, cls_chunk<NV, VEC>(r, x, k, V, Vp));
#pragma unroll
        for (int j = 0; j < 8; j++) f[j] = cls_exp2(fmaf(f[j], CLS_LOG2E, -lsel)) * dloss;
        if ((unsigned)(y - e0) < 8u) {
#pragma unroll
            for (int j = 0; j < 8; j++)
                if (e0 + j == y) f[j] -= dloss;
        }
        uint4 o = floatX8_pack(f);
        if constexpr (VEC) st_floatX8(x + e0, o);
        else st_floatX8_n(x + e0, o, Vp - e0);
    }
}

// Losses of N rows; with dloss != 0 the rows become the logits' gradient.
static inline void gpu_fused_classifier(floatX *logits, float *losses, const int *targets, int N, int V, int Vp,
                                        float dloss, cudaStream_t s) {
    if (N <= 0) return;
    int vec = Vp % 8 == 0 && aligned16(logits);
    int nv = ceil_div_int(ceil_div_int(Vp, 8), CLASSIFIER_THREADS);
    int wd = dloss != 0.0f;
#define CLS_LAUNCH(NV)                                                                                      \
    launch_kernel(vec ? fused_classifier_kernel<NV, true> : fused_classifier_kernel<NV, false>, N,              \
                  CLASSIFIER_THREADS, 0, s, logits, losses, targets, V, Vp, dloss, wd)
    LLMC_NV_SWITCH(nv <= CLASSIFIER_MAX_NV ? nv : 0, CLS_LAUNCH);
#undef CLS_LAUNCH
    CUDA_CHECK_LAUNCH();
}

#endif  // LLMC_CLASSIFIER_CUH
