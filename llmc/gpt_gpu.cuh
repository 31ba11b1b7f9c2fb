// gpt_gpu.cuh: the GPT-2 model on one GPU, mirroring llmc/gpt_cpu.h: the same
// flat parameter layout (model.h), forward (with the classifier's backward
// fused in when training), backward, zero_grad, gradient norm and AdamW, and
// the same segment hooks (model.h's GPTHooks) for a distributed layer.
// Precision: fp32 master weights, fp32 gradients (accumulated across
// micro-steps in fp32) and fp32 AdamW moments; a bf16 copy of the weights and
// bf16 activations for compute; LayerNorm statistics, losses and the residual
// stream's gradient in fp32.
// Sharding (GPUSharding; zero_gpu.cuh does the communication), by ZeRO stage:
//   0: everything whole.
//   1: the fp32 master weights and AdamW moments of one shard (zero_shard.h) of the
//      flat buffer only; the bf16 copy and the gradients whole.
//   2: also the reduced gradients of the shard only (grad_shard); the backward
//      writes each layer's gradients into a ring of GPU_GRAD_SLOTS one-layer
//      slots (the embeddings' and ln_f's into buffers of their own) that the
//      distributed layer reduce-scatters into the shard as they complete.
//   3: also the bf16 weights of the shard only (params_bf16_shard); a layer's
//      weights are gathered into a ring of GPU_PARAM_SLOTS one-layer slots
//      before use (the embeddings' and ln_f's into buffers of their own).
// The model reads weights and writes gradients of segment s through
// param_view[s] / grad_view[s]: pointers indexed like the flat buffer and
// valid over the segment's range, which point into the whole buffer, a
// segment buffer or a slot (the distributed layer rebinds them in its hooks).
// Activation recomputation (--recompute): 0 keeps everything; 1 recomputes the
// GELU output in the backward (one (N,4C) buffer shared by all layers); 2 also
// recomputes both LayerNorm outputs of each layer.
#ifndef LLMC_GPT_GPU_CUH
#define LLMC_GPT_GPU_CUH

#include "adamw.cuh"
#include "attention_cudnn.cuh"
#include "attention_flash.cuh"
#include "classifier.cuh"
#include "cuda_common.cuh"
#include "encoder.cuh"
#include "gelu.cuh"
#include "global_norm.cuh"
#include "layernorm.cuh"
#include "matmul.cuh"
#include "model.h"
#include "zero_shard.h"

typedef enum { ATTENTION_FLASH, ATTENTION_CUDNN } AttentionKind;

#define GPU_GRAD_SLOTS 2   // ZeRO-2/3: layers whose gradients are written or still being reduced
#define GPU_PARAM_SLOTS 3  // ZeRO-3: layers resident (in use, the next one's ln_1, one gathered ahead)

// What this rank holds (see the top of the file): ZeRO stage and shard.
typedef struct {
    int stage;        // 0..3
    int rank, world;  // the shard (zero_shard.h) of stage >= 1; (0, 1) at stage 0
} GPUSharding;

static inline GPUSharding gpu_sharding(int stage, int rank, int world) {
    GPUSharding sh = {stage, stage >= 1 ? rank : 0, stage >= 1 ? world : 1};
    return sh;
}

// The buffers of a state the model keeps by segment (ZeRO-2 gradients, ZeRO-3
// weights): one for the embeddings (segment 0), one for ln_f (segment L+1),
// and num_slots one-layer slots that the layers take turns in.
typedef struct {
    void *embed, *lnf;
    void *slot[GPU_PARAM_SLOTS];
    int num_slots;
} SegmentBuffers;

// Bytes the model needs on the device, by kind (reported at start, checked
// against cudaMemGetInfo before anything is allocated).
typedef struct {
    size_t params, grads, optimizer, activations, workspace;
    size_t segment_buffers;  // of params and grads (included in them): ZeRO-2/3's segment buffers and slots
} GPUMemory;

static inline size_t gpu_memory_total(const GPUMemory *m) {
    return m->params + m->grads + m->optimizer + m->activations + m->workspace;
}

typedef struct {
    // per layer (L pointers each; shared buffers repeat the same pointer)
    bf16 **ln1, **qkv, **atty, **residual2, **ln2, **fch, **fch_gelu, **residual3;
    float **ln1_mean, **ln1_rstd, **ln2_mean, **ln2_rstd, **lse;
    // single
    bf16 *encoded, *lnf, *logits, *proj;         // (N,C) (N,C) (N,Vp) (N,C)
    float *lnf_mean, *lnf_rstd, *losses;         // (N) each
    float *dres;                                 // (N,C) fp32 gradient of the residual stream
    bf16 *dres_bf16, *dln, *dbig, *dqkv, *datty; // (N,C) (N,C) (N,4C) (N,3C) (N,C)
    float *delta;                                // (B,NH,T) attention backward scratch
    float *scratch;                              // column-reduction partials
    int *inputs, *targets;                       // (N)
    char *memory;
    size_t bytes;
} GPUActivations;

