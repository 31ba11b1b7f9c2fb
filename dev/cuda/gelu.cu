// dev/cuda/gelu.cu: GELU forward and backward (in place), two versions, each
// checked against llmc/cpu_layers.h (gelu_forward, gelu_backward_inplace):
//   version 1 = the first kernels (below): one element per thread, scalar
//               2-byte accesses, tanhf;
//   version 2 = llmc/gelu.cuh (what the trainer runs): 8 elements per thread
//               through 16-byte accesses, tanh as a logistic of __expf, an
//               element-by-element path for unaligned pointers.
// Sizes 1 (a lone partial group of 8), 1000, 3,000,007 (a partial last
// group); version 2 also on misaligned copies (its element path), which must
// give the aligned run's bits. Then both are timed on a d12 MLP activation
// (16384 x 3072) against the copy bandwidth.
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

typedef struct {
    const char *name;
    void (*forward)(floatX *, const floatX *, int64_t, cudaStream_t);
    void (*backward)(floatX *, const floatX *, int64_t, cudaStream_t);
} Version;
static const Version versions[] = {
    {"v1 scalar", v1_gelu_forward, v1_gelu_backward_inplace},
    {"v2 llmc", gpu_gelu_forward, gpu_gelu_backward_inplace},
};

// ---------------------------------------------------------------------------
// checks

// One run of v on device copies of x and d (misaligned: one element past a
// 16-byte boundary); host copies of the forward output and the backward result.
static void run_version(const Version *v, const floatX *d_x, const floatX *d_d, size_t n, int misaligned, float **fwd,
                        float **bwd) {
    floatX *x = device_copy(d_x, n, misaligned), *d = device_copy(d_d, n, misaligned);
    floatX *out = device_buffer<floatX>(n, misaligned);
    v->forward(out, x, (int64_t)n, 0);
    *fwd = host_from_floatX(out, n);
    v->backward(d, x, (int64_t)n, 0);
    *bwd = host_from_floatX(d, n);
    device_buffer_free(x, misaligned);
    device_buffer_free(d, misaligned);
    device_buffer_free(out, misaligned);
}

static void check_size(Rng *rng, size_t n) {
    char what[128];
    float *x = host_random(rng, n, 6.0f), *d = host_random(rng, n, 1.0f), *ref = (float *)mallocCheck(n * 4);
    gelu_forward(ref, x, n);
    floatX *d_x = device_floatX_from(x, n), *d_d = device_floatX_from(d, n);
    gelu_backward_inplace(d, x, n);  // d becomes the backward's reference
    float *fwd[3], *bwd[3];
    for (int r = 0; r < 3; r++) {  // v1, v2, v2 misaligned
        const Version *v = &versions[r == 0 ? 0 : 1];
        const char *name = r == 2 ? "v2 llmc (misaligned: element path)" : v->name;
        run_version(v, d_x, d_d, n, r == 2, &fwd[r], &bwd[r]);
        snprintf(what, sizeof(what), "%s gelu forward n=%zu", name, n);
        check_close(what, fwd[r], ref, n, 1e-5, 8e-3);
        snprintf(what, sizeof(what), "%s gelu backward n=%zu", name, n);
        check_close(what, bwd[r], d, n, 1e-5, 8e-3);
    }
    test_result(bits_equal(fwd[1], fwd[2], n * 4) && bits_equal(bwd[1], bwd[2], n * 4),
                "v2 gelu n=%zu: element path gives the vector path's bits (forward, backward)", n);
    for (int r = 0; r < 3; r++) { free(fwd[r]); free(bwd[r]); }
    CUDA_CHECK(cudaFree(d_x)); CUDA_CHECK(cudaFree(d_d));
    free(x); free(d); free(ref);
}

int main(void) {
    dev_require_gpu("dev_gelu");
    Rng rng;
    rng_seed(&rng, 4);
    const size_t sizes[] = {1, 1000, DEV_EMULATED ? 20 * 1000 + 7 : 3 * 1000 * 1000 + 7};
    for (size_t n : sizes) check_size(&rng, n);
    if (!dev_benchmarks("dev_gelu")) return test_exit_code();

    Bench b;
    bench_init(&b);
    size_t n = (size_t)16 * 1024 * 3072;
    floatX *x = (floatX *)cudaMallocCheck(n * 2), *y = (floatX *)cudaMallocCheck(n * 2);
    launch_kernel(fill_hash_floatX_kernel, ceil_div_int(n, 256), 256, 0, 0, x, (int64_t)n, 9);
    launch_kernel(fill_hash_floatX_kernel, ceil_div_int(n, 256), 256, 0, 0, y, (int64_t)n, 10);
    CUDA_CHECK_LAUNCH();
    char name[96];
    for (const Version &v : versions) {
        double ms = bench_ms(&b, 20, [&] { v.forward(y, x, (int64_t)n, 0); });
        snprintf(name, sizeof(name), "%s gelu forward 16384x3072", v.name);
        bench_report(&b, name, ms, 2.0 * n * 2, 0);
    }
    for (const Version &v : versions) {
        // the gradient is rescaled in place each run: the values drift, the work does not
        double ms = bench_ms(&b, 20, [&] { v.backward(y, x, (int64_t)n, 0); });
        snprintf(name, sizeof(name), "%s gelu backward 16384x3072", v.name);
        bench_report(&b, name, ms, 3.0 * n * 2, 0);
    }
    CUDA_CHECK(cudaFree(x)); CUDA_CHECK(cudaFree(y));
    bench_free(&b);
    return test_exit_code();
}
