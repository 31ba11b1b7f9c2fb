// pipeline_gpu.cuh: the GPU trainer's step as a pipeline schedule
// (pipeline.h): the stage operations its runtime executes (F, B and W of
// gpt_gpu.cuh's gpu_stage_* on one micro-batch's activations, queued on the
// model's stream) and, as pipeline_cpu.h does for the CPU trainer, the GPU's
// part of a pipeline rank's step: its ZeRO layer (zero_gpu.cuh, any stage)
// over the ranks holding the same stages, and the tied token embedding
// (pipeline.h's protocol; the last stage's copy is floatX, its gradient fp32,
// added on the device). One GPU (pp = 1) is a one-stage schedule on the
// model's own activations, queued as the model alone queues them. With
// context parallel each micro-batch's activations keep its gathered K and V
// (gpt_gpu.cuh), and the ranks holding the same stages are data x context.
//
// Messages go over the device pipeline group: floatX activations, fp32 gradients.
// Over NCCL, whose point-to-point calls run in order on one stream and pair
// by order, the runtime executes the fused lists (pp_schedule.h: each receive
// in one group with the sends before its consumer; each group one NCCL
// group, pipeline.h's batch, so its sends and receives progress together);
// their simulation shows the interleaved schedule's can deadlock, so that
// pairing is refused. The staged MPI backend runs the lists as the CPU trainer
// does. A compute that reads a received buffer waits for it on the device.
// On more than one stage each action's time is taken after the stream drains
// (the report's F, B and W times).
#ifndef LLMC_PIPELINE_GPU_CUH
#define LLMC_PIPELINE_GPU_CUH

#include "comm.h"        // defines: CommGroup, CommRequest, comm_stream_wait, Comm, ...
#include "gpt_gpu.cuh"   // defines: GPTGPU, GPUActs, gpu_acts_alloc, gpu_acts_free, ...
#include "pipeline.h"    // defines: PipelineCore, PPStageOps, PPBuffer, pp_chunk_first_layer, pipeline_core_*, pipeline_tie_grads, ...
#include "pp_layout.h"   // defines: PPLayout
#include "rand.h"        // defines: Rng
#include "zero_gpu.cuh"  // defines: Zero, zero_begin_pass, zero_begin_step, zero_wait_grads, ...

typedef struct {
    PipelineCore core;  // (its xs: the step's inputs on the host, for the embedding backward's index)
    GPTGPU *model;
    Zero *zero;
    GPUActs *eval;  // (v): one micro-batch's forward per chunk, for evaluation and sampling (several stages)
} PipelineGPU;

// ---------------------------------------------------------------------------
// the stage operations (PPStageOps)

static void *ppg_slot_new(void *ctx, int chunk) {
    PipelineGPU *pp = (PipelineGPU *)ctx;
    if (pp_one_stage(&pp->core.run)) return &pp->model->acts;
    GPUActs *a = (GPUActs *)callocCheck(1, sizeof(GPUActs));
    gpu_acts_alloc(pp->model, a, pp_chunk_first_layer(&pp->core, chunk), pp_chunk_end_layer(&pp->core, chunk),
                   pp->core.run.split);
    return a;
}
static void ppg_slot_free(void *ctx, void *slot) {
    PipelineGPU *pp = (PipelineGPU *)ctx;
    if (slot == &pp->model->acts) return;  // (the model's own)
    gpu_acts_free((GPUActs *)slot);
    free(slot);
}
static void ppg_forward(void *ctx, void *slot, int chunk, int mb) {
    (void)chunk;
    PipelineGPU *pp = (PipelineGPU *)ctx;
    gpu_stage_forward(pp->model, (GPUActs *)slot, pp->core.xs + (size_t)mb * pp->core.B * pp->core.T, mb, pp->core.B,
                      pp->core.T, 1, pp->core.dloss);
}
static void ppg_backward(void *ctx, void *slot) { gpu_stage_backward(((PipelineGPU *)ctx)->model, (GPUActs *)slot); }
static void ppg_weights(void *ctx, void *slot) {
    gpu_stage_backward_weights(((PipelineGPU *)ctx)->model, (GPUActs *)slot);
}
static void ppg_begin_pass(void *ctx, int last) { zero_begin_pass(((PipelineGPU *)ctx)->zero, last); }
static void *ppg_buffer(void *slot, PPBuffer which) {
    GPUActs *a = (GPUActs *)slot;
    switch (which) {
        case PP_BUF_IN: return a->input;
        case PP_BUF_OUT: return a->residual3[a->l1 - 1];
        default: return a->dres;  // the gradient received at the output becomes the input's in place
    }
}
// One micro-batch's activations of chunk's stage for evaluation and sampling (one stage: the model's own).
static void *ppg_eval_acts(void *ctx, int chunk) {
    PipelineGPU *pp = (PipelineGPU *)ctx;
    if (pp_one_stage(&pp->core.run)) return &pp->model->acts;
    GPUActs *a = &pp->eval[chunk];
    if (!a->memory)
        gpu_acts_alloc(pp->model, a, pp_chunk_first_layer(&pp->core, chunk), pp_chunk_end_layer(&pp->core, chunk), 0);
    return a;
}
static float ppg_eval_forward(void *ctx, int chunk, const int *x, const int *y, int B, int T) {
    PipelineGPU *pp = (PipelineGPU *)ctx;
    return gpu_gpt_forward_acts(pp->model, (GPUActs *)ppg_eval_acts(pp, chunk), x, y, B, T, 0.0f);
}
static void ppg_consume(void *ctx, CommRequest *r) { comm_stream_wait(r, ((PipelineGPU *)ctx)->model->stream); }
static void ppg_sync(void *ctx) { CUDA_CHECK(cudaStreamSynchronize(((PipelineGPU *)ctx)->model->stream)); }

