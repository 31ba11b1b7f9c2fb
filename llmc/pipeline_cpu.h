// pipeline_cpu.h: pipeline-parallel training on the CPU trainer. Each rank of
// the pipeline group runs its stages' layers (pp_layout.h) and executes its
// list of the step's schedule (pp_schedule.h) action by action: F, B and W on
// one micro-batch's activations (gpt_cpu.h's gpt_stage_*), and the
// activations and their gradients to and from the neighbouring stages as
// nonblocking MPI point-to-point calls on the pipeline group (a group's
// receives are posted and waited for by the F or B that reads them; its sends
// are waited for at the group, the simulator's semantics).
//
// After the last action: gradients are reduced over the data group (the
// ranks holding the same stages): all-reduced at ZeRO-0, where every data rank
// of a stage holds the stage's whole AdamW state, reduce-scattered at ZeRO-1,
// where each updates its shard of each range and the weights are all-gathered;
// the tied token embedding's two gradients (the first stage's from the
// embedding, the last stage's from the classifier) are summed between the two
// ends, so both copies take the same AdamW step and stay bit-identical; the
// gradient norm is summed over the stages (wte once). Evaluation and sampling run the stages
// in order on one micro-batch; the loss and the sampled logits are broadcast
// from the last stage.
//
// Memory: the weights and gradients stay addressed by the global flat order
// (model.h), but as anonymous mappings of which only the ranges this rank's
// stages hold (pp_stage_ranges) are ever touched, so only those take memory;
// the AdamW state holds just the pieces this rank updates. For the model
// files, the other ranks send their ranges to rank 0 of the pipeline group.
#ifndef LLMC_PIPELINE_CPU_H
#define LLMC_PIPELINE_CPU_H

#include "checkpoint.h"
#include "comm.h"
#include "gpt_cpu.h"
#include "optimizer.h"
#include "pp_layout.h"
#include "pp_schedule.h"
#include "zero_cpu.h"
#include "zero_shard.h"

#define PP_TAG_BASE 200  // point-to-point tags on the pipeline group: PP_TAG_BASE + (stage, micro-batch, direction)
#define PP_TAG_EVAL 100
#define PP_TAG_WTE 101
#define PP_TAG_GATHER 102

typedef struct {
    GPTActivations a;
    int chunk, mb;        // the micro-batch it holds (mb -1: free)
    int w_done, send_b_done;
    CommRequest recv_f, recv_b;
    int recv_f_posted, recv_b_posted;
} PPSlot;

typedef struct {
    GPT *model;
    CommGroup *pipe, *dp, *world;
    PPLayout layout;
    PPSchedule sched;          // the step's lists, every rank's (built for m micro-batches)
    PPKind kind;
    int rank, p, v, m, B, T, split;
    PPRange held[PP_MAX_RANK_RANGES];  // this rank's ranges of the flat buffer, its chunks in order
    int nheld;
    int wte_at;                // index in held of wte (the first or the last stage holds it; -1: neither)
    int wte_held;              // wte_at on the last stage when p > 1 (the norm counts the first stage's), else -1
    PPSlot *pool;              // activation sets, in use or free
    int npool;
    int *slot_of;              // (v * m): the pool entry of (chunk, micro-batch), -1
    GPTActivations *eval;      // (v): one micro-batch's forward per chunk, for evaluation and sampling
    float *logits_row;         // (V): a sampled row, broadcast from the last stage
    int zero;                  // 0: every data rank updates the stage's ranges; 1: each its ZeRO shard of each
    ShardMap *shards;          // (nheld): each held range's shards over the data group (positions within it)
    int64_t *state_at;         // (nheld): where each range's piece starts in adam_m, adam_v
    float *adam_m, *adam_v;    // AdamW state of the pieces this rank updates, one after the other
    size_t *counts;            // (data ranks)
    float *wte_peer;           // the other end's wte gradient (this rank's piece of it)
    float dloss;
    FILE *trace;               // --pp-trace: the actions each step executed
    int64_t step;
    // the steps after the first, for pipeline_report: seconds and counts of F, B and W, and of whole steps
    double op_seconds[3], busy_seconds, span_seconds;
    int64_t op_count[3], timed_steps;
} Pipeline;

