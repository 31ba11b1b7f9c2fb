// dev/cuda/adamw.cu: the fused multi-tensor AdamW, two versions, each checked
// through tests/kernel_cases.h's adamw rows against llmc/optimizer.h
// (adamw_update_range) on a real parameter layout (model.h), on the whole
// buffer and on sub-ranges (ZeRO shards), over several steps: master weights
// and moments, and the floatX copy being the stochastic rounding with the
// step's random bits (unbiased on average, the same bits on a second run):
//   version 1 = the first kernel (below): one element per thread per
//               iteration, scalar 4-byte accesses;
//   version 2 = llmc/adamw.cuh (what the trainer runs): 4 elements per thread
//               through float4 accesses where the chunk is 16-byte aligned in
//               every array, element by element otherwise and for the tail.
// Ranges: [0, P) (float4 path), a shard starting at an odd element (element
// path throughout), a shard starting at a multiple of 4 and ending at 3 mod 4
// (float4 path with tails); each also on misaligned copies of every array
// (element path), which must give the aligned run's bits. Then both are
// timed on d12- and d36-sized updates.
#define KC_MEMORY_BOUND
#include "dev/cuda/dev_common.cuh"
#include "llmc/adamw.cuh"

// ---------------------------------------------------------------------------
// version 1: one element per thread per iteration (the kernel version 2 replaced)

__global__ void adamw_v1_kernel(float *params, floatX *params_compute, const float *grads, float *m, float *v,
                                const AdamWChunk *chunks, int64_t begin, AdamWArgs a) {
    AdamWChunk ch = chunks[blockIdx.x];
    float decay = ch.decay ? a.decay_factor : 1.0f;
    for (int k = threadIdx.x; k < ch.len; k += blockDim.x) {
        int64_t i = ch.offset + k;
        float gi = grads[i] * a.grad_scale;
        float p = params[i] * decay;
        float mi = m[i - begin] + (1.0f - a.beta1) * (gi - m[i - begin]);
        float vi = a.beta2 * v[i - begin] + (1.0f - a.beta2) * gi * gi;
        m[i - begin] = mi;
        v[i - begin] = vi;
        float denom = sqrtf(vi) / a.bc2_sqrt + a.eps;
        p = p - a.step_size * (mi / denom);
        params[i] = p;
        params_compute[i] = to_floatX_stochastic(p, hash_u32(a.seed, (uint64_t)(ch.global + k)));
    }
}

// gpu_adamw_update with the version 1 kernel
static void v1_adamw_update(const AdamWPlan *ap, float *params, floatX *params_compute, const float *grads, float *m,
                            float *v, const AdamWConfig *cfg, float grad_scale, uint64_t seed, cudaStream_t s) {
    AdamWArgs a = adamw_args(cfg, grad_scale, seed);
    launch_kernel(adamw_v1_kernel, ap->num_chunks, 256, 0, s, params, params_compute, grads, m, v, ap->d_chunks,
                  ap->begin, a);
    CUDA_CHECK_LAUNCH();
}

// version 1 in the kernel checks' launcher table (tests/kernel_cases.h), beside llmc's
static void use_v1(KernelImpls *v) {
    v->adamw_update = v1_adamw_update;
}
static const KernelImpls V1_KERNELS = kernel_impls_with("v1 scalar", use_v1);
static const KernelImpls *const versions[] = {&V1_KERNELS, &LLMC_KERNELS};

static void bench_model(Bench *b, const char *preset) {
    GPTConfig cfg;
    CHECK(gpt_config_preset(preset, &cfg), "no preset %s", preset);
    ParamLayout pl;
    param_layout_init(&pl, &cfg);
    size_t P = (size_t)pl.num_elements;
    float *p = (float *)cudaMallocCheck(P * 4), *g = (float *)cudaMallocCheck(P * 4);
    float *m = (float *)cudaMallocCheck(P * 4), *v = (float *)cudaMallocCheck(P * 4);
    floatX *pb = (floatX *)cudaMallocCheck(P * 2);
    // random p, g, m (pairs of random bf16 read as fp32: finite, in [-1, 1]); v starts at 0 (it must stay >= 0)
    float *bufs[] = {p, g, m};
    for (int i = 0; i < 3; i++)
        launch_kernel(fill_hash_floatX_kernel, ceil_div_int((int64_t)P * 2, 256), 256, 0, 0, (floatX *)bufs[i],
                      (int64_t)P * 2, 20 + i);
    CUDA_CHECK_LAUNCH();
    CUDA_CHECK(cudaMemset(v, 0, P * 4));
    AdamWPlan ap;
    adamw_plan_init(&ap, &pl, 0, (int64_t)P, NULL);
    AdamWConfig c = {1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1};
    for (const KernelImpls *ver : versions) {
        double ms = bench_ms(b, 10, [&] { ver->adamw_update(&ap, p, pb, g, m, v, &c, 1.0f, 1, 0); });
        char name[96];
        snprintf(name, sizeof(name), "%s adamw %s (%.0fM params)", ver->name, preset, P / 1e6);
        // reads p, g, m, v (fp32); writes p, m, v (fp32) and the bf16 copy
        bench_report(b, name, ms, (double)P * (16 + 12 + 2), 0);
    }
    adamw_plan_free(&ap);
    void *dev[] = {p, g, m, v, pb};
    for (size_t i = 0; i < sizeof(dev) / sizeof(dev[0]); i++) CUDA_CHECK(cudaFree(dev[i]));
    param_layout_free(&pl);
}

int main(void) {
    dev_require_gpu("dev_adamw");
    kernel_cases_run_versions("adamw", versions, 2);
    if (!dev_benchmarks("dev_adamw")) return test_exit_code();

    Bench b;
    bench_init(&b);
    bench_model(&b, "d12");
    bench_model(&b, "d36");
    bench_free(&b);
    return test_exit_code();
}
