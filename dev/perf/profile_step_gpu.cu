// profile_step_gpu.cu: where a GPU training step's time goes, measured with
// CUDA events (the lent GPU machines have no Nsight Systems). Runs the
// shipped GPU model (llmc/gpt_gpu.cuh) on synthetic tokens, one micro-step a
// step, and prints per phase (forward with its input upload and the
// classifier's backward, backward, gradient norm, AdamW) the GPU's
// milliseconds, the part of the forward and backward spent in matmuls
// (cuBLASLt) and in attention with their TFLOP/s, the host's time to queue
// the backward against the GPU's time to run it (what CUDA graphs could save
// is bounded by the first when it is the smaller), and MFU against the
// cuBLASLt bf16 peak measured in the same run and the 989 TFLOP/s datasheet.
// The FLOPs it counts call by call must add up to the model's formula
// (gpt_flops_per_token over the padded vocabulary): a matmul the wrappers
// below missed shows there.
//   profile_step_gpu [preset=d12|d24|d36|d48|tiny] [B=16] [T=1024] [attention=flash|cudnn] [recompute=none] [steps=8]
// "tiny" (L=2, C=64, NH=2, V=257) is for the emulated build (build/emu/),
// where the times are the CPU's and mean nothing; the FLOP count still does.
#include "llmc/attention_cudnn.cuh"
#include "llmc/attention_flash.cuh"
#include "llmc/matmul.cuh"

// Every matmul and attention call of the model is bracketed by two events on
// its stream; after the step's synchronisation their elapsed times add up by kind.
enum { KIND_MATMUL, KIND_ATTENTION, NUM_KINDS };
#define MAX_REGIONS 4096
typedef struct {
    cudaEvent_t start, stop;
    int kind;
    double flops;
} Region;
static Region g_regions[MAX_REGIONS];
static int g_num_regions, g_events_made;

static void region_start(int kind, double flops, cudaStream_t s) {
    CHECK(g_num_regions < MAX_REGIONS, "more than %d timed calls in one phase", MAX_REGIONS);
    Region *r = &g_regions[g_num_regions++];
    if (g_num_regions > g_events_made) {
        CUDA_CHECK(cudaEventCreate(&r->start));
        CUDA_CHECK(cudaEventCreate(&r->stop));
        g_events_made = g_num_regions;
    }
    r->kind = kind;
    r->flops = flops;
    CUDA_CHECK(cudaEventRecord(r->start, s));
}
static void region_stop(cudaStream_t s) { CUDA_CHECK(cudaEventRecord(g_regions[g_num_regions - 1].stop, s)); }

// Adds the regions since the last call to ms[kind] and flops[kind] (after a synchronisation).
static void regions_collect(double ms[NUM_KINDS], double flops[NUM_KINDS]) {
    for (int i = 0; i < g_num_regions; i++) {
        float t = 0.0f;
        CUDA_CHECK(cudaEventElapsedTime(&t, g_regions[i].start, g_regions[i].stop));
        ms[g_regions[i].kind] += t;
        flops[g_regions[i].kind] += g_regions[i].flops;
    }
    g_num_regions = 0;
}

