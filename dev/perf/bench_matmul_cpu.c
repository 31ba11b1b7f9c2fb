// bench_matmul_cpu.c: the native sgemm (llmc/cpu_matmul.h) against OpenBLAS
// at the CPU trainer's matmul shapes, side by side. For each distinct product
// of one training step (forward, backward, the classifier; attention's
// per-head products one head per thread) it times both backends interleaved
// (rounds over all shapes, each shape on one backend then the other), best of
// reps, and prints GFLOP/s and their ratio; then the step's matmul time on
// each (each shape's best time times its count per step) and the 1024^3
// square product. Each backend multiplies a product with its own threads; the
// "team" column is the native kernel as the trainer's layers run it
// (matmul_team: each thread of a parallel region its slice, single-threaded).
//   build/dev/perf/bench_matmul_cpu [model=d12|small|LxCxNHxV] [B=4] [T=64] [reps=3]
// "small" is make run's model (4 layers, 256 channels, 4 heads, 2048 tokens);
// LxCxNHxV any other, e.g. 4x128x4x65.
#include "llmc/cpu_layers.h"
#include "llmc/model.h"

typedef struct {
    const char *what;
    int ta, tb, M, N, K;
    int count;    // calls per training step
    int batched;  // > 0: that many independent products in an OpenMP loop (attention heads)
} Shape;

// one timed run of shape s with the current backend; buffers sized for it
static double time_shape(const Shape *s, const float *a, const float *b, float *c) {
    int lda = s->ta ? s->M : s->K, ldb = s->tb ? s->K : s->N;
    double t0 = wall_seconds();
    if (s->batched) {
        size_t sa = (size_t)s->M * s->K, sb = (size_t)s->K * s->N, sc = (size_t)s->M * s->N;
#pragma omp parallel for schedule(dynamic)
        for (int h = 0; h < s->batched; h++)
            matmul(s->ta, s->tb, s->M, s->N, s->K, 1.0f, a + h * sa, lda, b + h * sb, ldb, 0.0f, c + h * sc, s->N);
    } else {
        matmul(s->ta, s->tb, s->M, s->N, s->K, 1.0f, a, lda, b, ldb, 0.0f, c, s->N);
    }
    return wall_seconds() - t0;
}

// one timed run of shape s (not batched) by matmul_team, inside a parallel region opened beforehand
static double time_team(const Shape *s, const float *a, const float *b, float *c) {
    int lda = s->ta ? s->M : s->K, ldb = s->tb ? s->K : s->N;
    double t0 = 0.0, dt = 0.0;
#pragma omp parallel
    {
#pragma omp barrier
#pragma omp master
        t0 = wall_seconds();  // (the region is open and all its threads in it: its start is not timed)
        matmul_team(s->ta, s->tb, s->M, s->N, s->K, 1.0f, a, lda, b, ldb, 0.0f, c, s->N);
#pragma omp master
        dt = wall_seconds() - t0;
    }
    return dt;
}

