// bench_comm.c: bandwidth of comm.h's all-reduce, reduce-scatter and
// all-gather on host buffers (the MPI backend) over the data group, for
// buffer sizes from --min-bytes to --max-bytes (x4 each step), with the
// nccl-tests definitions: size = bytes of the full buffer (all-reduce's
// buffer, reduce-scatter's input, all-gather's output), time = the slowest
// rank's mean, algbw = size / time, busbw = algbw * 2(n-1)/n for all-reduce
// and algbw * (n-1)/n for reduce-scatter and all-gather.
// Run under mpirun: mpirun -np 2 build/dev/perf/bench_comm (scripts/bench_comm.sh).
#include <unistd.h>

#include "llmc/args.h"
#include "llmc/comm.h"

typedef struct {
    long long min_bytes, max_bytes;
    float seconds;  // target time per point
} BenchOptions;

#define BO(field) offsetof(BenchOptions, field)
static const FlagSpec BENCH_FLAGS[] = {
    {"min-bytes", FLAG_INT64, BO(min_bytes), "1024", NULL, 4, 1e12, "smallest buffer", NULL},
    {"max-bytes", FLAG_INT64, BO(max_bytes), "1073741824", NULL, 4, 1e12,
     "largest buffer (lowered to fit in half the node's memory)", NULL},
    {"seconds", FLAG_FLOAT, BO(seconds), "0.3", NULL, 0.001, 1000, "time spent per point", NULL},
};
#undef BO

typedef enum { OP_ALL_REDUCE, OP_REDUCE_SCATTER, OP_ALL_GATHER, NUM_OPS } Op;
static const char *const OP_NAMES[NUM_OPS] = {"all-reduce", "reduce-scatter", "all-gather"};

static void run_op(Op op, CommGroup *g, float *full, float *piece, size_t n, const size_t *counts) {
    CommRequest r;
    if (op == OP_ALL_REDUCE) r = comm_all_reduce_start(g, full, n, COMM_F32);
    else if (op == OP_REDUCE_SCATTER) r = comm_reduce_scatter_start(g, full, piece, counts, COMM_F32);
    else r = comm_all_gather_start(g, piece, full, counts, COMM_F32);
    comm_wait(&r);
}

// Mean seconds per call, the slowest rank's.
static double time_op(Op op, CommGroup *g, float *full, float *piece, size_t n, const size_t *counts, double target) {
    run_op(op, g, full, piece, n, counts);  // warm-up
    comm_barrier(g);
    double t0 = wall_seconds();
    run_op(op, g, full, piece, n, counts);
    double once = wall_seconds() - t0;
    comm_all_reduce(g, &once, 1, COMM_F64);  // the same iteration count on every rank
    int iters = (int)(target / (once / g->size + 1e-9));
    iters = iters < 1 ? 1 : iters > 1000 ? 1000 : iters;
    comm_barrier(g);
    t0 = wall_seconds();
    for (int i = 0; i < iters; i++) run_op(op, g, full, piece, n, counts);
    double t = (wall_seconds() - t0) / iters;
    // the slowest rank's time: gather every rank's
    double *all = (double *)mallocCheck(sizeof(double) * (size_t)g->size);
    size_t *ones = (size_t *)mallocCheck(sizeof(size_t) * (size_t)g->size);
    for (int i = 0; i < g->size; i++) ones[i] = 1;
    CommRequest r = comm_all_gather_start(g, &t, all, ones, COMM_F64);
    comm_wait(&r);
    double tmax = 0;
    for (int i = 0; i < g->size; i++) tmax = all[i] > tmax ? all[i] : tmax;
    free(all);
    free(ones);
    return tmax;
}

int main(int argc, char **argv) {
    BenchOptions o;
    memset(&o, 0, sizeof(o));
    flags_parse(argc, argv, BENCH_FLAGS, FLAGS_COUNT(BENCH_FLAGS), &o,
                "Bandwidth of all-reduce, reduce-scatter and all-gather (nccl-tests algbw/busbw). Run under mpirun.");
    Comm comm;
    comm_init(&comm, &argc, &argv, grid_model_parallel(GRID_TP, 1), 600);
    CommGroup *g = comm_group(&comm, COMM_DATA);
    int n_ranks = g->size;
    // each rank holds the full buffer and a piece; all ranks of a node share its memory
    double node_bytes = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
    long long max_bytes = o.max_bytes;
    while (max_bytes > o.min_bytes && 2.0 * n_ranks * (double)max_bytes > 0.5 * node_bytes) max_bytes /= 2;
    size_t max_n = (size_t)max_bytes / sizeof(float);
    float *full = (float *)mallocCheck(sizeof(float) * max_n);
    float *piece = (float *)mallocCheck(sizeof(float) * (max_n / n_ranks + 1));
    for (size_t i = 0; i < max_n; i++) full[i] = 1.0f;
    for (size_t i = 0; i < max_n / n_ranks + 1; i++) piece[i] = 1.0f;
    size_t *counts = (size_t *)mallocCheck(sizeof(size_t) * (size_t)n_ranks);
    if (comm.rank == 0) {
        printf("# %d ranks (%s launch, %s backend), sizes %lld..%lld bytes%s\n", n_ranks, comm.launcher, g->be->name,
               o.min_bytes, max_bytes, max_bytes < o.max_bytes ? " (capped by memory)" : "");
        printf("%-15s %12s %12s %12s %12s\n", "op", "bytes", "time_us", "algbw_GB/s", "busbw_GB/s");
    }
    for (int op = 0; op < NUM_OPS; op++) {
        double factor = op == OP_ALL_REDUCE ? 2.0 * (n_ranks - 1) / n_ranks : (double)(n_ranks - 1) / n_ranks;
        for (long long bytes = o.min_bytes; bytes <= max_bytes; bytes *= 4) {
            size_t n = (size_t)bytes / sizeof(float);
            n -= n % (size_t)n_ranks;  // even pieces, as nccl-tests
            comm_even_counts(n, n_ranks, counts);
            double t = time_op((Op)op, g, full, piece, n, counts, o.seconds);
            double algbw = (double)(n * sizeof(float)) / t / 1e9;
            if (comm.rank == 0)
                printf("%-15s %12zu %12.1f %12.3f %12.3f\n", OP_NAMES[op], n * sizeof(float), t * 1e6, algbw,
                       algbw * factor);
        }
    }
    fflush(stdout);
    free(full);
    free(piece);
    free(counts);
    comm_finalize(&comm);
    return 0;
}
