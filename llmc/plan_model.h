// plan_model.h: the planner's model of a training layout (plan.c). A layout is
// dp x cp x tp x pp ranks, a ZeRO stage, sequence parallel, a pipeline schedule
// (and its chunks per rank), the micro-batch B and recomputation (GPU). For
// each it says whether the trainers take it (the same checks: model.h's
// tensor split, pp_layout.h, pp_schedule.h, the batch plan of train_setup.h)
// and whether it fits in memory (rank_memory.h for the CPU trainer; the GPU
// trainer's activations gpu_activation_sizes.h's), and
// predicts the step time:
//
//   each rank's compute per micro-batch: F, B and W of its layers (+ the
//     embedding on the first stage, the classifier and loss on the last),
//     measured kernels (local) or FLOPs at the cluster's matmul efficiency
//     plus element-wise bytes at its memory bandwidth (GPU clusters);
//   tensor parallel: per layer 2 all-reduces forward and 2 backward of the
//     N x C activations (or all-gather + reduce-scatter with sequence
//     parallel), inside F and B: the trainers do not overlap them;
//   context parallel: each rank's T/cp positions (attention's causal work
//     balanced: 1/cp of it a rank), per layer an all-gather of K and V
//     forward and a reduce-scatter of their gradients backward over the
//     cp group, inside F and B;
//   the pipeline: the schedule simulator (pp_schedule.h) over those F, B, W
//     and a point-to-point transfer per micro-batch;
//   data parallel: ZeRO's collectives over data x context ranks (ring model: t = k (p-1) alpha +
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

#include "gpu_activation_sizes.h"  // defines: gpu_rank_activation_bytes
#include "plan_cluster.h"          // defines: Cluster
#include "plan_measure.h"          // defines: StageKernelTimes, GELU, PLAN_ALL_REDUCE, PLAN_ALL_GATHER, ...
#include "pp_layout.h"             // defines: PPLayout, pp_holding, PPRankSets, pp_ranks_sets_count
#include "pp_schedule.h"           // defines: PPKind, pp_fused_lists_deadlock, pp_schedule_unusable, pp_kind_names
#include "rank_memory.h"           // defines: RankMemory, RankPlace, cpu_rank_memory
#include "recompute.h"             // defines: RecomputeKind, RecomputePolicy

typedef struct {
    int dp, tp, pp, sp, zero;
    PPKind schedule;  // (pp > 1)
    int v;            // chunks per pipeline rank (interleaved: 2 or more)
    int B, accum;     // micro-batch, micro-batches a step
    RecomputeKind recompute;  // every layer's --recompute (recompute.h)
    int cp;           // context-parallel ranks: each holds T/cp positions of every sequence
} PlanLayout;

// The ranks of a layout.
static inline int plan_world(const PlanLayout *l) { return l->dp * l->cp * l->tp * l->pp; }

// The predicted step, seconds, by part (step_time.h's names).
typedef struct {
    double fwd, bwd, comm, bubble, opt, total;
} PlanTime;

// NCCL's algorithms (the tuner picks the fastest for the size: nccl/src/graph/tuning.cc).
typedef enum { PLAN_RING, PLAN_TREE, PLAN_NVLS, PLAN_NVLS_TREE, PLAN_ALGOS } PlanAlgo;
static const char *const plan_algo_names[PLAN_ALGOS] = {"ring", "tree", "nvls", "nvls+tree"};

// A collective group: p ranks over `nodes` nodes (p / nodes a node). The local cluster: one node.
typedef struct { int p, nodes; } PlanGroup;

// Why the trainers refuse a layout, or why it does not fit: the kinds the rejected list is grouped by.
typedef enum {
    PLAN_OK, PLAN_REJ_TP_NODES, PLAN_REJ_TP_SPLIT, PLAN_REJ_CP_SEQ, PLAN_REJ_SP_SEQ, PLAN_REJ_BATCH, PLAN_REJ_STAGES,
    PLAN_REJ_SCHEDULE, PLAN_REJ_NCCL_LISTS, PLAN_REJ_MEMORY, PLAN_REJECTS
} PlanReject;
static const char *const plan_reject_names[PLAN_REJECTS] = {
    "", "tensor parallel would span nodes", "tp does not divide the heads, channels or vocabulary",
    "context parallel: seq-len not a multiple of 2 x cp", "sequence parallel: seq-len / cp not a multiple of tp",
    "the batch is not a multiple of B x T x dp",
    "more pipeline stages (or chunks) than layers", "the schedule cannot run that many micro-batches",
    "the schedule's lists deadlock over NCCL (the GPU trainer refuses them)", "does not fit in memory"};

// Where a step's communication goes (--layout's breakdown): the data-parallel reduction and gather of
// one step (every call, before overlap, and what the step waits for), their algorithms and bytes a call.
typedef struct {
    double reduce_s, reduce_exposed_s, gather_s, gather_exposed_s;
    double reduce_bytes, gather_bytes;  // the rank's whole gradient (fp32) and weights, a pass
    int reduce_calls, gather_calls;     // a step
    PlanAlgo reduce_algo, gather_algo;
    PlanGroup dp_group;
    double tp_s;                        // tensor parallel's collectives a step (inside F and B)
    double cp_s, cp_bytes;              // context parallel's a step (inside F and B), the K | V of a layer gathered
    PlanAlgo cp_algo;                   // (the all-gather's)
    PlanGroup cp_group;
    double xfer_s;                      // one pipeline transfer
} PlanComm;

