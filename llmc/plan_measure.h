// plan_measure.h: what the planner (plan.c) measures on this machine for the
// `local` cluster: the CPU trainer's kernels (cpu_layers.h, cpu_matmul.h) run
// at a rank's shapes -- one layer's forward and backward, the embedding, the
// classifier with its loss, AdamW per element -- and, in a run of its own under
// mpirun (plan --measure-comm), the all-reduce of comm.h at several sizes,
// fitted to the ring model's latency and bandwidth.
#ifndef LLMC_PLAN_MEASURE_H
#define LLMC_PLAN_MEASURE_H

#include <sys/mman.h>
#include <unistd.h>

#include "comm.h"        // defines: CommGroup, comm_barrier, comm_mean, comm_all_reduce, ...
#include "cpu_layers.h"  // defines: layernorm_forward, linear_forward, attention_forward, gelu_forward, ...
#include "cpu_matmul.h"  // defines: matmul
#include "model.h"       // defines: GPTConfig, ParamLayout, ParamTensor, param_layout_init, ...
#include "optimizer.h"   // defines: AdamWConfig, adamw_update_range

// Seconds of one micro-batch's work on one rank, by part (the trainer's order:
// gpt_cpu.h's gpt_stage_forward and gpt_stage_backward).
typedef struct {
    double layer_f;         // a layer's forward
    double layer_b_input;   // its backward to the input (B of a split backward)
    double layer_b_weight;  // its weight gradients (W)
    double embed_f, embed_b;
    double head_f, head_b;  // ln_f, the classifier and the loss; their backward
} StageKernelTimes;

// Least squares y = a + b x over n points of weights w (NULL: equal).
static void linear_fit(const double *x, const double *y, const double *w, int n, double *a, double *b) {
    double sw = 0, mx = 0, my = 0, sxx = 0, sxy = 0;
    for (int i = 0; i < n; i++) sw += w ? w[i] : 1.0;
    for (int i = 0; i < n; i++) mx += (w ? w[i] : 1.0) * x[i] / sw, my += (w ? w[i] : 1.0) * y[i] / sw;
    for (int i = 0; i < n; i++) {
        double wi = w ? w[i] : 1.0;
        sxx += wi * (x[i] - mx) * (x[i] - mx), sxy += wi * (x[i] - mx) * (y[i] - my);
    }
    *b = sxx > 0 ? sxy / sxx : 0.0;
    *a = my - *b * mx;
}

// Adds the statement's seconds to sum.
#define PLAN_TIME(sum, stmt)                   \
    do {                                       \
        double t0_ = wall_seconds();           \
        stmt;                                  \
        (sum) += wall_seconds() - t0_;         \
    } while (0)

