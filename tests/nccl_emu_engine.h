// nccl_emu_engine.h: the emulated GPU's NCCL kernels, for
// tests/emu_include/nccl.h (which builds them from the calls). A kernel is one
// call, or the calls of one ncclGroupStart/ncclGroupEnd; it holds its inputs
// (copied when its stream was ready for it) and gets its results. A thread of
// each process (the engine) runs the kernels as a GPU runs NCCL's, whatever
// the host thread does: the kernels of a stream one after another, each
// started only when the kernel before it on every stream it uses has
// completed, and its calls started together then as MPI nonblocking calls
// (over the communicator's MPI communicator, so a collective waits for every
// member to start it, a receive for its send):
//   - a send of more than NCCL_BUFFSIZE bytes (NCCL's environment variable,
//     default 4 MiB as NCCL's: docs.nvidia.com/deeplearning/nccl/user-guide/
//     docs/env.html, NCCL_BUFFSIZE) is MPI_Issend, which completes only once
//     its receive has started: NCCL moves a message through a buffer of that
//     size on the receiving side, so a longer one waits for the receive
//     ("Point-to-point calls within a group will be blocking until that group
//     of calls completes", usage/p2p.html). A shorter one completes when it
//     starts (the buffer holds it; its MPI request is finished in the
//     background). The emulation lets every message up to NCCL_BUFFSIZE
//     through; NCCL's buffer may fill with several shorter ones.
//   - the calls of a group start together, so a send and a receive that wait
//     for each other's partners complete; ungrouped, the second waits behind
//     the first on the stream, and two ranks that each send first never
//     complete: tests/nccl_emu_checks.h's watchdog reports that deadlock.
// A communicator with an asynchronous error (EMU_NCCL_FAULT, below) starts no
// more kernels, as a GPU's NCCL kernel that waits on a broken connection never
// ends; an aborted one (ncclCommAbort) drops its kernels.
//
// EMU_NCCL_FAULT=async-error:R (tests): world rank R's first operation on a
// communicator of several ranks fails asynchronously: the communicator reports
// ncclSystemError from ncclCommGetAsyncError and its kernels never complete.
// exit() while a kernel of a communicator with an asynchronous error is under
// way fails the test: on a GPU the CUDA runtime's teardown at exit waits for
// that kernel forever; NCCL's way out is ncclCommAbort on every communicator
// ("Error handling and communicator abort", usage/communicators.html).
#ifndef LLMC_NCCL_EMU_ENGINE_H
#define LLMC_NCCL_EMU_ENGINE_H

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <memory>
#include <vector>

#include "llmc/comm.h"  // comm_mpi_lock, CommDType, mpi_move_dtype

#include "tests/nccl_emu_checks.h"

struct EmuNcclComm {
    int rank, size;
#ifdef LLMC_MPI
    MPI_Comm mpi;               // MPI_COMM_NULL: one rank
    EmuNcclCommInfo *info;      // its entry in the checks' table (NULL: no checks)
#endif
    uint64_t id;                // the unique id's hash: the same on every rank
    int number;                 // the order in which this process made it (from 1)
    std::vector<int> world;     // its ranks' world ranks
    uint64_t colls = 0;         // collectives issued, messages issued to and from each rank
    std::vector<uint64_t> sent, received;
    int in_flight = 0;          // operations not complete (under the engine's mutex)
    std::atomic<int> async_error{0};  // an ncclResult_t
    std::atomic<bool> aborted{false};
};

// One call of a kernel.
struct EmuNcclOp {
    EmuNcclKind kind;
    EmuNcclComm *comm;
    int peer;                   // send/recv: the other rank in comm; reduce/broadcast: the root
    size_t count;
    CommDType type;
    const void *send;           // the caller's device buffers
    void *recv;
    size_t in_bytes, out_bytes;
    bool writes;                // whether recv gets a result on this rank
    cudaStream_t stream;
    std::shared_ptr<std::vector<unsigned char>> in, out;  // the input as read, the result
    bool rendezvous = false, done = false;
    uint64_t record = 0;        // its record's number in the checks' log
#ifdef LLMC_MPI
    MPI_Request req = MPI_REQUEST_NULL;
#endif
};