typedef struct {
    GPTConfig cfg;
    ParamLayout layout;
    int B, T;           // activation capacity
    int recompute;
    AttentionKind attention;
    cudaStream_t stream;
    MatmulContext mm;
    CudnnAttention cudnn;
    EncoderIndex index;
    GPUSharding sharding;
    ShardMap shard;     // the range [shard.begin, shard.end) whose master weights and moments this model holds
    AdamWPlan adamw;    // over the shard
    float *params;      // (shard.shard) fp32 master weights of the shard, indexed from shard.begin
    float *adam_m, *adam_v;  // (shard.shard) each, indexed from shard.begin
    bf16 *params_bf16;  // (num_elements) the compute copy; stage 3: NULL
    bf16 *params_bf16_shard;  // stage 3: (shard.shard) the compute copy of the shard, indexed from shard.begin
    float *grads;       // (num_elements); stage >= 2: NULL
    float *grad_shard;  // stage >= 2: (shard.shard) the reduced gradients of the shard, indexed from shard.begin
    SegmentBuffers param_segments;  // stage 3
    SegmentBuffers grad_segments;   // stage >= 2
    bf16 **param_view;  // (L+2) per segment: weights, indexed like the flat buffer
    float **grad_view;  // (L+2) per segment: gradients, indexed like the flat buffer
    uint64_t params_version;  // counts changes of the weights (upload, AdamW step)
    GPTHooks hooks;
    float *norm_scratch;
    GPUActivations acts;
    GPUMemory mem;
    float *h_losses;    // (B*T) host copy of the per-position losses
    int cur_B, cur_T;   // shape of the last forward
    int trained_batch;
} GPTGPU;

// Weights of one layer in the bf16 copy.
typedef struct {
    const bf16 *ln1w, *ln1b, *qkvw, *qkvb, *attprojw, *attprojb, *ln2w, *ln2b, *fcw, *fcb, *fcprojw, *fcprojb;
} LayerWeightsBF16;

static inline const bf16 *gpu_param_bf16(const GPTGPU *m, ParamKind k, int layer) {
    return m->param_view[param_segment_of(&m->layout, k, layer)] + param_tensor(&m->layout, k, layer)->offset;
}
static inline float *gpu_grad(const GPTGPU *m, ParamKind k, int layer) {
    return m->grad_view[param_segment_of(&m->layout, k, layer)] + param_tensor(&m->layout, k, layer)->offset;
}

// The gradients and the bf16 weights of the shard as AdamW reads and writes
// them: indexed like the flat buffer, valid over [shard.begin, shard.end).
static inline float *gpu_shard_grads(const GPTGPU *m) {
    return m->grad_shard ? m->grad_shard - m->shard.begin : m->grads;
}
static inline bf16 *gpu_shard_params_bf16(const GPTGPU *m) {
    return m->params_bf16_shard ? m->params_bf16_shard - m->shard.begin : m->params_bf16;
}

static inline LayerWeightsBF16 gpu_layer_weights(const GPTGPU *m, int l) {
    LayerWeightsBF16 w;
    const bf16 **slots[PER_LAYER_KINDS] = {&w.ln1w, &w.ln1b, &w.qkvw, &w.qkvb, &w.attprojw, &w.attprojb,
                                           &w.ln2w, &w.ln2b, &w.fcw,  &w.fcb,  &w.fcprojw, &w.fcprojb};
    for (int k = 0; k < PER_LAYER_KINDS; k++) *slots[k] = gpu_param_bf16(m, (ParamKind)k, l);
    return w;
}

