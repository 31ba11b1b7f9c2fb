// dev/cuda/adamw.cu: the fused multi-tensor AdamW, two versions, each checked
// against llmc/optimizer.h (adamw_update_range) on a real parameter layout
// (model.h), on the whole buffer and on sub-ranges (ZeRO shards), over
// several steps: master weights and moments, and the bf16 copy being a
// stochastic rounding (one of the two neighbours, unbiased on average, the
// same bits on a second run):
//   version 1 = the first kernel (below): one element per thread per
//               iteration, scalar 4-byte accesses;
//   version 2 = llmc/adamw.cuh (what the trainer runs): 4 elements per thread
//               through float4 accesses where the chunk is 16-byte aligned in
//               every array, element by element otherwise and for the tail.
// Ranges: [0, P) (float4 path), a shard starting at an odd element (element
// path throughout), a shard starting at a multiple of 4 and ending at 3 mod 4
// (float4 path with tails); version 2 also on misaligned copies of every
// array (element path), which must give the aligned run's bits. Then both are
// timed on d12- and d36-sized updates.
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

typedef void (*UpdateFn)(const AdamWPlan *, float *, floatX *, const float *, float *, float *, const AdamWConfig *, float,
                         uint64_t, cudaStream_t);
typedef struct {
    const char *name;
    UpdateFn update;
} Version;
static const Version versions[] = {{"v1 scalar", v1_adamw_update}, {"v2 llmc", gpu_adamw_update}};

// ---------------------------------------------------------------------------
// checks

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

// Device state of one run: the flat buffers (P) and the moments of [begin, end).
typedef struct {
    float *p, *g, *m, *v;
    floatX *pb;
    int misaligned;
} State;