enum { EMU_NCCL_RUNNING, EMU_NCCL_COMPLETE, EMU_NCCL_ABORTED };
struct EmuNcclKernel {
    std::vector<EmuNcclOp> ops;
    std::vector<cudaStream_t> streams;
    uint64_t number = 0;        // this process's kernels in issue order
    bool started = false;
    std::atomic<int> state{EMU_NCCL_RUNNING};
};

static inline bool emu_nccl_local(const EmuNcclComm *c) {
#ifdef LLMC_MPI
    return c->mpi == MPI_COMM_NULL;
#else
    (void)c;
    return true;
#endif
}

#ifdef LLMC_MPI
struct EmuNcclDetached {  // a short send's MPI request, finished in the background
    MPI_Request req;
    std::shared_ptr<std::vector<unsigned char>> data;
    EmuNcclComm *comm;
};

struct EmuNcclEngine {
    pthread_mutex_t mutex = PTHREAD_MUTEX_INITIALIZER;
    pthread_t thread;
    bool stop = false;
    std::map<cudaStream_t, std::deque<std::shared_ptr<EmuNcclKernel>>> queues;
    std::vector<EmuNcclDetached> detached;
    std::map<cudaStream_t, int> stream_numbers;
    uint64_t kernels = 0;
    int world_rank = 0;
    bool faulted = false;       // EMU_NCCL_FAULT has struck
    EmuNcclShared *shared = NULL;
    EmuNcclWatch watch;
};
// While communicators exist (made at the first, ended with the last).
static EmuNcclEngine *emu_nccl_engine;
#endif

// NCCL_BUFFSIZE: bytes a send may move before its receive has started.
static size_t emu_nccl_buffsize() {
    static size_t bytes = 0;
    if (bytes) return bytes;
    const char *env = getenv("NCCL_BUFFSIZE");
    bytes = 4194304;
    if (env) {
        char *end = NULL;
        unsigned long long v = strtoull(env, &end, 10);
        if (!*env || *end || v == 0) emu_fail("NCCL_BUFFSIZE is not a positive number of bytes");
        bytes = (size_t)v;
    }
    return bytes;
}

// Whether kernel k's results can be taken now (the engine is done with it).
static inline bool emu_nccl_finished(const EmuNcclKernel *k) { return k->state.load() != EMU_NCCL_RUNNING; }

#ifdef LLMC_MPI
static void emu_nccl_mpi_check(int rc) {
    if (rc != MPI_SUCCESS) emu_fail("emulated NCCL: an MPI call failed");
}

// Starts op's MPI call (the engine thread, under comm_mpi_lock).
static void emu_nccl_mpi_start(EmuNcclEngine *e, EmuNcclOp &op) {
    MPI_Datatype dt = mpi_move_dtype(op.type);
    MPI_Comm mpi = op.comm->mpi;
    void *in = op.in->data(), *out = op.out->data();
    int n = mpi_count(op.count);
    switch (op.kind) {
    case EMU_ALL_REDUCE: emu_nccl_mpi_check(MPI_Iallreduce(in, out, n, dt, MPI_SUM, mpi, &op.req)); break;
    case EMU_REDUCE_SCATTER:
        emu_nccl_mpi_check(MPI_Ireduce_scatter_block(in, out, n, dt, MPI_SUM, mpi, &op.req));
        break;
    case EMU_ALL_GATHER: emu_nccl_mpi_check(MPI_Iallgather(in, n, dt, out, n, dt, mpi, &op.req)); break;
    case EMU_REDUCE: emu_nccl_mpi_check(MPI_Ireduce(in, out, n, dt, MPI_SUM, op.peer, mpi, &op.req)); break;
    case EMU_BROADCAST:
        if (op.comm->rank == op.peer) memcpy(out, in, op.in_bytes);
        emu_nccl_mpi_check(MPI_Ibcast(out, n, dt, op.peer, mpi, &op.req));
        break;
    case EMU_SEND:
        if (op.rendezvous) {
            emu_nccl_mpi_check(MPI_Issend(in, n, dt, op.peer, 0, mpi, &op.req));
        } else {  // the receiver's buffer takes it: done now, the request finished in the background
            MPI_Request req;
            emu_nccl_mpi_check(MPI_Isend(in, n, dt, op.peer, 0, mpi, &req));
            e->detached.push_back({req, op.in, op.comm});
            op.done = true;
        }
        break;
    case EMU_RECV: emu_nccl_mpi_check(MPI_Irecv(out, n, dt, op.peer, 0, mpi, &op.req)); break;
    }
}

