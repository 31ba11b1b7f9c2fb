// kernel_cases.h: the GPU kernels' checks against the CPU reference as one
// table of cases run through one runner (as ggml's test-backend-ops does).
// A case is a family (the kernel), its shape, the function that runs the
// kernel's launchers on random floatX inputs and the CPU reference of
// llmc/cpu_layers.h or llmc/optimizer.h on the same values, and its
// tolerances. The runner (kernel_cases_run) runs the table's rows of the
// family asked for (or all), through a set of launchers (KernelImpls: llmc's, or a
// dev/cuda checker's other versions), and prints one line per case: PASS or
// FAIL, the worst error over its tolerance, the largest absolute and relative
// errors, and which checks failed; or SKIP with the reason a version cannot
// run the shape (cuDNN refusing it). The families: the memory-bound kernels
// (layernorm, gelu, classifier, encoder, adamw, global_norm, colsum), attention
// (flash, forward and backward, lse, query offsets), matmul (cuBLASLt, each
// epilogue, backward) and tensor_parallel (the kernels of a simulated tensor
// group). A program compiles the families it defines a macro for before the
// include (KC_MEMORY_BOUND, KC_ATTENTION, KC_MATMUL, KC_TENSOR_PARALLEL): the
// emulator compiles every kernel a header defines, so each program builds only
// its own. On the CPU emulator every row runs through llmc's launchers:
// tests/test_kernels_emulated.cpp (memory-bound, matmul through
// tests/cublaslt_emulator.h, tensor_parallel) and tests/test_flash_emulated.cpp
// (attention); dev/cuda/<family>.cu runs its family's rows for each of its
// versions on a GPU (on the emulator its other versions: cuDNN's graphs through
// tests/emu_include/cudnn.h), then benchmarks. Every kernel runs on the
// emulator; what only a GPU runs is the larger shapes, the rows written
// KC_SIZE(0, n) (their first number 0 on the emulator skips them).
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

#include <algorithm>
#include <memory>

#include <string>
#include <vector>

#include "llmc/cpu_layers.h"
#include "llmc/model.h"
#include "llmc/optimizer.h"
#include "llmc/rand.h"
#include "tests/testing.h"

// A program compiles the kernels (and gets the rows) of the families it asks
// for, by defining before the include: KC_MEMORY_BOUND (layernorm, gelu,
// classifier, encoder, adamw, global_norm, colsum), KC_ATTENTION, KC_MATMUL,
// KC_TENSOR_PARALLEL. (The emulator compiles every kernel a header defines,
// used or not: a checker that included them all would build all of them.)
#ifdef KC_MEMORY_BOUND
#include "llmc/adamw.cuh"
#include "llmc/classifier.cuh"
#include "llmc/colsum.cuh"
#include "llmc/encoder.cuh"
#include "llmc/gelu.cuh"
#include "llmc/global_norm.cuh"
#include "llmc/layernorm.cuh"
#endif
#ifdef KC_ATTENTION
#include "llmc/attention_flash.cuh"
#endif
#ifdef KC_MATMUL
#include "llmc/matmul.cuh"
#endif
#ifdef KC_TENSOR_PARALLEL
#include "llmc/model.h"
#include "llmc/tensor_parallel.cuh"
#include "llmc/tensor_parallel.h"
#endif

// Compiled for tests/cuda_emulator.h, the rows take their smaller shapes.
#ifdef LLMC_CUDA_EMULATION
#define KC_EMULATED 1
#else
#define KC_EMULATED 0
#endif
#define KC_SIZE(emulated, gpu) (KC_EMULATED ? (emulated) : (gpu))

// ---------------------------------------------------------------------------
// the launchers a run goes through

#ifdef KC_TENSOR_PARALLEL
// the cross-entropy's three passes, as gpt_gpu.cuh launches them
static void kc_tp_vocab_max(float *mx, const floatX *logits, int N, int Vl, int vreal, cudaStream_t s) {
    launch_kernel(tp_vocab_max_kernel, N, TP_ROW_THREADS, 0, s, mx, logits, Vl, vreal);
    CUDA_CHECK_LAUNCH();
}
static void kc_tp_vocab_sums(float *stats, float *gmax, const float *maxes, int tp, const floatX *logits, const int *y,
                             int N, int Vl, int vreal, int v0, cudaStream_t s) {
    launch_kernel(tp_vocab_sums_kernel, N, TP_ROW_THREADS, 0, s, stats, gmax, maxes, tp, logits, y, N, Vl, vreal, v0);
    CUDA_CHECK_LAUNCH();
}
static void kc_tp_vocab_finish(floatX *logits, float *losses, const float *stats, const float *gmax, const int *y,
                               int N, int Vl, int vreal, int v0, float dloss, cudaStream_t s) {
    launch_kernel(tp_vocab_finish_kernel, N, TP_ROW_THREADS, 0, s, logits, losses, stats, gmax, y, N, Vl, vreal, v0,
                  dloss, dloss != 0.0f);
    CUDA_CHECK_LAUNCH();
}
#endif

