// pipeline.h: the pipeline-parallel runtime both trainers share. A rank of
// the pipeline group holds its stages' layers (pp_layout.h) and executes its
// list of the step's schedule (pp_schedule.h) action by action: F, B and W on
// one micro-batch's activations through the trainer's stage operations
// (PPStageOps: pipeline_cpu.h over gpt_cpu.h, pipeline_gpu.cuh over
// gpt_gpu.cuh), and the activations and their gradients to and from the
// neighbouring stages as nonblocking point-to-point calls on the pipeline
// group (host buffers over MPI on the CPU; device buffers over NCCL or the
// staged MPI backend on the GPU).
//
// Communication follows the lists: a group of consecutive SEND/RECV actions is
// posted together, as one batch (comm_batch_begin/end: one NCCL group, so its
// sends and receives progress together whatever their order); its sends are
// waited for at the group (the simulator's blocking sends), its receives by
// the F or B that reads them. Lists whose receives are fused
// (pp_schedule_fuse_receives, the GPU trainer's) complete each group as a
// whole, receives included.
//
// Activation sets: a pool, one set per (chunk, micro-batch) held, taken at
// the first action on it (its input's receive, or F) and given back once its
// W is done and its gradient sent. Which set each action uses, and how many
// each chunk has, is pp_schedule.h's pp_rank_sets (the count the memory lines
// and checks use); the pool is allocated to it as the lists are made, and a
// set taken while still held stops the run.
//
// Every run is a pipeline: without --pp it has one stage, whose list is each
// micro-batch's F, B and W in turn on the model's own activations (the stage
// operations hand them out), with nothing sent and no action timed, so the
// trainers have one path and the one-process step is the model's own loop.
//
// Also here: evaluation and sampling (the stages run in order on one
// micro-batch), the --pp-trace record of the executed actions, the
// end-of-run report of each rank's F, B and W times and idle fraction against
// the simulator's prediction for the same times, and what both trainers'
// pipelines share (PipelineCore): the groups, the step's tokens and the tied
// token embedding's protocol between the first and the last stage.
#ifndef LLMC_PIPELINE_H
#define LLMC_PIPELINE_H

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "comm.h"         // defines: CommRequest, CommGroup, comm_wait, comm_batch_begin, ...
#include "model.h"        // defines: GPTConfig, ParamLayout, ParamHolding, param_layout_init_held, param_tensor, ...
#include "pp_layout.h"    // defines: PPLayout, pp_layout_free, pp_holding
#include "pp_schedule.h"  // defines: PPSchedule, pp_stage_of, PP_ZB1P, pp_schedule_free, ...
#include "rand.h"         // defines: Rng, rng_uniform
#include "utils.h"        // defines: die_usage, CHECK, mallocCheck, wall_seconds
#include "zero_shard.h"   // defines: ShardMap, shard_map_init, shard_piece, shard_counts

#define PP_TAG_BASE 200  // point-to-point tags on the pipeline group: PP_TAG_BASE + (stage, micro-batch, direction)
#define PP_TAG_EVAL 100
#define PP_TAG_WTE 101   // the tied token embedding between the first and the last stage

// The buffers of a stage's activation set that messages go to and come from.
typedef enum {
    PP_BUF_IN,    // the stage's input: the activation the stage before sent
    PP_BUF_OUT,   // its output, sent to the stage after
    PP_BUF_DOUT,  // the gradient at its output, from the stage after
    PP_BUF_DIN,   // the gradient at its input (after B), sent to the stage before
} PPBuffer;

