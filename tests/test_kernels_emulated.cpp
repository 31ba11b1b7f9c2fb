// test_kernels_emulated.cpp: the datasheet peaks MFU uses (llmc/cuda_common.cuh),
// and the memory-bound GPU kernels (llmc/layernorm.cuh,
// gelu.cuh, classifier.cuh, encoder.cuh, adamw.cuh, global_norm.cuh: the text
// nvcc compiles) run on the CPU through tests/cuda_emulator.h, against the CPU
// references of llmc/cpu_layers.h and llmc/optimizer.h on the same bf16
// inputs. Each family runs through its llmc launchers (the emulator's
// launch_kernel runs the kernel they launch), at the shapes
// dev/cuda/<family>.cu checks on a GPU, scaled down where the emulator would be
// slow: both the 16-byte vector path and the element-by-element fallback
// (C a multiple of 8 and not; every buffer one element past a 16-byte boundary;
// for LayerNorm's backward, only some), the register-held and the re-read rows
// (LayerNorm C > 2048, classifier Vp > 65536), partial blocks (N not a
// multiple of the rows per block, of the 128-row gradient chunks; partial
// groups of 8 or 4), padded vocabularies (Vp > V, the padding holding garbage),
// AdamW over the whole buffer and over shards starting at odd and
// multiple-of-4 offsets. Outputs the kernels overwrite start as NaN (0xff
// bytes), so an element left unwritten fails; what lies outside an AdamW range
// must stay untouched. As dev/cuda does, the element path must give the vector
// path's bits where the kernels promise it (the LayerNorm forwards, GELU,
// classifier, encoder, AdamW), the LayerNorm of the fused kernel's residual
// the fused kernel's bits (--recompute 2), and a second run (threads in
// another order) the same bits (LayerNorm backward, AdamW, global norm).
//
// Tolerances: a bf16 result is the fp32 value rounded to nearest, within 2^-8
// of it relatively (the unit roundoff of an 8-bit significand): rtol FLOATX_UNIT_ROUNDOFF
// plus a little for fp32 differences between the kernel and the CPU (other
// summation orders, fmas, __expf), and an atol for results that cancel to
// near 0 (scaled to the terms summed). fp32 results (statistics, gradients,
// AdamW state, losses) carry only fp32 summation-order differences: the
// tolerances dev/cuda uses. A second rounding to bf16 of a value that is
// already bf16 is exact, so the residual must match bit for bit.
#include "llmc/cpu_layers.h"
#include "llmc/model.h"
#include "llmc/optimizer.h"
#include "llmc/rand.h"
#include "tests/testing.h"

#include "tests/cuda_emulator.h"

#include "llmc/adamw.cuh"
#include "llmc/classifier.cuh"
#include "llmc/colsum.cuh"
#include "llmc/encoder.cuh"
#include "llmc/gelu.cuh"
#include "llmc/global_norm.cuh"
#include "llmc/layernorm.cuh"


// ---------------------------------------------------------------------------
// buffers and comparisons

// n elements of T in device memory (the tests read and write it directly:
// every launch here is on the legacy default stream, so it has run when the
// launcher returns), filled with NaN bits, starting 256-byte aligned or
// (misaligned) one element past it: a kernel handed it takes its element path.
template <class T> struct Buf {
    unsigned char *base;
    T *p;
    size_t n;
    Buf(size_t n_, int misaligned) : n(n_) {
        size_t bytes = ((n + 16) * sizeof(T) + 255) / 256 * 256;
        CUDA_CHECK(cudaMalloc((void **)&base, bytes));
        memset(base, 0xff, bytes);
        p = (T *)base + (misaligned ? 1 : 0);
    }
    ~Buf() { CUDA_CHECK(cudaFree(base)); }
    Buf(const Buf &) = delete;
    Buf &operator=(const Buf &) = delete;
};


