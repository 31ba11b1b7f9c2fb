// cuda_runtime_emulator.h: the CUDA runtime calls llmc makes, on the CPU, for
// tests/cuda_emulator.h (which includes it): device and pinned memory,
// streams, events, kernel launches (launch_kernel) and the device queries, so
// that a whole GPU program (train_gpt.cu, tests/test_gpt.cu) runs in CI.
//
// Asynchrony, as late as CUDA allows. Work queued on a stream (a launch, a
// cuBLASLt matmul, an async copy or memset, a wait for an event) does not run
// when it is queued: it runs when the host must see it -- cudaStreamSynchronize,
// cudaEventSynchronize or cudaEventQuery on an event after it, a synchronous
// cudaMemcpy / cudaMemset or any work on the legacy default stream (which first
// runs every blocking stream to its end), cudaFree / cudaFreeHost /
// cudaDeviceSynchronize (all streams) -- or when another stream's queued
// cudaStreamWaitEvent needs it. So a host that reads a result without
// synchronising reads stale memory, a stream that reads another's buffer
// without waiting for its event reads it before the other wrote it, and host
// memory freed or rewritten before an async copy out of pinned memory ran is
// read late (AddressSanitizer catches the freed case): the tests fail as they
// would on a GPU, every time instead of now and then. The documented
// exceptions are kept: cudaMemcpyAsync from pageable host memory takes its
// source at the call (staged), into pageable host memory it returns once the
// copy is done. cudaEventQuery on an event not yet reached returns
// cudaErrorNotReady and runs the stream as far as it can without waiting (a
// GPU makes progress while the host polls): up to the event, or to an NCCL
// operation still under way (tests/emu_include/nccl.h: its kernels progress
// on their own, as a GPU's do, and a stream reaches one only when it has
// completed), so a host that polls an event is never held there.
//
// Threads. The thread that started the program drives the emulated device
// (work runs on it, as described above); another thread (comm_nccl.cuh's
// watchdog) may query an event, which only looks: it runs nothing, so work
// that the driving thread is stuck before stays not ready, as on a GPU whose
// collective never completes. The current device is a thread's own, as in
// CUDA.
//
// Memory. cudaMalloc returns 256-byte aligned host memory and records it, as
// cudaMallocHost records pinned memory; a copy whose kind says "device" for a
// side that is not inside one recorded device allocation (or "host" for one
// that is) fails the test, and so does cudaFree of a pointer cudaMalloc did
// not return. Kernels dereference the pointers they get directly.
//
// Device queries: LLMC_EMU_DEVICES devices (default 8, a node of 8, so every
// rank of an mpirun job on one machine has "a GPU of its own", as NCCL wants;
// fewer lets a test start more ranks than devices), each "CUDA emulator
// (CPU)" of compute capability LLMC_EMU_DEVICE_CC (MAJOR.MINOR, default 9.0),
// EMU_NUM_SMS SMs, the machine's RAM as its memory; all of them are this one
// CPU (a rank's cudaSetDevice changes nothing else). The program holds device
// code for the architectures the Makefile gave the emulated build in
// __CUDA_ARCH_LIST__ (nvcc's macro: 800,900,...) as the real build's fat binary
// does -- a cubin for each and the PTX of the last -- and cudaFuncGetAttributes
// finds code for the device by the CUDA C++ Programming Guide's compatibility
// rules ("Binary Compatibility": a cubin for X.y runs on devices X.z, z >= y;
// "PTX Compatibility": PTX for compute capability c is JIT-compiled for any
// device >= c), else fails with cudaErrorNoKernelImageForDevice, as the
// runtime does on a GPU the binary holds no code for.
// NVTX ranges are no-ops.
#ifndef LLMC_CUDA_RUNTIME_EMULATOR_H
#define LLMC_CUDA_RUNTIME_EMULATOR_H

#ifndef LLMC_CUDA_EMULATOR_H
#error "include tests/cuda_emulator.h, which includes this"
#endif

#include <atomic>
#include <map>
#include <chrono>
#include <memory>
#include <thread>

