// dev/cuda/classifier.cu: checks the fused softmax + cross-entropy + backward
// (llmc/classifier.cuh) against llmc/cpu_layers.h (softmax_crossentropy):
// losses, dlogits in place, padded columns zeroed, the eval mode leaving the
// logits alone; then times it on d12's (16384, 50304) logits.
#include "dev/cuda/dev_common.cuh"
#include "llmc/classifier.cuh"
#include "llmc/cpu_layers.h"
#include "llmc/model.h"

static void check_shape(Rng *rng, int N, int V) {
    char what[128];
    int Vp = pad_vocab(V);
    float *lp = host_random(rng, (size_t)N * Vp, 8.0f);  // padded columns hold garbage: must be ignored
    float *ref = (float *)mallocCheck((size_t)N * V * 4), *losses = (float *)mallocCheck(N * 4);
    int *y = (int *)mallocCheck(N * 4);
    for (int i = 0; i < N; i++) {
        y[i] = (int)rng_below(rng, (uint64_t)V);
        memcpy(ref + (size_t)i * V, lp + (size_t)i * Vp, V * 4);
    }
    float dloss = 1.0f;  // dlogits of order 1: easy tolerances
    softmax_crossentropy(ref, losses, y, N, V, dloss);
    bf16 *d_l = device_bf16_from(lp, (size_t)N * Vp);
    float *d_loss = (float *)cudaMallocCheck(N * 4);
    int *d_y = (int *)cudaMallocCheck(N * 4);
    CUDA_CHECK(cudaMemcpy(d_y, y, N * 4, cudaMemcpyHostToDevice));
    // eval mode: losses only, logits untouched
    poison(d_loss, N * 4);
    gpu_fused_classifier(d_l, d_loss, d_y, N, V, Vp, 0.0f, 0);
    float *g_loss = host_from_f32(d_loss, N), *g_l = host_from_bf16(d_l, (size_t)N * Vp);
    snprintf(what, sizeof(what), "classifier eval N=%d V=%d: losses", N, V);
    check_close(what, g_loss, losses, N, 1e-4, 1e-4);
    snprintf(what, sizeof(what), "classifier eval N=%d V=%d: logits unchanged", N, V);
    check_close(what, g_l, lp, (size_t)N * Vp, 0, 0);
    free(g_loss); free(g_l);
    poison(d_loss, N * 4);
    gpu_fused_classifier(d_l, d_loss, d_y, N, V, Vp, dloss, 0);
    g_loss = host_from_f32(d_loss, N);
    g_l = host_from_bf16(d_l, (size_t)N * Vp);
    snprintf(what, sizeof(what), "classifier train N=%d V=%d: losses", N, V);
    check_close(what, g_loss, losses, N, 1e-4, 1e-4);
    float *g_d = (float *)mallocCheck((size_t)N * V * 4), *g_pad = (float *)mallocCheck((size_t)N * (Vp - V + 1) * 4);
    size_t npad = 0;
    for (int i = 0; i < N; i++) {
        memcpy(g_d + (size_t)i * V, g_l + (size_t)i * Vp, V * 4);
        for (int v = V; v < Vp; v++) g_pad[npad++] = g_l[(size_t)i * Vp + v];
    }
    snprintf(what, sizeof(what), "classifier train N=%d V=%d: dlogits", N, V);
    check_close(what, g_d, ref, (size_t)N * V, 1e-4, 1e-2);
    float *zeros = (float *)callocCheck(npad + 1, 4);
    snprintf(what, sizeof(what), "classifier train N=%d V=%d: padded columns zero", N, V);
    check_close(what, g_pad, zeros, npad, 0, 0);
    CUDA_CHECK(cudaFree(d_l)); CUDA_CHECK(cudaFree(d_loss)); CUDA_CHECK(cudaFree(d_y));
    free(lp); free(ref); free(losses); free(y); free(g_loss); free(g_l); free(g_d); free(g_pad); free(zeros);
}

int main(void) {
    dev_require_gpu("dev_classifier");
    Rng rng;
    rng_seed(&rng, 6);
    check_shape(&rng, 3, 10);
    check_shape(&rng, 64, 1000);
    check_shape(&rng, 128, 50257);

    Bench b;
    bench_init(&b);
    int N = 16 * 1024, V = 50257, Vp = pad_vocab(V);
    size_t n = (size_t)N * Vp;
    bf16 *l = (bf16 *)cudaMallocCheck(n * 2);
    float *loss = (float *)cudaMallocCheck(N * 4);
    int *y = (int *)cudaMallocCheck(N * 4);
    CUDA_CHECK(cudaMemset(y, 0, N * 4));
    fill_hash_bf16_kernel<<<ceil_div_int(n, 256), 256>>>(l, (int64_t)n, 13);
    // the logits are rewritten with dlogits each run: the input changes, the work does not
    double ms = bench_ms(&b, 10, [&] { gpu_fused_classifier(l, loss, y, N, V, Vp, 1.0f / N, 0); });
    bench_report(&b, "fused classifier 16384x50304", ms, 2.0 * n * 2, 0);
    bench_free(&b);
    return test_exit_code();
}
