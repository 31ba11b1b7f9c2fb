// context_parallel.h: context parallelism on the CPU trainer (--cp N). The
// ranks of a context group each hold T/cp positions of every sequence, load-
// balanced for causal attention: the sequence is cut into 2 x cp chunks of
// Tc = T/(2cp) positions and rank i holds chunks i and 2cp-1-i, in that order
// (its local position t is the global position cp_global_pos(t)). Every layer
// but attention works on the rank's rows alone; the tokens, targets, position
// embeddings and loss follow the same order (cp_slice_tokens, cp_local_wpe).
//
// Attention all-gathers K and V over the group before it (as Llama 3's
// training did: simple and exact): each rank keeps every position's K and V
// for each layer until the backward, B x T x 2C/tp floats a layer, and the
// softmax probabilities of its queries against them, B x NH/tp x T/cp x T a
// layer (one process: B x NH x T x T), in the micro-batch's activations
// (CPActs, made at a layer's first use; the layers that recompute their
// attention under --recompute share one slot, gathered again before their
// backward). The backward computes dK and dV of
// every position from the rank's queries and reduce-scatters them back to
// the positions' owners. Causal masking uses the global positions.
//
// The gradients are then those of the rank's positions only: the trainer
// sums them over the replica group (data x context, comm.h), as over data
// ranks, and the loss of each rank is the mean over its positions (equal
// counts: their mean over the group is the batch's).
#ifndef LLMC_CONTEXT_PARALLEL_H
#define LLMC_CONTEXT_PARALLEL_H

#include <math.h>
#include <string.h>

#include "comm.h"                  // defines: CommGroup, comm_all_gather_start, comm_reduce_scatter_start, comm_wait
#include "cpu_layers.h"            // defines: attention_head_forward, attention_head_backward, attention_work_floats
#include "gpt_activation_sizes.h"  // defines: cp_layer_act_floats
#include "utils.h"                 // defines: mallocCheck, alignedMallocCheck, omp_threads, omp_thread_id, wall_seconds, process_cpu_seconds

// A micro-batch's attention state, per slot (NULL until the slot's first forward): slot l is layer l's,
// slot L the one the layers that recompute their attention (--recompute) share.
typedef struct {
    int L;
    float **kv;          // [L+1] (B,T,2Cl): every position's k | v, in global order (kept for the backward)
    float **att;         // [L+1] (B,NHl,Tl,T): the softmax probabilities of this rank's queries
} CPActs;

typedef struct {
    int size, rank;      // the context group's size and this rank in it (1, 0: no context parallelism)
    CommGroup *group;
    int B, T, Tl, Tc;    // a micro-batch's sequences; positions of a sequence, of this rank (2 chunks), of a chunk
    int L, C, Cl, NHl;   // layers, channels, this rank's channels and heads (tensor parallel: C/tp, NH/tp)
    int seqs;            // capacity of tokens: the sequences of a step (B x micro-batches)
    size_t *counts;      // (size) each rank's piece of a gather or scatter
    float *pieces;       // (B*T*2Cl): the group's k | v (or dk | dv) pieces in rank order
    float *dkv;          // (B,T,2Cl): dk | dv of every position from this rank's queries
    float *scratch;      // threads x Tc x T: the backward's score gradients
    float *wpe, *dwpe;   // (Tl,C): the rank's positions' rows of wpe, and their gradient
    int *tokens;         // (2,seqs,Tl): the rank's inputs and targets of a step
    float *memory;
    // seconds in the attention arithmetic (forward and backward), wall and the process's CPU time (ranks
    // sharing cores wait for each other: the CPU time is the work), and the query-key scores the forward
    // computes (the work itself, which the backward repeats), for the balance report
    double attention_s, attention_cpu_s, attention_scores;
} CPContext;

static inline CPContext cp_none(void) {
    CPContext cp;
    memset(&cp, 0, sizeof(cp));
    cp.size = 1;
    return cp;
}

// The global position of this rank's local position t (t in [0, Tl)).
static inline int cp_global_pos(const CPContext *cp, int t) {
    int chunk = t < cp->Tc ? cp->rank : 2 * cp->size - 1 - cp->rank;
    return chunk * cp->Tc + t % cp->Tc;
}
// The rank holding global position g (g in [0, T)) and its local position there.
static inline void cp_position_owner(const CPContext *cp, int g, int *owner, int *local) {
    int chunk = g / cp->Tc;
    *owner = chunk < cp->size ? chunk : 2 * cp->size - 1 - chunk;
    *local = (chunk < cp->size ? 0 : cp->Tc) + g % cp->Tc;
}
// The global chunk of this rank's local chunk j (0 or 1).
static inline int cp_chunk(const CPContext *cp, int rank, int j) { return j == 0 ? rank : 2 * cp->size - 1 - rank; }