// n values uniform in [-scale, scale), rounded to bf16 (exact on the device)
static std::vector<float> random_floatX(Rng *rng, size_t n, float scale) {
    std::vector<float> h(n);
    for (size_t i = 0; i < n; i++) h[i] = floatX_round((2.0f * rng_uniform(rng) - 1.0f) * scale);
    return h;
}
static void put(floatX *d, const std::vector<float> &h) {
    for (size_t i = 0; i < h.size(); i++) d[i] = to_floatX(h[i]);
}
static void put(float *d, const std::vector<float> &h) { memcpy(d, h.data(), h.size() * sizeof(float)); }
static std::vector<float> get(const floatX *d, size_t n) {
    std::vector<float> h(n);
    for (size_t i = 0; i < n; i++) h[i] = to_float(d[i]);
    return h;
}
static std::vector<float> get(const float *d, size_t n) { return std::vector<float>(d, d + n); }

// worst |got - ref| / (atol + rtol |ref|) over n values (NaN: infinite); pass when <= 1
static double excess(const std::vector<float> &got, const float *ref, size_t n, double atol, double rtol) {
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - ref[i]) / (atol + rtol * fabs((double)ref[i]) + 1e-300);
        if (e != e) return INFINITY;
        if (e > worst) worst = e;
    }
    return worst;
}
static double excess(const std::vector<float> &got, const std::vector<float> &ref, double atol, double rtol) {
    return excess(got, ref.data(), ref.size(), atol, rtol);
}
static bool same_bits(const std::vector<float> &a, const std::vector<float> &b) {
    return a.size() == b.size() && memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}
static const char *path_name(int misaligned) { return misaligned ? "element path" : "vector path"; }

// ---------------------------------------------------------------------------
// layernorm: gpu_layernorm_forward, gpu_fused_residual_layernorm and
// gpu_layernorm_backward (llmc/layernorm.cuh)

// One shape's inputs (bf16 values) and the CPU reference.
struct LnCase {
    int N, C;
    std::vector<float> x, r, res, w, b;                 // forward: res = bf16(r + x)
    std::vector<float> ref, mean, rstd;                 // LayerNorm of res
    std::vector<float> dout, dinp0, dw0, db0;           // backward inputs and start values
    std::vector<float> dinp, dw, db;                    // backward reference
};
struct LnGot {
    std::vector<float> out, mean, rstd, fres, fout, fmean, frstd;
};

