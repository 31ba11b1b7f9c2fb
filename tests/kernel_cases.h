// kernel_cases.h: the GPU kernels' checks against the CPU reference as one
// table of cases run through one runner (as ggml's test-backend-ops does).
// A case is a family (the kernel), its shape, the function that runs the
// kernel's launchers on random floatX inputs and the CPU reference of
// llmc/cpu_layers.h or llmc/optimizer.h on the same values, and its
// tolerances. The runner (kernel_cases_run) runs the table's rows of the
// family asked for (or all), through a set of launchers (KernelImpls: llmc's, or a
// dev/cuda checker's older versions), and prints one line per case: PASS or
// FAIL, the worst error over its tolerance, the largest absolute and relative
// errors, and which checks failed. tests/test_kernels_emulated.cpp runs every
// row with llmc's launchers on the CPU emulator; dev/cuda/<family>.cu runs
// its family's rows for each of its versions on a GPU (and its old versions
// on the emulator), then benchmarks.
//
// What the rows cover: both the 16-byte vector path and the element-by-element
// fallback (C a multiple of 8 and not; every buffer one element past a 16-byte
// boundary; for LayerNorm's backward, only some), the register-held and the
// re-read rows (LayerNorm C > 2048, classifier Vp > 65536), partial blocks (N
// not a multiple of the rows per block, of the 128-row gradient chunks;
// partial groups of 8 or 4), padded vocabularies (Vp > V, the padding holding
// garbage), AdamW over the whole buffer and over shards starting at odd and
// multiple-of-4 offsets. Outputs the kernels overwrite start as NaN (0xff
// bytes), so an element left unwritten fails; what lies outside an AdamW range
// must stay untouched. The element path must give the vector path's bits where
// the kernels promise it (the LayerNorm forwards, GELU, classifier, encoder,
// AdamW), the LayerNorm of the fused kernel's residual the fused kernel's bits
// (--recompute full), and a second run (on the emulator: threads in another
// order) the same bits (LayerNorm backward, AdamW, global norm).
//
// Tolerances: a floatX result is the fp32 value rounded to nearest, within
// FLOATX_UNIT_ROUNDOFF of it relatively: that rtol plus a little for fp32
// differences between the kernel and the CPU (other summation orders, fmas,
// __expf), and an atol for results that cancel to near 0 (scaled to the terms
// summed). fp32 results (statistics, gradients, AdamW state, losses) carry only
// fp32 summation-order differences. A second rounding to floatX of a value
// that is already floatX is exact, so the residual must match bit for bit.
#ifndef TESTS_KERNEL_CASES_H
#define TESTS_KERNEL_CASES_H

#include <string.h>

#include <string>
#include <vector>

#include "llmc/cpu_layers.h"
#include "llmc/model.h"
#include "llmc/optimizer.h"
#include "llmc/rand.h"
#include "tests/testing.h"

#include "llmc/adamw.cuh"
#include "llmc/classifier.cuh"
#include "llmc/colsum.cuh"
#include "llmc/encoder.cuh"
#include "llmc/gelu.cuh"
#include "llmc/global_norm.cuh"
#include "llmc/layernorm.cuh"

// Compiled for tests/cuda_emulator.h, the rows take their smaller shapes.
#ifdef LLMC_CUDA_EMULATION
#define KC_EMULATED 1
#else
#define KC_EMULATED 0
#endif
#define KC_SIZE(emulated, gpu) (KC_EMULATED ? (emulated) : (gpu))

// ---------------------------------------------------------------------------
// the launchers a run goes through

struct KernelImpls {
    const char *name;  // printed before each case ("llmc", "v1 scalar", ...)
    decltype(&gpu_layernorm_forward) layernorm_forward;
    decltype(&gpu_fused_residual_layernorm) fused_residual_layernorm;
    decltype(&gpu_layernorm_backward) layernorm_backward;
    decltype(&gpu_gelu_forward) gelu_forward;
    decltype(&gpu_gelu_backward_inplace) gelu_backward_inplace;
    decltype(&gpu_fused_classifier) fused_classifier;
    decltype(&gpu_encoder_forward) encoder_forward;
    decltype(&gpu_encoder_backward) encoder_backward;
    decltype(&gpu_adamw_update) adamw_update;
    decltype(&gpu_sum_of_squares) sum_of_squares;
    decltype(&gpu_sum_of_squares_ranges) sum_of_squares_ranges;  // NULL: its rows skipped
};
static const KernelImpls LLMC_KERNELS = {
    "llmc",           gpu_layernorm_forward, gpu_fused_residual_layernorm, gpu_layernorm_backward,
    gpu_gelu_forward, gpu_gelu_backward_inplace, gpu_fused_classifier, gpu_encoder_forward,
    gpu_encoder_backward, gpu_adamw_update, gpu_sum_of_squares, gpu_sum_of_squares_ranges,
};

// llmc's launchers with some replaced (by a dev/cuda checker's older version): name, and the replacing
static KernelImpls kernel_impls_with(const char *name, void (*replace)(KernelImpls *)) {
    KernelImpls v = LLMC_KERNELS;
    v.name = name;
    replace(&v);
    return v;
}

// ---------------------------------------------------------------------------
// device buffers (copied to and from the host, so the same code runs on a GPU
// and on the emulator)

// n elements of T in device memory filled with NaN bits, starting 256-byte
// aligned or (misaligned) one element past it: a kernel handed it takes its
// element path.
template <class T> struct KcBuf {
    unsigned char *base;
    T *p;
    size_t n;
    KcBuf(size_t n_, int misaligned) : n(n_) {
        size_t bytes = ((n + 16) * sizeof(T) + 255) / 256 * 256;
        CUDA_CHECK(cudaMalloc((void **)&base, bytes));
        CUDA_CHECK(cudaMemset(base, 0xff, bytes));
        p = (T *)base + (misaligned ? 1 : 0);
    }
    ~KcBuf() { CUDA_CHECK(cudaFree(base)); }
    KcBuf(const KcBuf &) = delete;
    KcBuf &operator=(const KcBuf &) = delete;
};