static inline void timed_matmul_forward(MatmulContext *mc, floatX *out, floatX *pre_gelu, const floatX *inp, const floatX *W,
                                        const floatX *bias, int N, int IC, int OC, cudaStream_t s) {
    region_start(KIND_MATMUL, 2.0 * N * IC * OC, s);
    gpu_matmul_forward(mc, out, pre_gelu, inp, W, bias, N, IC, OC, s);
    region_stop(s);
}
template <typename T>
static inline void timed_matmul_backward(MatmulContext *mc, floatX *dinp, float *dW, float *dbias, float *scratch,
                                         const floatX *dout, const T *dbias_src, const floatX *inp, const floatX *W, int N,
                                         int IC, int OC, cudaStream_t s) {
    region_start(KIND_MATMUL, (dW ? 4.0 : 2.0) * N * IC * OC, s);
    gpu_matmul_backward<T>(mc, dinp, dW, dbias, scratch, dout, dbias_src, inp, W, N, IC, OC, s);
    region_stop(s);
}
// Attention FLOPs as gpt_flops_per_token counts them (no causal halving):
// forward Q K^T and P V, 4 B T^2 C; backward twice that.
static inline void timed_flash_forward(floatX *out, float *lse, const floatX *qkv, int B, int T, int C, int NH,
                                       cudaStream_t s) {
    region_start(KIND_ATTENTION, 4.0 * B * T * T * C, s);
    gpu_flash_attention_forward(out, lse, qkv, B, T, C, NH, s);
    region_stop(s);
}
static inline void timed_flash_backward(floatX *dqkv, float *delta, const floatX *dout, const floatX *qkv, const floatX *out,
                                        const float *lse, int B, int T, int C, int NH, cudaStream_t s) {
    region_start(KIND_ATTENTION, 8.0 * B * T * T * C, s);
    gpu_flash_attention_backward(dqkv, delta, dout, qkv, out, lse, B, T, C, NH, s);
    region_stop(s);
}
static inline void timed_cudnn_forward(CudnnAttention *ca, floatX *out, float *lse, const floatX *qkv, int B, int T,
                                       int C, int NH, cudaStream_t s) {
    region_start(KIND_ATTENTION, 4.0 * B * T * T * C, s);
    gpu_cudnn_attention_forward(ca, out, lse, qkv, B, T, C, NH, s);
    region_stop(s);
}
static inline void timed_cudnn_backward(CudnnAttention *ca, floatX *dqkv, float *delta, const floatX *dout,
                                        const floatX *qkv, const floatX *out, const float *lse, int B, int T, int C,
                                        int NH, cudaStream_t s) {
    region_start(KIND_ATTENTION, 8.0 * B * T * T * C, s);
    gpu_cudnn_attention_backward(ca, dqkv, delta, dout, qkv, out, lse, B, T, C, NH, s);
    region_stop(s);
}
#define gpu_matmul_forward timed_matmul_forward
#define gpu_matmul_backward timed_matmul_backward
#define gpu_flash_attention_forward timed_flash_forward
#define gpu_flash_attention_backward timed_flash_backward
#define gpu_cudnn_attention_forward timed_cudnn_forward
#define gpu_cudnn_attention_backward timed_cudnn_backward
#include "llmc/gpt_gpu.cuh"
#undef gpu_matmul_forward
#undef gpu_matmul_backward
#undef gpu_flash_attention_forward
#undef gpu_flash_attention_backward
#undef gpu_cudnn_attention_forward
#undef gpu_cudnn_attention_backward
#include "llmc/model_init.h"
#include "llmc/optimizer.h"

#define DATASHEET_TFLOPS 989.0  // H100/H200 SXM dense bf16

enum { PH_FWD, PH_BWD, PH_NORM, PH_ADAM, NUM_PHASES };

