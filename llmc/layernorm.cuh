// layernorm.cuh: LayerNorm (eps 1e-5) on the GPU in bf16 with fp32 statistics:
// the plain forward, the fused residual add + LayerNorm forward, and a
// deterministic backward (row pass, then parameter gradients as fixed-order
// column reductions through a scratch of per-row-chunk partial sums).
// One warp per row; both forwards normalise through the same device function,
// so recomputing a LayerNorm in the backward (--recompute 2) gives the bits the
// forward gave.
#ifndef LLMC_LAYERNORM_CUH
#define LLMC_LAYERNORM_CUH

#include "cuda_common.cuh"

#define LN_EPS 1e-5f

// Normalises one row x (C) by the calling warp: out = (x - mean) * rstd * w + b.
__device__ __forceinline__ void ln_row(bf16 *out, float *mean_out, float *rstd_out, const bf16 *x, const bf16 *w,
                                       const bf16 *b, int C) {
    int lane = threadIdx.x % 32;
    float sum = 0.0f;
    for (int c = lane; c < C; c += 32) sum += __bfloat162float(x[c]);
    float m = warp_sum(sum) / C;
    float var = 0.0f;
    for (int c = lane; c < C; c += 32) {
        float d = __bfloat162float(x[c]) - m;
        var += d * d;
    }
    float s = rsqrtf(warp_sum(var) / C + LN_EPS);
    for (int c = lane; c < C; c += 32) {
        float n = (__bfloat162float(x[c]) - m) * s;
        out[c] = __float2bfloat16_rn(n * __bfloat162float(w[c]) + __bfloat162float(b[c]));
    }
    if (lane == 0) { *mean_out = m; *rstd_out = s; }
}

// out (N,C), mean (N), rstd (N) from inp (N,C).
__global__ void layernorm_forward_kernel(bf16 *out, float *mean, float *rstd, const bf16 *inp, const bf16 *w,
                                         const bf16 *b, int N, int C) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= N) return;
    int64_t off = (int64_t)row * C;
    ln_row(out + off, mean + row, rstd + row, inp + off, w, b, C);
}

// residual_out (N,C) = res_in + x (rounded to bf16), then LayerNorm of it.
__global__ void fused_residual_layernorm_kernel(bf16 *residual_out, bf16 *out, float *mean, float *rstd,
                                                const bf16 *res_in, const bf16 *x, const bf16 *w, const bf16 *b,
                                                int N, int C) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= N) return;
    int64_t off = (int64_t)row * C;
    for (int c = threadIdx.x % 32; c < C; c += 32)
        residual_out[off + c] = __float2bfloat16_rn(__bfloat162float(res_in[off + c]) + __bfloat162float(x[off + c]));
    __syncwarp();
    ln_row(out + off, mean + row, rstd + row, residual_out + off, w, b, C);
}

#define LN_WARPS 8  // rows per block in the forwards and the backward row pass

static inline void gpu_layernorm_forward(bf16 *out, float *mean, float *rstd, const bf16 *inp, const bf16 *w,
                                         const bf16 *b, int N, int C, cudaStream_t s) {
    layernorm_forward_kernel<<<ceil_div_int(N, LN_WARPS), LN_WARPS * 32, 0, s>>>(out, mean, rstd, inp, w, b, N, C);
    CUDA_CHECK_LAUNCH();
}

static inline void gpu_fused_residual_layernorm(bf16 *residual_out, bf16 *out, float *mean, float *rstd,
                                                const bf16 *res_in, const bf16 *x, const bf16 *w, const bf16 *b,
                                                int N, int C, cudaStream_t s) {
    fused_residual_layernorm_kernel<<<ceil_div_int(N, LN_WARPS), LN_WARPS * 32, 0, s>>>(residual_out, out, mean,
                                                                                       rstd, res_in, x, w, b, N, C);
    CUDA_CHECK_LAUNCH();
}

// ---------------------------------------------------------------------------
// backward

