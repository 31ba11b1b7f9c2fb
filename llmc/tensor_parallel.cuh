// tensor_parallel.cuh: the GPU kernels tensor parallelism adds to the model
// (gpt_gpu.cuh; tensor_parallel.h has the layout and the collectives): a
// row-parallel layer's completed sum plus its bias, the vocabulary-parallel
// embedding and its position gradient under sequence parallel, and the
// vocabulary-parallel softmax cross-entropy in three passes around the group's
// reductions (each row's maximum, then the sum of exponentials and the
// target's logit, then losses and the logits' gradient), so the logits are
// never gathered. Partial sums travel in fp32 (NCCL and the staged backend sum
// fp32; a floatX partial would be rounded twice). One block per row where a row
// is reduced; the sums run in a fixed order (deterministic).
#ifndef LLMC_TENSOR_PARALLEL_CUH
#define LLMC_TENSOR_PARALLEL_CUH

#include "cuda_common.cuh"  // defines: launch_kernel, ceil_div_int, CUDA_CHECK_LAUNCH, block_max, ...

#define TP_ROW_THREADS 256

// out (n = rows x C) floatX = in fp32 + bias (C) floatX: a row-parallel layer's completed output.
__global__ void tp_bias_floatX_kernel(floatX *out, const float *in, const floatX *bias, int64_t n, int C) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = to_floatX(in[i] + to_float(bias[i % C]));
}
static inline void gpu_tp_bias_floatX(floatX *out, const float *in, const floatX *bias, int rows, int C, cudaStream_t s) {
    int64_t n = (int64_t)rows * C;
    if (n <= 0) return;
    launch_kernel(tp_bias_floatX_kernel, ceil_div_int(n, 256), 256, 0, s, out, in, bias, n, C);
    CUDA_CHECK_LAUNCH();
}

// out (N, C) fp32: row i the token's row of this rank's vocabulary slice of
// wte (ids [v0, v0 + vreal)), or zeros; the group's sum is the embedding.
__global__ void tp_embed_rows_kernel(float *out, const int *inp, const floatX *wte, int v0, int vreal, int64_t n, int C) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int t = inp[i / C] - v0;
    out[i] = t >= 0 && t < vreal ? to_float(wte[(int64_t)t * C + i % C]) : 0.0f;
}
// encoded (rows, C) floatX = sum + wpe at each row's position (rows from r0, T a sequence).
__global__ void tp_embed_finish_kernel(floatX *encoded, const float *sum, const floatX *wpe, int r0, int T, int64_t n,
                                       int C) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int64_t row = i / C;
    int t = (int)((r0 + row) % T);
    encoded[i] = to_floatX(sum[i] + to_float(wpe[(int64_t)t * C + i % C]));
}
static inline void gpu_tp_embed_rows(float *out, const int *inp, const floatX *wte, int v0, int vreal, int N, int C,
                                     cudaStream_t s) {
    int64_t n = (int64_t)N * C;
    launch_kernel(tp_embed_rows_kernel, ceil_div_int(n, 256), 256, 0, s, out, inp, wte, v0, vreal, n, C);
    CUDA_CHECK_LAUNCH();
}
static inline void gpu_tp_embed_finish(floatX *encoded, const float *sum, const floatX *wpe, int r0, int T, int rows, int C,
                                       cudaStream_t s) {
    int64_t n = (int64_t)rows * C;
    launch_kernel(tp_embed_finish_kernel, ceil_div_int(n, 256), 256, 0, s, encoded, sum, wpe, r0, T, n, C);
    CUDA_CHECK_LAUNCH();
}

// dwpe[t, c] += the rank's rows' gradients at position t (rows from r0, in row order): sequence parallel.
__global__ void tp_wpe_backward_kernel(float *dwpe, const float *dout, int r0, int T, int rows, int C) {
    int64_t q = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (q >= (int64_t)T * C) return;
    int t = (int)(q / C), c = (int)(q % C);
    float acc = 0.0f;
    for (int i = ((t - r0) % T + T) % T; i < rows; i += T) acc += dout[(int64_t)i * C + c];
    dwpe[q] += acc;
}
static inline void gpu_tp_wpe_backward(float *dwpe, const float *dout, int r0, int T, int rows, int C, cudaStream_t s) {
    launch_kernel(tp_wpe_backward_kernel, ceil_div_int((int64_t)T * C, 256), 256, 0, s, dwpe, dout, r0, T, rows, C);
    CUDA_CHECK_LAUNCH();
}

// ---------------------------------------------------------------------------
// vocabulary-parallel cross-entropy over the rank's logits (N, Vl) floatX, of
// which the first vreal columns are real tokens [v0, v0 + vreal)

// mx (N): each row's maximum over the rank's real columns (-inf without any).
__global__ void tp_vocab_max_kernel(float *mx, const floatX *logits, int Vl, int vreal) {
    __shared__ float scratch[32];
    const floatX *x = logits + (int64_t)blockIdx.x * Vl;
    float m = -INFINITY;
    for (int v = threadIdx.x; v < vreal; v += blockDim.x) m = fmaxf(m, to_float(x[v]));
    m = block_max(m, scratch);
    if (threadIdx.x == 0) mx[blockIdx.x] = m;
}

// With the group's maxima maxes (tp, N): gmax (N) their maximum, stats (2, N)
// the rank's sum of exp(logit - gmax) and the target's logit if the rank holds it.
__global__ void tp_vocab_sums_kernel(float *stats, float *gmax, const float *maxes, int tp, const floatX *logits,
                                     const int *targets, int N, int Vl, int vreal, int v0) {
    __shared__ float scratch[32];
    const int64_t row = blockIdx.x;
    float g = -INFINITY;
    for (int r = 0; r < tp; r++) g = fmaxf(g, maxes[(int64_t)r * N + row]);
    const floatX *x = logits + row * Vl;
    float sum = 0.0f;
    for (int v = threadIdx.x; v < vreal; v += blockDim.x) sum += expf(to_float(x[v]) - g);
    sum = block_sum(sum, scratch);
    if (threadIdx.x == 0) {
        int t = targets[row] - v0;
        gmax[row] = g;
        stats[row] = sum;
        stats[N + row] = t >= 0 && t < vreal ? to_float(x[t]) : 0.0f;
    }
}

// With the group's sums: losses (N) = log(sum) + gmax - target logit; with
// write, the logits become dloss * (softmax - onehot) (the padding's 0).
__global__ void tp_vocab_finish_kernel(floatX *logits, float *losses, const float *stats, const float *gmax,
                                       const int *targets, int N, int Vl, int vreal, int v0, float dloss, int write) {
    const int64_t row = blockIdx.x;
    const float lse = gmax[row] + logf(stats[row]);
    if (threadIdx.x == 0) losses[row] = lse - stats[N + row];
    if (!write) return;
    floatX *x = logits + row * Vl;
    int t = targets[row] - v0;
    for (int v = threadIdx.x; v < Vl; v += blockDim.x) {
        float d = v < vreal ? expf(to_float(x[v]) - lse) * dloss : 0.0f;
        if (v == t) d -= dloss;
        x[v] = to_floatX(d);
    }
}

#endif  // LLMC_TENSOR_PARALLEL_CUH