static inline int pp_stage_first_layer(const Pipeline *pp, int chunk) {
    return pp->layout.first_layer[pp_stage_of(pp->p, pp->rank, chunk)];
}
static inline int pp_stage_end_layer(const Pipeline *pp, int chunk) {
    return pp->layout.first_layer[pp_stage_of(pp->p, pp->rank, chunk) + 1];
}

static int pp_range_cmp(const void *a, const void *b) {
    int64_t x = ((const PPRange *)a)->lo, y = ((const PPRange *)b)->lo;
    return (x > y) - (x < y);
}

// layout: the stages' layers (pp_layout_init's); takes it over. The model's
// weights: initialised or loaded (at least this rank's ranges).
static void pipeline_init(Pipeline *pp, GPT *model, Comm *comm, PPLayout layout, PPKind kind, int zero, int B,
                          int T, float dloss, const char *trace_path) {
    memset(pp, 0, sizeof(*pp));
    pp->model = model;
    pp->pipe = comm_group(comm, COMM_PIPELINE);
    pp->dp = comm_group(comm, COMM_DATA);
    pp->world = comm_group(comm, COMM_WORLD);
    pp->zero = zero;
    pp->layout = layout;
    pp->kind = kind;
    pp->rank = pp->pipe->rank, pp->p = layout.pp, pp->v = layout.v;
    pp->B = B, pp->T = T, pp->dloss = dloss;
    pp->split = kind == PP_ZB1P;
    const ParamLayout *pl = &model->layout;
    pp->wte_held = pp->wte_at = -1;
    pp->nheld = pp_rank_ranges(pl, &layout, pp->rank, pp->held);
    const ParamTensor *wte = param_tensor(pl, PK_WTE, -1);
    for (int k = 0; k < pp->nheld; k++)
        if (pp->held[k].lo == wte->offset && pp->held[k].hi == wte->offset + wte->numel) {
            pp->wte_at = k;
            if (pp->rank == pp->p - 1 && layout.stages > 1) pp->wte_held = k;  // the classifier's copy
        }
    // the weights outside this rank's stages are handed back (a model file wrote them all)
    PPRange sorted[PP_MAX_RANK_RANGES];
    memcpy(sorted, pp->held, sizeof(PPRange) * (size_t)pp->nheld);
    qsort(sorted, (size_t)pp->nheld, sizeof(PPRange), pp_range_cmp);
    int64_t gap = 0;
    for (int k = 0; k <= pp->nheld; k++) {
        int64_t next = k < pp->nheld ? sorted[k].lo : pl->num_elements;
        if (next > gap) release_range(model->params, gap, next);
        if (k < pp->nheld && sorted[k].hi > gap) gap = sorted[k].hi;
    }
    pp->shards = (ShardMap *)mallocCheck(sizeof(ShardMap) * (size_t)pp->nheld);
    pp->state_at = (int64_t *)mallocCheck(sizeof(int64_t) * (size_t)pp->nheld);
    int64_t state = 0;
    for (int k = 0; k < pp->nheld; k++) {
        int64_t len = pp->held[k].hi - pp->held[k].lo;
        shard_map_init(&pp->shards[k], len, zero ? pp->dp->rank : 0, zero ? pp->dp->size : 1);
        pp->state_at[k] = state;
        state += pp->shards[k].end - pp->shards[k].begin;
    }
    pp->adam_m = (float *)callocCheck((size_t)(state ? state : 1), sizeof(float));
    pp->adam_v = (float *)callocCheck((size_t)(state ? state : 1), sizeof(float));
    pp->counts = (size_t *)mallocCheck(sizeof(size_t) * (size_t)pp->dp->size);
    if (pp->p > 1 && (pp->rank == 0 || pp->rank == pp->p - 1))
        pp->wte_peer = (float *)mallocCheck(sizeof(float) *
                                            (size_t)(pp->shards[pp->wte_at].end - pp->shards[pp->wte_at].begin + 1));
    pp->eval = (GPTActivations *)callocCheck((size_t)pp->v, sizeof(GPTActivations));
    pp->logits_row = (float *)mallocCheck(sizeof(float) * (size_t)model->cfg.vocab_size);
    if (trace_path && trace_path[0]) {
        char path[FILENAME_MAX];
        snprintf(path, sizeof(path), "%s.rank%d", trace_path, comm->rank);
        pp->trace = fopen(path, "w");
        if (!pp->trace) die_usage("--pp-trace: cannot create '%s': %s", path, strerror(errno));
    }
}

