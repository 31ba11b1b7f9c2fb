// gpt_gpu.cuh: the GPT-2 model on one GPU, mirroring llmc/gpt_cpu.h: the same
// flat parameter layout of what the rank holds (model.h: the whole model, or a
// pipeline rank's stages), a stage's forward (with the classifier's backward
// fused in when training) and backward (input gradients B and weight
// gradients W, together or apart) over a range of layers on one micro-batch's
// activations, gradient norm and AdamW, and the same segment hooks (model.h's
// GPTHooks) for a distributed layer.
// Precision: fp32 master weights, fp32 gradients (accumulated across
// micro-steps in fp32) and fp32 AdamW moments; a floatX copy of the weights and
// floatX activations for compute; LayerNorm statistics, losses and the residual
// stream's gradient in fp32.
// Tensor parallel (tensor_parallel.h): the model holds its slice of every
// split tensor and runs its heads and MLP columns; a row-parallel layer's
// partial sums (fp32) are completed over the tensor group (all-reduce, or
// reduce-scatter with sequence parallel, whose LayerNorm outputs are
// all-gathered before the column-parallel layers), and the embedding and the
// classifier's softmax cross-entropy run over the rank's vocabulary slice
// (tensor_parallel.cuh). With tp = 1 every step is the one-GPU arithmetic.
// Context parallel (context_parallel.cuh, m->cp): the activations hold the
// rank's positions of every sequence (T = T/cp), the embedding adds their wpe
// rows, attention gathers every position's K and V over the context group
// into the micro-batch's activations (GPUActs.kv: kept for the backward, a
// layer's own or, under full recompute, the scratch's shared copy, gathered
// again before the backward), so a pipeline's micro-batches in flight each
// keep theirs.
// Tokens and losses: the trainer uploads a step's micro-batches once
// (gpu_gpt_upload_tokens) and reads the step's losses back once
// (gpu_gpt_step_loss): one synchronisation per step, not per micro-step.
// Sharding (ZeroSharding, zero_shard.h), by ZeRO stage: the model owns its
// weights, gradients and AdamW state and updates them (gpu_gpt_update);
// zero_gpu.cuh only communicates, through the hooks:
//   0: everything whole.
//   1: the fp32 master weights and AdamW moments of one shard (zero_shard.h) of the
//      flat buffer only; the floatX copy and the gradients whole.
//   2: also the reduced gradients of the shard only (grad_shard); the backward
//      writes each layer's gradients into one of a few one-layer slots (the
//      embeddings' and ln_f's into buffers of their own) that the
//      distributed layer reduce-scatters into the shard as they complete.
//   3: also the floatX weights of the shard only (params_compute_shard); a layer's
//      weights are gathered into one of GPU_PARAM_SLOTS one-layer slots before
//      use (the embeddings' and ln_f's into buffers of their own).
// The model reads weights and writes gradients of segment s through
// param_view[s] / grad_view[s]: pointers indexed like the flat buffer and
// valid over the segment's range, which point into the whole buffer, a
// segment buffer or a slot (the distributed layer rebinds them in its hooks).
// Activation recompute (--recompute, recompute.h), per layer: none keeps
// everything; selective recomputes the GELU output before the layer's
// backward (the attention's softmax path is recomputed by its backward
// anyway: flash and cuDNN keep only the log-sum-exp); full keeps only the
// layer's input (the layer before's output) and runs the layer's forward again
// before its backward (the same kernels: the forward's bits). What a layer does
// not keep lives in one shared copy in the scratch (GPUScratch.layer_bf, layer_f32).
#ifndef LLMC_GPT_GPU_CUH
#define LLMC_GPT_GPU_CUH

#include "adamw.cuh"            // defines: AdamWPlan, adamw_plan_init, adamw_plan_free, gpu_adamw_round_like_step, ...
#include "attention_cudnn.cuh"  // defines: CudnnAttention, cudnn_attention_workspace_bytes, cudnn_attention_available, cudnn_attention_init, ...
#include "attention_flash.cuh"  // defines: flash_supports_head_size, gpu_flash_attention_forward, gpu_flash_attention_backward
#include "classifier.cuh"       // defines: gpu_fused_classifier
#include "context_parallel.cuh"  // defines: CPGPU, cp_gpu_attention_forward, cp_gpu_attention_backward, cp_gpu_local_wpe, ...
#include "cuda_common.cuh"      // defines: CUDA_CHECK, cudaMallocCheck, cuda_free_bytes, launch_kernel, ...
#include "encoder.cuh"          // defines: EncoderIndex, encoder_index_free, encoder_index_init, encoder_index_build, ...
#include "gelu.cuh"             // defines: gpu_gelu_forward, gpu_gelu_backward_inplace
#include "global_norm.cuh"      // defines: global_norm_scratch_floats, gpu_sum_of_squares, global_norm_result, gpu_sum_of_squares_ranges
#include "gpu_activation_sizes.h"  // defines: gpu_acts_layout, gpu_scratch_layout, gpu_rank_activation_bytes, gpu_layer_acts_bytes, GPU_ACT_BF, ...
#include "layernorm.cuh"        // defines: gpu_fused_residual_layernorm, gpu_layernorm_forward, gpu_layernorm_backward
#include "matmul.cuh"           // defines: MatmulContext, MATMUL_WORKSPACE_BYTES, matmul_init, matmul_free, ...
#include "model.h"              // defines: GPTConfig, ParamLayout, GPTHooks, ParamKind, ...
#include "param_map.h"          // defines: ParamMap, param_map_init, param_map_free
#include "pp_layout.h"          // defines: PPRankSets
#include "recompute.h"          // defines: RecomputePolicy, RecomputeKind, recompute_layer, recompute_any
#include "tensor_parallel.cuh"  // defines: gpu_tp_bias_floatX, gpu_tp_embed_rows, gpu_tp_embed_finish, tp_vocab_max_kernel, ...
#include "tensor_parallel.h"    // defines: TPContext, tp_on_stream, tp_off_stream, tp_complete_partial, ...
#include "zero_shard.h"         // defines: ZeroSharding, ShardMap, shard_map_init

typedef enum { ATTENTION_FLASH, ATTENTION_CUDNN } AttentionKind;

static_assert(sizeof(floatX) == GPU_FLOATX_BYTES, "gpu_activation_sizes.h sizes floatX buffers");

#define GPU_GRAD_SLOTS 2   // ZeRO-2/3: layers whose gradients are written or still being reduced
#define GPU_PARAM_SLOTS 3  // ZeRO-3: layers resident (in use, the next one's ln_1, one gathered ahead)

// The buffers of a state the model keeps by segment (ZeRO-2 gradients, ZeRO-3
// weights): one for the embeddings (segment 0), one for ln_f (segment L+1),
// when held, and num_slots one-layer slots that the layers take turns in.
typedef struct {
    void *embed, *lnf;
    void **slot;
    int num_slots;
} SegmentBuffers;

// Bytes the model needs on the device, by kind (reported at start, checked
// against cudaMemGetInfo, or a smaller --mem-limit-mb, before anything is allocated).
typedef struct {
    size_t params, grads, optimizer, activations, workspace;
    size_t segment_buffers;  // of params and grads (included in them): ZeRO-2/3's segment buffers and slots
    size_t layer_activations;  // of activations: what one layer keeps of one micro-batch
    size_t context;  // of activations: context parallel's buffers the micro-batches share (cp_gpu_bytes)
} GPUMemory;

static inline size_t gpu_memory_total(const GPUMemory *m) {
    return m->params + m->grads + m->optimizer + m->activations + m->workspace;
}

// One micro-batch's activations for a stage: layers [l0, l1) of the model
// (all of them for the whole model), with the embeddings when l0 == 0 and
// ln_f, the classifier and the loss when l1 == L. Per-layer arrays are indexed
// by the global layer (NULL outside [l0, l1)); with recomputation the
// recomputed ones point into the model's shared buffers. N = B * T; Cl =
// C/tp, NHl = NH/tp (this rank's heads); Nl = N/tp rows between the
// tensor-parallel regions with sequence parallel (else N); cp the context
// ranks (T: the rank's T/cp positions of each sequence).
typedef struct {
    // (N,C) (N,3Cl) (N,Cl) (Nl,C) (N,C) (N,4Cl) (N,4Cl) (Nl,C): LayerNorm outputs whole (gathered)
    floatX **ln1, **qkv, **atty, **residual2, **ln2, **fch, **fch_gelu, **residual3;
    float **ln1_mean, **ln1_rstd, **ln2_mean, **ln2_rstd, **lse;                    // (Nl) ... (B,NHl,T)
    // a split backward's weight gradients read these output gradients, kept per layer:
    floatX **dfcproj, **dfc, **dattproj, **dqkv;   // (N,C) (N,4Cl) (N,C) (N,3Cl)
    floatX **kv;              // context parallel (cp > 1): (B,T*cp,2Cl) every position's k | v, in global order
    floatX *input;            // (Nl,C): stage 0: the embeddings; else the activation the stage before sent
    float *lnf_mean, *lnf_rstd;  // (Nl) last stage
    floatX *dlnf;             // (Nl,C) last stage: the classifier's gradient into ln_f (a training forward)
    float *dres;            // (Nl,C) the residual stream's gradient: at the output (received), then the input's
    EncoderIndex index;     // stage 0: the micro-batch's positions grouped by token (the embedding backward)
    char *memory;
    size_t bytes;
    int l0, l1, split;
    int B, T;               // the shape of the last forward
    int trained;            // holds a training forward (its backward next)
    int weights_pending;    // a split backward's W has yet to run
} GPUActs;

