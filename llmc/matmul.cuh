// matmul.cuh: the model's linear layers through cuBLASLt, floatX operands with
// fp32 accumulation. Forward: out (N,OC) = inp (N,IC) @ W (OC,IC)^T + bias,
// with the bias (and, for the MLP's fc layer, GELU) fused into the epilogue;
// GELU saves its pre-activation as the epilogue's auxiliary output. Backward:
// dinp (floatX) = dout @ W; dW (fp32, +=) = dout^T @ inp, accumulated by the
// matmul itself (beta = 1) so gradient accumulation across micro-steps stays in
// fp32; dbias (fp32, +=) as a deterministic two-stage column sum (colsum.cuh).
// Row-major (N,K) is column-major (K,N): every call below is written in
// cuBLASLt's column-major terms. Plans (descriptors + the heuristic's algorithm)
// are cached by shape and operand alignment, so the steady state does no
// descriptor work.
#ifndef LLMC_MATMUL_CUH
#define LLMC_MATMUL_CUH

#ifndef LLMC_CUDA_EMULATION
#include <cublasLt.h>
#endif

#include <algorithm>
#include <vector>

#include "colsum.cuh"       // defines: gpu_colsum_accumulate
#include "cuda_common.cuh"  // defines: CUBLAS_CHECK, cudaMallocCheck, CUDA_CHECK, hash_u32, ...

#define MATMUL_WORKSPACE_BYTES (32u << 20)
#define MATMUL_MAX_PLANS 128

typedef struct {
    int transa, transb, m, n, k, lda, ldb, ldd, epilogue, accumulate;
    int align_a, align_b, align_d;  // bytes (<= 256) each operand's address is a multiple of
    int align_bias, align_aux;      // the same for the epilogue's pointers (the heuristic reads them off the desc)
    cudaDataType_t dtype;
} MatmulKey;

typedef struct {
    MatmulKey key;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t a, b, d;
    cublasLtMatmulAlgo_t algo;
} MatmulPlan;

typedef struct {
    cublasLtHandle_t handle;
    void *workspace;
    MatmulPlan plans[MATMUL_MAX_PLANS];
    int num_plans;
} MatmulContext;

static inline void matmul_init(MatmulContext *mc) {
    memset(mc, 0, sizeof(*mc));
    CUBLAS_CHECK(cublasLtCreate(&mc->handle));
    mc->workspace = cudaMallocCheck(MATMUL_WORKSPACE_BYTES);
}

static inline void matmul_free(MatmulContext *mc) {
    for (int i = 0; i < mc->num_plans; i++) {
        MatmulPlan *p = &mc->plans[i];
        CUBLAS_CHECK(cublasLtMatmulDescDestroy(p->desc));
        CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p->a));
        CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p->b));
        CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p->d));
    }
    CUBLAS_CHECK(cublasLtDestroy(mc->handle));
    CUDA_CHECK(cudaFree(mc->workspace));
    memset(mc, 0, sizeof(*mc));
}

// The largest power of two up to 256 that divides a pointer. cuBLASLt's
// heuristic assumes 256-byte aligned operands unless told otherwise, and floatX
// weights are only 128-byte aligned (model.h's PARAM_ALIGN) when C is not a
// multiple of 128.
static inline int matmul_ptr_alignment(const void *p) {
    uintptr_t u = (uintptr_t)p;
    int a = 256;
    while (a > 1 && u % (uintptr_t)a != 0) a /= 2;
    return a;
}

