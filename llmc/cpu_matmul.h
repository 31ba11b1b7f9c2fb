// cpu_matmul.h: single-precision GEMM for the CPU trainer, row-major:
//   C (M, N) = alpha * op(A) (M, K) @ op(B) (K, N) + beta * C
// Two backends: OpenBLAS's cblas_sgemm (built with LLMC_BLAS) and our own
// cache-blocked, OpenMP-parallel kernel written with GCC vector extensions (B
// packed, A packed or read in place), its register tile chosen for the
// instruction set the build targets (AVX-512 6x64, AVX2 6x16, NEON 8x12,
// portable 4x8: MATMUL_NATIVE_KERNEL).
// matmul_set_backend() picks one at run time; benchmarks compare both. With
// "tuned", matmul_team times both on each product shape the first time the
// team multiplies it and keeps the faster for that shape (matmul_team_backend).
#ifndef LLMC_CPU_MATMUL_H
#define LLMC_CPU_MATMUL_H

#include <stdio.h>
#include <string.h>
#include <strings.h>  // strcasecmp
#ifdef _OPENMP
#include <omp.h>
#endif
#ifdef LLMC_BLAS
#include <cblas.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>  // __get_cpuid
#endif
#endif

#include "cpu_vec.h"  // defines: VEC_LANES, VEC_ISA, vf_set1, vf_load, vf_transpose_square, ...
#include "utils.h"    // defines: die_usage, ceil_div_i64, round_up_i64, alignedMallocCheck, ...

typedef enum { MATMUL_NATIVE = 0, MATMUL_BLAS = 1 } MatmulBackend;


static MatmulBackend g_matmul_backend =
#ifdef LLMC_BLAS
    MATMUL_BLAS;
#else
    MATMUL_NATIVE;
#endif
static int g_matmul_tuned;  // 1: matmul_team picks per shape (--matmul tuned); g_matmul_backend serves the rest

#ifdef LLMC_BLAS
// OpenBLAS's x86 kernels of AVX or wider (as openblas_get_corename() names them), their width in floats
// and whether they are built for AMD's cores (the rest for Intel's). Any other is narrower: the SSE3
// "Prescott" that OpenBLAS falls back to on CPUs it does not recognise (0.3.21 on newer Xeons), several
// times slower than either backend (docs/cpu_kernels.md); OPENBLAS_CORETYPE names the kernel it takes.
static const struct {
    const char *name;
    int lanes, amd;
} g_blas_avx_cores[] = {
    {"sandybridge", 8, 0}, {"haswell", 8, 0}, {"skylakex", 16, 0}, {"cooperlake", 16, 0}, {"sapphirerapids", 16, 0},
    {"zen", 8, 1}, {"bulldozer", 8, 1}, {"piledriver", 8, 1}, {"steamroller", 8, 1}, {"excavator", 8, 1}};

// 1 on an AMD x86 CPU (cpuid's vendor "AuthenticAMD"), 0 on any other
static inline int cpu_vendor_is_amd(void) {
#if defined(__x86_64__) || defined(__i386__)
    unsigned eax, ebx, ecx, edx;
    return __get_cpuid(0, &eax, &ebx, &ecx, &edx) && ebx == 0x68747541u && edx == 0x69746e65u && ecx == 0x444d4163u;
#else
    return 0;
#endif
}

// 1 when --matmul auto takes OpenBLAS: its kernel for this CPU is one of its AVX (or wider) x86 cores (or
// the native kernel is narrower than AVX's 8 lanes), unless that kernel is built for the other vendor's
// cores and the native one is as wide. OpenBLAS 0.3.21 runs its Intel Cooperlake kernel on an AMD Zen 4,
// where the native kernel was 3-9% faster a step at d12 and v65 (and tied with its Haswell kernel in an
// AVX2 build); on an Intel CPU it runs a kernel tuned for that core.
static inline int matmul_auto_takes_blas(void) {
    const char *core = openblas_get_corename();
    for (size_t i = 0; core && i < sizeof(g_blas_avx_cores) / sizeof(g_blas_avx_cores[0]); i++)
        if (strcasecmp(core, g_blas_avx_cores[i].name) == 0)
            return g_blas_avx_cores[i].amd == cpu_vendor_is_amd() || VEC_LANES < g_blas_avx_cores[i].lanes;
    return VEC_LANES < 8;
}
#endif

