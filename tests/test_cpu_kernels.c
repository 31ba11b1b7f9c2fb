// test_cpu_kernels.c: the native CPU kernels at the vector width this binary
// was built for (the Makefile builds it once per instruction set the machine
// can run: test_cpu_kernels at -march=native, test_cpu_kernels_avx2 without
// AVX-512, test_cpu_kernels_portable without AVX) against double-precision
// references: the native sgemm (llmc/cpu_matmul.h) on odd shapes, shapes
// across its block edges, all four transposes, alpha/beta, leading dimensions
// wider than the matrix, misaligned pointers and 1 vs 2 threads (bit-equal),
// and its summation order to the bit against a scalar model of it (op(A)
// packed and read in place, 1-3 threads, matmul_team in teams of 1-3);
// the llmc/cpu_vec.h reductions, exp, GELU and its gradient at lengths
// around the vector width and misaligned; LayerNorm forward and backward at
// widths around the vector width, 1 vs 2 threads; the linear input gradient
// fused with GELU's; the gradient norm's sum of squares;
// the causal attention (forward, lse, backward; context parallel's offset
// queries) at lengths around its blocks against double, 1 vs 2 threads;
// AdamW with a checkpoint's staging copy made in the update against the update
// and then the copy (bit-equal, the chunks' CRC32Cs too), and over a range cut
// into pieces of 1 to 4099 elements against the whole range's (bit-equal);
// the activations' allocator (2 MB aligned with the huge-page advice from 2 MB).
#include "llmc/ckpt_stage.h"
#include "llmc/cpu_layers.h"
#include "llmc/optimizer.h"
#include "llmc/rand.h"
#include "tests/testing.h"

// Sets the OpenMP threads of the next regions; returns the count before (1 without OpenMP).
static int set_threads(int n) {
#ifdef _OPENMP
    int before = omp_get_max_threads();
    omp_set_num_threads(n);
    return before;
#else
    (void)n;
    return 1;
#endif
}

// worst[j] = max(worst[j], e[j]) for n errors, a NaN error kept (it compares false).
static void keep_worst(double *worst, const double *e, int n) {
    for (int j = 0; j < n; j++) worst[j] = e[j] > worst[j] || e[j] != e[j] ? e[j] : worst[j];
}

// C = alpha * op(A) @ op(B) + beta * C0 in double, rounded to float
static void reference_matmul(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                             const float *B, int ldb, float beta, const float *C0, float *R, int ldc) {
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double acc = 0;
            for (int k = 0; k < K; k++)
                acc += (double)(ta ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k]) *
                       (tb ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j]);
            R[(size_t)i * ldc + j] = (float)(alpha * acc + (beta == 0.0f ? 0.0 : (double)beta * C0[(size_t)i * ldc + j]));
        }
}

// max |C - R| / (|alpha| * max_ij sum_k |a_ik b_kj| + |beta| * max |C0|), so an error of one rounding per
// term of the depth is O(K * 6e-8) whatever the cancellation
static double scaled_error(const float *Cm, const float *R, int M, int N, int ldc, double scale) {
    double worst = 0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double d = fabs((double)Cm[(size_t)i * ldc + j] - R[(size_t)i * ldc + j]);
            if (d > worst || d != d) worst = d != d ? INFINITY : d;
        }
    return worst / scale;
}

typedef struct { int M, N, K; } MatShape;

// One product through matmul_native with every operand offset by `misalign`
// floats from a 64-byte boundary and leading dimensions `pad` wider than needed.
static double check_matmul(Rng *rng, MatShape s, int ta, int tb, float alpha, float beta, int misalign, int pad,
                           int threads_equal) {
    int M = s.M, N = s.N, K = s.K;
    int lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
    size_t na = (size_t)(ta ? K : M) * lda, nb = (size_t)(tb ? N : K) * ldb, nc = (size_t)M * ldc;
    float *abuf = (float *)alignedMallocCheck(sizeof(float) * (na + 16));
    float *bbuf = (float *)alignedMallocCheck(sizeof(float) * (nb + 16));
    float *cbuf = (float *)alignedMallocCheck(sizeof(float) * (nc + 16));
    float *c0 = (float *)mallocCheck(sizeof(float) * (nc + 1)), *R = (float *)mallocCheck(sizeof(float) * (nc + 1));
    float *A = abuf + misalign, *Bm = bbuf + misalign, *Cm = cbuf + misalign;
    rng_normal_fill(rng, A, (int64_t)na, 1.0f);
    rng_normal_fill(rng, Bm, (int64_t)nb, 1.0f);
    rng_normal_fill(rng, c0, (int64_t)nc, 1.0f);
    double scale = 0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double t = 0;
            for (int k = 0; k < K; k++)
                t += fabs((double)(ta ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k]) *
                          (tb ? Bm[(size_t)j * ldb + k] : Bm[(size_t)k * ldb + j]));
            scale = t > scale ? t : scale;
        }
    scale = fabs(alpha) * scale + fabs(beta) * 4.0 + 1e-30;
    reference_matmul(ta, tb, M, N, K, alpha, A, lda, Bm, ldb, beta, c0, R, ldc);
    memcpy(Cm, c0, sizeof(float) * nc);
    matmul_native(ta, tb, M, N, K, alpha, A, lda, Bm, ldb, beta, Cm, ldc);
    double e = scaled_error(Cm, R, M, N, ldc, scale);
    // the padding of each C row is never written
    for (int i = 0; i < M && pad; i++)
        for (int j = N; j < ldc; j++)
            if (memcmp(&Cm[(size_t)i * ldc + j], &c0[(size_t)i * ldc + j], sizeof(float)) != 0) e = INFINITY;
    if (threads_equal) {  // the same product on one thread: the same bits
        memcpy(R, Cm, sizeof(float) * nc);
        memcpy(Cm, c0, sizeof(float) * nc);
        int saved = set_threads(1);
        matmul_native(ta, tb, M, N, K, alpha, A, lda, Bm, ldb, beta, Cm, ldc);
        set_threads(saved);
        if (memcmp(R, Cm, sizeof(float) * nc) != 0) e = INFINITY;
    }
    free(abuf); free(bbuf); free(cbuf); free(c0); free(R);
    return e;
}

