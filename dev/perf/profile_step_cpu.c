// profile_step_cpu.c: where a CPU training step's time goes. Runs forward,
// backward, gradient norm and AdamW of the shipped CPU model (llmc/gpt_cpu.h)
// on synthetic tokens and prints, per step: milliseconds per phase; per layer
// kernel (forward and backward, summed over the layers) its calls, time, the
// OpenMP parallel regions it entered (its own and OpenBLAS's) and the bytes
// its tensors hold (each input read and output written once: the traffic a
// fused pass would need); the matmuls' GFLOP/s; and the sgemm peak measured
// in the same run (the best of several probes). Run it with OMP_NUM_THREADS=1
// and =2 to see what the threads buy at each kernel.
//   build/dev/perf/profile_step_cpu [MODEL=d12] [B=4] [T=64] [steps=8] [matmul=auto]
// MODEL: a preset (d12|d24|d36|d48) or LxCxNHxV, e.g. 4x128x4x65 (max_seq_len = T).
#include "llmc/cpu_layers.h"
#include "tests/omp_regions.h"  // defines: omp_regions_entered

// ---------------------------------------------------------------------------
// per-kernel accounting: every kernel call gpt_cpu.h makes goes through
// PROF(name, bytes, flops, call), which adds its time, regions and bytes to
// the row `name`. Kernels that share a team (gpt_cpu.h's GPT_TEAM) end at a
// barrier: thread 0's time is the team's, and only thread 0 records.
enum { MAX_OPS = 40 };
typedef struct {
    const char *name;
    double seconds, bytes, flops;
    long calls, regions;
} OpStat;
static OpStat g_ops[MAX_OPS];
static int g_nops;
static int g_in_backward;  // the phase rows are charged to (set by main)

static OpStat *op_row(const char *name) {
    char full[64];
    snprintf(full, sizeof(full), "%s %s", name, g_in_backward ? "bwd" : "fwd");
    for (int i = 0; i < g_nops; i++)
        if (strcmp(g_ops[i].name, full) == 0) return &g_ops[i];
    CHECK(g_nops < MAX_OPS, "more than %d profiled kernels", MAX_OPS);
    g_ops[g_nops].name = strdup(full);
    return &g_ops[g_nops++];
}
#define PROF(name, nbytes, nflops, call)                                              \
    ({                                                                                \
        int rec_ = omp_thread_id() == 0;                                              \
        long r_ = omp_regions_entered();                                              \
        double t_ = wall_seconds();                                                   \
        __typeof__(call) v_ = call;                                                   \
        if (rec_) {                                                                   \
            OpStat *row_ = op_row(name);                                              \
            row_->seconds += wall_seconds() - t_;                                     \
            row_->regions += omp_regions_entered() - r_;                              \
            row_->bytes += 4.0 * (double)(nbytes);                                    \
            row_->flops += (double)(nflops);                                          \
            row_->calls++;                                                            \
        }                                                                             \
        v_;                                                                           \
    })
// (void kernels: PROF over a comma expression yielding 0)
#define PROFV(name, nbytes, nflops, call) ((void)PROF(name, nbytes, nflops, ((call), 0)))

// The kernels gpt_cpu.h calls, each with the floats its tensors hold (read + written) and its FLOPs
// (attention's: the whole T x T square's, as the step's FLOP count has them; the kernel computes
// about the causal half of it, so its GFLOP/s read about twice what its tiles run at).
#define D(x) ((double)(x))
#define matmul_team(ta, tb, M, N, K, al, A, lda, Bm, ldb, be, Cm, ldc)                \
    PROFV("classifier matmul", D(M) * (K) + D(K) * (N) + D(M) * (N) * (1 + ((be) != 0.0f)), 2 * D(M) * (N) * (K), \
          matmul_team(ta, tb, M, N, K, al, A, lda, Bm, ldb, be, Cm, ldc))
#define encoder_forward(out, inp, wte, wpe, B, T, C) \
    PROFV("encoder", 3 * D(B) * (T) * (C) + D(B) * (T), 0, encoder_forward(out, inp, wte, wpe, B, T, C))
#define encoder_backward(dwte, dwpe, dout, inp, B, T, C) \
    PROFV("encoder", 5 * D(B) * (T) * (C) + D(B) * (T), 0, encoder_backward(dwte, dwpe, dout, inp, B, T, C))
#define layernorm_forward(out, mean, rstd, inp, w, b, N, C) \
    PROFV("layernorm", 2 * D(N) * (C) + 2 * D(C) + 2 * D(N), 0, layernorm_forward(out, mean, rstd, inp, w, b, N, C))
#define layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, C)                           \
    PROFV("layernorm", 4 * D(N) * (C) + 5 * D(C) + 2 * D(N), 0,                       \
          layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, C))
