// attention_cudnn.cuh: causal attention, forward and backward, through cuDNN's
// fused attention, built with the backend C API (cudnnBackend* descriptors,
// no C++ frontend). Same tensors as attention_flash.cuh: qkv (B,T,3C) in, out
// (B,T,C) and lse (B,NH,T) saved (cuDNN's softmax statistics are the same
// log-sum-exp of the scaled scores, so either backward runs on either
// forward's outputs); the backward writes dqkv (B,T,3C).
// The operation graphs are the composite ones cuDNN's engines fuse into one
// flash-attention kernel each (cuDNN < 9.21 has no single softmax or mask
// operation), node for node as cudnn-frontend builds them
// (include/cudnn_frontend/node/scaled_dot_product_flash_attention.h:
// CompositeSDPANode, CompositeSDPABackwardNode; the causal mask of
// utils/attn_score_modifiers.h and node/diagonal_band_mask.h); see
// cd_graph_forward / cd_graph_backward. Q, K, V, dQ, dK, dV are strided (B,
// NH, T, hs) views into qkv / dqkv: no copies, no transposes, unit stride on
// the head dimension as the engines require.
// Shapes outside cuDNN's support matrix (cudnn_attention_unsupported) are a
// one-line usage error before any graph is built; a graph that no engine of
// the installed cuDNN runs (heuristic modes A, B, then fallback) is one too,
// with cuDNN's own last error; both suggest --attention flash. Without cuDNN
// in the build (no LLMC_CUDNN) cudnn_attention_available() is 0 and the
// trainer refuses --attention cudnn.
#ifndef LLMC_ATTENTION_CUDNN_CUH
#define LLMC_ATTENTION_CUDNN_CUH

#include "cuda_common.cuh"  // defines: CUDNN_CHECK, CUDA_CHECK, cudaMallocCheck
#include "model.h"          // defines: GPTConfig

#ifdef LLMC_CUDNN
#include <cudnn.h>
#include <float.h>

#define CUDNN_MAX_PLANS 8                  // (B, T, direction): training, evaluation, sampling
#define CUDNN_ENGINE_WORKSPACE ((size_t)64 << 20)  // a plan wanting more is refused with a message

typedef struct {
    int B, T, backward;
    cudnnBackendDescriptor_t plan;
    int64_t workspace_bytes;
} CudnnPlan;

typedef struct {
    int enabled;
    cudnnHandle_t handle;
    int C, NH;
    CudnnPlan plans[CUDNN_MAX_PLANS];
    int num_plans;
    void *workspace;       // the engines' own workspace
    size_t workspace_cap;
    float *dq_accum;       // (B,NH,T,hs) fp32 accumulator of dq
    size_t dq_accum_bytes;
    float scale, neg_inf, one;  // by-value scalars: read from here at execution (neg_inf: the mask's fill)
    char why[512];              // why the last plan could not be made
} CudnnAttention;

static inline int cudnn_attention_available(void) { return 1; }

// Device memory the cuDNN path takes for micro-batches of B x T: the engines'
// workspace and the fp32 dq accumulator.
static inline size_t cudnn_attention_workspace_bytes(const GPTConfig *cfg, int B, int T) {
    return CUDNN_ENGINE_WORKSPACE + sizeof(float) * (size_t)B * T * cfg->channels;
}

