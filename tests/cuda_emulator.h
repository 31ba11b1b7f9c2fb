// cuda_emulator.h: just enough of CUDA to run a kernel's own source on the CPU,
// for tests that CI (no GPU) can run: one OS thread per CUDA thread of a
// block, blocks one after another; real barriers behind __syncthreads,
// __syncwarp and the warp shuffles, so a missing barrier shows up as a wrong
// result (or as a race under -fsanitize=thread); bf16 with round-to-nearest-
// even; nvcuda::wmma 16x16x16 bf16 fragments whose accumulator (lane, element)
// -> (row, col) mapping is a random permutation chosen by the test, since the
// real one is unspecified; cp.async (as the fa_cp_async* helpers of
// llmc/attention_flash.cuh) either copied at issue or only at the wait that
// must complete it, so both orders a GPU may show are exercised; and the
// dynamic shared memory of a launch filled with NaN before every block and
// bounded: cp.async and wmma accesses past the launch's byte count fail.
// What it cannot show: speed, the hardware's accumulation order inside an mma,
// ex2.approx's last-bit error, bank conflicts, and register or shared-memory
// limits (the kernels are still compiled by nvcc for those).
// Include it before the kernel header, with LLMC_CUDA_EMULATION defined.
#ifndef LLMC_CUDA_EMULATOR_H
#define LLMC_CUDA_EMULATOR_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#define __global__
#define __device__
#define __forceinline__ inline
#define __restrict__ __restrict
#define __launch_bounds__(...)
#define __shared__
#define __align__(n)

[[noreturn]] static void emu_fail(const char *what) {
    fprintf(stderr, "error: cuda emulator: %s\n", what);
    abort();
}

// ---- vector types and bf16 ----
struct alignas(16) uint4 { uint32_t x, y, z, w; };
struct alignas(16) float4 { float x, y, z, w; };
struct alignas(8) float2 { float x, y; };
struct alignas(8) uint2 { uint32_t x, y; };
static inline uint4 make_uint4(uint32_t a, uint32_t b, uint32_t c, uint32_t d) { return {a, b, c, d}; }
static inline float2 make_float2(float a, float b) { return {a, b}; }
struct __nv_bfloat16 { uint16_t bits; };
typedef __nv_bfloat16 bf16;
struct alignas(4) __nv_bfloat162 { __nv_bfloat16 x, y; };
static inline float emu_bf16_to_float(bf16 h) {
    uint32_t u = (uint32_t)h.bits << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline bf16 __float2bfloat16_rn(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return {0x7fc0};  // NaN stays NaN
    u += 0x7fffu + ((u >> 16) & 1u);
    return {(uint16_t)(u >> 16)};
}
static inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) {
    return {__float2bfloat16_rn(a), __float2bfloat16_rn(b)};
}
static inline float2 __bfloat1622float2(__nv_bfloat162 h) { return {emu_bf16_to_float(h.x), emu_bf16_to_float(h.y)}; }

// ---- the thread's place in the launch ----
struct dim3 {
    unsigned x, y, z;
};
static thread_local dim3 threadIdx, blockIdx;
static dim3 gridDim, blockDim;

struct EmuBarrier {
    std::mutex m;
    std::condition_variable cv;
    int n = 0, count = 0;
    long generation = 0;
    void wait() {
        std::unique_lock<std::mutex> lock(m);
        long g = generation;
        if (++count == n) {
            count = 0;
            generation++;
            cv.notify_all();
        } else {
            cv.wait(lock, [&] { return generation != g; });
        }
    }
};
static EmuBarrier emu_block_barrier, emu_warp_barrier[32];
static uint64_t emu_exchange[32][32];  // [warp][lane]: a shuffle's values

static inline void __syncthreads() { emu_block_barrier.wait(); }
static inline void __syncwarp(unsigned mask = 0xffffffffu) {
    if (mask != 0xffffffffu) emu_fail("__syncwarp with a partial mask");
    emu_warp_barrier[threadIdx.x / 32].wait();
}
// value v of lane src of this warp (every lane takes part)
template <class T> static inline T emu_warp_exchange(T v, int src) {
    int w = threadIdx.x / 32, lane = threadIdx.x % 32;
    uint64_t u = 0;
    memcpy(&u, &v, sizeof(T));
    emu_exchange[w][lane] = u;
    __syncwarp();
    uint64_t r = emu_exchange[w][src];
    __syncwarp();
    T out;
    memcpy(&out, &r, sizeof(T));
    return out;
}
static inline float __shfl_xor_sync(unsigned mask, float v, int lane_mask) {
    if (mask != 0xffffffffu) emu_fail("shuffle with a partial mask");
    return emu_warp_exchange(v, (int)(threadIdx.x % 32) ^ lane_mask);
}
static inline int __any_sync(unsigned mask, int predicate) {
    if (mask != 0xffffffffu) emu_fail("vote with a partial mask");
    int w = threadIdx.x / 32, any = 0;
    emu_exchange[w][threadIdx.x % 32] = predicate != 0;
    __syncwarp();
    for (int lane = 0; lane < 32; lane++) any |= (int)emu_exchange[w][lane];
    __syncwarp();
    return any;
}

