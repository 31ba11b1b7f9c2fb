// zero_cpu.h: data parallelism with ZeRO-0/1/2/3 for the CPU trainer
// (gpt_cpu.h): the CPU backend of the ZeRO verbs (zero_shard.h lists them).
// The model owns its sharded weights, gradients and AdamW state and updates
// them (gpt_cpu.h's gpt_update); this layer decides what is reduced and
// gathered when, and moves the data, acting only through the model's GPTHooks.
//
//   --zero 0: gradients all-reduced; every rank keeps the full AdamW state.
//   --zero 1: gradients reduce-scattered (in place) on the last micro-step;
//             each rank updates its shard (zero_shard.h) of the fp32 weights with
//             its shard of m and v, then the weights are all-gathered.
//   --zero 2: as 1, but every micro-step's gradients are reduce-scattered into
//             the model's gradient shard, and the full gradient of a bucket is
//             released (its pages handed back to the OS) once reduced.
//   --zero 3: as 2, and the weights are sharded too: a segment's weights are
//             all-gathered from the model's shard before the forward or
//             backward reads them (GPTHooks.params_needed) and released when
//             the pass moves on; the next segment's gather runs while this one
//             computes.
//
// Overlap: a segment's gradient reduction starts in GPTHooks.grads_ready, as
// soon as its backward is done, while the backward goes on with the segments
// below (MPI nonblocking calls, progressed at every hook), cut into buckets of
// --bucket-mb. The hooks do not depend on the order of the calls: a segment's
// reduction covers its own range, whatever the pass (a whole model's
// micro-step, or a pipeline stage's backward of one micro-batch) did before;
// zero_begin_pass says whether a pass's gradients are reduced (stages 0 and 1:
// on the last micro-batch of the step; 2 and 3: always, each segment's first
// reduction of a step writing its shard, later ones adding to it).
//
// Released buffers: the model's full gradient (ZeRO-2) and parameter (ZeRO-3)
// buffers are anonymous mappings (gpt_cpu.h, utils.h's map_zeroed) whose
// released ranges are handed back with madvise(MADV_DONTNEED): they hold no
// memory and read as zero (for gradients that is the zeroing for the next
// micro-step).
#ifndef LLMC_ZERO_CPU_H
#define LLMC_ZERO_CPU_H

#include <sys/mman.h>
#include <unistd.h>

#include "comm.h"        // defines: CommRequest, CommGroup, comm_wait, comm_test, ...
#include "gpt_cpu.h"     // defines: GPT, gpt_zero_grad
#include "optimizer.h"   // defines: sum_of_squares
#include "zero_shard.h"  // defines: ShardMap, ZERO_INIT_COMMON, shard_piece, shard_counts, shard_clip, ...

#define ZERO_SLOTS 2  // staging buffers for accumulating reduce-scatters (ZeRO-2/3 with accumulation)

typedef struct {
    int64_t lo, hi;     // the flat range reduced
    int slot;           // staging slot holding this rank's piece, or -1 (written in place)
    CommRequest req;
} ZeroBucket;

typedef struct {
    GPT *model;
    CommGroup *dp;          // the data-parallel group (data x context: the ranks that hold the same parameters)
    int stage;
    ShardMap map;           // over the model's flat buffer (what this rank holds of the model)
    int64_t bucket_elems;
    int num_segments;       // L + 2 (the held ones are the model's layout's)
    int reduce_now;         // this pass's gradients are reduced
    unsigned char *reduced; // stage >= 2: (num_segments) the segment's gradients were reduced this step
    ZeroBucket *inflight;   // reductions started and not yet seen complete
    int num_inflight, cap_inflight;
    size_t *counts;         // scratch: dp->size counts
    float *slots[ZERO_SLOTS];
    int slot_busy[ZERO_SLOTS];
    unsigned char *resident;  // stage 3: (num_segments) segment s is gathered in model->params
    int prefetch_segment;   // stage 3: the segment being gathered ahead (-1: none)
    CommRequest prefetch_req;
} Zero;

// ---------------------------------------------------------------------------
// gradient buckets

static inline void zero_cpu_bucket_done(Zero *z, ZeroBucket *b) {
    comm_wait(&b->req);
    if (b->slot >= 0) {
        int64_t plo, phi;
        shard_piece(&z->map, b->lo, b->hi, &plo, &phi);
        float *dst = z->model->grad_shard + (plo - z->map.begin), *src = z->slots[b->slot];
        for (int64_t i = 0; i < phi - plo; i++) dst[i] += src[i];
        z->slot_busy[b->slot] = 0;
    }
    if (z->stage >= 2) release_range(z->model->grads, b->lo, b->hi);
}

