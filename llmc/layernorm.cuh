// layernorm.cuh: LayerNorm (eps 1e-5) on the GPU in floatX with fp32 statistics:
// the plain forward, the fused residual add + LayerNorm forward, and a
// deterministic backward (row pass, then parameter gradients as fixed-order
// column reductions through a scratch of per-row-chunk partial sums).
// One warp per row. Lane l owns the 8-element chunks l, l+32, l+64, ... of its
// row and, for C <= 2048, keeps them in registers from the one read to the
// normalise (the forwards read each input once and write each output once; the
// backward row pass reads dout and inp once); longer rows are re-read. Chunks
// move as 16-byte vectors when C % 8 == 0 and every pointer is 16-byte aligned
// (tested at launch), else element by element. Every path (vector or element,
// held or re-read) visits the same elements in the same order with the same
// arithmetic, and both forwards normalise through the same device function,
// so recomputing a LayerNorm in the backward (--recompute full) gives the bits
// the forward gave, whichever path either call took.
#ifndef LLMC_LAYERNORM_CUH
#define LLMC_LAYERNORM_CUH

// tests/test_kernels_emulated.cpp runs this header on the CPU through
// tests/cuda_emulator.h.
#include "cuda_common.cuh"  // defines: warp_sum, reg_barrier_row, aligned16, ceil_div_int, ...
#include "gpu_activation_sizes.h"  // defines: LN_ROWS_PER_CHUNK, layernorm_scratch_floats

#define LN_EPS 1e-5f
#define LN_WARPS 4    // rows (warps) per block in the forwards and the backward row pass
#define LN_MAX_NV 8   // chunks per lane kept in registers: rows up to 8 * 32 * 8 = 2048

// Chunks per lane for a row of C: ceil(ceil(C / 8) / 32); 0 (re-read) above LN_MAX_NV.
static inline int ln_nv(int C) {
    int nv = (C + 255) / 256;
    return nv <= LN_MAX_NV ? nv : 0;
}

// The chunk of row p starting at element e0 (< C: a chunk of the row; else zeros).
template <bool VEC>
__device__ __forceinline__ uint4 ln_load(const floatX *p, int e0, int C) {
    if constexpr (VEC) return e0 < C ? ld_floatX8(p + e0) : make_uint4(0u, 0u, 0u, 0u);
    else return ld_floatX8_n(p + e0, C - e0);
}
template <bool VEC>
__device__ __forceinline__ void ln_store(floatX *p, uint4 v, int e0, int C) {
    if constexpr (VEC) { if (e0 < C) st_floatX8(p + e0, v); }
    else st_floatX8_n(p + e0, v, C - e0);
}

// Chunk k of this lane: from the registers r (NV > 0) or re-read from row x.
template <int NV, bool VEC>
__device__ __forceinline__ uint4 ln_chunk(const uint4 (&r)[NV > 0 ? NV : 1], const floatX *x, int k, int lane, int C) {
    if constexpr (NV > 0) return r[k];
    else return ln_load<VEC>(x, (k * 32 + lane) * 8, C);
}