int main(int argc, char **argv) {
    const char *preset = argc > 1 ? argv[1] : "d12";
    int B = argc > 2 ? atoi(argv[2]) : 16, T = argc > 3 ? atoi(argv[3]) : 1024;
    const char *attn = argc > 4 ? argv[4] : "flash";
    const char *recompute = argc > 5 ? argv[5] : "none";
    int steps = argc > 6 ? atoi(argv[6]) : 8;
    RecomputePolicy policy;
    GPTConfig cfg;
    if (strcmp(preset, "tiny") == 0) {
        GPTConfig tiny = {64, 257, pad_vocab(257), 2, 2, 64};
        cfg = tiny;
    } else if (!gpt_config_preset(preset, &cfg)) {
        die_usage("unknown preset '%s' (d12|d24|d36|d48|tiny)", preset);
    }
    if (B < 1 || T < 1 || T > cfg.max_seq_len || steps < 3 || !recompute_parse(recompute, &policy))
        die_usage("need B >= 1, 1 <= T <= %d, recompute none|selective|full|full:K, steps >= 3", cfg.max_seq_len);
    if (strcmp(attn, "flash") != 0 && strcmp(attn, "cudnn") != 0) die_usage("attention '%s' (flash|cudnn)", attn);
    if (!cuda_device_present()) die_usage("no CUDA device found");
    AttentionKind kind = strcmp(attn, "cudnn") == 0 ? ATTENTION_CUDNN : ATTENTION_FLASH;

    MatmulContext probe;  // the bf16 peak, before the model takes the memory
    matmul_init(&probe);
    double peak = matmul_measure_peak_tflops(&probe, strcmp(preset, "tiny") == 0 ? 256 : 8192, 5, 0);
    matmul_free(&probe);

    GPTGPU m;
    gpu_gpt_init(&m, &cfg, NULL, tp_none(), B, T, 1, policy, kind, zero_sharding(0, 0, 1), NULL, 0, 0);
    float *h = (float *)alignedMallocCheck(sizeof(float) * (size_t)m.layout.num_elements);
    gpt2_init_params(&m.layout, h, 1);
    gpu_gpt_set_params(&m, h);
    free(h);
    int N = B * T;
    int *x = (int *)mallocCheck(sizeof(int) * (size_t)N), *y = (int *)mallocCheck(sizeof(int) * (size_t)N);
    for (int i = 0; i < N; i++) {
        x[i] = (int)((i * 7919u) % (unsigned)cfg.vocab_size);
        y[i] = (int)((i * 104729u) % (unsigned)cfg.vocab_size);
    }
    cudaEvent_t ev[NUM_PHASES + 1];
    for (int i = 0; i <= NUM_PHASES; i++) CUDA_CHECK(cudaEventCreate(&ev[i]));
    double gpu_ms[NUM_PHASES] = {0}, kind_ms[2][NUM_KINDS] = {{0}}, kind_flops[2][NUM_KINDS] = {{0}};
    double issue_bwd_ms = 0, wall_ms = 0;
    const int warmup = 2;
    cudaStream_t s = m.stream;
    for (int step = 0; step < steps; step++) {
        if (step == warmup) {  // plans, first touches: not steady state
            memset(gpu_ms, 0, sizeof(gpu_ms));
            memset(kind_ms, 0, sizeof(kind_ms));
            memset(kind_flops, 0, sizeof(kind_flops));
            issue_bwd_ms = wall_ms = 0;
        }
        double t0 = wall_seconds();
        gpu_gpt_zero_grad(&m);
        CUDA_CHECK(cudaEventRecord(ev[0], s));
        gpu_gpt_forward(&m, x, y, B, T, 1.0f / (float)N);  // ends with a synchronisation (the loss)
        CUDA_CHECK(cudaEventRecord(ev[1], s));
        regions_collect(kind_ms[0], kind_flops[0]);
        double tb = wall_seconds();
        gpu_gpt_backward(&m);  // queued, not waited for
        issue_bwd_ms += (wall_seconds() - tb) * 1e3;
        CUDA_CHECK(cudaEventRecord(ev[2], s));
        float norm = gpu_gpt_grad_norm(&m);  // synchronises
        CUDA_CHECK(cudaEventRecord(ev[3], s));
        regions_collect(kind_ms[1], kind_flops[1]);
        AdamWConfig ac = {1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, step + 1};
        gpu_gpt_update(&m, &ac, grad_clip_scale(norm, 1.0f), (uint64_t)step);
        CUDA_CHECK(cudaEventRecord(ev[4], s));
        CUDA_CHECK(cudaStreamSynchronize(s));
        wall_ms += (wall_seconds() - t0) * 1e3;
        for (int p = 0; p < NUM_PHASES; p++) {
            float t = 0.0f;
            CUDA_CHECK(cudaEventElapsedTime(&t, ev[p], ev[p + 1]));
            gpu_ms[p] += t;
        }
    }
    int k = steps - warmup;
    double total = 0;
    for (int p = 0; p < NUM_PHASES; p++) total += gpu_ms[p] / k;
    GPTConfig padded = cfg;  // the classifier's matmuls run over all Vp rows of wte
    padded.vocab_size = cfg.padded_vocab_size;
    double formula = gpt_flops_per_token(&padded, T) * N;
    double counted = (kind_flops[0][KIND_MATMUL] + kind_flops[0][KIND_ATTENTION] + kind_flops[1][KIND_MATMUL] +
                      kind_flops[1][KIND_ATTENTION]) / k;
    double model_flops = gpt_flops_per_token(&cfg, T) * N;  // MFU counts the real vocabulary, as the trainer does
    printf("%s B=%d T=%d attention %s recompute %s: GPU ms per step (CUDA events), mean of steps %d..%d\n", preset, B,
           T, attn, recompute, warmup + 1, steps);
    const char *names[2] = {"forward (input upload, classifier backward)", "backward"};
    for (int p = 0; p < 2; p++) {
        double mm = kind_ms[p][KIND_MATMUL] / k, at = kind_ms[p][KIND_ATTENTION] / k, ph = gpu_ms[p] / k;
        printf("  %-44s %8.2f: matmul %8.2f (%4.1f%%, %6.1f TFLOP/s), attention %7.2f (%4.1f%%, %6.1f TFLOP/s), "
               "other %7.2f\n", names[p], ph, mm, 100 * mm / ph, kind_flops[p][KIND_MATMUL] / k / (mm * 1e9), at,
               100 * at / ph, kind_flops[p][KIND_ATTENTION] / k / (at * 1e9), ph - mm - at);
    }
    printf("  %-44s %8.2f\n  %-44s %8.2f\n", "gradient norm", gpu_ms[PH_NORM] / k, "AdamW", gpu_ms[PH_ADAM] / k);
    printf("  step %.2f ms GPU, %.2f ms wall: %.0f tokens/s, MFU %.1f%% of the measured %.1f TFLOP/s, %.1f%% of %.0f\n",
           total, wall_ms / k, N / (wall_ms / k * 1e-3), 100 * model_flops / (wall_ms / k * 1e-3) / (peak * 1e12), peak,
           100 * model_flops / (wall_ms / k * 1e-3) / (DATASHEET_TFLOPS * 1e12), DATASHEET_TFLOPS);
    printf("  host time to queue the backward %.2f ms against its %.2f ms on the GPU (%.0f%%: %s)\n", issue_bwd_ms / k,
           gpu_ms[PH_BWD] / k, 100 * issue_bwd_ms / gpu_ms[PH_BWD],
           issue_bwd_ms < 0.5 * gpu_ms[PH_BWD]
               ? "the host stays ahead, so the GPU does not wait for launches: CUDA graphs cannot speed it up"
               : "the host is not far ahead (launch-bound, or the launch queue filled): CUDA graphs might help");
    printf("  FLOPs counted call by call %.6g per step, the model's formula %.6g: %s\n", counted, formula,
           fabs(counted - formula) <= 1e-9 * formula ? "equal" : "DIFFERENT (a matmul is not timed)");
    printf("BENCH profile_step %s %s B=%d T=%d: step %.1f ms, fwd %.1f (matmul %.0f%%, attn %.0f%%), bwd %.1f "
           "(matmul %.0f%%, attn %.0f%%), queue/GPU bwd %.0f%%\n", preset, attn, B, T, wall_ms / k, gpu_ms[PH_FWD] / k,
           100 * kind_ms[0][KIND_MATMUL] / gpu_ms[PH_FWD], 100 * kind_ms[0][KIND_ATTENTION] / gpu_ms[PH_FWD],
           gpu_ms[PH_BWD] / k, 100 * kind_ms[1][KIND_MATMUL] / gpu_ms[PH_BWD],
           100 * kind_ms[1][KIND_ATTENTION] / gpu_ms[PH_BWD], 100 * issue_bwd_ms / gpu_ms[PH_BWD]);
    for (int i = 0; i <= NUM_PHASES; i++) CUDA_CHECK(cudaEventDestroy(ev[i]));
    for (int i = 0; i < g_events_made; i++) {
        CUDA_CHECK(cudaEventDestroy(g_regions[i].start));
        CUDA_CHECK(cudaEventDestroy(g_regions[i].stop));
    }
    free(x);
    free(y);
    gpu_gpt_free(&m);
    return fabs(counted - formula) <= 1e-9 * formula ? 0 : 1;
}