// n values uniform in [-scale, scale), rounded to floatX (exact on the device)
static std::vector<float> random_floatX(Rng *rng, size_t n, float scale) {
    std::vector<float> h(n);
    for (size_t i = 0; i < n; i++) h[i] = floatX_round((2.0f * rng_uniform(rng) - 1.0f) * scale);
    return h;
}
static void put(floatX *d, const std::vector<float> &h) {
    std::vector<floatX> x(h.size());
    for (size_t i = 0; i < h.size(); i++) x[i] = to_floatX(h[i]);
    CUDA_CHECK(cudaMemcpy(d, x.data(), x.size() * sizeof(floatX), cudaMemcpyHostToDevice));
}
static void put(float *d, const std::vector<float> &h) {
    CUDA_CHECK(cudaMemcpy(d, h.data(), h.size() * sizeof(float), cudaMemcpyHostToDevice));
}
static std::vector<floatX> get_raw(const floatX *d, size_t n) {
    std::vector<floatX> x(n);
    CUDA_CHECK(cudaDeviceSynchronize());
    CUDA_CHECK(cudaMemcpy(x.data(), d, n * sizeof(floatX), cudaMemcpyDeviceToHost));
    return x;
}
static std::vector<float> get(const floatX *d, size_t n) {
    std::vector<floatX> x = get_raw(d, n);
    std::vector<float> h(n);
    for (size_t i = 0; i < n; i++) h[i] = to_float(x[i]);
    return h;
}
static std::vector<float> get(const float *d, size_t n) {
    std::vector<float> h(n);
    CUDA_CHECK(cudaDeviceSynchronize());
    CUDA_CHECK(cudaMemcpy(h.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost));
    return h;
}
static bool same_bits(const std::vector<float> &a, const std::vector<float> &b) {
    return a.size() == b.size() && memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}
static const char *path_name(int misaligned) { return misaligned ? "element path" : "vector path"; }

// A second run whose threads go in reverse order (the emulator's barrier
// schedule; on a GPU, just a second run): for the checks that runs repeat bits.
static void kc_second_run_order(bool reverse) {
#ifdef LLMC_CUDA_EMULATION
    emu_schedule = reverse ? EMU_SCHEDULE_REVERSE : EMU_SCHEDULE_RANDOM;
#else
    (void)reverse;
#endif
}

// ---------------------------------------------------------------------------
// a case's report: its comparisons and its yes/no checks

struct KcReport {
    struct Close { std::string what; double excess, max_abs, max_rel; };
    std::vector<Close> close;
    std::vector<std::pair<std::string, bool>> checks;
    std::string note;  // printed after the errors (e.g. a sum and its reference)
    uint64_t bits = 0;  // a hash of the outputs every version must give bit for bit (0: none promised)

    void same_bits_across_versions(const std::vector<float> &v) {
        const unsigned char *p = (const unsigned char *)v.data();
        if (!bits) bits = 0xcbf29ce484222325ull;
        for (size_t i = 0; i < v.size() * sizeof(float); i++) bits = (bits ^ p[i]) * 0x100000001b3ull;  // FNV-1a
    }

    // got against ref: |got - ref| <= atol + rtol |ref| everywhere (NaN never passes)
    template <class G, class R>
    void compare(const std::string &what, const G *got, const R *ref, size_t n, double atol, double rtol) {
        Close c = {what, 0.0, 0.0, 0.0};
        for (size_t i = 0; i < n; i++) {
            double d = fabs((double)got[i] - (double)ref[i]);
            double e = d / (atol + rtol * fabs((double)ref[i]) + 1e-300);
            if (e != e) e = INFINITY, d = INFINITY;
            if (e > c.excess) c.excess = e;
            if (d > c.max_abs) c.max_abs = d;
            if (ref[i] != 0 && d / fabs((double)ref[i]) > c.max_rel) c.max_rel = d / fabs((double)ref[i]);
        }
        close.push_back(c);
    }
    void compare(const std::string &what, const std::vector<float> &got, const std::vector<float> &ref, double atol,
                 double rtol) {
        compare(what, got.data(), ref.data(), ref.size(), atol, rtol);
    }
    void check(const std::string &what, bool ok) { checks.push_back({what, ok}); }
};

// ---------------------------------------------------------------------------
// the table

struct KernelCase;
typedef void (*KernelCaseRun)(const KernelCase *k, const KernelImpls *impl, Rng *rng, KcReport *r);
struct KernelCase {
    const char *family;  // layernorm, gelu, classifier, encoder, adamw, global_norm, colsum
    const char *shape;   // printed: what the numbers are
    int64_t a, b, c, d;  // the shape's numbers (see each family's run function)
    KernelCaseRun run;
    uint64_t seed;       // the family's random inputs (the generator is seeded at its first row)
};

// ---- layernorm: gpu_layernorm_forward, gpu_fused_residual_layernorm and
// gpu_layernorm_backward (llmc/layernorm.cuh). a = N, b = C, c = 1: also with
// the outputs and weights misaligned, the row inputs aligned (the backward's
// rows by element, its parameter sums by vector).

struct LnInputs {
    int N, C;
    std::vector<float> x, r, res, w, b;        // forward: res = floatX(r + x)
    std::vector<float> ref, mean, rstd;        // LayerNorm of res
    std::vector<float> dout, dinp0, dw0, db0;  // backward inputs and start values
    std::vector<float> dinp, dw, db;           // backward reference
};
struct LnGot {
    std::vector<float> out, mean, rstd, fres, fout, fmean, frstd;
};