// backend descriptor helpers
static inline cudnnBackendDescriptor_t cd_create(cudnnBackendDescriptorType_t type) {
    cudnnBackendDescriptor_t d;
    CUDNN_CHECK(cudnnBackendCreateDescriptor(type, &d));
    return d;
}
static inline void cd_set(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t a, cudnnBackendAttributeType_t t,
                          int64_t n, const void *v) {
    cudnnStatus_t st = cudnnBackendSetAttribute(d, a, t, n, v);
    if (st != CUDNN_STATUS_SUCCESS)
        DIE("cuDNN error %d (%s): cudnnBackendSetAttribute(attribute %d, type %d, count %lld)", (int)st,
            cudnnGetErrorString(st), (int)a, (int)t, (long long)n);
}
// what, id: which descriptor, for the error message (a tensor's uid, a pointwise mode)
static inline void cd_finalize(cudnnBackendDescriptor_t d, const char *what, long long id) {
    cudnnStatus_t st = cudnnBackendFinalize(d);
    if (st != CUDNN_STATUS_SUCCESS)
        DIE("cuDNN error %d (%s): cudnnBackendFinalize(%s %lld)", (int)st, cudnnGetErrorString(st), what, id);
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
    cd_finalize(d, "tensor uid", uid);
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
    cd_finalize(pw, "pointwise descriptor, mode", mode);
    cudnnBackendDescriptor_t op = cd_create(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    cd_set(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw);
    cd_set(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
    if (b) cd_set(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b);
    if (t) cd_set(op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t);
    cd_set(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
    cd_finalize(op, "pointwise operation, mode", mode);
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
    cd_finalize(op, "reduction operation, op", red);
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

static cudnnBackendDescriptor_t cd_reshape(cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y) {
    cudnnBackendDescriptor_t op = cd_create(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
    cd_set(op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
    cd_set(op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
    CUDNN_CHECK(cudnnBackendFinalize(op));
    return op;
}

// Tensor unique ids (the variant pack's keys); virtual tensors count up from 100.
enum { CD_Q = 1, CD_K, CD_V, CD_O, CD_STATS, CD_SCALE, CD_NEG_INF, CD_DO, CD_DQ, CD_DK, CD_DV, CD_SOFTMAX_SUM,
       CD_DQ_ACCUM, CD_ONE };

// Every descriptor of one graph, destroyed together once the plan is made.
typedef struct {
    cudnnBackendDescriptor_t tensors[48], ops[32];
    int nt, nops;
    int64_t next_virtual;
} CdGraph;

static inline cudnnBackendDescriptor_t cdg_tensor(CdGraph *g, int64_t uid, cudnnDataType_t dt, const int64_t dims[4],
                                                  const int64_t strides[4], bool by_value) {
    CHECK(g->nt < 48, "too many tensors in the attention graph");
    bool is_virtual = uid == 0;
    return g->tensors[g->nt++] = cd_tensor(is_virtual ? g->next_virtual++ : uid, dt, dims, strides, is_virtual, by_value);
}
static inline void cdg_op(CdGraph *g, cudnnBackendDescriptor_t op) {
    CHECK(g->nops < 32, "too many operations in the attention graph");
    g->ops[g->nops++] = op;
}

// The scaled scores scale * (Q @ K^T), as (B,NH,T,T) fp32.
static cudnnBackendDescriptor_t cdg_scaled_scores(CdGraph *g, cudnnBackendDescriptor_t q, cudnnBackendDescriptor_t kt,
                                                  cudnnBackendDescriptor_t scale, const int64_t sdim[4],
                                                  const int64_t s_str[4]) {
    cudnnDataType_t F = CUDNN_DATA_FLOAT;
    cudnnBackendDescriptor_t s = cdg_tensor(g, 0, F, sdim, s_str, false);
    cudnnBackendDescriptor_t s_scaled = cdg_tensor(g, 0, F, sdim, s_str, false);
    cdg_op(g, cd_matmul(q, kt, s));
    cdg_op(g, cd_pointwise(CUDNN_POINTWISE_MUL, F, s, scale, NULL, s_scaled, -1));
    return s_scaled;
}

// The causal mask of x (B,NH,T,T): (row >= col) ? x : neg_inf, as cudnn-frontend's
// causal_mask builds it (a diagonal band with right bound 0, top-left aligned,
// in its composite form for cuDNN < 9.21): the row and column indices of x
// (GEN_INDEX at the graph's compute precision, int32 out), row >= col, select.
static cudnnBackendDescriptor_t cdg_causal_mask(CdGraph *g, cudnnBackendDescriptor_t x,
                                                cudnnBackendDescriptor_t neg_inf, const int64_t sdim[4],
                                                const int64_t s_str[4]) {
    cudnnDataType_t F = CUDNN_DATA_FLOAT, I = CUDNN_DATA_INT32, BO = CUDNN_DATA_BOOLEAN;
    cudnnBackendDescriptor_t row = cdg_tensor(g, 0, I, sdim, s_str, false);
    cudnnBackendDescriptor_t col = cdg_tensor(g, 0, I, sdim, s_str, false);
    cudnnBackendDescriptor_t keep = cdg_tensor(g, 0, BO, sdim, s_str, false);
    cudnnBackendDescriptor_t masked = cdg_tensor(g, 0, F, sdim, s_str, false);
    cdg_op(g, cd_pointwise(CUDNN_POINTWISE_GEN_INDEX, F, x, NULL, NULL, row, 2));
    cdg_op(g, cd_pointwise(CUDNN_POINTWISE_GEN_INDEX, F, x, NULL, NULL, col, 3));
    cdg_op(g, cd_pointwise(CUDNN_POINTWISE_CMP_GE, BO, row, col, NULL, keep, -1));
    cdg_op(g, cd_pointwise(CUDNN_POINTWISE_BINARY_SELECT, F, x, neg_inf, keep, masked, -1));
    return masked;
}

static void cd_graph_free(CdGraph *g) {
    for (int i = 0; i < g->nops; i++) CUDNN_CHECK(cudnnBackendDestroyDescriptor(g->ops[i]));
    for (int i = 0; i < g->nt; i++) CUDNN_CHECK(cudnnBackendDestroyDescriptor(g->tensors[i]));
    memset(g, 0, sizeof(*g));
}

// g's operations as a finalized operation graph in *out (CUDNN_STATUS_SUCCESS)
// or the status cuDNN rejected it with. handle may be NULL: the graph is then
// checked without a device (no engine can be chosen for it).
static cudnnStatus_t cd_operation_graph(cudnnHandle_t handle, CdGraph *g, cudnnBackendDescriptor_t *out) {
    // the handle attribute is marked deprecated in the cuDNN 9 headers but still required: set by value
    const cudnnBackendAttributeName_t graph_handle = (cudnnBackendAttributeName_t)800;  // OPERATIONGRAPH_HANDLE
    cudnnBackendDescriptor_t graph = cd_create(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    cd_set(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, g->nops, g->ops);
    if (handle) cd_set(graph, graph_handle, CUDNN_TYPE_HANDLE, 1, &handle);
    cudnnStatus_t st = cudnnBackendFinalize(graph);
    if (st == CUDNN_STATUS_SUCCESS) *out = graph;
    else CUDNN_CHECK(cudnnBackendDestroyDescriptor(graph));
    return st;
}

// The heuristic modes tried in turn until one offers an engine config that
// finalizes into a plan: A (fast, most graph patterns), B (more accurate, more
// CPU time), FALLBACK (functional fallbacks) -- cuDNN Developer Guide, Graph
// API, "Heuristics".
static const cudnnBackendHeurMode_t cd_heur_modes[] = {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_B, CUDNN_HEUR_MODE_FALLBACK};

// The first of mode's engine configs for graph that finalizes into a plan
// (with its workspace size in *workspace), or NULL; *ncfg += configs tried. A
// mode whose heuristic fails for the graph offers none (as cudnn-frontend's
// get_heuristics_list goes on to the next mode).
static cudnnBackendDescriptor_t cd_plan_from_heuristic(cudnnHandle_t handle, cudnnBackendDescriptor_t graph,
                                                       cudnnBackendHeurMode_t mode, int64_t *workspace,
                                                       int64_t *ncfg) {
    const cudnnBackendAttributeName_t plan_handle = (cudnnBackendAttributeName_t)400;  // EXECUTION_PLAN_HANDLE
    cudnnBackendDescriptor_t heur = cd_create(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR), found = NULL;
    cd_set(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph);
    cd_set(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
    cudnnBackendDescriptor_t cfgs[8];
    for (int i = 0; i < 8; i++) cfgs[i] = cd_create(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    int64_t n = 0;
    if (cudnnBackendFinalize(heur) != CUDNN_STATUS_SUCCESS ||
        cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 8, &n, cfgs) !=
            CUDNN_STATUS_SUCCESS)
        n = 0;
    if (n > 8) n = 8;  // n is the heuristic's total count; only 8 were written
    for (int64_t i = 0; i < n && !found; i++) {
        cudnnBackendDescriptor_t plan = cd_create(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
        cd_set(plan, plan_handle, CUDNN_TYPE_HANDLE, 1, &handle);
        cd_set(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfgs[i]);
        if (cudnnBackendFinalize(plan) == CUDNN_STATUS_SUCCESS) {
            int64_t one = 0;
            CUDNN_CHECK(cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1,
                                                 &one, workspace));
            found = plan;
        } else {
            CUDNN_CHECK(cudnnBackendDestroyDescriptor(plan));
        }
    }
    *ncfg += n;
    for (int i = 0; i < 8; i++) CUDNN_CHECK(cudnnBackendDestroyDescriptor(cfgs[i]));
    CUDNN_CHECK(cudnnBackendDestroyDescriptor(heur));
    return found;
}

// Graph -> heuristics (cd_heur_modes in turn) -> the first engine config that
// finalizes, into *out; frees g. NULL, or why the installed cuDNN cannot run
// the graph (a message in ca->why, with cuDNN's last error: the caller decides
// whether that ends the program).
static const char *cudnn_make_plan(CudnnAttention *ca, CdGraph *g, int B, int T, int backward, CudnnPlan *out) {
    const char *what = backward ? "backward" : "forward";
    cudnnBackendDescriptor_t graph;
    memset(out, 0, sizeof(*out));
    cudnnStatus_t st = cd_operation_graph(ca->handle, g, &graph);
    if (st != CUDNN_STATUS_SUCCESS) {
        cd_graph_free(g);
        snprintf(ca->why, sizeof(ca->why), "cuDNN %d rejects the attention %s graph (%s)", CUDNN_VERSION, what,
                 cudnnGetErrorString(st));
        return ca->why;
    }
    out->B = B;
    out->T = T;
    out->backward = backward;
    int64_t ncfg = 0;
    for (size_t m = 0; m < sizeof(cd_heur_modes) / sizeof(cd_heur_modes[0]) && !out->plan; m++)
        out->plan = cd_plan_from_heuristic(ca->handle, graph, cd_heur_modes[m], &out->workspace_bytes, &ncfg);
    CUDNN_CHECK(cudnnBackendDestroyDescriptor(graph));
    cd_graph_free(g);
    if (!out->plan) {
        char last[256] = "";
        cudnnGetLastErrorString(last, sizeof(last));
        snprintf(ca->why, sizeof(ca->why), "no cuDNN %d engine runs the attention %s graph (B=%d T=%d C=%d NH=%d; "
                 "heuristic modes A, B and fallback offered %lld configs)%s%s", CUDNN_VERSION, what, B, T, ca->C,
                 ca->NH, (long long)ncfg, last[0] ? ": " : "", last);
        return ca->why;
    }
    if ((size_t)out->workspace_bytes > ca->workspace_cap) {
        snprintf(ca->why, sizeof(ca->why), "the %s engine wants %lld bytes of workspace, more than the %zu reserved",
                 what, (long long)out->workspace_bytes, ca->workspace_cap);
        CUDNN_CHECK(cudnnBackendDestroyDescriptor(out->plan));
        out->plan = NULL;
        return ca->why;
    }
    return NULL;
}

// Why cuDNN's fused attention cannot train (forward and backward) at head
// size hs and sequence length T on a GPU of compute capability sm (86 for
// 8.6) with cuDNN `version` (cudnnGetVersion()); NULL when it can. The rules
// are the fp16/bf16 rows of cuDNN's SDPA support matrix (cuDNN frontend
// documentation, "Attention", "Support Matrix": SM80 or newer; head dim <= 128
// for the backward on Ampere/Ada, <= 256 on Hopper) and the checks
// cudnn-frontend makes before it builds the graphs (CompositeSDPABackwardNode::
// pre_validate_node: head dim a multiple of 8; <= 256 on sm_9x from frontend
// 1.8, the release for cuDNN 9.5, <= 128 on the others; s_q = s_kv = 1 not
// supported, as cuDNN 9's release notes list; cuDNN 9.10.0 and 9.10.1 refused
// for known bugs); the backward's limits are the narrower ones. The other
// requirement, unit stride on the head dimension of Q, K, V, O and their
// gradients, holds by construction (cd_shapes). (cudnn-frontend's padding-mask
// workaround for s_kv not a multiple of 128 on cuDNN <= 9.15 is for an invalid
// access in CUDA graph replay, its 1.16 release notes say: no graphs here.)
static inline const char *cudnn_attention_unsupported(int sm, int hs, int T, long version, char *why, size_t n) {
    int max_hs = sm / 10 == 9 && version >= 90500 ? 256 : 128;
    if (sm < 80)
        snprintf(why, n, "cuDNN's fused attention needs compute capability 8.0 or newer; this GPU has %d.%d", sm / 10,
                 sm % 10);
    else if (hs % 8 != 0)
        snprintf(why, n, "head size %d (n-embd / n-head) is not a multiple of 8, as cuDNN's fused attention needs", hs);
    else if (hs > max_hs)
        snprintf(why, n, "head size %d is over %d, cuDNN %ld's limit for the attention backward on compute "
                 "capability %d.%d", hs, max_hs, version, sm / 10, sm % 10);
    else if (T < 2)
        snprintf(why, n, "sequence length %d: cuDNN's attention backward does not take a sequence of one", T);
    else if (version == 91000 || version == 91001)
        snprintf(why, n, "cuDNN %ld has known bugs in the bf16 attention backward; use 9.10.2 or newer", version);
    else
        return NULL;
    return why;
}

// Shapes shared by both graphs, in (B, NH, T, hs) order.
typedef struct {
    int64_t qdim[4], qkv_str[4], ktdim[4], kt_str[4], o_str[4], sdim[4], s_str[4], rdim[4], r_str[4], one[4], packed[4];
} CdShapes;

static CdShapes cd_shapes(const CudnnAttention *ca, int B, int T) {
    int64_t C = ca->C, NH = ca->NH, hs = C / NH, b = B, t = T;
    CdShapes s = {{b, NH, t, hs}, {t * 3 * C, hs, 3 * C, 1}, {b, NH, hs, t}, {t * 3 * C, hs, 1, 3 * C},
                  {t * C, hs, C, 1}, {b, NH, t, t}, {NH * t * t, t * t, t, 1}, {b, NH, t, 1}, {NH * t, t, 1, 1},
                  {1, 1, 1, 1}, {NH * t * hs, t * hs, hs, 1}};
    return s;
}

// Forward: S = causal(scale * Q @ K^T); m = max(S); E = exp(S - m); s = sum(E);
// stats = m + log(s); P = E / s (floatX); O = P @ V.
static void cd_graph_forward(const CudnnAttention *ca, CdGraph *g, int B, int T) {
    CdShapes d = cd_shapes(ca, B, T);
    cudnnDataType_t F = CUDNN_DATA_FLOAT, BF = CUDNN_DATA_FLOATX;
    memset(g, 0, sizeof(*g));
    g->next_virtual = 100;
    cudnnBackendDescriptor_t q = cdg_tensor(g, CD_Q, BF, d.qdim, d.qkv_str, false);
    cudnnBackendDescriptor_t kt = cdg_tensor(g, CD_K, BF, d.ktdim, d.kt_str, false);
    cudnnBackendDescriptor_t v = cdg_tensor(g, CD_V, BF, d.qdim, d.qkv_str, false);
    cudnnBackendDescriptor_t o = cdg_tensor(g, CD_O, BF, d.qdim, d.o_str, false);
    cudnnBackendDescriptor_t stats = cdg_tensor(g, CD_STATS, F, d.rdim, d.r_str, false);
    cudnnBackendDescriptor_t scale = cdg_tensor(g, CD_SCALE, F, d.one, d.one, true);
    cudnnBackendDescriptor_t neg_inf = cdg_tensor(g, CD_NEG_INF, F, d.one, d.one, true);
    cudnnBackendDescriptor_t s = cdg_causal_mask(g, cdg_scaled_scores(g, q, kt, scale, d.sdim, d.s_str), neg_inf,
                                                 d.sdim, d.s_str);
    cudnnBackendDescriptor_t mx = cdg_tensor(g, 0, F, d.rdim, d.r_str, false);
    cudnnBackendDescriptor_t s_sub = cdg_tensor(g, 0, F, d.sdim, d.s_str, false);
    cudnnBackendDescriptor_t e = cdg_tensor(g, 0, F, d.sdim, d.s_str, false);
    cudnnBackendDescriptor_t sum = cdg_tensor(g, 0, F, d.rdim, d.r_str, false);
    cudnnBackendDescriptor_t logsum = cdg_tensor(g, 0, F, d.rdim, d.r_str, false);
    cudnnBackendDescriptor_t p = cdg_tensor(g, 0, BF, d.sdim, d.s_str, false);
    cdg_op(g, cd_reduction(CUDNN_REDUCE_TENSOR_MAX, s, mx));
    cdg_op(g, cd_pointwise(CUDNN_POINTWISE_SUB, F, s, mx, NULL, s_sub, -1));
    cdg_op(g, cd_pointwise(CUDNN_POINTWISE_EXP, F, s_sub, NULL, NULL, e, -1));
    cdg_op(g, cd_reduction(CUDNN_REDUCE_TENSOR_ADD, e, sum));
    cdg_op(g, cd_pointwise(CUDNN_POINTWISE_LOG, F, sum, NULL, NULL, logsum, -1));
    cdg_op(g, cd_pointwise(CUDNN_POINTWISE_ADD, F, mx, logsum, NULL, stats, -1));
    cdg_op(g, cd_pointwise(CUDNN_POINTWISE_DIV, F, e, sum, NULL, p, -1));
    cdg_op(g, cd_matmul(p, v, o));
}

// Backward: softmax_sum = rowsum(dO * O); P = exp(causal(scale * Q @ K^T - stats));
// dV = P^T @ dO; dS = scale * P * (dO @ V^T - softmax_sum); dK = dS^T @ Q;
// dQ = dS @ K (accumulated in an fp32 buffer, then written as floatX). The mask
// comes after the statistics are subtracted, as the current cudnn-frontend's
// CompositeSDPABackwardNode builds it (1.0.3 masked before).
static void cd_graph_backward(const CudnnAttention *ca, CdGraph *g, int B, int T) {
    CdShapes d = cd_shapes(ca, B, T);
    cudnnDataType_t F = CUDNN_DATA_FLOAT, BF = CUDNN_DATA_FLOATX;
    int64_t t = T, NH = ca->NH;
    const int64_t st_str[4] = {NH * t * t, t * t, 1, t};  // a (T,T) matrix read transposed
    memset(g, 0, sizeof(*g));
    g->next_virtual = 100;
    cudnnBackendDescriptor_t q = cdg_tensor(g, CD_Q, BF, d.qdim, d.qkv_str, false);
    cudnnBackendDescriptor_t kt = cdg_tensor(g, CD_K, BF, d.ktdim, d.kt_str, false);
    cudnnBackendDescriptor_t vt = cdg_tensor(g, CD_V, BF, d.ktdim, d.kt_str, false);
    cudnnBackendDescriptor_t o = cdg_tensor(g, CD_O, BF, d.qdim, d.o_str, false);
    cudnnBackendDescriptor_t stats = cdg_tensor(g, CD_STATS, F, d.rdim, d.r_str, false);
    cudnnBackendDescriptor_t scale = cdg_tensor(g, CD_SCALE, F, d.one, d.one, true);
    cudnnBackendDescriptor_t neg_inf = cdg_tensor(g, CD_NEG_INF, F, d.one, d.one, true);
    cudnnBackendDescriptor_t one = cdg_tensor(g, CD_ONE, F, d.one, d.one, true);
    cudnnBackendDescriptor_t dout = cdg_tensor(g, CD_DO, BF, d.qdim, d.o_str, false);
    cudnnBackendDescriptor_t dq = cdg_tensor(g, CD_DQ, BF, d.qdim, d.qkv_str, false);
    cudnnBackendDescriptor_t dk = cdg_tensor(g, CD_DK, BF, d.qdim, d.qkv_str, false);
    cudnnBackendDescriptor_t dv = cdg_tensor(g, CD_DV, BF, d.qdim, d.qkv_str, false);
    cudnnBackendDescriptor_t softmax_sum = cdg_tensor(g, CD_SOFTMAX_SUM, F, d.rdim, d.r_str, false);
    cudnnBackendDescriptor_t dq_accum = cdg_tensor(g, CD_DQ_ACCUM, F, d.qdim, d.packed, false);
    // softmax_sum = rowsum(dO * O)
    cudnnBackendDescriptor_t doo = cdg_tensor(g, 0, F, d.qdim, d.packed, false);
    cudnnBackendDescriptor_t rowsum = cdg_tensor(g, 0, F, d.rdim, d.r_str, false);
    cdg_op(g, cd_pointwise(CUDNN_POINTWISE_MUL, F, dout, o, NULL, doo, -1));
    cdg_op(g, cd_reduction(CUDNN_REDUCE_TENSOR_ADD, doo, rowsum));
    cdg_op(g, cd_pointwise(CUDNN_POINTWISE_MUL, F, rowsum, one, NULL, softmax_sum, -1));
    // P = exp(causal(S - stats)); dV = P^T @ dO
    cudnnBackendDescriptor_t s = cdg_scaled_scores(g, q, kt, scale, d.sdim, d.s_str);
    cudnnBackendDescriptor_t s_sub = cdg_tensor(g, 0, F, d.sdim, d.s_str, false);
    cdg_op(g, cd_pointwise(CUDNN_POINTWISE_SUB, F, s, stats, NULL, s_sub, -1));
    cudnnBackendDescriptor_t s_masked = cdg_causal_mask(g, s_sub, neg_inf, d.sdim, d.s_str);
    cudnnBackendDescriptor_t p = cdg_tensor(g, 0, F, d.sdim, d.s_str, false);
    cudnnBackendDescriptor_t pt = cdg_tensor(g, 0, BF, d.sdim, st_str, false);
    cdg_op(g, cd_pointwise(CUDNN_POINTWISE_EXP, F, s_masked, NULL, NULL, p, -1));
    cdg_op(g, cd_reshape(p, pt));
    cdg_op(g, cd_matmul(pt, dout, dv));
    // dS = scale * P * (dO @ V^T - softmax_sum)
    cudnnBackendDescriptor_t dp = cdg_tensor(g, 0, F, d.sdim, d.s_str, false);
    cudnnBackendDescriptor_t dp_sub = cdg_tensor(g, 0, F, d.sdim, d.s_str, false);
    cudnnBackendDescriptor_t ds_unscaled = cdg_tensor(g, 0, F, d.sdim, d.s_str, false);
    cudnnBackendDescriptor_t ds = cdg_tensor(g, 0, F, d.sdim, d.s_str, false);
    cudnnBackendDescriptor_t dst = cdg_tensor(g, 0, BF, d.sdim, st_str, false);
    cdg_op(g, cd_matmul(dout, vt, dp));
    cdg_op(g, cd_pointwise(CUDNN_POINTWISE_SUB, F, dp, softmax_sum, NULL, dp_sub, -1));
    cdg_op(g, cd_pointwise(CUDNN_POINTWISE_MUL, F, dp_sub, p, NULL, ds_unscaled, -1));
    cdg_op(g, cd_pointwise(CUDNN_POINTWISE_MUL, F, ds_unscaled, scale, NULL, ds, -1));
    // dK = dS^T @ Q; dQ = dS @ K
    cdg_op(g, cd_reshape(ds, dst));
    cdg_op(g, cd_matmul(dst, q, dk));
    cudnnBackendDescriptor_t k = cdg_tensor(g, 0, BF, d.qdim, d.qkv_str, false);
    cdg_op(g, cd_reshape(kt, k));
    cdg_op(g, cd_matmul(ds, k, dq_accum));
    cdg_op(g, cd_pointwise(CUDNN_POINTWISE_IDENTITY, F, dq_accum, NULL, NULL, dq, -1));
}

static void cd_graph_build(const CudnnAttention *ca, CdGraph *g, int B, int T, int backward) {
    if (backward) cd_graph_backward(ca, g, B, T);
    else cd_graph_forward(ca, g, B, T);
}

// The cached plan for (B, T, direction), built on first use; NULL (the reason
// in ca->why) when the installed cuDNN cannot run it.
static CudnnPlan *cudnn_plan_try(CudnnAttention *ca, int B, int T, int backward) {
    for (int i = 0; i < ca->num_plans; i++)
        if (ca->plans[i].B == B && ca->plans[i].T == T && ca->plans[i].backward == backward) return &ca->plans[i];
    CHECK(ca->num_plans < CUDNN_MAX_PLANS, "more than %d attention plans", CUDNN_MAX_PLANS);
    CdGraph g;
    cd_graph_build(ca, &g, B, T, backward);
    if (cudnn_make_plan(ca, &g, B, T, backward, &ca->plans[ca->num_plans])) return NULL;
    return &ca->plans[ca->num_plans++];
}
// The same, where a plan cuDNN cannot run ends the program with one line.
static CudnnPlan *cudnn_plan_for(CudnnAttention *ca, int B, int T, int backward) {
    CudnnPlan *p = cudnn_plan_try(ca, B, T, backward);
    if (!p) die_usage("--attention cudnn: %s; use --attention flash", ca->why);
    return p;
}

// Builds both attention graphs for (C, NH, B, T) and finalizes them without a
// handle: every descriptor and attribute is checked by the installed cuDNN,
// with no device (no engine is chosen). NULL when both pass, else which failed.
static inline const char *cudnn_attention_check_graphs(int C, int NH, int B, int T) {
    CudnnAttention ca;
    memset(&ca, 0, sizeof(ca));
    ca.C = C;
    ca.NH = NH;
    for (int backward = 0; backward < 2; backward++) {
        CdGraph g;
        cd_graph_build(&ca, &g, B, T, backward);
        cudnnBackendDescriptor_t graph;
        cudnnStatus_t st = cd_operation_graph(NULL, &g, &graph);
        cd_graph_free(&g);
        if (st != CUDNN_STATUS_SUCCESS) return backward ? "backward graph" : "forward graph";
        CUDNN_CHECK(cudnnBackendDestroyDescriptor(graph));
    }
    return NULL;
}

static void cudnn_execute(CudnnAttention *ca, CudnnPlan *p, const int64_t *uids, void **ptrs, int n, cudaStream_t s) {
    CUDNN_CHECK(cudnnSetStream(ca->handle, s));
    cudnnBackendDescriptor_t vp = cd_create(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
    cd_set(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids);
    cd_set(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, ptrs);
    cd_set(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ca->workspace);
    CUDNN_CHECK(cudnnBackendFinalize(vp));
    CUDNN_CHECK(cudnnBackendExecute(ca->handle, p->plan, vp));
    CUDNN_CHECK(cudnnBackendDestroyDescriptor(vp));
}

static inline void cudnn_attention_free(CudnnAttention *ca) {
    if (!ca->enabled) return;
    for (int i = 0; i < ca->num_plans; i++) CUDNN_CHECK(cudnnBackendDestroyDescriptor(ca->plans[i].plan));
    CUDA_CHECK(cudaFree(ca->workspace));
    CUDA_CHECK(cudaFree(ca->dq_accum));
    CUDNN_CHECK(cudnnDestroy(ca->handle));
    memset(ca, 0, sizeof(*ca));
}

// Sets up cuDNN attention for micro-batches of B x T and builds both plans.
// NULL, or why the installed cuDNN cannot run them (then ca is left disabled;
// the text lasts until the next call).
static inline const char *cudnn_attention_try_init(CudnnAttention *ca, const GPTConfig *cfg, int B, int T) {
    static char why[sizeof(ca->why)];
    memset(ca, 0, sizeof(*ca));
    int dev = 0;
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
    if (cudnn_attention_unsupported(prop.major * 10 + prop.minor, cfg->channels / cfg->num_heads, T,
                                    (long)cudnnGetVersion(), why, sizeof(why)))
        return why;
    ca->enabled = 1;
    CUDNN_CHECK(cudnnCreate(&ca->handle));
    ca->C = cfg->channels;
    ca->NH = cfg->num_heads;
    ca->scale = 1.0f / sqrtf((float)(cfg->channels / cfg->num_heads));
    // cudnn-frontend's fill for masked scores: the lowest float before cuDNN 9.10, -inf from it
    // (utils/attn_score_modifiers.h, get_negative_inf_value)
    ca->neg_inf = cudnnGetVersion() < 91000 ? -FLT_MAX : -INFINITY;
    ca->one = 1.0f;
    ca->dq_accum_bytes = sizeof(float) * (size_t)B * T * cfg->channels;
    ca->workspace_cap = CUDNN_ENGINE_WORKSPACE;
    ca->dq_accum = (float *)cudaMallocCheck(ca->dq_accum_bytes);
    ca->workspace = cudaMallocCheck(ca->workspace_cap);
    if (cudnn_plan_try(ca, B, T, 0) && cudnn_plan_try(ca, B, T, 1)) return NULL;
    snprintf(why, sizeof(why), "%s", ca->why);
    cudnn_attention_free(ca);
    return why;
}

// The same for the trainer: a plan cuDNN cannot run ends the program with one
// line, before training starts. enabled 0: nothing is set up.
static inline void cudnn_attention_init(CudnnAttention *ca, const GPTConfig *cfg, int B, int T, int enabled) {
    memset(ca, 0, sizeof(*ca));
    if (!enabled) return;
    const char *why = cudnn_attention_try_init(ca, cfg, B, T);
    if (why) die_usage("--attention cudnn: %s; use --attention flash", why);
}

// out (B,T,C), lse (B,NH,T) from qkv (B,T,3C).
static inline void gpu_cudnn_attention_forward(CudnnAttention *ca, floatX *out, float *lse, const floatX *qkv, int B,
                                               int T, int C, int NH, cudaStream_t s) {
    CHECK(ca->enabled && C == ca->C && NH == ca->NH, "cuDNN attention not set up for C=%d NH=%d", C, NH);
    int64_t uids[] = {CD_Q, CD_K, CD_V, CD_O, CD_STATS, CD_SCALE, CD_NEG_INF};
    void *ptrs[] = {(void *)qkv, (void *)(qkv + C), (void *)(qkv + 2 * C), out, lse, &ca->scale, &ca->neg_inf};
    cudnn_execute(ca, cudnn_plan_for(ca, B, T, 0), uids, ptrs, 7, s);
}

// dqkv (B,T,3C) overwritten; delta: (B,NH,T) floats of scratch (the softmax row sums).
static inline void gpu_cudnn_attention_backward(CudnnAttention *ca, floatX *dqkv, float *delta, const floatX *dout,
                                                const floatX *qkv, const floatX *out, const float *lse, int B, int T,
                                                int C, int NH, cudaStream_t s) {
    CHECK(ca->enabled && C == ca->C && NH == ca->NH, "cuDNN attention not set up for C=%d NH=%d", C, NH);
    CHECK(sizeof(float) * (size_t)B * T * C <= ca->dq_accum_bytes, "attention batch %d x %d over capacity", B, T);
    CudnnPlan *p = cudnn_plan_for(ca, B, T, 1);
    CUDA_CHECK(cudaMemsetAsync(ca->dq_accum, 0, sizeof(float) * (size_t)B * T * C, s));
    int64_t uids[] = {CD_Q, CD_K, CD_V, CD_O, CD_STATS, CD_SCALE, CD_NEG_INF, CD_DO, CD_DQ, CD_DK, CD_DV,
                      CD_SOFTMAX_SUM, CD_DQ_ACCUM, CD_ONE};
    void *ptrs[] = {(void *)qkv, (void *)(qkv + C), (void *)(qkv + 2 * C), (void *)out, (void *)lse, &ca->scale,
                    &ca->neg_inf, (void *)dout, dqkv, dqkv + C, dqkv + 2 * C, delta, ca->dq_accum, &ca->one};
    cudnn_execute(ca, p, uids, ptrs, 14, s);
}

#else  // no cuDNN in the build

typedef struct {
    int enabled;
} CudnnAttention;

static inline int cudnn_attention_available(void) { return 0; }
static inline size_t cudnn_attention_workspace_bytes(const GPTConfig *cfg, int B, int T) {
    (void)cfg; (void)B; (void)T;
    return 0;
}
static inline void cudnn_attention_init(CudnnAttention *ca, const GPTConfig *cfg, int B, int T, int enabled) {
    (void)cfg; (void)B; (void)T;
    CHECK(!enabled, "cuDNN attention requested in a build without cuDNN");
    ca->enabled = 0;
}
static inline void cudnn_attention_free(CudnnAttention *ca) { ca->enabled = 0; }
static inline const char *cudnn_attention_try_init(CudnnAttention *ca, const GPTConfig *cfg, int B, int T) {
    (void)cfg; (void)B; (void)T;
    ca->enabled = 0;
    return "cuDNN is not in this build";
}
static inline void gpu_cudnn_attention_forward(CudnnAttention *ca, floatX *out, float *lse, const floatX *qkv, int B,
                                               int T, int C, int NH, cudaStream_t s) {
    (void)ca; (void)out; (void)lse; (void)qkv; (void)B; (void)T; (void)C; (void)NH; (void)s;
    DIE("cuDNN attention is not in this build");
}
static inline void gpu_cudnn_attention_backward(CudnnAttention *ca, floatX *dqkv, float *delta, const floatX *dout,
                                                const floatX *qkv, const floatX *out, const float *lse, int B, int T,
                                                int C, int NH, cudaStream_t s) {
    (void)ca; (void)dqkv; (void)delta; (void)dout; (void)qkv; (void)out; (void)lse; (void)B; (void)T; (void)C;
    (void)NH; (void)s;
    DIE("cuDNN attention is not in this build");
}

#endif  // LLMC_CUDNN

#endif  // LLMC_ATTENTION_CUDNN_CUH