// ---- the launch's dynamic shared memory ----
static unsigned char *emu_smem;  // the kernel's extern __shared__ array: the test defines it (256 KB) and sets this
static size_t emu_smem_bytes;    // what the launch asked for
static inline void emu_check_smem(const void *p, size_t bytes, const char *what) {
    const unsigned char *c = (const unsigned char *)p;
    if (c >= emu_smem && c < emu_smem + (size_t)256 * 1024 && c + bytes > emu_smem + emu_smem_bytes)
        emu_fail(what);
}

// ---- cp.async, the ex2.approx.ftz helper ----
static bool emu_copy_at_issue = false;  // else at the wait that must complete the copy
struct EmuCopy {
    void *dst;
    const void *src;
};
static thread_local std::vector<EmuCopy> emu_open_group;
static thread_local std::deque<std::vector<EmuCopy>> emu_committed;
static inline void fa_cp_async16(void *smem, const void *gmem) {
    if ((uintptr_t)smem % 16 || (uintptr_t)gmem % 16) emu_fail("cp.async address not 16-byte aligned");
    emu_check_smem(smem, 16, "cp.async past the launch's shared memory");
    if (emu_copy_at_issue) memcpy(smem, gmem, 16);
    else emu_open_group.push_back({smem, gmem});
}
static inline void fa_cp_async_commit() {
    emu_committed.push_back(emu_open_group);
    emu_open_group.clear();
}
template <int N> static inline void fa_cp_async_wait() {
    while ((int)emu_committed.size() > N) {
        for (const EmuCopy &c : emu_committed.front()) memcpy(c.dst, c.src, 16);
        emu_committed.pop_front();
    }
}
static inline float fa_exp2(float x) {  // ftz: subnormal results are 0
    float y = exp2f(x);
    return fabsf(y) < 1.17549435e-38f ? 0.0f : y;
}

// ---- nvcuda::wmma, 16x16x16 bf16 with fp32 accumulators ----
static int emu_acc_row[32][8], emu_acc_col[32][8];  // accumulator (lane, element) -> (row, col)
// A random bijection of the 256 (lane, element) pairs onto the 16x16 tile.
static inline void emu_shuffle_accumulator_layout(uint64_t seed) {
    int perm[256];
    for (int i = 0; i < 256; i++) perm[i] = i;
    for (int i = 255; i > 0; i--) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        int j = (int)((seed >> 33) % (uint64_t)(i + 1));
        int t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    for (int lane = 0; lane < 32; lane++)
        for (int e = 0; e < 8; e++) {
            emu_acc_row[lane][e] = perm[lane * 8 + e] / 16;
            emu_acc_col[lane][e] = perm[lane * 8 + e] % 16;
        }
}

namespace nvcuda {
namespace wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };
template <class Use, int M, int N, int K, class T, class Layout = void> struct fragment;
// an operand: every lane holds the whole 16x16 tile (row-major, as floats)
template <class Use, class Layout> struct fragment<Use, 16, 16, 16, bf16, Layout> {
    float v[256];
};
// the accumulator: 8 elements a lane, placed by emu_acc_row / emu_acc_col
template <> struct fragment<accumulator, 16, 16, 16, float, void> {
    static constexpr int num_elements = 8;
    float x[8];
};
typedef fragment<accumulator, 16, 16, 16, float, void> EmuAccumulator;

