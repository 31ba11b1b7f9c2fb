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
// follows the layout gets the same weights from the same seed.
static void gpt2_init_params(const ParamLayout *pl, float *params, uint64_t seed) {
    Rng rng;
    rng_seed(&rng, seed);
    float resid_std = 0.02f / sqrtf(2.0f * (float)pl->cfg.num_layers);
    memset(params, 0, sizeof(float) * (size_t)pl->num_elements);
    for (int i = 0; i < pl->num_tensors; i++) {
        const ParamTensor *t = &pl->tensors[i];
        float *p = params + t->offset;
        switch (t->kind) {
            case PK_LN1W: case PK_LN2W: case PK_LNFW:
                for (int64_t j = 0; j < t->numel; j++) p[j] = 1.0f;
                break;
            case PK_ATTPROJW: case PK_FCPROJW:
                rng_normal_fill(&rng, p, t->numel, resid_std);
                break;
            case PK_WTE:  // padded rows stay zero
                rng_normal_fill(&rng, p, (int64_t)pl->cfg.vocab_size * pl->cfg.channels, 0.02f);
                break;
            case PK_WPE: case PK_QKVW: case PK_FCW:
                rng_normal_fill(&rng, p, t->numel, 0.02f);
                break;
            default:  // biases
                break;
        }
    }
}

#endif  // LLMC_MODEL_INIT_H