static void pipeline_free(Pipeline *pp) {
    for (int i = 0; i < pp->npool; i++) gpt_activations_free(&pp->pool[i].a);
    for (int c = 0; c < pp->v; c++) gpt_activations_free(&pp->eval[c]);
    free(pp->pool);
    free(pp->slot_of);
    free(pp->eval);
    free(pp->logits_row);
    free(pp->adam_m);
    free(pp->adam_v);
    free(pp->shards);
    free(pp->state_at);
    free(pp->counts);
    free(pp->wte_peer);
    if (pp->trace) fclose(pp->trace);
    pp_schedule_free(&pp->sched);
    pp_layout_free(&pp->layout);
    memset(pp, 0, sizeof(*pp));
}

// Elements of the flat buffer this rank's stages hold.
static int64_t pipeline_held_elements(const Pipeline *pp) {
    int64_t n = 0;
    for (int k = 0; k < pp->nheld; k++) n += pp->held[k].hi - pp->held[k].lo;
    return n;
}

// Activation floats pipeline rank `rank`'s micro-batches in flight need at
// the schedule's peak of m micro-batches (the memory check and line; the
// allocation grows to it as it runs): that many sets of its average chunk,
// each with the ends' buffers (an over-estimate for a middle stage).
static double pipeline_rank_activation_floats(const GPTConfig *cfg, const PPLayout *layout, PPKind kind, int rank,
                                              int m, int B, int T) {
    int peak = pp_peak_alive_theory(kind, layout->pp, layout->v, m, rank), layers = 0;
    for (int c = 0; c < layout->v; c++) {
        int g = pp_stage_of(layout->pp, rank, c);
        layers += layout->first_layer[g + 1] - layout->first_layer[g];
    }
    return (double)peak * gpt_stage_activation_floats(cfg, B, T, (layers + layout->v - 1) / layout->v,
                                                      kind == PP_ZB1P, 1, 1);
}
static double pipeline_activation_floats(const Pipeline *pp, int m) {
    return pipeline_rank_activation_floats(&pp->model->cfg, &pp->layout, pp->kind, pp->rank, m, pp->B, pp->T);
}

static inline int pp_tag(const Pipeline *pp, int stage_to, int mb, int backward) {
    return PP_TAG_BASE + (int)((((int64_t)stage_to * (pp->m + 1) + mb) * 2 + backward) % 30000);
}

// The pool entry holding (chunk, mb), taking a free one (or a new one) on first use.
static PPSlot *pp_slot(Pipeline *pp, int chunk, int mb) {
    int *at = &pp->slot_of[chunk * pp->m + mb];
    if (*at >= 0) return &pp->pool[*at];
    for (int i = 0; i < pp->npool; i++)
        if (pp->pool[i].mb < 0 && pp->pool[i].chunk == chunk) { *at = i; break; }
    if (*at < 0) {
        pp->pool = (PPSlot *)realloc(pp->pool, sizeof(PPSlot) * (size_t)(pp->npool + 1));
        CHECK(pp->pool, "out of memory for pipeline activations");
        PPSlot *s = &pp->pool[pp->npool];
        memset(s, 0, sizeof(*s));
        s->chunk = chunk;
        gpt_activations_alloc(&s->a, &pp->model->cfg, pp->B, pp->T, pp_stage_first_layer(pp, chunk),
                              pp_stage_end_layer(pp, chunk), pp->split);
        *at = pp->npool++;
    }
    PPSlot *s = &pp->pool[*at];
    s->mb = mb;
    s->w_done = s->send_b_done = s->recv_f_posted = s->recv_b_posted = 0;
    return s;
}

