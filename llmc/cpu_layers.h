// cpu_layers.h: fp32 forward and backward of every GPT-2 layer on the CPU,
// parallelised with OpenMP; matmuls go through cpu_matmul.h. These kernels are
// the correctness reference for the CUDA kernels in llmc/*.cuh.
// Notation: B batch, T time, C channels, NH heads, hs = C / NH, V vocabulary,
// N = B * T rows. All tensors are row-major and contiguous unless a leading
// dimension says otherwise. Backward functions ACCUMULATE (+=) into parameter
// gradients and into dinp where documented. The LayerNorm, linear, GELU and
// bias-gradient kernels share the team they are called in (cpu_matmul.h's
// KERNEL_TEAM): a caller runs a sequence of them in one parallel region.
#ifndef LLMC_CPU_LAYERS_H
#define LLMC_CPU_LAYERS_H

#include <math.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "cpu_matmul.h"  // defines: matmul, matmul_team, matmul_team_backend, matmul_slice, KERNEL_TEAM, ...
#include "cpu_vec.h"     // defines: vec_max, vec_exp_sum, vec_dot, vf_*
#include "utils.h"       // defines: omp_threads, omp_thread_id

// ---------------------------------------------------------------------------
// embeddings

// out (B,T,C) = wte[inp[b,t]] + wpe[t]
static void encoder_forward(float *out, const int *inp, const float *wte, const float *wpe, int B, int T, int C) {
#pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            float *o = out + ((size_t)b * T + t) * C;
            const float *we = wte + (size_t)inp[b * T + t] * C;
            const float *pe = wpe + (size_t)t * C;
            for (int c = 0; c < C; c++) o[c] = we[c] + pe[c];
        }
    }
}

// dwte[inp[b,t]] += dout[b,t]; dwpe[t] += sum_b dout[b,t]. Parallel over channel
// chunks so that repeated tokens never race.
static void encoder_backward(float *dwte, float *dwpe, const float *dout, const int *inp, int B, int T, int C) {
    const int chunk = 64;
    int nchunks = (C + chunk - 1) / chunk;
#pragma omp parallel for
    for (int ch = 0; ch < nchunks; ch++) {
        int c0 = ch * chunk, c1 = c0 + chunk < C ? c0 + chunk : C;
        for (int b = 0; b < B; b++) {
            for (int t = 0; t < T; t++) {
                const float *d = dout + ((size_t)b * T + t) * C;
                float *dw = dwte + (size_t)inp[b * T + t] * C;
                float *dp = dwpe + (size_t)t * C;
                for (int c = c0; c < c1; c++) { dw[c] += d[c]; dp[c] += d[c]; }
            }
        }
    }
}

// ---------------------------------------------------------------------------
// layernorm (eps 1e-5)

// A row's per-row reductions run by vectors of VEC_LANES, the lanes summed by
// halves (vf_hsum_tree), then the tail in order: the bits depend on C and the
// build, not on the thread count.

// sum of x[c] - m (squared when `square`) over c < C
static inline float layernorm_row_sum(const float *x, float m, int square, int C) {
    vf acc = vf_set1(0.0f);
    int c = 0;
    for (; c + VEC_LANES <= C; c += VEC_LANES) {
        vf d = vf_load(x + c) - m;
        if (square) d *= d;
        acc += d;
    }
    float sum = vf_hsum_tree(acc);
    for (; c < C; c++) {
        float d = x[c] - m;
        sum += square ? d * d : d;
    }
    return sum;
}

// out (N,C) = (inp - mean) * rstd * weight + bias; saves mean (N), rstd (N).
static void layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *weight,
                              const float *bias, int N, int C) {
    KERNEL_TEAM(layernorm_forward(out, mean, rstd, inp, weight, bias, N, C));
#pragma omp for schedule(static)
    for (int i = 0; i < N; i++) {
        const float *x = inp + (size_t)i * C;
        float m = layernorm_row_sum(x, 0.0f, 0, C) / C;
        float v = layernorm_row_sum(x, m, 1, C) / C;
        float s = 1.0f / sqrtf(v + 1e-5f);
        float *o = out + (size_t)i * C;
        for (int c = 0; c < C; c++) o[c] = (x[c] - m) * s * weight[c] + bias[c];
        mean[i] = m;
        rstd[i] = s;
    }
}

