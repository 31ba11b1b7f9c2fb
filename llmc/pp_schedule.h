// pp_schedule.h: pipeline-parallel schedules as data. A schedule is, for each
// pipeline rank, a plain list of actions (forward F, input-gradient backward B,
// weight-gradient backward W, and the point-to-point SEND/RECV of activations
// and their gradients), made by one function per schedule; a runtime only
// executes lists. Here also: the checker of a list's invariants, a simulator
// that runs the lists with given F/B/W/transfer times under blocking-send
// semantics, the closed forms the simulated bubble and memory must meet, and
// the timeline --print-schedule shows.
//
// Stages: p ranks hold v chunks each, S = p * v stages in all; chunk c of rank
// r is stage g = c * p + r (Megatron's interleaving; v = 1 is the plain
// pipeline). Stage 0 holds the embeddings, stage S - 1 the classifier and loss.
// The activation of micro-batch mb goes from stage g to g + 1 (SEND_F on g,
// RECV_F on g + 1), its gradient from g + 1 back to g (SEND_B, RECV_B): each
// message is one (B, T, C) tensor, so a matched pair always has one size.
//
// Communication placement (all schedules): a SEND comes right after the
// compute that produces it; a RECV is posted with the communication that
// follows the rank's previous action of its kind (F for RECV_F, B for RECV_B;
// the list's start for the first), so one receive per direction is
// outstanding, as Megatron's fused send-and-receive calls keep it. Consecutive
// SEND/RECV actions form one group, posted together (isend/irecv, or one
// ncclGroupStart/End). The schedules that do not split the backward (gpipe,
// 1f1b, interleaved) run B and W back to back as one backward and send the
// gradient after both; zb1p sends it after B, so W fills the bubble.
//
// Schedules (m micro-batches, unit F = B = W times, free transfers):
//   gpipe:       all forwards, then all backwards (in the same order, so the
//                gradients accumulate as one process adds them).
//                bubble (p-1)/(m+p-1); m activations alive on every stage.
//   1f1b:        p-1-r warm-up forwards, then one forward one backward.
//                bubble (p-1)/(m+p-1); p-r alive on rank r (at most m).
//   interleaved: Megatron's interleaved 1F1B over v chunks; needs m % p == 0.
//                bubble (p-1)/(v*m+p-1) (1f1b's idle time divided by v);
//                min(2(p-1-r) + (v-1)p + 1, v*m) chunk activations alive.
//   zb1p:        zero-bubble ZB-H1 (split backward): list-scheduled on unit
//                times with 1f1b's p-r micro-batches between F and B (the full
//                activations) and up to p-1 W's deferred into what 1f1b leaves
//                idle; bubble (p-1)/(3m+p-1) for m >= p, 1f1b's idle time (p-1)(F+B+W)
//                cut to (p-1)(F+B-W), a third; min(2p-1-r, m) micro-batches
//                hold W's inputs (layer inputs and output gradients) at once.
#ifndef LLMC_PP_SCHEDULE_H
#define LLMC_PP_SCHEDULE_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "utils.h"  // defines: CHECK, mallocCheck, callocCheck

typedef enum { PP_F, PP_B, PP_W, PP_SEND_F, PP_RECV_F, PP_SEND_B, PP_RECV_B } PPOp;
typedef enum { PP_GPIPE, PP_1F1B, PP_INTERLEAVED, PP_ZB1P } PPKind;

static const char *const pp_op_names[] = {"F", "B", "W", "SEND_F", "RECV_F", "SEND_B", "RECV_B"};
static const char *const pp_kind_names[] = {"gpipe", "1f1b", "interleaved", "zb1p"};
#define PP_KIND_COUNT 4

typedef struct {
    int8_t op;     // PPOp
    int8_t chunk;  // this rank's chunk (0..v-1)
    int16_t peer;  // SEND/RECV: the other rank; -1 for compute
    int32_t mb;    // micro-batch
} PPAction;

typedef struct {
    PPKind kind;
    int p, v, m;     // pipeline ranks, chunks per rank, micro-batches per step
    int fused;       // 1: receives fused into the group before their consumer (pp_schedule_fuse_receives)
    int *begin;      // (p + 1): rank r's actions are acts[begin[r] .. begin[r+1])
    PPAction *acts;  // (begin[p])
} PPSchedule;

static inline int pp_is_comm(int op) { return op >= PP_SEND_F; }
static inline int pp_stage_of(int p, int rank, int chunk) { return chunk * p + rank; }

// PP_KIND_COUNT if name is not a schedule
static inline int pp_kind_from_name(const char *name) {
    for (int k = 0; k < PP_KIND_COUNT; k++)
        if (strcmp(name, pp_kind_names[k]) == 0) return k;
    return PP_KIND_COUNT;
}