// The kernels of one rank with tp tensor-parallel ranks (sp: its LayerNorms on
// its N/tp rows) and cp context ranks at micro-batch B x T: every kernel on the
// rank's B x T/cp positions, attention's forward and backward cp times over
// them (the rank's share of the causal work: its two chunks' queries against
// their keys are 1/cp of T's, cp times a T/cp sequence's), the mean over passes of all of them
// after a warm-up one, for at least min_s seconds (other ranks running theirs
// at the same time share the machine as in training); the collectives
// between them are the communication model's, not timed here.
static StageKernelTimes plan_measure_stage(const GPTConfig *cfg, int B, int T, int cp, int tp, int sp, double min_s) {
    T /= cp;
    int C = cfg->channels, Cl = C / tp, NHl = cfg->num_heads / tp, N = B * T, Nl = sp ? N / tp : N;
    int V = tp > 1 ? cfg->padded_vocab_size / tp : cfg->vocab_size;
    size_t n4 = (size_t)N * 4 * Cl, nC = (size_t)N * C, att = (size_t)B * NHl * T * T;
    // one buffer, carved: inputs and weights filled with small values
    size_t sizes[] = {nC, nC, (size_t)N * 3 * Cl, (size_t)N * 3 * Cl, (size_t)N * Cl, att, n4, n4, n4, nC,
                      (size_t)4 * C * C / tp * 3, (size_t)4 * C, (size_t)N, (size_t)N, (size_t)omp_threads() * T * T,
                      (size_t)V * C, (size_t)N * V, (size_t)cfg->max_seq_len * C, (size_t)4 * C * C / tp * 3,
                      (size_t)4 * C, (size_t)V * C, (size_t)cfg->max_seq_len * C};
    // (gradients go to their own buffers, never read back: the values stay the same scale pass after pass)
    enum { X, Y, QKV, DQKV, ATTY, ATT, FCH, GELU, DBIG, DX, W, BIAS, MEAN, RSTD, SCRATCH, WTE, LOGITS, WPE, DW, DB,
           DWTE, DWPE, NBUF };
    float *p[NBUF];
    size_t total = 0;
    for (int i = 0; i < NBUF; i++) total += sizes[i];
    float *mem = (float *)alignedMallocCheck(sizeof(float) * total);
    for (size_t i = 0; i < total; i++) mem[i] = (float)((i * 2654435761u) % 1000) * 1e-5f - 0.005f;
    for (int i = 0; i < NBUF; i++) p[i] = i == 0 ? mem : p[i - 1] + sizes[i - 1];
    int *tokens = (int *)mallocCheck(sizeof(int) * (size_t)N);
    for (int i = 0; i < N; i++) tokens[i] = (int)((i * 2654435761u) % (unsigned)cfg->vocab_size) % V;
    StageKernelTimes t;
    double start = wall_seconds();
    int passes = 0;
    for (int pass = -1; pass < 3 || wall_seconds() - start < min_s; pass++) {
        if (pass == 0) memset(&t, 0, sizeof(t)), passes = 0, start = wall_seconds();  // (pass -1: the warm-up)
        PLAN_TIME(t.layer_f, {
            layernorm_forward(p[Y], p[MEAN], p[RSTD], p[X], p[BIAS], p[BIAS], Nl, C);
            linear_forward(p[QKV], p[Y], p[W], p[BIAS], NULL, N, C, 3 * Cl);
            for (int k = 0; k < cp; k++) attention_forward(p[ATTY], p[ATT], NULL, p[QKV], B, T, Cl, NHl);
            linear_forward(p[DX], p[ATTY], p[W], p[BIAS], NULL, N, Cl, C);
            layernorm_forward(p[Y], p[MEAN], p[RSTD], p[DX], p[BIAS], p[BIAS], Nl, C);
            linear_forward(p[FCH], p[Y], p[W], p[BIAS], NULL, N, C, 4 * Cl);
            gelu_forward(p[GELU], p[FCH], n4);
            linear_forward(p[DX], p[GELU], p[W], p[BIAS], NULL, N, 4 * Cl, C);
        });
        PLAN_TIME(t.layer_b_input, {
            linear_act_backward_input(p[DBIG], p[FCH], p[X], p[W], N, 4 * Cl, C);
            linear_backward_input(p[Y], p[DBIG], p[W], N, C, 4 * Cl);
            layernorm_backward(p[DX], p[DW], p[DW], p[Y], p[X], p[BIAS], p[MEAN], p[RSTD], Nl, C);
            linear_backward_input(p[ATTY], p[X], p[W], N, Cl, C);
            for (int k = 0; k < cp; k++) attention_backward(p[DQKV], p[SCRATCH], p[ATTY], p[QKV], p[ATT], B, T, Cl, NHl);
            linear_backward_input(p[Y], p[DQKV], p[W], N, C, 3 * Cl);
            layernorm_backward(p[DX], p[DW], p[DW], p[Y], p[X], p[BIAS], p[MEAN], p[RSTD], Nl, C);
        });
        PLAN_TIME(t.layer_b_weight, {
            linear_backward_weight(p[DW], NULL, p[X], p[GELU], N, 4 * Cl, C);
            column_sum_accumulate(p[DB], p[X], Nl, C);
            linear_backward_weight(p[DW], p[DB], p[DBIG], p[Y], N, C, 4 * Cl);
            linear_backward_weight(p[DW], NULL, p[X], p[ATTY], N, Cl, C);
            column_sum_accumulate(p[DB], p[X], Nl, C);
            linear_backward_weight(p[DW], p[DB], p[DQKV], p[Y], N, C, 3 * Cl);
        });
        PLAN_TIME(t.embed_f, encoder_forward(p[X], tokens, p[WTE], p[WPE], B, T, C));
        PLAN_TIME(t.embed_b, encoder_backward(p[DWTE], p[DWPE], p[X], tokens, B, T, C));
        PLAN_TIME(t.head_f, {
            layernorm_forward(p[Y], p[MEAN], p[RSTD], p[X], p[BIAS], p[BIAS], Nl, C);
            matmul(0, 1, N, V, C, 1.0f, p[Y], C, p[WTE], C, 0.0f, p[LOGITS], V);
            softmax_crossentropy(p[LOGITS], p[MEAN], tokens, N, V, 1e-3f);
        });
        PLAN_TIME(t.head_b, {
            matmul(0, 0, N, C, V, 1.0f, p[LOGITS], V, p[WTE], C, 0.0f, p[DX], C);
            matmul(1, 0, V, C, N, 1.0f, p[LOGITS], V, p[Y], C, 1.0f, p[DWTE], C);
            layernorm_backward(p[DX], p[DW], p[DW], p[Y], p[X], p[BIAS], p[MEAN], p[RSTD], Nl, C);
        });
        passes++;
    }
    double *parts[] = {&t.layer_f, &t.layer_b_input, &t.layer_b_weight, &t.embed_f, &t.embed_b, &t.head_f, &t.head_b};
    for (size_t k = 0; k < sizeof(parts) / sizeof(parts[0]); k++) *parts[k] /= passes;
    free(tokens);
    free(mem);
    return t;
}