struct FaQueries;  // llmc/attention_flash.cuh
struct KernelImpls {
    const char *name;  // printed before each case ("llmc", "v1 scalar", ...)
#ifdef KC_MEMORY_BOUND
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
#endif
    // causal attention of qkv (B,T,3C): out (B,T,C), lse (B,NH,T); its backward into dqkv (delta: scratch)
    void (*attention_forward)(floatX *out, float *lse, const floatX *qkv, int B, int T, int C, int NH, cudaStream_t s);
    void (*attention_backward)(floatX *dqkv, float *delta, const floatX *dout, const floatX *qkv, const floatX *out,
                               const float *lse, int B, int T, int C, int NH, cudaStream_t s);
    // before a case: NULL when the version runs B, T, C, NH, else why not (the case is a SKIP); may be NULL
    const char *(*attention_prepare)(int B, int T, int C, int NH);
    bool attention_deterministic;  // a second run must give the same bits
    // with query offsets (a context-parallel rank's rows; llmc/attention_flash.cuh): NULL: their rows skipped
    void (*attention_forward_queries)(floatX *out, float *lse, const floatX *q, int Tq, const floatX *kv, int64_t kvs,
                                      int Tk, const FaQueries &qry, int B, int C, int NH, cudaStream_t s);
    void (*attention_backward_queries)(floatX *dq, float *dkv, float *delta, const floatX *dout, const floatX *q, int Tq,
                                       const floatX *kv, int64_t kvs, int Tk, const FaQueries &qry, const floatX *out,
                                       const float *lse, int B, int C, int NH, cudaStream_t s);
    // before a query-offset case: NULL when the version runs those segments, else why not (a SKIP); may be NULL
    const char *(*attention_prepare_queries)(int B, int Tq, int Tk, int64_t kvs, const FaQueries &qry, int C, int NH);
#ifdef KC_MATMUL
    decltype(&gpu_matmul_forward) matmul_forward;
    decltype(&gpu_matmul_backward<floatX>) matmul_backward;     // dbias from floatX dout
    decltype(&gpu_matmul_backward<float>) matmul_backward_f32;  // dbias from an fp32 source
#endif
#ifdef KC_TENSOR_PARALLEL
    void (*tp_vocab_max)(float *mx, const floatX *logits, int N, int Vl, int vreal, cudaStream_t s);
    void (*tp_vocab_sums)(float *stats, float *gmax, const float *maxes, int tp, const floatX *logits, const int *y,
                          int N, int Vl, int vreal, int v0, cudaStream_t s);
    void (*tp_vocab_finish)(floatX *logits, float *losses, const float *stats, const float *gmax, const int *y, int N,
                            int Vl, int vreal, int v0, float dloss, cudaStream_t s);
    decltype(&gpu_tp_bias_floatX) tp_bias_floatX;
    decltype(&gpu_tp_embed_rows) tp_embed_rows;
    decltype(&gpu_tp_embed_finish) tp_embed_finish;
    decltype(&gpu_tp_wpe_backward) tp_wpe_backward;
#endif
};
static KernelImpls llmc_kernels(void) {
    KernelImpls v;
    memset(&v, 0, sizeof(v));
    v.name = "llmc";
#ifdef KC_MEMORY_BOUND
    v.layernorm_forward = gpu_layernorm_forward, v.fused_residual_layernorm = gpu_fused_residual_layernorm;
    v.layernorm_backward = gpu_layernorm_backward;
    v.gelu_forward = gpu_gelu_forward, v.gelu_backward_inplace = gpu_gelu_backward_inplace;
    v.fused_classifier = gpu_fused_classifier;
    v.encoder_forward = gpu_encoder_forward, v.encoder_backward = gpu_encoder_backward;
    v.adamw_update = gpu_adamw_update;
    v.sum_of_squares = gpu_sum_of_squares, v.sum_of_squares_ranges = gpu_sum_of_squares_ranges;
#endif
#ifdef KC_ATTENTION
    v.attention_forward = gpu_flash_attention_forward, v.attention_backward = gpu_flash_attention_backward;
    v.attention_deterministic = true;
    v.attention_forward_queries = gpu_flash_attention_forward_queries;
    v.attention_backward_queries = gpu_flash_attention_backward_queries;
#endif
#ifdef KC_MATMUL
    v.matmul_forward = gpu_matmul_forward;
    v.matmul_backward = gpu_matmul_backward<floatX>, v.matmul_backward_f32 = gpu_matmul_backward<float>;
#endif
#ifdef KC_TENSOR_PARALLEL
    v.tp_vocab_max = kc_tp_vocab_max, v.tp_vocab_sums = kc_tp_vocab_sums, v.tp_vocab_finish = kc_tp_vocab_finish;
    v.tp_bias_floatX = gpu_tp_bias_floatX, v.tp_embed_rows = gpu_tp_embed_rows;
    v.tp_embed_finish = gpu_tp_embed_finish, v.tp_wpe_backward = gpu_tp_wpe_backward;
#endif
    return v;
}
static const KernelImpls LLMC_KERNELS = llmc_kernels();

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
// aligned or `shift` elements past it (1, misaligned: a kernel handed it takes
// its element path).
template <class T> struct KcBuf {
    unsigned char *base;
    T *p;
    size_t n;
    KcBuf(size_t n_, int shift) : n(n_) {
        size_t bytes = ((n + (size_t)shift + 16) * sizeof(T) + 255) / 256 * 256;
        CUDA_CHECK(cudaMalloc((void **)&base, bytes));
        CUDA_CHECK(cudaMemset(base, 0xff, bytes));
        p = (T *)base + shift;
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
    std::string skip;  // set: the version cannot run the case (a SKIP line saying why)
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
    int64_t e = 0, f = 0;  // more numbers, for the families that need them
};

#ifdef KC_MEMORY_BOUND
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

#endif  // KC_MEMORY_BOUND

#ifdef KC_ATTENTION
// ---- attention: gpu_flash_attention_forward/backward (llmc/attention_flash.cuh) or a checker's
// version, against llmc/cpu_layers.h's attention_forward/backward (fp32) on the same bf16 values: out,
// lse and dq|dk|dv, every output starting as NaN. a = B, b = T, c = NH, d = head size. Two kinds of rows:
//   attention_case: inputs uniform in [-1, 1], absolute tolerances (below), and a second run's bits
//       for the versions that promise them; e = 1: cp.async copies completing at issue (the emulator;
//       else at the last moment);
//   attention_sharp_case: normal inputs with q scaled by 2 (a sharper softmax), tolerances scaled by
//       each output's largest value (a gradient's rounding follows the terms summed into it); the
//       query-offset rows (attention_cp_case) are of this kind.
// On the emulator each case also draws a random accumulator layout for the wmma fragments, and shared
// memory is NaN before every block.
//
// The absolute tolerances (abs + rel) of attention_case: a bf16 rounding is off by at most u = 2^-8
// (3.9e-3) relative. out: its own rounding (u |out|) plus the probabilities rounded to bf16 before
// p @ v (at most u sum p |v| <= u, far less with random signs). dqkv: p and ds rounded to bf16 before
// the three products of the backward, and the outputs' rounding. An fp32 CPU emulation of the flash
// kernels' roundings on these inputs (B=16 T=1024 C=768 NH=12) needed at most atol 1.2e-3 at rtol
// 1e-2 (out) and 2.6e-3 at rtol 2e-2 (dv, the worst of dq/dk/dv); the margins below are 3x and 2x.
// Looser bounds hide real bugs: at T=1024 most gradients are under 2e-2 (90% of dq, 67% of dv), and
// in that emulation dq missing the diagonal key tile for queries >= 512, or dk/dv missing the last
// query tile for keys >= 512, passed at atol 2e-2 and fail at these. lse: fp32 scores from exact
// products, ~1e-6 relative.

// rows x width values of a strided host array (the q, k or v channels of qkv rows, ...)
static std::vector<float> kc_slice(const float *p, size_t rows, size_t stride, size_t width) {
    std::vector<float> v(rows * width);
    for (size_t r = 0; r < rows; r++) memcpy(&v[r * width], p + r * stride, width * sizeof(float));
    return v;
}
// got against ref with atol scaled by ref's largest value (at least 1e-4: an output that is 0 in exact
// arithmetic, T = 1's dq and dk, is ~1e-7 from roundings)
static void kc_compare_scaled(KcReport *rep, const std::string &what, const std::vector<float> &got,
                              const std::vector<float> &ref, double atol, double rtol) {
    double scale = 1e-4;
    for (float x : ref) scale = fmax(scale, fabs((double)x));
    rep->compare(what, got, ref, atol * scale, rtol);
}

// bf16 values: normal (sharp: q, the first C of each 3C channels, times 2) or uniform in [-1, 1]
static std::vector<float> kc_attention_inputs(Rng *rng, size_t n, int C, bool sharp) {
    if (!sharp) return random_floatX(rng, n, 1.0f);
    std::vector<float> h(n);
    for (size_t i = 0; i < n; i++) {
        float x = 0;
        rng_normal_fill(rng, &x, 1, 1.0f);
        if (C > 0 && (int)(i % (3 * (size_t)C)) < C) x *= 2.0f;
        h[i] = floatX_round(x);
    }
    return h;
}

// the emulator's strictness knobs for one case: cp.async copies completing at issue or at the wait
// (then back to the wait), and a random wmma accumulator layout
static void kc_emulator_schedule(bool copy_at_issue, Rng *rng) {
#ifdef LLMC_CUDA_EMULATION
    emu_copy_at_issue = copy_at_issue;
    if (rng) emu_shuffle_accumulator_layout(rng_next_u64(rng));
#else
    (void)copy_at_issue, (void)rng;
#endif
}

static void attention_run(const KernelCase *kc, const KernelImpls *im, Rng *rng, KcReport *rep, bool sharp) {
    const int B = (int)kc->a, T = (int)kc->b, NH = (int)kc->c, C = NH * (int)kc->d;
    if (im->attention_prepare) {
        const char *why = im->attention_prepare(B, T, C, NH);
        if (why) {
            rep->skip = why;
            return;
        }
    }
    const size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C, nl = (size_t)B * NH * T;
    std::vector<float> qkv = kc_attention_inputs(rng, nq, C, sharp), dout = kc_attention_inputs(rng, no, 0, sharp);
    std::vector<float> ref_out(no), att((size_t)B * NH * T * T), ref_lse(nl), ref_dqkv(nq);
    std::vector<float> scratch((size_t)omp_threads() * T * T);
    attention_forward(ref_out.data(), att.data(), ref_lse.data(), qkv.data(), B, T, C, NH);
    attention_backward(ref_dqkv.data(), scratch.data(), dout.data(), qkv.data(), att.data(), B, T, C, NH);
    KcBuf<floatX> dqkv_in(nq, 0), ddout(no, 0);
    put(dqkv_in.p, qkv), put(ddout.p, dout);
    kc_emulator_schedule(kc->e == 1, rng);
    std::vector<float> got[2][3];  // [run][out, lse, dqkv]
    const int runs = !sharp && im->attention_deterministic ? 2 : 1;
    for (int run = 0; run < runs; run++) {
        KcBuf<floatX> out(no, 0), dqkv(nq, 0);
        KcBuf<float> lse(nl, 0), delta(nl, 0);
        im->attention_forward(out.p, lse.p, dqkv_in.p, B, T, C, NH, 0);
        im->attention_backward(dqkv.p, delta.p, ddout.p, dqkv_in.p, out.p, lse.p, B, T, C, NH, 0);
        got[run][0] = get(out.p, no), got[run][1] = get(lse.p, nl), got[run][2] = get(dqkv.p, nq);
    }
    kc_emulator_schedule(false, NULL);
    if (sharp) {
        const size_t rows = (size_t)B * T, C3 = 3 * (size_t)C;
        kc_compare_scaled(rep, "out", got[0][0], ref_out, 8e-3, 1e-2);
        rep->compare("lse", got[0][1], ref_lse, 1e-4, 1e-4);
        const char *names[] = {"dq", "dk", "dv"};
        for (int j = 0; j < 3; j++)
            kc_compare_scaled(rep, names[j], kc_slice(got[0][2].data() + j * C, rows, C3, C),
                              kc_slice(ref_dqkv.data() + j * C, rows, C3, C), 1.5e-2, 2e-2);
    } else {
        rep->compare("out", got[0][0], ref_out, 4e-3, 1e-2);
        rep->compare("lse", got[0][1], ref_lse, 1e-3, 1e-3);
        rep->compare("dqkv", got[0][2], ref_dqkv, 5e-3, 2e-2);
    }
    if (runs == 2)
        rep->check("two runs bit-identical (out, lse, dqkv)",
                   same_bits(got[0][0], got[1][0]) && same_bits(got[0][1], got[1][1]) && same_bits(got[0][2], got[1][2]));
}
static void attention_case(const KernelCase *kc, const KernelImpls *im, Rng *rng, KcReport *rep) {
    attention_run(kc, im, rng, rep, false);
}
static void attention_sharp_case(const KernelCase *kc, const KernelImpls *im, Rng *rng, KcReport *rep) {
    attention_run(kc, im, rng, rep, true);
}

// Query offsets: rank f of a context group of e (cp): its rows, chunks f and 2cp-1-f of T/(2cp)
// positions, against every position's K and V (B,T,2C), forward and backward. out, lse and dq must be
// those rows of the whole sequence's attention; dk|dv (fp32) every key's gradient from those rows
// alone (the CPU backward with dout 0 on the other rows).
static void attention_cp_case(const KernelCase *kc, const KernelImpls *im, Rng *rng, KcReport *rep) {
    const int B = (int)kc->a, T = (int)kc->b, NH = (int)kc->c, C = NH * (int)kc->d, cp = (int)kc->e, r = (int)kc->f;
    const int Tc = T / (2 * cp), Tl = 2 * Tc;
    const FaQueries qry = {2, {0, Tc}, {Tc, Tc}, {r * Tc, (2 * cp - 1 - r) * Tc}};
    if (im->attention_prepare_queries) {
        const char *why = im->attention_prepare_queries(B, Tl, T, 2 * C, qry, C, NH);
        if (why) {
            rep->skip = why;
            return;
        }
    }
    const size_t C3 = 3 * (size_t)C, nq = (size_t)B * T * C3, no = (size_t)B * T * C;
    std::vector<float> qkv = kc_attention_inputs(rng, nq, C, true), dout_all = kc_attention_inputs(rng, no, 0, true);
    // the rank's rows: local t at global position pos[t]; the others' dout is 0
    std::vector<int> pos(Tl);
    for (int t = 0; t < Tl; t++) pos[t] = (t < Tc ? r : 2 * cp - 1 - r) * Tc + t % Tc;
    std::vector<bool> held(T, false);
    for (int t = 0; t < Tl; t++) held[pos[t]] = true;
    std::vector<float> q((size_t)B * Tl * C3), kv((size_t)B * T * 2 * C), dout((size_t)B * Tl * C), dout_f = dout_all;
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < Tl; t++) {
            memcpy(&q[((size_t)b * Tl + t) * C3], &qkv[((size_t)b * T + pos[t]) * C3], sizeof(float) * C3);
            memcpy(&dout[((size_t)b * Tl + t) * C], &dout_all[((size_t)b * T + pos[t]) * C], sizeof(float) * C);
        }
        for (int t = 0; t < T; t++) {
            memcpy(&kv[((size_t)b * T + t) * 2 * C], &qkv[((size_t)b * T + t) * C3 + C], sizeof(float) * 2 * C);
            if (!held[t]) memset(&dout_f[((size_t)b * T + t) * C], 0, sizeof(float) * C);
        }
    }
    KcBuf<floatX> dq_in(q.size(), 0), dkv_in(kv.size(), 0), ddout(dout.size(), 0), out((size_t)B * Tl * C, 0),
        dq(q.size(), 0);
    KcBuf<float> lse((size_t)B * NH * Tl, 0), delta((size_t)B * NH * Tl, 0), dkv(kv.size(), 0);
    put(dq_in.p, q), put(dkv_in.p, kv), put(ddout.p, dout);
    kc_emulator_schedule(false, rng);
    im->attention_forward_queries(out.p, lse.p, dq_in.p, Tl, dkv_in.p, 2 * C, T, qry, B, C, NH, 0);
    im->attention_backward_queries(dq.p, dkv.p, delta.p, ddout.p, dq_in.p, Tl, dkv_in.p, 2 * C, T, qry, out.p, lse.p,
                                   B, C, NH, 0);
    std::vector<float> g_out = get(out.p, out.n), g_lse = get(lse.p, lse.n), g_dq = get(dq.p, dq.n),
                       g_dkv = get(dkv.p, dkv.n);

    std::vector<float> ref_out(no), att((size_t)B * NH * T * T), ref_dqkv(nq), ref_lse((size_t)B * NH * T);
    std::vector<float> scratch((size_t)omp_threads() * T * T);
    attention_forward(ref_out.data(), att.data(), ref_lse.data(), qkv.data(), B, T, C, NH);
    attention_backward(ref_dqkv.data(), scratch.data(), dout_f.data(), qkv.data(), att.data(), B, T, C, NH);
    // each chunk: Tc rows of the whole sequence's (the worst over batches and chunks); every key's dk, dv
    KcReport part;
    for (int b = 0; b < B; b++) {
        for (int j = 0; j < 2; j++) {
            size_t lrow = (size_t)b * Tl + (size_t)j * Tc, grow = (size_t)b * T + pos[(size_t)j * Tc];
            kc_compare_scaled(&part, "out", kc_slice(&g_out[lrow * C], Tc, C, C),
                              kc_slice(&ref_out[grow * C], Tc, C, C), 8e-3, 1e-2);
            kc_compare_scaled(&part, "dq", kc_slice(&g_dq[lrow * C3], Tc, C3, C),
                              kc_slice(&ref_dqkv[grow * C3], Tc, C3, C), 1.5e-2, 2e-2);
            std::vector<float> gl, rl;
            for (int h = 0; h < NH; h++)
                for (int t = 0; t < Tc; t++) {
                    gl.push_back(g_lse[((size_t)b * NH + h) * Tl + (size_t)j * Tc + t]);
                    rl.push_back(ref_lse[((size_t)b * NH + h) * T + pos[(size_t)j * Tc + t]]);
                }
            part.compare("lse", gl, rl, 1e-4, 1e-4);
        }
        size_t row = (size_t)b * T;
        kc_compare_scaled(&part, "dk", kc_slice(&g_dkv[row * 2 * C], T, 2 * C, C),
                          kc_slice(&ref_dqkv[row * C3 + C], T, C3, C), 1.5e-2, 2e-2);
        kc_compare_scaled(&part, "dv", kc_slice(&g_dkv[row * 2 * C + C], T, 2 * C, C),
                          kc_slice(&ref_dqkv[row * C3 + 2 * C], T, C3, C), 1.5e-2, 2e-2);
    }
    const char *names[] = {"out", "lse", "dq", "dk", "dv"};
    for (const char *n : names) {  // one line per output: the worst of its pieces
        KcReport::Close w = {n, 0.0, 0.0, 0.0};
        for (const KcReport::Close &c : part.close)
            if (c.what == n) {
                w.excess = c.excess != c.excess || c.excess > w.excess ? c.excess : w.excess;
                w.max_abs = fmax(w.max_abs, c.max_abs), w.max_rel = fmax(w.max_rel, c.max_rel);
            }
        rep->close.push_back(w);
    }
}
#endif  // KC_ATTENTION

