// encoder.cuh: token + position embeddings on the GPU, forward and a
// deterministic backward. The backward groups positions by token on the host
// (a counting sort of the B*T input ids, which the host has anyway), so each
// wte row is summed by one thread per group of channels in a fixed order: no
// atomics, bit-identical on every run. The forward moves 8 floatX per thread
// (16-byte accesses), the backward 4 fp32 (float4), when C allows it (C % 8,
// resp. C % 4, == 0) and the pointers are 16-byte aligned (tested at launch);
// otherwise the same kernels go element by element, the last group of each
// row partial. Same arithmetic and order either way.
#ifndef LLMC_ENCODER_CUH
#define LLMC_ENCODER_CUH

// tests/test_kernels_emulated.cpp runs this header, launchers and index
// included, on the CPU through tests/cuda_emulator.h.
#include "cuda_common.cuh"  // defines: aligned16, launch_kernel, ceil_div_int, CUDA_CHECK_LAUNCH, ...

// out (N,C) = wte[inp[n]] + wpe[n % T]; inp (N) on the device. Thread q: row
// n = q / ceil(C/8), channels [c, c + 8) with c = 8 (q % ceil(C/8)), cut at C.
template <bool VEC>
__global__ void encoder_forward_kernel(floatX *__restrict__ out, const int *__restrict__ inp,
                                       const floatX *__restrict__ wte, const floatX *__restrict__ wpe, int N, int T,
                                       int C) {
    int C8 = (C + 7) / 8;
    int64_t q = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (q >= (int64_t)N * C8) return;
    int n = (int)(q / C8), c = (int)(q - (int64_t)n * C8) * 8;
    int cnt = C - c < 8 ? C - c : 8;
    const floatX *we = wte + (int64_t)inp[n] * C + c, *pe = wpe + (int64_t)(n % T) * C + c;
    float a[8], b[8];
    floatX8_unpack(a, VEC ? ld_floatX8(we) : ld_floatX8_n(we, cnt));
    floatX8_unpack(b, VEC ? ld_floatX8(pe) : ld_floatX8_n(pe, cnt));
#pragma unroll
    for (int j = 0; j < 8; j++) a[j] += b[j];
    uint4 v = floatX8_pack(a);
    if (VEC) st_floatX8(out + (int64_t)n * C + c, v);
    else st_floatX8_n(out + (int64_t)n * C + c, v, cnt);
}