// Buffers one pass uses and the next may reuse (shared by all micro-batches).
typedef struct {
    floatX *lnf, *logits, *proj;                   // (N,C) (N,Vp/tp) (N,C)
    floatX *dres_compute, *dln, *dbig, *dqkv, *datty; // (N,C) (N,C) (N,4Cl) (N,3Cl) (N,Cl)
    floatX *layer_bf[GPU_ACT_BF];                  // the recomputing layers' shared buffers (gpu_act_shared; NULL unused)
    float *layer_f32[GPU_ACT_F32];
    float *delta;                                // (B,NHl,T) attention backward scratch
    float *scratch;                              // column-reduction partials
    float *partial;                              // tp > 1: (N,C) a partial sum (fp32) completed over the group
    float *ce_max, *ce_gmax, *ce_stats;          // tp > 1: (tp,N) (N) (2,N) the vocabulary-parallel loss's
    char *memory;
    size_t bytes;
} GPUScratch;

typedef struct {
    GPTConfig cfg;
    ParamLayout layout;  // what this rank holds
    TPContext tp;        // the tensor group (device buffers; size 1: none)
    CPGPU *cp;           // the context group (NULL: none; the trainer sets it after gpu_gpt_init)
    int cp_size;         // its ranks (1: none): the activations keep every position's K and V
    ParamMap map;        // its buffer onto the global order (the AdamW rounding, checkpoints, model files)
    int B, T;            // activation capacity
    RecomputePolicy recompute;  // which layers recompute their activations (recompute.h)
    AttentionKind attention;
    cudaStream_t stream;
    MatmulContext mm;
    CudnnAttention cudnn;
    ZeroSharding sharding;  // what it holds of its state (see the top of the file)
    ShardMap shard;     // the range [shard.begin, shard.end) whose master weights and moments this model holds
    AdamWPlan adamw;    // over the shard
    float *params;      // (shard.shard) fp32 master weights of the shard, indexed from shard.begin
    float *adam_m, *adam_v;  // (shard.shard) each, indexed from shard.begin
    floatX *params_compute;  // (num_elements) the compute copy; stage 3: NULL
    floatX *params_compute_shard;  // stage 3: (shard.shard) the compute copy of the shard, indexed from shard.begin
    float *grads;       // (num_elements); stage >= 2: NULL
    float *grad_shard;  // stage >= 2: (shard.shard) the reduced gradients of the shard, indexed from shard.begin
    SegmentBuffers param_segments;  // stage 3
    SegmentBuffers grad_segments;   // stage >= 2
    floatX **param_view;  // (L+2) per segment: weights, indexed like the flat buffer
    float **grad_view;  // (L+2) per segment: gradients, indexed like the flat buffer
    // the classifier's weights when the layout lacks the embeddings (a
    // pipeline's last stage): a floatX copy of wte (Vp, C) and its fp32
    // gradient, kept equal to the first stage's by the pipeline; NULL otherwise
    floatX *tied_wte;
    float *tied_dwte;
    uint64_t params_version;  // counts changes of the weights (upload, AdamW step)
    GPTHooks hooks;
    float *norm_scratch;
    int64_t *norm_ranges;  // (2 norm_num_ranges) device: [lo, hi) of the split tensors' pieces of the shard (tensor parallel)
    int norm_num_ranges;
    GPUActs acts;       // the whole model's (one micro-batch at a time), unless pipelined
    GPUScratch scratch;
    GPUMemory mem;
    int *step_inputs, *step_targets;  // (step_cap * B*T) the step's micro-batches, uploaded once
    float *step_losses;               // (step_cap * B*T) each position's loss, read back once per step
    float *h_losses;                  // (step_cap * B*T) host copy
    int step_cap;
} GPTGPU;

// Weights of one layer in the floatX copy.
typedef struct {
    const floatX *ln1w, *ln1b, *qkvw, *qkvb, *attprojw, *attprojb, *ln2w, *ln2b, *fcw, *fcb, *fcprojw, *fcprojb;
} LayerWeights;

static inline const floatX *gpu_param_compute(const GPTGPU *m, ParamKind k, int layer) {
    return m->param_view[param_segment_of(&m->layout, k, layer)] + param_tensor(&m->layout, k, layer)->offset;
}
static inline float *gpu_grad(const GPTGPU *m, ParamKind k, int layer) {
    return m->grad_view[param_segment_of(&m->layout, k, layer)] + param_tensor(&m->layout, k, layer)->offset;
}
// The classifier's weights (tied to the token embedding) and their gradient.
static inline const floatX *gpu_wte(const GPTGPU *m) { return m->tied_wte ? m->tied_wte : gpu_param_compute(m, PK_WTE, -1); }
static inline float *gpu_dwte(const GPTGPU *m) { return m->tied_dwte ? m->tied_dwte : gpu_grad(m, PK_WTE, -1); }

// The gradients and the floatX weights of the shard as AdamW reads and writes
// them: indexed like the flat buffer, valid over [shard.begin, shard.end).
static inline float *gpu_shard_grads(const GPTGPU *m) {
    return m->grad_shard ? m->grad_shard - m->shard.begin : m->grads;
}
static inline floatX *gpu_shard_params_compute(const GPTGPU *m) {
    return m->params_compute_shard ? m->params_compute_shard - m->shard.begin : m->params_compute;
}

static inline LayerWeights gpu_layer_weights(const GPTGPU *m, int l) {
    LayerWeights w;
    const floatX **slots[PER_LAYER_KINDS] = {&w.ln1w, &w.ln1b, &w.qkvw, &w.qkvb, &w.attprojw, &w.attprojb,
                                           &w.ln2w, &w.ln2b, &w.fcw,  &w.fcb,  &w.fcprojw, &w.fcprojb};
    for (int k = 0; k < PER_LAYER_KINDS; k++) *slots[k] = gpu_param_compute(m, (ParamKind)k, l);
    return w;
}

// Binds a stage's buffers (gpu_acts_layout's offsets) to a's pointers in the allocation at base; a
// recomputing layer's to the scratch's shared copies.
typedef struct {
    GPUActs *a;
    const GPUScratch *sc;
    char *base;
} GPUActsBinding;
static void gpu_acts_bind(void *ctx, GPUBufKind kind, int s, int l, size_t at) {
    GPUActsBinding *b = (GPUActsBinding *)ctx;
    GPUActs *a = b->a;
    floatX **bf[GPU_ACT_BF] = {a->ln1, a->qkv, a->atty, a->residual2, a->ln2, a->fch, a->fch_gelu, a->residual3,
                               a->dfcproj, a->dfc, a->dattproj, a->dqkv, a->kv};
    float **f32[GPU_ACT_F32] = {a->ln1_mean, a->ln1_rstd, a->ln2_mean, a->ln2_rstd, a->lse};
    void **ends[GPU_ACT_ENDS] = {(void **)&a->input, (void **)&a->dres, (void **)&a->lnf_mean, (void **)&a->lnf_rstd,
                                 (void **)&a->dlnf};
    if (kind == GPU_BUF_LAYER_BF) bf[s][l] = at == GPU_BUF_SHARED ? b->sc->layer_bf[s] : (floatX *)(b->base + at);
    if (kind == GPU_BUF_LAYER_F32) f32[s][l] = at == GPU_BUF_SHARED ? b->sc->layer_f32[s] : (float *)(b->base + at);
    if (kind == GPU_BUF_END) *ends[s] = b->base + at;
}

// Binds the scratch's buffers (gpu_scratch_layout's offsets) in its allocation.
static void gpu_scratch_bind(void *ctx, GPUBufKind kind, int s, int l, size_t at) {
    (void)l;
    GPUScratch *sc = (GPUScratch *)ctx;
    void **parts[GPU_SCRATCH_PARTS] = {
        (void **)&sc->lnf, (void **)&sc->logits, (void **)&sc->proj, (void **)&sc->dres_compute, (void **)&sc->dln,
        (void **)&sc->dbig, (void **)&sc->dqkv, (void **)&sc->datty, (void **)&sc->delta, (void **)&sc->scratch,
        (void **)&sc->partial, (void **)&sc->ce_max, (void **)&sc->ce_gmax, (void **)&sc->ce_stats};
    if (kind == GPU_BUF_SCRATCH) *parts[s] = sc->memory + at;
    if (kind == GPU_BUF_SHARED_BF) sc->layer_bf[s] = (floatX *)(sc->memory + at);
    if (kind == GPU_BUF_SHARED_F32) sc->layer_f32[s] = (float *)(sc->memory + at);
}

static void gpu_acts_free(GPUActs *a) {
    if (!a->memory) return;
    floatX **bs[] = {a->ln1, a->qkv, a->atty, a->residual2, a->ln2, a->fch, a->fch_gelu, a->residual3,
                   a->dfcproj, a->dfc, a->dattproj, a->dqkv, a->kv};
    float **fs[] = {a->ln1_mean, a->ln1_rstd, a->ln2_mean, a->ln2_rstd, a->lse};
    for (size_t s = 0; s < sizeof(bs) / sizeof(bs[0]); s++) free(bs[s]);
    for (size_t s = 0; s < sizeof(fs) / sizeof(fs[0]); s++) free(fs[s]);
    CUDA_CHECK(cudaFree(a->memory));
    if (a->l0 == 0) encoder_index_free(&a->index);
    memset(a, 0, sizeof(*a));
}

