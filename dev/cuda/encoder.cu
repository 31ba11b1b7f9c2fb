// dev/cuda/encoder.cu: token + position embeddings, two versions, each checked
// against llmc/cpu_layers.h (encoder_forward, encoder_backward) at several
// shapes, with repeated tokens:
//   version 1 = the first kernels (below): one element per thread, scalar
//               accesses;
//   version 2 = llmc/encoder.cuh (what the trainer runs): 8 bf16 per thread
//               forward (16-byte accesses), 4 fp32 per thread backward
//               (float4), element by element when C or the alignment does
//               not allow it. Same summation order as version 1.
// Shapes: C = 64 and 768 (vector paths), C = 100 (forward element path,
// backward float4), C = 30 (both element paths); version 2 also on misaligned
// copies (element paths), which must give the aligned run's bits. Then both
// are timed at GPT-2 d12 size (B=16, T=1024, C=768) against the copy bandwidth.
#include "dev/cuda/dev_common.cuh"
#include "llmc/cpu_layers.h"
#include "llmc/encoder.cuh"

// ---------------------------------------------------------------------------
// version 1: one element per thread (the kernels version 2 replaced)

__global__ void encoder_forward_v1_kernel(floatX *out, const int *inp, const floatX *wte, const floatX *wpe, int N, int T,
                                          int C) {
    int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (int64_t)N * C) return;
    int n = (int)(idx / C), c = (int)(idx % C);
    int t = n % T;
    float v = to_float(wte[(int64_t)inp[n] * C + c]) + to_float(wpe[(int64_t)t * C + c]);
    out[idx] = to_floatX(v);
}

__global__ void encoder_backward_wte_v1_kernel(float *dwte, const float *dout, const int *tok, const int *start,
                                               const int *pos, int C) {
    int u = blockIdx.x;
    int c = blockIdx.y * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float acc = 0.0f;
    for (int k = start[u]; k < start[u + 1]; k++) acc += dout[(int64_t)pos[k] * C + c];
    dwte[(int64_t)tok[u] * C + c] += acc;
}

__global__ void encoder_backward_wpe_v1_kernel(float *dwpe, const float *dout, int B, int T, int C) {
    int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (int64_t)T * C) return;
    float acc = 0.0f;
    for (int b = 0; b < B; b++) acc += dout[(int64_t)b * T * C + idx];
    dwpe[idx] += acc;
}

static void v1_encoder_forward(floatX *out, const int *inp, const floatX *wte, const floatX *wpe, int B, int T, int C,
                               cudaStream_t s) {
    int64_t n = (int64_t)B * T * C;
    launch_kernel(encoder_forward_v1_kernel, ceil_div_int(n, 256), 256, 0, s, out, inp, wte, wpe, B * T, T, C);
    CUDA_CHECK_LAUNCH();
}

static void v1_encoder_backward(float *dwte, float *dwpe, const float *dout, const EncoderIndex *ix, int B, int T,
                                int C, cudaStream_t s) {
    dim3 grid(ix->num_unique, ceil_div_int(C, 256));
    launch_kernel(encoder_backward_wte_v1_kernel, grid, 256, 0, s, dwte, dout, ix->d_tok, ix->d_start, ix->d_pos, C);
    CUDA_CHECK_LAUNCH();
    launch_kernel(encoder_backward_wpe_v1_kernel, ceil_div_int((int64_t)T * C, 256), 256, 0, s, dwpe, dout, B, T, C);
    CUDA_CHECK_LAUNCH();
}

typedef struct {
    const char *name;
    void (*forward)(floatX *, const int *, const floatX *, const floatX *, int, int, int, cudaStream_t);
    void (*backward)(float *, float *, const float *, const EncoderIndex *, int, int, int, cudaStream_t);
} Version;
static const Version versions[] = {
    {"v1 scalar", v1_encoder_forward, v1_encoder_backward},
    {"v2 llmc", gpu_encoder_forward, gpu_encoder_backward},
};

// ---------------------------------------------------------------------------
// checks

