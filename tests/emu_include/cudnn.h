// cudnn.h for the emulated builds (tests/cuda_emulator.h; the Makefile puts
// tests/emu_include first on their include path, so llmc/attention_cudnn.cuh's
// #include <cudnn.h> lands here): the part of cuDNN's backend API that
// attention_cudnn.cuh uses, with an engine that takes only what cuDNN's fused
// attention engines take -- the forward and backward graphs cudnn-frontend
// builds, within the documented support matrix for the emulated device
// (LLMC_EMU_DEVICE_CC) -- and refuses anything else as the real heuristic and
// plan do, saying which rule broke (see "the fused attention engines" below).
// It runs a graph it takes node by node on the CPU, as the graph declares
// them, so that the graphs' meaning (strides, transposes, broadcasts, the
// causal mask top-left or bottom-right aligned, the statistics) is checked
// against the flash attention and the CPU model; the real cuDNN fuses the
// same graph into one kernel.
// Written from the backend API's documented rules:
//   - descriptors take attributes of the documented type only (a wrong type
//     or an attribute of another descriptor is CUDNN_STATUS_BAD_PARAM), and
//     nothing once finalized; finalizing checks what each needs;
//   - tensors are 4-D (dims, strides in elements, a unique id); virtual ones
//     live inside the graph, by-value ones are host scalars (fp32 or int32)
//     read when the plan is executed, the others device memory from the variant pack, at
//     least as aligned as their BYTE_ALIGNMENT says;
//   - pointwise y = mode(x[, b][, t]) with x, b, t broadcast to y's dims (a
//     dim of 1 or equal); GEN_INDEX y = the index along AXIS (which it needs;
//     cudnn-frontend also sets an AXIS on the ADD and SUB of its bottom-right
//     mask, which do not use it); CMP_GE y = x >= b; BINARY_SELECT
//     y = t ? x : b;
//   - reduction: y's dims are x's or 1, the dims of 1 are reduced;
//   - matmul: C (b, h, M, N) = A (b, h, M, K) @ B (b, h, K, N), fp32
//     accumulation, batch dims broadcast;
//   - reshape: y reads x's storage through y's own strides (a transpose is a
//     reshape with swapped strides);
//   - every write rounds to the tensor's type (bf16 round-to-nearest-even).
// An operation graph finalizes when every tensor an operation reads is
// non-virtual or written by another one, with no cycle; for a fused attention
// graph each heuristic mode (A, B, FALLBACK) offers one engine configuration,
// whose plan wants EMU_CUDNN_WORKSPACE bytes of workspace. cudnnBackendExecute queues the graph on the handle's stream
// (tests/cuda_runtime_emulator.h); a device tensor whose extent is not
// device memory, or a missing pointer, fails the test.
#ifndef LLMC_CUDNN_EMULATOR_H
#define LLMC_CUDNN_EMULATOR_H

#ifndef LLMC_CUDA_EMULATOR_H
#error "tests/emu_include/cudnn.h is the emulated builds' cuDNN (include tests/cuda_emulator.h first)"
#endif
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#define CUDNN_VERSION 91900  // the backend API of cuDNN 9.19, emulated
#define EMU_CUDNN_WORKSPACE ((int64_t)1 << 16)

typedef enum {
    CUDNN_STATUS_SUCCESS = 0,
    CUDNN_STATUS_NOT_INITIALIZED = 1001,
    CUDNN_STATUS_BAD_PARAM = 2000,
    CUDNN_STATUS_BAD_PARAM_NULL_POINTER = 2002,
    CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH = 2008,
    CUDNN_STATUS_NOT_SUPPORTED = 3000,
    CUDNN_STATUS_EXECUTION_FAILED = 5000,
} cudnnStatus_t;
typedef enum {
    CUDNN_BACKEND_POINTWISE_DESCRIPTOR = 0,
    CUDNN_BACKEND_ENGINECFG_DESCRIPTOR = 3,
    CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR = 4,
    CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR = 5,
    CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR = 13,
    CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR = 15,
    CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR = 16,
    CUDNN_BACKEND_TENSOR_DESCRIPTOR = 17,
    CUDNN_BACKEND_MATMUL_DESCRIPTOR = 18,
    CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR = 19,
    CUDNN_BACKEND_REDUCTION_DESCRIPTOR = 21,
    CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR = 22,
    CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR = 31,
} cudnnBackendDescriptorType_t;
typedef enum {
    CUDNN_ATTR_POINTWISE_MODE = 0,
    CUDNN_ATTR_POINTWISE_MATH_PREC = 1,
    CUDNN_ATTR_POINTWISE_AXIS = 9,
    CUDNN_ATTR_ENGINEHEUR_MODE = 200,
    CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH = 201,
    CUDNN_ATTR_ENGINEHEUR_RESULTS = 202,
    CUDNN_ATTR_EXECUTION_PLAN_HANDLE = 400,
    CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG = 401,
    CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE = 402,
    CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR = 750,
    CUDNN_ATTR_OPERATION_POINTWISE_XDESC = 751,
    CUDNN_ATTR_OPERATION_POINTWISE_BDESC = 752,
    CUDNN_ATTR_OPERATION_POINTWISE_YDESC = 753,
    CUDNN_ATTR_OPERATION_POINTWISE_TDESC = 758,
    CUDNN_ATTR_OPERATIONGRAPH_HANDLE = 800,
    CUDNN_ATTR_OPERATIONGRAPH_OPS = 801,
    CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT = 900,
    CUDNN_ATTR_TENSOR_DATA_TYPE = 901,
    CUDNN_ATTR_TENSOR_DIMENSIONS = 902,
    CUDNN_ATTR_TENSOR_STRIDES = 903,
    CUDNN_ATTR_TENSOR_UNIQUE_ID = 906,
    CUDNN_ATTR_TENSOR_IS_VIRTUAL = 907,
    CUDNN_ATTR_TENSOR_IS_BY_VALUE = 908,
    CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS = 1000,
    CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS = 1001,
    CUDNN_ATTR_VARIANT_PACK_WORKSPACE = 1003,
    CUDNN_ATTR_MATMUL_COMP_TYPE = 1500,
    CUDNN_ATTR_OPERATION_MATMUL_ADESC = 1520,
    CUDNN_ATTR_OPERATION_MATMUL_BDESC = 1521,
    CUDNN_ATTR_OPERATION_MATMUL_CDESC = 1522,
    CUDNN_ATTR_OPERATION_MATMUL_DESC = 1523,
    CUDNN_ATTR_REDUCTION_OPERATOR = 1600,
    CUDNN_ATTR_REDUCTION_COMP_TYPE = 1601,
    CUDNN_ATTR_OPERATION_REDUCTION_XDESC = 1610,
    CUDNN_ATTR_OPERATION_REDUCTION_YDESC = 1611,
    CUDNN_ATTR_OPERATION_REDUCTION_DESC = 1612,
    CUDNN_ATTR_OPERATION_RESHAPE_XDESC = 2200,
    CUDNN_ATTR_OPERATION_RESHAPE_YDESC = 2201,
} cudnnBackendAttributeName_t;
typedef enum {
    CUDNN_TYPE_HANDLE = 0,
    CUDNN_TYPE_DATA_TYPE = 1,
    CUDNN_TYPE_BOOLEAN = 2,
    CUDNN_TYPE_INT64 = 3,
    CUDNN_TYPE_VOID_PTR = 6,
    CUDNN_TYPE_HEUR_MODE = 8,
    CUDNN_TYPE_POINTWISE_MODE = 14,
    CUDNN_TYPE_BACKEND_DESCRIPTOR = 15,
    CUDNN_TYPE_REDUCTION_OPERATOR_TYPE = 18,
} cudnnBackendAttributeType_t;
typedef enum { CUDNN_DATA_FLOAT = 0, CUDNN_DATA_INT32 = 4, CUDNN_DATA_BFLOAT16 = 9, CUDNN_DATA_BOOLEAN = 11 } cudnnDataType_t;
typedef enum {
    CUDNN_POINTWISE_ADD = 0,
    CUDNN_POINTWISE_MUL = 1,
    CUDNN_POINTWISE_DIV = 6,
    CUDNN_POINTWISE_SUB = 9,
    CUDNN_POINTWISE_EXP = 13,
    CUDNN_POINTWISE_LOG = 15,
    CUDNN_POINTWISE_IDENTITY = 21,
    CUDNN_POINTWISE_CMP_GE = 303,
    CUDNN_POINTWISE_GEN_INDEX = 501,
    CUDNN_POINTWISE_BINARY_SELECT = 601,
} cudnnPointwiseMode_t;
typedef enum { CUDNN_REDUCE_TENSOR_ADD = 0, CUDNN_REDUCE_TENSOR_MAX = 3 } cudnnReduceTensorOp_t;
typedef enum {
    CUDNN_HEUR_MODE_INSTANT = 0,
    CUDNN_HEUR_MODE_B = 1,
    CUDNN_HEUR_MODE_FALLBACK = 2,
    CUDNN_HEUR_MODE_A = 3
} cudnnBackendHeurMode_t;

