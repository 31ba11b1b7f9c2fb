// pipeline_cpu.h: pipeline-parallel training on the CPU trainer: the stage
// operations pipeline.h's runtime executes (F, B and W of gpt_cpu.h's
// gpt_stage_* on one micro-batch's activations), and around them what a
// pipeline rank does that one process does not:
//
// Weights and gradients: the rank's model holds only its stages (gpt_cpu.h's
// layout of pp_holding), and its ZeRO layer (zero_cpu.h, any stage 0-3) shards
// that over the data group, the ranks holding the same stages; a pass's
// gradients are reduced as it ends (stages 0 and 1: after the chunk's last
// micro-batch of the step).
//
// The tied token embedding: the first stage holds wte (embedding), the last
// a copy of it for the classifier (gpt_cpu.h's tied_wte, outside its layout)
// and its gradient. After the step's passes the last stage's gradient is
// reduced over its data group and added to the first stage's reduced one
// (the shard pieces at ZeRO >= 1, the whole at ZeRO-0): the sum of both uses,
// as Megatron's embedding all-reduce makes it. Only the first stage updates
// wte; after the update it sends the new weights back, so the copy is the
// same bits as the original. The gradient norm is summed over the stages (the
// copy not counted), so clipping sees the global norm; it waits for the last
// W of the step (no optimizer post-validation).
//
// Evaluation and sampling run the stages in order; the loss and the sampled
// logits are broadcast from the last stage. Checkpoints and model files see
// the rank's buffer through param_map.h's mapping onto the global order.
#ifndef LLMC_PIPELINE_CPU_H
#define LLMC_PIPELINE_CPU_H

#include "comm.h"         // defines: Comm, CommGroup, CommRequest, comm_* operations
#include "gpt_cpu.h"      // defines: GPT, GPTActivations, gpt_stage_* (forward, backward, weight gradients)
#include "optimizer.h"    // defines: AdamWConfig
#include "pipeline.h"     // defines: PPRunner, PPStageOps, PPBuffer, pp_runner_*
#include "pp_layout.h"    // defines: PPLayout, pp_holding
#include "pp_schedule.h"  // defines: PPKind
#include "zero_cpu.h"     // defines: Zero, zero_* (the data-parallel reduction and sharded AdamW)
#include "zero_shard.h"   // defines: ShardMap, shard_map_init, shard_piece, shard_counts

#define PP_TAG_WTE 101

typedef struct {
    GPT *model;
    Zero *zero;
    CommGroup *pipe, *dp, *world;  // host groups
    PPRunner run;
    int B, T;
    float dloss;
    const int *xs, *ys;        // the step's micro-batches ((m, B*T) each)
    double loss;               // the step's sum of micro-batch losses (last stage)
    GPTActivations *eval;      // (v): one micro-batch's forward per chunk, for evaluation and sampling
    int first, last;           // this rank holds the first stage (wte) / the last (the classifier's copy)
    ShardMap wte_shards;       // the first stage's ZeRO shards, over its layout (wte is its first tensor)
    int64_t wte_elems;         // Vp * C
    float *wte_piece;          // the tie's receive buffer (this rank's piece of wte's gradient, or all of it)
    size_t *counts;            // (data ranks)
} Pipeline;

static inline int pp_chunk_first_layer(const Pipeline *pp, int chunk) {
    return pp->run.layout.first_layer[pp_runner_stage(&pp->run, chunk)];
}
static inline int pp_chunk_end_layer(const Pipeline *pp, int chunk) {
    return pp->run.layout.first_layer[pp_runner_stage(&pp->run, chunk) + 1];
}

// ---------------------------------------------------------------------------
// the stage operations (PPStageOps)

