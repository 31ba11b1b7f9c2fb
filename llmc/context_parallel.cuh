// context_parallel.cuh: context parallelism on the GPU trainer (--cp N), the
// design of the CPU trainer's (llmc/context_parallel.h, whose positions it
// uses: the sequence cut into 2 x cp chunks, rank i holding chunks i and
// 2cp-1-i, the tokens, wpe rows and loss in that order). Attention all-gathers
// K and V over the context group (floatX, in place, rank-ordered pieces put in
// global order by a row gather) into the micro-batch's activations
// (gpt_gpu.cuh's GPUActs.kv: every position's K and V for each layer until the
// backward, B x T x 2C/tp floatX a layer; one shared copy for the layers that
// recompute under --recompute full, gathered again before their backward), so
// a pipeline's micro-batches in flight (--pp, any schedule) keep theirs; the
// buffers here are the ones the micro-batches share. The rank's two chunks
// run at their global positions against them as query segments: of our flash
// attention (attention_flash.cuh), or with --attention cudnn of cuDNN's
// (attention_cudnn.cuh: one graph a chunk, its queries against the keys up to
// its end, the causal mask bottom-right aligned; its plans built at start-up,
// cp_gpu_use_cudnn). The backward computes every position's dK and dV from the rank's
// queries in fp32 (cuDNN writes each chunk's in floatX into the pieces buffer,
// free during the backward, and they are summed into dkv in fp32),
// reduce-scatters them (fp32: the staged backend sums no bf16, and a floatX
// partial would be rounded twice) back to the positions' owners and rounds
// them into dqkv's k and v channels. The collectives go over the context
// group's device communicator (NCCL, or MPI staged through host memory) on the
// model's stream (tensor_parallel.h's TPContext over that group).
#ifndef LLMC_CONTEXT_PARALLEL_CUH
#define LLMC_CONTEXT_PARALLEL_CUH

#include "attention_cudnn.cuh"   // defines: CudnnAttention, cudnn_attention_plan_queries, gpu_cudnn_attention_forward_queries, gpu_cudnn_attention_backward_queries
#include "attention_flash.cuh"   // defines: FaQueries, gpu_flash_attention_forward_queries, gpu_flash_attention_backward_queries
#include "context_parallel.h"    // defines: CPContext, cp_positions_init, cp_free, cp_global_pos, cp_position_owner, cp_chunk
#include "cuda_common.cuh"       // defines: CUDA_CHECK, cudaMallocCheck, launch_kernel, ceil_div_int, CUDA_CHECK_LAUNCH
#include "gpu_activation_sizes.h"  // defines: cp_gpu_bytes
#include "tensor_parallel.h"     // defines: TPContext, tp_context, tp_on_stream, tp_complete, tp_off_stream, tp_free

typedef struct {
    CPContext pos;       // the positions (context_parallel.h) and the host context group (sampling's broadcast)
    TPContext group;     // the context group's device communicator, on the model's stream
    int B, C, Cl, NHl;
    CudnnAttention *cudnn;  // --attention cudnn: the model's, with the rank's chunks' plans (cp_gpu_use_cudnn); NULL: flash
    int *rows;           // device (Tl): each local row's global position (wpe's rows)
    int *owners;         // device (2T): each global position's owner and its local row there
    floatX *pieces;      // device (B*T*2Cl): the group's k | v pieces in rank order (cuDNN's backward: dk | dv (B,T,2Cl))
    float *dkv;          // device (B,T,2Cl): every position's dk | dv from this rank's queries
    float *dpieces;      // device (B*T*2Cl): the same in rank order, reduce-scattered onto the owners
    floatX *wpe;         // device (Tl,C): the rank's positions' rows of wpe
    float *dwpe;         // device (Tl,C): their gradient
    size_t bytes;        // device memory of the above
} CPGPU;