// The positions of micro-batches of B sequences of T positions, `micro` of
// them a step, on a model of L layers, C channels, Cl and NHl of them on this
// rank: the shapes, the counts and the tokens' buffer (the GPU trainer's part,
// context_parallel.cuh; cp_init adds the CPU attention's buffers).
static void cp_positions_init(CPContext *cp, CommGroup *group, int B, int T, int micro, int L, int C, int Cl, int NHl) {
    memset(cp, 0, sizeof(*cp));
    cp->group = group, cp->size = group->size, cp->rank = group->rank;
    cp->B = B, cp->T = T, cp->Tl = T / cp->size, cp->Tc = T / (2 * cp->size), cp->seqs = B * micro;
    cp->L = L, cp->C = C, cp->Cl = Cl, cp->NHl = NHl;
    cp->counts = (size_t *)mallocCheck(sizeof(size_t) * (size_t)cp->size);
    cp->tokens = (int *)mallocCheck(sizeof(int) * 2 * (size_t)cp->seqs * cp->Tl);
}

// cp_positions_init and the CPU attention's buffers.
static void cp_init(CPContext *cp, CommGroup *group, int B, int T, int micro, int L, int C, int Cl, int NHl) {
    cp_positions_init(cp, group, B, T, micro, L, C, Cl, NHl);
    size_t kv = (size_t)B * T * 2 * Cl;
    size_t scratch = (size_t)omp_threads() * cp->Tc * T, wpe = (size_t)cp->Tl * C;
    cp->memory = (float *)alignedMallocCheck(sizeof(float) * (2 * kv + scratch + 2 * wpe));
    float *p = cp->memory;
    cp->pieces = p, p += kv;
    cp->dkv = p, p += kv;
    cp->scratch = p, p += scratch;
    cp->wpe = p, p += wpe;
    cp->dwpe = p;
}

static void cp_free(CPContext *cp) {
    free(cp->counts);
    free(cp->memory);
    free(cp->tokens);
    *cp = cp_none();
}

// A slot's floats in a micro-batch's CPActs: K and V of every position, the probabilities.
static inline size_t cp_layer_floats(const CPContext *cp) {
    return (size_t)cp_layer_act_floats(cp->B, cp->T, cp->size, cp->Cl, cp->NHl);
}

// Slot l's state in *acts (made at its first use; *acts too).
static void cp_acts_layer(const CPContext *cp, CPActs **acts, int l, float **kv, float **att) {
    if (!*acts) {
        *acts = (CPActs *)callocCheck(1, sizeof(CPActs));
        (*acts)->L = cp->L;
        (*acts)->kv = (float **)callocCheck(2 * ((size_t)cp->L + 1), sizeof(float *));
        (*acts)->att = (*acts)->kv + cp->L + 1;
    }
    CPActs *s = *acts;
    if (!s->kv[l]) {
        s->kv[l] = (float *)alignedMallocCheck(sizeof(float) * cp_layer_floats(cp));
        memset(s->kv[l], 0, sizeof(float) * cp_layer_floats(cp));  // (touched here, not in the timed attention)
        s->att[l] = s->kv[l] + (size_t)cp->B * cp->T * 2 * cp->Cl;
    }
    *kv = s->kv[l], *att = s->att[l];
}
static void cp_acts_free(CPActs *acts) {
    if (!acts) return;
    for (int l = 0; l <= acts->L; l++) free(acts->kv[l]);
    free(acts->kv);
    free(acts);
}

// The rank's positions of B sequences: local (B,Tl) from full (B,T).
static void cp_slice_tokens(const CPContext *cp, int *local, const int *full, int B) {
    for (int b = 0; b < B; b++)
        for (int t = 0; t < cp->Tl; t++) local[(size_t)b * cp->Tl + t] = full[(size_t)b * cp->T + cp_global_pos(cp, t)];
}

// n sequences' inputs and targets (each (n,T), targets may be NULL) as the
// rank's positions, in cp->tokens; *local_y is NULL without targets.
static const int *cp_local_tokens(CPContext *cp, const int *x, const int *y, int n, const int **local_y) {
    int *lx = cp->tokens, *ly = cp->tokens + (size_t)cp->seqs * cp->Tl;
    CHECK(n <= cp->seqs, "context parallel: %d sequences exceed the capacity %d", n, cp->seqs);
    cp_slice_tokens(cp, lx, x, n);
    if (y) cp_slice_tokens(cp, ly, y, n);
    *local_y = y ? ly : NULL;
    return lx;
}