// The plan for a key: found in the cache, or built (descriptors + heuristic,
// told the operands' alignment). bias/aux pointers are set per call.
static MatmulPlan *matmul_plan(MatmulContext *mc, const MatmulKey *key, const void *bias, const void *aux) {
    for (int i = 0; i < mc->num_plans; i++)
        if (memcmp(&mc->plans[i].key, key, sizeof(*key)) == 0) return &mc->plans[i];
    CHECK(mc->num_plans < MATMUL_MAX_PLANS, "too many matmul shapes (%d)", MATMUL_MAX_PLANS);
    MatmulPlan *p = &mc->plans[mc->num_plans];
    memset(p, 0, sizeof(*p));
    p->key = *key;
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t ta = key->transa ? CUBLAS_OP_T : CUBLAS_OP_N, tb = key->transb ? CUBLAS_OP_T : CUBLAS_OP_N;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    cublasLtEpilogue_t epi = (cublasLtEpilogue_t)key->epilogue;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
    if (bias) CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
    if (aux) {
        int64_t ld = key->m;
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof(aux)));
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof(ld)));
    }
    // stored shapes: A is (m,k) or, transposed, (k,m); B is (k,n) or (n,k); D is (m,n)
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->a, CUDA_R_FLOATX, key->transa ? key->k : key->m,
                                            key->transa ? key->m : key->k, key->lda));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->b, CUDA_R_FLOATX, key->transb ? key->n : key->k,
                                            key->transb ? key->k : key->n, key->ldb));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->d, key->dtype, key->m, key->n, key->ldd));
    cublasLtMatmulPreference_t pref;
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    size_t ws = MATMUL_WORKSPACE_BYTES;
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
    uint32_t al_a = (uint32_t)key->align_a, al_b = (uint32_t)key->align_b, al_d = (uint32_t)key->align_d;
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof(al_a)));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof(al_b)));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_d, sizeof(al_d)));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_d, sizeof(al_d)));
    cublasLtMatmulHeuristicResult_t result;
    int found = 0;
    // a combination no algorithm runs: NOT_SUPPORTED ("no heuristic function available for current
    // configuration", cublasLt.h), or success with no result
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(mc->handle, p->desc, p->a, p->b, p->d, p->d, pref, 1, &result,
                                                       &found);
    CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
    if (st == CUBLAS_STATUS_NOT_SUPPORTED || (st == CUBLAS_STATUS_SUCCESS && found == 0))
        DIE("cuBLASLt has no algorithm for m=%d n=%d k=%d lda=%d ldb=%d ldd=%d transa=%d transb=%d epilogue=%d "
            "output %s, alignments a/b/d/bias/aux %d/%d/%d/%d/%d bytes (cuBLASLt status %d)", key->m, key->n, key->k,
            key->lda, key->ldb, key->ldd, key->transa, key->transb, key->epilogue,
            key->dtype == CUDA_R_32F ? "fp32" : FLOATX_NAME, key->align_a, key->align_b, key->align_d, key->align_bias,
            key->align_aux, (int)st);
    CUBLAS_CHECK(st);
    p->algo = result.algo;
    mc->num_plans++;
    return p;
}

// D (m,n, column-major, ld ldd) = op(A) @ op(B) (+ D when accumulate), with an epilogue.
static void matmul_lt(MatmulContext *mc, void *d, cudaDataType_t dtype, const floatX *a, int transa, int lda,
                      const floatX *b, int transb, int ldb, int m, int n, int k, int ldd, int accumulate,
                      cublasLtEpilogue_t epilogue, const floatX *bias, floatX *aux, cudaStream_t s) {
    MatmulKey key;
    memset(&key, 0, sizeof(key));  // the key is compared bytewise
    key.transa = transa; key.transb = transb; key.m = m; key.n = n; key.k = k;
    key.lda = lda; key.ldb = ldb; key.ldd = ldd; key.epilogue = (int)epilogue; key.accumulate = accumulate;
    key.align_a = matmul_ptr_alignment(a); key.align_b = matmul_ptr_alignment(b); key.align_d = matmul_ptr_alignment(d);
    key.align_bias = bias ? matmul_ptr_alignment(bias) : 0; key.align_aux = aux ? matmul_ptr_alignment(aux) : 0;
    key.dtype = dtype;
    MatmulPlan *p = matmul_plan(mc, &key, bias, aux);
    if (bias) CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
    if (aux) CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof(aux)));
    float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    CUBLAS_CHECK(cublasLtMatmul(mc->handle, p->desc, &alpha, a, p->a, b, p->b, &beta, d, p->d, d, p->d, &p->algo,
                                mc->workspace, MATMUL_WORKSPACE_BYTES, s));
}

// out (N,OC) = inp (N,IC) @ W (OC,IC)^T + bias (OC, or NULL). With pre_gelu:
// pre_gelu (N,OC) gets the pre-activation and out = gelu(pre_gelu).
static inline void gpu_matmul_forward(MatmulContext *mc, floatX *out, floatX *pre_gelu, const floatX *inp, const floatX *W,
                                      const floatX *bias, int N, int IC, int OC, cudaStream_t s) {
    cublasLtEpilogue_t epi = pre_gelu ? (bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX)
                                      : (bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT);
    // out^T (OC,N) = W^T-as-stored (IC,OC)^T @ inp^T (IC,N)
    matmul_lt(mc, out, CUDA_R_FLOATX, W, 1, IC, inp, 0, IC, OC, N, IC, OC, 0, epi, bias, pre_gelu, s);
}

