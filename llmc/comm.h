// comm.h: the communication layer. One small interface -- all-reduce (sum),
// reduce-scatter, all-gather, broadcast, send/recv, barrier -- over groups of
// ranks, every operation nonblocking: it starts and returns a CommRequest, and
// comm_wait() completes it. A wait that passes the deadline (--comm-timeout)
// ends every rank with a message naming the rank and the operation, so a dead
// or hung rank never hangs the job.
//
// Ranks form a grid of named dimensions (CommGrid), declared outermost
// first: data (dp), pipeline (pp), context (cp), tensor (tp). Tensor
// parallel is innermost, so that a tensor group is consecutive ranks on one
// node; data parallel outermost, so that each model replica is a block of
// consecutive ranks: world rank = ((dp * PP + pp) * CP + cp) * TP + tp.
// comm_init builds a group for every entry of COMM_GROUP_DIMS: one dimension
// or a flattened set of them (the replica group dp x cp: the ranks that hold
// the same parameters, over which the gradients are reduced and ZeRO shards);
// a group of one rank where its dimensions are 1. A new dimension is an entry
// in GridDim and its names, plus the groups its users need.
//
// Backends (CommBackend): MPI on host buffers (here), NCCL on device buffers
// (comm_nccl.cuh, its unique id shared over MPI), MPI on device buffers
// staged through host memory (comm_staged.cuh). Operations that must progress
// together (a pipeline's sends and receives) go in one batch
// (comm_batch_begin/end: NCCL's group calls). A group carries its backend,
// so the model code only sees groups and requests; streams and progress
// belong to the backend. MPI progress: Open MPI moves nonblocking
// collectives forward only inside MPI calls, so while any is in flight a
// progress thread pokes MPI every COMM_PROGRESS_US microseconds, and the
// reduction really runs under the compute. Every MPI call after MPI_Init
// holds one mutex (comm_mpi_lock), so none run at once (MPI_THREAD_SERIALIZED). Built without MPI, the "self" backend serves a
// single process (copies and no-ops).
//
// Reduce-scatter and all-gather take counts[group size]: rank r's piece is
// counts[r] elements, the pieces lie in rank order in the full buffer (so a
// range of a sharded flat buffer maps onto them directly; uneven is fine).
// In place: reduce-scatter's recv may be this rank's piece inside send, and
// all-gather's send may be NULL when the piece already lies in recv.
#ifndef LLMC_COMM_H
#define LLMC_COMM_H

#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "launcher_env.h"    // defines: LaunchInfo, launch_detect
#include "phase_watchdog.h"  // defines: PhaseWatchdog, phase_watchdog_begin, phase_watchdog_end, phase_watchdog_start, ...
#include "step_time.h"       // defines: STEP_BUBBLE, STEP_COMM, step_time_enter
#include "utils.h"           // defines: DIE, CHECK, mallocCheck, wall_seconds, ...
#ifdef LLMC_MPI
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1  // C only, also when a .cu file (C++) includes this
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>
#endif

typedef enum { COMM_F32, COMM_F64, COMM_BF16 } CommDType;
static inline size_t comm_dtype_size(CommDType t) { return t == COMM_F64 ? 8 : t == COMM_F32 ? 4 : 2; }

// The grid's dimensions, outermost first (see the top of this file).
typedef enum { GRID_DP, GRID_PP, GRID_CP, GRID_TP, GRID_DIMS } GridDim;
static const char *const GRID_DIM_NAMES[GRID_DIMS] = {"dp", "pp", "cp", "tp"};
static const char *const GRID_DIM_WORDS[GRID_DIMS] = {"data", "pipeline", "context", "tensor"};
#define GRID_BIT(d) (1u << (d))
#define GRID_ALL ((1u << GRID_DIMS) - 1)

// The ranks' sizes along each dimension (their product: the world).
typedef struct {
    int size[GRID_DIMS];
} CommGrid;

// The groups comm_init makes, each over a set of dimensions (COMM_GROUP_DIMS).
typedef enum {
    COMM_WORLD, COMM_DATA, COMM_TENSOR, COMM_PIPELINE, COMM_CONTEXT, COMM_REPLICA, COMM_NUM_GROUPS
} CommGroupKind;
static const char *const COMM_GROUP_NAMES[COMM_NUM_GROUPS] = {"world", "data", "tensor", "pipeline", "context",
                                                              "replica"};