// Normalises one row by the calling warp: out = (x - mean) * rstd * w + b, the
// row's chunks in r (NV > 0) or in x. Two-pass statistics in fp32; each lane
// sums its elements in chunk order, then warp_sum's fixed butterfly. Explicit
// fmas (__fmaf_rn), so no contraction choice can differ between the kernels.
template <int NV, bool VEC>
__device__ __forceinline__ void ln_row(floatX *out, float *mean_out, float *rstd_out, uint4 (&r)[NV > 0 ? NV : 1],
                                       const floatX *x, const floatX *w, const floatX *b, int C) {
    const int lane = threadIdx.x % 32;
    const int nk = NV > 0 ? NV : (C + 255) / 256;
    float sum = 0.0f;
#pragma unroll
    for (int k = 0; k < nk; k++) {
        int e0 = (k * 32 + lane) * 8;
        float f[8];
        floatX8_unpack(f, ln_chunk<NV, VEC>(r, x, k, lane, C));
#pragma unroll
        for (int j = 0; j < 8; j++)
            if (e0 + j < C) sum += f[j];
    }
    const float m = warp_sum(sum) / C;
    reg_barrier_row<NV>(r);
    float var = 0.0f;
#pragma unroll
    for (int k = 0; k < nk; k++) {
        int e0 = (k * 32 + lane) * 8;
        float f[8];
        floatX8_unpack(f, ln_chunk<NV, VEC>(r, x, k, lane, C));
#pragma unroll
        for (int j = 0; j < 8; j++) {
            float d = f[j] - m;
            if (e0 + j < C) var = __fmaf_rn(d, d, var);
        }
    }
    const float s = rsqrtf(warp_sum(var) / C + LN_EPS);
    reg_barrier_row<NV>(r);
#pragma unroll
    for (int k = 0; k < nk; k++) {
        int e0 = (k * 32 + lane) * 8;
        if (e0 < C) {
            float f[8], wf[8], bf[8], o[8];
            floatX8_unpack(f, ln_chunk<NV, VEC>(r, x, k, lane, C));
            floatX8_unpack(wf, ln_load<VEC>(w, e0, C));
            floatX8_unpack(bf, ln_load<VEC>(b, e0, C));
#pragma unroll
            for (int j = 0; j < 8; j++) o[j] = __fmaf_rn((f[j] - m) * s, wf[j], bf[j]);
            ln_store<VEC>(out, floatX8_pack(o), e0, C);
        }
    }
    if (lane == 0) { *mean_out = m; *rstd_out = s; }
}

// out (N,C), mean (N), rstd (N) from inp (N,C).
template <int NV, bool VEC>
__global__ void __launch_bounds__(LN_WARPS * 32)
    layernorm_forward_kernel(floatX *__restrict__ out, float *__restrict__ mean, float *__restrict__ rstd,
                             const floatX *__restrict__ inp, const floatX *__restrict__ w, const floatX *__restrict__ b,
                             int N, int C) {
    int row = blockIdx.x * LN_WARPS + threadIdx.x / 32;
    if (row >= N) return;
    int lane = threadIdx.x % 32;
    int64_t off = (int64_t)row * C;
    const floatX *x = inp + off;
    uint4 r[NV > 0 ? NV : 1];
    if constexpr (NV > 0) {
#pragma unroll
        for (int k = 0; k < NV; k++) r[k] = ln_load<VEC>(x, (k * 32 + lane) * 8, C);  // all in flight at once
    }
    ln_row<NV, VEC>(out + off, mean + row, rstd + row, r, x, w, b, C);
}

// residual_out (N,C) = res_in + x (rounded to floatX), then LayerNorm of it (from
// the rounded values kept in registers: what a LayerNorm of residual_out reads).
template <int NV, bool VEC>
__global__ void __launch_bounds__(LN_WARPS * 32)
    fused_residual_layernorm_kernel(floatX *__restrict__ residual_out, floatX *__restrict__ out,
                                    float *__restrict__ mean, float *__restrict__ rstd,
                                    const floatX *__restrict__ res_in, const floatX *__restrict__ x,
                                    const floatX *__restrict__ w, const floatX *__restrict__ b, int N, int C) {
    int row = blockIdx.x * LN_WARPS + threadIdx.x / 32;
    if (row >= N) return;
    int lane = threadIdx.x % 32;
    int64_t off = (int64_t)row * C;
    uint4 r[NV > 0 ? NV : 1];
    if constexpr (NV > 0) {
        uint4 rx[NV];
#pragma unroll
        for (int k = 0; k < NV; k++) {
            int e0 = (k * 32 + lane) * 8;
            r[k] = ln_load<VEC>(res_in + off, e0, C);
            rx[k] = ln_load<VEC>(x + off, e0, C);
        }
#pragma unroll
        for (int k = 0; k < NV; k++) {
            float a[8], c[8];
            floatX8_unpack(a, r[k]);
            floatX8_unpack(c, rx[k]);
#pragma unroll
            for (int j = 0; j < 8; j++) a[j] += c[j];
            r[k] = floatX8_pack(a);
            ln_store<VEC>(residual_out + off, r[k], (k * 32 + lane) * 8, C);
        }
    } else {
        // long rows: write the residual, then normalise it re-reading residual_out
        for (int e0 = lane * 8; e0 < C; e0 += 32 * 8) {
            float a[8], c[8];
            floatX8_unpack(a, ln_load<VEC>(res_in + off, e0, C));
            floatX8_unpack(c, ln_load<VEC>(x + off, e0, C));
#pragma unroll
            for (int j = 0; j < 8; j++) a[j] += c[j];
            ln_store<VEC>(residual_out + off, floatX8_pack(a), e0, C);
        }
        __syncwarp();  // orders the warp's stores before its loads of the same row
    }
    ln_row<NV, VEC>(out + off, mean + row, rstd + row, r, residual_out + off, w, b, C);
}