// ---------------------------------------------------------------------------
// bias gradient: dbias (OC) += column sums of dout (N,OC), in a fixed order.

// dinp (N,IC) = dout (N,OC) @ W (OC,IC) (floatX, overwritten; skipped when NULL);
// dW (OC,IC) += dout^T @ inp (fp32; skipped when NULL: a split backward's
// input gradients run apart from its weight gradients, each call the same
// matmul); dbias (OC) += colsum(dbias_src) when dbias is given (dbias_src:
// dout, or an fp32 copy of it). scratch: colsum_scratch_floats(N, OC).
template <typename T>
static inline void gpu_matmul_backward(MatmulContext *mc, floatX *dinp, float *dW, float *dbias, float *scratch,
                                       const floatX *dout, const T *dbias_src, const floatX *inp, const floatX *W, int N,
                                       int IC, int OC, cudaStream_t s) {
    // dinp^T (IC,N) = W-as-stored (IC,OC) @ dout^T (OC,N)
    if (dinp) matmul_lt(mc, dinp, CUDA_R_FLOATX, W, 0, IC, dout, 0, OC, IC, N, OC, IC, 0, CUBLASLT_EPILOGUE_DEFAULT,
                        NULL, NULL, s);
    // dW^T (IC,OC) += inp^T (IC,N) @ (dout^T (OC,N))^T (skipped when NULL)
    if (dW) matmul_lt(mc, dW, CUDA_R_32F, inp, 0, IC, dout, 1, OC, IC, OC, N, IC, 1, CUBLASLT_EPILOGUE_DEFAULT, NULL,
                      NULL, s);
    if (dbias) gpu_colsum_accumulate<T>(dbias, scratch, dbias_src, N, OC, s);
}

// ---------------------------------------------------------------------------
// the chip's measured floatX matmul rate (for MFU and the dev/cuda benchmarks)

__global__ void fill_hash_floatX_kernel(floatX *p, int64_t n, uint64_t seed) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] = to_floatX((float)(hash_u32(seed, (uint64_t)i) >> 8) * (2.0f / 16777216.0f) - 1.0f);
}

// Median TFLOP/s of an (n x n) @ (n x n) floatX product on random data over reps runs.
static double matmul_measure_peak_tflops(MatmulContext *mc, int n, int reps, cudaStream_t s) {
    size_t elems = (size_t)n * n;
    floatX *a = (floatX *)cudaMallocCheck(elems * sizeof(floatX));
    floatX *b = (floatX *)cudaMallocCheck(elems * sizeof(floatX));
    floatX *d = (floatX *)cudaMallocCheck(elems * sizeof(floatX));
    launch_kernel(fill_hash_floatX_kernel, ceil_div_int(elems, 256), 256, 0, s, a, (int64_t)elems, 1);
    launch_kernel(fill_hash_floatX_kernel, ceil_div_int(elems, 256), 256, 0, s, b, (int64_t)elems, 2);
    CUDA_CHECK_LAUNCH();
    cudaEvent_t e0, e1;
    CUDA_CHECK(cudaEventCreate(&e0));
    CUDA_CHECK(cudaEventCreate(&e1));
    std::vector<float> ms((size_t)reps);
    for (int r = -2; r < reps; r++) {  // two warm-up runs
        CUDA_CHECK(cudaEventRecord(e0, s));
        matmul_lt(mc, d, CUDA_R_FLOATX, a, 1, n, b, 0, n, n, n, n, n, 0, CUBLASLT_EPILOGUE_DEFAULT, NULL, NULL, s);
        CUDA_CHECK(cudaEventRecord(e1, s));
        CUDA_CHECK(cudaEventSynchronize(e1));
        if (r >= 0) CUDA_CHECK(cudaEventElapsedTime(&ms[(size_t)r], e0, e1));
    }
    std::sort(ms.begin(), ms.end());
    double med = ms[(size_t)reps / 2];
    CUDA_CHECK(cudaEventDestroy(e0));
    CUDA_CHECK(cudaEventDestroy(e1));
    CUDA_CHECK(cudaFree(a)); CUDA_CHECK(cudaFree(b)); CUDA_CHECK(cudaFree(d));
    return 2.0 * n * (double)n * n / (med * 1e-3) / 1e12;
}

#endif  // LLMC_MATMUL_CUH