static void check_shape(Rng *rng, int B, int T, int C, int V) {
    int N = B * T;
    char what[160];
    int *inp = (int *)mallocCheck(sizeof(int) * (size_t)N);
    for (int i = 0; i < N; i++) inp[i] = (int)rng_below(rng, (uint64_t)V);
    float *wte = host_random(rng, (size_t)V * C, 1.0f), *wpe = host_random(rng, (size_t)T * C, 1.0f);
    float *ref = (float *)mallocCheck(sizeof(float) * (size_t)N * C);
    encoder_forward(ref, inp, wte, wpe, B, T, C);
    int *d_inp = (int *)cudaMallocCheck(sizeof(int) * (size_t)N);
    CUDA_CHECK(cudaMemcpy(d_inp, inp, sizeof(int) * (size_t)N, cudaMemcpyHostToDevice));
    // backward, accumulating into non-zero gradients
    float *dout = host_random(rng, (size_t)N * C, 1.0f);
    float *dwte0 = host_random(rng, (size_t)V * C, 1.0f), *dwpe0 = host_random(rng, (size_t)T * C, 1.0f);
    float *dwte = (float *)mallocCheck((size_t)V * C * 4), *dwpe = (float *)mallocCheck((size_t)T * C * 4);
    memcpy(dwte, dwte0, (size_t)V * C * 4);
    memcpy(dwpe, dwpe0, (size_t)T * C * 4);
    encoder_backward(dwte, dwpe, dout, inp, B, T, C);
    EncoderIndex ix;
    encoder_index_init(&ix, N, V);
    encoder_index_build(&ix, inp, N, 0, V, 0);
    float *got[3][3];  // [v1, v2, v2 misaligned][out, dwte, dwpe]
    for (int r = 0; r < 3; r++) {
        const Version *v = &versions[r == 0 ? 0 : 1];
        const char *name = r == 2 ? "v2 llmc (misaligned: element path)" : v->name;
        int mis = r == 2;
        floatX *d_wte = upload_floatX(wte, (size_t)V * C, mis), *d_wpe = upload_floatX(wpe, (size_t)T * C, mis);
        floatX *d_out = device_buffer<floatX>((size_t)N * C, mis);
        v->forward(d_out, d_inp, d_wte, d_wpe, B, T, C, 0);
        got[r][0] = host_from_floatX(d_out, (size_t)N * C);
        snprintf(what, sizeof(what), "%s encoder forward B=%d T=%d C=%d V=%d", name, B, T, C, V);
        check_close(what, got[r][0], ref, (size_t)N * C, 1e-6, 8e-3);
        float *d_dwte = upload_f32(dwte0, (size_t)V * C, mis), *d_dwpe = upload_f32(dwpe0, (size_t)T * C, mis);
        float *d_dout = upload_f32(dout, (size_t)N * C, mis);
        v->backward(d_dwte, d_dwpe, d_dout, &ix, B, T, C, 0);
        got[r][1] = host_from_f32(d_dwte, (size_t)V * C);
        got[r][2] = host_from_f32(d_dwpe, (size_t)T * C);
        snprintf(what, sizeof(what), "%s encoder backward dwte B=%d T=%d C=%d V=%d", name, B, T, C, V);
        check_close(what, got[r][1], dwte, (size_t)V * C, 1e-5, 1e-5);
        snprintf(what, sizeof(what), "%s encoder backward dwpe B=%d T=%d C=%d", name, B, T, C);
        check_close(what, got[r][2], dwpe, (size_t)T * C, 1e-5, 1e-5);
        device_buffer_free(d_wte, mis); device_buffer_free(d_wpe, mis); device_buffer_free(d_out, mis);
        device_buffer_free(d_dwte, mis); device_buffer_free(d_dwpe, mis); device_buffer_free(d_dout, mis);
    }
    // same arithmetic in the same order on every path: identical bits
    int same = 1;
    for (int r = 0; r < 2; r++)
        same = same && bits_equal(got[r][0], got[2][0], (size_t)N * C * 4) &&
               bits_equal(got[r][1], got[2][1], (size_t)V * C * 4) && bits_equal(got[r][2], got[2][2], (size_t)T * C * 4);
    test_result(same, "encoder B=%d T=%d C=%d V=%d: v1, v2 and v2's element path give the same bits", B, T, C, V);
    encoder_index_free(&ix);
    CUDA_CHECK(cudaFree(d_inp));
    for (int r = 0; r < 3; r++)
        for (int q = 0; q < 3; q++) free(got[r][q]);
    free(inp); free(wte); free(wpe); free(ref); free(dout); free(dwte0); free(dwpe0); free(dwte); free(dwpe);
}

