// dev/cuda/attention.cu: causal attention, three ways, checked against each
// other: llmc/cpu_layers.h (attention_forward/backward, fp32, the reference),
// version 1 = our flash kernel (llmc/attention_flash.cuh) and version 2 =
// cuDNN's fused attention (llmc/attention_cudnn.cuh, when the build has
// cuDNN). Output, softmax statistics and dq|dk|dv at several shapes (head sizes 32 and 64, T not
// a multiple of the tile); then forward and backward timed at d12 size.
#include "dev/cuda/dev_common.cuh"
#include "llmc/attention_cudnn.cuh"
#include "llmc/attention_flash.cuh"
#include "llmc/cpu_layers.h"

static void check_shape(Rng *rng, int B, int T, int C, int NH) {
    char what[160];
    size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C, nl = (size_t)B * NH * T;
    float *qkv = host_random(rng, nq, 1.0f), *dout = host_random(rng, no, 1.0f);
    float *out = (float *)mallocCheck(no * 4), *att = (float *)mallocCheck((size_t)B * NH * T * T * 4);
    float *dqkv = (float *)mallocCheck(nq * 4), *scratch = (float *)mallocCheck((size_t)omp_threads() * T * T * 4);
    attention_forward(out, att, qkv, B, T, C, NH);
    attention_backward(dqkv, scratch, dout, qkv, att, B, T, C, NH);
    bf16 *d_qkv = device_bf16_from(qkv, nq), *d_dout = device_bf16_from(dout, no);
    bf16 *d_out = (bf16 *)cudaMallocCheck(no * 2), *d_dqkv = (bf16 *)cudaMallocCheck(nq * 2);
    float *d_lse = (float *)cudaMallocCheck(nl * 4), *d_delta = (float *)cudaMallocCheck(nl * 4);
    poison(d_out, no * 2); poison(d_dqkv, nq * 2);
    gpu_flash_attention_forward(d_out, d_lse, d_qkv, B, T, C, NH, 0);
    gpu_flash_attention_backward(d_dqkv, d_delta, d_dout, d_qkv, d_out, d_lse, B, T, C, NH, 0);
    float *g_out = host_from_bf16(d_out, no), *g_dqkv = host_from_bf16(d_dqkv, nq);
    snprintf(what, sizeof(what), "v1 flash vs cpu B=%d T=%d C=%d NH=%d: out", B, T, C, NH);
    check_close(what, g_out, out, no, 1e-2, 2e-2);
    snprintf(what, sizeof(what), "v1 flash vs cpu B=%d T=%d C=%d NH=%d: dqkv", B, T, C, NH);
    check_close(what, g_dqkv, dqkv, nq, 2e-2, 3e-2);
    if (cudnn_attention_available()) {
        GPTConfig cfg = {T, 2, 128, 1, NH, C};
        CudnnAttention ca;
        cudnn_attention_init(&ca, &cfg, B, T, 1);
        bf16 *c_out = (bf16 *)cudaMallocCheck(no * 2), *c_dqkv = (bf16 *)cudaMallocCheck(nq * 2);
        float *c_lse = (float *)cudaMallocCheck(nl * 4);
        poison(c_out, no * 2); poison(c_dqkv, nq * 2);
        gpu_cudnn_attention_forward(&ca, c_out, c_lse, d_qkv, B, T, C, NH, 0);
        gpu_cudnn_attention_backward(&ca, c_dqkv, d_delta, d_dout, d_qkv, c_out, c_lse, B, T, C, NH, 0);
        float *h_out = host_from_bf16(c_out, no), *h_dqkv = host_from_bf16(c_dqkv, nq);
        float *h_lse = host_from_f32(c_lse, nl), *f_lse = host_from_f32(d_lse, nl);
        snprintf(what, sizeof(what), "v2 cudnn vs cpu B=%d T=%d C=%d NH=%d: out", B, T, C, NH);
        check_close(what, h_out, out, no, 1e-2, 2e-2);
        snprintf(what, sizeof(what), "v2 cudnn vs cpu B=%d T=%d C=%d NH=%d: dqkv", B, T, C, NH);
        check_close(what, h_dqkv, dqkv, nq, 2e-2, 3e-2);
        snprintf(what, sizeof(what), "v2 cudnn vs v1 flash B=%d T=%d C=%d NH=%d: softmax statistics", B, T, C, NH);
        check_close(what, h_lse, f_lse, nl, 1e-3, 1e-3);
        snprintf(what, sizeof(what), "v2 cudnn vs v1 flash B=%d T=%d C=%d NH=%d: dqkv", B, T, C, NH);
        check_close(what, h_dqkv, g_dqkv, nq, 2e-2, 3e-2);
        CUDA_CHECK(cudaFree(c_out)); CUDA_CHECK(cudaFree(c_dqkv)); CUDA_CHECK(cudaFree(c_lse));
        free(h_out); free(h_dqkv); free(h_lse); free(f_lse);
        cudnn_attention_free(&ca);
    } else {
        test_skip("v2 cudnn B=%d T=%d C=%d NH=%d (no cuDNN in this build)", B, T, C, NH);
    }
    void *dev[] = {d_qkv, d_dout, d_out, d_dqkv, d_lse, d_delta};
    for (size_t i = 0; i < sizeof(dev) / sizeof(dev[0]); i++) CUDA_CHECK(cudaFree(dev[i]));
    float *host[] = {qkv, dout, out, att, dqkv, scratch, g_out, g_dqkv};
    for (size_t i = 0; i < sizeof(host) / sizeof(host[0]); i++) free(host[i]);
}