// Lays the activations out in one allocation starting at base (NULL: only
// count). Returns the bytes needed. Every buffer starts 256-byte aligned.
static size_t gpu_activations_layout(GPUActivations *a, const GPTConfig *c, int B, int T, int recompute,
                                     char *base) {
    size_t L = c->num_layers, C = c->channels, NH = c->num_heads, Vp = c->padded_vocab_size;
    size_t N = (size_t)B * T;
    size_t off = 0;
    // bump allocator: size in bytes -> pointer (or NULL while counting)
#define ACT_TAKE(bytes) (off = (off + 255) / 256 * 256, off += (bytes), base ? (void *)(base + off - (bytes)) : NULL)
    struct { bf16 ***slot; size_t elems; int shared; } bf[] = {
        {&a->ln1, N * C, recompute >= 2}, {&a->qkv, N * 3 * C, 0}, {&a->atty, N * C, 0},
        {&a->residual2, N * C, 0}, {&a->ln2, N * C, recompute >= 2}, {&a->fch, N * 4 * C, 0},
        {&a->fch_gelu, N * 4 * C, recompute >= 1}, {&a->residual3, N * C, 0},
    };
    struct { float ***slot; size_t elems; } f32[] = {
        {&a->ln1_mean, N}, {&a->ln1_rstd, N}, {&a->ln2_mean, N}, {&a->ln2_rstd, N}, {&a->lse, (size_t)B * NH * T},
    };
    for (size_t s = 0; s < sizeof(bf) / sizeof(bf[0]); s++) {
        bf16 *shared = bf[s].shared ? (bf16 *)ACT_TAKE(bf[s].elems * sizeof(bf16)) : NULL;
        for (size_t l = 0; l < L; l++) {
            bf16 *p = bf[s].shared ? shared : (bf16 *)ACT_TAKE(bf[s].elems * sizeof(bf16));
            if (base) (*bf[s].slot)[l] = p;
        }
    }
    for (size_t s = 0; s < sizeof(f32) / sizeof(f32[0]); s++)
        for (size_t l = 0; l < L; l++) {
            float *p = (float *)ACT_TAKE(f32[s].elems * sizeof(float));
            if (base) (*f32[s].slot)[l] = p;
        }
    size_t scratch = layernorm_scratch_floats((int)N, (int)C);
    size_t cs = colsum_scratch_floats((int)N, 4 * (int)C);
    if (cs > scratch) scratch = cs;
    struct { void **slot; size_t bytes; } single[] = {
        {(void **)&a->encoded, N * C * 2}, {(void **)&a->lnf, N * C * 2}, {(void **)&a->logits, N * Vp * 2},
        {(void **)&a->proj, N * C * 2}, {(void **)&a->lnf_mean, N * 4}, {(void **)&a->lnf_rstd, N * 4},
        {(void **)&a->losses, N * 4}, {(void **)&a->dres, N * C * 4}, {(void **)&a->dres_bf16, N * C * 2},
        {(void **)&a->dln, N * C * 2}, {(void **)&a->dbig, N * 4 * C * 2}, {(void **)&a->dqkv, N * 3 * C * 2},
        {(void **)&a->datty, N * C * 2}, {(void **)&a->delta, (size_t)B * NH * T * 4},
        {(void **)&a->scratch, scratch * 4}, {(void **)&a->inputs, N * 4}, {(void **)&a->targets, N * 4},
    };
    for (size_t s = 0; s < sizeof(single) / sizeof(single[0]); s++) {
        void *p = ACT_TAKE(single[s].bytes);
        if (base) *single[s].slot = p;
    }
#undef ACT_TAKE
    return off;
}

// Slots a state kept by segment has (never more than the layers).
static inline int segment_num_slots(const ParamLayout *pl, int wanted) {
    return pl->cfg.num_layers < wanted ? pl->cfg.num_layers : wanted;
}

// Elements of the segment buffers of a state kept by segment: the
// embeddings, ln_f and num_slots layers.
static inline int64_t segment_buffer_elems(const ParamLayout *pl, int num_slots) {
    int64_t lo, hi;
    param_segment_range(pl, param_num_segments(pl) - 1, &lo, &hi);
    return pl->segment_hi[0] + (int64_t)segment_num_slots(pl, num_slots) * pl->layer_stride + (hi - lo);
}

// The device memory a model needs (without allocating anything) at its sharding.
static GPUMemory gpu_gpt_memory(const GPTConfig *cfg, int B, int T, int recompute, AttentionKind attention,
                                GPUSharding sh) {
    ParamLayout pl;
    param_layout_init(&pl, cfg);
    ShardMap sm;
    shard_map_init(&sm, pl.num_elements, sh.rank, sh.world);
    size_t P = (size_t)sm.num_elements, S = (size_t)sm.shard;
    size_t pseg = sh.stage >= 3 ? (size_t)segment_buffer_elems(&pl, GPU_PARAM_SLOTS) : 0;
    size_t gseg = sh.stage >= 2 ? (size_t)segment_buffer_elems(&pl, GPU_GRAD_SLOTS) : 0;
    param_layout_free(&pl);
    GPUActivations a;
    memset(&a, 0, sizeof(a));
    GPUMemory m;
    m.params = (sh.stage >= 3 ? S + pseg : P) * sizeof(bf16) + S * sizeof(float);
    m.grads = (sh.stage >= 2 ? S + gseg : P) * sizeof(float);
    m.optimizer = 2 * S * sizeof(float);
    m.segment_buffers = pseg * sizeof(bf16) + gseg * sizeof(float);
    m.activations = gpu_activations_layout(&a, cfg, B, T, recompute, NULL);
    m.workspace = MATMUL_WORKSPACE_BYTES + (attention == ATTENTION_CUDNN ? cudnn_attention_workspace_bytes(cfg, B, T) : 0) +
                  global_norm_scratch_floats() * sizeof(float) + 3 * sizeof(int) * (size_t)B * T;
    return m;
}

__global__ void f32_to_bf16_kernel(bf16 *out, const float *in, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = __float2bfloat16_rn(in[i]);
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
    int64_t lo, hi;
    param_segment_range(pl, last, &lo, &hi);
    sb->num_slots = segment_num_slots(pl, num_slots);
    sb->embed = cudaMallocCheck((size_t)pl->segment_hi[0] * elem_bytes);
    sb->lnf = cudaMallocCheck((size_t)(hi - lo) * elem_bytes);
    for (int k = 0; k < sb->num_slots; k++) sb->slot[k] = cudaMallocCheck((size_t)pl->layer_stride * elem_bytes);
    views[0] = segment_view(pl, sb->embed, 0, elem_bytes);
    views[last] = segment_view(pl, sb->lnf, last, elem_bytes);
}