static void test_matmul_native(void) {
    Rng rng;
    rng_seed(&rng, 11);
    // odd sizes, one tile, one tile and one, the edges of KC, KB and MC, and more than one block of each;
    // op(A) read in place (A not transposed, whatever lda; transposed, most) and packed (a transposed A
    // with lda from MM_AT_IN_PLACE_MAX_LD up or more than MM_AT_IN_PLACE_MAX_STRIPS strips wide)
    const MatShape shapes[] = {
        {1, 1, 1}, {7, 33, 5}, {MM_MR, MM_NR, MM_KC}, {MM_MR + 1, MM_NR + 1, MM_KC + 1}, {MM_MR - 1, MM_NR - 1, 3},
        {2 * MM_MR + 3, 3 * MM_NR - 5, MM_KB + MM_KC + 7}, {MM_MC + MM_MR + 1, 2 * MM_NR + 3, 9}, {37, 300, 259},
        {130, 65, 520}, {64, 64, 64}, {MM_MR + 2, 5, MM_AT_IN_PLACE_MAX_LD + 2},
        {MM_AT_IN_PLACE_MAX_LD + 5, MM_NR + 3, 2 * MM_KC + 1}, {23, (MM_AT_IN_PLACE_MAX_STRIPS + 1) * MM_NR + 1, 40},
    };
    const int nshapes = (int)(sizeof(shapes) / sizeof(shapes[0]));
    int bad = 0, runs = 0;
    double worst = 0;
    for (int s = 0; s < nshapes; s++)
        for (int tr = 0; tr < 4; tr++) {
            int ta = tr & 1, tb = tr >> 1;
            // each shape and transpose with a different alpha/beta, alignment and padding
            static const float alphas[] = {1.0f, 0.5f, -2.0f}, betas[] = {0.0f, 1.0f, 0.25f};
            int v = s * 4 + tr;
            float alpha = alphas[v % 3], beta = betas[(v / 3) % 3];
            int misalign = v % 4, pad = (v / 2) % 3 == 0 ? 0 : 1 + v % 5;
            double e = check_matmul(&rng, shapes[s], ta, tb, alpha, beta, misalign, pad, s % 3 == 0);
            // each C element sums its depth in fp32 (with FMA): a few roundings per term at most
            double tol = 4e-7 * sqrt((double)shapes[s].K) + 1e-6;
            runs++;
            worst = e > worst ? e : worst;
            if (!(e <= tol)) {
                bad++;
                printf("  %dx%dx%d ta=%d tb=%d alpha=%g beta=%g misalign=%d pad=%d: error %.2e (tolerance %.2e)\n",
                       shapes[s].M, shapes[s].N, shapes[s].K, ta, tb, alpha, beta, misalign, pad, e, tol);
            }
        }
    test_result(bad == 0, "native matmul %s matches a double-precision reference on %d products (odd shapes, block edges, "
                "transposes, alpha/beta, padded and misaligned operands, 1 vs 2 threads bit-equal; worst %.1e)",
                MATMUL_NATIVE_KERNEL, runs, worst);
    // K = 0: C = beta * C
    float c[6] = {1, 2, 3, 4, 5, 6}, dummy = 0;
    matmul_native(0, 0, 2, 3, 0, 1.0f, &dummy, 1, &dummy, 3, 0.5f, c, 3);
    test_result(c[0] == 0.5f && c[5] == 3.0f, "native matmul with K = 0 scales C by beta");
}

// 1 when the native kernel fuses its multiply-adds: this file's flags (-ffp-contract=fast, the
// target's FMA, -O2 and up) contract acc += a * b to one FMA, or not (at -O1 and without FMA). Told by
// a product of depth 2 whose second term cancels the first but for bits that only an unrounded
// product keeps: -(1 + 2^-11) + (1 + 2^-12)^2 is 2^-24 fused, 0 or 2^-23 rounded first.
static int native_kernel_fuses(void) {
    float a[2] = {-1.0f, 1.0f + 0x1p-12f}, b[2] = {1.0f + 0x1p-11f, 1.0f + 0x1p-12f}, c = 0.0f;
    matmul_native(0, 0, 1, 1, 2, 1.0f, a, 2, b, 1, 0.0f, &c, 1);
    return c == 0x1p-24f;
}

// C (M, N, row stride ldc) = op(A) @ op(B) + beta * C, beta 0 or 1, summed in the native kernel's
// order: each element's depth in MM_KC slices, in order, a slice summed from 0, k ascending, and
// added to C (the first slice to beta * C). A term is one fused multiply-add where the kernel fuses
// (fused), else a rounded product and an add; spelled out, so that how the compiler builds this loop
// does not matter (GCC vectorised it as an in-order reduction at one shape on Zen 4, rounding each
// product before its add where the kernel fused).
static void matmul_in_kernel_order(int fused, int ta, int tb, int M, int N, int K, const float *A, int lda,
                                   const float *B, int ldb, float beta, float *C, int ldc) {
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            float *c = &C[(size_t)i * ldc + j];
            for (int k0 = 0; k0 < K; k0 += MM_KC) {
                float acc = 0.0f;
                for (int k = k0; k < K && k < k0 + MM_KC; k++) {
                    float a = ta ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k];
                    float b = tb ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j];
                    if (fused) {
                        acc = fmaf(a, b, acc);
                    } else {
                        volatile float product = a * b;  // (rounded: not contracted into the add)
                        acc += product;
                    }
                }
                *c = k0 == 0 && beta == 0.0f ? acc : acc + *c;
            }
        }
}