// Completes the finished buckets (or, with block, all of them), keeping order.
static inline void zero_cpu_progress(Zero *z, int block) {
    int kept = 0;
    for (int i = 0; i < z->num_inflight; i++) {
        ZeroBucket *b = &z->inflight[i];
        if (block || comm_test(&b->req)) zero_cpu_bucket_done(z, b);
        else z->inflight[kept++] = *b;
    }
    z->num_inflight = kept;
}

static inline int zero_cpu_take_slot(Zero *z) {
    for (;;) {
        for (int s = 0; s < ZERO_SLOTS; s++) {
            if (!z->slot_busy[s]) { z->slot_busy[s] = 1; return s; }
        }
        // every slot is busy: finish the oldest bucket that holds one
        for (int i = 0; i < z->num_inflight; i++) {
            if (z->inflight[i].slot < 0) continue;
            zero_cpu_bucket_done(z, &z->inflight[i]);
            memmove(&z->inflight[i], &z->inflight[i + 1], sizeof(ZeroBucket) * (size_t)(z->num_inflight - i - 1));
            z->num_inflight--;
            break;
        }
    }
}

// Starts reducing [lo, hi); overwrite (stages 2, 3): the result replaces the shard's rather than adds to it.
static inline void zero_cpu_launch(Zero *z, int64_t lo, int64_t hi, int overwrite) {
    if (z->num_inflight == z->cap_inflight) {
        z->cap_inflight = z->cap_inflight ? 2 * z->cap_inflight : 16;
        z->inflight = (ZeroBucket *)realloc(z->inflight, sizeof(ZeroBucket) * (size_t)z->cap_inflight);
        CHECK(z->inflight != NULL, "out of memory");
    }
    ZeroBucket b = {lo, hi, -1, {0}};
    float *grads = z->model->grads;
    if (z->stage == 0) {
        b.req = comm_all_reduce_start(z->dp, grads + lo, (size_t)(hi - lo), COMM_F32);
    } else {
        int64_t plo, phi;
        shard_piece(&z->map, lo, hi, &plo, &phi);
        // stage 1: in place, the piece stays at its place in the full gradient
        float *recv = z->stage == 1 ? grads + plo : z->model->grad_shard + (phi > plo ? plo - z->map.begin : 0);
        if (z->stage >= 2 && !overwrite && phi > plo) {
            b.slot = zero_cpu_take_slot(z);
            recv = z->slots[b.slot];
        }
        shard_counts(&z->map, lo, hi, z->counts);
        b.req = comm_reduce_scatter_start(z->dp, grads + lo, recv, z->counts, COMM_F32);
    }
    z->inflight[z->num_inflight++] = b;
}

// A segment's gradients of this pass are complete: its reduction starts, bucket by bucket.
static void zero_cpu_grads_ready(void *ctx, int segment) {
    Zero *z = (Zero *)ctx;
    if (!z->reduce_now) return;
    comm_test_fault(z->dp->comm);  // (tests only: LLMC_TEST_FAULT)
    int64_t lo, hi;
    param_segment_range(&z->model->layout, segment, &lo, &hi);
    int overwrite = z->stage >= 2 && !z->reduced[segment];
    if (z->stage >= 2) z->reduced[segment] = 1;
    for (int64_t b = lo; b < hi; b += z->bucket_elems) zero_cpu_launch(z, b, shard_clip(b + z->bucket_elems, hi), overwrite);
    zero_cpu_progress(z, 0);
}

// ---------------------------------------------------------------------------
// ZeRO-3 parameter segments

static inline CommRequest zero_cpu_gather_start(Zero *z, int s) {
    int64_t lo, hi, plo, phi;
    param_segment_range(&z->model->layout, s, &lo, &hi);
    shard_piece(&z->map, lo, hi, &plo, &phi);
    shard_counts(&z->map, lo, hi, z->counts);
    const float *mine = z->model->param_shard + (phi > plo ? plo - z->map.begin : 0);
    return comm_all_gather_start(z->dp, mine, z->model->params + lo, z->counts, COMM_F32);
}