// Activations of layers [l0, l1) for micro-batches of up to the model's B x T
// (split: kept for a later gpu_stage_backward_weights).
static void gpu_acts_alloc(GPTGPU *m, GPUActs *a, int l0, int l1, int split) {
    memset(a, 0, sizeof(*a));
    size_t L = m->cfg.num_layers;
    floatX ***bs[] = {&a->ln1, &a->qkv, &a->atty, &a->residual2, &a->ln2, &a->fch, &a->fch_gelu, &a->residual3,
                    &a->dfcproj, &a->dfc, &a->dattproj, &a->dqkv, &a->kv};
    float ***fs[] = {&a->ln1_mean, &a->ln1_rstd, &a->ln2_mean, &a->ln2_rstd, &a->lse};
    for (size_t s = 0; s < sizeof(bs) / sizeof(bs[0]); s++) *bs[s] = (floatX **)callocCheck(L, sizeof(floatX *));
    for (size_t s = 0; s < sizeof(fs) / sizeof(fs[0]); s++) *fs[s] = (float **)callocCheck(L, sizeof(float *));
    a->bytes = gpu_acts_layout(&m->cfg, m->B, m->T, l0, l1, &m->recompute, split, m->tp.size, m->tp.sp, m->cp_size,
                               NULL, NULL);
    a->memory = (char *)cudaMallocCheck(a->bytes);
    GPUActsBinding binding = {a, &m->scratch, a->memory};
    gpu_acts_layout(&m->cfg, m->B, m->T, l0, l1, &m->recompute, split, m->tp.size, m->tp.sp, m->cp_size,
                    gpu_acts_bind, &binding);
    a->l0 = l0, a->l1 = l1, a->split = split;
    if (l0 == 0) encoder_index_init(&a->index, m->B * m->T, m->cfg.vocab_size);
}

// Slots a state kept by segment has: `wanted` (never more than the held
// layers), or with a split backward one per held layer (a layer's gradients
// stay in its slot from its B to its W, while other layers' passes run).
static inline int segment_num_slots(const ParamLayout *pl, int wanted, int split) {
    int held = 0;
    for (int l = 0; l < pl->cfg.num_layers; l++) held += param_segment_held(pl, l + 1);
    return split || held < wanted ? held : wanted;
}

// The slot of layer segment s (held) among n: its place among the held layers, mod n.
static inline int segment_slot(const ParamLayout *pl, int s, int n) {
    int k = 0;
    for (int l = 0; l < s - 1; l++) k += param_segment_held(pl, l + 1);
    return k % n;
}

// Elements of the segment buffers of a state kept by segment: the
// embeddings, ln_f (those held) and num_slots layers.
static inline int64_t segment_buffer_elems(const ParamLayout *pl, int num_slots) {
    int last = param_num_segments(pl) - 1;
    int64_t n = (int64_t)num_slots * pl->layer_stride;
    if (param_segment_held(pl, 0)) n += pl->segment_hi[0] - pl->segment_lo[0];
    if (param_segment_held(pl, last)) n += pl->segment_hi[last] - pl->segment_lo[last];
    return n;
}

// The device memory a model of `held` (NULL: all of it) needs, without
// allocating anything, at its sharding, with its activations
// (gpu_activation_sizes.h's gpu_rank_activation_bytes: one micro-batch's; a
// pipeline rank, pipe: its runtime's sets of each chunk); T the rank's positions of
// a sequence, T x cp the whole (context parallel over cp ranks: its shared
// buffers, context_parallel.cuh's, counted here too).
static GPUMemory gpu_gpt_memory(const GPTConfig *cfg, const ParamHolding *held, int tp, int sp, int B, int T, int cp,
                                const RecomputePolicy *rp, AttentionKind attention, ZeroSharding sh,
                                const PPRankSets *pipe, int split) {
    ParamLayout pl;
    param_layout_init_held(&pl, cfg, held, tp, 0);
    ShardMap sm;
    shard_map_init(&sm, pl.num_elements, sh.rank, sh.world);
    size_t P = (size_t)sm.num_elements, S = (size_t)sm.shard;
    size_t pseg = sh.stage >= 3 ? (size_t)segment_buffer_elems(&pl, segment_num_slots(&pl, GPU_PARAM_SLOTS, 0)) : 0;
    size_t gseg = sh.stage >= 2 ? (size_t)segment_buffer_elems(&pl, segment_num_slots(&pl, GPU_GRAD_SLOTS, split)) : 0;
    int first = !held || held->embeddings, last = !held || held->lnf;
    param_layout_free(&pl);
    size_t tied = last && !first ? (size_t)cfg->padded_vocab_size / tp * cfg->channels : 0;
    GPUMemory m;
    m.params = (sh.stage >= 3 ? S + pseg : P) * sizeof(floatX) + S * sizeof(float) + tied * sizeof(floatX);
    m.grads = (sh.stage >= 2 ? S + gseg : P) * sizeof(float) + tied * sizeof(float);
    m.optimizer = 2 * S * sizeof(float);
    m.segment_buffers = pseg * sizeof(floatX) + gseg * sizeof(float);
    m.activations = gpu_rank_activation_bytes(cfg, held, B, T, cp, rp, split, tp, sp, pipe, &m.context);
    m.layer_activations = gpu_layer_acts_bytes(cfg, B, T, rp, split, tp, sp, cp);
    GPTConfig heads = *cfg;  // (cuDNN's graphs run the rank's heads)
    heads.channels /= tp, heads.num_heads /= tp;
    m.workspace = MATMUL_WORKSPACE_BYTES +
                  (attention == ATTENTION_CUDNN ? cudnn_attention_workspace_bytes(&heads, B, T) : 0) +
                  global_norm_scratch_floats() * sizeof(float);
    return m;
}

__global__ void f32_to_floatX_kernel(floatX *out, const float *in, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = to_floatX(in[i]);
}

// A pointer indexed like the flat buffer whose segment-s range is buf.
static inline void *segment_view(const ParamLayout *pl, void *buf, int s, size_t elem_bytes) {
    int64_t lo, hi;
    param_segment_range(pl, s, &lo, &hi);
    return (char *)buf - (size_t)lo * elem_bytes;
}

// Allocates the segment buffers of a state of elem_bytes elements and binds
// the embeddings' and ln_f's views to theirs (the layers' are bound to slots
// by the distributed layer).
static void segment_buffers_init(SegmentBuffers *sb, void **views, const ParamLayout *pl, int num_slots,
                                 size_t elem_bytes) {
    int last = param_num_segments(pl) - 1;
    sb->num_slots = num_slots;
    if (param_segment_held(pl, 0)) {
        sb->embed = cudaMallocCheck((size_t)(pl->segment_hi[0] - pl->segment_lo[0]) * elem_bytes);
        views[0] = segment_view(pl, sb->embed, 0, elem_bytes);
    }
    if (param_segment_held(pl, last)) {
        sb->lnf = cudaMallocCheck((size_t)(pl->segment_hi[last] - pl->segment_lo[last]) * elem_bytes);
        views[last] = segment_view(pl, sb->lnf, last, elem_bytes);
    }
    sb->slot = (void **)callocCheck((size_t)(num_slots > 0 ? num_slots : 1), sizeof(void *));
    for (int k = 0; k < sb->num_slots; k++) sb->slot[k] = cudaMallocCheck((size_t)pl->layer_stride * elem_bytes);
}

static void segment_buffers_free(SegmentBuffers *sb) {
    if (!sb->slot) return;
    CUDA_CHECK(cudaFree(sb->embed));
    CUDA_CHECK(cudaFree(sb->lnf));
    for (int k = 0; k < sb->num_slots; k++) CUDA_CHECK(cudaFree(sb->slot[k]));
    free(sb->slot);
    memset(sb, 0, sizeof(*sb));
}

// Zeroes the gradients of segment s where its view points now (queued).
static void gpu_gpt_zero_segment_grads(GPTGPU *m, int s) {
    int64_t lo, hi;
    param_segment_range(&m->layout, s, &lo, &hi);
    CUDA_CHECK(cudaMemsetAsync(m->grad_view[s] + lo, 0, sizeof(float) * (size_t)(hi - lo), m->stream));
}

// Zeroes the whole gradient buffer and the tied copy's (stages 0 and 1; at
// stage 2+ the distributed layer clears a segment's buffer once reduced).
static inline size_t gpu_wte_elems(const GPTGPU *m) {
    return (size_t)m->cfg.padded_vocab_size / (size_t)m->tp.size * (size_t)m->cfg.channels;
}
static void gpu_gpt_zero_grad(GPTGPU *m) {
    if (m->grads) CUDA_CHECK(cudaMemsetAsync(m->grads, 0, sizeof(float) * (size_t)m->layout.num_elements, m->stream));
    if (m->tied_dwte) CUDA_CHECK(cudaMemsetAsync(m->tied_dwte, 0, sizeof(float) * gpu_wte_elems(m), m->stream));
}

// Allocates everything for the part `held` names (NULL: the whole model) at
// tensor slice tp (tp_none(): whole tensors) and micro-batches of up to B x T
// at the given sharding; pipe, split: as gpu_gpt_memory (a pipeline's
// activations are allocated by its runtime, the whole model's here). A model
// that does not fit is a usage error: one line saying what it needs.
// The pieces of the shard that split tensors hold, adjacent ones merged
// (what a tensor rank other than 0 counts in the gradient norm).
static void gpu_norm_ranges_init(GPTGPU *m) {
    const ParamLayout *pl = &m->layout;
    int64_t lo = m->shard.begin, hi = m->shard.end, *r = (int64_t *)mallocCheck(sizeof(int64_t) * 2 * pl->num_tensors);
    int n = 0;
    for (int t = 0; t < pl->num_tensors; t++) {
        const ParamTensor *x = &pl->tensors[t];
        int64_t a = x->offset > lo ? x->offset : lo, b = x->offset + x->numel < hi ? x->offset + x->numel : hi;
        if (x->split == SPLIT_NONE || b <= a) continue;
        if (n > 0 && r[2 * n - 1] == a) r[2 * n - 1] = b;
        else r[2 * n] = a, r[2 * n + 1] = b, n++;
    }
    m->norm_num_ranges = n;
    m->norm_ranges = (int64_t *)cudaMallocCheck(sizeof(int64_t) * 2 * (size_t)(n > 0 ? n : 1));
    CUDA_CHECK(cudaMemcpy(m->norm_ranges, r, sizeof(int64_t) * 2 * (size_t)n, cudaMemcpyHostToDevice));
    free(r);
}

