// tensor_parallel.h: Megatron-style tensor parallelism's bookkeeping and
// collectives, for both trainers (host groups on the CPU, device groups on the
// GPU: comm.h's calls are the same). A layer's attention heads and MLP columns
// are split over the tensor group (model.h's ParamSplit: qkv and the MLP's
// first matmul by output rows, the two projections by input columns, wte by
// vocabulary rows), so each block half ends in a partial sum that one
// all-reduce completes (forward), and its input gradient likewise (backward).
//
// Sequence parallel (--sequence-parallel): between the tensor-parallel
// regions (LayerNorm, residual adds, the embedding's output) the activations
// are split along the B*T positions, rank r holding rows [r N/tp, (r+1) N/tp):
// a region's input is all-gathered and its partial output reduce-scattered
// (the all-reduce's volume, split in two), and in the backward the other way
// round. The replicated LayerNorm weights and the biases added after a
// reduction then see only the rank's rows, so their gradients are summed over
// the tensor group.
#ifndef LLMC_TENSOR_PARALLEL_H
#define LLMC_TENSOR_PARALLEL_H

#include <stddef.h>

#include "comm.h"
#include "model.h"
#include "utils.h"

typedef struct {
    int size, rank;    // the tensor group's size and this rank in it (1, 0: no tensor parallelism)
    int sp;            // sequence parallel
    CommGroup *group;  // the tensor group (host buffers on the CPU trainer, device buffers on the GPU trainer)
    size_t *counts;    // (size) scratch: each rank's piece of a gather or scatter
} TPContext;

static inline TPContext tp_none(void) {
    TPContext tp = {1, 0, 0, NULL, NULL};
    return tp;
}

static inline TPContext tp_context(CommGroup *group, int sp) {
    TPContext tp = {group->size, group->rank, sp && group->size > 1, group, NULL};
    tp.counts = (size_t *)mallocCheck(sizeof(size_t) * (size_t)group->size);
    return tp;
}

static inline void tp_free(TPContext *tp) {
    free(tp->counts);
    tp->counts = NULL;
}

// Rows of N positions this rank holds between the tensor-parallel regions:
// its slice with sequence parallel, else all of them; and its first row.
static inline int tp_rows(const TPContext *tp, int N) { return tp->sp ? N / tp->size : N; }
static inline int tp_row0(const TPContext *tp, int N) { return tp->sp ? tp->rank * (N / tp->size) : 0; }

// This rank's slice of the padded vocabulary: ids [*v0, *v0 + Vp/tp), of
// which the first *vreal are real tokens (< V).
static inline void tp_vocab_slice(const GPTConfig *c, const TPContext *tp, int *v0, int *vreal) {
    int n = c->padded_vocab_size / tp->size;
    *v0 = tp->rank * n;
    int real = c->vocab_size - *v0;
    *vreal = real < 0 ? 0 : real > n ? n : real;
}

// full (N, C): every rank's slice of rows, this rank's already in place, gathered into all of it.
static inline void tp_gather_rows(TPContext *tp, void *full, int N, int C, CommDType t) {
    for (int r = 0; r < tp->size; r++) tp->counts[r] = (size_t)(N / tp->size) * C;
    CommRequest q = comm_all_gather_start(tp->group, NULL, full, tp->counts, t);
    comm_wait(&q);
}

// full (N, C) partial sums -> local (N/tp, C): this rank's rows of their sum.
static inline void tp_reduce_scatter_rows(TPContext *tp, const void *full, void *local, int N, int C, CommDType t) {
    for (int r = 0; r < tp->size; r++) tp->counts[r] = (size_t)(N / tp->size) * C;
    CommRequest q = comm_reduce_scatter_start(tp->group, full, local, tp->counts, t);
    comm_wait(&q);
}

static inline void tp_all_reduce(TPContext *tp, void *buf, size_t n, CommDType t) {
    CommRequest q = comm_all_reduce_start(tp->group, buf, n, t);
    comm_wait(&q);
}

// A block half's partial output (N, C) completed: all-reduced in place, or
// (sequence parallel) reduce-scattered into local (N/tp, C).
static inline void tp_complete_partial(TPContext *tp, void *partial, void *local, int N, int C, CommDType t) {
    if (tp->sp) tp_reduce_scatter_rows(tp, partial, local, N, C, t);
    else tp_all_reduce(tp, partial, (size_t)N * C, t);
}

#endif  // LLMC_TENSOR_PARALLEL_H