typedef struct {
    PlanLayout l;
    char why_not[200];  // "" when the layout is valid
    int why_kind;       // PlanReject: the reason's kind
    RankMemory mem0;    // rank 0's memory (the trainers' printed line)
    double mem_max;     // the largest rank's total, bytes
    PlanTime t;
    PlanComm comm;
    double tokens_per_s;
} PlanResult;

// What a rank's kernels take per micro-batch at a shape: measured (local) or modeled.
typedef StageKernelTimes (*PlanKernels)(void *ctx, int B, int cp, int tp, int sp, RecomputeKind recompute);

typedef struct {
    const GPTConfig *cfg;
    int T;
    long long total_tokens;
    const Cluster *cluster;
    PlanKernels kernels;
    void *kernels_ctx;
    double adamw_s_per_elem;  // the optimizer's time per element of the shard
} PlanProblem;

// --- the GPU model (docs/planner.md has each formula's source) ---

// The kernel families a step's compute is split into (--layout's breakdown).
typedef enum {
    PLAN_FAM_GEMM, PLAN_FAM_ATTENTION, PLAN_FAM_LAYERNORM, PLAN_FAM_GELU, PLAN_FAM_BIAS, PLAN_FAM_EMBEDDING,
    PLAN_FAM_CLASSIFIER, PLAN_FAMILIES
} PlanFamily;
static const char *const plan_family_names[PLAN_FAMILIES] = {
    "GEMMs (cuBLASLt)", "flash attention", "LayerNorm + residual", "GELU", "bias gradients", "embedding",
    "classifier + loss"};
// The parts of StageKernelTimes, in its order.
enum { PLAN_KP_LAYER_F, PLAN_KP_LAYER_B, PLAN_KP_LAYER_W, PLAN_KP_EMBED_F, PLAN_KP_EMBED_B, PLAN_KP_HEAD_F,
       PLAN_KP_HEAD_B, PLAN_KPARTS };
// Seconds of each family in each part, and the kernels launched.
typedef struct {
    double s[PLAN_KPARTS][PLAN_FAMILIES];
    int launches[PLAN_KPARTS];
} PlanKernelBook;

// A memory-bound kernel: its bytes at the achievable HBM bandwidth, plus the gap before the next kernel
// (the trainers launch every kernel on one stream, no CUDA graphs).
static double plan_gpu_mem_s(const Cluster *c, double bytes) {
    return bytes / (c->hbm_gbs * 1e9 * c->hbm_eff) + c->launch_us * 1e-6;
}

// A bf16 GEMM (M x K) @ (K x N) with extra_bytes beyond its operands (an epilogue's second output): the
// longer of its FLOPs at the achievable tensor-core rate and its bytes at the achievable HBM bandwidth
// (the roofline), plus the launch gap. The FLOPs are counted by output tile: ceil(M/tm) x ceil(N/tn) tiles
// run in waves of one tile per SM, each wave as long as a full one (tile and wave quantization); with
// fewer tiles than SMs the K dimension is split over the idle SMs (split-K, at least 256 of K a split).
static double plan_gpu_gemm_s(const Cluster *c, double M, double K, double N, double extra_bytes) {
    double rate = c->peak_tflops * 1e12 * c->matmul_eff, flops_s;
    if (c->sms > 0) {
        double tiles = ceil(M / c->tile_m) * ceil(N / c->tile_n);
        double split = floor(c->sms / tiles), kmax = floor(K / 256);
        split = split < 1 ? 1 : split > kmax ? (kmax < 1 ? 1 : kmax) : split;
        double waves = ceil(tiles * split / c->sms);
        flops_s = waves * 2.0 * c->tile_m * c->tile_n * (K / split) / (rate / c->sms);
    } else {
        flops_s = 2.0 * M * K * N / rate;
    }
    double bytes_s = (2.0 * (M * K + K * N + M * N) + extra_bytes) / (c->hbm_gbs * 1e9 * c->hbm_eff);
    return (flops_s > bytes_s ? flops_s : bytes_s) + c->launch_us * 1e-6;
}

// Causal flash attention over B x T tokens of Cl channels: 2 B T^2 Cl FLOPs forward (half of QK^T and
// PV), 2.5x that backward (Dao, FlashAttention-2, 2023), at the attention kernels' fraction of the peak,
// or its q, k, v, out (and their gradients) at the HBM bandwidth. A context rank's (cp > 1): its T/cp
// queries (chunks i and 2cp-1-i: 1/cp of the causal FLOPs) against the gathered K and V of all T.
static double plan_gpu_attention_s(const Cluster *c, double B, double T, double cp, double Cl, int backward) {
    double flops = 2.0 * B * T * T * Cl * (backward ? 2.5 : 1.0) / cp;
    double bytes = 2.0 * B * Cl * (backward ? 4 : 2) * (T / cp + T);  // (q, out and theirs local; k, v whole)
    double f = flops / (c->peak_tflops * 1e12 * c->attention_eff), m = bytes / (c->hbm_gbs * 1e9 * c->hbm_eff);
    return (f > m ? f : m) + c->launch_us * 1e-6 * (backward ? 2 : 1);  // (backward: its preprocessing kernel)
}