// name: "auto" (OpenBLAS, unless its kernel for this CPU is narrower than the native one, or built for the
// other vendor's cores and no wider: matmul_auto_takes_blas; then native),
// "blas", "native" or "tuned" (auto's choice, but each shape matmul_team multiplies on the faster of the
// two, timed at its first use; a build without BLAS has only native). Asking for BLAS in a build without
// it is a usage error.
static inline void matmul_set_backend(const char *name) {
    g_matmul_tuned = 0;
    if (strcmp(name, "native") == 0) { g_matmul_backend = MATMUL_NATIVE; return; }
#ifdef LLMC_BLAS
    if (strcmp(name, "tuned") == 0) {
        g_matmul_tuned = 1;
        name = "auto";
    }
#ifdef LLMC_MATMUL_AUTO_BLAS  // (the sanitizer builds: the Makefile says why)
    const int auto_blas = 1;
#else
    const int auto_blas = matmul_auto_takes_blas();
#endif
    g_matmul_backend = strcmp(name, "auto") == 0 && !auto_blas ? MATMUL_NATIVE : MATMUL_BLAS;
#else
    if (strcmp(name, "blas") == 0) die_usage("--matmul blas: this build has no BLAS (install libopenblas-dev and rebuild)");
    g_matmul_backend = MATMUL_NATIVE;
#endif
}

// ---------------------------------------------------------------------------
// native kernel
//
// The register tile is MM_MR rows by MM_NV vectors of VEC_LANES floats (the
// instruction set's register width, llmc/cpu_vec.h), chosen so that the
// MR x NV accumulators, the NV vectors of a B row and a broadcast A value fit
// the register file: 32 registers with AVX-512 and NEON, 16 with AVX2 and
// SSE. MM_KC is the depth of one packed slice of B (a KC x NR strip stays in
// L1 while every MR-row strip of A streams past it); a block of MM_MC x MM_KB
// floats of A is packed at once, or read in place (in L2).
#if VEC_LANES == 16  // AVX-512: 6 x 64, 24 accumulators in zmm
#define MM_MR 6
#define MM_NV 4
#define MM_NR 64
#define MM_KC 128
#define MM_KB 768
#define MM_MC (86 * MM_MR)
#elif defined(__AVX2__)  // AVX2 + FMA: 6 x 16, 12 accumulators in ymm (BLIS's Haswell shape)
#define MM_MR 6
#define MM_NV 2
#define MM_NR 16
#define MM_KC 256
#define MM_KB 512
#define MM_MC (43 * MM_MR)
#elif defined(__ARM_NEON)  // NEON: 8 x 12, 24 accumulators in q registers
#define MM_MR 8
#define MM_NV 3
#define MM_NR 12
#define MM_KC 256
#define MM_KB 512
#define MM_MC (43 * MM_MR)
#else  // portable (SSE2 on x86-64): 4 x 8, 8 accumulators in xmm
#define MM_MR 4
#define MM_NV 2
#define MM_NR 8
#define MM_KC 256
#define MM_KB 512
#define MM_MC (43 * MM_MR)
#endif
#if MM_NR != MM_NV * VEC_LANES || MM_KB % MM_KC != 0 || MM_MC % MM_MR != 0
#error "MM_NR is MM_NV vectors; MM_KB whole KC slices; MM_MC whole MR strips"
#endif

#define MM_STR2(x) #x
#define MM_STR(x) MM_STR2(x)
// what the native kernel was built for, e.g. "avx2 6x16" (the start-up line prints it)
#define MATMUL_NATIVE_KERNEL VEC_ISA " " MM_STR(MM_MR) "x" MM_STR(MM_NR)

