// pipeline_gpu.cuh: pipeline-parallel training on the GPU trainer: the stage
// operations pipeline.h's runtime executes (F, B and W of gpt_gpu.cuh's
// gpu_stage_* on one micro-batch's activations, queued on the model's stream)
// and, as pipeline_cpu.h does for the CPU trainer, the rest of a pipeline
// rank's step: its ZeRO layer (zero_gpu.cuh, any stage) over the ranks holding
// the same stages, and the tied token embedding (the first stage updates wte;
// the last stage's floatX copy receives the new weights after each step, so it
// is the same bits; its gradient is reduced over the last stage's data group
// and added to the first stage's reduced one; the norm is summed over the
// stages, the copy not counted).
//
// Messages go over the device pipeline group: floatX activations, fp32 gradients.
// Over NCCL, whose point-to-point calls run in order on one stream and pair
// by order, the runtime executes the fused lists (pp_schedule.h: each receive
// in one group with the sends before its consumer; each group one NCCL
// group, pipeline.h's batch, so its sends and receives progress together);
// their simulation shows the interleaved schedule's can deadlock, so that
// pairing is refused. The staged MPI backend runs the lists as the CPU trainer
// does. A compute that reads a received buffer waits for it on the device.
// Each action's time is taken after the stream drains (the report's F, B and
// W times).
#ifndef LLMC_PIPELINE_GPU_CUH
#define LLMC_PIPELINE_GPU_CUH

#include "comm.h"        // defines: CommGroup, CommRequest, comm_stream_wait, Comm, ...
#include "gpt_gpu.cuh"   // defines: GPTGPU, GPUActs, gpu_acts_alloc, gpu_acts_free, ...
#include "pipeline.h"    // defines: PPRunner, pp_runner_stage, PPBuffer, PP_BUF_IN, ...
#include "pp_layout.h"   // defines: PPLayout, pp_holding
#include "rand.h"        // defines: Rng
#include "zero_gpu.cuh"  // defines: ZeroGPU, zero_gpu_begin_pass, zero_gpu_begin_step, zero_gpu_complete, ...

#define PP_TAG_WTE 101

typedef struct {
    GPTGPU *model;
    ZeroGPU *zero;
    CommGroup *pipe, *dp;      // device groups
    CommGroup *host_pipe, *host_world;  // the pipeline group and every rank, on host buffers (scalars)
    PPRunner run;
    int B, T;
    float dloss;
    const int *xs;             // the step's inputs on the host ((m, B*T)), for the embedding backward's index
    GPUActs *eval;             // (v): one micro-batch's forward per chunk, for evaluation and sampling
    int first, last;           // this rank holds the first stage (wte) / the last (the classifier's copy)
    ShardMap wte_shards;       // the first stage's ZeRO shards, over its layout (wte is its first tensor)
    int64_t wte_elems;         // Vp * C
    float *wte_piece;          // (device) the tie's receive buffer
    size_t *counts;            // (data ranks)
} PipelineGPU;

static inline int ppg_first_layer(const PipelineGPU *pp, int chunk) {
    return pp->run.layout.first_layer[pp_runner_stage(&pp->run, chunk)];
}
static inline int ppg_end_layer(const PipelineGPU *pp, int chunk) {
    return pp->run.layout.first_layer[pp_runner_stage(&pp->run, chunk) + 1];
}

// ---------------------------------------------------------------------------
// the stage operations (PPStageOps)