static inline void gpu_layernorm_forward(floatX *out, float *mean, float *rstd, const floatX *inp, const floatX *w,
                                         const floatX *b, int N, int C, cudaStream_t s) {
    if (N <= 0) return;
    int vec = C % 8 == 0 && aligned16(out) && aligned16(inp) && aligned16(w) && aligned16(b);
    dim3 grid(ceil_div_int(N, LN_WARPS)), block(LN_WARPS * 32);
#define LN_FWD(NV)                                                                                          \
    launch_kernel(vec ? layernorm_forward_kernel<NV, true> : layernorm_forward_kernel<NV, false>, grid, block, 0, \
                  s, out, mean, rstd, inp, w, b, N, C)
    LLMC_NV_SWITCH(ln_nv(C), LN_FWD);
#undef LN_FWD
    CUDA_CHECK_LAUNCH();
}

static inline void gpu_fused_residual_layernorm(floatX *residual_out, floatX *out, float *mean, float *rstd,
                                                const floatX *res_in, const floatX *x, const floatX *w, const floatX *b,
                                                int N, int C, cudaStream_t s) {
    if (N <= 0) return;
    int vec = C % 8 == 0 && aligned16(residual_out) && aligned16(out) && aligned16(res_in) && aligned16(x) &&
              aligned16(w) && aligned16(b);
    dim3 grid(ceil_div_int(N, LN_WARPS)), block(LN_WARPS * 32);
#define LN_FUSED(NV)                                                                                        \
    launch_kernel(vec ? fused_residual_layernorm_kernel<NV, true> : fused_residual_layernorm_kernel<NV, false>, \
                  grid, block, 0, s, residual_out, out, mean, rstd, res_in, x, w, b, N, C)
    LLMC_NV_SWITCH(ln_nv(C), LN_FUSED);
#undef LN_FUSED
    CUDA_CHECK_LAUNCH();
}

// ---------------------------------------------------------------------------
// backward

