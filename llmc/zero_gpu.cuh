// zero_gpu.cuh: data parallelism with ZeRO 0-3 for the GPU trainer
// (gpt_gpu.cuh), over a device data group (comm_nccl.cuh or comm_staged.cuh):
// the GPU backend of the ZeRO verbs (zero_shard.h lists them). The model owns
// its sharded weights, gradients and AdamW state and updates them
// (gpt_gpu.cuh's gpu_gpt_update); this layer decides what is reduced and
// gathered when, and moves the data, acting only through the model's GPTHooks.
//
//   --zero 0: the fp32 gradients are all-reduced in place; every rank holds
//             everything and updates all of it.
//   --zero 1: the gradients are reduce-scattered in place (each rank's sum
//             lands at its place in the whole buffer); the model holds master
//             weights and AdamW moments of its shard only, updates them, and
//             the updated floatX weights are all-gathered in buckets.
//   --zero 2: as 1, but every pass's gradients are reduce-scattered, from
//             the slot the backward wrote a layer's gradients into (the
//             embeddings' and ln_f's buffers: their own), into the rank's
//             gradient shard; before a pass writes a buffer again, the
//             compute stream waits for the reduction out of it and clears
//             it. Accumulation over passes: before a reduction the rank adds
//             its shard so far into its own piece of the buffer, so the
//             reduce-scatter's result is the running sum.
//   --zero 3: as 2, and the floatX weights are sharded too: a layer's weights
//             are all-gathered into a slot before its forward or backward
//             (GPTHooks.params_needed), and the layer the model will need next
//             (GPTHooks.prefetch) is gathered while this one computes; the
//             embeddings' and ln_f's are gathered once per weight update into
//             buffers of their own.
// Overlap: a segment's reduction starts in GPTHooks.grads_ready, as soon as
// its backward is queued, and runs on the backend's stream (NCCL) while the
// backward goes on; each segment is cut into buckets of --bucket-mb. Stages 0
// and 1 reduce on the last pass of the step only (the passes before
// accumulate in place). The compute stream waits for a reduction or a gather
// on the device (comm_stream_wait) only where it reuses or reads that buffer;
// the staged MPI backend completes them on the host instead (no overlap).
// The hooks do not depend on the order of the calls, so a pipeline stage's
// passes over its micro-batches run in any order its schedule says.
// The gradients are the mean over the whole global batch already (the loss
// scale counts every rank's tokens), so the reductions are plain sums.
#ifndef LLMC_ZERO_GPU_CUH
#define LLMC_ZERO_GPU_CUH

#include <math.h>

#include "comm.h"        // defines: CommRequest, CommGroup, comm_wait, comm_test, ...
#include "gpt_gpu.cuh"   // defines: GPTGPU, GPU_PARAM_SLOTS, gpu_shard_grads, segment_slot, ...
#include "zero_shard.h"  // defines: ShardMap, ZERO_INIT_COMMON, ZeroMemory, shard_memory, shard_clip, ...

typedef struct {
    int segment;      // whose gradients it reduces
    CommRequest req;
} ZeroReduction;

typedef struct {
    GPTGPU *model;
    CommGroup *dp;        // device data group (data x context: the ranks that hold the same parameters)
    int stage;
    ShardMap map;         // this rank's shard of the flat buffer (the model's, at stage >= 1)
    int64_t bucket_elems;
    int num_segments;
    int reduce_now;       // this pass's gradients are reduced
    unsigned char *reduced;      // stage 2+: (num_segments) reduced into the shard already this step
    ZeroReduction *inflight;     // reductions started and not yet seen complete
    int num_inflight, cap_inflight;
    size_t *counts;       // scratch: dp->size counts
    unsigned char *needs_clear;  // stage 2+: (num_segments) the buffer holds reduced gradients, to clear before a write
    int *grad_slot_segment;      // stage 2+: (grad slots) the segment whose gradients each slot holds (-1: none)
    int param_slot_segment[GPU_PARAM_SLOTS];  // stage 3: the segment whose weights each slot holds (-1: none)
    CommRequest *gather;  // stage 3: (num_segments) each segment's last all-gather
    uint64_t *gathered;   // stage 3: (num_segments) model->params_version + 1 of the weights there; 0: none
} Zero;

static inline int zero_gpu_is_layer(const Zero *z, int s) { return s >= 1 && s <= z->num_segments - 2; }