static void plan_book(PlanKernelBook *bk, int part, PlanFamily fam, double s, int launches) {
    bk->s[part][fam] += s;
    bk->launches[part] += launches;
}

// The GPU trainer's kernels (llmc/gpt_gpu.cuh) at a rank's shape, per micro-batch, by family: a layer's
// forward is the qkv GEMM (bias epilogue), attention, the projection GEMM, a fused residual + LayerNorm,
// the fc GEMM with its GELU epilogue (a second output, the pre-GELU values), the fc projection GEMM and
// the next fused residual + LayerNorm; its backward the input's GEMM of each, GELU's backward, attention's
// backward and the two LayerNorms' backward (B), the weights' GEMM of each and the bias gradients (W);
// selective recompute runs GELU again, full the layer's forward. The embedding and the classifier (the logits GEMM,
// the fused softmax + loss + gradient kernel) on the first and last stage. Bytes are bf16 activations,
// fp32 LayerNorm statistics; with sequence parallel the LayerNorms and residuals see N / tp rows; with
// context parallel every kernel sees the rank's N = B T / cp rows (attention: plan_gpu_attention_s's).
static StageKernelTimes plan_gpu_kernels_book(const Cluster *c, const GPTConfig *cfg, int B, int T, int cp, int tp,
                                              int sp, RecomputeKind recompute, PlanKernelBook *bk) {
    double C = cfg->channels, Cl = C / tp, N = (double)B * T / cp, Nl = sp ? N / tp : N;
    double V = cfg->padded_vocab_size / tp;
    double ln_fwd = plan_gpu_mem_s(c, 2.0 * 4 * Nl * C + 8 * Nl);  // residual + x in, residual + ln out
    double ln_bwd = plan_gpu_mem_s(c, 2.0 * 5 * Nl * C + 8 * Nl);  // dres, x, dln in; dres, dx out
    PlanKernelBook local;
    if (!bk) bk = &local;
    memset(bk, 0, sizeof(*bk));
    // a layer forward
    plan_book(bk, PLAN_KP_LAYER_F, PLAN_FAM_GEMM,
              plan_gpu_gemm_s(c, N, C, 3 * Cl, 0) + plan_gpu_gemm_s(c, N, Cl, C, 0) +
                  plan_gpu_gemm_s(c, N, C, 4 * Cl, 2.0 * N * 4 * Cl) + plan_gpu_gemm_s(c, N, 4 * Cl, C, 0), 4);
    plan_book(bk, PLAN_KP_LAYER_F, PLAN_FAM_ATTENTION, plan_gpu_attention_s(c, B, T, cp, Cl, 0), 1);
    plan_book(bk, PLAN_KP_LAYER_F, PLAN_FAM_LAYERNORM, 2 * ln_fwd, 2);
    // its backward to the input
    plan_book(bk, PLAN_KP_LAYER_B, PLAN_FAM_GEMM,
              plan_gpu_gemm_s(c, N, C, 4 * Cl, 0) + plan_gpu_gemm_s(c, N, 4 * Cl, C, 0) +
                  plan_gpu_gemm_s(c, N, C, Cl, 0) + plan_gpu_gemm_s(c, N, 3 * Cl, C, 0), 4);
    plan_book(bk, PLAN_KP_LAYER_B, PLAN_FAM_GELU,
              plan_gpu_mem_s(c, 2.0 * 3 * N * 4 * Cl) +
                  (recompute == RECOMPUTE_SELECTIVE ? plan_gpu_mem_s(c, 2.0 * 2 * N * 4 * Cl) : 0),
              1 + (recompute == RECOMPUTE_SELECTIVE));
    plan_book(bk, PLAN_KP_LAYER_B, PLAN_FAM_ATTENTION, plan_gpu_attention_s(c, B, T, cp, Cl, 1), 2);
    plan_book(bk, PLAN_KP_LAYER_B, PLAN_FAM_LAYERNORM, 2 * ln_bwd, 2);
    if (recompute == RECOMPUTE_FULL) {  // the layer's forward again before its backward
        for (int f = 0; f < PLAN_FAMILIES; f++) bk->s[PLAN_KP_LAYER_B][f] += bk->s[PLAN_KP_LAYER_F][f];
        bk->launches[PLAN_KP_LAYER_B] += bk->launches[PLAN_KP_LAYER_F];
    }
    // its weight gradients (fp32 accumulation: the gradient read and written) and bias gradients
    plan_book(bk, PLAN_KP_LAYER_W, PLAN_FAM_GEMM,
              plan_gpu_gemm_s(c, C, N, 3 * Cl, 8.0 * C * 3 * Cl) + plan_gpu_gemm_s(c, Cl, N, C, 8.0 * Cl * C) +
                  plan_gpu_gemm_s(c, C, N, 4 * Cl, 8.0 * C * 4 * Cl) + plan_gpu_gemm_s(c, 4 * Cl, N, C, 8.0 * Cl * 4 * C),
              4);
    plan_book(bk, PLAN_KP_LAYER_W, PLAN_FAM_BIAS, 4 * c->launch_us * 1e-6 + 2.0 * N * (3 * Cl + C + 4 * Cl + C) /
                                                                            (c->hbm_gbs * 1e9 * c->hbm_eff), 4);
    // the embedding (token + position rows in, the residual out; backward: fp32 gradient rows)
    plan_book(bk, PLAN_KP_EMBED_F, PLAN_FAM_EMBEDDING, plan_gpu_mem_s(c, 2.0 * 3 * Nl * C), 1);
    plan_book(bk, PLAN_KP_EMBED_B, PLAN_FAM_EMBEDDING, plan_gpu_mem_s(c, 4.0 * 3 * Nl * C), 2);
    // the classifier: the logits GEMM and the fused softmax / loss / gradient (logits read, gradient written in place)
    plan_book(bk, PLAN_KP_HEAD_F, PLAN_FAM_GEMM, plan_gpu_gemm_s(c, N, C, V, 0), 1);
    plan_book(bk, PLAN_KP_HEAD_F, PLAN_FAM_CLASSIFIER, plan_gpu_mem_s(c, 2.0 * 2 * N * V), 1);
    plan_book(bk, PLAN_KP_HEAD_B, PLAN_FAM_GEMM,
              plan_gpu_gemm_s(c, N, V, C, 0) + plan_gpu_gemm_s(c, V, N, C, 8.0 * V * C), 2);
    plan_book(bk, PLAN_KP_HEAD_B, PLAN_FAM_LAYERNORM, ln_bwd, 1);
    double part[PLAN_KPARTS] = {0};
    for (int p = 0; p < PLAN_KPARTS; p++)
        for (int f = 0; f < PLAN_FAMILIES; f++) part[p] += bk->s[p][f];
    StageKernelTimes t = {part[PLAN_KP_LAYER_F], part[PLAN_KP_LAYER_B], part[PLAN_KP_LAYER_W], part[PLAN_KP_EMBED_F],
                          part[PLAN_KP_EMBED_B], part[PLAN_KP_HEAD_F], part[PLAN_KP_HEAD_B]};
    return t;
}
static StageKernelTimes plan_gpu_kernels(const Cluster *c, const GPTConfig *cfg, int B, int T, int cp, int tp, int sp,
                                         RecomputeKind recompute) {
    return plan_gpu_kernels_book(c, cfg, B, T, cp, tp, sp, recompute, NULL);
}