static const unsigned COMM_GROUP_DIMS[COMM_NUM_GROUPS] = {GRID_ALL, GRID_BIT(GRID_DP), GRID_BIT(GRID_TP),
                                                          GRID_BIT(GRID_PP), GRID_BIT(GRID_CP),
                                                          GRID_BIT(GRID_DP) | GRID_BIT(GRID_CP)};

typedef struct CommBackend CommBackend;
typedef struct Comm Comm;

typedef struct {
    CommGroupKind kind;
    int rank, size;             // this process in the group
    const CommBackend *be;
    Comm *comm;
#ifdef LLMC_MPI
    MPI_Comm mpi;
#endif
    void *impl;                 // backend state (NCCL: communicator and stream)
} CommGroup;

typedef struct {
    const char *op;             // "all-reduce", ... (for the timeout message)
    CommGroup *group;
    size_t bytes;
    int active;
#ifdef LLMC_MPI
    MPI_Request mpi;
    int *counts;                // MPI's count/displacement arrays live until completion
    void *move_dst;             // in-place reduce-scatter: MPI leaves the piece at the start of the
    const void *move_src;       // buffer; it is moved to its place on completion
    size_t move_bytes;
#endif
    void *impl;                 // backend state (NCCL: a CUDA event)
} CommRequest;

// Each start function fills *r (r->op, r->group, r->bytes are set by the caller side in comm.h).
struct CommBackend {
    const char *name;
    void (*all_reduce)(CommGroup *g, void *buf, size_t count, CommDType t, CommRequest *r);
    void (*reduce_scatter)(CommGroup *g, const void *send, void *recv, const size_t *counts, CommDType t,
                           CommRequest *r);
    // send == NULL: in place (this rank's piece already sits at its place in recv)
    void (*all_gather)(CommGroup *g, const void *send, void *recv, const size_t *counts, CommDType t,
                       CommRequest *r);
    void (*broadcast)(CommGroup *g, void *buf, size_t count, CommDType t, int root, CommRequest *r);
    void (*send)(CommGroup *g, const void *buf, size_t count, CommDType t, int peer, int tag, CommRequest *r);
    void (*recv)(CommGroup *g, void *buf, size_t count, CommDType t, int peer, int tag, CommRequest *r);
    void (*barrier)(CommGroup *g, CommRequest *r);
    int (*test)(CommRequest *r);      // 1 when complete (and its resources freed)
    void (*abort)(Comm *c, int code);  // ends every rank of the job
    // device backends that can: the device stream (a cudaStream_t) waits for r
    // without blocking the host; NULL: comm_stream_wait completes r on the host
    void (*stream_wait)(const CommRequest *r, void *stream);
    // a batch (comm_batch_begin/end): NCCL's group calls; NULL where every
    // nonblocking operation already progresses on its own (MPI)
    void (*batch_begin)(void);
    void (*batch_end)(void);
};

struct Comm {
    int rank, world, local_rank;       // world rank; the index on this node picks the GPU
    CommGrid grid;                     // the ranks' sizes by dimension (comm_size)
    double timeout_s;                  // <= 0: wait forever
    const char *launcher;              // launcher_env.h's name for who started us
    CommGroup groups[COMM_NUM_GROUPS];
    int mpi_initialized;
    PhaseWatchdog watchdog;            // MPI ranks with a timeout: the process that bounds start-up and shut-down
    const char *fault;                 // LLMC_TEST_FAULT (tests only): "hang:R" or "die:R" at the first collective
                                       // (comm_test_fault), "stop-start:R" / "stop-setup:R" / "stop-end:R" before MPI's
                                       // start-up / the device groups' set-up / MPI's shut-down, "stop-in-end:R" inside
                                       // the shut-down, once MPI_Finalize let the other ranks go (comm_test_stop)
    int fault_rank;
};

static inline CommGroup *comm_group(Comm *c, CommGroupKind k) { return &c->groups[k]; }
static inline int comm_size(const Comm *c, GridDim d) { return c->grid.size[d]; }

static inline size_t comm_sum_counts(const size_t *counts, int n) {
    size_t total = 0;
    for (int i = 0; i < n; i++) total += counts[i];
    return total;
}

// ---------------------------------------------------------------------------
// "self" backend: a group of one process, host buffers