static void pp_slot_maybe_release(Pipeline *pp, PPSlot *s) {
    int g = pp_stage_of(pp->p, pp->rank, s->chunk);
    if (!s->w_done || (g > 0 && !s->send_b_done)) return;
    pp->slot_of[s->chunk * pp->m + s->mb] = -1;
    s->mb = -1;
}

static const float *pp_stage_output(const PPSlot *s) { return s->a.residual3[s->a.l1 - 1]; }

// One group of consecutive SEND/RECV actions [i, end) of this rank's list.
static void pp_run_comm_group(Pipeline *pp, int i, int end) {
    const PPAction *acts = pp->sched.acts;
    size_t n = (size_t)pp->B * pp->T * pp->model->cfg.channels;
    CommRequest sends[8];
    PPSlot *sent_b[8];
    int nsend = 0;
    for (int k = i; k < end; k++) {
        const PPAction *a = &acts[k];
        PPSlot *s = pp_slot(pp, a->chunk, a->mb);
        int g = pp_stage_of(pp->p, pp->rank, a->chunk);
        if (a->op == PP_RECV_F) {
            s->recv_f = comm_recv_start(pp->pipe, s->a.encoded, n, COMM_F32, a->peer, pp_tag(pp, g, a->mb, 0));
            s->recv_f_posted = 1;
        } else if (a->op == PP_RECV_B) {
            s->recv_b = comm_recv_start(pp->pipe, s->a.dresidual, n, COMM_F32, a->peer, pp_tag(pp, g, a->mb, 1));
            s->recv_b_posted = 1;
        } else {
            CHECK(nsend < 8, "a pipeline communication group of more than 8 sends");
            int fwd = a->op == PP_SEND_F;
            sent_b[nsend] = fwd ? NULL : s;
            sends[nsend++] = comm_send_start(pp->pipe, fwd ? pp_stage_output(s) : s->a.dresidual, n, COMM_F32,
                                             a->peer, pp_tag(pp, fwd ? g + 1 : g - 1, a->mb, !fwd));
        }
    }
    comm_wait_all(sends, nsend);
    for (int k = 0; k < nsend; k++)
        if (sent_b[k]) {
            sent_b[k]->send_b_done = 1;
            pp_slot_maybe_release(pp, sent_b[k]);
        }
}

