// dev/cuda/classifier.cu: the fused softmax + cross-entropy + backward, two
// versions, each checked against llmc/cpu_layers.h (softmax_crossentropy):
// losses, dlogits in place, padded columns zeroed, the eval mode leaving the
// logits alone:
//   version 1 = the first kernel (below): one block per row, scalar 2-byte
//               loads, the row read three times (max, sum, write), expf;
//   version 2 = llmc/classifier.cuh (what the trainer runs): the row read
//               once into registers as 16-byte vectors, exp2 on the special-
//               function unit; an element-by-element path for Vp % 8 != 0 or
//               unaligned logits; rows past 65536 re-read from memory.
// Shapes: padded widths (vector path, 1 and 7 vectors per thread), Vp = V + 3
// (element path), V = 70000 (re-read path); version 2 also on a misaligned
// copy (element path), which must give the aligned run's bits. Then both are
// timed on d12's (16384, 50304) logits.
#include "dev/cuda/dev_common.cuh"
#include "llmc/classifier.cuh"
#include "llmc/cpu_layers.h"
#include "llmc/model.h"

// ---------------------------------------------------------------------------
// version 1: one block per row, scalar loads (the kernel version 2 replaced)

__global__ void __launch_bounds__(CLASSIFIER_THREADS)
    fused_classifier_v1_kernel(floatX *logits, float *losses, const int *targets, int V, int Vp, float dloss,
                               int write_dlogits) {
    __shared__ float scratch[32];
    int64_t row = blockIdx.x;
    floatX *x = logits + row * Vp;
    float mx = -INFINITY;
    for (int v = threadIdx.x; v < V; v += blockDim.x) mx = fmaxf(mx, to_float(x[v]));
    mx = block_max(mx, scratch);
    float sum = 0.0f;
    for (int v = threadIdx.x; v < V; v += blockDim.x) sum += expf(to_float(x[v]) - mx);
    sum = block_sum(sum, scratch);
    float lse = mx + logf(sum);
    int y = targets[row];
    float xy = to_float(x[y]);
    __syncthreads();  // every thread has read x[y] before the row is overwritten
    if (threadIdx.x == 0) losses[row] = lse - xy;
    if (!write_dlogits) return;
    for (int v = threadIdx.x; v < Vp; v += blockDim.x) {
        float d = 0.0f;
        if (v < V) d = (expf(to_float(x[v]) - lse) - (v == y ? 1.0f : 0.0f)) * dloss;
        x[v] = to_floatX(d);
    }
}

static void v1_fused_classifier(floatX *logits, float *losses, const int *targets, int N, int V, int Vp, float dloss,
                                cudaStream_t s) {
    launch_kernel(fused_classifier_v1_kernel, N, CLASSIFIER_THREADS, 0, s, logits, losses, targets, V, Vp, dloss,
                  dloss != 0.0f);
    CUDA_CHECK_LAUNCH();
}

typedef struct {
    const char *name;
    void (*run)(floatX *, float *, const int *, int, int, int, float, cudaStream_t);
} Version;
static const Version versions[] = {{"v1 scalar", v1_fused_classifier}, {"v2 llmc", gpu_fused_classifier}};

// ---------------------------------------------------------------------------
// checks

typedef struct {
    float *eval_loss, *eval_logits, *loss, *dlogits;  // host copies
} Got;

// Eval then train on a fresh device copy of the logits lp (N, Vp).
static Got run_version(const Version *v, const float *lp, const int *d_y, int N, int V, int Vp, float dloss,
                       int misaligned) {
    size_t n = (size_t)N * Vp;
    Got g;
    floatX *tmp = device_floatX_from(lp, n), *l = device_copy(tmp, n, misaligned);
    CUDA_CHECK(cudaFree(tmp));
    float *loss = device_buffer<float>(N, misaligned);
    v->run(l, loss, d_y, N, V, Vp, 0.0f, 0);  // eval mode: losses only, logits untouched
    g.eval_loss = host_from_f32(loss, N);
    g.eval_logits = host_from_floatX(l, n);
    poison(loss, N * 4);
    v->run(l, loss, d_y, N, V, Vp, dloss, 0);
    g.loss = host_from_f32(loss, N);
    g.dlogits = host_from_floatX(l, n);
    device_buffer_free(l, misaligned);
    device_buffer_free(loss, misaligned);
    return g;
}

static void got_free(Got *g) { free(g->eval_loss); free(g->eval_logits); free(g->loss); free(g->dlogits); }

