// attention_cudnn.cuh: the causal attention forward through cuDNN's fused
// attention, built with the backend C API (cudnnBackend* descriptors, no C++
// frontend). Same tensors as attention_flash.cuh: qkv (B,T,3C) in, out
// (B,T,C) and lse (B,NH,T) out; cuDNN's softmax statistics are the same
// log-sum-exp of the scaled scores, so the backward runs through
// attention_flash.cuh's kernels on cuDNN's forward outputs (the cuDNN
// backward graph is not built yet).
// The operation graph is the composite one cuDNN's engines fuse into one
// flash-attention kernel (cuDNN < 9.21 has no single softmax operation):
//   S = Q @ K^T; S *= scale; row = index(S, 2), col = index(S, 3);
//   S = row >= col ? S : -inf; m = max(S); E = exp(S - m); s = sum(E);
//   lse = m + log(s); P = E / s (bf16); O = P @ V
// Q, K, V are strided views into qkv (B, NH, T, hs) with no copies.
// Without cuDNN in the build (no LLMC_CUDNN) cudnn_attention_available() is 0
// and the trainer refuses --attention cudnn.
#ifndef LLMC_ATTENTION_CUDNN_CUH
#define LLMC_ATTENTION_CUDNN_CUH

#include "cuda_common.cuh"
#include "model.h"

#ifdef LLMC_CUDNN
#include <cudnn.h>

#define CUDNN_MAX_PLANS 4  // (B, T) shapes: training, evaluation, sampling

typedef struct {
    int B, T;
    cudnnBackendDescriptor_t plan;
    int64_t workspace_bytes;
} CudnnPlan;

typedef struct {
    int enabled;
    cudnnHandle_t handle;
    int C, NH;
    CudnnPlan plans[CUDNN_MAX_PLANS];
    int num_plans;
    void *workspace;
    size_t workspace_cap;
    float scale, neg_inf;  // by-value scalars: read from here at execution
} CudnnAttention;

static inline int cudnn_attention_available(void) { return 1; }

// Workspace reserved up front (the engines for this graph need little; a plan
// wanting more than this is refused with a message).
static inline size_t cudnn_attention_workspace_bytes(void) { return (size_t)64 << 20; }

// backend descriptor helpers
static inline cudnnBackendDescriptor_t cd_create(cudnnBackendDescriptorType_t type) {
    cudnnBackendDescriptor_t d;
    CUDNN_CHECK(cudnnBackendCreateDescriptor(type, &d));
    return d;
}
static inline void cd_set(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t a, cudnnBackendAttributeType_t t,
                          int64_t n, const void *v) {
    CUDNN_CHECK(cudnnBackendSetAttribute(d, a, t, n, v));
}