// Packs op(A)[i0:i0+mc, k0:k0+kc] of a transposed A (column i of op(A) is part of row i of A's
// transpose: MR consecutive floats of a row of A per depth k) into MR-row strips (depth k -> MR
// floats, rows past mc zero; strip r0 at apack + r0 * kc), the strips
// r0 = t * MR, (t + P) * MR, ... (thread t's of P), 16 rows of A at a time: strip by strip over all
// kc rows, every strip would reread (from L2 or memory) a line of each of kc rows for 24 bytes of it.
static void mm_pack_a_transposed(const float *A, int lda, int i0, int mc, int k0, int kc, int t, int P, float *apack) {
    for (int kk = 0; kk < kc; kk += 16) {
        int kn = kc - kk < 16 ? kc - kk : 16;
        for (int r0 = t * MM_MR; r0 < mc; r0 += P * MM_MR) {
            int rows = mc - r0 < MM_MR ? mc - r0 : MM_MR;
            const float *src = A + (size_t)(k0 + kk) * lda + i0 + r0;
            float *d = apack + (size_t)r0 * kc + (size_t)kk * MM_MR;
            for (int k = 0; k < kn; k++, src += lda, d += MM_MR) {
                if (rows == MM_MR) {
                    memcpy(d, src, sizeof(float) * MM_MR);
                    continue;
                }
                for (int r = 0; r < MM_MR; r++) d[r] = r < rows ? src[r] : 0.0f;
            }
        }
    }
}

#define MM_LINE_FLOATS 16  // floats in a 64-byte cache line

// Packs op(B)[k0:k0+kc, j0:j0+nr] as one NR-column strip, depth k -> NR floats (columns past nr zero),
// from a B that is not transposed: row k of op(B) is row k of B. Each row read prefetches (into L2) the
// same columns kc rows down, the strip's next slice of a product K deep: B is then an activation (the
// weight gradient's input), out of cache, that the next slice would otherwise wait for row by row
// (v65's weight gradients 2% faster on a Zen 4; a transposed B, the forward's weights, gained nothing).
static void mm_pack_b_strip(const float *B, int ldb, int k0, int kc, int K, int j0, int nr, float *dst) {
    for (int k = 0; k < kc; k++) {
        const float *src = B + (size_t)(k0 + k) * ldb + j0;
        if (k0 + kc + k < K)
            for (int c = 0; c < nr; c += MM_LINE_FLOATS) __builtin_prefetch(src + (size_t)kc * ldb + c, 0, 2);
        if (nr == MM_NR) {
            memcpy(dst + k * MM_NR, src, sizeof(float) * MM_NR);
            continue;
        }
        for (int c = 0; c < MM_NR; c++) dst[k * MM_NR + c] = c < nr ? src[c] : 0.0f;
    }
}

// mm_pack_b_strip's strip from a transposed B (the forward's weight): column j of op(B) is row j
// of B, read contiguously; squares of VEC_LANES columns by VEC_LANES depths are transposed in
// registers, the depth's last kc % VEC_LANES one float at a time.
static void mm_pack_b_transposed(const float *B, int ldb, int k0, int kc, int j0, int nr, float *dst) {
    for (int c0 = 0; c0 < MM_NR; c0 += VEC_LANES) {
        int k = 0;
        for (; k + VEC_LANES <= kc; k += VEC_LANES) {
            vf v[VEC_LANES];  // row c: column c0 + c of op(B) at depths k..
            for (int c = 0; c < VEC_LANES; c++)
                v[c] = c0 + c < nr ? vf_load(B + (size_t)(j0 + c0 + c) * ldb + k0 + k) : vf_set1(0.0f);
            vf_transpose_square(v);
            for (int i = 0; i < VEC_LANES; i++) vf_store(dst + (size_t)(k + i) * MM_NR + c0, v[i]);
        }
        for (; k < kc; k++)
            for (int c = c0; c < c0 + VEC_LANES; c++)
                dst[(size_t)k * MM_NR + c] = c < nr ? B[(size_t)(j0 + c) * ldb + k0 + k] : 0.0f;
    }
}