struct EmuCudnnHandle {
    cudaStream_t stream;
};
typedef EmuCudnnHandle *cudnnHandle_t;

static inline size_t cudnnGetVersion(void) { return CUDNN_VERSION; }
// "the last encountered cuDNN error message in the current thread" (cuDNN API
// reference, cudnnGetLastErrorString): here, why an engine refused a graph.
static thread_local std::string emu_cudnn_last_error;
static inline void cudnnGetLastErrorString(char *message, size_t max_size) {
    if (max_size) snprintf(message, max_size, "%s", emu_cudnn_last_error.c_str());
}

static inline const char *cudnnGetErrorString(cudnnStatus_t st) {
    switch (st) {
    case CUDNN_STATUS_SUCCESS: return "CUDNN_STATUS_SUCCESS";
    case CUDNN_STATUS_NOT_INITIALIZED: return "CUDNN_STATUS_NOT_INITIALIZED";
    case CUDNN_STATUS_BAD_PARAM: return "CUDNN_STATUS_BAD_PARAM";
    case CUDNN_STATUS_BAD_PARAM_NULL_POINTER: return "CUDNN_STATUS_BAD_PARAM_NULL_POINTER";
    case CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH: return "CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH";
    case CUDNN_STATUS_NOT_SUPPORTED: return "CUDNN_STATUS_NOT_SUPPORTED";
    case CUDNN_STATUS_EXECUTION_FAILED: return "CUDNN_STATUS_EXECUTION_FAILED";
    }
    return "CUDNN_STATUS_UNKNOWN";
}
static inline cudnnStatus_t cudnnCreate(cudnnHandle_t *h) {
    *h = new EmuCudnnHandle{nullptr};
    return CUDNN_STATUS_SUCCESS;
}
static inline cudnnStatus_t cudnnDestroy(cudnnHandle_t h) {
    delete h;
    return CUDNN_STATUS_SUCCESS;
}
static inline cudnnStatus_t cudnnSetStream(cudnnHandle_t h, cudaStream_t s) {
    if (!h) return CUDNN_STATUS_NOT_INITIALIZED;
    h->stream = s;
    return CUDNN_STATUS_SUCCESS;
}

// ---- the graph as the engine keeps it (copied out of the descriptors, which
// the caller may destroy once the plan is made)
struct EmuCudnnTensor {
    int64_t uid = 0, dims[4] = {0, 0, 0, 0}, strides[4] = {0, 0, 0, 0}, alignment = 0;  // (bytes)
    cudnnDataType_t type = CUDNN_DATA_FLOAT;
    bool is_virtual = false, by_value = false;
    int64_t extent() const {  // elements from the first to the last one addressed, + 1
        int64_t e = 1;
        for (int d = 0; d < 4; d++) e += (dims[d] - 1) * strides[d];
        return e;
    }
    int64_t offset(const int64_t idx[4]) const {
        return idx[0] * strides[0] + idx[1] * strides[1] + idx[2] * strides[2] + idx[3] * strides[3];
    }
    bool same(const EmuCudnnTensor &o) const {
        return uid == o.uid && type == o.type && is_virtual == o.is_virtual && by_value == o.by_value &&
               alignment == o.alignment &&
               !memcmp(dims, o.dims, sizeof(dims)) && !memcmp(strides, o.strides, sizeof(strides));
    }
};
enum EmuCudnnOpKind { EMU_CD_POINTWISE, EMU_CD_REDUCTION, EMU_CD_MATMUL, EMU_CD_RESHAPE };
struct EmuCudnnOp {
    EmuCudnnOpKind kind;
    cudnnPointwiseMode_t mode = CUDNN_POINTWISE_IDENTITY;
    int64_t axis = -1;
    cudnnReduceTensorOp_t reduce = CUDNN_REDUCE_TENSOR_ADD;
    std::vector<EmuCudnnTensor> in;  // pointwise: x[, b[, t]]; reduction, reshape: x; matmul: a, b
    EmuCudnnTensor out;
};
struct EmuCudnnGraph {
    std::vector<EmuCudnnOp> ops;             // in an order where each runs after what it reads is written
    std::map<int64_t, EmuCudnnTensor> outer; // the non-virtual tensors, by uid
};

struct EmuSdpa;  // (the fused attention engines, below)
struct EmuCudnnAttr {
    cudnnBackendAttributeType_t type;
    std::vector<unsigned char> bytes;
    int64_t count;
};
struct EmuCudnnDesc {
    cudnnBackendDescriptorType_t type;
    bool finalized = false;
    std::map<int, EmuCudnnAttr> attrs;
    EmuCudnnTensor tensor;                  // tensor
    EmuCudnnOp op;                          // operations
    std::shared_ptr<EmuCudnnGraph> graph;   // operation graph, engine config, plan
    std::shared_ptr<const EmuSdpa> sdpa;    // engine config, plan: the fused attention the graph is
    cudnnBackendHeurMode_t heur_mode = CUDNN_HEUR_MODE_A;  // engine heuristic
    cudnnHandle_t handle = nullptr;         // plan
};
typedef EmuCudnnDesc *cudnnBackendDescriptor_t;

static inline size_t emu_cudnn_type_size(cudnnBackendAttributeType_t t) {
    switch (t) {
    case CUDNN_TYPE_HANDLE: return sizeof(cudnnHandle_t);
    case CUDNN_TYPE_BOOLEAN: return sizeof(bool);
    case CUDNN_TYPE_INT64: return sizeof(int64_t);
    case CUDNN_TYPE_VOID_PTR: return sizeof(void *);
    case CUDNN_TYPE_BACKEND_DESCRIPTOR: return sizeof(cudnnBackendDescriptor_t);
    default: return 4;  // the enums
    }
}

// Which descriptor owns an attribute and the type it takes (the documented table).
struct EmuCudnnAttrRule {
    cudnnBackendAttributeName_t name;
    cudnnBackendDescriptorType_t owner;
    cudnnBackendAttributeType_t type;
};
static const EmuCudnnAttrRule emu_cudnn_attr_rules[] = {
    {CUDNN_ATTR_POINTWISE_MODE, CUDNN_BACKEND_POINTWISE_DESCRIPTOR, CUDNN_TYPE_POINTWISE_MODE},
    {CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_BACKEND_POINTWISE_DESCRIPTOR, CUDNN_TYPE_DATA_TYPE},
    {CUDNN_ATTR_POINTWISE_AXIS, CUDNN_BACKEND_POINTWISE_DESCRIPTOR, CUDNN_TYPE_INT64},
    {CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, CUDNN_TYPE_HEUR_MODE},
    {CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR},
    {CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, CUDNN_TYPE_HANDLE},
    {CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR},
    {CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR,
     CUDNN_TYPE_BACKEND_DESCRIPTOR},
    {CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR},
    {CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR},
    {CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR},
    {CUDNN_ATTR_OPERATION_POINTWISE_TDESC, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR},
    {CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, CUDNN_TYPE_HANDLE},
    {CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR},
    {CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_BACKEND_TENSOR_DESCRIPTOR, CUDNN_TYPE_INT64},
    {CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_BACKEND_TENSOR_DESCRIPTOR, CUDNN_TYPE_DATA_TYPE},
    {CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_BACKEND_TENSOR_DESCRIPTOR, CUDNN_TYPE_INT64},
    {CUDNN_ATTR_TENSOR_STRIDES, CUDNN_BACKEND_TENSOR_DESCRIPTOR, CUDNN_TYPE_INT64},
    {CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_BACKEND_TENSOR_DESCRIPTOR, CUDNN_TYPE_INT64},
    {CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_BACKEND_TENSOR_DESCRIPTOR, CUDNN_TYPE_BOOLEAN},
    {CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_BACKEND_TENSOR_DESCRIPTOR, CUDNN_TYPE_BOOLEAN},
    {CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, CUDNN_TYPE_INT64},
    {CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, CUDNN_TYPE_VOID_PTR},
    {CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, CUDNN_TYPE_VOID_PTR},
    {CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_BACKEND_MATMUL_DESCRIPTOR, CUDNN_TYPE_DATA_TYPE},
    {CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR},
    {CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR},
    {CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR},
    {CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR},
    {CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_BACKEND_REDUCTION_DESCRIPTOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE},
    {CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_BACKEND_REDUCTION_DESCRIPTOR, CUDNN_TYPE_DATA_TYPE},
    {CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR},
    {CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR},
    {CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR},
    {CUDNN_ATTR_OPERATION_RESHAPE_XDESC, CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR},
    {CUDNN_ATTR_OPERATION_RESHAPE_YDESC, CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR},
};