// The rank's positions' rows of wpe (T,C), in cp->wpe (Tl,C).
static const float *cp_local_wpe(CPContext *cp, const float *wpe) {
    for (int t = 0; t < cp->Tl; t++)
        memcpy(cp->wpe + (size_t)t * cp->C, wpe + (size_t)cp_global_pos(cp, t) * cp->C, sizeof(float) * cp->C);
    return cp->wpe;
}
// The zeroed gradient of cp->wpe, for the embedding's backward; cp_add_dwpe adds it to dwpe (T,C).
static float *cp_local_dwpe(CPContext *cp) {
    memset(cp->dwpe, 0, sizeof(float) * (size_t)cp->Tl * cp->C);
    return cp->dwpe;
}
static void cp_add_dwpe(const CPContext *cp, float *dwpe) {
    for (int t = 0; t < cp->Tl; t++) {
        float *d = dwpe + (size_t)cp_global_pos(cp, t) * cp->C;
        const float *s = cp->dwpe + (size_t)t * cp->C;
        for (int c = 0; c < cp->C; c++) d[c] += s[c];
    }
}

// Rank r's local row t of sequence b in the rank-ordered pieces (B,Tl,2Cl each),
// from/to global row (b, pos) of full (B,T,2Cl): dir 0 pieces -> full, 1 full -> pieces.
static void cp_reorder(const CPContext *cp, float *pieces, float *full, int B, int dir) {
    size_t row = 2 * (size_t)cp->Cl, piece = (size_t)B * cp->Tl * row;
    CPContext other = *cp;
#pragma omp parallel for collapse(2) firstprivate(other)
    for (int r = 0; r < cp->size; r++) {
        for (int b = 0; b < B; b++) {
            other.rank = r;
            for (int t = 0; t < cp->Tl; t++) {
                float *p = pieces + r * piece + ((size_t)b * cp->Tl + t) * row;
                float *f = full + ((size_t)b * cp->T + cp_global_pos(&other, t)) * row;
                if (dir == 0) memcpy(f, p, sizeof(float) * row);
                else memcpy(p, f, sizeof(float) * row);
            }
        }
    }
}

// Attention of this rank's queries (the context group's variant of
// cpu_layers.h's attention_forward, its head kernel with the queries offset): qkv
// (B,Tl,3Cl) local; out (B,Tl,Cl). Gathers every position's k | v into the
// micro-batch's *acts and keeps the probabilities there.
static void cp_attention_forward(CPContext *cp, CPActs **acts, int l, float *out, const float *qkv, int B) {
    int Tl = cp->Tl, T = cp->T, Tc = cp->Tc, Cl = cp->Cl, NH = cp->NHl, hs = Cl / NH;
    size_t C3 = 3 * (size_t)Cl, C2 = 2 * (size_t)Cl, piece = (size_t)B * Tl * C2;
    float *mine = cp->pieces + cp->rank * piece;
#pragma omp parallel for
    for (int i = 0; i < B * Tl; i++) memcpy(mine + (size_t)i * C2, qkv + (size_t)i * C3 + Cl, sizeof(float) * C2);
    for (int r = 0; r < cp->size; r++) cp->counts[r] = piece;
    CommRequest req = comm_all_gather_start(cp->group, NULL, cp->pieces, cp->counts, COMM_F32);
    comm_wait(&req);
    float *kv, *att;
    cp_acts_layer(cp, acts, l, &kv, &att);
    cp_reorder(cp, cp->pieces, kv, B, 0);
    double t0 = wall_seconds(), c0 = process_cpu_seconds();
    float scale = 1.0f / sqrtf((float)hs);
#pragma omp parallel
    {
        float *work = (float *)alignedMallocCheck(sizeof(float) * attention_work_floats(T, hs));
#pragma omp for collapse(3) schedule(dynamic)
        for (int b = 0; b < B; b++) {
            for (int h = 0; h < NH; h++) {
                for (int j = 0; j < 2; j++) {
                    int g = cp_chunk(cp, cp->rank, j);  // the chunk's queries sit at [g * Tc, (g + 1) * Tc)
                    size_t row0 = (size_t)b * Tl + (size_t)j * Tc;
                    const float *k = kv + (size_t)b * T * C2 + (size_t)h * hs;
                    attention_head_forward(out + row0 * Cl + (size_t)h * hs, Cl,
                                           att + (((size_t)b * NH + h) * Tl + (size_t)j * Tc) * T, T, T, NULL,
                                           qkv + row0 * C3 + (size_t)h * hs, C3, k, k + Cl, C2, g * Tc, Tc, hs, scale,
                                           work);
#pragma omp atomic
                    cp->attention_scores += (double)Tc * (g + 1) * Tc;
                }
            }
        }
        free(work);
    }
    cp->attention_s += wall_seconds() - t0, cp->attention_cpu_s += process_cpu_seconds() - c0;
}