// The layers' products (alpha 1, beta 0 or 1) sum in the order above to the bit: matmul_native on 1,
// 2 and 3 threads and matmul_team in teams of 1, 2 and 3 (each thread its slice), all four
// transposes, shapes off the tile and block edges, op(A) read in place and packed.
static void test_matmul_order(void) {
    Rng rng;
    rng_seed(&rng, 12);
    const MatShape shapes[] = {
        {5 * MM_MR + 1, 2 * MM_NR + 3, 2 * MM_KC + 5}, {MM_MC + 7, MM_NR + 6, 37}, {20, 33, MM_KB + MM_KC + 3},
        {13, (MM_AT_IN_PLACE_MAX_STRIPS + 1) * MM_NR + 5, MM_KC + 1}, {MM_MR - 1, 7, 2},
    };
    const int nshapes = (int)(sizeof(shapes) / sizeof(shapes[0]));
    matmul_set_backend("native");
    const int fused = native_kernel_fuses();
    int bad = 0, runs = 0;
    for (int s = 0; s < nshapes; s++)
        for (int v = 0; v < 8; v++) {
            int ta = v & 1, tb = (v >> 1) & 1, M = shapes[s].M, N = shapes[s].N, K = shapes[s].K;
            int wide = v >> 2;  // 1: leading dimensions past MM_AT_IN_PLACE_MAX_LD (a transposed A packed)
            int lda = (ta ? M : K) + (wide ? MM_AT_IN_PLACE_MAX_LD : s), ldb = (tb ? K : N) + s % 2, ldc = N + s % 3;
            float beta = (float)((s + v) % 2);
            size_t na = (size_t)(ta ? K : M) * lda, nb = (size_t)(tb ? N : K) * ldb, nc = (size_t)M * ldc;
            float *A = (float *)mallocCheck(sizeof(float) * na), *Bm = (float *)mallocCheck(sizeof(float) * nb);
            float *c0 = (float *)mallocCheck(sizeof(float) * nc), *R = (float *)mallocCheck(sizeof(float) * nc);
            float *Cm = (float *)mallocCheck(sizeof(float) * nc);
            rng_normal_fill(&rng, A, (int64_t)na, 1.0f);
            rng_normal_fill(&rng, Bm, (int64_t)nb, 1.0f);
            rng_normal_fill(&rng, c0, (int64_t)nc, 1.0f);
            memcpy(R, c0, sizeof(float) * nc);
            matmul_in_kernel_order(fused, ta, tb, M, N, K, A, lda, Bm, ldb, beta, R, ldc);
            for (int run = 0; run < 6; run++) {  // native on 1, 2, 3 threads; then the team of 1, 2, 3
                int threads = 1 + run % 3, saved = set_threads(threads);
                memcpy(Cm, c0, sizeof(float) * nc);
                if (run < 3) {
                    matmul_native(ta, tb, M, N, K, 1.0f, A, lda, Bm, ldb, beta, Cm, ldc);
                } else {
#pragma omp parallel num_threads(threads)
                    matmul_team(ta, tb, M, N, K, 1.0f, A, lda, Bm, ldb, beta, Cm, ldc);
                }
                set_threads(saved);
                runs++;
                if (memcmp(Cm, R, sizeof(float) * nc) != 0 && ++bad <= 5)
                    printf("  %dx%dx%d ta=%d tb=%d lda=%d beta=%g, %s on %d threads: not the same bits\n", M, N, K, ta,
                           tb, lda, beta, run < 3 ? "matmul_native" : "matmul_team", threads);
            }
            free(A); free(Bm); free(c0); free(R); free(Cm);
        }
    matmul_set_backend("auto");
    test_result(bad == 0, "native matmul sums in its order to the bit: %d products (transposes, block edges, op(A) in "
                "place and packed, 1-3 threads and teams of 1-3, beta 0 and 1; multiply-adds %s)", runs,
                fused ? "fused" : "rounded");
}

// lengths around the vector width and a long one; each at every misalignment below one vector
static const int lengths[] = {1, 2, VEC_LANES - 1, VEC_LANES, VEC_LANES + 1, 2 * VEC_LANES + 3, 1000, 4099};

static void test_vec_reductions(void) {
    Rng rng;
    rng_seed(&rng, 5);
    float *buf = (float *)alignedMallocCheck(sizeof(float) * (4099 + 64)), *buf2 = (float *)alignedMallocCheck(sizeof(float) * (4099 + 64));
    float *work = (float *)mallocCheck(sizeof(float) * (4099 + 64));
    rng_normal_fill(&rng, buf, 4099 + 64, 3.0f);
    rng_normal_fill(&rng, buf2, 4099 + 64, 1.0f);
    double worst[6] = {0};
    int bad_max = 0;
    for (size_t li = 0; li < sizeof(lengths) / sizeof(lengths[0]); li++)
        for (int off = 0; off < VEC_LANES; off += off < 3 ? 1 : VEC_LANES) {
            int n = lengths[li];
            const float *x = buf + off, *y = buf2 + off;
            double mx = x[0], sum = 0, dot = 0, abs_sum = 0, abs_dot = 0;
            for (int i = 0; i < n; i++) {
                mx = x[i] > mx ? x[i] : mx;
                sum += x[i]; abs_sum += fabs(x[i]);
                dot += (double)x[i] * y[i]; abs_dot += fabs((double)x[i] * y[i]);
            }
            if (vec_max(x, n) != (float)mx) bad_max++;
            if (n >= VEC_LANES) {  // the tree reductions over one vector: max exact, sum to a few roundings
                float lane_max = x[0];
                double lane_sum = 0, lane_abs = 0;
                for (int i = 0; i < VEC_LANES; i++) {
                    lane_max = x[i] > lane_max ? x[i] : lane_max;
                    lane_sum += x[i], lane_abs += fabs(x[i]);
                }
                if (vf_hmax(vf_load(x)) != lane_max || fabs(vf_hsum_tree(vf_load(x)) - lane_sum) > 1e-6 * lane_abs) bad_max++;
            }
            double e0 = fabs(vec_sum(x, n) - sum) / abs_sum, e1 = fabs(vec_dot(x, y, n) - dot) / abs_dot;
            // softmax pieces: sum of exp(x - max), and the stored exp(x - max) * scale
            // (against exp of the float x - max the kernel sees: that rounding is the caller's)
            double esum = 0;
            for (int i = 0; i < n; i++) esum += exp((double)(x[i] - (float)mx));
            memcpy(work, x, sizeof(float) * n);
            double e2 = fabs(vec_exp_sum(work, n, (float)mx, 1.0f, 0) - esum) / esum;
            double e3 = fabs(vec_exp_sum(work, n, (float)mx, 0.5f, 1) - esum) / esum, e4 = 0;
            for (int i = 0; i < n; i++) {
                double want = 0.5 * exp((double)(x[i] - (float)mx));
                double d = fabs(work[i] - want) / want;
                e4 = d > e4 ? d : e4;
            }
            double sq = 0;
            for (int i = 0; i < n; i++) sq += (double)x[i] * x[i];
            double e5 = fabs(vec_sum_squares(x, n) - sq) / sq;
            double e[6] = {e0, e1, e2, e3 > e2 ? e3 : e2, e4, e5};
            for (int k = 0; k < 6; k++) worst[k] = e[k] > worst[k] ? e[k] : worst[k];
        }
    test_result(bad_max == 0, "vec_max (%s, %d lanes) equals the scalar max at every length and alignment; vf_hmax "
                "and vf_hsum_tree over a vector", VEC_ISA,
                VEC_LANES);
    test_result(worst[0] < 1e-6 && worst[1] < 1e-6, "vec_sum and vec_dot (%s) within 1e-6 of double (%.1e, %.1e)",
                VEC_ISA, worst[0], worst[1]);
    test_result(worst[2] < 2e-6 && worst[3] < 2e-6 && worst[4] < 4e-7,
                "vec_exp_sum (%s) against double exp: sums %.1e, %.1e; stored values %.1e", VEC_ISA, worst[2], worst[3],
                worst[4]);
    test_result(worst[5] < 1e-7, "vec_sum_squares (%s) agrees with a float64 sum to %.1e", VEC_ISA, worst[5]);
    free(buf); free(buf2); free(work);
}