// mis_in: the row inputs (x, r, residual, dout) misaligned; mis_out: the rest
static LnGot layernorm_run(const LnCase &k, int mis_in, int mis_out, const char *mode) {
    const int N = k.N, C = k.C;
    const size_t nc = (size_t)N * C;
    LnGot g;
    Buf<floatX> x(nc, mis_in), r(nc, mis_in), res(nc, mis_in), dout(nc, mis_in), w(C, mis_out), b(C, mis_out);
    put(x.p, k.x), put(r.p, k.r), put(res.p, k.res), put(dout.p, k.dout), put(w.p, k.w), put(b.p, k.b);
    {  // plain forward of the residual
        Buf<floatX> out(nc, mis_out);
        Buf<float> m(N, mis_out), s(N, mis_out);
        gpu_layernorm_forward(out.p, m.p, s.p, res.p, w.p, b.p, N, C, 0);
        g.out = get(out.p, nc), g.mean = get(m.p, N), g.rstd = get(s.p, N);
    }
    bool recompute_same;
    {  // fused residual + forward, then the plain forward of its residual (--recompute 2)
        Buf<floatX> out(nc, mis_out), resid(nc, mis_in), out2(nc, mis_out);
        Buf<float> m(N, mis_out), s(N, mis_out), m2(N, mis_out), s2(N, mis_out);
        gpu_fused_residual_layernorm(resid.p, out.p, m.p, s.p, r.p, x.p, w.p, b.p, N, C, 0);
        g.fres = get(resid.p, nc), g.fout = get(out.p, nc), g.fmean = get(m.p, N), g.frstd = get(s.p, N);
        gpu_layernorm_forward(out2.p, m2.p, s2.p, resid.p, w.p, b.p, N, C, 0);
        recompute_same = same_bits(get(out2.p, nc), g.fout) && same_bits(get(m2.p, N), g.fmean) &&
                         same_bits(get(s2.p, N), g.frstd);
    }
    // backward from the start values with the reference statistics, twice (the
    // second with the threads in reverse order): the same bits
    std::vector<float> got[2][4];  // [run][dinp, dinp bf16, dw, db]
    for (int run = 0; run < 2; run++) {
        Buf<float> dinp(nc, mis_out), dw(C, mis_out), db(C, mis_out), m(N, mis_out), s(N, mis_out);
        Buf<floatX> dinp_bf(nc, mis_out);
        Buf<float> scratch(layernorm_scratch_floats(N, C), 0);
        put(dinp.p, k.dinp0), put(dw.p, k.dw0), put(db.p, k.db0), put(m.p, k.mean), put(s.p, k.rstd);
        emu_schedule = run ? EMU_SCHEDULE_REVERSE : EMU_SCHEDULE_RANDOM;
        gpu_layernorm_backward(dinp.p, dinp_bf.p, dw.p, db.p, scratch.p, dout.p, res.p, w.p, m.p, s.p, N, C, 0);
        emu_schedule = EMU_SCHEDULE_RANDOM;
        got[run][0] = get(dinp.p, nc), got[run][1] = get(dinp_bf.p, nc), got[run][2] = get(dw.p, C),
        got[run][3] = get(db.p, C);
    }
    bool bwd_repro = true;
    for (int q = 0; q < 4; q++) bwd_repro = bwd_repro && same_bits(got[0][q], got[1][q]);

    // out: one rounding of values of size |w| |x - mean| rstd + |b| <= ~5 (atol: fp32 noise of those);
    // mean, rstd, dinp, dw, db: fp32 (dev/cuda/layernorm.cu's tolerances); the residual: exact
    double e_out = excess(g.out, k.ref, 1e-5, FLOATX_UNIT_ROUNDOFF + 1e-5), e_fout = excess(g.fout, k.ref, 1e-5, FLOATX_UNIT_ROUNDOFF + 1e-5);
    double e_stat = fmax(fmax(excess(g.mean, k.mean, 1e-5, 1e-4), excess(g.rstd, k.rstd, 1e-5, 1e-4)),
                         fmax(excess(g.fmean, k.mean, 1e-5, 1e-4), excess(g.frstd, k.rstd, 1e-5, 1e-4)));
    double e_res = same_bits(g.fres, k.res) ? 0.0 : INFINITY;
    double e_dinp = excess(got[0][0], k.dinp, 1e-4, 1e-3), e_dinp_bf = excess(got[0][1], k.dinp, 1e-4, FLOATX_UNIT_ROUNDOFF + 1e-3);
    double e_dwb = fmax(excess(got[0][2], k.dw, 1e-3, 1e-3), excess(got[0][3], k.db, 1e-3, 1e-3));
    double worst = fmax(fmax(fmax(e_out, e_fout), fmax(e_stat, e_res)), fmax(fmax(e_dinp, e_dinp_bf), e_dwb));
    test_result(worst <= 1.0 && recompute_same && bwd_repro,
                "emulated layernorm N=%d C=%d (%s): worst error / tolerance: out %.2f fused out %.2f mean|rstd %.2f "
                "residual %.2f dinp %.2f dinp bf16 %.2f dw|db %.2f; recompute bits %s; backward bits %s",
                N, C, mode, e_out, e_fout, e_stat, e_res, e_dinp, e_dinp_bf, e_dwb, recompute_same ? "same" : "DIFFER",
                bwd_repro ? "reproducible" : "DIFFER");
    return g;
}

static void check_layernorm(Rng *rng, int N, int C, bool mixed) {
    const size_t nc = (size_t)N * C;
    LnCase k;
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
    LnGot a = layernorm_run(k, 0, 0, C % 8 ? "element path: C % 8 != 0" : "vector path");
    LnGot m = layernorm_run(k, 1, 1, "every buffer misaligned: element path");
    bool same = same_bits(a.out, m.out) && same_bits(a.mean, m.mean) && same_bits(a.rstd, m.rstd) &&
                same_bits(a.fres, m.fres) && same_bits(a.fout, m.fout) && same_bits(a.fmean, m.fmean) &&
                same_bits(a.frstd, m.frstd);
    test_result(same, "emulated layernorm N=%d C=%d: the forwards' element path gives the vector path's bits", N, C);
    if (mixed)  // row inputs aligned, the rest not: the backward's rows by element, parameter sums by vector
        layernorm_run(k, 0, 1, "outputs and weights misaligned, row inputs aligned");
}