// NULL if (kind, p, v, m) is a schedule the builder can make, else why not.
static inline const char *pp_schedule_unusable(PPKind kind, int p, int v, int m) {
    if (p < 1 || v < 1 || m < 1) return "stages, chunks and micro-batches must each be at least 1";
    if (p > 32767 || v > 127 || (int64_t)m * v > 1 << 24) return "too many stages, chunks or micro-batches";
    if (kind == PP_INTERLEAVED) {
        if (p < 2 || v < 2) return "the interleaved schedule needs --pp 2 or more and --virtual-stages 2 or more";
        if (m % p != 0) return "the interleaved schedule needs the micro-batch count to be a multiple of --pp";
    } else if (v != 1) {
        return "--virtual-stages above 1 needs --pp-schedule interleaved";
    }
    return NULL;
}

// ---------------------------------------------------------------------------
// Building: each schedule gives every rank its order of compute actions; the
// shared pp_emit adds the communication around them.

typedef struct {
    PPSchedule *s;
    int cap, rank;
    int64_t n;  // actions so far (all ranks)
} PPBuilder;

static inline void pp_push(PPBuilder *b, int op, int chunk, int mb, int peer) {
    if (b->n == b->cap) {
        b->cap = b->cap ? 2 * b->cap : 256;
        b->s->acts = (PPAction *)realloc(b->s->acts, (size_t)b->cap * sizeof(PPAction));
        CHECK(b->s->acts, "out of memory for a pipeline schedule");
    }
    b->s->acts[b->n++] = (PPAction){(int8_t)op, (int8_t)chunk, (int16_t)peer, mb};
}

// One compute action of the current rank with the communication it needs:
// RECV before (F not on stage 0, B not on the last stage), SEND after (F not on
// the last stage; the gradient after B when split, after W when not).
static inline void pp_emit(PPBuilder *b, int op, int chunk, int mb, int split_backward) {
    const PPSchedule *s = b->s;
    int p = s->p, last = p * s->v - 1, g = pp_stage_of(p, b->rank, chunk);
    int next_rank = (g + 1) % p, prev_rank = (g - 1 + p) % p;
    if ((op == PP_F && g > 0) || (op == PP_B && g < last)) {
        // the receive, posted with the communication that follows the rank's
        // previous action of the same kind (one receive outstanding per direction)
        int64_t at = b->n, first = b->s->begin[b->rank];
        while (at > first && b->s->acts[at - 1].op != op) at--;
        if (at > first)
            while (at < b->n && pp_is_comm(b->s->acts[at].op)) at++;
        pp_push(b, 0, 0, 0, 0);
        memmove(&b->s->acts[at + 1], &b->s->acts[at], (size_t)(b->n - 1 - at) * sizeof(PPAction));
        b->s->acts[at] = (PPAction){(int8_t)(op == PP_F ? PP_RECV_F : PP_RECV_B), (int8_t)chunk,
                                    (int16_t)(op == PP_F ? prev_rank : next_rank), mb};
    }
    pp_push(b, op, chunk, mb, -1);
    if (op == PP_F && g < last) pp_push(b, PP_SEND_F, chunk, mb, next_rank);
    if (op == (split_backward ? PP_B : PP_W) && g > 0) pp_push(b, PP_SEND_B, chunk, mb, prev_rank);
}

static inline void pp_emit_backward(PPBuilder *b, int chunk, int mb) {
    pp_emit(b, PP_B, chunk, mb, 0);
    pp_emit(b, PP_W, chunk, mb, 0);
}

static inline void pp_build_gpipe(PPBuilder *b) {
    for (int mb = 0; mb < b->s->m; mb++) pp_emit(b, PP_F, 0, mb, 0);
    for (int mb = 0; mb < b->s->m; mb++) pp_emit_backward(b, 0, mb);
}

static inline void pp_build_1f1b(PPBuilder *b) {
    int m = b->s->m, warmup = b->s->p - 1 - b->rank;
    if (warmup > m) warmup = m;
    for (int i = 0; i < warmup; i++) pp_emit(b, PP_F, 0, i, 0);
    for (int i = 0; i < m - warmup; i++) {
        pp_emit(b, PP_F, 0, warmup + i, 0);
        pp_emit_backward(b, 0, i);
    }
    for (int i = m - warmup; i < m; i++) pp_emit_backward(b, 0, i);
}