static void *ppg_slot_new(void *ctx, int chunk) {
    PipelineGPU *pp = (PipelineGPU *)ctx;
    GPUActs *a = (GPUActs *)callocCheck(1, sizeof(GPUActs));
    gpu_acts_alloc(pp->model, a, ppg_first_layer(pp, chunk), ppg_end_layer(pp, chunk), pp->run.split);
    return a;
}
static void ppg_slot_free(void *ctx, void *slot) {
    (void)ctx;
    gpu_acts_free((GPUActs *)slot);
    free(slot);
}
static void ppg_forward(void *ctx, void *slot, int chunk, int mb) {
    (void)chunk;
    PipelineGPU *pp = (PipelineGPU *)ctx;
    gpu_stage_forward(pp->model, (GPUActs *)slot, pp->xs + (size_t)mb * pp->B * pp->T, mb, pp->B, pp->T, 1, pp->dloss);
}
static void ppg_backward(void *ctx, void *slot, int chunk, int mb, int last) {
    (void)chunk, (void)mb;
    PipelineGPU *pp = (PipelineGPU *)ctx;
    zero_gpu_begin_pass(pp->zero, last);
    gpu_stage_backward(pp->model, (GPUActs *)slot);
}
static void ppg_weights(void *ctx, void *slot, int chunk, int mb, int last) {
    (void)chunk, (void)mb;
    PipelineGPU *pp = (PipelineGPU *)ctx;
    zero_gpu_begin_pass(pp->zero, last);
    gpu_stage_backward_weights(pp->model, (GPUActs *)slot);
}
static void *ppg_buffer_of(GPUActs *a, PPBuffer which) {
    switch (which) {
        case PP_BUF_IN: return a->input;
        case PP_BUF_OUT: return a->residual3[a->l1 - 1];
        default: return a->dres;  // the gradient received at the output becomes the input's in place
    }
}
static void *ppg_buffer(void *ctx, void *slot, PPBuffer which) {
    (void)ctx;
    return ppg_buffer_of((GPUActs *)slot, which);
}
static GPUActs *ppg_eval_acts(PipelineGPU *pp, int chunk) {
    GPUActs *a = &pp->eval[chunk];
    if (!a->memory) gpu_acts_alloc(pp->model, a, ppg_first_layer(pp, chunk), ppg_end_layer(pp, chunk), 0);
    return a;
}
static float ppg_eval_forward(void *ctx, int chunk, const int *x, const int *y, int B, int T) {
    PipelineGPU *pp = (PipelineGPU *)ctx;
    GPTGPU *m = pp->model;
    GPUActs *a = ppg_eval_acts(pp, chunk);
    size_t N = (size_t)m->B * m->T;
    int *xp = (int *)callocCheck(N, sizeof(int)), *yp = y ? (int *)callocCheck(N, sizeof(int)) : NULL;
    memcpy(xp, x, sizeof(int) * (size_t)B * T);
    if (y) memcpy(yp, y, sizeof(int) * (size_t)B * T);
    gpu_gpt_upload_tokens(m, xp, yp, 1);
    gpu_stage_forward(m, a, xp, 0, B, T, y != NULL, 0.0f);
    float loss = 0.0f;
    if (y && a->l1 == m->cfg.num_layers) {
        size_t n = (size_t)B * T;
        CUDA_CHECK(cudaMemcpyAsync(m->h_losses, m->step_losses, sizeof(float) * n, cudaMemcpyDeviceToHost, m->stream));
        CUDA_CHECK(cudaStreamSynchronize(m->stream));
        double total = 0.0;
        for (size_t i = 0; i < n; i++) total += m->h_losses[i];
        loss = (float)(total / (double)n);
    }
    free(xp);
    free(yp);
    return loss;
}
static void *ppg_eval_buffer(void *ctx, int chunk, PPBuffer which) {
    return ppg_buffer_of(ppg_eval_acts((PipelineGPU *)ctx, chunk), which);
}
static void ppg_consume(void *ctx, CommRequest *r) { comm_stream_wait(r, ((PipelineGPU *)ctx)->model->stream); }
static void ppg_sync(void *ctx) { CUDA_CHECK(cudaStreamSynchronize(((PipelineGPU *)ctx)->model->stream)); }

// ---------------------------------------------------------------------------
// set-up