// ---------------------------------------------------------------------------
// gelu: gpu_gelu_forward and gpu_gelu_backward_inplace (llmc/gelu.cuh)

static void check_gelu(Rng *rng, size_t n) {
    std::vector<float> x = random_floatX(rng, n, 6.0f), d = random_floatX(rng, n, 1.0f);
    // the far tails and zeros: s = 0 past -2u = 80, s = 1 at the top, gelu(-0) = -0
    const float special[] = {-20.0f, -9.75f, -9.6875f, -0.0f, 0.0f, 10.0f, 20.0f};
    for (size_t i = 0; i < n && i < sizeof(special) / sizeof(special[0]); i++) x[(i * 7919) % n] = special[i];
    std::vector<float> ref(n), dref = d;
    gelu_forward(ref.data(), x.data(), n);
    gelu_backward_inplace(dref.data(), x.data(), n);
    std::vector<float> fwd[2], bwd[2];
    for (int mis = 0; mis < 2; mis++) {
        Buf<floatX> dx(n, mis), dd(n, mis), out(n, mis);
        put(dx.p, x), put(dd.p, d);
        gpu_gelu_forward(out.p, dx.p, (int64_t)n, 0);
        gpu_gelu_backward_inplace(dd.p, dx.p, (int64_t)n, 0);
        fwd[mis] = get(out.p, n), bwd[mis] = get(dd.p, n);
        // one rounding; atol: the CPU tanh's 1e-7 absolute error times |x| <= 20, and __expf's
        double e_f = excess(fwd[mis], ref, 1e-5, FLOATX_UNIT_ROUNDOFF + 2e-5), e_b = excess(bwd[mis], dref, 1e-5, FLOATX_UNIT_ROUNDOFF + 2e-5);
        test_result(e_f <= 1.0 && e_b <= 1.0,
                    "emulated gelu n=%zu (%s): worst error / tolerance forward %.2f backward %.2f", n,
                    path_name(mis), e_f, e_b);
    }
    test_result(same_bits(fwd[0], fwd[1]) && same_bits(bwd[0], bwd[1]),
                "emulated gelu n=%zu: the element path gives the vector path's bits", n);
}

// ---------------------------------------------------------------------------
// classifier: gpu_fused_classifier (llmc/classifier.cuh)

static void check_classifier(Rng *rng, int N, int V, int Vp) {
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
    std::vector<float> got_loss[2], got_d[2];
    for (int mis = 0; mis < 2; mis++) {
        Buf<floatX> l(n, mis);
        Buf<float> loss(N, mis);
        put(l.p, lp);
        gpu_fused_classifier(l.p, loss.p, y.data(), N, V, Vp, 0.0f, 0);  // eval: losses only
        std::vector<float> eval_loss = get(loss.p, N);
        bool untouched = same_bits(get(l.p, n), lp);
        memset(loss.p, 0xff, N * sizeof(float));
        gpu_fused_classifier(l.p, loss.p, y.data(), N, V, Vp, dloss, 0);
        got_loss[mis] = get(loss.p, N), got_d[mis] = get(l.p, n);
        std::vector<float> d((size_t)N * V);
        size_t pad_nonzero = 0;
        for (int i = 0; i < N; i++) {
            memcpy(&d[(size_t)i * V], &got_d[mis][(size_t)i * Vp], V * sizeof(float));
            for (int c = V; c < Vp; c++) pad_nonzero += got_d[mis][(size_t)i * Vp + c] != 0.0f;  // (NaN counts)
        }
        // losses fp32 (dev/cuda/classifier.cu's tolerance); dlogits one rounding of
        // dloss (p - onehot), |p| <= 1 from an exponent with fp32 noise ~1e-6
        double e_eval = excess(eval_loss, losses, 1e-4, 1e-4), e_loss = excess(got_loss[mis], losses, 1e-4, 1e-4);
        double e_d = excess(d, ref, 1e-6, FLOATX_UNIT_ROUNDOFF + 1e-5);
        test_result(e_eval <= 1.0 && untouched && e_loss <= 1.0 && e_d <= 1.0 && pad_nonzero == 0,
                    "emulated classifier N=%d V=%d Vp=%d (%s): worst error / tolerance: eval loss %.2f (logits %s) "
                    "loss %.2f dlogits %.2f; %zu padded columns not 0",
                    N, V, Vp, Vp % 8 ? "element path: Vp % 8 != 0" : path_name(mis), e_eval,
                    untouched ? "untouched" : "CHANGED", e_loss, e_d, pad_nonzero);
    }
    test_result(same_bits(got_loss[0], got_loss[1]) && same_bits(got_d[0], got_d[1]),
                "emulated classifier N=%d V=%d Vp=%d: the element path gives the vector path's bits", N, V, Vp);
}