static void self_all_reduce(CommGroup *g, void *buf, size_t n, CommDType t, CommRequest *r) {
    (void)g; (void)buf; (void)n; (void)t; (void)r;
}
static void self_reduce_scatter(CommGroup *g, const void *send, void *recv, const size_t *counts, CommDType t,
                                CommRequest *r) {
    (void)g; (void)r;
    if (send != recv) memmove(recv, send, counts[0] * comm_dtype_size(t));
}
static void self_all_gather(CommGroup *g, const void *send, void *recv, const size_t *counts, CommDType t,
                            CommRequest *r) {
    (void)g; (void)r;
    if (send && send != recv) memmove(recv, send, counts[0] * comm_dtype_size(t));
}
static void self_broadcast(CommGroup *g, void *buf, size_t n, CommDType t, int root, CommRequest *r) {
    (void)g; (void)buf; (void)n; (void)t; (void)root; (void)r;
}
static void self_p2p(CommGroup *g, void *buf, size_t n, CommDType t, int peer, int tag, CommRequest *r) {
    (void)g; (void)buf; (void)n; (void)t; (void)tag; (void)r;
    DIE("send/recv to rank %d in a group of one process", peer);
}
static void self_send(CommGroup *g, const void *buf, size_t n, CommDType t, int peer, int tag, CommRequest *r) {
    self_p2p(g, (void *)buf, n, t, peer, tag, r);
}
static void self_barrier(CommGroup *g, CommRequest *r) { (void)g; (void)r; }
static int self_test(CommRequest *r) { (void)r; return 1; }
static void self_abort(Comm *c, int code) { (void)c; exit(code); }

static const CommBackend COMM_SELF = {"self", self_all_reduce, self_reduce_scatter, self_all_gather, self_broadcast,
                                      self_send, self_p2p, self_barrier, self_test, self_abort, NULL, NULL, NULL};

// ---------------------------------------------------------------------------
// MPI backend: host buffers, MPI-3 nonblocking calls

#ifdef LLMC_MPI
static inline MPI_Datatype mpi_dtype(CommDType t) {
    CHECK(t != COMM_BF16, "the MPI backend has no bf16 sum (stage bf16 through fp32, or use NCCL)");
    return t == COMM_F64 ? MPI_DOUBLE : MPI_FLOAT;
}
// Operations that only move data (all-gather, broadcast, send/recv) take bf16 as 16-bit words.
static inline MPI_Datatype mpi_move_dtype(CommDType t) { return t == COMM_BF16 ? MPI_UINT16_T : mpi_dtype(t); }
static inline int mpi_count(size_t n) {
    CHECK(n <= (size_t)INT_MAX, "MPI message of %zu elements exceeds INT_MAX (use smaller buckets)", n);
    return (int)n;
}
#define MPI_CHECK(call)                                                                   \
    do {                                                                                  \
        int rc_ = (call);                                                                 \
        if (rc_ != MPI_SUCCESS) DIE("MPI error %d: %s", rc_, #call);                      \
    } while (0)

#define COMM_PROGRESS_US 50
static pthread_mutex_t comm_mpi_mutex = PTHREAD_MUTEX_INITIALIZER;
static pthread_t comm_progress_tid;
static int comm_progress_running, comm_progress_stop;
static long comm_mpi_in_flight;  // started MPI requests not yet complete (under the mutex)

// Taken around every MPI call made after MPI_Init (also by other backends' set-up).
static inline void comm_mpi_lock(void) { pthread_mutex_lock(&comm_mpi_mutex); }
static inline void comm_mpi_unlock(void) { pthread_mutex_unlock(&comm_mpi_mutex); }

// Starts an MPI operation: the call runs under the lock and counts as in flight.
#define MPI_START(call)              \
    do {                             \
        comm_mpi_lock();             \
        MPI_CHECK(call);             \
        comm_mpi_in_flight++;        \
        comm_mpi_unlock();           \
    } while (0)

static void *comm_progress_main(void *arg) {
    (void)arg;
    for (;;) {
        comm_mpi_lock();
        int stop = comm_progress_stop, busy = comm_mpi_in_flight > 0;
        if (busy && !stop) {
            int flag;
            MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE);
        }
        comm_mpi_unlock();
        if (stop) return NULL;
        struct timespec ts = {0, (busy ? COMM_PROGRESS_US : 20 * COMM_PROGRESS_US) * 1000L};
        nanosleep(&ts, NULL);
    }
}