// mis_in: the row inputs (x, r, residual, dout) misaligned; mis_out: the rest
static LnGot layernorm_run(const LnInputs &k, const KernelImpls *im, int mis_in, int mis_out, const char *mode,
                           KcReport *rep) {
    const int N = k.N, C = k.C;
    const size_t nc = (size_t)N * C;
    const std::string at = std::string(" (") + mode + ")";
    LnGot g;
    KcBuf<floatX> x(nc, mis_in), r(nc, mis_in), res(nc, mis_in), dout(nc, mis_in), w(C, mis_out), b(C, mis_out);
    put(x.p, k.x), put(r.p, k.r), put(res.p, k.res), put(dout.p, k.dout), put(w.p, k.w), put(b.p, k.b);
    {  // plain forward of the residual
        KcBuf<floatX> out(nc, mis_out);
        KcBuf<float> m(N, mis_out), s(N, mis_out);
        im->layernorm_forward(out.p, m.p, s.p, res.p, w.p, b.p, N, C, 0);
        g.out = get(out.p, nc), g.mean = get(m.p, N), g.rstd = get(s.p, N);
    }
    {  // fused residual + forward, then the plain forward of its residual (--recompute full)
        KcBuf<floatX> out(nc, mis_out), resid(nc, mis_in), out2(nc, mis_out);
        KcBuf<float> m(N, mis_out), s(N, mis_out), m2(N, mis_out), s2(N, mis_out);
        im->fused_residual_layernorm(resid.p, out.p, m.p, s.p, r.p, x.p, w.p, b.p, N, C, 0);
        g.fres = get(resid.p, nc), g.fout = get(out.p, nc), g.fmean = get(m.p, N), g.frstd = get(s.p, N);
        im->layernorm_forward(out2.p, m2.p, s2.p, resid.p, w.p, b.p, N, C, 0);
        rep->check("recompute bits" + at, same_bits(get(out2.p, nc), g.fout) && same_bits(get(m2.p, N), g.fmean) &&
                                              same_bits(get(s2.p, N), g.frstd));
    }
    // backward from the start values with the reference statistics, twice (the
    // second with the threads in reverse order): the same bits
    std::vector<float> got[2][4];  // [run][dinp, dinp floatX, dw, db]
    for (int run = 0; run < 2; run++) {
        KcBuf<float> dinp(nc, mis_out), dw(C, mis_out), db(C, mis_out), m(N, mis_out), s(N, mis_out);
        KcBuf<floatX> dinp_x(nc, mis_out);
        KcBuf<float> scratch(layernorm_scratch_floats(N, C), 0);
        put(dinp.p, k.dinp0), put(dw.p, k.dw0), put(db.p, k.db0), put(m.p, k.mean), put(s.p, k.rstd);
        kc_second_run_order(run == 1);
        im->layernorm_backward(dinp.p, dinp_x.p, dw.p, db.p, scratch.p, dout.p, res.p, w.p, m.p, s.p, N, C, 0);
        kc_second_run_order(false);
        got[run][0] = get(dinp.p, nc), got[run][1] = get(dinp_x.p, nc), got[run][2] = get(dw.p, C),
        got[run][3] = get(db.p, C);
    }
    bool bwd_repro = true;
    for (int q = 0; q < 4; q++) bwd_repro = bwd_repro && same_bits(got[0][q], got[1][q]);
    rep->check("backward bits run to run" + at, bwd_repro);

    // out: one rounding of values of size |w| |x - mean| rstd + |b| <= ~5 (atol: fp32 noise of those);
    // mean, rstd, dinp, dw, db: fp32; the residual: exact
    const double U = FLOATX_UNIT_ROUNDOFF;
    rep->compare("out" + at, g.out, k.ref, 1e-5, U + 1e-5);
    rep->compare("fused out" + at, g.fout, k.ref, 1e-5, U + 1e-5);
    rep->compare("mean" + at, g.mean, k.mean, 1e-5, 1e-4), rep->compare("rstd" + at, g.rstd, k.rstd, 1e-5, 1e-4);
    rep->compare("fused mean" + at, g.fmean, k.mean, 1e-5, 1e-4);
    rep->compare("fused rstd" + at, g.frstd, k.rstd, 1e-5, 1e-4);
    rep->check("residual exact" + at, same_bits(g.fres, k.res));
    rep->compare("dinp" + at, got[0][0], k.dinp, 1e-4, 1e-3);
    rep->compare("dinp floatX" + at, got[0][1], k.dinp, 1e-4, U + 1e-3);
    rep->compare("dw" + at, got[0][2], k.dw, 1e-3, 1e-3), rep->compare("db" + at, got[0][3], k.db, 1e-3, 1e-3);
    return g;
}

static void layernorm_case(const KernelCase *kc, const KernelImpls *im, Rng *rng, KcReport *rep) {
    const int N = (int)kc->a, C = (int)kc->b;
    const size_t nc = (size_t)N * C;
    LnInputs k;
    k.N = N, k.C = C;
    k.x = random_floatX(rng, nc, 2.0f), k.r = random_floatX(rng, nc, 2.0f);
    k.w = random_floatX(rng, C, 1.0f), k.b = random_floatX(rng, C, 1.0f);
    k.res.resize(nc), k.ref.resize(nc), k.mean.resize(N), k.rstd.resize(N);
    for (size_t i = 0; i < nc; i++) k.res[i] = floatX_round(k.r[i] + k.x[i]);  // as the GPU stores it
    layernorm_forward(k.ref.data(), k.mean.data(), k.rstd.data(), k.res.data(), k.w.data(), k.b.data(), N, C);
    k.dout = random_floatX(rng, nc, 1.0f), k.dinp0 = random_floatX(rng, nc, 1.0f);
    k.dw0 = random_floatX(rng, C, 1.0f), k.db0 = random_floatX(rng, C, 1.0f);
    k.dinp = k.dinp0, k.dw = k.dw0, k.db = k.db0;
    layernorm_backward(k.dinp.data(), k.dw.data(), k.db.data(), k.dout.data(), k.res.data(), k.w.data(),
                       k.mean.data(), k.rstd.data(), N, C);
    LnGot a = layernorm_run(k, im, 0, 0, C % 8 ? "element path: C % 8 != 0" : "vector path", rep);
    LnGot m = layernorm_run(k, im, 1, 1, "misaligned", rep);
    rep->check("forwards' element path gives the vector path's bits",
               same_bits(a.out, m.out) && same_bits(a.mean, m.mean) && same_bits(a.rstd, m.rstd) &&
                   same_bits(a.fres, m.fres) && same_bits(a.fout, m.fout) && same_bits(a.fmean, m.fmean) &&
                   same_bits(a.frstd, m.frstd));
    if (kc->c) layernorm_run(k, im, 0, 1, "outputs and weights misaligned", rep);
}

