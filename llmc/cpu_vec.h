// cpu_vec.h: explicitly vectorised (GCC vector extensions) building blocks for
// the CPU kernels: exp, max, sums, dot products and a double-precision
// sum of squares. The vector is as wide as one register of the instruction set
// the build targets (VEC_LANES floats: 16 with AVX-512, 8 with AVX2 + FMA, 4
// with NEON or the portable fallback, which is SSE2 on x86-64), so every value
// lives in a register; a type wider than the hardware's would be split into
// pieces and spilled. The compiler does not vectorise floating-point
// reductions or libm calls without -ffast-math, which we do not use; these
// loops fix the reduction order instead (deterministic for a given build and
// length; it depends on VEC_LANES) and keep IEEE semantics elsewhere. exp has
// a relative error below 2.5e-7 on [-87, 88] (tests/test_cpu_kernels.c).
#ifndef LLMC_CPU_VEC_H
#define LLMC_CPU_VEC_H

#include <math.h>
#include <stdint.h>
#include <string.h>
#if defined(__AVX512F__)
#include <immintrin.h>  // (vf_exp's min, max and scalef)
#elif defined(__SSE__)
#include <xmmintrin.h>
#endif

#if defined(__AVX512F__)
#define VEC_LANES 16
#define VEC_ISA "avx512"
#elif defined(__AVX2__) && defined(__FMA__)
#define VEC_LANES 8
#define VEC_ISA "avx2"
#elif defined(__ARM_NEON)
#define VEC_LANES 4
#define VEC_ISA "neon"
#else
#define VEC_LANES 4
#define VEC_ISA "portable"
#endif

// VEC_LANES floats (int32 lanes for masks and exponent bits); loads and stores need no alignment
typedef float vf __attribute__((vector_size(4 * VEC_LANES), aligned(4), may_alias));
typedef int32_t vi __attribute__((vector_size(4 * VEC_LANES), aligned(4), may_alias));
// VEC_LANES / 2 doubles: one register
typedef double vd __attribute__((vector_size(4 * VEC_LANES), aligned(4), may_alias));

static inline vf vf_load(const float *p) { return *(const vf *)p; }

