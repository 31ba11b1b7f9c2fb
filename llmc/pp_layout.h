// pp_layout.h: which layers each pipeline stage runs, and which ranges of the
// global flat parameter buffer (model.h) it holds. Stages are numbered
// g = chunk * pp + rank (pp_schedule.h); stage 0 also holds the embeddings
// (wte, wpe), the last stage ln_f and the classifier, which is wte again
// (tied): both ends hold a copy of wte. Each stage's holding is a list of
// ranges of the one flat order, so ZeRO shards, checkpoints and model files
// see a stage's tensors as what they are globally.
#ifndef LLMC_PP_LAYOUT_H
#define LLMC_PP_LAYOUT_H

#include <stdio.h>
#include <stdlib.h>

#include "model.h"

#define PP_MAX_RANGES 4  // a stage's: wte, wpe, the layers, ln_f
#define PP_MAX_RANK_RANGES (PP_MAX_RANGES * 127)  // a rank's, over its chunks (--virtual-stages <= 127)

typedef struct {
    int pp, v, stages;  // pipeline ranks, chunks per rank, stages = pp * v
    int *first_layer;   // (stages + 1): stage g runs layers [first_layer[g], first_layer[g + 1])
} PPLayout;

typedef struct { int64_t lo, hi; } PPRange;

static inline void pp_layout_free(PPLayout *pl) {
    free(pl->first_layer);
    pl->first_layer = NULL;
}

// Layers over pp * v stages: as --pp-layers lists them (comma-separated, one
// count per stage, "" for even), or as evenly as they go, the layers left over
// going to the stages between the ends first (the ends also hold the
// embeddings and the classifier). 0, or 1 with why in err.
static inline int pp_layout_init(PPLayout *pl, int num_layers, int pp, int v, const char *pp_layers, char *err,
                                 size_t errlen) {
    pl->pp = pp, pl->v = v, pl->stages = pp * v;
    int S = pl->stages;
    pl->first_layer = (int *)mallocCheck((size_t)(S + 1) * sizeof(int));
    pl->first_layer[0] = 0;
    if (pp_layers && pp_layers[0]) {
        const char *c = pp_layers;
        long long sum = 0;
        for (int g = 0; g < S; g++) {
            char *end;
            long n = strtol(c, &end, 10);
            if (end == c || n < 1 || n > num_layers || (*end != ',' && *end != '\0') || (*end == '\0' && g < S - 1) ||
                (*end == ',' && g == S - 1)) {
                snprintf(err, errlen,
                         "--pp-layers '%.100s': needs %d positive layer counts, one per stage (--pp %d x "
                         "--virtual-stages %d), separated by commas",
                         pp_layers, S, pp, v);
                return 1;
            }
            sum += n;
            pl->first_layer[g + 1] = (int)(sum < num_layers ? sum : num_layers);
            c = end + 1;
        }
        if (sum != num_layers) {
            snprintf(err, errlen, "--pp-layers '%.100s' adds up to %lld layers; the model has %d", pp_layers, sum,
                     num_layers);
            return 1;
        }
        return 0;
    }
    if (S > num_layers) {
        snprintf(err, errlen, "--pp %d x --virtual-stages %d = %d stages, more than the model's %d layers", pp, v, S,
                 num_layers);
        return 1;
    }
    int base = num_layers / S, extra = num_layers % S;
    for (int g = 0; g < S; g++) {
        // the middle stages 1..S-2 first, then the last, then the first
        int rank_in_order = g == 0 ? S - 1 : g == S - 1 ? S - 2 : g - 1;
        if (S == 1) rank_in_order = 0;
        pl->first_layer[g + 1] = pl->first_layer[g] + base + (rank_in_order < extra);
    }
    return 0;
}

// The ranges of the flat buffer stage g holds, in flat order (wte first on
// the first and on the last stage); returns how many.
static inline int pp_stage_ranges(const ParamLayout *pl, const PPLayout *pp, int g, PPRange out[PP_MAX_RANGES]) {
    int n = 0, L = pl->cfg.num_layers;
    const ParamTensor *wte = param_tensor(pl, PK_WTE, -1);
    // wte apart from wpe, so that both ends hold the same wte range (ZeRO shards it alike)
    if (g == 0 || g == pp->stages - 1) out[n++] = (PPRange){wte->offset, wte->offset + wte->numel};
    if (g == 0) out[n++] = (PPRange){wte->offset + wte->numel, pl->layer_begin0};  // wpe
    out[n++] = (PPRange){layer_offset(pl, pp->first_layer[g]), layer_offset(pl, pp->first_layer[g + 1])};
    if (g == pp->stages - 1) out[n++] = (PPRange){layer_offset(pl, L), pl->num_elements};  // ln_f
    return n;
}

// The ranges pipeline rank `rank` holds: its chunks' stages', in chunk order
// (at most PP_MAX_RANK_RANGES); returns how many.
static inline int pp_rank_ranges(const ParamLayout *pl, const PPLayout *pp, int rank, PPRange *out) {
    int n = 0;
    for (int c = 0; c < pp->v; c++) n += pp_stage_ranges(pl, pp, c * pp->pp + rank, out + n);
    return n;
}

// Parameters (not alignment gaps) of stage g.
static inline int64_t pp_stage_params(const ParamLayout *pl, const PPLayout *pp, int g) {
    PPRange r[PP_MAX_RANGES];
    int n = pp_stage_ranges(pl, pp, g, r);
    int64_t total = 0;
    for (int t = 0; t < pl->num_tensors; t++) {
        const ParamTensor *x = &pl->tensors[t];
        for (int k = 0; k < n; k++)
            if (x->offset >= r[k].lo && x->offset + x->numel <= r[k].hi) total += x->numel;
    }
    return total;
}

#endif  // LLMC_PP_LAYOUT_H
