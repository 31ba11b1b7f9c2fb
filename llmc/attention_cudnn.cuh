// attention_cudnn.cuh: causal attention, forward and backward, through cuDNN's
// fused attention, built with the backend C API (cudnnBackend* descriptors,
// no C++ frontend). Same tensors as attention_flash.cuh: qkv (B,T,3C) in, out
// (B,T,C) and lse (B,NH,T) saved (cuDNN's softmax statistics are the same
// log-sum-exp of the scaled scores, so either backward runs on either
// forward's outputs); the backward writes dqkv (B,T,3C). With query offsets
// (a context-parallel rank's rows, FaQueries of attention_flash.cuh) each
// query segment is one graph of its s_q queries against the s_kv = pos + s_q
// keys up to its end, the causal mask bottom-right aligned (query i sees keys
// <= i + s_kv - s_q), dK and dV written in floatX into a scratch and added in
// fp32: gpu_cudnn_attention_forward_queries / _backward_queries.
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

#include "attention_flash.cuh"  // defines: FaQueries
#include "cuda_common.cuh"      // defines: CUDNN_CHECK, CUDA_CHECK, cudaMallocCheck, launch_kernel, ceil_div_int, CUDA_CHECK_LAUNCH, to_float
#include "model.h"              // defines: GPTConfig

#ifdef LLMC_CUDNN
#include <cudnn.h>
#include <float.h>

// (shape, direction): training, evaluation, sampling; context parallel: a rank's two query segments
#define CUDNN_MAX_PLANS 8
#define CUDNN_ENGINE_WORKSPACE ((size_t)64 << 20)  // a plan wanting more is refused with a message

// What one graph runs: B sequences of s_q queries against s_kv keys, the
// causal mask top-left aligned (query i sees keys <= i) or bottom_right (the
// queries are the last s_q positions of the s_kv: query i sees keys <= i +
// s_kv - s_q), read through strides: Q, dQ (3C channels a row) and O, dO (C)
// in buffers of q_rows rows a sequence, the statistics (B,NH,q_rows); K, V,
// dK, dV in buffers of kv_rows rows of kv_stride elements a sequence.
typedef struct {
    int B, s_q, s_kv, q_rows, kv_rows, bottom_right;
    int64_t kv_stride;
} CdShape;

static inline CdShape cd_shape_whole(int B, int T, int C) {
    CdShape s = {B, T, T, T, T, 0, 3 * (int64_t)C};
    return s;
}
static inline bool cd_shape_equal(const CdShape *a, const CdShape *b) {
    return a->B == b->B && a->s_q == b->s_q && a->s_kv == b->s_kv && a->q_rows == b->q_rows &&
           a->kv_rows == b->kv_rows && a->bottom_right == b->bottom_right && a->kv_stride == b->kv_stride;
}

typedef struct {
    CdShape shape;
    int backward;
    cudnnBackendDescriptor_t plan;
    int64_t workspace_bytes;
    int32_t seq_q, seq_kv;  // the bottom-right mask's by-value s_q, s_kv (read at execution)
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
       CD_DQ_ACCUM, CD_ONE, CD_SEQ_Q, CD_SEQ_KV };

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

