// cuda_emulator.h: just enough of CUDA to run a kernel's own source on the CPU,
// for tests that CI (no GPU) can run. Include it before the kernel headers; it
// defines LLMC_CUDA_EMULATION, which those headers test to leave out their
// CUDA-only includes and PTX helpers, so what remains (the kernels, their
// launchers, llmc/cuda_common.cuh's device helpers) is the text nvcc
// compiles. The launchers launch through launch_kernel (llmc/cuda_common.cuh),
// which this header defines as emu_launch(grid, block, smem_bytes, [&] {
// kernel(args...); }): a test calls the llmc launchers themselves.
//
// Threads. Every CUDA thread of a block is a fiber (its own 256 KB stack, a
// guard page below it) on the calling OS thread; a block's fibers run one at a
// time, each until it reaches a barrier or returns, and the blocks of a grid
// run one after another (x fastest). Barriers are real: __syncthreads waits for
// every thread of the block, __syncwarp / the shuffles / the votes for every
// lane of the warp (full masks only), so a missing barrier shows up as a wrong
// result. The threads a barrier releases run in an order set by emu_schedule:
// EMU_SCHEDULE_RANDOM (the default; a fixed-seed generator, emu_schedule_seed)
// shuffles them, and per block either lets a warp whose lanes have all met
// run on at once, ahead of the others, or queues it behind the threads
// already waiting (the warps advance together); EMU_SCHEDULE_FORWARD and
// _REVERSE run them in thread order, together. So a value written by one
// thread and read by another without a barrier between them is seen in some
// blocks and missed in others. A thread that returns while others of its
// block (warp) wait at __syncthreads (a warp operation), __syncthreads after
// some threads returned, a barrier some threads never reach (deadlock), a
// full-mask warp operation in a warp of fewer than 32 threads, or lanes of one
// warp meeting at different kinds of warp operation fail the test at once
// (emu_fail: a message, then abort) instead of hanging. A context switch is a
// few instructions on x86-64 (ucontext elsewhere, or with EMU_USE_UCONTEXT),
// so a grid of 10^5..10^6 threads takes a fraction of a second;
// AddressSanitizer is told about every stack switch.
//
// Memory. Global memory is host memory: a kernel gets host pointers, and the
// few runtime calls the headers' host-side helpers make (cudaMalloc, cudaFree,
// cudaMemcpy[Async], cudaMemset, cudaMemGetInfo, cudaGetErrorString) are host
// stand-ins. Static __shared__ arrays are `static` locals (one copy, right
// because blocks run one at a time): zero at program start and NOT refilled
// between blocks, so a kernel must not rely on their contents across blocks
// (nothing here can catch that). The dynamic shared memory (DYNAMIC_SMEM(type,
// name), llmc/cuda_common.cuh's spelling of `extern __shared__ type name[]`)
// is emu_smem, 256 KB, whose bytes the launch asked for (up to 227 KB) are
// filled with NaN (0xff bytes, in fp32 and bf16) before every block;
// cp.async or wmma accesses past them fail.
//
// Arithmetic. bf16 with round-to-nearest-even (NaN stays NaN); the fp32
// intrinsics as exact or correctly rounded host operations, except: __expf is
// exp2f(x * log2 e) (the GPU's rounding of the product; not its ex2.approx
// last bits), __fdividef is a / b but 0 for 2^126 < |b| < 2^128 (as the GPU),
// rsqrtf is 1 / sqrtf, ex2.approx.ftz (fa_exp2, cls_exp2) is exp2f with
// subnormal results flushed to 0; __hmax2 as CUDA's (NaN loses, +0 > -0);
// __byte_perm with selector nibbles 0..7 (a set bit 3, PTX's sign replication,
// fails). nvcuda::wmma 16x16x16 bf16 fragments whose accumulator (lane,
// element) -> (row, col) mapping is a random permutation chosen by the test,
// since the real one is unspecified; cp.async (as the fa_cp_async* helpers of
// llmc/attention_flash.cuh) either copied at issue or only at the wait that
// must complete it, so both orders a GPU may show are exercised.
//
// What it cannot show: speed, the hardware's accumulation order inside an mma,
// the special-function unit's last-bit errors, bank conflicts, register or
// shared-memory limits, races that running one thread at a time between
// barriers hides (two threads writing one word, code relying on a warp's lanes
// in lockstep), and ordering between blocks (they never overlap here). The
// kernels are still compiled by nvcc for the rest, and checked on a GPU by
// dev/cuda/*.cu.
#ifndef LLMC_CUDA_EMULATOR_H
#define LLMC_CUDA_EMULATOR_H

