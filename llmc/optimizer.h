// optimizer.h: AdamW (decoupled weight decay on 2-D tensors only, bias
// correction) and the global gradient norm, on ranges of the flat parameter
// buffer. ZeRO shards are ranges too: a rank updates [begin, end) with its own
// optimizer state, indexed from begin. The update follows torch.optim.AdamW's
// arithmetic order so the CPU trainer matches PyTorch to rounding.
#ifndef LLMC_OPTIMIZER_H
#define LLMC_OPTIMIZER_H

#include <math.h>
#include <stdint.h>

#include "ckpt_stage.h"  // defines: CKPT_STAGE_CHUNK, ckpt_stage_chunks
#include "cpu_vec.h"     // defines: vec_sum_squares, vec_copy_streaming, vec_stream_fence
#include "crc32c.h"      // defines: crc32c_update
#include "model.h"       // defines: ParamLayout, ParamTensor
#include "utils.h"       // defines: ceil_div_i64

typedef struct {
    float lr, beta1, beta2, eps, weight_decay;
    int step;  // 1-based step number, for bias correction
} AdamWConfig;

// Sum of squares of g[0..n) in double, in fixed blocks summed in order: the
// same result for any thread count.
static double sum_of_squares(const float *g, int64_t n) {
    const int64_t block = 1 << 16;
    int64_t nblocks = (n + block - 1) / block;
    double *partial = (double *)mallocCheck(sizeof(double) * (size_t)(nblocks > 0 ? nblocks : 1));
#pragma omp parallel for schedule(static)
    for (int64_t b = 0; b < nblocks; b++) {
        int64_t len = n - b * block < block ? n - b * block : block;
        partial[b] = vec_sum_squares(g + b * block, len);
    }
    double total = 0.0;
    for (int64_t b = 0; b < nblocks; b++) total += partial[b];
    free(partial);
    return total;
}

// Clip coefficient as torch.nn.utils.clip_grad_norm_: min(1, clip / (norm + 1e-6)); clip 0 = off.
static inline float grad_clip_scale(float norm, float clip) {
    if (clip <= 0.0f) return 1.0f;
    float s = clip / (norm + 1e-6f);
    return s < 1.0f ? s : 1.0f;
}

#define ADAMW_GRADS_LOCAL 1  // grads are indexed from begin (a shard), not like params
#define ADAMW_ZERO_GRADS 2   // set each gradient to 0 once read: the next step needs no zeroing pass

// A step's scalars, and where its gradients and moments are indexed from (an
// update's locals: stores through the buffers cannot alias them, so the loops
// vectorise).
typedef struct {
    float beta1, beta2, eps, step_size, inv_bc2_sqrt, grad_scale;
    int zero_grads;
    float *g, *m, *v;  // indexed like params
} AdamWStep;

// The step cfg over [begin, ...) (grads, m, v as adamw_update_range takes them).
static inline AdamWStep adamw_step(const AdamWConfig *cfg, float grad_scale, int flags, float *grads, float *m,
                                   float *v, int64_t begin) {
    AdamWStep s = {cfg->beta1, cfg->beta2, cfg->eps, cfg->lr / (1.0f - powf(cfg->beta1, (float)cfg->step)),
                   1.0f / sqrtf(1.0f - powf(cfg->beta2, (float)cfg->step)), grad_scale, flags & ADAMW_ZERO_GRADS,
                   flags & ADAMW_GRADS_LOCAL ? grads - begin : grads, m - begin, v - begin};
    return s;
}

// AdamW on params[lo, hi), all of one tensor (decay: its weight decay factor), with zero_grads a
// constant where it is inlined, so that each of adamw_span's two calls is one branch-free loop that
// vectorises (sqrtf is one vector instruction with the Makefile's -fno-math-errno). s comes by value,
// so that its fields stay in registers while the stores go through its pointers.
static inline __attribute__((always_inline)) void adamw_span_loop(AdamWStep s, float *params, int64_t lo, int64_t hi,
                                                                  float decay, int zero_grads) {
    for (int64_t i = lo; i < hi; i++) {
        float gi = s.g[i] * s.grad_scale;
        if (zero_grads) s.g[i] = 0.0f;
        float p = params[i] * decay;
        float mi = s.m[i] + (1.0f - s.beta1) * (gi - s.m[i]);
        float vi = s.beta2 * s.v[i] + (1.0f - s.beta2) * gi * gi;
        s.m[i] = mi;
        s.v[i] = vi;
        float denom = sqrtf(vi) * s.inv_bc2_sqrt + s.eps;
        params[i] = p - s.step_size * (mi / denom);
    }
}
// Every update below runs this, so that they agree to the bit.
static inline void adamw_span(AdamWStep s, float *params, int64_t lo, int64_t hi, float decay) {
    if (s.zero_grads) adamw_span_loop(s, params, lo, hi, decay, 1);
    else adamw_span_loop(s, params, lo, hi, decay, 0);
}

