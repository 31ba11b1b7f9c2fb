// dev/cuda/gelu.cu: checks llmc/gelu.cuh against llmc/cpu_layers.h
// (gelu_forward, gelu_backward_inplace) at several sizes, then times both on
// a d12 MLP activation (16384 x 3072) against the copy bandwidth.
#include "dev/cuda/dev_common.cuh"
#include "llmc/cpu_layers.h"
#include "llmc/gelu.cuh"

static void check_size(Rng *rng, size_t n) {
    char what[96];
    float *x = host_random(rng, n, 6.0f), *d = host_random(rng, n, 1.0f), *ref = (float *)mallocCheck(n * 4);
    gelu_forward(ref, x, n);
    bf16 *d_x = device_bf16_from(x, n), *d_out = (bf16 *)cudaMallocCheck(n * 2), *d_d = device_bf16_from(d, n);
    poison(d_out, n * 2);
    gpu_gelu_forward(d_out, d_x, (int64_t)n, 0);
    float *got = host_from_bf16(d_out, n);
    snprintf(what, sizeof(what), "gelu forward n=%zu", n);
    check_close(what, got, ref, n, 1e-5, 8e-3);
    gelu_backward_inplace(d, x, n);
    gpu_gelu_backward_inplace(d_d, d_x, (int64_t)n, 0);
    float *gd = host_from_bf16(d_d, n);
    snprintf(what, sizeof(what), "gelu backward n=%zu", n);
    check_close(what, gd, d, n, 1e-5, 8e-3);
    CUDA_CHECK(cudaFree(d_x)); CUDA_CHECK(cudaFree(d_out)); CUDA_CHECK(cudaFree(d_d));
    free(x); free(d); free(ref); free(got); free(gd);
}

int main(void) {
    dev_require_gpu("dev_gelu");
    Rng rng;
    rng_seed(&rng, 4);
    check_size(&rng, 1);
    check_size(&rng, 1000);
    check_size(&rng, 3 * 1000 * 1000 + 7);

    Bench b;
    bench_init(&b);
    size_t n = (size_t)16 * 1024 * 3072;
    bf16 *x = (bf16 *)cudaMallocCheck(n * 2), *y = (bf16 *)cudaMallocCheck(n * 2);
    fill_hash_bf16_kernel<<<ceil_div_int(n, 256), 256>>>(x, (int64_t)n, 9);
    fill_hash_bf16_kernel<<<ceil_div_int(n, 256), 256>>>(y, (int64_t)n, 10);
    double ms = bench_ms(&b, 20, [&] { gpu_gelu_forward(y, x, (int64_t)n, 0); });
    bench_report(&b, "gelu forward 16384x3072", ms, 2.0 * n * 2, 0);
    ms = bench_ms(&b, 20, [&] { gpu_gelu_backward_inplace(y, x, (int64_t)n, 0); });
    bench_report(&b, "gelu backward 16384x3072", ms, 3.0 * n * 2, 0);
    bench_free(&b);
    return test_exit_code();
}