// Sums rows of a (N, C) matrix into out (C) (+=), parallel over column chunks.
static void column_sum_accumulate(float *out, const float *a, int N, int C) {
    KERNEL_TEAM(column_sum_accumulate(out, a, N, C));
    const int chunk = 64;
    int nchunks = (C + chunk - 1) / chunk;
#pragma omp for schedule(static)
    for (int ch = 0; ch < nchunks; ch++) {
        int c0 = ch * chunk, c1 = c0 + chunk < C ? c0 + chunk : C;
        float acc[64];
        memset(acc, 0, sizeof(acc));
        for (int i = 0; i < N; i++) {
            const float *row = a + (size_t)i * C;
            for (int c = c0; c < c1; c++) acc[c - c0] += row[c];
        }
        for (int c = c0; c < c1; c++) out[c] += acc[c - c0];
    }
}

// One row of the LayerNorm backward's reductions (in layernorm_row_sum's
// order): *dnorm_sum = sum of weight * dout, *dnorm_norm_sum = sum of
// weight * dout * (x - m) * s.
static inline void layernorm_row_sums(float *dnorm_sum, float *dnorm_norm_sum, const float *x, const float *d,
                                      const float *weight, float m, float s, int C) {
    vf a = vf_set1(0.0f), b = vf_set1(0.0f);
    int c = 0;
    for (; c + VEC_LANES <= C; c += VEC_LANES) {
        vf dnorm = vf_load(weight + c) * vf_load(d + c);
        a += dnorm;
        b += dnorm * ((vf_load(x + c) - m) * s);
    }
    float sa = vf_hsum_tree(a), sb = vf_hsum_tree(b);
    for (; c < C; c++) {
        float dnorm = weight[c] * d[c];
        sa += dnorm;
        sb += dnorm * ((x[c] - m) * s);
    }
    *dnorm_sum = sa;
    *dnorm_norm_sum = sb;
}

// dinp (N,C) += d/dinp; dweight (C) += ...; dbias (C) += ... .
static void layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                               const float *weight, const float *mean, const float *rstd, int N, int C) {
    KERNEL_TEAM(layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C));
#pragma omp for schedule(static)
    for (int i = 0; i < N; i++) {
        const float *d = dout + (size_t)i * C;
        const float *x = inp + (size_t)i * C;
        float m = mean[i], s = rstd[i];
        float dnorm_mean, dnorm_norm_mean;
        layernorm_row_sums(&dnorm_mean, &dnorm_norm_mean, x, d, weight, m, s, C);
        dnorm_mean /= C;
        dnorm_norm_mean /= C;
        float *di = dinp + (size_t)i * C;
        for (int c = 0; c < C; c++) {
            float norm = (x[c] - m) * s;
            float dnorm = weight[c] * d[c];
            di[c] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s;
        }
    }
    // parameter gradients: column reductions, parallel over channel chunks
    const int chunk = 64;
    int nchunks = (C + chunk - 1) / chunk;
#pragma omp for schedule(static)
    for (int ch = 0; ch < nchunks; ch++) {
        int c0 = ch * chunk, c1 = c0 + chunk < C ? c0 + chunk : C;
        float dw[64], db[64];
        memset(dw, 0, sizeof(dw));
        memset(db, 0, sizeof(db));
        for (int i = 0; i < N; i++) {
            const float *d = dout + (size_t)i * C;
            const float *x = inp + (size_t)i * C;
            float m = mean[i], s = rstd[i];
            for (int c = c0; c < c1; c++) {
                dw[c - c0] += (x[c] - m) * s * d[c];
                db[c - c0] += d[c];
            }
        }
        for (int c = c0; c < c1; c++) { dweight[c] += dw[c - c0]; dbias[c] += db[c - c0]; }
    }
}

// ---------------------------------------------------------------------------
// GELU, tanh approximation

#define GELU_SCALING_FACTOR 0.7978845608028654f  // sqrt(2 / pi)

// VEC_LANES lanes of GELU (or, with grad, of its derivative times dout), in its sigmoid form:
// 0.5 x (1 + tanh(u)) = x s with s = 1 / (1 + exp(-2u)), u = sqrt(2/pi) (x + 0.044715 x^3), and its
// derivative s + x * 2 s (1 - s) du/dx (0.5 sech^2(u) = 2 s (1 - s)). The same function as the tanh
// form, with fewer operations in the dependent chain that bounds these loops (an exponential, a
// division and the polynomial before them) and no 1 + tanh cancelling for negative x.
static inline vf gelu_sigmoid(vf x, vf *u_slope) {
    vf x2 = x * x;
    vf minus_2u = x * (-2.0f * GELU_SCALING_FACTOR) * (1.0f + 0.044715f * x2);
    if (u_slope) *u_slope = GELU_SCALING_FACTOR * (1.0f + 3.0f * 0.044715f * x2);  // du/dx
    return 1.0f / (1.0f + vf_exp(minus_2u));
}
static inline vf gelu_vec(vf x) { return x * gelu_sigmoid(x, NULL); }
static inline vf gelu_grad_vec(vf x, vf dout) {
    vf slope, s = gelu_sigmoid(x, &slope);
    return dout * (s + 2.0f * x * slope * s * (1.0f - s));
}