#ifdef KC_MATMUL
// ---- matmul: gpu_matmul_forward and gpu_matmul_backward (llmc/matmul.cuh: cuBLASLt, floatX in, fp32
// accumulate; emulated by tests/cublaslt_emulator.h) against llmc/cpu_layers.h's linear_forward,
// gelu_forward, linear_backward. a = N, b = IC, c = OC, d = the elements every floatX operand sits past
// a 256-byte boundary (64: 128-byte aligned, as a model's weights are when C is not a multiple of 128).
// The forward with each epilogue: bias; GELU + bias (the pre-activation saved); none (no bias: the
// classifier's). The backward: dinp, dW accumulated in fp32, dbias from floatX dout; then as the residual
// projections run it: dinp skipped, dbias from an fp32 source (a separate, unrounded array, so dbias
// must come from it), dW and dbias accumulating on. Outputs start as NaN. floatX outputs: inputs of
// size 1 (weights 0.1) summed over IC: 1e-2 abs + rel; fp32 gradients: 1e-3.

static void matmul_case(const KernelCase *kc, const KernelImpls *im, Rng *rng, KcReport *rep) {
    const int N = (int)kc->a, IC = (int)kc->b, OC = (int)kc->c, shift = (int)kc->d;
    const size_t ni = (size_t)N * IC, no = (size_t)N * OC, wo = (size_t)OC * IC;
    std::vector<float> inp = random_floatX(rng, ni, 1.0f), w = random_floatX(rng, wo, 0.1f),
                       bias = random_floatX(rng, OC, 1.0f);
    std::vector<float> ref(no), ref_gelu(no), ref_nb(no);
    linear_forward(ref.data(), inp.data(), w.data(), bias.data(), NULL, N, IC, OC);
    gelu_forward(ref_gelu.data(), ref.data(), no);
    linear_forward(ref_nb.data(), inp.data(), w.data(), NULL, NULL, N, IC, OC);
    MatmulContext mc;
    matmul_init(&mc);
    KcBuf<floatX> d_inp(ni, shift), d_w(wo, shift), d_bias(OC, shift);
    put(d_inp.p, inp), put(d_w.p, w), put(d_bias.p, bias);
    {
        KcBuf<floatX> out(no, shift), out_g(no, shift), pre(no, shift), out_nb(no, shift);
        im->matmul_forward(&mc, out.p, NULL, d_inp.p, d_w.p, d_bias.p, N, IC, OC, 0);
        im->matmul_forward(&mc, out_g.p, pre.p, d_inp.p, d_w.p, d_bias.p, N, IC, OC, 0);
        im->matmul_forward(&mc, out_nb.p, NULL, d_inp.p, d_w.p, NULL, N, IC, OC, 0);
        rep->compare("forward + bias", get(out.p, no), ref, 1e-2, 1e-2);
        rep->compare("forward + bias + GELU: out", get(out_g.p, no), ref_gelu, 1e-2, 1e-2);
        rep->compare("forward + bias + GELU: pre-activation", get(pre.p, no), ref, 1e-2, 1e-2);
        rep->compare("forward, no bias", get(out_nb.p, no), ref_nb, 1e-2, 1e-2);
    }
    std::vector<float> dout = random_floatX(rng, no, 1.0f), dw = random_floatX(rng, wo, 1.0f),
                       db = random_floatX(rng, OC, 1.0f), dinp(ni);
    KcBuf<floatX> d_dout(no, shift), d_dinp(ni, shift);
    KcBuf<float> d_dw(wo, 0), d_db(OC, 0), scratch(colsum_scratch_floats(N, OC), 0);
    put(d_dout.p, dout), put(d_dw.p, dw), put(d_db.p, db);
    linear_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), N, IC, OC);
    im->matmul_backward(&mc, d_dinp.p, d_dw.p, d_db.p, scratch.p, d_dout.p, d_dout.p, d_inp.p, d_w.p, N, IC, OC, 0);
    rep->compare("backward: dinp", get(d_dinp.p, ni), dinp, 1e-2, 1e-2);
    rep->compare("backward: dW (fp32, accumulated)", get(d_dw.p, wo), dw, 1e-3, 1e-3);
    rep->compare("backward: dbias", get(d_db.p, OC), db, 1e-3, 1e-3);
    std::vector<float> dsrc(no);
    for (size_t i = 0; i < no; i++) dsrc[i] = 2.0f * rng_uniform(rng) - 1.0f;  // fp32: not floatX values
    KcBuf<float> d_dsrc(no, 0);
    put(d_dsrc.p, dsrc);
    linear_backward(dinp.data(), dw.data(), NULL, dout.data(), inp.data(), w.data(), N, IC, OC);
    column_sum_accumulate(db.data(), dsrc.data(), N, OC);
    im->matmul_backward_f32(&mc, NULL, d_dw.p, d_db.p, scratch.p, d_dout.p, d_dsrc.p, d_inp.p, d_w.p, N, IC, OC, 0);
    rep->compare("backward, fp32 dbias source: dW (2nd accumulation)", get(d_dw.p, wo), dw, 1e-3, 1e-3);
    rep->compare("backward, fp32 dbias source: dbias", get(d_db.p, OC), db, 1e-3, 1e-3);
    matmul_free(&mc);
}
#endif  // KC_MATMUL