// The optimizer a parameter element on a GPU: AdamW reads the fp32 master, gradient, m and v and writes the
// master, m, v and the bf16 weight (30 bytes), the gradient norm reads the gradient (4) and the next step's
// zeroing writes it (4); three kernels.
#define PLAN_GPU_OPT_BYTES 38.0
static double plan_gpu_optimizer_s(const Cluster *c, double elems) {
    return plan_gpu_mem_s(c, PLAN_GPU_OPT_BYTES * elems) + 2 * c->launch_us * 1e-6;
}

// The group of size ranks lying stride apart in the grid (comm.h's grid: data outermost, then
// pipeline, then tensor): the nodes it crosses.
static PlanGroup plan_group(const Cluster *c, int stride, int size) {
    PlanGroup g = {size, 1};
    long long span = (long long)stride * size;
    if (c->nodes > 1 && span > c->devices_per_node) {
        int per_node = stride >= c->devices_per_node ? 1 : c->devices_per_node / stride;
        g.nodes = size / (per_node < 1 ? 1 : per_node);
        if (g.nodes < 1) g.nodes = 1;
    }
    return g;
}

// Seconds of collective op of n bytes over group g by algorithm a (a negative time: a does not apply).
// Bus-bandwidth form (nccl-tests' PERFORMANCE.md): an all-reduce moves 2 (p-1)/p n bytes over each rank's
// bottleneck link, a reduce-scatter or all-gather (p-1)/p n; the latency is a step's times the steps.
//   ring: 2 (p-1) steps (all-reduce) or p-1, each at the slowest hop's latency (the network's across
//     nodes); bandwidth the node's ring bus bandwidth or, across nodes, the network links of the group's
//     ranks in a node (each rank's ring channel leaves the node on its own NIC), whichever is less;
//   tree (all-reduce across nodes): a chain in each node and a double binary tree across nodes
//     (Jeaugey, NCCL 2.4, 2019): 2 ((p/nodes - 1) + ceil(log2 nodes)) steps, the ring's bandwidth x tree_eff;
//   nvls (all-reduce in a node of NVSwitch with SHARP, H100 on): the switch reduces: a few steps, nvls_gbs;
//   nvls+tree (across nodes): NVLS in each node and the tree across them.
// The local cluster: the ring with the op's own measured bandwidth and step latency.
static double plan_collective_algo(const Cluster *c, PlanOp op, double n, PlanGroup g, PlanAlgo a) {
    int p = g.p;
    if (p <= 1) return a == PLAN_RING ? 0.0 : -1.0;
    double k = op == PLAN_ALL_REDUCE ? 2.0 : 1.0, per_node = (double)p / g.nodes;
    double volume = k * (p - 1) / p * n;
    if (c->local) {
        if (a != PLAN_RING) return -1.0;
        double gbs = c->op_gbs[op] > 0 ? c->op_gbs[op] : c->intra_gbs, us = c->op_gbs[op] > 0 ? c->op_us[op] : c->intra_us;
        return k * (p - 1) * us * 1e-6 + volume / (gbs * 1e9);
    }
    double net = per_node * c->inter_gbs, ring_bw = g.nodes > 1 && net < c->intra_gbs ? net : c->intra_gbs;
    double log_nodes = ceil(log2((double)g.nodes));
    switch (a) {
    case PLAN_RING:
        return k * (p - 1) * (g.nodes > 1 ? c->inter_us : c->intra_us) * 1e-6 + volume / (ring_bw * 1e9);
    case PLAN_TREE:
        if (op != PLAN_ALL_REDUCE || g.nodes < 2 || c->tree_eff <= 0) return -1.0;
        return 2 * ((per_node - 1) * c->intra_us + log_nodes * c->inter_us) * 1e-6 + volume / (ring_bw * c->tree_eff * 1e9);
    case PLAN_NVLS:
        if (op != PLAN_ALL_REDUCE || g.nodes > 1 || c->nvls_gbs <= 0 || p < 2) return -1.0;
        return 4 * c->intra_us * 1e-6 + volume / (c->nvls_gbs * 1e9);
    case PLAN_NVLS_TREE: {
        if (op != PLAN_ALL_REDUCE || g.nodes < 2 || c->nvls_gbs <= 0 || c->tree_eff <= 0) return -1.0;
        double bw = net * c->tree_eff < c->nvls_gbs ? net * c->tree_eff : c->nvls_gbs;
        return 2 * (2 * c->intra_us + log_nodes * c->inter_us) * 1e-6 + volume / (bw * 1e9);
    }
    default:
        return -1.0;
    }
}
// The fastest algorithm's seconds (which one into *algo when not NULL).
static double plan_collective(const Cluster *c, PlanOp op, double n, PlanGroup g, PlanAlgo *algo) {
    double best = plan_collective_algo(c, op, n, g, PLAN_RING);
    PlanAlgo which = PLAN_RING;
    for (int a = PLAN_TREE; a < PLAN_ALGOS; a++) {
        double t = plan_collective_algo(c, op, n, g, (PlanAlgo)a);
        if (t >= 0 && t < best) best = t, which = (PlanAlgo)a;
    }
    if (algo) *algo = which;
    return best;
}
// A point-to-point transfer between neighbouring pipeline ranks: alpha + n / bw over NVLink or one NIC.
static double plan_transfer(const Cluster *c, double n, PlanGroup g) {
    double gbs = g.nodes > 1 ? c->inter_gbs : c->intra_gbs, us = g.nodes > 1 ? c->inter_us : c->intra_us;
    return us * 1e-6 + n / (gbs * 1e9);
}