// model: made with gpu_gpt_init(pp_holding of this rank, no activation sets),
// its weights set; zero: its ZeRO layer over the device data group.
// layout: the stages' layers (pp_layout_init's; taken over). fuse: the
// backend pairs messages by order (NCCL).
static void pipeline_gpu_init(PipelineGPU *pp, GPTGPU *model, ZeroGPU *zero, Comm *comm, CommGroup *dev_groups,
                              PPLayout layout, PPKind kind, int fuse, int B, int T, float dloss,
                              const char *trace_path) {
    memset(pp, 0, sizeof(*pp));
    pp->model = model;
    pp->zero = zero;
    pp->pipe = &dev_groups[COMM_PIPELINE];
    pp->dp = &dev_groups[COMM_DATA];
    pp->host_pipe = comm_group(comm, COMM_PIPELINE);
    pp->host_world = comm_group(comm, COMM_WORLD);
    pp->B = B, pp->T = T, pp->dloss = dloss;
    PPStageOps ops = {pp, ppg_slot_new, ppg_slot_free, ppg_forward, ppg_backward, ppg_weights, ppg_buffer,
                      ppg_eval_forward, ppg_eval_buffer, ppg_consume, ppg_sync};
    pp_runner_init(&pp->run, ops, pp->pipe, COMM_FLOATX, COMM_F32, B, T, model->cfg.channels,
                   model->tp.sp ? model->tp.size : 1, layout, kind, fuse, trace_path, comm->rank);
    pp->first = pp->pipe->rank == 0;
    pp->last = pp->pipe->rank == pp->pipe->size - 1;
    unsigned char *layers = (unsigned char *)mallocCheck((size_t)model->cfg.num_layers);
    ParamHolding h = pp_holding(&pp->run.layout, 0, -1, model->cfg.num_layers, layers);
    ParamLayout first;
    param_layout_init_held(&first, &model->cfg, &h, model->tp.size, model->tp.rank);
    shard_map_init(&pp->wte_shards, first.num_elements, pp->dp->rank, pp->dp->size);
    pp->wte_elems = param_tensor(&first, PK_WTE, -1)->numel;  // (its vocabulary slice with tensor parallelism)
    param_layout_free(&first);
    free(layers);
    pp->counts = (size_t *)mallocCheck(sizeof(size_t) * (size_t)pp->dp->size);
    if (pp->first) pp->wte_piece = (float *)cudaMallocCheck(sizeof(float) * (size_t)pp->wte_elems);
    pp->eval = (GPUActs *)callocCheck((size_t)pp->run.v, sizeof(GPUActs));
}

static void pipeline_gpu_free(PipelineGPU *pp) {
    for (int c = 0; c < pp->run.v; c++) gpu_acts_free(&pp->eval[c]);
    pp_runner_free(&pp->run);
    free(pp->eval);
    CUDA_CHECK(cudaFree(pp->wte_piece));
    free(pp->counts);
    memset(pp, 0, sizeof(*pp));
}

// The first stage's floatX wte (its shard piece from each data rank) into the
// last stage's copy, which its data group all-gathers: after each update, and
// once the weights are set (initialised, loaded or resumed).
static void pipeline_gpu_sync_tied(PipelineGPU *pp) {
    int64_t plo, phi;
    shard_piece(&pp->wte_shards, 0, pp->wte_elems, &plo, &phi);
    size_t n = (size_t)(phi - plo);
    GPTGPU *m = pp->model;
    if (pp->first) {
        CommRequest r = comm_send_start(pp->pipe, gpu_shard_params_compute(m) + plo, n, COMM_FLOATX, pp->pipe->size - 1,
                                        PP_TAG_WTE);
        comm_wait(&r);
    } else if (pp->last) {
        CommRequest r = comm_recv_start(pp->pipe, m->tied_wte + plo, n, COMM_FLOATX, 0, PP_TAG_WTE);
        comm_wait(&r);
        shard_counts(&pp->wte_shards, 0, pp->wte_elems, pp->counts);
        r = comm_all_gather_start(pp->dp, NULL, m->tied_wte, pp->counts, COMM_FLOATX);
        comm_wait(&r);
    }
    CUDA_CHECK(cudaDeviceSynchronize());
}

// ---------------------------------------------------------------------------
// the step (the trainer's TrainModel calls these)