static void *pp_cpu_slot_new(void *ctx, int chunk) {
    Pipeline *pp = (Pipeline *)ctx;
    GPTActivations *a = (GPTActivations *)callocCheck(1, sizeof(GPTActivations));
    gpt_activations_alloc(a, pp->model, pp->B, pp->T, pp_chunk_first_layer(pp, chunk), pp_chunk_end_layer(pp, chunk),
                          pp->run.split);
    return a;
}
static void pp_cpu_slot_free(void *ctx, void *slot) {
    (void)ctx;
    gpt_activations_free((GPTActivations *)slot);
    free(slot);
}
static void pp_cpu_forward(void *ctx, void *slot, int chunk, int mb) {
    (void)chunk;
    Pipeline *pp = (Pipeline *)ctx;
    size_t BT = (size_t)pp->B * pp->T;
    pp->loss += gpt_stage_forward(pp->model, (GPTActivations *)slot, pp->xs + mb * BT, pp->ys + mb * BT, pp->B, pp->T,
                                  pp->dloss);
}
static void pp_cpu_backward(void *ctx, void *slot, int chunk, int mb, int last) {
    (void)chunk, (void)mb;
    Pipeline *pp = (Pipeline *)ctx;
    zero_begin_pass(pp->zero, last);
    gpt_stage_backward(pp->model, (GPTActivations *)slot);
}
static void pp_cpu_weights(void *ctx, void *slot, int chunk, int mb, int last) {
    (void)chunk, (void)mb;
    Pipeline *pp = (Pipeline *)ctx;
    zero_begin_pass(pp->zero, last);
    gpt_stage_backward_weights(pp->model, (GPTActivations *)slot);
}
static void *pp_cpu_buffer_of(GPTActivations *a, PPBuffer which) {
    switch (which) {
        case PP_BUF_IN: return a->encoded;
        case PP_BUF_OUT: return a->residual3[a->l1 - 1];
        default: return a->dresidual;  // the gradient received at the output becomes the input's in place
    }
}
static void *pp_cpu_buffer(void *ctx, void *slot, PPBuffer which) {
    (void)ctx;
    return pp_cpu_buffer_of((GPTActivations *)slot, which);
}
static float pp_cpu_eval_forward(void *ctx, int chunk, const int *x, const int *y, int B, int T) {
    Pipeline *pp = (Pipeline *)ctx;
    GPTActivations *a = &pp->eval[chunk];
    gpt_activations_alloc(a, pp->model, pp->B, pp->T, pp_chunk_first_layer(pp, chunk), pp_chunk_end_layer(pp, chunk),
                          0);
    return gpt_stage_forward(pp->model, a, x, y, B, T, 0.0f);
}
static void *pp_cpu_eval_buffer(void *ctx, int chunk, PPBuffer which) {
    Pipeline *pp = (Pipeline *)ctx;
    GPTActivations *a = &pp->eval[chunk];
    gpt_activations_alloc(a, pp->model, pp->B, pp->T, pp_chunk_first_layer(pp, chunk), pp_chunk_end_layer(pp, chunk),
                          0);
    return pp_cpu_buffer_of(a, which);
}

// ---------------------------------------------------------------------------
// set-up

// The layout of what pipeline rank `rank` holds (its chunks' stages), at tensor slice tp_rank of tp.
static void pipeline_rank_layout(ParamLayout *pl, const GPTConfig *cfg, const PPLayout *layout, int rank, int tp,
                                 int tp_rank) {
    unsigned char *layers = (unsigned char *)mallocCheck((size_t)cfg->num_layers);
    ParamHolding h = pp_holding(layout, rank, -1, cfg->num_layers, layers);
    param_layout_init_held(pl, cfg, &h, tp, tp_rank);
    free(layers);
}

