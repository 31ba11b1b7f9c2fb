// dev/cuda/gelu.cu: GELU forward and backward (in place), two versions, each
// checked through tests/kernel_cases.h's gelu rows against llmc/cpu_layers.h
// (gelu_forward, gelu_backward_inplace):
//   version 1 = the first kernels (below): one element per thread, scalar
//               2-byte accesses, tanhf;
//   version 2 = llmc/gelu.cuh (what the trainer runs): 8 elements per thread
//               through 16-byte accesses, tanh as a logistic of __expf, an
//               element-by-element path for unaligned pointers.
// Each row (sizes 1, a lone partial group of 8, to 3,000,007, a partial last
// group) also runs on misaligned copies (the element path), which must give
// the aligned run's bits. Then both are timed on a d12 MLP activation
// (16384 x 3072) against the copy bandwidth.
#define KC_MEMORY_BOUND
#include "dev/cuda/dev_common.cuh"
#include "llmc/cpu_layers.h"
#include "llmc/gelu.cuh"

// ---------------------------------------------------------------------------
// version 1: one element per thread (the kernels version 2 replaced)

__device__ __forceinline__ float gelu_v1(float x) {
    return 0.5f * x * (1.0f + tanhf(GELU_K0 * (x + GELU_K1 * x * x * x)));
}

__device__ __forceinline__ float gelu_grad_v1(float x) {
    float th = tanhf(GELU_K0 * (x + GELU_K1 * x * x * x));
    float sech2 = 1.0f - th * th;
    return 0.5f * (1.0f + th) + 0.5f * x * sech2 * GELU_K0 * (1.0f + 3.0f * GELU_K1 * x * x);
}

__global__ void gelu_forward_v1_kernel(floatX *out, const floatX *inp, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = to_floatX(gelu_v1(to_float(inp[i])));
}

__global__ void gelu_backward_inplace_v1_kernel(floatX *dinout, const floatX *inp, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dinout[i] = to_floatX(to_float(dinout[i]) * gelu_grad_v1(to_float(inp[i])));
}

static void v1_gelu_forward(floatX *out, const floatX *inp, int64_t n, cudaStream_t s) {
    launch_kernel(gelu_forward_v1_kernel, ceil_div_int(n, 256), 256, 0, s, out, inp, n);
    CUDA_CHECK_LAUNCH();
}

static void v1_gelu_backward_inplace(floatX *dinout, const floatX *inp, int64_t n, cudaStream_t s) {
    launch_kernel(gelu_backward_inplace_v1_kernel, ceil_div_int(n, 256), 256, 0, s, dinout, inp, n);
    CUDA_CHECK_LAUNCH();
}

// version 1 in the kernel checks' launcher table (tests/kernel_cases.h), beside llmc's
static void use_v1(KernelImpls *v) {
    v->gelu_forward = v1_gelu_forward;
    v->gelu_backward_inplace = v1_gelu_backward_inplace;
}
static const KernelImpls V1_KERNELS = kernel_impls_with("v1 scalar", use_v1);
static const KernelImpls *const versions[] = {&V1_KERNELS, &LLMC_KERNELS};

int main(void) {
    dev_require_gpu("dev_gelu");
    kernel_cases_run_versions("gelu", versions, 2);
    if (!dev_benchmarks("dev_gelu")) return test_exit_code();

    Bench b;
    bench_init(&b);
    size_t n = (size_t)16 * 1024 * 3072;
    floatX *x = (floatX *)cudaMallocCheck(n * 2), *y = (floatX *)cudaMallocCheck(n * 2);
    launch_kernel(fill_hash_floatX_kernel, ceil_div_int(n, 256), 256, 0, 0, x, (int64_t)n, 9);
    launch_kernel(fill_hash_floatX_kernel, ceil_div_int(n, 256), 256, 0, 0, y, (int64_t)n, 10);
    CUDA_CHECK_LAUNCH();
    char name[96];
    for (const KernelImpls *v : versions) {
        double ms = bench_ms(&b, 20, [&] { v->gelu_forward(y, x, (int64_t)n, 0); });
        snprintf(name, sizeof(name), "%s gelu forward 16384x3072", v->name);
        bench_report(&b, name, ms, 2.0 * n * 2, 0);
    }
    for (const KernelImpls *v : versions) {
        // the gradient is rescaled in place each run: the values drift, the work does not
        double ms = bench_ms(&b, 20, [&] { v->gelu_backward_inplace(y, x, (int64_t)n, 0); });
        snprintf(name, sizeof(name), "%s gelu backward 16384x3072", v->name);
        bench_report(&b, name, ms, 3.0 * n * 2, 0);
    }
    CUDA_CHECK(cudaFree(x)); CUDA_CHECK(cudaFree(y));
    bench_free(&b);
    return test_exit_code();
}