int main(void) {
    dev_require_gpu("dev_attention");
    Rng rng;
    rng_seed(&rng, 5);
    check_shape(&rng, 2, 64, 128, 2);     // head size 64, one tile
    check_shape(&rng, 1, 100, 128, 4);    // head size 32, a partial tile
    check_shape(&rng, 2, 256, 768, 12);   // d12 heads
    check_shape(&rng, 1, 1024, 768, 12);  // d12 sequence length

    Bench b;
    bench_init(&b);
    int B = 16, T = 1024, C = 768, NH = 12;
    size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C, nl = (size_t)B * NH * T;
    bf16 *qkv = (bf16 *)cudaMallocCheck(nq * 2), *out = (bf16 *)cudaMallocCheck(no * 2);
    bf16 *dout = (bf16 *)cudaMallocCheck(no * 2), *dqkv = (bf16 *)cudaMallocCheck(nq * 2);
    float *lse = (float *)cudaMallocCheck(nl * 4), *delta = (float *)cudaMallocCheck(nl * 4);
    fill_hash_bf16_kernel<<<ceil_div_int(nq, 256), 256>>>(qkv, (int64_t)nq, 11);
    fill_hash_bf16_kernel<<<ceil_div_int(no, 256), 256>>>(dout, (int64_t)no, 12);
    // causal: half of the (T,T) scores; forward 2 matmuls, backward 5 (dq, dk, dv, and the recomputed p and dp)
    double fwd_flops = 2.0 * 2.0 * B * NH * (double)T * T * (C / NH) / 2.0;
    double ms = bench_ms(&b, 10, [&] { gpu_flash_attention_forward(out, lse, qkv, B, T, C, NH, 0); });
    bench_report(&b, "v1 flash forward d12 16x1024", ms, 0, fwd_flops);
    ms = bench_ms(&b, 10, [&] { gpu_flash_attention_backward(dqkv, delta, dout, qkv, out, lse, B, T, C, NH, 0); });
    bench_report(&b, "v1 flash backward d12 16x1024", ms, 0, 2.5 * fwd_flops);
    if (cudnn_attention_available()) {
        GPTConfig cfg = {T, 2, 128, 1, NH, C};
        CudnnAttention ca;
        cudnn_attention_init(&ca, &cfg, B, T, 1);
        ms = bench_ms(&b, 10, [&] { gpu_cudnn_attention_forward(&ca, out, lse, qkv, B, T, C, NH, 0); });
        bench_report(&b, "v2 cudnn forward d12 16x1024", ms, 0, fwd_flops);
        ms = bench_ms(&b, 10, [&] { gpu_cudnn_attention_backward(&ca, dqkv, delta, dout, qkv, out, lse, B, T, C, NH, 0); });
        bench_report(&b, "v2 cudnn backward d12 16x1024", ms, 0, 2.5 * fwd_flops);
        cudnn_attention_free(&ca);
    }
    bench_free(&b);
    return test_exit_code();
}
