// dev/cuda/classifier.cu: the fused softmax + cross-entropy + backward, two
// versions, each checked through tests/kernel_cases.h's classifier rows
// against llmc/cpu_layers.h (softmax_crossentropy):
// losses, dlogits in place, padded columns zeroed, the eval mode leaving the
// logits alone:
//   version 1 = the first kernel (below): one block per row, scalar 2-byte
//               loads, the row read three times (max, sum, write), expf;
//   version 2 = llmc/classifier.cuh (what the trainer runs): the row read
//               once into registers as 16-byte vectors, exp2 on the special-
//               function unit; an element-by-element path for Vp % 8 != 0 or
//               unaligned logits; rows past 65536 re-read from memory.
// Shapes: padded widths (vector path, 1 and 7 vectors per thread), Vp = V + 3
// (element path), V = 70000 (re-read path); each also on a misaligned copy
// (element path), which must give the aligned run's bits. Then both are
// timed on d12's (16384, 50304) logits.
#define KC_MEMORY_BOUND
#include "dev/cuda/dev_common.cuh"
#include "llmc/classifier.cuh"
#include "llmc/cpu_layers.h"
#include "llmc/model.h"

// ---------------------------------------------------------------------------
// version 1: one block per row, scalar loads (the kernel version 2 replaced)

__global__ void __launch_bounds__(CLASSIFIER_THREADS)
    fused_classifier_v1_kernel(floatX *logits, float *losses, const int *targets, int V, int Vp, float dloss,
                               int write_dlogits) {
    __shared__ float scratch[32];
    int64_t row = blockIdx.x;
    floatX *x = logits + row * Vp;
    float mx = -INFINITY;
    for (int v = threadIdx.x; v < V; v += blockDim.x) mx = fmaxf(mx, to_float(x[v]));
    mx = block_max(mx, scratch);
    float sum = 0.0f;
    for (int v = threadIdx.x; v < V; v += blockDim.x) sum += expf(to_float(x[v]) - mx);
    sum = block_sum(sum, scratch);
    float lse = mx + logf(sum);
    int y = targets[row];
    float xy = to_float(x[y]);
    __syncthreads();  // every thread has read x[y] before the row is overwritten
    if (threadIdx.x == 0) losses[row] = lse - xy;
    if (!write_dlogits) return;
    for (int v = threadIdx.x; v < Vp; v += blockDim.x) {
        float d = 0.0f;
        if (v < V) d = (expf(to_float(x[v]) - lse) - (v == y ? 1.0f : 0.0f)) * dloss;
        x[v] = to_floatX(d);
    }
}

static void v1_fused_classifier(floatX *logits, float *losses, const int *targets, int N, int V, int Vp, float dloss,
                                cudaStream_t s) {
    launch_kernel(fused_classifier_v1_kernel, N, CLASSIFIER_THREADS, 0, s, logits, losses, targets, V, Vp, dloss,
                  dloss != 0.0f);
    CUDA_CHECK_LAUNCH();
}

// version 1 in the kernel checks' launcher table (tests/kernel_cases.h), beside llmc's
static void use_v1(KernelImpls *v) {
    v->fused_classifier = v1_fused_classifier;
}
static const KernelImpls V1_KERNELS = kernel_impls_with("v1 scalar", use_v1);
static const KernelImpls *const versions[] = {&V1_KERNELS, &LLMC_KERNELS};

int main(void) {
    dev_require_gpu("dev_classifier");
    kernel_cases_run_versions("classifier", versions, 2);
    if (!dev_benchmarks("dev_classifier")) return test_exit_code();

    Bench b;
    bench_init(&b);
    int N = 16 * 1024, V = 50257, Vp = pad_vocab(V);
    size_t n = (size_t)N * Vp;
    floatX *l = (floatX *)cudaMallocCheck(n * 2);
    float *loss = (float *)cudaMallocCheck(N * 4);
    int *y = (int *)cudaMallocCheck(N * 4);
    CUDA_CHECK(cudaMemset(y, 0, N * 4));
    char name[96];
    for (const KernelImpls *v : versions) {
        // the logits are rewritten with dlogits each run: the input changes, the work does not
        launch_kernel(fill_hash_floatX_kernel, ceil_div_int(n, 256), 256, 0, 0, l, (int64_t)n, 13);
        CUDA_CHECK_LAUNCH();
        double ms = bench_ms(&b, 10, [&] { v->fused_classifier(l, loss, y, N, V, Vp, 1.0f / N, 0); });
        snprintf(name, sizeof(name), "%s fused classifier 16384x50304", v->name);
        bench_report(&b, name, ms, 2.0 * n * 2, 0);
    }
    CUDA_CHECK(cudaFree(l)); CUDA_CHECK(cudaFree(loss)); CUDA_CHECK(cudaFree(y));
    bench_free(&b);
    return test_exit_code();
}