// Completes the prefetched segment's gather, if one is in flight.
static inline void zero_cpu_finish_prefetch(Zero *z) {
    if (z->prefetch_segment < 0) return;
    comm_wait(&z->prefetch_req);
    z->resident[z->prefetch_segment] = 1;
    z->prefetch_segment = -1;
}

static inline void zero_cpu_gather_segment(Zero *z, int s) {
    if (z->resident[s]) return;
    if (z->prefetch_segment == s) {
        zero_cpu_finish_prefetch(z);
        return;
    }
    zero_cpu_finish_prefetch(z);
    CommRequest r = zero_cpu_gather_start(z, s);
    zero_cpu_progress(z, 0);
    comm_wait(&r);
    z->resident[s] = 1;
}

static inline void zero_cpu_release_segment(Zero *z, int s) {
    if (!z->resident[s]) return;
    int64_t lo, hi;
    param_segment_range(&z->model->layout, s, &lo, &hi);
    release_range(z->model->params, lo, hi);
    z->resident[s] = 0;
}

// Segment s is made resident; the others are released, but for the embeddings
// in a forward (the classifier reads wte at its end) and a segment being
// gathered ahead. Only gradients (a split backward's weight gradients): nothing to gather.
static void zero_cpu_params_needed(void *ctx, int segment, HookUse use) {
    Zero *z = (Zero *)ctx;
    if (use == HOOK_GRADS) return;
    for (int s = 0; s < z->num_segments; s++) {
        if (s == segment || s == z->prefetch_segment || (use == HOOK_FORWARD && s == 0)) continue;
        zero_cpu_release_segment(z, s);
    }
    zero_cpu_gather_segment(z, segment);
}

// The pass needs segment s next: its gather starts (one at a time), overlapping this one's compute.
static void zero_cpu_prefetch(void *ctx, int s) {
    Zero *z = (Zero *)ctx;
    if (z->resident[s] || z->prefetch_segment >= 0) return;
    z->prefetch_req = zero_cpu_gather_start(z, s);
    z->prefetch_segment = s;
}

// ---------------------------------------------------------------------------
// the ZeRO verbs (zero_shard.h)

// Takes over the model's hooks. The model was made with zero_sharding(stage,
// dp->rank, dp->size) and its weights set (gpt_shard_params), identically on
// every rank of the data group. bucket_mb: the size of one gradient reduction.
static inline void zero_init(Zero *z, GPT *model, CommGroup *dp, int stage, double bucket_mb) {
    ZERO_INIT_COMMON(z, model, dp, stage, bucket_mb);
    if (stage >= 2) {
        int64_t slot = z->bucket_elems < z->map.shard ? z->bucket_elems : z->map.shard;
        for (int s = 0; s < ZERO_SLOTS; s++) z->slots[s] = (float *)mallocCheck(sizeof(float) * (size_t)slot);
    }
    if (stage == 3) {
        z->resident = (unsigned char *)callocCheck((size_t)z->num_segments, 1);
        z->prefetch_segment = -1;
    }
    model->hooks.ctx = z;
    model->hooks.grads_ready = zero_cpu_grads_ready;
    model->hooks.params_needed = stage == 3 ? zero_cpu_params_needed : NULL;
    model->hooks.prefetch = stage == 3 ? zero_cpu_prefetch : NULL;
}

// The memory this rank holds (zero_shard.h's formula; fp32 params are the master copy).
static inline ZeroMemory zero_memory(const Zero *z) { return shard_memory(z->stage, &z->map, 4, 4, 8); }

// Before the first pass of an optimizer step.
static inline void zero_begin_step(Zero *z) {
    // stage 0's AdamW zeroed each gradient as it read it; stages 2 and 3 left them released (zero)
    if (z->stage == 1) gpt_zero_grad(z->model);
    memset(z->reduced, 0, (size_t)z->num_segments);
}

// Before a pass that writes gradients (a micro-step's forward, whose
// classifier adds to wte's, or a pipeline stage's backward): finishes the
// earlier reductions still in flight (the pass adds to those buffers) and says
// whether this pass's gradients are reduced (last: the step's last
// micro-batch of the segments the pass covers).
static inline void zero_begin_pass(Zero *z, int last) {
    zero_cpu_progress(z, 1);
    z->reduce_now = z->stage >= 2 || last;
}

// Completes every reduction in flight.
static inline void zero_wait_grads(Zero *z) { zero_cpu_progress(z, 1); }