static State state_from(const float *p, const float *g, const float *m, const float *v, size_t P, size_t n,
                        int misaligned) {
    State s;
    s.misaligned = misaligned;
    s.p = device_buffer<float>(P, misaligned); s.g = device_buffer<float>(P, misaligned);
    s.m = device_buffer<float>(n, misaligned); s.v = device_buffer<float>(n, misaligned);
    s.pb = device_buffer<floatX>(P, misaligned);
    CUDA_CHECK(cudaMemcpy(s.p, p, P * 4, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(s.g, g, P * 4, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(s.m, m, n * 4, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(s.v, v, n * 4, cudaMemcpyHostToDevice));
    return s;
}

static void state_free(State *s) {
    device_buffer_free(s->p, s->misaligned); device_buffer_free(s->g, s->misaligned);
    device_buffer_free(s->m, s->misaligned); device_buffer_free(s->v, s->misaligned);
    device_buffer_free(s->pb, s->misaligned);
}

static void check_range(Rng *rng, const ParamLayout *pl, int64_t begin, int64_t end) {
    char what[200];
    size_t P = (size_t)pl->num_elements, n = (size_t)(end - begin);
    float *p0 = host_random(rng, P, 1.0f), *g = host_random(rng, P, 1.0f);
    float *m0 = host_random(rng, n, 0.1f), *v0 = host_random(rng, n, 0.1f);
    for (size_t i = 0; i < n; i++) v0[i] = fabsf(v0[i]);
    // reference: 3 steps on the CPU
    float *p = (float *)mallocCheck(P * 4), *m = (float *)mallocCheck(n * 4), *v = (float *)mallocCheck(n * 4);
    memcpy(p, p0, P * 4); memcpy(m, m0, n * 4); memcpy(v, v0, n * 4);
    for (int step = 1; step <= 3; step++) {
        AdamWConfig cfg = {1e-3f * step, 0.9f, 0.95f, 1e-8f, 0.1f, step};
        adamw_update_range(pl, p, g, 0, m, v, begin, end, &cfg, 0.5f);
    }
    AdamWPlan ap;
    adamw_plan_init(&ap, pl, begin, end, NULL);
    float *got[3][4];  // [v1, v2, v2 misaligned][p, m, v, bf16]
    for (int r = 0; r < 3; r++) {
        const Version *ver = &versions[r == 0 ? 0 : 1];
        const char *name = r == 2 ? "v2 llmc (misaligned: element path)" : ver->name;
        State s = state_from(p0, g, m0, v0, P, n, r == 2);
        for (int step = 1; step <= 3; step++) {
            AdamWConfig cfg = {1e-3f * step, 0.9f, 0.95f, 1e-8f, 0.1f, step};
            ver->update(&ap, s.p, s.pb, s.g, s.m, s.v, &cfg, 0.5f, 99 + step, 0);
        }
        float *gp = host_from_f32(s.p, P), *gm = host_from_f32(s.m, n), *gv = host_from_f32(s.v, n);
        float *gb = host_from_floatX(s.pb, P);
        got[r][0] = gp; got[r][1] = gm; got[r][2] = gv; got[r][3] = gb;
        snprintf(what, sizeof(what), "%s adamw [%lld, %lld) of %zu, 3 steps: master weights", name, (long long)begin,
                 (long long)end, P);
        check_close(what, gp, p, P, 1e-6, 1e-5);
        snprintf(what, sizeof(what), "%s adamw [%lld, %lld) of %zu, 3 steps: m, v", name, (long long)begin,
                 (long long)end, P);
        check_close(what, gm, m, n, 1e-7, 1e-5);
        check_close(what, gv, v, n, 1e-7, 1e-5);
        size_t bad = 0;
        double bias = 0.0, scale = 0.0;
        for (size_t i = (size_t)begin; i < (size_t)end; i++) {
            bad += !is_bf16_neighbour(gp[i], gb[i]);
            bias += (double)gb[i] - gp[i];
            scale += fabs((double)gb[i] - gp[i]);
        }
        test_result(bad == 0, "%s adamw bf16 copy is a bf16 neighbour of the master weight (%zu of %zu not)", name, bad,
                    n);
        test_result(n < 10000 || fabs(bias) < 0.05 * scale,
                    "%s adamw stochastic rounding unbiased (mean error %.2e of mean |error| %.2e)", name, bias / n,
                    scale / n);
        if (r == 1) {
            // a second run from the same state gives the same bf16 bits
            AdamWConfig cfg = {1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 4};
            float *b12[2];
            for (int t = 0; t < 2; t++) {
                CUDA_CHECK(cudaMemcpy(s.p, gp, P * 4, cudaMemcpyHostToDevice));
                CUDA_CHECK(cudaMemcpy(s.m, gm, n * 4, cudaMemcpyHostToDevice));
                CUDA_CHECK(cudaMemcpy(s.v, gv, n * 4, cudaMemcpyHostToDevice));
                ver->update(&ap, s.p, s.pb, s.g, s.m, s.v, &cfg, 0.5f, 7, 0);
                b12[t] = host_from_floatX(s.pb, P);
            }
            test_result(bits_equal(b12[0] + begin, b12[1] + begin, n * 4), "%s adamw is bit-reproducible [%lld, %lld)",
                        name, (long long)begin, (long long)end);
            free(b12[0]); free(b12[1]);
        }
        state_free(&s);
    }
    // version 2's element path gives its vector path's bits (the range's elements)
    int same = bits_equal(got[1][0] + begin, got[2][0] + begin, n * 4) && bits_equal(got[1][1], got[2][1], n * 4) &&
               bits_equal(got[1][2], got[2][2], n * 4) && bits_equal(got[1][3] + begin, got[2][3] + begin, n * 4);
    test_result(same, "v2 adamw [%lld, %lld): element path gives the vector path's bits (p, m, v, bf16)",
                (long long)begin, (long long)end);
    adamw_plan_free(&ap);
    for (int r = 0; r < 3; r++)
        for (int q = 0; q < 4; q++) free(got[r][q]);
    free(p0); free(g); free(m0); free(v0); free(p); free(m); free(v);
}

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
    for (const Version &ver : versions) {
        double ms = bench_ms(b, 10, [&] { ver.update(&ap, p, pb, g, m, v, &c, 1.0f, 1, 0); });
        char name[96];
        snprintf(name, sizeof(name), "%s adamw %s (%.0fM params)", ver.name, preset, P / 1e6);
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
    Rng rng;
    rng_seed(&rng, 7);
    GPTConfig cfg = {64, 250, pad_vocab(250), 2, 4, 128};
    ParamLayout pl;
    param_layout_init(&pl, &cfg);
    int64_t P = pl.num_elements;
    check_range(&rng, &pl, 0, P);                                // float4 path
    check_range(&rng, &pl, (P / 3) | 1, 2 * P / 3 + 1);          // odd start: element path throughout
    check_range(&rng, &pl, (P / 4) & ~(int64_t)3, ((3 * P / 4) & ~(int64_t)3) + 3);  // float4 path, 3-element tail
    param_layout_free(&pl);
    if (!dev_benchmarks("dev_adamw")) return test_exit_code();

    Bench b;
    bench_init(&b);
    bench_model(&b, "d12");
    bench_model(&b, "d36");
    bench_free(&b);
    return test_exit_code();
}