// Seconds per element of an AdamW step (optimizer.h) over a 4M-element tensor.
static double plan_measure_adamw(void) {
    const int64_t n = 1 << 22;
    ParamLayout pl = {0};
    ParamTensor one = {0};
    one.offset = 0, one.decay = 1;
    pl.tensors = &one, pl.num_tensors = 1, pl.num_elements = n;
    float *buf = (float *)alignedMallocCheck(sizeof(float) * 4 * (size_t)n);
    for (int64_t i = 0; i < 4 * n; i++) buf[i] = 1e-3f;
    AdamWConfig ac = {1e-4f, 0.9f, 0.95f, 1e-8f, 0.0f, 1};
    double sec = 0;
    adamw_update_range(&pl, buf, buf + n, 0, buf + 2 * n, buf + 3 * n, 0, n, &ac, 1.0f);  // (warm)
    for (int r = 0; r < 3; r++)
        PLAN_TIME(sec, adamw_update_range(&pl, buf, buf + n, 0, buf + 2 * n, buf + 3 * n, 0, n, &ac, 1.0f));
    free(buf);
    return sec / 3 / (double)n;
}

// A read of p[0, n) (a page a 1024 floats) and an add to every float, as a backward accumulates
// into its gradients.
static float plan_accumulate(float *p, size_t n) {
    float s = 0.0f;
    for (size_t i = 0; i < n; i += 1024) s += p[i];  // (the read: a released page maps the zero page)
    for (size_t i = 0; i < n; i++) p[i] += 1.0f;
    return s;
}

// This process's resident bytes now (/proc/self/statm), 0 when unknown.
static double resident_bytes(void) {
    long pages = 0, rss = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f && fscanf(f, "%ld %ld", &pages, &rss) != 2) rss = 0;
    if (f) fclose(f);
    return (double)rss * (double)sysconf(_SC_PAGESIZE);
}

// Seconds of `reps` 128^3 sgemms: the unit of compute of the contention loop.
static double plan_spin_compute(float *buf, int reps) {
    const int n = 128;
    double t0 = wall_seconds();
    for (int r = 0; r < reps; r++) matmul(0, 1, n, n, n, 1.0f, buf, n, buf + n * n, n, 0.0f, buf + 2 * n * n, n);
    return wall_seconds() - t0;
}

