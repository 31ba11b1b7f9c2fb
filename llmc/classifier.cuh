// classifier.cuh: the fused softmax + cross-entropy + its backward over the
// logits (N, Vp) that the classifier matmul wrote (bf16). One block per row
// reads the row (max, then sum of exponentials, in fp32), writes the loss, and
// in training overwrites the row in place with dloss * (softmax - onehot)
// (padded columns [V, Vp) set to 0), so the logits are written once and read
// once: the next matmuls read the dlogits from the same buffer.
#ifndef LLMC_CLASSIFIER_CUH
#define LLMC_CLASSIFIER_CUH

#include "cuda_common.cuh"

#define CLASSIFIER_THREADS 1024

// logits (N, Vp) bf16 in/out; losses (N) fp32; targets (N).
__global__ void __launch_bounds__(CLASSIFIER_THREADS)
    fused_classifier_kernel(bf16 *logits, float *losses, const int *targets, int V, int Vp, float dloss,
                            int write_dlogits) {
    __shared__ float scratch[32];
    int64_t row = blockIdx.x;
    bf16 *x = logits + row * Vp;
    float mx = -INFINITY;
    for (int v = threadIdx.x; v < V; v += blockDim.x) mx = fmaxf(mx, __bfloat162float(x[v]));
    mx = block_max(mx, scratch);
    float sum = 0.0f;
    for (int v = threadIdx.x; v < V; v += blockDim.x) sum += expf(__bfloat162float(x[v]) - mx);
    sum = block_sum(sum, scratch);
    float lse = mx + logf(sum);
    int y = targets[row];
    float xy = __bfloat162float(x[y]);
    __syncthreads();  // every thread has read x[y] before the row is overwritten
    if (threadIdx.x == 0) losses[row] = lse - xy;
    if (!write_dlogits) return;
    for (int v = threadIdx.x; v < Vp; v += blockDim.x) {
        float d = 0.0f;
        if (v < V) d = (expf(__bfloat162float(x[v]) - lse) - (v == y ? 1.0f : 0.0f)) * dloss;
        x[v] = __float2bfloat16_rn(d);
    }
}

// Losses of N rows; with dloss != 0 the rows become the logits' gradient.
static inline void gpu_fused_classifier(bf16 *logits, float *losses, const int *targets, int N, int V, int Vp,
                                        float dloss, cudaStream_t s) {
    fused_classifier_kernel<<<N, CLASSIFIER_THREADS, 0, s>>>(logits, losses, targets, V, Vp, dloss, dloss != 0.0f);
    CUDA_CHECK_LAUNCH();
}

#endif  // LLMC_CLASSIFIER_CUH