static void segment_buffers_free(SegmentBuffers *sb) {
    if (!sb->embed) return;
    CUDA_CHECK(cudaFree(sb->embed));
    CUDA_CHECK(cudaFree(sb->lnf));
    for (int k = 0; k < sb->num_slots; k++) CUDA_CHECK(cudaFree(sb->slot[k]));
    memset(sb, 0, sizeof(*sb));
}

// Zeroes the gradients of segment s where its view points now (queued).
static void gpu_gpt_zero_segment_grads(GPTGPU *m, int s) {
    int64_t lo, hi;
    param_segment_range(&m->layout, s, &lo, &hi);
    CUDA_CHECK(cudaMemsetAsync(m->grad_view[s] + lo, 0, sizeof(float) * (size_t)(hi - lo), m->stream));
}

// Zeroes the gradients the backward accumulates into: the whole buffer, or at
// stage 2+ the embeddings' and ln_f's segment buffers (a layer's slot is
// zeroed when the distributed layer binds the layer to it).
static void gpu_gpt_zero_grad(GPTGPU *m) {
    if (m->grads) {
        CUDA_CHECK(cudaMemsetAsync(m->grads, 0, sizeof(float) * (size_t)m->layout.num_elements, m->stream));
        return;
    }
    gpu_gpt_zero_segment_grads(m, 0);
    gpu_gpt_zero_segment_grads(m, param_num_segments(&m->layout) - 1);
}

// Allocates everything for micro-batches of up to B x T at the given sharding.
// A model that does not fit is a usage error: one line saying what it needs.
static void gpu_gpt_init(GPTGPU *m, const GPTConfig *cfg, int B, int T, int recompute, AttentionKind attention,
                         GPUSharding sh) {
    memset(m, 0, sizeof(*m));
    m->cfg = *cfg;
    m->B = B;
    m->T = T;
    m->recompute = recompute;
    m->attention = attention;
    m->sharding = sh;
    int hs = cfg->channels / cfg->num_heads;
    if (attention == ATTENTION_FLASH && !flash_supports_head_size(hs))
        die_usage("--attention flash: head size %d (n-embd / n-head) is not 32 or 64", hs);
    if (attention == ATTENTION_CUDNN && !cudnn_attention_available())
        die_usage("--attention cudnn: this build has no cuDNN (set CUDNN_HOME and rebuild)");
    m->mem = gpu_gpt_memory(cfg, B, T, recompute, attention, sh);
    size_t need = gpu_memory_total(&m->mem), have = cuda_free_bytes();
    if (need > have)
        die_usage("model (L=%d C=%d) at batch %d x %d needs %.2f GB on the GPU but %.2f GB are free "
                  "(params %.2f, grads %.2f, optimizer %.2f, activations %.2f, workspace %.2f GB); "
                  "try a smaller --batch-size, --recompute 2, or a higher --zero stage over more GPUs",
                  cfg->num_layers, cfg->channels, B, T, need / 1e9, have / 1e9, m->mem.params / 1e9,
                  m->mem.grads / 1e9, m->mem.optimizer / 1e9, m->mem.activations / 1e9, m->mem.workspace / 1e9);
    param_layout_init(&m->layout, cfg);
    shard_map_init(&m->shard, m->layout.num_elements, sh.rank, sh.world);
    size_t P = (size_t)m->layout.num_elements, S = (size_t)m->shard.shard;
    int nseg = param_num_segments(&m->layout);
    CUDA_CHECK(cudaStreamCreate(&m->stream));
    matmul_init(&m->mm);
    cudnn_attention_init(&m->cudnn, cfg, B, T, attention == ATTENTION_CUDNN);
    encoder_index_init(&m->index, B * T, cfg->vocab_size);
    adamw_plan_init(&m->adamw, &m->layout, m->shard.begin, m->shard.end);
    m->params = (float *)cudaMallocCheck(S * sizeof(float));
    m->adam_m = (float *)cudaMallocCheck(S * sizeof(float));
    m->adam_v = (float *)cudaMallocCheck(S * sizeof(float));
    CUDA_CHECK(cudaMemset(m->adam_m, 0, S * sizeof(float)));
    CUDA_CHECK(cudaMemset(m->adam_v, 0, S * sizeof(float)));
    m->param_view = (bf16 **)callocCheck((size_t)nseg, sizeof(bf16 *));
    m->grad_view = (float **)callocCheck((size_t)nseg, sizeof(float *));
    if (sh.stage >= 3) {
        m->params_bf16_shard = (bf16 *)cudaMallocCheck(S * sizeof(bf16));
        CUDA_CHECK(cudaMemset(m->params_bf16_shard, 0, S * sizeof(bf16)));  // the shard's padding stays zero
        segment_buffers_init(&m->param_segments, (void **)m->param_view, &m->layout, GPU_PARAM_SLOTS, sizeof(bf16));
    } else {
        m->params_bf16 = (bf16 *)cudaMallocCheck(P * sizeof(bf16));
        for (int s = 0; s < nseg; s++) m->param_view[s] = m->params_bf16;
    }
    if (sh.stage >= 2) {
        m->grad_shard = (float *)cudaMallocCheck(S * sizeof(float));
        CUDA_CHECK(cudaMemset(m->grad_shard, 0, S * sizeof(float)));
        segment_buffers_init(&m->grad_segments, (void **)m->grad_view, &m->layout, GPU_GRAD_SLOTS, sizeof(float));
    } else {
        m->grads = (float *)cudaMallocCheck(P * sizeof(float));
        for (int s = 0; s < nseg; s++) m->grad_view[s] = m->grads;
    }
    m->norm_scratch = (float *)cudaMallocCheck(global_norm_scratch_floats() * sizeof(float));
    GPUActivations *a = &m->acts;
    size_t L = cfg->num_layers;
    bf16 ***bslots[] = {&a->ln1, &a->qkv, &a->atty, &a->residual2, &a->ln2, &a->fch, &a->fch_gelu, &a->residual3};
    float ***fslots[] = {&a->ln1_mean, &a->ln1_rstd, &a->ln2_mean, &a->ln2_rstd, &a->lse};
    for (size_t s = 0; s < sizeof(bslots) / sizeof(bslots[0]); s++) *bslots[s] = (bf16 **)mallocCheck(L * sizeof(bf16 *));
    for (size_t s = 0; s < sizeof(fslots) / sizeof(fslots[0]); s++) *fslots[s] = (float **)mallocCheck(L * sizeof(float *));
    a->bytes = gpu_activations_layout(a, cfg, B, T, recompute, NULL);
    a->memory = (char *)cudaMallocCheck(a->bytes);
    gpu_activations_layout(a, cfg, B, T, recompute, a->memory);
    m->h_losses = (float *)mallocCheck(sizeof(float) * (size_t)B * T);
    gpu_gpt_zero_grad(m);
}

