// optimizer.h: AdamW (decoupled weight decay on 2-D tensors only, bias
// correction) and the global gradient norm, on ranges of the flat parameter
// buffer. ZeRO shards are ranges too: a rank updates [begin, end) with its own
// optimizer state, indexed from begin. The update follows torch.optim.AdamW's
// arithmetic order so the CPU trainer matches PyTorch to rounding.
#ifndef LLMC_OPTIMIZER_H
#define LLMC_OPTIMIZER_H

#include <math.h>
#include <stdint.h>

#include "cpu_vec.h"  // defines: vec_sum_squares
#include "model.h"    // defines: ParamLayout, ParamTensor

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

// One AdamW step on params[begin, end). grads are indexed like params (or from
// begin, with ADAMW_GRADS_LOCAL in flags); m and v are indexed from begin.
// grad_scale multiplies every gradient (the clip coefficient).
static void adamw_update_range(const ParamLayout *pl, float *params, float *grads, int flags,
                               float *m, float *v, int64_t begin, int64_t end, const AdamWConfig *cfg,
                               float grad_scale) {
    // scalars in locals: stores through params cannot alias them, so the loop vectorises
    const float beta1 = cfg->beta1, beta2 = cfg->beta2, eps = cfg->eps;
    const float step_size = cfg->lr / (1.0f - powf(beta1, (float)cfg->step));
    const float inv_bc2_sqrt = 1.0f / sqrtf(1.0f - powf(beta2, (float)cfg->step));
    const int zero_grads = flags & ADAMW_ZERO_GRADS;
    float *g = flags & ADAMW_GRADS_LOCAL ? grads - begin : grads;
    float *mm = m - begin, *vv = v - begin;
#pragma omp parallel
    for (int ti = 0; ti < pl->num_tensors; ti++) {
        const ParamTensor *t = &pl->tensors[ti];
        // the tensor plus its alignment gap, clipped to [begin, end)
        int64_t t_end = ti + 1 < pl->num_tensors ? pl->tensors[ti + 1].offset : pl->num_elements;
        int64_t lo = t->offset > begin ? t->offset : begin;
        int64_t hi = t_end < end ? t_end : end;
        if (lo >= hi) continue;
        const float decay = t->decay ? 1.0f - cfg->lr * cfg->weight_decay : 1.0f;
#pragma omp for schedule(static) nowait
        for (int64_t i = lo; i < hi; i++) {
            float gi = g[i] * grad_scale;
            if (zero_grads) g[i] = 0.0f;
            float p = params[i] * decay;
            float mi = mm[i] + (1.0f - beta1) * (gi - mm[i]);
            float vi = beta2 * vv[i] + (1.0f - beta2) * gi * gi;
            mm[i] = mi;
            vv[i] = vi;
            float denom = sqrtf(vi) * inv_bc2_sqrt + eps;
            params[i] = p - step_size * (mi / denom);
        }
    }
}

#endif  // LLMC_OPTIMIZER_H