// What a trainer gives the runtime: its stages' compute on activation sets.
// chunk: this rank's chunk (stage chunk * p + rank); mb: the micro-batch of
// the step (the trainer keeps the step's tokens).
typedef struct {
    void *ctx;
    void *(*slot_new)(void *ctx, int chunk);
    void (*slot_free)(void *ctx, void *slot);
    void (*forward)(void *ctx, void *slot, int chunk, int mb);
    void (*backward)(void *ctx, void *slot);  // B (and W, unless split)
    void (*weights)(void *ctx, void *slot);   // W of a split backward
    void *(*buffer)(void *slot, PPBuffer which);
    // evaluation and sampling: one micro-batch x, y (y NULL: logits only) through chunk's stage on its
    // own activations (eval_acts'); returns the mean loss on the last stage
    float (*eval_forward)(void *ctx, int chunk, const int *x, const int *y, int B, int T);
    void *(*eval_acts)(void *ctx, int chunk);
    // before compute that reads what r received is queued (GPU: the compute stream waits for it)
    void (*consume)(void *ctx, CommRequest *r);
    // before the clock is read for an action's time (GPU: the compute stream drains); NULL: nothing
    void (*sync)(void *ctx);
    // before a pass that writes gradients (ZeRO's hook; last: the chunk's last such pass of the step)
    void (*begin_pass)(void *ctx, int last);
} PPStageOps;

typedef struct {
    void *act;            // the trainer's activation set
    int chunk, mb;        // the micro-batch it holds (mb -1: free)
    int w_done, send_b_done;
    CommRequest recv_f, recv_b;
    int recv_f_posted, recv_b_posted;
} PPSlot;

typedef struct {
    PPStageOps ops;
    CommGroup *pipe;           // the pipeline group the messages travel on
    CommDType act_type, grad_type;  // of activations and of their gradients
    int B, T, C;               // a message is one micro-batch's (B, T, C) tensor,
    int row_split;             // or its 1/row_split of the B*T rows (sequence parallel: a tensor rank's slice)
    PPLayout layout;
    PPKind kind;
    int rank, p, v, m, split, fuse;
    PPSchedule sched;          // the step's lists, every rank's (built for m micro-batches)
    PPSlot *pool;              // the activation sets, chunk by chunk (pp_rank_sets' count of each)
    int npool;
    int *slot_at;              // (this rank's actions): the pool entry each uses (pp_rank_sets')
    int *sets, *held, *held_peak;  // (v each): of each chunk the sets allocated, held now, held at most (the report)
    FILE *trace;               // --pp-trace: the actions each step executed
    int64_t step;
    // the steps after the first, for pp_runner_report: seconds and counts of F, B and W, and of whole steps
    double op_seconds[3], busy_seconds, span_seconds;
    int64_t op_count[3], timed_steps;
} PPRunner;

static inline int pp_runner_stage(const PPRunner *pr, int chunk) { return pp_stage_of(pr->p, pr->rank, chunk); }

// layout: the stages' layers (pp_layout_init's; taken over). fuse: run fused
// lists (pp_schedule_fuse_receives). trace_path: --pp-trace ("": none); world_rank names its file.
static void pp_runner_init(PPRunner *pr, PPStageOps ops, CommGroup *pipe, CommDType act_type, CommDType grad_type,
                           int B, int T, int C, int row_split, PPLayout layout, PPKind kind, int fuse,
                           const char *trace_path, int world_rank) {
    memset(pr, 0, sizeof(*pr));
    pr->ops = ops;
    pr->pipe = pipe;
    pr->act_type = act_type, pr->grad_type = grad_type;
    pr->B = B, pr->T = T, pr->C = C, pr->row_split = row_split;
    pr->layout = layout;
    pr->kind = kind;
    pr->rank = pipe->rank, pr->p = layout.pp, pr->v = layout.v;
    pr->split = kind == PP_ZB1P;
    pr->fuse = fuse;
    if (trace_path && trace_path[0]) {
        char path[FILENAME_MAX];
        snprintf(path, sizeof(path), "%s.rank%d", trace_path, world_rank);
        pr->trace = fopen(path, "w");
        if (!pr->trace) die_usage("--pp-trace: cannot create '%s': %s", path, strerror(errno));
    }
}

static void pp_runner_free_sets(PPRunner *pr) {
    for (int i = 0; i < pr->npool; i++) pr->ops.slot_free(pr->ops.ctx, pr->pool[i].act);
    free(pr->pool);
    free(pr->slot_at);
    free(pr->sets);
    pr->pool = NULL, pr->slot_at = NULL, pr->sets = NULL, pr->npool = 0;
}

