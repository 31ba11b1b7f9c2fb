// dev_common.cuh: the harness of the dev/cuda kernel checkers. The memory-bound
// kernels' checks are the rows of tests/kernel_cases.h (included here), which a
// checker runs for each of its versions (kernel_cases_run_versions). For the
// checks still written in their checker (attention, matmul, tensor_parallel):
// random inputs (rounded to floatX on the host, so the CPU reference in
// llmc/cpu_layers.h sees exactly what the GPU sees), poisoned outputs (NaN
// bits, so an unwritten element fails), abs+rel comparison printing PASS/FAIL
// (tests/testing.h), copies at a misaligned address (device_buffer,
// device_copy) and bits_equal. And timing: the median of CUDA-event-timed runs
// with the L2 flushed before each, reported against the chip's measured
// ceilings (a device-to-device copy and a cuBLASLt floatX matmul, measured in
// the same run).
#ifndef DEV_CUDA_DEV_COMMON_CUH
#define DEV_CUDA_DEV_COMMON_CUH

#include <algorithm>
#include <vector>

#include "llmc/cuda_common.cuh"
#include "llmc/matmul.cuh"
#include "llmc/rand.h"
#include "tests/kernel_cases.h"
#include "tests/testing.h"

// Exits 0 with a SKIP line when no GPU is present (the emulator has one).
static inline void dev_require_gpu(const char *name) {
    if (!cuda_device_present()) {
        test_skip("%s (no CUDA device)", name);
        exit(0);
    }
}

// Compiled for tests/cuda_emulator.h (build/emu/dev_<family>, run by
// tests/run_tests.sh), a checker validates at the small shapes it lists under
// DEV_EMULATED and skips its benchmarks: 0 then, after one SKIP line.
#define DEV_EMULATED KC_EMULATED
static inline int dev_benchmarks(const char *name) {
    if (DEV_EMULATED) test_skip("%s benchmarks (they need a GPU)", name);
    return !DEV_EMULATED;
}

// n host floats, uniform in [-scale, scale), rounded to bf16 values.
static inline float *host_random(Rng *rng, size_t n, float scale) {
    float *h = (float *)mallocCheck(n * sizeof(float));
    for (size_t i = 0; i < n; i++) h[i] = floatX_round((2.0f * rng_uniform(rng) - 1.0f) * scale);
    return h;
}

static inline floatX *device_floatX_from(const float *h, size_t n) {
    std::vector<floatX> tmp(n);
    for (size_t i = 0; i < n; i++) tmp[i] = to_floatX(h[i]);
    floatX *d = (floatX *)cudaMallocCheck(n * sizeof(floatX));
    CUDA_CHECK(cudaMemcpy(d, tmp.data(), n * sizeof(floatX), cudaMemcpyHostToDevice));
    return d;
}

static inline float *device_f32_from(const float *h, size_t n) {
    float *d = (float *)cudaMallocCheck(n * sizeof(float));
    CUDA_CHECK(cudaMemcpy(d, h, n * sizeof(float), cudaMemcpyHostToDevice));
    return d;
}

static inline float *host_from_floatX(const floatX *d, size_t n) {
    std::vector<floatX> tmp(n);
    CUDA_CHECK(cudaDeviceSynchronize());
    CUDA_CHECK(cudaMemcpy(tmp.data(), d, n * sizeof(floatX), cudaMemcpyDeviceToHost));
    float *h = (float *)mallocCheck(n * sizeof(float));
    for (size_t i = 0; i < n; i++) h[i] = to_float(tmp[i]);
    return h;
}

static inline float *host_from_f32(const float *d, size_t n) {
    float *h = (float *)mallocCheck(n * sizeof(float));
    CUDA_CHECK(cudaDeviceSynchronize());
    CUDA_CHECK(cudaMemcpy(h, d, n * sizeof(float), cudaMemcpyDeviceToHost));
    return h;
}

// 1 if the two host arrays hold the same bytes.
static inline int bits_equal(const void *a, const void *b, size_t bytes) { return memcmp(a, b, bytes) == 0; }

// Fills a device buffer with NaN bits (0xFF bytes: NaN in fp32 and bf16).
static inline void poison(void *d, size_t bytes) { CUDA_CHECK(cudaMemset(d, 0xff, bytes)); }

// A new device buffer of n elements, poisoned, starting at a 256-byte boundary
// or (misaligned) one element past it, so that a kernel given it must take its
// unaligned (element-by-element) path; and a copy of the device buffer d in
// such a buffer. Free either with device_buffer_free(p, misaligned).
template <typename T>
static T *device_buffer(size_t n, int misaligned) {
    char *base = (char *)cudaMallocCheck((n + 16) * sizeof(T));
    poison(base, (n + 16) * sizeof(T));
    return (T *)base + (misaligned ? 1 : 0);
}
template <typename T>
static T *device_copy(const T *d, size_t n, int misaligned) {
    T *p = device_buffer<T>(n, misaligned);
    if (n > 0) CUDA_CHECK(cudaMemcpy(p, d, n * sizeof(T), cudaMemcpyDeviceToDevice));
    return p;
}
template <typename T>
static void device_buffer_free(T *p, int misaligned) { CUDA_CHECK(cudaFree(p - (misaligned ? 1 : 0))); }

