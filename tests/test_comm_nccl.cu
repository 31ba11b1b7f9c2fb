// test_comm_nccl.cu: comm.h's device backends on the GPU -- NCCL
// (llmc/comm_nccl.cuh) and MPI staged through host memory
// (llmc/comm_staged.cuh): all-reduce, even and uneven reduce-scatter and
// all-gather (in place and not), broadcast and barrier, each against the host
// arithmetic, on every rank (rank 0 reports the sum of the ranks' errors).
// Runs on one process (NCCL on one rank; the device self backend in place of
// the staged one) or under mpirun (the staged MPI backend; NCCL only when
// every rank has a GPU of its own: NCCL refuses two ranks on one GPU, so with
// more ranks than GPUs its checks SKIP). SKIPs without a GPU. Built and run
// by tests/test_comm_nccl.sh. `--tp N` lays the ranks out as N-way tensor x
// data parallel. The NCCL groups run the checks on the data group and the
// tensor group (of one rank unless --tp: the copies that stand in for a
// communicator there), and an all-reduce on the world group; on the emulated NCCL (tests/emu_include/nccl.h) they also count
// the communicators: one per distinct set of more than one rank, not one per
// group.
#include <vector>

#include "llmc/comm_nccl.cuh"
#include "llmc/comm_staged.cuh"
#include "tests/testing.h"

// Value of element i on rank r.
static float value(int r, size_t i) { return (float)(r + 1) + 0.001f * (float)(i % 1000); }

// Every rank's result against its expectation; the errors summed over all
// ranks (every group of the kind: on the host world group), reported by world
// rank 0. Names carry the group unless it is the data group.
static void check_op(const CommGroup *g, const char *name, const std::vector<float> &got,
                     const std::vector<float> &want) {
    double err = rel_error(got.data(), want.data(), (long)got.size(), 1e-6);
    if (err != err) err = INFINITY;
    comm_all_reduce(comm_group(g->comm, COMM_WORLD), &err, 1, COMM_F64);
    if (g->comm->rank == 0)
        test_result(err < 1e-6, "%s_%s%s%s (relative error %.2e, summed over %d ranks, groups of %d)",
                    g->be->name, g->kind == COMM_DATA ? "" : COMM_GROUP_NAMES[g->kind], g->kind == COMM_DATA ? "" : "_",
                    name, err, g->comm->world, g->size);
}

static void check_backend(CommGroup *g) {
    int W = g->size, R = g->rank;
    const size_t n = 4099;  // odd: the even split is uneven
    std::vector<size_t> even(W, 1024), uneven(W);
    comm_even_counts(n, W, uneven.data());
    float *d_full, *d_piece;
    CUDA_CHECK(cudaMalloc((void **)&d_full, sizeof(float) * n * W));
    CUDA_CHECK(cudaMalloc((void **)&d_piece, sizeof(float) * n));
    std::vector<float> full(n * W), got, want;

    // all-reduce
    for (size_t i = 0; i < n; i++) full[i] = value(R, i);
    CUDA_CHECK(cudaMemcpy(d_full, full.data(), sizeof(float) * n, cudaMemcpyHostToDevice));
    CommRequest r = comm_all_reduce_start(g, d_full, n, COMM_F32);
    comm_wait(&r);
    got.resize(n);
    CUDA_CHECK(cudaMemcpy(got.data(), d_full, sizeof(float) * n, cudaMemcpyDeviceToHost));
    want.assign(n, 0.0f);
    for (int q = 0; q < W; q++)
        for (size_t i = 0; i < n; i++) want[i] += value(q, i);
    check_op(g, "all_reduce", got, want);

    // reduce-scatter and all-gather, even and uneven counts
    for (int pass = 0; pass < 2; pass++) {
        const std::vector<size_t> &counts = pass ? uneven : even;
        size_t total = comm_sum_counts(counts.data(), W), displ = 0;
        for (int q = 0; q < R; q++) displ += counts[q];
        for (size_t i = 0; i < total; i++) full[i] = value(R, i);
        CUDA_CHECK(cudaMemcpy(d_full, full.data(), sizeof(float) * total, cudaMemcpyHostToDevice));
        r = comm_reduce_scatter_start(g, d_full, d_piece, counts.data(), COMM_F32);
        comm_wait(&r);
        got.resize(counts[R]);
        CUDA_CHECK(cudaMemcpy(got.data(), d_piece, sizeof(float) * counts[R], cudaMemcpyDeviceToHost));
        want.assign(counts[R], 0.0f);
        for (int q = 0; q < W; q++)
            for (size_t i = 0; i < counts[R]; i++) want[i] += value(q, displ + i);
        check_op(g, pass ? "reduce_scatter_uneven" : "reduce_scatter_even", got, want);

        // all-gather from the piece (not in place), then in place
        for (int in_place = 0; in_place < 2; in_place++) {
            CUDA_CHECK(cudaMemset(d_full, 0, sizeof(float) * total));
            if (in_place)
                CUDA_CHECK(cudaMemcpy(d_full + displ, d_piece, sizeof(float) * counts[R], cudaMemcpyDeviceToDevice));
            r = comm_all_gather_start(g, in_place ? NULL : d_piece, d_full, counts.data(), COMM_F32);
            comm_wait(&r);
            got.resize(total);
            CUDA_CHECK(cudaMemcpy(got.data(), d_full, sizeof(float) * total, cudaMemcpyDeviceToHost));
            want.assign(total, 0.0f);
            for (int q = 0; q < W; q++)
                for (size_t i = 0; i < total; i++) want[i] += value(q, i);
            check_op(g, in_place ? "all_gather_in_place" : "all_gather", got, want);
        }
    }

    // broadcast from the last rank, then a barrier
    for (size_t i = 0; i < n; i++) full[i] = value(R, i);
    CUDA_CHECK(cudaMemcpy(d_full, full.data(), sizeof(float) * n, cudaMemcpyHostToDevice));
    r = comm_broadcast_start(g, d_full, n, COMM_F32, W - 1);
    comm_wait(&r);
    got.resize(n);
    CUDA_CHECK(cudaMemcpy(got.data(), d_full, sizeof(float) * n, cudaMemcpyDeviceToHost));
    want.resize(n);
    for (size_t i = 0; i < n; i++) want[i] = value(W - 1, i);
    check_op(g, "broadcast", got, want);
    comm_barrier(g);
    if (g->comm->rank == 0) test_result(1, "%s_%s%sbarrier", g->be->name, g->kind == COMM_DATA ? "" : COMM_GROUP_NAMES[g->kind],
                            g->kind == COMM_DATA ? "" : "_");
    CUDA_CHECK(cudaFree(d_full));
    CUDA_CHECK(cudaFree(d_piece));
}