typedef int cudaError_t;
enum {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInvalidDeviceFunction = 98,
    cudaErrorInvalidDevice = 101,
    cudaErrorNoKernelImageForDevice = 209,
    cudaErrorNotReady = 600
};
static inline const char *cudaGetErrorString(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidDeviceFunction: return "invalid device function";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorNoKernelImageForDevice: return "no kernel image is available for execution on the device";
    case cudaErrorNotReady: return "device not ready";
    default: return "unknown error";
    }
}
// A launch's error (no code for the device), returned and cleared by cudaGetLastError.
static thread_local cudaError_t emu_last_error = 0;
static inline cudaError_t cudaGetLastError() {
    cudaError_t e = emu_last_error;
    emu_last_error = cudaSuccess;
    return e;
}

// ---- memory: the allocations (start -> bytes) of each kind ----
static std::map<uintptr_t, size_t> emu_device_allocs, emu_pinned_allocs;

// 1 if [p, p + bytes) lies inside one allocation of the map.
static inline bool emu_inside(const std::map<uintptr_t, size_t> &allocs, const void *p, size_t bytes) {
    uintptr_t u = (uintptr_t)p;
    auto it = allocs.upper_bound(u);
    if (it == allocs.begin()) return false;
    --it;
    return u >= it->first && u + bytes <= it->first + it->second;
}
static inline bool emu_is_device(const void *p, size_t bytes) { return emu_inside(emu_device_allocs, p, bytes); }
static inline bool emu_is_pinned(const void *p, size_t bytes) { return emu_inside(emu_pinned_allocs, p, bytes); }
// 1 if p is in no device allocation (host memory: pageable or pinned)
static inline bool emu_is_host(const void *p) { return !emu_is_device(p, 1); }

// ---- streams and events ----
// Queued work: a function, or (wait_on set) a wait for another stream to have
// run wait_target operations (cudaStreamWaitEvent). A completion (the end of
// an operation already under way, as tests/emu_include/nccl.h queues) needs
// nothing of the stream's earlier work to have run before the next operation starts.
struct EmuStream;
struct EmuOp {
    std::function<void()> fn;
    EmuStream *wait_on = nullptr;
    uint64_t wait_target = 0;
    bool completion = false;
    // set for work that waits for something outside the emulated streams (an NCCL
    // operation under way, tests/emu_include/nccl.h): whether fn would run now
    // without waiting (fn itself waits when it must)
    std::function<bool()> ready;
};
struct EmuStream {
    std::deque<EmuOp> ops;
    uint64_t queued = 0;               // operations ever queued
    std::atomic<uint64_t> done{0};     // operations run (another thread's event query reads it)
    bool blocking = true;           // synchronises with the legacy default stream
    bool running = false;
};
typedef EmuStream *cudaStream_t;  // nullptr: the legacy default stream
struct EmuEvent {
    EmuStream *stream = nullptr;  // where it was last recorded (nullptr: complete)
    uint64_t target = 0;          // complete once stream->done reaches it
    // when the stream reached it (s, the host's clock: the emulated device runs a stream's work when something
    // waits for it, so intervals are of that timeline); shared with the op that sets it
    std::shared_ptr<double> time = std::make_shared<double>(0.0);
};
typedef EmuEvent *cudaEvent_t;
static std::vector<std::unique_ptr<EmuStream>> emu_all_streams;  // never freed: events may still name them

