// param_map.h: the one mapping from a rank's flat buffer (model.h's layout of
// what it holds: a pipeline stage's segments, a tensor-parallel slice of each
// tensor) onto the whole model's flat buffer, the global order that
// checkpoints, model files and the weight initialisation refer to. ZeRO
// shards, pipeline stages and tensor slices are all local ranges; this map is
// how any of them is found in the global order.
//
// The map is a list of blocks in local order. A block is `rows` rows of `len`
// elements, contiguous locally and `stride` apart globally: a whole tensor
// (or a run of whole tensors without alignment gaps between them) is one row; a row-parallel weight's column slice is one row per row
// of the weight; qkv's slice is three blocks (its heads' rows of q, of k and
// of v). Local ranges that a block does not cover are alignment gaps.
#ifndef LLMC_PARAM_MAP_H
#define LLMC_PARAM_MAP_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"  // defines: ParamLayout, ParamTensor, SPLIT_COLS, SPLIT_QKV, ...

typedef struct {
    int64_t local;   // first element in the rank's buffer
    int64_t global;  // where its first row starts in the global order
    int64_t len;     // elements per row
    int64_t stride;  // global distance between rows (len when the block is contiguous)
    int64_t rows;
} ParamBlock;

typedef struct {
    ParamBlock *blocks;  // in local order
    int n;
} ParamMap;

// The blocks of local tensor t (a tensor of `local`) in the whole model's
// layout `global`; returns how many (1 to 3).
static inline int param_tensor_blocks(const ParamLayout *local, const ParamTensor *t, const ParamLayout *global,
                                      ParamBlock out[3]) {
    const ParamTensor *g = &global->tensors[global->tensor_at[t->id]];
    int tp = local->tp, r = local->tp_rank;
    switch (t->split) {
        case SPLIT_COLS:  // (R, K) -> (R, K/tp): columns [r K/tp, (r+1) K/tp) of each row
            out[0] = (ParamBlock){t->offset, g->offset + r * t->shape[1], t->shape[1], g->shape[1], t->shape[0]};
            return 1;
        case SPLIT_QKV: {  // rows of q, k, v: C each, this rank's C/tp of each
            int64_t part = g->shape[0] / 3, mine = part / tp, cols = g->shape[1];
            for (int k = 0; k < 3; k++)
                out[k] = (ParamBlock){t->offset + k * mine * cols, g->offset + (k * part + r * mine) * cols,
                                      mine * cols, mine * cols, 1};
            return 3;
        }
        case SPLIT_ROWS:
            out[0] = (ParamBlock){t->offset, g->offset + r * t->numel, t->numel, t->numel, 1};
            return 1;
        default:
            out[0] = (ParamBlock){t->offset, g->offset, t->numel, t->numel, 1};
            return 1;
    }
}

// The map of a rank's layout: its tensors' elements (not their alignment
// gaps), consecutive blocks that are contiguous on both sides joined.
static inline void param_map_init(ParamMap *m, const ParamLayout *local) {
    ParamLayout global;
    param_layout_init(&global, &local->cfg);
    m->blocks = (ParamBlock *)mallocCheck(sizeof(ParamBlock) * (size_t)(3 * local->num_tensors + 1));
    m->n = 0;
    for (int i = 0; i < local->num_tensors; i++) {
        const ParamTensor *t = &local->tensors[i];
        ParamBlock b[3];
        int nb = param_tensor_blocks(local, t, &global, b);
        for (int k = 0; k < nb; k++) {
            ParamBlock *prev = m->n ? &m->blocks[m->n - 1] : NULL;
            if (prev && prev->rows == 1 && b[k].rows == 1 && prev->local + prev->len == b[k].local &&
                prev->global + prev->len == b[k].global) {
                prev->len += b[k].len;
                prev->stride = prev->len;
            } else {
                m->blocks[m->n++] = b[k];
            }
        }
    }
    param_layout_free(&global);
}

static inline void param_map_free(ParamMap *m) {
    free(m->blocks);
    memset(m, 0, sizeof(*m));
}

// Calls visit(ctx, local, global, n) for each contiguous run of the local
// range [lo, hi) that the map covers, in local order: local elements [local,
// local + n) are global [global, global + n).
static inline void param_map_runs(const ParamMap *m, int64_t lo, int64_t hi,
                                  void (*visit)(void *ctx, int64_t local, int64_t global, int64_t n), void *ctx) {
    for (int i = 0; i < m->n; i++) {
        const ParamBlock *b = &m->blocks[i];
        int64_t end = b->local + b->len * b->rows;
        if (end <= lo || b->local >= hi) continue;
        int64_t first = lo > b->local ? (lo - b->local) / b->len : 0;
        for (int64_t r = first; r < b->rows; r++) {
            int64_t a = b->local + r * b->len, z = a + b->len;
            if (a >= hi) break;
            int64_t s = a > lo ? a : lo, e = z < hi ? z : hi;
            if (e > s) visit(ctx, s, b->global + r * b->stride + (s - a), e - s);
        }
    }
}

// The global position of local element x (held by a block; a gap: the
// position after its block's last element, whose rounding seed is as good).
static inline int64_t param_map_global_of(const ParamMap *m, int64_t x) {
    const ParamBlock *prev = NULL;
    for (int i = 0; i < m->n; i++) {
        const ParamBlock *b = &m->blocks[i];
        if (x < b->local) break;
        prev = b;
        if (x < b->local + b->len * b->rows) {
            int64_t r = (x - b->local) / b->len;
            return b->global + r * b->stride + (x - b->local - r * b->len);
        }
    }
    return prev ? prev->global + (prev->rows - 1) * prev->stride + prev->len : x;
}

// Copies local tensor t's slice out of its global tensor's values (all of
// them, in the global tensor's own order, from its first element) into dst,
// the rank's buffer (t's elements at dst + t->offset). global: the whole
// model's layout (param_layout_init).
static inline void param_slice_from_global(const ParamLayout *local, const ParamLayout *global, const ParamTensor *t,
                                           const float *values, float *dst) {
    ParamBlock b[3];
    int nb = param_tensor_blocks(local, t, global, b);
    int64_t g0 = global->tensors[global->tensor_at[t->id]].offset;
    for (int k = 0; k < nb; k++)
        for (int64_t r = 0; r < b[k].rows; r++)
            memcpy(dst + b[k].local + r * b[k].len, values + (b[k].global - g0) + r * b[k].stride,
                   sizeof(float) * (size_t)b[k].len);
}

#endif  // LLMC_PARAM_MAP_H