// out (n) = gelu(inp); dinout (n): d/d(output) in, d/d(input) out. Blocks of
// VEC_LANES; the tail goes through the same lanes, zero-padded (so every
// element gets the same bits wherever a span starts).
static void gelu_span(float *out, const float *inp, size_t n) {
    for (size_t i = 0; i < n; i += VEC_LANES) {
        size_t len = n - i < VEC_LANES ? n - i : VEC_LANES;
        if (len == VEC_LANES) { vf_store(out + i, gelu_vec(vf_load(inp + i))); continue; }
        float x[VEC_LANES] = {0};
        memcpy(x, inp + i, len * sizeof(float));
        vf y = gelu_vec(vf_load(x));
        memcpy(out + i, &y, len * sizeof(float));
    }
}
static void gelu_grad_span(float *dinout, const float *inp, size_t n) {
    for (size_t i = 0; i < n; i += VEC_LANES) {
        size_t len = n - i < VEC_LANES ? n - i : VEC_LANES;
        if (len == VEC_LANES) { vf_store(dinout + i, gelu_grad_vec(vf_load(inp + i), vf_load(dinout + i))); continue; }
        float x[VEC_LANES] = {0}, d[VEC_LANES] = {0};
        memcpy(x, inp + i, len * sizeof(float));
        memcpy(d, dinout + i, len * sizeof(float));
        vf g = gelu_grad_vec(vf_load(x), vf_load(d));
        memcpy(dinout + i, &g, len * sizeof(float));
    }
}
// span (gelu_span or gelu_grad_span) over n elements, in blocks the team shares
static void gelu_team(void (*span)(float *, const float *, size_t), float *out, const float *inp, size_t n) {
    KERNEL_TEAM(gelu_team(span, out, inp, n));
    const size_t block = 64 * VEC_LANES;
    size_t blocks = (n + block - 1) / block;
#pragma omp for schedule(static)
    for (size_t b = 0; b < blocks; b++)
        span(out + b * block, inp + b * block, n - b * block < block ? n - b * block : block);
}
static void gelu_forward(float *out, const float *inp, size_t n) { gelu_team(gelu_span, out, inp, n); }
static void gelu_backward_inplace(float *dinout, const float *inp, size_t n) {
    gelu_team(gelu_grad_span, dinout, inp, n);
}

// ---------------------------------------------------------------------------
// linear layers: out (N,OC) = inp (N,IC) @ weight(OC,IC)^T + bias (OC)

// out = (residual ? residual : 0) + bias + inp @ weight^T. With a residual
// this fuses the residual add into the matmul (beta = 1). With gelu_out, also
// gelu_out = gelu(out) (the MLP's first layer). Each thread of the team sets
// up, multiplies and activates its own slice of out, in cache, with no wait
// between (one barrier at the end).
static void linear_act_forward(float *out, float *gelu_out, const float *inp, const float *weight, const float *bias,
                               const float *residual, int N, int IC, int OC) {
    KERNEL_TEAM(linear_act_forward(out, gelu_out, inp, weight, bias, residual, N, IC, OC));
    MatmulBackend be = matmul_team_backend(0, 1, N, OC, IC, 1.0f);
    MatmulSlice s = matmul_team_slice(N, OC);
    for (int i = s.i0; i < s.i0 + s.rows; i++) {
        float *o = out + (size_t)i * OC;
        const float *r = residual ? residual + (size_t)i * OC : NULL;
        for (int j = s.j0; j < s.j0 + s.cols; j++) o[j] = (bias ? bias[j] : 0.0f) + (r ? r[j] : 0.0f);
    }
    matmul_slice(be, s, 0, 1, IC, 1.0f, inp, IC, weight, IC, 1.0f, out, OC);
    if (gelu_out)
        for (int i = s.i0; i < s.i0 + s.rows; i++)
            gelu_span(gelu_out + (size_t)i * OC + s.j0, out + (size_t)i * OC + s.j0, (size_t)s.cols);
#pragma omp barrier
}
static void linear_forward(float *out, const float *inp, const float *weight, const float *bias,
                           const float *residual, int N, int IC, int OC) {
    linear_act_forward(out, NULL, inp, weight, bias, residual, N, IC, OC);
}