// Device group `dev` and host group `host` of the context ranks; B sequences
// of T positions a micro-batch, `micro` a step; the model's shape.
static void cp_gpu_init(CPGPU *cp, CommGroup *dev, CommGroup *host, int B, int T, int micro, int L, int C, int Cl,
                        int NHl, cudaStream_t stream) {
    memset(cp, 0, sizeof(*cp));
    cp_positions_init(&cp->pos, host, B, T, micro, L, C, Cl, NHl);
    cp->group = tp_context(dev, 0);
    tp_on_stream(&cp->group, stream);
    cp->B = B, cp->C = C, cp->Cl = Cl, cp->NHl = NHl;
    const int Tl = cp->pos.Tl;
    int *rows = (int *)mallocCheck(sizeof(int) * (size_t)Tl), *owners = (int *)mallocCheck(sizeof(int) * 2 * (size_t)T);
    for (int t = 0; t < Tl; t++) rows[t] = cp_global_pos(&cp->pos, t);
    for (int g = 0; g < T; g++) cp_position_owner(&cp->pos, g, &owners[2 * g], &owners[2 * g + 1]);
    cp->rows = (int *)cudaMallocCheck(sizeof(int) * (size_t)Tl);
    cp->owners = (int *)cudaMallocCheck(sizeof(int) * 2 * (size_t)T);
    CUDA_CHECK(cudaMemcpy(cp->rows, rows, sizeof(int) * (size_t)Tl, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(cp->owners, owners, sizeof(int) * 2 * (size_t)T, cudaMemcpyHostToDevice));
    free(rows);
    free(owners);
    size_t kv = (size_t)B * T * 2 * Cl;
    cp->pieces = (floatX *)cudaMallocCheck(sizeof(floatX) * kv);
    cp->dkv = (float *)cudaMallocCheck(sizeof(float) * kv);
    cp->dpieces = (float *)cudaMallocCheck(sizeof(float) * kv);
    cp->wpe = (floatX *)cudaMallocCheck(sizeof(floatX) * (size_t)Tl * C);
    cp->dwpe = (float *)cudaMallocCheck(sizeof(float) * (size_t)Tl * C);
    cp->bytes = cp_gpu_bytes(cp->pos.size, B, T, C, Cl);
}

static void cp_gpu_free(CPGPU *cp) {
    tp_off_stream(&cp->group);
    tp_free(&cp->group);
    void *dev[] = {cp->rows, cp->owners, cp->pieces, cp->dkv, cp->dpieces, cp->wpe, cp->dwpe};
    for (size_t i = 0; i < sizeof(dev) / sizeof(dev[0]); i++) CUDA_CHECK(cudaFree(dev[i]));
    cp_free(&cp->pos);
}

// --- kernels (one thread an element) ---

// dst (rows, w) = src's columns [c0, c0 + w) (rows of stride sw).
__global__ void cp_take_columns_kernel(floatX *dst, const floatX *src, int64_t sw, int c0, int w, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = src[(i / w) * sw + c0 + i % w];
}
// dst's columns [c0, c0 + w) (rows of stride dw) = src (rows, w) fp32, rounded.
__global__ void cp_put_columns_kernel(floatX *dst, int64_t dw, int c0, const float *src, int w, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[(i / w) * dw + c0 + i % w] = to_floatX(src[i]);
}
// Rank-ordered pieces (each (B,Tl,w)) <-> global order (B,T,w): to_full 1
// full = pieces, 0 pieces = full. owners: each global position's (rank, local row).
template <typename E>
__global__ void cp_reorder_kernel(E *pieces, E *full, const int *owners, int B, int T, int Tl, int w, int to_full) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (int64_t)B * T * w) return;
    int64_t row = i / w;
    int b = (int)(row / T), g = (int)(row % T);
    int64_t p = (((int64_t)owners[2 * g] * B + b) * Tl + owners[2 * g + 1]) * w + i % w;
    if (to_full) full[i] = pieces[p];
    else pieces[p] = full[i];
}
// dst (Tl,C) = wpe's rows `rows` (the rank's positions).
__global__ void cp_wpe_rows_kernel(floatX *dst, const floatX *wpe, const int *rows, int C, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = wpe[(int64_t)rows[i / C] * C + i % C];
}
// dwpe's rows `rows` += src (Tl,C) (each global row at most once: no conflicts).
__global__ void cp_dwpe_rows_kernel(float *dwpe, const float *src, const int *rows, int C, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dwpe[(int64_t)rows[i / C] * C + i % C] += src[i];
}

// --- the model's calls ---

// The rank's positions' rows of wpe (T,C) floatX, for the embedding.
static const floatX *cp_gpu_local_wpe(CPGPU *cp, const floatX *wpe, cudaStream_t s) {
    int64_t n = (int64_t)cp->pos.Tl * cp->C;
    launch_kernel(cp_wpe_rows_kernel, ceil_div_int(n, 256), 256, 0, s, cp->wpe, wpe, (const int *)cp->rows, cp->C, n);
    CUDA_CHECK_LAUNCH();
    return cp->wpe;
}
// The zeroed gradient of cp_gpu_local_wpe's rows, for the embedding's backward; cp_gpu_add_dwpe adds it to dwpe (T,C).
static float *cp_gpu_local_dwpe(CPGPU *cp, cudaStream_t s) {
    CUDA_CHECK(cudaMemsetAsync(cp->dwpe, 0, sizeof(float) * (size_t)cp->pos.Tl * cp->C, s));
    return cp->dwpe;
}
static void cp_gpu_add_dwpe(CPGPU *cp, float *dwpe, cudaStream_t s) {
    int64_t n = (int64_t)cp->pos.Tl * cp->C;
    launch_kernel(cp_dwpe_rows_kernel, ceil_div_int(n, 256), 256, 0, s, dwpe, (const float *)cp->dwpe,
                  (const int *)cp->rows, cp->C, n);
    CUDA_CHECK_LAUNCH();
}

