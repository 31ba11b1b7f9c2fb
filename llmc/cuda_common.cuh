// cuda_common.cuh: what every CUDA file shares: error-checking macros that
// name file:line (CUDA_CHECK, CUBLAS_CHECK, CUDNN_CHECK, NCCL_CHECK), the bf16
// type and its conversions (round-to-nearest and stochastic), warp and block
// reductions in a fixed order (so results are bit-reproducible), NVTX ranges,
// and a checked device allocation that says how much memory was wanted.
#ifndef LLMC_CUDA_COMMON_CUH
#define LLMC_CUDA_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <nvtx3/nvToolsExt.h>
#include <stdint.h>

#include "utils.h"

typedef __nv_bfloat16 bf16;

#define CUDA_CHECK(call)                                                                      \
    do {                                                                                      \
        cudaError_t err_ = (call);                                                            \
        if (err_ != cudaSuccess) DIE("CUDA error %s: %s", #call, cudaGetErrorString(err_));   \
    } while (0)
// After a kernel launch: catches bad launch configurations at once.
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())

// cuBLAS(Lt), cuDNN and NCCL all return 0 on success; these macros need none
// of their headers, so any file can use them. Look the code up in the
// library's status enum (cublasStatus_t, cudnnStatus_t, ncclResult_t).
#define LIB_CHECK(lib, call)                                                   \
    do {                                                                       \
        int st_ = (int)(call);                                                 \
        if (st_ != 0) DIE("%s error %d: %s", lib, st_, #call);                 \
    } while (0)
#define CUBLAS_CHECK(call) LIB_CHECK("cuBLAS", call)
#define CUDNN_CHECK(call) LIB_CHECK("cuDNN", call)
#define NCCL_CHECK(call) LIB_CHECK("NCCL", call)

static inline int ceil_div_int(long long a, long long b) { return (int)((a + b - 1) / b); }

// ---------------------------------------------------------------------------
// NVTX: a scoped range per phase (forward, backward, optimizer, ...), visible in
// Nsight Systems and ncu's NVTX filter.

struct NvtxRange {
    explicit NvtxRange(const char *name) { nvtxRangePushA(name); }
    ~NvtxRange() { nvtxRangePop(); }
    NvtxRange(const NvtxRange &) = delete;
    NvtxRange &operator=(const NvtxRange &) = delete;
};
#define NVTX_CONCAT2(a, b) a##b
#define NVTX_CONCAT(a, b) NVTX_CONCAT2(a, b)
#define NVTX_RANGE(name) NvtxRange NVTX_CONCAT(nvtx_range_, __LINE__)(name)

// ---------------------------------------------------------------------------
// bf16 conversions

// fp32 -> bf16 with stochastic rounding: add 16 random low bits, truncate.
// Unbiased: E[result] = x. bits is a per-element random 32-bit word.
__device__ __forceinline__ bf16 bf16_stochastic(float x, uint32_t bits) {
    uint32_t u = __float_as_uint(x);
    if ((u & 0x7f800000u) == 0x7f800000u) return __float2bfloat16_rn(x);  // inf / nan unchanged
    u += bits & 0xffffu;
    return __ushort_as_bfloat16((unsigned short)(u >> 16));
}

// A stateless hash (splitmix64 finaliser): random bits from (seed, index), so
// the stochastic rounding of a step is identical on every run.
__device__ __forceinline__ uint32_t hash_u32(uint64_t seed, uint64_t i) {
    uint64_t z = seed + i * 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return (uint32_t)((z ^ (z >> 31)) >> 32);
}

// ---------------------------------------------------------------------------
// reductions, in a fixed order (deterministic)

__device__ __forceinline__ float warp_sum(float v) {
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
    for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
    return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread
// gets the result. scratch: 32 floats of shared memory.
__device__ __forceinline__ float block_sum(float v, float *scratch) {
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
    v = warp_sum(v);
    __syncthreads();  // scratch may still be read by a previous call
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = lane < nwarps ? scratch[lane] : 0.0f;
    return warp_sum(v);
}
__device__ __forceinline__ float block_max(float v, float *scratch) {
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = lane < nwarps ? scratch[lane] : -INFINITY;
    return warp_max(v);
}

// ---------------------------------------------------------------------------
// device memory

// The bytes free on the current device.
static inline size_t cuda_free_bytes(void) {
    size_t free_b = 0, total_b = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    return free_b;
}

static inline void *cuda_malloc_check_at(size_t bytes, const char *file, int line) {
    void *p = NULL;
    cudaError_t err = cudaMalloc(&p, bytes > 0 ? bytes : 16);
    if (err != cudaSuccess)
        die_at(file, line, "cudaMalloc of %.1f MB failed (%s; %.1f MB free)", bytes / 1e6, cudaGetErrorString(err),
               cuda_free_bytes() / 1e6);
    return p;
}
#define cudaMallocCheck(bytes) cuda_malloc_check_at((bytes), __FILE__, __LINE__)

// The number of streaming multiprocessors of the current device.
static inline int cuda_num_sms(void) {
    int dev = 0, sms = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    return sms;
}

// 1 if a usable CUDA device is present (tests SKIP otherwise).
static inline int cuda_device_present(void) {
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

#endif  // LLMC_CUDA_COMMON_CUH