static bool emu_stream_run(EmuStream *s, uint64_t upto, bool wait = true);
static void emu_run_op(const EmuOp &op) {
    if (op.wait_on) emu_stream_run(op.wait_on, op.wait_target);
    else op.fn();
}
// Whether op can run now without waiting for anything outside the emulated
// streams (what a stream waits for is run as far as it can be, without waiting).
static bool emu_op_ready(const EmuOp &op) {
    if (op.wait_on) return emu_stream_run(op.wait_on, op.wait_target, false);
    return !op.ready || op.ready();
}
// Runs stream s's queue until `upto` operations of it have run; with wait
// false, it stops before work that would wait for something outside the
// emulated streams (an NCCL operation under way). Returns whether s got there.
static bool emu_stream_run(EmuStream *s, uint64_t upto, bool wait) {
    if (s->done >= upto) return true;
    if (s->running) emu_fail("streams wait for each other in a cycle");
    s->running = true;
    while (s->done < upto) {
        if (!wait && !emu_op_ready(s->ops.front())) break;
        EmuOp op = std::move(s->ops.front());
        s->ops.pop_front();
        emu_run_op(op);
        s->done++;
    }
    s->running = false;
    return s->done >= upto;
}
static void emu_stream_drain(EmuStream *s) { emu_stream_run(s, s->queued); }
// What the legacy default stream waits for: every blocking stream's work.
static void emu_sync_blocking_streams() {
    for (auto &s : emu_all_streams)
        if (s->blocking) emu_stream_drain(s.get());
}
static void emu_sync_all_streams() {
    for (auto &s : emu_all_streams) emu_stream_drain(s.get());
}
// Work the host thread has queued (tests/nccl_emu_engine.h: a host that polls
// an NCCL operation twice with nothing queued in between is waiting for it).
static uint64_t emu_host_activity;
// Queues op on s; on the legacy default stream it runs now, after every blocking stream's work.
static void emu_enqueue_op(cudaStream_t s, EmuOp op) {
    emu_host_activity++;
    if (!s) {
        emu_sync_blocking_streams();
        emu_run_op(op);
        return;
    }
    s->ops.push_back(std::move(op));
    s->queued++;
}
static void emu_enqueue(cudaStream_t s, std::function<void()> fn, bool completion = false) {
    emu_enqueue_op(s, EmuOp{std::move(fn), nullptr, 0, completion, nullptr});
}
// Makes everything queued on s before now that a new operation's start needs
// have run: the other streams' work s waits for, then s's own work, unless
// all of it is waits (done now) and completions, which stay queued (the
// operations they end are under way and may end later, as on a GPU).
static void emu_stream_ready_for_start(EmuStream *s) {
    // (running another stream may run s's own queue too, through a wait on s: rescan after each)
    for (bool again = true; again;) {
        again = false;
        for (const EmuOp &op : s->ops)
            if (op.wait_on && op.wait_on->done < op.wait_target) {
                emu_stream_run(op.wait_on, op.wait_target);
                again = true;
                break;
            }
    }
    for (size_t i = 0; i < s->ops.size(); i++)
        if (!s->ops[i].wait_on && !s->ops[i].completion) {
            emu_stream_drain(s);
            return;
        }
}

enum { cudaStreamDefault = 0, cudaStreamNonBlocking = 1 };
enum { cudaEventDefault = 0, cudaEventDisableTiming = 2 };
static inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags) {
    emu_all_streams.emplace_back(new EmuStream);
    *s = emu_all_streams.back().get();
    (*s)->blocking = !(flags & cudaStreamNonBlocking);
    return cudaSuccess;
}
static inline cudaError_t cudaStreamCreate(cudaStream_t *s) { return cudaStreamCreateWithFlags(s, cudaStreamDefault); }
static inline cudaError_t cudaStreamCreateWithPriority(cudaStream_t *s, unsigned flags, int) {
    return cudaStreamCreateWithFlags(s, flags);
}
static inline cudaError_t cudaDeviceGetStreamPriorityRange(int *least, int *greatest) {
    *least = 0;
    *greatest = -5;
    return cudaSuccess;
}
// As CUDA: the work already queued still runs.
static inline cudaError_t cudaStreamDestroy(cudaStream_t s) {
    if (!s) return cudaErrorInvalidValue;
    emu_stream_drain(s);
    return cudaSuccess;
}
static inline cudaError_t cudaStreamSynchronize(cudaStream_t s) {
    if (s) emu_stream_drain(s);
    else emu_sync_blocking_streams();
    return cudaSuccess;
}
static inline cudaError_t cudaDeviceSynchronize() {
    emu_sync_all_streams();
    return cudaSuccess;
}