// ---------------------------------------------------------------------------
// encoder: gpu_encoder_forward and gpu_encoder_backward (llmc/encoder.cuh)

static void check_encoder(Rng *rng, int B, int T, int C, int V) {
    const int N = B * T;
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
    EncoderIndex ix;
    encoder_index_init(&ix, N, V);
    std::vector<float> got[2][3];
    for (int mis = 0; mis < 2; mis++) {
        Buf<floatX> d_wte((size_t)V * C, mis), d_wpe((size_t)T * C, mis), out((size_t)N * C, mis);
        put(d_wte.p, wte), put(d_wpe.p, wpe);
        gpu_encoder_forward(out.p, inp[0].data(), d_wte.p, d_wpe.p, B, T, C, 0);
        got[mis][0] = get(out.p, (size_t)N * C);
        Buf<float> g_wte((size_t)V * C, mis), g_wpe((size_t)T * C, mis), d_dout((size_t)N * C, mis);
        put(g_wte.p, dwte0), put(g_wpe.p, dwpe0);
        for (int k = 0; k < 2; k++) {
            encoder_index_build(&ix, inp[k].data(), N, 0, V, nullptr);
            put(d_dout.p, dout[k]);
            gpu_encoder_backward(g_wte.p, g_wpe.p, d_dout.p, &ix, B, T, C, 0);
        }
        got[mis][1] = get(g_wte.p, (size_t)V * C), got[mis][2] = get(g_wpe.p, (size_t)T * C);
        // forward: one rounding of a sum of two bf16; backward: fp32 sums in another association (dev/cuda's)
        double e_f = excess(got[mis][0], ref, 0.0, FLOATX_UNIT_ROUNDOFF + 1e-6);
        double e_wte = excess(got[mis][1], dwte, 1e-5, 1e-5), e_wpe = excess(got[mis][2], dwpe, 1e-5, 1e-5);
        const char *path = mis ? "every buffer misaligned: element paths"
                           : C % 8 == 0 ? "vector paths"
                           : C % 4 == 0 ? "forward element path, backward float4"
                                        : "element paths: C % 4 != 0";
        test_result(e_f <= 1.0 && e_wte <= 1.0 && e_wpe <= 1.0,
                    "emulated encoder B=%d T=%d C=%d V=%d (%s): worst error / tolerance forward %.2f, over two "
                    "batches dwte %.2f dwpe %.2f",
                    B, T, C, V, path, e_f, e_wte, e_wpe);
    }
    test_result(same_bits(got[0][0], got[1][0]) && same_bits(got[0][1], got[1][1]) && same_bits(got[0][2], got[1][2]),
                "emulated encoder B=%d T=%d C=%d V=%d: the element paths give the vector paths' bits", B, T, C, V);
    encoder_index_free(&ix);
}

// ---------------------------------------------------------------------------
// adamw: gpu_adamw_update (llmc/adamw.cuh)

