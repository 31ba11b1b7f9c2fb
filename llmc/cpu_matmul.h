// cpu_matmul.h: single-precision GEMM for the CPU trainer, row-major:
//   C (M, N) = alpha * op(A) (M, K) @ op(B) (K, N) + beta * C
// Two backends: OpenBLAS's cblas_sgemm (built with LLMC_BLAS) and our own
// packed, cache-blocked, OpenMP-parallel kernel with an 8x32 register tile
// written with GCC vector extensions (AVX-512 / AVX2 under -march=native).
// matmul_set_backend() picks one at run time; benchmarks compare both.
#ifndef LLMC_CPU_MATMUL_H
#define LLMC_CPU_MATMUL_H

#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#ifdef LLMC_BLAS
#include <cblas.h>
#endif

#include "utils.h"

typedef enum { MATMUL_NATIVE = 0, MATMUL_BLAS = 1 } MatmulBackend;

#ifdef LLMC_BLAS
#define MATMUL_PEAK_SOURCE "measured openblas sgemm"
#else
#define MATMUL_PEAK_SOURCE "measured native sgemm"
#endif

static MatmulBackend g_matmul_backend =
#ifdef LLMC_BLAS
    MATMUL_BLAS;
#else
    MATMUL_NATIVE;
#endif

// name: "auto", "blas" or "native". Asking for BLAS in a build without it is a usage error.
static inline void matmul_set_backend(const char *name) {
    if (strcmp(name, "native") == 0) { g_matmul_backend = MATMUL_NATIVE; return; }
#ifdef LLMC_BLAS
    g_matmul_backend = MATMUL_BLAS;
#else
    if (strcmp(name, "blas") == 0) die_usage("--matmul blas: this build has no BLAS (install libopenblas-dev and rebuild)");
    g_matmul_backend = MATMUL_NATIVE;
#endif
}

static inline const char *matmul_backend_name(void) {
    return g_matmul_backend == MATMUL_BLAS ? "openblas" : "native";
}

// ---------------------------------------------------------------------------
// native kernel

#define MM_MR 8     // rows of the register tile
#define MM_NR 32    // columns of the register tile (two 16-float vectors)
#define MM_KC 256   // depth of one packed panel
#define MM_MC 1024  // rows of A packed at once (MC x KC floats stay in L2)

typedef float mm_vec16 __attribute__((vector_size(64), aligned(4), may_alias));  // unaligned loads by dereference

// element (i, k) of op(A)
#define MM_A(i, k) (transA ? A[(size_t)(k) * lda + (i)] : A[(size_t)(i) * lda + (k)])

// Packs op(A)[i0:i0+rows, k0:k0+kc] (rows <= MR) as one MR-row strip: depth k -> MR floats.
static void mm_pack_a_strip(int transA, const float *A, int lda, int i0, int rows, int k0, int kc, float *d) {
    for (int k = 0; k < kc; k++) {
        for (int r = 0; r < rows; r++) d[k * MM_MR + r] = MM_A(i0 + r, k0 + k);
        for (int r = rows; r < MM_MR; r++) d[k * MM_MR + r] = 0.0f;
    }
}

// Packs op(B)[k0:k0+kc, j0:j0+nr] as one NR-column strip: depth k -> NR floats.
static void mm_pack_b_strip(int transB, const float *B, int ldb, int k0, int kc, int j0, int nr, float *dst) {
    if (!transB && nr == MM_NR) {
        for (int k = 0; k < kc; k++) memcpy(dst + k * MM_NR, B + (size_t)(k0 + k) * ldb + j0, sizeof(float) * MM_NR);
        return;
    }
    if (transB) {  // row j of B is column j of op(B): read it contiguously
        for (int c = 0; c < MM_NR; c++) {
            const float *src = B + (size_t)(j0 + c) * ldb + k0;
            if (c < nr) for (int k = 0; k < kc; k++) dst[k * MM_NR + c] = src[k];
            else for (int k = 0; k < kc; k++) dst[k * MM_NR + c] = 0.0f;
        }
        return;
    }
    for (int k = 0; k < kc; k++) {
        for (int c = 0; c < nr; c++) dst[k * MM_NR + c] = B[(size_t)(k0 + k) * ldb + j0 + c];
        for (int c = nr; c < MM_NR; c++) dst[k * MM_NR + c] = 0.0f;
    }
}