static inline cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned) {
    *e = new EmuEvent;
    return cudaSuccess;
}
static inline cudaError_t cudaEventCreate(cudaEvent_t *e) { return cudaEventCreateWithFlags(e, cudaEventDefault); }
static inline cudaError_t cudaEventDestroy(cudaEvent_t e) {
    delete e;
    return cudaSuccess;
}
static inline double emu_clock_seconds() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
// An event on an idle stream is reached at once (as on a GPU); else when the
// stream runs to it (queued as a completion: it forces nothing to run).
static inline cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s = nullptr) {
    if (!s) emu_sync_blocking_streams();
    if (!s || s->done == s->queued) {
        *e->time = emu_clock_seconds();
    } else {
        std::shared_ptr<double> t = e->time;
        emu_enqueue_op(s, EmuOp{[t] { *t = emu_clock_seconds(); }, nullptr, 0, true, nullptr});
    }
    e->stream = s;
    e->target = s ? s->queued : 0;
    return cudaSuccess;
}
static inline bool emu_event_done(const EmuEvent *e) { return !e->stream || e->stream->done >= e->target; }
static inline cudaError_t cudaEventSynchronize(cudaEvent_t e) {
    if (e->stream) emu_stream_run(e->stream, e->target);
    return cudaSuccess;
}
static const std::thread::id emu_device_thread = std::this_thread::get_id();  // (static init: the main thread)
static inline cudaError_t cudaEventQuery(cudaEvent_t e) {
    if (emu_event_done(e)) return cudaSuccess;
    if (std::this_thread::get_id() == emu_device_thread) emu_stream_run(e->stream, e->target, false);
    return cudaErrorNotReady;
}
// The interval between when the streams reached the two events.
static inline cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) {
    if (!emu_event_done(a) || !emu_event_done(b)) return cudaErrorNotReady;
    *ms = (float)((*b->time - *a->time) * 1e3);
    return cudaSuccess;
}
// s waits (on the device) for the work before e's last record.
static inline cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned = 0) {
    if (e->stream) emu_enqueue_op(s, EmuOp{nullptr, e->stream, e->target, false, nullptr});  // (else complete)
    return cudaSuccess;
}

// ---- memory calls ----
// An allocation recorded in allocs: 256-byte aligned (as cudaMalloc's), or NULL.
static inline void *emu_alloc(std::map<uintptr_t, size_t> &allocs, size_t bytes) {
    size_t rounded = (bytes + 255) / 256 * 256;
    void *p = aligned_alloc(256, rounded > 0 ? rounded : 256);
    if (p) allocs[(uintptr_t)p] = bytes;
    return p;
}
// Frees an allocation of allocs after every stream's work (as cudaFree and cudaFreeHost synchronise).
static inline cudaError_t emu_free(std::map<uintptr_t, size_t> &allocs, void *p, const char *not_ours) {
    if (!p) return cudaSuccess;
    if (!allocs.count((uintptr_t)p)) emu_fail(not_ours);
    emu_sync_all_streams();
    allocs.erase((uintptr_t)p);
    free(p);
    return cudaSuccess;
}
static inline cudaError_t cudaMalloc(void **p, size_t bytes) {
    *p = emu_alloc(emu_device_allocs, bytes);
    return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
static inline cudaError_t cudaFree(void *p) {
    return emu_free(emu_device_allocs, p, "cudaFree of a pointer cudaMalloc did not return");
}
static uint64_t emu_pinned_allocations;  // cudaMallocHost calls (tests/test_comm_nccl.cu counts the staged backend's)
static inline cudaError_t cudaMallocHost(void **p, size_t bytes) {
    emu_pinned_allocations++;
    *p = emu_alloc(emu_pinned_allocs, bytes);
    return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
static inline cudaError_t cudaFreeHost(void *p) {
    return emu_free(emu_pinned_allocs, p, "cudaFreeHost of a pointer cudaMallocHost did not return");
}
static inline cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total_b) {
    *free_b = *total_b = (size_t)sysconf(_SC_PHYS_PAGES) * (size_t)sysconf(_SC_PAGE_SIZE);
    return cudaSuccess;
}

enum cudaMemcpyKind {
    cudaMemcpyHostToHost,
    cudaMemcpyHostToDevice,
    cudaMemcpyDeviceToHost,
    cudaMemcpyDeviceToDevice,
    cudaMemcpyDefault
};
// Fails the test when a side of the copy is not the memory its kind names.
static inline void emu_check_copy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind, const char *call) {
    if (bytes == 0 || kind == cudaMemcpyDefault) return;
    bool dst_dev = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
    bool src_dev = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
    char msg[200];
    if (dst_dev ? !emu_is_device(dst, bytes) : !emu_is_host(dst)) {
        snprintf(msg, sizeof(msg), "%s of %zu bytes: the destination is not %s memory", call, bytes,
                 dst_dev ? "(one allocation of) device" : "host");
        emu_fail(msg);
    }
    if (src_dev ? !emu_is_device(src, bytes) : !emu_is_host(src)) {
        snprintf(msg, sizeof(msg), "%s of %zu bytes: the source is not %s memory", call, bytes,
                 src_dev ? "(one allocation of) device" : "host");
        emu_fail(msg);
    }
}
// Synchronous: on the legacy default stream, after every blocking stream's work.
static inline cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind) {
    emu_check_copy(dst, src, bytes, kind, "cudaMemcpy");
    emu_sync_blocking_streams();
    if (bytes) memmove(dst, src, bytes);
    return cudaSuccess;
}
static inline cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind,
                                          cudaStream_t s = nullptr) {
    emu_check_copy(dst, src, bytes, kind, "cudaMemcpyAsync");
    if (bytes == 0) return cudaSuccess;
    if (kind == cudaMemcpyHostToDevice && !emu_is_pinned(src, bytes)) {  // pageable: staged at the call
        std::shared_ptr<std::vector<unsigned char>> staged(
            new std::vector<unsigned char>((const unsigned char *)src, (const unsigned char *)src + bytes));
        emu_enqueue(s, [dst, staged] { memcpy(dst, staged->data(), staged->size()); });
        return cudaSuccess;
    }
    emu_enqueue(s, [dst, src, bytes] { memmove(dst, src, bytes); });
    if (kind == cudaMemcpyDeviceToHost && !emu_is_pinned(dst, bytes) && s) emu_stream_drain(s);  // pageable: done on return
    return cudaSuccess;
}
static inline cudaError_t cudaMemsetAsync(void *p, int value, size_t bytes, cudaStream_t s = nullptr) {
    if (bytes && !emu_is_device(p, bytes)) emu_fail("cudaMemsetAsync: not (one allocation of) device memory");
    emu_enqueue(s, [p, value, bytes] { memset(p, value, bytes); });
    return cudaSuccess;
}
static inline cudaError_t cudaMemset(void *p, int value, size_t bytes) { return cudaMemsetAsync(p, value, bytes); }