#ifndef LLMC_CUDA_EMULATION
#define LLMC_CUDA_EMULATION
#endif

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <deque>
#include <functional>
#include <vector>

#if defined(__x86_64__) && !defined(EMU_USE_UCONTEXT)
#define EMU_X86_64_SWITCH 1
#else
#include <ucontext.h>
#endif

#if defined(__SANITIZE_ADDRESS__)
#define EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define EMU_ASAN 1
#endif
#endif
#ifdef EMU_ASAN
#include <sanitizer/common_interface_defs.h>
#endif

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
#define __restrict__ __restrict
#define __launch_bounds__(...)
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))

[[noreturn]] static void emu_fail(const char *what) {
    fprintf(stderr, "error: cuda emulator: %s\n", what);
    fflush(stderr);
    abort();
}

// ---- vector types ----
struct alignas(16) uint4 { uint32_t x, y, z, w; };
struct alignas(16) int4 { int x, y, z, w; };
struct alignas(16) float4 { float x, y, z, w; };
struct alignas(8) float2 { float x, y; };
struct alignas(8) uint2 { uint32_t x, y; };
static inline uint4 make_uint4(uint32_t a, uint32_t b, uint32_t c, uint32_t d) { return {a, b, c, d}; }
static inline int4 make_int4(int a, int b, int c, int d) { return {a, b, c, d}; }
static inline float4 make_float4(float a, float b, float c, float d) { return {a, b, c, d}; }
static inline float2 make_float2(float a, float b) { return {a, b}; }
static inline uint2 make_uint2(uint32_t a, uint32_t b) { return {a, b}; }

// ---- bits of an fp32, and bf16 ----
static inline unsigned __float_as_uint(float f) {
    unsigned u;
    memcpy(&u, &f, 4);
    return u;
}
static inline float __uint_as_float(unsigned u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
struct __nv_bfloat16 { uint16_t bits; };
typedef __nv_bfloat16 bf16;
struct alignas(4) __nv_bfloat162 { __nv_bfloat16 x, y; };
static inline float emu_bf16_to_float(bf16 h) { return __uint_as_float((uint32_t)h.bits << 16); }
static inline bf16 __float2bfloat16_rn(float f) {
    uint32_t u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return {0x7fc0};  // NaN stays NaN
    u += 0x7fffu + ((u >> 16) & 1u);
    return {(uint16_t)(u >> 16)};
}
static inline bf16 __float2bfloat16(float f) { return __float2bfloat16_rn(f); }
static inline float __bfloat162float(bf16 h) { return emu_bf16_to_float(h); }
static inline unsigned short __bfloat16_as_ushort(bf16 h) { return h.bits; }
static inline bf16 __ushort_as_bfloat16(unsigned short u) { return {u}; }
static inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) {
    return {__float2bfloat16_rn(a), __float2bfloat16_rn(b)};
}
static inline float2 __bfloat1622float2(__nv_bfloat162 h) { return {emu_bf16_to_float(h.x), emu_bf16_to_float(h.y)}; }
static inline float __low2float(__nv_bfloat162 h) { return emu_bf16_to_float(h.x); }
static inline float __high2float(__nv_bfloat162 h) { return emu_bf16_to_float(h.y); }
// CUDA's __hmax (per half of __hmax2): a NaN input loses to the other, two NaNs give the canonical NaN, +0 > -0
static inline bf16 emu_bf16_max(bf16 a, bf16 b) {
    float fa = emu_bf16_to_float(a), fb = emu_bf16_to_float(b);
    if (fa != fa && fb != fb) return {0x7fff};
    if (fa != fa) return b;
    if (fb != fb) return a;
    if (fa == 0.0f && fb == 0.0f) return (a.bits & 0x8000u) ? b : a;
    return fa > fb ? a : b;
}
static inline __nv_bfloat162 __hmax2(__nv_bfloat162 a, __nv_bfloat162 b) {
    return {emu_bf16_max(a.x, b.x), emu_bf16_max(a.y, b.y)};
}

