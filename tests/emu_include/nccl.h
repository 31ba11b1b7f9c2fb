// nccl.h for the emulated builds (tests/cuda_emulator.h; the Makefile puts
// tests/emu_include first on their include path, so llmc/comm_nccl.cuh's
// #include <nccl.h> lands here): the NCCL calls
// comm_nccl.cuh makes, over MPI between the ranks of an mpirun job, with
// NCCL's stream semantics on the emulated streams:
//   - an operation queued on a stream first runs what the stream waits for
//     (through the cudaStreamWaitEvent comm_nccl.cuh queues, the compute
//     stream up to the point the buffer was ready: a missing wait shows as
//     stale data) and its other earlier work, but leaves earlier operations
//     under way; then it copies its input aside and starts the matching
//     nonblocking MPI call (every rank starts its collectives in program order,
//     so none waits for a rank that has not started);
//   - its result reaches the output buffer only when the stream reaches the
//     operation, i.e. when something synchronises with that stream (an event
//     query, cudaStreamWaitEvent on another stream, a synchronize), so a reader
//     that does not wait for the event reads the old contents.
//   - when the stream reaches it, its input must still be what it was at the
//     start (NCCL reads it while it runs): a writer that did not wait for the
//     operation's event fails the test.
// ncclCommInitRank groups ranks by unique id with MPI_Comm_split over
// MPI_COMM_WORLD, so every world rank must create its communicators in the
// same order (comm_nccl_init does); on a process without MPI only
// one-rank communicators exist. Sums in fp32 and fp64; bf16 only moves. MPI
// calls take comm.h's lock (comm_mpi_lock), as comm.h's own do.
#ifndef LLMC_NCCL_EMULATOR_H
#define LLMC_NCCL_EMULATOR_H

#ifndef LLMC_CUDA_EMULATOR_H
#error "tests/emu_include/nccl.h is the emulated builds' NCCL (include tests/cuda_emulator.h first)"
#endif
#include <time.h>

#include "llmc/comm.h"  // comm_mpi_lock, CommDType

typedef enum { ncclSuccess = 0, ncclInvalidArgument = 4, ncclInvalidUsage = 5 } ncclResult_t;
typedef enum { ncclFloat32 = 7, ncclFloat64 = 8, ncclBfloat16 = 9 } ncclDataType_t;
typedef enum { ncclSum = 0 } ncclRedOp_t;
typedef struct { char internal[128]; } ncclUniqueId;

struct EmuNcclComm {
    int rank, size;
#ifdef LLMC_MPI
    MPI_Comm mpi;
#endif
};
typedef EmuNcclComm *ncclComm_t;
// communicators made and not yet destroyed in this process (tests/test_comm_nccl.cu
// counts them: one per distinct set of ranks, none for a group of one rank)
static int emu_nccl_live_comms;

static inline const char *ncclGetErrorString(ncclResult_t r) { return r == ncclSuccess ? "no error" : "invalid usage"; }
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
#ifdef LLMC_MPI
    int mpi_on = 0;
    MPI_Initialized(&mpi_on);
    if (mpi_on) {
        uint64_t h = 1469598103934665603ull;  // FNV-1a of the id: the split colour
        for (size_t i = 0; i < sizeof(id.internal); i++) h = (h ^ (unsigned char)id.internal[i]) * 1099511628211ull;
        comm_mpi_lock();
        int rc = MPI_Comm_split(MPI_COMM_WORLD, (int)(h & 0x3fffffff), rank, &c->mpi);
        comm_mpi_unlock();
        int got = 0;
        if (rc == MPI_SUCCESS) MPI_Comm_size(c->mpi, &got);
        if (got != nranks) emu_fail("ncclCommInitRank: the ranks sharing the unique id are not nranks");
    } else if (nranks > 1) {
        emu_fail("ncclCommInitRank: more than one rank without MPI");
    } else {
        c->mpi = MPI_COMM_NULL;
    }
#else
    (void)id;  // one-rank communicators need no id to find their peers
    if (nranks > 1) emu_fail("ncclCommInitRank: more than one rank in a build without MPI");
#endif
    *comm = c;
    emu_nccl_live_comms++;
    return ncclSuccess;
}
static inline ncclResult_t ncclCommDestroy(ncclComm_t comm) {
#ifdef LLMC_MPI
    if (comm->mpi != MPI_COMM_NULL) {
        comm_mpi_lock();
        MPI_Comm_free(&comm->mpi);
        comm_mpi_unlock();
    }
#endif
    delete comm;
    emu_nccl_live_comms--;
    return ncclSuccess;
}
static inline ncclResult_t ncclCommGetAsyncError(ncclComm_t, ncclResult_t *e) {
    *e = ncclSuccess;
    return ncclSuccess;
}
static inline ncclResult_t ncclGroupStart() { return ncclSuccess; }  // every call below starts at once
static inline ncclResult_t ncclGroupEnd() { return ncclSuccess; }