// max |got - want| / max(|want|, 1)
static double max_scaled_diff(const float *got, const double *want, int n) {
    double worst = 0;
    for (int i = 0; i < n; i++) {
        double d = fabs(got[i] - want[i]) / fmax(fabs(want[i]), 1.0);
        if (!(d <= worst)) worst = d;  // (a NaN sticks)
    }
    return worst;
}

// exp over the clamp range, and GELU forward/backward against libm in double
static void test_vec_elementwise(void) {
    double e_exp = 0;
    for (int i = -8700; i <= 8800; i++) {
        float x = i * 0.01f;
        e_exp = fmax(e_exp, fabs(scalar_exp(x) - exp((double)x)) / exp((double)x));
    }
    test_result(e_exp < 2.5e-7, "exp (relative %.1e) on [-87, 88] (%s)", e_exp, VEC_ISA);
    // past the ends: e^88 above (inf included), at most e^-87 and not below 0 under -87 (-inf
    // included), and a NaN stays a NaN (a softmax or loss that went wrong must show it)
    const float e_lo = scalar_exp(-87.0f), ends[] = {-87.5f, -100.0f, -104.0f, -1e30f, -INFINITY};
    int ends_ok = scalar_exp(89.0f) == scalar_exp(88.0f) && scalar_exp(INFINITY) == scalar_exp(88.0f) &&
                  isnan(scalar_exp(NAN));
    for (size_t i = 0; i < sizeof(ends) / sizeof(ends[0]); i++) {
        float e = scalar_exp(ends[i]);
        ends_ok &= e >= 0.0f && e <= e_lo;
    }
    test_result(ends_ok, "exp past [-87, 88]: e^88 above, in [0, e^-87] below, NaN kept (%s)", VEC_ISA);
    Rng rng;
    rng_seed(&rng, 9);
    const int n = 3 * VEC_LANES + 5;  // full vectors and a tail, misaligned by one float
    float *buf = (float *)alignedMallocCheck(sizeof(float) * 4 * (n + 1));
    float *x = buf + 1, *out = x + n + 1, *d = out + n + 1;
    rng_normal_fill(&rng, x, n, 2.0f);
    rng_normal_fill(&rng, d, n, 1.0f);
    float guard = 123.0f;
    out[n] = guard;
    gelu_forward(out, x, (size_t)n);
    const double s2pi = sqrt(2.0 / M_PI);
    double want[3 * VEC_LANES + 5], want_grad[3 * VEC_LANES + 5];
    for (int i = 0; i < n; i++) {
        double xi = x[i], u = s2pi * (xi + 0.044715 * xi * xi * xi), th = tanh(u);
        want[i] = 0.5 * xi * (1.0 + th);
        want_grad[i] = d[i] * (0.5 * (1.0 + th) + 0.5 * xi * (1.0 - th * th) * s2pi * (1.0 + 3.0 * 0.044715 * xi * xi));
    }
    double ef = max_scaled_diff(out, want, n);
    gelu_backward_inplace(d, x, (size_t)n);
    double eb = max_scaled_diff(d, want_grad, n);
    test_result(ef < 1e-6 && eb < 1e-6 && out[n] == guard,
                "GELU forward (%.1e) and backward (%.1e) against double over full vectors and a tail (%s)", ef, eb,
                VEC_ISA);
    free(buf);
}

// linear_act_backward_input (the MLP projection's input gradient through the GELU, each thread on its
// slice of the product) against double and, bit for bit, against the unfused pair it replaces
// (linear_backward_input, then gelu_backward_inplace), on 1 and 2 threads: shapes split by rows
// (N >= IC) and by columns, with partial vectors and tiles.
static void test_linear_gelu_backward(void) {
    const int shapes[][3] = {{37, 3 * VEC_LANES + 5, 29}, {13, 7 * VEC_LANES + 3, 40}};  // N, IC, OC
    double worst = 0;
    int bad_fused = 0;
    Rng rng;
    rng_seed(&rng, 41);
    for (int si = 0; si < 2; si++) {
        int N = shapes[si][0], IC = shapes[si][1], OC = shapes[si][2];
        size_t ni = (size_t)N * IC;
        float *dout = (float *)mallocCheck(sizeof(float) * (size_t)N * OC), *w = (float *)mallocCheck(sizeof(float) * (size_t)OC * IC);
        float *x = (float *)mallocCheck(sizeof(float) * ni), *got = (float *)mallocCheck(sizeof(float) * ni);
        float *plain = (float *)mallocCheck(sizeof(float) * ni);
        double *want = (double *)mallocCheck(sizeof(double) * ni);
        rng_normal_fill(&rng, dout, (int64_t)N * OC, 1.0f);
        rng_normal_fill(&rng, w, (int64_t)OC * IC, 0.3f);
        rng_normal_fill(&rng, x, (int64_t)ni, 2.0f);
        const double s2pi = sqrt(2.0 / M_PI);
        for (int i = 0; i < N; i++)
            for (int j = 0; j < IC; j++) {
                double d = 0, xi = x[(size_t)i * IC + j];
                for (int k = 0; k < OC; k++) d += (double)dout[(size_t)i * OC + k] * w[(size_t)k * IC + j];
                double th = tanh(s2pi * (xi + 0.044715 * xi * xi * xi));
                want[(size_t)i * IC + j] =
                    d * (0.5 * (1.0 + th) + 0.5 * xi * (1.0 - th * th) * s2pi * (1.0 + 3.0 * 0.044715 * xi * xi));
            }
        for (int threads = 1; threads <= 2; threads++) {
            int saved = set_threads(threads);
            linear_act_backward_input(got, x, dout, w, N, IC, OC);
            linear_backward_input(plain, dout, w, N, IC, OC);
            gelu_backward_inplace(plain, x, ni);
            set_threads(saved);
            bad_fused += memcmp(got, plain, sizeof(float) * ni) != 0;
            double e = max_scaled_diff(got, want, (int)ni);
            worst = e > worst || e != e ? e : worst;
        }
        free(dout); free(w); free(x); free(got); free(plain); free(want);
    }
    test_result(worst < 1e-5 && bad_fused == 0,
                "linear input gradient through GELU, fused: against double %.1e, the same bits as the unfused pair "
                "(%s, 1 and 2 threads, split by rows and by columns)", worst, matmul_backend_name());
}

