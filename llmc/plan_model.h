// plan_model.h: the planner's model of a training layout (plan.c). A layout is
// dp x tp x pp ranks, a ZeRO stage, sequence parallel, a pipeline schedule
// (and its chunks per rank), the micro-batch B and recomputation (GPU). For
// each it says whether the trainers take it (the same checks: model.h's
// tensor split, pp_layout.h, pp_schedule.h, the batch plan of train_setup.h)
// and whether it fits in memory (rank_memory.h for the CPU trainer), and
// predicts the step time:
//
//   each rank's compute per micro-batch: F, B and W of its layers (+ the
//     embedding on the first stage, the classifier and loss on the last),
//     measured kernels (local) or FLOPs at the cluster's matmul efficiency
//     plus element-wise bytes at its memory bandwidth (GPU clusters);
//   tensor parallel: per layer 2 all-reduces forward and 2 backward of the
//     N x C activations (or all-gather + reduce-scatter with sequence
//     parallel), inside F and B: the trainers do not overlap them;
//   the pipeline: the schedule simulator (pp_schedule.h) over those F, B, W
//     and a point-to-point transfer per micro-batch;
//   data parallel: ZeRO's collectives (ring model: t = k (p-1) alpha +
//     k (p-1)/p n / bw, k = 2 for all-reduce, 1 for reduce-scatter and
//     all-gather), overlapped with the backward they follow except the last
//     layer's share;
//   the optimizer over the rank's shard.
// On the local cluster the kernels are timed with every rank running them at
// once (sharing the cores, caches and memory bandwidth), and each
// synchronisation a rank waits on costs the measured scheduling loss.
// docs/planner.md has the sources.
#ifndef LLMC_PLAN_MODEL_H
#define LLMC_PLAN_MODEL_H

#include "plan_cluster.h"
#include "plan_measure.h"
#include "rank_memory.h"

typedef struct {
    int dp, tp, pp, sp, zero;
    PPKind schedule;  // (pp > 1)
    int v;            // chunks per pipeline rank (interleaved: 2 or more)
    int B, accum;     // micro-batch, micro-batches a step
    int recompute;    // GPU: 0, 1, 2
} PlanLayout;

// The predicted step, seconds, by part (step_time.h's names).
typedef struct {
    double fwd, bwd, comm, bubble, opt, total;
} PlanTime;

typedef struct {
    PlanLayout l;
    char why_not[200];  // "" when the layout is valid
    RankMemory mem0;    // rank 0's memory (the trainers' printed line)
    double mem_max;     // the largest rank's total, bytes
    PlanTime t;
    double tokens_per_s;
} PlanResult;

// What a rank's kernels take per micro-batch at a shape: measured (local) or modeled.
typedef StageKernelTimes (*PlanKernels)(void *ctx, int B, int tp, int sp, int recompute);

typedef struct {
    const GPTConfig *cfg;
    int T;
    long long total_tokens;
    const Cluster *cluster;
    PlanKernels kernels;
    void *kernels_ctx;
    double adamw_s_per_elem;  // the optimizer's time per element of the shard
} PlanProblem;

// A GPU kernel's seconds on the roofline (Williams et al. 2009): its FLOPs at the tensor cores' peak x
// the cluster's matmul efficiency or its bytes at the memory bandwidth, whichever is longer, and never
// less than the gap between two launches (the trainers launch every kernel on one stream, no graphs).
#define PLAN_GPU_LAUNCH_S 4e-6
static double plan_gpu_kernel(const Cluster *c, double flops, double bytes) {
    double t = flops / (c->peak_tflops * 1e12 * c->matmul_eff), m = bytes / (c->hbm_gbs * 1e9);
    t = t > m ? t : m;
    return t > PLAN_GPU_LAUNCH_S ? t : PLAN_GPU_LAUNCH_S;
}
// A bf16 GEMM (M x K) @ (K x N).
static double plan_gpu_gemm(const Cluster *c, double M, double K, double N) {
    return plan_gpu_kernel(c, 2 * M * K * N, 2 * (M * K + K * N + M * N));
}