static void pp_runner_free(PPRunner *pr) {
    pp_runner_free_sets(pr);
    if (pr->trace) fclose(pr->trace);
    pp_schedule_free(&pr->sched);
    pp_layout_free(&pr->layout);
    memset(pr, 0, sizeof(*pr));
}

static inline int pp_tag(const PPRunner *pr, int stage_to, int mb, int backward) {
    return PP_TAG_BASE + (int)((((int64_t)stage_to * (pr->m + 1) + mb) * 2 + backward) % 30000);
}

// The lists for m micro-batches and the activation sets they use (pp_rank_sets'), allocated.
static void pp_runner_make_lists(PPRunner *pr, int m) {
    pp_runner_free_sets(pr);
    pp_schedule_free(&pr->sched);
    pp_schedule_lists(&pr->sched, pr->kind, pr->p, pr->v, m, pr->fuse);
    pr->m = m;
    int begin = pr->sched.begin[pr->rank], n = pr->sched.begin[pr->rank + 1] - begin;
    int *sets = pr->sets = (int *)callocCheck(4 * (size_t)pr->v, sizeof(int)), *first = sets + 3 * pr->v;
    pr->held = sets + pr->v, pr->held_peak = sets + 2 * pr->v;
    pr->slot_at = (int *)mallocCheck(sizeof(int) * (size_t)(n ? n : 1));
    pp_rank_sets(&pr->sched, pr->rank, pr->slot_at, sets);
    for (int c = 0; c < pr->v; c++) first[c] = pr->npool, pr->npool += sets[c];
    for (int i = 0; i < n; i++) pr->slot_at[i] += first[pr->sched.acts[begin + i].chunk];
    pr->pool = (PPSlot *)callocCheck((size_t)(pr->npool ? pr->npool : 1), sizeof(PPSlot));
    for (int c = 0, k = 0; c < pr->v; c++)
        for (int x = 0; x < sets[c]; x++, k++) {
            pr->pool[k].chunk = c, pr->pool[k].mb = -1;
            pr->pool[k].act = pr->ops.slot_new(pr->ops.ctx, c);
        }
}

// The pool entry of action i of the rank's list (pp_rank_sets'), taken by its micro-batch on first use.
static PPSlot *pp_slot(PPRunner *pr, int i) {
    const PPAction *a = &pr->sched.acts[i];
    PPSlot *s = &pr->pool[pr->slot_at[i - pr->sched.begin[pr->rank]]];
    if (s->mb == a->mb) return s;
    CHECK(s->mb < 0, "pipeline rank %d: chunk %d's activation set for micro-batch %d still holds micro-batch %d",
          pr->rank, a->chunk, a->mb, s->mb);
    s->mb = a->mb;
    s->w_done = s->send_b_done = s->recv_f_posted = s->recv_b_posted = 0;
    if (++pr->held[s->chunk] > pr->held_peak[s->chunk]) pr->held_peak[s->chunk] = pr->held[s->chunk];
    return s;
}

static void pp_slot_maybe_release(PPRunner *pr, PPSlot *s) {
    int g = pp_runner_stage(pr, s->chunk);
    if (!s->w_done || (g > 0 && !s->send_b_done)) return;
    s->mb = -1;
    pr->held[s->chunk]--;
}

// A received message the next compute reads: waited for (fused lists: done at their group).
static void pp_consume(PPRunner *pr, CommRequest *r, int *posted) {
    if (!*posted) return;
    if (pr->ops.consume) pr->ops.consume(pr->ops.ctx, r);
    comm_wait(r);
    *posted = 0;
}