// counts and displacements (2 * size ints) kept in the request until completion
static inline int *mpi_counts_displs(CommRequest *r, const size_t *counts, int size) {
    r->counts = (int *)mallocCheck(sizeof(int) * 2 * (size_t)size);
    size_t displ = 0;
    for (int i = 0; i < size; i++) {
        r->counts[i] = mpi_count(counts[i]);
        r->counts[size + i] = mpi_count(displ);
        displ += counts[i];
    }
    return r->counts;
}

static void mpi_all_reduce(CommGroup *g, void *buf, size_t n, CommDType t, CommRequest *r) {
    MPI_START(MPI_Iallreduce(MPI_IN_PLACE, buf, mpi_count(n), mpi_dtype(t), MPI_SUM, g->mpi, &r->mpi));
}
static void mpi_reduce_scatter(CommGroup *g, const void *send, void *recv, const size_t *counts, CommDType t,
                               CommRequest *r) {
    int *cd = mpi_counts_displs(r, counts, g->size);
    uintptr_t s = (uintptr_t)send, d = (uintptr_t)recv;
    size_t es = comm_dtype_size(t);
    if (d >= s && d < s + comm_sum_counts(counts, g->size) * es) {  // in place: the piece lands at send's start
        r->move_dst = recv;
        r->move_src = send;
        r->move_bytes = counts[g->rank] * es;
        MPI_START(MPI_Ireduce_scatter(MPI_IN_PLACE, (void *)send, cd, mpi_dtype(t), MPI_SUM, g->mpi, &r->mpi));
    } else {
        MPI_START(MPI_Ireduce_scatter(send, recv, cd, mpi_dtype(t), MPI_SUM, g->mpi, &r->mpi));
    }
}
static void mpi_all_gather(CommGroup *g, const void *send, void *recv, const size_t *counts, CommDType t,
                           CommRequest *r) {
    int *cd = mpi_counts_displs(r, counts, g->size);
    MPI_Datatype dt = mpi_move_dtype(t);
    if (send) MPI_START(MPI_Iallgatherv(send, cd[g->rank], dt, recv, cd, cd + g->size, dt, g->mpi, &r->mpi));
    else MPI_START(MPI_Iallgatherv(MPI_IN_PLACE, 0, dt, recv, cd, cd + g->size, dt, g->mpi, &r->mpi));
}
static void mpi_broadcast(CommGroup *g, void *buf, size_t n, CommDType t, int root, CommRequest *r) {
    MPI_START(MPI_Ibcast(buf, mpi_count(n), mpi_move_dtype(t), root, g->mpi, &r->mpi));
}
static void mpi_send(CommGroup *g, const void *buf, size_t n, CommDType t, int peer, int tag, CommRequest *r) {
    MPI_START(MPI_Isend(buf, mpi_count(n), mpi_move_dtype(t), peer, tag, g->mpi, &r->mpi));
}
static void mpi_recv(CommGroup *g, void *buf, size_t n, CommDType t, int peer, int tag, CommRequest *r) {
    MPI_START(MPI_Irecv(buf, mpi_count(n), mpi_move_dtype(t), peer, tag, g->mpi, &r->mpi));
}
static void mpi_barrier(CommGroup *g, CommRequest *r) { MPI_START(MPI_Ibarrier(g->mpi, &r->mpi)); }
static int mpi_test(CommRequest *r) {
    int done = 0;
    comm_mpi_lock();
    MPI_CHECK(MPI_Test(&r->mpi, &done, MPI_STATUS_IGNORE));
    if (done) comm_mpi_in_flight--;
    comm_mpi_unlock();
    if (done) {
        free(r->counts);
        r->counts = NULL;
        if (r->move_bytes && r->move_dst != r->move_src) memmove(r->move_dst, r->move_src, r->move_bytes);
    }
    return done;
}
static void mpi_abort(Comm *c, int code) {
    (void)c;
    comm_mpi_lock();
    MPI_Abort(MPI_COMM_WORLD, code);
    exit(code);
}

static const CommBackend COMM_MPI = {"mpi", mpi_all_reduce, mpi_reduce_scatter, mpi_all_gather, mpi_broadcast,
                                     mpi_send, mpi_recv, mpi_barrier, mpi_test, mpi_abort, NULL, NULL, NULL};
#endif  // LLMC_MPI

// ---------------------------------------------------------------------------
// requests