// One operation: the input copied aside, the MPI call started on the copies;
// on the stream, its completion writes the output.
enum EmuNcclKind { EMU_ALL_REDUCE, EMU_REDUCE_SCATTER, EMU_ALL_GATHER, EMU_REDUCE, EMU_BROADCAST, EMU_SEND, EMU_RECV };
static ncclResult_t emu_nccl_op(EmuNcclKind kind, const void *send, void *recv, size_t count, ncclDataType_t t,
                                int root_or_peer, ncclComm_t comm, cudaStream_t stream) {
    const size_t es = comm_dtype_size(emu_nccl_comm_dtype(t)), n = comm->size;
    const bool sums = kind == EMU_ALL_REDUCE || kind == EMU_REDUCE_SCATTER || kind == EMU_REDUCE;
    if (sums && t == ncclBfloat16) emu_fail("emulated NCCL: bf16 sums are not emulated");
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
    // the input ready: what the stream waits for has run (earlier operations may still be under way)
    if (stream) emu_stream_ready_for_start(stream);
    else emu_sync_blocking_streams();
    std::shared_ptr<std::vector<unsigned char>> in(new std::vector<unsigned char>(in_elems * es + 1)),
        out(new std::vector<unsigned char>(out_elems * es + 1));
    if (in_elems) memcpy(in->data(), send, in_elems * es);
#ifdef LLMC_MPI
    std::shared_ptr<MPI_Request> req(new MPI_Request(MPI_REQUEST_NULL));
    if (comm->mpi != MPI_COMM_NULL) {
        MPI_Datatype dt = mpi_move_dtype(emu_nccl_comm_dtype(t));  // (bf16 only moves: checked above)
        int c = (int)count;
        comm_mpi_lock();
        int rc = MPI_SUCCESS;
        switch (kind) {
        case EMU_ALL_REDUCE: rc = MPI_Iallreduce(in->data(), out->data(), c, dt, MPI_SUM, comm->mpi, req.get()); break;
        case EMU_REDUCE_SCATTER:
            rc = MPI_Ireduce_scatter_block(in->data(), out->data(), c, dt, MPI_SUM, comm->mpi, req.get());
            break;
        case EMU_ALL_GATHER: rc = MPI_Iallgather(in->data(), c, dt, out->data(), c, dt, comm->mpi, req.get()); break;
        case EMU_REDUCE:
            rc = MPI_Ireduce(in->data(), out->data(), c, dt, MPI_SUM, root_or_peer, comm->mpi, req.get());
            break;
        case EMU_BROADCAST:
            if (comm->rank == root_or_peer) memcpy(out->data(), in->data(), count * es);
            rc = MPI_Ibcast(out->data(), c, dt, root_or_peer, comm->mpi, req.get());
            break;
        case EMU_SEND: rc = MPI_Isend(in->data(), c, dt, root_or_peer, 0, comm->mpi, req.get()); break;
        case EMU_RECV: rc = MPI_Irecv(out->data(), c, dt, root_or_peer, 0, comm->mpi, req.get()); break;
        }
        comm_mpi_unlock();
        if (rc != MPI_SUCCESS) emu_fail("emulated NCCL: an MPI call failed");
    } else
#endif
    {
        if (kind == EMU_SEND || kind == EMU_RECV) emu_fail("emulated NCCL: send/recv on a one-rank communicator");
        memcpy(out->data(), in->data(), out_elems * es);  // one rank: every operation is a copy
    }
    emu_enqueue(stream, [=] {
#ifdef LLMC_MPI
        // polled under the lock, so that comm.h's progress thread runs between polls
        for (int done = *req == MPI_REQUEST_NULL; !done;) {
            comm_mpi_lock();
            MPI_Test(req.get(), &done, MPI_STATUS_IGNORE);
            comm_mpi_unlock();
            struct timespec ts = {0, 20000};
            if (!done) nanosleep(&ts, NULL);
        }
#endif
        // NCCL reads its input while it runs: input rewritten before the stream got here would have
        // been sent half old, half new (the writer did not wait for this operation's event)
        if (in_elems && memcmp(send, in->data(), in_elems * es) != 0)
            emu_fail("emulated NCCL: an operation's send buffer was rewritten before the operation completed "
                     "on its stream (a missing wait for its event)");
        if (writes && out_elems) memcpy(recv, out->data(), out_elems * es);
    }, true);
    return ncclSuccess;
}

static inline ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t t, ncclRedOp_t,
                                         ncclComm_t comm, cudaStream_t s) {
    return emu_nccl_op(EMU_ALL_REDUCE, send, recv, count, t, 0, comm, s);
}
static inline ncclResult_t ncclReduceScatter(const void *send, void *recv, size_t count, ncclDataType_t t,
                                             ncclRedOp_t, ncclComm_t comm, cudaStream_t s) {
    return emu_nccl_op(EMU_REDUCE_SCATTER, send, recv, count, t, 0, comm, s);
}
static inline ncclResult_t ncclAllGather(const void *send, void *recv, size_t count, ncclDataType_t t, ncclComm_t comm,
                                         cudaStream_t s) {
    return emu_nccl_op(EMU_ALL_GATHER, send, recv, count, t, 0, comm, s);
}
static inline ncclResult_t ncclReduce(const void *send, void *recv, size_t count, ncclDataType_t t, ncclRedOp_t,
                                      int root, ncclComm_t comm, cudaStream_t s) {
    return emu_nccl_op(EMU_REDUCE, send, recv, count, t, root, comm, s);
}
static inline ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, ncclDataType_t t, int root,
                                         ncclComm_t comm, cudaStream_t s) {
    return emu_nccl_op(EMU_BROADCAST, send, recv, count, t, root, comm, s);
}
static inline ncclResult_t ncclSend(const void *send, size_t count, ncclDataType_t t, int peer, ncclComm_t comm,
                                    cudaStream_t s) {
    return emu_nccl_op(EMU_SEND, send, NULL, count, t, peer, comm, s);
}
static inline ncclResult_t ncclRecv(void *recv, size_t count, ncclDataType_t t, int peer, ncclComm_t comm,
                                    cudaStream_t s) {
    return emu_nccl_op(EMU_RECV, NULL, recv, count, t, peer, comm, s);
}

#endif  // LLMC_NCCL_EMULATOR_H
