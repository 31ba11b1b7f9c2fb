// dev/cuda/layernorm.cu: checks llmc/layernorm.cuh against llmc/cpu_layers.h
// (layernorm_forward, layernorm_backward): the plain forward, the fused
// residual add + LayerNorm, and the backward (input gradient accumulated in
// fp32, parameter gradients), at several shapes; then times them at d12 size.
#include "dev/cuda/dev_common.cuh"
#include "llmc/cpu_layers.h"
#include "llmc/layernorm.cuh"

static void check_shape(Rng *rng, int N, int C) {
    char what[128];
    size_t nc = (size_t)N * C;
    float *x = host_random(rng, nc, 2.0f), *r = host_random(rng, nc, 2.0f);
    float *w = host_random(rng, (size_t)C, 1.0f), *bb = host_random(rng, (size_t)C, 1.0f);
    // reference: residual rounded to bf16 (as the GPU stores it), then LayerNorm
    float *res = (float *)mallocCheck(nc * sizeof(float)), *ref = (float *)mallocCheck(nc * sizeof(float));
    float *mean = (float *)mallocCheck(N * sizeof(float)), *rstd = (float *)mallocCheck(N * sizeof(float));
    for (size_t i = 0; i < nc; i++) res[i] = bf16_round(r[i] + x[i]);
    layernorm_forward(ref, mean, rstd, res, w, bb, N, C);
    bf16 *d_x = device_bf16_from(x, nc), *d_r = device_bf16_from(r, nc), *d_res_in = device_bf16_from(res, nc);
    bf16 *d_w = device_bf16_from(w, C), *d_b = device_bf16_from(bb, C);
    bf16 *d_out = (bf16 *)cudaMallocCheck(nc * 2), *d_res = (bf16 *)cudaMallocCheck(nc * 2);
    float *d_mean = (float *)cudaMallocCheck(N * 4), *d_rstd = (float *)cudaMallocCheck(N * 4);
    poison(d_out, nc * 2); poison(d_mean, N * 4); poison(d_rstd, N * 4);
    gpu_layernorm_forward(d_out, d_mean, d_rstd, d_res_in, d_w, d_b, N, C, 0);
    float *got = host_from_bf16(d_out, nc), *gm = host_from_f32(d_mean, N), *gr = host_from_f32(d_rstd, N);
    snprintf(what, sizeof(what), "layernorm forward N=%d C=%d: out", N, C);
    check_close(what, got, ref, nc, 2e-2, 1e-2);
    snprintf(what, sizeof(what), "layernorm forward N=%d C=%d: mean, rstd", N, C);
    check_close(what, gm, mean, N, 1e-5, 1e-4);
    check_close(what, gr, rstd, N, 1e-5, 1e-4);
    free(got); free(gm); free(gr);
    poison(d_out, nc * 2); poison(d_res, nc * 2);
    gpu_fused_residual_layernorm(d_res, d_out, d_mean, d_rstd, d_r, d_x, d_w, d_b, N, C, 0);
    float *gres = host_from_bf16(d_res, nc);
    got = host_from_bf16(d_out, nc);
    snprintf(what, sizeof(what), "fused residual+layernorm N=%d C=%d: residual", N, C);
    check_close(what, gres, res, nc, 0, 0);
    snprintf(what, sizeof(what), "fused residual+layernorm N=%d C=%d: out", N, C);
    check_close(what, got, ref, nc, 2e-2, 1e-2);

    // backward: dinp accumulates onto a random start, dw/db onto random starts
    float *dout = host_random(rng, nc, 1.0f), *dinp = host_random(rng, nc, 1.0f);
    float *dw = host_random(rng, C, 1.0f), *db = host_random(rng, C, 1.0f);
    float *d_dinp = device_f32_from(dinp, nc), *d_dw = device_f32_from(dw, C), *d_db = device_f32_from(db, C);
    bf16 *d_dout = device_bf16_from(dout, nc), *d_dinp_bf = (bf16 *)cudaMallocCheck(nc * 2);
    float *d_scratch = (float *)cudaMallocCheck(layernorm_scratch_floats(N, C) * 4);
    float *d_mean_ref = device_f32_from(mean, N), *d_rstd_ref = device_f32_from(rstd, N);
    layernorm_backward(dinp, dw, db, dout, res, w, mean, rstd, N, C);
    gpu_layernorm_backward(d_dinp, d_dinp_bf, d_dw, d_db, d_scratch, d_dout, d_res_in, d_w, d_mean_ref, d_rstd_ref,
                           N, C, 0);
    float *g_dinp = host_from_f32(d_dinp, nc), *g_dinp_bf = host_from_bf16(d_dinp_bf, nc);
    float *g_dw = host_from_f32(d_dw, C), *g_db = host_from_f32(d_db, C);
    snprintf(what, sizeof(what), "layernorm backward N=%d C=%d: dinp (fp32)", N, C);
    check_close(what, g_dinp, dinp, nc, 1e-4, 1e-3);
    snprintf(what, sizeof(what), "layernorm backward N=%d C=%d: dinp (bf16 copy)", N, C);
    check_close(what, g_dinp_bf, dinp, nc, 1e-3, 1e-2);
    snprintf(what, sizeof(what), "layernorm backward N=%d C=%d: dweight, dbias", N, C);
    check_close(what, g_dw, dw, C, 1e-3, 1e-3);
    check_close(what, g_db, db, C, 1e-3, 1e-3);
    void *dev[] = {d_x, d_r, d_res_in, d_w, d_b, d_out, d_res, d_mean, d_rstd, d_dinp, d_dw, d_db, d_dout, d_dinp_bf,
                   d_scratch, d_mean_ref, d_rstd_ref};
    for (size_t i = 0; i < sizeof(dev) / sizeof(dev[0]); i++) CUDA_CHECK(cudaFree(dev[i]));
    float *host[] = {x, r, w, bb, res, ref, mean, rstd, got, gres, dout, dinp, dw, db, g_dinp, g_dinp_bf, g_dw, g_db};
    for (size_t i = 0; i < sizeof(host) / sizeof(host[0]); i++) free(host[i]);
}

