// cublaslt_emulator.h: the part of cuBLASLt that llmc/matmul.cuh uses, on the
// CPU, for tests/cuda_emulator.h (which includes it), written from cublasLt.h's
// own documentation so that matmul.cuh's column-major calls are checked
// against the library's rules rather than against themselves:
//   - a layout is (rows, cols, ld) column-major with ld >= rows; op(A) is m x k,
//     op(B) k x n, C and D m x n; shapes that disagree are
//     CUBLAS_STATUS_INVALID_VALUE (from the heuristic and from the matmul);
//   - a combination no algorithm runs is CUBLAS_STATUS_NOT_SUPPORTED with no
//     results from cublasLtMatmulAlgoGetHeuristic ("if no heuristic function
//     available for current configuration") and from cublasLtMatmul ("if the
//     current implementation on the selected device doesn't support the
//     configured operation"): A and B other than bf16 (cublasLtMatmul's
//     supported types for CUBLAS_COMPUTE_32F: bf16 A/B with bf16 or fp32
//     C/D), an epilogue not emulated, a GELU aux leading dimension not
//     divisible by 8 (EPILOGUE_AUX_LD: "Must be divisible by 8"), and an
//     operand, bias or aux pointer less aligned than its element (the
//     MIN_ALIGNMENT preferences "exclude algorithms that can not work with
//     matrix A that is not as strictly aligned as they need": none works
//     below one element);
//   - D = alpha op(A) op(B) + beta C, accumulated in fp32;
//   - EPILOGUE_BIAS adds bias[row] (the bias has D's rows and D's type) to
//     every column; GELU_AUX(_BIAS) writes the pre-activation (after the bias)
//     to the aux matrix (D's type, leading dimension EPILOGUE_AUX_LD, which
//     must be a multiple of 8 and >= rows) and gelu (tanh form) of it to D;
//   - an attribute set with the wrong size is CUBLAS_STATUS_INVALID_VALUE
//     (TRANSA/B int32, EPILOGUE uint32, pointers, AUX_LD int64, workspace
//     uint64, alignments uint32);
//   - an algorithm holds the pointer alignments (MIN_ALIGNMENT_*_BYTES,
//     default 256) and the bias/aux pointers' the heuristic was told: a matmul
//     with a less aligned operand, or a smaller workspace than the preference
//     allowed, fails the test (a real cuBLASLt may fault or misbehave there);
//   - the matmul is queued on the stream (cuda_runtime_emulator.h) with the
//     descriptor's attributes and alpha/beta as they were at the call.
#ifndef LLMC_CUBLASLT_EMULATOR_H
#define LLMC_CUBLASLT_EMULATOR_H

#ifndef LLMC_CUDA_EMULATOR_H
#error "include tests/cuda_emulator.h, which includes this"
#endif

#ifdef LLMC_BLAS
#include <cblas.h>
#endif

typedef int cublasStatus_t;
enum { CUBLAS_STATUS_SUCCESS = 0, CUBLAS_STATUS_INVALID_VALUE = 7, CUBLAS_STATUS_NOT_SUPPORTED = 15 };
enum cudaDataType_t { CUDA_R_32F = 0, CUDA_R_16BF = 14 };
enum cublasComputeType_t { CUBLAS_COMPUTE_32F = 68 };
enum cublasOperation_t { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 };
enum cublasLtEpilogue_t {
    CUBLASLT_EPILOGUE_DEFAULT = 1,
    CUBLASLT_EPILOGUE_BIAS = 4,
    CUBLASLT_EPILOGUE_GELU = 32,
    CUBLASLT_EPILOGUE_GELU_AUX = 32 | 128,
    CUBLASLT_EPILOGUE_GELU_BIAS = 32 | 4,
    CUBLASLT_EPILOGUE_GELU_AUX_BIAS = 32 | 128 | 4,
};
#define EMU_LT_EPILOGUE_AUX 128  // the bit of the epilogues that write the aux matrix
enum cublasLtMatmulDescAttributes_t {
    CUBLASLT_MATMUL_DESC_TRANSA = 3,
    CUBLASLT_MATMUL_DESC_TRANSB = 4,
    CUBLASLT_MATMUL_DESC_EPILOGUE = 7,
    CUBLASLT_MATMUL_DESC_BIAS_POINTER = 8,
    CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER = 11,
    CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD = 12,
};
enum cublasLtMatmulPreferenceAttributes_t {
    CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES = 5,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES = 6,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES = 7,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES = 8,
};

