// model_init.h: GPT-2 weight initialisation on the host, over the flat
// parameter buffer, shared by the CPU and GPU trainers so that the same seed
// gives the same weights everywhere.
#ifndef LLMC_MODEL_INIT_H
#define LLMC_MODEL_INIT_H

#include <math.h>
#include <string.h>

#include "model.h"      // defines: ParamLayout, param_layout_init, ParamTensor, PK_WTE, ...
#include "param_map.h"  // defines: param_slice_from_global
#include "rand.h"       // defines: rng_seed, rng_skip_normals, rng_normal_fill

// GPT-2 initialisation: matmul weights and embeddings normal(0, 0.02), the two
// residual projections scaled by 1/sqrt(2L), biases 0, LayerNorm weights 1.
// Tensors are drawn in the whole model's order from one stream, so any
// program that follows the layout gets the same weights from the same seed,
// and a rank holding part of the model (model.h's layout of a pipeline stage
// or a tensor-parallel slice) gets its part of them exactly: the draws of the
// tensors it does not hold are skipped, a split tensor is drawn whole and its
// slice kept (param_map.h).
static void gpt2_init_params(const ParamLayout *pl, float *params, uint64_t seed) {
    Rng rng;
    rng_seed(&rng, seed);
    ParamLayout global;
    param_layout_init(&global, &pl->cfg);
    float resid_std = 0.02f / sqrtf(2.0f * (float)pl->cfg.num_layers);
    float *scratch = NULL;  // a split tensor's global values
    memset(params, 0, sizeof(float) * (size_t)pl->num_elements);  // (gaps and wte's padded rows stay zero)
    for (int i = 0; i < global.num_tensors; i++) {
        const ParamTensor *g = &global.tensors[i];
        int at = pl->tensor_at[g->id];
        int64_t draws = g->kind == PK_WTE ? (int64_t)pl->cfg.vocab_size * pl->cfg.channels : g->numel;
        int normal = g->kind == PK_ATTPROJW || g->kind == PK_FCPROJW || g->kind == PK_WTE || g->kind == PK_WPE ||
                     g->kind == PK_QKVW || g->kind == PK_FCW;
        if (at < 0) {
            if (normal) rng_skip_normals(&rng, draws);
            continue;
        }
        const ParamTensor *t = &pl->tensors[at];
        float *p = params + t->offset;
        if (t->split != SPLIT_NONE) {
            if (!scratch) {
                int64_t most = 0;
                for (int k = 0; k < global.num_tensors; k++)
                    if (global.tensors[k].numel > most) most = global.tensors[k].numel;
                scratch = (float *)mallocCheck(sizeof(float) * (size_t)most);
            }
            memset(scratch, 0, sizeof(float) * (size_t)g->numel);
            p = scratch;
        }
        if (g->kind == PK_LN1W || g->kind == PK_LN2W || g->kind == PK_LNFW)
            for (int64_t j = 0; j < g->numel; j++) p[j] = 1.0f;
        else if (normal)
            rng_normal_fill(&rng, p, draws, g->kind == PK_ATTPROJW || g->kind == PK_FCPROJW ? resid_std : 0.02f);
        if (t->split != SPLIT_NONE) param_slice_from_global(pl, &global, t, scratch, params);
    }
    free(scratch);
    param_layout_free(&global);
}

#endif  // LLMC_MODEL_INIT_H
