// nccl.h for the emulated builds (tests/cuda_emulator.h; the Makefile puts
// tests/emu_include first on their include path, so llmc/comm_nccl.cuh's
// #include <nccl.h> lands here): the NCCL calls comm_nccl.cuh makes, over MPI
// between the ranks of an mpirun job, as strict as NCCL's documentation
// (docs.nvidia.com/deeplearning/nccl/user-guide/docs/, cited by page):
//   - stream semantics (usage/streams.html): a call is queued on its stream; a
//     kernel (one call, or a group's calls) takes its input once the work its
//     stream was given before it is ready (through the cudaStreamWaitEvent
//     comm_nccl.cuh queues, the compute stream up to the point the buffer was
//     ready: a missing wait shows as stale data), and its result reaches the
//     output buffer only when the stream reaches the kernel's completion, i.e.
//     when something synchronises with that stream, so a reader that does not
//     wait for its event reads the old contents; when the stream reaches it,
//     its input must still be what it was (NCCL reads it while it runs): a
//     writer that did not wait for the operation's event fails the test.
//   - the kernels themselves run as a GPU runs them, on their own, one after
//     another on a stream, and wait as NCCL's do (tests/nccl_emu_engine.h): a
//     receive until its send has started, a send of more than NCCL_BUFFSIZE
//     bytes until its receive has (usage/p2p.html: "Point-to-point calls
//     within a group will be blocking until that group of calls completes"),
//     a collective until every member has started it. So two ranks that each
//     send before they receive, ungrouped, deadlock here as on a GPU, and the
//     watchdog (tests/nccl_emu_checks.h) reports it in one line naming the
//     ranks and the calls.
//   - group calls (usage/groups.html, api/group.html): between ncclGroupStart
//     and ncclGroupEnd nothing is queued (an event recorded then does not
//     cover the calls); ncclGroupEnd queues them as one kernel whose calls
//     start together, so they "progress independently ... should never block
//     each other" (p2p.html). Groups nest; at most 2048 calls in one.
//   - several communicators: operations issued in different orders on ranks
//     that share communicators are reported (nccl_emu_checks.h).
//   - ncclCommGetAsyncError reports an asynchronous error (EMU_NCCL_FAULT
//     plants one: tests/nccl_emu_engine.h), ncclCommAbort drops a
//     communicator's kernels (usage/communicators.html, "Error handling and
//     communicator abort"); ncclCommDestroy first waits for its operations.
// ncclCommInitRank groups ranks by unique id with MPI_Comm_split over
// MPI_COMM_WORLD, so every world rank must create its communicators in the
// same order (comm_nccl_init does); on a process without MPI only one-rank
// communicators exist (their calls are copies). Sums in fp32 and fp64; bf16
// only moves. MPI calls take comm.h's lock (comm_mpi_lock), as comm.h's own do.
#ifndef LLMC_NCCL_EMULATOR_H
#define LLMC_NCCL_EMULATOR_H

#ifndef LLMC_CUDA_EMULATOR_H
#error "tests/emu_include/nccl.h is the emulated builds' NCCL (include tests/cuda_emulator.h first)"
#endif
#include <time.h>

#include "llmc/comm.h"  // comm_mpi_lock, CommDType
#include "tests/nccl_emu_engine.h"

// (the values of NCCL's nccl.h)
typedef enum {
    ncclSuccess = 0,
    ncclUnhandledCudaError = 1,
    ncclSystemError = 2,
    ncclInternalError = 3,
    ncclInvalidArgument = 4,
    ncclInvalidUsage = 5,
    ncclRemoteError = 6,
    ncclInProgress = 7
} ncclResult_t;
typedef enum { ncclFloat32 = 7, ncclFloat64 = 8, ncclBfloat16 = 9 } ncclDataType_t;
typedef enum { ncclSum = 0 } ncclRedOp_t;
typedef struct { char internal[128]; } ncclUniqueId;
typedef EmuNcclComm *ncclComm_t;

// communicators made and not yet destroyed in this process (tests/test_comm_nccl.cu
// counts them: one per distinct set of ranks, none for a group of one rank)
static int emu_nccl_live_comms;
static int emu_nccl_comms_made;