// What plan --measure-local finds (rank 0 prints it as lines, plan.c reads them).
typedef struct { int B, cp, tp, sp; StageKernelTimes t; } ShapeTimes;
#define PLAN_MAX_SHAPES 256
#define PLAN_SYNC_POINTS 5
// The collectives the model times: all-reduce (k = 2 in the ring model), reduce-scatter, all-gather (k = 1).
typedef enum { PLAN_ALL_REDUCE, PLAN_REDUCE_SCATTER, PLAN_ALL_GATHER, PLAN_OPS } PlanOp;
static const char *const plan_op_names[PLAN_OPS] = {"all_reduce", "reduce_scatter", "all_gather"};
typedef struct {
    double op_gbs[PLAN_OPS], op_us[PLAN_OPS];  // each collective's ring-model bandwidth and per-hop latency
    // the time a synchronisation of 2 ranks ([0]) and of all of them ([1]) loses when each rank
    // computes chunk_s[k] seconds between them (the ranks' scheduling on shared cores)
    double chunk_s[PLAN_SYNC_POINTS], loss_s[2][PLAN_SYNC_POINTS];
    double baseline_mb;  // a rank's memory besides the model's
    double adamw_s;      // AdamW, seconds per element
    double zero_s[2][2];  // [pattern: ZeRO-2's reduction, ZeRO-3's gather][2 ranks, all]: seconds per byte
    int nshapes;
    ShapeTimes shapes[PLAN_MAX_SHAPES];
} LocalFigures;

// The time a synchronisation (a small all-reduce) of group g loses when every rank computes chunks
// of `reps` unit sgemms between them: an iteration's time less the chunk's (timed with every rank
// computing at once without synchronising: *chunk_s) and less the all-reduce's own (timed alone,
// which the ring model already counts).
static double plan_sync_loss(CommGroup *g, CommGroup *world, float *buf, int reps, double *chunk_s) {
    double unit = 0.0;
    int units = 0;
    comm_barrier(world);
    for (double t0 = wall_seconds(); wall_seconds() - t0 < 0.1; units++) unit += plan_spin_compute(buf, 1);
    *chunk_s = comm_mean(world, unit / units) * reps;
    comm_barrier(world);
    double t0 = wall_seconds();
    for (int it = 0; it < 50; it++) comm_all_reduce(g, buf, 1024, COMM_F32);
    double reduce = comm_mean(world, (wall_seconds() - t0) / 50);
    int iters = 8 + (int)(0.15 / *chunk_s);
    comm_barrier(world);
    t0 = wall_seconds();
    for (int it = 0; it < iters; it++) {
        plan_spin_compute(buf, reps);
        comm_all_reduce(g, buf, 1024, COMM_F32);
    }
    double loss = comm_mean(world, (wall_seconds() - t0) / iters) - *chunk_s - reduce;
    return loss > 0 ? loss : 0.0;
}

// Seconds per byte of ZeRO's pattern on the CPU trainer (zero_cpu.h) over group g, on a buffer of
// segments of seg floats: [0] ZeRO-2's micro-step (a backward accumulating into each released segment
// of the full gradient, its reduce-scatter started behind it, the segment released once reduced) less
// the same accumulation into a resident buffer; [1] ZeRO-3's gather (each released segment of the
// weights all-gathered before use). Every rank at once.
static void plan_measure_zero(CommGroup *g, CommGroup *world, size_t seg, int nseg, double out[2]) {
    size_t n = seg * (size_t)nseg, *counts = (size_t *)mallocCheck(sizeof(size_t) * (size_t)g->size);
    float *full = map_zeroed(n * sizeof(float)), *resident = (float *)callocCheck(n, sizeof(float));
    float *shard = (float *)callocCheck(seg, sizeof(float));
    CommRequest *q = (CommRequest *)mallocCheck(sizeof(CommRequest) * (size_t)nseg);
    comm_even_counts(seg, g->size, counts);
    volatile float sink = 0;
    double plain = 0, zero2 = 0, zero3 = 0;
    const int reps = 4;
    for (int r = -1; r < reps; r++) {  // (r -1: the warm-up)
        double p0 = 0, z2 = 0, z3 = 0;
        comm_barrier(world);
        PLAN_TIME(p0, for (int s = nseg - 1; s >= 0; s--) sink += plan_accumulate(resident + s * seg, seg));
        comm_barrier(world);
        PLAN_TIME(z2, {
            for (int s = nseg - 1; s >= 0; s--) {
                sink += plan_accumulate(full + s * seg, seg);
                q[s] = comm_reduce_scatter_start(g, full + s * seg, shard, counts, COMM_F32);
                for (int t = nseg - 1; t > s; t--) comm_test(&q[t]);  // (the hooks progress what is in flight)
            }
            for (int s = nseg - 1; s >= 0; s--) {
                comm_wait(&q[s]);
                release_range(full, (int64_t)(s * seg), (int64_t)((s + 1) * seg));
            }
        });
        comm_barrier(world);
        PLAN_TIME(z3, {
            for (int s = 0; s < nseg; s++) {
                CommRequest a = comm_all_gather_start(g, shard, full + s * seg, counts, COMM_F32);
                comm_wait(&a);
                sink += full[s * seg];
                release_range(full, (int64_t)(s * seg), (int64_t)((s + 1) * seg));
            }
        });
        if (r >= 0) plain += p0, zero2 += z2, zero3 += z3;
    }
    (void)sink;
    double bytes = 4.0 * (double)n * reps;
    out[0] = comm_mean(world, zero2 > plain ? (zero2 - plain) / bytes : 0.0);
    out[1] = comm_mean(world, zero3 / bytes);
    munmap(full, n * sizeof(float));
    free(resident);
    free(shard);
    free(q);
    free(counts);
}

