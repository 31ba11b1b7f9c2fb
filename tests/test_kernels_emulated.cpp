// test_kernels_emulated.cpp: the datasheet peaks MFU uses (llmc/cuda_common.cuh),
// and the GPU kernels (llmc/layernorm.cuh, gelu.cuh, classifier.cuh,
// encoder.cuh, adamw.cuh, global_norm.cuh, colsum.cuh, tensor_parallel.cuh:
// the text nvcc compiles; matmul.cuh's cuBLASLt calls through
// tests/cublaslt_emulator.h) run on the CPU through tests/cuda_emulator.h,
// against the CPU references of llmc/cpu_layers.h and llmc/optimizer.h: every
// row of tests/kernel_cases.h's table but attention's (test_flash_emulated's)
// through llmc's launchers (the emulator's launch_kernel runs the kernel they
// launch). The table says what the rows cover and how their tolerances are set.
#include "tests/cuda_emulator.h"

#define KC_MEMORY_BOUND
#define KC_MATMUL
#define KC_TENSOR_PARALLEL
#include "tests/kernel_cases.h"

// ---------------------------------------------------------------------------
// the datasheet peaks MFU is measured against (llmc/cuda_common.cuh), by the names CUDA reports

static void check_datasheet_peaks(void) {
    const struct { const char *name; double want; } cases[] = {
        {"NVIDIA H100 80GB HBM3", 989.0}, {"NVIDIA H100 PCIe", 756.0},  {"NVIDIA H100 NVL", 835.0},
        {"NVIDIA H200", 989.0},           {"NVIDIA H200 NVL", 835.0},   {"NVIDIA GH200 480GB", 989.0},
        {"NVIDIA B200", 2250.0},          {"NVIDIA A100-SXM4-80GB", 312.0}, {"NVIDIA A100 80GB PCIe", 312.0},
        {"NVIDIA GeForce RTX 4090", 0.0}, {"NVIDIA L4", 0.0},
    };
    bool ok = true;
    for (const auto &c : cases) {
        const char *label = NULL;
        double got = cuda_datasheet_bf16_tflops(c.name, &label);
        ok &= got == c.want && (got > 0) == (label != NULL);
    }
    test_result(ok, "datasheet bf16 peaks by device name (A100, H100 SXM/PCIe/NVL, H200, GH200, B200; unknown: 0)");
}

int main(void) {
    check_datasheet_peaks();
    kernel_cases_run(NULL, &LLMC_KERNELS);
    return test_exit_code();
}