// Modeled kernels of a GPU cluster at a rank's shape: the layer's GEMMs (qkv, attention projection, fc
// with its GELU epilogue, fc projection; backward: the input's and the weights' of each), causal flash
// attention (half the square; backward 2.5x) at half the GEMMs' efficiency (FlashAttention-2, Dao 2023:
// 50-70% of the peak forward at head size 64-128, less backward), the element-wise kernels (LayerNorms, residuals:
// bf16 reads and writes), and recomputation's extra forward kernels in the backward.
static StageKernelTimes plan_gpu_kernels(const Cluster *c, const GPTConfig *cfg, int B, int T, int tp, int sp,
                                         int recompute) {
    double C = cfg->channels, Cl = C / tp, N = (double)B * T, Nl = sp ? N / tp : N, V = cfg->padded_vocab_size / tp;
    double att = 2.0 * 2.0 * B * (double)T * T * Cl, att_bytes = 2.0 * 4 * N * Cl;
    double ln = plan_gpu_kernel(c, 0, 2.0 * 2 * Nl * C), add = plan_gpu_kernel(c, 0, 2.0 * 3 * Nl * C);
    double gelu = plan_gpu_kernel(c, 0, 2.0 * 2 * N * 4 * Cl);
    StageKernelTimes t;  // (att: the FLOPs counted twice, for half the efficiency)
    t.layer_f = 2 * ln + 2 * add + plan_gpu_gemm(c, N, C, 3 * Cl) + plan_gpu_kernel(c, att, att_bytes) +
                plan_gpu_gemm(c, N, Cl, C) + plan_gpu_gemm(c, N, C, 4 * Cl) + plan_gpu_gemm(c, N, 4 * Cl, C);
    t.layer_b_input = 2 * 2 * ln + 2 * add + gelu + plan_gpu_gemm(c, N, 3 * Cl, C) +
                      plan_gpu_kernel(c, 2.5 * att, 2 * att_bytes) + plan_gpu_gemm(c, N, C, Cl) +
                      plan_gpu_gemm(c, N, 4 * Cl, C) + plan_gpu_gemm(c, N, C, 4 * Cl) +
                      (recompute >= 1 ? gelu : 0) + (recompute >= 2 ? 2 * ln : 0);
    t.layer_b_weight = plan_gpu_gemm(c, C, N, 3 * Cl) + plan_gpu_gemm(c, Cl, N, C) + plan_gpu_gemm(c, C, N, 4 * Cl) +
                       plan_gpu_gemm(c, 4 * Cl, N, C);
    t.embed_f = plan_gpu_kernel(c, 0, 2.0 * 3 * Nl * C), t.embed_b = plan_gpu_kernel(c, 0, 4.0 * 3 * Nl * C);
    t.head_f = ln + plan_gpu_gemm(c, N, C, V) + plan_gpu_kernel(c, 0, 2.0 * 2 * N * V);
    t.head_b = ln + plan_gpu_gemm(c, N, V, C) + plan_gpu_gemm(c, V, N, C);
    return t;
}

// Ring-model seconds of collective op moving n bytes among p ranks over a link of gbs GB/s and us
// latency (the local cluster: the op's own measured figures): k = 2 for all-reduce, 1 for reduce-scatter
// and all-gather.
static double plan_collective(const Cluster *c, PlanOp op, double n, int p, double gbs, double us) {
    if (p <= 1) return 0.0;
    if (c->local && c->op_gbs[op] > 0) gbs = c->op_gbs[op], us = c->op_us[op];
    double k = op == PLAN_ALL_REDUCE ? 2.0 : 1.0;
    return k * (p - 1) * us * 1e-6 + k * (double)(p - 1) / p * n / (gbs * 1e9);
}
// A point-to-point transfer: alpha + n / bw.
static double plan_transfer(double n, double gbs, double us) { return us * 1e-6 + n / (gbs * 1e9); }

// The link a group crosses: the grid is data outermost, then pipeline, then tensor (comm.h's
// comm_grid_coords); a group whose ranks lie stride apart spans nodes when stride * size exceeds a node.
static void plan_link(const Cluster *c, int stride, int size, double *gbs, double *us) {
    int spans = c->nodes > 1 && (long long)stride * size > c->devices_per_node;
    *gbs = spans ? c->inter_gbs : c->intra_gbs;
    *us = spans ? c->inter_us : c->intra_us;
}