// dinp (N,IC) = dout @ weight (overwritten): the input gradient (B). With
// gelu_inp (N,IC), the input of a GELU that fed this layer, dinp is taken on
// through it (dinp * GELU'(gelu_inp), as gelu_backward_inplace): each thread
// on its slice of the product while in cache, one barrier at the end.
static void linear_act_backward_input(float *dinp, const float *gelu_inp, const float *dout, const float *weight,
                                      int N, int IC, int OC) {
    KERNEL_TEAM(linear_act_backward_input(dinp, gelu_inp, dout, weight, N, IC, OC));
    MatmulBackend be = matmul_team_backend(0, 0, N, IC, OC, 0.0f);
    MatmulSlice s = matmul_team_slice(N, IC);
    matmul_slice(be, s, 0, 0, OC, 1.0f, dout, OC, weight, IC, 0.0f, dinp, IC);
    if (gelu_inp)
        for (int i = s.i0; i < s.i0 + s.rows; i++)
            gelu_grad_span(dinp + (size_t)i * IC + s.j0, gelu_inp + (size_t)i * IC + s.j0, (size_t)s.cols);
#pragma omp barrier
}
static void linear_backward_input(float *dinp, const float *dout, const float *weight, int N, int IC, int OC) {
    linear_act_backward_input(dinp, NULL, dout, weight, N, IC, OC);
}

// dweight (OC,IC) += dout^T @ inp; dbias (OC) += column sums of dout: the weight gradient (W).
static void linear_backward_weight(float *dweight, float *dbias, const float *dout, const float *inp, int N, int IC,
                                   int OC) {
    KERNEL_TEAM(linear_backward_weight(dweight, dbias, dout, inp, N, IC, OC));
    matmul_team(1, 0, OC, IC, N, 1.0f, dout, OC, inp, IC, 1.0f, dweight, IC);
    if (dbias) column_sum_accumulate(dbias, dout, N, OC);
}

static void linear_backward(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                            const float *weight, int N, int IC, int OC) {
    linear_backward_input(dinp, dout, weight, N, IC, OC);
    linear_backward_weight(dweight, dbias, dout, inp, N, IC, OC);
}

// ---------------------------------------------------------------------------
// causal self-attention; qkv (B,T,3C) holds q | k | v, head h at [h*hs, (h+1)*hs)
//
// One thread computes a whole head (b, h) at a time, the threads of the team
// sharing the heads in equal runs (b-major: a thread takes the sequences
// whose rows the linear layers around give it, which are in its L2); K is
// packed transposed in a per-thread workspace that stays in cache, V, Q and
// dout read in place when the head is whole tiles (else packed there too).
// Queries go in blocks of ATT_MR rows: a block's scores are computed only for
// the keys its last query sees (the causal triangle and the diagonal block,
// not the whole T x T square), softmaxed (the block's rows phase by phase)
// and multiplied by V while in L1; the backward walks the same blocks. The
// products run on a register tile of ATT_MR rows by ATT_CW columns
// (att_tile), each output summing its depth in order, so a head's result does
// not depend on the thread count.
#if VEC_LANES == 16
#define ATT_MR 8  // AVX-512: 8 x 32, 16 accumulators in zmm
#elif VEC_LANES == 8
#define ATT_MR 6  // AVX2: 6 x 16, 12 accumulators in ymm
#else
#define ATT_MR 4  // NEON and portable: 4 x 8
#endif
#define ATT_NV 2
#define ATT_CW (ATT_NV * VEC_LANES)  // columns of a tile