// Why the trainers refuse the layout (NULL: they take it), into why.
static const char *plan_check_layout(const PlanProblem *pb, const PlanLayout *l, PPLayout *ppl, char *why,
                                     size_t len, int *kind) {
    const GPTConfig *cfg = pb->cfg;
    const char *tp_why = l->tp > 1 ? param_tp_problem(cfg, l->tp) : NULL;
    long long micro = (long long)l->B * pb->T * l->dp;
    int cp_why = l->cp > 1 && pb->T % (2 * l->cp) != 0, sp_why = l->sp && pb->T / l->cp % l->tp != 0;
    *kind = l->tp > pb->cluster->devices_per_node ? PLAN_REJ_TP_NODES
            : tp_why                               ? PLAN_REJ_TP_SPLIT
            : cp_why                               ? PLAN_REJ_CP_SEQ
            : sp_why                               ? PLAN_REJ_SP_SEQ
            : pb->total_tokens % micro != 0        ? PLAN_REJ_BATCH
                                                   : PLAN_OK;
    if (l->tp > pb->cluster->devices_per_node)
        snprintf(why, len, "tensor parallel %d spans nodes of %d devices (the trainers keep it in one)", l->tp,
                 pb->cluster->devices_per_node);
    else if (tp_why)
        snprintf(why, len, "tp %d: %s", l->tp, tp_why);
    else if (cp_why)
        snprintf(why, len, "context parallel: seq-len %d is not a multiple of 2 x cp = %d (chunks i and 2cp-1-i)",
                 pb->T, 2 * l->cp);
    else if (sp_why && l->cp > 1)
        snprintf(why, len, "sequence parallel: seq-len %d / cp %d is not a multiple of tp %d", pb->T, l->cp, l->tp);
    else if (sp_why)
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
            *kind = PLAN_REJ_STAGES;
            return why;
        }
        const char *s = pp_schedule_unusable(l->schedule, l->pp, l->v, l->accum);
        if (s) {
            snprintf(why, len, "%s with %d micro-batches: %s", pp_kind_names[l->schedule], l->accum, s);
            *kind = PLAN_REJ_SCHEDULE;
            pp_layout_free(ppl);
            return why;
        }
        // the GPU trainer's pipelines run over NCCL, with fused receives: those whose lists deadlock it refuses
        // (train_setup.h's train_check_fused_lists; --comm mpi would run them, staged through the host)
        if (!pb->cluster->cpu_trainer && pp_fused_lists_deadlock(l->schedule, l->pp, l->v, l->accum, err, sizeof(err))) {
            snprintf(why, len, "%s with %d micro-batches over NCCL: with its receives fused the lists deadlock (%.100s)",
                     pp_kind_names[l->schedule], l->accum, err);
            *kind = PLAN_REJ_NCCL_LISTS;
            pp_layout_free(ppl);
            return why;
        }
    }
    return NULL;
}