// Megatron's interleaved order: virtual step k runs chunk (k / p) % v forward
// (v - 1 minus that backward) on micro-batch (k / (p v)) p + k % p.
static inline void pp_build_interleaved(PPBuilder *b) {
    int p = b->s->p, v = b->s->v, total = b->s->m * v;
    int warmup = 2 * (p - 1 - b->rank) + (v - 1) * p;
    if (warmup > total) warmup = total;
#define PP_VMB(k) (((k) / (p * v)) * p + (k) % p)
#define PP_VCHUNK(k) (((k) / p) % v)
    for (int k = 0; k < warmup; k++) pp_emit(b, PP_F, PP_VCHUNK(k), PP_VMB(k), 0);
    for (int i = 0; i < total - warmup; i++) {
        int k = warmup + i;
        pp_emit(b, PP_F, PP_VCHUNK(k), PP_VMB(k), 0);
        pp_emit_backward(b, v - 1 - PP_VCHUNK(i), PP_VMB(i));
    }
    for (int i = total - warmup; i < total; i++) pp_emit_backward(b, v - 1 - PP_VCHUNK(i), PP_VMB(i));
#undef PP_VMB
#undef PP_VCHUNK
}

// ZB-H1 by list scheduling on unit times: each stage, whenever free, runs its
// oldest pending W if p - 1 are pending, else the next B whose gradient has
// arrived, else the next F whose input has arrived if fewer than min(p - s, m)
// micro-batches are between F and B (1f1b's in-flight count), else its oldest
// pending W. Every stage's order is recorded, then emitted.
static inline void pp_build_zb1p(PPBuilder *b) {
    int p = b->s->p, m = b->s->m;
    int64_t *f_end = (int64_t *)mallocCheck(2 * (size_t)p * m * sizeof(int64_t)), *b_end = f_end + (size_t)p * m;
    int *order = (int *)mallocCheck((size_t)p * 3 * m * sizeof(int));  // per stage: op * m + mb
    int *nf = (int *)callocCheck(4 * (size_t)p, sizeof(int)), *nb = nf + p, *nw = nb + p, *len = nw + p;
    int64_t *free_at = (int64_t *)callocCheck((size_t)p, sizeof(int64_t));
    for (size_t i = 0; i < 2 * (size_t)p * m; i++) f_end[i] = INT64_MAX;  // not yet run
    for (int64_t t = 0, left = (int64_t)3 * p * m; left > 0; t++) {
        for (int s = 0; s < p; s++) {
            if (free_at[s] > t) continue;
            int in_flight = p - s < m ? p - s : m, op = -1, mb = 0;
            if (nb[s] - nw[s] > p - 1)
                op = PP_W, mb = nw[s]++;
            else if (nb[s] < nf[s] && (s == p - 1 ? f_end[(size_t)s * m + nb[s]] : b_end[(size_t)(s + 1) * m + nb[s]]) <= t)
                op = PP_B, mb = nb[s]++;
            else if (nf[s] < m && nf[s] - nb[s] < in_flight && (s == 0 || f_end[(size_t)(s - 1) * m + nf[s]] <= t))
                op = PP_F, mb = nf[s]++;
            else if (nw[s] < nb[s])
                op = PP_W, mb = nw[s]++;
            if (op < 0) continue;
            if (op == PP_F) f_end[(size_t)s * m + mb] = t + 1;
            if (op == PP_B) b_end[(size_t)s * m + mb] = t + 1;
            order[(size_t)s * 3 * m + len[s]++] = op * m + mb;
            free_at[s] = t + 1;
            left--;
        }
        CHECK(t < (int64_t)6 * p * m + 6 * p, "zb1p list scheduling made no progress (p %d, m %d)", p, m);
    }
    for (int i = 0; i < 3 * m; i++) {
        int x = order[(size_t)b->rank * 3 * m + i];
        pp_emit(b, x / m, 0, x % m, 1);
    }
    free(free_at);
    free(nf);
    free(order);
    free(f_end);
}

static inline void pp_schedule_free(PPSchedule *s) {
    free(s->begin);
    free(s->acts);
    memset(s, 0, sizeof(*s));
}

// The lists of every rank. Arguments pp_schedule_unusable accepts.
static inline void pp_schedule_build(PPSchedule *s, PPKind kind, int p, int v, int m) {
    const char *why = pp_schedule_unusable(kind, p, v, m);
    CHECK(!why, "pipeline schedule %s with %d stages, %d chunks, %d micro-batches: %s", pp_kind_names[kind], p, v,
          m, why);
    memset(s, 0, sizeof(*s));
    s->kind = kind;
    s->p = p, s->v = v, s->m = m;
    s->begin = (int *)mallocCheck((size_t)(p + 1) * sizeof(int));
    PPBuilder b = {s, 0, 0, 0};
    for (int r = 0; r < p; r++) {
        s->begin[r] = (int)b.n;
        b.rank = r;
        if (kind == PP_GPIPE) pp_build_gpipe(&b);
        if (kind == PP_1F1B) pp_build_1f1b(&b);
        if (kind == PP_INTERLEAVED) pp_build_interleaved(&b);
        if (kind == PP_ZB1P) pp_build_zb1p(&b);
    }
    s->begin[p] = (int)b.n;
}