// The rank's two chunks as the attention's query segments.
static FaQueries cp_gpu_queries(const CPGPU *cp) {
    const CPContext *p = &cp->pos;
    FaQueries q = {2, {0, p->Tc}, {p->Tc, p->Tc}, {cp_chunk(p, p->rank, 0) * p->Tc, cp_chunk(p, p->rank, 1) * p->Tc}};
    return q;
}

// --attention cudnn: the chunks run as cuDNN's query segments, their plans
// built now (a shape cuDNN cannot run ends the program with one line).
static void cp_gpu_use_cudnn(CPGPU *cp, CudnnAttention *cudnn) {
    cp->cudnn = cudnn;
    cudnn_attention_plan_queries(cudnn, cp->B, cp->pos.Tl, cp->pos.T, 2 * (int64_t)cp->Cl, cp_gpu_queries(cp));
}

// A layer's attention of the rank's rows: out (B,Tl,Cl), lse (B,NHl,Tl) from
// qkv (B,Tl,3Cl); every position's k | v gathered into kv (B,T,2Cl), which
// the backward reads.
static void cp_gpu_attention_forward(CPGPU *cp, floatX *kv, floatX *out, float *lse, const floatX *qkv, int B,
                                     cudaStream_t s) {
    const int T = cp->pos.T, Tl = cp->pos.Tl, Cl = cp->Cl, w = 2 * Cl;
    const int64_t piece = (int64_t)B * Tl * w, n = (int64_t)B * T * w;
    launch_kernel(cp_take_columns_kernel, ceil_div_int(piece, 256), 256, 0, s, cp->pieces + cp->pos.rank * piece, qkv,
                  3 * (int64_t)Cl, Cl, w, piece);
    CUDA_CHECK_LAUNCH();
    for (int r = 0; r < cp->pos.size; r++) cp->group.counts[r] = (size_t)piece;
    CommRequest q = comm_all_gather_start(cp->group.group, NULL, cp->pieces, cp->group.counts, COMM_FLOATX);
    tp_complete(&cp->group, &q);
    launch_kernel(cp_reorder_kernel<floatX>, ceil_div_int(n, 256), 256, 0, s, cp->pieces, kv,
                  (const int *)cp->owners, B, T, Tl, w, 1);
    CUDA_CHECK_LAUNCH();
    if (cp->cudnn)
        gpu_cudnn_attention_forward_queries(cp->cudnn, out, lse, qkv, Tl, kv, w, T, cp_gpu_queries(cp), B, Cl, cp->NHl,
                                            s);
    else gpu_flash_attention_forward_queries(out, lse, qkv, Tl, kv, w, T, cp_gpu_queries(cp), B, Cl, cp->NHl, s);
}

// Its backward (kv: what the forward gathered): dqkv (B,Tl,3Cl) overwritten
// from dout (B,Tl,Cl); every position's dk | dv summed over the group onto its
// owner (reduce-scatter). delta: (B,NHl,Tl) floats of scratch.
static void cp_gpu_attention_backward(CPGPU *cp, const floatX *kv, floatX *dqkv, float *delta, const floatX *dout,
                                      const floatX *qkv, const floatX *out, const float *lse, int B, cudaStream_t s) {
    const int T = cp->pos.T, Tl = cp->pos.Tl, Cl = cp->Cl, w = 2 * Cl;
    const int64_t piece = (int64_t)B * Tl * w, n = (int64_t)B * T * w;
    if (cp->cudnn)
        gpu_cudnn_attention_backward_queries(cp->cudnn, dqkv, cp->dkv, cp->pieces, delta, dout, qkv, Tl, kv, w, T,
                                             cp_gpu_queries(cp), out, lse, B, Cl, cp->NHl, s);
    else gpu_flash_attention_backward_queries(dqkv, cp->dkv, delta, dout, qkv, Tl, kv, w, T, cp_gpu_queries(cp),
                                              out, lse, B, Cl, cp->NHl, s);
    launch_kernel(cp_reorder_kernel<float>, ceil_div_int(n, 256), 256, 0, s, cp->dpieces, cp->dkv,
                  (const int *)cp->owners, B, T, Tl, w, 0);
    CUDA_CHECK_LAUNCH();
    float *mine = cp->dpieces + cp->pos.rank * piece;
    for (int r = 0; r < cp->pos.size; r++) cp->group.counts[r] = (size_t)piece;
    CommRequest q = comm_reduce_scatter_start(cp->group.group, cp->dpieces, mine, cp->group.counts, COMM_F32);
    tp_complete(&cp->group, &q);
    launch_kernel(cp_put_columns_kernel, ceil_div_int(piece, 256), 256, 0, s, dqkv, 3 * (int64_t)Cl, Cl,
                  (const float *)mine, w, piece);
    CUDA_CHECK_LAUNCH();
}

#endif  // LLMC_CONTEXT_PARALLEL_CUH