// Where this rank's reduced gradient of [lo, hi) is, once zero_wait_grads
// completed the reductions: the whole range at stage 0 (*plo = lo), else its
// shard's piece [*plo, *phi); indexed like the flat buffer.
static inline float *zero_reduced_grads(Zero *z, int64_t lo, int64_t hi, int64_t *plo, int64_t *phi) {
    if (z->stage == 0) {
        *plo = lo, *phi = hi;
        return z->model->grads;
    }
    shard_piece(&z->map, lo, hi, plo, phi);
    return z->model->grad_shard - z->map.begin;
}

// Tensor parallel with sequence parallel: each rank's gradients of the
// replicated tensors (LayerNorms, the biases added after a reduction, wpe)
// cover its rows only; their reduced pieces are summed over the tensor group.
static inline void zero_tp_sum_replicated(Zero *z) {
    const GPT *m = z->model;
    if (!m->tp.sp) return;
    for (int t = 0; t < m->layout.num_tensors; t++) {
        const ParamTensor *x = &m->layout.tensors[t];
        if (x->split != SPLIT_NONE) continue;
        int64_t plo, phi;
        float *g = zero_reduced_grads(z, x->offset, x->offset + x->numel, &plo, &phi);
        if (phi > plo) tp_all_reduce((TPContext *)&m->tp, g + plo, (size_t)(phi - plo), COMM_F32);
    }
}

// This rank's part of the squared gradient norm, once the reductions are
// complete (no communication: the caller sums it over every rank): its shard
// (at stage 0, where every data rank holds the same sums, data rank 0 counts
// them), the replicated tensors counted on tensor rank 0 only.
static inline double zero_grad_sumsq_owned(Zero *z) {
    const GPT *m = z->model;
    if (z->stage == 0 && z->dp->rank != 0) return 0.0;
    int64_t lo = z->stage == 0 ? 0 : z->map.begin, hi = z->stage == 0 ? z->map.num_elements : z->map.end;
    const float *g = zero_reduced_grads(z, lo, hi, &lo, &hi);
    if (m->tp.size == 1) return sum_of_squares(g + lo, hi - lo);
    double ss = 0.0;
    for (int t = 0; t < m->layout.num_tensors; t++) {
        const ParamTensor *x = &m->layout.tensors[t];
        if (x->split == SPLIT_NONE && m->tp.rank != 0) continue;
        int64_t a = x->offset > lo ? x->offset : lo, b = x->offset + x->numel < hi ? x->offset + x->numel : hi;
        if (b > a) ss += sum_of_squares(g + a, b - a);
    }
    return ss;
}

// After the model's update of its shard (gpt_update): every rank's weights
// made current again: stages 1 and 2 all-gather the updated weights into
// every rank's whole buffer; stage 3 drops the segments gathered before the
// update (each is gathered again when next needed).
static inline void zero_gather_params(Zero *z) {
    if (z->stage == 0) return;
    if (z->stage == 3) {
        zero_cpu_finish_prefetch(z);  // (its data predate the update)
        for (int s = 0; s < z->num_segments; s++)
            if (param_segment_held(&z->model->layout, s)) zero_cpu_release_segment(z, s);
        return;
    }
    int64_t n = z->map.num_elements, chunks = ceil_div_i64(n, z->bucket_elems);
    CommRequest *reqs = (CommRequest *)mallocCheck(sizeof(CommRequest) * (size_t)chunks);
    for (int64_t c = 0; c < chunks; c++) {
        int64_t lo = c * z->bucket_elems, hi = shard_clip(lo + z->bucket_elems, n);
        shard_counts(&z->map, lo, hi, z->counts);
        reqs[c] = comm_all_gather_start(z->dp, NULL, z->model->params + lo, z->counts, COMM_F32);
    }
    comm_wait_all(reqs, (int)chunks);
    free(reqs);
}

static inline void zero_free(Zero *z) {
    zero_cpu_progress(z, 1);
    if (z->stage == 3) zero_cpu_finish_prefetch(z);
    memset(&z->model->hooks, 0, sizeof(z->model->hooks));
    for (int s = 0; s < ZERO_SLOTS; s++) free(z->slots[s]);
    free(z->resident);
    free(z->reduced);
    free(z->inflight);
    free(z->counts);
    memset(z, 0, sizeof(*z));
}

#endif  // LLMC_ZERO_CPU_H
