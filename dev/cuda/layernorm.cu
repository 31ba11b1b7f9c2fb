// dev/cuda/layernorm.cu: LayerNorm, two versions, each checked through
// tests/kernel_cases.h's layernorm rows against llmc/cpu_layers.h
// (layernorm_forward, layernorm_backward): the plain forward, the fused
// residual add + LayerNorm, and the backward (input gradient accumulated in
// fp32, parameter gradients):
//   version 1 = the first kernels (below): one warp per row, scalar 2-byte
//               loads, the row re-read from memory for the mean, the variance
//               and the normalise (and the fused residual re-read after its
//               write), the backward rows reading dout and inp twice;
//   version 2 = llmc/layernorm.cuh (what the trainer runs): 16-byte vectors,
//               the row held in registers from its one read (C <= 2048), an
//               element-by-element path for C % 8 != 0 or unaligned pointers.
// The rows: C a multiple of 8 (vector path; C = 2304 > 2048 re-reads the row),
// C = 100 and 2052 (element path), N not a multiple of the rows per block or
// of the 128-row chunks of the parameter gradients. Each is also run on
// misaligned copies of every buffer (its element path) and must give the bits
// of the aligned run; the fused forward followed by a plain forward of its
// residual must give the same out, mean and rstd bits (the --recompute full
// guarantee); two backward runs must agree bit for bit. Then both versions are
// timed at d12 (16384 x 768) and d48 (16384 x 1600) width.
#define KC_MEMORY_BOUND
#include "dev/cuda/dev_common.cuh"
#include "llmc/cpu_layers.h"
#include "llmc/layernorm.cuh"

// ---------------------------------------------------------------------------
// version 1: one warp per row, scalar loads (the kernels version 2 replaced)

#define V1_WARPS 8

__device__ __forceinline__ void ln_row_v1(floatX *out, float *mean_out, float *rstd_out, const floatX *x, const floatX *w,
                                          const floatX *b, int C) {
    int lane = threadIdx.x % 32;
    float sum = 0.0f;
    for (int c = lane; c < C; c += 32) sum += to_float(x[c]);
    float m = warp_sum(sum) / C;
    float var = 0.0f;
    for (int c = lane; c < C; c += 32) {
        float d = to_float(x[c]) - m;
        var += d * d;
    }
    float s = rsqrtf(warp_sum(var) / C + LN_EPS);
    for (int c = lane; c < C; c += 32) {
        float n = (to_float(x[c]) - m) * s;
        out[c] = to_floatX(n * to_float(w[c]) + to_float(b[c]));
    }
    if (lane == 0) { *mean_out = m; *rstd_out = s; }
}

__global__ void layernorm_forward_v1_kernel(floatX *out, float *mean, float *rstd, const floatX *inp, const floatX *w,
                                            const floatX *b, int N, int C) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= N) return;
    int64_t off = (int64_t)row * C;
    ln_row_v1(out + off, mean + row, rstd + row, inp + off, w, b, C);
}

__global__ void fused_residual_layernorm_v1_kernel(floatX *residual_out, floatX *out, float *mean, float *rstd,
                                                   const floatX *res_in, const floatX *x, const floatX *w, const floatX *b,
                                                   int N, int C) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= N) return;
    int64_t off = (int64_t)row * C;
    for (int c = threadIdx.x % 32; c < C; c += 32)
        residual_out[off + c] = to_floatX(to_float(res_in[off + c]) + to_float(x[off + c]));
    __syncwarp();
    ln_row_v1(out + off, mean + row, rstd + row, residual_out + off, w, b, C);
}

__global__ void layernorm_backward_rows_v1_kernel(float *dinp, floatX *dinp_compute, const floatX *dout, const floatX *inp,
                                                  const floatX *w, const float *mean, const float *rstd, int N, int C) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= N) return;
    int lane = threadIdx.x % 32;
    int64_t off = (int64_t)row * C;
    float m = mean[row], s = rstd[row];
    float dmean = 0.0f, dnorm_mean = 0.0f;
    for (int c = lane; c < C; c += 32) {
        float norm = (to_float(inp[off + c]) - m) * s;
        float dnorm = to_float(w[c]) * to_float(dout[off + c]);
        dmean += dnorm;
        dnorm_mean += dnorm * norm;
    }
    dmean = warp_sum(dmean) / C;
    dnorm_mean = warp_sum(dnorm_mean) / C;
    for (int c = lane; c < C; c += 32) {
        float norm = (to_float(inp[off + c]) - m) * s;
        float dnorm = to_float(w[c]) * to_float(dout[off + c]);
        float d = dinp[off + c] + (dnorm - dmean - norm * dnorm_mean) * s;
        dinp[off + c] = d;
        dinp_compute[off + c] = to_floatX(d);
    }
}

static void v1_layernorm_forward(floatX *out, float *mean, float *rstd, const floatX *inp, const floatX *w, const floatX *b,
                                 int N, int C, cudaStream_t s) {
    launch_kernel(layernorm_forward_v1_kernel, ceil_div_int(N, V1_WARPS), V1_WARPS * 32, 0, s, out, mean, rstd, inp,
                  w, b, N, C);
    CUDA_CHECK_LAUNCH();
}

static void v1_fused_residual_layernorm(floatX *residual_out, floatX *out, float *mean, float *rstd, const floatX *res_in,
                                        const floatX *x, const floatX *w, const floatX *b, int N, int C, cudaStream_t s) {
    launch_kernel(fused_residual_layernorm_v1_kernel, ceil_div_int(N, V1_WARPS), V1_WARPS * 32, 0, s, residual_out,
                  out, mean, rstd, res_in, x, w, b, N, C);
    CUDA_CHECK_LAUNCH();
}