// The memory this rank holds (zero_shard.h's formula): floatX weights, fp32
// gradients, fp32 master weights + AdamW m, v; the model's segment buffers
// and slots (stages 2 and 3) come on top (model->mem.segment_buffers).
static inline ZeroMemory zero_memory(const Zero *z) {
    return shard_memory(z->stage, &z->map, sizeof(floatX), sizeof(float), 3 * sizeof(float));
}

// Completes every reduction started so far (host wait).
static inline void zero_wait_grads(Zero *z) {
    for (int i = 0; i < z->num_inflight; i++) comm_wait(&z->inflight[i].req);
    z->num_inflight = 0;
}

// Forgets the reductions already complete (without waiting).
static inline void zero_gpu_prune(Zero *z) {
    int kept = 0;
    for (int i = 0; i < z->num_inflight; i++)
        if (!comm_test(&z->inflight[i].req)) z->inflight[kept++] = z->inflight[i];
    z->num_inflight = kept;
}

static inline void zero_gpu_track(Zero *z, int segment, CommRequest req) {
    if (z->num_inflight == z->cap_inflight) {
        z->cap_inflight = z->cap_inflight ? 2 * z->cap_inflight : 64;
        z->inflight = (ZeroReduction *)realloc(z->inflight, sizeof(ZeroReduction) * (size_t)z->cap_inflight);
        CHECK(z->inflight != NULL, "out of memory");
    }
    z->inflight[z->num_inflight].segment = segment;
    z->inflight[z->num_inflight].req = req;
    z->num_inflight++;
}

// The compute stream waits (on the device) for the reductions out of segment s's buffer.
static inline void zero_gpu_wait_segment(Zero *z, int s) {
    for (int i = 0; i < z->num_inflight; i++)
        if (z->inflight[i].segment == s) comm_stream_wait(&z->inflight[i].req, z->model->stream);
}

__global__ void zero_gpu_add_kernel(float *dst, const float *src, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] += src[i];
}

// ---------------------------------------------------------------------------
// gradients

// Starts the reduction of segment s's gradients, bucket by bucket.
static void zero_gpu_grads_ready(void *ctx, int s) {
    Zero *z = (Zero *)ctx;
    if (!z->reduce_now) return;
    comm_test_fault(z->dp->comm);  // (tests only: LLMC_TEST_FAULT)
    GPTGPU *m = z->model;
    float *g = m->grad_view[s];  // indexed like the flat buffer
    float *shard = m->grad_shard ? gpu_shard_grads(m) : NULL;
    int accumulate = z->stage >= 2 && z->reduced[s];
    if (z->stage >= 2) z->reduced[s] = z->needs_clear[s] = 1;
    int64_t lo0, hi0;
    param_segment_range(&m->layout, s, &lo0, &hi0);
    for (int64_t lo = lo0; lo < hi0; lo += z->bucket_elems) {
        int64_t hi = shard_clip(lo + z->bucket_elems, hi0), plo, phi;
        CommRequest r;
        if (z->stage == 0) {
            r = comm_all_reduce_start(z->dp, g + lo, (size_t)(hi - lo), COMM_F32);
        } else {
            shard_piece(&z->map, lo, hi, &plo, &phi);
            shard_counts(&z->map, lo, hi, z->counts);
            float *recv = g + plo;  // stage 1: in place, the piece stays at its place in the whole buffer
            if (z->stage >= 2) {
                recv = phi > plo ? shard + plo : m->grad_shard;
                if (accumulate && phi > plo) {
                    launch_kernel(zero_gpu_add_kernel, ceil_div_int(phi - plo, 256), 256, 0, m->stream, g + plo,
                                  shard + plo, phi - plo);
                    CUDA_CHECK_LAUNCH();
                }
            }
            r = comm_reduce_scatter_start(z->dp, g + lo, recv, z->counts, COMM_F32);
        }
        zero_gpu_track(z, s, r);
    }
}

