// attention_cudnn.cuh: causal attention through cuDNN's fused scaled
// dot-product attention (SDPA), built with the backend C API (cudnnBackend*
// descriptors). Same tensors as attention_flash.cuh: qkv (B,T,3C) in, out
// (B,T,C) and the softmax statistics lse (B,NH,T) saved for the backward.
// Without cuDNN in the build (no LLMC_CUDNN), cudnn_attention_available() is 0
// and the trainer refuses --attention cudnn.
#ifndef LLMC_ATTENTION_CUDNN_CUH
#define LLMC_ATTENTION_CUDNN_CUH

#include "cuda_common.cuh"
#include "model.h"

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
    ca->enabled = enabled;
}
static inline void cudnn_attention_free(CudnnAttention *ca) { ca->enabled = 0; }
static inline void gpu_cudnn_attention_forward(CudnnAttention *ca, bf16 *out, float *lse, const bf16 *qkv, int B,
                                               int T, int C, int NH, cudaStream_t s) {
    (void)ca; (void)out; (void)lse; (void)qkv; (void)B; (void)T; (void)C; (void)NH; (void)s;
    DIE("cuDNN attention is not in this build");
}
static inline void gpu_cudnn_attention_backward(CudnnAttention *ca, bf16 *dqkv, const bf16 *dout, const bf16 *qkv,
                                                const bf16 *out, const float *lse, int B, int T, int C, int NH,
                                                cudaStream_t s) {
    (void)ca; (void)dqkv; (void)dout; (void)qkv; (void)out; (void)lse; (void)B; (void)T; (void)C; (void)NH; (void)s;
    DIE("cuDNN attention is not in this build");
}

#endif  // LLMC_ATTENTION_CUDNN_CUH