// dinp (N,C) fp32 += d/dinp, and dinp_bf16 = its bf16 copy (the next matmul's input).
__global__ void layernorm_backward_rows_kernel(float *dinp, bf16 *dinp_bf16, const bf16 *dout, const bf16 *inp,
                                               const bf16 *w, const float *mean, const float *rstd, int N, int C) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= N) return;
    int lane = threadIdx.x % 32;
    int64_t off = (int64_t)row * C;
    float m = mean[row], s = rstd[row];
    float dmean = 0.0f, dnorm_mean = 0.0f;
    for (int c = lane; c < C; c += 32) {
        float norm = (__bfloat162float(inp[off + c]) - m) * s;
        float dnorm = __bfloat162float(w[c]) * __bfloat162float(dout[off + c]);
        dmean += dnorm;
        dnorm_mean += dnorm * norm;
    }
    dmean = warp_sum(dmean) / C;
    dnorm_mean = warp_sum(dnorm_mean) / C;
    for (int c = lane; c < C; c += 32) {
        float norm = (__bfloat162float(inp[off + c]) - m) * s;
        float dnorm = __bfloat162float(w[c]) * __bfloat162float(dout[off + c]);
        float d = dinp[off + c] + (dnorm - dmean - norm * dnorm_mean) * s;
        dinp[off + c] = d;
        dinp_bf16[off + c] = __float2bfloat16_rn(d);
    }
}

#define LN_ROWS_PER_CHUNK 128  // rows summed by one block of the parameter-gradient pass

// partial[2][R][C]: for row chunk r (blockIdx.y), sums of dout * norm and of dout.
// block (32, 8): 32 columns, 8 row lanes reduced in shared memory in a fixed order.
__global__ void layernorm_backward_params_kernel(float *partial, const bf16 *dout, const bf16 *inp,
                                                 const float *mean, const float *rstd, int N, int C) {
    __shared__ float sw[8][33], sb[8][33];
    int c = blockIdx.x * 32 + threadIdx.x;
    int r0 = blockIdx.y * LN_ROWS_PER_CHUNK;
    int r1 = min(r0 + LN_ROWS_PER_CHUNK, N);
    float aw = 0.0f, ab = 0.0f;
    if (c < C) {
        for (int r = r0 + threadIdx.y; r < r1; r += 8) {
            int64_t off = (int64_t)r * C + c;
            float d = __bfloat162float(dout[off]);
            aw += (__bfloat162float(inp[off]) - mean[r]) * rstd[r] * d;
            ab += d;
        }
    }
    sw[threadIdx.y][threadIdx.x] = aw;
    sb[threadIdx.y][threadIdx.x] = ab;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
        for (int k = 1; k < 8; k++) { aw += sw[k][threadIdx.x]; ab += sb[k][threadIdx.x]; }
        int R = gridDim.y;
        partial[(int64_t)blockIdx.y * C + c] = aw;
        partial[(int64_t)(R + blockIdx.y) * C + c] = ab;
    }
}

// dw[c] += sum_r partial[0][r][c]; db[c] += sum_r partial[1][r][c] (r in order).
__global__ void layernorm_backward_finish_kernel(float *dw, float *db, const float *partial, int R, int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float aw = 0.0f, ab = 0.0f;
    for (int r = 0; r < R; r++) { aw += partial[(int64_t)r * C + c]; ab += partial[(int64_t)(R + r) * C + c]; }
    dw[c] += aw;
    db[c] += ab;
}

// Floats of scratch the backward needs for N rows of C.
static inline size_t layernorm_scratch_floats(int N, int C) {
    return 2 * (size_t)ceil_div_int(N, LN_ROWS_PER_CHUNK) * (size_t)C;
}

// dinp (N,C) fp32 += ..., dinp_bf16 = bf16(dinp); dw, db (C) fp32 += ...
static inline void gpu_layernorm_backward(float *dinp, bf16 *dinp_bf16, float *dw, float *db, float *scratch,
                                          const bf16 *dout, const bf16 *inp, const bf16 *w, const float *mean,
                                          const float *rstd, int N, int C, cudaStream_t s) {
    layernorm_backward_rows_kernel<<<ceil_div_int(N, LN_WARPS), LN_WARPS * 32, 0, s>>>(dinp, dinp_bf16, dout, inp,
                                                                                      w, mean, rstd, N, C);
    CUDA_CHECK_LAUNCH();
    int R = ceil_div_int(N, LN_ROWS_PER_CHUNK);
    layernorm_backward_params_kernel<<<dim3(ceil_div_int(C, 32), R), dim3(32, 8), 0, s>>>(scratch, dout, inp, mean,
                                                                                         rstd, N, C);
    CUDA_CHECK_LAUNCH();
    layernorm_backward_finish_kernel<<<ceil_div_int(C, 256), 256, 0, s>>>(dw, db, scratch, R, C);
    CUDA_CHECK_LAUNCH();
}

#endif  // LLMC_LAYERNORM_CUH