// A 4-D tensor; by_value: a host scalar passed at execution.
static cudnnBackendDescriptor_t cd_tensor(int64_t uid, cudnnDataType_t dt, const int64_t dims[4],
                                          const int64_t strides[4], bool is_virtual, bool by_value) {
    cudnnBackendDescriptor_t d = cd_create(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    int64_t align = 16;
    cd_set(d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt);
    cd_set(d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims);
    cd_set(d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides);
    cd_set(d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
    cd_set(d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align);
    cd_set(d, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual);
    if (by_value) cd_set(d, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value);
    CUDNN_CHECK(cudnnBackendFinalize(d));
    return d;
}

// y = mode(x[, b][, t]); axis >= 0 for GEN_INDEX. prec: the math precision.
static cudnnBackendDescriptor_t cd_pointwise(cudnnPointwiseMode_t mode, cudnnDataType_t prec,
                                             cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t b,
                                             cudnnBackendDescriptor_t t, cudnnBackendDescriptor_t y, int64_t axis) {
    cudnnBackendDescriptor_t pw = cd_create(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    cd_set(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
    cd_set(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec);
    if (axis >= 0) cd_set(pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis);
    CUDNN_CHECK(cudnnBackendFinalize(pw));
    cudnnBackendDescriptor_t op = cd_create(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    cd_set(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw);
    cd_set(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
    if (b) cd_set(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b);
    if (t) cd_set(op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t);
    cd_set(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
    CUDNN_CHECK(cudnnBackendFinalize(op));
    CUDNN_CHECK(cudnnBackendDestroyDescriptor(pw));
    return op;
}

static cudnnBackendDescriptor_t cd_reduction(cudnnReduceTensorOp_t red, cudnnBackendDescriptor_t x,
                                             cudnnBackendDescriptor_t y) {
    cudnnBackendDescriptor_t rd = cd_create(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
    cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
    cd_set(rd, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &red);
    cd_set(rd, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f32);
    CUDNN_CHECK(cudnnBackendFinalize(rd));
    cudnnBackendDescriptor_t op = cd_create(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
    cd_set(op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
    cd_set(op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
    cd_set(op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &rd);
    CUDNN_CHECK(cudnnBackendFinalize(op));
    CUDNN_CHECK(cudnnBackendDestroyDescriptor(rd));
    return op;
}

static cudnnBackendDescriptor_t cd_matmul(cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b,
                                          cudnnBackendDescriptor_t c) {
    cudnnBackendDescriptor_t mm = cd_create(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
    cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
    cd_set(mm, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f32);
    CUDNN_CHECK(cudnnBackendFinalize(mm));
    cudnnBackendDescriptor_t op = cd_create(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
    cd_set(op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &a);
    cd_set(op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b);
    cd_set(op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c);
    cd_set(op, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &mm);
    CUDNN_CHECK(cudnnBackendFinalize(op));
    CUDNN_CHECK(cudnnBackendDestroyDescriptor(mm));
    return op;
}

enum { CD_Q = 1, CD_K, CD_V, CD_O, CD_STATS, CD_SCALE, CD_NEG_INF };

// Builds (graph, heuristics, the first engine config that finalizes) the forward plan for (B, T).
static CudnnPlan cudnn_build_forward(CudnnAttention *ca, int B, int T) {
    int64_t C = ca->C, NH = ca->NH, hs = C / NH, b = B, t = T;
    const int64_t one[4] = {1, 1, 1, 1};
    const int64_t qdim[4] = {b, NH, t, hs}, qkv_str[4] = {t * 3 * C, hs, 3 * C, 1};
    const int64_t ktdim[4] = {b, NH, hs, t}, kt_str[4] = {t * 3 * C, hs, 1, 3 * C};
    const int64_t o_str[4] = {t * C, hs, C, 1};
    const int64_t sdim[4] = {b, NH, t, t}, s_str[4] = {NH * t * t, t * t, t, 1};
    const int64_t rdim[4] = {b, NH, t, 1}, r_str[4] = {NH * t, t, 1, 1};
    cudnnDataType_t F = CUDNN_DATA_FLOAT, BF = CUDNN_DATA_BFLOAT16, I = CUDNN_DATA_INT32, BO = CUDNN_DATA_BOOLEAN;
    int64_t vid = 100;  // virtual tensors
    cudnnBackendDescriptor_t tens[32];
    int nt = 0;
#define CD_T(uid, dt, dims, str, virt, byval) (tens[nt++] = cd_tensor((uid), (dt), (dims), (str), (virt), (byval)))
    cudnnBackendDescriptor_t q = CD_T(CD_Q, BF, qdim, qkv_str, false, false);
    cudnnBackendDescriptor_t kt = CD_T(CD_K, BF, ktdim, kt_str, false, false);
    cudnnBackendDescriptor_t v = CD_T(CD_V, BF, qdim, qkv_str, false, false);
    cudnnBackendDescriptor_t o = CD_T(CD_O, BF, qdim, o_str, false, false);
    cudnnBackendDescriptor_t stats = CD_T(CD_STATS, F, rdim, r_str, false, false);
    cudnnBackendDescriptor_t scale = CD_T(CD_SCALE, F, one, one, false, true);
    cudnnBackendDescriptor_t neg_inf = CD_T(CD_NEG_INF, F, one, one, false, true);
    cudnnBackendDescriptor_t s = CD_T(vid++, F, sdim, s_str, true, false);
    cudnnBackendDescriptor_t s_scaled = CD_T(vid++, F, sdim, s_str, true, false);
    cudnnBackendDescriptor_t row = CD_T(vid++, I, sdim, s_str, true, false);
    cudnnBackendDescriptor_t col = CD_T(vid++, I, sdim, s_str, true, false);
    cudnnBackendDescriptor_t keep = CD_T(vid++, BO, sdim, s_str, true, false);
    cudnnBackendDescriptor_t s_masked = CD_T(vid++, F, sdim, s_str, true, false);
    cudnnBackendDescriptor_t mx = CD_T(vid++, F, rdim, r_str, true, false);
    cudnnBackendDescriptor_t s_sub = CD_T(vid++, F, sdim, s_str, true, false);
    cudnnBackendDescriptor_t e = CD_T(vid++, F, sdim, s_str, true, false);
    cudnnBackendDescriptor_t sum = CD_T(vid++, F, rdim, r_str, true, false);
    cudnnBackendDescriptor_t logsum = CD_T(vid++, F, rdim, r_str, true, false);
    cudnnBackendDescriptor_t p = CD_T(vid++, BF, sdim, s_str, true, false);
#undef CD_T
    cudnnBackendDescriptor_t ops[] = {
        cd_matmul(q, kt, s),
        cd_pointwise(CUDNN_POINTWISE_MUL, F, s, scale, NULL, s_scaled, -1),
        cd_pointwise(CUDNN_POINTWISE_GEN_INDEX, I, s_scaled, NULL, NULL, row, 2),
        cd_pointwise(CUDNN_POINTWISE_GEN_INDEX, I, s_scaled, NULL, NULL, col, 3),
        cd_pointwise(CUDNN_POINTWISE_CMP_GE, BO, row, col, NULL, keep, -1),
        cd_pointwise(CUDNN_POINTWISE_BINARY_SELECT, F, s_scaled, neg_inf, keep, s_masked, -1),
        cd_reduction(CUDNN_REDUCE_TENSOR_MAX, s_masked, mx),
        cd_pointwise(CUDNN_POINTWISE_SUB, F, s_masked, mx, NULL, s_sub, -1),
        cd_pointwise(CUDNN_POINTWISE_EXP, F, s_sub, NULL, NULL, e, -1),
        cd_reduction(CUDNN_REDUCE_TENSOR_ADD, e, sum),
        cd_pointwise(CUDNN_POINTWISE_LOG, F, sum, NULL, NULL, logsum, -1),
        cd_pointwise(CUDNN_POINTWISE_ADD, F, mx, logsum, NULL, stats, -1),
        cd_pointwise(CUDNN_POINTWISE_DIV, F, e, sum, NULL, p, -1),
        cd_matmul(p, v, o),
    };
    const int nops = (int)(sizeof(ops) / sizeof(ops[0]));
    // the handle attributes are marked deprecated in cuDNN 9 headers but still required: set by value
    const cudnnBackendAttributeName_t graph_handle = (cudnnBackendAttributeName_t)800;  // OPERATIONGRAPH_HANDLE
    const cudnnBackendAttributeName_t plan_handle = (cudnnBackendAttributeName_t)400;   // EXECUTION_PLAN_HANDLE
    cudnnBackendDescriptor_t graph = cd_create(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    cd_set(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, nops, ops);
    cd_set(graph, graph_handle, CUDNN_TYPE_HANDLE, 1, &ca->handle);
    cudnnStatus_t st = cudnnBackendFinalize(graph);
    if (st != CUDNN_STATUS_SUCCESS)
        die_usage("--attention cudnn: cuDNN %d rejects the attention graph (%s); use --attention flash", CUDNN_VERSION,
                  cudnnGetErrorString(st));
    cudnnBackendDescriptor_t heur = cd_create(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
    cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
    cd_set(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph);
    cd_set(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
    CUDNN_CHECK(cudnnBackendFinalize(heur));
    cudnnBackendDescriptor_t cfgs[8];
    for (int i = 0; i < 8; i++) cfgs[i] = cd_create(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    int64_t ncfg = 0;
    CUDNN_CHECK(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 8, &ncfg,
                                         cfgs));
    CudnnPlan out;
    memset(&out, 0, sizeof(out));
    out.B = B;
    out.T = T;
    for (int64_t i = 0; i < ncfg && !out.plan; i++) {
        cudnnBackendDescriptor_t plan = cd_create(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
        cd_set(plan, plan_handle, CUDNN_TYPE_HANDLE, 1, &ca->handle);
        cd_set(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfgs[i]);
        if (cudnnBackendFinalize(plan) == CUDNN_STATUS_SUCCESS) {
            int64_t n = 0;
            CUDNN_CHECK(cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1,
                                                 &n, &out.workspace_bytes));
            out.plan = plan;
        } else {
            CUDNN_CHECK(cudnnBackendDestroyDescriptor(plan));
        }
    }
    for (int i = 0; i < 8; i++) CUDNN_CHECK(cudnnBackendDestroyDescriptor(cfgs[i]));
    CUDNN_CHECK(cudnnBackendDestroyDescriptor(heur));
    CUDNN_CHECK(cudnnBackendDestroyDescriptor(graph));
    for (int i = 0; i < nops; i++) CUDNN_CHECK(cudnnBackendDestroyDescriptor(ops[i]));
    for (int i = 0; i < nt; i++) CUDNN_CHECK(cudnnBackendDestroyDescriptor(tens[i]));
    if (!out.plan)
        die_usage("--attention cudnn: no cuDNN %d engine runs the attention graph (B=%d T=%d C=%d NH=%d; %lld "
                  "configs tried); use --attention flash",
                  CUDNN_VERSION, B, T, ca->C, ca->NH, (long long)ncfg);
    if ((size_t)out.workspace_bytes > ca->workspace_cap)
        die_usage("--attention cudnn: the engine wants %lld bytes of workspace, more than the %zu reserved",
                  (long long)out.workspace_bytes, ca->workspace_cap);
    return out;
}

static inline void cudnn_attention_init(CudnnAttention *ca, const GPTConfig *cfg, int B, int T, int enabled) {
    memset(ca, 0, sizeof(*ca));
    ca->enabled = enabled;
    if (!enabled) return;
    CUDNN_CHECK(cudnnCreate(&ca->handle));
    ca->C = cfg->channels;
    ca->NH = cfg->num_heads;
    ca->scale = 1.0f / sqrtf((float)(cfg->channels / cfg->num_heads));
    ca->neg_inf = -INFINITY;
    ca->workspace_cap = cudnn_attention_workspace_bytes();
    ca->workspace = cudaMallocCheck(ca->workspace_cap);
    ca->plans[ca->num_plans++] = cudnn_build_forward(ca, B, T);  // fail early, before training starts
}

static inline void cudnn_attention_free(CudnnAttention *ca) {
    if (!ca->enabled) return;
    for (int i = 0; i < ca->num_plans; i++) CUDNN_CHECK(cudnnBackendDestroyDescriptor(ca->plans[i].plan));
    CUDA_CHECK(cudaFree(ca->workspace));
    CUDNN_CHECK(cudnnDestroy(ca->handle));
    memset(ca, 0, sizeof(*ca));
}

// out (B,T,C), lse (B,NH,T) from qkv (B,T,3C).
static inline void gpu_cudnn_attention_forward(CudnnAttention *ca, bf16 *out, float *lse, const bf16 *qkv, int B,
                                               int T, int C, int NH, cudaStream_t s) {
    CHECK(ca->enabled && C == ca->C && NH == ca->NH, "cuDNN attention not set up for C=%d NH=%d", C, NH);
    CudnnPlan *p = NULL;
    for (int i = 0; i < ca->num_plans; i++)
        if (ca->plans[i].B == B && ca->plans[i].T == T) p = &ca->plans[i];
    if (!p) {
        CHECK(ca->num_plans < CUDNN_MAX_PLANS, "more than %d attention shapes", CUDNN_MAX_PLANS);
        ca->plans[ca->num_plans] = cudnn_build_forward(ca, B, T);
        p = &ca->plans[ca->num_plans++];
    }
    CUDNN_CHECK(cudnnSetStream(ca->handle, s));
    int64_t uids[] = {CD_Q, CD_K, CD_V, CD_O, CD_STATS, CD_SCALE, CD_NEG_INF};
    void *ptrs[] = {(void *)qkv, (void *)(qkv + C), (void *)(qkv + 2 * C), out, lse, &ca->scale, &ca->neg_inf};
    cudnnBackendDescriptor_t vp = cd_create(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
    cd_set(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 7, uids);
    cd_set(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 7, ptrs);
    cd_set(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ca->workspace);
    CUDNN_CHECK(cudnnBackendFinalize(vp));
    CUDNN_CHECK(cudnnBackendExecute(ca->handle, p->plan, vp));
    CUDNN_CHECK(cudnnBackendDestroyDescriptor(vp));
}

#else  // no cuDNN in the build

typedef struct {
    int enabled;
} CudnnAttention;

static inline int cudnn_attention_available(void) { return 0; }
static inline size_t cudnn_attention_workspace_bytes(void) { return 0; }
static inline void cudnn_attention_init(CudnnAttention *ca, const GPTConfig *cfg, int B, int T, int enabled) {
    (void)cfg; (void)B; (void)T;
    CHECK(!enabled, "cuDNN attention requested in a build without cuDNN");
    ca->enabled = 0;
}
static inline void cudnn_attention_free(CudnnAttention *ca) { ca->enabled = 0; }
static inline void gpu_cudnn_attention_forward(CudnnAttention *ca, bf16 *out, float *lse, const bf16 *qkv, int B,
                                               int T, int C, int NH, cudaStream_t s) {
    (void)ca; (void)out; (void)lse; (void)qkv; (void)B; (void)T; (void)C; (void)NH; (void)s;
    DIE("cuDNN attention is not in this build");
}

#endif  // LLMC_CUDNN

#endif  // LLMC_ATTENTION_CUDNN_CUH