static inline const char *ncclGetErrorString(ncclResult_t r) {
    switch (r) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error";
    case ncclSystemError: return "unhandled system error";
    case ncclInternalError: return "internal error";
    case ncclInvalidArgument: return "invalid argument";
    case ncclInvalidUsage: return "invalid usage";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    }
    return "unknown result code";
}
// comm.h's name for the type (its element size, its MPI type)
static inline CommDType emu_nccl_comm_dtype(ncclDataType_t t) {
    return t == ncclFloat64 ? COMM_F64 : t == ncclFloat32 ? COMM_F32 : COMM_BF16;
}

// A fresh id: this process's pid, its count of ids and the time.
static inline ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
    static uint64_t made;
    memset(id, 0, sizeof(*id));
    uint64_t words[3] = {(uint64_t)getpid(), ++made, (uint64_t)time(NULL)};
    memcpy(id->internal, words, sizeof(words));
    return ncclSuccess;
}

static inline ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank) {
    if (nranks < 1 || rank < 0 || rank >= nranks) return ncclInvalidArgument;
    EmuNcclComm *c = new EmuNcclComm;
    c->rank = rank;
    c->size = nranks;
    c->number = ++emu_nccl_comms_made;
    uint64_t h = 1469598103934665603ull;  // FNV-1a of the id: the split colour, the checks' name for it
    for (size_t i = 0; i < sizeof(id.internal); i++) h = (h ^ (unsigned char)id.internal[i]) * 1099511628211ull;
    c->id = h;
    c->sent.assign(nranks, 0);
    c->received.assign(nranks, 0);
#ifdef LLMC_MPI
    c->mpi = MPI_COMM_NULL;
    c->info = NULL;
    int mpi_on = 0;
    MPI_Initialized(&mpi_on);
    if (mpi_on) {
        if (!emu_nccl_engine) emu_nccl_engine_start();  // (the first communicator: every world rank is here)
        comm_mpi_lock();
        int rc = MPI_Comm_split(MPI_COMM_WORLD, (int)(h & 0x3fffffff), rank, &c->mpi);
        int got = 0;
        if (rc == MPI_SUCCESS) MPI_Comm_size(c->mpi, &got);
        if (got == nranks) {  // its members' world ranks
            MPI_Group mine, world;
            MPI_Comm_group(c->mpi, &mine);
            MPI_Comm_group(MPI_COMM_WORLD, &world);
            std::vector<int> ranks(nranks);
            c->world.resize(nranks);
            for (int i = 0; i < nranks; i++) ranks[i] = i;
            MPI_Group_translate_ranks(mine, nranks, ranks.data(), world, c->world.data());
            MPI_Group_free(&mine);
            MPI_Group_free(&world);
        }
        comm_mpi_unlock();
        if (got != nranks) emu_fail("ncclCommInitRank: the ranks sharing the unique id are not nranks");
        if (nranks == 1) {  // its calls are copies
            comm_mpi_lock();
            MPI_Comm_free(&c->mpi);
            comm_mpi_unlock();
            c->mpi = MPI_COMM_NULL;
        } else if (emu_nccl_engine->shared) {
            pthread_mutex_lock(&emu_nccl_engine->mutex);
            c->info = emu_nccl_comm_info(emu_nccl_engine->shared, c->id, c->number, c->world);
            pthread_mutex_unlock(&emu_nccl_engine->mutex);
        }
    } else if (nranks > 1) {
        emu_fail("ncclCommInitRank: more than one rank without MPI");
    }
#else
    if (nranks > 1) emu_fail("ncclCommInitRank: more than one rank in a build without MPI");
#endif
    *comm = c;
    emu_nccl_live_comms++;
    return ncclSuccess;
}

// Waits for the communicator's operations, then frees it (usage/communicators.html:
// ncclCommDestroy finalizes first, "flushing" what was issued).
static inline ncclResult_t ncclCommDestroy(ncclComm_t comm) {
#ifdef LLMC_MPI
    if (emu_nccl_engine) {
        if (comm->mpi != MPI_COMM_NULL) {
            emu_nccl_engine_flush(comm);
            pthread_mutex_lock(&emu_nccl_engine->mutex);
            if (comm->info) emu_nccl_comm_info_free(emu_nccl_engine->shared, comm->info);
            pthread_mutex_unlock(&emu_nccl_engine->mutex);
            comm_mpi_lock();
            MPI_Comm_free(&comm->mpi);
            comm_mpi_unlock();
        }
        if (emu_nccl_live_comms == 1) emu_nccl_engine_stop();  // (the last one: every world rank is here)
    }
#endif
    delete comm;
    emu_nccl_live_comms--;
    return ncclSuccess;
}