// Stage 2+: before a pass writes segment s's gradients: a layer gets its
// slot (evicting the segment there, whose gradients were reduced), and a
// buffer that holds reduced gradients is cleared once the reductions out of
// it are done.
static void zero_gpu_prepare_grads(Zero *z, int s) {
    GPTGPU *m = z->model;
    if (zero_gpu_is_layer(z, s)) {
        int k = segment_slot(&m->layout, s, m->grad_segments.num_slots), old = z->grad_slot_segment[k];
        if (old != s) {
            if (old >= 0) {
                zero_gpu_wait_segment(z, old);
                m->grad_view[old] = NULL;
            }
            z->grad_slot_segment[k] = s;
            m->grad_view[s] = (float *)segment_view(&m->layout, m->grad_segments.slot[k], s, sizeof(float));
            z->needs_clear[s] = 1;
        }
    }
    if (!z->needs_clear[s]) return;
    zero_gpu_wait_segment(z, s);
    gpu_gpt_zero_segment_grads(m, s);
    z->needs_clear[s] = 0;
}

// ---------------------------------------------------------------------------
// stage 3: weights by segment

// Starts gathering segment s's floatX weights into its buffer or slot.
static void zero_gpu_gather_start(Zero *z, int s) {
    comm_test_fault(z->dp->comm);  // (tests only: LLMC_TEST_FAULT)
    GPTGPU *m = z->model;
    comm_wait(&z->gather[s]);  // an earlier gather of s (long done)
    if (zero_gpu_is_layer(z, s)) {
        int k = segment_slot(&m->layout, s, m->param_segments.num_slots), old = z->param_slot_segment[k];
        if (old >= 0 && old != s) {
            comm_wait(&z->gather[old]);
            z->gathered[old] = 0;
            m->param_view[old] = NULL;
        }
        z->param_slot_segment[k] = s;
        m->param_view[s] = (floatX *)segment_view(&m->layout, m->param_segments.slot[k], s, sizeof(floatX));
    }
    int64_t lo, hi, plo, phi;
    param_segment_range(&m->layout, s, &lo, &hi);
    shard_piece(&z->map, lo, hi, &plo, &phi);
    shard_counts(&z->map, lo, hi, z->counts);
    const floatX *mine = phi > plo ? gpu_shard_params_compute(m) + plo : m->params_compute_shard;
    z->gather[s] = comm_all_gather_start(z->dp, mine, m->param_view[s] + lo, z->counts, COMM_FLOATX);
    z->gathered[s] = m->params_version + 1;
}

static inline int zero_gpu_current(const Zero *z, int s) { return z->gathered[s] == z->model->params_version + 1; }

// Before work reading segment s's weights (gathered now unless a prefetch
// did) or writing its gradients (stage 2+) is queued.
static void zero_gpu_params_needed(void *ctx, int s, HookUse use) {
    Zero *z = (Zero *)ctx;
    GPTGPU *m = z->model;
    if (z->stage >= 3 && use != HOOK_GRADS) {
        if (!zero_gpu_current(z, s)) zero_gpu_gather_start(z, s);
        comm_stream_wait(&z->gather[s], m->stream);
    }
    if (z->stage >= 2 && use != HOOK_FORWARD) zero_gpu_prepare_grads(z, s);
}

// Stage 3: the pass will need segment s next: its gather starts now.
static void zero_gpu_prefetch(void *ctx, int s) {
    Zero *z = (Zero *)ctx;
    if (!zero_gpu_current(z, s)) zero_gpu_gather_start(z, s);
}

// ---------------------------------------------------------------------------
// the ZeRO verbs (zero_shard.h)

// Takes over the model's hooks. The model was made with zero_sharding(stage,
// dp->rank, dp->size). bucket_mb: the size of one gradient reduction.
static inline void zero_init(Zero *z, GPTGPU *model, CommGroup *dp, int stage, double bucket_mb) {
    ZERO_INIT_COMMON(z, model, dp, stage, bucket_mb);
    z->needs_clear = (unsigned char *)callocCheck((size_t)z->num_segments, 1);
    int slots = model->grad_segments.num_slots;
    z->grad_slot_segment = (int *)mallocCheck(sizeof(int) * (size_t)(slots > 0 ? slots : 1));
    for (int k = 0; k < slots; k++) z->grad_slot_segment[k] = -1;
    for (int k = 0; k < GPU_PARAM_SLOTS; k++) z->param_slot_segment[k] = -1;
    z->gather = (CommRequest *)callocCheck((size_t)z->num_segments, sizeof(CommRequest));
    z->gathered = (uint64_t *)callocCheck((size_t)z->num_segments, sizeof(uint64_t));
    model->hooks.ctx = z;
    model->hooks.grads_ready = zero_gpu_grads_ready;
    model->hooks.params_needed = stage >= 2 ? zero_gpu_params_needed : NULL;
    model->hooks.prefetch = stage >= 3 ? zero_gpu_prefetch : NULL;
}

