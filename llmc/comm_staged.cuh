// comm_staged.cuh: comm.h's MPI backend for device buffers (the GPU trainer's
// --comm mpi), staged through pinned host memory: an operation copies its
// device input to a host buffer, runs the MPI nonblocking call on it, and
// comm_wait / comm_test copy the result back when MPI is done. Slower than
// NCCL (two PCIe copies, no overlap of the copies); for machines or debugging
// without NCCL. Same groups and ranks as the host groups; sums in fp32 and
// fp64, and bf16 for the operations that only move data (all-gather, ...).
// The pinned buffers last the run (comm_staged_free frees them): an operation
// takes a free one large enough and gives it back when it completes, since
// cudaMallocHost and cudaFreeHost synchronise the whole device. A buffer is
// reallocated only to grow, while the operations' sizes still do (the first step).
// A single process without MPI gets the device "self" backend (device copies).
#ifndef LLMC_COMM_STAGED_CUH
#define LLMC_COMM_STAGED_CUH

#include "comm.h"           // defines: CommRequest, CommGroup, comm_dtype_size, COMM_MPI, ...
#include "cuda_common.cuh"  // defines: CUDA_CHECK

// The staging buffers (pinned), each free or lent to one operation in flight.
typedef struct {
    void *host;
    size_t bytes;
    int lent;
} StagedBuffer;
static StagedBuffer *staged_buffers;
static int staged_num_buffers;

// A free buffer of at least `bytes` (the smallest), else a free one regrown, else a new one.
static inline int staged_buffer_take(size_t bytes) {
    int fit = -1, small = -1;
    for (int i = 0; i < staged_num_buffers; i++) {
        const StagedBuffer *b = &staged_buffers[i];
        if (b->lent) continue;
        if (b->bytes >= bytes && (fit < 0 || b->bytes < staged_buffers[fit].bytes)) fit = i;
        if (b->bytes < bytes) small = i;
    }
    if (fit < 0) {
        if (small < 0) {
            staged_buffers = (StagedBuffer *)realloc(staged_buffers, sizeof(StagedBuffer) * (size_t)(staged_num_buffers + 1));
            CHECK(staged_buffers != NULL, "out of memory");
            small = staged_num_buffers++;
            memset(&staged_buffers[small], 0, sizeof(StagedBuffer));
        }
        StagedBuffer *b = &staged_buffers[small];
        CUDA_CHECK(cudaFreeHost(b->host));
        b->bytes = bytes > 0 ? bytes : 1;
        CUDA_CHECK(cudaMallocHost(&b->host, b->bytes));
        fit = small;
    }
    staged_buffers[fit].lent = 1;
    return fit;
}

// Frees the staging buffers (at the end of the run; no operation in flight).
static inline void comm_staged_free(void) {
    for (int i = 0; i < staged_num_buffers; i++) {
        CHECK(!staged_buffers[i].lent, "staging buffer freed while an operation uses it");
        CUDA_CHECK(cudaFreeHost(staged_buffers[i].host));
    }
    free(staged_buffers);
    staged_buffers = NULL;
    staged_num_buffers = 0;
}

#ifdef LLMC_MPI

typedef struct {
    int buffer;          // the staging buffer lent to it
    void *host;          // its memory
    void *dev_out;       // where the result goes on completion (NULL: nothing comes back)
    size_t out_offset;   // bytes into host where the result starts
    size_t out_bytes;
} StagedOp;

static inline StagedOp *staged_op(CommRequest *r, size_t host_bytes) {
    StagedOp *op = (StagedOp *)callocCheck(1, sizeof(StagedOp));
    op->buffer = staged_buffer_take(host_bytes);
    op->host = staged_buffers[op->buffer].host;
    r->impl = op;
    return op;
}

// cudaMemcpy waits for the work queued before it (legacy default stream), so
// the input is complete when it is copied.
static inline void staged_in(void *host, const void *dev, size_t bytes) {
    if (bytes) CUDA_CHECK(cudaMemcpy(host, dev, bytes, cudaMemcpyDeviceToHost));
}

static void staged_all_reduce(CommGroup *g, void *buf, size_t n, CommDType t, CommRequest *r) {
    size_t bytes = n * comm_dtype_size(t);
    StagedOp *op = staged_op(r, bytes);
    staged_in(op->host, buf, bytes);
    op->dev_out = buf;
    op->out_bytes = bytes;
    COMM_MPI.all_reduce(g, op->host, n, t, r);
}

static void staged_reduce_scatter(CommGroup *g, const void *send, void *recv, const size_t *counts, CommDType t,
                                  CommRequest *r) {
    size_t es = comm_dtype_size(t), total = comm_sum_counts(counts, g->size) * es, mine = counts[g->rank] * es;
    StagedOp *op = staged_op(r, total + mine);
    staged_in(op->host, send, total);
    op->dev_out = recv;
    op->out_offset = total;
    op->out_bytes = mine;
    COMM_MPI.reduce_scatter(g, op->host, (char *)op->host + total, counts, t, r);
}