// layernorm_forward/backward against double at widths C around the vector (a tail alone, full
// vectors and a tail, the model's 128), rows misaligned by a float: out, mean, rstd; dinp, dweight and
// dbias added to what they held; 1 and 2 threads give the same bits.
static void test_layernorm(void) {
    const int Cs[] = {2, VEC_LANES - 1, VEC_LANES, 2 * VEC_LANES + 3, 128, 203}, N = 7;
    double worst[6] = {0};  // out, mean, rstd, dinp, dweight, dbias
    int bad_threads = 0;
    Rng rng;
    rng_seed(&rng, 33);
    for (size_t ci = 0; ci < sizeof(Cs) / sizeof(Cs[0]); ci++) {
        int C = Cs[ci];
        size_t nc = (size_t)N * C;
        float *buf = (float *)mallocCheck(sizeof(float) * (6 * nc + 8 * C + 4 * N + 16));
        float *x = buf + 1, *dout = x + nc, *out = dout + nc, *dinp = out + nc, *out1 = dinp + nc, *dinp1 = out1 + nc;
        float *w = dinp1 + nc, *b = w + C, *dw = b + C, *db = dw + C, *dw1 = db + C, *db1 = dw1 + C;
        float *mean = db1 + C, *rstd = mean + N, *mean1 = rstd + N, *rstd1 = mean1 + N;
        rng_normal_fill(&rng, x, (int64_t)nc, 2.0f);
        for (size_t i = 0; i < nc; i++) x[i] += 3.0f;  // (a mean away from zero)
        rng_normal_fill(&rng, dout, (int64_t)nc, 1.0f);
        rng_normal_fill(&rng, dinp, (int64_t)nc, 1.0f);
        rng_normal_fill(&rng, w, 4 * C, 1.0f);  // w, b, and the gradients' starting values
        memcpy(dinp1, dinp, sizeof(float) * nc);
        memcpy(dw1, dw, sizeof(float) * 2 * C);
        double *want = (double *)callocCheck(nc + 2 * (size_t)C, sizeof(double)), *wdw = want + nc, *wdb = wdw + C;
        double e[6] = {0};
        for (int c = 0; c < C; c++) wdw[c] = dw[c], wdb[c] = db[c];
        layernorm_forward(out, mean, rstd, x, w, b, N, C);
        layernorm_backward(dinp, dw, db, dout, x, w, mean, rstd, N, C);
        for (int i = 0; i < N; i++) {
            const float *xi = x + (size_t)i * C, *di = dout + (size_t)i * C;
            double m = 0, v = 0, sd = 0, sdn = 0;
            for (int c = 0; c < C; c++) m += xi[c];
            m /= C;
            for (int c = 0; c < C; c++) v += (xi[c] - m) * (xi[c] - m);
            double s = 1.0 / sqrt(v / C + 1e-5);
            for (int c = 0; c < C; c++) {
                double n = (xi[c] - m) * s, dn = (double)w[c] * di[c];
                want[(size_t)i * C + c] = n * w[c] + b[c];
                sd += dn, sdn += dn * n;
                wdw[c] += n * di[c], wdb[c] += di[c];
            }
            e[0] = fmax(e[0], max_scaled_diff(out + (size_t)i * C, want + (size_t)i * C, C));
            e[1] = fmax(e[1], fabs(mean[i] - m) / fmax(fabs(m), 1.0));
            e[2] = fmax(e[2], fabs(rstd[i] - s) / s);
            for (int c = 0; c < C; c++) {
                double n = (xi[c] - m) * s, dn = (double)w[c] * di[c];
                want[(size_t)i * C + c] = dinp1[(size_t)i * C + c] + (dn - sd / C - n * sdn / C) * s;
            }
        }
        e[3] = max_scaled_diff(dinp, want, (int)nc);
        e[4] = max_scaled_diff(dw, wdw, C);
        e[5] = max_scaled_diff(db, wdb, C);
        keep_worst(worst, e, 6);
        int saved = set_threads(1);
        layernorm_forward(out1, mean1, rstd1, x, w, b, N, C);
        layernorm_backward(dinp1, dw1, db1, dout, x, w, mean1, rstd1, N, C);
        set_threads(saved);
        bad_threads += memcmp(out, out1, sizeof(float) * nc) || memcmp(mean, mean1, sizeof(float) * 2 * N) ||
                       memcmp(dinp, dinp1, sizeof(float) * nc) || memcmp(dw, dw1, sizeof(float) * 2 * C);
        free(buf); free(want);
    }
    test_result(worst[0] < 2e-6 && worst[1] < 1e-6 && worst[2] < 1e-6 && worst[3] < 2e-6 && worst[4] < 2e-6 &&
                    worst[5] < 1e-6 && bad_threads == 0,
                "LayerNorm forward (out %.1e, mean %.1e, rstd %.1e) and backward (dinp %.1e, dweight %.1e, dbias %.1e) "
                "against double at C = 2 to %d (%s); 1 and %d threads the same bits", worst[0], worst[1], worst[2],
                worst[3], worst[4], worst[5], Cs[5], VEC_ISA, omp_threads());
}