// dst[0..n) = src[0..n), with streaming stores where the CPU has them
// (x86's): the copy goes to memory without reading its lines first or
// evicting anything from the caches (a copy not read again soon: a
// checkpoint's staging). vec_stream_fence() makes them visible to other
// threads in order (x86's sfence) before a thread hands the copy on.
static inline void vec_copy_streaming(float *dst, const float *src, int64_t n) {
#if defined(__SSE__)
    int64_t i = 0;
    for (; i < n && ((uintptr_t)(dst + i) & 15); i++) dst[i] = src[i];
    for (; i + 4 <= n; i += 4) _mm_stream_ps(dst + i, _mm_loadu_ps(src + i));
    for (; i < n; i++) dst[i] = src[i];
#else
    memcpy(dst, src, sizeof(float) * (size_t)n);
#endif
}
static inline void vec_stream_fence(void) {
#if defined(__SSE__)
    _mm_sfence();
#endif
}
static inline void vf_store(float *p, vf v) { *(vf *)p = v; }
// x in every lane: a broadcast (a "0 + x" idiom would be an extra add, since 0 + -0 is +0)
static inline vf vf_set1(float x) {
#if VEC_LANES == 16
    return (vf){x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x};
#elif VEC_LANES == 8
    return (vf){x, x, x, x, x, x, x, x};
#else
    return (vf){x, x, x, x};
#endif
}
// 0, 1, ..., VEC_LANES - 1: a constant (shuffle indices and lane masks fold from it)
static inline vi vi_lane_ids(void) {
#if VEC_LANES == 16
    return (vi){0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
#elif VEC_LANES == 8
    return (vi){0, 1, 2, 3, 4, 5, 6, 7};
#else
    return (vi){0, 1, 2, 3};
#endif
}
// lanes of a where mask (all ones) else b
static inline vf vf_select(vi mask, vf a, vf b) { return (vf)(((vi)a & mask) | ((vi)b & ~mask)); }
static inline vf vf_max(vf a, vf b) { return vf_select(a > b, a, b); }
// lanes summed in lane order
static inline float vf_hsum(vf v) {
    float s = 0.0f;
    for (int i = 0; i < VEC_LANES; i++) s += v[i];
    return s;
}

// One round of vf_transpose_square: the off-diagonal s x s blocks of every 2s x 2s block of the
// square v[0..VEC_LANES) (one row a vector) swapped: lane j of row i, bit s set in j and clear in i,
// with lane j - s of row i + s.
static inline void vf_transpose_round(vf *v, int s) {
    const vi lane = vi_lane_ids();
    // two-source shuffle indices (VEC_LANES + j: lane j of the second): row i takes lane j - s of
    // row i + s where bit s of j is set; row i + s takes lane j + s of row i where it is clear
    vi second = (lane & s) != 0;  // (all ones where bit s is set)
    vi lo = lane + (second & (VEC_LANES - s)), hi = lane + s + (second & (VEC_LANES - s));
    for (int i = 0; i < VEC_LANES; i++) {
        if (i & s) continue;
        vf a = v[i], b = v[i + s];
        v[i] = __builtin_shuffle(a, b, lo);
        v[i + s] = __builtin_shuffle(a, b, hi);
    }
}

// v[0..VEC_LANES) (a square of VEC_LANES x VEC_LANES floats, one row a vector) transposed in place,
// in log2(VEC_LANES) rounds, written out so that each round's s is a constant: the compiler unrolls
// its loop, the shuffles' indices fold to constants and v stays in registers.
static inline void vf_transpose_square(vf *v) {
#if VEC_LANES == 16
    vf_transpose_round(v, 8);
#endif
#if VEC_LANES >= 8
    vf_transpose_round(v, 4);
#endif
    vf_transpose_round(v, 2);
    vf_transpose_round(v, 1);
}

// v with lane i taken from lane i ^ s (s a power of two below VEC_LANES): a step of a tree reduction.
// (The indices from a constant vector: built lane by lane, GCC assembled them with masked moves at
// every call, a third of a short softmax row's time.)
static inline vf vf_swap_lanes(vf v, int s) { return __builtin_shuffle(v, vi_lane_ids() ^ s); }
// max of the lanes, and their sum by halves (lane i and lane i + VEC_LANES/2 first, and so on):
// log2(VEC_LANES) dependent steps where vf_hsum takes VEC_LANES - 1 (another order, as deterministic)
static inline float vf_hmax(vf v) {
    for (int s = VEC_LANES / 2; s > 0; s /= 2) v = vf_max(v, vf_swap_lanes(v, s));
    return v[0];
}
static inline float vf_hsum_tree(vf v) {
    for (int s = VEC_LANES / 2; s > 0; s /= 2) v += vf_swap_lanes(v, s);
    return v[0];
}

// exp(x) lane by lane: x = n ln2 + r, |r| <= ln2/2, e^r by a degree-6
// polynomial, then times 2^n. Inputs above 88 give e^88; NaN stays NaN.
// With AVX-512, vscalefps does the times 2^n in one instruction and min/max
// clamp the input (the bits of the other builds where the result is a normal
// float, on [-87, 88]; below -87 the true value, down to 0 past -104). Without
// it, 2^n goes in through the exponent bits (so n may not fall below the
// smallest normal's, -126: inputs below -87 give e^-87), after comparisons.
static inline vf vf_exp(vf x) {
#if defined(__AVX512F__)
    // (max and min return their second operand when one is NaN: x itself; the zero-masked forms with
    // every lane set, as the plain ones' undefined passthrough fails g++ 12's -Werror=uninitialized)
    const __mmask16 all = (__mmask16)-1;
    const __m512 above = _mm512_maskz_max_ps(all, _mm512_set1_ps(-104.0f), (__m512)x);
    x = (vf)_mm512_maskz_min_ps(all, _mm512_set1_ps(88.0f), above);
#else
    const vf lo = vf_set1(-87.0f), hi = vf_set1(88.0f);
    x = vf_select(x < lo, lo, vf_select(x > hi, hi, x));  // (both tests on the input: a shorter chain)
#endif
    const vf magic = vf_set1(12582912.0f);  // 1.5 * 2^23: adding it rounds to an integer
    vf n = (x * 1.44269504088896341f + magic) - magic;
    vf r = x - n * 0.693145751953125f - n * 1.428606765330187e-06f;
    vf p = vf_set1(1.0f / 720.0f);
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
#if defined(__AVX512F__)
    return (vf)_mm512_maskz_scalef_ps(all, (__m512)p, (__m512)n);
#else
    vi bits = (__builtin_convertvector(n, vi) + 127) << 23;
    return p * (vf)bits;
#endif
}

static inline float scalar_exp(float x) {
    float lanes[VEC_LANES] = {x};
    vf v = vf_exp(vf_load(lanes));
    return v[0];
}

// max of x[0..n), n >= 1
static inline float vec_max(const float *x, int n) {
    int i = 0;
    float m = x[0];
    if (n >= VEC_LANES) {
        vf acc = vf_load(x);
        for (i = VEC_LANES; i + VEC_LANES <= n; i += VEC_LANES) acc = vf_max(acc, vf_load(x + i));
        for (int j = 0; j < VEC_LANES; j++) m = acc[j] > m ? acc[j] : m;
    }
    for (; i < n; i++) m = x[i] > m ? x[i] : m;
    return m;
}

// sum of exp(x[i] - shift), and with store, x[i] <- exp(x[i] - shift) * scale
static inline float vec_exp_sum(float *x, int n, float shift, float scale, int store) {
    vf acc = vf_set1(0.0f);
    int i = 0;
    for (; i + VEC_LANES <= n; i += VEC_LANES) {
        vf e = vf_exp(vf_load(x + i) - shift);
        acc += e;
        if (store) vf_store(x + i, e * scale);
    }
    float s = vf_hsum(acc);
    for (; i < n; i++) {
        float e = scalar_exp(x[i] - shift);
        s += e;
        if (store) x[i] = e * scale;
    }
    return s;
}

// sum of x[i] * y[i]
static inline float vec_dot(const float *x, const float *y, int n) {
    vf acc = vf_set1(0.0f);
    int i = 0;
    for (; i + VEC_LANES <= n; i += VEC_LANES) acc += vf_load(x + i) * vf_load(y + i);
    float s = vf_hsum(acc);
    for (; i < n; i++) s += x[i] * y[i];
    return s;
}

static inline float vec_sum(const float *x, int n) {
    vf acc = vf_set1(0.0f);
    int i = 0;
    for (; i + VEC_LANES <= n; i += VEC_LANES) acc += vf_load(x + i);
    float s = vf_hsum(acc);
    for (; i < n; i++) s += x[i];
    return s;
}

// The low and high halves of v widened to double (vcvtps2pd; GCC 12 splits
// __builtin_convertvector of the same lanes into narrower pieces)
static inline vd vd_low(vf v) {
#if VEC_LANES == 16
    return (vd){v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]};
#elif VEC_LANES == 8
    return (vd){v[0], v[1], v[2], v[3]};
#else
    return (vd){v[0], v[1]};
#endif
}
static inline vd vd_high(vf v) {
#if VEC_LANES == 16
    return (vd){v[8], v[9], v[10], v[11], v[12], v[13], v[14], v[15]};
#elif VEC_LANES == 8
    return (vd){v[4], v[5], v[6], v[7]};
#else
    return (vd){v[2], v[3]};
#endif
}