// c (rows x cols; rows <= ATT_MR, cols <= ATT_CW) = alpha * A @ B, plus c when accumulate (as matmul's beta 1):
// A(r, k) = a[r * ar + k * ak] for k < K; row k of B at b + k * ldb, ATT_CW readable floats (the columns past
// cols are zero padding). Each element sums its depth k = 0, 1, ... in order.
static inline void att_tile(int rows, int cols, int K, const float *a, size_t ar, size_t ak, const float *b,
                            size_t ldb, float alpha, int accumulate, float *c, size_t ldc) {
    vf acc[ATT_MR][ATT_NV];
    const float *ap[ATT_MR];
    for (int r = 0; r < ATT_MR; r++) {
        ap[r] = a + (size_t)(r < rows ? r : rows - 1) * ar;  // (rows past `rows` repeat the last: not stored)
        for (int v = 0; v < ATT_NV; v++) acc[r][v] = vf_set1(0.0f);
    }
    for (int k = 0; k < K; k++) {
        vf bv[ATT_NV];
        for (int v = 0; v < ATT_NV; v++) bv[v] = vf_load(b + (size_t)k * ldb + v * VEC_LANES);
        for (int r = 0; r < ATT_MR; r++) {
            vf av = vf_set1(ap[r][(size_t)k * ak]);
            for (int v = 0; v < ATT_NV; v++) acc[r][v] += av * bv[v];
        }
    }
    for (int r = 0; r < rows; r++)
        for (int v = 0; v < ATT_NV; v++) {  // (whole vectors through registers: acc is never addressed)
            float *cv = c + (size_t)r * ldc + v * VEC_LANES;
            int n = cols - v * VEC_LANES;
            if (n >= VEC_LANES) {
                vf_store(cv, accumulate ? alpha * acc[r][v] + vf_load(cv) : alpha * acc[r][v]);
                continue;
            }
            float part[VEC_LANES];
            vf_store(part, alpha * acc[r][v]);
            for (int j = 0; j < n; j++) cv[j] = accumulate ? part[j] + cv[j] : part[j];
        }
}

// c (rows x n) = alpha * A @ B (+ c), by tiles of ATT_CW columns (B's rows padded to whole tiles)
static inline void att_rows(int rows, int n, int K, const float *a, size_t ar, size_t ak, const float *b, size_t ldb,
                            float alpha, int accumulate, float *c, size_t ldc) {
    for (int c0 = 0; c0 < n; c0 += ATT_CW)
        att_tile(rows, n - c0 < ATT_CW ? n - c0 : ATT_CW, K, a, ar, ak, b + c0, ldb, alpha, accumulate, c + c0, ldc);
}

static inline int att_pad(int n) { return (int)round_up_i64(n, ATT_CW); }

// Floats of one thread's workspace for a head of hs channels over n keys (the forward needs less).
static inline size_t attention_work_floats(int n, int hs) {
    return (size_t)hs * att_pad(n) + 3 * (size_t)att_pad(n) * att_pad(hs);
}

// dst (n x att_pad(cols)) = src rows (n x cols, ld apart), zero padded
static void att_pack_rows(float *dst, const float *src, size_t ld, int n, int cols) {
    int w = att_pad(cols), full = cols / VEC_LANES * VEC_LANES;
    for (int i = 0; i < n; i++) {
        const float *s = src + (size_t)i * ld;
        float *o = dst + (size_t)i * w;
        for (int d = 0; d < full; d += VEC_LANES) vf_store(o + d, vf_load(s + d));
        for (int d = full; d < w; d++) o[d] = d < cols ? s[d] : 0.0f;
    }
}
// The rows of src (n x cols, *ld apart) as att_tile reads B: in place when cols is a whole number of
// tiles (ATT_CW readable floats a row), else packed into dst (zero padded; *ld becomes att_pad(cols)).
static const float *att_rows_operand(float *dst, const float *src, size_t *ld, int n, int cols) {
    if (att_pad(cols) == cols) return src;
    att_pack_rows(dst, src, *ld, n, cols);
    *ld = (size_t)att_pad(cols);
    return dst;
}
// dst (cols x att_pad(n)) = the transpose of src rows (n x cols, ld apart), zero padded: squares of
// VEC_LANES rows by VEC_LANES columns transposed in registers, the last cols % VEC_LANES columns one
// float at a time
static void att_pack_transposed(float *dst, const float *src, size_t ld, int n, int cols) {
    int w = att_pad(n), full = cols / VEC_LANES * VEC_LANES;
    for (int i0 = 0; i0 < n; i0 += VEC_LANES) {  // (i0 + VEC_LANES <= w: w is a whole number of tiles)
        for (int d0 = 0; d0 < full; d0 += VEC_LANES) {
            vf v[VEC_LANES];  // row r: key i0 + r's channels d0..
            for (int r = 0; r < VEC_LANES; r++)
                v[r] = i0 + r < n ? vf_load(src + (size_t)(i0 + r) * ld + d0) : vf_set1(0.0f);
            vf_transpose_square(v);
            for (int c = 0; c < VEC_LANES; c++) vf_store(dst + (size_t)(d0 + c) * w + i0, v[c]);
        }
    }
    for (int d = 0; d < cols; d++) {
        float *o = dst + (size_t)d * w;
        if (d >= full)
            for (int i = 0; i < n; i++) o[i] = src[(size_t)i * ld + d];
        for (int i = d >= full ? n : (int)round_up_i64(n, VEC_LANES); i < w; i++) o[i] = 0.0f;
    }
}