// Receives fused for a backend whose point-to-point calls run in order on one
// stream and complete only together with their partners (NCCL: a receive
// left posted would hold up every later send of the rank, so the lists'
// early receives could deadlock): each RECV moves from where it is posted to
// the end of the communication right before the F or B that consumes it (a
// group of its own when a compute action comes first), so the sends of the
// compute before and the receive of the compute after go as one group, the
// fused send-and-receive calls of Megatron's schedules. The simulator then
// completes a group only when every operation in it has its partner posted.
static inline void pp_schedule_fuse_receives(PPSchedule *s) {
    int n = s->begin[s->p];
    PPAction *out = (PPAction *)mallocCheck(sizeof(PPAction) * (size_t)(n ? n : 1));
    size_t cells = (size_t)s->v * s->m;
    int *recv_at = (int *)mallocCheck(2 * cells * sizeof(int));  // (kind, chunk, mb): its RECV in acts
    for (int r = 0, k = 0; r < s->p; r++) {
        for (size_t i = 0; i < 2 * cells; i++) recv_at[i] = -1;
        for (int i = s->begin[r]; i < s->begin[r + 1]; i++) {
            const PPAction *a = &s->acts[i];
            if (a->op == PP_RECV_F || a->op == PP_RECV_B)
                recv_at[(a->op == PP_RECV_B) * cells + (size_t)a->chunk * s->m + a->mb] = i;
        }
        for (int i = s->begin[r]; i < s->begin[r + 1]; i++) {
            const PPAction *a = &s->acts[i];
            if (a->op == PP_RECV_F || a->op == PP_RECV_B) continue;
            if (a->op == PP_F || a->op == PP_B) {
                int at = recv_at[(a->op == PP_B) * cells + (size_t)a->chunk * s->m + a->mb];
                if (at >= 0) out[k++] = s->acts[at];
            }
            out[k++] = *a;
        }
    }
    memcpy(s->acts, out, sizeof(PPAction) * (size_t)n);
    free(out);
    free(recv_at);
    s->fused = 1;
}

// The lists with the receives a backend needs (fuse: pp_schedule_fuse_receives', for NCCL).
static inline void pp_schedule_lists(PPSchedule *s, PPKind kind, int p, int v, int m, int fuse) {
    pp_schedule_build(s, kind, p, v, m);
    if (fuse) pp_schedule_fuse_receives(s);
}

// ---------------------------------------------------------------------------
// Activation sets: the memory a rank's list holds, as the runtime
// (pipeline.h) holds it. A set is one micro-batch's activations of one chunk;
// it is taken at the first action on its (chunk, micro-batch) (the receive of
// its input, or F on stage 0) and given back once its W is done and its
// gradient sent (at the end of the communication group with its SEND_B; stage
// 0 sends none); the chunk's next micro-batch takes the lowest free set of the
// same chunk (a set is laid out for its chunk's layers and ends). set_of
// (rank r's begin[r + 1] - begin[r] actions, may be NULL): the set each action
// uses, numbered within its chunk; sets (v): how many each chunk has, the most
// it holds at once. Both trainers allocate exactly these, and their memory
// lines, checks and the planner count them.
static inline void pp_rank_sets(const PPSchedule *s, int rank, int *set_of, int *sets) {
    int v = s->v, m = s->m, begin = s->begin[rank], end = s->begin[rank + 1];
    size_t cells = (size_t)v * m;
    // per (chunk, mb): its set (-1: none yet), whether W is done and its gradient sent (stage 0: nothing to
    // send), whether it gave its set back; per (chunk, set): taken
    int *held = (int *)mallocCheck(cells * sizeof(int));
    unsigned char *w_done = (unsigned char *)callocCheck(4 * cells, 1), *sent = w_done + cells,
                  *given = sent + cells, *taken = given + cells;
    for (size_t k = 0; k < cells; k++) held[k] = -1;
    for (int c = 0; c < v; c++) {
        sets[c] = 0;
        if (pp_stage_of(s->p, rank, c) == 0) memset(sent + (size_t)c * m, 1, (size_t)m);
    }
    for (int i = begin; i < end;) {
        int group_end = i + 1;  // a communication group, or one compute action
        if (pp_is_comm(s->acts[i].op))
            while (group_end < end && pp_is_comm(s->acts[group_end].op)) group_end++;
        for (int j = i; j < group_end; j++) {
            const PPAction *a = &s->acts[j];
            size_t k = (size_t)a->chunk * m + a->mb;
            if (held[k] < 0) {  // the lowest free set of the chunk
                int x = 0;
                while (taken[(size_t)a->chunk * m + x]) x++;
                taken[(size_t)a->chunk * m + x] = 1, held[k] = x;
                if (x + 1 > sets[a->chunk]) sets[a->chunk] = x + 1;
            }
            if (set_of) set_of[j - begin] = held[k];
            if (a->op == PP_W) w_done[k] = 1;
            if (a->op == PP_SEND_B) sent[k] = 1;  // (at the group's end, below: its sends are done there)
        }
        for (int j = i; j < group_end; j++) {
            size_t k = (size_t)s->acts[j].chunk * m + s->acts[j].mb;
            if (w_done[k] && sent[k] && !given[k]) given[k] = 1, taken[(size_t)s->acts[j].chunk * m + held[k]] = 0;
        }
        i = group_end;
    }
    free(w_done);
    free(held);
}

