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

// out (N,C) = (inp - mean) * rstd * weight + bias; saves mean (N), rstd (N).
static void layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *weight,
                              const float *bias, int N, int C) {
    KERNEL_TEAM(layernorm_forward(out, mean, rstd, inp, weight, bias, N, C));
#pragma omp for schedule(static)
    for (int i = 0; i < N; i++) {
        const float *x = inp + (size_t)i * C;
        float m = 0.0f;
        for (int c = 0; c < C; c++) m += x[c];
        m /= C;
        float v = 0.0f;
        for (int c = 0; c < C; c++) { float d = x[c] - m; v += d * d; }
        v /= C;
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

// dinp (N,C) += d/dinp; dweight (C) += ...; dbias (C) += ... .
static void layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                               const float *weight, const float *mean, const float *rstd, int N, int C) {
    KERNEL_TEAM(layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C));
#pragma omp for schedule(static)
    for (int i = 0; i < N; i++) {
        const float *d = dout + (size_t)i * C;
        const float *x = inp + (size_t)i * C;
        float m = mean[i], s = rstd[i];
        float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
        for (int c = 0; c < C; c++) {
            float norm = (x[c] - m) * s;
            float dnorm = weight[c] * d[c];
            dnorm_mean += dnorm;
            dnorm_norm_mean += dnorm * norm;
        }
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

// VEC_LANES lanes of GELU (or, with grad, of its derivative times dout)
static inline vf gelu_vec(vf x) {
    vf th = vf_tanh(GELU_SCALING_FACTOR * (x + 0.044715f * x * x * x));
    return 0.5f * x * (1.0f + th);
}
static inline vf gelu_grad_vec(vf x, vf dout) {
    vf th = vf_tanh(GELU_SCALING_FACTOR * (x + 0.044715f * x * x * x));
    vf sech2 = 1.0f - th * th;
    vf local = 0.5f * (1.0f + th) + x * 0.5f * sech2 * GELU_SCALING_FACTOR * (1.0f + 3.0f * 0.044715f * x * x);
    return dout * local;
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
static void gelu_forward(float *out, const float *inp, size_t n) {
    KERNEL_TEAM(gelu_forward(out, inp, n));
    const size_t block = 64 * VEC_LANES;
    size_t blocks = (n + block - 1) / block;
#pragma omp for schedule(static)
    for (size_t b = 0; b < blocks; b++)
        gelu_span(out + b * block, inp + b * block, n - b * block < block ? n - b * block : block);
}

static void gelu_backward_inplace(float *dinout, const float *inp, size_t n) {
    KERNEL_TEAM(gelu_backward_inplace(dinout, inp, n));
    size_t blocks = (n + VEC_LANES - 1) / VEC_LANES;
#pragma omp for schedule(static)
    for (size_t b = 0; b < blocks; b++) {
        size_t i = b * VEC_LANES, len = n - i < VEC_LANES ? n - i : VEC_LANES;
        if (len == VEC_LANES) { vf_store(dinout + i, gelu_grad_vec(vf_load(inp + i), vf_load(dinout + i))); continue; }
        float x[VEC_LANES] = {0}, d[VEC_LANES] = {0};
        memcpy(x, inp + i, len * sizeof(float));
        memcpy(d, dinout + i, len * sizeof(float));
        vf g = gelu_grad_vec(vf_load(x), vf_load(d));
        memcpy(dinout + i, &g, len * sizeof(float));
    }
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

// dinp (N,IC) = dout @ weight (overwritten): the input gradient (B).
static void linear_backward_input(float *dinp, const float *dout, const float *weight, int N, int IC, int OC) {
    KERNEL_TEAM(linear_backward_input(dinp, dout, weight, N, IC, OC));
    matmul_team(0, 0, N, IC, OC, 1.0f, dout, OC, weight, IC, 0.0f, dinp, IC);
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

// Offset of head h of sequence b in a (B,T,3C) qkv buffer (or its gradient):
// its q; k is C further, v 2C further; rows are 3C apart.
static inline size_t qkv_head_offset(int b, int h, int T, int C, int NH) {
    return (size_t)b * T * 3 * C + (size_t)h * (C / NH);
}

// out (B,T,C); att (B,NH,T,T) saves the softmax probabilities (zero above the
// diagonal); lse (B,NH,T), when not NULL, the natural log of each row's sum of
// exp(scaled score) (what the GPU's flash attention saves instead of att).
static void attention_forward(float *out, float *att, float *lse, const float *qkv, int B, int T, int C, int NH) {
    int hs = C / NH;
    float scale = 1.0f / sqrtf((float)hs);
    size_t C3 = 3 * (size_t)C;
#pragma omp parallel for collapse(2) schedule(dynamic)
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            const float *q = qkv + qkv_head_offset(b, h, T, C, NH), *k = q + C, *v = q + 2 * C;
            float *p = att + ((size_t)b * NH + h) * T * T;
            // p (T,T) = q @ k^T, lower triangle only used
            matmul(0, 1, T, T, hs, scale, q, (int)C3, k, (int)C3, 0.0f, p, T);
            for (int t = 0; t < T; t++) {
                float *row = p + (size_t)t * T;
                float mx = vec_max(row, t + 1);
                float sum = vec_exp_sum(row, t + 1, mx, 1.0f, 1);
                if (lse) lse[((size_t)b * NH + h) * T + t] = mx + logf(sum);
                float inv = 1.0f / sum;
                for (int u = 0; u <= t; u++) row[u] *= inv;
                for (int u = t + 1; u < T; u++) row[u] = 0.0f;
            }
            // out (T,hs) = p @ v
            matmul(0, 0, T, hs, T, 1.0f, p, T, v, (int)C3, 0.0f, out + (size_t)b * T * C + (size_t)h * hs, C);
        }
    }
}

// dqkv (B,T,3C) overwritten; scratch: omp_threads() * T * T floats.
static void attention_backward(float *dqkv, float *scratch, const float *dout, const float *qkv, const float *att,
                               int B, int T, int C, int NH) {
    int hs = C / NH;
    float scale = 1.0f / sqrtf((float)hs);
    size_t C3 = 3 * (size_t)C;
#pragma omp parallel for collapse(2) schedule(dynamic)
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            const float *q = qkv + qkv_head_offset(b, h, T, C, NH), *k = q + C, *v = q + 2 * C;
            float *dq = dqkv + qkv_head_offset(b, h, T, C, NH), *dk = dq + C, *dv = dq + 2 * C;
            const float *p = att + ((size_t)b * NH + h) * T * T;
            const float *dO = dout + (size_t)b * T * C + (size_t)h * hs;
            float *ds = scratch + (size_t)omp_thread_id() * T * T;
            // dp (T,T) = dO @ v^T
            matmul(0, 1, T, T, hs, 1.0f, dO, C, v, (int)C3, 0.0f, ds, T);
            // ds = p * (dp - sum_u p*dp), causal part only
            for (int t = 0; t < T; t++) {
                float *row = ds + (size_t)t * T;
                const float *prow = p + (size_t)t * T;
                float dot = vec_dot(prow, row, t + 1);
                for (int u = 0; u <= t; u++) row[u] = prow[u] * (row[u] - dot);
                for (int u = t + 1; u < T; u++) row[u] = 0.0f;
            }
            matmul(0, 0, T, hs, T, scale, ds, T, k, (int)C3, 0.0f, dq, (int)C3);   // dq = ds @ k * scale
            matmul(1, 0, T, hs, T, scale, ds, T, q, (int)C3, 0.0f, dk, (int)C3);   // dk = ds^T @ q * scale
            matmul(1, 0, T, hs, T, 1.0f, p, T, dO, C, 0.0f, dv, (int)C3);          // dv = p^T @ dO
        }
    }
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
