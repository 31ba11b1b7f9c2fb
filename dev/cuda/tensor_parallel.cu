// dev/cuda/tensor_parallel.cu: the kernels tensor parallelism adds to the GPU
// trainer (llmc/tensor_parallel.cuh), for a tensor group of tp = 2 and 4
// ranks simulated on the one device, checked through tests/kernel_cases.h's
// tensor_parallel rows (the table says how: each rank's kernels on its own
// buffers and slice, the group's collectives done by device copies and fp32
// sums): the vocabulary-parallel cross-entropy against the whole row's, the
// bias add, the vocabulary-parallel embedding and sequence parallel's wpe
// gradient. (On the emulator it checks nothing: test_kernels_emulated runs
// the rows.)
// Then (on a GPU) one rank's three cross-entropy passes on its slice of d12's
// (16384, 50304) logits at tp 2 and 4 (the collectives left out), and the
// bias add at d12's (16384, 768), timed against the copy bandwidth.
#define KC_TENSOR_PARALLEL
#include "dev/cuda/dev_common.cuh"

int main(void) {
    dev_require_gpu("dev_tensor_parallel");
    const KernelImpls *versions[] = {&LLMC_KERNELS};
    kernel_cases_run_versions("tensor_parallel", versions, 1);
    if (!dev_benchmarks("dev_tensor_parallel")) return test_exit_code();

    Bench b;
    bench_init(&b);
    const int N = 16 * 1024, V = 50257, Vp = pad_vocab(V), C = 768;
    int *y = (int *)cudaMallocCheck(sizeof(int) * N);
    CUDA_CHECK(cudaMemset(y, 0, sizeof(int) * N));
    char name[96];
    for (int tp = 2; tp <= 4; tp *= 2) {
        int Vl = Vp / tp, r = tp - 1, v0, vreal;  // the last rank: its slice partly padding
        kc_vocab_slice(V, tp, r, &v0, &vreal);
        size_t n = (size_t)N * Vl;
        floatX *l = (floatX *)cudaMallocCheck(n * sizeof(floatX));
        float *mx = (float *)cudaMallocCheck(sizeof(float) * (size_t)tp * N);
        float *stats = (float *)cudaMallocCheck(sizeof(float) * 2 * N);
        float *gmax = (float *)cudaMallocCheck(sizeof(float) * N);
        float *loss = (float *)cudaMallocCheck(sizeof(float) * N);
        CUDA_CHECK(cudaMemset(mx, 0, sizeof(float) * (size_t)tp * N));  // (the other ranks' maxima)
        // the logits are rewritten with dlogits each run: the input changes, the work does not
        launch_kernel(fill_hash_floatX_kernel, ceil_div_int((int64_t)n, 256), 256, 0, 0, l, (int64_t)n, 17);
        CUDA_CHECK_LAUNCH();
        double ms = bench_ms(&b, 10, [&] {
            LLMC_KERNELS.tp_vocab_max(mx + (size_t)r * N, l, N, Vl, vreal, 0);
            LLMC_KERNELS.tp_vocab_sums(stats, gmax, mx, tp, l, y, N, Vl, vreal, v0, 0);
            LLMC_KERNELS.tp_vocab_finish(l, loss, stats, gmax, y, N, Vl, vreal, v0, 1.0f / N, 0);
        });
        snprintf(name, sizeof(name), "tp %d vocab-parallel CE 16384x%d", tp, Vl);
        bench_report(&b, name, ms, 4.0 * n * sizeof(floatX), 0);  // the slice read 3 times, written once
        CUDA_CHECK(cudaFree(l)); CUDA_CHECK(cudaFree(mx)); CUDA_CHECK(cudaFree(stats));
        CUDA_CHECK(cudaFree(gmax)); CUDA_CHECK(cudaFree(loss));
    }
    size_t n = (size_t)N * C;
    float *in = (float *)cudaMallocCheck(sizeof(float) * n);
    floatX *bias = (floatX *)cudaMallocCheck(sizeof(floatX) * C), *out = (floatX *)cudaMallocCheck(sizeof(floatX) * n);
    // random fp32 in: pairs of random bf16 read as fp32 (finite)
    launch_kernel(fill_hash_floatX_kernel, ceil_div_int((int64_t)n * 2, 256), 256, 0, 0, (floatX *)in, (int64_t)n * 2, 18);
    launch_kernel(fill_hash_floatX_kernel, ceil_div_int(C, 256), 256, 0, 0, bias, (int64_t)C, 19);
    CUDA_CHECK_LAUNCH();
    double ms = bench_ms(&b, 20, [&] { gpu_tp_bias_floatX(out, in, bias, N, C, 0); });
    bench_report(&b, "gpu_tp_bias_floatX 16384x768", ms, (double)n * (sizeof(float) + sizeof(floatX)), 0);
    CUDA_CHECK(cudaFree(in)); CUDA_CHECK(cudaFree(bias)); CUDA_CHECK(cudaFree(out)); CUDA_CHECK(cudaFree(y));
    bench_free(&b);
    return test_exit_code();
}
