// rand.h: a small portable random number generator (xoshiro256** seeded by
// splitmix64), so that weight init, sampling and data shuffling give the same
// numbers on every machine and compiler. The state is a plain struct that a
// checkpoint can store verbatim.
#ifndef LLMC_RAND_H
#define LLMC_RAND_H

#include <math.h>
#include <stdint.h>

typedef struct { uint64_t s[4]; } Rng;

static inline uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static inline void rng_seed(Rng *r, uint64_t seed) {
    uint64_t x = seed;
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&x);
}

static inline uint64_t rng_rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static inline uint64_t rng_next_u64(Rng *r) {
    uint64_t *s = r->s;
    uint64_t result = rng_rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0]; s[3] ^= s[1]; s[1] ^= s[2]; s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rng_rotl(s[3], 45);
    return result;
}

// uniform in [0, 1) with 24 random bits (exactly representable as float)
static inline float rng_uniform(Rng *r) { return (float)(rng_next_u64(r) >> 40) * (1.0f / 16777216.0f); }

// uniform integer in [0, n), n > 0 (Lemire's nearly-divisionless method, unbiased)
static inline uint64_t rng_below(Rng *r, uint64_t n) {
    for (;;) {
        uint64_t x = rng_next_u64(r);
        __uint128_t m = (__uint128_t)x * n;
        uint64_t low = (uint64_t)m;
        if (low >= n || low >= (-n) % n) return (uint64_t)(m >> 64);
    }
}

// Fills out[0..n) with normal(0, std) values (Box-Muller, in pairs).
static inline void rng_normal_fill(Rng *r, float *out, int64_t n, float std) {
    for (int64_t i = 0; i < n; i += 2) {
        double u1 = ((double)(rng_next_u64(r) >> 11) + 1.0) * (1.0 / 9007199254740992.0);  // (0, 1]
        double u2 = (double)(rng_next_u64(r) >> 11) * (1.0 / 9007199254740992.0);
        double rad = sqrt(-2.0 * log(u1));
        out[i] = (float)(rad * cos(2.0 * M_PI * u2)) * std;
        if (i + 1 < n) out[i + 1] = (float)(rad * sin(2.0 * M_PI * u2)) * std;
    }
}

// Advances r past what rng_normal_fill(r, out, n, std) draws.
static inline void rng_skip_normals(Rng *r, int64_t n) {
    for (int64_t i = 0; i < n; i += 2) {
        rng_next_u64(r);
        rng_next_u64(r);
    }
}

// In-place Fisher-Yates shuffle of idx[0..n).
static inline void rng_permute_u32(Rng *r, uint32_t *idx, uint64_t n) {
    for (uint64_t i = n; i > 1; i--) {
        uint64_t j = rng_below(r, i);
        uint32_t t = idx[i - 1]; idx[i - 1] = idx[j]; idx[j] = t;
    }
}

#endif  // LLMC_RAND_H