// acc (MR x NR) = op(A)'s strip (MR rows, kc deep) @ Bstrip (kc x NR); then C tile = alpha*acc + beta*C.
// Element (r, k) of the strip is a[r * a_rs + k * a_ks]: packed, a_rs = 1 and a_ks = MR; read in
// place, lda and 1 (A not transposed) or 1 and lda (transposed). A partial strip (rows < MR) repeats
// its last row in the rows past it, which are computed and not stored. The accumulators stay in
// registers (their address is never taken); each A value is broadcast from memory.
static void mm_micro(int kc, const float *a, size_t a_rs, size_t a_ks, const float *bp, float *C, int ldc, int rows,
                     int cols, float alpha, float beta) {
    size_t a_row[MM_MR];  // (offsets of the strip's rows)
    for (int r = 0; r < MM_MR; r++) a_row[r] = (size_t)(r < rows ? r : rows - 1) * a_rs;
    vf acc[MM_MR][MM_NV];
    for (int r = 0; r < MM_MR; r++)
        for (int v = 0; v < MM_NV; v++) acc[r][v] = vf_set1(0.0f);
    for (int k = 0; k < kc; k++, a += a_ks) {
        vf b[MM_NV];
        for (int v = 0; v < MM_NV; v++) b[v] = vf_load(bp + k * MM_NR + v * VEC_LANES);
        for (int r = 0; r < MM_MR; r++) {
            vf av = vf_set1(a[a_row[r]]);
            for (int v = 0; v < MM_NV; v++) acc[r][v] += av * b[v];
        }
    }
    for (int r = 0; r < rows; r++) {
        float *c = C + (size_t)r * ldc;
        if (cols == MM_NR) {
            for (int v = 0; v < MM_NV; v++) {
                float *cv = c + v * VEC_LANES;
                vf_store(cv, beta == 0.0f ? alpha * acc[r][v] : alpha * acc[r][v] + beta * vf_load(cv));
            }
            continue;
        }
        for (int j = 0; j < cols; j++) {
            float x = alpha * acc[r][j / VEC_LANES][j % VEC_LANES];
            c[j] = beta == 0.0f ? x : x + beta * c[j];
        }
    }
}

// op(A) is read in place by the microkernel, not packed, when it is not transposed (whatever its
// leading dimension: a strip then reads MR rows, each contiguously in k, and packing was a pass over
// A that every thread of a team repeated, 10-13% of the products with lda from 2304 up at d12 on a
// Zen 4), and when it is transposed, its depth steps less than a page (1024 floats, 4 KiB) and the
// product is at most 8 NR-column strips wide. A transposed A's strip reads 24 bytes of a new line per
// depth step, which costs more, per strip, than packing once for many strips; from a page up every
// step needs its own TLB entry (and at a power of two its lines share one L1 set).
#define MM_AT_IN_PLACE_MAX_LD 1023
#define MM_AT_IN_PLACE_MAX_STRIPS 8
static inline int mm_a_in_place(int transA, int lda, int N) {
    return !transA || (lda <= MM_AT_IN_PLACE_MAX_LD && ceil_div_i64(N, MM_NR) <= MM_AT_IN_PLACE_MAX_STRIPS);
}

// Loop nest (BLIS's, with the depth split twice): for each block of MC rows
// and KB depth, op(A) is packed into MR-row strips (in L2; unless it is read
// in place: mm_a_in_place), the team's threads sharing the packing; then each
// thread takes whole NR-column strips of C and, for each KC slice of the
// depth, packs that slice of B (L1) and runs the microkernel down the rows.
// A thread revisits its C strip (MC x NR, in L2) KB/KC times in a row, so C
// goes through memory K/KB times, not K/KC. Every element of C sums its depth
// in the same order whatever the thread count or the packing: the result does
// not depend on them. This is thread t's part of a team of P sharing apack
// (NULL when op(A) is read in place; P = 1: all of it, with no barrier).
static void mm_native_part(int P, int t, int transA, int transB, int M, int N, int K, float alpha, const float *A,
                           int lda, const float *B, int ldb, float beta, float *C, int ldc, float *apack) {
    size_t lda_rs = transA ? 1 : (size_t)lda, lda_ks = transA ? (size_t)lda : 1;  // op(A)(i, k) at A[i * lda_rs + k * lda_ks]
    int n_strips = (int)ceil_div_i64(N, MM_NR);
    float bpack[MM_KC * MM_NR] __attribute__((aligned(64)));
    for (int i0 = 0; i0 < M; i0 += MM_MC) {
        int mc = M - i0 < MM_MC ? M - i0 : MM_MC;
        for (int kb0 = 0; kb0 < K; kb0 += MM_KB) {
            int kb = K - kb0 < MM_KB ? K - kb0 : MM_KB;
            // the block's strip r0 at depth k0 starts at a_block + r0 * a_strip + (k0 - kb0) * a_ks
            const float *a_block = A + i0 * lda_rs + kb0 * lda_ks;
            size_t a_rs = lda_rs, a_ks = lda_ks, a_strip = lda_rs;
            if (apack) {  // (a transposed A) strip r0 holds rows i0+r0.. at depth kb0..: k -> MR floats, kb deep
                mm_pack_a_transposed(A, lda, i0, mc, kb0, kb, t, P, apack);
                if (P > 1) {
#pragma omp barrier
                }
                a_block = apack, a_rs = 1, a_ks = MM_MR, a_strip = (size_t)kb;
            }
            for (int s = t; s < n_strips; s += P) {
                int j0 = s * MM_NR;
                int nr = N - j0 < MM_NR ? N - j0 : MM_NR;
                for (int k0 = kb0; k0 < kb0 + kb; k0 += MM_KC) {
                    int kc = kb0 + kb - k0 < MM_KC ? kb0 + kb - k0 : MM_KC;
                    float beta_k = k0 == 0 ? beta : 1.0f;
                    if (transB) mm_pack_b_transposed(B, ldb, k0, kc, j0, nr, bpack);
                    else mm_pack_b_strip(B, ldb, k0, kc, K, j0, nr, bpack);
                    for (int r0 = 0; r0 < mc; r0 += MM_MR) {
                        int rows = mc - r0 < MM_MR ? mc - r0 : MM_MR;
                        mm_micro(kc, a_block + r0 * a_strip + (k0 - kb0) * a_ks, a_rs, a_ks, bpack,
                                 C + (size_t)(i0 + r0) * ldc + j0, ldc, rows, nr, alpha, beta_k);
                    }
                }
            }
            if (apack && P > 1) {  // (apack is repacked next)
#pragma omp barrier
            }
        }
    }
}