// cp: the context ranks (1: none; T is the rank's T/cp positions of a
// sequence, and the trainer sets m->cp after). mem_limit_mb: the rank's
// budget (--mem-limit-mb; 0: the device's free memory).
static void gpu_gpt_init(GPTGPU *m, const GPTConfig *cfg, const ParamHolding *held, TPContext tp, int B, int T, int cp,
                         RecomputePolicy recompute, AttentionKind attention, ZeroSharding sh, const PPRankSets *pipe, int split,
                         double mem_limit_mb) {
    memset(m, 0, sizeof(*m));
    m->cfg = *cfg;
    m->tp = tp;
    m->B = B;
    m->T = T;
    m->cp_size = cp;
    m->recompute = recompute;
    m->attention = attention;
    m->sharding = sh;
    int hs = cfg->channels / cfg->num_heads;
    if (attention == ATTENTION_FLASH && !flash_supports_head_size(hs))
        die_usage("--attention flash: head size %d (n-embd / n-head) is not 32 or 64", hs);
    if (attention == ATTENTION_CUDNN && !cudnn_attention_available())
        die_usage("--attention cudnn: this build has no cuDNN (set CUDNN_HOME and rebuild)");
    GPUMemory need = gpu_gpt_memory(cfg, held, tp.size, tp.sp, B, T, cp, &recompute, attention, sh, pipe, split);
    double total = (double)gpu_memory_total(&need), s;
    const char *unit = mem_unit(total, &s);
    MemBudget have = mem_budget((double)cuda_free_bytes(), "free", mem_limit_mb, total);
    if (total > have.bytes)
        die_usage("model (L=%d C=%d) at batch %d x %d needs %.2f %s on the GPU but %s (params %.2f, grads %.2f, "
                  "optimizer %.2f, activations %.2f, workspace %.2f %s); try a smaller --batch-size, --recompute full, "
                  "a higher --zero stage over more GPUs, or more --pp stages", cfg->num_layers, cfg->channels, B, T,
                  total / s, unit, have.text, need.params / s, need.grads / s, need.optimizer / s,
                  need.activations / s, need.workspace / s, unit);
    m->mem = need;
    param_layout_init_held(&m->layout, cfg, held, tp.size, tp.rank);
    param_map_init(&m->map, &m->layout);
    shard_map_init(&m->shard, m->layout.num_elements, sh.rank, sh.world);
    size_t P = (size_t)m->layout.num_elements, S = (size_t)m->shard.shard;
    int nseg = param_num_segments(&m->layout), last = param_segment_held(&m->layout, nseg - 1);
    CUDA_CHECK(cudaStreamCreate(&m->stream));
    if (tp.size > 1) tp_on_stream(&m->tp, m->stream);
    matmul_init(&m->mm);
    GPTConfig heads = *cfg;  // (cuDNN's graphs run the rank's heads)
    heads.channels /= tp.size, heads.num_heads /= tp.size;
    cudnn_attention_init(&m->cudnn, &heads, B, T, attention == ATTENTION_CUDNN, cp);
    adamw_plan_init(&m->adamw, &m->layout, m->shard.begin, m->shard.end, &m->map);
    m->params = (float *)cudaMallocCheck(S * sizeof(float));
    m->adam_m = (float *)cudaMallocCheck(S * sizeof(float));
    m->adam_v = (float *)cudaMallocCheck(S * sizeof(float));
    CUDA_CHECK(cudaMemset(m->adam_m, 0, S * sizeof(float)));
    CUDA_CHECK(cudaMemset(m->adam_v, 0, S * sizeof(float)));
    m->param_view = (floatX **)callocCheck((size_t)nseg, sizeof(floatX *));
    m->grad_view = (float **)callocCheck((size_t)nseg, sizeof(float *));
    if (sh.stage >= 3) {
        m->params_compute_shard = (floatX *)cudaMallocCheck(S * sizeof(floatX));
        CUDA_CHECK(cudaMemset(m->params_compute_shard, 0, S * sizeof(floatX)));  // the shard's padding stays zero
        segment_buffers_init(&m->param_segments, (void **)m->param_view, &m->layout,
                             segment_num_slots(&m->layout, GPU_PARAM_SLOTS, 0), sizeof(floatX));
    } else {
        m->params_compute = (floatX *)cudaMallocCheck(P * sizeof(floatX));
        for (int s = 0; s < nseg; s++) m->param_view[s] = m->params_compute;
    }
    if (sh.stage >= 2) {
        m->grad_shard = (float *)cudaMallocCheck(S * sizeof(float));
        CUDA_CHECK(cudaMemset(m->grad_shard, 0, S * sizeof(float)));
        segment_buffers_init(&m->grad_segments, (void **)m->grad_view, &m->layout,
                             segment_num_slots(&m->layout, GPU_GRAD_SLOTS, split), sizeof(float));
        if (m->grad_segments.embed)
            CUDA_CHECK(cudaMemset(m->grad_segments.embed, 0, sizeof(float) * (size_t)(m->layout.segment_hi[0] -
                                                                                       m->layout.segment_lo[0])));
        if (m->grad_segments.lnf)
            CUDA_CHECK(cudaMemset(m->grad_segments.lnf, 0, sizeof(float) * (size_t)(m->layout.segment_hi[nseg - 1] -
                                                                                     m->layout.segment_lo[nseg - 1])));
    } else {
        m->grads = (float *)cudaMallocCheck(P * sizeof(float));
        for (int s = 0; s < nseg; s++) m->grad_view[s] = m->grads;
    }
    if (last && !param_segment_held(&m->layout, 0)) {
        size_t n = gpu_wte_elems(m);
        m->tied_wte = (floatX *)cudaMallocCheck(n * sizeof(floatX));
        m->tied_dwte = (float *)cudaMallocCheck(n * sizeof(float));
        CUDA_CHECK(cudaMemset(m->tied_wte, 0, n * sizeof(floatX)));
    }
    m->norm_scratch = (float *)cudaMallocCheck(global_norm_scratch_floats() * sizeof(float));
    if (tp.size > 1) gpu_norm_ranges_init(m);
    m->scratch.bytes = gpu_scratch_layout(cfg, B, T, &recompute, last, tp.size, tp.sp, cp, NULL, NULL);
    m->scratch.memory = (char *)cudaMallocCheck(m->scratch.bytes);
    gpu_scratch_layout(cfg, B, T, &recompute, last, tp.size, tp.sp, cp, gpu_scratch_bind, &m->scratch);
    if (!held) gpu_acts_alloc(m, &m->acts, 0, cfg->num_layers, split);
    gpu_gpt_zero_grad(m);
}

static void gpu_gpt_free(GPTGPU *m) {
    if (m->tp.size > 1) tp_off_stream(&m->tp);
    gpu_acts_free(&m->acts);
    void *bufs[] = {m->params, m->grads, m->grad_shard, m->adam_m, m->adam_v, m->norm_scratch, m->norm_ranges, m->params_compute,
                    m->params_compute_shard, m->tied_wte, m->tied_dwte, m->scratch.memory, m->step_inputs,
                    m->step_targets, m->step_losses};
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++) CUDA_CHECK(cudaFree(bufs[i]));  // cudaFree(NULL) is a no-op
    segment_buffers_free(&m->param_segments);
    segment_buffers_free(&m->grad_segments);
    free(m->param_view);
    free(m->grad_view);
    adamw_plan_free(&m->adamw);
    cudnn_attention_free(&m->cudnn);
    matmul_free(&m->mm);
    CUDA_CHECK(cudaStreamDestroy(m->stream));
    free(m->h_losses);
    param_map_free(&m->map);
    param_layout_free(&m->layout);
    memset(m, 0, sizeof(*m));
}

// Uploads fp32 weights (host, the layout's num_elements in its order): the
// floatX copy (all of it, or the shard's at stage 3) and the master copy of the
// shard. A buffer of the scratch stages the upload in chunks.
static void gpu_gpt_set_params(GPTGPU *m, const float *host) {
    int64_t P = m->layout.num_elements, begin = m->shard.begin, end = m->shard.end;
    int64_t chunk = (int64_t)(m->scratch.bytes / sizeof(float));
    if (chunk > (1 << 24)) chunk = 1 << 24;
    float *staging = (float *)m->scratch.memory;
    floatX *bf = gpu_shard_params_compute(m);
    int whole_compute = m->params_compute != NULL;
    for (int64_t lo = 0; lo < P; lo += chunk) {
        int64_t hi = lo + chunk < P ? lo + chunk : P;
        CUDA_CHECK(cudaMemcpyAsync(staging, host + lo, sizeof(float) * (size_t)(hi - lo), cudaMemcpyHostToDevice,
                                   m->stream));
        int64_t a = whole_compute || lo > begin ? lo : begin, b = whole_compute || hi < end ? hi : end;
        if (b > a) {
            launch_kernel(f32_to_floatX_kernel, ceil_div_int(b - a, 256), 256, 0, m->stream, bf + a, staging + (a - lo),
                          b - a);
            CUDA_CHECK_LAUNCH();
        }
        a = lo > begin ? lo : begin;
        b = hi < end ? hi : end;
        if (b > a)
            CUDA_CHECK(cudaMemcpyAsync(m->params + (a - begin), staging + (a - lo), sizeof(float) * (size_t)(b - a),
                                       cudaMemcpyDeviceToDevice, m->stream));
        CUDA_CHECK(cudaStreamSynchronize(m->stream));  // before the host chunk and the staging are reused
    }
    m->params_version++;
}