// One group of consecutive SEND/RECV actions [i, end) of this rank's list.
static void pp_run_comm_group(PPRunner *pr, int i, int end) {
    const PPAction *acts = pr->sched.acts;
    size_t n = (size_t)pr->B * pr->T / (size_t)pr->row_split * pr->C;
    CommRequest reqs[16];
    int sent_b[16];  // the pool entry whose gradient each request sends (-1: none)
    int received[16];  // whether each request is a (fused) receive
    int nreq = 0;
    comm_batch_begin(pr->pipe);
    for (int k = i; k < end; k++) {
        const PPAction *a = &acts[k];
        PPSlot *s = pp_slot(pr, k);
        int g = pp_runner_stage(pr, a->chunk), fwd = a->op == PP_SEND_F || a->op == PP_RECV_F;
        CommDType t = fwd ? pr->act_type : pr->grad_type;
        CHECK(nreq < 16, "a pipeline communication group of more than 16 messages");
        if (a->op == PP_RECV_F || a->op == PP_RECV_B) {
            CommRequest r = comm_recv_start(pr->pipe, pr->ops.buffer(s->act, fwd ? PP_BUF_IN : PP_BUF_DOUT),
                                            n, t, a->peer, pp_tag(pr, g, a->mb, !fwd));
            if (pr->fuse) {  // completed with the group, and read by its consumer's stream (below)
                sent_b[nreq] = -1;
                received[nreq] = 1;
                reqs[nreq++] = r;
                continue;
            }
            *(fwd ? &s->recv_f : &s->recv_b) = r;
            *(fwd ? &s->recv_f_posted : &s->recv_b_posted) = 1;
        } else {
            sent_b[nreq] = fwd ? -1 : (int)(s - pr->pool);
            received[nreq] = 0;
            reqs[nreq++] = comm_send_start(pr->pipe, pr->ops.buffer(s->act, fwd ? PP_BUF_OUT : PP_BUF_DIN),
                                           n, t, a->peer, pp_tag(pr, fwd ? g + 1 : g - 1, a->mb, !fwd));
        }
    }
    comm_batch_end(pr->pipe);
    if (pr->ops.consume)  // the fused receives' consumer waits for them (a request is ready only after its batch)
        for (int k = 0; k < nreq; k++)
            if (received[k]) pr->ops.consume(pr->ops.ctx, &reqs[k]);
    comm_wait_all(reqs, nreq);
    for (int k = 0; k < nreq; k++)
        if (sent_b[k] >= 0) {
            pr->pool[sent_b[k]].send_b_done = 1;
            pp_slot_maybe_release(pr, &pr->pool[sent_b[k]]);
        }
}

// Whether the pipeline is one stage (pp = 1): the schedule is each
// micro-batch's F, B and W in turn on the model's own activations, nothing is
// sent, and no action is timed (no drain of the GPU's stream between them).
static inline int pp_one_stage(const PPRunner *pr) { return pr->layout.stages == 1; }