// The product on this machine's threads, or inside a parallel region on the calling thread alone.
static void matmul_native(int transA, int transB, int M, int N, int K, float alpha, const float *A, int lda,
                          const float *B, int ldb, float beta, float *C, int ldc) {
    if (K == 0) {
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) C[(size_t)i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[(size_t)i * ldc + j];
        return;
    }
    float *apack = NULL;
    if (!mm_a_in_place(transA, lda, N)) {
        int mc_max = M < MM_MC ? (int)round_up_i64(M, MM_MR) : MM_MC;
        int kb_max = K < MM_KB ? K : MM_KB;
        apack = (float *)alignedMallocCheck(sizeof(float) * (size_t)mc_max * kb_max);
    }
#ifdef _OPENMP
    if (omp_get_level() == 0 && omp_get_max_threads() > 1) {
#pragma omp parallel
        mm_native_part(omp_get_num_threads(), omp_get_thread_num(), transA, transB, M, N, K, alpha, A, lda, B, ldb,
                       beta, C, ldc, apack);
    } else
#endif
    {
        mm_native_part(1, 0, transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, apack);
    }
    free(apack);
}

// ---------------------------------------------------------------------------
// dispatch

// "native (avx2 6x16)": the kernel this build compiled; "openblas (Haswell)": the kernel OpenBLAS picked
// for this CPU (OPENBLAS_CORETYPE overrides it); tuned: "tuned per shape: native (avx2 6x16) or openblas
// (Haswell), else openblas (Haswell)" (the latter for products outside matmul_team)
static inline const char *matmul_backend_name(void) {
    static char name[256];
    char native[64], blas[64] = "";
    snprintf(native, sizeof(native), "native (%s)", MATMUL_NATIVE_KERNEL);
#ifdef LLMC_BLAS
    snprintf(blas, sizeof(blas), "openblas (%s)", openblas_get_corename());
#endif
    const char *other = g_matmul_backend == MATMUL_BLAS ? blas : native;
    if (g_matmul_tuned) snprintf(name, sizeof(name), "tuned per shape: %s or %s, else %s", native, blas, other);
    else snprintf(name, sizeof(name), "%s", other);
    return name;
}