static void emu_nccl_log_op(EmuNcclEngine *e, const EmuNcclOp &op, int state) {
    if (e->shared && !emu_nccl_local(op.comm)) emu_nccl_log_state(e->shared, op.record, state);
}

// Ends kernel k (complete or aborted): out of every queue it is in.
static void emu_nccl_retire(EmuNcclEngine *e, const std::shared_ptr<EmuNcclKernel> &k, int state) {
    for (EmuNcclOp &op : k->ops)
        if (!emu_nccl_local(op.comm) && !(op.kind == EMU_SEND && !op.rendezvous && op.done)) op.comm->in_flight--;
    for (cudaStream_t s : k->streams) e->queues[s].pop_front();
    k->state.store(state);
}

// Whether kernel k is first in every queue it is in (the kernels before it on its streams have completed).
static bool emu_nccl_first_everywhere(EmuNcclEngine *e, const std::shared_ptr<EmuNcclKernel> &k) {
    for (cudaStream_t s : k->streams)
        if (e->queues[s].front() != k) return false;
    return true;
}

// Tests kernel k's calls under way; whether all are complete.
static bool emu_nccl_test_calls(EmuNcclEngine *e, EmuNcclKernel *k) {
    bool all = true;
    comm_mpi_lock();
    for (EmuNcclOp &op : k->ops) {
        if (op.done) continue;
        int flag = 0;
        emu_nccl_mpi_check(MPI_Test(&op.req, &flag, MPI_STATUS_IGNORE));
        if (flag) {
            op.done = true;
            emu_nccl_log_op(e, op, EMU_NCCL_DONE);
        } else {
            all = false;
        }
    }
    comm_mpi_unlock();
    return all;
}

// One pass over the queues' first kernels and the background sends (the
// engine thread, under the engine's mutex); whether anything moved.
static bool emu_nccl_progress(EmuNcclEngine *e) {
    bool moved = false;
    for (auto &q : e->queues) {
        if (q.second.empty()) continue;
        std::shared_ptr<EmuNcclKernel> k = q.second.front();
        bool aborted = false, faulted = false;
        for (const EmuNcclOp &op : k->ops) {
            aborted |= op.comm->aborted.load();
            faulted |= op.comm->async_error.load() != 0;
        }
        if (aborted) {
            emu_nccl_retire(e, k, EMU_NCCL_ABORTED);
            moved = true;
            continue;
        }
        if (faulted) continue;
        if (!k->started) {
            if (!emu_nccl_first_everywhere(e, k)) continue;
            comm_mpi_lock();
            for (EmuNcclOp &op : k->ops)
                if (!op.done) emu_nccl_mpi_start(e, op);
            comm_mpi_unlock();
            k->started = true;
            for (const EmuNcclOp &op : k->ops) emu_nccl_log_op(e, op, op.done ? EMU_NCCL_DONE : EMU_NCCL_STARTED);
            moved = true;
        }
        if (emu_nccl_test_calls(e, k.get())) {
            emu_nccl_retire(e, k, EMU_NCCL_COMPLETE);
            moved = true;
        }
    }
    size_t kept = 0;
    comm_mpi_lock();
    for (EmuNcclDetached &d : e->detached) {
        int flag = 0;
        if (d.comm->aborted.load()) flag = 1;  // (abandoned)
        else emu_nccl_mpi_check(MPI_Test(&d.req, &flag, MPI_STATUS_IGNORE));
        if (flag) {
            d.comm->in_flight--;
            moved = true;
        } else {
            e->detached[kept++] = d;
        }
    }
    comm_mpi_unlock();
    e->detached.resize(kept);
    return moved;
}