static void check_shape(Rng *rng, int N, int V, int Vp) {
    char what[160];
    float *lp = host_random(rng, (size_t)N * Vp, 8.0f);  // padded columns hold garbage: must be ignored
    float *ref = (float *)mallocCheck((size_t)N * V * 4), *losses = (float *)mallocCheck(N * 4);
    int *y = (int *)mallocCheck(N * 4);
    for (int i = 0; i < N; i++) {
        y[i] = (int)rng_below(rng, (uint64_t)V);
        memcpy(ref + (size_t)i * V, lp + (size_t)i * Vp, V * 4);
    }
    y[0] = V - 1;  // the last real column, next to the padding
    float dloss = 1.0f;  // dlogits of order 1: easy tolerances
    softmax_crossentropy(ref, losses, y, N, V, dloss);
    int *d_y = (int *)cudaMallocCheck(N * 4);
    CUDA_CHECK(cudaMemcpy(d_y, y, N * 4, cudaMemcpyHostToDevice));
    float *g_d = (float *)mallocCheck((size_t)N * V * 4), *g_pad = (float *)mallocCheck((size_t)N * (Vp - V + 1) * 4);
    float *zeros = (float *)callocCheck((size_t)N * (Vp - V) + 1, 4);
    Got got[3];
    for (int r = 0; r < 3; r++) {  // v1, v2, v2 misaligned
        const Version *v = &versions[r == 0 ? 0 : 1];
        const char *name = r == 2 ? "v2 llmc (misaligned: element path)" : v->name;
        Got *g = &got[r];
        *g = run_version(v, lp, d_y, N, V, Vp, dloss, r == 2);
        snprintf(what, sizeof(what), "%s classifier eval N=%d V=%d Vp=%d: losses", name, N, V, Vp);
        check_close(what, g->eval_loss, losses, N, 1e-4, 1e-4);
        snprintf(what, sizeof(what), "%s classifier eval N=%d V=%d Vp=%d: logits unchanged", name, N, V, Vp);
        check_close(what, g->eval_logits, lp, (size_t)N * Vp, 0, 0);
        snprintf(what, sizeof(what), "%s classifier train N=%d V=%d Vp=%d: losses", name, N, V, Vp);
        check_close(what, g->loss, losses, N, 1e-4, 1e-4);
        size_t npad = 0;
        for (int i = 0; i < N; i++) {
            memcpy(g_d + (size_t)i * V, g->dlogits + (size_t)i * Vp, V * 4);
            for (int c = V; c < Vp; c++) g_pad[npad++] = g->dlogits[(size_t)i * Vp + c];
        }
        snprintf(what, sizeof(what), "%s classifier train N=%d V=%d Vp=%d: dlogits", name, N, V, Vp);
        check_close(what, g_d, ref, (size_t)N * V, 1e-4, 1e-2);
        snprintf(what, sizeof(what), "%s classifier train N=%d V=%d Vp=%d: padded columns zero", name, N, V, Vp);
        check_close(what, g_pad, zeros, npad, 0, 0);
    }
    test_result(bits_equal(got[1].loss, got[2].loss, N * 4) &&
                    bits_equal(got[1].dlogits, got[2].dlogits, (size_t)N * Vp * 4),
                "v2 classifier N=%d V=%d Vp=%d: element path gives the vector path's bits (losses, dlogits)", N, V, Vp);
    for (int r = 0; r < 3; r++) got_free(&got[r]);
    CUDA_CHECK(cudaFree(d_y));
    free(lp); free(ref); free(losses); free(y); free(g_d); free(g_pad); free(zeros);
}

int main(void) {
    dev_require_gpu("dev_classifier");
    Rng rng;
    rng_seed(&rng, 6);
    const int E = DEV_EMULATED;  // the emulator: fewer rows
    const int shapes[][3] = {
        {3, 10, pad_vocab(10)},                  // one vector per thread, most of it padding
        {E ? 8 : 64, 1000, pad_vocab(1000)},     // padded to 1024
        {5, 1000, 1003},                         // Vp % 8 != 0: element path
        {E ? 2 : 128, 50257, pad_vocab(50257)},  // GPT-2: 7 vectors per thread
        {E ? 1 : 4, 70000, pad_vocab(70000)},    // past 65536: re-read from memory
    };
    for (const auto &s : shapes) check_shape(&rng, s[0], s[1], s[2]);
    if (!dev_benchmarks("dev_classifier")) return test_exit_code();

    Bench b;
    bench_init(&b);
    int N = 16 * 1024, V = 50257, Vp = pad_vocab(V);
    size_t n = (size_t)N * Vp;
    floatX *l = (floatX *)cudaMallocCheck(n * 2);
    float *loss = (float *)cudaMallocCheck(N * 4);
    int *y = (int *)cudaMallocCheck(N * 4);
    CUDA_CHECK(cudaMemset(y, 0, N * 4));
    char name[96];
    for (const Version &v : versions) {
        // the logits are rewritten with dlogits each run: the input changes, the work does not
        launch_kernel(fill_hash_floatX_kernel, ceil_div_int(n, 256), 256, 0, 0, l, (int64_t)n, 13);
        CUDA_CHECK_LAUNCH();
        double ms = bench_ms(&b, 10, [&] { v.run(l, loss, y, N, V, Vp, 1.0f / N, 0); });
        snprintf(name, sizeof(name), "%s fused classifier 16384x50304", v.name);
        bench_report(&b, name, ms, 2.0 * n * 2, 0);
    }
    CUDA_CHECK(cudaFree(l)); CUDA_CHECK(cudaFree(loss)); CUDA_CHECK(cudaFree(y));
    bench_free(&b);
    return test_exit_code();
}