// Row r of a block of rows (at p + r * ldp, r < rows <= ATT_MR) seeing n0 + r keys: row[0, n) <-
// softmax(row[0, n)), row[n, np) <- 0, and (with lse) lse[r] <- the log of its sum of exp. Whole vectors
// throughout: a row's last, partial one is read into lanes padded with -inf and its exponentials past n
// are zeroed (an exp per lane, not one per element as a scalar tail would take). The rows go through
// each phase (max, exponentials and sum, scaling) together: each phase's horizontal reductions and
// exponentials are independent chains across rows, which the core overlaps, where row by row they
// would wait on each other's latency.
static inline void att_softmax_block(float *p, size_t ldp, int rows, int n0, int np, float *lse) {
    const vi lane = vi_lane_ids();
    vf last[ATT_MR], e_last[ATT_MR];
    float mx[ATT_MR], sum[ATT_MR];
    for (int r = 0; r < rows; r++) {  // the maxima
        float *row = p + (size_t)r * ldp;
        int n = n0 + r, full = n / VEC_LANES * VEC_LANES, tail = n - full;
        if (full + VEC_LANES <= np) {
            last[r] = vf_select(lane < tail, vf_load(row + full), vf_set1(-INFINITY));
        } else {
            for (int i = 0; i < VEC_LANES; i++) last[r][i] = i < tail ? row[full + i] : -INFINITY;
        }
        vf mxv = last[r];
        for (int i = 0; i < full; i += VEC_LANES) mxv = vf_max(mxv, vf_load(row + i));
        mx[r] = vf_hmax(mxv);
    }
    for (int r = 0; r < rows; r++) {  // the exponentials and their sums
        float *row = p + (size_t)r * ldp;
        int n = n0 + r, full = n / VEC_LANES * VEC_LANES, tail = n - full;
        vf acc = vf_set1(0.0f);
        for (int i = 0; i < full; i += VEC_LANES) {
            vf e = vf_exp(vf_load(row + i) - mx[r]);
            vf_store(row + i, e);
            acc += e;
        }
        e_last[r] = vf_select(lane < tail, vf_exp(last[r] - mx[r]), vf_set1(0.0f));
        sum[r] = vf_hsum_tree(acc + e_last[r]);
    }
    for (int r = 0; r < rows; r++) {  // the probabilities, and the zeros past them
        float *row = p + (size_t)r * ldp;
        int n = n0 + r, full = n / VEC_LANES * VEC_LANES, tail = n - full;
        float inv = 1.0f / sum[r];
        for (int i = 0; i < full; i += VEC_LANES) vf_store(row + i, vf_load(row + i) * inv);
        vf e = e_last[r] * inv;  // (zero in the lanes past the tail)
        int i = full;
        if (full + VEC_LANES <= np) {  // whole vectors, the zeros past n included (no call to memcpy or memset a row)
            vf_store(row + full, e);
            for (i = full + VEC_LANES; i + VEC_LANES <= np; i += VEC_LANES) vf_store(row + i, vf_set1(0.0f));
        } else {
            memcpy(row + full, &e, sizeof(float) * tail);
            i = n;
        }
        for (; i < np; i++) row[i] = 0.0f;
        if (lse) lse[r] = mx[r] + logf(sum[r]);
    }
}