static void *emu_nccl_engine_main(void *arg) {
    EmuNcclEngine *e = (EmuNcclEngine *)arg;
    double next_look = emu_clock_seconds() + 0.5;
    long idle_us = 0;
    for (;;) {
        pthread_mutex_lock(&e->mutex);
        bool stop = e->stop, moved = !stop && emu_nccl_progress(e);
        pthread_mutex_unlock(&e->mutex);
        if (stop) return NULL;
        if (e->shared && e->world_rank == 0 && emu_clock_seconds() >= next_look) {  // the watchdog
            emu_nccl_watch(e->shared, &e->watch, false);
            next_look = emu_clock_seconds() + 0.5;
        }
        idle_us = moved ? 0 : idle_us < 200 ? idle_us + 10 : 200;
        struct timespec ts = {0, 1000L * (idle_us ? idle_us : 5)};
        nanosleep(&ts, NULL);
    }
}

// A process's exit() with a kernel under way on a communicator that has an
// asynchronous error: on a GPU, a hang in the CUDA runtime's teardown.
static void emu_nccl_at_exit() {
    EmuNcclEngine *e = emu_nccl_engine;
    if (!e) return;
    pthread_mutex_lock(&e->mutex);
    for (auto &q : e->queues)
        for (const std::shared_ptr<EmuNcclKernel> &k : q.second)
            for (const EmuNcclOp &op : k->ops)
                if (op.comm->async_error.load() && !op.comm->aborted.load()) {
                    fprintf(stderr,
                            "error: emulated NCCL: rank %d called exit() while its %s is under way on a communicator "
                            "with an asynchronous error: on a GPU the CUDA runtime's teardown at exit waits for that "
                            "kernel, which waits for its peers forever; abort every communicator first "
                            "(ncclCommAbort), then leave\n",
                            e->world_rank, emu_nccl_call_names[op.kind]);
                    fflush(stderr);
                    _exit(134);
                }
    pthread_mutex_unlock(&e->mutex);
}

// Starts the engine (and the checks' window) with the process's first
// communicator: every world rank at once (ncclCommInitRank is collective over
// MPI_COMM_WORLD here).
static void emu_nccl_engine_start() {
    EmuNcclEngine *e = new EmuNcclEngine;
    comm_mpi_lock();
    MPI_Comm_rank(MPI_COMM_WORLD, &e->world_rank);
    e->shared = emu_nccl_shared_open(emu_nccl_buffsize());
    comm_mpi_unlock();
    if (pthread_create(&e->thread, NULL, emu_nccl_engine_main, e) != 0) emu_fail("emulated NCCL: pthread_create");
    static bool registered;
    if (!registered) atexit(emu_nccl_at_exit);
    registered = true;
    emu_nccl_engine = e;
}

// Ends it with the last communicator (every world rank at once).
static void emu_nccl_engine_stop() {
    EmuNcclEngine *e = emu_nccl_engine;
    pthread_mutex_lock(&e->mutex);
    e->stop = true;
    pthread_mutex_unlock(&e->mutex);
    pthread_join(e->thread, NULL);
    comm_mpi_lock();
    if (e->shared) {  // every rank's operations complete: the watchdog's last look at their order
        MPI_Barrier(e->shared->node);
        if (e->world_rank == 0) emu_nccl_watch(e->shared, &e->watch, true);
    }
    emu_nccl_shared_close(e->shared);
    comm_mpi_unlock();
    emu_nccl_engine = NULL;
    delete e;
}

