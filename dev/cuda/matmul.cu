// dev/cuda/matmul.cu: checks llmc/matmul.cuh (cuBLASLt, bf16 in, fp32
// accumulate) against llmc/cpu_layers.h (linear_forward, gelu_forward,
// linear_backward): forward with the bias epilogue, with the GELU+bias
// epilogue (pre-activation saved) and with none (no bias), and backward (dinp,
// dW accumulated in fp32, dbias from bf16 dout or from an fp32 source), at
// several shapes, once with every bf16 operand only 128-byte
// aligned (as a model's weights are when C is not a multiple of 128); then
// times the d12 layer shapes against the measured cuBLASLt peak.
#include "dev/cuda/dev_common.cuh"
#include "llmc/cpu_layers.h"

// n bf16 device values (from h, or uninitialised when h is NULL) starting
// shift elements past a cudaMalloc'd base; free with cudaFree(p - shift).
static floatX *bf16_shifted(const float *h, size_t n, int shift) {
    floatX *p = (floatX *)cudaMallocCheck((n + (size_t)shift) * 2) + shift;
    if (h) {
        std::vector<floatX> tmp(n);
        for (size_t i = 0; i < n; i++) tmp[i] = to_floatX(h[i]);
        CUDA_CHECK(cudaMemcpy(p, tmp.data(), n * 2, cudaMemcpyHostToDevice));
    }
    return p;
}