// ---- fp32 / integer intrinsics ----
// bytes of {y, x} (x the low word) picked by the selector nibbles of s
static inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
    uint64_t in = ((uint64_t)y << 32) | x;
    unsigned r = 0;
    for (int i = 0; i < 4; i++) {
        unsigned sel = (s >> (4 * i)) & 0xfu;
        if (sel & 8u) emu_fail("__byte_perm selector with bit 3 set (sign replication) is not emulated");
        r |= (unsigned)((in >> (8 * sel)) & 0xffu) << (8 * i);
    }
    return r;
}
// (__expf and __logf are also glibc's internal names: macros, after <math.h>)
static inline float emu_expf(float x) { return exp2f(x * 1.4426950408889634f); }
static inline float emu_logf(float x) { return logf(x); }
#define __expf(x) emu_expf(x)
#define __logf(x) emu_logf(x)
static inline float __fdividef(float a, float b) {
    float ab = fabsf(b);
    if (ab > 8.507059173023462e37f && ab < INFINITY) return 0.0f;  // 2^126 < |b| < 2^128
    return a / b;
}
static inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
static inline float __saturatef(float x) { return x != x ? 0.0f : x < 0.0f ? 0.0f : x > 1.0f ? 1.0f : x; }
// ex2.approx.ftz.f32: subnormal results are 0
static inline float emu_ex2_approx_ftz(float x) {
    float y = exp2f(x);
    return fabsf(y) < 1.17549435e-38f ? 0.0f : y;
}
// the device overloads of min / max for integers (host float code calls fminf / fmaxf)
template <class T> static inline T min(T a, T b) { return a < b ? a : b; }