// The cuBLASLt workspace the GPU trainer reserves (matmul.cuh's MATMUL_WORKSPACE_BYTES).
#define PLAN_GPU_WORKSPACE_BYTES (32.0 * (1 << 20))

// The activation sets of each pipeline rank under the layout (out: pp), as its trainer's runtime allocates
// them: the GPU trainer's runs over NCCL, with fused receives.
static void plan_pipeline_sets(const PlanProblem *pb, const PlanLayout *l, const PPLayout *ppl, PPRankSets *out) {
    pp_ranks_sets_count(ppl, l->schedule, l->accum, !pb->cluster->cpu_trainer, out);
}

// Rank r's memory (grid coordinates as comm.h's) under the layout; sets: plan_pipeline_sets' (pp > 1).
static RankMemory plan_rank_memory(const PlanProblem *pb, const PlanLayout *l, const PPLayout *ppl,
                                   const PPRankSets *sets, int r) {
    CommGrid grid = {{l->dp, l->pp, l->cp, l->tp}};
    int x[GRID_DIMS];
    grid_coords(&grid, r, x);
    int tp_rank = x[GRID_TP], pipe_rank = x[GRID_PP], replica_rank = x[GRID_DP] * l->cp + x[GRID_CP];
    RecomputePolicy policy = {l->recompute, 1};
    RankPlace place = {l->zero, l->dp * l->cp, replica_rank, l->tp, tp_rank, l->sp, l->cp, l->pp > 1 ? ppl : NULL,
                       l->schedule, pipe_rank, l->accum, l->B, pb->T, policy, l->pp > 1 ? &sets[pipe_rank] : NULL};
    RankMemory m = cpu_rank_memory(pb->cfg, &place);
    if (!pb->cluster->cpu_trainer) {  // the GPU trainer's bytes (docs/planner.md)
        // weights bf16 (N, or S at ZeRO-3) and the fp32 master copy (as the AdamW state: N or S); grads and
        // AdamW state fp32 as the CPU's; the tied copy bf16 with an fp32 gradient (an estimate: ZeRO-2/3's
        // segment buffers left out)
        m.params = 2 * (m.params / 4) + 4 * (m.optimizer / 8);
        m.tied *= 6.0 / 8.0;
        // the activations the trainer's memory line says (gpu_activation_sizes.h): the activation sets its
        // pipeline runtime allocates of each chunk's layers, the scratch and context parallel's buffers
        unsigned char *layers = (unsigned char *)mallocCheck((size_t)pb->cfg->num_layers);
        ParamHolding held = {1, 1, NULL};
        if (l->pp > 1) held = pp_holding(ppl, pipe_rank, -1, pb->cfg->num_layers, layers);
        size_t context;
        m.activations = (double)gpu_rank_activation_bytes(pb->cfg, &held, l->B, pb->T / l->cp, l->cp, &policy,
                                                          l->pp > 1 && l->schedule == PP_ZB1P, l->tp, l->sp,
                                                          place.sets, &context);
        free(layers);
        m.transient = PLAN_GPU_WORKSPACE_BYTES;  // (its ZeRO-2/3 segment buffers: small next to the rest)
    }
    return m;
}

// Seconds of a layer's tensor-parallel collectives in one direction (2 all-reduces of the partial sums, or
// with sequence parallel 2 all-gathers and 2 reduce-scatters), and the vocabulary-parallel loss's into *head.
static double plan_tp_layer_s(const PlanProblem *pb, const PlanLayout *l, double *head) {
    const Cluster *c = pb->cluster;
    PlanGroup tg = plan_group(c, 1, l->tp);
    // the partial sums reduce in fp32, sequence parallel's rows gather in the activations' type (gpt_gpu.cuh)
    double N = (double)l->B * pb->T / l->cp, act = N * pb->cfg->channels * (c->cpu_trainer ? 4 : 2);
    double sums = N * pb->cfg->channels * 4;
    *head = 0.0;
    if (l->tp <= 1) return 0.0;
    *head = plan_collective(c, PLAN_ALL_REDUCE, N * 4 * 3, tg, NULL);  // the loss's row statistics
    return l->sp ? 2 * (plan_collective(c, PLAN_ALL_GATHER, act, tg, NULL) +
                        plan_collective(c, PLAN_REDUCE_SCATTER, sums, tg, NULL))
                 : 2 * plan_collective(c, PLAN_ALL_REDUCE, sums, tg, NULL);
}