// ---------------------------------------------------------------------------
// set-up

// model: made with gpu_gpt_init(pp_holding of this rank, no activation sets;
// one stage: the whole model with its activations), its weights set; zero:
// its ZeRO layer over the device data group. layout: the stages' layers
// (pp_layout_init's; taken over). fuse: the backend pairs messages by order (NCCL).
static void pipeline_gpu_init(PipelineGPU *pp, GPTGPU *model, Zero *zero, Comm *comm, CommGroup *dev_groups,
                              PPLayout layout, PPKind kind, int fuse, int B, int T, float dloss,
                              const char *trace_path) {
    memset(pp, 0, sizeof(*pp));
    pp->model = model;
    pp->zero = zero;
    PPStageOps ops = {pp, ppg_slot_new, ppg_slot_free, ppg_forward, ppg_backward, ppg_weights, ppg_buffer,
                      ppg_eval_forward, ppg_eval_acts, ppg_consume, ppg_sync, ppg_begin_pass};
    // (the tie's reductions over the ranks holding the same stages: data x context, as ZeRO's)
    pipeline_core_init(&pp->core, ops, &dev_groups[COMM_PIPELINE], &dev_groups[COMM_REPLICA],
                       comm_group(comm, COMM_PIPELINE), comm_group(comm, COMM_WORLD), COMM_FLOATX, &model->cfg,
                       model->tp.size, model->tp.rank, model->tp.sp, B, T, dloss, layout, kind, fuse, trace_path,
                       comm->rank);
    if (pipeline_tied(&pp->core) && pp->core.first)
        pp->core.wte_piece = (float *)cudaMallocCheck(sizeof(float) * (size_t)pp->core.wte_elems);
    pp->eval = (GPUActs *)callocCheck((size_t)pp->core.run.v, sizeof(GPUActs));
}

static void pipeline_gpu_free(PipelineGPU *pp) {
    for (int c = 0; c < pp->core.run.v; c++) gpu_acts_free(&pp->eval[c]);
    free(pp->eval);
    CUDA_CHECK(cudaFree(pp->core.wte_piece));
    pipeline_core_free(&pp->core);
    memset(pp, 0, sizeof(*pp));
}

// The first stage's floatX wte into the last stage's copy: after each update,
// and once the weights are set (initialised, loaded or resumed).
static void pipeline_gpu_sync_tied(PipelineGPU *pp) {
    if (!pipeline_tied(&pp->core)) return;
    pipeline_send_tied_weights(&pp->core, gpu_shard_params_compute(pp->model), pp->model->tied_wte, COMM_FLOATX);
    CUDA_CHECK(cudaDeviceSynchronize());
}

// ---------------------------------------------------------------------------
// the step (the trainer's TrainModel calls these)

// One optimizer step's forwards and backwards over m micro-batches xs, ys
// ((m, B*T) each, host), uploaded at once; returns the sum of the
// micro-batches' mean losses (every rank; the last stage reads them back once).
static float pipeline_gpu_step(PipelineGPU *pp, const int *xs, const int *ys, int m) {
    zero_begin_step(pp->zero);
    gpu_gpt_upload_tokens(pp->model, xs, ys, m);
    pipeline_core_step(&pp->core, xs, ys, m);
    return pipeline_share_loss(&pp->core, pp->core.last ? gpu_gpt_step_loss(pp->model, m) : 0.0);
}

__global__ void ppg_add_kernel(float *dst, const float *src, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] += src[i];
}

// After the step's last action: every reduction complete, summed over the
// tensor group, the last stage's wte gradient added to the first stage's
// reduced one (on the device), and the global norm.
static float pipeline_gpu_finish_grads(PipelineGPU *pp) {
    NVTX_RANGE("reduce_grads");
    GPTGPU *m = pp->model;
    zero_wait_grads(pp->zero);
    zero_tp_sum_replicated(pp->zero);
    int64_t plo, phi;
    if (pipeline_tie_grads(&pp->core, m->tied_dwte, pp->zero->stage, &plo, &phi)) {
        int64_t zlo, zhi;
        float *g = zero_reduced_grads(pp->zero, plo, phi, &zlo, &zhi);
        if (zhi > zlo) {
            launch_kernel(ppg_add_kernel, ceil_div_int(zhi - zlo, 256), 256, 0, m->stream, g + zlo,
                          pp->core.wte_piece + (zlo - plo), zhi - zlo);
            CUDA_CHECK_LAUNCH();
        }
    }
    double ss = zero_grad_sumsq_owned(pp->zero);
    comm_all_reduce(pp->core.host_world, &ss, 1, COMM_F64);
    return (float)sqrt(ss);
}

// Evaluation and sampling: the stages in order; the loss broadcast from the last stage.
static float pipeline_gpu_forward(PipelineGPU *pp, const int *x, const int *y, int B, int T) {
    return pipeline_core_forward(&pp->core, x, y, B, T);
}

// A token drawn from row `row` of the last pipeline_gpu_forward's logits (the
// last stage's), the same on every rank (gpu_gpt_sample's host_tp, row_buf).
static int pipeline_gpu_sample(PipelineGPU *pp, TPContext *host_tp, int row, const SampleParams *sp, Rng *rng,
                               float *row_buf) {
    double token = 0.0;
    if (pp->core.last) token = gpu_gpt_sample(pp->model, host_tp, row, sp, rng, row_buf);
    return pipeline_share_token(&pp->core, token, rng);
}

#endif  // LLMC_PIPELINE_GPU_CUH
