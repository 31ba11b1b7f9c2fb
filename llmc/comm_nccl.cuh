// comm_nccl.cuh: the NCCL backend of comm.h, on device buffers. For the GPU
// trainer: after comm_init (MPI, host groups), comm_nccl_init makes a device
// group for each host group -- same ranks, an NCCL communicator and a
// high-priority communication stream -- with the NCCL unique id sent from the
// group's rank 0 over the host group's MPI communicator. One communicator (and
// stream) per distinct set of ranks, not per group: groups of the same ranks
// in the same order (the world and data groups without tensor or pipeline
// parallelism) share one, and a group of one rank has none (its operations are
// copies on its stream). The device groups take the same comm_*_start /
// comm_wait calls as host groups.
//
// Streams: an operation first makes its communication stream wait for the
// compute stream (comm_nccl_set_compute_stream: everything queued there before
// the call is in the buffer), then runs on the communication stream and
// records an event. comm_wait polls that event against --comm-timeout;
// comm_stream_wait makes a stream wait for it without blocking the host.
// A batch (comm_batch_begin/end) is one ncclGroupStart/ncclGroupEnd: NCCL
// queues its calls on the streams only at ncclGroupEnd, so the batch's events
// are recorded after it (an event recorded inside the group would not cover
// the calls).
// Order across communicators: NCCL wants every rank to issue its operations
// on communicators that share ranks in one order (docs/distributed.md, "The
// order of NCCL operations"): the trainer issues them from one thread, in the
// order of its step, which is the same on every rank.
// Watchdog: a stream that waits for a collective on the device can hold the
// host in a synchronisation on that stream (a loss read back, the gradient
// norm) before any comm_wait sees the deadline, and a collective a dead or
// hung rank never joins never completes. So a host thread (with
// --comm-timeout > 0) keeps every operation in flight with its start time and
// ends the job, with comm_wait's message, when one outlives the timeout; it
// also asks every communicator for an asynchronous error (a failed network
// connection: NCCL's kernels then wait forever).
// Ending on an error (a timeout, an asynchronous error): every communicator is
// aborted (ncclCommAbort, NCCL's way: its kernels stop waiting for peers, so
// the CUDA runtime's teardown does not wait for them), then MPI_Abort or _exit;
// never exit(), whose teardown would wait.
//
// Uneven reduce-scatter / all-gather counts (padded ZeRO shards need none,
// but a range of the flat buffer does) become grouped ncclReduce /
// ncclBroadcast calls, one per rank.
#ifndef LLMC_COMM_NCCL_CUH
#define LLMC_COMM_NCCL_CUH

#include <nccl.h>
#include <pthread.h>

#include "comm.h"           // defines: COMM_F64, COMM_F32, CommGroup, Comm, ...
#include "cuda_common.cuh"  // defines: CUDA_CHECK, NCCL_CHECK

typedef struct {
    ncclComm_t nccl;         // NULL: a group of one rank
    cudaStream_t stream;     // communication stream (shared with the groups of the same ranks)
    cudaStream_t compute;    // the stream producing the buffers (0: legacy default stream)
    float *scratch;          // one device float for barriers
    int owner;               // 1: this group made nccl, stream and scratch (and frees them)
} NcclGroup;

static inline ncclDataType_t nccl_dtype(CommDType t) {
    return t == COMM_F64 ? ncclFloat64 : t == COMM_F32 ? ncclFloat32 : ncclBfloat16;
}

// ---------------------------------------------------------------------------
// watchdog: the operations in flight, registered when queued and removed when
// a test finds them complete (before their event is destroyed)

typedef struct {
    cudaEvent_t done;
    const char *op;
    size_t bytes;
    const CommGroup *group;
    double start;  // wall_seconds() when queued
} NcclInFlight;

typedef struct {
    pthread_mutex_t mutex;  // guards the table below and the events in it
    NcclInFlight *ops;
    int num, cap;
    pthread_t thread;
    int running, stop;
    int device;             // the trainer's GPU (a thread's current device is its own)
    Comm *comm;
} NcclWatchdog;
static NcclWatchdog nccl_watchdog = {PTHREAD_MUTEX_INITIALIZER, NULL, 0, 0, pthread_t(), 0, 0, 0, NULL};

static void nccl_abort(Comm *c, int code);
static void nccl_check_async_errors(Comm *c);

