// gelu.cuh: GELU (tanh approximation, as llmc/cpu_layers.h) on floatX tensors.
// The forward normally runs fused in the fc matmul's epilogue (matmul.cuh);
// this kernel recomputes it for the backward under --recompute selective. The
// backward multiplies the incoming gradient by GELU'(pre-activation) in place.
// Each thread moves 8 elements: one 16-byte load/store per tensor when the
// pointers are 16-byte aligned (tested at launch; the last partial group of 8
// element by element), else element by element throughout. The arithmetic is
// per element and the same on both paths: 0.5 (1 + tanh u) written as the
// logistic s = 1 / (1 + exp(-2u)) (no tanhf, no cancellation for x << 0), so
// the kernels stay at the memory bandwidth on H100/H200.
#ifndef LLMC_GELU_CUH
#define LLMC_GELU_CUH

// tests/test_kernels_emulated.cpp runs this header on the CPU through
// tests/cuda_emulator.h.
#include "cuda_common.cuh"  // defines: ceil_div_int, aligned16, launch_kernel, CUDA_CHECK_LAUNCH

#define GELU_K0 0.7978845608028654f  // sqrt(2 / pi)
#define GELU_K1 0.044715f
#define GELU_THREADS 256

// s = 0.5 (1 + tanh(u)) = 1 / (1 + e), e = exp(-2u), u = K0 (x + K1 x^3).
// Past -2u = 80 (x below about -9.7; s < 2e-35) s is 0 and e stays finite, so e * s
// (= 1 - s) is 0, never inf * 0; a NaN x gives s = 0 and propagates through x.
__device__ __forceinline__ float gelu_sigmoid(float x, float *e_out) {
    float a = -2.0f * GELU_K0 * (x + GELU_K1 * x * x * x);
    float e = __expf(fminf(a, 80.0f));
    *e_out = e;
    return a < 80.0f ? __fdividef(1.0f, 1.0f + e) : 0.0f;
}

// gelu(x) = 0.5 x (1 + tanh u) = x s
__device__ __forceinline__ float gelu_f(float x) {
    float e;
    return x * gelu_sigmoid(x, &e);
}

// gelu'(x) = 0.5 (1 + tanh u) + 0.5 x sech^2(u) u' = s + 2 x s (1 - s) K0 (1 + 3 K1 x^2), with 1 - s = e s.
__device__ __forceinline__ float gelu_grad_f(float x) {
    float e, s = gelu_sigmoid(x, &e);
    return s + 2.0f * x * s * (e * s) * GELU_K0 * (1.0f + 3.0f * GELU_K1 * x * x);
}

// Elements [8i, 8i+8) of n for thread i; VEC: 16-byte accesses where the group is whole.
template <bool VEC>
__global__ void __launch_bounds__(GELU_THREADS) gelu_forward_kernel(floatX *__restrict__ out,
                                                                    const floatX *__restrict__ inp, int64_t n) {
    int64_t e0 = ((int64_t)blockIdx.x * GELU_THREADS + threadIdx.x) * 8;
    if (e0 >= n) return;
    int cnt = n - e0 < 8 ? (int)(n - e0) : 8;
    float f[8];
    floatX8_unpack(f, VEC && cnt == 8 ? ld_floatX8(inp + e0) : ld_floatX8_n(inp + e0, cnt));
#pragma unroll
    for (int j = 0; j < 8; j++) f[j] = gelu_f(f[j]);
    uint4 v = floatX8_pack(f);
    if (VEC && cnt == 8) st_floatX8(out + e0, v);
    else st_floatX8_n(out + e0, v, cnt);
}

template <bool VEC>
__global__ void __launch_bounds__(GELU_THREADS) gelu_backward_inplace_kernel(floatX *__restrict__ dinout,
                                                                             const floatX *__restrict__ inp,
                                                                             int64_t n) {
    int64_t e0 = ((int64_t)blockIdx.x * GELU_THREADS + threadIdx.x) * 8;
    if (e0 >= n) return;
    int cnt = n - e0 < 8 ? (int)(n - e0) : 8;
    float x[8], d[8];
    floatX8_unpack(x, VEC && cnt == 8 ? ld_floatX8(inp + e0) : ld_floatX8_n(inp + e0, cnt));
    floatX8_unpack(d, VEC && cnt == 8 ? ld_floatX8(dinout + e0) : ld_floatX8_n(dinout + e0, cnt));
#pragma unroll
    for (int j = 0; j < 8; j++) d[j] *= gelu_grad_f(x[j]);
    uint4 v = floatX8_pack(d);
    if (VEC && cnt == 8) st_floatX8(dinout + e0, v);
    else st_floatX8_n(dinout + e0, v, cnt);
}

// out (n) = gelu(inp)
static inline void gpu_gelu_forward(floatX *out, const floatX *inp, int64_t n, cudaStream_t s) {
    if (n <= 0) return;
    int blocks = ceil_div_int(n, 8 * GELU_THREADS);
    int vec = aligned16(out) && aligned16(inp);
    launch_kernel(vec ? gelu_forward_kernel<true> : gelu_forward_kernel<false>, blocks, GELU_THREADS, 0, s, out, inp,
                  n);
    CUDA_CHECK_LAUNCH();
}

// dinout (n): d/d(gelu output) in, d/d(gelu input) out; inp is the pre-activation.
static inline void gpu_gelu_backward_inplace(floatX *dinout, const floatX *inp, int64_t n, cudaStream_t s) {
    if (n <= 0) return;
    int blocks = ceil_div_int(n, 8 * GELU_THREADS);
    int vec = aligned16(dinout) && aligned16(inp);
    launch_kernel(vec ? gelu_backward_inplace_kernel<true> : gelu_backward_inplace_kernel<false>, blocks,
                  GELU_THREADS, 0, s, dinout, inp, n);
    CUDA_CHECK_LAUNCH();
}

#endif  // LLMC_GELU_CUH