struct EmuLtHandle { int live; };
struct EmuLtDesc {
    int32_t transa = CUBLAS_OP_N, transb = CUBLAS_OP_N;
    uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    const void *bias = nullptr;
    void *aux = nullptr;
    int64_t aux_ld = 0;
};
struct EmuLtLayout {
    cudaDataType_t type;
    uint64_t rows, cols;
    int64_t ld;
};
struct EmuLtPref {
    uint64_t workspace = 0;
    uint32_t align[4] = {256, 256, 256, 256};  // A, B, C, D
};
typedef EmuLtHandle *cublasLtHandle_t;
typedef EmuLtDesc *cublasLtMatmulDesc_t;
typedef EmuLtLayout *cublasLtMatrixLayout_t;
typedef EmuLtPref *cublasLtMatmulPreference_t;
// What the heuristic chose for: operand and epilogue pointer alignments, workspace.
struct cublasLtMatmulAlgo_t {
    uint32_t align[6];  // A, B, C, D, bias, aux
    uint64_t workspace;
};
struct cublasLtMatmulHeuristicResult_t {
    cublasLtMatmulAlgo_t algo;
    size_t workspaceSize;
    cublasStatus_t state;
    float wavesCount;
    int reserved[4];
};

static inline cublasStatus_t cublasLtCreate(cublasLtHandle_t *h) {
    *h = new EmuLtHandle{1};
    return CUBLAS_STATUS_SUCCESS;
}
static inline cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) {
    delete h;
    return CUBLAS_STATUS_SUCCESS;
}
static inline cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, cublasComputeType_t compute,
                                                      cudaDataType_t scale) {
    if (compute != CUBLAS_COMPUTE_32F || scale != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
    *d = new EmuLtDesc;
    return CUBLAS_STATUS_SUCCESS;
}
static inline cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) {
    delete d;
    return CUBLAS_STATUS_SUCCESS;
}
// Copies an attribute of the type the header documents (size must match).
template <class T> static inline cublasStatus_t emu_lt_set(T *field, const void *buf, size_t size) {
    if (size != sizeof(T)) return CUBLAS_STATUS_INVALID_VALUE;
    memcpy(field, buf, sizeof(T));
    return CUBLAS_STATUS_SUCCESS;
}
static inline cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a,
                                                            const void *buf, size_t size) {
    switch (a) {
    case CUBLASLT_MATMUL_DESC_TRANSA: return emu_lt_set(&d->transa, buf, size);
    case CUBLASLT_MATMUL_DESC_TRANSB: return emu_lt_set(&d->transb, buf, size);
    case CUBLASLT_MATMUL_DESC_EPILOGUE: return emu_lt_set(&d->epilogue, buf, size);
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: return emu_lt_set(&d->bias, buf, size);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER: return emu_lt_set(&d->aux, buf, size);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: return emu_lt_set(&d->aux_ld, buf, size);
    }
    return CUBLAS_STATUS_INVALID_VALUE;
}
static inline cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType_t type, uint64_t rows,
                                                        uint64_t cols, int64_t ld) {
    if (type != CUDA_R_32F && type != CUDA_R_16BF) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (ld < 1 || (uint64_t)ld < rows) return CUBLAS_STATUS_INVALID_VALUE;  // column-major: ld >= rows
    *l = new EmuLtLayout{type, rows, cols, ld};
    return CUBLAS_STATUS_SUCCESS;
}
static inline cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) {
    delete l;
    return CUBLAS_STATUS_SUCCESS;
}
static inline cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p) {
    *p = new EmuLtPref;
    return CUBLAS_STATUS_SUCCESS;
}
static inline cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) {
    delete p;
    return CUBLAS_STATUS_SUCCESS;
}
static inline cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                                                  cublasLtMatmulPreferenceAttributes_t a,
                                                                  const void *buf, size_t size) {
    switch (a) {
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES: return emu_lt_set(&p->workspace, buf, size);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES: return emu_lt_set(&p->align[0], buf, size);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES: return emu_lt_set(&p->align[1], buf, size);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES: return emu_lt_set(&p->align[2], buf, size);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES: return emu_lt_set(&p->align[3], buf, size);
    }
    return CUBLAS_STATUS_INVALID_VALUE;
}

static inline uint32_t emu_lt_alignment(const void *p) {
    uint32_t a = 256;
    while (a > 1 && (uintptr_t)p % a != 0) a /= 2;
    return a;
}
static inline uint32_t emu_lt_type_size(cudaDataType_t t) { return t == CUDA_R_32F ? 4 : 2; }