// One optimizer step's forwards and backwards over m micro-batches xs, ys
// ((m, B*T) each, host); returns the sum of the micro-batches' mean losses
// (every rank; the last stage reads them back once).
static float pipeline_gpu_step(PipelineGPU *pp, const int *xs, const int *ys, int m) {
    pp->xs = xs;
    zero_gpu_begin_step(pp->zero);
    gpu_gpt_upload_tokens(pp->model, xs, ys, m);
    pp_runner_step(&pp->run, m);
    double loss = pp->last ? gpu_gpt_step_loss(pp->model, m) : 0.0;
    comm_broadcast(pp->host_pipe, &loss, 1, COMM_F64, pp->pipe->size - 1);
    return (float)loss;
}

__global__ void ppg_add_kernel(float *dst, const float *src, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] += src[i];
}

// After the step's last action: every reduction complete, the last stage's
// wte gradient (reduced over its data group: all of it at ZeRO-0, else the
// first stage's shard pieces) added to the first stage's, and the global norm.
static float pipeline_gpu_finish_grads(PipelineGPU *pp) {
    GPTGPU *m = pp->model;
    int zero = pp->zero->stage;
    zero_gpu_complete(pp->zero);
    int64_t plo = 0, phi = pp->wte_elems;
    if (zero > 0) shard_piece(&pp->wte_shards, 0, pp->wte_elems, &plo, &phi);
    size_t n = (size_t)(phi - plo);
    if (pp->last) {
        float *g = m->tied_dwte;
        CommRequest r;
        if (zero == 0) {
            r = comm_all_reduce_start(pp->dp, g, n, COMM_F32);
        } else {
            shard_counts(&pp->wte_shards, 0, pp->wte_elems, pp->counts);
            r = comm_reduce_scatter_start(pp->dp, g, g + plo, pp->counts, COMM_F32);
        }
        comm_wait(&r);
        r = comm_send_start(pp->pipe, g + plo, n, COMM_F32, 0, PP_TAG_WTE);
        comm_wait(&r);
    } else if (pp->first) {
        CommRequest r = comm_recv_start(pp->pipe, pp->wte_piece, n, COMM_F32, pp->pipe->size - 1, PP_TAG_WTE);
        comm_stream_wait(&r, m->stream);
        comm_wait(&r);
        int64_t zlo, zhi;
        float *g = zero_gpu_reduced_grads(pp->zero, plo, phi, &zlo, &zhi);
        if (zhi > zlo) {
            launch_kernel(ppg_add_kernel, ceil_div_int(zhi - zlo, 256), 256, 0, m->stream, g + zlo,
                          pp->wte_piece + (zlo - plo), zhi - zlo);
            CUDA_CHECK_LAUNCH();
        }
    }
    zero_gpu_tp_sum_replicated(pp->zero);
    double ss = zero_gpu_grad_sumsq_owned(pp->zero);
    comm_all_reduce(pp->host_world, &ss, 1, COMM_F64);
    return (float)sqrt(ss);
}

// Evaluation and sampling: the stages in order; the loss broadcast from the last stage.
static float pipeline_gpu_forward(PipelineGPU *pp, const int *x, const int *y, int B, int T) {
    double loss = pp_runner_eval(&pp->run, x, y, B, T);
    if (y) comm_broadcast(pp->host_pipe, &loss, 1, COMM_F64, pp->pipe->size - 1);
    return (float)loss;
}

// A token drawn from row `row` of the last pipeline_gpu_forward's logits (the
// last stage's), the same on every rank (gpu_gpt_sample's host_tp, row_buf).
static int pipeline_gpu_sample(PipelineGPU *pp, TPContext *host_tp, int row, const SampleParams *sp, Rng *rng,
                               float *row_buf) {
    double token = 0.0;
    if (pp->last) token = gpu_gpt_sample(pp->model, host_tp, row, sp, rng, row_buf);
    comm_broadcast(pp->host_pipe, &token, 1, COMM_F64, pp->pipe->size - 1);
    if (!pp->last) rng_uniform(rng);  // (the draw the last stage made: every rank's generator stays the same)
    return (int)token;
}

#endif  // LLMC_PIPELINE_GPU_CUH
