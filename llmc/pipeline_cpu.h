// pipeline_cpu.h: the CPU trainer's step as a pipeline schedule (pipeline.h):
// the stage operations its runtime executes (F, B and W of gpt_cpu.h's
// gpt_stage_* on one micro-batch's activations), and around them the CPU's
// part of a pipeline rank's step. One process (pp = 1) is a one-stage
// schedule on the model's own activations: each micro-batch's forward and
// backward in turn, as the model computes them alone.
//
// Weights and gradients: the rank's model holds only its stages (gpt_cpu.h's
// layout of pp_holding), sharded (any ZeRO stage 0-3) over the data group,
// the ranks holding the same stages, and its ZeRO layer (zero_cpu.h) reduces
// and gathers over that group; a pass's
// gradients are reduced as it ends (stages 0 and 1: after the chunk's last
// micro-batch of the step).
//
// The tied token embedding (pipeline.h's protocol): the last stage's copy
// and its gradient are gpt_cpu.h's tied_wte and tied_dwte; the first stage
// adds the gradient it receives to its reduced one. The gradient norm is
// summed over the stages (the copy not counted), so clipping sees the global
// norm; it waits for the last W of the step (no optimizer post-validation).
//
// Evaluation and sampling run the stages in order; the loss and the sampled
// token are broadcast from the last stage. Checkpoints and model files see
// the rank's buffer through param_map.h's mapping onto the global order.
#ifndef LLMC_PIPELINE_CPU_H
#define LLMC_PIPELINE_CPU_H

#include "comm.h"         // defines: Comm, CommGroup, comm_group, comm_all_reduce, COMM_F32, ...
#include "gpt_cpu.h"      // defines: GPT, GPTActivations, gpt_stage_* (forward, backward, weight gradients), gpt_update, gpt_state_views
#include "optimizer.h"    // defines: AdamWConfig
#include "pipeline.h"     // defines: PipelineCore, PPStageOps, PPBuffer, pp_chunk_first_layer, pipeline_core_*, pipeline_tie_grads, ...
#include "pp_layout.h"    // defines: PPLayout
#include "pp_schedule.h"  // defines: PPKind
#include "zero_cpu.h"     // defines: Zero, zero_* (the data-parallel reduction and gathers)

typedef struct {
    PipelineCore core;
    GPT *model;
    Zero *zero;
    double loss;           // the step's sum of micro-batch losses (last stage)
    GPTActivations *eval;  // (v): one micro-batch's forward per chunk, for evaluation and sampling (several stages)
} Pipeline;

// ---------------------------------------------------------------------------
// the stage operations (PPStageOps)

static void *pp_cpu_slot_new(void *ctx, int chunk) {
    Pipeline *pp = (Pipeline *)ctx;
    if (pp_one_stage(&pp->core.run)) return &pp->model->acts;
    GPTActivations *a = (GPTActivations *)callocCheck(1, sizeof(GPTActivations));
    gpt_activations_alloc(a, pp->model, pp->core.B, pp->core.T, pp_chunk_first_layer(&pp->core, chunk),
                          pp_chunk_end_layer(&pp->core, chunk), pp->core.run.split);
    return a;
}
static void pp_cpu_slot_free(void *ctx, void *slot) {
    Pipeline *pp = (Pipeline *)ctx;
    if (slot == &pp->model->acts) return;  // (the model's own)
    gpt_activations_free((GPTActivations *)slot);
    free(slot);
}
static void pp_cpu_forward(void *ctx, void *slot, int chunk, int mb) {
    (void)chunk;
    Pipeline *pp = (Pipeline *)ctx;
    size_t BT = (size_t)pp->core.B * pp->core.T;
    pp->loss += gpt_stage_forward(pp->model, (GPTActivations *)slot, pp->core.xs + mb * BT, pp->core.ys + mb * BT,
                                  pp->core.B, pp->core.T, pp->core.dloss);
}
static void pp_cpu_backward(void *ctx, void *slot) {
    gpt_stage_backward(((Pipeline *)ctx)->model, (GPTActivations *)slot);
}
static void pp_cpu_weights(void *ctx, void *slot) {
    gpt_stage_backward_weights(((Pipeline *)ctx)->model, (GPTActivations *)slot);
}
static void pp_cpu_begin_pass(void *ctx, int last) { zero_begin_pass(((Pipeline *)ctx)->zero, last); }
static void *pp_cpu_buffer(void *slot, PPBuffer which) {
    GPTActivations *a = (GPTActivations *)slot;
    switch (which) {
        case PP_BUF_IN: return a->encoded;
        case PP_BUF_OUT: return a->residual3[a->l1 - 1];
        default: return a->dresidual;  // the gradient received at the output becomes the input's in place
    }
}
// One micro-batch's activations of chunk's stage for evaluation and sampling (one stage: the model's own).
static void *pp_cpu_eval_acts(void *ctx, int chunk) {
    Pipeline *pp = (Pipeline *)ctx;
    if (pp_one_stage(&pp->core.run)) return &pp->model->acts;
    GPTActivations *a = &pp->eval[chunk];
    gpt_activations_alloc(a, pp->model, pp->core.B, pp->core.T, pp_chunk_first_layer(&pp->core, chunk),
                          pp_chunk_end_layer(&pp->core, chunk), 0);
    return a;
}
static float pp_cpu_eval_forward(void *ctx, int chunk, const int *x, const int *y, int B, int T) {
    Pipeline *pp = (Pipeline *)ctx;
    if (pp_one_stage(&pp->core.run)) return gpt_forward(pp->model, x, y, B, T, 0.0f);
    return gpt_stage_forward(pp->model, (GPTActivations *)pp_cpu_eval_acts(pp, chunk), x, y, B, T, 0.0f);
}