int main(void) {
    dev_require_gpu("dev_layernorm");
    Rng rng;
    rng_seed(&rng, 2);
    check_shape(&rng, 7, 64);
    check_shape(&rng, 300, 768);
    check_shape(&rng, 1000, 1600);

    Bench b;
    bench_init(&b);
    int N = 16 * 1024, C = 768;
    size_t nc = (size_t)N * C;
    bf16 *x = (bf16 *)cudaMallocCheck(nc * 2), *r = (bf16 *)cudaMallocCheck(nc * 2), *out = (bf16 *)cudaMallocCheck(nc * 2);
    bf16 *res = (bf16 *)cudaMallocCheck(nc * 2), *w = (bf16 *)cudaMallocCheck(C * 2), *bb = (bf16 *)cudaMallocCheck(C * 2);
    float *mean = (float *)cudaMallocCheck(N * 4), *rstd = (float *)cudaMallocCheck(N * 4);
    float *dinp = (float *)cudaMallocCheck(nc * 4), *dw = (float *)cudaMallocCheck(C * 4), *db = (float *)cudaMallocCheck(C * 4);
    float *scratch = (float *)cudaMallocCheck(layernorm_scratch_floats(N, C) * 4);
    fill_hash_bf16_kernel<<<ceil_div_int(nc, 256), 256>>>(x, (int64_t)nc, 5);
    fill_hash_bf16_kernel<<<ceil_div_int(nc, 256), 256>>>(r, (int64_t)nc, 6);
    fill_hash_bf16_kernel<<<ceil_div_int(C, 256), 256>>>(w, C, 7);
    fill_hash_bf16_kernel<<<ceil_div_int(C, 256), 256>>>(bb, C, 8);
    CUDA_CHECK(cudaMemset(dinp, 0, nc * 4));
    double ms = bench_ms(&b, 20, [&] { gpu_layernorm_forward(out, mean, rstd, x, w, bb, N, C, 0); });
    bench_report(&b, "layernorm forward 16384x768", ms, 2.0 * nc * 2, 0);
    ms = bench_ms(&b, 20, [&] { gpu_fused_residual_layernorm(res, out, mean, rstd, r, x, w, bb, N, C, 0); });
    bench_report(&b, "fused residual+layernorm 16384x768", ms, 4.0 * nc * 2, 0);
    ms = bench_ms(&b, 20, [&] { gpu_layernorm_backward(dinp, res, dw, db, scratch, x, r, w, mean, rstd, N, C, 0); });
    // reads dout, inp (bf16), dinp (fp32); writes dinp (fp32) and its bf16 copy
    bench_report(&b, "layernorm backward 16384x768", ms, nc * (2.0 + 2.0 + 4.0 + 4.0 + 2.0), 0);
    bench_free(&b);
    return test_exit_code();
}