// Aborts every operation of the communicator and leaves it unusable
// (usage/communicators.html: the way to end on an error; it does not wait for
// peers). Its memory is kept (the engine may still name it).
static inline ncclResult_t ncclCommAbort(ncclComm_t comm) {
    comm->aborted.store(true);
    emu_nccl_live_comms--;
    return ncclSuccess;
}

static inline ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *e) {
    *e = (ncclResult_t)comm->async_error.load();
    return ncclSuccess;
}

// ---------------------------------------------------------------------------
// calls and kernels

static int emu_nccl_group_depth;
static std::vector<EmuNcclOp> emu_nccl_group_calls;  // since the outermost ncclGroupStart

// Queues kernel k's completion on stream s: when the stream reaches it (k
// complete), k's inputs on s must be unchanged, then its results are written.
static void emu_nccl_enqueue_completion(const std::shared_ptr<EmuNcclKernel> &k, cudaStream_t s) {
    auto finish = [k, s] {
#ifdef LLMC_MPI
        emu_nccl_engine_wait(k.get());
#endif
        if (k->state.load() == EMU_NCCL_ABORTED) return;
        for (const EmuNcclOp &op : k->ops)  // NCCL reads its input while it runs: rewritten since, it was sent torn
            if (op.stream == s && op.in_bytes && memcmp(op.send, op.in->data(), op.in_bytes) != 0)
                emu_fail("emulated NCCL: an operation's send buffer was rewritten before the operation completed "
                         "on its stream (a missing wait for its event)");
        for (const EmuNcclOp &op : k->ops)
            if (op.stream == s && op.writes && op.out_bytes) memcpy(op.recv, op.out->data(), op.out_bytes);
    };
    auto ready = [k] {
        if (emu_nccl_finished(k.get())) return true;
#ifdef LLMC_MPI
        emu_nccl_engine_polled(k.get());
#endif
        return false;
    };
    emu_enqueue_op(s, EmuOp{finish, nullptr, 0, true, ready});
}

// One kernel: its streams ready for it, its inputs read, its calls on
// one-rank communicators done (copies), the rest handed to the engine.
static ncclResult_t emu_nccl_issue(std::vector<EmuNcclOp> calls) {
    std::shared_ptr<EmuNcclKernel> k(new EmuNcclKernel);
    k->ops = std::move(calls);
    for (const EmuNcclOp &op : k->ops)
        if (std::find(k->streams.begin(), k->streams.end(), op.stream) == k->streams.end())
            k->streams.push_back(op.stream);
    // the input ready: what the streams wait for has run (earlier kernels may still be under way)
    for (cudaStream_t s : k->streams) {
        if (s) emu_stream_ready_for_start(s);
        else emu_sync_blocking_streams();
    }
    bool remote = false;
    for (EmuNcclOp &op : k->ops) {
        op.in.reset(new std::vector<unsigned char>(op.in_bytes + 1));
        op.out.reset(new std::vector<unsigned char>(op.out_bytes + 1));
        if (op.in_bytes) memcpy(op.in->data(), op.send, op.in_bytes);
        if (emu_nccl_local(op.comm)) {  // one rank: every operation is a copy
            memcpy(op.out->data(), op.in->data(), op.out_bytes);
            op.done = true;
        } else {
            remote = true;
        }
    }
#ifdef LLMC_MPI
    if (remote) emu_nccl_engine_issue(k);
#endif
    if (!remote) k->state.store(EMU_NCCL_COMPLETE);
    for (cudaStream_t s : k->streams) emu_nccl_enqueue_completion(k, s);
    return ncclSuccess;
}