static inline CommRequest comm_request(CommGroup *g, const char *op, size_t bytes) {
    CommRequest r;
    memset(&r, 0, sizeof(r));
    r.op = op;
    r.group = g;
    r.bytes = bytes;
    r.active = 1;
    return r;
}

// Checks a request without blocking (and lets the backend progress); 1 when done.
static inline int comm_test(CommRequest *r) {
    if (!r->active) return 1;
    if (r->group->be->test(r)) r->active = 0;
    return !r->active;
}

// A group's name in messages: the words of its dimensions of more than one
// rank ("data", "data x context"), or its own name (world, or all of size 1).
static inline void comm_group_words(const Comm *c, const CommGroup *g, char *buf, size_t len) {
    buf[0] = '\0';
    for (int d = 0; d < GRID_DIMS && g->kind != COMM_WORLD; d++)
        if ((COMM_GROUP_DIMS[g->kind] & GRID_BIT(d)) && c->grid.size[d] > 1)
            snprintf(buf + strlen(buf), len - strlen(buf), "%s%s", buf[0] ? " x " : "", GRID_DIM_WORDS[d]);
    if (!buf[0]) snprintf(buf, len, "%s", COMM_GROUP_NAMES[g->kind]);
}

// The one line a wait past --comm-timeout prints before the job is ended.
static inline void comm_report_timeout(const Comm *c, const char *op, size_t bytes, const CommGroup *g) {
    char name[64];
    comm_group_words(c, g, name, sizeof(name));
    fprintf(stderr,
            "error: rank %d: %s of %zu bytes on the %s group (%d ranks) did not complete within %.0f s "
            "(--comm-timeout): a rank has died or hangs; aborting all ranks\n",
            c->rank, op, bytes, name, g->size, c->timeout_s);
    fflush(stderr);
}

// Tests only: LLMC_TEST_FAULT=hang:R or die:R makes world rank R hang (or be
// killed) where the distributed layer calls this, at its first collective, so
// that tests can check that the other ranks end the job (--comm-timeout).
static inline void comm_test_fault(const Comm *c) {
    if (!c->fault || c->rank != c->fault_rank || strncmp(c->fault, "stop-", 5) == 0) return;
    fprintf(stderr, "rank %d: LLMC_TEST_FAULT=%s\n", c->rank, c->fault);
    fflush(stderr);
    if (strncmp(c->fault, "die", 3) == 0) raise(SIGKILL);
    for (;;) pause();  // hang
}

// Completes a request. Past the communicator's deadline it prints which rank
// waited for what and ends the whole job (exit status 3 on every rank).
static inline StepPart comm_wait_part(const CommGroup *g) {
    return g->kind == COMM_PIPELINE ? STEP_BUBBLE : STEP_COMM;
}

static inline void comm_wait(CommRequest *r) {
    if (!r->active) return;
    StepPart left = step_time_enter(comm_wait_part(r->group));  // (step_time.h: the wait is comm or bubble time)
    Comm *c = r->group->comm;
    double deadline = c->timeout_s > 0 ? wall_seconds() + c->timeout_s : 0;
    for (long spins = 0; !comm_test(r); spins++) {
        if (deadline > 0 && wall_seconds() > deadline) {
            comm_report_timeout(c, r->op, r->bytes, r->group);
            r->group->be->abort(c, 3);
        }
        if (spins > 64) {  // back off: the ranks may share cores
            struct timespec ts = {0, 20000};
            nanosleep(&ts, NULL);
        }
    }
    step_time_enter(left);
}

static inline void comm_wait_all(CommRequest *rs, int n) {
    for (int i = 0; i < n; i++) comm_wait(&rs[i]);
}

// Makes a device stream (a cudaStream_t, for device groups) wait for r: on the
// device where the backend can (NCCL), so the host does not block and r still
// needs a comm_wait later, whose deadline catches a hang; elsewhere by
// completing r here (the staged backend's result is on the device then).
static inline void comm_stream_wait(CommRequest *r, void *stream) {
    if (!r->active) return;
    StepPart left = step_time_enter(comm_wait_part(r->group));  // (on the device clock: the stream's stall)
    if (r->group->be->stream_wait) r->group->be->stream_wait(r, stream);
    else comm_wait(r);
    step_time_enter(left);
}

// ---------------------------------------------------------------------------
// operations (start; complete with comm_wait)