static void *nccl_watchdog_main(void *arg) {
    NcclWatchdog *w = (NcclWatchdog *)arg;
    CUDA_CHECK(cudaSetDevice(w->device));
    const double timeout = w->comm->timeout_s;
    struct timespec nap = {0, timeout < 2.0 ? 10000000 : 100000000};  // 10 or 100 ms between looks
    for (;;) {
        nanosleep(&nap, NULL);
        pthread_mutex_lock(&w->mutex);
        if (w->stop) {
            pthread_mutex_unlock(&w->mutex);
            return NULL;
        }
        double now = wall_seconds();
        for (int i = 0; i < w->num; i++) {
            NcclInFlight *f = &w->ops[i];
            if (now - f->start <= timeout || cudaEventQuery(f->done) != cudaErrorNotReady) continue;
            comm_report_timeout(w->comm, f->op, f->bytes, f->group);
            nccl_abort(w->comm, 3);  // does not return
        }
        (void)cudaGetLastError();  // "not ready" is this thread's last error now
        if (w->num > 0) nccl_check_async_errors(w->comm);
        pthread_mutex_unlock(&w->mutex);
    }
}

static void nccl_watchdog_add(const NcclInFlight *f) {
    NcclWatchdog *w = &nccl_watchdog;
    if (!w->running) return;
    pthread_mutex_lock(&w->mutex);
    if (w->num == w->cap) {
        w->cap = w->cap ? 2 * w->cap : 64;
        w->ops = (NcclInFlight *)realloc(w->ops, sizeof(NcclInFlight) * (size_t)w->cap);
        CHECK(w->ops != NULL, "out of memory");
    }
    w->ops[w->num] = *f;
    w->ops[w->num++].start = wall_seconds();
    pthread_mutex_unlock(&w->mutex);
}

static void nccl_watchdog_remove(cudaEvent_t done) {
    NcclWatchdog *w = &nccl_watchdog;
    if (!w->running) return;
    pthread_mutex_lock(&w->mutex);
    for (int i = 0; i < w->num; i++)
        if (w->ops[i].done == done) {
            w->ops[i] = w->ops[--w->num];
            break;
        }
    pthread_mutex_unlock(&w->mutex);
}

static void nccl_watchdog_start(Comm *c) {
    NcclWatchdog *w = &nccl_watchdog;
    if (c->timeout_s <= 0 || w->running) return;
    w->comm = c;
    CUDA_CHECK(cudaGetDevice(&w->device));
    w->stop = 0;
    CHECK(pthread_create(&w->thread, NULL, nccl_watchdog_main, w) == 0, "pthread_create failed");
    w->running = 1;
}

static void nccl_watchdog_stop(void) {
    NcclWatchdog *w = &nccl_watchdog;
    if (!w->running) return;
    pthread_mutex_lock(&w->mutex);
    w->stop = 1;
    pthread_mutex_unlock(&w->mutex);
    pthread_join(w->thread, NULL);
    w->running = 0;
    free(w->ops);
    w->ops = NULL;
    w->num = w->cap = 0;
}

// ---------------------------------------------------------------------------
// operations

// The communication stream waits for everything already queued on the compute stream.
static inline NcclGroup *nccl_begin(CommGroup *g) {
    NcclGroup *ng = (NcclGroup *)g->impl;
    cudaEvent_t ready;
    CUDA_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventRecord(ready, ng->compute));
    CUDA_CHECK(cudaStreamWaitEvent(ng->stream, ready, 0));
    CUDA_CHECK(cudaEventDestroy(ready));
    return ng;
}

// The operations of the open batch whose events wait for its end, and its depth.
typedef struct {
    NcclInFlight op;
    cudaStream_t stream;
} NcclBatched;
static NcclBatched *nccl_batched;
static int nccl_num_batched, nccl_cap_batched, nccl_batch_depth;

static inline void nccl_record(const NcclInFlight *f, cudaStream_t stream) {
    CUDA_CHECK(cudaEventRecord(f->done, stream));
    nccl_watchdog_add(f);
}

// r's event, recorded on the communication stream after the call (in a batch: after the batch).
static inline void nccl_end(NcclGroup *ng, CommRequest *r) {
    cudaEvent_t done;
    CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    r->impl = (void *)done;
    NcclInFlight f = {done, r->op, r->bytes, r->group, 0.0};
    if (nccl_batch_depth == 0) {
        nccl_record(&f, ng->stream);
        return;
    }
    if (nccl_num_batched == nccl_cap_batched) {
        nccl_cap_batched = nccl_cap_batched ? 2 * nccl_cap_batched : 16;
        nccl_batched = (NcclBatched *)realloc(nccl_batched, sizeof(NcclBatched) * (size_t)nccl_cap_batched);
        CHECK(nccl_batched != NULL, "out of memory");
    }
    NcclBatched *b = &nccl_batched[nccl_num_batched++];
    b->op = f;
    b->stream = ng->stream;
}

