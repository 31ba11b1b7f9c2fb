// encoder.cuh: token + position embeddings on the GPU, forward and a
// deterministic backward. The backward groups positions by token on the host
// (a counting sort of the B*T input ids, which the host has anyway), so each
// wte row is summed by one thread per channel in a fixed order: no atomics,
// bit-identical on every run.
#ifndef LLMC_ENCODER_CUH
#define LLMC_ENCODER_CUH

#include "cuda_common.cuh"

// out (N,C) = wte[inp[n]] + wpe[n % T]; inp (N) on the device.
__global__ void encoder_forward_kernel(bf16 *out, const int *inp, const bf16 *wte, const bf16 *wpe, int N, int T,
                                       int C) {
    int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (int64_t)N * C) return;
    int n = (int)(idx / C), c = (int)(idx % C);
    int t = n % T;
    float v = __bfloat162float(wte[(int64_t)inp[n] * C + c]) + __bfloat162float(wpe[(int64_t)t * C + c]);
    out[idx] = __float2bfloat16_rn(v);
}

static inline void gpu_encoder_forward(bf16 *out, const int *inp, const bf16 *wte, const bf16 *wpe, int B, int T,
                                       int C, cudaStream_t s) {
    int64_t n = (int64_t)B * T * C;
    encoder_forward_kernel<<<ceil_div_int(n, 256), 256, 0, s>>>(out, inp, wte, wpe, B * T, T, C);
    CUDA_CHECK_LAUNCH();
}

// The positions of a batch grouped by token (CSR): token tok[u] occurs at the
// positions pos[start[u] .. start[u+1]), in increasing order.
typedef struct {
    int num_unique;
    int *h_tok, *h_start, *h_pos, *h_count;  // host: (N) (N+1) (N) (V)
    int *d_tok, *d_start, *d_pos;            // device copies
    int N, V;
} EncoderIndex;

static inline void encoder_index_init(EncoderIndex *ix, int N, int V) {
    memset(ix, 0, sizeof(*ix));
    ix->N = N;
    ix->V = V;
    ix->h_tok = (int *)mallocCheck(sizeof(int) * (size_t)N);
    ix->h_start = (int *)mallocCheck(sizeof(int) * (size_t)(N + 1));
    ix->h_pos = (int *)mallocCheck(sizeof(int) * (size_t)N);
    ix->h_count = (int *)callocCheck((size_t)V, sizeof(int));
    ix->d_tok = (int *)cudaMallocCheck(sizeof(int) * (size_t)N);
    ix->d_start = (int *)cudaMallocCheck(sizeof(int) * (size_t)(N + 1));
    ix->d_pos = (int *)cudaMallocCheck(sizeof(int) * (size_t)N);
}

static inline void encoder_index_free(EncoderIndex *ix) {
    free(ix->h_tok); free(ix->h_start); free(ix->h_pos); free(ix->h_count);
    CUDA_CHECK(cudaFree(ix->d_tok)); CUDA_CHECK(cudaFree(ix->d_start)); CUDA_CHECK(cudaFree(ix->d_pos));
    memset(ix, 0, sizeof(*ix));
}

// Builds the index of inp (n <= ix->N host ids in [0, V)) and uploads it.
static inline void encoder_index_build(EncoderIndex *ix, const int *inp, int n, cudaStream_t s) {
    CHECK(n <= ix->N, "encoder index built for %d positions, got %d", ix->N, n);
    int u = 0;
    for (int i = 0; i < n; i++) {
        if (ix->h_count[inp[i]]++ == 0) ix->h_tok[u++] = inp[i];
    }
    ix->num_unique = u;
    // start offsets in order of first occurrence; h_count becomes a cursor
    int acc = 0;
    for (int k = 0; k < u; k++) {
        int tok = ix->h_tok[k];
        ix->h_start[k] = acc;
        acc += ix->h_count[tok];
        ix->h_count[tok] = ix->h_start[k];
    }
    ix->h_start[u] = acc;
    for (int i = 0; i < n; i++) ix->h_pos[ix->h_count[inp[i]]++] = i;
    for (int k = 0; k < u; k++) ix->h_count[ix->h_tok[k]] = 0;  // ready for the next batch
    CUDA_CHECK(cudaMemcpyAsync(ix->d_tok, ix->h_tok, sizeof(int) * (size_t)u, cudaMemcpyHostToDevice, s));
    CUDA_CHECK(cudaMemcpyAsync(ix->d_start, ix->h_start, sizeof(int) * (size_t)(u + 1), cudaMemcpyHostToDevice, s));
    CUDA_CHECK(cudaMemcpyAsync(ix->d_pos, ix->h_pos, sizeof(int) * (size_t)n, cudaMemcpyHostToDevice, s));
    CUDA_CHECK(cudaStreamSynchronize(s));  // the host buffers are reused by the next build
}

// dwte[tok[u], c] += sum over the positions of tok[u] of dout[pos, c]. grid (unique tokens, C chunks).
__global__ void encoder_backward_wte_kernel(float *dwte, const float *dout, const int *tok, const int *start,
                                            const int *pos, int C) {
    int u = blockIdx.x;
    int c = blockIdx.y * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float acc = 0.0f;
    for (int k = start[u]; k < start[u + 1]; k++) acc += dout[(int64_t)pos[k] * C + c];
    dwte[(int64_t)tok[u] * C + c] += acc;
}

// dwpe[t, c] += sum_b dout[b, t, c]: one thread per (t, c).
__global__ void encoder_backward_wpe_kernel(float *dwpe, const float *dout, int B, int T, int C) {
    int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (int64_t)T * C) return;
    float acc = 0.0f;
    for (int b = 0; b < B; b++) acc += dout[(int64_t)b * T * C + idx];
    dwpe[idx] += acc;
}

// dout (B,T,C) fp32; dwte (Vp,C) and dwpe (maxT,C) fp32, accumulated.
static inline void gpu_encoder_backward(float *dwte, float *dwpe, const float *dout, const EncoderIndex *ix, int B,
                                        int T, int C, cudaStream_t s) {
    dim3 grid(ix->num_unique, ceil_div_int(C, 256));
    encoder_backward_wte_kernel<<<grid, 256, 0, s>>>(dwte, dout, ix->d_tok, ix->d_start, ix->d_pos, C);
    CUDA_CHECK_LAUNCH();
    encoder_backward_wpe_kernel<<<ceil_div_int((int64_t)T * C, 256), 256, 0, s>>>(dwpe, dout, B, T, C);
    CUDA_CHECK_LAUNCH();
}

#endif  // LLMC_ENCODER_CUH
