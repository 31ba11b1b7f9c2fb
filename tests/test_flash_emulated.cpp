// test_flash_emulated.cpp: the flash attention of llmc/attention_flash.cuh
// (its launchers and the forward, delta, dk/dv and dq kernels: the text nvcc
// compiles for the GPU) run on the CPU through tests/cuda_emulator.h, against the CPU
// attention of llmc/cpu_layers.h on the same bf16 inputs: output, lse and
// dq|dk|dv within bf16 tolerances, nothing left unwritten (outputs start as
// NaN, shared memory is NaN before every block), at head sizes 64 and 32, T
// from 1 to 257 (partial tiles, one tile, several), with cp.async completing
// at issue and at the last moment, under a random accumulator layout. CI has
// no GPU: this is how every change to the kernels' tiling, masking, barriers
// and indexing gets run there; speed and the hardware's own rounding are for
// dev/cuda/attention.cu on a GPU.
#include "llmc/cpu_layers.h"
#include "llmc/rand.h"
#include "tests/testing.h"

#define LLMC_CUDA_EMULATION
#include "tests/cuda_emulator.h"

#include "llmc/attention_flash.cuh"

struct Case {
    int B, T, NH, hs;
};

// normal values (q, the first C channels of each 3C row when C > 0, scaled by
// scale_q) as bf16 for the kernels and as their exact floats for the CPU
static void round_to_bf16(std::vector<floatX> &dev, std::vector<float> &host, Rng *rng, float scale_q, int C) {
    for (size_t i = 0; i < host.size(); i++) {
        float x = 0;
        rng_normal_fill(rng, &x, 1, 1.0f);
        if (C > 0 && (int)(i % (3 * (size_t)C)) < C) x *= scale_q;  // q: a sharper softmax
        dev[i] = to_floatX(x);
        host[i] = to_float(dev[i]);
    }
}

// worst |got - ref| / (atol * max|ref| + rtol * |ref|) over a (rows, width)
// slice with row stride `stride` (NaN: infinite); pass when <= 1. The absolute
// part scales with the slice's largest value: a gradient's rounding error
// follows the size of the terms summed into it, not the (cancelled) result.
static double excess(const std::vector<floatX> &got, const float *ref, size_t offset, size_t stride, size_t width,
                     size_t rows, double atol, double rtol) {
    double scale = 0, worst = 0;
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < width; c++) scale = fmax(scale, fabs(ref[offset + r * stride + c]));
    scale = fmax(scale, 1e-4);  // a slice that is 0 in exact arithmetic (T = 1: dq, dk) is ~1e-7 from roundings
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < width; c++) {
            size_t i = offset + r * stride + c;
            double g = to_float(got[i]), e = fabs(g - ref[i]) / (atol * scale + rtol * fabs(ref[i]) + 1e-30);
            if (e != e) return INFINITY;
            if (e > worst) worst = e;
        }
    return worst;
}

template <int HS> static void run_case(const Case &k, bool copy_at_issue, uint64_t seed) {
    const int B = k.B, T = k.T, NH = k.NH, C = NH * HS;
    const size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, nrow = (size_t)B * NH * T;
    Rng rng;
    rng_seed(&rng, seed);
    std::vector<floatX> qkv(nqkv), dout(nout), out(nout, floatX_from_bits(0x7fc0)), dqkv(nqkv, floatX_from_bits(0x7fc0));
    std::vector<float> qkv_f(nqkv), dout_f(nout), lse(nrow, NAN), delta(nrow, NAN);
    round_to_bf16(qkv, qkv_f, &rng, 2.0f, C);
    round_to_bf16(dout, dout_f, &rng, 1.0f, 0);

    emu_copy_at_issue = copy_at_issue;
    emu_shuffle_accumulator_layout(seed * 31 + 7);
    gpu_flash_attention_forward(out.data(), lse.data(), qkv.data(), B, T, C, NH, 0);
    gpu_flash_attention_backward(dqkv.data(), delta.data(), dout.data(), qkv.data(), out.data(), lse.data(), B, T, C,
                                 NH, 0);

    // the CPU attention on the same values
    std::vector<float> ref_out(nout), att((size_t)B * NH * T * T), ref_dqkv(nqkv);
    std::vector<float> scratch((size_t)omp_threads() * T * T);
    std::vector<float> ref_lse(nrow);
    attention_forward(ref_out.data(), att.data(), ref_lse.data(), qkv_f.data(), B, T, C, NH);
    attention_backward(ref_dqkv.data(), scratch.data(), dout_f.data(), qkv_f.data(), att.data(), B, T, C, NH);

    // a bf16 rounding is 2^-8 (3.9e-3) relative: out carries its own and that
    // of p before p v; dq|dk|dv those of p and ds summed over up to T terms
    const size_t rows = (size_t)B * T;
    double e_out = excess(out, ref_out.data(), 0, C, C, rows, 8e-3, 1e-2);
    double e_dq = excess(dqkv, ref_dqkv.data(), 0, 3 * (size_t)C, C, rows, 1.5e-2, 2e-2);
    double e_dk = excess(dqkv, ref_dqkv.data(), C, 3 * (size_t)C, C, rows, 1.5e-2, 2e-2);
    double e_dv = excess(dqkv, ref_dqkv.data(), 2 * (size_t)C, 3 * (size_t)C, C, rows, 1.5e-2, 2e-2);
    double e_lse = 0;  // fp32 scores from exact products: ~1e-6 relative
    for (size_t i = 0; i < nrow; i++) {
        double e = fabs(lse[i] - ref_lse[i]) / (1e-4 + 1e-4 * fabs(ref_lse[i]));
        e_lse = e == e ? fmax(e_lse, e) : INFINITY;
    }
    double worst = fmax(fmax(fmax(e_out, e_dq), fmax(e_dk, e_dv)), e_lse);
    test_result(worst <= 1.0,
                "emulated flash attention hs=%d B=%d T=%d NH=%d (cp.async %s) matches the CPU: worst error / "
                "tolerance out %.2f lse %.2f dq %.2f dk %.2f dv %.2f",
                HS, B, T, NH, copy_at_issue ? "at issue" : "at the wait", e_out, e_lse, e_dq, e_dk, e_dv);
}

int main(void) {
    const int Ts[] = {1, 17, 64, 65, 130, 257};
    uint64_t seed = 1;
    for (int T : Ts) {
        for (int copy_at_issue = 0; copy_at_issue < 2; copy_at_issue++) {
            if (T == 257 && copy_at_issue) continue;  // the longest case once
            run_case<64>(Case{2, T, 2, 64}, copy_at_issue, seed++);
            run_case<32>(Case{1, T, 3, 32}, copy_at_issue, seed++);
        }
    }
    return test_exit_code();
}
