// cpu_vec.h: explicitly vectorised (16-lane, GCC vector extensions) building
// blocks for the CPU kernels: exp, tanh, max, sums and sums of squares. The
// compiler does not vectorise floating-point reductions or libm calls without
// -ffast-math, which we do not use; these loops fix the reduction order
// instead (deterministic for a given length) and keep IEEE semantics
// elsewhere. exp has a relative error below 2e-7 on the range it is used on.
#ifndef LLMC_CPU_VEC_H
#define LLMC_CPU_VEC_H

#include <math.h>
#include <stdint.h>
#include <string.h>

typedef float vf16 __attribute__((vector_size(64), aligned(4), may_alias));  // loads and stores need no alignment
typedef int32_t vi16 __attribute__((vector_size(64), aligned(4), may_alias));

static inline vf16 vf16_load(const float *p) { return *(const vf16 *)p; }
static inline void vf16_store(float *p, vf16 v) { *(vf16 *)p = v; }
static inline vf16 vf16_set1(float x) { return (vf16){0} + x; }
// lanes of a where mask (all ones) else b
static inline vf16 vf16_select(vi16 mask, vf16 a, vf16 b) { return (vf16)(((vi16)a & mask) | ((vi16)b & ~mask)); }
static inline vf16 vf16_max(vf16 a, vf16 b) { return vf16_select(a > b, a, b); }
static inline float vf16_hsum(vf16 v) {
    float s = 0.0f;
    for (int i = 0; i < 16; i++) s += v[i];
    return s;
}

// exp(x) for 16 lanes: x = n ln2 + r, |r| <= ln2/2, e^r by a degree-6
// polynomial, 2^n through the exponent bits. Inputs are clamped to [-87, 88].
static inline vf16 vf16_exp(vf16 x) {
    const vf16 lo = vf16_set1(-87.0f), hi = vf16_set1(88.0f);
    x = vf16_select(x < lo, lo, x);
    x = vf16_select(x > hi, hi, x);
    const vf16 magic = vf16_set1(12582912.0f);  // 1.5 * 2^23: adding it rounds to an integer
    vf16 n = (x * 1.44269504088896341f + magic) - magic;
    vf16 r = x - n * 0.693145751953125f - n * 1.428606765330187e-06f;
    vf16 p = vf16_set1(1.0f / 720.0f);
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    vi16 bits = (__builtin_convertvector(n, vi16) + 127) << 23;
    return p * (vf16)bits;
}

static inline float scalar_exp(float x) {
    float lanes[16] = {x};
    vf16 v = vf16_exp(vf16_load(lanes));
    return v[0];
}

// tanh(a) = 1 - 2 / (1 + exp(2a)): exact limits +-1, absolute error ~1e-7.
static inline vf16 vf16_tanh(vf16 a) { return 1.0f - 2.0f / (1.0f + vf16_exp(a + a)); }

// max of x[0..n), n >= 1
static inline float vec_max(const float *x, int n) {
    int i = 0;
    float m = x[0];
    if (n >= 16) {
        vf16 acc = vf16_load(x);
        for (i = 16; i + 16 <= n; i += 16) acc = vf16_max(acc, vf16_load(x + i));
        for (int j = 0; j < 16; j++) m = acc[j] > m ? acc[j] : m;
    }
    for (; i < n; i++) m = x[i] > m ? x[i] : m;
    return m;
}

// sum of exp(x[i] - shift), and with store, x[i] <- exp(x[i] - shift) * scale
static inline float vec_exp_sum(float *x, int n, float shift, float scale, int store) {
    vf16 acc = vf16_set1(0.0f);
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        vf16 e = vf16_exp(vf16_load(x + i) - shift);
        acc += e;
        if (store) vf16_store(x + i, e * scale);
    }
    float s = vf16_hsum(acc);
    for (; i < n; i++) {
        float e = scalar_exp(x[i] - shift);
        s += e;
        if (store) x[i] = e * scale;
    }
    return s;
}

// sum of x[i] * y[i]
static inline float vec_dot(const float *x, const float *y, int n) {
    vf16 acc = vf16_set1(0.0f);
    int i = 0;
    for (; i + 16 <= n; i += 16) acc += vf16_load(x + i) * vf16_load(y + i);
    float s = vf16_hsum(acc);
    for (; i < n; i++) s += x[i] * y[i];
    return s;
}

static inline float vec_sum(const float *x, int n) {
    vf16 acc = vf16_set1(0.0f);
    int i = 0;
    for (; i + 16 <= n; i += 16) acc += vf16_load(x + i);
    float s = vf16_hsum(acc);
    for (; i < n; i++) s += x[i];
    return s;
}

// sum of squares in double: fp32 lanes over blocks of 4096, blocks summed in double
static inline double vec_sum_squares(const float *x, int64_t n) {
    double total = 0.0;
    for (int64_t b = 0; b < n; b += 4096) {
        int len = n - b < 4096 ? (int)(n - b) : 4096;
        total += vec_dot(x + b, x + b, len);
    }
    return total;
}

#endif  // LLMC_CPU_VEC_H