#ifdef KC_TENSOR_PARALLEL
// ---- tensor parallel: the kernels llmc/tensor_parallel.cuh adds to the GPU trainer, for a tensor group
// of tp ranks simulated on the one device: each rank's kernels run on its own buffers and its slice
// (tensor_parallel.h's tp_vocab_slice, padded columns and rows included), launched as llmc/gpt_gpu.cuh
// launches them, and the group's collectives between the passes (the all-gather of the row maxima, the
// all-reduces of the sums and of the embedding's partials, sequence parallel's reduce-scatter) done here
// by device copies and fp32 sums over the ranks in rank order.

// This rank's slice of the padded vocabulary Vp of V (tp_vocab_slice).
static void kc_vocab_slice(int V, int tp, int rank, int *v0, int *vreal) {
    GPTConfig c;
    memset(&c, 0, sizeof(c));
    c.vocab_size = V, c.padded_vocab_size = pad_vocab(V);
    TPContext t = tp_none();
    t.size = tp, t.rank = rank;
    tp_vocab_slice(&c, &t, v0, vreal);
}

// One run of the group's vocabulary-parallel cross-entropy (gpu_stage_forward, tp > 1) on fresh poisoned
// buffers holding lp's (N, Vp) columns: each rank's maxima, the all-gather, each rank's sums, the
// all-reduce, each rank's losses and (dloss != 0) logits' gradient. losses: (tp, N), each rank's;
// logits: (N, Vp), the ranks' slices put together.
static void kc_vocab_ce_group(const KernelImpls *im, const std::vector<float> &lp, const int *d_y, int N, int V, int tp,
                              float dloss, std::vector<float> *losses, std::vector<float> *logits) {
    const int Vp = pad_vocab(V), Vl = Vp / tp;
    std::vector<std::unique_ptr<KcBuf<floatX>>> lg;
    std::vector<std::unique_ptr<KcBuf<float>>> mx, stats, gmax, loss;
    std::vector<int> v0(tp), vreal(tp);
    std::vector<float> slice((size_t)N * Vl);
    for (int r = 0; r < tp; r++) {
        kc_vocab_slice(V, tp, r, &v0[r], &vreal[r]);
        for (int i = 0; i < N; i++) memcpy(&slice[(size_t)i * Vl], &lp[(size_t)i * Vp + v0[r]], sizeof(float) * Vl);
        lg.emplace_back(new KcBuf<floatX>(slice.size(), 0));
        put(lg[r]->p, slice);
        mx.emplace_back(new KcBuf<float>((size_t)tp * N, 0)), stats.emplace_back(new KcBuf<float>(2 * (size_t)N, 0));
        gmax.emplace_back(new KcBuf<float>(N, 0)), loss.emplace_back(new KcBuf<float>(N, 0));
    }
    for (int r = 0; r < tp; r++) im->tp_vocab_max(mx[r]->p + (size_t)r * N, lg[r]->p, N, Vl, vreal[r], 0);
    // comm_all_gather_start in place: rank r's N maxima into every rank's (tp, N) at r * N
    for (int r = 0; r < tp; r++)
        for (int q = 0; q < tp; q++)
            if (q != r)
                CUDA_CHECK(cudaMemcpy(mx[q]->p + (size_t)r * N, mx[r]->p + (size_t)r * N, sizeof(float) * N,
                                      cudaMemcpyDeviceToDevice));
    for (int r = 0; r < tp; r++)
        im->tp_vocab_sums(stats[r]->p, gmax[r]->p, mx[r]->p, tp, lg[r]->p, d_y, N, Vl, vreal[r], v0[r], 0);
    // tp_all_reduce(stats, 2N, COMM_F32): their fp32 sum over the ranks, into every rank's
    std::vector<float> sum(2 * (size_t)N, 0.0f);
    for (int r = 0; r < tp; r++) {
        std::vector<float> part = get(stats[r]->p, sum.size());
        for (size_t i = 0; i < sum.size(); i++) sum[i] += part[i];
    }
    for (int r = 0; r < tp; r++) put(stats[r]->p, sum);
    for (int r = 0; r < tp; r++)
        im->tp_vocab_finish(lg[r]->p, loss[r]->p, stats[r]->p, gmax[r]->p, d_y, N, Vl, vreal[r], v0[r], dloss, 0);
    losses->assign((size_t)tp * N, 0.0f), logits->assign((size_t)N * Vp, 0.0f);
    for (int r = 0; r < tp; r++) {
        std::vector<float> l = get(loss[r]->p, N), x = get(lg[r]->p, slice.size());
        memcpy(&(*losses)[(size_t)r * N], l.data(), sizeof(float) * N);
        for (int i = 0; i < N; i++) memcpy(&(*logits)[(size_t)i * Vp + v0[r]], &x[(size_t)i * Vl], sizeof(float) * Vl);
    }
}

