// dev/cuda/global_norm.cu: checks the deterministic sum of squares
// (llmc/global_norm.cuh) against llmc/optimizer.h (sum_of_squares, double) at
// several lengths, and that two runs give the same bits; then times it on a
// d12-sized gradient buffer against the copy bandwidth.
#include "dev/cuda/dev_common.cuh"
#include "llmc/global_norm.cuh"
#include "llmc/model.h"
#include "llmc/optimizer.h"

static void check_size(Rng *rng, size_t n) {
    float *g = host_random(rng, n, 1.0f);
    double ref = sum_of_squares(g, (int64_t)n);
    float *d_g = device_f32_from(g, n), *scratch = (float *)cudaMallocCheck(global_norm_scratch_floats() * 4);
    gpu_sum_of_squares(scratch, d_g, (int64_t)n, 0);
    double got = global_norm_result(scratch, 0);
    gpu_sum_of_squares(scratch, d_g, (int64_t)n, 0);
    double again = global_norm_result(scratch, 0);
    test_result(fabs(got - ref) <= 1e-5 * ref + 1e-30, "sum of squares n=%zu: %.9g vs cpu %.9g", n, got, ref);
    test_result(memcmp(&got, &again, sizeof(got)) == 0, "sum of squares n=%zu is bit-reproducible", n);
    CUDA_CHECK(cudaFree(d_g));
    CUDA_CHECK(cudaFree(scratch));
    free(g);
}

int main(void) {
    dev_require_gpu("dev_global_norm");
    Rng rng;
    rng_seed(&rng, 8);
    check_size(&rng, 1);
    check_size(&rng, 1000);
    check_size(&rng, 12345679);

    Bench b;
    bench_init(&b);
    GPTConfig cfg;
    gpt_config_preset("d12", &cfg);
    ParamLayout pl;
    param_layout_init(&pl, &cfg);
    size_t n = (size_t)pl.num_elements;  // d12's flat gradient buffer
    param_layout_free(&pl);
    float *g = (float *)cudaMallocCheck(n * 4), *scratch = (float *)cudaMallocCheck(global_norm_scratch_floats() * 4);
    CUDA_CHECK(cudaMemset(g, 0x3c, n * 4));
    double ms = bench_ms(&b, 20, [&] { gpu_sum_of_squares(scratch, g, (int64_t)n, 0); });
    bench_report(&b, "global norm d12 gradients", ms, (double)n * 4, 0);
    bench_free(&b);
    return test_exit_code();
}