// One optimizer step's forwards and backwards over m micro-batches, as this
// rank's list orders them. A pass that writes gradients begins with the
// trainer's begin_pass: a stage's B and W; on one stage its F (whose
// classifier adds to wte's gradient, which the stage holds).
static void pp_runner_step(PPRunner *pr, int m) {
    if (m != pr->m) pp_runner_make_lists(pr, m);
    // each chunk's last F, B and W of the step: after it, the chunk's gradients are complete
    int *last_of[3];
    last_of[PP_F] = (int *)mallocCheck(sizeof(int) * 3 * (size_t)pr->v);
    last_of[PP_B] = last_of[PP_F] + pr->v, last_of[PP_W] = last_of[PP_B] + pr->v;
    const PPAction *acts = pr->sched.acts;
    int begin = pr->sched.begin[pr->rank], end = pr->sched.begin[pr->rank + 1];
    for (int i = begin; i < end; i++)
        if (!pp_is_comm(acts[i].op)) last_of[acts[i].op][acts[i].chunk] = i;
    const int one = pp_one_stage(pr), timed = !one;
    const int pass_op = one ? PP_F : PP_B;  // (and W when split)
    if (pr->trace) fprintf(pr->trace, "step %lld rank %d:", (long long)pr->step, pr->rank);
    double step_start = timed ? wall_seconds() : 0.0, busy = 0.0, op_seconds[3] = {0, 0, 0};
    for (int i = begin; i < end;) {
        const PPAction *a = &acts[i];
        if (pr->trace) {
            int j = i;
            do {
                pp_fprint_action(pr->trace, &acts[j]);
            } while (pp_is_comm(acts[j].op) && ++j < end && pp_is_comm(acts[j].op));
        }
        if (pp_is_comm(a->op)) {
            int group_end = i;
            while (group_end < end && pp_is_comm(acts[group_end].op)) group_end++;
            pp_run_comm_group(pr, i, group_end);
            i = group_end;
            continue;
        }
        PPSlot *s = pp_slot(pr, i);
        step_time_enter(a->op == PP_F ? STEP_FWD : STEP_BWD);  // (waits for the neighbour: bubble, in comm.h)
        if (a->op == PP_F) pp_consume(pr, &s->recv_f, &s->recv_f_posted);
        if (a->op == PP_B) pp_consume(pr, &s->recv_b, &s->recv_b_posted);
        double t0 = timed ? wall_seconds() : 0.0;
        if (a->op == pass_op || (a->op == PP_W && pr->split))
            pr->ops.begin_pass(pr->ops.ctx, i == last_of[a->op][a->chunk]);
        if (a->op == PP_F) {
            pr->ops.forward(pr->ops.ctx, s->act, a->chunk, a->mb);
        } else if (a->op == PP_B) {
            pr->ops.backward(pr->ops.ctx, s->act);
        } else {
            if (pr->split) pr->ops.weights(pr->ops.ctx, s->act);
            s->w_done = 1;
            pp_slot_maybe_release(pr, s);
        }
        if (timed) {
            if (pr->ops.sync) pr->ops.sync(pr->ops.ctx);
            double took = wall_seconds() - t0;
            op_seconds[a->op] += took;
            busy += took;
        }
        i++;
    }
    if (pr->trace) fprintf(pr->trace, "\n");
    free(last_of[PP_F]);
    if (timed && pr->step > 0) {  // (the first step allocates the activations)
        for (int k = 0; k < 3; k++) pr->op_seconds[k] += op_seconds[k], pr->op_count[k] += (int64_t)pr->v * m;
        pr->busy_seconds += busy;
        pr->span_seconds += wall_seconds() - step_start;
        pr->timed_steps++;
    }
    pr->step++;
}

// Evaluation and sampling: x through the stages in order (targets y, or NULL
// to keep the logits on the last stage); the mean loss on the last stage's rank (0 elsewhere).
static float pp_runner_eval(PPRunner *pr, const int *x, const int *y, int B, int T) {
    float loss = 0.0f;
    size_t n = (size_t)B * T / (size_t)pr->row_split * pr->C;
    for (int g = 0; g < pr->layout.stages; g++) {
        if (g % pr->p != pr->rank) continue;
        int c = g / pr->p;
        if (g > 0) {
            CommRequest r = comm_recv_start(pr->pipe, pr->ops.buffer(pr->ops.eval_acts(pr->ops.ctx, c), PP_BUF_IN), n, pr->act_type,
                                            (g - 1) % pr->p, PP_TAG_EVAL);
            if (pr->ops.consume) pr->ops.consume(pr->ops.ctx, &r);
            comm_wait(&r);
        }
        loss = pr->ops.eval_forward(pr->ops.ctx, c, x, y, B, T);
        if (g < pr->layout.stages - 1) {
            CommRequest r = comm_send_start(pr->pipe, pr->ops.buffer(pr->ops.eval_acts(pr->ops.ctx, c), PP_BUF_OUT), n,
                                            pr->act_type, (g + 1) % pr->p, PP_TAG_EVAL);
            comm_wait(&r);
        }
    }
    return loss;
}