// Checkpoints: queues on stream s the copy of [lo, hi) (inside the shard) of
// the master weights, AdamW m and v into pinned host staging (3, hi - lo).
static void gpu_gpt_stage_state(GPTGPU *m, float *staging, int64_t lo, int64_t hi, cudaStream_t s) {
    const float *states[3] = {m->params, m->adam_m, m->adam_v};
    size_t n = (size_t)(hi - lo);
    for (int k = 0; k < 3; k++)
        CUDA_CHECK(cudaMemcpyAsync(staging + k * n, states[k] + (lo - m->shard.begin), sizeof(float) * n,
                                   cudaMemcpyDeviceToHost, s));
}

// Installs the shard's master weights, m and v from host arrays (each over
// [shard.begin, shard.end)) and the shard's floatX copy as the AdamW step seeded
// `seed` rounded it (the distributed layer then gathers the rest).
static void gpu_gpt_load_state(GPTGPU *m, float *const states[3], uint64_t seed) {
    float *dst[3] = {m->params, m->adam_m, m->adam_v};
    int64_t n = m->shard.end - m->shard.begin;
    for (int k = 0; k < 3; k++)
        CUDA_CHECK(cudaMemcpyAsync(dst[k], states[k], sizeof(float) * (size_t)n, cudaMemcpyHostToDevice, m->stream));
    gpu_adamw_round_like_step(&m->adamw, gpu_shard_params_compute(m), m->params - m->shard.begin, seed, m->stream);
    CUDA_CHECK(cudaStreamSynchronize(m->stream));
    m->params_version++;
}

// Downloads the fp32 master weights of the shard into host[shard.begin,
// shard.end) (host has num_elements; the rest is left as it is), or the whole
// gradients (stages 0 and 1) into host (num_elements).
static void gpu_gpt_get_params(GPTGPU *m, float *host) {
    CUDA_CHECK(cudaStreamSynchronize(m->stream));
    CUDA_CHECK(cudaMemcpy(host + m->shard.begin, m->params, sizeof(float) * (size_t)(m->shard.end - m->shard.begin),
                          cudaMemcpyDeviceToHost));
}
// A ModelFileFetch (modelfile.h) over the fp32 master weights this rank
// holds: [lo, hi) of its buffer (inside its shard) into host dst.
static void gpu_gpt_read_params(void *ctx, int64_t lo, int64_t hi, float *dst) {
    GPTGPU *m = (GPTGPU *)ctx;
    CHECK(lo >= m->shard.begin && hi <= m->shard.end, "gpu_gpt_read_params: [%lld, %lld) is not held here",
          (long long)lo, (long long)hi);
    CUDA_CHECK(cudaStreamSynchronize(m->stream));
    CUDA_CHECK(cudaMemcpy(dst, m->params + (lo - m->shard.begin), sizeof(float) * (size_t)(hi - lo),
                          cudaMemcpyDeviceToHost));
}
static void gpu_gpt_get_grads(GPTGPU *m, float *host) {
    CHECK(m->grads != NULL, "gpu_gpt_get_grads: the gradients are sharded (ZeRO stage %d)", m->sharding.stage);
    CUDA_CHECK(cudaStreamSynchronize(m->stream));
    CUDA_CHECK(cudaMemcpy(host, m->grads, sizeof(float) * (size_t)m->layout.num_elements, cudaMemcpyDeviceToHost));
}

// kv: the layer's gathered K and V (context parallel; else unused).
static void gpu_attention_forward(GPTGPU *m, floatX *kv, floatX *out, float *lse, const floatX *qkv, int B, int T) {
    NVTX_RANGE("attention_forward");
    if (m->cp) cp_gpu_attention_forward(m->cp, kv, out, lse, qkv, B, m->stream);
    else if (m->attention == ATTENTION_CUDNN)
        gpu_cudnn_attention_forward(&m->cudnn, out, lse, qkv, B, T, m->cfg.channels / m->tp.size,
                                    m->cfg.num_heads / m->tp.size, m->stream);
    else gpu_flash_attention_forward(out, lse, qkv, B, T, m->cfg.channels / m->tp.size, m->cfg.num_heads / m->tp.size,
                                     m->stream);
}

static void gpu_attention_backward(GPTGPU *m, const floatX *kv, floatX *dqkv, const floatX *dout, const floatX *qkv,
                                   const floatX *out, const float *lse, int B, int T) {
    NVTX_RANGE("attention_backward");
    if (m->cp) cp_gpu_attention_backward(m->cp, kv, dqkv, m->scratch.delta, dout, qkv, out, lse, B, m->stream);
    else if (m->attention == ATTENTION_CUDNN)
        gpu_cudnn_attention_backward(&m->cudnn, dqkv, m->scratch.delta, dout, qkv, out, lse, B, T,
                                     m->cfg.channels / m->tp.size, m->cfg.num_heads / m->tp.size, m->stream);
    else gpu_flash_attention_backward(dqkv, m->scratch.delta, dout, qkv, out, lse, B, T, m->cfg.channels / m->tp.size,
                                      m->cfg.num_heads / m->tp.size, m->stream);
}

// ---------------------------------------------------------------------------
// the step's tokens and losses

// Uploads n micro-batches' inputs and targets (host, (n, B*T) each; checked
// to be tokens of the vocabulary) for the step's passes to read.
static void gpu_gpt_upload_tokens(GPTGPU *m, const int *xs, const int *ys, int n) {
    size_t N = (size_t)m->B * m->T, total = N * (size_t)n;
    int V = m->cfg.vocab_size;
    for (size_t i = 0; i < total; i++) {
        CHECK(xs[i] >= 0 && xs[i] < V, "input token %d out of range [0, %d)", xs[i], V);
        CHECK(!ys || (ys[i] >= 0 && ys[i] < V), "target token %d out of range [0, %d)", ys[i], V);
    }
    if (n > m->step_cap) {
        CUDA_CHECK(cudaStreamSynchronize(m->stream));
        CUDA_CHECK(cudaFree(m->step_inputs));
        CUDA_CHECK(cudaFree(m->step_targets));
        CUDA_CHECK(cudaFree(m->step_losses));
        free(m->h_losses);
        m->step_inputs = (int *)cudaMallocCheck(sizeof(int) * total);
        m->step_targets = (int *)cudaMallocCheck(sizeof(int) * total);
        m->step_losses = (float *)cudaMallocCheck(sizeof(float) * total);
        m->h_losses = (float *)mallocCheck(sizeof(float) * total);
        m->step_cap = n;
    }
    CUDA_CHECK(cudaMemcpyAsync(m->step_inputs, xs, sizeof(int) * total, cudaMemcpyHostToDevice, m->stream));
    if (ys) CUDA_CHECK(cudaMemcpyAsync(m->step_targets, ys, sizeof(int) * total, cudaMemcpyHostToDevice, m->stream));
}

// The sum over n micro-batches of their mean losses (what the last stage's
// forwards wrote), read back in one copy: the step's one synchronisation.
static double gpu_gpt_step_loss(GPTGPU *m, int n) {
    size_t N = (size_t)m->B * m->T;
    CUDA_CHECK(cudaMemcpyAsync(m->h_losses, m->step_losses, sizeof(float) * N * (size_t)n, cudaMemcpyDeviceToHost,
                               m->stream));
    CUDA_CHECK(cudaStreamSynchronize(m->stream));
    double total = 0.0;
    for (int k = 0; k < n; k++) {
        double mb = 0.0;
        for (size_t i = 0; i < N; i++) mb += m->h_losses[(size_t)k * N + i];
        total += mb / (double)N;
    }
    return total;
}

// ---------------------------------------------------------------------------
// the tensor-parallel pieces (each one the one-GPU arithmetic at tp = 1)

__global__ void residual_add_kernel(floatX *out, const floatX *a, const floatX *b, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = to_floatX(to_float(a[i]) + to_float(b[i]));
}

// A row-parallel layer's output before the residual add: proj (Nl,C) floatX =
// inp (N,IC) @ W^T + bias, the product's partial sums (this rank's IC
// columns, fp32) completed over the tensor group.
static void gpu_row_parallel_forward(GPTGPU *m, floatX *proj, const floatX *inp, const floatX *W, const floatX *bias, int N,
                                     int IC, int C) {
    cudaStream_t s = m->stream;
    if (m->tp.size == 1) {
        gpu_matmul_forward(&m->mm, proj, NULL, inp, W, bias, N, IC, C, s);
        return;
    }
    float *partial = m->scratch.partial;
    // partial^T (C,N) = W-as-stored (IC,C)^T @ inp^T (IC,N), fp32
    matmul_lt(&m->mm, partial, CUDA_R_32F, W, 1, IC, inp, 0, IC, C, N, IC, C, 0, CUBLASLT_EPILOGUE_DEFAULT, NULL, NULL, s);
    const float *sum = (const float *)tp_complete_partial(&m->tp, partial, N, C, COMM_F32);
    gpu_tp_bias_floatX(proj, sum, bias, tp_rows(&m->tp, N), C, s);
}