// The context group's ranks: cp ranks tp apart (comm.h's grid: the context dimension inside the pipeline's).
static PlanGroup plan_cp_group(const Cluster *c, const PlanLayout *l) { return plan_group(c, l->tp, l->cp); }
// The replica group ZeRO reduces and shards over: data x context ranks, the nodes of each dimension's.
static PlanGroup plan_replica_group(const Cluster *c, const PlanLayout *l) {
    PlanGroup g = plan_group(c, l->tp * l->cp * l->pp, l->dp);
    g.p = l->dp * l->cp, g.nodes *= plan_cp_group(c, l).nodes;
    if (g.nodes > c->nodes) g.nodes = c->nodes;
    return g;
}

// Seconds of a layer's context-parallel collectives forward (the all-gather of every position's K and V:
// B T 2Cl in the activations' type, fp32 on the CPU trainer) into *fwd, backward (the reduce-scatter of
// their gradients, fp32; the all-gather again where the layer's attention runs again: full recompute,
// and selective on the CPU trainer) into *bwd; the algorithm the all-gather takes into *algo when not NULL.
static void plan_cp_layer_s(const PlanProblem *pb, const PlanLayout *l, double *fwd, double *bwd, PlanAlgo *algo) {
    const Cluster *c = pb->cluster;
    int regather = l->recompute == RECOMPUTE_FULL || (c->cpu_trainer && l->recompute == RECOMPUTE_SELECTIVE);
    *fwd = *bwd = 0.0;
    if (algo) *algo = PLAN_RING;
    if (l->cp <= 1) return;
    PlanGroup g = plan_cp_group(c, l);
    double kv = (double)l->B * pb->T * 2 * (pb->cfg->channels / l->tp);
    *fwd = plan_collective(c, PLAN_ALL_GATHER, kv * (c->cpu_trainer ? 4 : 2), g, algo);
    *bwd = plan_collective(c, PLAN_REDUCE_SCATTER, kv * 4, g, NULL) + (regather ? *fwd : 0.0);
}

// Seconds of rank r's F, B and W per micro-batch, its tensor- and context-parallel collectives included.
static PPTimes plan_rank_times(const PlanProblem *pb, const PlanLayout *l, const PPLayout *ppl, int pipe_rank,
                               const StageKernelTimes *k) {
    const Cluster *c = pb->cluster;
    double tp_head, tp_layer = plan_tp_layer_s(pb, l, &tp_head);  // one direction of one layer
    double cp_f, cp_b;
    plan_cp_layer_s(pb, l, &cp_f, &cp_b, NULL);
    double act = (double)l->B * pb->T / l->cp * pb->cfg->channels * (c->cpu_trainer ? 4 : 2);
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
    t.f = (layers * (k->layer_f + tp_layer + cp_f) + first * k->embed_f + last * (k->head_f + tp_head)) / chunks;
    t.b = (layers * (k->layer_b_input + tp_layer * (l->recompute == RECOMPUTE_FULL ? 2 : 1) + cp_b) +
           last * (k->head_b + tp_layer / 2)) /
          chunks;
    t.w = (layers * k->layer_b_weight + first * k->embed_b) / chunks;
    t.xfer = plan_transfer(c, l->sp ? act / l->tp : act, plan_group(c, l->tp * l->cp, l->pp));
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
    int world = plan_world(l);
    if (!c->local || world < 2) return 0.0;
    double layers = (double)pb->cfg->num_layers / l->pp, micro = f + b;
    double loss = 2 * plan_sync_loss_at(c, world, world, micro * l->accum);  // the loss and the norm
    if (l->tp > 1) {
        double per_layer = 2 * (l->sp ? 4 : 2);
        double chunk = (k->layer_f + k->layer_b_input + k->layer_b_weight) / per_layer;
        loss += l->accum * (layers * per_layer + 4) * plan_sync_loss_at(c, l->tp, world, chunk);
    }
    if (l->pp > 1) loss += l->accum * 2 * l->v * plan_sync_loss_at(c, 2, world, micro / 2);
    if (l->cp > 1) {  // a layer's all-gather forward and reduce-scatter backward
        double chunk = (k->layer_f + k->layer_b_input + k->layer_b_weight) / 2;
        loss += l->accum * layers * 2 * plan_sync_loss_at(c, l->cp, world, chunk);
    }
    if (l->dp * l->cp > 1) {  // a reduction a segment (a layer, the embeddings) each pass reduced, a gather each use
        double segments = layers + 1, passes = l->zero >= 2 ? l->accum : 1;
        int replicas = l->dp * l->cp;
        loss += (passes * segments + (l->zero >= 1)) * plan_sync_loss_at(c, replicas, world, b / segments);
        if (l->zero == 3)
            loss += l->accum * 2 * segments * plan_sync_loss_at(c, replicas, world, micro / (2 * segments));
    }
    return loss;
}

// The CPU trainer's recompute in its measured kernels (which keep every
// activation): full runs the layer's forward again in the backward; selective
// its attention and GELU, estimated as attention's share of a layer's forward
// FLOPs, T / (12 C + T) (the GELU's elementwise pass is small next to them).
static void plan_cpu_recompute_times(StageKernelTimes *k, RecomputeKind recompute, int T, int C) {
    if (recompute == RECOMPUTE_FULL) k->layer_b_input += k->layer_f;
    if (recompute == RECOMPUTE_SELECTIVE) k->layer_b_input += k->layer_f * T / (12.0 * C + T);
}