// The backward of cp_attention_forward: dqkv (B,Tl,3Cl) overwritten from dout
// (B,Tl,Cl); the k | v gradients of every position are summed over the group
// onto their owners (reduce-scatter).
static void cp_attention_backward(CPContext *cp, CPActs *acts, int l, float *dqkv, const float *dout, const float *qkv,
                                  int B) {
    int Tl = cp->Tl, T = cp->T, Tc = cp->Tc, Cl = cp->Cl, NH = cp->NHl, hs = Cl / NH;
    size_t C3 = 3 * (size_t)Cl, C2 = 2 * (size_t)Cl, piece = (size_t)B * Tl * C2;
    const float *kv = acts->kv[l], *att = acts->att[l];
    float *dkv = cp->dkv;
    double t0 = wall_seconds(), c0 = process_cpu_seconds();
    float scale = 1.0f / sqrtf((float)hs);
#pragma omp parallel
    {
        float *work = (float *)alignedMallocCheck(sizeof(float) * attention_work_floats(T, hs));
        float *ds = cp->scratch + (size_t)omp_thread_id() * Tc * T;
#pragma omp for collapse(2) schedule(dynamic)
        for (int b = 0; b < B; b++) {
            for (int h = 0; h < NH; h++) {
                const float *k = kv + (size_t)b * T * C2 + (size_t)h * hs;
                float *dk = dkv + (size_t)b * T * C2 + (size_t)h * hs;
                for (int t = 0; t < T; t++) {
                    memset(dk + (size_t)t * C2, 0, sizeof(float) * hs);
                    memset(dk + Cl + (size_t)t * C2, 0, sizeof(float) * hs);
                }
                for (int j = 0; j < 2; j++) {  // each chunk's queries add to the k | v gradients of the keys they see
                    int g = cp_chunk(cp, cp->rank, j);
                    size_t row0 = (size_t)b * Tl + (size_t)j * Tc;
                    attention_head_backward(dqkv + row0 * C3 + (size_t)h * hs, C3, dk, dk + Cl, C2, 1, ds, T,
                                            att + (((size_t)b * NH + h) * Tl + (size_t)j * Tc) * T, T,
                                            dout + row0 * Cl + (size_t)h * hs, Cl, qkv + row0 * C3 + (size_t)h * hs, C3,
                                            k, k + Cl, C2, g * Tc, Tc, hs, scale, work);
                }
            }
        }
        free(work);
    }
    cp->attention_s += wall_seconds() - t0, cp->attention_cpu_s += process_cpu_seconds() - c0;
    cp_reorder(cp, cp->pieces, dkv, B, 1);
    for (int r = 0; r < cp->size; r++) cp->counts[r] = piece;
    float *mine = cp->pieces + cp->rank * piece;
    CommRequest req = comm_reduce_scatter_start(cp->group, cp->pieces, mine, cp->counts, COMM_F32);
    comm_wait(&req);
#pragma omp parallel for
    for (int i = 0; i < B * Tl; i++) memcpy(dqkv + (size_t)i * C3 + Cl, mine + (size_t)i * C2, sizeof(float) * C2);
}

// Each rank's attention seconds (wall, then CPU) and scores computed, as shares of the group's (rank 0 of
// the world prints).
static void cp_report(const CPContext *cp, int print) {
    if (cp->size == 1) return;
    double mine[3] = {cp->attention_s, cp->attention_cpu_s, cp->attention_scores}, total[3] = {0, 0, 0};
    double *all = (double *)mallocCheck(sizeof(double) * 3 * (size_t)cp->size);
    for (int r = 0; r < cp->size; r++) cp->counts[r] = 3;
    CommRequest req = comm_all_gather_start(cp->group, mine, all, cp->counts, COMM_F64);
    comm_wait(&req);
    for (int r = 0; r < cp->size; r++)
        for (int k = 0; k < 3; k++) total[k] += all[3 * r + k];
    if (print) {
        printf("context parallel: attention per rank (chunks i and %d-i), wall, CPU and scores computed:",
               2 * cp->size - 1);
        for (int r = 0; r < cp->size; r++) {
            double share[3];
            for (int k = 0; k < 3; k++) share[k] = 100.0 * all[3 * r + k] / (total[k] > 0 ? total[k] : 1);
            printf(" %d: %.3f s (%.1f%%) cpu %.3f s (%.1f%%) scores %.0f (%.1f%%)", r, all[3 * r], share[0],
                   all[3 * r + 1], share[1], all[3 * r + 2], share[2]);
        }
        printf("\n");
        fflush(stdout);
    }
    free(all);
}

#endif  // LLMC_CONTEXT_PARALLEL_H