#define linear_forward(out, inp, w, b, res, N, IC, OC)                                \
    PROFV((res) ? "linear+residual" : "linear", D(N) * (IC) + D(IC) * (OC) + D(N) * (OC) * (1 + ((res) != NULL)), \
          2 * D(N) * (IC) * (OC), linear_forward(out, inp, w, b, res, N, IC, OC))
#define linear_act_forward(out, g, inp, w, b, res, N, IC, OC)                                     \
    PROFV("linear+gelu", D(N) * (IC) + D(IC) * (OC) + 2 * D(N) * (OC), 2 * D(N) * (IC) * (OC), \
          linear_act_forward(out, g, inp, w, b, res, N, IC, OC))
#define linear_backward_input(dinp, dout, w, N, IC, OC)                               \
    PROFV("linear dinp", D(N) * (OC) + D(IC) * (OC) + D(N) * (IC), 2 * D(N) * (IC) * (OC), \
          linear_backward_input(dinp, dout, w, N, IC, OC))
#define linear_act_backward_input(dinp, g, dout, w, N, IC, OC)                                       \
    PROFV("linear dinp+gelu", D(N) * (OC) + D(IC) * (OC) + 3 * D(N) * (IC), 2 * D(N) * (IC) * (OC), \
          linear_act_backward_input(dinp, g, dout, w, N, IC, OC))
#define linear_backward_weight(dw, db, dout, inp, N, IC, OC)                          \
    PROFV("linear dweight", D(N) * (OC) + D(N) * (IC) + 2 * D(IC) * (OC), 2 * D(N) * (IC) * (OC), \
          linear_backward_weight(dw, db, dout, inp, N, IC, OC))
#define column_sum_accumulate(out, a, N, C) \
    PROFV("bias grad", D(N) * (C) + 2 * D(C), 0, column_sum_accumulate(out, a, N, C))
#define attention_forward(out, att, lse, qkv, B, T, C, NH)                            \
    PROFV("attention", 4 * D(B) * (T) * (C) + D(B) * (NH) * (T) * (T), 4 * D(B) * (T) * (T) * (C), \
          attention_forward(out, att, lse, qkv, B, T, C, NH))
#define attention_backward(dqkv, scratch, dout, qkv, att, B, T, C, NH)                \
    PROFV("attention", 7 * D(B) * (T) * (C) + D(B) * (NH) * (T) * (T), 8 * D(B) * (T) * (T) * (C), \
          attention_backward(dqkv, scratch, dout, qkv, att, B, T, C, NH))
#define gelu_forward(out, inp, n) PROFV("gelu", 2 * D(n), 0, gelu_forward(out, inp, n))
#define gelu_backward_inplace(d, inp, n) PROFV("gelu", 3 * D(n), 0, gelu_backward_inplace(d, inp, n))
#define softmax_crossentropy(logits, losses, targets, N, V, dloss) \
    PROF("softmax+loss", 2 * D(N) * (V) + 2 * D(N), 0, softmax_crossentropy(logits, losses, targets, N, V, dloss))
#include "llmc/gpt_cpu.h"
#include "llmc/optimizer.h"
#undef matmul_team

// "4x128x4x65" -> L 4, C 128, NH 4, V 65; else a preset
static int parse_model(const char *s, int T, GPTConfig *cfg) {
    if (gpt_config_preset(s, cfg)) return 1;
    int L, C, NH, V;
    char end;
    if (sscanf(s, "%dx%dx%dx%d%c", &L, &C, &NH, &V, &end) != 4) return 0;
    *cfg = (GPTConfig){T, V, pad_vocab(V), L, NH, C};
    return gpt_config_problem(cfg) == NULL;
}

