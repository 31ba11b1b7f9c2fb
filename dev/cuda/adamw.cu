// dev/cuda/adamw.cu: checks the fused multi-tensor AdamW (llmc/adamw.cuh)
// against llmc/optimizer.h (adamw_update_range) on a real parameter layout
// (model.h), on the whole buffer and on a sub-range (a ZeRO shard), over
// several steps: master weights and moments, and the bf16 copy being a
// stochastic rounding (one of the two neighbours, unbiased on average, the
// same bits on a second run); then times d12- and d36-sized updates.
#include "dev/cuda/dev_common.cuh"
#include "llmc/adamw.cuh"

// bf16 neighbours of x: the rounded-down and rounded-up values.
static int is_bf16_neighbour(float x, float got) {
    uint32_t u;
    memcpy(&u, &x, 4);
    uint32_t lo = u & 0xffff0000u, hi = lo + 0x10000u;
    float flo, fhi;
    memcpy(&flo, &lo, 4);
    memcpy(&fhi, &hi, 4);
    return got == flo || got == fhi;
}

static void check_range(Rng *rng, const ParamLayout *pl, int64_t begin, int64_t end) {
    char what[160];
    size_t P = (size_t)pl->num_elements, n = (size_t)(end - begin);
    float *p = host_random(rng, P, 1.0f), *g = host_random(rng, P, 1.0f);
    float *m = host_random(rng, n, 0.1f), *v = host_random(rng, n, 0.1f);
    for (size_t i = 0; i < n; i++) v[i] = fabsf(v[i]);
    float *d_p = device_f32_from(p, P), *d_g = device_f32_from(g, P), *d_m = device_f32_from(m, n), *d_v = device_f32_from(v, n);
    bf16 *d_pb = (bf16 *)cudaMallocCheck(P * 2);
    poison(d_pb, P * 2);
    AdamWPlan ap;
    adamw_plan_init(&ap, pl, begin, end);
    for (int step = 1; step <= 3; step++) {
        AdamWConfig cfg = {1e-3f * step, 0.9f, 0.95f, 1e-8f, 0.1f, step};
        adamw_update_range(pl, p, g, 0, m, v, begin, end, &cfg, 0.5f);
        gpu_adamw_update(&ap, d_p, d_pb, d_g, d_m, d_v, &cfg, 0.5f, 99 + step, 0);
    }
    float *gp = host_from_f32(d_p, P), *gm = host_from_f32(d_m, n), *gv = host_from_f32(d_v, n);
    float *gb = host_from_bf16(d_pb, P);
    snprintf(what, sizeof(what), "adamw [%lld, %lld) of %zu, 3 steps: master weights", (long long)begin, (long long)end, P);
    check_close(what, gp, p, P, 1e-6, 1e-5);
    snprintf(what, sizeof(what), "adamw [%lld, %lld) of %zu, 3 steps: m, v", (long long)begin, (long long)end, P);
    check_close(what, gm, m, n, 1e-7, 1e-5);
    check_close(what, gv, v, n, 1e-7, 1e-5);
    size_t bad = 0;
    double bias = 0.0, scale = 0.0;
    for (size_t i = (size_t)begin; i < (size_t)end; i++) {
        bad += !is_bf16_neighbour(gp[i], gb[i]);
        bias += (double)gb[i] - gp[i];
        scale += fabs((double)gb[i] - gp[i]);
    }
    test_result(bad == 0, "adamw bf16 copy is a bf16 neighbour of the master weight (%zu of %zu not)", bad, n);
    test_result(n < 10000 || fabs(bias) < 0.05 * scale, "adamw stochastic rounding unbiased (mean error %.2e of mean |error| %.2e)",
                bias / n, scale / n);
    // a second run from the same state gives the same bf16 bits
    AdamWConfig cfg = {1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 4};
    CUDA_CHECK(cudaMemcpy(d_p, gp, P * 4, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(d_m, gm, n * 4, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(d_v, gv, n * 4, cudaMemcpyHostToDevice));
    gpu_adamw_update(&ap, d_p, d_pb, d_g, d_m, d_v, &cfg, 0.5f, 7, 0);
    float *b1 = host_from_bf16(d_pb, P);
    CUDA_CHECK(cudaMemcpy(d_p, gp, P * 4, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(d_m, gm, n * 4, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(d_v, gv, n * 4, cudaMemcpyHostToDevice));
    gpu_adamw_update(&ap, d_p, d_pb, d_g, d_m, d_v, &cfg, 0.5f, 7, 0);
    float *b2 = host_from_bf16(d_pb, P);
    test_result(memcmp(b1 + begin, b2 + begin, n * 4) == 0, "adamw is bit-reproducible [%lld, %lld)", (long long)begin,
                (long long)end);
    adamw_plan_free(&ap);
    void *dev[] = {d_p, d_g, d_m, d_v, d_pb};
    for (size_t i = 0; i < sizeof(dev) / sizeof(dev[0]); i++) CUDA_CHECK(cudaFree(dev[i]));
    float *host[] = {p, g, m, v, gp, gm, gv, gb, b1, b2};
    for (size_t i = 0; i < sizeof(host) / sizeof(host[0]); i++) free(host[i]);
}

static void bench_model(Bench *b, const char *preset) {
    GPTConfig cfg;
    CHECK(gpt_config_preset(preset, &cfg), "no preset %s", preset);
    ParamLayout pl;
    param_layout_init(&pl, &cfg);
    size_t P = (size_t)pl.num_elements;
    float *p = (float *)cudaMallocCheck(P * 4), *g = (float *)cudaMallocCheck(P * 4);
    float *m = (float *)cudaMallocCheck(P * 4), *v = (float *)cudaMallocCheck(P * 4);
    bf16 *pb = (bf16 *)cudaMallocCheck(P * 2);
    CUDA_CHECK(cudaMemset(p, 0, P * 4)); CUDA_CHECK(cudaMemset(g, 0, P * 4));
    CUDA_CHECK(cudaMemset(m, 0, P * 4)); CUDA_CHECK(cudaMemset(v, 0, P * 4));
    AdamWPlan ap;
    adamw_plan_init(&ap, &pl, 0, (int64_t)P);
    AdamWConfig c = {1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1};
    double ms = bench_ms(b, 10, [&] { gpu_adamw_update(&ap, p, pb, g, m, v, &c, 1.0f, 1, 0); });
    char name[64];
    snprintf(name, sizeof(name), "adamw %s (%.0fM params)", preset, P / 1e6);
    // reads p, g, m, v (fp32); writes p, m, v (fp32) and the bf16 copy
    bench_report(b, name, ms, (double)P * (16 + 12 + 2), 0);
    adamw_plan_free(&ap);
    void *dev[] = {p, g, m, v, pb};
    for (size_t i = 0; i < sizeof(dev) / sizeof(dev[0]); i++) CUDA_CHECK(cudaFree(dev[i]));
    param_layout_free(&pl);
}

int main(void) {
    dev_require_gpu("dev_adamw");
    Rng rng;
    rng_seed(&rng, 7);
    GPTConfig cfg = {64, 250, pad_vocab(250), 2, 4, 128};
    ParamLayout pl;
    param_layout_init(&pl, &cfg);
    check_range(&rng, &pl, 0, pl.num_elements);
    check_range(&rng, &pl, pl.num_elements / 3 + 5, 2 * pl.num_elements / 3 + 1);  // a shard cutting tensors
    param_layout_free(&pl);

    Bench b;
    bench_init(&b);
    bench_model(&b, "d12");
    bench_model(&b, "d36");
    bench_free(&b);
    return test_exit_code();
}
