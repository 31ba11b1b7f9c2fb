// gelu.cuh: GELU (tanh approximation, as llmc/cpu_layers.h) on bf16 tensors.
// The forward normally runs fused in the fc matmul's epilogue (matmul.cuh);
// this kernel recomputes it for the backward under --recompute >= 1. The
// backward multiplies the incoming gradient by GELU'(pre-activation) in place.
#ifndef LLMC_GELU_CUH
#define LLMC_GELU_CUH

#include "cuda_common.cuh"

#define GELU_K0 0.7978845608028654f  // sqrt(2 / pi)
#define GELU_K1 0.044715f

__device__ __forceinline__ float gelu_f(float x) {
    return 0.5f * x * (1.0f + tanhf(GELU_K0 * (x + GELU_K1 * x * x * x)));
}

__device__ __forceinline__ float gelu_grad_f(float x) {
    float th = tanhf(GELU_K0 * (x + GELU_K1 * x * x * x));
    float sech2 = 1.0f - th * th;
    return 0.5f * (1.0f + th) + 0.5f * x * sech2 * GELU_K0 * (1.0f + 3.0f * GELU_K1 * x * x);
}

__global__ void gelu_forward_kernel(bf16 *out, const bf16 *inp, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = __float2bfloat16_rn(gelu_f(__bfloat162float(inp[i])));
}

__global__ void gelu_backward_inplace_kernel(bf16 *dinout, const bf16 *inp, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dinout[i] = __float2bfloat16_rn(__bfloat162float(dinout[i]) * gelu_grad_f(__bfloat162float(inp[i])));
}

// out (n) = gelu(inp)
static inline void gpu_gelu_forward(bf16 *out, const bf16 *inp, int64_t n, cudaStream_t s) {
    gelu_forward_kernel<<<ceil_div_int(n, 256), 256, 0, s>>>(out, inp, n);
    CUDA_CHECK_LAUNCH();
}

// dinout (n): d/d(gelu output) in, d/d(gelu input) out; inp is the pre-activation.
static inline void gpu_gelu_backward_inplace(bf16 *dinout, const bf16 *inp, int64_t n, cudaStream_t s) {
    gelu_backward_inplace_kernel<<<ceil_div_int(n, 256), 256, 0, s>>>(dinout, inp, n);
    CUDA_CHECK_LAUNCH();
}

#endif  // LLMC_GELU_CUH
