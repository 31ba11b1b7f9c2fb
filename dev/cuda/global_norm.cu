// dev/cuda/global_norm.cu: the deterministic sum of squares, two versions,
// each checked through tests/kernel_cases.h's global_norm rows against
// llmc/optimizer.h (sum_of_squares, double) at several lengths, and that two
// runs give the same bits:
//   version 1 = llmc's scalar partial-sum kernel (norm_partial_kernel, now
//               its fallback for an unaligned buffer): one 4-byte load per
//               thread per grid-stride step;
//   version 2 = gpu_sum_of_squares (what the trainer runs): float4 loads when
//               the buffer is 16-byte aligned, the n % 4 tail to the first
//               threads; on a misaligned copy it takes version 1's path.
// gpu_sum_of_squares_ranges (a tensor-parallel rank's norm: the split
// tensors' pieces) against the CPU's sums over the same ranges, and its bits
// run to run. Then versions 1 and 2 are timed on a d12-sized gradient buffer
// against the copy bandwidth.
#define KC_MEMORY_BOUND
#include "dev/cuda/dev_common.cuh"
#include "llmc/global_norm.cuh"
#include "llmc/model.h"
#include "llmc/optimizer.h"

// gpu_sum_of_squares with the scalar partial sums, whatever the alignment
static void v1_sum_of_squares(float *scratch, const float *g, int64_t n, cudaStream_t s) {
    launch_kernel(norm_partial_kernel, NORM_BLOCKS, NORM_THREADS, 0, s, scratch, g, n);
    CUDA_CHECK_LAUNCH();
    launch_kernel(norm_finish_kernel, 1, 1, 0, s, (double *)(scratch + NORM_BLOCKS), scratch, NORM_BLOCKS);
    CUDA_CHECK_LAUNCH();
}

// version 1 in the kernel checks' launcher table (tests/kernel_cases.h), beside llmc's
static void use_v1(KernelImpls *v) {
    v->sum_of_squares = v1_sum_of_squares;
    v->sum_of_squares_ranges = NULL;  // llmc's only
}
static const KernelImpls V1_KERNELS = kernel_impls_with("v1 scalar", use_v1);
static const KernelImpls *const versions[] = {&V1_KERNELS, &LLMC_KERNELS};

int main(void) {
    dev_require_gpu("dev_global_norm");
    kernel_cases_run_versions("global_norm", versions, 2);
    if (!dev_benchmarks("dev_global_norm")) return test_exit_code();

    Bench b;
    bench_init(&b);
    GPTConfig cfg;
    gpt_config_preset("d12", &cfg);
    ParamLayout pl;
    param_layout_init(&pl, &cfg);
    size_t n = (size_t)pl.num_elements;  // d12's flat gradient buffer
    param_layout_free(&pl);
    float *g = (float *)cudaMallocCheck(n * 4), *scratch = (float *)cudaMallocCheck(global_norm_scratch_floats() * 4);
    // pairs of random bf16 read as fp32: finite, in [-1, 1]
    launch_kernel(fill_hash_floatX_kernel, ceil_div_int((int64_t)n * 2, 256), 256, 0, 0, (floatX *)g, (int64_t)n * 2, 15);
    CUDA_CHECK_LAUNCH();
    for (const KernelImpls *v : versions) {
        double ms = bench_ms(&b, 20, [&] { v->sum_of_squares(scratch, g, (int64_t)n, 0); });
        char name[96];
        snprintf(name, sizeof(name), "%s global norm d12 gradients", v->name);
        bench_report(&b, name, ms, (double)n * 4, 0);
    }
    CUDA_CHECK(cudaFree(g));
    CUDA_CHECK(cudaFree(scratch));
    bench_free(&b);
    return test_exit_code();
}