// One AdamW step on params[begin, end). grads are indexed like params (or from
// begin, with ADAMW_GRADS_LOCAL in flags); m and v are indexed from begin.
// grad_scale multiplies every gradient (the clip coefficient).
static void adamw_update_range(const ParamLayout *pl, float *params, float *grads, int flags,
                               float *m, float *v, int64_t begin, int64_t end, const AdamWConfig *cfg,
                               float grad_scale) {
    const AdamWStep st = adamw_step(cfg, grad_scale, flags, grads, m, v, begin);
#pragma omp parallel
    for (int ti = 0; ti < pl->num_tensors; ti++) {
        const ParamTensor *t = &pl->tensors[ti];
        // the tensor plus its alignment gap, clipped to [begin, end)
        int64_t t_end = ti + 1 < pl->num_tensors ? pl->tensors[ti + 1].offset : pl->num_elements;
        int64_t lo = t->offset > begin ? t->offset : begin;
        int64_t hi = t_end < end ? t_end : end;
        if (lo >= hi) continue;
        const float decay = t->decay ? 1.0f - cfg->lr * cfg->weight_decay : 1.0f;
        const int64_t span = 4096, spans = ceil_div_i64(hi - lo, span);  // (threads take whole spans)
#pragma omp for schedule(static) nowait
        for (int64_t k = 0; k < spans; k++) {
            int64_t s0 = lo + k * span, s1 = s0 + span < hi ? s0 + span : hi;
            adamw_span(st, params, s0, s1, decay);
        }
    }
}

// adamw_update_range over [lo, hi) (m and v indexed from lo) that also writes
// its results, the weights, m and v, into staging as a checkpoint's copy of
// [lo, hi) lays them out (ckpt_stage.h: state s at staging + s (hi - lo)),
// and takes each staged chunk's CRC32C into crcs[k] (NULL: none): a
// checkpoint's staging copy with no pass of its own over the states. Block
// by block, the update runs as adamw_update_range's (the same results, to
// the bit), then its results, still in cache, go to staging with streaming
// stores and into the CRC32C. A team's threads share the chunks.
static void adamw_update_staged(const ParamLayout *pl, float *params, float *grads, int flags, float *m, float *v,
                                int64_t lo, int64_t hi, const AdamWConfig *cfg, float grad_scale, float *staging,
                                uint32_t *crcs) {
    const AdamWStep st = adamw_step(cfg, grad_scale, flags, grads, m, v, lo);
    const int64_t n = hi - lo, chunks = ckpt_stage_chunks(n) / 3;
    const int64_t block = 4096;  // elements updated, then staged from cache (48 KB of results)
#pragma omp parallel
    {
#pragma omp for schedule(dynamic, 1)
        for (int64_t c = 0; c < chunks; c++) {
            const int64_t c0 = lo + c * CKPT_STAGE_CHUNK, c1 = c0 + CKPT_STAGE_CHUNK < hi ? c0 + CKPT_STAGE_CHUNK : hi;
            uint32_t crc[3] = {0, 0, 0};
            int ti = 0;
            for (int64_t b0 = c0; b0 < c1; b0 += block) {
                const int64_t b1 = b0 + block < c1 ? b0 + block : c1;
                for (int64_t i0 = b0; i0 < b1;) {  // each tensor's part of the block (its decay)
                    int64_t t_end;
                    while ((t_end = ti + 1 < pl->num_tensors ? pl->tensors[ti + 1].offset : pl->num_elements) <= i0) ti++;
                    const int64_t i1 = t_end < b1 ? t_end : b1;
                    const float decay = pl->tensors[ti].decay ? 1.0f - cfg->lr * cfg->weight_decay : 1.0f;
                    adamw_span(st, params, i0, i1, decay);
                    i0 = i1;
                }
                const float *res[3] = {params + b0, st.m + b0, st.v + b0};
                for (int s = 0; s < 3; s++) {
                    vec_copy_streaming(staging + s * n + (b0 - lo), res[s], b1 - b0);
                    if (crcs) crc[s] = crc32c_update(crc[s], res[s], sizeof(float) * (size_t)(b1 - b0));
                }
            }
            if (crcs)
                for (int s = 0; s < 3; s++) crcs[s * chunks + c] = crc[s];
        }
        vec_stream_fence();  // (each thread's streaming stores, before the writer reads them)
    }
}

#endif  // LLMC_OPTIMIZER_H