static void nccl_batch_begin(void) {
    NCCL_CHECK(ncclGroupStart());
    nccl_batch_depth++;
}

// NCCL queues the group's calls now; then their events.
static void nccl_batch_end(void) {
    NCCL_CHECK(ncclGroupEnd());
    if (--nccl_batch_depth > 0) return;
    for (int i = 0; i < nccl_num_batched; i++) nccl_record(&nccl_batched[i].op, nccl_batched[i].stream);
    nccl_num_batched = 0;
}

static inline int nccl_all_equal(const size_t *counts, int n) {
    for (int i = 1; i < n; i++)
        if (counts[i] != counts[0]) return 0;
    return 1;
}

// A group of one rank: its piece is the whole buffer (copied on the
// communication stream, so the ordering is that of a collective).
static inline void nccl_single_copy(NcclGroup *ng, void *dst, const void *src, size_t n, CommDType t) {
    if (src != dst)
        CUDA_CHECK(cudaMemcpyAsync(dst, src, n * comm_dtype_size(t), cudaMemcpyDeviceToDevice, ng->stream));
}

static void nccl_all_reduce(CommGroup *g, void *buf, size_t n, CommDType t, CommRequest *r) {
    NcclGroup *ng = nccl_begin(g);
    if (ng->nccl) NCCL_CHECK(ncclAllReduce(buf, buf, n, nccl_dtype(t), ncclSum, ng->nccl, ng->stream));
    nccl_end(ng, r);
}

static void nccl_reduce_scatter(CommGroup *g, const void *send, void *recv, const size_t *counts, CommDType t,
                                CommRequest *r) {
    NcclGroup *ng = nccl_begin(g);
    if (!ng->nccl) {
        nccl_single_copy(ng, recv, send, counts[0], t);
    } else if (nccl_all_equal(counts, g->size)) {
        NCCL_CHECK(ncclReduceScatter(send, recv, counts[0], nccl_dtype(t), ncclSum, ng->nccl, ng->stream));
    } else {
        size_t displ = 0, es = comm_dtype_size(t);
        NCCL_CHECK(ncclGroupStart());
        for (int root = 0; root < g->size; root++) {
            NCCL_CHECK(ncclReduce((const char *)send + displ * es, recv, counts[root], nccl_dtype(t), ncclSum, root,
                                  ng->nccl, ng->stream));
            displ += counts[root];
        }
        NCCL_CHECK(ncclGroupEnd());
    }
    nccl_end(ng, r);
}

static void nccl_all_gather(CommGroup *g, const void *send, void *recv, const size_t *counts, CommDType t,
                            CommRequest *r) {
    NcclGroup *ng = nccl_begin(g);
    size_t es = comm_dtype_size(t), mine = 0;
    for (int i = 0; i < g->rank; i++) mine += counts[i];
    const void *src = send ? send : (const char *)recv + mine * es;
    if (!ng->nccl) {
        nccl_single_copy(ng, recv, src, counts[0], t);
    } else if (nccl_all_equal(counts, g->size)) {
        NCCL_CHECK(ncclAllGather(src, recv, counts[0], nccl_dtype(t), ng->nccl, ng->stream));
    } else {
        size_t displ = 0;
        NCCL_CHECK(ncclGroupStart());
        for (int root = 0; root < g->size; root++) {
            NCCL_CHECK(ncclBroadcast(src, (char *)recv + displ * es, counts[root], nccl_dtype(t), root, ng->nccl,
                                     ng->stream));
            displ += counts[root];
        }
        NCCL_CHECK(ncclGroupEnd());
    }
    nccl_end(ng, r);
}

static void nccl_broadcast(CommGroup *g, void *buf, size_t n, CommDType t, int root, CommRequest *r) {
    NcclGroup *ng = nccl_begin(g);
    if (ng->nccl) NCCL_CHECK(ncclBroadcast(buf, buf, n, nccl_dtype(t), root, ng->nccl, ng->stream));
    nccl_end(ng, r);
}