// dinp (N,C) fp32 += d/dinp, and dinp_compute = its floatX copy (the next matmul's
// input). Chunks as in the forward; dout and inp stay in registers (NV > 0)
// between the two passes.
template <int NV, bool VEC>
__global__ void __launch_bounds__(LN_WARPS * 32)
    layernorm_backward_rows_kernel(float *__restrict__ dinp, floatX *__restrict__ dinp_compute,
                                   const floatX *__restrict__ dout, const floatX *__restrict__ inp,
                                   const floatX *__restrict__ w, const float *__restrict__ mean,
                                   const float *__restrict__ rstd, int N, int C) {
    int row = blockIdx.x * LN_WARPS + threadIdx.x / 32;
    if (row >= N) return;
    const int lane = threadIdx.x % 32;
    const int nk = NV > 0 ? NV : (C + 255) / 256;
    int64_t off = (int64_t)row * C;
    const floatX *dy = dout + off, *x = inp + off;
    float *di = dinp + off;
    floatX *dib = dinp_compute + off;
    uint4 rd[NV > 0 ? NV : 1], rx[NV > 0 ? NV : 1];
    if constexpr (NV > 0) {
#pragma unroll
        for (int k = 0; k < NV; k++) {
            int e0 = (k * 32 + lane) * 8;
            rd[k] = ln_load<VEC>(dy, e0, C);
            rx[k] = ln_load<VEC>(x, e0, C);
        }
    }
    const float m = mean[row], s = rstd[row];
    float dmean = 0.0f, dnorm_mean = 0.0f;
#pragma unroll
    for (int k = 0; k < nk; k++) {
        int e0 = (k * 32 + lane) * 8;
        float fd[8], fx[8], fw[8];
        floatX8_unpack(fd, ln_chunk<NV, VEC>(rd, dy, k, lane, C));
        floatX8_unpack(fx, ln_chunk<NV, VEC>(rx, x, k, lane, C));
        floatX8_unpack(fw, ln_load<VEC>(w, e0, C));
#pragma unroll
        for (int j = 0; j < 8; j++) {
            float norm = (fx[j] - m) * s, dnorm = fw[j] * fd[j];
            if (e0 + j < C) { dmean += dnorm; dnorm_mean = __fmaf_rn(dnorm, norm, dnorm_mean); }
        }
    }
    dmean = warp_sum(dmean) / C;
    dnorm_mean = warp_sum(dnorm_mean) / C;
    reg_barrier_row<NV>(rd);
    reg_barrier_row<NV>(rx);
#pragma unroll
    for (int k = 0; k < nk; k++) {
        int e0 = (k * 32 + lane) * 8;
        if (e0 >= C) continue;
        float fd[8], fx[8], fw[8], d[8];
        floatX8_unpack(fd, ln_chunk<NV, VEC>(rd, dy, k, lane, C));
        floatX8_unpack(fx, ln_chunk<NV, VEC>(rx, x, k, lane, C));
        floatX8_unpack(fw, ln_load<VEC>(w, e0, C));
        if constexpr (VEC) {
            float4 a = *reinterpret_cast<const float4 *>(di + e0), c = *reinterpret_cast<const float4 *>(di + e0 + 4);
            d[0] = a.x; d[1] = a.y; d[2] = a.z; d[3] = a.w; d[4] = c.x; d[5] = c.y; d[6] = c.z; d[7] = c.w;
        } else {
#pragma unroll
            for (int j = 0; j < 8; j++) d[j] = e0 + j < C ? di[e0 + j] : 0.0f;
        }
#pragma unroll
        for (int j = 0; j < 8; j++) {
            float norm = (fx[j] - m) * s, dnorm = fw[j] * fd[j];
            d[j] += (dnorm - dmean - norm * dnorm_mean) * s;
        }
        if constexpr (VEC) {
            *reinterpret_cast<float4 *>(di + e0) = make_float4(d[0], d[1], d[2], d[3]);
            *reinterpret_cast<float4 *>(di + e0 + 4) = make_float4(d[4], d[5], d[6], d[7]);
        } else {
#pragma unroll
            for (int j = 0; j < 8; j++)
                if (e0 + j < C) di[e0 + j] = d[j];
        }
        ln_store<VEC>(dib, floatX8_pack(d), e0, C);
    }
}