// shift: bf16 elements every bf16 operand sits past a 256-byte boundary (64: 128-byte aligned).
static void check_shape(Rng *rng, MatmulContext *mc, int N, int IC, int OC, int shift) {
    char what[160];
    size_t ni = (size_t)N * IC, no = (size_t)N * OC, wo = (size_t)OC * IC;
    float *inp = host_random(rng, ni, 1.0f), *w = host_random(rng, wo, 0.1f), *bias = host_random(rng, OC, 1.0f);
    float *ref = (float *)mallocCheck(no * 4), *ref_gelu = (float *)mallocCheck(no * 4);
    linear_forward(ref, inp, w, bias, NULL, N, IC, OC);
    gelu_forward(ref_gelu, ref, no);
    floatX *d_inp = bf16_shifted(inp, ni, shift), *d_w = bf16_shifted(w, wo, shift), *d_bias = bf16_shifted(bias, OC, shift);
    floatX *d_out = bf16_shifted(NULL, no, shift), *d_pre = bf16_shifted(NULL, no, shift);
    poison(d_out, no * 2);
    gpu_matmul_forward(mc, d_out, NULL, d_inp, d_w, d_bias, N, IC, OC, 0);
    float *got = host_from_floatX(d_out, no);
    snprintf(what, sizeof(what), "matmul forward + bias N=%d IC=%d OC=%d shift=%d", N, IC, OC, shift);
    check_close(what, got, ref, no, 1e-2, 1e-2);
    free(got);
    poison(d_out, no * 2);
    poison(d_pre, no * 2);
    gpu_matmul_forward(mc, d_out, d_pre, d_inp, d_w, d_bias, N, IC, OC, 0);
    got = host_from_floatX(d_out, no);
    float *pre = host_from_floatX(d_pre, no);
    snprintf(what, sizeof(what), "matmul forward + bias + GELU N=%d IC=%d OC=%d: out", N, IC, OC);
    check_close(what, got, ref_gelu, no, 1e-2, 1e-2);
    snprintf(what, sizeof(what), "matmul forward + bias + GELU N=%d IC=%d OC=%d: pre-activation", N, IC, OC);
    check_close(what, pre, ref, no, 1e-2, 1e-2);

    float *dout = host_random(rng, no, 1.0f), *dinp = (float *)mallocCheck(ni * 4);
    float *dw = host_random(rng, wo, 1.0f), *db = host_random(rng, OC, 1.0f);
    float *d_dw = device_f32_from(dw, wo), *d_db = device_f32_from(db, OC);
    floatX *d_dout = bf16_shifted(dout, no, shift), *d_dinp = bf16_shifted(NULL, ni, shift);
    float *d_scratch = (float *)cudaMallocCheck(colsum_scratch_floats(N, OC) * 4);
    linear_backward(dinp, dw, db, dout, inp, w, N, IC, OC);
    poison(d_dinp, ni * 2);
    gpu_matmul_backward<floatX>(mc, d_dinp, d_dw, d_db, d_scratch, d_dout, d_dout, d_inp, d_w, N, IC, OC, 0);
    float *g_dinp = host_from_floatX(d_dinp, ni), *g_dw = host_from_f32(d_dw, wo), *g_db = host_from_f32(d_db, OC);
    snprintf(what, sizeof(what), "matmul backward N=%d IC=%d OC=%d: dinp", N, IC, OC);
    check_close(what, g_dinp, dinp, ni, 1e-2, 1e-2);
    snprintf(what, sizeof(what), "matmul backward N=%d IC=%d OC=%d: dW (fp32, accumulated)", N, IC, OC);
    check_close(what, g_dw, dw, wo, 1e-3, 1e-3);
    snprintf(what, sizeof(what), "matmul backward N=%d IC=%d OC=%d: dbias", N, IC, OC);
    check_close(what, g_db, db, OC, 1e-3, 1e-3);

    // as the classifier runs them: forward without a bias (the plain epilogue);
    // and as the residual projections: the backward with dbias from an fp32
    // source (gpu_matmul_backward<float>; a separate, unrounded array, so dbias
    // must come from it) and dinp skipped (NULL), dW and dbias accumulating on
    float *ref_nb = (float *)mallocCheck(no * 4), *dsrc = (float *)mallocCheck(no * 4);
    linear_forward(ref_nb, inp, w, NULL, NULL, N, IC, OC);
    poison(d_out, no * 2);
    gpu_matmul_forward(mc, d_out, NULL, d_inp, d_w, NULL, N, IC, OC, 0);
    float *got_nb = host_from_floatX(d_out, no);
    snprintf(what, sizeof(what), "matmul forward, no bias N=%d IC=%d OC=%d", N, IC, OC);
    check_close(what, got_nb, ref_nb, no, 1e-2, 1e-2);
    for (size_t i = 0; i < no; i++) dsrc[i] = 2.0f * rng_uniform(rng) - 1.0f;
    float *d_dsrc = device_f32_from(dsrc, no);
    linear_backward(dinp, dw, NULL, dout, inp, w, N, IC, OC);
    column_sum_accumulate(db, dsrc, N, OC);
    gpu_matmul_backward<float>(mc, NULL, d_dw, d_db, d_scratch, d_dout, d_dsrc, d_inp, d_w, N, IC, OC, 0);
    float *g_dw2 = host_from_f32(d_dw, wo), *g_db2 = host_from_f32(d_db, OC);
    snprintf(what, sizeof(what), "matmul backward, fp32 dbias source N=%d IC=%d OC=%d: dW (2nd accumulation)", N, IC, OC);
    check_close(what, g_dw2, dw, wo, 1e-3, 1e-3);
    snprintf(what, sizeof(what), "matmul backward, fp32 dbias source N=%d IC=%d OC=%d: dbias", N, IC, OC);
    check_close(what, g_db2, db, OC, 1e-3, 1e-3);

    floatX *dev_bf[] = {d_inp, d_w, d_bias, d_out, d_pre, d_dout, d_dinp};
    for (size_t i = 0; i < sizeof(dev_bf) / sizeof(dev_bf[0]); i++) CUDA_CHECK(cudaFree(dev_bf[i] - shift));
    void *dev[] = {d_dw, d_db, d_scratch, d_dsrc};
    for (size_t i = 0; i < sizeof(dev) / sizeof(dev[0]); i++) CUDA_CHECK(cudaFree(dev[i]));
    float *host[] = {inp, w, bias, ref, ref_gelu, got, pre, dout, dinp, dw, db, g_dinp, g_dw, g_db,
                     ref_nb, dsrc, got_nb, g_dw2, g_db2};
    for (size_t i = 0; i < sizeof(host) / sizeof(host[0]); i++) free(host[i]);
}