// ---- gelu: gpu_gelu_forward and gpu_gelu_backward_inplace (llmc/gelu.cuh). a = n.

static void gelu_case(const KernelCase *kc, const KernelImpls *im, Rng *rng, KcReport *rep) {
    const size_t n = (size_t)kc->a;
    std::vector<float> x = random_floatX(rng, n, 6.0f), d = random_floatX(rng, n, 1.0f);
    // the far tails and zeros: s = 0 past -2u = 80, s = 1 at the top, gelu(-0) = -0
    const float special[] = {-20.0f, -9.75f, -9.6875f, -0.0f, 0.0f, 10.0f, 20.0f};
    for (size_t i = 0; i < n && i < sizeof(special) / sizeof(special[0]); i++) x[(i * 7919) % n] = special[i];
    std::vector<float> ref(n), dref = d;
    gelu_forward(ref.data(), x.data(), n);
    gelu_backward_inplace(dref.data(), x.data(), n);
    std::vector<float> fwd[2], bwd[2];
    for (int mis = 0; mis < 2; mis++) {
        KcBuf<floatX> dx(n, mis), dd(n, mis), out(n, mis);
        put(dx.p, x), put(dd.p, d);
        im->gelu_forward(out.p, dx.p, (int64_t)n, 0);
        im->gelu_backward_inplace(dd.p, dx.p, (int64_t)n, 0);
        fwd[mis] = get(out.p, n), bwd[mis] = get(dd.p, n);
        // one rounding; atol: the CPU tanh's 1e-7 absolute error times |x| <= 20, and __expf's
        const std::string at = std::string(" (") + path_name(mis) + ")";
        rep->compare("forward" + at, fwd[mis], ref, 1e-5, FLOATX_UNIT_ROUNDOFF + 2e-5);
        rep->compare("backward" + at, bwd[mis], dref, 1e-5, FLOATX_UNIT_ROUNDOFF + 2e-5);
    }
    rep->check("element path gives the vector path's bits", same_bits(fwd[0], fwd[1]) && same_bits(bwd[0], bwd[1]));
}

// ---- classifier: gpu_fused_classifier (llmc/classifier.cuh). a = N, b = V, c = Vp.

static void classifier_case(const KernelCase *kc, const KernelImpls *im, Rng *rng, KcReport *rep) {
    const int N = (int)kc->a, V = (int)kc->b, Vp = (int)kc->c;
    size_t n = (size_t)N * Vp;
    std::vector<float> lp = random_floatX(rng, n, 8.0f);  // the padded columns hold garbage: must be ignored
    std::vector<float> ref((size_t)N * V), losses(N);
    std::vector<int> y(N);
    for (int i = 0; i < N; i++) {
        y[i] = (int)rng_below(rng, (uint64_t)V);
        memcpy(&ref[(size_t)i * V], &lp[(size_t)i * Vp], V * sizeof(float));
    }
    y[0] = V - 1;  // the last real column, next to the padding
    const float dloss = 1.0f;
    softmax_crossentropy(ref.data(), losses.data(), y.data(), N, V, dloss);
    KcBuf<int> d_y(N, 0);
    CUDA_CHECK(cudaMemcpy(d_y.p, y.data(), N * sizeof(int), cudaMemcpyHostToDevice));
    std::vector<float> got_loss[2], got_d[2];
    for (int mis = 0; mis < 2; mis++) {
        const std::string at = std::string(" (") + (Vp % 8 ? "element path: Vp % 8 != 0" : path_name(mis)) + ")";
        KcBuf<floatX> l(n, mis);
        KcBuf<float> loss(N, mis);
        put(l.p, lp);
        im->fused_classifier(l.p, loss.p, d_y.p, N, V, Vp, 0.0f, 0);  // eval: losses only
        std::vector<float> eval_loss = get(loss.p, N);
        rep->check("eval leaves the logits untouched" + at, same_bits(get(l.p, n), lp));
        CUDA_CHECK(cudaMemset(loss.p, 0xff, N * sizeof(float)));
        im->fused_classifier(l.p, loss.p, d_y.p, N, V, Vp, dloss, 0);
        got_loss[mis] = get(loss.p, N), got_d[mis] = get(l.p, n);
        std::vector<float> d((size_t)N * V);
        size_t pad_nonzero = 0;
        for (int i = 0; i < N; i++) {
            memcpy(&d[(size_t)i * V], &got_d[mis][(size_t)i * Vp], V * sizeof(float));
            for (int c = V; c < Vp; c++) pad_nonzero += got_d[mis][(size_t)i * Vp + c] != 0.0f;  // (NaN counts)
        }
        // losses fp32; dlogits one rounding of dloss (p - onehot), |p| <= 1 from an exponent with fp32 noise ~1e-6
        rep->compare("eval loss" + at, eval_loss, losses, 1e-4, 1e-4);
        rep->compare("loss" + at, got_loss[mis], losses, 1e-4, 1e-4);
        rep->compare("dlogits" + at, d, ref, 1e-6, FLOATX_UNIT_ROUNDOFF + 1e-5);
        rep->check("padded columns' gradients 0" + at, pad_nonzero == 0);
    }
    rep->check("element path gives the vector path's bits",
               same_bits(got_loss[0], got_loss[1]) && same_bits(got_d[0], got_d[1]));
}

// ---- encoder: gpu_encoder_forward and gpu_encoder_backward (llmc/encoder.cuh). a = B, b = T, c = C, d = V.