// The whole product on backend be by the calling thread, or outside a parallel
// region by the backend's own threads (inside one, both backends run single-threaded).
static inline void matmul_on(MatmulBackend be, int transA, int transB, int M, int N, int K, float alpha,
                             const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc) {
    if (M == 0 || N == 0) return;
#ifdef LLMC_BLAS
    if (be == MATMUL_BLAS) {
        cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans, transB ? CblasTrans : CblasNoTrans, M, N, K,
                    alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
#else
    (void)be;
#endif
    matmul_native(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
// matmul_on the run's backend (--matmul; tuned: auto's)
static inline void matmul(int transA, int transB, int M, int N, int K, float alpha, const float *A, int lda,
                          const float *B, int ldb, float beta, float *C, int ldc) {
    matmul_on(g_matmul_backend, transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

// ---------------------------------------------------------------------------
// kernels that share one OpenMP team
//
// A CPU kernel work-shares its loops over the team it is called in (orphaned
// `omp for`, whose implicit barrier ends each loop), so a caller can run a
// sequence of kernels inside one parallel region: the threads are kept and
// wait at barriers instead of being forked and joined per kernel. Called
// outside any region, a kernel opens its own: KERNEL_TEAM(call), first in the
// kernel, runs `call` (the kernel itself, same arguments) in a new team.
#ifdef _OPENMP
#define KERNEL_TEAM(call)                     \
    do {                                      \
        if (omp_get_level() == 0) {           \
            _Pragma("omp parallel") { call; } \
            return;                           \
        }                                     \
    } while (0)
static inline int omp_team_size(void) { return omp_get_num_threads(); }
#else
#define KERNEL_TEAM(call) ((void)0)
static inline int omp_team_size(void) { return 1; }
#endif

// The part of C (M, N) that thread t of a team of P computes when the team
// shares a product: a slice of the larger of M and N, whole register tiles
// of the native kernel (rows or cols is 0 for a thread without one).
typedef struct { int i0, rows, j0, cols; } MatmulSlice;
static inline MatmulSlice matmul_team_slice(int M, int N) {
    int P = omp_team_size(), t = omp_thread_id();
    MatmulSlice s = {0, M, 0, N};
    if (M >= N) {
        int per = (int)round_up_i64(ceil_div_i64(M, P), MM_MR);
        s.i0 = t * per < M ? t * per : M;
        s.rows = M - s.i0 < per ? M - s.i0 : per;
    } else {
        int per = (int)round_up_i64(ceil_div_i64(N, P), MM_NR);
        s.j0 = t * per < N ? t * per : N;
        s.cols = N - s.j0 < per ? N - s.j0 : per;
    }
    return s;
}

// Slice s of the product on backend be, by the calling thread (the whole of
// it, in a team of one, by the backend's threads): every element sums its
// depth as the whole product does.
static void matmul_slice(MatmulBackend be, MatmulSlice s, int transA, int transB, int K, float alpha, const float *A,
                         int lda, const float *B, int ldb, float beta, float *C, int ldc) {
    if (s.rows == 0 || s.cols == 0) return;
    matmul_on(be, transA, transB, s.rows, s.cols, K, alpha, transA ? A + s.i0 : A + (size_t)s.i0 * lda, lda,
              transB ? B + (size_t)s.j0 * ldb : B + s.j0, ldb, beta, C + (size_t)s.i0 * ldc + s.j0, ldc);
}

// --matmul tuned: the backend each product shape runs on, in a team of P
// threads (P = 1 also outside a parallel region). A shape's entry is made the
// first time a team multiplies it and never changes in the run, so a run's
// products are deterministic; past MATMUL_MAX_SHAPES shapes the rest run on
// g_matmul_backend.
typedef struct {
    int transA, transB, M, N, K, P;
    MatmulBackend backend;       // the faster of the two
    double ms[2];                // the best time of each (native, openblas): its slowest thread's on its slice
} MatmulShapeChoice;
#define MATMUL_MAX_SHAPES 64
static MatmulShapeChoice g_matmul_shapes[MATMUL_MAX_SHAPES];
static int g_matmul_num_shapes;
static float *g_matmul_tune_buf;  // the team's scratch operands while it times a shape

static inline int matmul_shape_find(int transA, int transB, int M, int N, int K, int P) {
    for (int i = 0; i < g_matmul_num_shapes; i++) {
        const MatmulShapeChoice *c = &g_matmul_shapes[i];
        if (c->transA == transA && c->transB == transB && c->M == M && c->N == N && c->K == K && c->P == P) return i;
    }
    return -1;
}

// Times both backends on the shape as the team multiplies it (each thread its
// matmul_team_slice), on scratch operands (the caller's C is not touched):
// runs alternating between the two, the best of each, after one untimed run
// of each; 10 timed runs each, fewer for products over 2 ms (2 over 10 ms). A
// run's time is its slowest thread's CPU time on its slice, so that threads
// descheduled on a busy machine do not count (a team of one outside a
// parallel region, where the backend runs its own threads: wall time).
// Called by the whole team; returns the faster (auto's backend unless the
// other is at least 5% faster).
static MatmulBackend matmul_tune_shape(int transA, int transB, int M, int N, int K, float beta) {
    static int reps;  // (the team's shared values, set by one thread between barriers)
    static double best[2], slowest;
#pragma omp single
    {
        size_t na = (size_t)M * K, nb = (size_t)K * N, nc = (size_t)M * N;
        g_matmul_tune_buf = (float *)alignedMallocCheck(sizeof(float) * (na + nb + nc));
        for (size_t i = 0; i < na + nb + nc; i++) g_matmul_tune_buf[i] = (float)((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
        reps = 10;
        best[0] = best[1] = 1e30;
    }
    const float *A = g_matmul_tune_buf, *B = A + (size_t)M * K;
    float *C = g_matmul_tune_buf + (size_t)M * K + (size_t)K * N;
    MatmulSlice s = matmul_team_slice(M, N);
#ifdef _OPENMP
    const clockid_t clock = omp_get_level() > 0 || omp_get_max_threads() == 1 ? CLOCK_THREAD_CPUTIME_ID : CLOCK_MONOTONIC;
#else
    const clockid_t clock = CLOCK_THREAD_CPUTIME_ID;
#endif
    for (int r = -1; r < reps; r++) {
        for (int be = MATMUL_NATIVE; be <= MATMUL_BLAS; be++) {
#pragma omp single
            slowest = 0.0;
            double t0 = clock_seconds(clock);
            matmul_slice((MatmulBackend)be, s, transA, transB, K, 1.0f, A, transA ? M : K, B, transB ? K : N, beta,
                         C, N);
            double dt = clock_seconds(clock) - t0;
#pragma omp critical(matmul_tune)
            slowest = dt > slowest ? dt : slowest;
#pragma omp barrier
#pragma omp master
            {
                if (r < 0 && be == MATMUL_NATIVE && slowest > 2e-3) reps = slowest > 10e-3 ? 2 : (int)(20e-3 / slowest);
                if (r >= 0 && slowest < best[be]) best[be] = slowest;
            }
#pragma omp barrier
        }
    }
    // (the other backend only 5% faster or more, so that near ties keep auto's choice from run to run)
    MatmulBackend other = g_matmul_backend == MATMUL_BLAS ? MATMUL_NATIVE : MATMUL_BLAS;
    MatmulBackend faster = best[other] < 0.95 * best[g_matmul_backend] ? other : g_matmul_backend;
#pragma omp single
    {
        free(g_matmul_tune_buf);
        g_matmul_tune_buf = NULL;
        if (g_matmul_num_shapes < MATMUL_MAX_SHAPES)
            g_matmul_shapes[g_matmul_num_shapes++] = (MatmulShapeChoice){
                transA, transB, M, N, K, omp_team_size(), faster, {best[0] * 1e3, best[1] * 1e3}};
    }
    return faster;
}

// The backend the calling team multiplies this shape on (tuned: the shape's
// entry, made now when it has none). Every thread of the team calls it at
// the same point: the table is read by all before a barrier and written only
// after it, so they all find the same.
static MatmulBackend matmul_team_backend(int transA, int transB, int M, int N, int K, float beta) {
    if (!g_matmul_tuned || M == 0 || N == 0 || K == 0) return g_matmul_backend;
    int i = matmul_shape_find(transA, transB, M, N, K, omp_team_size());
    if (i >= 0) return g_matmul_shapes[i].backend;
    if (g_matmul_num_shapes >= MATMUL_MAX_SHAPES) return g_matmul_backend;
#pragma omp barrier
    return matmul_tune_shape(transA, transB, M, N, K, beta);
}

// The tuned shapes' choices, one line ("M x N x K (op) on P threads: native|openblas (a vs b ms), ...").
static void matmul_print_shape_choices(FILE *f) {
    if (!g_matmul_tuned) return;
    fprintf(f, "matmul tuned per shape (%d shapes; C = op(A) @ op(B), MxNxK, N/T: op is the matrix or its transpose):",
            g_matmul_num_shapes);
    for (int i = 0; i < g_matmul_num_shapes; i++) {
        const MatmulShapeChoice *c = &g_matmul_shapes[i];
        fprintf(f, "%s %dx%dx%d %c%c %dt %s (%.3f vs %.3f ms)", i ? "," : "", c->M, c->N, c->K, c->transA ? 'T' : 'N',
                c->transB ? 'T' : 'N', c->P, c->backend == MATMUL_BLAS ? "openblas" : "native",
                c->ms[c->backend], c->ms[!c->backend]);
    }
    fprintf(f, "\n");
}

// matmul shared by the calling team, each thread its matmul_team_slice;
// returns when the whole product is done. Outside a parallel region (or in a
// team of one) it is matmul (tuned: on the shape's backend).
static void matmul_team(int transA, int transB, int M, int N, int K, float alpha, const float *A, int lda,
                        const float *B, int ldb, float beta, float *C, int ldc) {
    MatmulBackend be = matmul_team_backend(transA, transB, M, N, K, beta);
    matmul_slice(be, matmul_team_slice(M, N), transA, transB, K, alpha, A, lda, B, ldb, beta, C, ldc);
#pragma omp barrier
}

// 1 when the peak probes both backends: whenever the build has both (the machine's sgemm peak, the same
// whichever --matmul the run takes: the step's attention, LayerNorm and AdamW are native whatever it
// takes, and on an AVX-512 CPU OpenBLAS's probes read 5-10% below the native kernel's, so MFU against
// them alone read high; against the SSE3 fallback's, 105-116%). Not in the sanitizer builds, where
// auto takes OpenBLAS and an instrumented native probe would cost seconds a run: there, under tuned only.
static inline int matmul_peak_probes_both(void) {
#if defined(LLMC_BLAS) && !defined(LLMC_MATMUL_AUTO_BLAS)
    return 1;
#else
    return g_matmul_tuned;
#endif
}

// Achieved GFLOP/s of the sgemm the run uses (the backend matmul_set_backend
// chose; the better of both where matmul_peak_probes_both) on n x n x n products of the sizes up to max_n
// (256, 512, ...), each the best of up to reps runs (and at least 0.1 s of
// them), the best of all: the CPU's practical peak, against which MFU and
// benchmarks are reported. Several probes of several sizes, so that one slow
// moment (another process on the cores) or one size that fits the kernel
// badly does not lower it, and MFU does not read above 100%. Each size is
// multiplied both ways the trainer multiplies: by the backend's own threads
// (matmul outside a parallel region) and by a team of threads each taking its
// slice (matmul_team, as gpt_cpu.h's layers do).
static double matmul_measure_peak_gflops(int max_n, int reps) {
    const int both = matmul_peak_probes_both();
    size_t max_nn = (size_t)max_n * max_n;
    float *a = (float *)alignedMallocCheck(sizeof(float) * max_nn * 3);
    for (size_t i = 0; i < max_nn * 3; i++) a[i] = (float)((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
    double best = 0.0;
    for (int n = max_n < 256 ? max_n : 256; n <= max_n; n *= 2) {
        size_t nn = (size_t)n * n;
        for (int probe = 0; probe < 4; probe++) {
            int team = probe & 1;
            MatmulBackend be = both ? (MatmulBackend)(probe >> 1) : g_matmul_backend;
            if (!both && probe >= 2) break;
            double spent = 0.0;
            for (int r = -1; r < reps || spent < 0.1; r++) {  // (r = -1: warm up threads and caches, untimed)
                double t0 = wall_seconds();
                if (team) {
#pragma omp parallel
                    matmul_slice(be, matmul_team_slice(n, n), 0, 1, n, 1.0f, a, n, a + nn, n, 0.0f, a + 2 * nn, n);
                } else {
                    matmul_on(be, 0, 1, n, n, n, 1.0f, a, n, a + nn, n, 0.0f, a + 2 * nn, n);
                }
                double dt = wall_seconds() - t0, gflops = 2.0 * n * (double)nn / dt * 1e-9;
                if (r < 0) continue;
                spent += dt;
                best = gflops > best ? gflops : best;
                if (r >= 1000) break;  // (a clock too coarse to see the product)
            }
        }
    }
    free(a);
    return best;
}

// where matmul_measure_peak_gflops' figure comes from (the start-up line)
static inline const char *matmul_peak_source(void) {
    return matmul_peak_probes_both()           ? "measured: the best of native and openblas sgemm probes"
           : g_matmul_backend == MATMUL_NATIVE ? "measured: the best of native sgemm probes"
                                               : "measured: the best of openblas sgemm probes";
}

#endif  // LLMC_CPU_MATMUL_H