// Why the trainers refuse the layout (NULL: they take it), into why.
static const char *plan_check_layout(const PlanProblem *pb, const PlanLayout *l, PPLayout *ppl, char *why,
                                     size_t len) {
    const GPTConfig *cfg = pb->cfg;
    const char *tp_why = l->tp > 1 ? param_tp_problem(cfg, l->tp) : NULL;
    long long micro = (long long)l->B * pb->T * l->dp;
    if (l->tp > pb->cluster->devices_per_node)
        snprintf(why, len, "tensor parallel %d spans nodes of %d devices (the trainers keep it in one)", l->tp,
                 pb->cluster->devices_per_node);
    else if (tp_why)
        snprintf(why, len, "tp %d: %s", l->tp, tp_why);
    else if (l->sp && pb->T % l->tp != 0)
        snprintf(why, len, "sequence parallel: seq-len %d is not a multiple of tp %d", pb->T, l->tp);
    else if (pb->total_tokens % micro != 0)
        snprintf(why, len, "the batch of %lld tokens is not a multiple of B x T x dp = %lld", pb->total_tokens, micro);
    else
        why[0] = '\0';
    if (why[0]) return why;
    if (l->pp > 1) {
        char err[160];
        if (pp_layout_init(ppl, cfg->num_layers, l->pp, l->v, "", err, sizeof(err))) {
            snprintf(why, len, "%s", err);
            return why;
        }
        const char *s = pp_schedule_unusable(l->schedule, l->pp, l->v, l->accum);
        if (s) {
            snprintf(why, len, "%s with %d micro-batches: %s", pp_kind_names[l->schedule], l->accum, s);
            pp_layout_free(ppl);
            return why;
        }
    }
    return NULL;
}

// The cuBLASLt workspace the GPU trainer reserves (matmul.cuh's MATMUL_WORKSPACE_BYTES).
#define PLAN_GPU_WORKSPACE_BYTES (32.0 * (1 << 20))

// Rank r's memory (grid coordinates as comm.h's) under the layout.
static RankMemory plan_rank_memory(const PlanProblem *pb, const PlanLayout *l, const PPLayout *ppl, int r) {
    int tp_rank, pipe_rank, dp_rank;
    comm_grid_coords(r, l->tp, l->pp, &tp_rank, &pipe_rank, &dp_rank);
    RankPlace place = {l->zero, l->dp, dp_rank, l->tp, tp_rank, l->sp, l->pp > 1 ? ppl : NULL, l->schedule,
                       pipe_rank, l->accum, l->B, pb->T};
    RankMemory m = cpu_rank_memory(pb->cfg, &place);
    if (!pb->cluster->cpu_trainer) {  // the GPU trainer's bytes (an estimate: docs/planner.md)
        // weights bf16 (N, or S at ZeRO-3) and the fp32 master copy (as the AdamW state: N or S); grads and
        // AdamW state fp32 as the CPU's; the tied copy bf16 with an fp32 gradient
        m.params = 2 * (m.params / 4) + 4 * (m.optimizer / 8);
        m.tied *= 6.0 / 8.0;
        // activations bf16, without the attention matrix (flash attention keeps its log-sum-exp rows);
        // what recomputation drops from each layer is one shared buffer instead
        double N = (double)l->B * pb->T, C = pb->cfg->channels, Cl = C / l->tp, NHl = pb->cfg->num_heads / l->tp;
        double layers = l->pp > 1 ? (double)pb->cfg->num_layers / l->pp : pb->cfg->num_layers;
        double sets = l->pp > 1 ? pp_peak_alive_theory(l->schedule, l->pp, l->v, l->accum, pipe_rank) : 1;
        double att = (double)l->B * NHl * pb->T * pb->T;
        double dropped = (l->recompute >= 1 ? N * 4 * Cl : 0) + (l->recompute >= 2 ? 2 * N * C : 0);
        m.activations = (m.activations / 4 - sets * layers * (att + dropped) + dropped) * 2;
        if (m.activations < 0) m.activations = 0;
        m.transient = PLAN_GPU_WORKSPACE_BYTES;  // (its ZeRO-2/3 segment buffers: small next to the rest)
    }
    return m;
}

