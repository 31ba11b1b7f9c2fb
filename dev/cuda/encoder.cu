// dev/cuda/encoder.cu: token + position embeddings, two versions, each checked
// through tests/kernel_cases.h's encoder rows against llmc/cpu_layers.h
// (encoder_forward, encoder_backward) at several shapes, with repeated tokens,
// and giving each other's bits:
//   version 1 = the first kernels (below): one element per thread, scalar
//               accesses;
//   version 2 = llmc/encoder.cuh (what the trainer runs): 8 floatX per thread
//               forward (16-byte accesses), 4 fp32 per thread backward
//               (float4), element by element when C or the alignment does
//               not allow it. Same summation order as version 1.
// Shapes: C = 64 and 768 (vector paths), C = 100 (forward element path,
// backward float4), C = 30 (both element paths); each also on misaligned
// copies (element paths), which must give the aligned run's bits. Then both
// are timed at GPT-2 d12 size (B=16, T=1024, C=768) against the copy bandwidth.
#define KC_MEMORY_BOUND
#include "dev/cuda/dev_common.cuh"
#include "llmc/cpu_layers.h"
#include "llmc/encoder.cuh"

// ---------------------------------------------------------------------------
// version 1: one element per thread (the kernels version 2 replaced)

__global__ void encoder_forward_v1_kernel(floatX *out, const int *inp, const floatX *wte, const floatX *wpe, int N, int T,
                                          int C) {
    int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (int64_t)N * C) return;
    int n = (int)(idx / C), c = (int)(idx % C);
    int t = n % T;
    float v = to_float(wte[(int64_t)inp[n] * C + c]) + to_float(wpe[(int64_t)t * C + c]);
    out[idx] = to_floatX(v);
}

__global__ void encoder_backward_wte_v1_kernel(float *dwte, const float *dout, const int *tok, const int *start,
                                               const int *pos, int C) {
    int u = blockIdx.x;
    int c = blockIdx.y * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float acc = 0.0f;
    for (int k = start[u]; k < start[u + 1]; k++) acc += dout[(int64_t)pos[k] * C + c];
    dwte[(int64_t)tok[u] * C + c] += acc;
}

__global__ void encoder_backward_wpe_v1_kernel(float *dwpe, const float *dout, int B, int T, int C) {
    int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (int64_t)T * C) return;
    float acc = 0.0f;
    for (int b = 0; b < B; b++) acc += dout[(int64_t)b * T * C + idx];
    dwpe[idx] += acc;
}

static void v1_encoder_forward(floatX *out, const int *inp, const floatX *wte, const floatX *wpe, int B, int T, int C,
                               cudaStream_t s) {
    int64_t n = (int64_t)B * T * C;
    launch_kernel(encoder_forward_v1_kernel, ceil_div_int(n, 256), 256, 0, s, out, inp, wte, wpe, B * T, T, C);
    CUDA_CHECK_LAUNCH();
}

static void v1_encoder_backward(float *dwte, float *dwpe, const float *dout, const EncoderIndex *ix, int B, int T,
                                int C, cudaStream_t s) {
    dim3 grid(ix->num_unique, ceil_div_int(C, 256));
    launch_kernel(encoder_backward_wte_v1_kernel, grid, 256, 0, s, dwte, dout, ix->d_tok, ix->d_start, ix->d_pos, C);
    CUDA_CHECK_LAUNCH();
    launch_kernel(encoder_backward_wpe_v1_kernel, ceil_div_int((int64_t)T * C, 256), 256, 0, s, dwpe, dout, B, T, C);
    CUDA_CHECK_LAUNCH();
}

// version 1 in the kernel checks' launcher table (tests/kernel_cases.h), beside llmc's
static void use_v1(KernelImpls *v) {
    v->encoder_forward = v1_encoder_forward;
    v->encoder_backward = v1_encoder_backward;
}
static const KernelImpls V1_KERNELS = kernel_impls_with("v1 scalar", use_v1);
static const KernelImpls *const versions[] = {&V1_KERNELS, &LLMC_KERNELS};