// Host floats into a new device buffer as floatX, aligned or (misaligned)
// one element past a 256-byte boundary, as device_buffer.
static inline floatX *upload_floatX(const float *h, size_t n, int misaligned) {
    floatX *tmp = device_floatX_from(h, n), *p = device_copy(tmp, n, misaligned);
    CUDA_CHECK(cudaFree(tmp));
    return p;
}

// PASS when every |got - ref| <= atol + rtol * |ref| (NaN never passes).
static inline int check_close(const char *what, const float *got, const float *ref, size_t n, double atol,
                              double rtol) {
    size_t bad = 0, worst = 0;
    double worst_excess = -1.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - (double)ref[i]), lim = atol + rtol * fabs((double)ref[i]);
        if (!(d <= lim)) bad++;
        double excess = d != d ? INFINITY : d - lim;
        if (excess > worst_excess) { worst_excess = excess; worst = i; }
    }
    if (bad == 0) test_result(1, "%s (%zu values, atol %.1e rtol %.1e)", what, n, atol, rtol);
    else
        test_result(0, "%s (%zu of %zu values off; worst [%zu] got %.6g want %.6g)", what, bad, n, worst,
                    (double)got[worst], (double)ref[worst]);
    return bad == 0;
}

// ---------------------------------------------------------------------------
// timing

typedef struct {
    char *flush;        // a buffer twice the L2, written before each timed run
    size_t flush_bytes;
    cudaEvent_t e0, e1;
    double copy_gbps;   // measured device copy bandwidth (bytes read + written)
    double peak_tflops; // measured cuBLASLt bf16 matmul rate
} Bench;

// Measures the chip's two ceilings and prepares the L2 flush.
static inline void bench_init(Bench *b) {
    int dev = 0, l2 = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev));
    b->flush_bytes = 2 * (size_t)l2;
    b->flush = (char *)cudaMallocCheck(b->flush_bytes);
    CUDA_CHECK(cudaEventCreate(&b->e0));
    CUDA_CHECK(cudaEventCreate(&b->e1));
    size_t bytes = (size_t)1 << 30;
    char *src = (char *)cudaMallocCheck(bytes), *dst = (char *)cudaMallocCheck(bytes);
    CUDA_CHECK(cudaMemset(src, 1, bytes));
    std::vector<float> ms;
    for (int r = 0; r < 12; r++) {
        CUDA_CHECK(cudaEventRecord(b->e0));
        CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice));
        CUDA_CHECK(cudaEventRecord(b->e1));
        CUDA_CHECK(cudaEventSynchronize(b->e1));
        float t;
        CUDA_CHECK(cudaEventElapsedTime(&t, b->e0, b->e1));
        if (r >= 2) ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    b->copy_gbps = 2.0 * bytes / (ms[ms.size() / 2] * 1e-3) / 1e9;
    CUDA_CHECK(cudaFree(src));
    CUDA_CHECK(cudaFree(dst));
    MatmulContext mc;
    matmul_init(&mc);
    b->peak_tflops = matmul_measure_peak_tflops(&mc, 8192, 10, 0);
    matmul_free(&mc);
    printf("ceilings: device copy %.0f GB/s, cuBLASLt bf16 8192^3 %.1f TFLOP/s (measured now)\n", b->copy_gbps,
           b->peak_tflops);
}

static inline void bench_free(Bench *b) {
    CUDA_CHECK(cudaFree(b->flush));
    CUDA_CHECK(cudaEventDestroy(b->e0));
    CUDA_CHECK(cudaEventDestroy(b->e1));
}

// Median milliseconds of run() over reps runs, the L2 flushed before each.
template <typename F>
static double bench_ms(Bench *b, int reps, F run) {
    run();  // warm-up (plans, module load)
    CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<float> ms;
    for (int r = 0; r < reps; r++) {
        CUDA_CHECK(cudaMemsetAsync(b->flush, r & 0xff, b->flush_bytes));
        CUDA_CHECK(cudaEventRecord(b->e0));
        run();
        CUDA_CHECK(cudaEventRecord(b->e1));
        CUDA_CHECK(cudaEventSynchronize(b->e1));
        float t;
        CUDA_CHECK(cudaEventElapsedTime(&t, b->e0, b->e1));
        ms.push_back(t);
    }
    CUDA_CHECK_LAUNCH();
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
}

// One line per benchmark: time, then bandwidth and/or FLOP rate against the ceilings.
static inline void bench_report(const Bench *b, const char *name, double ms, double bytes, double flops) {
    printf("BENCH %-36s %9.3f ms", name, ms);
    if (bytes > 0) {
        double gbps = bytes / (ms * 1e-3) / 1e9;
        printf(" | %7.0f GB/s (%5.1f%% of copy)", gbps, 100.0 * gbps / b->copy_gbps);
    }
    if (flops > 0) {
        double tf = flops / (ms * 1e-3) / 1e12;
        printf(" | %7.1f TFLOP/s (%5.1f%% of cuBLASLt)", tf, 100.0 * tf / b->peak_tflops);
    }
    printf("\n");
    fflush(stdout);
}

#endif  // DEV_CUDA_DEV_COMMON_CUH