int main(void) {
    dev_require_gpu("dev_matmul");
    MatmulContext mc;
    matmul_init(&mc);
    Rng rng;
    rng_seed(&rng, 3);
    const int E = DEV_EMULATED;  // the emulator: fewer rows
    const int checks[][4] = {  // N, IC, OC, operand shift
        {64, 64, 192, 0},
        {E ? 40 : 200, 768, 3072, 0},
        {E ? 32 : 512, 3072, 768, 0},
        {E ? 64 : 256, 192, 768, 64},  // 128-byte aligned operands (C = 192 model)
    };
    for (const auto &s : checks) check_shape(&rng, &mc, s[0], s[1], s[2], s[3]);
    if (!dev_benchmarks("dev_matmul")) {
        matmul_free(&mc);
        return test_exit_code();
    }

    Bench b;
    bench_init(&b);
    int N = 16 * 1024, C = 768;
    struct { const char *name; int IC, OC, gelu; } shapes[] = {
        {"qkv     16384x768 -> 2304", C, 3 * C, 0}, {"attproj 16384x768 -> 768", C, C, 0},
        {"fc+gelu 16384x768 -> 3072", C, 4 * C, 1}, {"fcproj  16384x3072 -> 768", 4 * C, C, 0},
        {"logits  16384x768 -> 50304", C, 50304, 0},
    };
    for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
        int IC = shapes[s].IC, OC = shapes[s].OC;
        size_t ni = (size_t)N * IC, no = (size_t)N * OC, wo = (size_t)OC * IC;
        floatX *inp = (floatX *)cudaMallocCheck(ni * 2), *w = (floatX *)cudaMallocCheck(wo * 2), *bias = (floatX *)cudaMallocCheck(OC * 2);
        floatX *out = (floatX *)cudaMallocCheck(no * 2), *pre = (floatX *)cudaMallocCheck(no * 2), *dinp = (floatX *)cudaMallocCheck(ni * 2);
        float *dw = (float *)cudaMallocCheck(wo * 4), *db = (float *)cudaMallocCheck(OC * 4);
        float *scratch = (float *)cudaMallocCheck(colsum_scratch_floats(N, OC) * 4);
        launch_kernel(fill_hash_floatX_kernel, ceil_div_int(ni, 256), 256, 0, 0, inp, (int64_t)ni, 10 + s);
        launch_kernel(fill_hash_floatX_kernel, ceil_div_int(wo, 256), 256, 0, 0, w, (int64_t)wo, 20 + s);
        launch_kernel(fill_hash_floatX_kernel, ceil_div_int(OC, 256), 256, 0, 0, bias, OC, 30 + s);
        CUDA_CHECK(cudaMemset(dw, 0, wo * 4));
        CUDA_CHECK(cudaMemset(db, 0, OC * 4));
        double flops = 2.0 * N * (double)IC * OC;
        char name[96];
        snprintf(name, sizeof(name), "fwd %s", shapes[s].name);
        double ms = bench_ms(&b, 20, [&] {
            gpu_matmul_forward(&mc, out, shapes[s].gelu ? pre : NULL, inp, w, bias, N, IC, OC, 0);
        });
        bench_report(&b, name, ms, 0, flops);
        snprintf(name, sizeof(name), "bwd %s", shapes[s].name);
        ms = bench_ms(&b, 20, [&] {
            gpu_matmul_backward<floatX>(&mc, dinp, dw, db, scratch, out, out, inp, w, N, IC, OC, 0);
        });
        bench_report(&b, name, ms, 0, 2 * flops);
        void *dev[] = {inp, w, bias, out, pre, dinp, dw, db, scratch};
        for (size_t i = 0; i < sizeof(dev) / sizeof(dev[0]); i++) CUDA_CHECK(cudaFree(dev[i]));
    }
    bench_free(&b);
    matmul_free(&mc);
    return test_exit_code();
}