int main(int argc, char **argv) {
    const char *model = argc > 1 ? argv[1] : "d12";
    int B = argc > 2 ? atoi(argv[2]) : 4, T = argc > 3 ? atoi(argv[3]) : 64, steps = argc > 4 ? atoi(argv[4]) : 8;
    matmul_set_backend(argc > 5 ? argv[5] : "auto");
    GPTConfig cfg;
    if (T < 1 || !parse_model(model, T, &cfg)) die_usage("unknown model '%s' (d12|d24|d36|d48, or LxCxNHxV)", model);
    if (B < 1 || T > cfg.max_seq_len || steps < 3) die_usage("need B >= 1, 1 <= T <= %d, steps >= 3", cfg.max_seq_len);
    GPT m;
    gpt_init(&m, &cfg);
    gpt2_init_params(&m.layout, m.params, 1);
    int *x = (int *)mallocCheck(sizeof(int) * (size_t)B * T), *y = (int *)mallocCheck(sizeof(int) * (size_t)B * T);
    for (int i = 0; i < B * T; i++) {
        x[i] = (int)((i * 7919u) % (unsigned)cfg.vocab_size);
        y[i] = (int)((i * 104729u) % (unsigned)cfg.vocab_size);
    }
    int64_t n = m.layout.num_elements;
    float *adam_m = (float *)callocCheck((size_t)n, sizeof(float)), *adam_v = (float *)callocCheck((size_t)n, sizeof(float));
    enum { FWD, BWD, NORM, ADAM, PHASES };
    double t_phase[PHASES] = {0};
    long regions_phase[PHASES] = {0};
    const int warmup = 2;
    for (int s = 0; s < steps; s++) {
        if (s == warmup) {  // first touches of the buffers are not steady state
            memset(t_phase, 0, sizeof(t_phase));
            memset(regions_phase, 0, sizeof(regions_phase));
            for (int i = 0; i < g_nops; i++) {
                const char *name = g_ops[i].name;
                g_ops[i] = (OpStat){.name = name};
            }
        }
        long r0 = omp_regions_entered();
        double t0 = wall_seconds();
        g_in_backward = 0;
        gpt_forward(&m, x, y, B, T, 1.0f / (float)(B * T));
        double t1 = wall_seconds();
        long r1 = omp_regions_entered();
        g_in_backward = 1;
        gpt_backward(&m);
        double t2 = wall_seconds();
        long r2 = omp_regions_entered();
        float norm = (float)sqrt(sum_of_squares(m.grads, n));
        double t3 = wall_seconds();
        long r3 = omp_regions_entered();
        AdamWConfig ac = {1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, s + 1};
        adamw_update_range(&m.layout, m.params, m.grads, ADAMW_ZERO_GRADS, adam_m, adam_v, 0, n, &ac,
                           grad_clip_scale(norm, 1.0f));
        double t4 = wall_seconds();
        t_phase[FWD] += t1 - t0;
        t_phase[BWD] += t2 - t1;
        t_phase[NORM] += t3 - t2;
        t_phase[ADAM] += t4 - t3;
        regions_phase[FWD] += r1 - r0;
        regions_phase[BWD] += r2 - r1;
        regions_phase[NORM] += r3 - r2;
        regions_phase[ADAM] += omp_regions_entered() - r3;
    }
    int k = steps - warmup;
    double total = t_phase[FWD] + t_phase[BWD] + t_phase[NORM] + t_phase[ADAM], mm_s = 0, mm_flops = 0;
    printf("%s (L %d, C %d, NH %d, V %d) B=%d T=%d, matmul %s, %d threads, mean of %d steps:\n", model,
           cfg.num_layers, cfg.channels, cfg.num_heads, cfg.vocab_size, B, T, matmul_backend_name(), omp_threads(), k);
    printf("  %-26s %6s %9s %6s %8s %9s %7s\n", "kernel (all layers)", "calls", "ms", "%step", "regions", "MB", "GFLOP/s");
    for (int i = 0; i < g_nops; i++) {
        OpStat *o = &g_ops[i];
        printf("  %-26s %6.0f %9.3f %5.1f%% %8.0f %9.2f", o->name, (double)o->calls / k, o->seconds * 1e3 / k,
               100 * o->seconds / total, (double)o->regions / k, o->bytes / k * 1e-6);
        if (o->flops > 0) printf(" %7.1f", o->flops / o->seconds * 1e-9);
        printf("\n");
        mm_s += o->flops > 0 ? o->seconds : 0;
        mm_flops += o->flops;
    }
    const char *phase_names[PHASES] = {"forward (+ classifier bwd)", "backward", "grad norm", "AdamW (+ zero grads)"};
    for (int p = 0; p < PHASES; p++)
        printf("  %-26s %6s %9.3f %5.1f%% %8.0f\n", phase_names[p], "", t_phase[p] * 1e3 / k, 100 * t_phase[p] / total,
               (double)regions_phase[p] / k);
    printf("  step %.3f ms; kernels with FLOPs (matmuls, attention) %.3f ms at %.1f GFLOP/s; %.3f GFLOP/step\n",
           total * 1e3 / k, mm_s * 1e3 / k, mm_flops / mm_s * 1e-9, mm_flops / k * 1e-9);
    matmul_print_shape_choices(stdout);
    double peak = matmul_measure_peak_gflops(1024, 10);
    printf("  step at %.1f GFLOP/s = %.1f%% of sgemm peak %.1f GFLOP/s (%s)\n", mm_flops / total * 1e-9,
           100 * mm_flops / total * 1e-9 / peak, peak, matmul_peak_source());
    free(adam_m);
    free(adam_v);
    free(x);
    free(y);
    gpt_free(&m);
    return 0;
}
