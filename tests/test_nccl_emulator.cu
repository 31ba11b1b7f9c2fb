// test_nccl_emulator.cu: the NCCL emulation's strictness (tests/emu_include/nccl.h,
// built for the emulated builds only: build/emu/test_nccl_emulator), on 2 ranks
// under mpirun with NCCL_BUFFSIZE below its long messages (tests/test_comm_nccl.sh
// runs it). With no argument, what NCCL allows completes with the right data: a
// send and a receive of long messages in one group while the other rank does the
// same, short messages sent ungrouped before the receive on both ranks, two
// communicators of the same ranks used in one order. With an argument, a
// planted mistake that the emulator must report (the script checks its line):
//   cross-send  both ranks send a long message, then receive, ungrouped (a deadlock)
//   send-wait   both ranks send a long message and wait for it before receiving (a deadlock through the hosts)
//   order       rank 0 all-reduces on communicator A, then B; rank 1 on B, then A
#include <vector>

#include "llmc/comm_nccl.cuh"
#include "llmc/comm_staged.cuh"  // comm_pick_device
#include "tests/testing.h"

#ifndef LLMC_MPI
int main(void) {
    test_skip("the NCCL emulation's checks (built without MPI)");
    return 0;
}
#else

static const size_t LONG = 8192, SHORT = 64;  // floats: above and below the script's NCCL_BUFFSIZE

// A communicator of every world rank, and its stream.
static ncclComm_t make_comm(Comm *c, cudaStream_t *stream) {
    ncclUniqueId id;
    if (c->rank == 0) NCCL_CHECK(ncclGetUniqueId(&id));
    comm_mpi_lock();
    MPI_CHECK(MPI_Bcast(&id, (int)sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD));
    comm_mpi_unlock();
    ncclComm_t comm;
    NCCL_CHECK(ncclCommInitRank(&comm, c->world, id, c->rank));
    CUDA_CHECK(cudaStreamCreateWithFlags(stream, cudaStreamNonBlocking));
    return comm;
}

// Device buffers of n floats: what this rank sends (rank + 1 + i / n) and where it receives.
struct Buffers {
    float *send, *recv;
    size_t n;
};
static Buffers buffers(int rank, size_t n) {
    Buffers b = {NULL, NULL, n};
    std::vector<float> x(n);
    for (size_t i = 0; i < n; i++) x[i] = (float)(rank + 1) + (float)i / (float)n;
    CUDA_CHECK(cudaMalloc((void **)&b.send, sizeof(float) * n));
    CUDA_CHECK(cudaMalloc((void **)&b.recv, sizeof(float) * n));
    CUDA_CHECK(cudaMemcpy(b.send, x.data(), sizeof(float) * n, cudaMemcpyHostToDevice));
    return b;
}
// Whether recv holds what rank `from` sent (or, sum: every rank's sum), on every rank.
static bool received(Comm *c, const Buffers &b, int from, bool sum) {
    std::vector<float> x(b.n);
    CUDA_CHECK(cudaMemcpy(x.data(), b.recv, sizeof(float) * b.n, cudaMemcpyDeviceToHost));
    double bad = 0;
    for (size_t i = 0; i < b.n; i++) {
        double want = sum ? 0.0 : (double)(from + 1) + (double)i / (double)b.n;
        for (int r = 0; sum && r < c->world; r++) want += (double)(r + 1) + (double)i / (double)b.n;
        bad += fabs(x[i] - want) > 1e-4 * fabs(want);
    }
    comm_all_reduce(comm_group(c, COMM_WORLD), &bad, 1, COMM_F64);
    CUDA_CHECK(cudaFree(b.send));
    CUDA_CHECK(cudaFree(b.recv));
    return bad == 0;
}