static void staged_all_gather(CommGroup *g, const void *send, void *recv, const size_t *counts, CommDType t,
                              CommRequest *r) {
    size_t es = comm_dtype_size(t), total = comm_sum_counts(counts, g->size) * es, displ = 0;
    for (int i = 0; i < g->rank; i++) displ += counts[i] * es;
    StagedOp *op = staged_op(r, total);
    staged_in((char *)op->host + displ, send ? send : (const char *)recv + displ, counts[g->rank] * es);
    op->dev_out = recv;
    op->out_bytes = total;
    COMM_MPI.all_gather(g, NULL, op->host, counts, t, r);
}

static void staged_broadcast(CommGroup *g, void *buf, size_t n, CommDType t, int root, CommRequest *r) {
    size_t bytes = n * comm_dtype_size(t);
    StagedOp *op = staged_op(r, bytes);
    if (g->rank == root) staged_in(op->host, buf, bytes);
    op->dev_out = buf;
    op->out_bytes = bytes;
    COMM_MPI.broadcast(g, op->host, n, t, root, r);
}

static void staged_send(CommGroup *g, const void *buf, size_t n, CommDType t, int peer, int tag, CommRequest *r) {
    size_t bytes = n * comm_dtype_size(t);
    StagedOp *op = staged_op(r, bytes);
    staged_in(op->host, buf, bytes);
    COMM_MPI.send(g, op->host, n, t, peer, tag, r);
}

static void staged_recv(CommGroup *g, void *buf, size_t n, CommDType t, int peer, int tag, CommRequest *r) {
    size_t bytes = n * comm_dtype_size(t);
    StagedOp *op = staged_op(r, bytes);
    op->dev_out = buf;
    op->out_bytes = bytes;
    COMM_MPI.recv(g, op->host, n, t, peer, tag, r);
}

static void staged_barrier(CommGroup *g, CommRequest *r) { COMM_MPI.barrier(g, r); }

static int staged_test(CommRequest *r) {
    if (!COMM_MPI.test(r)) return 0;
    StagedOp *op = (StagedOp *)r->impl;
    if (!op) return 1;  // barrier
    if (op->dev_out && op->out_bytes)
        CUDA_CHECK(cudaMemcpy(op->dev_out, (char *)op->host + op->out_offset, op->out_bytes, cudaMemcpyHostToDevice));
    staged_buffers[op->buffer].lent = 0;
    free(op);
    r->impl = NULL;
    return 1;
}

static const CommBackend COMM_STAGED = {"mpi-staged", staged_all_reduce, staged_reduce_scatter, staged_all_gather,
                                        staged_broadcast, staged_send, staged_recv, staged_barrier, staged_test,
                                        mpi_abort, NULL, NULL, NULL};
#endif  // LLMC_MPI

// one process, device buffers: the self backend with device copies
static void dself_reduce_scatter(CommGroup *g, const void *send, void *recv, const size_t *counts, CommDType t,
                                 CommRequest *r) {
    (void)g; (void)r;
    if (send != recv) CUDA_CHECK(cudaMemcpy(recv, send, counts[0] * comm_dtype_size(t), cudaMemcpyDeviceToDevice));
}
static void dself_all_gather(CommGroup *g, const void *send, void *recv, const size_t *counts, CommDType t,
                             CommRequest *r) {
    (void)g; (void)r;
    if (send && send != recv) CUDA_CHECK(cudaMemcpy(recv, send, counts[0] * comm_dtype_size(t), cudaMemcpyDeviceToDevice));
}
static const CommBackend COMM_DEVICE_SELF = {"device-self", self_all_reduce, dself_reduce_scatter, dself_all_gather,
                                             self_broadcast, self_send, self_p2p, self_barrier, self_test, self_abort,
                                             NULL, NULL, NULL};

// The GPU this process uses: the local rank's, among the node's devices (set
// it before any CUDA allocation).
static inline int comm_pick_device(const Comm *c) {
    int n = 0;
    CUDA_CHECK(cudaGetDeviceCount(&n));
    if (n < 1) die_usage("rank %d: no CUDA device", c->rank);
    return c->local_rank % n;
}

// Device groups over MPI (after comm_init): the host groups with the staged
// backend, or the device self backend on a process without MPI. Returns the
// table indexed by CommGroupKind.
static CommGroup comm_staged_groups[COMM_NUM_GROUPS];
static inline CommGroup *comm_staged_init(Comm *c) {
    for (int k = 0; k < COMM_NUM_GROUPS; k++) {
        comm_staged_groups[k] = *comm_group(c, (CommGroupKind)k);
        comm_staged_groups[k].be = &COMM_DEVICE_SELF;
#ifdef LLMC_MPI
        if (c->mpi_initialized) comm_staged_groups[k].be = &COMM_STAGED;
#endif
    }
    return comm_staged_groups;
}

#endif  // LLMC_COMM_STAGED_CUH