// The problem's m, n, k from the layouts, or a status: INVALID_VALUE when they
// disagree, NOT_SUPPORTED for a combination no algorithm runs (the top of this
// file). align: the A, B, C, D alignments (bytes) the caller promises.
struct EmuLtShape { uint64_t m, n, k; };
static inline cublasStatus_t emu_lt_shape(const EmuLtDesc *d, const EmuLtLayout *a, const EmuLtLayout *b,
                                          const EmuLtLayout *c, const EmuLtLayout *dl, const uint32_t align[4],
                                          EmuLtShape *s) {
    s->m = dl->rows;
    s->n = dl->cols;
    uint64_t am = d->transa ? a->cols : a->rows, ak = d->transa ? a->rows : a->cols;
    uint64_t bk = d->transb ? b->cols : b->rows, bn = d->transb ? b->rows : b->cols;
    s->k = ak;
    if (am != s->m || bn != s->n || bk != ak) return CUBLAS_STATUS_INVALID_VALUE;
    if (c->rows != dl->rows || c->cols != dl->cols || c->type != dl->type) return CUBLAS_STATUS_INVALID_VALUE;
    if (a->type != CUDA_R_16BF || b->type != CUDA_R_16BF) return CUBLAS_STATUS_NOT_SUPPORTED;
    uint32_t e = d->epilogue;
    if (e != CUBLASLT_EPILOGUE_DEFAULT && e != CUBLASLT_EPILOGUE_BIAS && e != CUBLASLT_EPILOGUE_GELU &&
        e != CUBLASLT_EPILOGUE_GELU_AUX && e != CUBLASLT_EPILOGUE_GELU_BIAS && e != CUBLASLT_EPILOGUE_GELU_AUX_BIAS)
        return CUBLAS_STATUS_NOT_SUPPORTED;  // not emulated
    if ((e & EMU_LT_EPILOGUE_AUX) && d->aux_ld < (int64_t)s->m) return CUBLAS_STATUS_INVALID_VALUE;
    if ((e & EMU_LT_EPILOGUE_AUX) && d->aux_ld % 8 != 0) return CUBLAS_STATUS_NOT_SUPPORTED;
    const EmuLtLayout *lay[4] = {a, b, c, dl};
    for (int i = 0; i < 4; i++)
        if (align[i] < emu_lt_type_size(lay[i]->type)) return CUBLAS_STATUS_NOT_SUPPORTED;
    const void *epi[2] = {d->bias, d->aux};  // (D's type)
    for (int i = 0; i < 2; i++)
        if (epi[i] && emu_lt_alignment(epi[i]) < emu_lt_type_size(dl->type)) return CUBLAS_STATUS_NOT_SUPPORTED;
    return CUBLAS_STATUS_SUCCESS;
}

static inline cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t d,
                                                            cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                                            cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t dl,
                                                            cublasLtMatmulPreference_t pref, int requested,
                                                            cublasLtMatmulHeuristicResult_t *results, int *found) {
    *found = 0;
    if (!h || requested < 1) return CUBLAS_STATUS_INVALID_VALUE;
    EmuLtShape s;
    cublasStatus_t st = emu_lt_shape(d, a, b, c, dl, pref->align, &s);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    memset(&results[0], 0, sizeof(results[0]));
    for (int i = 0; i < 4; i++) results[0].algo.align[i] = pref->align[i];
    // "routines that don't dereference this pointer ... depend on its value to determine expected pointer alignment"
    results[0].algo.align[4] = d->bias ? emu_lt_alignment(d->bias) : 1;
    results[0].algo.align[5] = d->aux ? emu_lt_alignment(d->aux) : 1;
    results[0].algo.workspace = pref->workspace;
    *found = 1;
    return CUBLAS_STATUS_SUCCESS;
}

static inline float emu_lt_load(const void *p, cudaDataType_t t, size_t i) {
    return t == CUDA_R_32F ? ((const float *)p)[i] : emu_bf16_to_float(((const bf16 *)p)[i]);
}
static inline void emu_lt_store(void *p, cudaDataType_t t, size_t i, float v) {
    if (t == CUDA_R_32F) ((float *)p)[i] = v;
    else ((bf16 *)p)[i] = __float2bfloat16_rn(v);
}
static inline float emu_lt_gelu(float x) {
    const float s = 0.7978845608028654f;  // sqrt(2 / pi)
    return 0.5f * x * (1.0f + tanhf(s * (x + 0.044715f * x * x * x)));
}