// At the end of a run (every rank of the pipeline group calls it; print: this
// rank prints): each rank's mean F, B and W times and idle fraction over the
// steps after the first, and what the simulator predicts for the lists with
// those times: the schedule's measured bubble against its model. Transfers
// are taken as free; the measured idle includes them. Also each rank's
// activation sets of each chunk: the most it held at once, of those
// allocated (pp_rank_sets'). (One stage: nothing.)
static void pp_runner_report(PPRunner *pr, int print) {
    if (pr->timed_steps == 0) return;
    int p = pr->p, v = pr->v, each = 5 + 2 * v;  // F, B, W, busy, span; sets held at most, allocated
    double *mine = (double *)mallocCheck(sizeof(double) * (size_t)each);
    double *all = (double *)mallocCheck(sizeof(double) * (size_t)each * p);
    for (int k = 0; k < 3; k++) mine[k] = pr->op_seconds[k] / (double)pr->op_count[k];
    mine[3] = pr->busy_seconds / (double)pr->timed_steps;
    mine[4] = pr->span_seconds / (double)pr->timed_steps;
    for (int c = 0; c < v; c++) mine[5 + c] = pr->held_peak[c], mine[5 + v + c] = pr->sets[c];
    size_t *counts = (size_t *)mallocCheck(sizeof(size_t) * (size_t)p);
    for (int r = 0; r < p; r++) counts[r] = (size_t)each;
    // (a host group: the pipeline's ranks exchange a few doubles)
    CommRequest req = comm_all_gather_start(comm_group(pr->pipe->comm, COMM_PIPELINE), mine, all, counts, COMM_F64);
    comm_wait(&req);
    if (print) {
        PPTimes *t = (PPTimes *)mallocCheck(sizeof(PPTimes) * (size_t)p);
        int *sets = (int *)mallocCheck(sizeof(int) * 2 * (size_t)v);
        double span = 0.0;
        for (int r = 0; r < p; r++) {
            const double *x = all + (size_t)each * r;
            t[r] = (PPTimes){x[0], x[1], x[2], 0.0};
            if (x[4] > span) span = x[4];
        }
        PPSim sim;
        char err[256], held[1024], allocated[1024];
        if (pp_simulate_ranks(&pr->sched, t, 1, 0, &sim, err, sizeof(err)) == 0) {
            printf("pipeline timing (%s, mean of %lld steps after the first; ms): step %.2f measured, %.2f simulated\n",
                   pp_kind_names[pr->kind], (long long)pr->timed_steps, span * 1e3, sim.span * 1e3);
            for (int r = 0; r < p; r++) {
                const double *x = all + (size_t)each * r;
                for (int c = 0; c < 2 * v; c++) sets[c] = (int)x[5 + c];
                pp_sets_format(sets, v, held, sizeof(held));
                pp_sets_format(sets + v, v, allocated, sizeof(allocated));
                printf("  rank %d: F %.3f B %.3f W %.3f a chunk's micro-batch | idle %.1f%% measured, %.1f%% simulated"
                       " | activation sets held at most %s of %s\n", r, t[r].f * 1e3, t[r].b * 1e3, t[r].w * 1e3,
                       100.0 * (1.0 - x[3] / x[4]), 100.0 * sim.idle[r] / sim.span, held, allocated);
            }
        }
        pp_sim_free(&sim);
        free(sets);
        free(t);
    }
    free(counts);
    free(all);
    free(mine);
}

// ---------------------------------------------------------------------------
// what both trainers' pipelines share: the runner, the groups, the step's
// tokens, and the tied token embedding between the ends
//
// The first stage holds wte (embedding), the last a copy of it for the
// classifier (the model's tied_wte, outside its layout) and its gradient.
// After the step's passes the last stage's gradient is reduced over its data
// group and added to the first stage's reduced one (the shard pieces at
// ZeRO >= 1, the whole at ZeRO-0): the sum of both uses, as Megatron's
// embedding all-reduce makes it. Only the first stage updates wte; after the
// update, and once the weights are set, it sends the new weights (each data
// rank its shard piece, which the last stage's data group all-gathers), so the
// copy is the same bits as the original. One stage holds both ends: nothing
// is tied or sent.