// partial[2][R][C]: for row chunk r (blockIdx.y), sums of dout * norm and of dout.
// block (32, 8): 32 columns, 8 row lanes reduced in shared memory in a fixed order.
// The general case (any C, any alignment).
__global__ void layernorm_backward_params_kernel(float *partial, const floatX *dout, const floatX *inp,
                                                 const float *mean, const float *rstd, int N, int C) {
    __shared__ float sw[8][33], sb[8][33];
    int c = blockIdx.x * 32 + threadIdx.x;
    int r0 = blockIdx.y * LN_ROWS_PER_CHUNK;
    int r1 = min(r0 + LN_ROWS_PER_CHUNK, N);
    float aw = 0.0f, ab = 0.0f;
    if (c < C) {
        for (int r = r0 + threadIdx.y; r < r1; r += 8) {
            int64_t off = (int64_t)r * C + c;
            float d = to_float(dout[off]);
            aw += (to_float(inp[off]) - mean[r]) * rstd[r] * d;
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

// The same sums with 16-byte loads (C % 8 == 0, dout and inp 16-byte aligned):
// block (32, 8), thread x owns the 8 columns [(blockIdx.x * 32 + x) * 8, +8),
// row lane y the rows r0 + y, r0 + y + 8, ...; the 8 row lanes are added in
// order through shared memory, one column per thread.
__global__ void __launch_bounds__(256)
    layernorm_backward_params_vec_kernel(float *__restrict__ partial, const floatX *__restrict__ dout,
                                         const floatX *__restrict__ inp, const float *__restrict__ mean,
                                         const float *__restrict__ rstd, int N, int C) {
    __shared__ float sw[8][256], sb[8][256];
    int c0 = (blockIdx.x * 32 + threadIdx.x) * 8;
    int r0 = blockIdx.y * LN_ROWS_PER_CHUNK;
    int r1 = min(r0 + LN_ROWS_PER_CHUNK, N);
    float aw[8], ab[8];
#pragma unroll
    for (int j = 0; j < 8; j++) { aw[j] = 0.0f; ab[j] = 0.0f; }
    if (c0 < C) {
#pragma unroll 4
        for (int r = r0 + threadIdx.y; r < r1; r += 8) {
            int64_t off = (int64_t)r * C + c0;
            float fd[8], fx[8];
            floatX8_unpack(fd, ld_floatX8(dout + off));
            floatX8_unpack(fx, ld_floatX8(inp + off));
            float m = mean[r], s = rstd[r];
#pragma unroll
            for (int j = 0; j < 8; j++) {
                aw[j] += (fx[j] - m) * s * fd[j];
                ab[j] += fd[j];
            }
        }
    }
#pragma unroll
    for (int j = 0; j < 8; j++) {
        sw[threadIdx.y][threadIdx.x * 8 + j] = aw[j];
        sb[threadIdx.y][threadIdx.x * 8 + j] = ab[j];
    }
    __syncthreads();
    int t = threadIdx.y * 32 + threadIdx.x;  // column blockIdx.x * 256 + t
    int c = blockIdx.x * 256 + t;
    if (c < C) {
        float w = sw[0][t], bsum = sb[0][t];
        for (int k = 1; k < 8; k++) { w += sw[k][t]; bsum += sb[k][t]; }
        int R = gridDim.y;
        partial[(int64_t)blockIdx.y * C + c] = w;
        partial[(int64_t)(R + blockIdx.y) * C + c] = bsum;
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

// dinp (N,C) fp32 += ..., dinp_compute = floatX(dinp); dw, db (C) fp32 += ...
static inline void gpu_layernorm_backward(float *dinp, floatX *dinp_compute, float *dw, float *db, float *scratch,
                                          const floatX *dout, const floatX *inp, const floatX *w, const float *mean,
                                          const float *rstd, int N, int C, cudaStream_t s) {
    if (N <= 0) return;
    int vec_in = C % 8 == 0 && aligned16(dout) && aligned16(inp);
    int vec = vec_in && aligned16(dinp) && aligned16(dinp_compute) && aligned16(w);
    dim3 grid(ceil_div_int(N, LN_WARPS)), block(LN_WARPS * 32);
#define LN_BWD(NV)                                                                                          \
    launch_kernel(vec ? layernorm_backward_rows_kernel<NV, true> : layernorm_backward_rows_kernel<NV, false>,   \
                  grid, block, 0, s, dinp, dinp_compute, dout, inp, w, mean, rstd, N, C)
    LLMC_NV_SWITCH(ln_nv(C), LN_BWD);
#undef LN_BWD
    CUDA_CHECK_LAUNCH();
    int R = ceil_div_int(N, LN_ROWS_PER_CHUNK);
    if (vec_in)
        launch_kernel(layernorm_backward_params_vec_kernel, dim3(ceil_div_int(C, 256), R), dim3(32, 8), 0, s, scratch,
                      dout, inp, mean, rstd, N, C);
    else
        launch_kernel(layernorm_backward_params_kernel, dim3(ceil_div_int(C, 32), R), dim3(32, 8), 0, s, scratch, dout,
                      inp, mean, rstd, N, C);
    CUDA_CHECK_LAUNCH();
    launch_kernel(layernorm_backward_finish_kernel, ceil_div_int(C, 256), 256, 0, s, dw, db, scratch, R, C);
    CUDA_CHECK_LAUNCH();
}

#endif  // LLMC_LAYERNORM_CUH