// One head's causal attention in double, as cpu_layers.h's attention_head_forward/backward take it: Tq
// queries at positions pos0.. over the keys [0, pos0 + Tq), rows ld apart (q, dout: their own; k, v: ldkv);
// p (Tq x n), lse, out (Tq x hs); dq (Tq x hs), dk and dv (n x hs) added to.
static void reference_attention_head(const float *q, size_t ldq, const float *k, const float *v, size_t ldkv,
                                     const float *dout, size_t ldo, int pos0, int Tq, int hs, double *p, double *lse,
                                     double *out, double *dq, double *dk, double *dv) {
    int n = pos0 + Tq;
    double scale = 1.0 / sqrt((double)hs);
    double *dp = (double *)mallocCheck(sizeof(double) * n);
    for (int t = 0; t < Tq; t++) {
        double *pr = p + (size_t)t * n, mx = -INFINITY, sum = 0, dot = 0;
        int seen = pos0 + t + 1;
        for (int u = 0; u < n; u++) {
            double s = 0;
            for (int d = 0; d < hs; d++) s += (double)q[t * ldq + d] * k[u * ldkv + d];
            pr[u] = u < seen ? s * scale : -INFINITY;
            mx = pr[u] > mx ? pr[u] : mx;
        }
        for (int u = 0; u < n; u++) sum += pr[u] = exp(pr[u] - mx);
        for (int u = 0; u < n; u++) pr[u] /= sum;
        lse[t] = mx + log(sum);
        for (int d = 0; d < hs; d++) {
            double o = 0;
            for (int u = 0; u < n; u++) o += pr[u] * v[u * ldkv + d];
            out[t * hs + d] = o;
        }
        for (int u = 0; u < n; u++) {
            dp[u] = 0;
            for (int d = 0; d < hs; d++) dp[u] += (double)dout[t * ldo + d] * v[u * ldkv + d];
            dot += pr[u] * dp[u];
        }
        for (int u = 0; u < n; u++) {
            double ds = pr[u] * (dp[u] - dot);
            for (int d = 0; d < hs; d++) {
                dq[t * hs + d] += ds * k[u * ldkv + d] * scale;
                dk[u * hs + d] += ds * q[t * ldq + d] * scale;
                dv[u * hs + d] += pr[u] * dout[t * ldo + d];
            }
        }
    }
    free(dp);
}

// max |got[i * ld + j] - want[i * cols + j]| / max(|want|, 1) over rows x cols
static double max_scaled_diff_2d(const float *got, size_t ld, const double *want, int rows, int cols) {
    double worst = 0;
    for (int i = 0; i < rows; i++) {
        double e = max_scaled_diff(got + (size_t)i * ld, want + (size_t)i * cols, cols);
        if (!(e <= worst)) worst = e;
    }
    return worst;
}

