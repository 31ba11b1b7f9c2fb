// colsum.cuh: deterministic column sums of an (N, C) matrix into an fp32
// vector, out[c] += sum over rows of a[r][c], for the linear layers' bias
// gradients (a: the floatX output gradient, or an fp32 copy of it). Two stages,
// no atomics: each block sums a 256-row chunk of 32 columns (8 row lanes, then
// the 8 partial sums in order) into scratch (R = ceil(N/256), C), then one
// thread per column adds the R partial sums in chunk order; the same inputs
// give the same bits on every run. tests/test_kernels_emulated.cpp runs this
// header on the CPU through tests/cuda_emulator.h.
#ifndef LLMC_COLSUM_CUH
#define LLMC_COLSUM_CUH

#include "cuda_common.cuh"  // defines: ceil_div_int, launch_kernel, CUDA_CHECK_LAUNCH
#include "gpu_activation_sizes.h"  // defines: COLSUM_ROWS_PER_CHUNK, colsum_scratch_floats

template <typename T>
__device__ __forceinline__ float colsum_load(T v);
template <>
__device__ __forceinline__ float colsum_load<float>(float v) { return v; }
template <>
__device__ __forceinline__ float colsum_load<floatX>(floatX v) { return to_float(v); }

// partial[r][c] = sum of rows [r*CHUNK, (r+1)*CHUNK) of column c. block (32, 8).
template <typename T>
__global__ void colsum_partial_kernel(float *partial, const T *a, int N, int C) {
    __shared__ float sh[8][33];
    int c = blockIdx.x * 32 + threadIdx.x;
    int r0 = blockIdx.y * COLSUM_ROWS_PER_CHUNK, r1 = min(r0 + COLSUM_ROWS_PER_CHUNK, N);
    float acc = 0.0f;
    if (c < C)
        for (int r = r0 + threadIdx.y; r < r1; r += 8) acc += colsum_load(a[(int64_t)r * C + c]);
    sh[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
        for (int k = 1; k < 8; k++) acc += sh[k][threadIdx.x];
        partial[(int64_t)blockIdx.y * C + c] = acc;
    }
}

__global__ void colsum_finish_kernel(float *out, const float *partial, int R, int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float acc = 0.0f;
    for (int r = 0; r < R; r++) acc += partial[(int64_t)r * C + c];
    out[c] += acc;
}

template <typename T>
static inline void gpu_colsum_accumulate(float *out, float *scratch, const T *a, int N, int C, cudaStream_t s) {
    int R = ceil_div_int(N, COLSUM_ROWS_PER_CHUNK);
    launch_kernel(colsum_partial_kernel<T>, dim3(ceil_div_int(C, 32), R), dim3(32, 8), 0, s, scratch, a, N, C);
    CUDA_CHECK_LAUNCH();
    launch_kernel(colsum_finish_kernel, ceil_div_int(C, 256), 256, 0, s, out, scratch, R, C);
    CUDA_CHECK_LAUNCH();
}

#endif  // LLMC_COLSUM_CUH