// A LayerNorm of the rank's rows fused with the residual add before it:
// res_out (Nl,C) = res_in + x; ln_out rows [r0, r0+Nl) of (N,C), the whole
// all-gathered with sequence parallel.
static void gpu_residual_layernorm_gathered(GPTGPU *m, floatX *res_out, floatX *ln_out, float *mean, float *rstd,
                                            const floatX *res_in, const floatX *x, const floatX *w, const floatX *b, int N,
                                            int C) {
    gpu_fused_residual_layernorm(res_out, ln_out + (size_t)tp_row0(&m->tp, N) * C, mean, rstd, res_in, x, w, b,
                                 tp_rows(&m->tp, N), C, m->stream);
    if (m->tp.sp) tp_gather_rows(&m->tp, ln_out, N, C, COMM_FLOATX);
}
// The same without the residual add (a stage's first LayerNorm, or a recomputed one).
static void gpu_layernorm_gathered(GPTGPU *m, floatX *out, float *mean, float *rstd, const floatX *inp, const floatX *w,
                                   const floatX *b, int N, int C) {
    gpu_layernorm_forward(out + (size_t)tp_row0(&m->tp, N) * C, mean, rstd, inp, w, b, tp_rows(&m->tp, N), C,
                          m->stream);
    if (m->tp.sp) tp_gather_rows(&m->tp, out, N, C, COMM_FLOATX);
}

// A column-parallel layer's backward: dW += dout^T @ inp and dbias over the
// rank's columns, and the input gradient dinp (N,C) completed over the tensor
// group into dln's first Nl rows (floatX).
template <typename T>
static void gpu_column_parallel_backward(GPTGPU *m, floatX *dln, float *dW, float *dbias, const floatX *dout,
                                         const T *dbias_src, const floatX *inp, const floatX *W, int N, int C, int OCl) {
    cudaStream_t s = m->stream;
    if (m->tp.size == 1) {
        gpu_matmul_backward<T>(&m->mm, dln, dW, dbias, m->scratch.scratch, dout, dbias_src, inp, W, N, C, OCl, s);
        return;
    }
    gpu_matmul_backward<T>(&m->mm, NULL, dW, dbias, m->scratch.scratch, dout, dbias_src, inp, W, N, C, OCl, s);
    float *partial = m->scratch.partial;
    // partial^T (C,N) = W-as-stored (C,OCl) @ dout^T (OCl,N), fp32
    matmul_lt(&m->mm, partial, CUDA_R_32F, W, 0, C, dout, 0, OCl, C, N, OCl, C, 0, CUBLASLT_EPILOGUE_DEFAULT, NULL, NULL,
              s);
    const float *sum = (const float *)tp_complete_partial(&m->tp, partial, N, C, COMM_F32);
    int64_t n = (int64_t)tp_rows(&m->tp, N) * C;
    launch_kernel(f32_to_floatX_kernel, ceil_div_int(n, 256), 256, 0, s, dln, sum, n);
    CUDA_CHECK_LAUNCH();
}

// The residual gradient in floatX the row-parallel layers read (N,C): the
// LayerNorm backward wrote the rank's rows at their place; with sequence
// parallel the others are gathered.
static const floatX *gpu_dres_gathered(GPTGPU *m, int N, int C) {
    if (m->tp.sp) tp_gather_rows(&m->tp, m->scratch.dres_compute, N, C, COMM_FLOATX);
    return m->scratch.dres_compute;
}

// ---------------------------------------------------------------------------
// a stage's forward and backward

// Layer l's forward from its ln_1 output (made by the layer before's fused
// residual add, or the stage's first LayerNorm) to its MLP's GELU output.
static void gpu_layer_forward_inner(GPTGPU *m, GPUActs *a, int l, const LayerWeights *w, int B, int T) {
    int C = m->cfg.channels, Cl = C / m->tp.size, N = B * T;
    const floatX *residual = l == a->l0 ? a->input : a->residual3[l - 1];
    gpu_matmul_forward(&m->mm, a->qkv[l], NULL, a->ln1[l], w->qkvw, w->qkvb, N, C, 3 * Cl, m->stream);
    gpu_attention_forward(m, a->kv[l], a->atty[l], a->lse[l], a->qkv[l], B, T);
    gpu_row_parallel_forward(m, m->scratch.proj, a->atty[l], w->attprojw, w->attprojb, N, Cl, C);
    gpu_residual_layernorm_gathered(m, a->residual2[l], a->ln2[l], a->ln2_mean[l], a->ln2_rstd[l], residual,
                                    m->scratch.proj, w->ln2w, w->ln2b, N, C);
    gpu_matmul_forward(&m->mm, a->fch_gelu[l], a->fch[l], a->ln2[l], w->fcw, w->fcb, N, C, 4 * Cl, m->stream);
}

// Forward of layers [a->l0, a->l1) on micro-batch mb of the step's tokens
// (x_host: its inputs, for the embedding backward's index), B x T. The first
// stage embeds; any other reads a->input (what the stage before sent). The
// last stage computes the losses into the step's buffer (without targets:
// logits only, in the scratch's logits) and, when dloss != 0 (training), the
// classifier's backward, fused with the softmax: dlnf and the wte gradient.
// Other stages leave their output in a->residual3[l1 - 1]. The next layer's
// LayerNorm is fused with each residual add inside the stage.
static void gpu_stage_forward(GPTGPU *m, GPUActs *a, const int *x_host, int mb, int B, int T, int with_targets,
                              float dloss) {
    NVTX_RANGE("forward");
    const GPTConfig *c = &m->cfg;
    int L = c->num_layers, C = c->channels, tp = m->tp.size, Cl = C / tp, V = c->vocab_size;
    int Vl = c->padded_vocab_size / tp, l0 = a->l0, l1 = a->l1;
    CHECK(B <= m->B && T <= m->T, "batch %d x %d exceeds the allocated %d x %d", B, T, m->B, m->T);
    int N = B * T, Nl = tp_rows(&m->tp, N), r0 = tp_row0(&m->tp, N), v0 = 0, vreal = V;
    if (tp > 1) tp_vocab_slice(c, &m->tp, &v0, &vreal);
    const int *inputs = m->step_inputs + (size_t)mb * m->B * m->T, *targets = m->step_targets + (size_t)mb * m->B * m->T;
    cudaStream_t s = m->stream;
    const ParamLayout *pl = &m->layout;
    const GPTHooks *h = &m->hooks;
    GPUScratch *sc = &m->scratch;
    a->B = B, a->T = T, a->trained = 0;
    if (l0 == 0) {
        if (dloss != 0.0f) encoder_index_build(&a->index, x_host, N, v0, tp > 1 ? vreal : V, s);
        gpt_hooks_params_needed(h, 0, HOOK_FORWARD);
        const floatX *wte = gpu_param_compute(m, PK_WTE, -1), *wpe = gpu_param_compute(m, PK_WPE, -1);
        if (m->cp) wpe = cp_gpu_local_wpe(m->cp, wpe, s);  // (the rank's positions' rows)
        if (tp == 1) {
            gpu_encoder_forward(a->input, inputs, wte, wpe, B, T, C, s);
        } else {  // the rank's vocabulary rows, completed over the group, then the positions
            gpu_tp_embed_rows(sc->partial, inputs, wte, v0, vreal, N, C, s);
            const float *sum = (const float *)tp_complete_partial(&m->tp, sc->partial, N, C, COMM_F32);
            gpu_tp_embed_finish(a->input, sum, wpe, r0, T, Nl, C, s);
        }
    }
    gpt_hooks_params_needed(h, l0 + 1, HOOK_FORWARD);
    LayerWeights w0 = gpu_layer_weights(m, l0);
    gpu_layernorm_gathered(m, a->ln1[l0], a->ln1_mean[l0], a->ln1_rstd[l0], a->input, w0.ln1w, w0.ln1b, N, C);
    for (int l = l0; l < l1; l++) {
        NVTX_RANGE("layer_forward");
        gpt_hooks_params_needed(h, l + 1, HOOK_FORWARD);
        gpt_hooks_prefetch(h, pl, l + 1 < l1 ? l + 2 : L + 1);
        LayerWeights w = gpu_layer_weights(m, l);
        gpu_layer_forward_inner(m, a, l, &w, B, T);
        gpu_row_parallel_forward(m, sc->proj, a->fch_gelu[l], w.fcprojw, w.fcprojb, N, 4 * Cl, C);
        if (l + 1 < l1) {  // the next layer's ln_1 fused with this residual add
            gpt_hooks_params_needed(h, l + 2, HOOK_FORWARD);
            LayerWeights wn = gpu_layer_weights(m, l + 1);
            gpu_residual_layernorm_gathered(m, a->residual3[l], a->ln1[l + 1], a->ln1_mean[l + 1], a->ln1_rstd[l + 1],
                                            a->residual2[l], sc->proj, wn.ln1w, wn.ln1b, N, C);
        } else if (l1 == L) {  // ln_f fused with the last residual add
            gpt_hooks_params_needed(h, L + 1, HOOK_FORWARD);
            gpu_residual_layernorm_gathered(m, a->residual3[l], sc->lnf, a->lnf_mean, a->lnf_rstd, a->residual2[l],
                                            sc->proj, gpu_param_compute(m, PK_LNFW, -1), gpu_param_compute(m, PK_LNFB, -1), N,
                                            C);
        } else {  // the stage's output, for the next stage (which computes its ln_1)
            int64_t n = (int64_t)Nl * C;
            launch_kernel(residual_add_kernel, ceil_div_int(n, 256), 256, 0, s, a->residual3[l], a->residual2[l],
                          sc->proj, n);
            CUDA_CHECK_LAUNCH();
        }
    }
    if (l1 < L) {
        a->trained = dloss != 0.0f;
        return;
    }
    NVTX_RANGE("classifier");
    // wte: segment 0's (made ready at the top of this pass on the whole model; no second params_needed(0),
    // which ZeRO-3 would take for a gather) or the last stage's copy; the rank's vocabulary rows
    const floatX *wte = gpu_wte(m);
    // logits (N,Vl) over the Vl rows of wte (the padded rows are zero, and excluded below)
    gpu_matmul_forward(&m->mm, sc->logits, NULL, sc->lnf, wte, NULL, N, C, Vl, s);
    if (!with_targets) return;
    float *losses = m->step_losses + (size_t)mb * m->B * m->T;
    if (tp == 1) {
        gpu_fused_classifier(sc->logits, losses, targets, N, V, Vl, dloss, s);
    } else {  // the maxima, then the sums and the target logits, reduced over the group; then losses and dlogits
        launch_kernel(tp_vocab_max_kernel, N, TP_ROW_THREADS, 0, s, sc->ce_max + (size_t)m->tp.rank * N, sc->logits, Vl,
                      vreal);
        CUDA_CHECK_LAUNCH();
        for (int r = 0; r < tp; r++) m->tp.counts[r] = (size_t)N;
        CommRequest q = comm_all_gather_start(m->tp.group, NULL, sc->ce_max, m->tp.counts, COMM_F32);
        comm_wait(&q);
        launch_kernel(tp_vocab_sums_kernel, N, TP_ROW_THREADS, 0, s, sc->ce_stats, sc->ce_gmax, sc->ce_max, tp,
                      sc->logits, targets, N, Vl, vreal, v0);
        CUDA_CHECK_LAUNCH();
        tp_all_reduce(&m->tp, sc->ce_stats, 2 * (size_t)N, COMM_F32);
        launch_kernel(tp_vocab_finish_kernel, N, TP_ROW_THREADS, 0, s, sc->logits, losses, sc->ce_stats, sc->ce_gmax,
                      targets, N, Vl, vreal, v0, dloss, dloss != 0.0f);
        CUDA_CHECK_LAUNCH();
    }
    if (dloss != 0.0f) {
        // dlnf = dlogits @ wte (a partial sum over the vocabulary slices); dwte += dlogits^T @ lnf (padded columns of
        // dlogits are 0)
        if (!m->tied_dwte) gpt_hooks_params_needed(h, 0, HOOK_GRADS);
        gpu_column_parallel_backward<floatX>(m, a->dlnf, gpu_dwte(m), NULL, sc->logits, NULL, sc->lnf, wte, N, C, Vl);
        a->trained = 1;
    }
}

