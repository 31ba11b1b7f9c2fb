// dev_common.cuh: the harness of the dev/cuda kernel checkers. Their checks
// are the rows of tests/kernel_cases.h (included here; a checker defines the
// KC_ family macro it needs first), which a checker runs for each of its
// versions (kernel_cases_run_versions). And timing: the median of
// CUDA-event-timed runs with the L2 flushed before each, reported against the
// chip's measured ceilings (a device-to-device copy and a cuBLASLt floatX
// matmul, measured in the same run).
#ifndef DEV_CUDA_DEV_COMMON_CUH
#define DEV_CUDA_DEV_COMMON_CUH

#include <algorithm>
#include <vector>

#include "llmc/cuda_common.cuh"
#include "llmc/matmul.cuh"
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
// tests/run_tests.sh), a checker validates at the table's emulated shapes
// (KC_SIZE) and skips its benchmarks: 0 then, after one SKIP line.
static inline int dev_benchmarks(const char *name) {
    if (KC_EMULATED) test_skip("%s benchmarks (they need a GPU)", name);
    return !KC_EMULATED;
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