// The vocabulary-parallel cross-entropy (tp_vocab_max/sums/finish_kernel) against llmc/cpu_layers.h's
// softmax_crossentropy of the whole row (fp32): every rank's losses (the same bits on every rank, eval
// and train), the logits' gradient dloss * (softmax - onehot) written into each rank's slice, its padded
// columns (garbage logits on input) zero, eval mode leaving the logits alone, a second run's bits;
// targets at each slice's first and last real column. a = N, b = V, c = tp.
static void tp_vocab_ce_case(const KernelCase *kc, const KernelImpls *im, Rng *rng, KcReport *rep) {
    const int N = (int)kc->a, V = (int)kc->b, tp = (int)kc->c, Vp = pad_vocab(V);
    std::vector<float> lp = random_floatX(rng, (size_t)N * Vp, 8.0f);  // padded columns: garbage, to be left out
    // targets: row i in rank i % tp's slice (its first real column, then its last, then any), or anywhere
    // when that slice is all padding
    std::vector<int> y(N);
    for (int i = 0; i < N; i++) {
        int v0, vreal, k = i / tp;
        kc_vocab_slice(V, tp, i % tp, &v0, &vreal);
        if (vreal == 0) y[i] = (int)rng_below(rng, (uint64_t)V);
        else y[i] = v0 + (k == 0 ? 0 : k == 1 ? vreal - 1 : (int)rng_below(rng, (uint64_t)vreal));
    }
    std::vector<float> ref((size_t)N * V), losses(N);
    for (int i = 0; i < N; i++) memcpy(&ref[(size_t)i * V], &lp[(size_t)i * Vp], sizeof(float) * V);
    const float dloss = 1.0f;  // dlogits of order 1: the classifier's tolerances
    softmax_crossentropy(ref.data(), losses.data(), y.data(), N, V, dloss);
    KcBuf<int> d_y(N, 0);
    CUDA_CHECK(cudaMemcpy(d_y.p, y.data(), sizeof(int) * N, cudaMemcpyHostToDevice));
    std::vector<float> ev_loss, ev_logits, tr_loss, tr_logits, again_loss, again_logits;
    kc_vocab_ce_group(im, lp, d_y.p, N, V, tp, 0.0f, &ev_loss, &ev_logits);
    kc_vocab_ce_group(im, lp, d_y.p, N, V, tp, dloss, &tr_loss, &tr_logits);
    kc_vocab_ce_group(im, lp, d_y.p, N, V, tp, dloss, &again_loss, &again_logits);
    std::vector<float> got_d((size_t)N * V), got_pad;
    for (int i = 0; i < N; i++) {
        memcpy(&got_d[(size_t)i * V], &tr_logits[(size_t)i * Vp], sizeof(float) * V);
        for (int c = V; c < Vp; c++) got_pad.push_back(tr_logits[(size_t)i * Vp + c]);
    }
    bool same_losses = true;
    for (int r = 0; r < tp; r++) {
        const std::string at = " rank " + std::to_string(r);
        rep->compare("eval losses" + at, &ev_loss[(size_t)r * N], losses.data(), N, 1e-4, 1e-4);
        rep->compare("train losses" + at, &tr_loss[(size_t)r * N], losses.data(), N, 1e-4, 1e-4);
        same_losses = same_losses && !memcmp(&tr_loss[(size_t)r * N], tr_loss.data(), sizeof(float) * N) &&
                      !memcmp(&ev_loss[(size_t)r * N], tr_loss.data(), sizeof(float) * N);
    }
    rep->check("every rank's losses the same bits, eval and train", same_losses);
    rep->check("eval leaves the logits unchanged", same_bits(ev_logits, lp));
    rep->compare("train: dlogits over the slices", got_d, ref, 1e-4, 1e-2);
    rep->check("train: padded columns zero", std::all_of(got_pad.begin(), got_pad.end(), [](float x) { return x == 0; }));
    rep->check("a second run gives the same bits (losses, dlogits)",
               same_bits(tr_loss, again_loss) && same_bits(tr_logits, again_logits));
}