// ---- launches ----
// llmc/cuda_common.cuh's launch_kernel: the kernel and its arguments (by
// value, as a launch takes them) queued on the stream.
// A launch on a device the program holds no code for runs nothing and leaves
// cudaErrorNoKernelImageForDevice for cudaGetLastError, as on a GPU.
static inline bool emu_device_code(int *binary, int *ptx);
template <typename... Params, typename... Args>
static inline void launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t s,
                                 Args... args) {
    int binary, ptx;
    if (!emu_device_code(&binary, &ptx)) {
        emu_last_error = cudaErrorNoKernelImageForDevice;
        return;
    }
    emu_enqueue(s, [=] { emu_launch(grid, block, smem, [&] { kernel(args...); }); });
}
// The shared-memory opt-in the flash launchers make: emu_launch allows 227 KB.
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize };
template <typename Kernel> static inline cudaError_t cudaFuncSetAttribute(Kernel, cudaFuncAttribute, int) {
    return cudaSuccess;
}

// ---- the device ----
#define EMU_NUM_SMS 8
// A positive integer (or MAJOR.MINOR pair) from the environment, default dflt; anything else fails the test.
static inline int emu_env_int(const char *name, int dflt, int lo, int hi) {
    const char *s = getenv(name);
    if (!s || !*s) return dflt;
    char *end = NULL;
    long v = strtol(s, &end, 10);
    if (*end || v < lo || v > hi) {
        fprintf(stderr, "emulated CUDA: %s='%s' is not an integer in [%d, %d]\n", name, s, lo, hi);
        emu_fail("emulated CUDA: a bad emulator setting");
    }
    return (int)v;
}
static inline int emu_num_devices() { return emu_env_int("LLMC_EMU_DEVICES", 8, 1, 64); }
// The emulated devices' compute capability as major * 10 + minor (LLMC_EMU_DEVICE_CC, "8.6").
static inline int emu_device_cc() {
    const char *s = getenv("LLMC_EMU_DEVICE_CC");
    if (!s || !*s) return 90;
    int major = 0, minor = 0;
    char tail = 0;
    if (sscanf(s, "%d.%d%c", &major, &minor, &tail) != 2 || major < 1 || major > 20 || minor < 0 || minor > 9) {
        fprintf(stderr, "emulated CUDA: LLMC_EMU_DEVICE_CC='%s' is not MAJOR.MINOR\n", s);
        emu_fail("emulated CUDA: a bad emulator setting");
    }
    return major * 10 + minor;
}
static thread_local int emu_current_device;
static inline bool emu_valid_device(int d) { return d >= 0 && d < emu_num_devices(); }
static inline cudaError_t cudaGetDeviceCount(int *n) {
    *n = emu_num_devices();
    return cudaSuccess;
}
static inline cudaError_t cudaSetDevice(int d) {
    if (!emu_valid_device(d)) return cudaErrorInvalidDevice;
    emu_current_device = d;
    return cudaSuccess;
}
static inline cudaError_t cudaGetDevice(int *d) {
    *d = emu_current_device;
    return cudaSuccess;
}
#define EMU_L2_BYTES (1 << 20)  // (the dev/cuda benchmarks' L2 flush; they do not run here)
enum cudaDeviceAttr { cudaDevAttrMultiProcessorCount, cudaDevAttrL2CacheSize };
static inline cudaError_t cudaDeviceGetAttribute(int *v, cudaDeviceAttr attr, int device) {
    *v = attr == cudaDevAttrL2CacheSize ? EMU_L2_BYTES : EMU_NUM_SMS;
    return emu_valid_device(device) ? cudaSuccess : cudaErrorInvalidDevice;
}
struct cudaDeviceProp {
    char name[256];
    int major, minor, multiProcessorCount;
    size_t totalGlobalMem;
};
static inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int device) {
    memset(p, 0, sizeof(*p));
    snprintf(p->name, sizeof(p->name), "CUDA emulator (CPU)");
    p->major = emu_device_cc() / 10;
    p->minor = emu_device_cc() % 10;
    p->multiProcessorCount = EMU_NUM_SMS;
    size_t free_b;
    cudaMemGetInfo(&free_b, &p->totalGlobalMem);
    return emu_valid_device(device) ? cudaSuccess : cudaErrorInvalidDevice;
}