// The causal mask of the scores x (B,NH,s_q,s_kv): x where the row may see
// the column, else neg_inf, as cudnn-frontend builds it in its composite form
// for cuDNN < 9.21 (utils/attn_score_modifiers.h: causal_mask and
// causal_mask_bottom_right, both sliding_window_mask with a right bound of 0;
// node/diagonal_band_mask.h: CompositeDiagonalBandMaskNode::expand_node): the
// row and column indices of x (GEN_INDEX at the graph's compute precision,
// int32 out); bottom-right aligned (seq: s_kv and s_q, by-value int32
// scalars, NULL for top-left), the row index + s_kv, then - s_q (pointwise
// ADD and SUB at int32 with axis 3, as the node sets them); row >= column;
// select. Top-left: query i sees keys <= i; bottom-right: keys <= i + s_kv -
// s_q (the same when s_q = s_kv).
static cudnnBackendDescriptor_t cdg_causal_mask(CdGraph *g, cudnnBackendDescriptor_t x,
                                                cudnnBackendDescriptor_t neg_inf, const cudnnBackendDescriptor_t *seq,
                                                const int64_t sdim[4], const int64_t s_str[4]) {
    cudnnDataType_t F = CUDNN_DATA_FLOAT, I = CUDNN_DATA_INT32, BO = CUDNN_DATA_BOOLEAN;
    cudnnBackendDescriptor_t row = cdg_tensor(g, 0, I, sdim, s_str, false);
    cudnnBackendDescriptor_t col = cdg_tensor(g, 0, I, sdim, s_str, false);
    cudnnBackendDescriptor_t keep = cdg_tensor(g, 0, BO, sdim, s_str, false);
    cudnnBackendDescriptor_t masked = cdg_tensor(g, 0, F, sdim, s_str, false);
    cdg_op(g, cd_pointwise(CUDNN_POINTWISE_GEN_INDEX, F, x, NULL, NULL, row, 2));
    cdg_op(g, cd_pointwise(CUDNN_POINTWISE_GEN_INDEX, F, x, NULL, NULL, col, 3));
    if (seq) {  // row + s_kv - s_q
        cudnnBackendDescriptor_t row_skv = cdg_tensor(g, 0, I, sdim, s_str, false);
        cudnnBackendDescriptor_t row_shifted = cdg_tensor(g, 0, I, sdim, s_str, false);
        cdg_op(g, cd_pointwise(CUDNN_POINTWISE_ADD, I, row, seq[1], NULL, row_skv, 3));
        cdg_op(g, cd_pointwise(CUDNN_POINTWISE_SUB, I, row_skv, seq[0], NULL, row_shifted, 3));
        row = row_shifted;
    }
    cdg_op(g, cd_pointwise(CUDNN_POINTWISE_CMP_GE, BO, row, col, NULL, keep, -1));
    cdg_op(g, cd_pointwise(CUDNN_POINTWISE_BINARY_SELECT, F, x, neg_inf, keep, masked, -1));
    return masked;
}
// The by-value s_q, s_kv of a bottom-right mask (into seq[2]); NULL for top-left.
static const cudnnBackendDescriptor_t *cdg_mask_seq(CdGraph *g, const CdShape *sh, const int64_t one[4],
                                                    cudnnBackendDescriptor_t seq[2]) {
    if (!sh->bottom_right) return NULL;
    seq[0] = cdg_tensor(g, CD_SEQ_Q, CUDNN_DATA_INT32, one, one, true);
    seq[1] = cdg_tensor(g, CD_SEQ_KV, CUDNN_DATA_INT32, one, one, true);
    return seq;
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
static const char *cudnn_make_plan(CudnnAttention *ca, CdGraph *g, const CdShape *sh, int backward,
                                   CudnnPlan *out) {
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
    out->shape = *sh;
    out->backward = backward;
    out->seq_q = sh->s_q;
    out->seq_kv = sh->s_kv;
    int64_t ncfg = 0;
    for (size_t m = 0; m < sizeof(cd_heur_modes) / sizeof(cd_heur_modes[0]) && !out->plan; m++)
        out->plan = cd_plan_from_heuristic(ca->handle, graph, cd_heur_modes[m], &out->workspace_bytes, &ncfg);
    CUDNN_CHECK(cudnnBackendDestroyDescriptor(graph));
    cd_graph_free(g);
    if (!out->plan) {
        char last[256] = "";
        cudnnGetLastErrorString(last, sizeof(last));
        snprintf(ca->why, sizeof(ca->why), "no cuDNN %d engine runs the attention %s graph (B=%d s_q=%d s_kv=%d "
                 "C=%d NH=%d; heuristic modes A, B and fallback offered %lld configs)%s%s", CUDNN_VERSION, what,
                 sh->B, sh->s_q, sh->s_kv, ca->C, ca->NH, (long long)ncfg, last[0] ? ": " : "", last);
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
// size hs, s_q queries against s_kv keys (bottom_right: the causal mask's
// alignment) on a GPU of compute capability sm (86 for 8.6) with cuDNN `version`
// (cudnnGetVersion()); NULL when it can. The rules are the fp16/bf16 rows of
// cuDNN's SDPA support matrix (cuDNN frontend documentation, "Attention",
// "Support Matrix": SM80 or newer; head dim <= 128 for the backward on
// Ampere/Ada, <= 256 on Hopper) and the checks cudnn-frontend makes before it
// builds the graphs (CompositeSDPABackwardNode::pre_validate_node: head dim a
// multiple of 8; <= 256 on sm_9x from frontend 1.8, the release for cuDNN 9.5,
// <= 128 on the others; s_q = s_kv = 1 not supported, as cuDNN 9's release
// notes list; cuDNN 9.10.0 and 9.10.1 refused for known bugs; the bottom-right
// causal mask not with s_q > s_kv, and below cuDNN 9.6.0 only with s_q and
// s_kv multiples of 64 -- also SDPA_attributes::validate_sdpa_support_surface,
// node/sdpa_support_surface.h); the backward's limits are the narrower ones.
// The other requirement, unit stride on the head dimension of Q, K, V, O and
// their gradients, holds by construction (cd_shapes). (cudnn-frontend's
// padding-mask workaround for s_kv not a multiple of 128 on cuDNN <= 9.15 is
// for an invalid access in CUDA graph replay, its 1.16 release notes say: no
// graphs here.)
static inline const char *cudnn_attention_unsupported(int sm, int hs, int s_q, int s_kv, int bottom_right,
                                                      long version, char *why, size_t n) {
    int max_hs = sm / 10 == 9 && version >= 90500 ? 256 : 128;
    if (sm < 80)
        snprintf(why, n, "cuDNN's fused attention needs compute capability 8.0 or newer; this GPU has %d.%d", sm / 10,
                 sm % 10);
    else if (hs % 8 != 0)
        snprintf(why, n, "head size %d (n-embd / n-head) is not a multiple of 8, as cuDNN's fused attention needs", hs);
    else if (hs > max_hs)
        snprintf(why, n, "head size %d is over %d, cuDNN %ld's limit for the attention backward on compute "
                 "capability %d.%d", hs, max_hs, version, sm / 10, sm % 10);
    else if (s_q < 2 && s_kv < 2)
        snprintf(why, n, "sequence length %d: cuDNN's attention backward does not take a sequence of one", s_q);
    else if (bottom_right && s_q > s_kv)
        snprintf(why, n, "%d queries against %d keys: cuDNN's bottom-right causal mask takes no more queries than "
                 "keys", s_q, s_kv);
    else if (bottom_right && version < 90600 && (s_q % 64 != 0 || s_kv % 64 != 0))
        snprintf(why, n, "%d queries against %d keys: cuDNN %ld's bottom-right causal mask takes multiples of 64 "
                 "only (9.6.0 or newer takes any)", s_q, s_kv, version);
    else if (version == 91000 || version == 91001)
        snprintf(why, n, "cuDNN %ld has known bugs in the bf16 attention backward; use 9.10.2 or newer", version);
    else
        return NULL;
    return why;
}

// Dims and strides of both graphs' tensors, in (B, NH, rows, hs) order: Q,
// dQ, O, dO (qdim; qkv_str, o_str); K, V, dK, dV (kvdim, kv_str) and K^T, V^T
// (ktdim, kt_str); the scores (sdim, s_str) and their transpose (stdim,
// st_str); the statistics (rdim, r_str: rows of q_rows) and softmax sums
// (sum_str: packed (B,NH,s_q)); a scalar (one); an fp32 (B,NH,s_q,hs) buffer
// (packed).
typedef struct {
    int64_t qdim[4], qkv_str[4], o_str[4], kvdim[4], kv_str[4], ktdim[4], kt_str[4], sdim[4], s_str[4], stdim[4],
        st_str[4], rdim[4], r_str[4], sum_str[4], one[4], packed[4];
} CdShapes;

static CdShapes cd_shapes(const CudnnAttention *ca, const CdShape *sh) {
    int64_t C = ca->C, NH = ca->NH, hs = C / NH, b = sh->B, sq = sh->s_q, skv = sh->s_kv, tq = sh->q_rows,
            tk = sh->kv_rows, kvs = sh->kv_stride;
    CdShapes s = {{b, NH, sq, hs}, {tq * 3 * C, hs, 3 * C, 1}, {tq * C, hs, C, 1},
                  {b, NH, skv, hs}, {tk * kvs, hs, kvs, 1}, {b, NH, hs, skv}, {tk * kvs, hs, 1, kvs},
                  {b, NH, sq, skv}, {NH * sq * skv, sq * skv, skv, 1}, {b, NH, skv, sq}, {NH * sq * skv, sq * skv, 1, skv},
                  {b, NH, sq, 1}, {NH * tq, tq, 1, 1}, {NH * sq, sq, 1, 1}, {1, 1, 1, 1}, {NH * sq * hs, sq * hs, hs, 1}};
    return s;
}

// Forward: S = causal(scale * Q @ K^T); m = max(S); E = exp(S - m); s = sum(E);
// stats = m + log(s); P = E / s (floatX); O = P @ V.
static void cd_graph_forward(const CudnnAttention *ca, CdGraph *g, const CdShape *sh) {
    CdShapes d = cd_shapes(ca, sh);
    cudnnDataType_t F = CUDNN_DATA_FLOAT, BF = CUDNN_DATA_FLOATX;
    memset(g, 0, sizeof(*g));
    g->next_virtual = 100;
    cudnnBackendDescriptor_t q = cdg_tensor(g, CD_Q, BF, d.qdim, d.qkv_str, false);
    cudnnBackendDescriptor_t kt = cdg_tensor(g, CD_K, BF, d.ktdim, d.kt_str, false);
    cudnnBackendDescriptor_t v = cdg_tensor(g, CD_V, BF, d.kvdim, d.kv_str, false);
    cudnnBackendDescriptor_t o = cdg_tensor(g, CD_O, BF, d.qdim, d.o_str, false);
    cudnnBackendDescriptor_t stats = cdg_tensor(g, CD_STATS, F, d.rdim, d.r_str, false);
    cudnnBackendDescriptor_t scale = cdg_tensor(g, CD_SCALE, F, d.one, d.one, true);
    cudnnBackendDescriptor_t neg_inf = cdg_tensor(g, CD_NEG_INF, F, d.one, d.one, true);
    cudnnBackendDescriptor_t seq[2];
    const cudnnBackendDescriptor_t *mask_seq = cdg_mask_seq(g, sh, d.one, seq);
    cudnnBackendDescriptor_t s = cdg_causal_mask(g, cdg_scaled_scores(g, q, kt, scale, d.sdim, d.s_str), neg_inf,
                                                 mask_seq, d.sdim, d.s_str);
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
static void cd_graph_backward(const CudnnAttention *ca, CdGraph *g, const CdShape *sh) {
    CdShapes d = cd_shapes(ca, sh);
    cudnnDataType_t F = CUDNN_DATA_FLOAT, BF = CUDNN_DATA_FLOATX;
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
    cudnnBackendDescriptor_t seq[2];
    const cudnnBackendDescriptor_t *mask_seq = cdg_mask_seq(g, sh, d.one, seq);
    cudnnBackendDescriptor_t dout = cdg_tensor(g, CD_DO, BF, d.qdim, d.o_str, false);
    cudnnBackendDescriptor_t dq = cdg_tensor(g, CD_DQ, BF, d.qdim, d.qkv_str, false);
    cudnnBackendDescriptor_t dk = cdg_tensor(g, CD_DK, BF, d.kvdim, d.kv_str, false);
    cudnnBackendDescriptor_t dv = cdg_tensor(g, CD_DV, BF, d.kvdim, d.kv_str, false);
    cudnnBackendDescriptor_t softmax_sum = cdg_tensor(g, CD_SOFTMAX_SUM, F, d.rdim, d.sum_str, false);
    cudnnBackendDescriptor_t dq_accum = cdg_tensor(g, CD_DQ_ACCUM, F, d.qdim, d.packed, false);
    // softmax_sum = rowsum(dO * O)
    cudnnBackendDescriptor_t doo = cdg_tensor(g, 0, F, d.qdim, d.packed, false);
    cudnnBackendDescriptor_t rowsum = cdg_tensor(g, 0, F, d.rdim, d.sum_str, false);
    cdg_op(g, cd_pointwise(CUDNN_POINTWISE_MUL, F, dout, o, NULL, doo, -1));
    cdg_op(g, cd_reduction(CUDNN_REDUCE_TENSOR_ADD, doo, rowsum));
    cdg_op(g, cd_pointwise(CUDNN_POINTWISE_MUL, F, rowsum, one, NULL, softmax_sum, -1));
    // P = exp(causal(S - stats)); dV = P^T @ dO
    cudnnBackendDescriptor_t s = cdg_scaled_scores(g, q, kt, scale, d.sdim, d.s_str);
    cudnnBackendDescriptor_t s_sub = cdg_tensor(g, 0, F, d.sdim, d.s_str, false);
    cdg_op(g, cd_pointwise(CUDNN_POINTWISE_SUB, F, s, stats, NULL, s_sub, -1));
    cudnnBackendDescriptor_t s_masked = cdg_causal_mask(g, s_sub, neg_inf, mask_seq, d.sdim, d.s_str);
    cudnnBackendDescriptor_t p = cdg_tensor(g, 0, F, d.sdim, d.s_str, false);
    cudnnBackendDescriptor_t pt = cdg_tensor(g, 0, BF, d.stdim, d.st_str, false);
    cdg_op(g, cd_pointwise(CUDNN_POINTWISE_EXP, F, s_masked, NULL, NULL, p, -1));
    cdg_op(g, cd_reshape(p, pt));
    cdg_op(g, cd_matmul(pt, dout, dv));
    // dS = scale * P * (dO @ V^T - softmax_sum)
    cudnnBackendDescriptor_t dp = cdg_tensor(g, 0, F, d.sdim, d.s_str, false);
    cudnnBackendDescriptor_t dp_sub = cdg_tensor(g, 0, F, d.sdim, d.s_str, false);
    cudnnBackendDescriptor_t ds_unscaled = cdg_tensor(g, 0, F, d.sdim, d.s_str, false);
    cudnnBackendDescriptor_t ds = cdg_tensor(g, 0, F, d.sdim, d.s_str, false);
    cudnnBackendDescriptor_t dst = cdg_tensor(g, 0, BF, d.stdim, d.st_str, false);
    cdg_op(g, cd_matmul(dout, vt, dp));
    cdg_op(g, cd_pointwise(CUDNN_POINTWISE_SUB, F, dp, softmax_sum, NULL, dp_sub, -1));
    cdg_op(g, cd_pointwise(CUDNN_POINTWISE_MUL, F, dp_sub, p, NULL, ds_unscaled, -1));
    cdg_op(g, cd_pointwise(CUDNN_POINTWISE_MUL, F, ds_unscaled, scale, NULL, ds, -1));
    // dK = dS^T @ Q; dQ = dS @ K
    cdg_op(g, cd_reshape(ds, dst));
    cdg_op(g, cd_matmul(dst, q, dk));
    cudnnBackendDescriptor_t k = cdg_tensor(g, 0, BF, d.kvdim, d.kv_str, false);
    cdg_op(g, cd_reshape(kt, k));
    cdg_op(g, cd_matmul(ds, k, dq_accum));
    cdg_op(g, cd_pointwise(CUDNN_POINTWISE_IDENTITY, F, dq_accum, NULL, NULL, dq, -1));
}

static void cd_graph_build(const CudnnAttention *ca, CdGraph *g, const CdShape *sh, int backward) {
    if (backward) cd_graph_backward(ca, g, sh);
    else cd_graph_forward(ca, g, sh);
}

// The cached plan for (shape, direction), built on first use; NULL (the
// reason in ca->why) when the installed cuDNN cannot run it.
static CudnnPlan *cudnn_plan_try(CudnnAttention *ca, const CdShape *sh, int backward) {
    for (int i = 0; i < ca->num_plans; i++)
        if (cd_shape_equal(&ca->plans[i].shape, sh) && ca->plans[i].backward == backward) return &ca->plans[i];
    CHECK(ca->num_plans < CUDNN_MAX_PLANS, "more than %d attention plans", CUDNN_MAX_PLANS);
    CdGraph g;
    cd_graph_build(ca, &g, sh, backward);
    if (cudnn_make_plan(ca, &g, sh, backward, &ca->plans[ca->num_plans])) return NULL;
    return &ca->plans[ca->num_plans++];
}
// The same, where a plan cuDNN cannot run ends the program with one line.
static CudnnPlan *cudnn_plan_for(CudnnAttention *ca, const CdShape *sh, int backward) {
    CudnnPlan *p = cudnn_plan_try(ca, sh, backward);
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
    const CdShape sh = cd_shape_whole(B, T, C);
    for (int backward = 0; backward < 2; backward++) {
        CdGraph g;
        cd_graph_build(&ca, &g, &sh, backward);
        cudnnBackendDescriptor_t graph;
        cudnnStatus_t st = cd_operation_graph(NULL, &g, &graph);
        cd_graph_free(&g);
        if (st != CUDNN_STATUS_SUCCESS) return backward ? "backward graph" : "forward graph";
        CUDNN_CHECK(cudnnBackendDestroyDescriptor(graph));
    }
    return NULL;
}

// Runs plan p with the variant pack uids/ptrs (n of them), plus the
// bottom-right mask's s_q and s_kv when its graph has them.
static void cudnn_execute(CudnnAttention *ca, CudnnPlan *p, int64_t *uids, void **ptrs, int n, cudaStream_t s) {
    if (p->shape.bottom_right) {
        uids[n] = CD_SEQ_Q, ptrs[n++] = &p->seq_q;
        uids[n] = CD_SEQ_KV, ptrs[n++] = &p->seq_kv;
    }
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

// The device's compute capability (86 for 8.6).
static inline int cd_device_sm(void) {
    int dev = 0;
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
    return prop.major * 10 + prop.minor;
}

// Sets up cuDNN attention for micro-batches of B x T (the rows of Q a
// sequence) and, with plans set, builds both plans of the whole sequence (the
// query-segment ones are built by cudnn_attention_plan_queries). NULL, or why
// the installed cuDNN cannot run them (then ca is left disabled; the text
// lasts until the next call).
static inline const char *cudnn_attention_setup(CudnnAttention *ca, const GPTConfig *cfg, int B, int T, int plans) {
    static char why[sizeof(ca->why)];
    memset(ca, 0, sizeof(*ca));
    if (plans && cudnn_attention_unsupported(cd_device_sm(), cfg->channels / cfg->num_heads, T, T, 0,
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
    const CdShape whole = cd_shape_whole(B, T, ca->C);
    if (!plans || (cudnn_plan_try(ca, &whole, 0) && cudnn_plan_try(ca, &whole, 1))) return NULL;
    snprintf(why, sizeof(why), "%s", ca->why);
    cudnn_attention_free(ca);
    return why;
}
static inline const char *cudnn_attention_try_init(CudnnAttention *ca, const GPTConfig *cfg, int B, int T) {
    return cudnn_attention_setup(ca, cfg, B, T, 1);
}

// The same for the trainer: a plan cuDNN cannot run ends the program with one
// line, before training starts. enabled 0: nothing is set up. cp > 1: T is a
// context rank's rows, whose plans (query segments) cudnn_attention_plan_queries
// builds once the rank's positions are known.
static inline void cudnn_attention_init(CudnnAttention *ca, const GPTConfig *cfg, int B, int T, int enabled, int cp) {
    memset(ca, 0, sizeof(*ca));
    if (!enabled) return;
    const char *why = cudnn_attention_setup(ca, cfg, B, T, cp <= 1);
    if (why) die_usage("--attention cudnn: %s; use --attention flash", why);
}

// Query segment s of qry against the keys up to its end: s_q = len, s_kv =
// pos + len, bottom-right (at pos 0 the same mask as top-left: one graph form).
static inline CdShape cd_shape_segment(const FaQueries &qry, int s, int B, int Tq, int Tk, int64_t kvs) {
    CdShape sh = {B, qry.len[s], qry.pos[s] + qry.len[s], Tq, Tk, 1, kvs};
    return sh;
}

// Why (NULL: it can) cuDNN cannot run the segments of qry, checked as
// cudnn_attention_unsupported does, then both plans of each built: the plans
// gpu_cudnn_attention_forward_queries / _backward_queries run (same arguments).
// Every tensor here is declared 16-byte aligned (cudnn-frontend's default,
// graph_properties.h: Tensor_attributes::alignment), so a segment's rows of
// the statistics (lse + row, fp32) must start on 16 bytes: row a multiple of 4.
static inline const char *cudnn_attention_try_plan_queries(CudnnAttention *ca, int B, int Tq, int Tk, int64_t kvs,
                                                           const FaQueries &qry) {
    for (int s = 0; s < qry.n; s++) {
        const CdShape sh = cd_shape_segment(qry, s, B, Tq, Tk, kvs);
        if (qry.row[s] % 4 != 0) {
            snprintf(ca->why, sizeof(ca->why), "a query segment at row %d: its statistics would not start on the "
                     "16 bytes cuDNN's tensors are declared aligned to (context parallel: seq-len / (2 x cp) = %d is "
                     "not a multiple of 4)", qry.row[s], qry.row[s]);
            return ca->why;
        }
        if (cudnn_attention_unsupported(cd_device_sm(), ca->C / ca->NH, sh.s_q, sh.s_kv, 1, (long)cudnnGetVersion(),
                                        ca->why, sizeof(ca->why)) ||
            !cudnn_plan_try(ca, &sh, 0) || !cudnn_plan_try(ca, &sh, 1))
            return ca->why;
    }
    return NULL;
}
// Sets up cuDNN attention for query segments qry of B x Tq rows (as
// cudnn_attention_try_init, the plans those of the segments). NULL, or why the
// installed cuDNN cannot run them (ca left disabled; the text lasts until the
// next call).
static inline const char *cudnn_attention_try_init_queries(CudnnAttention *ca, const GPTConfig *cfg, int B, int Tq,
                                                           int Tk, int64_t kvs, const FaQueries &qry) {
    static char why[sizeof(ca->why)];
    cudnn_attention_setup(ca, cfg, B, Tq, 0);  // (no plans: nothing to refuse yet)
    const char *no = cudnn_attention_try_plan_queries(ca, B, Tq, Tk, kvs, qry);
    if (!no) return NULL;
    snprintf(why, sizeof(why), "%s", no);
    cudnn_attention_free(ca);
    return why;
}
// The same for the trainer: a segment cuDNN cannot run ends the program with one line.
static inline void cudnn_attention_plan_queries(CudnnAttention *ca, int B, int Tq, int Tk, int64_t kvs,
                                                const FaQueries &qry) {
    const char *why = cudnn_attention_try_plan_queries(ca, B, Tq, Tk, kvs, qry);
    if (why) die_usage("--attention cudnn: %s; use --attention flash", why);
}

// out (B,T,C), lse (B,NH,T) from qkv (B,T,3C).
static inline void gpu_cudnn_attention_forward(CudnnAttention *ca, floatX *out, float *lse, const floatX *qkv, int B,
                                               int T, int C, int NH, cudaStream_t s) {
    CHECK(ca->enabled && C == ca->C && NH == ca->NH, "cuDNN attention not set up for C=%d NH=%d", C, NH);
    const CdShape whole = cd_shape_whole(B, T, C);
    int64_t uids[9] = {CD_Q, CD_K, CD_V, CD_O, CD_STATS, CD_SCALE, CD_NEG_INF};
    void *ptrs[9] = {(void *)qkv, (void *)(qkv + C), (void *)(qkv + 2 * C), out, lse, &ca->scale, &ca->neg_inf};
    cudnn_execute(ca, cudnn_plan_for(ca, &whole, 0), uids, ptrs, 7, s);
}

// dq, dk, dv overwritten through the plan's strides; the fp32 dq accumulator
// zeroed first; delta: (B,NH,s_q) floats of scratch (the softmax sums).
static void cudnn_backward_run(CudnnAttention *ca, const CdShape *sh, floatX *dq, floatX *dk, floatX *dv,
                               float *delta, const floatX *dout, const floatX *q, const floatX *k, const floatX *v,
                               const floatX *out, const float *lse, cudaStream_t s) {
    size_t accum = sizeof(float) * (size_t)sh->B * sh->s_q * ca->C;
    CHECK(accum <= ca->dq_accum_bytes, "attention batch %d x %d over capacity", sh->B, sh->s_q);
    CudnnPlan *p = cudnn_plan_for(ca, sh, 1);
    CUDA_CHECK(cudaMemsetAsync(ca->dq_accum, 0, accum, s));
    int64_t uids[16] = {CD_Q, CD_K, CD_V, CD_O, CD_STATS, CD_SCALE, CD_NEG_INF, CD_DO, CD_DQ, CD_DK, CD_DV,
                        CD_SOFTMAX_SUM, CD_DQ_ACCUM, CD_ONE};
    void *ptrs[16] = {(void *)q, (void *)k, (void *)v, (void *)out, (void *)lse, &ca->scale, &ca->neg_inf,
                      (void *)dout, dq, dk, dv, delta, ca->dq_accum, &ca->one};
    cudnn_execute(ca, p, uids, ptrs, 14, s);
}

// dqkv (B,T,3C) overwritten; delta: (B,NH,T) floats of scratch (the softmax row sums).
static inline void gpu_cudnn_attention_backward(CudnnAttention *ca, floatX *dqkv, float *delta, const floatX *dout,
                                                const floatX *qkv, const floatX *out, const float *lse, int B, int T,
                                                int C, int NH, cudaStream_t s) {
    CHECK(ca->enabled && C == ca->C && NH == ca->NH, "cuDNN attention not set up for C=%d NH=%d", C, NH);
    const CdShape whole = cd_shape_whole(B, T, C);
    cudnn_backward_run(ca, &whole, dqkv, dqkv + C, dqkv + 2 * C, delta, dout, qkv, qkv + C, qkv + 2 * C, out, lse,
                       s);
}

// The query segments qry of qkv (B,Tq,3C; the q channels read) against the
// keys and values kv (B,Tk,kvs: k | v, 2C channels of each row), as
// gpu_flash_attention_forward_queries: out (B,Tq,C), lse (B,NH,Tq) of the
// segments' rows. One graph a segment: its len queries against the pos + len
// keys before them (bottom-right mask), every view strided.
static inline void gpu_cudnn_attention_forward_queries(CudnnAttention *ca, floatX *out, float *lse, const floatX *qkv,
                                                       int Tq, const floatX *kv, int64_t kvs, int Tk,
                                                       const FaQueries &qry, int B, int C, int NH, cudaStream_t s) {
    CHECK(ca->enabled && C == ca->C && NH == ca->NH, "cuDNN attention not set up for C=%d NH=%d", C, NH);
    for (int k = 0; k < qry.n; k++) {
        const CdShape sh = cd_shape_segment(qry, k, B, Tq, Tk, kvs);
        const int r = qry.row[k];
        int64_t uids[9] = {CD_Q, CD_K, CD_V, CD_O, CD_STATS, CD_SCALE, CD_NEG_INF};
        void *ptrs[9] = {(void *)(qkv + (int64_t)r * 3 * C), (void *)kv, (void *)(kv + C), out + (int64_t)r * C,
                         lse + r, &ca->scale, &ca->neg_inf};
        cudnn_execute(ca, cudnn_plan_for(ca, &sh, 0), uids, ptrs, 7, s);
    }
}

// dkv (B,Tk,2C fp32) = scratch (B,Tk,kvs floatX: dk | dv)'s first `rows` rows of
// each sequence, added (set 0) or set (set 1, the rows after them zeroed).
__global__ void cudnn_dkv_merge_kernel(float *dkv, const floatX *scratch, int64_t kvs, int Tk, int rows, int C2,
                                       int set, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int64_t row = i / C2;
    int t = (int)(row % Tk);
    float g = t < rows ? to_float(scratch[row * kvs + i % C2]) : 0.0f;
    dkv[i] = set ? g : dkv[i] + g;
}

// The backward of gpu_cudnn_attention_forward_queries, as
// gpu_flash_attention_backward_queries: dq into qkv's rows' q channels of
// dqkv (B,Tq,3C), every key's dk | dv from these queries into dkv (B,Tk,2C)
// fp32 (overwritten); delta: (B,NH,Tq) floats of scratch. cuDNN writes each
// segment's dK and dV of its keys in the I/O type, overwriting (the fp16/bf16
// backward's dK and dV are of Q's type: cuDNN frontend documentation,
// "Attention", the backward's tensors; no fp32 output is documented), into
// scratch (B,Tk,kvs floatX, laid out as kv); each is then added in fp32 into
// dkv, the longest prefix first, setting every row.
static inline void gpu_cudnn_attention_backward_queries(CudnnAttention *ca, floatX *dqkv, float *dkv, floatX *scratch,
                                                        float *delta, const floatX *dout, const floatX *qkv, int Tq,
                                                        const floatX *kv, int64_t kvs, int Tk, const FaQueries &qry,
                                                        const floatX *out, const float *lse, int B, int C, int NH,
                                                        cudaStream_t s) {
    CHECK(ca->enabled && C == ca->C && NH == ca->NH, "cuDNN attention not set up for C=%d NH=%d", C, NH);
    int order[2] = {0, 1};
    if (qry.n == 2 && qry.pos[1] < qry.pos[0]) order[0] = 1, order[1] = 0;
    const int64_t n = (int64_t)B * Tk * 2 * C;
    for (int k = 0; k < qry.n; k++) {
        const int seg = order[k], r = qry.row[seg];
        const CdShape sh = cd_shape_segment(qry, seg, B, Tq, Tk, kvs);
        cudnn_backward_run(ca, &sh, dqkv + (int64_t)r * 3 * C, scratch, scratch + C, delta, dout + (int64_t)r * C,
                           qkv + (int64_t)r * 3 * C, kv, kv + C, out + (int64_t)r * C, lse + r, s);
        launch_kernel(cudnn_dkv_merge_kernel, ceil_div_int(n, 256), 256, 0, s, dkv, (const floatX *)scratch, kvs, Tk,
                      sh.s_kv, 2 * C, k == 0 ? 1 : 0, n);
        CUDA_CHECK_LAUNCH();
    }
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
static inline void cudnn_attention_init(CudnnAttention *ca, const GPTConfig *cfg, int B, int T, int enabled, int cp) {
    (void)cfg; (void)B; (void)T; (void)cp;
    CHECK(!enabled, "cuDNN attention requested in a build without cuDNN");
    ca->enabled = 0;
}
static inline void cudnn_attention_plan_queries(CudnnAttention *ca, int B, int Tq, int Tk, int64_t kvs,
                                                const FaQueries &qry) {
    (void)ca; (void)B; (void)Tq; (void)Tk; (void)kvs; (void)qry;
    DIE("cuDNN attention is not in this build");
}
static inline const char *cudnn_attention_try_init_queries(CudnnAttention *ca, const GPTConfig *cfg, int B, int Tq,
                                                           int Tk, int64_t kvs, const FaQueries &qry) {
    (void)cfg; (void)B; (void)Tq; (void)Tk; (void)kvs; (void)qry;
    ca->enabled = 0;
    return "cuDNN is not in this build";
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
static inline void gpu_cudnn_attention_forward_queries(CudnnAttention *ca, floatX *out, float *lse, const floatX *qkv,
                                                       int Tq, const floatX *kv, int64_t kvs, int Tk,
                                                       const FaQueries &qry, int B, int C, int NH, cudaStream_t s) {
    (void)ca; (void)out; (void)lse; (void)qkv; (void)Tq; (void)kv; (void)kvs; (void)Tk; (void)qry; (void)B; (void)C;
    (void)NH; (void)s;
    DIE("cuDNN attention is not in this build");
}
static inline void gpu_cudnn_attention_backward_queries(CudnnAttention *ca, floatX *dqkv, float *dkv, floatX *scratch,
                                                        float *delta, const floatX *dout, const floatX *qkv, int Tq,
                                                        const floatX *kv, int64_t kvs, int Tk, const FaQueries &qry,
                                                        const floatX *out, const float *lse, int B, int C, int NH,
                                                        cudaStream_t s) {
    (void)ca; (void)dqkv; (void)dkv; (void)scratch; (void)delta; (void)dout; (void)qkv; (void)Tq; (void)kv; (void)kvs;
    (void)Tk; (void)qry; (void)out; (void)lse; (void)B; (void)C; (void)NH; (void)s;
    DIE("cuDNN attention is not in this build");
}

#endif  // LLMC_CUDNN

#endif  // LLMC_ATTENTION_CUDNN_CUH