// model: made with gpt_init_held(pp_holding of this rank), its weights set;
// zero: its ZeRO layer over the data group. layout: the stages' layers
// (pp_layout_init's; taken over).
static void pipeline_init(Pipeline *pp, GPT *model, Zero *zero, Comm *comm, PPLayout layout, PPKind kind, int B,
                          int T, float dloss, const char *trace_path) {
    memset(pp, 0, sizeof(*pp));
    pp->model = model;
    pp->zero = zero;
    pp->pipe = comm_group(comm, COMM_PIPELINE);
    pp->dp = comm_group(comm, COMM_REPLICA);  // (the ranks holding the same stages: data x context, as ZeRO's)
    pp->world = comm_group(comm, COMM_WORLD);
    pp->B = B, pp->T = T, pp->dloss = dloss;
    PPStageOps ops = {pp, pp_cpu_slot_new, pp_cpu_slot_free, pp_cpu_forward, pp_cpu_backward, pp_cpu_weights,
                      pp_cpu_buffer, pp_cpu_eval_forward, pp_cpu_eval_buffer, NULL, NULL};
    pp_runner_init(&pp->run, ops, pp->pipe, COMM_F32, COMM_F32, B, T, model->cfg.channels,
                   model->tp.sp ? model->tp.size : 1, layout, kind, 0, trace_path, comm->rank);
    pp->first = pp->pipe->rank == 0;
    pp->last = pp->pipe->rank == pp->pipe->size - 1;
    ParamLayout first;
    pipeline_rank_layout(&first, &model->cfg, &pp->run.layout, 0, model->tp.size, model->tp.rank);
    shard_map_init(&pp->wte_shards, first.num_elements, pp->dp->rank, pp->dp->size);
    pp->wte_elems = param_tensor(&first, PK_WTE, -1)->numel;  // (its vocabulary slice with tensor parallelism)
    param_layout_free(&first);
    pp->counts = (size_t *)mallocCheck(sizeof(size_t) * (size_t)pp->dp->size);
    if (pp->first || pp->last) pp->wte_piece = (float *)mallocCheck(sizeof(float) * (size_t)pp->wte_elems);
    pp->eval = (GPTActivations *)callocCheck((size_t)pp->run.v, sizeof(GPTActivations));
}

static void pipeline_free(Pipeline *pp) {
    for (int c = 0; c < pp->run.v; c++) gpt_activations_free(&pp->eval[c]);
    pp_runner_free(&pp->run);
    free(pp->eval);
    free(pp->wte_piece);
    free(pp->counts);
    memset(pp, 0, sizeof(*pp));
}

// ---------------------------------------------------------------------------
// the step (the trainer's TrainModel calls these)

// One optimizer step's forwards and backwards over m micro-batches xs, ys
// ((m, B*T) each); returns the sum of the micro-batches' mean losses (every rank).
static float pipeline_step(Pipeline *pp, const int *xs, const int *ys, int m) {
    pp->xs = xs, pp->ys = ys, pp->loss = 0.0;
    zero_begin_step(pp->zero);
    if (pp->model->tied_dwte) memset(pp->model->tied_dwte, 0, sizeof(float) * (size_t)pp->wte_elems);
    pp_runner_step(&pp->run, m);
    comm_broadcast(pp->pipe, &pp->loss, 1, COMM_F64, pp->pipe->size - 1);
    return (float)pp->loss;
}

// The last stage's wte gradient into the first stage's reduced one: reduced
// over the last stage's data group (all-reduced at ZeRO-0, where the first
// stage adds all of it; else reduce-scattered into the first stage's shard
// pieces), sent to the first stage of the same data rank, added there.
static void pipeline_tie_grads(Pipeline *pp) {
    if (pp->pipe->size == 1) return;
    int zero = pp->zero->stage;
    int64_t plo = 0, phi = pp->wte_elems;
    if (zero > 0) shard_piece(&pp->wte_shards, 0, pp->wte_elems, &plo, &phi);
    size_t n = (size_t)(phi - plo);
    if (pp->last) {
        float *g = pp->model->tied_dwte;
        if (zero == 0) {
            comm_all_reduce(pp->dp, g, n, COMM_F32);
        } else {
            shard_counts(&pp->wte_shards, 0, pp->wte_elems, pp->counts);
            CommRequest r = comm_reduce_scatter_start(pp->dp, g, g + plo, pp->counts, COMM_F32);
            comm_wait(&r);
        }
        CommRequest r = comm_send_start(pp->pipe, g + plo, n, COMM_F32, 0, PP_TAG_WTE);
        comm_wait(&r);
    } else if (pp->first) {
        CommRequest r = comm_recv_start(pp->pipe, pp->wte_piece, n, COMM_F32, pp->pipe->size - 1, PP_TAG_WTE);
        comm_wait(&r);
        int64_t zlo, zhi;
        float *g = zero_reduced_grads(pp->zero, plo, phi, &zlo, &zhi);
        for (int64_t i = zlo; i < zhi; i++) g[i] += pp->wte_piece[i - plo];
    }
}