// NCCL orders point-to-point messages by stream order; the tag is not used.
static void nccl_send(CommGroup *g, const void *buf, size_t n, CommDType t, int peer, int tag, CommRequest *r) {
    (void)tag;
    if (g->size == 1) DIE("send to rank %d in a group of one process", peer);
    NcclGroup *ng = nccl_begin(g);
    NCCL_CHECK(ncclSend(buf, n, nccl_dtype(t), peer, ng->nccl, ng->stream));
    nccl_end(ng, r);
}

static void nccl_recv(CommGroup *g, void *buf, size_t n, CommDType t, int peer, int tag, CommRequest *r) {
    (void)tag;
    if (g->size == 1) DIE("recv from rank %d in a group of one process", peer);
    NcclGroup *ng = nccl_begin(g);
    NCCL_CHECK(ncclRecv(buf, n, nccl_dtype(t), peer, ng->nccl, ng->stream));
    nccl_end(ng, r);
}

static void nccl_barrier(CommGroup *g, CommRequest *r) {
    NcclGroup *ng = nccl_begin(g);
    if (ng->nccl) NCCL_CHECK(ncclAllReduce(ng->scratch, ng->scratch, 1, ncclFloat32, ncclSum, ng->nccl, ng->stream));
    nccl_end(ng, r);
}

static int nccl_test(CommRequest *r) {
    CHECK(nccl_batch_depth == 0, "NCCL %s waited for inside its batch (its event is recorded at comm_batch_end)", r->op);
    cudaEvent_t done = (cudaEvent_t)r->impl;
    cudaError_t st = cudaEventQuery(done);
    if (st == cudaErrorNotReady) {
        // the runtime also records "not ready" as the thread's last error; clear it, or the next
        // CUDA_CHECK_LAUNCH (cudaGetLastError) would report it as a failed kernel launch
        (void)cudaGetLastError();
        nccl_check_async_errors(r->group->comm);
        return 0;
    }
    CUDA_CHECK(st);
    nccl_watchdog_remove(done);
    CUDA_CHECK(cudaEventDestroy(done));
    r->impl = NULL;
    return 1;
}

// Device groups live in one table per process (they are few and last the run).
static CommGroup comm_nccl_groups[COMM_NUM_GROUPS];

// Ends every rank of the job at once, NCCL's way ("Error handling and
// communicator abort", docs.nvidia.com/deeplearning/nccl/user-guide/docs/
// usage/communicators.html): ncclCommAbort on every communicator, so that no
// NCCL kernel still waits for a peer, then MPI_Abort (the launcher ends the
// other ranks) or, alone, _exit. Not exit(): the CUDA runtime's teardown would
// wait for a kernel that waits for peers that are gone. An abort that itself
// hangs ends the process 30 s later (SIGALRM).
static void nccl_abort(Comm *c, int code) {
    fflush(stdout);
    fflush(stderr);
    alarm(30);
    for (int k = 0; k < COMM_NUM_GROUPS; k++) {
        NcclGroup *ng = (NcclGroup *)comm_nccl_groups[k].impl;
        if (ng && ng->owner && ng->nccl) (void)ncclCommAbort(ng->nccl);
    }
#ifdef LLMC_MPI
    if (c->mpi_initialized) MPI_Abort(MPI_COMM_WORLD, code);
#else
    (void)c;
#endif
    _exit(code);
}

// An asynchronous error on any communicator (NCCL's kernels then wait
// forever): one line, and the job ends (nccl_abort).
static void nccl_check_async_errors(Comm *c) {
    for (int k = 0; k < COMM_NUM_GROUPS; k++) {
        NcclGroup *ng = (NcclGroup *)comm_nccl_groups[k].impl;
        ncclResult_t async = ncclSuccess;
        if (!ng || !ng->owner || !ng->nccl || ncclCommGetAsyncError(ng->nccl, &async) != ncclSuccess ||
            async == ncclSuccess)
            continue;
        char groups[64] = "";  // the groups that share the communicator
        for (int j = 0; j < COMM_NUM_GROUPS; j++)
            if (((NcclGroup *)comm_nccl_groups[j].impl)->nccl == ng->nccl)
                snprintf(groups + strlen(groups), sizeof(groups) - strlen(groups), "%s%s", groups[0] ? "/" : "",
                         COMM_GROUP_NAMES[j]);
        fprintf(stderr, "error: rank %d: NCCL on the %s group failed: %s; aborting every communicator and the job\n",
                c->rank, groups, ncclGetErrorString(async));
        nccl_abort(c, 3);
    }
}