int main(int argc, char **argv) {
    Comm c;
    comm_init(&c, &argc, &argv, grid_model_parallel(GRID_TP, 1), 0);
    const char *mode = argc > 1 ? argv[1] : "";
    if (c.world != 2) DIE("run on 2 ranks");
    CUDA_CHECK(cudaSetDevice(comm_pick_device(&c)));
    int peer = 1 - c.rank;
    cudaStream_t s, s2;
    ncclComm_t a = make_comm(&c, &s);
    if (strcmp(mode, "cross-send") == 0 || strcmp(mode, "send-wait") == 0) {
        Buffers b = buffers(c.rank, LONG);
        NCCL_CHECK(ncclSend(b.send, LONG, ncclFloat32, peer, a, s));
        if (strcmp(mode, "send-wait") == 0) CUDA_CHECK(cudaStreamSynchronize(s));
        NCCL_CHECK(ncclRecv(b.recv, LONG, ncclFloat32, peer, a, s));
        CUDA_CHECK(cudaStreamSynchronize(s));
        test_result(0, "%s: the ranks completed a deadlock (the emulator did not report it)", mode);
    } else if (strcmp(mode, "order") == 0) {
        ncclComm_t b2 = make_comm(&c, &s2);
        Buffers x = buffers(c.rank, SHORT), y = buffers(c.rank, SHORT);
        for (int k = 0; k < 2; k++) {
            bool first = (k == 0) == (c.rank == 0);  // rank 0: a, then b2; rank 1: b2, then a
            NCCL_CHECK(ncclAllReduce(first ? x.send : y.send, first ? x.recv : y.recv, SHORT, ncclFloat32, ncclSum,
                                     first ? a : b2, first ? s : s2));
        }
        CUDA_CHECK(cudaStreamSynchronize(s));
        CUDA_CHECK(cudaStreamSynchronize(s2));
        NCCL_CHECK(ncclCommDestroy(b2));  // (the last communicator's destruction is the watchdog's last look)
        NCCL_CHECK(ncclCommDestroy(a));
        test_result(0, "order: operations on two communicators in different orders went unreported");
        comm_finalize(&c);
        return test_exit_code();
    } else {
        Buffers g = buffers(c.rank, LONG), u = buffers(c.rank, SHORT);
        NCCL_CHECK(ncclGroupStart());
        NCCL_CHECK(ncclSend(g.send, LONG, ncclFloat32, peer, a, s));
        NCCL_CHECK(ncclRecv(g.recv, LONG, ncclFloat32, peer, a, s));
        NCCL_CHECK(ncclGroupEnd());
        NCCL_CHECK(ncclSend(u.send, SHORT, ncclFloat32, peer, a, s));
        NCCL_CHECK(ncclRecv(u.recv, SHORT, ncclFloat32, peer, a, s));
        CUDA_CHECK(cudaStreamSynchronize(s));
        bool grouped = received(&c, g, peer, false), ungrouped = received(&c, u, peer, false);
        if (c.rank == 0) {
            test_result(grouped, "emulated_nccl_grouped_send_and_recv_above_buffsize_complete (both ranks send first)");
            test_result(ungrouped, "emulated_nccl_ungrouped_send_then_recv_within_buffsize_complete");
        }
        ncclComm_t b2 = make_comm(&c, &s2);
        Buffers x = buffers(c.rank, SHORT), y = buffers(c.rank, SHORT);
        NCCL_CHECK(ncclAllReduce(x.send, x.recv, SHORT, ncclFloat32, ncclSum, a, s));
        NCCL_CHECK(ncclAllReduce(y.send, y.recv, SHORT, ncclFloat32, ncclSum, b2, s2));
        CUDA_CHECK(cudaStreamSynchronize(s));
        CUDA_CHECK(cudaStreamSynchronize(s2));
        bool first = received(&c, x, -1, true), second = received(&c, y, -1, true);
        if (c.rank == 0) test_result(first && second, "emulated_nccl_two_communicators_in_one_order_complete");
        NCCL_CHECK(ncclCommDestroy(b2));
    }
    NCCL_CHECK(ncclCommDestroy(a));
    comm_finalize(&c);
    return test_exit_code();
}
#endif  // LLMC_MPI