// One head's causal attention for Tq queries at positions pos0, pos0 + 1, ... over the keys [0, pos0 + Tq):
// query t's row at q + t * ldq, key and value u's at k and v + u * ldkv (hs channels each). Writes out row t
// (out + t * ldo), its probabilities p row t (p + t * ldp: softmax(scale * q k^T) over the keys it sees, zero
// from there to column np) and, with lse, lse[t] = the log of its sum of exp(scaled score). work:
// attention_work_floats(pos0 + Tq, hs) floats.
static void attention_head_forward(float *out, size_t ldo, float *p, size_t ldp, int np, float *lse, const float *q,
                                   size_t ldq, const float *k, const float *v, size_t ldkv, int pos0, int Tq, int hs,
                                   float scale, float *work) {
    int n = pos0 + Tq;
    float *kt = work;
    att_pack_transposed(kt, k, ldkv, n, hs);
    size_t ldv = ldkv;
    const float *vb = att_rows_operand(work + (size_t)hs * att_pad(n), v, &ldv, n, hs);
    for (int t0 = 0; t0 < Tq; t0 += ATT_MR) {
        int rows = Tq - t0 < ATT_MR ? Tq - t0 : ATT_MR, keys = pos0 + t0 + rows;  // (the block's last query's)
        float *pb = p + (size_t)t0 * ldp;
        att_rows(rows, keys, hs, q + (size_t)t0 * ldq, ldq, 1, kt, att_pad(n), scale, 0, pb, ldp);
        att_softmax_block(pb, ldp, rows, pos0 + t0 + 1, np, lse ? lse + t0 : NULL);
        att_rows(rows, hs, keys, pb, ldp, 1, vb, ldv, 1.0f, 0, out + (size_t)t0 * ldo, ldo);
    }
}

// The backward of attention_head_forward (the same arguments; p its probabilities) from dout (row t at
// dout + t * ldo): dq row t (dq + t * lddq) overwritten; dk and dv rows u < pos0 + Tq (+ u * lddkv)
// overwritten, or added to with accumulate. ds: Tq rows ldds >= pos0 + Tq apart (the score gradients).
static void attention_head_backward(float *dq, size_t lddq, float *dk, float *dv, size_t lddkv, int accumulate,
                                    float *ds, size_t ldds, const float *p, size_t ldp, const float *dout, size_t ldo,
                                    const float *q, size_t ldq, const float *k, const float *v, size_t ldkv, int pos0,
                                    int Tq, int hs, float scale, float *work) {
    int n = pos0 + Tq, hsp = att_pad(hs);
    float *vt = work, *kp = vt + (size_t)hs * att_pad(n), *qp = kp + (size_t)n * hsp, *dop = qp + (size_t)Tq * hsp;
    att_pack_transposed(vt, v, ldkv, n, hs);
    size_t ldk = ldkv, ldqb = ldq, ldob = ldo;  // (k, q and dout as att_tile's B: in place or packed)
    const float *kb = att_rows_operand(kp, k, &ldk, n, hs), *qb = att_rows_operand(qp, q, &ldqb, Tq, hs);
    const float *dob = att_rows_operand(dop, dout, &ldob, Tq, hs);
    for (int t0 = 0; t0 < Tq; t0 += ATT_MR) {
        int rows = Tq - t0 < ATT_MR ? Tq - t0 : ATT_MR, keys = pos0 + t0 + rows;
        float *db = ds + (size_t)t0 * ldds;
        att_rows(rows, keys, hs, dout + (size_t)t0 * ldo, ldo, 1, vt, att_pad(n), 1.0f, 0, db, ldds);  // dp = dO v^T
        // ds = p * (dp - sum_u p * dp) over the keys seen, then zeros: the block's dot products first (independent
        // reductions the core overlaps), then the rows
        float dot[ATT_MR];
        for (int r = 0; r < rows; r++)
            dot[r] = vec_dot(p + (size_t)(t0 + r) * ldp, db + (size_t)r * ldds, pos0 + t0 + r + 1);
        for (int r = 0; r < rows; r++) {
            float *row = db + (size_t)r * ldds;
            const float *prow = p + (size_t)(t0 + r) * ldp;
            int seen = pos0 + t0 + r + 1, end = seen - 1 + ATT_MR < n ? seen - 1 + ATT_MR : n;
            for (int u = 0; u < seen; u++) row[u] = prow[u] * (row[u] - dot[r]);
            memset(row + seen, 0, sizeof(float) * (end - seen));  // (what the key blocks below read past it)
        }
        att_rows(rows, hs, keys, db, ldds, 1, kb, ldk, scale, 0, dq + (size_t)t0 * lddq, lddq);  // dq = ds k * scale
    }
    for (int u0 = 0; u0 < n; u0 += ATT_MR) {  // key blocks: the queries from the block's first key on see them
        int rows = n - u0 < ATT_MR ? n - u0 : ATT_MR, t0 = u0 > pos0 ? u0 - pos0 : 0, depth = Tq - t0;
        att_rows(rows, hs, depth, ds + (size_t)t0 * ldds + u0, 1, ldds, qb + (size_t)t0 * ldqb, ldqb, scale,
                 accumulate, dk + (size_t)u0 * lddkv, lddkv);  // dk = ds^T q * scale
        att_rows(rows, hs, depth, p + (size_t)t0 * ldp + u0, 1, ldp, dob + (size_t)t0 * ldob, ldob, 1.0f, accumulate,
                 dv + (size_t)u0 * lddkv, lddkv);  // dv = p^T dO
    }
}