// ---- the thread's place in the launch ----
struct dim3 {
    unsigned x, y, z;
    constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
typedef dim3 uint3;
static dim3 threadIdx, blockIdx, gridDim, blockDim;  // threadIdx: of the fiber now running
static constexpr int warpSize = 32;

// ---- fibers ----
#define EMU_MAX_THREADS 1024
#define EMU_STACK_BYTES ((size_t)256 * 1024)
enum EmuState { EMU_RUNNING, EMU_AT_BLOCK_BARRIER, EMU_AT_WARP_OP, EMU_EXITED };
enum EmuWarpOp { EMU_OP_SYNCWARP = 1, EMU_OP_SHUFFLE, EMU_OP_VOTE };
static const char *const emu_op_name[] = {"", "__syncwarp", "a shuffle", "a vote"};
struct EmuCopy {
    void *dst;
    const void *src;
};
struct EmuThread {
#ifdef EMU_X86_64_SWITCH
    void *sp;  // saved stack pointer while switched out
#else
    ucontext_t ctx;
#endif
    unsigned char *stack;  // lowest byte of its stack
    bool created;
    EmuState state;
    EmuWarpOp op;
    int parity;             // which of the two exchange buffers its next warp operation uses
    void *asan_fake_stack;  // AddressSanitizer's handle while switched out
    std::vector<EmuCopy> open_group;                 // cp.async issued, not committed
    std::vector<std::vector<EmuCopy>> committed;     // committed groups, oldest first
};
static EmuThread emu_threads[EMU_MAX_THREADS];
static int emu_tid;  // linear index of the running thread in its block
static const std::function<void()> *emu_kernel;
static unsigned char *emu_stacks;
#ifdef EMU_X86_64_SWITCH
static void *emu_sched_sp;
#else
static ucontext_t emu_sched_ctx;
#endif
static const void *emu_sched_stack_bottom;  // the scheduler's (the test's) stack, for AddressSanitizer
static size_t emu_sched_stack_size;
static void *emu_sched_fake_stack;

// The order in which the threads a barrier releases run (see the top).
enum EmuSchedule { EMU_SCHEDULE_RANDOM, EMU_SCHEDULE_FORWARD, EMU_SCHEDULE_REVERSE };
static EmuSchedule emu_schedule = EMU_SCHEDULE_RANDOM;
static uint64_t emu_schedule_seed = 0x9e3779b97f4a7c15ull;

static inline void emu_asan_start(void **fake_save, const void *bottom, size_t size) {
#ifdef EMU_ASAN
    __sanitizer_start_switch_fiber(fake_save, bottom, size);
#else
    (void)fake_save, (void)bottom, (void)size;
#endif
}
static inline void emu_asan_finish(void *fake, const void **old_bottom, size_t *old_size) {
#ifdef EMU_ASAN
    __sanitizer_finish_switch_fiber(fake, old_bottom, old_size);
#else
    (void)fake, (void)old_bottom, (void)old_size;
#endif
}

#ifdef EMU_X86_64_SWITCH
// Saves the callee-saved registers on the current stack, stores the stack
// pointer in *save_sp, loads load_sp and restores the same from there (System
// V x86-64). MXCSR and the x87 control word, callee-saved too, are left as
// they are: no code run here changes them, so every fiber runs in the
// launching thread's modes (and loading them at each switch cost more than
// the rest of the switch).
__attribute__((naked, noinline)) static void emu_switch(void ** /*save_sp*/, void * /*load_sp*/) {
    asm("pushq %rbp\n\t"
        "pushq %rbx\n\t"
        "pushq %r12\n\t"
        "pushq %r13\n\t"
        "pushq %r14\n\t"
        "pushq %r15\n\t"
        "movq %rsp, (%rdi)\n\t"
        "movq %rsi, %rsp\n\t"
        "popq %r15\n\t"
        "popq %r14\n\t"
        "popq %r13\n\t"
        "popq %r12\n\t"
        "popq %rbx\n\t"
        "popq %rbp\n\t"
        "ret\n\t");
}
#endif

// The running fiber t hands control to the scheduler; returns when the
// scheduler resumes it (the compiler barrier after: other threads' stores seen).
static void emu_to_scheduler(EmuThread &t) {
    emu_asan_start(&t.asan_fake_stack, emu_sched_stack_bottom, emu_sched_stack_size);
#ifdef EMU_X86_64_SWITCH
    emu_switch(&t.sp, emu_sched_sp);
#else
    swapcontext(&t.ctx, &emu_sched_ctx);
#endif
    emu_asan_finish(emu_threads[emu_tid].asan_fake_stack, nullptr, nullptr);
    asm volatile("" ::: "memory");
}

// A fiber's life: every time the scheduler starts it on a block, one call of
// the kernel; then it reports itself exited and waits for the next block.
[[noreturn]] static void emu_fiber_main() {
    emu_asan_finish(nullptr, &emu_sched_stack_bottom, &emu_sched_stack_size);  // first entry
    for (;;) {
        (*emu_kernel)();
        EmuThread &t = emu_threads[emu_tid];
        t.state = EMU_EXITED;
        asm volatile("" ::: "memory");
        emu_to_scheduler(t);
    }
}
#ifndef EMU_X86_64_SWITCH
static void emu_fiber_main_uc() { emu_fiber_main(); }
#endif

// Where fiber i's stack starts below the top of its EMU_STACK_BYTES: stacks
// 260 KB apart would put every fiber's frames in the same L1 sets (and a few
// L2 ones), and a block's switches would miss the cache at each one; an
// offset of i mod 64 lines and (i / 64) mod 8 pages spreads them.
static inline size_t emu_stack_colour(int i) { return (size_t)(i % 64) * 64 + (size_t)(i / 64 % 8) * 4096; }
static void emu_create_fiber(int i) {
    if (!emu_stacks) {
        const size_t per = EMU_STACK_BYTES + 4096;
        void *p = mmap(nullptr, per * EMU_MAX_THREADS, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p == MAP_FAILED) emu_fail("cannot map the fiber stacks");
        emu_stacks = (unsigned char *)p;
        for (int k = 0; k < EMU_MAX_THREADS; k++)  // a guard page below each stack
            if (mprotect(emu_stacks + k * per, 4096, PROT_NONE) != 0) emu_fail("cannot protect a stack guard page");
    }
    EmuThread &t = emu_threads[i];
    t.stack = emu_stacks + (size_t)i * (EMU_STACK_BYTES + 4096) + 4096;
#ifdef EMU_X86_64_SWITCH
    // the frame emu_switch pops: r15..rbp, then emu_fiber_main as the return
    // address, entered as if called (rsp % 16 == 8)
    uint64_t *top = (uint64_t *)(t.stack + EMU_STACK_BYTES - emu_stack_colour(i));
    uint64_t *f = top - 8;
    memset(f, 0, 8 * sizeof(uint64_t));
    void (*entry)() = emu_fiber_main;
    memcpy(&f[6], &entry, sizeof(entry));
    t.sp = f;
#else
    if (getcontext(&t.ctx) != 0) emu_fail("getcontext");
    t.ctx.uc_stack.ss_sp = t.stack;
    t.ctx.uc_stack.ss_size = EMU_STACK_BYTES - emu_stack_colour(i);
    t.ctx.uc_link = nullptr;
    makecontext(&t.ctx, emu_fiber_main_uc, 0);
#endif
    t.created = true;
}

// Runs thread i of the current block until it next waits or exits.
static void emu_resume(int i) {
    EmuThread &t = emu_threads[i];
    emu_tid = i;
    threadIdx = blockDim.y * blockDim.z == 1 ? dim3(i)  // (most blocks: no divisions at every switch)
                                              : dim3(i % blockDim.x, (i / blockDim.x) % blockDim.y, i / (blockDim.x * blockDim.y));
    t.state = EMU_RUNNING;
    emu_asan_start(&emu_sched_fake_stack, t.stack, EMU_STACK_BYTES);
#ifdef EMU_X86_64_SWITCH
    emu_switch(&emu_sched_sp, t.sp);
#else
    swapcontext(&emu_sched_ctx, &t.ctx);
#endif
    emu_asan_finish(emu_sched_fake_stack, nullptr, nullptr);
}

// The running thread waits (state: a barrier or a warp operation) until the
// scheduler resumes it.
static void emu_wait(EmuState state, EmuWarpOp op) {
    EmuThread &t = emu_threads[emu_tid];
    t.state = state;
    t.op = op;
    asm volatile("" ::: "memory");  // the other threads' stores are seen after it
    emu_to_scheduler(t);
}

static inline uint64_t emu_next_random(void) {
    emu_schedule_seed = emu_schedule_seed * 6364136223846793005ull + 1442695040888963407ull;
    return emu_schedule_seed >> 33;
}
// Queues threads [lo, hi) in the schedule's order: at the back (after every
// thread already waiting to run: the warps advance together) or, with
// run_ahead, at the front (the released warp runs on before the others).
static void emu_release(std::deque<int> &runq, int lo, int hi, bool run_ahead) {
    int ids[EMU_MAX_THREADS], n = hi - lo;
    for (int k = 0; k < n; k++) ids[k] = emu_schedule == EMU_SCHEDULE_REVERSE ? hi - 1 - k : lo + k;
    if (emu_schedule == EMU_SCHEDULE_RANDOM)
        for (int k = n - 1; k > 0; k--) {
            int j = (int)(emu_next_random() % (uint64_t)(k + 1)), t = ids[k];
            ids[k] = ids[j];
            ids[j] = t;
        }
    if (run_ahead)
        for (int k = n - 1; k >= 0; k--) runq.push_front(ids[k]);
    else
        for (int k = 0; k < n; k++) runq.push_back(ids[k]);
}

// ---- barriers, shuffles, votes ----
static inline void __syncthreads() { emu_wait(EMU_AT_BLOCK_BARRIER, EMU_OP_SYNCWARP); }
static inline void emu_check_mask(unsigned mask, const char *what) {
    if (mask != 0xffffffffu) emu_fail(what);
}
static inline void __syncwarp(unsigned mask = 0xffffffffu) {
    emu_check_mask(mask, "__syncwarp with a partial mask");
    emu_wait(EMU_AT_WARP_OP, EMU_OP_SYNCWARP);
}
// [parity][warp][lane]: what each lane put in; two buffers, so a lane may write
// the next operation's value while slower lanes still read this one's
static uint64_t emu_exchange[2][EMU_MAX_THREADS / 32][32];
// every lane publishes v; after the warp has met, the row of what its 32 lanes published
template <class T> static inline const uint64_t *emu_warp_publish(T v, EmuWarpOp op) {
    static_assert(sizeof(T) <= 8, "a warp operation on more than 8 bytes");
    EmuThread &t = emu_threads[emu_tid];
    int w = emu_tid / 32, lane = emu_tid % 32, p = t.parity;
    t.parity ^= 1;
    uint64_t u = 0;
    memcpy(&u, &v, sizeof(T));
    emu_exchange[p][w][lane] = u;
    emu_wait(EMU_AT_WARP_OP, op);
    return emu_exchange[p][w];
}
template <class T> static inline T emu_shuffle(unsigned mask, T v, int src) {
    emu_check_mask(mask, "shuffle with a partial mask");
    const uint64_t *row = emu_warp_publish(v, EMU_OP_SHUFFLE);
    T out;
    memcpy(&out, &row[src], sizeof(T));
    return out;
}
static inline int emu_width_check(int width) {
    if (width <= 0 || width > 32 || (width & (width - 1))) emu_fail("shuffle width not a power of 2 up to 32");
    return width;
}
// CUDA's rule: a source lane past the width-lane segment returns the lane's own value
template <class T> static inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
    int lane = emu_tid % 32, base = lane & ~(emu_width_check(width) - 1), src = lane ^ lane_mask;
    return emu_shuffle(mask, v, src >= base + width || src > 31 ? lane : src);
}
static inline unsigned __ballot_sync(unsigned mask, int predicate) {
    emu_check_mask(mask, "vote with a partial mask");
    const uint64_t *row = emu_warp_publish(predicate != 0 ? 1u : 0u, EMU_OP_VOTE);
    unsigned b = 0;
    for (int l = 0; l < 32; l++) b |= (unsigned)row[l] << l;
    return b;
}
static inline int __any_sync(unsigned mask, int predicate) { return __ballot_sync(mask, predicate) != 0; }