// plan --measure-local FILE under mpirun over the ranks to plan for (or alone,
// for one): every rank runs the same measurements at once, so each figure is
// what a rank gets while the others compute too (sharing the cores, the
// caches and the memory bandwidth). FILE lists the shapes "B tp sp", a line
// each. Rank 0 prints:
//   comm.h's all-reduce, reduce-scatter and all-gather over every rank at
//   4 KB .. 4 MB, each fitted to t = a + b bytes: the ring model's per-hop
//   latency a / k(p-1) and bandwidth 1 / beta, beta = b p / k(p-1); the time a synchronisation of
//   two ranks and of all of them loses (plan_sync_loss); the rank's memory
//   besides the model (peak RSS less the buffers here); AdamW per element;
//   each shape's StageKernelTimes.
static void plan_measure_local(const GPTConfig *cfg, int T, const char *shapes_file, int *argc, char ***argv) {
    Comm comm;
    LaunchInfo li = launch_detect();
    int pair = li.world > 2 && li.world % 2 == 0 ? 2 : 1;  // (tensor groups of two, for the pair's loss)
    comm_init(&comm, argc, argv, grid_model_parallel(GRID_TP, pair), 300);
    CommGroup *g = comm_group(&comm, COMM_WORLD);
    int p = g->size;
    LocalFigures f;
    memset(&f, 0, sizeof(f));
    FILE *in = open_input(shapes_file, "--measure-local", NULL);
    ShapeTimes st;
    while (f.nshapes < PLAN_MAX_SHAPES && fscanf(in, "%d %d %d %d", &st.B, &st.cp, &st.tp, &st.sp) == 4) f.shapes[f.nshapes++] = st;
    fclose(in);
    const size_t sizes[] = {256, 2048, 16384, 131072, 1048576};  // floats
    const int n = sizeof(sizes) / sizeof(sizes[0]);
    float *buf = (float *)callocCheck(sizes[n - 1], sizeof(float));
    if (p > 1) {
        size_t *counts = (size_t *)mallocCheck(sizeof(size_t) * (size_t)p);
        float *recv = (float *)callocCheck(sizes[n - 1], sizeof(float));
        for (int op = 0; op < PLAN_OPS; op++) {
            double x[5], y[5], w[5];
            for (int i = 0; i < n; i++) {
                comm_even_counts(sizes[i], p, counts);
                int reps = 20;
                double t0 = 0;
                for (int r = -1; r < reps; r++) {  // (r -1: the warm-up)
                    if (r == 0) comm_barrier(g), t0 = wall_seconds();
                    CommRequest q = op == PLAN_ALL_REDUCE ? comm_all_reduce_start(g, buf, sizes[i], COMM_F32)
                                    : op == PLAN_REDUCE_SCATTER
                                        ? comm_reduce_scatter_start(g, buf, recv, counts, COMM_F32)
                                        : comm_all_gather_start(g, buf, recv, counts, COMM_F32);
                    comm_wait(&q);
                }
                x[i] = 4.0 * (double)sizes[i];
                y[i] = comm_mean(g, (wall_seconds() - t0) / reps);
                w[i] = 1.0 / (y[i] * y[i]);  // (relative errors: the small sizes weigh as much as the large)
            }
            double a, b, k = op == PLAN_ALL_REDUCE ? 2.0 : 1.0;
            linear_fit(x, y, w, n, &a, &b);
            if (b <= 0) b = y[n - 1] / x[n - 1];
            f.op_gbs[op] = 1e-9 * k * (p - 1) / (b * p);
            f.op_us[op] = (a > 0 ? a : 0) / (k * (p - 1)) * 1e6;
        }
        free(recv);
        free(counts);
        ParamLayout whole;  // (segments of the model's layer size)
        param_layout_init(&whole, cfg);
        size_t seg = (size_t)whole.layer_stride;
        param_layout_free(&whole);
        int nseg = cfg->num_layers + 1;
        plan_measure_zero(g, g, seg, nseg, f.zero_s[1]);
        if (pair == 2) plan_measure_zero(comm_group(&comm, COMM_TENSOR), g, seg, nseg, f.zero_s[0]);
        else memcpy(f.zero_s[0], f.zero_s[1], sizeof(f.zero_s[1]));
        for (int k = 0; k < PLAN_SYNC_POINTS; k++) {
            int reps = 1 << (2 * k);  // 1 .. 256 unit sgemms between synchronisations
            f.loss_s[1][k] = plan_sync_loss(g, g, buf, reps, &f.chunk_s[k]);
            f.loss_s[0][k] = pair == 2 ? plan_sync_loss(comm_group(&comm, COMM_TENSOR), g, buf, reps, &f.chunk_s[k])
                                       : f.loss_s[1][k];
        }
    }
    if (p == 1) plan_spin_compute(buf, 1);  // (OpenBLAS's buffers, as a training rank has them)
    free(buf);
    // what the rank holds now: the program, its libraries (OpenBLAS's buffers), MPI's
    f.baseline_mb = comm_mean(g, resident_bytes()) / 1e6;
    comm_barrier(g);
    f.adamw_s = comm_mean(g, plan_measure_adamw());
    for (int i = 0; i < f.nshapes; i++) {
        ShapeTimes *s = &f.shapes[i];
        comm_barrier(g);
        StageKernelTimes t = plan_measure_stage(cfg, s->B, T, s->cp, s->tp, s->sp, 0.25);
        double *fields[] = {&t.layer_f, &t.layer_b_input, &t.layer_b_weight, &t.embed_f, &t.embed_b, &t.head_f,
                            &t.head_b};
        for (size_t k = 0; k < sizeof(fields) / sizeof(fields[0]); k++) *fields[k] = comm_mean(g, *fields[k]);
        s->t = t;
    }
    if (g->rank == 0) {
        printf("rank_baseline_mb = %.2f\nadamw_ns = %.4f\n", f.baseline_mb, f.adamw_s * 1e9);
        for (int op = 0; op < PLAN_OPS; op++) printf("comm %d = %.6f %.4f\n", op, f.op_gbs[op], f.op_us[op]);
        printf("zero = %.6f %.6f %.6f %.6f\n", f.zero_s[0][0] * 1e9 * 1024, f.zero_s[1][0] * 1e9 * 1024,
               f.zero_s[0][1] * 1e9 * 1024, f.zero_s[1][1] * 1e9 * 1024);  // ns per KB
        for (int k = 0; k < PLAN_SYNC_POINTS; k++)
            printf("sync %d = %.9f %.9f %.9f\n", k, f.chunk_s[k], f.loss_s[0][k], f.loss_s[1][k]);
        for (int i = 0; i < f.nshapes; i++) {
            const ShapeTimes *s = &f.shapes[i];
            printf("kernels %d %d %d %d = %.9f %.9f %.9f %.9f %.9f %.9f %.9f\n", s->B, s->cp, s->tp, s->sp, s->t.layer_f,
                   s->t.layer_b_input, s->t.layer_b_weight, s->t.embed_f, s->t.embed_b, s->t.head_f, s->t.head_b);
        }
    }
    comm_finalize(&comm);
}

#endif  // LLMC_PLAN_MEASURE_H
