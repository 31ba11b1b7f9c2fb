// dev/cuda/attention.cu: causal attention, three ways, each checked against
// llmc/cpu_layers.h (attention_forward/backward, fp32, the reference):
//   version 1 = scalar flash kernels (below: one thread per query or key row,
//               fp32 FMAs, online softmax; our first, obviously-correct
//               flash attention, kept here as the reference the faster one
//               replaced; it shares only flash_delta_kernel with llmc/),
//   version 2 = cuDNN's fused attention (llmc/attention_cudnn.cuh, when the
//               build has cuDNN),
//   version 3 = our tensor-core flash attention (llmc/attention_flash.cuh,
//               wmma bf16 fragments; what the trainer's --attention flash runs).
// Each runs the attention rows of tests/kernel_cases.h (the table says what
// they cover: out, lse and dq|dk|dv against the CPU at head sizes 32 and 64,
// T from 1 to 1024 and the whole d12 batch, partial tiles, a sharp softmax;
// version 3 also twice for bit-identical results; versions 2 and 3 with query
// offsets, a context rank's two chunks, the rows version 1 has no launcher
// for); a shape the installed cuDNN cannot run is a SKIP naming the reason
// (cudnn_attention_try_init, _try_init_queries). On the
// emulator, versions 1 and 2 (test_flash_emulated runs version 3's rows).
// Then forward and backward of each timed at d12 size (B=16 T=1024 C=768
// NH=12), FLOPs counted causally.
#define KC_ATTENTION
#include "dev/cuda/dev_common.cuh"
#include "llmc/attention_cudnn.cuh"

// ---------------------------------------------------------------------------
// version 1: scalar flash attention. Tiles of 64 keys/queries staged through
// shared memory; one thread per query row (forward, dq) or key row (dk, dv).

#define SCALAR_TILE 64

// Keys and values kt*TILE .. +TILE of one head (base: its q columns in qkv,
// rows 3C apart) into shared fp32 tiles; rows >= T are 0. All TILE threads.
template <int HS>
__device__ void scalar_load_kv_tile(float (*ks)[HS], float (*vs)[HS], const floatX *base, int kt, int T, int C) {
    for (int e = threadIdx.x; e < SCALAR_TILE * HS; e += SCALAR_TILE) {
        int r = e / HS, d = e % HS, j = kt * SCALAR_TILE + r;
        ks[r][d] = j < T ? to_float(base[(int64_t)j * 3 * C + C + d]) : 0.0f;
        vs[r][d] = j < T ? to_float(base[(int64_t)j * 3 * C + 2 * C + d]) : 0.0f;
    }
}

// CUDA's device min/max, spelled so that the emulator (plain C++) compiles them too.
__device__ __forceinline__ int imin(int a, int b) { return a < b ? a : b; }
__device__ __forceinline__ int imax(int a, int b) { return a > b ? a : b; }

