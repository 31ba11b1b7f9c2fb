// param_gather.h: brings ranges of the global flat parameter order (model.h) to
// rank 0 of a group from the ranks that hold them, one range at a time, so a
// whole-model output (the --save-model / --out-dir model file, modelfile.h's
// modelfile_save_streamed) needs no rank to hold the whole model: rank 0 holds
// one chunk, every other rank one chunk of its own.
//
// Who holds what is a ShardMap (zero_shard.h) over the group: at ZeRO stages
// where the weights are sharded, rank r holds its shard; otherwise rank 0
// holds all of it and the others send nothing. read_held copies what this rank
// holds of [lo, hi) (host memory on the CPU trainer, a device-to-host copy on
// the GPU trainer). Tensor and pipeline parallel add owners by the same global
// ranges.
#ifndef LLMC_PARAM_GATHER_H
#define LLMC_PARAM_GATHER_H

#include <stdint.h>

#include "comm.h"
#include "modelfile.h"
#include "utils.h"
#include "zero_shard.h"

#define PARAM_GATHER_TAG 7101

typedef struct {
    CommGroup *group;      // rank 0 of it receives
    ShardMap owners;       // owners.world ranks hold shards (1: rank 0 holds everything)
    ModelFileFetch read_held;  // copies this rank's held [lo, hi) into dst
    void *ctx;
    float *bounce;         // (MODELFILE_CHUNK_ELEMS) what a rank other than 0 sends
    size_t *counts;        // (owners.world)
    CommRequest *reqs;     // (owners.world)
} ParamGather;

// sharded: the group's ranks hold ZeRO shards of the num_elements weights; 0: rank 0 holds them all.
static inline void param_gather_init(ParamGather *g, CommGroup *group, int64_t num_elements, int sharded,
                                     ModelFileFetch read_held, void *ctx) {
    g->group = group;
    shard_map_init(&g->owners, num_elements, sharded ? group->rank : 0, sharded ? group->size : 1);
    g->read_held = read_held;
    g->ctx = ctx;
    g->bounce = group->rank != 0 && sharded ? (float *)mallocCheck(sizeof(float) * (size_t)MODELFILE_CHUNK_ELEMS)
                                            : NULL;
    g->counts = (size_t *)mallocCheck(sizeof(size_t) * (size_t)g->owners.world);
    g->reqs = (CommRequest *)mallocCheck(sizeof(CommRequest) * (size_t)g->owners.world);
}

// A ModelFileFetch: [lo, hi) (at most MODELFILE_CHUNK_ELEMS) into dst on rank 0; every rank of the group calls it.
static inline void param_gather_fetch(void *ctx, int64_t lo, int64_t hi, float *dst) {
    ParamGather *g = (ParamGather *)ctx;
    CHECK(hi - lo <= MODELFILE_CHUNK_ELEMS, "param_gather_fetch: %lld elements in one call",
          (long long)(hi - lo));
    shard_counts(&g->owners, lo, hi, g->counts);
    int me = g->group->rank, nreq = 0;
    for (int r = 0; r < g->owners.world; r++) {
        if (g->counts[r] == 0 || (me != 0 && r != me)) continue;
        int64_t plo = g->owners.shard * r > lo ? g->owners.shard * r : lo, phi = plo + (int64_t)g->counts[r];
        if (me == 0 && r == 0) g->read_held(g->ctx, plo, phi, dst + (plo - lo));
        else if (me == 0) g->reqs[nreq++] = comm_recv_start(g->group, dst + (plo - lo), g->counts[r], COMM_F32, r,
                                                           PARAM_GATHER_TAG);
        else {
            g->read_held(g->ctx, plo, phi, g->bounce);
            g->reqs[nreq++] = comm_send_start(g->group, g->bounce, g->counts[r], COMM_F32, 0, PARAM_GATHER_TAG);
        }
    }
    comm_wait_all(g->reqs, nreq);
}

static inline void param_gather_free(ParamGather *g) {
    free(g->bounce);
    free(g->counts);
    free(g->reqs);
}

#endif  // LLMC_PARAM_GATHER_H