// gpu_tp_bias_floatX (a row-parallel layer's bias) against fp32 in + bias rounded once (bits). a = rows, b = C.
static void tp_bias_case(const KernelCase *kc, const KernelImpls *im, Rng *rng, KcReport *rep) {
    const int rows = (int)kc->a, C = (int)kc->b;
    const size_t n = (size_t)rows * C;
    std::vector<float> in(n), ref(n);
    for (size_t i = 0; i < n; i++) in[i] = (2.0f * rng_uniform(rng) - 1.0f) * 4.0f;  // fp32: not floatX values
    std::vector<float> bias = random_floatX(rng, C, 1.0f);
    for (size_t i = 0; i < n; i++) ref[i] = floatX_round(in[i] + bias[i % C]);
    KcBuf<float> d_in(n, 0);
    KcBuf<floatX> d_bias(C, 0), d_out(n, 0);
    put(d_in.p, in), put(d_bias.p, bias);
    im->tp_bias_floatX(d_out.p, d_in.p, d_bias.p, rows, C, 0);
    rep->check("in + bias rounded once (bits)", same_bits(get(d_out.p, n), ref));
}

// The vocabulary-parallel embedding: each rank's partial (gpu_tp_embed_rows: the rows its slice holds,
// zeros for the others' tokens) and the group's sum against the full lookup (bits), then
// gpu_tp_embed_finish without and with sequence parallel (each rank its N/tp rows) against
// encoder_forward rounded to floatX (bits). a = B, b = T, c = C, d = V, e = tp.
static void tp_embedding_case(const KernelCase *kc, const KernelImpls *im, Rng *rng, KcReport *rep) {
    const int B = (int)kc->a, T = (int)kc->b, C = (int)kc->c, V = (int)kc->d, tp = (int)kc->e;
    const int N = B * T, Vp = pad_vocab(V), Vl = Vp / tp;
    const size_t n = (size_t)N * C;
    std::vector<float> wte = random_floatX(rng, (size_t)Vp * C, 1.0f), wpe = random_floatX(rng, (size_t)T * C, 1.0f);
    // tokens: each slice's first and last real id, V - 1, then any
    std::vector<int> inp(N);
    for (int i = 0; i < N; i++) inp[i] = (int)rng_below(rng, (uint64_t)V);
    for (int r = 0, i = 0; r < tp && i + 1 < N; r++) {
        int v0, vreal;
        kc_vocab_slice(V, tp, r, &v0, &vreal);
        if (vreal > 0) inp[i++] = v0, inp[i++] = v0 + vreal - 1;
    }
    inp[N - 1] = V - 1;
    std::vector<float> lookup(n), ref(n), sum(n, 0.0f), want(n);
    for (int i = 0; i < N; i++) memcpy(&lookup[(size_t)i * C], &wte[(size_t)inp[i] * C], sizeof(float) * C);
    encoder_forward(ref.data(), inp.data(), wte.data(), wpe.data(), B, T, C);
    for (size_t i = 0; i < n; i++) ref[i] = floatX_round(ref[i]);
    KcBuf<int> d_inp(N, 0);
    CUDA_CHECK(cudaMemcpy(d_inp.p, inp.data(), sizeof(int) * N, cudaMemcpyHostToDevice));
    KcBuf<floatX> d_wpe((size_t)T * C, 0);
    put(d_wpe.p, wpe);
    bool rows_ok = true;
    for (int r = 0; r < tp; r++) {  // each rank's partial, and their sum (the all-reduce / reduce-scatter's)
        int v0, vreal;
        kc_vocab_slice(V, tp, r, &v0, &vreal);
        KcBuf<floatX> d_wte((size_t)Vl * C, 0);  // the rank's rows, padding included
        put(d_wte.p, std::vector<float>(wte.begin() + (size_t)v0 * C, wte.begin() + (size_t)(v0 + Vl) * C));
        KcBuf<float> d_part(n, 0);
        im->tp_embed_rows(d_part.p, d_inp.p, d_wte.p, v0, vreal, N, C, 0);
        std::vector<float> got = get(d_part.p, n);
        for (int i = 0; i < N; i++) {
            int t = inp[i] - v0;
            for (int c = 0; c < C; c++)
                want[(size_t)i * C + c] = t >= 0 && t < vreal ? wte[(size_t)inp[i] * C + c] : 0.0f;
        }
        rows_ok = rows_ok && same_bits(got, want);
        for (size_t i = 0; i < n; i++) sum[i] += got[i];
    }
    rep->check("gpu_tp_embed_rows: each rank its slice's rows, else 0", rows_ok);
    rep->check("gpu_tp_embed_rows: the group's sum is the lookup", same_bits(sum, lookup));
    // the positions added: every row on every rank, or (sequence parallel) rank r's rows [r N/tp, (r+1) N/tp)
    for (int sp = 0; sp < 2; sp++) {
        const int Nl = sp ? N / tp : N;
        bool ok = true;
        for (int r = 0; r < tp; r++) {
            const int r0 = sp ? r * Nl : 0;
            KcBuf<float> d_sum((size_t)Nl * C, 0);
            KcBuf<floatX> d_enc((size_t)Nl * C, 0);
            put(d_sum.p, std::vector<float>(sum.begin() + (size_t)r0 * C, sum.begin() + (size_t)(r0 + Nl) * C));
            im->tp_embed_finish(d_enc.p, d_sum.p, d_wpe.p, r0, T, Nl, C, 0);
            ok = ok && same_bits(get(d_enc.p, (size_t)Nl * C),
                                 std::vector<float>(ref.begin() + (size_t)r0 * C, ref.begin() + (size_t)(r0 + Nl) * C));
        }
        rep->check(sp ? "gpu_tp_embed_finish, sequence parallel: every rank's rows" : "gpu_tp_embed_finish: every rank",
                   ok);
    }
}