int main(void) {
    dev_require_gpu("dev_encoder");
    kernel_cases_run_versions("encoder", versions, 2);
    if (!dev_benchmarks("dev_encoder")) return test_exit_code();

    Rng rng;
    rng_seed(&rng, 1);
    Bench b;
    bench_init(&b);
    int B = 16, T = 1024, C = 768, V = 50257, N = B * T;
    int *inp = (int *)mallocCheck(sizeof(int) * (size_t)N);
    for (int i = 0; i < N; i++) inp[i] = (int)rng_below(&rng, (uint64_t)V);
    int *d_inp = (int *)cudaMallocCheck(sizeof(int) * (size_t)N);
    CUDA_CHECK(cudaMemcpy(d_inp, inp, sizeof(int) * (size_t)N, cudaMemcpyHostToDevice));
    floatX *wte = (floatX *)cudaMallocCheck(sizeof(floatX) * (size_t)V * C), *wpe = (floatX *)cudaMallocCheck(sizeof(floatX) * (size_t)T * C);
    floatX *out = (floatX *)cudaMallocCheck(sizeof(floatX) * (size_t)N * C);
    launch_kernel(fill_hash_floatX_kernel, ceil_div_int((int64_t)V * C, 256), 256, 0, 0, wte, (int64_t)V * C, 3);
    launch_kernel(fill_hash_floatX_kernel, ceil_div_int((int64_t)T * C, 256), 256, 0, 0, wpe, (int64_t)T * C, 4);
    CUDA_CHECK_LAUNCH();
    float *dwte = (float *)cudaMallocCheck(sizeof(float) * (size_t)V * C), *dwpe = (float *)cudaMallocCheck(sizeof(float) * (size_t)T * C);
    float *dout = (float *)cudaMallocCheck(sizeof(float) * (size_t)N * C);
    CUDA_CHECK(cudaMemset(dwte, 0, sizeof(float) * (size_t)V * C));
    CUDA_CHECK(cudaMemset(dwpe, 0, sizeof(float) * (size_t)T * C));
    // random dout: pairs of random bf16 read as fp32 (finite, in [-1, 1])
    launch_kernel(fill_hash_floatX_kernel, ceil_div_int((int64_t)N * C * 2, 256), 256, 0, 0, (floatX *)dout,
                  (int64_t)N * C * 2, 14);
    CUDA_CHECK_LAUNCH();
    EncoderIndex ix;
    encoder_index_init(&ix, N, V);
    encoder_index_build(&ix, inp, N, 0, V, 0);
    char name[96];
    for (const KernelImpls *v : versions) {
        double ms = bench_ms(&b, 20, [&] { v->encoder_forward(out, d_inp, wte, wpe, B, T, C, 0); });
        snprintf(name, sizeof(name), "%s encoder forward d12 16x1024", v->name);
        bench_report(&b, name, ms, 3.0 * N * C * 2, 0);
    }
    for (const KernelImpls *v : versions) {
        double ms = bench_ms(&b, 20, [&] { v->encoder_backward(dwte, dwpe, dout, &ix, B, T, C, 0); });
        snprintf(name, sizeof(name), "%s encoder backward d12 16x1024", v->name);
        // dout read twice (wte and wpe passes), touched gradient rows read and written
        bench_report(&b, name, ms, 2.0 * N * C * 4 + 2.0 * ((double)ix.num_unique + T) * C * 4, 0);
    }
    encoder_index_free(&ix);
    void *dev[] = {d_inp, wte, wpe, out, dwte, dwpe, dout};
    for (size_t i = 0; i < sizeof(dev) / sizeof(dev[0]); i++) CUDA_CHECK(cudaFree(dev[i]));
    free(inp);
    bench_free(&b);
    return test_exit_code();
}