// One optimizer step's forwards and backwards over m micro-batches xs, ys
// ((m, B*T) each); returns the sum of the micro-batches' mean losses (every rank).
static float pipeline_step(void *ctx, const int *xs, const int *ys, int m) {
    Pipeline *pp = (Pipeline *)ctx;
    if (m != pp->m) {
        pp_schedule_free(&pp->sched);
        pp_schedule_build(&pp->sched, pp->kind, pp->p, pp->v, m);
        pp->m = m;
        free(pp->slot_of);
        pp->slot_of = (int *)mallocCheck(sizeof(int) * (size_t)pp->v * m);
        for (int i = 0; i < pp->npool; i++) pp->pool[i].mb = -1;
    }
    for (int i = 0; i < pp->v * m; i++) pp->slot_of[i] = -1;
    GPT *model = pp->model;
    size_t BT = (size_t)pp->B * pp->T;
    double loss = 0.0;
    const PPAction *acts = pp->sched.acts;
    int begin = pp->sched.begin[pp->rank], end = pp->sched.begin[pp->rank + 1];
    if (pp->trace) fprintf(pp->trace, "step %lld rank %d:", (long long)pp->step, pp->rank);
    double step_start = wall_seconds(), busy = 0.0, op_seconds[3] = {0, 0, 0};
    for (int i = begin; i < end;) {
        const PPAction *a = &acts[i];
        if (pp->trace) {
            int j = i;
            do {
                pp_fprint_action(pp->trace, &acts[j]);
            } while (pp_is_comm(acts[j].op) && ++j < end && pp_is_comm(acts[j].op));
        }
        if (pp_is_comm(a->op)) {
            int group_end = i;
            while (group_end < end && pp_is_comm(acts[group_end].op)) group_end++;
            pp_run_comm_group(pp, i, group_end);
            i = group_end;
            continue;
        }
        PPSlot *s = pp_slot(pp, a->chunk, a->mb);
        if (a->op == PP_F && s->recv_f_posted) comm_wait(&s->recv_f);
        if (a->op == PP_B && s->recv_b_posted) comm_wait(&s->recv_b);
        double t0 = wall_seconds();
        if (a->op == PP_F) {
            loss += gpt_stage_forward(model, &s->a, xs + a->mb * BT, ys + a->mb * BT, pp->B, pp->T, pp->dloss);
        } else if (a->op == PP_B) {
            gpt_stage_backward(model, &s->a);
        } else {
            if (pp->split) gpt_stage_backward_weights(model, &s->a);
            s->w_done = 1;
            pp_slot_maybe_release(pp, s);
        }
        double took = wall_seconds() - t0;
        op_seconds[a->op] += took;
        busy += took;
        i++;
    }
    if (pp->trace) fprintf(pp->trace, "\n");
    if (pp->step > 0) {  // (the first step allocates the activations)
        for (int k = 0; k < 3; k++) pp->op_seconds[k] += op_seconds[k], pp->op_count[k] += (int64_t)pp->v * m;
        pp->busy_seconds += busy;
        pp->span_seconds += wall_seconds() - step_start;
        pp->timed_steps++;
    }
    pp->step++;
    comm_broadcast(pp->pipe, &loss, 1, COMM_F64, pp->p - 1);
    return (float)loss;
}

// Evaluation and sampling: x through the stages in order (targets y, or NULL
// to keep the logits on the last stage); the mean loss, on every rank.
static float pipeline_forward(void *ctx, const int *x, const int *y, int B, int T, float dloss) {
    Pipeline *pp = (Pipeline *)ctx;
    CHECK(dloss == 0.0f, "pipeline_forward is for evaluation and sampling (train through pipeline_step)");
    double loss = 0.0;
    size_t n = (size_t)B * T * pp->model->cfg.channels;
    for (int g = 0; g < pp->layout.stages; g++) {
        if (g % pp->p != pp->rank) continue;
        int c = g / pp->p;
        GPTActivations *a = &pp->eval[c];
        gpt_activations_alloc(a, &pp->model->cfg, pp->B, pp->T, pp->layout.first_layer[g],
                              pp->layout.first_layer[g + 1], 0);
        if (g > 0) {
            CommRequest r = comm_recv_start(pp->pipe, a->encoded, n, COMM_F32, (g - 1) % pp->p, PP_TAG_EVAL);
            comm_wait(&r);
        }
        loss = gpt_stage_forward(pp->model, a, x, y, B, T, 0.0f);
        if (g < pp->layout.stages - 1) {
            CommRequest r = comm_send_start(pp->pipe, a->residual3[a->l1 - 1], n, COMM_F32, (g + 1) % pp->p,
                                            PP_TAG_EVAL);
            comm_wait(&r);
        }
    }
    if (y) comm_broadcast(pp->pipe, &loss, 1, COMM_F64, pp->p - 1);
    return (float)loss;
}

