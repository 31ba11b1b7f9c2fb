// cuda_common.cuh: what every CUDA file shares: error-checking macros that
// name file:line (CUDA_CHECK, CUBLAS_CHECK, CUDNN_CHECK, NCCL_CHECK), the
// compute type floatX (precision.cuh), warp and block reductions in a fixed
// order (so results are bit-reproducible), the alignment test that picks the
// memory-bound kernels' 16-byte vector paths, NVTX ranges, and a checked device
// allocation that says how much memory was wanted.
// LLMC_CUDA_EMULATION (tests/cuda_emulator.h, included first, stands in for
// the CUDA headers and runtime): the CPU tests compile everything below as it
// is, but for launch_kernel and DYNAMIC_SMEM, which the emulator defines.
#ifndef LLMC_CUDA_COMMON_CUH
#define LLMC_CUDA_COMMON_CUH

#ifndef LLMC_CUDA_EMULATION
#include <cuda_profiler_api.h>
#include <cuda_runtime.h>
#include <nvtx3/nvToolsExt.h>
#elif !defined(LLMC_CUDA_EMULATOR_H)
#error "LLMC_CUDA_EMULATION: include tests/cuda_emulator.h first"
#endif
#include <stdint.h>

#include "precision.cuh"  // defines: floatX, to_floatX, to_float (for every kernel that includes this file)
#include "utils.h"        // defines: DIE, die_at

#define CUDA_CHECK(call)                                                                      \
    do {                                                                                      \
        cudaError_t err_ = (call);                                                            \
        if (err_ != cudaSuccess) DIE("CUDA error %s: %s", #call, cudaGetErrorString(err_));   \
    } while (0)
// After a kernel launch: catches bad launch configurations at once.
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())

// kernel<<<grid, block, smem, s>>>(args...): every llmc launcher launches
// through this, so that tests/cuda_emulator.h, which defines its own (running
// the kernel on the CPU), runs the launchers themselves. The caller checks the
// launch (CUDA_CHECK_LAUNCH).
#ifndef LLMC_CUDA_EMULATION
template <typename... Params, typename... Args>
static inline void launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t s,
                                 Args... args) {
    kernel<<<grid, block, smem, s>>>(args...);
}
#endif

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

// A kernel's dynamic shared memory (the launch's byte count), 128-byte aligned.
// One spelling for every kernel, so that the emulator can define it as its own
// buffer.
#ifndef LLMC_CUDA_EMULATION
#define DYNAMIC_SMEM(type, name) extern __shared__ __align__(128) type name[]
#endif

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
// random bits

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
// rows held packed in registers

// An empty asm that "may change" v, between passes over a row held packed in
// registers: the front end cannot carry v's unpacked floats (twice the
// registers) across it. ptxas sees no instruction and may still reuse them;
// floatX8_unpack_prmt (precision.cuh) is the stronger tool where that spills.
__device__ __forceinline__ void reg_barrier(uint4 &v) {
    asm volatile("" : "+r"(v.x), "+r"(v.y), "+r"(v.z), "+r"(v.w));
}
// reg_barrier on each of a row's NV vectors (none when NV = 0: the row is
// re-read from memory instead of held).
template <int NV>
__device__ __forceinline__ void reg_barrier_row(uint4 (&r)[NV > 0 ? NV : 1]) {
    if constexpr (NV > 0) {
#pragma unroll
        for (int k = 0; k < NV; k++) reg_barrier(r[k]);
    }
}

// 1 if p may be accessed with 16-byte vectors.
static inline int aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

// Runs LAUNCH(NV) (a macro taking a compile-time constant) with NV = nv for nv
// in 1..8 and NV = 0 otherwise: kernels templated on how many vectors per
// thread they keep in registers (0: none, re-read from memory).
#define LLMC_NV_SWITCH(nv, LAUNCH)                                                                \
    switch (nv) {                                                                                 \
    case 1: LAUNCH(1); break;                                                                     \
    case 2: LAUNCH(2); break;                                                                     \
    case 3: LAUNCH(3); break;                                                                     \
    case 4: LAUNCH(4); break;                                                                     \
    case 5: LAUNCH(5); break;                                                                     \
    case 6: LAUNCH(6); break;                                                                     \
    case 7: LAUNCH(7); break;                                                                     \
    case 8: LAUNCH(8); break;                                                                     \
    default: LAUNCH(0); break;                                                                    \
    }

// ---------------------------------------------------------------------------
// device memory

// The bytes free on the current device.
static inline size_t cuda_free_bytes(void) {
    size_t free_b = 0, total_b = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    return free_b;
}

// The dense bf16 tensor-core peak (TFLOP/s) of a device NVIDIA names in its
// datasheets, by the name CUDA reports (first match in order: the PCIe and
// NVL parts before their SXM siblings); 0 when unknown (the caller measures).
// bf16 by name: the datasheets' bf16 column (another floatX adds its own).
static inline double cuda_datasheet_bf16_tflops(const char *device_name, const char **label) {
    static const struct { const char *a, *b; double tflops; const char *label; } known[] = {
        {"H100", "PCIe", 756.0, "H100 PCIe"}, {"H100", "NVL", 835.0, "H100 NVL"}, {"H100", "", 989.0, "H100 SXM"},
        {"H200", "NVL", 835.0, "H200 NVL"},  {"H200", "", 989.0, "H200 SXM"},   {"GH200", "", 989.0, "GH200"},
        {"B200", "", 2250.0, "B200"},         {"A100", "", 312.0, "A100"},
    };
    for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
        if (strstr(device_name, known[i].a) && strstr(device_name, known[i].b)) {
            *label = known[i].label;
            return known[i].tflops;
        }
    *label = NULL;
    return 0.0;
}

// The bytes in use on the current device (by every process on it).
static inline double cuda_used_bytes(void) {
    size_t free_b = 0, total_b = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    return (double)(total_b - free_b);
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