static void encoder_case(const KernelCase *kc, const KernelImpls *im, Rng *rng, KcReport *rep) {
    const int B = (int)kc->a, T = (int)kc->b, C = (int)kc->c, V = (int)kc->d, N = B * T;
    std::vector<int> inp[2];  // two batches: the index is rebuilt for the second
    for (int k = 0; k < 2; k++) {
        inp[k].resize(N);
        for (int i = 0; i < N; i++) inp[k][i] = (int)rng_below(rng, (uint64_t)V);
    }
    std::vector<float> wte = random_floatX(rng, (size_t)V * C, 1.0f), wpe = random_floatX(rng, (size_t)T * C, 1.0f);
    std::vector<float> ref((size_t)N * C);
    encoder_forward(ref.data(), inp[0].data(), wte.data(), wpe.data(), B, T, C);
    std::vector<float> dout[2] = {random_floatX(rng, (size_t)N * C, 1.0f), random_floatX(rng, (size_t)N * C, 1.0f)};
    std::vector<float> dwte0 = random_floatX(rng, (size_t)V * C, 1.0f), dwpe0 = random_floatX(rng, (size_t)T * C, 1.0f);
    std::vector<float> dwte = dwte0, dwpe = dwpe0;
    for (int k = 0; k < 2; k++) encoder_backward(dwte.data(), dwpe.data(), dout[k].data(), inp[k].data(), B, T, C);
    KcBuf<int> d_inp(N, 0);
    CUDA_CHECK(cudaMemcpy(d_inp.p, inp[0].data(), N * sizeof(int), cudaMemcpyHostToDevice));
    EncoderIndex ix;
    encoder_index_init(&ix, N, V);
    std::vector<float> got[2][3];
    for (int mis = 0; mis < 2; mis++) {
        KcBuf<floatX> d_wte((size_t)V * C, mis), d_wpe((size_t)T * C, mis), out((size_t)N * C, mis);
        put(d_wte.p, wte), put(d_wpe.p, wpe);
        im->encoder_forward(out.p, d_inp.p, d_wte.p, d_wpe.p, B, T, C, 0);
        got[mis][0] = get(out.p, (size_t)N * C);
        KcBuf<float> g_wte((size_t)V * C, mis), g_wpe((size_t)T * C, mis), d_dout((size_t)N * C, mis);
        put(g_wte.p, dwte0), put(g_wpe.p, dwpe0);
        for (int k = 0; k < 2; k++) {
            encoder_index_build(&ix, inp[k].data(), N, 0, V, nullptr);
            put(d_dout.p, dout[k]);
            im->encoder_backward(g_wte.p, g_wpe.p, d_dout.p, &ix, B, T, C, 0);
        }
        got[mis][1] = get(g_wte.p, (size_t)V * C), got[mis][2] = get(g_wpe.p, (size_t)T * C);
        const char *path = mis ? "misaligned: element paths"
                           : C % 8 == 0 ? "vector paths"
                           : C % 4 == 0 ? "forward element path, backward float4"
                                        : "element paths: C % 4 != 0";
        const std::string at = std::string(" (") + path + ")";
        // forward: one rounding of a sum of two floatX; backward over two batches: fp32 sums in another association
        rep->compare("forward" + at, got[mis][0], ref, 0.0, FLOATX_UNIT_ROUNDOFF + 1e-6);
        rep->compare("dwte" + at, got[mis][1], dwte, 1e-5, 1e-5);
        rep->compare("dwpe" + at, got[mis][2], dwpe, 1e-5, 1e-5);
    }
    for (int q = 0; q < 3; q++) rep->same_bits_across_versions(got[0][q]);  // the same arithmetic in every version
    rep->check("element paths give the vector paths' bits", same_bits(got[0][0], got[1][0]) &&
                                                                 same_bits(got[0][1], got[1][1]) &&
                                                                 same_bits(got[0][2], got[1][2]));
    encoder_index_free(&ix);
}

// ---- adamw: gpu_adamw_update (llmc/adamw.cuh), 3 steps on a real layout
// (GPTConfig {64, 250, Vp, 2, 4, 128}). a: the range: 1 the whole buffer
// (float4 path), 2 a shard starting at an odd element (element path
// throughout), 3 a shard at a multiple of 4 ending at 3 mod 4 (float4 path with tails).

// The stochastic rounding of x with random bits `bits`, restated: x + (bits &
// 0xffff) in the low half of its fp32 pattern, truncated to the high half.
static uint16_t host_stochastic_floatX(float x, uint32_t bits) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return (uint16_t)((u + (bits & 0xffffu)) >> 16);
}
static uint32_t host_hash_u32(uint64_t seed, uint64_t i) {  // splitmix64's finaliser of seed + i * golden
    uint64_t z = seed + i * 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return (uint32_t)((z ^ (z >> 31)) >> 32);
}