// Row `row` of the last pipeline_forward's logits, on every rank.
static const float *pipeline_logits(void *ctx, int row) {
    Pipeline *pp = (Pipeline *)ctx;
    int V = pp->model->cfg.vocab_size;
    if (pp->rank == pp->p - 1)
        memcpy(pp->logits_row, pp->eval[pp->v - 1].logits + (size_t)row * V, sizeof(float) * (size_t)V);
    comm_broadcast(pp->pipe, pp->logits_row, (size_t)V, COMM_F32, pp->p - 1);
    return pp->logits_row;
}

// This rank's piece [lo, hi) of held range k: the range at ZeRO-0, its shard at ZeRO-1.
static inline void pp_piece(const Pipeline *pp, int k, int64_t *lo, int64_t *hi) {
    *lo = pp->held[k].lo + pp->shards[k].begin;
    *hi = pp->held[k].lo + pp->shards[k].end;
}

// After the step's last action: every held range reduced over the data group
// (all-reduced, or reduce-scattered in place at ZeRO-1), the tied wte
// gradients summed between the two ends (the same sum at both), and the
// global norm (every stage's pieces, wte once).
static float pipeline_finish_grads(void *ctx) {
    Pipeline *pp = (Pipeline *)ctx;
    GPT *m = pp->model;
    for (int k = 0; k < pp->nheld; k++) {
        float *g = m->grads + pp->held[k].lo;
        size_t n = (size_t)(pp->held[k].hi - pp->held[k].lo);
        if (pp->zero == 0) {
            comm_all_reduce(pp->dp, g, n, COMM_F32);
        } else {
            shard_counts(&pp->shards[k], 0, (int64_t)n, pp->counts);
            CommRequest r = comm_reduce_scatter_start(pp->dp, g, g + pp->shards[k].begin, pp->counts, COMM_F32);
            comm_wait(&r);
        }
    }
    if (pp->wte_peer) {  // the same range, so the same piece, at both ends
        int peer = pp->rank == 0 ? pp->p - 1 : 0;
        int64_t lo, hi;
        pp_piece(pp, pp->wte_at, &lo, &hi);
        float *g = m->grads + lo;
        size_t n = (size_t)(hi - lo);
        CommRequest r[2] = {comm_recv_start(pp->pipe, pp->wte_peer, n, COMM_F32, peer, PP_TAG_WTE),
                            comm_send_start(pp->pipe, g, n, COMM_F32, peer, PP_TAG_WTE)};
        comm_wait_all(r, 2);
        for (size_t i = 0; i < n; i++) g[i] += pp->wte_peer[i];
    }
    double ss = 0.0;
    for (int k = 0; k < pp->nheld; k++) {
        int64_t lo, hi;
        pp_piece(pp, k, &lo, &hi);
        if (k != pp->wte_held) ss += sum_of_squares(m->grads + lo, hi - lo);
    }
    comm_all_reduce(pp->zero ? pp->world : pp->pipe, &ss, 1, COMM_F64);
    return (float)sqrt(ss);
}

// AdamW on this rank's pieces; at ZeRO-1 each range's weights are then
// all-gathered and its gradient zeroed for the next step.
static void pipeline_optimizer_step(void *ctx, const AdamWConfig *ac, float grad_scale, int step) {
    (void)step;
    Pipeline *pp = (Pipeline *)ctx;
    GPT *m = pp->model;
    for (int k = 0; k < pp->nheld; k++) {
        int64_t lo, hi;
        pp_piece(pp, k, &lo, &hi);
        adamw_update_range(&m->layout, m->params, m->grads, ADAMW_ZERO_GRADS, pp->adam_m + pp->state_at[k],
                           pp->adam_v + pp->state_at[k], lo, hi, ac, grad_scale);
        if (pp->zero == 0) continue;
        size_t n = (size_t)(pp->held[k].hi - pp->held[k].lo);
        shard_counts(&pp->shards[k], 0, (int64_t)n, pp->counts);
        CommRequest r = comm_all_gather_start(pp->dp, NULL, m->params + pp->held[k].lo, pp->counts, COMM_F32);
        comm_wait(&r);
        memset(m->grads + pp->held[k].lo, 0, sizeof(float) * n);
    }
}