static inline cudnnStatus_t cudnnBackendCreateDescriptor(cudnnBackendDescriptorType_t type, cudnnBackendDescriptor_t *d) {
    *d = new EmuCudnnDesc;
    (*d)->type = type;
    return CUDNN_STATUS_SUCCESS;
}
static inline cudnnStatus_t cudnnBackendDestroyDescriptor(cudnnBackendDescriptor_t d) {
    delete d;
    return CUDNN_STATUS_SUCCESS;
}
static inline cudnnStatus_t cudnnBackendSetAttribute(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
                                                     cudnnBackendAttributeType_t type, int64_t count, const void *v) {
    if (!d || !v) return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
    if (d->finalized || count < 1) return CUDNN_STATUS_BAD_PARAM;
    for (const EmuCudnnAttrRule &r : emu_cudnn_attr_rules) {
        if (r.name != name) continue;
        if (r.owner != d->type || r.type != type) return CUDNN_STATUS_BAD_PARAM;
        const unsigned char *p = (const unsigned char *)v;
        d->attrs[name] = EmuCudnnAttr{type, std::vector<unsigned char>(p, p + emu_cudnn_type_size(type) * count), count};
        return CUDNN_STATUS_SUCCESS;
    }
    return CUDNN_STATUS_BAD_PARAM;
}

// ---- finalizing
static inline const EmuCudnnAttr *emu_cudnn_attr(const EmuCudnnDesc *d, cudnnBackendAttributeName_t name) {
    auto it = d->attrs.find(name);
    return it == d->attrs.end() ? nullptr : &it->second;
}
template <class T> static inline bool emu_cudnn_get(const EmuCudnnDesc *d, cudnnBackendAttributeName_t name, T *out) {
    const EmuCudnnAttr *a = emu_cudnn_attr(d, name);
    if (!a) return false;
    memcpy(out, a->bytes.data(), sizeof(T));
    return true;
}
// A finalized descriptor of the given type set as attribute name (else nullptr).
static inline const EmuCudnnDesc *emu_cudnn_ref(const EmuCudnnDesc *d, cudnnBackendAttributeName_t name,
                                                cudnnBackendDescriptorType_t type) {
    cudnnBackendDescriptor_t r = nullptr;
    if (!emu_cudnn_get(d, name, &r) || !r || !r->finalized || r->type != type) return nullptr;
    return r;
}
static inline const EmuCudnnDesc *emu_cudnn_tensor_ref(const EmuCudnnDesc *d, cudnnBackendAttributeName_t name) {
    return emu_cudnn_ref(d, name, CUDNN_BACKEND_TENSOR_DESCRIPTOR);
}
// each dim of t is 1 or y's
static inline bool emu_cudnn_broadcasts(const EmuCudnnTensor &t, const EmuCudnnTensor &y) {
    for (int k = 0; k < 4; k++)
        if (t.dims[k] != 1 && t.dims[k] != y.dims[k]) return false;
    return true;
}

static inline cudnnStatus_t emu_cudnn_finalize_tensor(EmuCudnnDesc *d) {
    EmuCudnnTensor &t = d->tensor;
    const EmuCudnnAttr *dims = emu_cudnn_attr(d, CUDNN_ATTR_TENSOR_DIMENSIONS);
    const EmuCudnnAttr *strides = emu_cudnn_attr(d, CUDNN_ATTR_TENSOR_STRIDES);
    if (!dims || !strides || !emu_cudnn_get(d, CUDNN_ATTR_TENSOR_DATA_TYPE, &t.type) ||
        !emu_cudnn_get(d, CUDNN_ATTR_TENSOR_UNIQUE_ID, &t.uid) ||
        !emu_cudnn_get(d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, &t.alignment))
        return CUDNN_STATUS_BAD_PARAM;
    if (dims->count != strides->count) return CUDNN_STATUS_BAD_PARAM;
    if (dims->count != 4) return CUDNN_STATUS_NOT_SUPPORTED;  // (this emulation's limit)
    memcpy(t.dims, dims->bytes.data(), sizeof(t.dims));
    memcpy(t.strides, strides->bytes.data(), sizeof(t.strides));
    for (int k = 0; k < 4; k++)
        if (t.dims[k] < 1 || t.strides[k] < 1) return CUDNN_STATUS_BAD_PARAM;
    if (t.type != CUDNN_DATA_FLOAT && t.type != CUDNN_DATA_BFLOAT16 && t.type != CUDNN_DATA_INT32 &&
        t.type != CUDNN_DATA_BOOLEAN)
        return CUDNN_STATUS_NOT_SUPPORTED;
    emu_cudnn_get(d, CUDNN_ATTR_TENSOR_IS_VIRTUAL, &t.is_virtual);
    emu_cudnn_get(d, CUDNN_ATTR_TENSOR_IS_BY_VALUE, &t.by_value);
    if (t.is_virtual && t.by_value) return CUDNN_STATUS_BAD_PARAM;
    if (t.alignment < 1) return CUDNN_STATUS_BAD_PARAM;
    return CUDNN_STATUS_SUCCESS;
}

static inline bool emu_cudnn_binary(cudnnPointwiseMode_t m) {
    return m == CUDNN_POINTWISE_ADD || m == CUDNN_POINTWISE_SUB || m == CUDNN_POINTWISE_MUL ||
           m == CUDNN_POINTWISE_DIV || m == CUDNN_POINTWISE_CMP_GE || m == CUDNN_POINTWISE_BINARY_SELECT;
}