// Seconds of rank r's F, B and W per micro-batch, its tensor-parallel collectives included.
static PPTimes plan_rank_times(const PlanProblem *pb, const PlanLayout *l, const PPLayout *ppl, int pipe_rank,
                               const StageKernelTimes *k) {
    const Cluster *c = pb->cluster;
    double gbs, us;
    plan_link(c, 1, l->tp, &gbs, &us);
    double N = (double)l->B * pb->T, act = N * pb->cfg->channels * (c->cpu_trainer ? 4 : 2);
    double tp_layer = 0.0, tp_head = 0.0;  // one direction of one layer
    if (l->tp > 1) {
        tp_layer = l->sp ? 2 * (plan_collective(c, PLAN_ALL_GATHER, act, l->tp, gbs, us) +
                                plan_collective(c, PLAN_REDUCE_SCATTER, act, l->tp, gbs, us))
                         : 2 * plan_collective(c, PLAN_ALL_REDUCE, act, l->tp, gbs, us);
        // the vocabulary-parallel loss's row statistics
        tp_head = plan_collective(c, PLAN_ALL_REDUCE, N * 4 * 3, l->tp, gbs, us);
    }
    int layers = pb->cfg->num_layers, first = 1, last = 1;
    if (l->pp > 1) {
        layers = 0, first = 0, last = 0;
        for (int ch = 0; ch < ppl->v; ch++) {
            int g = pp_stage_of(ppl->pp, pipe_rank, ch);
            layers += ppl->first_layer[g + 1] - ppl->first_layer[g];
            first |= g == 0, last |= g == ppl->stages - 1;
        }
    }
    double chunks = l->pp > 1 ? ppl->v : 1;  // (the simulator's F is one chunk's)
    PPTimes t;
    t.f = (layers * (k->layer_f + tp_layer) + first * k->embed_f + last * (k->head_f + tp_head)) / chunks;
    t.b = (layers * (k->layer_b_input + tp_layer) + last * (k->head_b + tp_layer / 2)) / chunks;
    t.w = (layers * k->layer_b_weight + first * k->embed_b) / chunks;
    double pgbs, pus;
    plan_link(c, l->tp, l->pp, &pgbs, &pus);
    t.xfer = plan_transfer(l->sp ? act / l->tp : act, pgbs, pus);
    return t;
}

// The time a synchronisation of g ranks loses (local) when a rank computes chunk seconds between
// them: the measured curve, log-linear between its points, its ends beyond; the group size linear
// between 2 ranks and all of them.
static double plan_sync_loss_at(const Cluster *c, int g, int world, double chunk) {
    int n = c->sync_points;
    if (!c->local || g < 2 || n == 0) return 0.0;
    double loss[2];
    for (int w = 0; w < 2; w++) {
        const double *x = c->sync_chunk_s, *y = c->sync_loss_s[w];
        int k = 0;
        while (k + 2 < n && chunk > x[k + 1]) k++;
        double f = n > 1 && chunk > 0 ? log(chunk / x[k]) / log(x[k + 1] / x[k]) : 0.0;
        f = f < 0 ? 0 : f > 1 ? 1 : f;
        loss[w] = n > 1 ? y[k] + f * (y[k + 1] - y[k]) : y[0];
    }
    double at = world > 2 ? (double)(g - 2) / (world - 2) : 1.0;
    return loss[0] + at * (loss[1] - loss[0]);
}

// The scheduling loss of a rank's synchronisations in a step (local): each collective or pipeline
// transfer it waits on, with the compute between them.
static double plan_sync_loss_s(const PlanProblem *pb, const PlanLayout *l, const StageKernelTimes *k, double f,
                               double b) {
    const Cluster *c = pb->cluster;
    int world = l->dp * l->tp * l->pp;
    if (!c->local || world < 2) return 0.0;
    double layers = (double)pb->cfg->num_layers / l->pp, micro = f + b;
    double loss = 2 * plan_sync_loss_at(c, world, world, micro * l->accum);  // the loss and the norm
    if (l->tp > 1) {
        double per_layer = 2 * (l->sp ? 4 : 2);
        double chunk = (k->layer_f + k->layer_b_input + k->layer_b_weight) / per_layer;
        loss += l->accum * (layers * per_layer + 4) * plan_sync_loss_at(c, l->tp, world, chunk);
    }
    if (l->pp > 1) loss += l->accum * 2 * l->v * plan_sync_loss_at(c, 2, world, micro / 2);
    if (l->dp > 1) {  // a reduction a segment (a layer, the embeddings) each pass reduced, a gather each use
        double segments = layers + 1, passes = l->zero >= 2 ? l->accum : 1;
        loss += (passes * segments + (l->zero >= 1)) * plan_sync_loss_at(c, l->dp, world, b / segments);
        if (l->zero == 3) loss += l->accum * 2 * segments * plan_sync_loss_at(c, l->dp, world, micro / (2 * segments));
    }
    return loss;
}