// sum of x[i]^2, accumulated in double. Each lane first adds 16 squares in
// fp32 (two accumulators of 8), then that partial is widened and added in
// double: relative error ~1e-8 (16 fp32 roundings per partial at most, which
// average out over the sum; the test asks for 1e-7), and per element one load
// and one FMA, so one core reads memory as fast as a plain sum would (a
// convert per element, the exact alternative, costs a quarter of that).
static inline double vec_sum_squares(const float *x, int64_t n) {
    enum { CHUNK = 16 * VEC_LANES };
    vd acc_lo = {0}, acc_hi = {0};
    int64_t i = 0;
    for (; i + CHUNK <= n; i += CHUNK) {
        vf f0 = vf_set1(0.0f), f1 = vf_set1(0.0f);
        for (int j = 0; j < CHUNK; j += 2 * VEC_LANES) {
            vf v0 = vf_load(x + i + j), v1 = vf_load(x + i + j + VEC_LANES);
            f0 += v0 * v0;
            f1 += v1 * v1;
        }
        vf f = f0 + f1;
        acc_lo += vd_low(f);
        acc_hi += vd_high(f);
    }
    vd acc = acc_lo + acc_hi;
    double s = 0.0;
    for (int j = 0; j < VEC_LANES / 2; j++) s += acc[j];
    for (; i < n; i++) s += (double)x[i] * x[i];
    return s;
}

#endif  // LLMC_CPU_VEC_H