// grid (T/TILE, NH, B), block TILE: thread = query row i.
template <int HS>
__global__ void __launch_bounds__(SCALAR_TILE) scalar_flash_forward_kernel(floatX *out, float *lse, const floatX *qkv,
                                                                           int T, int NH, float scale) {
    __shared__ float ks[SCALAR_TILE][HS], vs[SCALAR_TILE][HS];
    int b = blockIdx.z, h = blockIdx.y, tile = blockIdx.x;
    int C = NH * HS;
    int i = tile * SCALAR_TILE + threadIdx.x;
    const floatX *base = qkv + (int64_t)b * T * 3 * C + h * HS;
    float q[HS], acc[HS];
    #pragma unroll
    for (int d = 0; d < HS; d++) {
        q[d] = i < T ? to_float(base[(int64_t)i * 3 * C + d]) * scale : 0.0f;
        acc[d] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    for (int kt = 0; kt <= tile; kt++) {
        __syncthreads();
        scalar_load_kv_tile<HS>(ks, vs, base, kt, T, C);
        __syncthreads();
        int jmax = imin(SCALAR_TILE, i - kt * SCALAR_TILE + 1);  // causal: keys j <= i
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
    floatX *o = out + ((int64_t)b * T + i) * C + h * HS;
    #pragma unroll
    for (int d = 0; d < HS; d++) o[d] = to_floatX(acc[d] * inv);
    lse[((int64_t)b * NH + h) * T + i] = m + logf(l);
}

// dk, dv: grid (T/TILE, NH, B), block TILE: thread = key row j; loops over
// query tiles from the diagonal down. Dynamic shared memory: kpad, vpad
// (TILE, HS+1) this block's keys (padded: each thread reads its own row),
// qs, dos (TILE, HS) the query tile (broadcast reads), lse and delta (TILE).
template <int HS>
__global__ void __launch_bounds__(SCALAR_TILE) scalar_flash_backward_dkdv_kernel(floatX *dqkv, const floatX *qkv,
                                                                                 const floatX *dout, const float *lse,
                                                                                 const float *delta, int T, int NH,
                                                                                 float scale) {
    DYNAMIC_SMEM(float, smem);
    float(*kpad)[HS + 1] = (float(*)[HS + 1])smem;
    float(*vpad)[HS + 1] = (float(*)[HS + 1])(smem + SCALAR_TILE * (HS + 1));
    float(*qs)[HS] = (float(*)[HS])(smem + 2 * SCALAR_TILE * (HS + 1));
    float(*dos)[HS] = (float(*)[HS])(smem + 2 * SCALAR_TILE * (HS + 1) + SCALAR_TILE * HS);
    float *ls = smem + 2 * SCALAR_TILE * (HS + 1) + 2 * SCALAR_TILE * HS;
    float *ds_ = ls + SCALAR_TILE;
    int b = blockIdx.z, h = blockIdx.y, tile = blockIdx.x, ntiles = gridDim.x;
    int C = NH * HS;
    int j = tile * SCALAR_TILE + threadIdx.x;
    const floatX *base = qkv + (int64_t)b * T * 3 * C + h * HS;
    const floatX *dobase = dout + (int64_t)b * T * C + h * HS;
    const float *lrow = lse + ((int64_t)b * NH + h) * T, *drow = delta + ((int64_t)b * NH + h) * T;
    for (int e = threadIdx.x; e < SCALAR_TILE * HS; e += SCALAR_TILE) {
        int r = e / HS, d = e % HS, jj = tile * SCALAR_TILE + r;
        kpad[r][d] = jj < T ? to_float(base[(int64_t)jj * 3 * C + C + d]) : 0.0f;
        vpad[r][d] = jj < T ? to_float(base[(int64_t)jj * 3 * C + 2 * C + d]) : 0.0f;
    }
    float dk[HS], dv[HS];
    #pragma unroll
    for (int d = 0; d < HS; d++) { dk[d] = 0.0f; dv[d] = 0.0f; }
    for (int qt = tile; qt < ntiles; qt++) {
        __syncthreads();
        for (int e = threadIdx.x; e < SCALAR_TILE * HS; e += SCALAR_TILE) {
            int r = e / HS, d = e % HS, i = qt * SCALAR_TILE + r;
            qs[r][d] = i < T ? to_float(base[(int64_t)i * 3 * C + d]) : 0.0f;
            dos[r][d] = i < T ? to_float(dobase[(int64_t)i * C + d]) : 0.0f;
        }
        int i0 = qt * SCALAR_TILE + threadIdx.x;
        ls[threadIdx.x] = i0 < T ? lrow[i0] : 0.0f;
        ds_[threadIdx.x] = i0 < T ? drow[i0] : 0.0f;
        __syncthreads();
        int rmin = imax(0, j - qt * SCALAR_TILE);            // causal: queries i >= j
        int rmax = imin(SCALAR_TILE, T - qt * SCALAR_TILE);   // and i < T
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
    floatX *o = dqkv + ((int64_t)b * T + j) * 3 * C + h * HS;
    #pragma unroll
    for (int d = 0; d < HS; d++) {
        o[C + d] = to_floatX(dk[d]);
        o[2 * C + d] = to_floatX(dv[d]);
    }
}

// dq: grid (T/TILE, NH, B), block TILE: thread = query row i; loops over key
// tiles up to the diagonal. Dynamic shared memory: ks, vs (TILE, HS) the key
// tile (broadcast reads), dopad (TILE, HS+1) this block's output gradients.
template <int HS>
__global__ void __launch_bounds__(SCALAR_TILE) scalar_flash_backward_dq_kernel(floatX *dqkv, const floatX *qkv,
                                                                               const floatX *dout, const float *lse,
                                                                               const float *delta, int T, int NH,
                                                                               float scale) {
    DYNAMIC_SMEM(float, smem);
    float(*ks)[HS] = (float(*)[HS])smem;
    float(*vs)[HS] = (float(*)[HS])(smem + SCALAR_TILE * HS);
    float(*dopad)[HS + 1] = (float(*)[HS + 1])(smem + 2 * SCALAR_TILE * HS);
    int b = blockIdx.z, h = blockIdx.y, tile = blockIdx.x;
    int C = NH * HS;
    int i = tile * SCALAR_TILE + threadIdx.x;
    const floatX *base = qkv + (int64_t)b * T * 3 * C + h * HS;
    const floatX *dobase = dout + (int64_t)b * T * C + h * HS;
    for (int e = threadIdx.x; e < SCALAR_TILE * HS; e += SCALAR_TILE) {
        int r = e / HS, d = e % HS, ii = tile * SCALAR_TILE + r;
        dopad[r][d] = ii < T ? to_float(dobase[(int64_t)ii * C + d]) : 0.0f;
    }
    float q[HS], dq[HS];
    #pragma unroll
    for (int d = 0; d < HS; d++) {
        q[d] = i < T ? to_float(base[(int64_t)i * 3 * C + d]) : 0.0f;
        dq[d] = 0.0f;
    }
    float li = i < T ? lse[((int64_t)b * NH + h) * T + i] : 0.0f;
    float di = i < T ? delta[((int64_t)b * NH + h) * T + i] : 0.0f;
    for (int kt = 0; kt <= tile; kt++) {
        __syncthreads();
        scalar_load_kv_tile<HS>(ks, vs, base, kt, T, C);
        __syncthreads();
        int jmax = imin(SCALAR_TILE, i - kt * SCALAR_TILE + 1);
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
    floatX *o = dqkv + ((int64_t)b * T + i) * 3 * C + h * HS;
    #pragma unroll
    for (int d = 0; d < HS; d++) o[d] = to_floatX(dq[d]);
}

template <int HS>
static void scalar_forward_hs(floatX *out, float *lse, const floatX *qkv, int B, int T, int NH) {
    dim3 grid(ceil_div_int(T, SCALAR_TILE), NH, B);
    launch_kernel(scalar_flash_forward_kernel<HS>, grid, SCALAR_TILE, 0, 0, out, lse, qkv, T, NH,
                  1.0f / sqrtf((float)HS));
    CUDA_CHECK_LAUNCH();
}

template <int HS>
static void scalar_backward_hs(floatX *dqkv, float *delta, const floatX *dout, const floatX *qkv, const floatX *out,
                               const float *lse, int B, int T, int NH) {
    float scale = 1.0f / sqrtf((float)HS);
    int64_t chunks = (int64_t)B * T * NH * (HS / 8);
    launch_kernel(flash_delta_kernel<HS>, ceil_div_int(chunks, 256), 256, 0, 0, delta, dout, out, B, T, NH);
    CUDA_CHECK_LAUNCH();
    dim3 grid(ceil_div_int(T, SCALAR_TILE), NH, B);
    size_t smem_kv = sizeof(float) * (2 * SCALAR_TILE * (HS + 1) + 2 * SCALAR_TILE * HS + 2 * SCALAR_TILE);
    size_t smem_q = sizeof(float) * (2 * SCALAR_TILE * HS + SCALAR_TILE * (HS + 1));
    CUDA_CHECK(cudaFuncSetAttribute(scalar_flash_backward_dkdv_kernel<HS>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem_kv));
    CUDA_CHECK(cudaFuncSetAttribute(scalar_flash_backward_dq_kernel<HS>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    (int)smem_q));
    launch_kernel(scalar_flash_backward_dkdv_kernel<HS>, grid, SCALAR_TILE, smem_kv, 0, dqkv, qkv, dout, lse, delta,
                  T, NH, scale);
    CUDA_CHECK_LAUNCH();
    launch_kernel(scalar_flash_backward_dq_kernel<HS>, grid, SCALAR_TILE, smem_q, 0, dqkv, qkv, dout, lse, delta, T,
                  NH, scale);
    CUDA_CHECK_LAUNCH();
}

static void scalar_attention_forward(floatX *out, float *lse, const floatX *qkv, int B, int T, int C, int NH) {
    if (C / NH == 64) scalar_forward_hs<64>(out, lse, qkv, B, T, NH);
    else if (C / NH == 32) scalar_forward_hs<32>(out, lse, qkv, B, T, NH);
    else DIE("scalar flash: head size %d", C / NH);
}

static void scalar_attention_backward(floatX *dqkv, float *delta, const floatX *dout, const floatX *qkv, const floatX *out,
                                      const float *lse, int B, int T, int C, int NH) {
    if (C / NH == 64) scalar_backward_hs<64>(dqkv, delta, dout, qkv, out, lse, B, T, NH);
    else if (C / NH == 32) scalar_backward_hs<32>(dqkv, delta, dout, qkv, out, lse, B, T, NH);
    else DIE("scalar flash: head size %d", C / NH);
}

// ---------------------------------------------------------------------------
// the versions in the kernel checks' launcher table (tests/kernel_cases.h), beside llmc's (version 3)

static void v1_forward(floatX *out, float *lse, const floatX *qkv, int B, int T, int C, int NH, cudaStream_t) {
    scalar_attention_forward(out, lse, qkv, B, T, C, NH);
}
static void v1_backward(floatX *dqkv, float *delta, const floatX *dout, const floatX *qkv, const floatX *out,
                        const float *lse, int B, int T, int C, int NH, cudaStream_t) {
    scalar_attention_backward(dqkv, delta, dout, qkv, out, lse, B, T, C, NH);
}
static void use_v1(KernelImpls *v) {
    v->attention_forward = v1_forward, v->attention_backward = v1_backward;
    v->attention_deterministic = false, v->attention_forward_queries = NULL, v->attention_backward_queries = NULL;
}

// version 2: cuDNN, set up for each case's shape (cudnn_attention_try_init; a shape it refuses is a SKIP)
static CudnnAttention v2_ca;
static int v2_shape[4];  // B, T, C, NH of v2_ca's plans (B 0: none set up; -1: query segments')
static const char *v2_prepare(int B, int T, int C, int NH) {
    if (v2_shape[0] == B && v2_shape[1] == T && v2_shape[2] == C && v2_shape[3] == NH) return NULL;
    if (v2_shape[0]) cudnn_attention_free(&v2_ca);
    v2_shape[0] = 0;
    GPTConfig cfg = {T, 2, 128, 1, NH, C};
    const char *why = cudnn_attention_try_init(&v2_ca, &cfg, B, T);
    if (!why) v2_shape[0] = B, v2_shape[1] = T, v2_shape[2] = C, v2_shape[3] = NH;
    return why;
}
static void v2_forward(floatX *out, float *lse, const floatX *qkv, int B, int T, int C, int NH, cudaStream_t s) {
    gpu_cudnn_attention_forward(&v2_ca, out, lse, qkv, B, T, C, NH, s);
}
static void v2_backward(floatX *dqkv, float *delta, const floatX *dout, const floatX *qkv, const floatX *out,
                        const float *lse, int B, int T, int C, int NH, cudaStream_t s) {
    gpu_cudnn_attention_backward(&v2_ca, dqkv, delta, dout, qkv, out, lse, B, T, C, NH, s);
}
// with query offsets: v2_ca set up for B x Tq rows with the segments' plans (v2_shape[0] -1: none whole)
static const char *v2_prepare_queries(int B, int Tq, int Tk, int64_t kvs, const FaQueries &qry, int C, int NH) {
    if (v2_shape[0]) cudnn_attention_free(&v2_ca);
    GPTConfig cfg = {Tk, 2, 128, 1, NH, C};
    const char *why = cudnn_attention_try_init_queries(&v2_ca, &cfg, B, Tq, Tk, kvs, qry);
    v2_shape[0] = why ? 0 : -1;
    return why;
}
static void v2_forward_queries(floatX *out, float *lse, const floatX *q, int Tq, const floatX *kv, int64_t kvs, int Tk,
                               const FaQueries &qry, int B, int C, int NH, cudaStream_t s) {
    gpu_cudnn_attention_forward_queries(&v2_ca, out, lse, q, Tq, kv, kvs, Tk, qry, B, C, NH, s);
}
// (dk | dv of each segment through a floatX scratch laid out as kv)
static void v2_backward_queries(floatX *dq, float *dkv, float *delta, const floatX *dout, const floatX *q, int Tq,
                                const floatX *kv, int64_t kvs, int Tk, const FaQueries &qry, const floatX *out,
                                const float *lse, int B, int C, int NH, cudaStream_t s) {
    floatX *scratch = (floatX *)cudaMallocCheck(sizeof(floatX) * (size_t)B * Tk * kvs);
    gpu_cudnn_attention_backward_queries(&v2_ca, dq, dkv, scratch, delta, dout, q, Tq, kv, kvs, Tk, qry, out, lse, B,
                                         C, NH, s);
    CUDA_CHECK(cudaStreamSynchronize(s));
    CUDA_CHECK(cudaFree(scratch));
}
static void use_v2(KernelImpls *v) {
    use_v1(v);
    v->attention_forward = v2_forward, v->attention_backward = v2_backward, v->attention_prepare = v2_prepare;
    v->attention_forward_queries = v2_forward_queries, v->attention_backward_queries = v2_backward_queries;
    v->attention_prepare_queries = v2_prepare_queries;
}
static const KernelImpls V1_KERNELS = kernel_impls_with("v1 flash scalar", use_v1);
static const KernelImpls V2_KERNELS = kernel_impls_with("v2 cudnn", use_v2);

int main(void) {
    dev_require_gpu("dev_attention");
    const KernelImpls *versions[] = {&V1_KERNELS, &LLMC_KERNELS, &V2_KERNELS};
    kernel_cases_run_versions("attention", versions, cudnn_attention_available() ? 3 : 2);
    if (!cudnn_attention_available()) test_skip("v2 cudnn (no cuDNN in this build)");
    if (!dev_benchmarks("dev_attention")) return test_exit_code();

    Bench b;
    bench_init(&b);
    int B = 16, T = 1024, C = 768, NH = 12;
    size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C, nl = (size_t)B * NH * T;
    // causal: half of the (T,T) scores; forward 2 matmuls, backward 5 (dq, dk, dv, and the recomputed p and dp;
    // versions 1 and 3 recompute p and dp twice, once per backward kernel: 7 done, 5 counted)
    double fwd_flops = 2.0 * 2.0 * B * NH * (double)T * T * (C / NH) / 2.0, ms;
    floatX *qkv = (floatX *)cudaMallocCheck(nq * 2), *out = (floatX *)cudaMallocCheck(no * 2);
    floatX *dout = (floatX *)cudaMallocCheck(no * 2), *dqkv = (floatX *)cudaMallocCheck(nq * 2);
    float *lse = (float *)cudaMallocCheck(nl * 4), *delta = (float *)cudaMallocCheck(nl * 4);
    launch_kernel(fill_hash_floatX_kernel, ceil_div_int(nq, 256), 256, 0, 0, qkv, (int64_t)nq, 11);
    launch_kernel(fill_hash_floatX_kernel, ceil_div_int(no, 256), 256, 0, 0, dout, (int64_t)no, 12);
    char name[96];
    for (const KernelImpls *v : versions) {
        if (v == &V2_KERNELS && !cudnn_attention_available()) continue;
        const char *why = v->attention_prepare ? v->attention_prepare(B, T, C, NH) : NULL;
        if (why) {
            test_skip("%s benchmark: %s", v->name, why);
            continue;
        }
        int reps = v == &V1_KERNELS ? 5 : 10;
        ms = bench_ms(&b, reps, [&] { v->attention_forward(out, lse, qkv, B, T, C, NH, 0); });
        snprintf(name, sizeof(name), "%s forward d12 16x1024", v->name);
        bench_report(&b, name, ms, 0, fwd_flops);
        ms = bench_ms(&b, reps, [&] { v->attention_backward(dqkv, delta, dout, qkv, out, lse, B, T, C, NH, 0); });
        snprintf(name, sizeof(name), "%s backward d12 16x1024", v->name);
        bench_report(&b, name, ms, 0, 2.5 * fwd_flops);
    }
    if (v2_shape[0]) cudnn_attention_free(&v2_ca);
    void *dev[] = {qkv, out, dout, dqkv, lse, delta};
    for (size_t i = 0; i < sizeof(dev) / sizeof(dev[0]); i++) CUDA_CHECK(cudaFree(dev[i]));
    bench_free(&b);
    return test_exit_code();
}
