// global_norm.cuh: the squared L2 norm of an fp32 buffer (the gradients),
// deterministic: a fixed grid of blocks each sums a fixed grid-stride slice in
// a fixed tree order, then one thread adds the per-block sums in order in
// double. The same inputs give the same bits on every run. The slices are of
// float4 when the buffer is 16-byte aligned (tested at launch; the last n % 4
// elements go to the first threads), else of single floats. Over a few ranges
// of the buffer (the tensors a tensor-parallel rank counts in the norm), each
// range's grid-stride slices in turn, of single floats, in the same one launch.
#ifndef LLMC_GLOBAL_NORM_CUH
#define LLMC_GLOBAL_NORM_CUH

// tests/test_kernels_emulated.cpp runs this header on the CPU through
// tests/cuda_emulator.h.
#include "cuda_common.cuh"  // defines: block_sum, launch_kernel, aligned16, CUDA_CHECK_LAUNCH, ...

#define NORM_BLOCKS 1024   // fixed, so the summation order never depends on the device
#define NORM_THREADS 512

__global__ void norm_partial_kernel(float *partial, const float *g, int64_t n) {
    __shared__ float scratch[32];
    float acc = 0.0f;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        acc += g[i] * g[i];
    acc = block_sum(acc, scratch);
    if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

// The same with 16-byte loads (g 16-byte aligned): thread i sums float4 i, i +
// stride, ..., then element 4 * (n / 4) + i when i < n % 4.
__global__ void norm_partial_vec_kernel(float *__restrict__ partial, const float *__restrict__ g, int64_t n) {
    __shared__ float scratch[32];
    const int64_t n4 = n / 4, stride = (int64_t)gridDim.x * blockDim.x, i0 = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const float4 *g4 = reinterpret_cast<const float4 *>(g);
    float acc = 0.0f;
#pragma unroll 4
    for (int64_t i = i0; i < n4; i += stride) {
        float4 x = g4[i];
        acc = fmaf(x.x, x.x, acc);
        acc = fmaf(x.y, x.y, acc);
        acc = fmaf(x.z, x.z, acc);
        acc = fmaf(x.w, x.w, acc);
    }
    if (i0 < n - 4 * n4) acc = fmaf(g[4 * n4 + i0], g[4 * n4 + i0], acc);
    acc = block_sum(acc, scratch);
    if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

// ranges (2 n, device): [ranges[2k], ranges[2k + 1]) of g, k < n
__global__ void norm_partial_ranges_kernel(float *partial, const float *g, const int64_t *ranges, int n) {
    __shared__ float scratch[32];
    const int64_t stride = (int64_t)gridDim.x * blockDim.x, i0 = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    float acc = 0.0f;
    for (int k = 0; k < n; k++)
        for (int64_t i = ranges[2 * k] + i0; i < ranges[2 * k + 1]; i += stride) acc += g[i] * g[i];
    acc = block_sum(acc, scratch);
    if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

__global__ void norm_finish_kernel(double *out, const float *partial, int nblocks) {
    double acc = 0.0;
    for (int i = 0; i < nblocks; i++) acc += (double)partial[i];
    *out = acc;
}

// Floats of scratch gpu_sum_of_squares needs (the per-block sums, then the double result).
static inline size_t global_norm_scratch_floats(void) { return NORM_BLOCKS + 2; }

// sum of g[i]^2 over [0, n), left in scratch (read it with global_norm_result).
static inline void gpu_sum_of_squares(float *scratch, const float *g, int64_t n, cudaStream_t s) {
    launch_kernel(aligned16(g) ? norm_partial_vec_kernel : norm_partial_kernel, NORM_BLOCKS, NORM_THREADS, 0, s,
                  scratch, g, n);
    CUDA_CHECK_LAUNCH();
    launch_kernel(norm_finish_kernel, 1, 1, 0, s, (double *)(scratch + NORM_BLOCKS), scratch, NORM_BLOCKS);
    CUDA_CHECK_LAUNCH();
}

// sum of g[i]^2 over n ranges [ranges[2k], ranges[2k + 1]) (device array),
// left in scratch (read it with global_norm_result).
static inline void gpu_sum_of_squares_ranges(float *scratch, const float *g, const int64_t *ranges, int n,
                                             cudaStream_t s) {
    launch_kernel(norm_partial_ranges_kernel, NORM_BLOCKS, NORM_THREADS, 0, s, scratch, g, ranges, n);
    CUDA_CHECK_LAUNCH();
    launch_kernel(norm_finish_kernel, 1, 1, 0, s, (double *)(scratch + NORM_BLOCKS), scratch, NORM_BLOCKS);
    CUDA_CHECK_LAUNCH();
}

// Waits for gpu_sum_of_squares and returns its result.
static inline double global_norm_result(const float *scratch, cudaStream_t s) {
    double h = 0.0;
    CUDA_CHECK(cudaMemcpyAsync(&h, scratch + NORM_BLOCKS, sizeof(double), cudaMemcpyDeviceToHost, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
    return h;
}

#endif  // LLMC_GLOBAL_NORM_CUH