#ifndef LLMC_BLAS
int main(void) { die_usage("bench_matmul_cpu compares against OpenBLAS: build with it (libopenblas-dev)"); }
#else
int main(int argc, char **argv) {
    const char *model = argc > 1 ? argv[1] : "d12";
    int B = argc > 2 ? atoi(argv[2]) : 4, T = argc > 3 ? atoi(argv[3]) : 64, reps = argc > 4 ? atoi(argv[4]) : 3;
    GPTConfig cfg = {0};
    if (strcmp(model, "small") == 0) {
        cfg.num_layers = 4; cfg.channels = 256; cfg.num_heads = 4; cfg.vocab_size = 2048;
    } else if (!gpt_config_preset(model, &cfg) && sscanf(model, "%dx%dx%dx%d", &cfg.num_layers, &cfg.channels,
                                                            &cfg.num_heads, &cfg.vocab_size) != 4) {
        die_usage("unknown model '%s' (d12|d24|d36|d48|small, or LxCxNHxV)", model);
    }
    if (B < 1 || T < 1 || reps < 1) die_usage("need B >= 1, T >= 1, reps >= 1");
    int L = cfg.num_layers, C = cfg.channels, NH = cfg.num_heads, V = cfg.vocab_size, N = B * T, hs = C / NH;
    const Shape shapes[] = {
        {"qkv fwd", 0, 1, N, 3 * C, C, L, 0},
        {"attproj fwd", 0, 1, N, C, C, L, 0},
        {"fc fwd", 0, 1, N, 4 * C, C, L, 0},
        {"fcproj fwd", 0, 1, N, C, 4 * C, L, 0},
        {"classifier fwd", 0, 1, N, V, C, 1, 0},
        {"classifier dx", 0, 0, N, C, V, 1, 0},
        {"classifier dw", 1, 0, V, C, N, 1, 0},
        {"qkv dx", 0, 0, N, C, 3 * C, L, 0},
        {"qkv dw", 1, 0, 3 * C, C, N, L, 0},
        {"attproj dx", 0, 0, N, C, C, L, 0},
        {"attproj dw", 1, 0, C, C, N, L, 0},
        {"fc dx", 0, 0, N, C, 4 * C, L, 0},
        {"fc dw", 1, 0, 4 * C, C, N, L, 0},
        {"fcproj dx", 0, 0, N, 4 * C, C, L, 0},
        {"fcproj dw", 1, 0, C, 4 * C, N, L, 0},
        {"att q@k^T", 0, 1, T, T, hs, 2 * L, B * NH},  // forward scores, backward dO @ v^T
        {"att p@v", 0, 0, T, hs, T, 2 * L, B * NH},    // forward out, backward dq
        {"att p^T@dO", 1, 0, T, hs, T, 2 * L, B * NH}, // backward dk, dv
        {"square 1024", 0, 1, 1024, 1024, 1024, 0, 0},
    };
    const int nshapes = (int)(sizeof(shapes) / sizeof(shapes[0]));
    size_t most = 0;
    for (int i = 0; i < nshapes; i++) {
        size_t h = shapes[i].batched ? (size_t)shapes[i].batched : 1;
        size_t e[3] = {(size_t)shapes[i].M * shapes[i].K, (size_t)shapes[i].K * shapes[i].N,
                       (size_t)shapes[i].M * shapes[i].N};
        for (int j = 0; j < 3; j++) most = e[j] * h > most ? e[j] * h : most;
    }
    float *a = (float *)alignedMallocCheck(sizeof(float) * most), *b = (float *)alignedMallocCheck(sizeof(float) * most);
    float *c = (float *)alignedMallocCheck(sizeof(float) * most);
    for (size_t i = 0; i < most; i++) {
        a[i] = (float)((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
        b[i] = (float)((i * 40503u) % 1000) * 1e-3f - 0.5f;
    }
    printf("%s B=%d T=%d (N=%d rows), %d threads, best of %d, interleaved; native kernel %s, openblas core %s\n",
           model, B, T, N, omp_threads(), reps, MATMUL_NATIVE_KERNEL, openblas_get_corename());
    printf("%-15s %2s %6s %6s %6s %5s %12s %12s %7s %10s\n", "product", "tr", "M", "N", "K", "/step", "openblas GF/s",
           "native GF/s", "native", "team GF/s");
    // rounds over all shapes, each shape timed on both backends and the team in turn: a burst of
    // load from elsewhere spoils one round of several shapes rather than every round of one
    enum { OPENBLAS, NATIVE, TEAM, RUNS };  // (TEAM: native, by matmul_team; not for batched shapes)
    double(*best)[RUNS] = (double(*)[RUNS])mallocCheck(sizeof(double[RUNS]) * nshapes);
    for (int i = 0; i < nshapes; i++) best[i][OPENBLAS] = best[i][NATIVE] = best[i][TEAM] = 1e30;
    for (int r = 0; r <= reps; r++)  // round 0 warms up
        for (int i = 0; i < nshapes; i++)
            for (int run = 0; run < RUNS; run++) {
                if (run == TEAM && shapes[i].batched) continue;
                matmul_set_backend(run == OPENBLAS ? "blas" : "native");
                double dt = run == TEAM ? time_team(&shapes[i], a, b, c) : time_shape(&shapes[i], a, b, c);
                if (r > 0 && dt < best[i][run]) best[i][run] = dt;
            }
    double step_s[RUNS] = {0, 0, 0};
    for (int i = 0; i < nshapes; i++) {
        const Shape *s = &shapes[i];
        double flops = 2.0 * s->M * s->N * (double)s->K * (s->batched ? s->batched : 1);
        for (int run = 0; run < RUNS; run++) step_s[run] += best[i][run == TEAM && s->batched ? NATIVE : run] * s->count;
        printf("%-15s %c%c %6d %6d %6d %5d %12.1f %12.1f %6.0f%%", s->what, s->ta ? 'T' : 'N', s->tb ? 'T' : 'N', s->M,
               s->N, s->K, s->count, flops / best[i][OPENBLAS] * 1e-9, flops / best[i][NATIVE] * 1e-9,
               100 * best[i][OPENBLAS] / best[i][NATIVE]);
        if (s->batched) printf(" %10s\n", "-");
        else printf(" %10.1f\n", flops / best[i][TEAM] * 1e-9);
    }
    printf("matmuls of one step: openblas %.1f ms, native %.1f ms (team %.1f ms): native at %.0f%% of openblas's "
           "speed\n", step_s[OPENBLAS] * 1e3, step_s[NATIVE] * 1e3, step_s[TEAM] * 1e3,
           100 * step_s[OPENBLAS] / step_s[NATIVE]);
    free(best);
    free(a);
    free(b);
    free(c);
    matmul_set_backend("auto");
    return 0;
}
#endif