// The stochastic rounding of x with random bits `bits`, restated: x + (bits &
// 0xffff) in the low half of its fp32 pattern, truncated to the high half.
static uint16_t host_stochastic_bf16(float x, uint32_t bits) {
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

static void check_adamw(Rng *rng, const ParamLayout *pl, int64_t begin, int64_t end) {
    const size_t P = (size_t)pl->num_elements, n = (size_t)(end - begin);
    std::vector<float> p0 = random_floatX(rng, P, 1.0f), g = random_floatX(rng, P, 1.0f);
    std::vector<float> m0 = random_floatX(rng, n, 0.1f), v0 = random_floatX(rng, n, 0.1f);
    for (float &x : v0) x = fabsf(x);
    std::vector<float> p = p0, m = m0, v = v0, gc = g;
    for (int step = 1; step <= 3; step++) {
        AdamWConfig cfg = {1e-3f * step, 0.9f, 0.95f, 1e-8f, 0.1f, step};
        adamw_update_range(pl, p.data(), gc.data(), 0, m.data(), v.data(), begin, end, &cfg, 0.5f);
    }
    AdamWPlan ap;
    adamw_plan_init(&ap, pl, begin, end, NULL);
    std::vector<float> got[2][4];
    for (int mis = 0; mis < 2; mis++) {
        Buf<float> dp(P, mis), dg(P, mis), dm(n, mis), dv(n, mis);
        Buf<floatX> db(P, mis);
        put(dp.p, p0), put(dg.p, g), put(dm.p, m0), put(dv.p, v0);
        const uint64_t last_seed = 99 + 3;
        for (int step = 1; step <= 3; step++) {
            AdamWConfig cfg = {1e-3f * step, 0.9f, 0.95f, 1e-8f, 0.1f, step};
            gpu_adamw_update(&ap, dp.p, db.p, dg.p, dm.p, dv.p, &cfg, 0.5f, 99 + step, 0);
        }
        got[mis][0] = get(dp.p, P), got[mis][1] = get(dm.p, n), got[mis][2] = get(dv.p, n), got[mis][3] = get(db.p, P);
        // inside the range: the bf16 copy is exactly the stochastic rounding of the
        // master weight with the bits of (seed, index); outside: nothing touched
        size_t wrong_bf16 = 0, touched = 0;
        double bias = 0, scale = 0;
        for (size_t i = 0; i < P; i++) {
            uint16_t bits = db.p[i].bits;
            if ((int64_t)i >= begin && (int64_t)i < end) {
                float x = got[mis][0][i];
                wrong_bf16 += bits != host_stochastic_bf16(x, host_hash_u32(last_seed, i));
                bias += (double)to_float(db.p[i]) - x;
                scale += fabs((double)to_float(db.p[i]) - x);
            } else {
                touched += bits != 0xffffu || memcmp(&got[mis][0][i], &p0[i], 4) != 0;
            }
        }
        // fp32 state: dev/cuda/adamw.cu's tolerances (the kernel divides by sqrt(1 - beta2^t), the CPU multiplies)
        double e_p = excess(got[mis][0], p, 1e-6, 1e-5);
        double e_mv = fmax(excess(got[mis][1], m, 1e-7, 1e-5), excess(got[mis][2], v, 1e-7, 1e-5));
        bool unbiased = n < 10000 || fabs(bias) < 0.05 * scale;
        test_result(e_p <= 1.0 && e_mv <= 1.0 && wrong_bf16 == 0 && touched == 0 && unbiased,
                    "emulated adamw [%lld, %lld) of %zu, 3 steps (%s): worst error / tolerance params %.2f m|v %.2f; "
                    "%zu bf16 copies not the stochastic rounding (mean error %.1e of mean |error| %.1e); %zu elements "
                    "outside the range touched",
                    (long long)begin, (long long)end, P, mis ? "every buffer misaligned: element path" : "aligned",
                    e_p, e_mv, wrong_bf16, bias / (double)n, scale / (double)n, touched);
        if (!mis) {  // a second run from the same state, threads in reverse order: the same bits
            Buf<float> dp2(P, 0), dm2(n, 0), dv2(n, 0);
            Buf<floatX> db2(P, 0);
            std::vector<float> before_m = got[0][1], before_v = got[0][2];
            AdamWConfig cfg = {1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 4};
            put(dp2.p, got[0][0]), put(dm2.p, before_m), put(dv2.p, before_v);
            gpu_adamw_update(&ap, dp.p, db.p, dg.p, dm.p, dv.p, &cfg, 0.5f, 7, 0);
            emu_schedule = EMU_SCHEDULE_REVERSE;
            gpu_adamw_update(&ap, dp2.p, db2.p, dg.p, dm2.p, dv2.p, &cfg, 0.5f, 7, 0);
            emu_schedule = EMU_SCHEDULE_RANDOM;
            bool same = same_bits(get(dp.p + begin, n), get(dp2.p + begin, n)) &&
                        same_bits(get(db.p + begin, n), get(db2.p + begin, n)) &&
                        same_bits(get(dm.p, n), get(dm2.p, n)) && same_bits(get(dv.p, n), get(dv2.p, n));
            test_result(same, "emulated adamw [%lld, %lld): a second run gives the same bits", (long long)begin,
                        (long long)end);
        }
    }
    bool same = true;
    for (int q = 0; q < 4; q++) {
        size_t off = q == 0 || q == 3 ? (size_t)begin : 0;
        same = same && same_bits(std::vector<float>(got[0][q].begin() + off, got[0][q].begin() + off + n),
                                 std::vector<float>(got[1][q].begin() + off, got[1][q].begin() + off + n));
    }
    test_result(same, "emulated adamw [%lld, %lld): the element path gives the vector path's bits (p, m, v, bf16)",
                (long long)begin, (long long)end);
    adamw_plan_free(&ap);
}

// ---------------------------------------------------------------------------
// global norm: gpu_sum_of_squares (llmc/global_norm.cuh)

static void check_global_norm(Rng *rng, size_t n, bool twice) {
    std::vector<float> g = random_floatX(rng, n, 1.0f);
    double ref = sum_of_squares(g.data(), (int64_t)n);
    double got[2];
    for (int mis = 0; mis < 2; mis++) {
        Buf<float> dg(n, mis), scratch(global_norm_scratch_floats(), 0);
        put(dg.p, g);
        gpu_sum_of_squares(scratch.p, dg.p, (int64_t)n, 0);
        memcpy(&got[mis], scratch.p + NORM_BLOCKS, sizeof(double));
        bool repro = true;
        if (twice) {  // threads in reverse order: the same bits
            memset(scratch.p, 0xff, global_norm_scratch_floats() * sizeof(float));
            emu_schedule = EMU_SCHEDULE_REVERSE;
            gpu_sum_of_squares(scratch.p, dg.p, (int64_t)n, 0);
            emu_schedule = EMU_SCHEDULE_RANDOM;
            repro = memcmp(&got[mis], scratch.p + NORM_BLOCKS, sizeof(double)) == 0;
        }
        // fp32 partial sums: dev/cuda/global_norm.cu's tolerance
        test_result(fabs(got[mis] - ref) <= 1e-5 * ref + 1e-30 && repro,
                    "emulated global norm n=%zu (%s): sum of squares %.9g vs cpu %.9g%s", n,
                    mis ? "misaligned: scalar path" : "float4 path", got[mis], ref,
                    twice ? (repro ? ", a second run the same bits" : ", a second run DIFFERS") : "");
    }
}

// ---------------------------------------------------------------------------
// column sums (bias gradients): gpu_colsum_accumulate (llmc/colsum.cuh)

// out += column sums of an (N, C) bf16 matrix and of an fp32 one, against the
// CPU's column_sum_accumulate: fp32 sums of N terms in another order
template <class T> static void check_colsum(Rng *rng, int N, int C) {
    std::vector<float> a = random_floatX(rng, (size_t)N * C, 1.0f), out0 = random_floatX(rng, (size_t)C, 1.0f);
    std::vector<float> ref = out0;
    column_sum_accumulate(ref.data(), a.data(), N, C);
    Buf<T> da((size_t)N * C, 0);
    Buf<float> dout((size_t)C, 0), scratch(colsum_scratch_floats(N, C), 0);
    put(da.p, a);
    put(dout.p, out0);
    gpu_colsum_accumulate<T>(dout.p, scratch.p, da.p, N, C, 0);
    std::vector<float> got = get(dout.p, (size_t)C);
    double e = excess(got, ref, 1e-5 * N, 1e-5);  // |terms| <= 1: fp32 rounding of N terms
    test_result(e <= 1.0, "emulated column sum (%s) N=%d C=%d: error / tolerance %.2f", sizeof(T) == 2 ? "bf16" : "fp32",
                N, C, e);
}

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
    Rng rng;
    rng_seed(&rng, 2);
    // LayerNorm: C = 64 (one chunk per lane), 768 (three), 1600 (seven, the last partly past C), 2304 (> 2048:
    // re-read), multiples of 8; 100, 7, 2052 (element path); N not a multiple of 4 rows, nor of 128-row chunks
    check_layernorm(&rng, 7, 64, false);
    check_layernorm(&rng, 5, 100, false);
    check_layernorm(&rng, 3, 7, false);
    check_layernorm(&rng, 130, 768, true);
    check_layernorm(&rng, 9, 1600, false);
    check_layernorm(&rng, 5, 2304, false);
    check_layernorm(&rng, 3, 2052, false);
    // GELU: a lone partial group of 8, partial last groups, several blocks
    rng_seed(&rng, 4);
    check_gelu(&rng, 1);
    check_gelu(&rng, 1000);
    check_gelu(&rng, 2 * 8 * GELU_THREADS + 13);
    // classifier: one vector per thread, most of it padding; 1024; Vp % 8 != 0; GPT-2's 7 vectors per thread;
    // past 65536: re-read
    rng_seed(&rng, 6);
    check_classifier(&rng, 3, 10, pad_vocab(10));
    check_classifier(&rng, 9, 1000, pad_vocab(1000));
    check_classifier(&rng, 5, 1000, 1003);
    check_classifier(&rng, 3, 50257, pad_vocab(50257));
    check_classifier(&rng, 2, 70000, pad_vocab(70000));
    // encoder: heavy token repetition; C % 8 != 0 (backward float4); C % 4 != 0; C = 7; d12 width
    rng_seed(&rng, 1);
    check_encoder(&rng, 2, 16, 64, 5);
    check_encoder(&rng, 3, 33, 100, 300);
    check_encoder(&rng, 2, 7, 30, 11);
    check_encoder(&rng, 2, 5, 7, 3);
    check_encoder(&rng, 2, 64, 768, 200);
    // AdamW on a real layout: the whole buffer (float4 path), a shard starting at an odd element (element path
    // throughout), a shard at a multiple of 4 ending at 3 mod 4 (float4 path with tails)
    rng_seed(&rng, 7);
    GPTConfig cfg = {64, 250, pad_vocab(250), 2, 4, 128};
    ParamLayout pl;
    param_layout_init(&pl, &cfg);
    int64_t P = pl.num_elements;
    check_adamw(&rng, &pl, 0, P);
    check_adamw(&rng, &pl, (P / 3) | 1, 2 * P / 3 + 1);
    check_adamw(&rng, &pl, (P / 4) & ~(int64_t)3, ((3 * P / 4) & ~(int64_t)3) + 3);
    param_layout_free(&pl);
    // global norm: fewer elements than threads, a tail after the float4s (n % 4 == 3) with several per thread
    rng_seed(&rng, 8);
    check_global_norm(&rng, 1, false);
    check_global_norm(&rng, 1003, false);
    check_global_norm(&rng, 4 * 1024 * 512 + 4 * 700 + 3, true);
    // column sums: one partial chunk; several chunks with a partial last one, C not a multiple of 32 or 256
    rng_seed(&rng, 9);
    check_colsum<floatX>(&rng, 5, 32);
    check_colsum<floatX>(&rng, 600, 300);
    check_colsum<float>(&rng, 513, 77);
    return test_exit_code();
}