// The predicted step of a valid layout (r.t, r.tokens_per_s).
static void plan_predict(const PlanProblem *pb, PlanResult *r, const PPLayout *ppl) {
    const PlanLayout *l = &r->l;
    const Cluster *c = pb->cluster;
    int world = plan_world(l), replicas = l->dp * l->cp;
    StageKernelTimes k = pb->kernels(pb->kernels_ctx, l->B, l->cp, l->tp, l->sp, l->recompute);
    if (c->cpu_trainer) plan_cpu_recompute_times(&k, l->recompute, pb->T, pb->cfg->channels);
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
    double elems = m0.grads / 4 * (l->zero >= 2 ? replicas : 1);  // the rank's parameters (a shard's x dp x cp)
    double segments = (double)pb->cfg->num_layers / l->pp + 1, last_share = 1.0 / segments;
    PlanGroup dg = plan_replica_group(c, l);
    double wbytes = c->cpu_trainer ? 4 : 2, comm = 0.0, zero_fwd = 0.0, zero_bwd = 0.0;
    PlanComm *pc = &r->comm;
    memset(pc, 0, sizeof(*pc));
    pc->dp_group = dg;
    double tp_head, tp_layer = plan_tp_layer_s(pb, l, &tp_head);
    pc->tp_s = l->accum * ((double)pb->cfg->num_layers / l->pp * tp_layer * (l->recompute == RECOMPUTE_FULL ? 3 : 2) +
                           tp_head * 2.5);
    pc->xfer_s = l->pp > 1 ? plan_transfer(c, (double)l->B * pb->T / l->cp * pb->cfg->channels * wbytes /
                                                  (l->sp ? l->tp : 1),
                                           plan_group(c, l->tp * l->cp, l->pp))
                           : 0.0;
    double cp_f, cp_b;
    plan_cp_layer_s(pb, l, &cp_f, &cp_b, &pc->cp_algo);
    pc->cp_s = l->accum * (double)pb->cfg->num_layers / l->pp * (cp_f + cp_b);
    pc->cp_bytes = (double)l->B * pb->T * 2 * (pb->cfg->channels / l->tp) * wbytes, pc->cp_group = plan_cp_group(c, l);
    pc->reduce_bytes = 4 * elems, pc->gather_bytes = wbytes * elems;
    // a collective a segment (a layer's tensors, the embeddings): the whole as segments calls
    PlanOp rop = l->zero == 0 ? PLAN_ALL_REDUCE : PLAN_REDUCE_SCATTER;
    double reduce = replicas > 1 ? segments * plan_collective(c, rop, 4 * elems / segments, dg, &pc->reduce_algo) : 0;
    double gather = replicas > 1 && l->zero >= 1
                        ? segments * plan_collective(c, PLAN_ALL_GATHER, wbytes * elems / segments, dg, &pc->gather_algo)
                        : 0;
    int passes = l->zero >= 2 ? l->accum : 1;
    if (replicas > 1 && c->local && l->zero >= 2) {
        double at = world > 2 ? (double)(replicas - 2) / (world - 2) : 1.0;
        zero_bwd = l->accum * 4 * elems * (c->zero_s[0][0] + at * (c->zero_s[0][1] - c->zero_s[0][0]));
        if (l->zero == 3)
            zero_fwd = l->accum * 2 * 4 * elems * (c->zero_s[1][0] + at * (c->zero_s[1][1] - c->zero_s[1][0]));
        else
            comm += pc->gather_exposed_s = pc->gather_s = gather;  // the updated shards
        pc->reduce_s = pc->reduce_exposed_s = zero_bwd, pc->reduce_calls = (int)(passes * segments);
    } else if (replicas > 1) {
        double window = c->local ? 0.0 : b * (1 - last_share);
        double per_pass = reduce - window > reduce * last_share ? reduce - window : reduce * last_share;
        pc->reduce_s = passes * reduce, pc->reduce_exposed_s = passes * (c->local ? reduce : per_pass);
        pc->reduce_calls = (int)(passes * segments);
        if (l->zero == 3) {  // the weights gathered before each forward and backward
            double ahead = f * (1 - last_share);
            pc->gather_s = l->accum * 2 * gather;
            pc->gather_exposed_s = l->accum * 2 * (gather - ahead > gather * last_share ? gather - ahead : gather * last_share);
            pc->gather_calls = (int)(l->accum * 2 * segments);
        } else if (l->zero >= 1) {
            pc->gather_s = pc->gather_exposed_s = gather;  // the updated shards
            pc->gather_calls = (int)segments;
        }
        comm += pc->reduce_exposed_s + pc->gather_exposed_s;
    }
    double opt = c->local || c->cpu_trainer ? m0.optimizer / 8 * pb->adamw_s_per_elem  // AdamW over the state's elements
                                            : plan_gpu_optimizer_s(c, m0.optimizer / 8);
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