// Before the first pass of an optimizer step.
static inline void zero_begin_step(Zero *z) {
    gpu_gpt_zero_grad(z->model);  // stages 0, 1: the whole buffer (2+: buffers are cleared before their writes)
    memset(z->reduced, 0, (size_t)z->num_segments);
}

// Before a pass that writes gradients (a micro-step's forward, whose
// classifier adds to wte's, or a pipeline stage's backward): says whether this
// pass's gradients are reduced (last: the step's last micro-batch of the
// segments the pass covers; stage 2+: always).
static inline void zero_begin_pass(Zero *z, int last) {
    zero_gpu_prune(z);
    z->reduce_now = z->stage >= 2 || last;
}

// Tensor parallel with sequence parallel: each rank's gradients of the
// replicated tensors cover its rows only; their reduced pieces are summed
// over the tensor group (after zero_wait_grads).
static inline void zero_tp_sum_replicated(Zero *z) {
    GPTGPU *m = z->model;
    if (!m->tp.sp) return;
    float *g = z->stage == 0 ? m->grads : gpu_shard_grads(m);
    for (int t = 0; t < m->layout.num_tensors; t++) {
        const ParamTensor *x = &m->layout.tensors[t];
        int64_t plo = x->offset, phi = x->offset + x->numel;
        if (x->split != SPLIT_NONE) continue;
        if (z->stage > 0) shard_piece(&z->map, x->offset, x->offset + x->numel, &plo, &phi);
        if (phi > plo) tp_all_reduce(&m->tp, g + plo, (size_t)(phi - plo), COMM_F32);
    }
}

// After the step's last pass (and zero_wait_grads): this rank's part of the
// squared gradient norm, no communication (the caller sums it over every
// rank): its shard (at stage 0, where every data rank holds the same sums,
// data rank 0 counts them), the replicated tensors counted on tensor rank 0 only.
static inline double zero_grad_sumsq_owned(Zero *z) {
    GPTGPU *m = z->model;
    if (z->stage == 0 && z->dp->rank != 0) return 0.0;
    return gpu_gpt_grad_sumsq(m, m->tp.size > 1 && m->tp.rank != 0);
}

// Where this rank's reduced gradient of [lo, hi) is, once the reductions are
// complete: the whole range at stage 0 (*plo = lo), else its shard's piece
// [*plo, *phi); indexed like the flat buffer (device memory).
static inline float *zero_reduced_grads(Zero *z, int64_t lo, int64_t hi, int64_t *plo, int64_t *phi) {
    if (z->stage == 0) {
        *plo = lo, *phi = hi;
        return z->model->grads;
    }
    shard_piece(&z->map, lo, hi, plo, phi);
    return gpu_shard_grads(z->model);
}

// After the AdamW step on the shard: every rank gets every updated floatX
// weight (stages 1 and 2; stage 3 gathers segments when they are next needed).
static inline void zero_gather_params(Zero *z) {
    if (z->stage == 0 || z->stage == 3) return;
    NVTX_RANGE("gather_weights");
    floatX *w = z->model->params_compute;
    int64_t n = z->map.num_elements, chunks = ceil_div_i64(n, z->bucket_elems);
    CommRequest *reqs = (CommRequest *)mallocCheck(sizeof(CommRequest) * (size_t)chunks);
    for (int64_t c = 0; c < chunks; c++) {
        int64_t lo = c * z->bucket_elems, hi = shard_clip(lo + z->bucket_elems, n);
        shard_counts(&z->map, lo, hi, z->counts);
        reqs[c] = comm_all_gather_start(z->dp, NULL, w + lo, z->counts, COMM_FLOATX);
    }
    comm_wait_all(reqs, (int)chunks);
    free(reqs);
}

static inline void zero_free(Zero *z) {
    zero_wait_grads(z);
    for (int s = 0; s < z->num_segments; s++) comm_wait(&z->gather[s]);
    memset(&z->model->hooks, 0, sizeof(z->model->hooks));
    free(z->inflight);
    free(z->reduced);
    free(z->needs_clear);
    free(z->grad_slot_segment);
    free(z->gather);
    free(z->gathered);
    free(z->counts);
    memset(z, 0, sizeof(*z));
}

#endif  // LLMC_ZERO_GPU_CUH