// ---------------------------------------------------------------------------
// set-up

// model: made with gpt_init_held(pp_holding of this rank), its weights set (gpt_shard_params);
// zero: its ZeRO layer over the data group. layout: the stages' layers
// (pp_layout_init's; taken over; one stage: the model's activations are made here).
static void pipeline_init(Pipeline *pp, GPT *model, Zero *zero, Comm *comm, PPLayout layout, PPKind kind, int B,
                          int T, float dloss, const char *trace_path) {
    memset(pp, 0, sizeof(*pp));
    pp->model = model;
    pp->zero = zero;
    PPStageOps ops = {pp, pp_cpu_slot_new, pp_cpu_slot_free, pp_cpu_forward, pp_cpu_backward, pp_cpu_weights,
                      pp_cpu_buffer, pp_cpu_eval_forward, pp_cpu_eval_acts, NULL, NULL, pp_cpu_begin_pass};
    CommGroup *pipe = comm_group(comm, COMM_PIPELINE);
    // (the ranks holding the same stages: data x context, as ZeRO's)
    pipeline_core_init(&pp->core, ops, pipe, comm_group(comm, COMM_REPLICA), pipe, comm_group(comm, COMM_WORLD),
                       COMM_F32, &model->cfg, model->tp.size, model->tp.rank, model->tp.sp, B, T, dloss, layout, kind,
                       0, trace_path, comm->rank);
    if (pp_one_stage(&pp->core.run)) gpt_alloc_activations(model, B, T);
    else if (pp->core.first) pp->core.wte_piece = (float *)mallocCheck(sizeof(float) * (size_t)pp->core.wte_elems);
    pp->eval = (GPTActivations *)callocCheck((size_t)pp->core.run.v, sizeof(GPTActivations));
}

static void pipeline_free(Pipeline *pp) {
    for (int c = 0; c < pp->core.run.v; c++) gpt_activations_free(&pp->eval[c]);
    free(pp->eval);
    free(pp->core.wte_piece);
    pipeline_core_free(&pp->core);
    memset(pp, 0, sizeof(*pp));
}

// ---------------------------------------------------------------------------
// the step (the trainer's TrainModel calls these)

// One optimizer step's forwards and backwards over m micro-batches xs, ys
// ((m, B*T) each); returns the sum of the micro-batches' mean losses (every rank).
static float pipeline_step(Pipeline *pp, const int *xs, const int *ys, int m) {
    pp->loss = 0.0;
    zero_begin_step(pp->zero);
    if (pp->model->tied_dwte) memset(pp->model->tied_dwte, 0, sizeof(float) * (size_t)pp->core.wte_elems);
    pipeline_core_step(&pp->core, xs, ys, m);
    return pipeline_share_loss(&pp->core, pp->loss);
}

// After the step's last action: every pass's reductions complete, summed over
// the tensor group, the tied wte gradients summed into the first stage's, and
// the global norm over all stages (the last stage's copy not counted).
static float pipeline_finish_grads(Pipeline *pp) {
    zero_wait_grads(pp->zero);
    zero_tp_sum_replicated(pp->zero);
    int64_t plo, phi;
    if (pipeline_tie_grads(&pp->core, pp->model->tied_dwte, pp->zero->stage, &plo, &phi)) {
        int64_t zlo, zhi;
        float *g = zero_reduced_grads(pp->zero, plo, phi, &zlo, &zhi);
        for (int64_t i = zlo; i < zhi; i++) g[i] += pp->core.wte_piece[i - plo];
    }
    double ss = zero_grad_sumsq_owned(pp->zero);
    comm_all_reduce(pp->core.host_world, &ss, 1, COMM_F64);
    return (float)sqrt(ss);
}

// The first stage's wte into the last stage's copy: after each update, and
// once the weights are set (initialised, loaded or resumed).
static void pipeline_sync_tied(Pipeline *pp) {
    float *views[3];
    gpt_state_views(pp->model, views);  // (the weights, indexed like the buffer: wte at 0)
    pipeline_send_tied_weights(&pp->core, views[0], pp->model->tied_wte, COMM_F32);
}

// AdamW on this rank's shard of its stages, the weights shared as the ZeRO stage says, then the tied copy.
static void pipeline_optimizer_step(Pipeline *pp, const AdamWConfig *ac, float grad_scale) {
    gpt_update(pp->model, ac, grad_scale);
    zero_gather_params(pp->zero);
    pipeline_sync_tied(pp);
}

// ---------------------------------------------------------------------------
// evaluation and sampling

static float pipeline_forward(Pipeline *pp, const int *x, const int *y, int B, int T) {
    return pipeline_core_forward(&pp->core, x, y, B, T);
}

// A token drawn from row `row` of the last pipeline_forward's logits (the
// last stage's; its tensor group draws together), on every rank.
static int pipeline_sample(Pipeline *pp, int row, const SampleParams *sp, Rng *rng) {
    double token = 0.0;
    if (pp->core.last)
        token = gpt_sample_row(pp->model, (GPTActivations *)pp_cpu_eval_acts(pp, pp->core.run.v - 1), row, sp, rng);
    return pipeline_share_token(&pp->core, token, rng);
}

#endif  // LLMC_PIPELINE_CPU_H