static inline void gpu_encoder_forward(floatX *out, const int *inp, const floatX *wte, const floatX *wpe, int B, int T,
                                       int C, cudaStream_t s) {
    int64_t nq = (int64_t)B * T * ((C + 7) / 8);
    if (nq <= 0) return;
    int vec = C % 8 == 0 && aligned16(out) && aligned16(wte) && aligned16(wpe);
    launch_kernel(vec ? encoder_forward_kernel<true> : encoder_forward_kernel<false>, ceil_div_int(nq, 256), 256, 0,
                  s, out, inp, wte, wpe, B * T, T, C);
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

// Builds the index of inp (n <= ix->N host ids in [0, V)) and uploads it:
// of the ids in [v0, v0 + nv) (a tensor-parallel rank's vocabulary slice; 0,
// V: all of them), as ids from v0; the other positions are left out.
static inline void encoder_index_build(EncoderIndex *ix, const int *inp, int n, int v0, int nv, cudaStream_t s) {
    CHECK(n <= ix->N, "encoder index built for %d positions, got %d", ix->N, n);
    int u = 0;
    for (int i = 0; i < n; i++) {
        int t = inp[i] - v0;
        if (t < 0 || t >= nv) continue;
        if (ix->h_count[t]++ == 0) ix->h_tok[u++] = t;
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
    for (int i = 0; i < n; i++) {
        int t = inp[i] - v0;
        if (t >= 0 && t < nv) ix->h_pos[ix->h_count[t]++] = i;
    }
    for (int k = 0; k < u; k++) ix->h_count[ix->h_tok[k]] = 0;  // ready for the next batch
    CUDA_CHECK(cudaMemcpyAsync(ix->d_tok, ix->h_tok, sizeof(int) * (size_t)u, cudaMemcpyHostToDevice, s));
    CUDA_CHECK(cudaMemcpyAsync(ix->d_start, ix->h_start, sizeof(int) * (size_t)(u + 1), cudaMemcpyHostToDevice, s));
    CUDA_CHECK(cudaMemcpyAsync(ix->d_pos, ix->h_pos, sizeof(int) * (size_t)n, cudaMemcpyHostToDevice, s));
    // no stream synchronisation: the host buffers are pageable (malloc), and an asynchronous copy from
    // pageable memory returns only once its source is staged, so the next build may overwrite them
}

// 4 consecutive fp32 (the first cnt of them) from / to p.
template <bool VEC>
__device__ __forceinline__ float4 ld_f32x4(const float *p, int cnt) {
    if constexpr (VEC) return *reinterpret_cast<const float4 *>(p);
    else return make_float4(p[0], cnt > 1 ? p[1] : 0.0f, cnt > 2 ? p[2] : 0.0f, cnt > 3 ? p[3] : 0.0f);
}
template <bool VEC>
__device__ __forceinline__ void st_f32x4(float *p, float4 v, int cnt) {
    if constexpr (VEC) *reinterpret_cast<float4 *>(p) = v;
    else {
        p[0] = v.x;
        if (cnt > 1) p[1] = v.y;
        if (cnt > 2) p[2] = v.z;
        if (cnt > 3) p[3] = v.w;
    }
}
__device__ __forceinline__ void add_f32x4(float4 *a, float4 b) { a->x += b.x; a->y += b.y; a->z += b.z; a->w += b.w; }

// dwte[tok[u], c..c+4) += sum over the positions of tok[u] (in order) of
// dout[pos, c..c+4). grid (unique tokens, channel groups of 4 / blockDim).
template <bool VEC>
__global__ void encoder_backward_wte_kernel(float *__restrict__ dwte, const float *__restrict__ dout,
                                            const int *__restrict__ tok, const int *__restrict__ start,
                                            const int *__restrict__ pos, int C) {
    int u = blockIdx.x;
    int c = (blockIdx.y * blockDim.x + threadIdx.x) * 4;
    if (c >= C) return;
    int cnt = C - c < 4 ? C - c : 4;
    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int k = start[u]; k < start[u + 1]; k++) add_f32x4(&acc, ld_f32x4<VEC>(dout + (int64_t)pos[k] * C + c, cnt));
    float *dw = dwte + (int64_t)tok[u] * C + c;
    float4 g = ld_f32x4<VEC>(dw, cnt);
    add_f32x4(&g, acc);
    st_f32x4<VEC>(dw, g, cnt);
}

// dwpe[t, c..c+4) += sum_b dout[b, t, c..c+4) (b in order): one thread per (t, group of 4).
template <bool VEC>
__global__ void encoder_backward_wpe_kernel(float *__restrict__ dwpe, const float *__restrict__ dout, int B, int T,
                                            int C) {
    int C4 = (C + 3) / 4;
    int64_t q = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (q >= (int64_t)T * C4) return;
    int t = (int)(q / C4), c = (int)(q - (int64_t)t * C4) * 4;
    int cnt = C - c < 4 ? C - c : 4;
    int64_t idx = (int64_t)t * C + c;
    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int b = 0; b < B; b++) add_f32x4(&acc, ld_f32x4<VEC>(dout + (int64_t)b * T * C + idx, cnt));
    float4 g = ld_f32x4<VEC>(dwpe + idx, cnt);
    add_f32x4(&g, acc);
    st_f32x4<VEC>(dwpe + idx, g, cnt);
}

// dout (B,T,C) fp32; dwte (Vp,C) fp32, accumulated: the rows of the index's tokens.
static inline void gpu_encoder_backward_wte(float *dwte, const float *dout, const EncoderIndex *ix, int C,
                                            cudaStream_t s) {
    if (ix->num_unique <= 0 || C <= 0) return;
    int vec = C % 4 == 0 && aligned16(dwte) && aligned16(dout);
    int C4 = (C + 3) / 4;
    int threads = C4 < 256 ? (C4 + 31) / 32 * 32 : 256;
    dim3 grid(ix->num_unique, ceil_div_int(C4, threads));
    launch_kernel(vec ? encoder_backward_wte_kernel<true> : encoder_backward_wte_kernel<false>, grid, threads, 0, s,
                  dwte, dout, ix->d_tok, ix->d_start, ix->d_pos, C);
    CUDA_CHECK_LAUNCH();
}

// dout (B,T,C) fp32; dwpe (maxT,C) fp32, accumulated.
static inline void gpu_encoder_backward_wpe(float *dwpe, const float *dout, int B, int T, int C, cudaStream_t s) {
    if (B * T <= 0 || C <= 0) return;
    int vec = C % 4 == 0 && aligned16(dwpe) && aligned16(dout);
    int C4 = (C + 3) / 4;
    int blocks = ceil_div_int((int64_t)T * C4, 256);
    launch_kernel(vec ? encoder_backward_wpe_kernel<true> : encoder_backward_wpe_kernel<false>, blocks, 256, 0, s,
                  dwpe, dout, B, T, C);
    CUDA_CHECK_LAUNCH();
}

static inline void gpu_encoder_backward(float *dwte, float *dwpe, const float *dout, const EncoderIndex *ix, int B,
                                        int T, int C, cudaStream_t s) {
    gpu_encoder_backward_wte(dwte, dout, ix, C, s);
    gpu_encoder_backward_wpe(dwpe, dout, B, T, C, s);
}

#endif  // LLMC_ENCODER_CUH
