// param_gather.h: brings ranges of the global flat parameter order (model.h) to
// rank 0 of a group from the ranks that hold them, one range at a time, so a
// whole-model output (the --save-model / --out-dir model file, modelfile.h's
// modelfile_save_streamed) needs no rank to hold the whole model: rank 0 holds
// one chunk, every other rank one chunk of its own.
//
// Who holds what: each element of the model is owned by exactly one rank, the
// one that writes it to a checkpoint (ckpt_format.h's CkptRanges.write, ranges
// of the rank's own buffer, which already say that for every layout: a ZeRO
// shard, a pipeline rank's stages, a tensor-parallel slice without the
// replicated tensors another tensor rank writes), mapped onto the global
// order by the rank's param_map.h mapping. For each chunk every rank sends
// rank 0 the runs of it that it owns (their places, then their values);
// read_held copies a range of the rank's buffer (host memory on the CPU
// trainer, a device-to-host copy on the GPU trainer).
#ifndef LLMC_PARAM_GATHER_H
#define LLMC_PARAM_GATHER_H

#include <stdint.h>

#include "ckpt_format.h"  // defines: CkptPieces
#include "comm.h"        // defines: CommGroup, CommRequest, comm_all_gather_start, COMM_F64, ...
#include "modelfile.h"   // defines: ModelFileFetch, MODELFILE_CHUNK_ELEMS
#include "param_map.h"   // defines: ParamMap, param_map_runs
#include "utils.h"       // defines: CHECK, mallocCheck, array_room

#define PARAM_GATHER_TAG_RUNS 7101
#define PARAM_GATHER_TAG_DATA 7102

typedef struct { int64_t global, local, n; } GatherRun;

typedef struct {
    CommGroup *group;          // rank 0 of it receives; all of it owns ranges
    GatherRun *runs;           // this rank's owned runs, sorted by global position
    int nruns;
    ModelFileFetch read_held;  // copies [lo, hi) of this rank's buffer into dst
    void *ctx;
    float *bounce;             // (MODELFILE_CHUNK_ELEMS) what a rank other than 0 sends, or rank 0 receives
    double *places;            // (2 x MODELFILE_CHUNK_ELEMS) runs (global, n) of one chunk
    double *counts_all;        // (group size) each rank's runs in the chunk
    size_t *ones;              // (group size) 1s, the gather's counts
} ParamGather;

typedef struct {
    GatherRun *r;
    int n, cap;
} GatherRunList;
static inline void param_gather_add_run(void *ctx, int64_t local, int64_t global, int64_t n) {
    GatherRunList *l = (GatherRunList *)ctx;
    array_room(l->r, l->n, l->cap, 64);
    l->r[l->n++] = (GatherRun){global, local, n};
}
static inline int param_gather_run_cmp(const void *a, const void *b) {
    int64_t x = ((const GatherRun *)a)->global, y = ((const GatherRun *)b)->global;
    return (x > y) - (x < y);
}

// mine: the ranges of this rank's buffer it owns (its checkpoint write
// pieces); map: that buffer onto the global order.
static inline void param_gather_init(ParamGather *g, CommGroup *group, const CkptPieces *mine, const ParamMap *map,
                                     ModelFileFetch read_held, void *ctx) {
    memset(g, 0, sizeof(*g));
    g->group = group;
    GatherRunList l = {NULL, 0, 0};
    for (int k = 0; k < mine->n; k++) param_map_runs(map, mine->r[k].lo, mine->r[k].hi, param_gather_add_run, &l);
    qsort(l.r, (size_t)l.n, sizeof(GatherRun), param_gather_run_cmp);
    g->runs = l.r, g->nruns = l.n;
    g->read_held = read_held;
    g->ctx = ctx;
    g->bounce = (float *)mallocCheck(sizeof(float) * (size_t)MODELFILE_CHUNK_ELEMS);
    g->places = (double *)mallocCheck(sizeof(double) * 2 * (size_t)MODELFILE_CHUNK_ELEMS);
    g->counts_all = (double *)mallocCheck(sizeof(double) * (size_t)group->size);
    g->ones = (size_t *)mallocCheck(sizeof(size_t) * (size_t)group->size);
    for (int r = 0; r < group->size; r++) g->ones[r] = 1;
}

