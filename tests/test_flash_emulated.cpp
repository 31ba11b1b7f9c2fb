// test_flash_emulated.cpp: the flash attention of llmc/attention_flash.cuh
// (its launchers and the forward, delta, dk/dv and dq kernels: the text nvcc
// compiles for the GPU) run on the CPU through tests/cuda_emulator.h, against the CPU
// attention of llmc/cpu_layers.h on the same bf16 inputs: output, lse and
// dq|dk|dv within bf16 tolerances, nothing left unwritten (outputs start as
// NaN, shared memory is NaN before every block), at head sizes 64 and 32, T
// from 1 to 257 (partial tiles, one tile, several), with cp.async completing
// at issue and at the last moment, under a random accumulator layout. And
// with query offsets (context parallel): a rank's two chunks of a sequence
// (chunks r and 2cp-1-r of 2cp, at chunk sizes on and off the 64-row tiles)
// against the whole sequence's K and V, whose out, lse and dq must be those
// rows of the whole sequence's attention, and dk|dv (fp32) every key's
// gradient from those rows alone (the CPU backward with dout 0 on the other
// rows). CI has
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
static double value(floatX x) { return to_float(x); }
static double value(float x) { return x; }
template <typename Got>
static double excess(const std::vector<Got> &got, const float *ref, size_t offset, size_t stride, size_t width,
                     size_t rows, double atol, double rtol, size_t got_offset, size_t got_stride) {
    double scale = 0, worst = 0;
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < width; c++) scale = fmax(scale, fabs(ref[offset + r * stride + c]));
    scale = fmax(scale, 1e-4);  // a slice that is 0 in exact arithmetic (T = 1: dq, dk) is ~1e-7 from roundings
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < width; c++) {
            size_t i = offset + r * stride + c;
            double g = value(got[got_offset + r * got_stride + c]);
            double e = fabs(g - ref[i]) / (atol * scale + rtol * fabs(ref[i]) + 1e-30);
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
    const size_t C3 = 3 * (size_t)C;
    double e_out = excess(out, ref_out.data(), 0, C, C, rows, 8e-3, 1e-2, 0, C);
    double e_dq = excess(dqkv, ref_dqkv.data(), 0, C3, C, rows, 1.5e-2, 2e-2, 0, C3);
    double e_dk = excess(dqkv, ref_dqkv.data(), C, C3, C, rows, 1.5e-2, 2e-2, C, C3);
    double e_dv = excess(dqkv, ref_dqkv.data(), 2 * (size_t)C, C3, C, rows, 1.5e-2, 2e-2, 2 * (size_t)C, C3);
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

// Rank r of a context group of cp: its rows (chunks r and 2cp-1-r of T/(2cp)
// positions) against every position's K and V (B,T,2C), forward and backward,
// against the CPU attention of the whole sequence.
template <int HS> static void run_cp_case(const Case &k, int cp, int r, uint64_t seed) {
    const int B = k.B, T = k.T, NH = k.NH, C = NH * HS, Tc = T / (2 * cp), Tl = 2 * Tc;
    const size_t C3 = 3 * (size_t)C, nqkv = (size_t)B * T * C3, nout = (size_t)B * T * C;
    Rng rng;
    rng_seed(&rng, seed);
    std::vector<floatX> qkv(nqkv), dout_all(nout);
    std::vector<float> qkv_f(nqkv), dout_f(nout);
    round_to_bf16(qkv, qkv_f, &rng, 2.0f, C);
    round_to_bf16(dout_all, dout_f, &rng, 1.0f, 0);
    // the rank's rows: local t at global position pos[t]; the others' dout is 0
    std::vector<int> pos(Tl);
    for (int t = 0; t < Tl; t++) pos[t] = (t < Tc ? r : 2 * cp - 1 - r) * Tc + t % Tc;
    std::vector<bool> held(T, false);
    for (int t = 0; t < Tl; t++) held[pos[t]] = true;
    std::vector<floatX> q((size_t)B * Tl * C3), kv((size_t)B * T * 2 * C), dout((size_t)B * Tl * C);
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < Tl; t++) {
            memcpy(&q[((size_t)b * Tl + t) * C3], &qkv[((size_t)b * T + pos[t]) * C3], sizeof(floatX) * C3);
            memcpy(&dout[((size_t)b * Tl + t) * C], &dout_all[((size_t)b * T + pos[t]) * C], sizeof(floatX) * C);
        }
        for (int t = 0; t < T; t++) {
            memcpy(&kv[((size_t)b * T + t) * 2 * C], &qkv[((size_t)b * T + t) * C3 + C], sizeof(floatX) * 2 * C);
            if (!held[t]) memset(&dout_f[((size_t)b * T + t) * C], 0, sizeof(float) * C);
        }
    }
    const FaQueries qry = {2, {0, Tc}, {Tc, Tc}, {r * Tc, (2 * cp - 1 - r) * Tc}};
    const floatX nan = floatX_from_bits(0x7fc0);
    std::vector<floatX> out((size_t)B * Tl * C, nan), dq(q.size(), nan);
    std::vector<float> lse((size_t)B * NH * Tl, NAN), delta((size_t)B * NH * Tl, NAN), dkv(kv.size(), NAN);
    emu_copy_at_issue = false;
    emu_shuffle_accumulator_layout(seed * 31 + 7);
    gpu_flash_attention_forward_queries(out.data(), lse.data(), q.data(), Tl, kv.data(), 2 * C, T, qry, B, C, NH, 0);
    gpu_flash_attention_backward_queries(dq.data(), dkv.data(), delta.data(), dout.data(), q.data(), Tl, kv.data(),
                                         2 * C, T, qry, out.data(), lse.data(), B, C, NH, 0);

    std::vector<float> ref_out(nout), att((size_t)B * NH * T * T), ref_dqkv(nqkv), ref_lse((size_t)B * NH * T);
    std::vector<float> scratch((size_t)omp_threads() * T * T);
    attention_forward(ref_out.data(), att.data(), ref_lse.data(), qkv_f.data(), B, T, C, NH);
    attention_backward(ref_dqkv.data(), scratch.data(), dout_f.data(), qkv_f.data(), att.data(), B, T, C, NH);
    double e_out = 0, e_dq = 0, e_lse = 0, e_dk = 0, e_dv = 0;
    for (int b = 0; b < B; b++) {
        for (int j = 0; j < 2; j++) {  // each chunk: Tc rows of the whole sequence's
            size_t lrow = (size_t)b * Tl + (size_t)j * Tc, grow = (size_t)b * T + pos[(size_t)j * Tc];
            e_out = fmax(e_out, excess(out, ref_out.data(), grow * C, C, C, Tc, 8e-3, 1e-2, lrow * C, C));
            e_dq = fmax(e_dq, excess(dq, ref_dqkv.data(), grow * C3, C3, C, Tc, 1.5e-2, 2e-2, lrow * C3, C3));
            for (int h = 0; h < NH; h++)
                for (int t = 0; t < Tc; t++) {
                    double got = lse[((size_t)b * NH + h) * Tl + (size_t)j * Tc + t];
                    double ref = ref_lse[((size_t)b * NH + h) * T + pos[(size_t)j * Tc + t]];
                    double e = fabs(got - ref) / (1e-4 + 1e-4 * fabs(ref));
                    e_lse = e == e ? fmax(e_lse, e) : INFINITY;
                }
        }
        size_t row = (size_t)b * T;
        e_dk = fmax(e_dk, excess(dkv, ref_dqkv.data(), row * C3 + C, C3, C, T, 1.5e-2, 2e-2, row * 2 * C, 2 * C));
        e_dv = fmax(e_dv, excess(dkv, ref_dqkv.data(), row * C3 + 2 * C, C3, C, T, 1.5e-2, 2e-2, row * 2 * C + C, 2 * C));
    }
    double worst = fmax(fmax(fmax(e_out, e_dq), fmax(e_dk, e_dv)), e_lse);
    test_result(worst <= 1.0,
                "emulated flash attention with query offsets hs=%d B=%d T=%d NH=%d, context rank %d of %d (chunks "
                "of %d) matches the CPU: worst error / tolerance out %.2f lse %.2f dq %.2f dk %.2f dv %.2f",
                HS, B, T, NH, r, cp, Tc, e_out, e_lse, e_dq, e_dk, e_dv);
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
    run_cp_case<64>(Case{2, 128, 2, 64}, 2, 0, seed++);  // chunks of 32: two a tile
    run_cp_case<64>(Case{2, 128, 2, 64}, 2, 1, seed++);
    run_cp_case<64>(Case{1, 256, 2, 64}, 2, 1, seed++);  // chunks of one tile
    run_cp_case<64>(Case{1, 200, 2, 64}, 2, 0, seed++);  // chunks of 50: tiles off the chunks' and the keys' grid
    run_cp_case<32>(Case{1, 320, 3, 32}, 4, 1, seed++);  // cp 4, chunks of 40
    run_cp_case<32>(Case{1, 320, 3, 32}, 4, 3, seed++);
    run_cp_case<64>(Case{1, 520, 1, 64}, 2, 1, seed++);  // chunks of 130: three tiles, the last partial
    return test_exit_code();
}