// The predicted step of a valid layout (r.t, r.tokens_per_s).
static void plan_predict(const PlanProblem *pb, PlanResult *r, const PPLayout *ppl) {
    const PlanLayout *l = &r->l;
    const Cluster *c = pb->cluster;
    int world = l->dp * l->tp * l->pp;
    StageKernelTimes k = pb->kernels(pb->kernels_ctx, l->B, l->tp, l->sp, l->recompute);
    PPTimes *times = (PPTimes *)mallocCheck(sizeof(PPTimes) * (size_t)l->pp);
    double f = 0, b = 0, slowest = 0;
    for (int pr = 0; pr < l->pp; pr++) {
        times[pr] = plan_rank_times(pb, l, ppl, pr, &k);
        double work = (times[pr].f + times[pr].b + times[pr].w) * (l->pp > 1 ? ppl->v : 1) * l->accum;
        if (work > slowest) slowest = work, f = times[pr].f, b = times[pr].b + times[pr].w;
    }
    double span = slowest;
    if (l->pp > 1) {
        PPSchedule s;
        pp_schedule_build(&s, l->schedule, l->pp, l->v, l->accum);
        PPSim sim;
        memset(&sim, 0, sizeof(sim));
        char err[256];
        if (!pp_simulate_ranks(&s, times, 1, 0, &sim, err, sizeof(err))) span = sim.span;
        pp_sim_free(&sim);
        pp_schedule_free(&s);
    }
    free(times);
    // data parallel: the rank's gradients (fp32) and, from ZeRO-1, the updated weights. On GPU
    // clusters a reduction overlaps the backward it follows but for the last segment's share, a
    // gather the compute a segment ahead. On the local cluster nothing overlaps (MPI's shared-memory
    // transport copies on the cores the ranks compute on), and ZeRO-2/3's micro-steps cost their
    // measured pattern a byte (the reductions with the release and refault of the full gradient,
    // the gathers of released weights) in the backward and forward.
    RankMemory m0 = r->mem0;
    double elems = m0.grads / 4 * (l->zero >= 2 ? l->dp : 1);  // the rank's parameters (a shard's x dp)
    double segments = (double)pb->cfg->num_layers / l->pp + 1, last_share = 1.0 / segments;
    double gbs, us;
    plan_link(c, l->tp * l->pp, l->dp, &gbs, &us);
    double wbytes = c->cpu_trainer ? 4 : 2, comm = 0.0, zero_fwd = 0.0, zero_bwd = 0.0;
    if (l->dp > 1 && c->local && l->zero >= 2) {
        double at = world > 2 ? (double)(l->dp - 2) / (world - 2) : 1.0;
        zero_bwd = l->accum * 4 * elems * (c->zero_s[0][0] + at * (c->zero_s[0][1] - c->zero_s[0][0]));
        if (l->zero == 3)
            zero_fwd = l->accum * 2 * 4 * elems * (c->zero_s[1][0] + at * (c->zero_s[1][1] - c->zero_s[1][0]));
        else
            comm += plan_collective(c, PLAN_ALL_GATHER, wbytes * elems, l->dp, gbs, us);  // the updated shards
    } else if (l->dp > 1) {
        double window = c->local ? 0.0 : b * (1 - last_share);
        double reduce = plan_collective(c, l->zero == 0 ? PLAN_ALL_REDUCE : PLAN_REDUCE_SCATTER, 4 * elems, l->dp,
                                        gbs, us);
        double per_pass = reduce - window > reduce * last_share ? reduce - window : reduce * last_share;
        comm += (l->zero >= 2 ? l->accum : 1) * (c->local ? reduce : per_pass);
        if (l->zero == 3) {  // the weights gathered before each forward and backward
            double gather = plan_collective(c, PLAN_ALL_GATHER, wbytes * elems, l->dp, gbs, us);
            double ahead = f * (1 - last_share);
            comm += l->accum * 2 * (gather - ahead > gather * last_share ? gather - ahead : gather * last_share);
        } else if (l->zero >= 1) {
            comm += plan_collective(c, PLAN_ALL_GATHER, wbytes * elems, l->dp, gbs, us);  // the updated shards
        }
    }
    double opt = m0.optimizer / 8 * pb->adamw_s_per_elem;  // AdamW over the state's elements
    PlanTime t;
    t.fwd = l->accum * f * (l->pp > 1 ? ppl->v : 1);
    t.bwd = l->accum * b * (l->pp > 1 ? ppl->v : 1);
    t.bubble = span > t.fwd + t.bwd ? span - t.fwd - t.bwd : 0.0;  // (rounding)
    t.fwd += zero_fwd, t.bwd += zero_bwd;
    t.comm = comm + plan_sync_loss_s(pb, l, &k, f, b);
    t.opt = opt;
    t.total = span + zero_fwd + zero_bwd + t.comm + t.opt;
    r->t = t;
    r->tokens_per_s = (double)pb->total_tokens / t.total;
}

#endif  // LLMC_PLAN_MODEL_H
