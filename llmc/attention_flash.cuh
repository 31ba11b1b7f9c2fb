// attention_flash.cuh: our causal flash attention, forward and backward, on
// bf16 q|k|v with fp32 arithmetic. Online softmax: no (T,T) matrix is ever in
// memory; the forward saves only the output and the log-sum-exp per row
// (B,NH,T), from which the backward recomputes the probabilities.
// The simple, obviously-correct form: one thread per query row (forward, dq)
// or per key row (dk, dv), tiles of 64 keys/queries staged through shared
// memory, scalar FMAs. No atomics: every output element has one writer, so the
// result is bit-identical on every run.
// Layout as llmc/cpu_layers.h: qkv (B,T,3C) holds q | k | v, head h at
// channels [h*hs, (h+1)*hs); out (B,T,C); lse (B,NH,T).
#ifndef LLMC_ATTENTION_FLASH_CUH
#define LLMC_ATTENTION_FLASH_CUH

#include "cuda_common.cuh"

#define FLASH_TILE 64  // rows per block, and keys/queries per shared-memory tile

// grid (T/TILE, NH, B), block TILE: thread = query row i.
template <int HS>
__global__ void __launch_bounds__(FLASH_TILE) flash_forward_kernel(bf16 *out, float *lse, const bf16 *qkv, int T,
                                                                   int NH, float scale) {
    __shared__ float ks[FLASH_TILE][HS], vs[FLASH_TILE][HS];
    int b = blockIdx.z, h = blockIdx.y, tile = blockIdx.x;
    int C = NH * HS;
    int i = tile * FLASH_TILE + threadIdx.x;
    const bf16 *base = qkv + (int64_t)b * T * 3 * C + h * HS;
    float q[HS], acc[HS];
    #pragma unroll
    for (int d = 0; d < HS; d++) {
        q[d] = i < T ? __bfloat162float(base[(int64_t)i * 3 * C + d]) * scale : 0.0f;
        acc[d] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    for (int kt = 0; kt <= tile; kt++) {
        __syncthreads();
        for (int e = threadIdx.x; e < FLASH_TILE * HS; e += FLASH_TILE) {
            int r = e / HS, d = e % HS, j = kt * FLASH_TILE + r;
            ks[r][d] = j < T ? __bfloat162float(base[(int64_t)j * 3 * C + C + d]) : 0.0f;
            vs[r][d] = j < T ? __bfloat162float(base[(int64_t)j * 3 * C + 2 * C + d]) : 0.0f;
        }
        __syncthreads();
        int jmax = min(FLASH_TILE, i - kt * FLASH_TILE + 1);  // causal: keys j <= i
        for (int r = 0; r < jmax; r++) {
            float s = 0.0f;
            #pragma unroll
            for (int d = 0; d < HS; d++) s += q[d] * ks[r][d];
            if (s > m) {  // new running max: rescale what was accumulated
                float c = expf(m - s);
                l *= c;
                #pragma unroll
                for (int d = 0; d < HS; d++) acc[d] *= c;
                m = s;
            }
            float p = expf(s - m);
            l += p;
            #pragma unroll
            for (int d = 0; d < HS; d++) acc[d] += p * vs[r][d];
        }
    }
    if (i >= T) return;
    float inv = 1.0f / l;
    bf16 *o = out + ((int64_t)b * T + i) * C + h * HS;
    #pragma unroll
    for (int d = 0; d < HS; d++) o[d] = __float2bfloat16_rn(acc[d] * inv);
    lse[((int64_t)b * NH + h) * T + i] = m + logf(l);
}

// delta (B,NH,T) = rowsum(dout * out) per head: the softmax backward's dot term.
template <int HS>
__global__ void flash_delta_kernel(float *delta, const bf16 *dout, const bf16 *out, int B, int T, int NH) {
    int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;  // (b, h, t)
    if (idx >= (int64_t)B * NH * T) return;
    int t = (int)(idx % T), h = (int)((idx / T) % NH), b = (int)(idx / ((int64_t)T * NH));
    int64_t off = ((int64_t)b * T + t) * NH * HS + h * HS;
    float acc = 0.0f;
    #pragma unroll
    for (int d = 0; d < HS; d++) acc += __bfloat162float(dout[off + d]) * __bfloat162float(out[off + d]);
    delta[idx] = acc;
}

// dk, dv: grid (T/TILE, NH, B), block TILE: thread = key row j; loops over
// query tiles from the diagonal down. Dynamic shared memory: kpad, vpad
// (TILE, HS+1) this block's keys (padded: each thread reads its own row),
// qs, dos (TILE, HS) the query tile (broadcast reads), lse and delta (TILE).
template <int HS>
__global__ void __launch_bounds__(FLASH_TILE) flash_backward_dkdv_kernel(bf16 *dqkv, const bf16 *qkv,
                                                                         const bf16 *dout, const float *lse,
                                                                         const float *delta, int T, int NH,
                                                                         float scale) {
    extern __shared__ float smem[];
    float(*kpad)[HS + 1] = (float(*)[HS + 1])smem;
    float(*vpad)[HS + 1] = (float(*)[HS + 1])(smem + FLASH_TILE * (HS + 1));
    float(*qs)[HS] = (float(*)[HS])(smem + 2 * FLASH_TILE * (HS + 1));
    float(*dos)[HS] = (float(*)[HS])(smem + 2 * FLASH_TILE * (HS + 1) + FLASH_TILE * HS);
    float *ls = smem + 2 * FLASH_TILE * (HS + 1) + 2 * FLASH_TILE * HS;
    float *ds_ = ls + FLASH_TILE;
    int b = blockIdx.z, h = blockIdx.y, tile = blockIdx.x, ntiles = gridDim.x;
    int C = NH * HS;
    int j = tile * FLASH_TILE + threadIdx.x;
    const bf16 *base = qkv + (int64_t)b * T * 3 * C + h * HS;
    const bf16 *dobase = dout + (int64_t)b * T * C + h * HS;
    const float *lrow = lse + ((int64_t)b * NH + h) * T, *drow = delta + ((int64_t)b * NH + h) * T;
    for (int e = threadIdx.x; e < FLASH_TILE * HS; e += FLASH_TILE) {
        int r = e / HS, d = e % HS, jj = tile * FLASH_TILE + r;
        kpad[r][d] = jj < T ? __bfloat162float(base[(int64_t)jj * 3 * C + C + d]) : 0.0f;
        vpad[r][d] = jj < T ? __bfloat162float(base[(int64_t)jj * 3 * C + 2 * C + d]) : 0.0f;
    }
    float dk[HS], dv[HS];
    #pragma unroll
    for (int d = 0; d < HS; d++) { dk[d] = 0.0f; dv[d] = 0.0f; }
    for (int qt = tile; qt < ntiles; qt++) {
        __syncthreads();
        for (int e = threadIdx.x; e < FLASH_TILE * HS; e += FLASH_TILE) {
            int r = e / HS, d = e % HS, i = qt * FLASH_TILE + r;
            qs[r][d] = i < T ? __bfloat162float(base[(int64_t)i * 3 * C + d]) : 0.0f;
            dos[r][d] = i < T ? __bfloat162float(dobase[(int64_t)i * C + d]) : 0.0f;
        }
        int i0 = qt * FLASH_TILE + threadIdx.x;
        ls[threadIdx.x] = i0 < T ? lrow[i0] : 0.0f;
        ds_[threadIdx.x] = i0 < T ? drow[i0] : 0.0f;
        __syncthreads();
        int rmin = max(0, j - qt * FLASH_TILE);            // causal: queries i >= j
        int rmax = min(FLASH_TILE, T - qt * FLASH_TILE);   // and i < T
        for (int r = rmin; r < rmax; r++) {
            float s = 0.0f, dp = 0.0f;
            #pragma unroll
            for (int d = 0; d < HS; d++) {
                s += qs[r][d] * kpad[threadIdx.x][d];
                dp += dos[r][d] * vpad[threadIdx.x][d];
            }
            float p = expf(s * scale - ls[r]);
            float dsc = p * (dp - ds_[r]) * scale;
            #pragma unroll
            for (int d = 0; d < HS; d++) {
                dv[d] += p * dos[r][d];
                dk[d] += dsc * qs[r][d];
            }
        }
    }
    if (j >= T) return;
    bf16 *o = dqkv + ((int64_t)b * T + j) * 3 * C + h * HS;
    #pragma unroll
    for (int d = 0; d < HS; d++) {
        o[C + d] = __float2bfloat16_rn(dk[d]);
        o[2 * C + d] = __float2bfloat16_rn(dv[d]);
    }
}

// dq: grid (T/TILE, NH, B), block TILE: thread = query row i; loops over key
// tiles up to the diagonal. Dynamic shared memory: ks, vs (TILE, HS) the key
// tile (broadcast reads), dopad (TILE, HS+1) this block's output gradients.
template <int HS>
__global__ void __launch_bounds__(FLASH_TILE) flash_backward_dq_kernel(bf16 *dqkv, const bf16 *qkv,
                                                                       const bf16 *dout, const float *lse,
                                                                       const float *delta, int T, int NH,
                                                                       float scale) {
    extern __shared__ float smem[];
    float(*ks)[HS] = (float(*)[HS])smem;
    float(*vs)[HS] = (float(*)[HS])(smem + FLASH_TILE * HS);
    float(*dopad)[HS + 1] = (float(*)[HS + 1])(smem + 2 * FLASH_TILE * HS);
    int b = blockIdx.z, h = blockIdx.y, tile = blockIdx.x;
    int C = NH * HS;
    int i = tile * FLASH_TILE + threadIdx.x;
    const bf16 *base = qkv + (int64_t)b * T * 3 * C + h * HS;
    const bf16 *dobase = dout + (int64_t)b * T * C + h * HS;
    for (int e = threadIdx.x; e < FLASH_TILE * HS; e += FLASH_TILE) {
        int r = e / HS, d = e % HS, ii = tile * FLASH_TILE + r;
        dopad[r][d] = ii < T ? __bfloat162float(dobase[(int64_t)ii * C + d]) : 0.0f;
    }
    float q[HS], dq[HS];
    #pragma unroll
    for (int d = 0; d < HS; d++) {
        q[d] = i < T ? __bfloat162float(base[(int64_t)i * 3 * C + d]) : 0.0f;
        dq[d] = 0.0f;
    }
    float li = i < T ? lse[((int64_t)b * NH + h) * T + i] : 0.0f;
    float di = i < T ? delta[((int64_t)b * NH + h) * T + i] : 0.0f;
    for (int kt = 0; kt <= tile; kt++) {
        __syncthreads();
        for (int e = threadIdx.x; e < FLASH_TILE * HS; e += FLASH_TILE) {
            int r = e / HS, d = e % HS, j = kt * FLASH_TILE + r;
            ks[r][d] = j < T ? __bfloat162float(base[(int64_t)j * 3 * C + C + d]) : 0.0f;
            vs[r][d] = j < T ? __bfloat162float(base[(int64_t)j * 3 * C + 2 * C + d]) : 0.0f;
        }
        __syncthreads();
        int jmax = min(FLASH_TILE, i - kt * FLASH_TILE + 1);
        for (int r = 0; r < jmax; r++) {
            float s = 0.0f, dp = 0.0f;
            #pragma unroll
            for (int d = 0; d < HS; d++) {
                s += q[d] * ks[r][d];
                dp += dopad[threadIdx.x][d] * vs[r][d];
            }
            float p = expf(s * scale - li);
            float dsc = p * (dp - di) * scale;
            #pragma unroll
            for (int d = 0; d < HS; d++) dq[d] += dsc * ks[r][d];
        }
    }
    if (i >= T) return;
    bf16 *o = dqkv + ((int64_t)b * T + i) * 3 * C + h * HS;
    #pragma unroll
    for (int d = 0; d < HS; d++) o[d] = __float2bfloat16_rn(dq[d]);
}

// Head sizes with a compiled kernel (every GPT-2 preset has 64).
static inline int flash_supports_head_size(int hs) { return hs == 32 || hs == 64; }

template <int HS>
static void flash_forward_hs(bf16 *out, float *lse, const bf16 *qkv, int B, int T, int NH, cudaStream_t s) {
    dim3 grid(ceil_div_int(T, FLASH_TILE), NH, B);
    flash_forward_kernel<HS><<<grid, FLASH_TILE, 0, s>>>(out, lse, qkv, T, NH, 1.0f / sqrtf((float)HS));
    CUDA_CHECK_LAUNCH();
}

template <int HS>
static void flash_backward_hs(bf16 *dqkv, float *delta, const bf16 *dout, const bf16 *qkv, const bf16 *out,
                              const float *lse, int B, int T, int NH, cudaStream_t s) {
    float scale = 1.0f / sqrtf((float)HS);
    int64_t rows = (int64_t)B * NH * T;
    flash_delta_kernel<HS><<<ceil_div_int(rows, 256), 256, 0, s>>>(delta, dout, out, B, T, NH);
    CUDA_CHECK_LAUNCH();
    dim3 grid(ceil_div_int(T, FLASH_TILE), NH, B);
    size_t smem_kv = sizeof(float) * (2 * FLASH_TILE * (HS + 1) + 2 * FLASH_TILE * HS + 2 * FLASH_TILE);
    size_t smem_q = sizeof(float) * (2 * FLASH_TILE * HS + FLASH_TILE * (HS + 1));
    CUDA_CHECK(cudaFuncSetAttribute(flash_backward_dkdv_kernel<HS>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    (int)smem_kv));
    CUDA_CHECK(cudaFuncSetAttribute(flash_backward_dq_kernel<HS>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    (int)smem_q));
    flash_backward_dkdv_kernel<HS><<<grid, FLASH_TILE, smem_kv, s>>>(dqkv, qkv, dout, lse, delta, T, NH, scale);
    CUDA_CHECK_LAUNCH();
    flash_backward_dq_kernel<HS><<<grid, FLASH_TILE, smem_q, s>>>(dqkv, qkv, dout, lse, delta, T, NH, scale);
    CUDA_CHECK_LAUNCH();
}

// out (B,T,C), lse (B,NH,T) from qkv (B,T,3C).
static inline void gpu_flash_attention_forward(bf16 *out, float *lse, const bf16 *qkv, int B, int T, int C, int NH,
                                               cudaStream_t s) {
    int hs = C / NH;
    if (hs == 64) flash_forward_hs<64>(out, lse, qkv, B, T, NH, s);
    else if (hs == 32) flash_forward_hs<32>(out, lse, qkv, B, T, NH, s);
    else DIE("flash attention: head size %d has no kernel (32 or 64)", hs);
}

// dqkv (B,T,3C) overwritten; delta: (B,NH,T) floats of scratch.
static inline void gpu_flash_attention_backward(bf16 *dqkv, float *delta, const bf16 *dout, const bf16 *qkv,
                                                const bf16 *out, const float *lse, int B, int T, int C, int NH,
                                                cudaStream_t s) {
    int hs = C / NH;
    if (hs == 64) flash_backward_hs<64>(dqkv, delta, dout, qkv, out, lse, B, T, NH, s);
    else if (hs == 32) flash_backward_hs<32>(dqkv, delta, dout, qkv, out, lse, B, T, NH, s);
    else DIE("flash attention: head size %d has no kernel (32 or 64)", hs);
}

#endif  // LLMC_ATTENTION_FLASH_CUH