static inline CommRequest comm_all_reduce_start(CommGroup *g, void *buf, size_t count, CommDType t) {
    CommRequest r = comm_request(g, "all-reduce", count * comm_dtype_size(t));
    g->be->all_reduce(g, buf, count, t, &r);
    return r;
}
// send: the full buffer (sum of counts); recv: this rank's piece (counts[rank])
static inline CommRequest comm_reduce_scatter_start(CommGroup *g, const void *send, void *recv, const size_t *counts,
                                                    CommDType t) {
    CommRequest r = comm_request(g, "reduce-scatter", comm_sum_counts(counts, g->size) * comm_dtype_size(t));
    g->be->reduce_scatter(g, send, recv, counts, t, &r);
    return r;
}
// send: this rank's piece, or NULL when it already lies in place in recv (the full buffer)
static inline CommRequest comm_all_gather_start(CommGroup *g, const void *send, void *recv, const size_t *counts,
                                                CommDType t) {
    CommRequest r = comm_request(g, "all-gather", comm_sum_counts(counts, g->size) * comm_dtype_size(t));
    g->be->all_gather(g, send, recv, counts, t, &r);
    return r;
}
static inline CommRequest comm_broadcast_start(CommGroup *g, void *buf, size_t count, CommDType t, int root) {
    CommRequest r = comm_request(g, "broadcast", count * comm_dtype_size(t));
    g->be->broadcast(g, buf, count, t, root, &r);
    return r;
}
static inline CommRequest comm_send_start(CommGroup *g, const void *buf, size_t count, CommDType t, int peer,
                                          int tag) {
    CommRequest r = comm_request(g, "send", count * comm_dtype_size(t));
    g->be->send(g, buf, count, t, peer, tag, &r);
    return r;
}
static inline CommRequest comm_recv_start(CommGroup *g, void *buf, size_t count, CommDType t, int peer, int tag) {
    CommRequest r = comm_request(g, "recv", count * comm_dtype_size(t));
    g->be->recv(g, buf, count, t, peer, tag, &r);
    return r;
}
static inline CommRequest comm_barrier_start(CommGroup *g) {
    CommRequest r = comm_request(g, "barrier", 0);
    g->be->barrier(g, &r);
    return r;
}

// A batch: the operations started between comm_batch_begin(g) and
// comm_batch_end(g) on groups of g's backend progress together, so calls that
// wait for each other's partners (a send to a rank and a receive from it, when
// the rank does the same) do not deadlock: NCCL's ncclGroupStart/ncclGroupEnd
// (its point-to-point calls block until matched, and calls outside a group
// run one after another on their stream); nothing for MPI, whose nonblocking
// calls each progress on their own. A request started in a batch may be
// waited for (comm_wait, comm_test, comm_stream_wait) only after comm_batch_end.
static inline void comm_batch_begin(CommGroup *g) {
    if (g->be->batch_begin) g->be->batch_begin();
}
static inline void comm_batch_end(CommGroup *g) {
    if (g->be->batch_end) g->be->batch_end();
}

// blocking forms
static inline void comm_all_reduce(CommGroup *g, void *buf, size_t count, CommDType t) {
    CommRequest r = comm_all_reduce_start(g, buf, count, t);
    comm_wait(&r);
}
static inline void comm_broadcast(CommGroup *g, void *buf, size_t count, CommDType t, int root) {
    CommRequest r = comm_broadcast_start(g, buf, count, t, root);
    comm_wait(&r);
}
static inline void comm_barrier(CommGroup *g) {
    CommRequest r = comm_barrier_start(g);
    comm_wait(&r);
}
// The mean of a host double over a group.
static inline double comm_mean(CommGroup *g, double x) {
    comm_all_reduce(g, &x, 1, COMM_F64);
    return x / g->size;
}

// ---------------------------------------------------------------------------
// setup

// A rank stuck in MPI's start-up or shut-down (a peer that never started, or
// stopped at the end) waits inside MPI_Init_thread or MPI_Finalize, where no
// comm_wait sees the deadline; a rank stopped there (SIGSTOP) runs nothing at
// all. Each phase is watched by the rank's watchdog process
// (phase_watchdog.h, forked by comm_init before MPI_Init when a launcher
// started us and --comm-timeout is set): past the timeout it prints one line
// naming the rank and the phase and SIGKILLs the rank, stopped or not; the
// launcher then ends the rest of the job.
static inline void comm_phase_begin(Comm *c, const char *phase) {
    char line[400];
    snprintf(line, sizeof(line), "error: rank %d: %s did not complete within %.0f s (--comm-timeout): a rank did not "
             "start, hangs or was stopped; the rank's watchdog process kills it (SIGKILL) to end the job", c->rank,
             phase, c->timeout_s);
    phase_watchdog_begin(&c->watchdog, c->timeout_s, line);
}
static inline void comm_phase_end(Comm *c) { phase_watchdog_end(&c->watchdog); }