static void adamw_case(const KernelCase *kc, const KernelImpls *im, Rng *rng, KcReport *rep) {
    GPTConfig cfg = {64, 250, pad_vocab(250), 2, 4, 128};
    ParamLayout layout;
    param_layout_init(&layout, &cfg);
    const ParamLayout *pl = &layout;
    const int64_t PP = pl->num_elements;
    const int64_t begin = kc->a == 1 ? 0 : kc->a == 2 ? (PP / 3) | 1 : (PP / 4) & ~(int64_t)3;
    const int64_t end = kc->a == 1 ? PP : kc->a == 2 ? 2 * PP / 3 + 1 : ((3 * PP / 4) & ~(int64_t)3) + 3;
    const size_t P = (size_t)PP, n = (size_t)(end - begin);
    rep->note = "[" + std::to_string(begin) + ", " + std::to_string(end) + ") of " + std::to_string(P);
    std::vector<float> p0 = random_floatX(rng, P, 1.0f), g = random_floatX(rng, P, 1.0f);
    std::vector<float> m0 = random_floatX(rng, n, 0.1f), v0 = random_floatX(rng, n, 0.1f);
    for (float &x : v0) x = fabsf(x);
    std::vector<float> p = p0, m = m0, v = v0, gc = g;
    for (int step = 1; step <= 3; step++) {
        AdamWConfig c = {1e-3f * step, 0.9f, 0.95f, 1e-8f, 0.1f, step};
        adamw_update_range(pl, p.data(), gc.data(), 0, m.data(), v.data(), begin, end, &c, 0.5f);
    }
    AdamWPlan ap;
    adamw_plan_init(&ap, pl, begin, end, NULL);
    std::vector<float> got[2][4];
    for (int mis = 0; mis < 2; mis++) {
        const std::string at = mis ? " (misaligned: element path)" : " (aligned)";
        KcBuf<float> dp(P, mis), dg(P, mis), dm(n, mis), dv(n, mis);
        KcBuf<floatX> db(P, mis);
        put(dp.p, p0), put(dg.p, g), put(dm.p, m0), put(dv.p, v0);
        const uint64_t last_seed = 99 + 3;
        for (int step = 1; step <= 3; step++) {
            AdamWConfig c = {1e-3f * step, 0.9f, 0.95f, 1e-8f, 0.1f, step};
            im->adamw_update(&ap, dp.p, db.p, dg.p, dm.p, dv.p, &c, 0.5f, 99 + step, 0);
        }
        got[mis][0] = get(dp.p, P), got[mis][1] = get(dm.p, n), got[mis][2] = get(dv.p, n), got[mis][3] = get(db.p, P);
        // inside the range: the floatX copy is exactly the stochastic rounding of the
        // master weight with the bits of (seed, index); outside: nothing touched
        std::vector<floatX> raw = get_raw(db.p, P);
        size_t wrong = 0, touched = 0;
        double bias = 0, scale = 0;
        for (size_t i = 0; i < P; i++) {
            uint16_t bits = floatX_bits(raw[i]);
            if ((int64_t)i >= begin && (int64_t)i < end) {
                float x = got[mis][0][i];
                wrong += bits != host_stochastic_floatX(x, host_hash_u32(last_seed, i));
                bias += (double)to_float(raw[i]) - x;
                scale += fabs((double)to_float(raw[i]) - x);
            } else {
                touched += bits != 0xffffu || memcmp(&got[mis][0][i], &p0[i], 4) != 0;
            }
        }
        // fp32 state: the kernel divides by sqrt(1 - beta2^t), the CPU multiplies
        rep->compare("params" + at, got[mis][0], p, 1e-6, 1e-5);
        rep->compare("m" + at, got[mis][1], m, 1e-7, 1e-5), rep->compare("v" + at, got[mis][2], v, 1e-7, 1e-5);
        rep->check("floatX copies the stochastic rounding" + at, wrong == 0);
        rep->check("floatX copies unbiased" + at, n < 10000 || fabs(bias) < 0.05 * scale);
        rep->check("nothing outside the range touched" + at, touched == 0);
        if (!mis) {  // a second run from the same state, threads in reverse order: the same bits
            KcBuf<float> dp2(P, 0), dm2(n, 0), dv2(n, 0);
            KcBuf<floatX> db2(P, 0);
            AdamWConfig c = {1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 4};
            put(dp2.p, got[0][0]), put(dm2.p, got[0][1]), put(dv2.p, got[0][2]);
            im->adamw_update(&ap, dp.p, db.p, dg.p, dm.p, dv.p, &c, 0.5f, 7, 0);
            kc_second_run_order(true);
            im->adamw_update(&ap, dp2.p, db2.p, dg.p, dm2.p, dv2.p, &c, 0.5f, 7, 0);
            kc_second_run_order(false);
            rep->check("a second run gives the same bits", same_bits(get(dp.p + begin, n), get(dp2.p + begin, n)) &&
                                                               same_bits(get(db.p + begin, n), get(db2.p + begin, n)) &&
                                                               same_bits(get(dm.p, n), get(dm2.p, n)) &&
                                                               same_bits(get(dv.p, n), get(dv2.p, n)));
        }
    }
    bool same = true;
    for (int q = 0; q < 4; q++) {
        size_t off = q == 0 || q == 3 ? (size_t)begin : 0;
        same = same && same_bits(std::vector<float>(got[0][q].begin() + off, got[0][q].begin() + off + n),
                                 std::vector<float>(got[1][q].begin() + off, got[1][q].begin() + off + n));
    }
    rep->check("element path gives the vector path's bits (p, m, v, floatX)", same);
    adamw_plan_free(&ap);
    param_layout_free(&layout);
}

// ---- global norm: gpu_sum_of_squares (llmc/global_norm.cuh). a = n, b = 1: also a second run (threads in
// reverse order) giving the same bits.

static void global_norm_case(const KernelCase *kc, const KernelImpls *im, Rng *rng, KcReport *rep) {
    const size_t n = (size_t)kc->a;
    std::vector<float> g = random_floatX(rng, n, 1.0f);
    double ref = sum_of_squares(g.data(), (int64_t)n);
    char note[160];
    for (int mis = 0; mis < 2; mis++) {
        const std::string at = mis ? " (misaligned: scalar path)" : " (float4 path)";
        KcBuf<float> dg(n, mis), scratch(global_norm_scratch_floats(), 0);
        put(dg.p, g);
        im->sum_of_squares(scratch.p, dg.p, (int64_t)n, 0);
        double got = global_norm_result(scratch.p, 0);
        // fp32 partial sums: within 1e-5 relative of the double sum
        rep->compare("sum of squares" + at, &got, &ref, 1, 1e-30, 1e-5);
        if (kc->b) {
            CUDA_CHECK(cudaMemset(scratch.p, 0xff, global_norm_scratch_floats() * sizeof(float)));
            kc_second_run_order(true);
            im->sum_of_squares(scratch.p, dg.p, (int64_t)n, 0);
            kc_second_run_order(false);
            double again = global_norm_result(scratch.p, 0);
            rep->check("a second run gives the same bits" + at, memcmp(&got, &again, sizeof(got)) == 0);
        }
        if (!mis) snprintf(note, sizeof(note), "%.9g vs cpu %.9g", got, ref);
    }
    rep->note = note;
}

// ---- gpu_sum_of_squares_ranges (a tensor-parallel rank's norm: the split tensors' pieces) against the
// CPU's sums over the same ranges of one buffer of a elements: empty, single-element, adjacent and long
// ranges; and its bits run to run.

