// dev/cuda/encoder.cu: checks llmc/encoder.cuh against llmc/cpu_layers.h
// (encoder_forward, encoder_backward) at several shapes, with repeated tokens,
// then times both at GPT-2 d12 size (B=16, T=1024, C=768) against the copy bandwidth.
#include "dev/cuda/dev_common.cuh"
#include "llmc/cpu_layers.h"
#include "llmc/encoder.cuh"

static void check_shape(Rng *rng, int B, int T, int C, int V) {
    int N = B * T;
    char what[128];
    int *inp = (int *)mallocCheck(sizeof(int) * (size_t)N);
    for (int i = 0; i < N; i++) inp[i] = (int)rng_below(rng, (uint64_t)V);
    float *wte = host_random(rng, (size_t)V * C, 1.0f), *wpe = host_random(rng, (size_t)T * C, 1.0f);
    float *ref = (float *)mallocCheck(sizeof(float) * (size_t)N * C);
    encoder_forward(ref, inp, wte, wpe, B, T, C);
    bf16 *d_wte = device_bf16_from(wte, (size_t)V * C), *d_wpe = device_bf16_from(wpe, (size_t)T * C);
    int *d_inp = (int *)cudaMallocCheck(sizeof(int) * (size_t)N);
    CUDA_CHECK(cudaMemcpy(d_inp, inp, sizeof(int) * (size_t)N, cudaMemcpyHostToDevice));
    bf16 *d_out = (bf16 *)cudaMallocCheck(sizeof(bf16) * (size_t)N * C);
    poison(d_out, sizeof(bf16) * (size_t)N * C);
    gpu_encoder_forward(d_out, d_inp, d_wte, d_wpe, B, T, C, 0);
    float *got = host_from_bf16(d_out, (size_t)N * C);
    snprintf(what, sizeof(what), "encoder forward B=%d T=%d C=%d V=%d", B, T, C, V);
    check_close(what, got, ref, (size_t)N * C, 1e-6, 8e-3);

    // backward, accumulating into non-zero gradients
    float *dout = host_random(rng, (size_t)N * C, 1.0f);
    float *dwte = host_random(rng, (size_t)V * C, 1.0f), *dwpe = host_random(rng, (size_t)T * C, 1.0f);
    float *d_dwte = device_f32_from(dwte, (size_t)V * C), *d_dwpe = device_f32_from(dwpe, (size_t)T * C);
    float *d_dout = device_f32_from(dout, (size_t)N * C);
    encoder_backward(dwte, dwpe, dout, inp, B, T, C);
    EncoderIndex ix;
    encoder_index_init(&ix, N, V);
    encoder_index_build(&ix, inp, N, 0);
    gpu_encoder_backward(d_dwte, d_dwpe, d_dout, &ix, B, T, C, 0);
    float *g_wte = host_from_f32(d_dwte, (size_t)V * C), *g_wpe = host_from_f32(d_dwpe, (size_t)T * C);
    snprintf(what, sizeof(what), "encoder backward dwte B=%d T=%d C=%d V=%d", B, T, C, V);
    check_close(what, g_wte, dwte, (size_t)V * C, 1e-5, 1e-5);
    snprintf(what, sizeof(what), "encoder backward dwpe B=%d T=%d C=%d", B, T, C);
    check_close(what, g_wpe, dwpe, (size_t)T * C, 1e-5, 1e-5);
    encoder_index_free(&ix);
    CUDA_CHECK(cudaFree(d_wte)); CUDA_CHECK(cudaFree(d_wpe)); CUDA_CHECK(cudaFree(d_inp)); CUDA_CHECK(cudaFree(d_out));
    CUDA_CHECK(cudaFree(d_dwte)); CUDA_CHECK(cudaFree(d_dwpe)); CUDA_CHECK(cudaFree(d_dout));
    free(inp); free(wte); free(wpe); free(ref); free(got); free(dout); free(dwte); free(dwpe); free(g_wte); free(g_wpe);
}

int main(void) {
    dev_require_gpu("dev_encoder");
    Rng rng;
    rng_seed(&rng, 1);
    check_shape(&rng, 2, 16, 64, 5);        // heavy token repetition
    check_shape(&rng, 3, 33, 100, 300);
    check_shape(&rng, 4, 256, 768, 50257);

    Bench b;
    bench_init(&b);
    int B = 16, T = 1024, C = 768, V = 50257, N = B * T;
    int *inp = (int *)mallocCheck(sizeof(int) * (size_t)N);
    for (int i = 0; i < N; i++) inp[i] = (int)rng_below(&rng, (uint64_t)V);
    int *d_inp = (int *)cudaMallocCheck(sizeof(int) * (size_t)N);
    CUDA_CHECK(cudaMemcpy(d_inp, inp, sizeof(int) * (size_t)N, cudaMemcpyHostToDevice));
    bf16 *wte = (bf16 *)cudaMallocCheck(sizeof(bf16) * (size_t)V * C), *wpe = (bf16 *)cudaMallocCheck(sizeof(bf16) * (size_t)T * C);
    bf16 *out = (bf16 *)cudaMallocCheck(sizeof(bf16) * (size_t)N * C);
    fill_hash_bf16_kernel<<<ceil_div_int((int64_t)V * C, 256), 256>>>(wte, (int64_t)V * C, 3);
    fill_hash_bf16_kernel<<<ceil_div_int((int64_t)T * C, 256), 256>>>(wpe, (int64_t)T * C, 4);
    double ms = bench_ms(&b, 20, [&] { gpu_encoder_forward(out, d_inp, wte, wpe, B, T, C, 0); });
    bench_report(&b, "encoder forward d12 16x1024", ms, 3.0 * N * C * 2, 0);
    float *dwte = (float *)cudaMallocCheck(sizeof(float) * (size_t)V * C), *dwpe = (float *)cudaMallocCheck(sizeof(float) * (size_t)T * C);
    float *dout = (float *)cudaMallocCheck(sizeof(float) * (size_t)N * C);
    CUDA_CHECK(cudaMemset(dout, 0, sizeof(float) * (size_t)N * C));
    EncoderIndex ix;
    encoder_index_init(&ix, N, V);
    encoder_index_build(&ix, inp, N, 0);
    ms = bench_ms(&b, 20, [&] { gpu_encoder_backward(dwte, dwpe, dout, &ix, B, T, C, 0); });
    // dout read twice (wte and wpe passes), touched gradient rows read and written
    bench_report(&b, "encoder backward d12 16x1024", ms, 2.0 * N * C * 4 + 2.0 * ((double)ix.num_unique + T) * C * 4, 0);
    bench_free(&b);
    return test_exit_code();
}