// LLMC_TEST_FAULT's "stop-PHASE:R": rank R stops itself (SIGSTOP) where the caller names PHASE.
static inline void comm_test_stop(const Comm *c, const char *phase, int rank) {
    if (!c->fault || rank != c->fault_rank || strncmp(c->fault, "stop-", 5) != 0) return;
    if (strncmp(c->fault + 5, phase, strlen(phase)) != 0) return;
    fprintf(stderr, "rank %d: LLMC_TEST_FAULT=%s\n", rank, c->fault);
    fflush(stderr);
    raise(SIGSTOP);
}

// The even split of n elements over a group, as counts (n = 0 is fine).
static inline void comm_even_counts(size_t n, int size, size_t *counts) {
    for (int i = 0; i < size; i++) counts[i] = n / size + ((size_t)i < n % size ? 1 : 0);
}

// A rank's coordinates in the grid (coord[d] in [0, size[d])).
static inline void grid_coords(const CommGrid *g, int rank, int coord[GRID_DIMS]) {
    for (int d = GRID_DIMS - 1; d >= 0; d--) {
        coord[d] = rank % g->size[d];
        rank /= g->size[d];
    }
}

// The group over the dimensions in `dims` (GRID_BIT mask) that holds `rank`:
// its size, the rank's index in it (the flattened coordinates, outermost
// first) and its color (the same for every member: the other coordinates).
static inline void grid_group_of(const CommGrid *g, int rank, unsigned dims, int *group_rank, int *group_size,
                                 int *color) {
    int coord[GRID_DIMS];
    grid_coords(g, rank, coord);
    *group_rank = 0, *group_size = 1, *color = 0;
    for (int d = 0; d < GRID_DIMS; d++) {
        if (dims & GRID_BIT(d)) {
            *group_rank = *group_rank * g->size[d] + coord[d];
            *group_size *= g->size[d];
        } else {
            *color = *color * g->size[d] + coord[d];
        }
    }
}

// The grid of `world` ranks from the model-parallel sizes in g (every size but
// dp's; dp is what is left). NULL when it fits; else the one line that says
// why, in err (the flags of train_options.h: --cp, --tp, --pp).
static inline const char *grid_split(CommGrid *g, int world, char *err, size_t len) {
    int group = 1;
    for (int d = 0; d < GRID_DIMS; d++) {
        if (d == GRID_DP) continue;
        if (g->size[d] < 1) {
            snprintf(err, len, "--%s %d: a grid dimension must be 1 or more", GRID_DIM_NAMES[d], g->size[d]);
            return err;
        }
        group *= g->size[d];
    }
    if (world % group != 0) {
        snprintf(err, len, "%d ranks do not split into tensor-parallel %d x pipeline-parallel %d x "
                 "context-parallel %d: launch a multiple of %d ranks", world, g->size[GRID_TP], g->size[GRID_PP], g->size[GRID_CP], group);
        return err;
    }
    g->size[GRID_DP] = world / group;
    return NULL;
}

// A grid whose one model-parallel dimension is d, of n ranks (the rest data parallel).
static inline CommGrid grid_model_parallel(GridDim d, int n) {
    CommGrid g;
    for (int k = 0; k < GRID_DIMS; k++) g.size[k] = 1;
    g.size[d] = n;
    return g;
}