static inline void emu_check_operand(const void *p, unsigned ldm, unsigned elem_bytes, size_t extent_bytes) {
    if ((uintptr_t)p % 32) emu_fail("wmma pointer not 32-byte aligned");
    if (ldm % (16 / elem_bytes)) emu_fail("wmma ldm not a multiple of 16 bytes");
    emu_check_smem(p, extent_bytes, "wmma access past the launch's shared memory");
}
static inline void fill_fragment(EmuAccumulator &f, float v) {
    for (float &e : f.x) e = v;
}
template <class Use> void load_matrix_sync(fragment<Use, 16, 16, 16, bf16, row_major> &f, const bf16 *p, unsigned ldm) {
    emu_check_operand(p, ldm, 2, (size_t)(15 * ldm + 16) * 2);
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 16; c++) f.v[r * 16 + c] = emu_bf16_to_float(p[r * ldm + c]);
}
template <class Use> void load_matrix_sync(fragment<Use, 16, 16, 16, bf16, col_major> &f, const bf16 *p, unsigned ldm) {
    emu_check_operand(p, ldm, 2, (size_t)(15 * ldm + 16) * 2);
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 16; c++) f.v[r * 16 + c] = emu_bf16_to_float(p[r + c * ldm]);
}
static inline void load_matrix_sync(EmuAccumulator &f, const float *p, unsigned ldm, layout_t layout) {
    emu_check_operand(p, ldm, 4, (size_t)(15 * ldm + 16) * 4);
    int lane = threadIdx.x % 32;
    for (int e = 0; e < 8; e++) {
        int r = emu_acc_row[lane][e], c = emu_acc_col[lane][e];
        f.x[e] = layout == mem_row_major ? p[r * ldm + c] : p[c * ldm + r];
    }
}
static inline void store_matrix_sync(float *p, const EmuAccumulator &f, unsigned ldm, layout_t layout) {
    emu_check_operand(p, ldm, 4, (size_t)(15 * ldm + 16) * 4);
    int lane = threadIdx.x % 32;
    for (int e = 0; e < 8; e++) {
        int r = emu_acc_row[lane][e], c = emu_acc_col[lane][e];
        (layout == mem_row_major ? p[r * ldm + c] : p[c * ldm + r]) = f.x[e];
    }
}
// d = a b + c, each element summed in k order in fp32
template <class LayoutA, class LayoutB>
void mma_sync(EmuAccumulator &d, const fragment<matrix_a, 16, 16, 16, bf16, LayoutA> &a,
              const fragment<matrix_b, 16, 16, 16, bf16, LayoutB> &b, const EmuAccumulator &c) {
    int lane = threadIdx.x % 32;
    EmuAccumulator out;
    for (int e = 0; e < 8; e++) {
        int r = emu_acc_row[lane][e], col = emu_acc_col[lane][e];
        float s = c.x[e];
        for (int k = 0; k < 16; k++) s += a.v[r * 16 + k] * b.v[k * 16 + col];
        out.x[e] = s;
    }
    d = out;
}
}  // namespace wmma
}  // namespace nvcuda

// Runs kernel() for every block of grid, block_threads threads each, one block
// at a time; the dynamic shared memory (smem_bytes of emu_smem) is NaN-filled
// before each block. A block that leaves a cp.async group uncompleted fails.
static inline void emu_launch(dim3 grid, int block_threads, size_t smem_bytes, const std::function<void()> &kernel) {
    if (block_threads % 32 || block_threads > 1024) emu_fail("block size");
    if (smem_bytes > (size_t)227 * 1024) emu_fail("more than 227 KB of shared memory");
    if (!emu_smem) emu_fail("emu_smem is not set");
    gridDim = grid;
    blockDim = {(unsigned)block_threads, 1, 1};
    emu_smem_bytes = smem_bytes;
    emu_block_barrier.n = block_threads;
    for (int w = 0; w < block_threads / 32; w++) emu_warp_barrier[w].n = 32;
    std::vector<std::thread> threads;
    for (int t = 0; t < block_threads; t++)
        threads.emplace_back([&, t] {
            threadIdx = {(unsigned)t, 0, 0};
            for (unsigned z = 0; z < grid.z; z++)
                for (unsigned y = 0; y < grid.y; y++)
                    for (unsigned x = 0; x < grid.x; x++) {
                        if (t == 0) memset(emu_smem, 0xff, (size_t)256 * 1024);  // NaN in fp32 and bf16
                        emu_block_barrier.wait();
                        blockIdx = {x, y, z};
                        kernel();
                        if (!emu_open_group.empty() || !emu_committed.empty())
                            emu_fail("a block ended with cp.async copies not waited for");
                        emu_block_barrier.wait();
                    }
        });
    for (std::thread &th : threads) th.join();
}

#endif  // LLMC_CUDA_EMULATOR_H