// A ModelFileFetch: [lo, hi) (at most MODELFILE_CHUNK_ELEMS) into dst on rank 0; every rank of the group calls it.
static inline void param_gather_fetch(void *ctx, int64_t lo, int64_t hi, float *dst) {
    ParamGather *g = (ParamGather *)ctx;
    CHECK(hi - lo <= MODELFILE_CHUNK_ELEMS, "param_gather_fetch: %lld elements in one call", (long long)(hi - lo));
    int me = g->group->rank;
    // this rank's runs in [lo, hi): rank 0 copies them in place, the others pack places and values
    int first = 0, last = g->nruns;
    while (first < last) {
        int mid = (first + last) / 2;
        if (g->runs[mid].global + g->runs[mid].n <= lo) first = mid + 1;
        else last = mid;
    }
    double mine = 0;
    int64_t packed = 0;
    for (int i = first; i < g->nruns && g->runs[i].global < hi; i++) {
        const GatherRun *q = &g->runs[i];
        int64_t a = q->global > lo ? q->global : lo, z = q->global + q->n < hi ? q->global + q->n : hi;
        if (z <= a) continue;
        int64_t local = q->local + (a - q->global);
        if (me == 0) {
            g->read_held(g->ctx, local, local + (z - a), dst + (a - lo));
            continue;
        }
        g->read_held(g->ctx, local, local + (z - a), g->bounce + packed);
        g->places[2 * (int64_t)mine] = (double)a, g->places[2 * (int64_t)mine + 1] = (double)(z - a);
        mine += 1, packed += z - a;
    }
    CommRequest q = comm_all_gather_start(g->group, &mine, g->counts_all, g->ones, COMM_F64);
    comm_wait(&q);
    if (me != 0) {
        if (mine == 0) return;
        CommRequest s[2] = {comm_send_start(g->group, g->places, 2 * (size_t)mine, COMM_F64, 0, PARAM_GATHER_TAG_RUNS),
                            comm_send_start(g->group, g->bounce, (size_t)packed, COMM_F32, 0, PARAM_GATHER_TAG_DATA)};
        comm_wait_all(s, 2);
        return;
    }
    for (int r = 1; r < g->group->size; r++) {
        size_t k = (size_t)g->counts_all[r];
        if (k == 0) continue;
        q = comm_recv_start(g->group, g->places, 2 * k, COMM_F64, r, PARAM_GATHER_TAG_RUNS);
        comm_wait(&q);
        int64_t n = 0;
        for (size_t i = 0; i < k; i++) n += (int64_t)g->places[2 * i + 1];
        CHECK(n <= hi - lo, "param_gather_fetch: rank %d sent %lld elements of a %lld-element chunk", r, (long long)n,
              (long long)(hi - lo));
        q = comm_recv_start(g->group, g->bounce, (size_t)n, COMM_F32, r, PARAM_GATHER_TAG_DATA);
        comm_wait(&q);
        for (size_t i = 0, at = 0; i < k; i++) {
            int64_t a = (int64_t)g->places[2 * i], len = (int64_t)g->places[2 * i + 1];
            CHECK(a >= lo && a + len <= hi, "param_gather_fetch: rank %d sent elements outside the chunk", r);
            memcpy(dst + (a - lo), g->bounce + at, sizeof(float) * (size_t)len);
            at += (size_t)len;
        }
    }
}

static inline void param_gather_free(ParamGather *g) {
    free(g->runs);
    free(g->bounce);
    free(g->places);
    free(g->counts_all);
    free(g->ones);
}

#endif  // LLMC_PARAM_GATHER_H