// out (m, n) = a (m rows of k) times b (n rows of k)^T, in fp32 (OpenBLAS when
// the build has it: the emulated programs spend most of their time here; the
// order of the sums is unspecified, as cuBLAS's is).
static inline void emu_lt_product(float *out, const float *a, const float *b, size_t m, size_t n, size_t k) {
#ifdef LLMC_BLAS
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m, (int)n, (int)k, 1.0f, a, (int)k, b, (int)k, 0.0f, out,
                (int)n);
#else
    for (size_t i = 0; i < m; i++)
        for (size_t j = 0; j < n; j++) {
            float acc = 0.0f;
            for (size_t p = 0; p < k; p++) acc += a[i * k + p] * b[j * k + p];
            out[i * n + j] = acc;
        }
#endif
}

static inline cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t d, const void *alpha,
                                            const void *A, cublasLtMatrixLayout_t al, const void *B,
                                            cublasLtMatrixLayout_t bl, const void *beta, const void *C,
                                            cublasLtMatrixLayout_t cl, void *D, cublasLtMatrixLayout_t dl,
                                            const cublasLtMatmulAlgo_t *algo, void *workspace, size_t workspace_bytes,
                                            cudaStream_t stream) {
    if (!h || !algo) return CUBLAS_STATUS_INVALID_VALUE;
    EmuLtShape s;
    const uint32_t align[4] = {emu_lt_alignment(A), emu_lt_alignment(B), emu_lt_alignment(C), emu_lt_alignment(D)};
    cublasStatus_t st = emu_lt_shape(d, al, bl, cl, dl, align, &s);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    const void *ptrs[6] = {A, B, C, D, d->bias, d->aux};
    static const char *const names[6] = {"A", "B", "C", "D", "bias", "aux"};
    char msg[160];
    for (int i = 0; i < 6; i++)
        if (ptrs[i] && emu_lt_alignment(ptrs[i]) < algo->align[i]) {
            snprintf(msg, sizeof(msg), "cublasLtMatmul: %s is %u-byte aligned, the algorithm was chosen for %u",
                     names[i], emu_lt_alignment(ptrs[i]), algo->align[i]);
            emu_fail(msg);
        }
    if (algo->workspace > 0 && (!workspace || workspace_bytes < algo->workspace))
        emu_fail("cublasLtMatmul: less workspace than the heuristic was allowed");
    if (((d->epilogue & CUBLASLT_EPILOGUE_BIAS) && !d->bias) || ((d->epilogue & EMU_LT_EPILOGUE_AUX) && !d->aux))
        return CUBLAS_STATUS_INVALID_VALUE;
    const EmuLtDesc desc = *d;  // the attributes as they are now
    const EmuLtLayout la = *al, lb = *bl, lc = *cl, ld = *dl;
    const float alpha_v = *(const float *)alpha, beta_v = *(const float *)beta;
    emu_enqueue(stream, [=] {
        const size_t m = s.m, n = s.n, k = s.k;
        // op(A) as rows of k, op(B) as columns of k (fp32; the bf16 values are exact)
        std::vector<float> a_rows(m * k), b_cols(n * k);
        for (size_t i = 0; i < m; i++)
            for (size_t p = 0; p < k; p++)
                a_rows[i * k + p] = emu_lt_load(A, la.type, desc.transa ? p + i * la.ld : i + p * la.ld);
        for (size_t j = 0; j < n; j++)
            for (size_t p = 0; p < k; p++)
                b_cols[j * k + p] = emu_lt_load(B, lb.type, desc.transb ? j + p * lb.ld : p + j * lb.ld);
        std::vector<float> prod(m * n);  // (m, n) row-major: op(A) op(B)
        emu_lt_product(prod.data(), a_rows.data(), b_cols.data(), m, n, k);
        const bool gelu = desc.epilogue & CUBLASLT_EPILOGUE_GELU, bias = desc.epilogue & CUBLASLT_EPILOGUE_BIAS;
        for (size_t j = 0; j < n; j++)
            for (size_t i = 0; i < m; i++) {
                float v = alpha_v * prod[i * n + j];
                if (beta_v != 0.0f) v += beta_v * emu_lt_load(C, lc.type, i + j * lc.ld);
                if (bias) v += emu_lt_load(desc.bias, ld.type, i);
                if (gelu) {
                    if (desc.epilogue & EMU_LT_EPILOGUE_AUX) emu_lt_store(desc.aux, ld.type, i + j * (size_t)desc.aux_ld, v);
                    v = emu_lt_gelu(v);
                }
                emu_lt_store(D, ld.type, i + j * ld.ld, v);
            }
    });
    return CUBLAS_STATUS_SUCCESS;
}

#endif  // LLMC_CUBLASLT_EMULATOR_H