// After the step's last action: every pass's reductions complete, the tied
// wte gradients summed into the first stage's, and the global norm over all
// stages (the last stage's copy not counted).
static float pipeline_finish_grads(Pipeline *pp) {
    zero_wait_grads(pp->zero);
    zero_tp_sum_replicated(pp->zero);
    pipeline_tie_grads(pp);
    double ss = zero_grad_sumsq_owned(pp->zero);
    comm_all_reduce(pp->world, &ss, 1, COMM_F64);
    return (float)sqrt(ss);
}

// AdamW on this rank's shard of its stages; then the first stage sends the
// updated wte to the last: each data rank its shard piece, which the last
// stage's data group all-gathers into its copy.
static void pipeline_optimizer_step(Pipeline *pp, const AdamWConfig *ac, float grad_scale, int step) {
    (void)step;
    zero_optimizer_step(pp->zero, ac, grad_scale);
    if (pp->pipe->size == 1) return;
    int64_t plo, phi;
    shard_piece(&pp->wte_shards, 0, pp->wte_elems, &plo, &phi);
    size_t n = (size_t)(phi - plo);
    if (pp->first) {
        float *views[3];
        zero_state_views(pp->zero, views);  // (the weights, indexed like the buffer: wte at 0)
        CommRequest r = comm_send_start(pp->pipe, views[0] + plo, n, COMM_F32, pp->pipe->size - 1, PP_TAG_WTE);
        comm_wait(&r);
    } else if (pp->last) {
        float *w = pp->model->tied_wte;
        CommRequest r = comm_recv_start(pp->pipe, w + plo, n, COMM_F32, 0, PP_TAG_WTE);
        comm_wait(&r);
        shard_counts(&pp->wte_shards, 0, pp->wte_elems, pp->counts);
        r = comm_all_gather_start(pp->dp, NULL, w, pp->counts, COMM_F32);
        comm_wait(&r);
    }
}

// The first stage's wte into the last stage's copy, before training (the
// weights were initialised or loaded on every rank's own part).
static void pipeline_sync_tied(Pipeline *pp) {
    if (pp->pipe->size == 1) return;
    float *views[3];
    zero_state_views(pp->zero, views);
    int64_t plo, phi;
    shard_piece(&pp->wte_shards, 0, pp->wte_elems, &plo, &phi);
    if (pp->first) {
        CommRequest r = comm_send_start(pp->pipe, views[0] + plo, (size_t)(phi - plo), COMM_F32, pp->pipe->size - 1,
                                        PP_TAG_WTE);
        comm_wait(&r);
    } else if (pp->last) {
        CommRequest r = comm_recv_start(pp->pipe, pp->model->tied_wte + plo, (size_t)(phi - plo), COMM_F32, 0,
                                        PP_TAG_WTE);
        comm_wait(&r);
        shard_counts(&pp->wte_shards, 0, pp->wte_elems, pp->counts);
        r = comm_all_gather_start(pp->dp, NULL, pp->model->tied_wte, pp->counts, COMM_F32);
        comm_wait(&r);
    }
}

// ---------------------------------------------------------------------------
// evaluation and sampling

static float pipeline_forward(Pipeline *pp, const int *x, const int *y, int B, int T) {
    double loss = pp_runner_eval(&pp->run, x, y, B, T);
    if (y) comm_broadcast(pp->pipe, &loss, 1, COMM_F64, pp->pipe->size - 1);
    return (float)loss;
}

// A token drawn from row `row` of the last pipeline_forward's logits (the
// last stage's; its tensor group draws together), on every rank.
static int pipeline_sample(Pipeline *pp, int row, const SampleParams *sp, Rng *rng) {
    double token = 0.0;
    if (pp->last) token = gpt_sample_row(pp->model, &pp->eval[pp->run.v - 1], row, sp, rng);
    comm_broadcast(pp->pipe, &token, 1, COMM_F64, pp->pipe->size - 1);
    if (!pp->last) rng_uniform(rng);  // (the draw the last stage made: every rank's generator stays the same)
    return (int)token;
}

#endif  // LLMC_PIPELINE_CPU_H
