// model_init.h: GPT-2 weight initialisation on the host, over the flat
// parameter buffer, shared by the CPU and GPU trainers so that the same seed
// gives the same weights everywhere.
#ifndef LLMC_MODEL_INIT_H
#define LLMC_MODEL_INIT_H

#include <math.h>
#include <string.h>

#include "model.h"
#include "rand.h"

// GPT-2 initialisation: matmul weights and embeddings normal(0, 0.02), the two
// residual projections scaled by 1/sqrt(2L), biases 0, LayerNorm weights 1.
// Tensors are drawn in layout order from one stream, so any program that
// follows the layout gets the same weights from the same seed. Only the
// tensors inside the n ranges [lo[k], hi[k]) are written (each with its
// alignment gap); the others' draws are skipped, so a pipeline stage gets its
// tensors exactly as the whole model's initialisation would.
static void gpt2_init_params_in(const ParamLayout *pl, float *params, uint64_t seed, const int64_t *lo,
                                const int64_t *hi, int n) {
    Rng rng;
    rng_seed(&rng, seed);
    float resid_std = 0.02f / sqrtf(2.0f * (float)pl->cfg.num_layers);
    for (int i = 0; i < pl->num_tensors; i++) {
        const ParamTensor *t = &pl->tensors[i];
        int64_t end = i + 1 < pl->num_tensors ? pl->tensors[i + 1].offset : pl->num_elements;
        int held = 0;
        for (int k = 0; k < n; k++) held |= t->offset >= lo[k] && end <= hi[k];
        int64_t draws = t->kind == PK_WTE ? (int64_t)pl->cfg.vocab_size * pl->cfg.channels : t->numel;
        int normal = t->kind == PK_ATTPROJW || t->kind == PK_FCPROJW || t->kind == PK_WTE || t->kind == PK_WPE ||
                     t->kind == PK_QKVW || t->kind == PK_FCW;
        if (!held) {
            if (normal) rng_skip_normals(&rng, draws);
            continue;
        }
        float *p = params + t->offset;
        memset(p, 0, sizeof(float) * (size_t)(end - t->offset));  // (wte's padded rows stay zero)
        if (t->kind == PK_LN1W || t->kind == PK_LN2W || t->kind == PK_LNFW)
            for (int64_t j = 0; j < t->numel; j++) p[j] = 1.0f;
        else if (normal)
            rng_normal_fill(&rng, p, draws,
                            t->kind == PK_ATTPROJW || t->kind == PK_FCPROJW ? resid_std : 0.02f);
    }
}

static void gpt2_init_params(const ParamLayout *pl, float *params, uint64_t seed) {
    int64_t lo = 0, hi = pl->num_elements;
    gpt2_init_params_in(pl, params, seed, &lo, &hi, 1);
}

#endif  // LLMC_MODEL_INIT_H