int main(void) {
    dev_require_gpu("dev_encoder");
    Rng rng;
    rng_seed(&rng, 1);
    const int shapes[][4] = {
        {2, 16, 64, 5},     // heavy token repetition
        {3, 33, 100, 300},  // C % 8 != 0: forward element path; C % 4 == 0: backward float4
        {2, 7, 30, 11},     // C % 4 != 0: both element paths
        {DEV_EMULATED ? 1 : 4, DEV_EMULATED ? 64 : 256, 768, 50257},
    };
    for (const auto &s : shapes) check_shape(&rng, s[0], s[1], s[2], s[3]);
    if (!dev_benchmarks("dev_encoder")) return test_exit_code();

    Bench b;
    bench_init(&b);
    int B = 16, T = 1024, C = 768, V = 50257, N = B * T;
    int *inp = (int *)mallocCheck(sizeof(int) * (size_t)N);
    for (int i = 0; i < N; i++) inp[i] = (int)rng_below(&rng, (uint64_t)V);
    int *d_inp = (int *)cudaMallocCheck(sizeof(int) * (size_t)N);
    CUDA_CHECK(cudaMemcpy(d_inp, inp, sizeof(int) * (size_t)N, cudaMemcpyHostToDevice));
    floatX *wte = (floatX *)cudaMallocCheck(sizeof(floatX) * (size_t)V * C), *wpe = (floatX *)cudaMallocCheck(sizeof(floatX) * (size_t)T * C);
    floatX *out = (floatX *)cudaMallocCheck(sizeof(floatX) * (size_t)N * C);
    launch_kernel(fill_hash_floatX_kernel, ceil_div_int((int64_t)V * C, 256), 256, 0, 0, wte, (int64_t)V * C, 3);
    launch_kernel(fill_hash_floatX_kernel, ceil_div_int((int64_t)T * C, 256), 256, 0, 0, wpe, (int64_t)T * C, 4);
    CUDA_CHECK_LAUNCH();
    float *dwte = (float *)cudaMallocCheck(sizeof(float) * (size_t)V * C), *dwpe = (float *)cudaMallocCheck(sizeof(float) * (size_t)T * C);
    float *dout = (float *)cudaMallocCheck(sizeof(float) * (size_t)N * C);
    CUDA_CHECK(cudaMemset(dwte, 0, sizeof(float) * (size_t)V * C));
    CUDA_CHECK(cudaMemset(dwpe, 0, sizeof(float) * (size_t)T * C));
    // random dout: pairs of random bf16 read as fp32 (finite, in [-1, 1])
    launch_kernel(fill_hash_floatX_kernel, ceil_div_int((int64_t)N * C * 2, 256), 256, 0, 0, (floatX *)dout,
                  (int64_t)N * C * 2, 14);
    CUDA_CHECK_LAUNCH();
    EncoderIndex ix;
    encoder_index_init(&ix, N, V);
    encoder_index_build(&ix, inp, N, 0, V, 0);
    char name[96];
    for (const Version &v : versions) {
        double ms = bench_ms(&b, 20, [&] { v.forward(out, d_inp, wte, wpe, B, T, C, 0); });
        snprintf(name, sizeof(name), "%s encoder forward d12 16x1024", v.name);
        bench_report(&b, name, ms, 3.0 * N * C * 2, 0);
    }
    for (const Version &v : versions) {
        double ms = bench_ms(&b, 20, [&] { v.backward(dwte, dwpe, dout, &ix, B, T, C, 0); });
        snprintf(name, sizeof(name), "%s encoder backward d12 16x1024", v.name);
        // dout read twice (wte and wpe passes), touched gradient rows read and written
        bench_report(&b, name, ms, 2.0 * N * C * 4 + 2.0 * ((double)ix.num_unique + T) * C * 4, 0);
    }
    encoder_index_free(&ix);
    void *dev[] = {d_inp, wte, wpe, out, dwte, dwpe, dout};
    for (size_t i = 0; i < sizeof(dev) / sizeof(dev[0]); i++) CUDA_CHECK(cudaFree(dev[i]));
    free(inp);
    bench_free(&b);
    return test_exit_code();
}
