// dev/cuda/global_norm.cu: the deterministic sum of squares, two versions,
// each checked against llmc/optimizer.h (sum_of_squares, double) at several
// lengths, and that two runs give the same bits:
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

typedef struct {
    const char *name;
    void (*run)(float *, const float *, int64_t, cudaStream_t);
} Version;
static const Version versions[] = {{"v1 scalar", v1_sum_of_squares}, {"v2 llmc", gpu_sum_of_squares}};

static void check_size(Rng *rng, size_t n) {
    float *g = host_random(rng, n, 1.0f);
    double ref = sum_of_squares(g, (int64_t)n);
    float *d_g = device_f32_from(g, n), *scratch = (float *)cudaMallocCheck(global_norm_scratch_floats() * 4);
    for (int r = 0; r < 3; r++) {  // v1, v2, v2 misaligned
        const Version *v = &versions[r == 0 ? 0 : 1];
        const char *name = r == 2 ? "v2 llmc (misaligned: scalar path)" : v->name;
        float *x = device_copy(d_g, n, r == 2);
        v->run(scratch, x, (int64_t)n, 0);
        double got = global_norm_result(scratch, 0);
        v->run(scratch, x, (int64_t)n, 0);
        double again = global_norm_result(scratch, 0);
        test_result(fabs(got - ref) <= 1e-5 * ref + 1e-30, "%s sum of squares n=%zu: %.9g vs cpu %.9g", name, n, got,
                    ref);
        test_result(bits_equal(&got, &again, sizeof(got)), "%s sum of squares n=%zu is bit-reproducible", name, n);
        device_buffer_free(x, r == 2);
    }
    CUDA_CHECK(cudaFree(d_g));
    CUDA_CHECK(cudaFree(scratch));
    free(g);
}

// ranges of one buffer: empty, single-element, adjacent and long ones
static void check_ranges(Rng *rng) {
    const size_t n = DEV_EMULATED ? 100003 : 12345679;
    const int64_t ranges[] = {5, 1029, 2000, 2001, 2001, 2001, 4096, (int64_t)n / 2, (int64_t)n / 2 + 3, (int64_t)n};
    const int nr = (int)(sizeof(ranges) / sizeof(ranges[0]) / 2);
    float *g = host_random(rng, n, 1.0f);
    double ref = 0.0;
    for (int k = 0; k < nr; k++) ref += sum_of_squares(g + ranges[2 * k], ranges[2 * k + 1] - ranges[2 * k]);
    float *d_g = device_f32_from(g, n), *scratch = (float *)cudaMallocCheck(global_norm_scratch_floats() * 4);
    int64_t *d_ranges = (int64_t *)cudaMallocCheck(sizeof(ranges));
    CUDA_CHECK(cudaMemcpy(d_ranges, ranges, sizeof(ranges), cudaMemcpyHostToDevice));
    gpu_sum_of_squares_ranges(scratch, d_g, d_ranges, nr, 0);
    double got = global_norm_result(scratch, 0);
    gpu_sum_of_squares_ranges(scratch, d_g, d_ranges, nr, 0);
    double again = global_norm_result(scratch, 0);
    test_result(fabs(got - ref) <= 1e-5 * ref + 1e-30, "ranges sum of squares (%d ranges of n=%zu): %.9g vs cpu %.9g",
                nr, n, got, ref);
    test_result(bits_equal(&got, &again, sizeof(got)), "ranges sum of squares is bit-reproducible");
    CUDA_CHECK(cudaFree(d_g));
    CUDA_CHECK(cudaFree(d_ranges));
    CUDA_CHECK(cudaFree(scratch));
    free(g);
}

int main(void) {
    dev_require_gpu("dev_global_norm");
    Rng rng;
    rng_seed(&rng, 8);
    const size_t sizes[] = {1, 1000, DEV_EMULATED ? 100003 : 12345679};  // n % 4 == 3: a tail after the float4s
    for (size_t n : sizes) check_size(&rng, n);
    check_ranges(&rng);
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
    for (const Version &v : versions) {
        double ms = bench_ms(&b, 20, [&] { v.run(scratch, g, (int64_t)n, 0); });
        char name[96];
        snprintf(name, sizeof(name), "%s global norm d12 gradients", v.name);
        bench_report(&b, name, ms, (double)n * 4, 0);
    }
    CUDA_CHECK(cudaFree(g));
    CUDA_CHECK(cudaFree(scratch));
    bench_free(&b);
    return test_exit_code();
}
