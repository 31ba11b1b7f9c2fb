// profile_step_cpu.c: where a CPU training step's time goes. Runs forward,
// backward, gradient norm and AdamW of the shipped CPU model (llmc/gpt_cpu.h)
// on synthetic tokens and prints milliseconds per phase, the part of each
// pass spent in matmuls, their GFLOP/s, and the OpenBLAS (or native) sgemm
// peak measured in the same run.
//   build/dev/perf/profile_step_cpu [preset=d12] [B=4] [T=64] [steps=8] [matmul=auto]
#include "llmc/cpu_matmul.h"

// Every matmul of the model goes through this wrapper, which adds its time and FLOPs.
static double g_matmul_seconds, g_matmul_flops;
static inline void timed_matmul(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                                const float *B, int ldb, float beta, float *C, int ldc) {
    double t = wall_seconds();
    matmul(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    g_matmul_seconds += wall_seconds() - t;
    g_matmul_flops += 2.0 * M * N * K;
}
#define matmul timed_matmul
#include "llmc/gpt_cpu.h"
#include "llmc/optimizer.h"
#undef matmul

int main(int argc, char **argv) {
    const char *preset = argc > 1 ? argv[1] : "d12";
    int B = argc > 2 ? atoi(argv[2]) : 4, T = argc > 3 ? atoi(argv[3]) : 64, steps = argc > 4 ? atoi(argv[4]) : 8;
    matmul_set_backend(argc > 5 ? argv[5] : "auto");
    GPTConfig cfg;
    if (!gpt_config_preset(preset, &cfg)) die_usage("unknown preset '%s' (d12|d24|d36|d48)", preset);
    if (B < 1 || T < 1 || T > cfg.max_seq_len || steps < 3) die_usage("need B >= 1, 1 <= T <= %d, steps >= 3", cfg.max_seq_len);
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
    double t_phase[PHASES] = {0}, t_mm[2] = {0}, flops_mm = 0;
    const int warmup = 2;
    for (int s = 0; s < steps; s++) {
        if (s == warmup) {  // first touches of the buffers are not steady state
            memset(t_phase, 0, sizeof(t_phase));
            t_mm[0] = t_mm[1] = flops_mm = 0;
        }
        double t0 = wall_seconds();
        g_matmul_seconds = g_matmul_flops = 0;
        gpt_forward(&m, x, y, B, T, 1.0f / (float)(B * T));
        double t1 = wall_seconds();
        t_mm[0] += g_matmul_seconds;
        flops_mm += g_matmul_flops;
        g_matmul_seconds = g_matmul_flops = 0;
        gpt_backward(&m);
        double t2 = wall_seconds();
        t_mm[1] += g_matmul_seconds;
        flops_mm += g_matmul_flops;
        float norm = (float)sqrt(sum_of_squares(m.grads, n));
        double t3 = wall_seconds();
        AdamWConfig ac = {1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, s + 1};
        adamw_update_range(&m.layout, m.params, m.grads, ADAMW_ZERO_GRADS, adam_m, adam_v, 0, n, &ac,
                           grad_clip_scale(norm, 1.0f));
        double t4 = wall_seconds();
        t_phase[FWD] += t1 - t0;
        t_phase[BWD] += t2 - t1;
        t_phase[NORM] += t3 - t2;
        t_phase[ADAM] += t4 - t3;
    }
    int k = steps - warmup;
    double total = t_phase[FWD] + t_phase[BWD] + t_phase[NORM] + t_phase[ADAM];
    printf("%s B=%d T=%d, matmul %s, %d threads, mean of %d steps (ms/step):\n", preset, B, T, matmul_backend_name(),
           omp_threads(), k);
    printf("  forward %.1f (matmul %.1f; the classifier's backward is fused in here)\n", t_phase[FWD] * 1e3 / k,
           t_mm[0] * 1e3 / k);
    printf("  backward %.1f (matmul %.1f)\n", t_phase[BWD] * 1e3 / k, t_mm[1] * 1e3 / k);
    printf("  grad norm %.1f | AdamW (zeroes the gradients) %.1f | total %.1f\n", t_phase[NORM] * 1e3 / k,
           t_phase[ADAM] * 1e3 / k, total * 1e3 / k);
    printf("  matmul %.1f GFLOP/step at %.1f GFLOP/s; %s %.1f GFLOP/s\n", flops_mm / k * 1e-9,
           flops_mm / (t_mm[0] + t_mm[1]) * 1e-9, MATMUL_PEAK_SOURCE, matmul_measure_peak_gflops(1024, 10));
    free(adam_m);
    free(adam_v);
    free(x);
    free(y);
    gpt_free(&m);
    return 0;
}