static inline cudnnStatus_t emu_cudnn_finalize_pointwise_op(EmuCudnnDesc *d) {
    const EmuCudnnDesc *pw = emu_cudnn_ref(d, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR,
                                           CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    const EmuCudnnDesc *x = emu_cudnn_tensor_ref(d, CUDNN_ATTR_OPERATION_POINTWISE_XDESC);
    const EmuCudnnDesc *b = emu_cudnn_tensor_ref(d, CUDNN_ATTR_OPERATION_POINTWISE_BDESC);
    const EmuCudnnDesc *t = emu_cudnn_tensor_ref(d, CUDNN_ATTR_OPERATION_POINTWISE_TDESC);
    const EmuCudnnDesc *y = emu_cudnn_tensor_ref(d, CUDNN_ATTR_OPERATION_POINTWISE_YDESC);
    if (!pw || !x || !y) return CUDNN_STATUS_BAD_PARAM;
    EmuCudnnOp &op = d->op;
    op.kind = EMU_CD_POINTWISE;
    op.mode = pw->op.mode;
    op.axis = pw->op.axis;
    bool binary = emu_cudnn_binary(op.mode), select = op.mode == CUDNN_POINTWISE_BINARY_SELECT;
    if (binary != (b != nullptr) || select != (t != nullptr)) return CUDNN_STATUS_BAD_PARAM;
    op.in.push_back(x->tensor);
    if (b) op.in.push_back(b->tensor);
    if (t) op.in.push_back(t->tensor);
    op.out = y->tensor;
    for (const EmuCudnnTensor &in : op.in)
        if (!emu_cudnn_broadcasts(in, op.out)) return CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH;
    if (select && t->tensor.type != CUDNN_DATA_BOOLEAN) return CUDNN_STATUS_BAD_PARAM;
    if (op.mode == CUDNN_POINTWISE_CMP_GE && y->tensor.type != CUDNN_DATA_BOOLEAN) return CUDNN_STATUS_BAD_PARAM;
    return CUDNN_STATUS_SUCCESS;
}

static inline cudnnStatus_t emu_cudnn_finalize_op(EmuCudnnDesc *d) {
    EmuCudnnOp &op = d->op;
    switch (d->type) {
    case CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR: return emu_cudnn_finalize_pointwise_op(d);
    case CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR: {
        const EmuCudnnDesc *rd = emu_cudnn_ref(d, CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
        const EmuCudnnDesc *x = emu_cudnn_tensor_ref(d, CUDNN_ATTR_OPERATION_REDUCTION_XDESC);
        const EmuCudnnDesc *y = emu_cudnn_tensor_ref(d, CUDNN_ATTR_OPERATION_REDUCTION_YDESC);
        if (!rd || !x || !y) return CUDNN_STATUS_BAD_PARAM;
        op.kind = EMU_CD_REDUCTION;
        op.reduce = rd->op.reduce;
        op.in = {x->tensor};
        op.out = y->tensor;
        return emu_cudnn_broadcasts(op.out, x->tensor) ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH;
    }
    case CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR: {
        const EmuCudnnDesc *a = emu_cudnn_tensor_ref(d, CUDNN_ATTR_OPERATION_MATMUL_ADESC);
        const EmuCudnnDesc *b = emu_cudnn_tensor_ref(d, CUDNN_ATTR_OPERATION_MATMUL_BDESC);
        const EmuCudnnDesc *c = emu_cudnn_tensor_ref(d, CUDNN_ATTR_OPERATION_MATMUL_CDESC);
        if (!a || !b || !c || !emu_cudnn_ref(d, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_BACKEND_MATMUL_DESCRIPTOR))
            return CUDNN_STATUS_BAD_PARAM;
        op.kind = EMU_CD_MATMUL;
        op.in = {a->tensor, b->tensor};
        op.out = c->tensor;
        const int64_t *A = a->tensor.dims, *B = b->tensor.dims, *C = c->tensor.dims;
        bool ok = A[3] == B[2] && C[2] == A[2] && C[3] == B[3];
        for (int k = 0; k < 2; k++) ok = ok && (A[k] == C[k] || A[k] == 1) && (B[k] == C[k] || B[k] == 1);
        return ok ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH;
    }
    case CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR: {
        const EmuCudnnDesc *x = emu_cudnn_tensor_ref(d, CUDNN_ATTR_OPERATION_RESHAPE_XDESC);
        const EmuCudnnDesc *y = emu_cudnn_tensor_ref(d, CUDNN_ATTR_OPERATION_RESHAPE_YDESC);
        if (!x || !y) return CUDNN_STATUS_BAD_PARAM;
        op.kind = EMU_CD_RESHAPE;
        op.in = {x->tensor};
        op.out = y->tensor;
        int64_t nx = 1, ny = 1;
        for (int k = 0; k < 4; k++) nx *= x->tensor.dims[k], ny *= y->tensor.dims[k];
        return nx == ny ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH;
    }
    default: return CUDNN_STATUS_BAD_PARAM;
    }
}

// The operations in an order that runs each after the ones writing what it
// reads; every tensor is written once, and a virtual one read is written.
static inline cudnnStatus_t emu_cudnn_finalize_graph(EmuCudnnDesc *d) {
    const EmuCudnnAttr *ops = emu_cudnn_attr(d, CUDNN_ATTR_OPERATIONGRAPH_OPS);
    if (!ops) return CUDNN_STATUS_BAD_PARAM;
    std::shared_ptr<EmuCudnnGraph> g(new EmuCudnnGraph);
    std::vector<EmuCudnnOp> pending;
    std::map<int64_t, EmuCudnnTensor> tensors;
    std::map<int64_t, int> writers;
    for (int64_t i = 0; i < ops->count; i++) {
        cudnnBackendDescriptor_t od;
        memcpy(&od, ops->bytes.data() + i * sizeof(od), sizeof(od));
        if (!od || !od->finalized || od->type == CUDNN_BACKEND_TENSOR_DESCRIPTOR) return CUDNN_STATUS_BAD_PARAM;
        pending.push_back(od->op);
        std::vector<EmuCudnnTensor> all = od->op.in;
        all.push_back(od->op.out);
        for (const EmuCudnnTensor &t : all) {  // one uid, one tensor
            auto it = tensors.find(t.uid);
            if (it != tensors.end() && !it->second.same(t)) return CUDNN_STATUS_BAD_PARAM;
            tensors[t.uid] = t;
        }
        if (od->op.out.by_value || writers[od->op.out.uid]++) return CUDNN_STATUS_BAD_PARAM;
    }
    for (const auto &kv : tensors) {
        if (!kv.second.is_virtual) g->outer[kv.first] = kv.second;
        else if (!writers[kv.first]) return CUDNN_STATUS_BAD_PARAM;  // a virtual tensor nobody writes
    }
    std::map<int64_t, bool> ready;  // written, or an input from outside
    for (const auto &kv : tensors) ready[kv.first] = !writers[kv.first];
    while (!pending.empty()) {
        size_t before = pending.size();
        for (size_t i = 0; i < pending.size();) {
            bool go = true;
            for (const EmuCudnnTensor &t : pending[i].in) go = go && ready[t.uid];
            if (!go) { i++; continue; }
            ready[pending[i].out.uid] = true;
            g->ops.push_back(pending[i]);
            pending.erase(pending.begin() + (long)i);
        }
        if (pending.size() == before) return CUDNN_STATUS_BAD_PARAM;  // a cycle
    }
    d->graph = g;
    return CUDNN_STATUS_SUCCESS;
}

// ---- the fused attention engines: the graphs they take and the shapes they run
// cuDNN runs these composite operation graphs only as "specialized runtime
// fusion engines" that recognise the scaled-dot-product-attention pattern
// (cuDNN Developer Guide, Graph API, "Specialized Runtime Fusion Engines":
// fused flash attention fprop / bprop); cudnn-frontend builds that pattern
// node by node (include/cudnn_frontend/node/scaled_dot_product_flash_attention.h,
// CompositeSDPANode and CompositeSDPABackwardNode, with the causal mask of
// utils/attn_score_modifiers.h and node/diagonal_band_mask.h for cuDNN < 9.21).
// So this emulation's engine takes exactly that pattern for a causal (top-left
// or bottom-right: a graph with by-value int32 scalars, its s_q and s_kv, is
// matched as bottom-right), unbiased, dropout-free attention with its
// operations' operand order, and nothing
// else: the heuristic offers no engine configuration for any other graph
// (CUDNN_ATTR_ENGINEHEUR_RESULTS returns a count of 0, the case cudnn-frontend
// reports as "No valid engine configs"), and cudnnGetLastErrorString says
// which node of the pattern the graph breaks. The shapes are checked when the
// plan is finalized, against the support matrix (CUDNN_STATUS_NOT_SUPPORTED
// and the rule broken): see emu_sdpa_unsupported.

// A node of a graph pattern: an operation (kind, mode, axis) over argument
// patterns, or (EMU_PAT_INPUT) a tensor from outside the graph. A named node
// stands for one tensor: met again, it must be the same tensor.
enum { EMU_PAT_INPUT = 100 };
struct EmuPat {
    int kind = EMU_PAT_INPUT;
    int mode = -1;            // pointwise mode or reduction operator (-1: none)
    int64_t axis = -1;        // GEN_INDEX's
    const char *name = nullptr, *what = "";  // what: the node in words, for the message
    int type = -1;            // the tensor's data type (-1: any)
    int is_virtual = -1;      // 1 virtual, 0 in memory, -1 either
    bool by_value = false;    // an input: a host scalar
    std::vector<EmuPat> args;
    EmuPat &named(const char *n) { name = n; return *this; }
    EmuPat &typed(int t, int v) { type = t, is_virtual = v; return *this; }
};
static inline EmuPat emu_pat_in(const char *name, const char *what, bool by_value = false) {
    EmuPat p;
    p.name = name, p.what = what, p.by_value = by_value;
    return p;
}
static inline EmuPat emu_pat_op(EmuCudnnOpKind kind, int mode, const char *what, std::vector<EmuPat> args,
                                int64_t axis = -1) {
    EmuPat p;
    p.kind = kind, p.mode = mode, p.axis = axis, p.what = what, p.args = std::move(args);
    return p;
}
static inline EmuPat emu_pat_pw(cudnnPointwiseMode_t m, const char *what, std::vector<EmuPat> args, int64_t axis = -1) {
    return emu_pat_op(EMU_CD_POINTWISE, m, what, std::move(args), axis);
}

// cudnn-frontend's causal mask of x (utils/attn_score_modifiers.h: causal_mask,
// or with bottom_right causal_mask_bottom_right; both sliding_window_mask with
// a right bound of 0, expanded by node/diagonal_band_mask.h's
// CompositeDiagonalBandMaskNode): top-left select(x, fill, GEN_INDEX(x, 2) >=
// GEN_INDEX(x, 3)); bottom-right the row index + s_kv, then - s_q (pointwise
// ADD then SUB with axis 3, s_kv and s_q by-value int32 scalars) before the
// compare: query i sees keys <= i + s_kv - s_q.
static inline EmuPat emu_pat_causal(const EmuPat &x, const char *what, bool bottom_right) {
    EmuPat row = emu_pat_pw(CUDNN_POINTWISE_GEN_INDEX, "the row index of the masked scores", {x}, 2);
    EmuPat col = emu_pat_pw(CUDNN_POINTWISE_GEN_INDEX, "the column index of the masked scores", {x}, 3);
    if (bottom_right) {
        EmuPat row_skv = emu_pat_pw(CUDNN_POINTWISE_ADD, "the bottom-right mask's row index + s_kv (axis 3)",
                                    {row, emu_pat_in("s_kv", "s_kv (by value, int32)", true).typed(CUDNN_DATA_INT32, 0)},
                                    3);
        row = emu_pat_pw(CUDNN_POINTWISE_SUB, "the bottom-right mask's row index + s_kv - s_q (axis 3)",
                         {row_skv, emu_pat_in("s_q", "s_q (by value, int32)", true).typed(CUDNN_DATA_INT32, 0)}, 3);
    }
    EmuPat keep = emu_pat_pw(CUDNN_POINTWISE_CMP_GE, "the causal mask's row >= column", {row, col});
    return emu_pat_pw(CUDNN_POINTWISE_BINARY_SELECT, what,
                      {x, emu_pat_in("fill", "the mask's fill value (by value)", true), keep});
}
static inline EmuPat emu_pat_scaled_scores() {
    EmuPat s = emu_pat_op(EMU_CD_MATMUL, -1, "the scores Q @ K^T",
                          {emu_pat_in("Q", "Q"), emu_pat_in("K^T", "K^T (K with its last two dims swapped)")});
    return emu_pat_pw(CUDNN_POINTWISE_MUL, "the scaled scores (Q @ K^T) * scale",
                      {s, emu_pat_in("scale", "the scale (by value)", true)})
        .named("scaled scores");
}
// The transpose of x's last two dimensions in the I/O type, as a reshape.
static inline EmuPat emu_pat_transposed(const EmuPat &x, const char *what) {
    return emu_pat_op(EMU_CD_RESHAPE, -1, what, {x}).typed(CUDNN_DATA_BFLOAT16, 1);
}

// The forward: its outputs' patterns, O and Stats.
static inline std::vector<EmuPat> emu_sdpa_forward_pattern(bool bottom_right) {
    const int F = CUDNN_DATA_FLOAT;
    EmuPat masked =
        emu_pat_causal(emu_pat_scaled_scores(), "the causal mask of the scaled scores", bottom_right).named("masked");
    EmuPat mx = emu_pat_op(EMU_CD_REDUCTION, CUDNN_REDUCE_TENSOR_MAX, "the row max of the masked scores", {masked})
                    .named("max");
    EmuPat e = emu_pat_pw(CUDNN_POINTWISE_EXP, "exp(scores - max)",
                          {emu_pat_pw(CUDNN_POINTWISE_SUB, "the masked scores - their row max", {masked, mx})})
                   .named("exp");
    EmuPat sum = emu_pat_op(EMU_CD_REDUCTION, CUDNN_REDUCE_TENSOR_ADD, "the row sum of exp", {e}).named("sum");
    EmuPat stats = emu_pat_pw(CUDNN_POINTWISE_ADD, "the statistics max + log(sum) (fp32, in memory)",
                              {mx, emu_pat_pw(CUDNN_POINTWISE_LOG, "log(sum)", {sum})})
                       .named("Stats")
                       .typed(F, 0);
    EmuPat p = emu_pat_pw(CUDNN_POINTWISE_DIV, "the probabilities exp / sum, in the I/O type", {e, sum})
                   .typed(CUDNN_DATA_BFLOAT16, 1);
    EmuPat o = emu_pat_op(EMU_CD_MATMUL, -1, "the output O = P @ V", {p, emu_pat_in("V", "V")}).named("O");
    return {o, stats};
}

// The backward: its outputs' patterns, dV, dK and dQ.
static inline std::vector<EmuPat> emu_sdpa_backward_pattern(bool bottom_right) {
    const int F = CUDNN_DATA_FLOAT;
    EmuPat dout = emu_pat_in("dO", "dO");
    EmuPat rowsum = emu_pat_op(EMU_CD_REDUCTION, CUDNN_REDUCE_TENSOR_ADD, "rowsum(dO * O)",
                               {emu_pat_pw(CUDNN_POINTWISE_MUL, "dO * O", {dout, emu_pat_in("O", "O")})});
    EmuPat softmax_sum = emu_pat_pw(CUDNN_POINTWISE_MUL, "softmax_sum = rowsum(dO * O) * 1 (fp32, in memory)",
                                    {rowsum, emu_pat_in("one", "the dropout scale 1 (by value)", true)})
                             .named("softmax_sum")
                             .typed(F, 0);
    EmuPat centred = emu_pat_pw(CUDNN_POINTWISE_SUB, "the scaled scores - the statistics",
                                {emu_pat_scaled_scores(), emu_pat_in("Stats", "the forward's statistics")})
                         .named("centred scores");
    EmuPat p = emu_pat_pw(CUDNN_POINTWISE_EXP, "P = exp(causal mask(scaled scores - statistics))",
                          {emu_pat_causal(centred, "the causal mask, applied after the statistics are subtracted "
                                                   "(CompositeSDPABackwardNode: sub_s_m, then the mask, then exp_s)",
                                          bottom_right)})
                   .named("P");
    EmuPat dv = emu_pat_op(EMU_CD_MATMUL, -1, "dV = P^T @ dO", {emu_pat_transposed(p, "P^T, in the I/O type"), dout})
                    .named("dV");
    EmuPat dp = emu_pat_op(EMU_CD_MATMUL, -1, "dP = dO @ V^T", {dout, emu_pat_in("V^T", "V^T")});
    EmuPat ds = emu_pat_pw(
                    CUDNN_POINTWISE_MUL, "dS = (dP - softmax_sum) * P * scale",
                    {emu_pat_pw(CUDNN_POINTWISE_MUL, "(dP - softmax_sum) * P",
                                {emu_pat_pw(CUDNN_POINTWISE_SUB, "dP - softmax_sum", {dp, softmax_sum}), p}),
                     emu_pat_in("scale", "the scale (by value)", true)})
                    .named("dS");
    EmuPat dk = emu_pat_op(EMU_CD_MATMUL, -1, "dK = dS^T @ Q",
                           {emu_pat_transposed(ds, "dS^T, in the I/O type"), emu_pat_in("Q", "Q")})
                    .named("dK");
    EmuPat k = emu_pat_op(EMU_CD_RESHAPE, -1, "K, read from K^T transposed", {emu_pat_in("K^T", "K^T")});
    EmuPat accum = emu_pat_op(EMU_CD_MATMUL, -1, "dQ accumulated as dS @ K (fp32, in memory)", {ds, k}).typed(F, 0);
    EmuPat dq = emu_pat_pw(CUDNN_POINTWISE_IDENTITY, "dQ = identity(its fp32 accumulator)", {accum}).named("dQ");
    return {dv, dk, dq};
}

static inline const char *emu_cudnn_mode_name(cudnnPointwiseMode_t m) {
    switch (m) {
    case CUDNN_POINTWISE_ADD: return "ADD";
    case CUDNN_POINTWISE_MUL: return "MUL";
    case CUDNN_POINTWISE_DIV: return "DIV";
    case CUDNN_POINTWISE_SUB: return "SUB";
    case CUDNN_POINTWISE_EXP: return "EXP";
    case CUDNN_POINTWISE_LOG: return "LOG";
    case CUDNN_POINTWISE_IDENTITY: return "IDENTITY";
    case CUDNN_POINTWISE_CMP_GE: return "CMP_GE";
    case CUDNN_POINTWISE_GEN_INDEX: return "GEN_INDEX";
    case CUDNN_POINTWISE_BINARY_SELECT: return "BINARY_SELECT";
    }
    return "?";
}
// An operation (or, op NULL, a tensor from outside the graph) in words.
static inline std::string emu_cudnn_op_text(const EmuCudnnOp *op) {
    if (!op) return "a tensor from outside the graph";
    switch (op->kind) {
    case EMU_CD_POINTWISE: return std::string("a pointwise ") + emu_cudnn_mode_name(op->mode);
    case EMU_CD_REDUCTION: return op->reduce == CUDNN_REDUCE_TENSOR_MAX ? "a MAX reduction" : "an ADD reduction";
    case EMU_CD_MATMUL: return "a matmul";
    case EMU_CD_RESHAPE: return "a reshape";
    }
    return "?";
}

// Matching a graph against a pattern: the operation writing each tensor, the
// tensors the pattern's names stand for, the operations matched so far.
struct EmuMatch {
    std::map<int64_t, const EmuCudnnOp *> writer;
    std::map<std::string, EmuCudnnTensor> bound;
    std::set<const EmuCudnnOp *> used;
    int depth = 0;     // nodes matched (how far an attempt got)
    std::string fail;  // why the attempt stopped
};
static inline bool emu_match_fail(EmuMatch &m, const EmuPat &p, const EmuCudnnTensor &t, const std::string &why) {
    char uid[32];
    snprintf(uid, sizeof(uid), "%lld", (long long)t.uid);
    m.fail = std::string("expected ") + p.what + ", but tensor " + uid + " is " + why;
    return false;
}
static inline bool emu_match(EmuMatch &m, const EmuPat &p, const EmuCudnnTensor &t) {
    if (p.name && m.bound.count(p.name)) {
        if (m.bound.at(p.name).uid == t.uid) return true;
        return emu_match_fail(m, p, t, std::string("another tensor than the ") + p.name + " used before");
    }
    auto w = m.writer.find(t.uid);
    const EmuCudnnOp *op = w == m.writer.end() ? nullptr : w->second;
    if (p.kind == EMU_PAT_INPUT) {
        if (op || t.is_virtual || t.by_value != p.by_value)
            return emu_match_fail(m, p, t, op ? emu_cudnn_op_text(op) + "'s output"
                                              : t.by_value ? "a by-value scalar" : "not a by-value scalar");
    } else {
        if (!op || (int)op->kind != p.kind || (p.kind == EMU_CD_POINTWISE && (int)op->mode != p.mode) ||
            (p.kind == EMU_CD_REDUCTION && (int)op->reduce != p.mode) || op->axis != p.axis ||
            op->in.size() != p.args.size())
            return emu_match_fail(m, p, t, emu_cudnn_op_text(op) + "'s output");
        if (p.kind == EMU_CD_RESHAPE) {  // a transpose of the last two dims (strides swapped with them)
            const EmuCudnnTensor &x = op->in[0];
            if (t.dims[0] != x.dims[0] || t.dims[1] != x.dims[1] || t.dims[2] != x.dims[3] || t.dims[3] != x.dims[2] ||
                t.strides[2] != x.strides[3] || t.strides[3] != x.strides[2])
                return emu_match_fail(m, p, t, "a reshape that is not the transpose of its last two dimensions");
        }
        m.used.insert(op);
    }
    if ((p.type >= 0 && (int)t.type != p.type) || (p.is_virtual >= 0 && (int)t.is_virtual != p.is_virtual))
        return emu_match_fail(m, p, t, t.is_virtual ? "virtual or of another type" : "in memory or of another type");
    m.depth++;
    if (op)
        for (size_t i = 0; i < p.args.size(); i++)
            if (!emu_match(m, p.args[i], op->in[i])) return false;
    if (p.name) m.bound[p.name] = t;
    return true;
}

// A graph the engine takes: which direction, and the tensors of its roles.
struct EmuSdpa {
    bool backward;
    bool bottom_right;  // the causal mask's diagonal (the graph has by-value int32 s_q, s_kv)
    std::map<std::string, EmuCudnnTensor> role;  // Q, K^T, V or V^T, O, dO, Stats, dQ, dK, dV, s_q, s_kv
};

// The fused attention graph g is, or why it is none (in *why).
static inline bool emu_sdpa_match(const EmuCudnnGraph &g, EmuSdpa *out, std::string *why) {
    EmuMatch m;
    std::set<int64_t> read;
    int matmuls = 0;
    for (const EmuCudnnOp &op : g.ops) {
        m.writer[op.out.uid] = &op;
        for (const EmuCudnnTensor &t : op.in) read.insert(t.uid);
        matmuls += op.kind == EMU_CD_MATMUL;
    }
    std::vector<EmuCudnnTensor> roots;  // written and read by no operation: the graph's outputs
    for (const EmuCudnnOp &op : g.ops)
        if (!read.count(op.out.uid)) roots.push_back(op.out);
    char text[160];
    if (matmuls != 2 && matmuls != 5) {
        snprintf(text, sizeof(text), "a graph of %d matmuls is neither the fused attention forward (2) nor its "
                 "backward (5)", matmuls);
        *why = text;
        return false;
    }
    out->backward = matmuls == 5;
    // the mask's alignment: bottom-right where the graph takes int32 scalars (its s_q and s_kv)
    out->bottom_right = false;
    for (const auto &t : g.outer) out->bottom_right = out->bottom_right || (t.second.by_value && t.second.type == CUDNN_DATA_INT32);
    std::vector<EmuPat> pats = out->backward ? emu_sdpa_backward_pattern(out->bottom_right)
                                             : emu_sdpa_forward_pattern(out->bottom_right);
    if (roots.size() != pats.size()) {
        snprintf(text, sizeof(text), "the fused attention %s writes %zu outputs, the graph %zu",
                 out->backward ? "backward" : "forward", pats.size(), roots.size());
        *why = text;
        return false;
    }
    std::vector<bool> taken(roots.size(), false);
    for (const EmuPat &p : pats) {  // each output pattern against the outputs not yet matched
        EmuMatch best;
        best.depth = -1;
        bool ok = false;
        for (size_t r = 0; r < roots.size() && !ok; r++) {
            if (taken[r]) continue;
            EmuMatch attempt = m;
            attempt.depth = 0;
            if (emu_match(attempt, p, roots[r])) {
                ok = taken[r] = true;
                m = attempt;
            } else if (attempt.depth > best.depth) {
                best = attempt;
            }
        }
        if (!ok) {
            *why = std::string(out->backward ? "not the fused attention backward: " : "not the fused attention "
                                                                                        "forward: ") + best.fail;
            return false;
        }
    }
    if (m.used.size() != g.ops.size()) {
        for (const EmuCudnnOp &op : g.ops)
            if (!m.used.count(&op)) {
                snprintf(text, sizeof(text), "%zu operations outside the fused attention pattern, the first %s "
                         "writing tensor %lld", g.ops.size() - m.used.size(), emu_cudnn_op_text(&op).c_str(),
                         (long long)op.out.uid);
                *why = text;
                return false;
            }
    }
    out->role = m.bound;
    return true;
}

// Why the fused attention engines cannot run a on a device of compute
// capability sm (major * 10 + minor) with this cuDNN, or "" when they can.
// The fp16/bf16 rules of cuDNN's SDPA support matrix (cuDNN frontend
// documentation, "Attention", "Support Matrix": SM80 or newer; head dim <= 256
// for the forward, for the backward <= 128 on Ampere/Ada and <= 256 on Hopper)
// and of cudnn-frontend's checks (scaled_dot_product_flash_attention.h,
// sdpa_support_surface.h): the last stride of Q, K, V, O, dO, dQ, dK, dV and
// the statistics 1; head dim a multiple of 8; forward head dim <= 128 on
// sm_8x up to cuDNN 9.9 and on sm_10x before 9.9; backward head dim <= 256 on
// sm_9x (from cudnn-frontend 1.8, for cuDNN 9.5), <= 128 elsewhere; no
// backward of s_q = s_kv = 1 (also in cuDNN 9's release notes' known issues);
// the backward refused on cuDNN 9.10.0 and 9.10.1; heads of Q a multiple of
// those of K and V; the bottom-right causal mask not with s_q > s_kv (without
// a padding mask), and before cuDNN 9.6.0 only with s_q and s_kv multiples of
// 64 (sdpa_support_surface.h, validate_sdpa_support_surface, and
// CompositeSDPABackwardNode::pre_validate_node: "Bottom right causal mask does
// not support max_s_q > max_s_kv", "... only supported with s_q multiple of
// 64, and s_kv multiple of 64, for cudnn version below 9.6.0").
static inline std::string emu_sdpa_unsupported(const EmuSdpa &a, int sm, long version) {
    const EmuCudnnTensor &q = a.role.at("Q"), &kt = a.role.at("K^T");
    const EmuCudnnTensor &v = a.role.count("V") ? a.role.at("V") : a.role.at("V^T");
    long long h_q = q.dims[1], s_q = q.dims[2], d = q.dims[3], h_k = kt.dims[1], s_kv = kt.dims[3];
    int major = sm / 10;
    char text[200];
    if (sm < 80) {
        snprintf(text, sizeof(text), "the fused attention needs compute capability 8.0 or newer, this device has "
                 "%d.%d", major, sm % 10);
        return text;
    }
    // the head dim's stride: the last dimension of Q, O and the gradients; the third of K^T and V^T
    for (const auto &kv : a.role) {
        bool swapped = kv.first == "K^T" || kv.first == "V^T";
        if (!kv.second.by_value && kv.second.strides[swapped ? 2 : 3] != 1)
            return "the head dimension of " + kv.first + " has a stride other than 1";
    }
    for (const char *io : {"Q", "K^T", "O", "dO", "dQ", "dK", "dV"})
        if (a.role.count(io) && a.role.at(io).type != CUDNN_DATA_BFLOAT16) return std::string(io) + " is not bf16";
    if (h_q % h_k != 0 || h_q % v.dims[1] != 0) return "the heads of Q are not a multiple of those of K and V";
    long long max_d = 256;
    if (a.backward) max_d = major == 9 && version >= 90500 ? 256 : 128;
    else if ((major == 8 && version <= 90900) || (major == 10 && version < 90900)) max_d = 128;
    if (d % 8 != 0 || d > max_d) {
        snprintf(text, sizeof(text), "head dim %lld: the %s takes a multiple of 8 up to %lld on compute capability "
                 "%d.%d with cuDNN %ld", d, a.backward ? "backward" : "forward", max_d, major, sm % 10, version);
        return text;
    }
    if (a.backward && s_q == 1 && s_kv == 1) return "the backward of s_q = s_kv = 1 is not supported";
    if (a.bottom_right && s_q > s_kv) {
        snprintf(text, sizeof(text), "the bottom-right causal mask does not take s_q > s_kv (%lld > %lld)", s_q, s_kv);
        return text;
    }
    if (a.bottom_right && version < 90600 && (s_q % 64 != 0 || s_kv % 64 != 0)) {
        snprintf(text, sizeof(text), "the bottom-right causal mask takes s_q and s_kv multiples of 64 only before "
                 "cuDNN 9.6.0 (s_q %lld, s_kv %lld, cuDNN %ld)", s_q, s_kv, version);
        return text;
    }
    if (a.backward && (version == 91000 || version == 91001))
        return "the bf16 backward is not supported on cuDNN 9.10.0 and 9.10.1 (known bugs)";
    return "";
}

// Whether heuristic mode m offers the fused engines: every mode, unless
// LLMC_EMU_CUDNN_HEUR_MODES lists the ones that do ("A,FALLBACK"; "none"), so
// that a test sees a caller try the next mode when one finds nothing.
static inline bool emu_cudnn_mode_offers(cudnnBackendHeurMode_t m) {
    const char *modes = getenv("LLMC_EMU_CUDNN_HEUR_MODES");
    if (!modes) return true;
    const char *name = m == CUDNN_HEUR_MODE_B ? "B" : m == CUDNN_HEUR_MODE_FALLBACK ? "FALLBACK" : "A";
    std::string list = std::string(",") + modes + ",";
    return list.find(std::string(",") + name + ",") != std::string::npos;
}

static inline cudnnStatus_t emu_cudnn_finalize(EmuCudnnDesc *d) {
    switch (d->type) {
    case CUDNN_BACKEND_TENSOR_DESCRIPTOR: return emu_cudnn_finalize_tensor(d);
    case CUDNN_BACKEND_POINTWISE_DESCRIPTOR: {
        if (!emu_cudnn_get(d, CUDNN_ATTR_POINTWISE_MODE, &d->op.mode) || !emu_cudnn_attr(d, CUDNN_ATTR_POINTWISE_MATH_PREC))
            return CUDNN_STATUS_BAD_PARAM;
        bool has_axis = emu_cudnn_get(d, CUDNN_ATTR_POINTWISE_AXIS, &d->op.axis);
        if ((d->op.mode == CUDNN_POINTWISE_GEN_INDEX && !has_axis) || (has_axis && (d->op.axis < 0 || d->op.axis > 3)))
            return CUDNN_STATUS_BAD_PARAM;
        return CUDNN_STATUS_SUCCESS;
    }
    case CUDNN_BACKEND_REDUCTION_DESCRIPTOR:
        return emu_cudnn_get(d, CUDNN_ATTR_REDUCTION_OPERATOR, &d->op.reduce) &&
                       emu_cudnn_attr(d, CUDNN_ATTR_REDUCTION_COMP_TYPE)
                   ? CUDNN_STATUS_SUCCESS
                   : CUDNN_STATUS_BAD_PARAM;
    case CUDNN_BACKEND_MATMUL_DESCRIPTOR:
        return emu_cudnn_attr(d, CUDNN_ATTR_MATMUL_COMP_TYPE) ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_BAD_PARAM;
    case CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR: return emu_cudnn_finalize_op(d);
    case CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR: return emu_cudnn_finalize_graph(d);
    case CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR: {
        const EmuCudnnDesc *g = emu_cudnn_ref(d, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH,
                                              CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
        if (!g || !emu_cudnn_get(d, CUDNN_ATTR_ENGINEHEUR_MODE, &d->heur_mode) || d->heur_mode < CUDNN_HEUR_MODE_INSTANT ||
            d->heur_mode > CUDNN_HEUR_MODE_A)
            return CUDNN_STATUS_BAD_PARAM;
        d->graph = g->graph;
        return CUDNN_STATUS_SUCCESS;
    }
    case CUDNN_BACKEND_ENGINECFG_DESCRIPTOR: return CUDNN_STATUS_NOT_SUPPORTED;  // only the heuristic makes them here
    case CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR: {
        const EmuCudnnDesc *cfg = emu_cudnn_ref(d, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                                                CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
        if (!cfg || !cfg->sdpa || !emu_cudnn_get(d, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, &d->handle) || !d->handle)
            return CUDNN_STATUS_BAD_PARAM;
        // the engine's limits for this graph on the current device: "CUDNN_STATUS_NOT_SUPPORTED" from
        // cudnnBackendFinalize, as for an attribute set the library does not support
        std::string why = emu_sdpa_unsupported(*cfg->sdpa, emu_device_cc(), CUDNN_VERSION);
        if (!why.empty()) {
            emu_cudnn_last_error = "emulated cuDNN: the fused attention engine does not support this graph: " + why;
            return CUDNN_STATUS_NOT_SUPPORTED;
        }
        d->graph = cfg->graph;
        d->sdpa = cfg->sdpa;
        return CUDNN_STATUS_SUCCESS;
    }
    case CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR: {
        const EmuCudnnAttr *ids = emu_cudnn_attr(d, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS);
        const EmuCudnnAttr *ptrs = emu_cudnn_attr(d, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS);
        if (!ids || !ptrs || ids->count != ptrs->count || !emu_cudnn_attr(d, CUDNN_ATTR_VARIANT_PACK_WORKSPACE))
            return CUDNN_STATUS_BAD_PARAM;
        return CUDNN_STATUS_SUCCESS;
    }
    }
    return CUDNN_STATUS_BAD_PARAM;
}
static inline cudnnStatus_t cudnnBackendFinalize(cudnnBackendDescriptor_t d) {
    if (!d) return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
    if (d->finalized) return CUDNN_STATUS_BAD_PARAM;
    cudnnStatus_t st = emu_cudnn_finalize(d);
    d->finalized = st == CUDNN_STATUS_SUCCESS;
    return st;
}

// The heuristic's results (for a fused attention graph, one engine
// configuration, written into the caller's first ENGINECFG descriptor; for
// any other graph, or a mode LLMC_EMU_CUDNN_HEUR_MODES leaves out, none, with
// the reason for cudnnGetLastErrorString) and a plan's workspace size.
static inline cudnnStatus_t cudnnBackendGetAttribute(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
                                                     cudnnBackendAttributeType_t type, int64_t requested,
                                                     int64_t *count, void *out) {
    if (!d || !d->finalized || !out) return CUDNN_STATUS_BAD_PARAM;
    if (d->type == CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR && name == CUDNN_ATTR_ENGINEHEUR_RESULTS &&
        type == CUDNN_TYPE_BACKEND_DESCRIPTOR && requested >= 1) {
        cudnnBackendDescriptor_t cfg = ((cudnnBackendDescriptor_t *)out)[0];
        if (!cfg || cfg->type != CUDNN_BACKEND_ENGINECFG_DESCRIPTOR) return CUDNN_STATUS_BAD_PARAM;
        *count = 0;
        EmuSdpa sdpa;
        std::string why;
        if (!emu_cudnn_mode_offers(d->heur_mode)) {
            emu_cudnn_last_error = "emulated cuDNN: this heuristic mode offers no engine (LLMC_EMU_CUDNN_HEUR_MODES)";
        } else if (!emu_sdpa_match(*d->graph, &sdpa, &why)) {
            emu_cudnn_last_error = "emulated cuDNN: no engine takes the graph, " + why;
        } else {
            cfg->graph = d->graph;
            cfg->sdpa = std::make_shared<const EmuSdpa>(sdpa);
            cfg->finalized = true;
            *count = 1;
        }
        return CUDNN_STATUS_SUCCESS;
    }
    if (d->type == CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR && name == CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE &&
        type == CUDNN_TYPE_INT64 && requested >= 1) {
        *(int64_t *)out = EMU_CUDNN_WORKSPACE;
        *count = 1;
        return CUDNN_STATUS_SUCCESS;
    }
    return CUDNN_STATUS_BAD_PARAM;
}

// ---- execution: the tensors' storage while a graph runs
struct EmuCudnnStore {
    const EmuCudnnTensor *t;
    void *dev;                  // a device tensor's memory
    float scalar;               // a by-value tensor's value
    std::vector<float> local;   // a virtual tensor's storage (extent elements, already rounded to its type)
    float read(int64_t off) const {
        if (t->by_value) return scalar;
        if (t->is_virtual) return local[(size_t)off];
        return t->type == CUDNN_DATA_BFLOAT16 ? __bfloat162float(((const bf16 *)dev)[off]) : ((const float *)dev)[off];
    }
    void write(int64_t off, float v) {
        if (t->type == CUDNN_DATA_BFLOAT16) v = __bfloat162float(__float2bfloat16_rn(v));
        else if (t->type == CUDNN_DATA_INT32) v = (float)(int32_t)v;
        else if (t->type == CUDNN_DATA_BOOLEAN) v = v != 0.0f;
        if (t->is_virtual) local[(size_t)off] = v;
        else if (t->type == CUDNN_DATA_BFLOAT16) ((bf16 *)dev)[off] = __float2bfloat16_rn(v);
        else ((float *)dev)[off] = v;
    }
};

// in's offset for y's index (the dims of 1 broadcast)
static inline int64_t emu_cudnn_bcast_offset(const EmuCudnnTensor &in, const int64_t idx[4]) {
    int64_t off = 0;
    for (int k = 0; k < 4; k++) off += (in.dims[k] == 1 ? 0 : idx[k]) * in.strides[k];
    return off;
}

static inline float emu_cudnn_pointwise(cudnnPointwiseMode_t m, float x, float b, float t, float index) {
    switch (m) {
    case CUDNN_POINTWISE_ADD: return x + b;
    case CUDNN_POINTWISE_SUB: return x - b;
    case CUDNN_POINTWISE_MUL: return x * b;
    case CUDNN_POINTWISE_DIV: return x / b;
    case CUDNN_POINTWISE_EXP: return expf(x);
    case CUDNN_POINTWISE_LOG: return logf(x);
    case CUDNN_POINTWISE_IDENTITY: return x;
    case CUDNN_POINTWISE_CMP_GE: return x >= b ? 1.0f : 0.0f;
    case CUDNN_POINTWISE_GEN_INDEX: return index;
    case CUDNN_POINTWISE_BINARY_SELECT: return t != 0.0f ? x : b;
    }
    emu_fail("emulated cuDNN: pointwise mode not emulated");
    return 0.0f;
}

#define EMU_CD_FOR4(dims, idx)                                         \
    for (idx[0] = 0; idx[0] < (dims)[0]; idx[0]++)                     \
        for (idx[1] = 0; idx[1] < (dims)[1]; idx[1]++)                 \
            for (idx[2] = 0; idx[2] < (dims)[2]; idx[2]++)             \
                for (idx[3] = 0; idx[3] < (dims)[3]; idx[3]++)

static inline void emu_cudnn_run_op(const EmuCudnnOp &op, std::map<int64_t, EmuCudnnStore> &st) {
    EmuCudnnStore &y = st.at(op.out.uid);
    const int64_t *yd = op.out.dims;
    int64_t i[4];
    switch (op.kind) {
    case EMU_CD_POINTWISE: {
        const EmuCudnnStore *in[3] = {&st.at(op.in[0].uid), op.in.size() > 1 ? &st.at(op.in[1].uid) : nullptr,
                                      op.in.size() > 2 ? &st.at(op.in[2].uid) : nullptr};
        EMU_CD_FOR4(yd, i) {
            float v[3] = {0.0f, 0.0f, 0.0f};
            for (size_t k = 0; k < op.in.size(); k++) v[k] = in[k]->read(emu_cudnn_bcast_offset(op.in[k], i));
            float index = op.mode == CUDNN_POINTWISE_GEN_INDEX ? (float)i[op.axis] : 0.0f;
            y.write(op.out.offset(i), emu_cudnn_pointwise(op.mode, v[0], v[1], v[2], index));
        }
        break;
    }
    case EMU_CD_REDUCTION: {
        const EmuCudnnStore &x = st.at(op.in[0].uid);
        std::vector<float> acc((size_t)op.out.extent(), op.reduce == CUDNN_REDUCE_TENSOR_MAX ? -INFINITY : 0.0f);
        EMU_CD_FOR4(op.in[0].dims, i) {
            float v = x.read(op.in[0].offset(i));
            float &a = acc[(size_t)emu_cudnn_bcast_offset(op.out, i)];
            a = op.reduce == CUDNN_REDUCE_TENSOR_MAX ? fmaxf(a, v) : a + v;
        }
        EMU_CD_FOR4(yd, i) y.write(op.out.offset(i), acc[(size_t)op.out.offset(i)]);
        break;
    }
    case EMU_CD_MATMUL: {
        const EmuCudnnTensor &A = op.in[0], &B = op.in[1];
        const EmuCudnnStore &a = st.at(A.uid), &b = st.at(B.uid);
        int64_t K = A.dims[3];
        EMU_CD_FOR4(yd, i) {
            int64_t ai[4] = {A.dims[0] == 1 ? 0 : i[0], A.dims[1] == 1 ? 0 : i[1], i[2], 0};
            int64_t bi[4] = {B.dims[0] == 1 ? 0 : i[0], B.dims[1] == 1 ? 0 : i[1], 0, i[3]};
            float s = 0.0f;
            for (int64_t k = 0; k < K; k++) {
                ai[3] = k;
                bi[2] = k;
                s += a.read(A.offset(ai)) * b.read(B.offset(bi));
            }
            y.write(op.out.offset(i), s);
        }
        break;
    }
    case EMU_CD_RESHAPE: {  // y's element at its strides' offset is x's storage there
        const EmuCudnnStore &x = st.at(op.in[0].uid);
        std::vector<float> storage((size_t)std::max(op.in[0].extent(), op.out.extent()), 0.0f);
        EMU_CD_FOR4(op.in[0].dims, i) storage[(size_t)op.in[0].offset(i)] = x.read(op.in[0].offset(i));
        EMU_CD_FOR4(yd, i) y.write(op.out.offset(i), storage[(size_t)op.out.offset(i)]);
        break;
    }
    }
}
#undef EMU_CD_FOR4

static inline cudnnStatus_t cudnnBackendExecute(cudnnHandle_t h, cudnnBackendDescriptor_t plan,
                                                cudnnBackendDescriptor_t pack) {
    if (!h || !plan || !pack || !plan->finalized || !pack->finalized || !plan->graph ||
        plan->type != CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR || pack->type != CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR)
        return CUDNN_STATUS_BAD_PARAM;
    if (plan->handle != h) emu_fail("emulated cuDNN: a plan executed on another handle than the one it was made for");
    const EmuCudnnAttr *ids = emu_cudnn_attr(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS);
    const EmuCudnnAttr *ptrs = emu_cudnn_attr(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS);
    void *workspace = nullptr;
    emu_cudnn_get(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, &workspace);
    if (!emu_is_device(workspace, EMU_CUDNN_WORKSPACE))
        emu_fail("emulated cuDNN: the workspace is not the plan's workspace size of device memory");
    std::shared_ptr<EmuCudnnGraph> g = plan->graph;
    std::shared_ptr<std::map<int64_t, EmuCudnnStore>> st(new std::map<int64_t, EmuCudnnStore>);
    for (const EmuCudnnOp &op : g->ops) {
        std::vector<const EmuCudnnTensor *> all;
        for (const EmuCudnnTensor &t : op.in) all.push_back(&t);
        all.push_back(&op.out);
        for (const EmuCudnnTensor *t : all) {
            if (st->count(t->uid)) continue;
            EmuCudnnStore s{g->outer.count(t->uid) ? &g->outer.at(t->uid) : t, nullptr, 0.0f, {}};
            if (t->is_virtual) {
                s.local.assign((size_t)t->extent(), 0.0f);
            } else {
                void *p = nullptr;
                for (int64_t k = 0; k < ids->count && !p; k++)
                    if (((const int64_t *)ids->bytes.data())[k] == t->uid) p = ((void *const *)ptrs->bytes.data())[k];
                if (!p) return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
                if (t->by_value) {
                    if (t->type != CUDNN_DATA_FLOAT && t->type != CUDNN_DATA_INT32)
                        emu_fail("emulated cuDNN: a by-value tensor that is neither fp32 nor int32");
                    // host memory, read at the call
                    s.scalar = t->type == CUDNN_DATA_INT32 ? (float)*(const int32_t *)p : *(const float *)p;
                } else {
                    size_t es = t->type == CUDNN_DATA_BFLOAT16 ? sizeof(bf16) : sizeof(float);
                    if (t->type != CUDNN_DATA_BFLOAT16 && t->type != CUDNN_DATA_FLOAT)
                        emu_fail("emulated cuDNN: a device tensor that is neither fp32 nor bf16");
                    if (!emu_is_device(p, (size_t)t->extent() * es)) {
                        fprintf(stderr, "emulated cuDNN: tensor uid %lld (%lld elements) is not device memory\n",
                                (long long)t->uid, (long long)t->extent());
                        emu_fail("emulated cuDNN: a tensor outside device memory");
                    }
                    if ((uintptr_t)p % (uintptr_t)t->alignment != 0) {
                        fprintf(stderr, "emulated cuDNN: tensor uid %lld is not %lld-byte aligned, as declared\n",
                                (long long)t->uid, (long long)t->alignment);
                        emu_fail("emulated cuDNN: a tensor less aligned than its descriptor says");
                    }
                    s.dev = p;
                }
            }
            (*st)[t->uid] = std::move(s);
        }
    }
    emu_enqueue(h->stream, [g, st] {
        for (const EmuCudnnOp &op : g->ops) emu_cudnn_run_op(op, *st);
    });
    return CUDNN_STATUS_SUCCESS;
}

#endif  // LLMC_CUDNN_EMULATOR_H