// Starts the communication layer: MPI (when built with it and started by a
// launcher that launcher_env.h knows; a lone process skips MPI_Init), the rank
// grid (grid: the model-parallel sizes; dp is the rest) and its groups.
// timeout_s bounds every wait.
static inline void comm_init(Comm *c, int *argc, char ***argv, CommGrid grid, double timeout_s) {
    memset(c, 0, sizeof(*c));
    LaunchInfo li = launch_detect();
    c->launcher = li.launcher;
    c->timeout_s = timeout_s;
    c->rank = li.rank;
    c->world = li.world;
    c->local_rank = li.local_rank;
    c->fault = getenv("LLMC_TEST_FAULT");
    if (c->fault) {
        const char *colon = strchr(c->fault, ':');
        static const char *const kinds[] = {"hang:", "die:", "stop-start:", "stop-setup:", "stop-end:", "stop-in-end:"};
        int known = 0;
        for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++)
            known |= strncmp(c->fault, kinds[k], strlen(kinds[k])) == 0;
        if (!colon || !known)
            die_usage("LLMC_TEST_FAULT='%s' is not hang:RANK, die:RANK or stop-start|stop-setup|stop-end|stop-in-end:RANK",
                      c->fault);
        c->fault_rank = atoi(colon + 1);
    }
    const CommBackend *be = &COMM_SELF;
#ifdef LLMC_MPI
    int provided = 0;
    if (li.rank_var) {  // started by a launcher: MPI connects the ranks; alone: no MPI at all
        if (timeout_s > 0) phase_watchdog_start(&c->watchdog);  // (before MPI_Init: see phase_watchdog.h)
        comm_test_stop(c, "start", li.rank);
        // (the phase lasts until every collective of the set-up has returned)
        comm_phase_begin(c, "start-up (MPI_Init_thread and the groups' communicators)");
        MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided));
        c->mpi_initialized = 1;
        int mpi_rank, mpi_size;
        MPI_Comm_rank(MPI_COMM_WORLD, &mpi_rank);
        MPI_Comm_size(MPI_COMM_WORLD, &mpi_size);
        if (mpi_size != li.world || mpi_rank != li.rank)
            die_usage("%s says rank %d of %d, but MPI sees rank %d of %d: start the job with mpirun, or srun with "
                      "MPI support (srun --mpi=pmix), so that MPI connects the ranks",
                      li.rank_var, li.rank, li.world, mpi_rank, mpi_size);
        c->rank = mpi_rank;
        c->world = mpi_size;
        // the local rank from the node's shared-memory group (every launcher agrees with it)
        MPI_Comm node;
        MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, mpi_rank, MPI_INFO_NULL, &node));
        MPI_Comm_rank(node, &c->local_rank);
        MPI_Comm_free(&node);
        be = &COMM_MPI;
    }
#else
    (void)argc; (void)argv;
    if (li.world > 1)
        die_usage("%s says this is rank %d of %d, but this program was built without MPI (NO_MPI=1)", li.rank_var,
                  li.rank, li.world);
#endif
    char err[200];
    if (grid_split(&grid, c->world, err, sizeof(err))) die_usage("%s", err);
    c->grid = grid;
    for (int k = 0; k < COMM_NUM_GROUPS; k++) {
        CommGroup *g = &c->groups[k];
        int color;
        grid_group_of(&grid, c->rank, COMM_GROUP_DIMS[k], &g->rank, &g->size, &color);
        g->kind = (CommGroupKind)k;
        g->be = be;
        g->comm = c;
#ifdef LLMC_MPI
        if (c->mpi_initialized) MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, color, g->rank, &g->mpi));
#else
        (void)color;
#endif
    }
#ifdef LLMC_MPI
    if (c->mpi_initialized) comm_phase_end(c);
    if (c->mpi_initialized && c->world > 1 && provided >= MPI_THREAD_SERIALIZED) {
        comm_progress_stop = 0;
        CHECK(pthread_create(&comm_progress_tid, NULL, comm_progress_main, NULL) == 0, "pthread_create failed");
        comm_progress_running = 1;
    }
#endif
}

static inline void comm_finalize(Comm *c) {
#ifdef LLMC_MPI
    if (comm_progress_running) {
        comm_mpi_lock();
        comm_progress_stop = 1;
        comm_mpi_unlock();
        pthread_join(comm_progress_tid, NULL);
        comm_progress_running = 0;
    }
    if (c->mpi_initialized) {
        comm_test_stop(c, "end", c->rank);
        comm_phase_begin(c, "shut-down (MPI_Finalize)");
        for (int k = 0; k < COMM_NUM_GROUPS; k++) MPI_Comm_free(&c->groups[k].mpi);
        MPI_Finalize();
        comm_test_stop(c, "in-end", c->rank);
        comm_phase_end(c);
    }
    phase_watchdog_stop(&c->watchdog);
#endif
    memset(c, 0, sizeof(*c));
}

#endif  // LLMC_COMM_H
