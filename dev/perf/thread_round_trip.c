// thread_round_trip.c: where the OpenMP threads 0 and 1 sit, as the time one cache line takes to go
// from one to the other and back (each spins until the counter in the line is its turn, then hands
// it on), in ns: about 50 when the two cores share an L3, several hundred when they do not (another
// CCD of an EPYC, another socket, or a VM whose host placed its vCPUs so). A small model's CPU step
// depends on it, since its kernels hand data from one thread to the other (a layer's output rows to
// the weight gradient, which reads them all; the weights to AdamW), while a matmul alone, each
// thread on its slice, does not: scripts/bench_cpu.sh prints it beside each small-model run. The
// median of 5 rounds of R round trips. Not part of `make test`. Build and run:
//   make build/dev/perf/thread_round_trip && OMP_NUM_THREADS=2 build/dev/perf/thread_round_trip [R]
// Prints "-" with fewer than 2 threads (a build without OpenMP included).
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "llmc/utils.h"

#define ROUNDS 5

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    long trips = argc > 1 ? atol(argv[1]) : 20000;
    if (trips < 1) {
        fprintf(stderr, "usage: %s [round trips >= 1]\n", argv[0]);
        return 2;
    }
    if (omp_threads() < 2) {
        puts("-");
        return 0;
    }
    static _Alignas(64) atomic_long turn;  // 2r: thread 0's move of round trip r, 2r + 1: thread 1's
    double ns[ROUNDS];
    for (int k = 0; k < ROUNDS; k++) {
        atomic_store(&turn, 0);
        double t0 = 0.0;
#ifdef _OPENMP
#pragma omp parallel num_threads(2)
#endif
        {
            const long me = omp_thread_id();
#ifdef _OPENMP
#pragma omp barrier
#endif
            if (me == 0) t0 = wall_seconds();
            for (long r = 0; r < trips; r++) {
                while (atomic_load_explicit(&turn, memory_order_acquire) != 2 * r + me) {}
                atomic_store_explicit(&turn, 2 * r + me + 1, memory_order_release);
            }
        }
        ns[k] = (wall_seconds() - t0) / (double)trips * 1e9;
    }
    qsort(ns, ROUNDS, sizeof(double), cmp_double);
    printf("%.0f\n", ns[ROUNDS / 2]);
    return 0;
}