static void gpu_gpt_free(GPTGPU *m) {
    GPUActivations *a = &m->acts;
    bf16 **bs[] = {a->ln1, a->qkv, a->atty, a->residual2, a->ln2, a->fch, a->fch_gelu, a->residual3};
    float **fs[] = {a->ln1_mean, a->ln1_rstd, a->ln2_mean, a->ln2_rstd, a->lse};
    for (size_t s = 0; s < sizeof(bs) / sizeof(bs[0]); s++) free(bs[s]);
    for (size_t s = 0; s < sizeof(fs) / sizeof(fs[0]); s++) free(fs[s]);
    CUDA_CHECK(cudaFree(a->memory));
    void *bufs[] = {m->params, m->grads, m->grad_shard, m->adam_m, m->adam_v, m->norm_scratch, m->params_bf16,
                    m->params_bf16_shard};
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++) CUDA_CHECK(cudaFree(bufs[i]));  // cudaFree(NULL) is a no-op
    segment_buffers_free(&m->param_segments);
    segment_buffers_free(&m->grad_segments);
    free(m->param_view);
    free(m->grad_view);
    adamw_plan_free(&m->adamw);
    encoder_index_free(&m->index);
    cudnn_attention_free(&m->cudnn);
    matmul_free(&m->mm);
    CUDA_CHECK(cudaStreamDestroy(m->stream));
    free(m->h_losses);
    param_layout_free(&m->layout);
    memset(m, 0, sizeof(*m));
}