// gpu_tp_wpe_backward (sequence parallel): each rank's accumulation into a non-zero dwpe against a CPU
// sum over its rows, and the group's sum against encoder_backward's dwpe of the whole batch. a = B,
// b = T, c = C, d = tp.
static void tp_wpe_backward_case(const KernelCase *kc, const KernelImpls *im, Rng *rng, KcReport *rep) {
    const int B = (int)kc->a, T = (int)kc->b, C = (int)kc->c, tp = (int)kc->d, N = B * T, Nl = N / tp;
    const size_t tc = (size_t)T * C;
    std::vector<float> dout = random_floatX(rng, (size_t)N * C, 1.0f);
    // the group's sum from zeros: encoder_backward's dwpe of the whole batch (its dwte: one row, token 0)
    std::vector<int> zero_inp(N, 0);
    std::vector<float> dwte1(C, 0.0f), want_group(tc, 0.0f), group(tc, 0.0f), ref(tc);
    encoder_backward(dwte1.data(), want_group.data(), dout.data(), zero_inp.data(), B, T, C);
    for (int r = 0; r < tp; r++) {
        const int r0 = r * Nl;
        KcBuf<float> d_dout((size_t)Nl * C, 0), d_dwpe(tc, 0);
        put(d_dout.p, std::vector<float>(dout.begin() + (size_t)r0 * C, dout.begin() + (size_t)(r0 + Nl) * C));
        // accumulating into a non-zero gradient, against a CPU sum over the rank's rows
        std::vector<float> dwpe0 = random_floatX(rng, tc, 1.0f);
        std::vector<double> acc(tc, 0.0);
        for (int i = 0; i < Nl; i++)
            for (int c = 0; c < C; c++) acc[(size_t)((r0 + i) % T) * C + c] += dout[(size_t)(r0 + i) * C + c];
        for (size_t q = 0; q < tc; q++) ref[q] = (float)(dwpe0[q] + acc[q]);
        put(d_dwpe.p, dwpe0);
        im->tp_wpe_backward(d_dwpe.p, d_dout.p, r0, T, Nl, C, 0);
        rep->compare("rank " + std::to_string(r) + "'s rows accumulated", get(d_dwpe.p, tc), ref, 1e-5, 1e-5);
        // from zeros, summed over the group (the replicated gradient's reduction)
        CUDA_CHECK(cudaMemset(d_dwpe.p, 0, sizeof(float) * tc));
        im->tp_wpe_backward(d_dwpe.p, d_dout.p, r0, T, Nl, C, 0);
        std::vector<float> mine = get(d_dwpe.p, tc);
        for (size_t q = 0; q < tc; q++) group[q] += mine[q];
    }
    rep->compare("the group's sum is encoder_backward's", group, want_group, 1e-5, 1e-5);
}
#endif  // KC_TENSOR_PARALLEL

// ---------------------------------------------------------------------------
// the rows: the shapes dev/cuda/<family>.cu checks on a GPU, scaled down where the emulator would be slow
// (KC_SIZE(emulated, gpu)); a first number 0 skips the row there (the GPU's larger shapes of what a
// smaller row checks already on the emulator)