// Offset of head h of sequence b in a (B,T,3C) qkv buffer (or its gradient):
// its q; k is C further, v 2C further; rows are 3C apart.
static inline size_t qkv_head_offset(int b, int h, int T, int C, int NH) {
    return (size_t)b * T * 3 * C + (size_t)h * (C / NH);
}

// out (B,T,C); att (B,NH,T,T) saves the softmax probabilities (zero above the
// diagonal); lse (B,NH,T), when not NULL, the natural log of each row's sum of
// exp(scaled score) (what the GPU's flash attention saves instead of att).
static void attention_forward(float *out, float *att, float *lse, const float *qkv, int B, int T, int C, int NH) {
    KERNEL_TEAM(attention_forward(out, att, lse, qkv, B, T, C, NH));
    int hs = C / NH;
    float scale = 1.0f / sqrtf((float)hs);
    size_t C3 = 3 * (size_t)C;
    float *work = (float *)alignedMallocCheck(sizeof(float) * attention_work_floats(T, hs));
#pragma omp for schedule(static)
    for (int bh = 0; bh < B * NH; bh++) {
        int b = bh / NH, h = bh % NH;
        const float *q = qkv + qkv_head_offset(b, h, T, C, NH);
        attention_head_forward(out + (size_t)b * T * C + (size_t)h * hs, C, att + (size_t)bh * T * T, T, T,
                               lse ? lse + (size_t)bh * T : NULL, q, C3, q + C, q + 2 * C, C3, 0, T, hs, scale, work);
    }
    free(work);
}

// dqkv (B,T,3C) overwritten; scratch: omp_threads() * T * T floats.
static void attention_backward(float *dqkv, float *scratch, const float *dout, const float *qkv, const float *att,
                               int B, int T, int C, int NH) {
    KERNEL_TEAM(attention_backward(dqkv, scratch, dout, qkv, att, B, T, C, NH));
    int hs = C / NH;
    float scale = 1.0f / sqrtf((float)hs);
    size_t C3 = 3 * (size_t)C;
    float *work = (float *)alignedMallocCheck(sizeof(float) * attention_work_floats(T, hs));
    float *ds = scratch + (size_t)omp_thread_id() * T * T;
#pragma omp for schedule(static)
    for (int bh = 0; bh < B * NH; bh++) {
        int b = bh / NH, h = bh % NH;
        const float *q = qkv + qkv_head_offset(b, h, T, C, NH);
        float *dq = dqkv + qkv_head_offset(b, h, T, C, NH);
        attention_head_backward(dq, C3, dq + C, dq + 2 * C, C3, 0, ds, T, att + (size_t)bh * T * T, T,
                                dout + (size_t)b * T * C + (size_t)h * hs, C, q, C3, q + C, q + 2 * C, C3, 0, T, hs,
                                scale, work);
    }
    free(work);
}

// ---------------------------------------------------------------------------
// classifier: logits (N,V) = x (N,C) @ wte[:V]^T, softmax cross-entropy, and
// (when dloss != 0) its backward in place: logits <- dloss * (softmax - onehot).
// Only the V real rows of wte are touched; padded rows never enter.

// losses (N) per position; returns their sum. targets may be NULL (no loss:
// nothing to do). With dloss, one exponential per logit: the row becomes
// exp(logit - max), then is scaled by dloss / sum (a pass in L2: a row of
// GPT-2's vocabulary is 200 KB).
static double softmax_crossentropy(float *logits, float *losses, const int *targets, int N, int V, float dloss) {
    if (!targets) return 0.0;
    double total = 0.0;
#pragma omp parallel for reduction(+ : total)
    for (int i = 0; i < N; i++) {
        float *row = logits + (size_t)i * V;
        int y = targets[i];
        float mx = vec_max(row, V), target_logit = row[y];
        float sum = vec_exp_sum(row, V, mx, 1.0f, dloss != 0.0f);
        losses[i] = mx + logf(sum) - target_logit;
        total += losses[i];
        if (dloss != 0.0f) {
            float scale = dloss / sum;
            for (int v = 0; v < V; v++) row[v] *= scale;
            row[y] -= dloss;
        }
    }
    return total;
}

#endif  // LLMC_CPU_LAYERS_H
