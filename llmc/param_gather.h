// param_gather.h: brings ranges of the global flat parameter order (model.h) to
// rank 0 of a group from the ranks that hold them, one range at a time, so a
// whole-model output (the --save-model / --out-dir model file, modelfile.h's
// modelfile_save_streamed) needs no rank to hold the whole model: rank 0 holds
// one chunk, every other rank one chunk of its own.
//
// Who holds what: each rank of the group owns a list of global ranges, and
// every element of the model is owned by exactly one rank: the ranges it
// writes to a checkpoint (checkpoint.h's CkptRanges.write), which already
// say that for every layout (a ZeRO shard; a pipeline rank's shard of its
// stages). The lists are exchanged once. read_held copies what this rank
// holds of a global range (host memory on the CPU trainer, a device-to-host
// copy on the GPU trainer).
#ifndef LLMC_PARAM_GATHER_H
#define LLMC_PARAM_GATHER_H

#include <stdint.h>

#include "checkpoint.h"
#include "comm.h"
#include "modelfile.h"
#include "utils.h"

#define PARAM_GATHER_TAG 7101
#define PARAM_GATHER_LIST (1 + 2 * CKPT_MAX_PIECES)  // a rank's list as int64s: n, then lo, hi of each

typedef struct {
    CommGroup *group;          // rank 0 of it receives; all of it owns ranges
    int64_t *owned;            // (group size, PARAM_GATHER_LIST): every rank's ranges
    ModelFileFetch read_held;  // copies this rank's held [lo, hi) (global order) into dst
    void *ctx;
    float *bounce;             // (MODELFILE_CHUNK_ELEMS) what a rank other than 0 sends
    CommRequest *reqs;         // (group size * CKPT_MAX_PIECES)
} ParamGather;

// mine: the ranges this rank owns (its checkpoint write pieces). Collective over group.
static inline void param_gather_init(ParamGather *g, CommGroup *group, const CkptPieces *mine,
                                     ModelFileFetch read_held, void *ctx) {
    g->group = group;
    int n = group->size;
    int64_t list[PARAM_GATHER_LIST] = {mine->n};
    for (int k = 0; k < mine->n; k++) list[1 + 2 * k] = mine->r[k].lo, list[2 + 2 * k] = mine->r[k].hi;
    g->owned = (int64_t *)mallocCheck(sizeof(int64_t) * PARAM_GATHER_LIST * (size_t)n);
    size_t *counts = (size_t *)mallocCheck(sizeof(size_t) * (size_t)n);
    for (int r = 0; r < n; r++) counts[r] = PARAM_GATHER_LIST;
    CommRequest q = comm_all_gather_start(group, list, g->owned, counts, COMM_F64);  // (int64s move as 8-byte words)
    comm_wait(&q);
    free(counts);
    g->read_held = read_held;
    g->ctx = ctx;
    g->bounce = group->rank != 0 ? (float *)mallocCheck(sizeof(float) * (size_t)MODELFILE_CHUNK_ELEMS) : NULL;
    g->reqs = (CommRequest *)mallocCheck(sizeof(CommRequest) * (size_t)n * CKPT_MAX_PIECES);
}

// A ModelFileFetch: [lo, hi) (at most MODELFILE_CHUNK_ELEMS) into dst on rank 0; every rank of the group calls it.
static inline void param_gather_fetch(void *ctx, int64_t lo, int64_t hi, float *dst) {
    ParamGather *g = (ParamGather *)ctx;
    CHECK(hi - lo <= MODELFILE_CHUNK_ELEMS, "param_gather_fetch: %lld elements in one call", (long long)(hi - lo));
    int me = g->group->rank, nreq = 0;
    int64_t packed = 0;
    for (int r = 0; r < g->group->size; r++) {
        if (me != 0 && r != me) continue;
        const int64_t *list = g->owned + (size_t)r * PARAM_GATHER_LIST;
        for (int k = 0; k < list[0]; k++) {
            int64_t a = list[1 + 2 * k] > lo ? list[1 + 2 * k] : lo, b = list[2 + 2 * k] < hi ? list[2 + 2 * k] : hi;
            if (b <= a) continue;
            size_t n = (size_t)(b - a);
            if (me == 0 && r == 0) g->read_held(g->ctx, a, b, dst + (a - lo));
            else if (me == 0) g->reqs[nreq++] = comm_recv_start(g->group, dst + (a - lo), n, COMM_F32, r, PARAM_GATHER_TAG);
            else {
                g->read_held(g->ctx, a, b, g->bounce + packed);
                g->reqs[nreq++] = comm_send_start(g->group, g->bounce + packed, n, COMM_F32, 0, PARAM_GATHER_TAG);
                packed += b - a;
            }
        }
    }
    comm_wait_all(g->reqs, nreq);
}

static inline void param_gather_free(ParamGather *g) {
    free(g->owned);
    free(g->bounce);
    free(g->reqs);
}

#endif  // LLMC_PARAM_GATHER_H