static void pipeline_nothing(void *ctx) { (void)ctx; }
static void pipeline_nothing_micro(void *ctx, int micro, int accum) { (void)ctx, (void)micro, (void)accum; }

// ---------------------------------------------------------------------------
// checkpoints (checkpoint.h): every rank writes 1/dp of each range its stages
// hold (the last stage's wte is the first's), so each element is written
// once; it holds the weights of its ranges and the AdamW state of its pieces.

// Refuses (exit 2) a layout whose ranks hold more pieces than a checkpoint file lists.
static CkptRanges pipeline_ckpt_ranges(const Pipeline *pp) {
    CkptRanges r;
    memset(&r, 0, sizeof(r));
    if (pp->nheld > CKPT_MAX_PIECES)
        die_usage("--ckpt-dir: a rank of this pipeline holds %d ranges of the weights, more than a checkpoint file "
                  "lists (%d): use fewer --virtual-stages", pp->nheld, CKPT_MAX_PIECES);
    for (int k = 0; k < pp->nheld; k++) {
        int64_t lo, hi;
        pp_piece(pp, k, &lo, &hi);
        r.hold[0].r[r.hold[0].n++] = (CkptRange){pp->held[k].lo, pp->held[k].hi};
        r.hold[1].r[r.hold[1].n++] = (CkptRange){lo, hi};
        if (k == pp->wte_held) continue;
        ShardMap w;
        shard_map_init(&w, pp->held[k].hi - pp->held[k].lo, pp->dp->rank, pp->dp->size);
        if (w.end > w.begin) r.write.r[r.write.n++] = (CkptRange){pp->held[k].lo + w.begin, pp->held[k].lo + w.end};
    }
    r.hold[2] = r.hold[1];
    return r;
}

// The held range a written piece [lo, hi) lies in.
static int pp_held_of(const Pipeline *pp, int64_t lo, int64_t hi) {
    for (int k = 0; k < pp->nheld; k++)
        if (k != pp->wte_held && lo >= pp->held[k].lo && hi <= pp->held[k].hi) return k;
    DIE("checkpoint piece [%lld, %lld) is not one of this rank's", (long long)lo, (long long)hi);
}

// [lo, hi) of the weights, m and v, one after the other, into staging.
static void pipeline_ckpt_stage(void *ctx, float *staging, int64_t lo, int64_t hi) {
    Pipeline *pp = (Pipeline *)ctx;
    int k = pp_held_of(pp, lo, hi);
    int64_t plo, phi, n = hi - lo;
    pp_piece(pp, k, &plo, &phi);
    CHECK(lo >= plo && hi <= phi, "checkpoint piece [%lld, %lld) outside this rank's AdamW state",
          (long long)lo, (long long)hi);
    const float *views[3] = {pp->model->params + lo, pp->adam_m + pp->state_at[k] + (lo - plo),
                             pp->adam_v + pp->state_at[k] + (lo - plo)};
    for (int s = 0; s < 3; s++) memcpy(staging + (size_t)s * (size_t)n, views[s], sizeof(float) * (size_t)n);
}

// The states over pipeline_ckpt_ranges' holds: the weights of every held
// range, the AdamW state of every piece (the order adam_m and adam_v keep).
static void pipeline_ckpt_load(void *ctx, float *const states[CKPT_STATES], const CkptRanges *ranges, int64_t step) {
    (void)step;
    Pipeline *pp = (Pipeline *)ctx;
    int64_t at = 0;
    for (int k = 0; k < ranges->hold[0].n; k++) {
        const CkptRange *q = &ranges->hold[0].r[k];
        memcpy(pp->model->params + q->lo, states[0] + at, sizeof(float) * (size_t)(q->hi - q->lo));
        at += q->hi - q->lo;
    }
    int64_t n = ckpt_pieces_elems(&ranges->hold[1]);
    memcpy(pp->adam_m, states[1], sizeof(float) * (size_t)n);
    memcpy(pp->adam_v, states[2], sizeof(float) * (size_t)n);
}