// ---- the launch's dynamic shared memory ----
#define EMU_SMEM_CAP ((size_t)256 * 1024)
alignas(128) static unsigned char emu_smem[EMU_SMEM_CAP];
static size_t emu_smem_bytes;  // what the launch asked for
#define DYNAMIC_SMEM(type, name) type *const name = reinterpret_cast<type *>(emu_smem)
static inline void emu_check_smem(const void *p, size_t bytes, const char *what) {
    const unsigned char *c = (const unsigned char *)p;
    if (c >= emu_smem && c < emu_smem + EMU_SMEM_CAP && c + bytes > emu_smem + emu_smem_bytes) emu_fail(what);
}

// ---- PTX helpers of the kernel headers (left out there under LLMC_CUDA_EMULATION) ----
// cp.async of llmc/attention_flash.cuh
static bool emu_copy_at_issue = false;  // else at the wait that must complete the copy
static inline void fa_cp_async16(void *smem, const void *gmem) {
    if ((uintptr_t)smem % 16 || (uintptr_t)gmem % 16) emu_fail("cp.async address not 16-byte aligned");
    emu_check_smem(smem, 16, "cp.async past the launch's shared memory");
    if (emu_copy_at_issue) memcpy(smem, gmem, 16);
    else emu_threads[emu_tid].open_group.push_back({smem, gmem});
}
static inline void fa_cp_async_commit() {
    EmuThread &t = emu_threads[emu_tid];
    t.committed.push_back(t.open_group);
    t.open_group.clear();
}
template <int N> static inline void fa_cp_async_wait() {
    EmuThread &t = emu_threads[emu_tid];
    while ((int)t.committed.size() > N) {
        for (const EmuCopy &c : t.committed.front()) memcpy(c.dst, c.src, 16);
        t.committed.erase(t.committed.begin());
    }
}
// ex2.approx.ftz of llmc/attention_flash.cuh and llmc/classifier.cuh
static inline float fa_exp2(float x) { return emu_ex2_approx_ftz(x); }
static inline float cls_exp2(float x) { return emu_ex2_approx_ftz(x); }

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
// a program that never chooses one gets this one
static const bool emu_acc_layout_chosen = (emu_shuffle_accumulator_layout(0x5eedull), true);

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
    int lane = emu_tid % 32;
    for (int e = 0; e < 8; e++) {
        int r = emu_acc_row[lane][e], c = emu_acc_col[lane][e];
        f.x[e] = layout == mem_row_major ? p[r * ldm + c] : p[c * ldm + r];
    }
}
static inline void store_matrix_sync(float *p, const EmuAccumulator &f, unsigned ldm, layout_t layout) {
    emu_check_operand(p, ldm, 4, (size_t)(15 * ldm + 16) * 4);
    int lane = emu_tid % 32;
    for (int e = 0; e < 8; e++) {
        int r = emu_acc_row[lane][e], c = emu_acc_col[lane][e];
        (layout == mem_row_major ? p[r * ldm + c] : p[c * ldm + r]) = f.x[e];
    }
}
// d = a b + c, each element summed in k order in fp32
template <class LayoutA, class LayoutB>
void mma_sync(EmuAccumulator &d, const fragment<matrix_a, 16, 16, 16, bf16, LayoutA> &a,
              const fragment<matrix_b, 16, 16, 16, bf16, LayoutB> &b, const EmuAccumulator &c) {
    int lane = emu_tid % 32;
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

// ---- the launch ----
static void emu_run_block(int nt) {
    memset(emu_smem, 0xff, emu_smem_bytes);  // NaN in fp32 and bf16
    const int nw = (nt + 31) / 32;
    int warp_waiting[EMU_MAX_THREADS / 32] = {0}, warp_exited[EMU_MAX_THREADS / 32] = {0};
    int exited = 0, at_barrier = 0;
    char msg[256];
    for (int i = 0; i < nt; i++) {
        EmuThread &t = emu_threads[i];
        if (!t.created) emu_create_fiber(i);
        t.parity = 0;
        t.open_group.clear();
        t.committed.clear();
    }
    // a warp whose lanes have all met runs on at once (run ahead) or after the
    // threads already queued (together): per block at random, else together
    const bool run_ahead = emu_schedule == EMU_SCHEDULE_RANDOM && (emu_next_random() & 1);
    std::deque<int> runq;
    emu_release(runq, 0, nt, false);
    for (;;) {
        if (runq.empty()) {
            if (exited == nt) break;
            if (at_barrier == nt) {  // every thread at __syncthreads
                at_barrier = 0;
                emu_release(runq, 0, nt, false);
            } else {
                int at_warp = 0;
                for (int w = 0; w < nw; w++) at_warp += warp_waiting[w];
                snprintf(msg, sizeof(msg),
                         "deadlock in block (%u,%u,%u): %d threads at __syncthreads, %d at warp operations, %d exited",
                         blockIdx.x, blockIdx.y, blockIdx.z, at_barrier, at_warp, exited);
                emu_fail(msg);
            }
        }
        const int i = runq.front(), w = i / 32, lanes = nt - 32 * w < 32 ? nt - 32 * w : 32;
        runq.pop_front();
        emu_resume(i);
        EmuThread &t = emu_threads[i];
        if (t.state == EMU_EXITED) {
            if (!t.open_group.empty() || !t.committed.empty())
                emu_fail("a thread ended with cp.async copies not waited for");
            if (warp_waiting[w]) emu_fail("a thread exited while lanes of its warp wait at a warp operation");
            if (at_barrier) emu_fail("a thread exited while others of its block wait at __syncthreads");
            exited++;
            warp_exited[w]++;
        } else if (t.state == EMU_AT_BLOCK_BARRIER) {
            if (exited) emu_fail("__syncthreads after some threads of the block exited");
            at_barrier++;
        } else if (t.state == EMU_AT_WARP_OP) {
            if (lanes < 32) emu_fail("a full-mask warp operation in a warp of fewer than 32 threads");
            if (warp_exited[w]) emu_fail("a warp operation after some lanes of the warp exited");
            if (++warp_waiting[w] == 32) {
                for (int l = 0; l < 32; l++)
                    if (emu_threads[32 * w + l].op != t.op) {
                        snprintf(msg, sizeof(msg), "lanes of warp %d met at different warp operations (%s and %s)", w,
                                 emu_op_name[t.op], emu_op_name[emu_threads[32 * w + l].op]);
                        emu_fail(msg);
                    }
                warp_waiting[w] = 0;
                emu_release(runq, 32 * w, 32 * w + 32, run_ahead);
            }
        } else {
            emu_fail("a thread switched out while running");
        }
    }
}

// Runs kernel() for every block of grid (x fastest), block threads each; the
// dynamic shared memory (smem_bytes of emu_smem) NaN-filled before each block.
static inline void emu_launch(dim3 grid, dim3 block, size_t smem_bytes, const std::function<void()> &kernel) {
    const uint64_t nt = (uint64_t)block.x * block.y * block.z;
    if (nt == 0 || nt > EMU_MAX_THREADS || block.z > 64) emu_fail("block size");
    if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.x > 0x7fffffffu || grid.y > 65535 || grid.z > 65535)
        emu_fail("grid size");
    if (smem_bytes > (size_t)227 * 1024) emu_fail("more than 227 KB of shared memory");
    if (emu_kernel) emu_fail("emu_launch inside a kernel");
    gridDim = grid;
    blockDim = block;
    emu_smem_bytes = smem_bytes;
    emu_kernel = &kernel;
    for (unsigned z = 0; z < grid.z; z++)
        for (unsigned y = 0; y < grid.y; y++)
            for (unsigned x = 0; x < grid.x; x++) {
                blockIdx = dim3(x, y, z);
                emu_run_block((int)nt);
            }
    emu_kernel = nullptr;
}


// the runtime (memory, streams, events, device queries, launch_kernel) and cuBLASLt
#include "cuda_runtime_emulator.h"
#include "cublaslt_emulator.h"

#endif  // LLMC_CUDA_EMULATOR_H