// What layer l's backward reads and its recompute policy did not keep,
// computed again by the forward's kernels: the GELU output from the kept
// pre-activation (selective), or the layer's forward from its input (full:
// its ln_1 unfused, the same bits as the fused one: layernorm.cuh).
static void gpu_layer_recompute(GPTGPU *m, GPUActs *a, int l, const LayerWeights *w) {
    int C = m->cfg.channels, Cl = C / m->tp.size, N = a->B * a->T;
    RecomputeKind kind = recompute_layer(&m->recompute, l);
    if (kind == RECOMPUTE_SELECTIVE) gpu_gelu_forward(a->fch_gelu[l], a->fch[l], (int64_t)N * 4 * Cl, m->stream);
    if (kind != RECOMPUTE_FULL) return;
    gpu_layernorm_gathered(m, a->ln1[l], a->ln1_mean[l], a->ln1_rstd[l], l == a->l0 ? a->input : a->residual3[l - 1],
                           w->ln1w, w->ln1b, N, C);
    gpu_layer_forward_inner(m, a, l, w, a->B, a->T);
}

// The embeddings' gradient (first stage), from the residual gradient at layer
// 0's input: wte's rows (the rank's vocabulary slice) from every position's,
// wpe's from the rank's positions (all of them without sequence parallel).
static void gpu_embedding_backward(GPTGPU *m, GPUActs *a) {
    gpt_hooks_params_needed(&m->hooks, 0, HOOK_GRADS);
    int C = m->cfg.channels, N = a->B * a->T;
    cudaStream_t s = m->stream;
    float *dwpe = m->cp ? cp_gpu_local_dwpe(m->cp, s) : gpu_grad(m, PK_WPE, -1);  // (the rank's positions' rows)
    if (!m->tp.sp) {
        gpu_encoder_backward(gpu_grad(m, PK_WTE, -1), dwpe, a->dres, &a->index, a->B, a->T, C, s);
    } else {
        float *full = m->scratch.partial;  // the residual gradient's rows gathered
        CUDA_CHECK(cudaMemcpyAsync(full + (size_t)tp_row0(&m->tp, N) * C, a->dres,
                                   sizeof(float) * (size_t)tp_rows(&m->tp, N) * C, cudaMemcpyDeviceToDevice, s));
        tp_gather_rows(&m->tp, full, N, C, COMM_F32);
        gpu_encoder_backward_wte(gpu_grad(m, PK_WTE, -1), full, &a->index, C, s);
        gpu_tp_wpe_backward(dwpe, a->dres, tp_row0(&m->tp, N), a->T, tp_rows(&m->tp, N), C, s);
    }
    if (m->cp) cp_gpu_add_dwpe(m->cp, gpu_grad(m, PK_WPE, -1), s);
    gpt_hooks_grads_ready(&m->hooks, 0);
}

// Backward of the training forward a holds, through layers [a->l0, a->l1):
// the gradient enters from the loss (last stage) or in a->dres (fp32, what
// the stage after sent) and leaves in a->dres (the stage input's). Without
// a->split the weight gradients accumulate into the gradients (fp32, through
// grad_view) as it goes, and the embeddings' on the first stage; with it only
// the input gradients (with the LayerNorms' and the biases', which come with
// them) are computed, and gpu_stage_backward_weights adds the rest later, to
// the same numbers.
static void gpu_stage_backward(GPTGPU *m, GPUActs *a) {
    NVTX_RANGE("backward");
    CHECK(a->trained, "gpu_stage_backward without a training forward (dloss != 0)");
    const GPTConfig *c = &m->cfg;
    int L = c->num_layers, C = c->channels, Cl = C / m->tp.size, l0 = a->l0, l1 = a->l1, split = a->split;
    int B = a->B, T = a->T, N = B * T, Nl = tp_rows(&m->tp, N), r0 = tp_row0(&m->tp, N);
    cudaStream_t s = m->stream;
    const ParamLayout *pl = &m->layout;
    const GPTHooks *h = &m->hooks;
    GPUScratch *sc = &m->scratch;
    floatX *dres_compute = sc->dres_compute + (size_t)r0 * C;  // (the rank's rows at their place: gathered for the matmuls)
    if (l1 == L) {
        CUDA_CHECK(cudaMemsetAsync(a->dres, 0, sizeof(float) * (size_t)Nl * C, s));
        gpt_hooks_params_needed(h, L + 1, HOOK_BACKWARD);
        gpt_hooks_prefetch(h, pl, l1);
        gpu_layernorm_backward(a->dres, dres_compute, gpu_grad(m, PK_LNFW, -1), gpu_grad(m, PK_LNFB, -1), sc->scratch,
                               a->dlnf, a->residual3[L - 1], gpu_param_compute(m, PK_LNFW, -1), a->lnf_mean, a->lnf_rstd,
                               Nl, C, s);
        gpt_hooks_grads_ready(h, L + 1);
    } else {  // the received gradient, in floatX for the first matmul
        int64_t n = (int64_t)Nl * C;
        launch_kernel(f32_to_floatX_kernel, ceil_div_int(n, 256), 256, 0, s, dres_compute, a->dres, n);
        CUDA_CHECK_LAUNCH();
    }
    for (int l = l1 - 1; l >= l0; l--) {
        NVTX_RANGE("layer_backward");
        gpt_hooks_params_needed(h, l + 1, HOOK_BACKWARD);
        if (l > l0) gpt_hooks_prefetch(h, pl, l);
        LayerWeights w = gpu_layer_weights(m, l);
        LayerTensors g = layer_tensors(pl, m->grad_view[l + 1], l);
        const floatX *residual = l == l0 ? a->input : a->residual3[l - 1];
        floatX *dbig = split ? a->dfc[l] : sc->dbig, *dqkv = split ? a->dqkv[l] : sc->dqkv;
        gpu_layer_recompute(m, a, l, &w);
        // dres: gradient w.r.t. residual3 = residual2 + mlp(ln2(residual2))
        const floatX *dout = gpu_dres_gathered(m, N, C);
        if (split) CUDA_CHECK(cudaMemcpyAsync(a->dfcproj[l], dout, sizeof(floatX) * (size_t)N * C,
                                              cudaMemcpyDeviceToDevice, s));
        gpu_matmul_backward<float>(&m->mm, dbig, split ? NULL : g.fcprojw, NULL, NULL, dout, NULL, a->fch_gelu[l],
                                   w.fcprojw, N, 4 * Cl, C, s);
        gpu_colsum_accumulate<float>(g.fcprojb, sc->scratch, a->dres, Nl, C, s);
        gpu_gelu_backward_inplace(dbig, a->fch[l], (int64_t)N * 4 * Cl, s);
        gpu_column_parallel_backward<floatX>(m, sc->dln, split ? NULL : g.fcw, g.fcb, dbig, dbig, a->ln2[l], w.fcw, N, C,
                                           4 * Cl);
        gpu_layernorm_backward(a->dres, dres_compute, g.ln2w, g.ln2b, sc->scratch, sc->dln, a->residual2[l], w.ln2w,
                               a->ln2_mean[l], a->ln2_rstd[l], Nl, C, s);
        // dres: gradient w.r.t. residual2 = residual + attn(ln1(residual))
        dout = gpu_dres_gathered(m, N, C);
        if (split) CUDA_CHECK(cudaMemcpyAsync(a->dattproj[l], dout, sizeof(floatX) * (size_t)N * C,
                                              cudaMemcpyDeviceToDevice, s));
        gpu_matmul_backward<float>(&m->mm, sc->datty, split ? NULL : g.attprojw, NULL, NULL, dout, NULL, a->atty[l],
                                   w.attprojw, N, Cl, C, s);
        gpu_colsum_accumulate<float>(g.attprojb, sc->scratch, a->dres, Nl, C, s);
        gpu_attention_backward(m, a->kv[l], dqkv, sc->datty, a->qkv[l], a->atty[l], a->lse[l], B, T);
        gpu_column_parallel_backward<floatX>(m, sc->dln, split ? NULL : g.qkvw, g.qkvb, dqkv, dqkv, a->ln1[l], w.qkvw, N,
                                           C, 3 * Cl);
        gpu_layernorm_backward(a->dres, dres_compute, g.ln1w, g.ln1b, sc->scratch, sc->dln, residual, w.ln1w,
                               a->ln1_mean[l], a->ln1_rstd[l], Nl, C, s);
        if (!split) gpt_hooks_grads_ready(h, l + 1);
    }
    if (!split && l0 == 0) gpu_embedding_backward(m, a);
    a->trained = 0;
    a->weights_pending = split;
}