// At the end of a run (every rank of the pipeline group calls it; rank 0 of
// the group prints): each rank's mean F, B and W times and idle fraction over
// the steps after the first, and what the simulator (pp_schedule.h) predicts
// for the lists with those times: the schedule's measured bubble against its
// model. Transfers are taken as free; the measured idle includes them.
static void pipeline_report(Pipeline *pp, int print) {
    if (pp->timed_steps == 0) return;
    int p = pp->p;
    double mine[5], *all = (double *)mallocCheck(sizeof(double) * 5 * (size_t)p);
    for (int k = 0; k < 3; k++) mine[k] = pp->op_seconds[k] / (double)pp->op_count[k];
    mine[3] = pp->busy_seconds / (double)pp->timed_steps;
    mine[4] = pp->span_seconds / (double)pp->timed_steps;
    size_t *counts = (size_t *)mallocCheck(sizeof(size_t) * (size_t)p);
    for (int r = 0; r < p; r++) counts[r] = 5;
    CommRequest req = comm_all_gather_start(pp->pipe, mine, all, counts, COMM_F64);
    comm_wait(&req);
    if (print) {
        PPTimes *t = (PPTimes *)mallocCheck(sizeof(PPTimes) * (size_t)p);
        double span = 0.0;
        for (int r = 0; r < p; r++) {
            t[r] = (PPTimes){all[5 * r], all[5 * r + 1], all[5 * r + 2], 0.0};
            if (all[5 * r + 4] > span) span = all[5 * r + 4];
        }
        PPSim sim;
        char err[256];
        if (pp_simulate_ranks(&pp->sched, t, 1, 0, &sim, err, sizeof(err)) == 0) {
            printf("pipeline timing (%s, mean of %lld steps after the first; ms): step %.2f measured, %.2f simulated\n",
                   pp_kind_names[pp->kind], (long long)pp->timed_steps, span * 1e3, sim.span * 1e3);
            for (int r = 0; r < p; r++)
                printf("  rank %d: F %.3f B %.3f W %.3f a chunk's micro-batch | idle %.1f%% measured, %.1f%% simulated\n",
                       r, t[r].f * 1e3, t[r].b * 1e3, t[r].w * 1e3, 100.0 * (1.0 - all[5 * r + 3] / all[5 * r + 4]),
                       100.0 * sim.idle[r] / sim.span);
        }
        pp_sim_free(&sim);
        free(t);
    }
    free(counts);
    free(all);
}

// Whole weights on rank 0 of the pipeline group (for the model files): every
// other rank sends it its stages' ranges (the last stage's wte is the first's).
static void pipeline_gather_params(Pipeline *pp) {
    GPT *m = pp->model;
    for (int r = 1; r < pp->p; r++) {
        if (pp->rank != 0 && pp->rank != r) continue;
        for (int c = 0; c < pp->v; c++) {
            int g = pp_stage_of(pp->p, r, c);
            PPRange ranges[PP_MAX_RANGES];
            int n = pp_stage_ranges(&m->layout, &pp->layout, g, ranges);
            for (int k = g == pp->layout.stages - 1 ? 1 : 0; k < n; k++) {
                float *at = m->params + ranges[k].lo;
                size_t len = (size_t)(ranges[k].hi - ranges[k].lo);
                CommRequest q = pp->rank == 0 ? comm_recv_start(pp->pipe, at, len, COMM_F32, r, PP_TAG_GATHER)
                                              : comm_send_start(pp->pipe, at, len, COMM_F32, 0, PP_TAG_GATHER);
                comm_wait(&q);
            }
        }
    }
}

#endif  // LLMC_PIPELINE_CPU_H
