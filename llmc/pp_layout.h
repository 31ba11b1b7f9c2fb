// pp_layout.h: which layers each pipeline stage runs, and what of the model
// (model.h's ParamHolding) a pipeline rank holds. Stages are numbered
// g = chunk * pp + rank (pp_schedule.h); stage 0 also holds the embeddings
// (wte, wpe), the last stage ln_f and the classifier, which is wte again
// (tied): the last stage keeps a copy of wte outside its layout (pipeline.h).
// A rank's layout of its holding, with param_map.h's mapping, is how ZeRO
// shards, checkpoints and model files see its tensors in the global order.
#ifndef LLMC_PP_LAYOUT_H
#define LLMC_PP_LAYOUT_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"        // defines: ParamHolding, GPTConfig, ParamLayout, param_layout_init_held, ...
#include "pp_schedule.h"  // defines: PPKind, PPSchedule, pp_schedule_lists, pp_rank_sets, pp_schedule_free

typedef struct {
    int pp, v, stages;  // pipeline ranks, chunks per rank, stages = pp * v
    int *first_layer;   // (stages + 1): stage g runs layers [first_layer[g], first_layer[g + 1])
} PPLayout;

static inline void pp_layout_free(PPLayout *pl) {
    free(pl->first_layer);
    pl->first_layer = NULL;
}

// A pipeline rank's activation sets: sets[c] one-micro-batch sets of its
// chunk c (stage c * pp + rank), as many as the runtime (pipeline.h)
// allocates for the lists it runs (pp_schedule.h's pp_rank_sets).
#define PP_MAX_CHUNKS 127  // (pp_schedule_unusable's)
typedef struct {
    const PPLayout *layout;
    int rank;
    int sets[PP_MAX_CHUNKS];
} PPRankSets;

// Rank `rank`'s sets under the lists s.
static inline PPRankSets pp_rank_sets_of(const PPSchedule *s, const PPLayout *layout, int rank) {
    PPRankSets r;
    memset(&r, 0, sizeof(r));
    r.layout = layout, r.rank = rank;
    pp_rank_sets(s, rank, NULL, r.sets);
    return r;
}

// Every rank's sets (out: pp) under schedule kind with m micro-batches (fuse: the lists with fused
// receives, NCCL's).
static inline void pp_ranks_sets_count(const PPLayout *layout, PPKind kind, int m, int fuse, PPRankSets *out) {
    PPSchedule s;
    pp_schedule_lists(&s, kind, layout->pp, layout->v, m, fuse);
    for (int r = 0; r < layout->pp; r++) out[r] = pp_rank_sets_of(&s, layout, r);
    pp_schedule_free(&s);
}
// One rank's.
static inline PPRankSets pp_rank_sets_count(const PPLayout *layout, PPKind kind, int rank, int m, int fuse) {
    PPSchedule s;
    pp_schedule_lists(&s, kind, layout->pp, layout->v, m, fuse);
    PPRankSets r = pp_rank_sets_of(&s, layout, rank);
    pp_schedule_free(&s);
    return r;
}

// Layers over pp * v stages: as --pp-layers lists them (comma-separated, one
// count per stage, "" for even), or as evenly as they go, the layers left over
// going to the stages between the ends first (the ends also hold the
// embeddings and the classifier). 0, or 1 with why in err (and nothing allocated).
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
                pp_layout_free(pl);
                return 1;
            }
            sum += n;
            pl->first_layer[g + 1] = (int)(sum < num_layers ? sum : num_layers);
            c = end + 1;
        }
        if (sum != num_layers) {
            snprintf(err, errlen, "--pp-layers '%.100s' adds up to %lld layers; the model has %d", pp_layers, sum,
                     num_layers);
            pp_layout_free(pl);
            return 1;
        }
        return 0;
    }
    if (S > num_layers) {
        snprintf(err, errlen, "--pp %d x --virtual-stages %d = %d stages, more than the model's %d layers", pp, v, S,
                 num_layers);
        pp_layout_free(pl);
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

// What stages [the chunks of pipeline rank `rank`] hold, as model.h's
// ParamHolding (layers: the caller's L bytes): the embeddings with stage 0,
// ln_f with the last; the last stage's classifier reads wte, whose copy there
// lives outside the layout (pipeline.h: the tied copy). stage >= 0: that one
// stage only; -1: every chunk of `rank`.
static inline ParamHolding pp_holding(const PPLayout *pp, int rank, int stage, int num_layers, unsigned char *layers) {
    memset(layers, 0, (size_t)num_layers);
    ParamHolding h = {0, 0, layers};
    for (int c = 0; c < pp->v; c++) {
        int g = c * pp->pp + rank;
        if (stage >= 0 && g != stage) continue;
        for (int l = pp->first_layer[g]; l < pp->first_layer[g + 1]; l++) layers[l] = 1;
        h.embeddings |= g == 0;
        h.lnf |= g == pp->stages - 1;
    }
    return h;
}

// Parameters of stage g (its layout's; the last stage's wte copy not counted).
static inline int64_t pp_stage_params(const GPTConfig *cfg, const PPLayout *pp, int g) {
    unsigned char *layers = (unsigned char *)mallocCheck((size_t)cfg->num_layers);
    ParamHolding h = pp_holding(pp, g % pp->pp, g, cfg->num_layers, layers);
    ParamLayout pl;
    param_layout_init_held(&pl, cfg, &h, 1, 0);
    int64_t n = pl.num_params;
    param_layout_free(&pl);
    free(layers);
    return n;
}

#endif  // LLMC_PP_LAYOUT_H