// Hands kernel k (its inputs read) to the engine: numbers it, gives its calls
// their place in their communicators' order, records them, queues it.
static void emu_nccl_engine_issue(const std::shared_ptr<EmuNcclKernel> &k) {
    EmuNcclEngine *e = emu_nccl_engine;
    pthread_mutex_lock(&e->mutex);
    k->number = e->kernels++;
    const char *fault = getenv("EMU_NCCL_FAULT");
    if (fault && !e->faulted) {
        if (strncmp(fault, "async-error:", 12) != 0) emu_fail("EMU_NCCL_FAULT is not async-error:RANK");
        if (atoi(fault + 12) == e->world_rank) {
            for (EmuNcclOp &op : k->ops) op.comm->async_error.store(2);  // ncclSystemError
            e->faulted = true;
        }
    }
    if (e->shared) emu_nccl_host_waits(e->shared, -1);
    for (EmuNcclOp &op : k->ops) {
        if (emu_nccl_local(op.comm)) continue;
        EmuNcclComm *c = op.comm;
        uint64_t index = op.kind == EMU_SEND ? c->sent[op.peer]++ : op.kind == EMU_RECV ? c->received[op.peer]++ : c->colls++;
        size_t bytes = op.kind == EMU_RECV ? op.out_bytes : op.in_bytes;
        op.rendezvous = op.kind == EMU_SEND && bytes > emu_nccl_buffsize();
        c->in_flight++;
        if (!e->shared) continue;
        EmuNcclCommInfo *info = c->info;
        if (op.kind == EMU_SEND && op.peer < EMU_NCCL_MAX_MEMBERS) info->sent[op.peer] = c->sent[op.peer];
        else if (op.kind == EMU_RECV && op.peer < EMU_NCCL_MAX_MEMBERS) info->received[op.peer] = c->received[op.peer];
        else info->colls = c->colls;
        auto sn = e->stream_numbers.emplace(op.stream, (int)e->stream_numbers.size()).first;
        int me = c->world[c->rank], other = emu_nccl_is_p2p(op.kind) ? c->world[op.peer] : -1;
        op.record = emu_nccl_log(e->shared, k->number, c->id, op.kind, op.kind == EMU_RECV ? other : me,
                                 op.kind == EMU_SEND ? other : me, index, bytes, sn->second, (int)k->ops.size(),
                                 op.rendezvous);
    }
    for (cudaStream_t s : k->streams) e->queues[s].push_back(k);
    pthread_mutex_unlock(&e->mutex);
}

// The host thread polls kernel k (an event query): twice in a row with no work
// queued in between, the watchdog takes it as waiting for k.
static void emu_nccl_engine_polled(const EmuNcclKernel *k) {
    static uint64_t last_kernel = UINT64_MAX, last_activity;
    EmuNcclEngine *e = emu_nccl_engine;
    if (!e || !e->shared) return;
    if (k->number == last_kernel && emu_host_activity == last_activity) emu_nccl_host_waits(e->shared, (int64_t)k->number);
    last_kernel = k->number;
    last_activity = emu_host_activity;
}

// The host thread waits for kernel k (a synchronisation that needs it).
static void emu_nccl_engine_wait(const EmuNcclKernel *k) {
    if (emu_nccl_finished(k)) return;
    EmuNcclEngine *e = emu_nccl_engine;
    if (e && e->shared) emu_nccl_host_waits(e->shared, (int64_t)k->number);
    for (long us = 5; !emu_nccl_finished(k); us = us < 200 ? us + 5 : 200) {
        struct timespec ts = {0, 1000L * us};
        nanosleep(&ts, NULL);
    }
    if (e && e->shared) emu_nccl_host_waits(e->shared, -1);
}

// Waits until no operation of c is under way (ncclCommDestroy flushes first).
static void emu_nccl_engine_flush(EmuNcclComm *c) {
    EmuNcclEngine *e = emu_nccl_engine;
    for (;;) {
        pthread_mutex_lock(&e->mutex);
        int left = c->in_flight;
        pthread_mutex_unlock(&e->mutex);
        if (!left) return;
        struct timespec ts = {0, 100000};
        nanosleep(&ts, NULL);
    }
}
#endif  // LLMC_MPI

#endif  // LLMC_NCCL_EMU_ENGINE_H
