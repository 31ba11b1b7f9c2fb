// dev/cuda/matmul.cu: checks llmc/matmul.cuh (cuBLASLt, bf16 in, fp32
// accumulate) through tests/kernel_cases.h's matmul rows against
// llmc/cpu_layers.h (linear_forward, gelu_forward, linear_backward): forward
// with the bias epilogue, with the GELU+bias epilogue (pre-activation saved)
// and with none (no bias), and backward (dinp, dW accumulated in fp32, dbias
// from bf16 dout or from an fp32 source), at several shapes, once with every
// bf16 operand only 128-byte aligned (as a model's weights are when C is not a
// multiple of 128); then times the d12 layer shapes against the measured
// cuBLASLt peak. (On the emulator it checks nothing: test_kernels_emulated
// runs the matmul rows.)
#define KC_MATMUL
#include "dev/cuda/dev_common.cuh"

int main(void) {
    dev_require_gpu("dev_matmul");
    const KernelImpls *versions[] = {&LLMC_KERNELS};
    kernel_cases_run_versions("matmul", versions, 1);
    if (!dev_benchmarks("dev_matmul")) return test_exit_code();
    MatmulContext mc;
    matmul_init(&mc);

    Bench b;
    bench_init(&b);
    int N = 16 * 1024, C = 768;
    struct { const char *name; int IC, OC, gelu; } shapes[] = {
        {"qkv     16384x768 -> 2304", C, 3 * C, 0}, {"attproj 16384x768 -> 768", C, C, 0},
        {"fc+gelu 16384x768 -> 3072", C, 4 * C, 1}, {"fcproj  16384x3072 -> 768", 4 * C, C, 0},
        {"logits  16384x768 -> 50304", C, 50304, 0},
    };
    for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
        int IC = shapes[s].IC, OC = shapes[s].OC;
        size_t ni = (size_t)N * IC, no = (size_t)N * OC, wo = (size_t)OC * IC;
        floatX *inp = (floatX *)cudaMallocCheck(ni * 2), *w = (floatX *)cudaMallocCheck(wo * 2), *bias = (floatX *)cudaMallocCheck(OC * 2);
        floatX *out = (floatX *)cudaMallocCheck(no * 2), *pre = (floatX *)cudaMallocCheck(no * 2), *dinp = (floatX *)cudaMallocCheck(ni * 2);
        float *dw = (float *)cudaMallocCheck(wo * 4), *db = (float *)cudaMallocCheck(OC * 4);
        float *scratch = (float *)cudaMallocCheck(colsum_scratch_floats(N, OC) * 4);
        launch_kernel(fill_hash_floatX_kernel, ceil_div_int(ni, 256), 256, 0, 0, inp, (int64_t)ni, 10 + s);
        launch_kernel(fill_hash_floatX_kernel, ceil_div_int(wo, 256), 256, 0, 0, w, (int64_t)wo, 20 + s);
        launch_kernel(fill_hash_floatX_kernel, ceil_div_int(OC, 256), 256, 0, 0, bias, OC, 30 + s);
        CUDA_CHECK(cudaMemset(dw, 0, wo * 4));
        CUDA_CHECK(cudaMemset(db, 0, OC * 4));
        double flops = 2.0 * N * (double)IC * OC;
        char name[96];
        snprintf(name, sizeof(name), "fwd %s", shapes[s].name);
        double ms = bench_ms(&b, 20, [&] {
            gpu_matmul_forward(&mc, out, shapes[s].gelu ? pre : NULL, inp, w, bias, N, IC, OC, 0);
        });
        bench_report(&b, name, ms, 0, flops);
        snprintf(name, sizeof(name), "bwd %s", shapes[s].name);
        ms = bench_ms(&b, 20, [&] {
            gpu_matmul_backward<floatX>(&mc, dinp, dw, db, scratch, out, out, inp, w, N, IC, OC, 0);
        });
        bench_report(&b, name, ms, 0, 2 * flops);
        void *dev[] = {inp, w, bias, out, pre, dinp, dw, db, scratch};
        for (size_t i = 0; i < sizeof(dev) / sizeof(dev[0]); i++) CUDA_CHECK(cudaFree(dev[i]));
    }
    bench_free(&b);
    matmul_free(&mc);
    return test_exit_code();
}