// sets (v) as the trainers print them: "4+2".
static inline void pp_sets_format(const int *sets, int v, char *out, size_t len) {
    size_t at = 0;
    out[0] = '\0';
    for (int c = 0; c < v && at < len; c++) at += (size_t)snprintf(out + at, len - at, c ? "+%d" : "%d", sets[c]);
}

// ---------------------------------------------------------------------------
// Checking: 0 if every rank's list runs each (micro-batch, chunk) through F,
// then B, then W exactly once, receives its input before F and its gradient
// before B, sends what the next stage needs after producing it, and every send
// has exactly one matching receive on the peer; else 1, with why in err.
// match (begin[p] entries, may be NULL): for each SEND/RECV the index of its
// partner; -1 for compute.

static inline int pp_schedule_check(const PPSchedule *s, int *match, char *err, size_t errlen) {
    int p = s->p, v = s->v, m = s->m, S = p * v, bad = 0;
    size_t cells = (size_t)S * m;
    // per (stage, mb): position in its rank's list of each op, -1 if absent
    int *pos = (int *)mallocCheck(7 * cells * sizeof(int));
    for (size_t i = 0; i < 7 * cells; i++) pos[i] = -1;
#define PP_FAIL(...) do { if (!bad) snprintf(err, errlen, __VA_ARGS__); bad = 1; } while (0)
    for (int r = 0; r < p; r++) {
        for (int i = s->begin[r]; i < s->begin[r + 1]; i++) {
            const PPAction *a = &s->acts[i];
            if (a->op < PP_F || a->op > PP_RECV_B || a->chunk < 0 || a->chunk >= v || a->mb < 0 || a->mb >= m) {
                PP_FAIL("rank %d action %d: bad op, chunk or micro-batch", r, i - s->begin[r]);
                continue;
            }
            int *slot = &pos[(size_t)a->op * cells + (size_t)pp_stage_of(p, r, a->chunk) * m + a->mb];
            if (*slot >= 0) PP_FAIL("rank %d: %s of micro-batch %d chunk %d twice", r, pp_op_names[a->op], a->mb, a->chunk);
            *slot = i;
        }
    }
    for (int g = 0; g < S && !bad; g++) {
        int r = g % p, c = g / p;
        for (int mb = 0; mb < m && !bad; mb++) {
            int at[7];
            for (int op = 0; op < 7; op++) at[op] = pos[(size_t)op * cells + (size_t)g * m + mb];
            int need[7] = {1, 1, 1, g < S - 1, g > 0, g > 0, g < S - 1};
            for (int op = 0; op < 7; op++)
                if ((at[op] >= 0) != need[op])
                    PP_FAIL("rank %d: %s of micro-batch %d chunk %d %s", r, pp_op_names[op], mb, c,
                            need[op] ? "missing" : "where none belongs");
            if (bad) break;
            if (!(at[PP_F] < at[PP_B] && at[PP_B] < at[PP_W]))
                PP_FAIL("rank %d: micro-batch %d chunk %d does not run F, B, W in order", r, mb, c);
            if (g > 0 && !(at[PP_RECV_F] < at[PP_F] && at[PP_SEND_B] > at[PP_B]))
                PP_FAIL("rank %d: micro-batch %d chunk %d receives its input after F or sends its gradient before B", r,
                        mb, c);
            if (g < S - 1 && !(at[PP_SEND_F] > at[PP_F] && at[PP_RECV_B] < at[PP_B]))
                PP_FAIL("rank %d: micro-batch %d chunk %d sends its output before F or receives its gradient after B",
                        r, mb, c);
            // the partners: SEND_F on g with RECV_F on g + 1, SEND_B on g with RECV_B on g - 1
            int pairs[2][2] = {{PP_SEND_F, g + 1}, {PP_SEND_B, g - 1}};
            for (int k = 0; k < 2 && !bad; k++) {
                int send = at[pairs[k][0]], h = pairs[k][1];
                if (send < 0) continue;
                int recv = pos[(size_t)(pairs[k][0] + 1) * cells + (size_t)h * m + mb];
                if (s->acts[send].peer != h % p || recv < 0 || s->acts[recv].peer != r)
                    PP_FAIL("rank %d: %s of micro-batch %d chunk %d has no matching receive on rank %d", r,
                            pp_op_names[pairs[k][0]], mb, c, h % p);
                else if (match)
                    match[send] = recv, match[recv] = send;
            }
        }
    }
    if (match)
        for (int i = 0; i < s->begin[p]; i++)
            if (!pp_is_comm(s->acts[i].op)) match[i] = -1;
    // fused lists go to a backend that pairs a rank's sends to a peer with the
    // peer's receives from it in the order both post them: the same order
    if (match && s->fused && !bad) {
        int *last_to = (int *)mallocCheck(sizeof(int) * (size_t)p);  // per peer: its last matched receive
        for (int r = 0; r < p && !bad; r++) {
            for (int x = 0; x < p; x++) last_to[x] = -1;
            for (int i = s->begin[r]; i < s->begin[r + 1] && !bad; i++) {
                const PPAction *a = &s->acts[i];
                if (a->op != PP_SEND_F && a->op != PP_SEND_B) continue;
                if (match[i] <= last_to[a->peer])
                    PP_FAIL("rank %d: %s of micro-batch %d chunk %d reaches rank %d out of the order of its receives",
                            r, pp_op_names[a->op], a->mb, a->chunk, a->peer);
                last_to[a->peer] = match[i];
            }
        }
        free(last_to);
    }
#undef PP_FAIL
    free(pos);
    return bad;
}