// The layout of what pipeline rank `rank` holds (its chunks' stages), at tensor slice tp_rank of tp.
static void pipeline_rank_layout(ParamLayout *pl, const GPTConfig *cfg, const PPLayout *layout, int rank, int tp,
                                 int tp_rank) {
    unsigned char *layers = (unsigned char *)mallocCheck((size_t)cfg->num_layers);
    ParamHolding h = pp_holding(layout, rank, -1, cfg->num_layers, layers);
    param_layout_init_held(pl, cfg, &h, tp, tp_rank);
    free(layers);
}

// Pipeline (pipeline_cpu.h) and PipelineGPU (pipeline_gpu.cuh) begin with it.
typedef struct {
    PPRunner run;
    CommGroup *pipe, *dp;               // the stages' messages, the tie's reductions (device groups on the GPU)
    CommGroup *host_pipe, *host_world;  // the pipeline group and every rank on host buffers (scalars)
    int B, T;
    float dloss;
    const int *xs, *ys;  // the step's micro-batches ((m, B*T) each, host)
    int first, last;     // this rank holds the first stage (wte) / the last (the classifier's copy)
    ShardMap wte_shards;  // the first stage's ZeRO shards, over its layout (wte is its first tensor)
    int64_t wte_elems;    // Vp * C (its vocabulary slice with tensor parallelism)
    float *wte_piece;     // the tie's receive buffer, in the trainer's memory (its piece of wte's gradient)
    size_t *counts;       // (data ranks)
} PipelineCore;

// The layers [first, end) of this rank's chunk (its stage's, pp_layout.h).
static inline int pp_chunk_first_layer(const PipelineCore *pc, int chunk) {
    return pc->run.layout.first_layer[pp_runner_stage(&pc->run, chunk)];
}
static inline int pp_chunk_end_layer(const PipelineCore *pc, int chunk) {
    return pc->run.layout.first_layer[pp_runner_stage(&pc->run, chunk) + 1];
}

// pipe, dp: the groups the stages' tensors travel on; host_pipe, host_world:
// the same ranks for host scalars. layout: the stages' layers (taken over).
// The trainer allocates wte_piece (wte_elems) where its gradients live.
static void pipeline_core_init(PipelineCore *pc, PPStageOps ops, CommGroup *pipe, CommGroup *dp, CommGroup *host_pipe,
                               CommGroup *host_world, CommDType act_type, const GPTConfig *cfg, int tp, int tp_rank,
                               int sp, int B, int T, float dloss, PPLayout layout, PPKind kind, int fuse,
                               const char *trace_path, int world_rank) {
    memset(pc, 0, sizeof(*pc));
    pc->pipe = pipe, pc->dp = dp, pc->host_pipe = host_pipe, pc->host_world = host_world;
    pc->B = B, pc->T = T, pc->dloss = dloss;
    pp_runner_init(&pc->run, ops, pipe, act_type, COMM_F32, B, T, cfg->channels, sp ? tp : 1, layout, kind, fuse,
                   trace_path, world_rank);
    pc->first = pipe->rank == 0;
    pc->last = pipe->rank == pipe->size - 1;
    ParamLayout first;
    pipeline_rank_layout(&first, cfg, &pc->run.layout, 0, tp, tp_rank);
    shard_map_init(&pc->wte_shards, first.num_elements, dp->rank, dp->size);
    pc->wte_elems = param_tensor(&first, PK_WTE, -1)->numel;
    param_layout_free(&first);
    pc->counts = (size_t *)mallocCheck(sizeof(size_t) * (size_t)dp->size);
}

static void pipeline_core_free(PipelineCore *pc) {
    pp_runner_free(&pc->run);
    free(pc->counts);
    memset(pc, 0, sizeof(*pc));
}

// Whether the ends are two ranks, and so wte has a copy to keep.
static inline int pipeline_tied(const PipelineCore *pc) { return !pp_one_stage(&pc->run); }

// The step's forwards and backwards over m micro-batches xs, ys ((m, B*T) each, host).
static void pipeline_core_step(PipelineCore *pc, const int *xs, const int *ys, int m) {
    pc->xs = xs, pc->ys = ys;
    pp_runner_step(&pc->run, m);
}