// acc (MR x NR) = Apanel (kc x MR) ^T @ Bstrip (kc x NR); then C tile = alpha*acc + beta*C.
// The 16 accumulators stay in registers (their address is never taken).
static void mm_micro(int kc, const float *ap, const float *bp, float *C, int ldc, int rows, int cols,
                     float alpha, float beta) {
    mm_vec16 acc[MM_MR][2];
    for (int r = 0; r < MM_MR; r++) acc[r][0] = acc[r][1] = (mm_vec16){0};
    for (int k = 0; k < kc; k++) {
        mm_vec16 b0 = *(const mm_vec16 *)(bp + k * MM_NR);
        mm_vec16 b1 = *(const mm_vec16 *)(bp + k * MM_NR + 16);
        const float *a = ap + k * MM_MR;
        for (int r = 0; r < MM_MR; r++) {
            mm_vec16 av = (mm_vec16){0} + a[r];
            acc[r][0] += av * b0;
            acc[r][1] += av * b1;
        }
    }
    for (int r = 0; r < rows; r++) {
        float *c = C + (size_t)r * ldc;
        if (cols == MM_NR) {
            mm_vec16 *c0 = (mm_vec16 *)c, *c1 = (mm_vec16 *)(c + 16);
            if (beta == 0.0f) { *c0 = alpha * acc[r][0]; *c1 = alpha * acc[r][1]; }
            else { *c0 = alpha * acc[r][0] + beta * *c0; *c1 = alpha * acc[r][1] + beta * *c1; }
            continue;
        }
        for (int j = 0; j < cols; j++) {
            float v = alpha * (j < 16 ? acc[r][0][j] : acc[r][1][j - 16]);
            c[j] = beta == 0.0f ? v : v + beta * c[j];
        }
    }
}

static void matmul_native(int transA, int transB, int M, int N, int K, float alpha, const float *A, int lda,
                          const float *B, int ldb, float beta, float *C, int ldc) {
    if (K == 0) {
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) C[(size_t)i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[(size_t)i * ldc + j];
        return;
    }
    int mc_max = M < MM_MC ? (int)round_up_i64(M, MM_MR) : MM_MC;
    int kc_max = K < MM_KC ? K : MM_KC;
    float *apack = (float *)alignedMallocCheck(sizeof(float) * (size_t)mc_max * kc_max);
    int n_strips = (int)ceil_div_i64(N, MM_NR);
    for (int k0 = 0; k0 < K; k0 += MM_KC) {
        int kc = K - k0 < MM_KC ? K - k0 : MM_KC;
        float beta_k = k0 == 0 ? beta : 1.0f;
        for (int i0 = 0; i0 < M; i0 += MM_MC) {
            int mc = M - i0 < MM_MC ? M - i0 : MM_MC;
#pragma omp parallel
            {
#pragma omp for schedule(static)
                for (int r0 = 0; r0 < mc; r0 += MM_MR)
                    mm_pack_a_strip(transA, A, lda, i0 + r0, mc - r0 < MM_MR ? mc - r0 : MM_MR, k0, kc,
                                    apack + (size_t)r0 * kc);
                float bpack[MM_KC * MM_NR] __attribute__((aligned(64)));
#pragma omp for schedule(static)
                for (int s = 0; s < n_strips; s++) {
                    int j0 = s * MM_NR;
                    int nr = N - j0 < MM_NR ? N - j0 : MM_NR;
                    mm_pack_b_strip(transB, B, ldb, k0, kc, j0, nr, bpack);
                    for (int r0 = 0; r0 < mc; r0 += MM_MR) {
                        int rows = mc - r0 < MM_MR ? mc - r0 : MM_MR;
                        mm_micro(kc, apack + (size_t)r0 * kc, bpack, C + (size_t)(i0 + r0) * ldc + j0, ldc, rows, nr,
                                 alpha, beta_k);
                    }
                }
            }
        }
    }
    free(apack);
}
#undef MM_A

// ---------------------------------------------------------------------------
// dispatch

static inline void matmul(int transA, int transB, int M, int N, int K, float alpha, const float *A, int lda,
                          const float *B, int ldb, float beta, float *C, int ldc) {
    if (M == 0 || N == 0) return;
#ifdef LLMC_BLAS
    if (g_matmul_backend == MATMUL_BLAS) {
        cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans, transB ? CblasTrans : CblasNoTrans, M, N, K,
                    alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
#endif
    matmul_native(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

// Achieved GFLOP/s of the best sgemm in this build (OpenBLAS when built with it,
// else the native kernel) on an n x n x n product, best of reps: the CPU's
// practical peak, against which MFU and benchmarks are reported.
static double matmul_measure_peak_gflops(int n, int reps) {
    MatmulBackend saved = g_matmul_backend;
#ifdef LLMC_BLAS
    g_matmul_backend = MATMUL_BLAS;
#endif
    size_t nn = (size_t)n * n;
    float *a = (float *)alignedMallocCheck(sizeof(float) * nn * 3);
    for (size_t i = 0; i < nn * 3; i++) a[i] = (float)((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
    double best = 1e30;
    matmul(0, 1, n, n, n, 1.0f, a, n, a + nn, n, 0.0f, a + 2 * nn, n);  // warm up threads and caches
    for (int r = 0; r < reps; r++) {
        double t0 = wall_seconds();
        matmul(0, 1, n, n, n, 1.0f, a, n, a + nn, n, 0.0f, a + 2 * nn, n);
        double dt = wall_seconds() - t0;
        best = dt < best ? dt : best;
    }
    free(a);
    g_matmul_backend = saved;
    return 2.0 * n * (double)nn / best * 1e-9;
}

#endif  // LLMC_CPU_MATMUL_H