// Uploads fp32 weights (host, all num_elements in layout order): the bf16 copy
// (all of it, or the shard's at stage 3) and the master copy of the shard.
// The activation memory (unused between passes) stages the upload in chunks.
static void gpu_gpt_set_params(GPTGPU *m, const float *host) {
    int64_t P = m->layout.num_elements, begin = m->shard.begin, end = m->shard.end;
    int64_t chunk = (int64_t)(m->acts.bytes / sizeof(float));
    if (chunk > (1 << 24)) chunk = 1 << 24;
    float *staging = (float *)m->acts.memory;
    bf16 *bf = gpu_shard_params_bf16(m);
    int whole_bf16 = m->params_bf16 != NULL;
    for (int64_t lo = 0; lo < P; lo += chunk) {
        int64_t hi = lo + chunk < P ? lo + chunk : P;
        CUDA_CHECK(cudaMemcpyAsync(staging, host + lo, sizeof(float) * (size_t)(hi - lo), cudaMemcpyHostToDevice,
                                   m->stream));
        int64_t a = whole_bf16 || lo > begin ? lo : begin, b = whole_bf16 || hi < end ? hi : end;
        if (b > a) {
            launch_kernel(f32_to_bf16_kernel, ceil_div_int(b - a, 256), 256, 0, m->stream, bf + a, staging + (a - lo),
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
// [shard.begin, shard.end)) and the shard's bf16 copy as the AdamW step seeded
// `seed` rounded it (the distributed layer then gathers the rest).
static void gpu_gpt_load_state(GPTGPU *m, float *const states[3], uint64_t seed) {
    float *dst[3] = {m->params, m->adam_m, m->adam_v};
    int64_t n = m->shard.end - m->shard.begin;
    for (int k = 0; k < 3; k++)
        CUDA_CHECK(cudaMemcpyAsync(dst[k], states[k], sizeof(float) * (size_t)n, cudaMemcpyHostToDevice, m->stream));
    if (n > 0) {
        launch_kernel(bf16_round_like_adamw_kernel, ceil_div_int(n, 256), 256, 0, m->stream,
                      gpu_shard_params_bf16(m) + m->shard.begin, m->params, n, m->shard.begin, seed);
        CUDA_CHECK_LAUNCH();
    }
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
// A ModelFileFetch (modelfile.h) over the fp32 master weights this rank holds: [lo, hi) into host dst.
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

static void gpu_attention_forward(GPTGPU *m, bf16 *out, float *lse, const bf16 *qkv, int B, int T) {
    NVTX_RANGE("attention_forward");
    if (m->attention == ATTENTION_CUDNN)
        gpu_cudnn_attention_forward(&m->cudnn, out, lse, qkv, B, T, m->cfg.channels, m->cfg.num_heads, m->stream);
    else gpu_flash_attention_forward(out, lse, qkv, B, T, m->cfg.channels, m->cfg.num_heads, m->stream);
}

static void gpu_attention_backward(GPTGPU *m, bf16 *dqkv, const bf16 *dout, const bf16 *qkv, const bf16 *out,
                                   const float *lse, int B, int T) {
    NVTX_RANGE("attention_backward");
    if (m->attention == ATTENTION_CUDNN)
        gpu_cudnn_attention_backward(&m->cudnn, dqkv, m->acts.delta, dout, qkv, out, lse, B, T, m->cfg.channels,
                                     m->cfg.num_heads, m->stream);
    else gpu_flash_attention_backward(dqkv, m->acts.delta, dout, qkv, out, lse, B, T, m->cfg.channels,
                                      m->cfg.num_heads, m->stream);
}

// Forward over inputs (B,T) (host ids), as gpt_forward in llmc/gpt_cpu.h: with
// targets, returns the mean loss; without, the logits stay on the device (see
// gpu_gpt_logits). With dloss != 0 the classifier's backward runs here too.
static float gpu_gpt_forward(GPTGPU *m, const int *inputs, const int *targets, int B, int T, float dloss) {
    NVTX_RANGE("forward");
    const GPTConfig *c = &m->cfg;
    int L = c->num_layers, C = c->channels, V = c->vocab_size, Vp = c->padded_vocab_size;
    CHECK(B <= m->B && T <= m->T, "batch %d x %d exceeds the allocated %d x %d", B, T, m->B, m->T);
    int N = B * T;
    for (int i = 0; i < N; i++) {
        CHECK(inputs[i] >= 0 && inputs[i] < V, "input token %d out of range [0, %d)", inputs[i], V);
        CHECK(!targets || (targets[i] >= 0 && targets[i] < V), "target token %d out of range [0, %d)", targets[i], V);
    }
    GPUActivations *a = &m->acts;
    cudaStream_t s = m->stream;
    CUDA_CHECK(cudaMemcpyAsync(a->inputs, inputs, sizeof(int) * (size_t)N, cudaMemcpyHostToDevice, s));
    if (targets) CUDA_CHECK(cudaMemcpyAsync(a->targets, targets, sizeof(int) * (size_t)N, cudaMemcpyHostToDevice, s));
    if (dloss != 0.0f) encoder_index_build(&m->index, inputs, N, s);
    m->cur_B = B;
    m->cur_T = T;
    m->trained_batch = 0;

    const GPTHooks *h = &m->hooks;
    gpt_hooks_params_needed(h, 0, HOOK_FORWARD);
    gpu_encoder_forward(a->encoded, a->inputs, gpu_param_bf16(m, PK_WTE, -1), gpu_param_bf16(m, PK_WPE, -1), B, T, C, s);
    gpt_hooks_params_needed(h, 1, HOOK_FORWARD);
    LayerWeightsBF16 w0 = gpu_layer_weights(m, 0);
    gpu_layernorm_forward(a->ln1[0], a->ln1_mean[0], a->ln1_rstd[0], a->encoded, w0.ln1w, w0.ln1b, N, C, s);
    for (int l = 0; l < L; l++) {
        NVTX_RANGE("layer_forward");
        gpt_hooks_params_needed(h, l + 1, HOOK_FORWARD);
        LayerWeightsBF16 w = gpu_layer_weights(m, l);
        const bf16 *residual = l == 0 ? a->encoded : a->residual3[l - 1];
        gpu_matmul_forward(&m->mm, a->qkv[l], NULL, a->ln1[l], w.qkvw, w.qkvb, N, C, 3 * C, s);
        gpu_attention_forward(m, a->atty[l], a->lse[l], a->qkv[l], B, T);
        gpu_matmul_forward(&m->mm, a->proj, NULL, a->atty[l], w.attprojw, w.attprojb, N, C, C, s);
        gpu_fused_residual_layernorm(a->residual2[l], a->ln2[l], a->ln2_mean[l], a->ln2_rstd[l], residual, a->proj,
                                     w.ln2w, w.ln2b, N, C, s);
        gpu_matmul_forward(&m->mm, a->fch_gelu[l], a->fch[l], a->ln2[l], w.fcw, w.fcb, N, C, 4 * C, s);
        gpu_matmul_forward(&m->mm, a->proj, NULL, a->fch_gelu[l], w.fcprojw, w.fcprojb, N, 4 * C, C, s);
        // the next LayerNorm (the next layer's ln_1, or ln_f) fused with this residual add
        int last = l == L - 1;
        gpt_hooks_params_needed(h, l + 2, HOOK_FORWARD);
        LayerWeightsBF16 wn = gpu_layer_weights(m, last ? l : l + 1);
        gpu_fused_residual_layernorm(a->residual3[l], last ? a->lnf : a->ln1[l + 1],
                                     last ? a->lnf_mean : a->ln1_mean[l + 1], last ? a->lnf_rstd : a->ln1_rstd[l + 1],
                                     a->residual2[l], a->proj, last ? gpu_param_bf16(m, PK_LNFW, -1) : wn.ln1w,
                                     last ? gpu_param_bf16(m, PK_LNFB, -1) : wn.ln1b, N, C, s);
    }
    {
        NVTX_RANGE("classifier");
        // wte: segment 0, made ready at the top of this pass (its own buffer, never evicted); no second
        // params_needed(0) here, which ZeRO-3 would read as a new pass and gather layer 0 ahead (into a
        // slot holding a layer the backward needs first)
        const bf16 *wte = gpu_param_bf16(m, PK_WTE, -1);
        // logits (N,Vp) over all Vp rows of wte (the padded rows are zero, and excluded below)
        gpu_matmul_forward(&m->mm, a->logits, NULL, a->lnf, wte, NULL, N, C, Vp, s);
        if (!targets) return 0.0f;
        gpu_fused_classifier(a->logits, a->losses, a->targets, N, V, Vp, dloss, s);
        if (dloss != 0.0f) {
            // dlnf (in dln) = dlogits @ wte; dwte += dlogits^T @ lnf (padded columns of dlogits are 0)
            gpu_matmul_backward<bf16>(&m->mm, a->dln, gpu_grad(m, PK_WTE, -1), NULL, NULL, a->logits, NULL, a->lnf,
                                      wte, N, C, Vp, s);
            m->trained_batch = 1;
        }
    }
    CUDA_CHECK(cudaMemcpyAsync(m->h_losses, a->losses, sizeof(float) * (size_t)N, cudaMemcpyDeviceToHost, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
    double total = 0.0;
    for (int i = 0; i < N; i++) total += m->h_losses[i];
    return (float)(total / N);
}

// Backward of the last training forward; accumulates into the gradients (fp32,
// through grad_view), calling the hooks at every segment.
static void gpu_gpt_backward(GPTGPU *m) {
    NVTX_RANGE("backward");
    CHECK(m->trained_batch, "gpu_gpt_backward without a training forward (dloss != 0)");
    const GPTConfig *c = &m->cfg;
    int L = c->num_layers, C = c->channels;
    int B = m->cur_B, T = m->cur_T, N = B * T;
    GPUActivations *a = &m->acts;
    cudaStream_t s = m->stream;
    const ParamLayout *pl = &m->layout;

    const GPTHooks *h = &m->hooks;
    CUDA_CHECK(cudaMemsetAsync(a->dres, 0, sizeof(float) * (size_t)N * C, s));
    gpt_hooks_params_needed(h, L + 1, HOOK_BACKWARD);
    gpu_layernorm_backward(a->dres, a->dres_bf16, gpu_grad(m, PK_LNFW, -1), gpu_grad(m, PK_LNFB, -1), a->scratch,
                           a->dln, a->residual3[L - 1], gpu_param_bf16(m, PK_LNFW, -1), a->lnf_mean, a->lnf_rstd, N,
                           C, s);
    gpt_hooks_grads_ready(h, L + 1);
    for (int l = L - 1; l >= 0; l--) {
        NVTX_RANGE("layer_backward");
        gpt_hooks_params_needed(h, l + 1, HOOK_BACKWARD);
        LayerWeightsBF16 w = gpu_layer_weights(m, l);
        LayerTensors g = layer_tensors(pl, m->grad_view[l + 1], l);
        const bf16 *residual = l == 0 ? a->encoded : a->residual3[l - 1];
        // dres: gradient w.r.t. residual3 = residual2 + mlp(ln2(residual2))
        if (m->recompute >= 1) gpu_gelu_forward(a->fch_gelu[l], a->fch[l], (int64_t)N * 4 * C, s);
        gpu_matmul_backward<float>(&m->mm, a->dbig, g.fcprojw, g.fcprojb, a->scratch, a->dres_bf16, a->dres,
                                   a->fch_gelu[l], w.fcprojw, N, 4 * C, C, s);
        gpu_gelu_backward_inplace(a->dbig, a->fch[l], (int64_t)N * 4 * C, s);
        if (m->recompute >= 2)
            gpu_layernorm_forward(a->ln2[l], a->ln2_mean[l], a->ln2_rstd[l], a->residual2[l], w.ln2w, w.ln2b, N, C, s);
        gpu_matmul_backward<bf16>(&m->mm, a->dln, g.fcw, g.fcb, a->scratch, a->dbig, a->dbig, a->ln2[l], w.fcw, N, C,
                                  4 * C, s);
        gpu_layernorm_backward(a->dres, a->dres_bf16, g.ln2w, g.ln2b, a->scratch, a->dln, a->residual2[l], w.ln2w,
                               a->ln2_mean[l], a->ln2_rstd[l], N, C, s);
        // dres: gradient w.r.t. residual2 = residual + attn(ln1(residual))
        gpu_matmul_backward<float>(&m->mm, a->datty, g.attprojw, g.attprojb, a->scratch, a->dres_bf16, a->dres,
                                   a->atty[l], w.attprojw, N, C, C, s);
        gpu_attention_backward(m, a->dqkv, a->datty, a->qkv[l], a->atty[l], a->lse[l], B, T);
        if (m->recompute >= 2)
            gpu_layernorm_forward(a->ln1[l], a->ln1_mean[l], a->ln1_rstd[l], residual, w.ln1w, w.ln1b, N, C, s);
        gpu_matmul_backward<bf16>(&m->mm, a->dln, g.qkvw, g.qkvb, a->scratch, a->dqkv, a->dqkv, a->ln1[l], w.qkvw, N,
                                  C, 3 * C, s);
        gpu_layernorm_backward(a->dres, a->dres_bf16, g.ln1w, g.ln1b, a->scratch, a->dln, residual, w.ln1w,
                               a->ln1_mean[l], a->ln1_rstd[l], N, C, s);
        gpt_hooks_grads_ready(h, l + 1);
    }
    gpt_hooks_params_needed(h, 0, HOOK_BACKWARD);
    gpu_encoder_backward(gpu_grad(m, PK_WTE, -1), gpu_grad(m, PK_WPE, -1), a->dres, &m->index, B, T, C, s);
    gpt_hooks_grads_ready(h, 0);
    m->trained_batch = 0;
}

// The sum of squares of the gradients of the shard (deterministic).
static double gpu_gpt_grad_sumsq(GPTGPU *m) {
    NVTX_RANGE("grad_norm");
    gpu_sum_of_squares(m->norm_scratch, gpu_shard_grads(m) + m->shard.begin, m->shard.end - m->shard.begin, m->stream);
    return global_norm_result(m->norm_scratch, m->stream);
}

// The L2 norm of the gradients of the shard (of all of them on an unsharded model).
static float gpu_gpt_grad_norm(GPTGPU *m) { return (float)sqrt(gpu_gpt_grad_sumsq(m)); }

// One AdamW step over the shard (the bf16 copy of the shard is rewritten);
// seed makes the stochastic rounding of this step.
static void gpu_gpt_update(GPTGPU *m, const AdamWConfig *cfg, float grad_scale, uint64_t seed) {
    NVTX_RANGE("adamw");
    m->params_version++;
    if (m->adamw.num_chunks == 0) return;  // a shard of padding only
    // adamw.cuh indexes the master weights like the flat buffer, the moments from the shard's start
    gpu_adamw_update(&m->adamw, m->params - m->shard.begin, gpu_shard_params_bf16(m), gpu_shard_grads(m), m->adam_m,
                     m->adam_v, cfg, grad_scale, seed, m->stream);
}

// Copies rows [row0, row0 + rows) of the last logits-only forward to host
// (rows, V) as fp32 (the padded columns are left out).
static void gpu_gpt_logits(GPTGPU *m, int row0, int rows, float *out) {
    int V = m->cfg.vocab_size, Vp = m->cfg.padded_vocab_size;
    size_t n = (size_t)rows * Vp;
    bf16 *h = (bf16 *)mallocCheck(n * sizeof(bf16));
    CUDA_CHECK(cudaMemcpyAsync(h, m->acts.logits + (size_t)row0 * Vp, n * sizeof(bf16), cudaMemcpyDeviceToHost,
                               m->stream));
    CUDA_CHECK(cudaStreamSynchronize(m->stream));
    for (int r = 0; r < rows; r++)
        for (int v = 0; v < V; v++) out[(size_t)r * V + v] = __bfloat162float(h[(size_t)r * Vp + v]);
    free(h);
}

#endif  // LLMC_GPT_GPU_CUH