static void global_norm_ranges_case(const KernelCase *kc, const KernelImpls *im, Rng *rng, KcReport *rep) {
    const int64_t n = kc->a;
    const int64_t ranges[] = {5, 1029, 2000, 2001, 2001, 2001, 4096, n / 2, n / 2 + 3, n};
    const int nr = (int)(sizeof(ranges) / sizeof(ranges[0]) / 2);
    std::vector<float> g = random_floatX(rng, (size_t)n, 1.0f);
    double ref = 0.0;
    for (int k = 0; k < nr; k++) ref += sum_of_squares(g.data() + ranges[2 * k], ranges[2 * k + 1] - ranges[2 * k]);
    KcBuf<float> dg((size_t)n, 0), scratch(global_norm_scratch_floats(), 0);
    KcBuf<int64_t> d_ranges(sizeof(ranges) / sizeof(ranges[0]), 0);
    put(dg.p, g);
    CUDA_CHECK(cudaMemcpy(d_ranges.p, ranges, sizeof(ranges), cudaMemcpyHostToDevice));
    double got[2];
    for (int run = 0; run < 2; run++) {
        im->sum_of_squares_ranges(scratch.p, dg.p, d_ranges.p, nr, 0);
        got[run] = global_norm_result(scratch.p, 0);
    }
    rep->compare("sum of squares over the ranges", &got[0], &ref, 1, 1e-30, 1e-5);
    rep->check("a second run gives the same bits", memcmp(&got[0], &got[1], sizeof(double)) == 0);
    char note[96];
    snprintf(note, sizeof(note), "%d ranges: %.9g vs cpu %.9g", nr, got[0], ref);
    rep->note = note;
}

// ---- column sums (bias gradients): gpu_colsum_accumulate (llmc/colsum.cuh). a = N, b = C, c = 1: the
// matrix in floatX (else fp32). out += column sums, against column_sum_accumulate: fp32 sums of N terms
// in another order.

template <class T> static void colsum_run(int N, int C, Rng *rng, KcReport *rep) {
    std::vector<float> a = random_floatX(rng, (size_t)N * C, 1.0f), out0 = random_floatX(rng, (size_t)C, 1.0f);
    std::vector<float> ref = out0;
    column_sum_accumulate(ref.data(), a.data(), N, C);
    KcBuf<T> da((size_t)N * C, 0);
    KcBuf<float> dout((size_t)C, 0), scratch(colsum_scratch_floats(N, C), 0);
    put(da.p, a);
    put(dout.p, out0);
    gpu_colsum_accumulate<T>(dout.p, scratch.p, da.p, N, C, 0);
    rep->compare(sizeof(T) == 2 ? "column sums (floatX)" : "column sums (fp32)", get(dout.p, (size_t)C), ref,
                 1e-5 * N, 1e-5);  // |terms| <= 1: fp32 rounding of N terms
}
static void colsum_case(const KernelCase *kc, const KernelImpls *, Rng *rng, KcReport *rep) {
    if (kc->c) colsum_run<floatX>((int)kc->a, (int)kc->b, rng, rep);
    else colsum_run<float>((int)kc->a, (int)kc->b, rng, rep);
}

// ---------------------------------------------------------------------------
// the rows: the shapes dev/cuda/<family>.cu checks on a GPU, scaled down where the emulator would be slow
// (KC_SIZE(emulated, gpu)); a first number 0 skips the row there (the GPU's larger shapes of what a
// smaller row checks already on the emulator)

static const KernelCase KERNEL_CASES[] = {
    // LayerNorm: C = 64 (one chunk per lane), 768 (three), 1600 (seven, the last partly past C), 2304 (> 2048:
    // re-read), multiples of 8; 100, 7, 2052 (element path); N not a multiple of 4 rows, nor of 128-row chunks
    {"layernorm", "N=%lld C=%lld", 7, 64, 0, 0, layernorm_case, 2},
    {"layernorm", "N=%lld C=%lld", 5, 100, 0, 0, layernorm_case, 2},
    {"layernorm", "N=%lld C=%lld", 3, 7, 0, 0, layernorm_case, 2},
    {"layernorm", "N=%lld C=%lld", 130, 768, 1, 0, layernorm_case, 2},
    {"layernorm", "N=%lld C=%lld", 9, 1600, 0, 0, layernorm_case, 2},
    {"layernorm", "N=%lld C=%lld", 5, 2304, 0, 0, layernorm_case, 2},
    {"layernorm", "N=%lld C=%lld", 3, 2052, 0, 0, layernorm_case, 2},
    // d12 with a partial 128-row chunk, d48 with seven chunks per lane, past 2048 (vector and element paths)
    {"layernorm", "N=%lld C=%lld", KC_SIZE(0, 300), 768, 0, 0, layernorm_case, 2},
    {"layernorm", "N=%lld C=%lld", KC_SIZE(0, 1000), 1600, 0, 0, layernorm_case, 2},
    {"layernorm", "N=%lld C=%lld", KC_SIZE(0, 33), 2304, 0, 0, layernorm_case, 2},
    {"layernorm", "N=%lld C=%lld", KC_SIZE(0, 9), 2052, 0, 0, layernorm_case, 2},
    // GELU: a lone partial group of 8, partial last groups, several blocks
    {"gelu", "n=%lld", 1, 0, 0, 0, gelu_case, 4},
    {"gelu", "n=%lld", 1000, 0, 0, 0, gelu_case, 4},
    {"gelu", "n=%lld", 2 * 8 * GELU_THREADS + 13, 0, 0, 0, gelu_case, 4},
    {"gelu", "n=%lld", KC_SIZE(20 * 1000 + 7, 3 * 1000 * 1000 + 7), 0, 0, 0, gelu_case, 4},
    // classifier: one vector per thread, most of it padding; 1024; Vp % 8 != 0; GPT-2's 7 vectors per thread;
    // past 65536: re-read
    {"classifier", "N=%lld V=%lld Vp=%lld", 3, 10, pad_vocab(10), 0, classifier_case, 6},
    {"classifier", "N=%lld V=%lld Vp=%lld", 9, 1000, pad_vocab(1000), 0, classifier_case, 6},
    {"classifier", "N=%lld V=%lld Vp=%lld", 5, 1000, 1003, 0, classifier_case, 6},
    {"classifier", "N=%lld V=%lld Vp=%lld", 3, 50257, pad_vocab(50257), 0, classifier_case, 6},
    {"classifier", "N=%lld V=%lld Vp=%lld", 2, 70000, pad_vocab(70000), 0, classifier_case, 6},
    {"classifier", "N=%lld V=%lld Vp=%lld", KC_SIZE(0, 64), 1000, pad_vocab(1000), 0, classifier_case, 6},
    {"classifier", "N=%lld V=%lld Vp=%lld", KC_SIZE(0, 128), 50257, pad_vocab(50257), 0, classifier_case, 6},
    {"classifier", "N=%lld V=%lld Vp=%lld", KC_SIZE(0, 4), 70000, pad_vocab(70000), 0, classifier_case, 6},
    // encoder: heavy token repetition; C % 8 != 0 (backward float4); C % 4 != 0; C = 7; d12 width
    {"encoder", "B=%lld T=%lld C=%lld V=%lld", 2, 16, 64, 5, encoder_case, 1},
    {"encoder", "B=%lld T=%lld C=%lld V=%lld", 3, 33, 100, 300, encoder_case, 1},
    {"encoder", "B=%lld T=%lld C=%lld V=%lld", 2, 7, 30, 11, encoder_case, 1},
    {"encoder", "B=%lld T=%lld C=%lld V=%lld", 2, 5, 7, 3, encoder_case, 1},
    {"encoder", "B=%lld T=%lld C=%lld V=%lld", 2, 64, 768, 200, encoder_case, 1},
    {"encoder", "B=%lld T=%lld C=%lld V=%lld", KC_SIZE(0, 4), 256, 768, 50257, encoder_case, 1},  // GPT-2
    // AdamW: the whole buffer, a shard at an odd element, a shard at a multiple of 4 ending at 3 mod 4
    {"adamw", "range %lld", 1, 0, 0, 0, adamw_case, 7},
    {"adamw", "range %lld", 2, 0, 0, 0, adamw_case, 7},
    {"adamw", "range %lld", 3, 0, 0, 0, adamw_case, 7},
    // global norm: fewer elements than threads, a tail after the float4s (n % 4 == 3) with several per thread
    {"global_norm", "n=%lld", 1, 0, 0, 0, global_norm_case, 8},
    {"global_norm", "n=%lld", 1003, 0, 0, 0, global_norm_case, 8},
    {"global_norm", "n=%lld", 4 * 1024 * 512 + 4 * 700 + 3, 1, 0, 0, global_norm_case, 8},
    {"global_norm", "n=%lld", KC_SIZE(0, 1000), 1, 0, 0, global_norm_case, 8},
    {"global_norm", "n=%lld", KC_SIZE(0, 12345679), 1, 0, 0, global_norm_case, 8},
    {"global_norm", "ranges of n=%lld", KC_SIZE(100003, 12345679), 0, 0, 0, global_norm_ranges_case, 8},
    // column sums: one partial chunk; several chunks with a partial last one, C not a multiple of 32 or 256
    {"colsum", "N=%lld C=%lld", 5, 32, 1, 0, colsum_case, 9},
    {"colsum", "N=%lld C=%lld", 600, 300, 1, 0, colsum_case, 9},
    {"colsum", "N=%lld C=%lld", 513, 77, 0, 0, colsum_case, 9},
};