// attention_forward/backward (B = 2, NH = 2) against the double reference at lengths T around the
// query block (ATT_MR) and the tile width (ATT_CW), T = 1 and head sizes below, at and past a vector: the
// probabilities (exactly zero above the diagonal), lse, out, dq, dk, dv; 1 and 2 threads give the same
// bits. Then the head kernel as context parallelism runs it (queries offset by pos0 against all the
// keys before them, dk and dv added to what they held).
static void test_attention(void) {
    const int Ts[] = {1, 2, ATT_MR - 1, ATT_MR + 1, ATT_CW + 3, 2 * ATT_CW + ATT_MR + 1};
    const int hss[] = {3, VEC_LANES, 24, ATT_CW};  // (ATT_CW: V, K, Q and dout read in place)
    const int B = 2, NH = 2;
    double worst[6] = {0};  // p, lse, out, dq, dk, dv
    int bad_mask = 0, bad_threads = 0, runs = 0;
    Rng rng;
    rng_seed(&rng, 21);
    for (size_t ti = 0; ti < sizeof(Ts) / sizeof(Ts[0]); ti++)
        for (size_t hi = 0; hi < sizeof(hss) / sizeof(hss[0]); hi++) {
            int T = Ts[ti], hs = hss[hi], C = NH * hs;
            size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, natt = (size_t)B * NH * T * T;
            float *qkv = (float *)mallocCheck(sizeof(float) * nqkv), *dqkv = (float *)mallocCheck(sizeof(float) * nqkv);
            float *dqkv1 = (float *)mallocCheck(sizeof(float) * nqkv), *out = (float *)mallocCheck(sizeof(float) * nout);
            float *dout = (float *)mallocCheck(sizeof(float) * nout), *out1 = (float *)mallocCheck(sizeof(float) * nout);
            float *att = (float *)mallocCheck(sizeof(float) * natt), *att1 = (float *)mallocCheck(sizeof(float) * natt);
            float *lse = (float *)mallocCheck(sizeof(float) * B * NH * T);
            float *scratch = (float *)mallocCheck(sizeof(float) * omp_threads() * T * T);
            rng_normal_fill(&rng, qkv, (int64_t)nqkv, 1.5f);
            rng_normal_fill(&rng, dout, (int64_t)nout, 1.0f);
            attention_forward(out, att, lse, qkv, B, T, C, NH);
            attention_backward(dqkv, scratch, dout, qkv, att, B, T, C, NH);
            double *p = (double *)mallocCheck(sizeof(double) * T * T), *l = (double *)mallocCheck(sizeof(double) * T);
            double *o = (double *)mallocCheck(sizeof(double) * T * hs), *g = (double *)mallocCheck(sizeof(double) * 3 * T * hs);
            for (int b = 0; b < B; b++)
                for (int h = 0; h < NH; h++) {
                    size_t bh = (size_t)b * NH + h, qo = qkv_head_offset(b, h, T, C, NH), oo = (size_t)b * T * C + h * hs;
                    memset(g, 0, sizeof(double) * 3 * T * hs);
                    reference_attention_head(qkv + qo, 3 * C, qkv + qo + C, qkv + qo + 2 * C, 3 * C, dout + oo, C, 0, T,
                                             hs, p, l, o, g, g + T * hs, g + 2 * T * hs);
                    const float *ab = att + bh * T * T;
                    for (int t = 0; t < T; t++)
                        for (int u = t + 1; u < T; u++) bad_mask += ab[(size_t)t * T + u] != 0.0f;
                    double e[6] = {max_scaled_diff(ab, p, T * T), max_scaled_diff(lse + bh * T, l, T),
                                   max_scaled_diff_2d(out + oo, C, o, T, hs)};
                    for (int j = 0; j < 3; j++) e[3 + j] = max_scaled_diff_2d(dqkv + qo + j * C, 3 * C, g + j * T * hs, T, hs);
                    keep_worst(worst, e, 6);
                }
            int saved = set_threads(1);
            attention_forward(out1, att1, NULL, qkv, B, T, C, NH);
            attention_backward(dqkv1, scratch, dout, qkv, att1, B, T, C, NH);
            set_threads(saved);
            bad_threads += memcmp(out, out1, sizeof(float) * nout) || memcmp(att, att1, sizeof(float) * natt) ||
                           memcmp(dqkv, dqkv1, sizeof(float) * nqkv);
            runs++;
            free(qkv); free(dqkv); free(dqkv1); free(out); free(dout); free(out1); free(att); free(att1); free(lse);
            free(scratch); free(p); free(l); free(o); free(g);
        }
    double fwd = fmax(worst[0], fmax(worst[1], worst[2])), bwd = fmax(worst[3], fmax(worst[4], worst[5]));
    test_result(fwd < 1e-5 && bwd < 2e-5 && bad_mask == 0 && bad_threads == 0,
                "attention forward (probabilities %.1e, lse %.1e, out %.1e) and backward (dq %.1e, dk %.1e, dv %.1e) "
                "against double on %d shapes (T = 1 to %d, hs 3, %d, 24 and %d: operands read in place at whole tiles, "
                "%d-row query blocks, %d-column tiles); zero above the diagonal; 1 and %d threads the same bits",
                worst[0], worst[1], worst[2], worst[3], worst[4], worst[5], runs, Ts[5], VEC_LANES, ATT_CW, ATT_MR,
                ATT_CW, omp_threads());

    // context parallel's use: Tq queries at pos0.. over pos0 + Tq keys; rows wider than the head
    const int pos0 = 2 * ATT_MR + 3, Tq = ATT_MR + 2, n = pos0 + Tq, hs = 5, ld = 11;
    float *q = (float *)mallocCheck(sizeof(float) * Tq * ld), *kv = (float *)mallocCheck(sizeof(float) * n * 2 * ld);
    float *dO = (float *)mallocCheck(sizeof(float) * Tq * ld), *out = (float *)mallocCheck(sizeof(float) * Tq * ld);
    float *pr = (float *)mallocCheck(sizeof(float) * Tq * (n + 3)), *dq = (float *)mallocCheck(sizeof(float) * Tq * ld);
    float *dkv = (float *)mallocCheck(sizeof(float) * n * 2 * ld), *ds = (float *)mallocCheck(sizeof(float) * Tq * n);
    float *work = (float *)mallocCheck(sizeof(float) * attention_work_floats(n, hs));
    rng_normal_fill(&rng, q, Tq * ld, 1.5f);
    rng_normal_fill(&rng, kv, n * 2 * ld, 1.5f);
    rng_normal_fill(&rng, dO, Tq * ld, 1.0f);
    rng_normal_fill(&rng, dkv, n * 2 * ld, 1.0f);
    double *p = (double *)mallocCheck(sizeof(double) * Tq * n), l[ATT_MR + 2], o[(ATT_MR + 2) * 5];
    double *g = (double *)callocCheck((size_t)(Tq + 2 * n) * hs, sizeof(double));
    for (int u = 0; u < n; u++)
        for (int d = 0; d < hs; d++) {  // (dk and dv start from what dkv holds)
            g[(Tq + u) * hs + d] = dkv[(size_t)u * 2 * ld + d];
            g[(Tq + n + u) * hs + d] = dkv[(size_t)u * 2 * ld + 6 + d];
        }
    reference_attention_head(q, ld, kv, kv + 6, 2 * ld, dO, ld, pos0, Tq, hs, p, l, o, g, g + Tq * hs, g + (Tq + n) * hs);
    float scale = 1.0f / sqrtf((float)hs);
    attention_head_forward(out, ld, pr, n + 3, n + 3, NULL, q, ld, kv, kv + 6, 2 * ld, pos0, Tq, hs, scale, work);
    attention_head_backward(dq, ld, dkv, dkv + 6, 2 * ld, 1, ds, n, pr, n + 3, dO, ld, q, ld, kv, kv + 6, 2 * ld, pos0,
                            Tq, hs, scale, work);
    double e = max_scaled_diff_2d(pr, n + 3, p, Tq, n);
    e = fmax(e, max_scaled_diff_2d(out, ld, o, Tq, hs));
    e = fmax(e, max_scaled_diff_2d(dq, ld, g, Tq, hs));
    e = fmax(e, max_scaled_diff_2d(dkv, 2 * ld, g + Tq * hs, n, hs));
    e = fmax(e, max_scaled_diff_2d(dkv + 6, 2 * ld, g + (Tq + n) * hs, n, hs));
    int zero_tail = 1;
    for (int t = 0; t < Tq; t++)
        for (int u = n; u < n + 3; u++) zero_tail = zero_tail && pr[(size_t)t * (n + 3) + u] == 0.0f;
    test_result(e < 1e-5 && zero_tail, "attention head with its queries at %d.. over %d keys (context parallel's): "
                "probabilities, out, dq and dk, dv added to against double (%.1e)", pos0, n, e);
    free(q); free(kv); free(dO); free(out); free(pr); free(dq); free(dkv); free(ds); free(work); free(p); free(g);
}

// The global gradient norm's sum of squares over several of its parallel
// blocks: float64 accuracy and the same bits on 1 and 2 threads.
static void test_sum_of_squares(void) {
    const int64_t n = 3 * (1 << 16) + 12345;
    float *g = (float *)mallocCheck(sizeof(float) * (size_t)(n + 1));
    Rng rng;
    rng_seed(&rng, 3);
    rng_normal_fill(&rng, g, n + 1, 1e-2f);
    const float *gm = g + 1;  // misaligned
    double want = 0;
    for (int64_t i = 0; i < n; i++) want += (double)gm[i] * gm[i];
    double got = sum_of_squares(gm, n);
    int saved = set_threads(1);
    double got1 = sum_of_squares(gm, n);
    set_threads(saved);
    double e = fabs(got - want) / want;
    test_result(e < 1e-7 && got == got1, "gradient norm's sum of squares: relative error %.1e vs float64, 1 and %d threads equal",
                e, omp_threads());
    free(g);
}