// ---------------------------------------------------------------------------
// Simulation: every rank runs its list; a compute action takes its time; a
// communication group is posted when the rank reaches it: its receives are
// posted and do not block (irecv; the F or B that consumes one waits for its
// data), its sends block the rank until the matching receive is posted and the
// data has gone (rendezvous, the most a send can wait: a list that runs here
// runs under any buffering). In fused lists (pp_schedule_fuse_receives) a
// group's receives block it too. A message arrives at max(both posts) + xfer.

typedef struct { double f, b, w, xfer; } PPTimes;  // seconds (or units) per action on one chunk

typedef struct {
    int deadlock;         // 1: no rank could go on; stuck_rank's next action is stuck_action
    int stuck_rank, stuck_action;
    double span;          // the step: when the last rank finishes
    double bubble;        // 1 - busy time over p * span
    double *busy, *idle;  // (p): compute time, and span minus it
    int *peak_alive;      // (p): most (micro-batch, chunk) activations held at once (F done, W not)
    int *peak_in_flight;  // (p): most between F and B (the full activations; W needs only its inputs)
    double *start, *end;  // (begin[p]): each action's times (NULL unless asked for)
} PPSim;

static inline void pp_sim_free(PPSim *r) {
    free(r->busy);
    free(r->peak_alive);
    free(r->peak_in_flight);
    free(r->start);
    memset(r, 0, sizeof(*r));
}