static const KernelCase KERNEL_CASES[] = {
#ifdef KC_MEMORY_BOUND
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
#endif
#ifdef KC_ATTENTION
    // attention, the checker's rows: head size 64 one tile; 32 a partial tile; 64 six tiles, the last of 13
    // rows; d12 heads (the emulator: a partial tile of 80 rows); d12's sequence; d12's step (as benchmarked)
    {"attention", "B=%lld T=%lld NH=%lld hs=%lld", 2, 64, 2, 64, attention_case, 5},
    {"attention", "B=%lld T=%lld NH=%lld hs=%lld", 1, 100, 4, 32, attention_case, 5},
    {"attention", "B=%lld T=%lld NH=%lld hs=%lld", 2, 333, 4, 64, attention_case, 5},
    {"attention", "B=%lld T=%lld NH=%lld hs=%lld", KC_SIZE(1, 2), KC_SIZE(80, 256), 12, 64, attention_case, 5},
    {"attention", "B=%lld T=%lld NH=%lld hs=%lld", KC_SIZE(0, 1), 1024, 12, 64, attention_case, 5},
    {"attention", "B=%lld T=%lld NH=%lld hs=%lld", KC_SIZE(0, 16), 1024, 12, 64, attention_case, 5},
    // sharp softmax: T from 1 to 257 (partial tiles, one tile, several), head sizes 64 and 32, cp.async
    // copies completing at the wait and (e = 1) at issue
#define KC_SHARP(T, issue)                                                                                        \
    {"attention", "B=%lld T=%lld NH=%lld hs=%lld sharp, cp.async at issue %lld", 2, T, 2, 64, attention_sharp_case, \
     5, issue},                                                                                                   \
    {"attention", "B=%lld T=%lld NH=%lld hs=%lld sharp, cp.async at issue %lld", 1, T, 3, 32, attention_sharp_case, 5, issue}
    KC_SHARP(1, 0), KC_SHARP(1, 1), KC_SHARP(17, 0), KC_SHARP(17, 1), KC_SHARP(64, 0), KC_SHARP(64, 1),
    KC_SHARP(65, 0), KC_SHARP(65, 1), KC_SHARP(130, 0), KC_SHARP(130, 1), KC_SHARP(257, 0),
#undef KC_SHARP
    // query offsets: a context rank's two chunks of 32 (two a tile), of one tile, of 50 (off the tiles'
    // grid), cp 4 with chunks of 40, chunks of 130 (three tiles, the last partial), cp 3 with chunks of 12
    // (cuDNN, an extra version: one graph a chunk, the mask bottom-right; it skips the chunks of 50 and 130,
    // whose second chunk's statistics would start off 16 bytes)
#define KC_CP "B=%1$lld T=%2$lld NH=%3$lld hs=%4$lld, context rank %6$lld of %5$lld"
    {"attention", KC_CP, 2, 128, 2, 64, attention_cp_case, 5, 2, 0},
    {"attention", KC_CP, 2, 128, 2, 64, attention_cp_case, 5, 2, 1},
    {"attention", KC_CP, 1, 256, 2, 64, attention_cp_case, 5, 2, 1},
    {"attention", KC_CP, 1, 200, 2, 64, attention_cp_case, 5, 2, 0},
    {"attention", KC_CP, 1, 320, 3, 32, attention_cp_case, 5, 4, 1},
    {"attention", KC_CP, 1, 320, 3, 32, attention_cp_case, 5, 4, 3},
    {"attention", KC_CP, 1, 520, 1, 64, attention_cp_case, 5, 2, 1},
    {"attention", KC_CP, 2, 72, 2, 32, attention_cp_case, 5, 3, 1},
#undef KC_CP
#endif
#ifdef KC_MATMUL
    // matmul: a square-ish one; d12's fc (IC 768 -> 3072) and fcproj (3072 -> 768); a C = 192 model's shapes
    // with every floatX operand only 128-byte aligned
    {"matmul", "N=%lld IC=%lld OC=%lld shift=%lld", 64, 64, 192, 0, matmul_case, 3},
    {"matmul", "N=%lld IC=%lld OC=%lld shift=%lld", KC_SIZE(40, 200), 768, 3072, 0, matmul_case, 3},
    {"matmul", "N=%lld IC=%lld OC=%lld shift=%lld", KC_SIZE(32, 512), 3072, 768, 0, matmul_case, 3},
    {"matmul", "N=%lld IC=%lld OC=%lld shift=%lld", KC_SIZE(64, 256), 192, 768, 64, matmul_case, 3},
#endif
#ifdef KC_TENSOR_PARALLEL
    // vocabulary-parallel cross-entropy at tp 2 and 4: Vp 1024 (the last slice partly padding), Vp 128 (every
    // slice after the first all padding), no padding, GPT-2's (the last slice partly padding)
#define KC_TP_CE(tp)                                                                                           \
    {"tensor_parallel", "cross-entropy N=%lld V=%lld tp=%lld", 8, 1000, tp, 0, tp_vocab_ce_case, 9},          \
    {"tensor_parallel", "cross-entropy N=%lld V=%lld tp=%lld", 6, 10, tp, 0, tp_vocab_ce_case, 9},            \
    {"tensor_parallel", "cross-entropy N=%lld V=%lld tp=%lld", 5, 640, tp, 0, tp_vocab_ce_case, 9},           \
    {"tensor_parallel", "cross-entropy N=%lld V=%lld tp=%lld", KC_SIZE(8, 64), 50257, tp, 0, tp_vocab_ce_case, 9}
    // the embedding: slices across a sequence boundary (sequence parallel); tp 4: slices of 4 rows, ranks
    // 1..3 holding no real token; the wpe gradient: B x T = 3 x 8 and (tp 4: a slice shorter than T) 2 x 8
#define KC_TP_EMBED(tp)                                                                                                \
    {"tensor_parallel", "embedding B=%lld T=%lld C=%lld V=%lld tp=%lld", 3, 8, 64, 1000, tp_embedding_case, 9, tp},   \
    {"tensor_parallel", "embedding B=%lld T=%lld C=%lld V=%lld tp=%lld", 2, 8, 30, 10, tp_embedding_case, 9, tp},     \
    {"tensor_parallel", "wpe backward B=%lld T=%lld C=%lld tp=%lld", 3, 8, 64, tp, tp_wpe_backward_case, 9},          \
    {"tensor_parallel", "wpe backward B=%lld T=%lld C=%lld tp=%lld", 2, 8, 30, tp, tp_wpe_backward_case, 9}
    KC_TP_CE(2), KC_TP_EMBED(2), KC_TP_CE(4), KC_TP_EMBED(4),
#undef KC_TP_CE
#undef KC_TP_EMBED
    // the bias add: partial blocks
    {"tensor_parallel", "bias rows=%lld C=%lld", 7, 64, 0, 0, tp_bias_case, 9},
    {"tensor_parallel", "bias rows=%lld C=%lld", 5, 30, 0, 0, tp_bias_case, 9},
    {"tensor_parallel", "bias rows=%lld C=%lld", 3, 768, 0, 0, tp_bias_case, 9},
#endif
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
        if (k.a == 0) continue;
#ifdef KC_MEMORY_BOUND
        if (k.run == global_norm_ranges_case && !impl->sum_of_squares_ranges) continue;
#endif
#ifdef KC_ATTENTION
        if (k.run == attention_cp_case && !impl->attention_forward_queries) continue;
#endif
        KcReport rep;
        k.run(&k, impl, &rng, &rep);
        char shape[96];
        snprintf(shape, sizeof(shape), k.shape, (long long)k.a, (long long)k.b, (long long)k.c, (long long)k.d,
                 (long long)k.e, (long long)k.f);
        if (!rep.skip.empty()) {
            test_skip("%s %s %s: %s", impl->name, k.family, shape, rep.skip.c_str());
            continue;
        }
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
