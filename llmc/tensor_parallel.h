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
//
// Each collective is on the critical path (nothing to overlap it with inside
// a block half). On host groups the host waits for it; on device groups with
// a stream (tp_on_stream) the stream waits for it on the device, so the host
// keeps queueing kernels, and the request is completed on the host (where
// --comm-timeout's deadline applies) TP_MAX_PENDING collectives later or at
// tp_retire.
#ifndef LLMC_TENSOR_PARALLEL_H
#define LLMC_TENSOR_PARALLEL_H

#include <stddef.h>
#include <string.h>

#include "comm.h"     // defines: CommGroup, CommRequest, CommDType, comm_*_start
#include "model.h"    // defines: GPTConfig
#include "sampler.h"  // defines: sample_token
#include "utils.h"    // defines: mallocCheck, callocCheck

typedef struct {
    int size, rank;    // the tensor group's size and this rank in it (1, 0: no tensor parallelism)
    int sp;            // sequence parallel
    CommGroup *group;  // the tensor group (host buffers on the CPU trainer, device buffers on the GPU trainer)
    size_t *counts;    // (size) scratch: each rank's piece of a gather or scatter
    void *stream;      // device groups: the compute stream (a cudaStream_t) that waits for each collective; else NULL
    CommRequest *pending;  // (TP_MAX_PENDING) ring of collectives the stream waits for, not yet completed on the host
    int pending_head, num_pending;
} TPContext;

#define TP_MAX_PENDING 64

static inline TPContext tp_none(void) {
    TPContext tp;
    memset(&tp, 0, sizeof(tp));
    tp.size = 1;
    return tp;
}

static inline TPContext tp_context(CommGroup *group, int sp) {
    TPContext tp = tp_none();
    tp.size = group->size, tp.rank = group->rank, tp.sp = sp && group->size > 1, tp.group = group;
    tp.counts = (size_t *)mallocCheck(sizeof(size_t) * (size_t)group->size);
    return tp;
}

// Completes every collective the stream waits for (on the host).
static inline void tp_retire(TPContext *tp) {
    for (; tp->num_pending > 0; tp->num_pending--) {
        comm_wait(&tp->pending[tp->pending_head]);
        tp->pending_head = (tp->pending_head + 1) % TP_MAX_PENDING;
    }
}

// Device groups: from now on `stream` waits for each collective (this copy of
// the context owns the ring; tp_off_stream frees it).
static inline void tp_on_stream(TPContext *tp, void *stream) {
    tp->stream = stream;
    tp->pending = (CommRequest *)callocCheck(TP_MAX_PENDING, sizeof(CommRequest));
    tp->pending_head = tp->num_pending = 0;
}

static inline void tp_off_stream(TPContext *tp) {
    tp_retire(tp);
    free(tp->pending);
    tp->pending = NULL, tp->stream = NULL;
}

static inline void tp_free(TPContext *tp) {
    free(tp->counts);
    tp->counts = NULL;
}

// The collective q is done as far as the caller's next work is concerned:
// completed on the host, or (tp_on_stream) waited for by the stream.
static inline void tp_complete(TPContext *tp, CommRequest *q) {
    if (!tp->stream) {
        comm_wait(q);
        return;
    }
    comm_stream_wait(q, tp->stream);
    if (!q->active) return;  // (a backend that completes it on the host)
    if (tp->num_pending == TP_MAX_PENDING) {  // the oldest, long since done on the device
        comm_wait(&tp->pending[tp->pending_head]);
        tp->pending_head = (tp->pending_head + 1) % TP_MAX_PENDING;
        tp->num_pending--;
    }
    tp->pending[(tp->pending_head + tp->num_pending++) % TP_MAX_PENDING] = *q;
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
    tp_complete(tp, &q);
}

// full (N, C) partial sums -> local (N/tp, C): this rank's rows of their sum.
static inline void tp_reduce_scatter_rows(TPContext *tp, const void *full, void *local, int N, int C, CommDType t) {
    for (int r = 0; r < tp->size; r++) tp->counts[r] = (size_t)(N / tp->size) * C;
    CommRequest q = comm_reduce_scatter_start(tp->group, full, local, tp->counts, t);
    tp_complete(tp, &q);
}

static inline void tp_all_reduce(TPContext *tp, void *buf, size_t n, CommDType t) {
    CommRequest q = comm_all_reduce_start(tp->group, buf, n, t);
    tp_complete(tp, &q);
}

// A block half's partial output (N, C) completed in place: all-reduced, or
// (sequence parallel) reduce-scattered, this rank's rows summed at their
// place; returns where the rank's completed rows start.
static inline void *tp_complete_partial(TPContext *tp, void *partial, int N, int C, CommDType t) {
    if (!tp->sp) {
        tp_all_reduce(tp, partial, (size_t)N * C, t);
        return partial;
    }
    void *mine = (char *)partial + (size_t)tp_row0(tp, N) * C * comm_dtype_size(t);
    tp_reduce_scatter_rows(tp, partial, mine, N, C, t);
    return mine;
}

// A token drawn from softmax(logits / temperature) of one row of logits
// (vreal: this rank's real slice of the vocabulary, tp_vocab_slice), where
// each rank of the tensor group holds its slice: the maximum, each rank's mass
// and the draw are reduced over the group (host buffers) and the rank whose
// slice the draw falls in picks the token; the same on every rank (every
// rank's generator makes the same draw); sp's top_k and temperature 0 are
// for one rank (train_options.h refuses them with --tp). Without tensor parallelism, sample_token.
static int tp_sample_token(TPContext *tp, const GPTConfig *c, const float *logits_row, const SampleParams *sp,
                           Rng *rng) {
    if (tp->size == 1) return sample_token(logits_row, c->vocab_size, sp, rng);
    int v0, vreal;
    tp_vocab_slice(c, tp, &v0, &vreal);
    double *mine = (double *)callocCheck(2 * (size_t)tp->size + 2, sizeof(double)), *all = mine + 2;
    float mx = -INFINITY;
    for (int v = 0; v < vreal; v++) mx = logits_row[v] > mx ? logits_row[v] : mx;
    mine[0] = mx;
    for (int r = 0; r < tp->size; r++) tp->counts[r] = 1;
    CommRequest q = comm_all_gather_start(tp->group, mine, all, tp->counts, COMM_F64);
    comm_wait(&q);
    double g = -INFINITY;
    for (int r = 0; r < tp->size; r++) g = all[r] > g ? all[r] : g;
    double mass = 0.0;
    for (int v = 0; v < vreal; v++) mass += exp((double)(logits_row[v] - (float)g) / sp->temperature);
    mine[1] = mass;
    q = comm_all_gather_start(tp->group, mine + 1, all, tp->counts, COMM_F64);
    comm_wait(&q);
    double total = 0.0, before = 0.0;
    for (int r = 0; r < tp->size; r++) {
        if (r < tp->rank) before += all[r];
        total += all[r];
    }
    double x = (double)rng_uniform(rng) * total;
    double token = 0.0;
    if (x >= before && x < before + mass) {
        double cdf = before;
        token = v0 + vreal - 1;
        for (int v = 0; v < vreal; v++) {
            cdf += exp((double)(logits_row[v] - (float)g) / sp->temperature);
            if (x < cdf) { token = v0 + v; break; }
        }
    }
    tp_all_reduce(tp, &token, 1, COMM_F64);  // (one rank's slice holds the draw; the others add 0)
    free(mine);
    return x >= total ? c->vocab_size - 1 : (int)token;
}

#endif  // LLMC_TENSOR_PARALLEL_H