// 0 if the lists check (pp_schedule_check) and run to the end, else 1 with why
// in err. times: one PPTimes for every rank, or (per_rank) one per rank (the
// transfer time is times[0]'s).
static inline int pp_simulate_ranks(const PPSchedule *s, const PPTimes *times, int per_rank, int keep_times,
                                    PPSim *out, char *err, size_t errlen) {
    int p = s->p, n = s->begin[p], cells = s->v * s->m;
    size_t n1 = (size_t)(n ? n : 1);
    memset(out, 0, sizeof(*out));
    int *match = (int *)mallocCheck(2 * n1 * sizeof(int)), *recv_of = match + n1;
    if (pp_schedule_check(s, match, err, errlen)) {
        free(match);
        return 1;
    }
    // recv_of[i]: for an F or B, the receive it consumes (-1: none)
    int *last_recv = (int *)mallocCheck(2 * (size_t)cells * sizeof(int));
    for (int r = 0; r < p; r++) {
        for (int k = 0; k < 2 * cells; k++) last_recv[k] = -1;
        for (int i = s->begin[r]; i < s->begin[r + 1]; i++) {
            const PPAction *a = &s->acts[i];
            int slot = a->chunk * s->m + a->mb;
            if (a->op == PP_RECV_F || a->op == PP_RECV_B) last_recv[(a->op == PP_RECV_B) * cells + slot] = i;
            recv_of[i] = a->op == PP_F || a->op == PP_B ? last_recv[(a->op == PP_B) * cells + slot] : -1;
        }
    }
    free(last_recv);
    out->busy = (double *)callocCheck(2 * (size_t)p, sizeof(double));
    out->idle = out->busy + p;
    out->peak_alive = (int *)callocCheck((size_t)p, sizeof(int));
    out->peak_in_flight = (int *)callocCheck((size_t)p, sizeof(int));
    if (keep_times) {
        out->start = (double *)callocCheck(2 * n1, sizeof(double));
        out->end = out->start + n1;
    }
    double *post = (double *)mallocCheck(n1 * sizeof(double)), *clock = (double *)callocCheck(p, sizeof(double));
    int *at = (int *)mallocCheck((size_t)p * 3 * sizeof(int)), *alive = at + p, *in_flight = alive + p;
    for (int i = 0; i < n; i++) post[i] = -1;
    for (int r = 0; r < p; r++) at[r] = s->begin[r], alive[r] = 0, in_flight[r] = 0;
#define PP_ARRIVAL(i) (fmax(post[i], post[match[i]]) + times[0].xfer)  // once both are posted
    for (int progress = 1; progress;) {
        progress = 0;
        for (int r = 0; r < p; r++) {
            while (at[r] < s->begin[r + 1]) {
                const PPAction *a = &s->acts[at[r]];
                int i = at[r];
                if (!pp_is_comm(a->op)) {
                    const PPTimes *t = &times[per_rank ? r : 0];
                    double begin = clock[r], d = a->op == PP_F ? t->f : a->op == PP_B ? t->b : t->w;
                    if (recv_of[i] >= 0) {
                        if (post[match[recv_of[i]]] < 0) break;  // its data has not been sent
                        begin = fmax(begin, PP_ARRIVAL(recv_of[i]));
                    }
                    if (keep_times) out->start[i] = begin, out->end[i] = begin + d;
                    clock[r] = begin + d;
                    out->busy[r] += d;
                    alive[r] += a->op == PP_F ? 1 : a->op == PP_W ? -1 : 0;
                    in_flight[r] += a->op == PP_F ? 1 : a->op == PP_B ? -1 : 0;
                    if (alive[r] > out->peak_alive[r]) out->peak_alive[r] = alive[r];
                    if (in_flight[r] > out->peak_in_flight[r]) out->peak_in_flight[r] = in_flight[r];
                    at[r]++, progress = 1;
                    continue;
                }
                int group_end = i, ready = 1;
                while (group_end < s->begin[r + 1] && pp_is_comm(s->acts[group_end].op)) group_end++;
                double done = clock[r];
                for (int k = i; k < group_end; k++) {
                    if (post[k] < 0) post[k] = clock[r], progress = 1;
                    if (s->acts[k].op != PP_SEND_F && s->acts[k].op != PP_SEND_B && !s->fused) continue;
                    if (post[match[k]] < 0) ready = 0;
                    else done = fmax(done, PP_ARRIVAL(k));
                }
                if (!ready) break;
                for (int k = i; k < group_end && keep_times; k++) out->start[k] = post[k], out->end[k] = done;
                clock[r] = done;
                at[r] = group_end, progress = 1;
            }
        }
    }
#undef PP_ARRIVAL
    for (int r = 0; r < p; r++) {
        if (at[r] < s->begin[r + 1] && !out->deadlock) {
            out->deadlock = 1, out->stuck_rank = r, out->stuck_action = at[r] - s->begin[r];
            const PPAction *a = &s->acts[at[r]];
            snprintf(err, errlen, "deadlock: rank %d waits at action %d (%s of micro-batch %d chunk %d)", r,
                     out->stuck_action, pp_op_names[a->op], a->mb, a->chunk);
        }
        if (clock[r] > out->span) out->span = clock[r];
    }
    double busy = 0;
    for (int r = 0; r < p; r++) busy += out->busy[r], out->idle[r] = out->span - out->busy[r];
    out->bubble = out->span > 0 ? 1.0 - busy / (p * out->span) : 0.0;
    free(at);
    free(clock);
    free(post);
    free(match);
    return out->deadlock;
}

static inline int pp_simulate(const PPSchedule *s, PPTimes t, int keep_times, PPSim *out, char *err, size_t errlen) {
    return pp_simulate_ranks(s, &t, 0, keep_times, out, err, errlen);
}