// The NCCL device groups: the data group's checks, the tensor group's, an all-reduce of the rank over the world group (it may
// share the data group's communicator), and on the emulated NCCL the count of
// communicators: one per distinct set of more than one rank.
static void check_nccl_groups(Comm *c) {
    CommGroup *groups = comm_nccl_init(c);
#ifdef LLMC_NCCL_EMULATOR_H
    int dp = comm_size(c, GRID_DP), tp = comm_size(c, GRID_TP), pp = comm_size(c, GRID_PP);
    int expect = (c->world > 1) + (dp > 1 && dp < c->world) + (tp > 1 && tp < c->world) + (pp > 1 && pp < c->world);
    double made = emu_nccl_live_comms, all = made;  // every rank holds the same number
    comm_all_reduce(comm_group(c, COMM_WORLD), &all, 1, COMM_F64);
    if (c->rank == 0)
        test_result(all == (double)expect * c->world, "nccl_communicators_per_rank_set (%.0f made on rank 0, %d "
                    "expected: world %d, data %d, tensor %d, pipeline %d ranks)", made, expect, c->world, dp, tp, pp);
#endif
    check_backend(&groups[COMM_DATA]);
    check_backend(&groups[COMM_TENSOR]);
    CommGroup *world = &groups[COMM_WORLD];
    float *d = NULL, x = (float)(c->rank + 1), want = 0.5f * (float)c->world * (float)(c->world + 1);
    CUDA_CHECK(cudaMalloc((void **)&d, sizeof(float)));
    CUDA_CHECK(cudaMemcpy(d, &x, sizeof(float), cudaMemcpyHostToDevice));
    CommRequest r = comm_all_reduce_start(world, d, 1, COMM_F32);
    comm_wait(&r);
    CUDA_CHECK(cudaMemcpy(&x, d, sizeof(float), cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaFree(d));
    double bad = x != want;
    comm_all_reduce(comm_group(c, COMM_WORLD), &bad, 1, COMM_F64);
    if (c->rank == 0) test_result(bad == 0, "nccl_world_all_reduce (%d ranks)", c->world);
    comm_nccl_free();
#ifdef LLMC_NCCL_EMULATOR_H
    double left = emu_nccl_live_comms;
    comm_all_reduce(comm_group(c, COMM_WORLD), &left, 1, COMM_F64);
    if (c->rank == 0) test_result(left == 0, "nccl_communicators_freed (%.0f left over the ranks)", left);
#endif
}

int main(int argc, char **argv) {
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        test_skip("nccl and staged MPI backends (no CUDA device)");
        return 0;
    }
    int tp = argc == 3 && strcmp(argv[1], "--tp") == 0 ? atoi(argv[2]) : 1;
    Comm comm;
    comm_init(&comm, &argc, &argv, grid_model_parallel(GRID_TP, tp), 60);
    CUDA_CHECK(cudaSetDevice(comm_pick_device(&comm)));
    // one node: more ranks than GPUs puts two ranks on one GPU, which NCCL refuses
    if (comm.world <= ndev) check_nccl_groups(&comm);
    else if (comm.rank == 0)
        test_skip("nccl backend on %d ranks (%d GPU%s: NCCL needs a GPU per rank)", comm.world, ndev, ndev > 1 ? "s" : "");
    CommGroup *staged = &comm_staged_init(&comm)[COMM_DATA];
    check_backend(staged);
#ifdef LLMC_CUDA_EMULATION
    // the staged backend's pinned buffers last the run: operations like those it has done allocate none
    float *d = NULL;
    CUDA_CHECK(cudaMalloc((void **)&d, sizeof(float) * 2 * 4099));
    CUDA_CHECK(cudaMemset(d, 0, sizeof(float) * 2 * 4099));
    std::vector<size_t> counts(staged->size);
    comm_even_counts(4099, staged->size, counts.data());
    double before = 0, again = 0;
    for (int rep = 0; rep < 3; rep++) {  // (two in flight at once: the first time may add a buffer)
        if (rep == 1) before = (double)emu_pinned_allocations;
        CommRequest q[2] = {comm_all_reduce_start(staged, d, 4099, COMM_F32),
                            comm_all_gather_start(staged, NULL, d + 4099, counts.data(), COMM_F32)};
        comm_wait_all(q, 2);
    }
    CUDA_CHECK(cudaFree(d));
    again = (double)emu_pinned_allocations - before;
    comm_all_reduce(comm_group(&comm, COMM_WORLD), &again, 1, COMM_F64);
    if (comm.rank == 0)
        test_result(again == 0, "%s_pinned_buffers_kept (%.0f cudaMallocHost calls over the ranks for operations done "
                    "before)", staged->be->name, again);
#endif
    comm_staged_free();
    comm_finalize(&comm);
    return test_exit_code();
}