// The weight gradients a split gpu_stage_backward left (W of a zero-bubble
// schedule); a->dres must still hold the stage input's gradient.
static void gpu_stage_backward_weights(GPTGPU *m, GPUActs *a) {
    NVTX_RANGE("backward_weights");
    CHECK(a->weights_pending, "gpu_stage_backward_weights without a split backward");
    int C = m->cfg.channels, Cl = C / m->tp.size, N = a->B * a->T;
    cudaStream_t s = m->stream;
    for (int l = a->l1 - 1; l >= a->l0; l--) {
        // (a recomputed forward reads the layer's weights)
        int full = recompute_layer(&m->recompute, l) == RECOMPUTE_FULL;
        gpt_hooks_params_needed(&m->hooks, l + 1, full ? HOOK_BACKWARD : HOOK_GRADS);
        LayerTensors g = layer_tensors(&m->layout, m->grad_view[l + 1], l);
        LayerWeights w;
        memset(&w, 0, sizeof(w));
        if (full) w = gpu_layer_weights(m, l);
        gpu_layer_recompute(m, a, l, &w);
        gpu_matmul_backward<floatX>(&m->mm, NULL, g.fcprojw, NULL, NULL, a->dfcproj[l], NULL, a->fch_gelu[l], NULL, N,
                                  4 * Cl, C, s);
        gpu_matmul_backward<floatX>(&m->mm, NULL, g.fcw, NULL, NULL, a->dfc[l], NULL, a->ln2[l], NULL, N, C, 4 * Cl, s);
        gpu_matmul_backward<floatX>(&m->mm, NULL, g.attprojw, NULL, NULL, a->dattproj[l], NULL, a->atty[l], NULL, N, Cl,
                                  C, s);
        gpu_matmul_backward<floatX>(&m->mm, NULL, g.qkvw, NULL, NULL, a->dqkv[l], NULL, a->ln1[l], NULL, N, C, 3 * Cl, s);
        gpt_hooks_grads_ready(&m->hooks, l + 1);
    }
    if (a->l0 == 0) gpu_embedding_backward(m, a);
    a->weights_pending = 0;
}

// ---------------------------------------------------------------------------
// the whole model on one micro-batch (tests, evaluation, sampling)

// Forward over inputs (B,T) (host ids) on activations a (layers [a->l0,
// a->l1): a pipeline stage's), as gpt_forward in llmc/gpt_cpu.h: with targets,
// returns the mean loss on the last layers' stage (a synchronisation), else 0;
// without, the logits stay on the device (see gpu_gpt_logits). With dloss != 0
// the classifier's backward runs here too and gpu_gpt_backward may follow.
static float gpu_gpt_forward_acts(GPTGPU *m, GPUActs *a, const int *inputs, const int *targets, int B, int T,
                                  float dloss) {
    CHECK(B <= m->B && T <= m->T, "batch %d x %d exceeds the allocated %d x %d", B, T, m->B, m->T);
    // (one micro-batch's tokens, padded to the model's B x T: the forward reads the first B x T)
    size_t N = (size_t)m->B * m->T;
    int *x = (int *)callocCheck(N, sizeof(int)), *y = targets ? (int *)callocCheck(N, sizeof(int)) : NULL;
    memcpy(x, inputs, sizeof(int) * (size_t)B * T);
    if (targets) memcpy(y, targets, sizeof(int) * (size_t)B * T);
    gpu_gpt_upload_tokens(m, x, y, 1);
    gpu_stage_forward(m, a, x, 0, B, T, targets != NULL, dloss);
    float loss = 0.0f;
    if (targets && a->l1 == m->cfg.num_layers) {
        size_t n = (size_t)B * T;
        CUDA_CHECK(cudaMemcpyAsync(m->h_losses, m->step_losses, sizeof(float) * n, cudaMemcpyDeviceToHost, m->stream));
        CUDA_CHECK(cudaStreamSynchronize(m->stream));
        tp_retire(&m->tp);  // (done: the stream waited for them)
        if (m->cp) tp_retire(&m->cp->group);
        double total = 0.0;
        for (size_t i = 0; i < n; i++) total += m->h_losses[i];
        loss = (float)(total / (double)n);
    }
    free(x);
    free(y);
    return loss;
}
// The whole model's forward on its own activations.
static float gpu_gpt_forward(GPTGPU *m, const int *inputs, const int *targets, int B, int T, float dloss) {
    return gpu_gpt_forward_acts(m, &m->acts, inputs, targets, B, T, dloss);
}

// Backward of the last training forward (B then W): accumulates into the gradients.
static void gpu_gpt_backward(GPTGPU *m) {
    gpu_stage_backward(m, &m->acts);
    if (m->acts.split) gpu_stage_backward_weights(m, &m->acts);
}

// The sum of squares of the gradients of the shard (deterministic); with
// skip_replicated, the tensors every tensor rank holds left out (tensor rank 0 counts them).
static double gpu_gpt_grad_sumsq(GPTGPU *m, int skip_replicated) {
    NVTX_RANGE("grad_norm");
    const float *g = gpu_shard_grads(m);
    int64_t lo = m->shard.begin, hi = m->shard.end;
    if (!skip_replicated) {
        gpu_sum_of_squares(m->norm_scratch, g + lo, hi - lo, m->stream);
        return global_norm_result(m->norm_scratch, m->stream);
    }
    gpu_sum_of_squares_ranges(m->norm_scratch, g, m->norm_ranges, m->norm_num_ranges, m->stream);
    return global_norm_result(m->norm_scratch, m->stream);
}

// The L2 norm of the gradients of the shard (of all of them on an unsharded model).
static float gpu_gpt_grad_norm(GPTGPU *m) { return (float)sqrt(gpu_gpt_grad_sumsq(m, 0)); }

// One AdamW step over the shard (the floatX copy of the shard is rewritten);
// seed makes the stochastic rounding of this step.
static void gpu_gpt_update(GPTGPU *m, const AdamWConfig *cfg, float grad_scale, uint64_t seed) {
    NVTX_RANGE("adamw");
    tp_retire(&m->tp);  // the step's tensor and context collectives (done: the gradient norm waited for the stream)
    if (m->cp) tp_retire(&m->cp->group);
    m->params_version++;
    if (m->adamw.num_chunks == 0) return;  // a shard of padding only
    // adamw.cuh indexes the master weights like the flat buffer, the moments from the shard's start
    gpu_adamw_update(&m->adamw, m->params - m->shard.begin, gpu_shard_params_compute(m), gpu_shard_grads(m), m->adam_m,
                     m->adam_v, cfg, grad_scale, seed, m->stream);
}

// Copies rows [row0, row0 + rows) of the last logits-only forward to host
// (rows, vreal) as fp32: the rank's real slice of the vocabulary
// (tp_vocab_slice; all V without tensor parallelism), padded columns left out.
static void gpu_gpt_logits(GPTGPU *m, int row0, int rows, float *out) {
    int v0, vreal, Vl = m->cfg.padded_vocab_size / m->tp.size;
    tp_vocab_slice(&m->cfg, &m->tp, &v0, &vreal);
    size_t n = (size_t)rows * Vl;
    floatX *h = (floatX *)mallocCheck(n * sizeof(floatX));
    CUDA_CHECK(cudaMemcpyAsync(h, m->scratch.logits + (size_t)row0 * Vl, n * sizeof(floatX), cudaMemcpyDeviceToHost,
                               m->stream));
    CUDA_CHECK(cudaStreamSynchronize(m->stream));
    for (int r = 0; r < rows; r++)
        for (int v = 0; v < vreal; v++) out[(size_t)r * vreal + v] = to_float(h[(size_t)r * Vl + v]);
    free(h);
}

// A token drawn from row `row` of the last logits-only forward (the same on
// every rank of the tensor group; host_tp: that group on host buffers).
// row_buf: (V) host scratch.
static int gpu_gpt_sample(GPTGPU *m, TPContext *host_tp, int row, const SampleParams *sp, Rng *rng, float *row_buf) {
    gpu_gpt_logits(m, row, 1, row_buf);
    return tp_sample_token(host_tp, &m->cfg, row_buf, sp, rng);
}

#endif  // LLMC_GPT_GPU_CUH