// The stream waits for the request's event (the request itself stays active).
static void nccl_stream_wait(const CommRequest *r, void *stream) {
    CHECK(nccl_batch_depth == 0, "NCCL %s waited for inside its batch (its event is recorded at comm_batch_end)", r->op);
    if (r->impl) CUDA_CHECK(cudaStreamWaitEvent((cudaStream_t)stream, (cudaEvent_t)r->impl, 0));
}

static const CommBackend COMM_NCCL = {"nccl", nccl_all_reduce, nccl_reduce_scatter, nccl_all_gather, nccl_broadcast,
                                      nccl_send, nccl_recv, nccl_barrier, nccl_test, nccl_abort, nccl_stream_wait,
                                      nccl_batch_begin, nccl_batch_end};

// The earlier group of the same ranks in the same order as group k, or -1.
static inline int nccl_same_ranks_as(Comm *c, int k) {
    CommGroup *b = comm_group(c, (CommGroupKind)k);
    for (int j = 0; j < k; j++) {
        CommGroup *a = comm_group(c, (CommGroupKind)j);
        if (a->size != b->size || a->rank != b->rank) continue;
        if (a->size == 1) return j;
#ifdef LLMC_MPI
        int same = MPI_UNEQUAL;
        comm_mpi_lock();
        MPI_CHECK(MPI_Comm_compare(a->mpi, b->mpi, &same));
        comm_mpi_unlock();
        if (same == MPI_IDENT || same == MPI_CONGRUENT) return j;
#endif
    }
    return -1;
}

// Builds the device group of every host group of c (after comm_init and
// cudaSetDevice(comm_pick_device(c)) of comm_staged.cuh): one NCCL
// communicator per distinct set of more than one rank, made in the same order
// on every rank. Returns the table; comm_nccl_groups[COMM_DATA] is the data group.
static inline CommGroup *comm_nccl_init(Comm *c) {
    for (int k = 0; k < COMM_NUM_GROUPS; k++) {
        CommGroup *host = comm_group(c, (CommGroupKind)k), *dev = &comm_nccl_groups[k];
        NcclGroup *ng = (NcclGroup *)callocCheck(1, sizeof(NcclGroup));
        int same = nccl_same_ranks_as(c, k);
        if (same >= 0) {
            *ng = *(NcclGroup *)comm_nccl_groups[same].impl;
            ng->owner = 0;
        } else {
            if (host->size > 1) {
                if (!c->mpi_initialized)
                    die_usage("the NCCL backend shares its unique id over MPI: start the job with mpirun or srun");
                ncclUniqueId id;
                if (host->rank == 0) NCCL_CHECK(ncclGetUniqueId(&id));
#ifdef LLMC_MPI
                comm_mpi_lock();
                MPI_CHECK(MPI_Bcast(&id, (int)sizeof(id), MPI_BYTE, 0, host->mpi));
                comm_mpi_unlock();
#endif
                NCCL_CHECK(ncclCommInitRank(&ng->nccl, host->size, id, host->rank));
            }
            int lo, hi;
            CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&lo, &hi));
            CUDA_CHECK(cudaStreamCreateWithPriority(&ng->stream, cudaStreamNonBlocking, hi));
            CUDA_CHECK(cudaMalloc((void **)&ng->scratch, sizeof(float)));
            ng->owner = 1;
        }
        ng->compute = 0;
        *dev = *host;
        dev->be = &COMM_NCCL;
        dev->impl = ng;
    }
    nccl_watchdog_start(c);
    return comm_nccl_groups;
}

// Operations on g wait for the work queued on stream s before they start.
static inline void comm_nccl_set_compute_stream(CommGroup *g, cudaStream_t s) { ((NcclGroup *)g->impl)->compute = s; }

static inline void comm_nccl_free(void) {
    nccl_watchdog_stop();
    free(nccl_batched);
    nccl_batched = NULL;
    nccl_num_batched = nccl_cap_batched = 0;
    for (int k = 0; k < COMM_NUM_GROUPS; k++) {
        NcclGroup *ng = (NcclGroup *)comm_nccl_groups[k].impl;
        if (!ng) continue;
        if (ng->owner) {
            if (ng->nccl) NCCL_CHECK(ncclCommDestroy(ng->nccl));
            CUDA_CHECK(cudaStreamDestroy(ng->stream));
            CUDA_CHECK(cudaFree(ng->scratch));
        }
        free(ng);
        comm_nccl_groups[k].impl = NULL;
    }
}

#endif  // LLMC_COMM_NCCL_CUH