// adamw_update_staged over [lo, hi) of a model's layout (several tensors, decay and not, over
// several staging chunks; lo, hi and the staging misaligned; gradients indexed from lo and zeroed
// as read) against adamw_update_range and then ckpt_stage.h's copy: the same weights, moments,
// gradients, staged bytes and chunk CRC32Cs, bit for bit, and nothing outside [lo, hi) touched.
// Then adamw_update_range over [lo, hi) cut into pieces of 1 to 4099 elements (as ZeRO shards cut
// it), against the whole: each element's arithmetic must not depend on where a vector loop starts.
static void test_adamw_staged(void) {
    GPTConfig cfg = {64, 1000, 1024, 2, 2, 192};
    ParamLayout pl;
    param_layout_init(&pl, &cfg);
    const int64_t n = pl.num_elements, lo = 12345, hi = n - 777, len = hi - lo, chunks = ckpt_stage_chunks(len);
    float *buf[3][4];  // (run, {params, grads, m, v}; run 2 keeps the start)
    Rng rng;
    rng_seed(&rng, 5);
    for (int k = 0; k < 4; k++) {
        buf[0][k] = (float *)mallocCheck(sizeof(float) * (size_t)n);
        rng_normal_fill(&rng, buf[0][k], n, k == 3 ? 1e-3f : 1e-1f);
        if (k == 3)
            for (int64_t i = 0; i < n; i++) buf[0][k][i] = fabsf(buf[0][k][i]);
        for (int r = 1; r < 3; r++) {
            buf[r][k] = (float *)mallocCheck(sizeof(float) * (size_t)n);
            memcpy(buf[r][k], buf[0][k], sizeof(float) * (size_t)n);
        }
    }
    float *staged[2], *mine[2];
    uint32_t *crcs[2];
    for (int r = 0; r < 2; r++) {
        mine[r] = (float *)callocCheck((size_t)(3 * len + 1), sizeof(float));
        staged[r] = mine[r] + 1;  // misaligned
        crcs[r] = (uint32_t *)callocCheck((size_t)chunks, sizeof(uint32_t));
    }
    AdamWConfig ac = {3e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 3};
    int flags = ADAMW_GRADS_LOCAL | ADAMW_ZERO_GRADS;
    adamw_update_range(&pl, buf[0][0], buf[0][1] + lo, flags, buf[0][2] + lo, buf[0][3] + lo, lo, hi, &ac, 0.7f);
    const float *src[3] = {buf[0][0] + lo, buf[0][2] + lo, buf[0][3] + lo};
    for (int64_t k = 0; k < chunks; k++) ckpt_stage_chunk(staged[0], src, len, k, crcs[0]);
    adamw_update_staged(&pl, buf[1][0], buf[1][1] + lo, flags, buf[1][2] + lo, buf[1][3] + lo, lo, hi, &ac, 0.7f,
                        staged[1], crcs[1]);
    int same = memcmp(staged[0], staged[1], sizeof(float) * (size_t)(3 * len)) == 0 &&
               memcmp(crcs[0], crcs[1], sizeof(uint32_t) * (size_t)chunks) == 0;
    for (int k = 0; k < 4; k++) same = same && memcmp(buf[0][k], buf[1][k], sizeof(float) * (size_t)n) == 0;
    test_result(same && chunks >= 9, "AdamW staging a checkpoint in the update: the update and then the copy, to the bit "
                "(%lld elements, %lld chunks, CRC32Cs too)", (long long)len, (long long)chunks);

    for (int k = 0; k < 4; k++) memcpy(buf[1][k], buf[2][k], sizeof(float) * (size_t)n);  // (the start again)
    static const int64_t pieces[] = {1, 5, 13, 31, 100, 1000, 4099};
    int64_t calls = 0;
    for (int64_t a = lo, b; a < hi; a = b, calls++) {
        b = a + pieces[calls % 7] < hi ? a + pieces[calls % 7] : hi;
        adamw_update_range(&pl, buf[1][0], buf[1][1] + a, flags, buf[1][2] + a, buf[1][3] + a, a, b, &ac, 0.7f);
    }
    same = 1;
    for (int k = 0; k < 4; k++) same = same && memcmp(buf[0][k], buf[1][k], sizeof(float) * (size_t)n) == 0;
    test_result(same, "AdamW over %lld pieces of 1 to 4099 elements equals the update of the whole range, to the bit",
                (long long)calls);
    for (int r = 0; r < 3; r++)
        for (int k = 0; k < 4; k++) free(buf[r][k]);
    for (int r = 0; r < 2; r++) {
        free(mine[r]);
        free(crcs[r]);
    }
    param_layout_free(&pl);
}

// alignedMallocCheck: a buffer of 2 MB or more (the activations) starts on a 2 MB boundary and its
// mapping carries the huge-page advice (smaps' VmFlags "hg"); a smaller one is 64-byte aligned only.
// Skipped where the kernel has no transparent huge pages (the advice is then refused, harmlessly).
static void test_huge_page_buffers(void) {
    FILE *smaps = access("/sys/kernel/mm/transparent_hugepage/enabled", F_OK) == 0 ? fopen("/proc/self/smaps", "r")
                                                                                 : NULL;
    float *big = (float *)alignedMallocCheck(HUGE_PAGE_BYTES + 4096), *small = (float *)alignedMallocCheck(4096);
    if (!smaps) {
        test_skip("huge-page buffers: no transparent huge pages or no /proc/self/smaps here");
        free(big); free(small);
        return;
    }
    char line[512];
    int in_big = 0, advised = 0;
    while (fgets(line, sizeof(line), smaps)) {
        unsigned long lo, hi;
        char perms[8];
        if (sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) == 3)  // a mapping's first line
            in_big = lo <= (uintptr_t)big && (uintptr_t)big < hi;
        else if (in_big && strncmp(line, "VmFlags:", 8) == 0)
            advised = strstr(line, " hg") != NULL;
    }
    fclose(smaps);
    test_result((uintptr_t)big % HUGE_PAGE_BYTES == 0 && advised && (uintptr_t)small % 64 == 0,
                "alignedMallocCheck: 2 MB aligned and advised for huge pages from 2 MB (%s), 64-byte aligned below",
                advised ? "advised" : "not advised");
    free(big);
    free(small);
}

int main(void) {
    printf("native kernels: %s, %d-lane vectors (%s)\n", MATMUL_NATIVE_KERNEL, VEC_LANES, VEC_ISA);
    test_matmul_native();
    test_matmul_order();
    test_vec_reductions();
    test_vec_elementwise();
    test_layernorm();
    test_linear_gelu_backward();
    test_sum_of_squares();
    test_attention();
    test_adamw_staged();
    test_huge_page_buffers();
    return test_exit_code();
}