// Whether (kind, p, v, m)'s lists with fused receives (NCCL's) deadlock, as
// the simulator runs them: 1 with why in err (the GPU trainer refuses such a
// pipeline over NCCL, and the planner does not offer it), else 0.
static inline int pp_fused_lists_deadlock(PPKind kind, int p, int v, int m, char *err, size_t errlen) {
    PPSchedule s;
    pp_schedule_lists(&s, kind, p, v, m, 1);
    PPSim sim;
    int dead = pp_simulate(&s, (PPTimes){1, 1, 1, 0}, 0, &sim, err, errlen);
    pp_sim_free(&sim);
    pp_schedule_free(&s);
    return dead;
}

// ---------------------------------------------------------------------------
// Theory (unit F = B = W, free transfers): the bubble and each rank's peak of
// live activations the schedules above are built to meet.

static inline double pp_bubble_theory(PPKind kind, int p, int v, int m) {
    switch (kind) {
    case PP_GPIPE:
    case PP_1F1B: return (double)(p - 1) / (m + p - 1);
    case PP_INTERLEAVED: return (double)(p - 1) / ((double)v * m + p - 1);
    case PP_ZB1P: return (double)(p - 1) / (3.0 * m + p - 1);  // m >= p: idle (p-1)(F+B-W) against 3m busy
    }
    return 0;
}

static inline int pp_peak_alive_theory(PPKind kind, int p, int v, int m, int rank) {
    int x = m * v;
    if (kind == PP_1F1B) x = p - rank;
    if (kind == PP_ZB1P) x = 2 * p - 1 - rank;  // p - rank in flight and up to p - 1 W's pending
    if (kind == PP_INTERLEAVED) x = 2 * (p - 1 - rank) + (v - 1) * p + 1;
    return x < m * v ? x : m * v;
}

// between F and B: as many as alive, but zb1p's are 1f1b's (W's pending hold less)
static inline int pp_peak_in_flight_theory(PPKind kind, int p, int v, int m, int rank) {
    return pp_peak_alive_theory(kind == PP_ZB1P ? PP_1F1B : kind, p, v, m, rank);
}

// An action as --print-schedule lists it and --pp-trace records it: " F3.0"
// (op, micro-batch, chunk).
static inline void pp_fprint_action(FILE *out, const PPAction *a) {
    fprintf(out, " %s%d.%d", pp_op_names[a->op], a->mb, a->chunk);
}

// ---------------------------------------------------------------------------
// --print-schedule: each rank's list simulated on unit times as one row of
// cells (F3: forward of micro-batch 3; f3/b3/w3 on odd chunks of interleaved;
// '.' idle), with the simulated and theoretical bubble, then each rank's list.

static inline void pp_print_schedule(FILE *out, const PPSchedule *s) {
    PPSim sim;
    char err[256];
    if (pp_simulate(s, (PPTimes){1, 1, 1, 0}, 1, &sim, err, sizeof err)) {
        fprintf(out, "pipeline schedule %s: %s\n", pp_kind_names[s->kind], err);
        pp_sim_free(&sim);
        return;
    }
    int slots = (int)(sim.span + 0.5), width = 2;
    for (int x = s->m - 1; x >= 10; x /= 10) width++;
    fprintf(out, "pipeline schedule %s: %d ranks x %d chunk%s, %d micro-batches, %d time units (F = B = W = 1)\n",
            pp_kind_names[s->kind], s->p, s->v, s->v > 1 ? "s" : "", s->m, slots);
    char *row = (char *)mallocCheck((size_t)slots * (width + 1) + 1);
    for (int r = 0; r < s->p; r++) {
        for (int k = 0; k < slots; k++) snprintf(row + (size_t)k * (width + 1), width + 2, "%-*s ", width, ".");
        for (int i = s->begin[r]; i < s->begin[r + 1]; i++) {
            const PPAction *a = &s->acts[i];
            if (pp_is_comm(a->op)) continue;
            char cell[16];
            snprintf(cell, sizeof cell, "%c%d", "FBWfbw"[a->op + 3 * (a->chunk % 2)], a->mb);
            int k = (int)(sim.start[i] + 0.5);
            memcpy(row + (size_t)k * (width + 1), cell, strlen(cell));
        }
        fprintf(out, "  rank %-3d %s\n", r, row);
    }
    fprintf(out, "  bubble %.4f (theory %.4f); peak activations per rank:", sim.bubble,
            pp_bubble_theory(s->kind, s->p, s->v, s->m));
    for (int r = 0; r < s->p; r++) fprintf(out, " %d", sim.peak_alive[r]);
    fprintf(out, "\n");
    for (int r = 0; r < s->p; r++) {
        fprintf(out, "  actions rank %d:", r);
        for (int i = s->begin[r]; i < s->begin[r + 1]; i++) pp_fprint_action(out, &s->acts[i]);
        fprintf(out, "\n");
    }
    free(row);
    pp_sim_free(&sim);
}

#endif  // LLMC_PP_SCHEDULE_H