// The last stage's loss (a step's sum, an evaluation's mean) on every rank of the pipeline group.
static float pipeline_share_loss(PipelineCore *pc, double loss) {
    if (pipeline_tied(pc)) comm_broadcast(pc->host_pipe, &loss, 1, COMM_F64, pc->pipe->size - 1);
    return (float)loss;
}

// Evaluation and sampling's forward: x through the stages in order (y NULL:
// the logits only, kept on the last stage); the mean loss on every rank.
static float pipeline_core_forward(PipelineCore *pc, const int *x, const int *y, int B, int T) {
    float loss = pp_runner_eval(&pc->run, x, y, B, T);
    return y ? pipeline_share_loss(pc, loss) : loss;
}

// The last stage's sampled token on every rank; the others make the draw it
// made, so every rank's generator stays the same.
static int pipeline_share_token(PipelineCore *pc, double token, Rng *rng) {
    if (!pipeline_tied(pc)) return (int)token;
    comm_broadcast(pc->host_pipe, &token, 1, COMM_F64, pc->pipe->size - 1);
    if (!pc->last) rng_uniform(rng);
    return (int)token;
}

// The first stage's wte (`weights`: its buffer, wte at 0) into the last
// stage's copy, in the type the copy has.
static void pipeline_send_tied_weights(PipelineCore *pc, const void *weights, void *copy, CommDType t) {
    if (!pipeline_tied(pc)) return;
    int64_t plo, phi;
    shard_piece(&pc->wte_shards, 0, pc->wte_elems, &plo, &phi);
    size_t n = (size_t)(phi - plo), at = (size_t)plo * comm_dtype_size(t);
    if (pc->first) {
        CommRequest r = comm_send_start(pc->pipe, (const char *)weights + at, n, t, pc->pipe->size - 1, PP_TAG_WTE);
        comm_wait(&r);
    } else if (pc->last) {
        CommRequest r = comm_recv_start(pc->pipe, (char *)copy + at, n, t, 0, PP_TAG_WTE);
        comm_wait(&r);
        shard_counts(&pc->wte_shards, 0, pc->wte_elems, pc->counts);
        r = comm_all_gather_start(pc->dp, NULL, copy, pc->counts, t);
        comm_wait(&r);
    }
}

// The last stage's wte gradient (tied_dwte) toward the first stage's reduced
// one: reduced over the last stage's data group (all-reduced at ZeRO-0, where
// the first stage adds all of it; else reduce-scattered into the first stage's
// shard pieces) and sent to the first stage of the same data rank. Returns 1
// on the first stage, whose wte_piece then holds [*plo, *phi) of wte's
// gradient for the trainer to add to its reduced one.
static int pipeline_tie_grads(PipelineCore *pc, float *tied_dwte, int zero_stage, int64_t *plo, int64_t *phi) {
    if (!pipeline_tied(pc)) return 0;
    *plo = 0, *phi = pc->wte_elems;
    if (zero_stage > 0) shard_piece(&pc->wte_shards, 0, pc->wte_elems, plo, phi);
    size_t n = (size_t)(*phi - *plo);
    if (pc->last) {
        float *g = tied_dwte;
        if (zero_stage == 0) {
            comm_all_reduce(pc->dp, g, n, COMM_F32);
        } else {
            shard_counts(&pc->wte_shards, 0, pc->wte_elems, pc->counts);
            CommRequest r = comm_reduce_scatter_start(pc->dp, g, g + *plo, pc->counts, COMM_F32);
            comm_wait(&r);
        }
        CommRequest r = comm_send_start(pc->pipe, g + *plo, n, COMM_F32, 0, PP_TAG_WTE);
        comm_wait(&r);
        return 0;
    }
    if (!pc->first) return 0;
    CommRequest r = comm_recv_start(pc->pipe, pc->wte_piece, n, COMM_F32, pc->pipe->size - 1, PP_TAG_WTE);
    if (pc->run.ops.consume) pc->run.ops.consume(pc->run.ops.ctx, &r);
    comm_wait(&r);
    return 1;
}

#endif  // LLMC_PIPELINE_H