// The code cudaFuncGetAttributes finds for a kernel on the current device:
// binaryVersion and ptxVersion as major * 10 + minor (the cubin's, or the PTX's
// when the runtime JIT-compiles it).
struct cudaFuncAttributes {
    int binaryVersion, ptxVersion;
};
#ifndef __CUDA_ARCH_LIST__
#error "the emulated build names the architectures it stands for in __CUDA_ARCH_LIST__ (the Makefile's CUDA_ARCHS)"
#endif
// The code for the current device, as major * 10 + minor: false when there is none.
static inline bool emu_device_code(int *binary, int *ptx) {
    static const int archs[] = {__CUDA_ARCH_LIST__};  // 800, 900, ...: compute capability x 100
    const int n = (int)(sizeof(archs) / sizeof(archs[0])), cc = emu_device_cc();
    *binary = *ptx = 0;
    for (int i = 0; i < n; i++)  // a cubin of the same major, no newer minor: the newest such
        if (archs[i] / 100 == cc / 10 && archs[i] / 10 <= cc && archs[i] / 10 > *binary) *binary = *ptx = archs[i] / 10;
    if (!*binary && archs[n - 1] / 10 <= cc) *binary = cc, *ptx = archs[n - 1] / 10;
    return *binary != 0;
}
template <typename Kernel> static inline cudaError_t cudaFuncGetAttributes(cudaFuncAttributes *a, Kernel) {
    memset(a, 0, sizeof(*a));
    return emu_device_code(&a->binaryVersion, &a->ptxVersion) ? cudaSuccess : cudaErrorNoKernelImageForDevice;
}

// ---- NVTX ----
// The profiler's capture range: nothing to capture here.
static inline cudaError_t cudaProfilerStart() { return cudaSuccess; }
static inline cudaError_t cudaProfilerStop() { return cudaSuccess; }
static inline int nvtxRangePushA(const char *) { return 0; }
static inline int nvtxRangePop() { return 0; }

#endif  // LLMC_CUDA_RUNTIME_EMULATOR_H