// One call: checked, then issued, or kept for ncclGroupEnd.
static ncclResult_t emu_nccl_call(EmuNcclKind kind, const void *send, void *recv, size_t count, ncclDataType_t t,
                                  int root_or_peer, ncclComm_t comm, cudaStream_t stream) {
    const size_t es = comm_dtype_size(emu_nccl_comm_dtype(t)), n = comm->size;
    const bool sums = kind == EMU_ALL_REDUCE || kind == EMU_REDUCE_SCATTER || kind == EMU_REDUCE;
    if (sums && t == ncclBfloat16) emu_fail("emulated NCCL: bf16 sums are not emulated");
    if (comm->aborted.load()) emu_fail("emulated NCCL: a call on an aborted communicator");
    size_t in_elems = 0, out_elems = 0;  // of this rank
    bool writes = true;
    switch (kind) {
    case EMU_ALL_REDUCE: in_elems = out_elems = count; break;
    case EMU_REDUCE_SCATTER: in_elems = count * n; out_elems = count; break;
    case EMU_ALL_GATHER: in_elems = count; out_elems = count * n; break;
    case EMU_REDUCE: in_elems = count; out_elems = count; writes = comm->rank == root_or_peer; break;
    case EMU_BROADCAST: in_elems = comm->rank == root_or_peer ? count : 0; out_elems = count; break;
    case EMU_SEND: in_elems = count; out_elems = 0; writes = false; break;
    case EMU_RECV: in_elems = 0; out_elems = count; break;
    }
    if (in_elems && !emu_is_device(send, in_elems * es)) emu_fail("emulated NCCL: the send buffer is not device memory");
    if (writes && out_elems && !emu_is_device(recv, out_elems * es))
        emu_fail("emulated NCCL: the receive buffer is not device memory");
    if (root_or_peer < 0 || root_or_peer >= comm->size) return ncclInvalidArgument;
    if (emu_nccl_is_p2p(kind) && emu_nccl_local(comm)) emu_fail("emulated NCCL: send/recv on a one-rank communicator");
    EmuNcclOp op;
    op.kind = kind, op.comm = comm, op.peer = root_or_peer, op.count = count, op.type = emu_nccl_comm_dtype(t);
    op.send = send, op.recv = recv, op.in_bytes = in_elems * es, op.out_bytes = out_elems * es;
    op.writes = writes, op.stream = stream;
    if (emu_nccl_group_depth == 0) return emu_nccl_issue({op});
    if (emu_nccl_group_calls.size() == 2048) return ncclInvalidUsage;  // (api/group.html: at most 2048 in a group)
    emu_nccl_group_calls.push_back(op);
    return ncclSuccess;
}

static inline ncclResult_t ncclGroupStart() {
    emu_nccl_group_depth++;
    return ncclSuccess;
}
static inline ncclResult_t ncclGroupEnd() {
    if (emu_nccl_group_depth == 0) return ncclInvalidUsage;
    if (--emu_nccl_group_depth > 0 || emu_nccl_group_calls.empty()) return ncclSuccess;
    std::vector<EmuNcclOp> calls;
    calls.swap(emu_nccl_group_calls);
    return emu_nccl_issue(std::move(calls));
}

static inline ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t t, ncclRedOp_t,
                                         ncclComm_t comm, cudaStream_t s) {
    return emu_nccl_call(EMU_ALL_REDUCE, send, recv, count, t, 0, comm, s);
}
static inline ncclResult_t ncclReduceScatter(const void *send, void *recv, size_t count, ncclDataType_t t,
                                             ncclRedOp_t, ncclComm_t comm, cudaStream_t s) {
    return emu_nccl_call(EMU_REDUCE_SCATTER, send, recv, count, t, 0, comm, s);
}
static inline ncclResult_t ncclAllGather(const void *send, void *recv, size_t count, ncclDataType_t t, ncclComm_t comm,
                                         cudaStream_t s) {
    return emu_nccl_call(EMU_ALL_GATHER, send, recv, count, t, 0, comm, s);
}
static inline ncclResult_t ncclReduce(const void *send, void *recv, size_t count, ncclDataType_t t, ncclRedOp_t,
                                      int root, ncclComm_t comm, cudaStream_t s) {
    return emu_nccl_call(EMU_REDUCE, send, recv, count, t, root, comm, s);
}
static inline ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, ncclDataType_t t, int root,
                                         ncclComm_t comm, cudaStream_t s) {
    return emu_nccl_call(EMU_BROADCAST, send, recv, count, t, root, comm, s);
}
static inline ncclResult_t ncclSend(const void *send, size_t count, ncclDataType_t t, int peer, ncclComm_t comm,
                                    cudaStream_t s) {
    return emu_nccl_call(EMU_SEND, send, NULL, count, t, peer, comm, s);
}
static inline ncclResult_t ncclRecv(void *recv, size_t count, ncclDataType_t t, int peer, ncclComm_t comm,
                                    cudaStream_t s) {
    return emu_nccl_call(EMU_RECV, NULL, recv, count, t, peer, comm, s);
}

#endif  // LLMC_NCCL_EMULATOR_H