// ---------------------------------------------------------------------------
// the runner

// Runs every row of `family` (NULL: of every family) through impl's launchers,
// one PASS/FAIL line per case; bits (when not NULL) gets each case's hash of
// the outputs all versions must agree on.
static void kernel_cases_run(const char *family, const KernelImpls *impl, std::vector<uint64_t> *bits = NULL) {
    Rng rng;
    const char *seeded = NULL;
    for (const KernelCase &k : KERNEL_CASES) {
        if (family && strcmp(family, k.family) != 0) continue;
        if (!seeded || strcmp(seeded, k.family) != 0) rng_seed(&rng, k.seed), seeded = k.family;
        if (k.a == 0 || (k.run == global_norm_ranges_case && !impl->sum_of_squares_ranges)) continue;
        KcReport rep;
        k.run(&k, impl, &rng, &rep);
        bool ok = true;
        double worst = 0, max_abs = 0, max_rel = 0;
        std::string worst_what = "-", bad;
        for (const KcReport::Close &c : rep.close) {
            if (!(c.excess <= 1.0)) ok = false, bad += "; " + c.what + " error/tolerance " + std::to_string(c.excess);
            if (!(c.excess <= worst)) worst = c.excess, worst_what = c.what;
            max_abs = fmax(max_abs, c.max_abs), max_rel = fmax(max_rel, c.max_rel);
        }
        for (const auto &c : rep.checks)
            if (!c.second) ok = false, bad += "; " + c.first + ": NO";
        char shape[96];
        snprintf(shape, sizeof(shape), k.shape, (long long)k.a, (long long)k.b, (long long)k.c, (long long)k.d);
        test_result(ok, "%s %s %s: worst error / tolerance %.2f (%s), max abs %.2g, max rel %.2g; %zu checks%s%s%s",
                    impl->name, k.family, shape, worst, worst_what.c_str(), max_abs, max_rel, rep.checks.size(),
                    rep.note.empty() ? "" : "; ", rep.note.c_str(), bad.c_str());
        if (bits) bits->push_back(rep.bits);
    }
}

// A dev/cuda checker's versions through its family's rows: every version on a
// GPU; on the emulator the older ones, and llmc's only where the family
// promises the same bits from every version (test_kernels_emulated runs llmc's
// rows). Where it promises them, one more line says whether they were.
static void kernel_cases_run_versions(const char *family, const KernelImpls *const *versions, int n) {
    std::vector<uint64_t> first, bits;
    const char *first_name = NULL;
    for (int i = 0; i < n; i++) {
        bool promised = false;
        for (uint64_t h : first) promised = promised || h != 0;
        if (KC_EMULATED && versions[i] == &LLMC_KERNELS && !promised) continue;
        bits.clear();
        kernel_cases_run(family, versions[i], &bits);
        if (!first_name) first = bits, first_name = versions[i]->name;
        else if (promised) {
            bool same = bits.size() == first.size();
            for (size_t k = 0; same && k < bits.size(); k++) same = bits[k] == first[k];
            test_result(same, "%s: %s and %s give the same bits", family, first_name, versions[i]->name);
        }
    }
}

#endif  // TESTS_KERNEL_CASES_H