// the rows kernel above, then llmc's scalar parameter-gradient kernels (unchanged from version 1)
static void v1_layernorm_backward(float *dinp, floatX *dinp_compute, float *dw, float *db, float *scratch, const floatX *dout,
                                  const floatX *inp, const floatX *w, const float *mean, const float *rstd, int N, int C,
                                  cudaStream_t s) {
    launch_kernel(layernorm_backward_rows_v1_kernel, ceil_div_int(N, V1_WARPS), V1_WARPS * 32, 0, s, dinp, dinp_compute,
                  dout, inp, w, mean, rstd, N, C);
    CUDA_CHECK_LAUNCH();
    int R = ceil_div_int(N, LN_ROWS_PER_CHUNK);
    launch_kernel(layernorm_backward_params_kernel, dim3(ceil_div_int(C, 32), R), dim3(32, 8), 0, s, scratch, dout,
                  inp, mean, rstd, N, C);
    CUDA_CHECK_LAUNCH();
    launch_kernel(layernorm_backward_finish_kernel, ceil_div_int(C, 256), 256, 0, s, dw, db, scratch, R, C);
    CUDA_CHECK_LAUNCH();
}

// version 1 in the kernel checks' launcher table (tests/kernel_cases.h), beside llmc's
static void use_v1(KernelImpls *v) {
    v->layernorm_forward = v1_layernorm_forward;
    v->fused_residual_layernorm = v1_fused_residual_layernorm;
    v->layernorm_backward = v1_layernorm_backward;
}
static const KernelImpls V1_KERNELS = kernel_impls_with("v1 scalar", use_v1);
static const KernelImpls *const versions[] = {&V1_KERNELS, &LLMC_KERNELS};

// Times both versions at N x C (random bf16 inputs).
static void bench_shape(Bench *b, int N, int C) {
    size_t nc = (size_t)N * C;
    floatX *x = (floatX *)cudaMallocCheck(nc * 2), *r = (floatX *)cudaMallocCheck(nc * 2), *out = (floatX *)cudaMallocCheck(nc * 2);
    floatX *res = (floatX *)cudaMallocCheck(nc * 2), *w = (floatX *)cudaMallocCheck(C * 2), *bb = (floatX *)cudaMallocCheck(C * 2);
    float *mean = (float *)cudaMallocCheck(N * 4), *rstd = (float *)cudaMallocCheck(N * 4);
    float *dinp = (float *)cudaMallocCheck(nc * 4), *dw = (float *)cudaMallocCheck(C * 4), *db = (float *)cudaMallocCheck(C * 4);
    float *scratch = (float *)cudaMallocCheck(layernorm_scratch_floats(N, C) * 4);
    launch_kernel(fill_hash_floatX_kernel, ceil_div_int(nc, 256), 256, 0, 0, x, (int64_t)nc, 5);
    launch_kernel(fill_hash_floatX_kernel, ceil_div_int(nc, 256), 256, 0, 0, r, (int64_t)nc, 6);
    launch_kernel(fill_hash_floatX_kernel, ceil_div_int(C, 256), 256, 0, 0, w, C, 7);
    launch_kernel(fill_hash_floatX_kernel, ceil_div_int(C, 256), 256, 0, 0, bb, C, 8);
    CUDA_CHECK_LAUNCH();
    CUDA_CHECK(cudaMemset(dinp, 0, nc * 4));
    CUDA_CHECK(cudaMemset(dw, 0, C * 4));
    CUDA_CHECK(cudaMemset(db, 0, C * 4));
    gpu_layernorm_forward(out, mean, rstd, x, w, bb, N, C, 0);  // real statistics for the backward
    char name[96];
    for (const KernelImpls *v : versions) {
        double ms = bench_ms(b, 20, [&] { v->layernorm_forward(out, mean, rstd, x, w, bb, N, C, 0); });
        snprintf(name, sizeof(name), "%s layernorm forward %dx%d", v->name, N, C);
        bench_report(b, name, ms, 2.0 * nc * 2, 0);
    }
    for (const KernelImpls *v : versions) {
        double ms = bench_ms(b, 20, [&] { v->fused_residual_layernorm(res, out, mean, rstd, r, x, w, bb, N, C, 0); });
        snprintf(name, sizeof(name), "%s fused residual+layernorm %dx%d", v->name, N, C);
        bench_report(b, name, ms, 4.0 * nc * 2, 0);
    }
    for (const KernelImpls *v : versions) {
        double ms = bench_ms(b, 20, [&] { v->layernorm_backward(dinp, res, dw, db, scratch, r, x, w, mean, rstd, N, C, 0); });
        snprintf(name, sizeof(name), "%s layernorm backward %dx%d", v->name, N, C);
        // the fewest bytes: reads dout, inp (bf16), dinp (fp32); writes dinp (fp32) and its bf16 copy
        // (both versions also re-read dout and inp for the parameter gradients: at most 14/18 of copy)
        bench_report(b, name, ms, nc * (2.0 + 2.0 + 4.0 + 4.0 + 2.0), 0);
    }
    void *dev[] = {x, r, out, res, w, bb, mean, rstd, dinp, dw, db, scratch};
    for (size_t i = 0; i < sizeof(dev) / sizeof(dev[0]); i++) CUDA_CHECK(cudaFree(dev[i]));
}

int main(void) {
    dev_require_gpu("dev_layernorm");
    kernel_cases_run_versions("layernorm", versions, 2);
    if (!dev_benchmarks("dev_layernorm")) return test_exit_code();

    Bench b;
    bench_init(&b);
    bench_shape(&b, 16 * 1024, 768);
    bench_shape(&b, 16 * 1024, 1600);
    bench_free(&b);
    return test_exit_code();
}
