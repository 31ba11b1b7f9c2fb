// attention_flash.cuh: our causal flash attention, forward and backward, on
// floatX q|k|v, with the matrix products on the tensor cores (nvcuda::wmma, floatX
// 16x16x16 fragments, fp32 accumulators; sm_80 and sm_90) and the softmax in
// fp32. No (T,T) matrix is ever in memory: the forward keeps a running max and
// sum per row (online softmax) and saves only the output and the natural-log
// log-sum-exp of the scaled scores per row, lse (B,NH,T); the backward
// recomputes the probabilities from q, k and lse (FlashAttention-2): one kernel
// per key tile accumulates dk and dv over the query tiles at or below the
// diagonal, a second one per query tile accumulates dq over the key tiles up to
// it. No atomics: every output element has one writer and every sum a fixed
// order, so the result is bit-identical on every run.
// These are what the trainer's --attention flash runs. dev/cuda/attention.cu
// checks them against the CPU (llmc/cpu_layers.h) and holds the earlier scalar
// kernels (one thread per row, fp32 FMAs) as its version 1 reference.
// Layout as llmc/cpu_layers.h: qkv (B,T,3C) holds q | k | v, head h at
// channels [h*hs, (h+1)*hs); out (B,T,C); lse (B,NH,T). Head sizes 32 and 64.
// Query offsets (context parallel, llmc/context_parallel.cuh): the queries
// may be a rank's rows of the sequence, in up to two segments (FaQueries:
// local rows, count, global position of the first), against K and V of the
// whole sequence held apart (kv (B,Tk,2C) or any row stride); key j is
// visible to a query at global position p when j <= p. The dk/dv kernel then
// writes every key's gradient from these queries only, in fp32 where the
// caller sums them over ranks. One process: one segment at position 0, K and
// V in qkv: the same kernels, the same bits.
//
// Tiles: 64 queries x 64 keys; a block is 4 warps (128 threads), each owning 16
// rows of the block's 64 (queries in the forward and dq, keys in dk/dv), so a
// warp's products are 16 x 64 x hs. Global -> shared copies are cp.async, two
// tiles deep. Shared-memory rows are padded by 16 bytes (hs+8 floatX, 64+8 fp32 /
// floatX) so the 8 rows a fragment load reads land in different banks. The grid is
// (NH, B, T/64) with the tile index slowest, so the blocks at the long end of
// the causal triangle, of every head and batch row, are dispatched first and
// the short ones fill the tail. Dynamic shared memory at hs=64 (hs=32):
// forward 72.3 KB (52.3), dk/dv 73 KB (49), dq 45 KB (29); opted in above 48
// KB. Registers at hs=64: forward 132, dk/dv and dq capped at 168 (dk/dv spills
// 8 bytes on sm_90), so 3 blocks (12 warps) per H100 SM for each kernel; on
// sm_80, whose shared memory holds 2 dk/dv blocks, dk/dv is built for 2 blocks
// (FA_DKDV_MIN_BLOCKS) and does not spill.
// wmma leaves the (row, col) of each accumulator element unspecified but fixed
// per fragment type; fa_fragment_coords reads it off once per warp, which lets
// the backward form p and ds in registers and the forward rescale its output
// rows in registers. The forward's row max and sum need whole rows: its scores
// go through shared memory (fp32), two lanes per row.
#ifndef LLMC_ATTENTION_FLASH_CUH
#define LLMC_ATTENTION_FLASH_CUH

// LLMC_CUDA_EMULATION: compiled on the CPU by tests/test_flash_emulated.cpp,
// whose tests/cuda_emulator.h stands in for the CUDA headers, the PTX helpers,
// the dynamic shared memory and the launches; the rest is the same text.
#ifndef LLMC_CUDA_EMULATION
#include <mma.h>
#endif

#include "cuda_common.cuh"  // defines: DYNAMIC_SMEM, CUDA_CHECK, ceil_div_int, launch_kernel, ...

#define FA_TILE 64                  // queries / keys per tile and per block
#define FA_WARPS 4                  // each owns 16 of the block's 64 rows
#define FA_THREADS (32 * FA_WARPS)
#define FA_LDS (FA_TILE + 8)        // row stride (elements) of a warp's 16 x 64 scores, fp32 or floatX
#define FA_LOG2E 1.4426950408889634f
#define FA_LN2 0.6931471805599453f

typedef nvcuda::wmma::fragment<nvcuda::wmma::matrix_a, 16, 16, 16, floatX, nvcuda::wmma::row_major> FaFragA;
// B operand read from a row-major (n, k) array, i.e. the transpose: k of (key, d) for q k^T
typedef nvcuda::wmma::fragment<nvcuda::wmma::matrix_b, 16, 16, 16, floatX, nvcuda::wmma::col_major> FaFragBt;
typedef nvcuda::wmma::fragment<nvcuda::wmma::matrix_b, 16, 16, 16, floatX, nvcuda::wmma::row_major> FaFragB;
typedef nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float> FaFragC;
#define FA_ACC_N 8  // elements of an FaFragC per lane (static_assert below)

// The query rows a launch runs, as up to two segments: segment s is the local
// rows [row[s], row[s] + len[s]) of q (and out, lse, dout, dq), at global
// positions pos[s], pos[s] + 1, ... (the causal mask's). Segments in order of
// position; a query tile never straddles two.
struct FaQueries {
    int n;
    int row[2], len[2], pos[2];
};
// Every row of a sequence of T at its own position (one process).
static inline FaQueries fa_queries_whole(int T) {
    FaQueries q = {1, {0, 0}, {T, 0}, {0, 0}};
    return q;
}
static inline int fa_query_tiles(const FaQueries &q) {
    int n = 0;
    for (int s = 0; s < q.n; s++) n += (q.len[s] + FA_TILE - 1) / FA_TILE;
    return n;
}

// --- shared-memory plans (byte offsets; every region a multiple of 128 bytes) ---
// A 64 x hs floatX tile: 64 rows of hs+8.
template <int HS> struct FaTile {
    static constexpr int LDH = HS + 8;
    static constexpr int BYTES = FA_TILE * LDH * 2;
};
constexpr int FA_WARP_S_BYTES = 16 * FA_LDS * 4;  // a warp's 16 x 64 fp32 scores
constexpr int FA_WARP_P_BYTES = 16 * FA_LDS * (int)sizeof(floatX);  // a warp's 16 x 64 floatX probabilities
// forward: q tile | k tiles [2] | v tiles [2] | scores per warp | p per warp | a float per row
template <int HS> struct FaFwdSmem {
    static constexpr int TB = FaTile<HS>::BYTES;
    static constexpr int Q = 0, K = TB, V = 3 * TB, S = 5 * TB;
    static constexpr int P = S + FA_WARPS * FA_WARP_S_BYTES;
    static constexpr int STAT = P + FA_WARPS * FA_WARP_P_BYTES;
    static constexpr int BYTES = STAT + FA_WARPS * 16 * 4;
};
// dq: k tiles [2] | v tiles [2] | ds per warp. The block's q and dout tiles are
// staged in k[1] and v[1] before the loop; the fp32 dq staged at 0 after it.
template <int HS> struct FaDqSmem {
    static constexpr int TB = FaTile<HS>::BYTES;
    static constexpr int K = 0, V = 2 * TB, DS = 4 * TB;
    static constexpr int BYTES = DS + FA_WARPS * FA_WARP_P_BYTES;
    static_assert(FA_WARPS * FA_WARP_S_BYTES <= 4 * TB, "dq output staging fits the k/v tiles");
};
// dk/dv: q tiles [2] | dout tiles [2] | the block's k and v tiles | (lse*log2e,
// delta) [2][64] | p^T and ds^T per warp. The fp32 dk and dv are staged at 0
// after the loop.
template <int HS> struct FaDkvSmem {
    static constexpr int TB = FaTile<HS>::BYTES;
    static constexpr int Q = 0, DO = 2 * TB, KV = 4 * TB, LD = 6 * TB, PT = LD + 2 * FA_TILE * 8;
    static constexpr int BYTES = PT + FA_WARPS * 2 * FA_WARP_P_BYTES;
    static_assert(FA_WARPS * FA_WARP_S_BYTES <= 4 * TB, "dk/dv output staging fits the q/dout tiles");
};

// --- device helpers ---

#ifndef LLMC_CUDA_EMULATION  // the emulator gives these the same semantics
__device__ __forceinline__ void fa_cp_async16(void *smem, const void *gmem) {
    uint32_t s = (uint32_t)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(__cvta_generic_to_global(gmem))
                 : "memory");
}
__device__ __forceinline__ void fa_cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Waits until at most N of this thread's committed groups are still in flight.
template <int N> __device__ __forceinline__ void fa_cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// 2^x on the special-function unit: ex2.approx.ftz (about 2 ulp; results
// below 2^-126 flush to 0, 2^-inf = 0). exp2f would add range fix-ups around it.
__device__ __forceinline__ float fa_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}
#endif

// Rows [row0, row0 + 64) of a floatX matrix with row stride `stride` elements,
// hs columns from src, into a 64 x (hs+8) shared tile; rows >= T are zeros (so
// no garbage, possibly NaN, meets a zero probability in a product). Issued by
// all threads of the block, asynchronous (commit and wait by the caller).
template <int HS>
__device__ __forceinline__ void fa_load_tile(floatX *dst, const floatX *src, int64_t stride, int row0, int T) {
    constexpr int CH = HS / 8;  // 16-byte chunks per row
    static_assert(FA_TILE * CH % FA_THREADS == 0, "whole chunks per thread");
    #pragma unroll
    for (int it = 0; it < FA_TILE * CH / FA_THREADS; it++) {
        int e = threadIdx.x + it * FA_THREADS, r = e / CH, c = e % CH, row = row0 + r;
        floatX *d = dst + r * FaTile<HS>::LDH + 8 * c;
        if (row < T) fa_cp_async16(d, src + (int64_t)row * stride + 8 * c);
        else *(uint4 *)d = make_uint4(0, 0, 0, 0);
    }
}

// The (row, col) in its 16x16 tile of each of this lane's accumulator
// elements: load the matrix whose entry (r, c) is 16r + c and decode.
// scratch: 256 floats of the warp's own shared memory, 32-byte aligned.
__device__ __forceinline__ void fa_fragment_coords(int (&row)[FA_ACC_N], int (&col)[FA_ACC_N], float *scratch) {
    static_assert(FaFragC::num_elements == FA_ACC_N, "accumulator fragment size");
    int lane = threadIdx.x & 31;
    for (int e = lane; e < 256; e += 32) scratch[e] = (float)e;
    __syncwarp();
    FaFragC f;
    nvcuda::wmma::load_matrix_sync(f, scratch, 16, nvcuda::wmma::mem_row_major);
    #pragma unroll
    for (int e = 0; e < FA_ACC_N; e++) {
        int v = (int)f.x[e];
        row[e] = v >> 4;
        col[e] = v & 15;
    }
    __syncwarp();
}

// 16 rows x hs fp32 (row stride FA_LDS) from shared memory -> floatX rows of dst
// (row stride `stride`), rows with row0 + r >= T left alone. One warp.
template <int HS>
__device__ __forceinline__ void fa_store_rows(floatX *dst, int64_t stride, const float *src, int row0, int T) {
    constexpr int CH = HS / 8;
    static_assert(16 * CH % 32 == 0, "whole chunks per lane");
    #pragma unroll
    for (int it = 0; it < 16 * CH / 32; it++) {
        int e = (threadIdx.x & 31) + 32 * it, r = e / CH, c = e % CH;
        if (row0 + r >= T) continue;
        const float *p = src + r * FA_LDS + 8 * c;
        float4 a = *(const float4 *)p, b = *(const float4 *)(p + 4);
        floatX2 h0 = to_floatX2(a.x, a.y), h1 = to_floatX2(a.z, a.w);
        floatX2 h2 = to_floatX2(b.x, b.y), h3 = to_floatX2(b.z, b.w);
        uint4 v;
        v.x = *(uint32_t *)&h0; v.y = *(uint32_t *)&h1; v.z = *(uint32_t *)&h2; v.w = *(uint32_t *)&h3;
        *(uint4 *)(dst + (int64_t)(row0 + r) * stride + 8 * c) = v;
    }
}
// The same into fp32 rows (dk and dv of context parallel, summed over ranks before their rounding).
template <int HS>
__device__ __forceinline__ void fa_store_rows(float *dst, int64_t stride, const float *src, int row0, int T) {
    constexpr int CH = HS / 8;
    #pragma unroll
    for (int it = 0; it < 16 * CH / 32; it++) {
        int e = (threadIdx.x & 31) + 32 * it, r = e / CH, c = e % CH;
        if (row0 + r >= T) continue;
        const float *p = src + r * FA_LDS + 8 * c;
        float *d = dst + (int64_t)(row0 + r) * stride + 8 * c;
        *(float4 *)d = *(const float4 *)p;
        *(float4 *)(d + 4) = *(const float4 *)(p + 4);
    }
}

// Query tile z of a launch (0: the first segment's first) as (segment, tile in it).
__device__ __forceinline__ void fa_query_tile(const FaQueries &q, int z, int &s, int &qt) {
    const int t0 = (q.len[0] + FA_TILE - 1) / FA_TILE;
    s = z < t0 ? 0 : 1;
    qt = z < t0 ? z : z - t0;
}
// The key tile of a query tile's last query (its last key tile).
__device__ __forceinline__ int fa_last_key_tile(const FaQueries &q, int s, int qt) {
    const int q0 = qt * FA_TILE, rows = min(FA_TILE, q.len[s] - q0);
    return (q.pos[s] + q0 + rows - 1) / FA_TILE;
}
// From (s, qt) on, the first (segment, query tile) with a query that sees a
// key at or after k0 (s = q.n: none left): the dk/dv kernel's query tiles.
__device__ __forceinline__ void fa_seek_query_tile(const FaQueries &q, int k0, int &s, int &qt) {
    while (s < q.n) {
        const int first = k0 > q.pos[s] ? (k0 - q.pos[s]) / FA_TILE : 0;  // query k0 - pos[s] sees key k0
        if (qt < first) qt = first;
        if (qt * FA_TILE < q.len[s]) return;
        s++, qt = 0;
    }
}

// Key/value double buffering (forward, dq): tile kt is in buffer kt & 1.
// Starts copying tile kt + 1 into the other buffer when kt < last, then waits
// for this thread's copies of tile kt (the caller's __syncthreads makes every
// thread's visible).
template <int HS>
__device__ __forceinline__ void fa_next_kv_tile(floatX *ks, floatX *vs, const floatX *kbase, const floatX *vbase, int64_t kvs,
                                                int kt, int last, int Tk) {
    constexpr int TE = FA_TILE * FaTile<HS>::LDH;
    if (kt < last) {
        const int other = (kt & 1) ^ 1;
        fa_load_tile<HS>(ks + other * TE, kbase, kvs, (kt + 1) * FA_TILE, Tk);
        fa_load_tile<HS>(vs + other * TE, vbase, kvs, (kt + 1) * FA_TILE, Tk);
        fa_cp_async_commit();
        fa_cp_async_wait<1>();
    } else {
        fa_cp_async_wait<0>();
    }
}

// acc (16 x hs: hs/16 fragments) += a (16 x 64 floatX, row stride FA_LDS: a
// warp's p or ds) @ b (64 x hs floatX: a shared tile, row stride hs+8). One warp.
template <int HS>
__device__ __forceinline__ void fa_mma_16x64_tile(FaFragC (&acc)[HS / 16], const floatX *a, const floatX *b) {
    constexpr int LDH = FaTile<HS>::LDH;
    FaFragA af[4];
    #pragma unroll
    for (int kk = 0; kk < 4; kk++) nvcuda::wmma::load_matrix_sync(af[kk], a + 16 * kk, FA_LDS);
    #pragma unroll
    for (int d = 0; d < HS / 16; d++) {
        #pragma unroll
        for (int kk = 0; kk < 4; kk++) {
            FaFragB bf;
            nvcuda::wmma::load_matrix_sync(bf, b + 16 * kk * LDH + 16 * d, LDH);
            nvcuda::wmma::mma_sync(acc[d], af[kk], bf, acc[d]);
        }
    }
}

// --- forward ---
// grid (NH, B, query tiles), 128 threads; block = query tile qt of segment s
// (the last positions first), warp w = its queries q0+16w .. q0+16w+15. For
// each key tile kt up to the one of the tile's last query:
// S = q k^T (16 x 64) to shared memory; two lanes per row take the row's max
// over the causal keys (masked on the tiles reaching past the tile's first
// query: the diagonal one at one process), rescale the running
// sum, write p = 2^(s*sl2 - m) as floatX; the output accumulators (registers) are
// rescaled per row when some row's max moved, then O += p v. The running max m
// is in the log2 domain (sl2 = log2(e) / sqrt(hs)); lse = (m + log2 l) ln 2.
template <int HS>
__global__ void __launch_bounds__(FA_THREADS) flash_forward_kernel(floatX *out, float *lse, const floatX *qkv, int Tq,
                                                                   const floatX *kv, int64_t kvs, int Tk,
                                                                   FaQueries qry, int NH, float sl2) {
    using namespace nvcuda;
    using SM = FaFwdSmem<HS>;
    constexpr int LDH = FaTile<HS>::LDH, ND = HS / 16, TE = FA_TILE * LDH;  // TE: elements per tile
    DYNAMIC_SMEM(unsigned char, fa_smem);
    floatX *qs = (floatX *)(fa_smem + SM::Q), *ks = (floatX *)(fa_smem + SM::K), *vs = (floatX *)(fa_smem + SM::V);
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    float *sw = (float *)(fa_smem + SM::S + w * FA_WARP_S_BYTES);
    floatX *pw = (floatX *)(fa_smem + SM::P + w * FA_WARP_P_BYTES);
    float *stat = (float *)(fa_smem + SM::STAT) + 16 * w;
    const int h = blockIdx.x, b = blockIdx.y;
    int seg, qt;
    fa_query_tile(qry, gridDim.z - 1 - blockIdx.z, seg, qt);
    const int q0 = qt * FA_TILE, T = qry.len[seg], p0 = qry.pos[seg] + q0;  // (T: the segment's rows)
    const int last = fa_last_key_tile(qry, seg, qt);
    const int C = NH * HS;
    const int64_t C3 = 3 * (int64_t)C, row0 = (int64_t)b * Tq + qry.row[seg];
    const floatX *qbase = qkv + row0 * C3 + h * HS;
    const floatX *kbase = kv + (int64_t)b * Tk * kvs + h * HS, *vbase = kbase + C;

    fa_load_tile<HS>(qs, qbase, C3, q0, T);
    fa_load_tile<HS>(ks, kbase, kvs, 0, Tk);
    fa_load_tile<HS>(vs, vbase, kvs, 0, Tk);
    fa_cp_async_commit();
    int frow[FA_ACC_N], fcol[FA_ACC_N];
    fa_fragment_coords(frow, fcol, sw);

    FaFragA qf[ND];
    FaFragC o[ND];
    #pragma unroll
    for (int d = 0; d < ND; d++) wmma::fill_fragment(o[d], 0.0f);
    // row pass: this lane's row of the warp's 16, and its half of the 64
    // columns (interleaved groups of 4: c = 8k + 4*half + 0..3)
    const int r = lane >> 1, half = lane & 1;
    const int i = q0 + 16 * w + r;  // the query of that row (its segment's row; position p0 + i - q0)
    float m = -INFINITY, l = 0.0f;
    for (int kt = 0; kt <= last; kt++) {
        const int buf = kt & 1;
        fa_next_kv_tile<HS>(ks, vs, kbase, vbase, kvs, kt, last, Tk);
        __syncthreads();  // tile kt (and, the first time, q) visible to all
        if (kt == 0) {
            #pragma unroll
            for (int kk = 0; kk < ND; kk++) wmma::load_matrix_sync(qf[kk], qs + 16 * w * LDH + 16 * kk, LDH);
        }
        const floatX *kt_s = ks + buf * TE, *vt_s = vs + buf * TE;
        #pragma unroll
        for (int n = 0; n < 4; n++) {  // S[:, 16n..16n+15] = q k^T
            FaFragC sacc;
            wmma::fill_fragment(sacc, 0.0f);
            #pragma unroll
            for (int kk = 0; kk < ND; kk++) {
                FaFragBt kb;
                wmma::load_matrix_sync(kb, kt_s + 16 * n * LDH + 16 * kk, LDH);
                wmma::mma_sync(sacc, qf[kk], kb, sacc);
            }
            wmma::store_matrix_sync(sw + 16 * n, sacc, FA_LDS, wmma::mem_row_major);
        }
        __syncwarp();
        // raw scores of this lane's 32 columns; causal mask on the tiles with a
        // key past the tile's first query (one process: the diagonal one): key
        // kt*64 + c is visible to the query at position p when c <= p - kt*64.
        // Key 0 is visible to every row, so its max is finite from tile 0 on (a
        // later tile wholly masked for a row leaves it as it was); keys of the
        // unmasked tiles are all visible, and all are < Tk)
        float s[32];
        #pragma unroll
        for (int k = 0; k < 8; k++) {
            float4 v = *(const float4 *)(sw + r * FA_LDS + 8 * k + 4 * half);
            s[4 * k + 0] = v.x;
            s[4 * k + 1] = v.y;
            s[4 * k + 2] = v.z;
            s[4 * k + 3] = v.w;
        }
        if (kt * FA_TILE + FA_TILE - 1 > p0) {
            const int cmax = p0 + (i - q0) - kt * FA_TILE;
            #pragma unroll
            for (int j = 0; j < 32; j++)
                if (8 * (j / 4) + 4 * half + j % 4 > cmax) s[j] = -INFINITY;
        }
        float mt = -INFINITY;
        #pragma unroll
        for (int j = 0; j < 32; j++) mt = fmaxf(mt, s[j]);
        mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 1));
        const float mnew = fmaxf(m, mt * sl2);  // = the max of s * sl2: sl2 > 0
        const float alpha = mnew == m ? 1.0f : fa_exp2(m - mnew);  // 0 on the first tile (m = -inf)
        float ps = 0.0f;
        #pragma unroll
        for (int k = 0; k < 8; k++) {
            float p[4];
            #pragma unroll
            for (int j = 0; j < 4; j++) p[j] = fa_exp2(fmaf(s[4 * k + j], sl2, -mnew));  // masked: 2^-inf = 0
            ps += (p[0] + p[1]) + (p[2] + p[3]);
            floatX2 h01 = to_floatX2(p[0], p[1]), h23 = to_floatX2(p[2], p[3]);
            uint2 pv;
            pv.x = *(uint32_t *)&h01;
            pv.y = *(uint32_t *)&h23;
            *(uint2 *)(pw + r * FA_LDS + 8 * k + 4 * half) = pv;
        }
        ps += __shfl_xor_sync(0xffffffffu, ps, 1);  // a + b on both lanes: identical
        l = l * alpha + ps;
        // rescale the output rows only when some row's max moved (else alpha = 1)
        const bool moved = __any_sync(0xffffffffu, mnew != m);
        m = mnew;
        if (half == 0) stat[r] = alpha;
        __syncwarp();
        if (moved) {
            float arow[FA_ACC_N];
            #pragma unroll
            for (int e = 0; e < FA_ACC_N; e++) arow[e] = stat[frow[e]];
            #pragma unroll
            for (int d = 0; d < ND; d++) {
                #pragma unroll
                for (int e = 0; e < FA_ACC_N; e++) o[d].x[e] *= arow[e];
            }
        }
        fa_mma_16x64_tile<HS>(o, pw, vt_s);  // O += p v
        __syncthreads();  // buffer buf and this warp's scratch free for the next tile
    }
    if (half == 0) {
        stat[r] = 1.0f / l;
        if (i < T) lse[((int64_t)b * NH + h) * Tq + qry.row[seg] + i] = (m + log2f(l)) * FA_LN2;
    }
    __syncwarp();
    float inv[FA_ACC_N];
    #pragma unroll
    for (int e = 0; e < FA_ACC_N; e++) inv[e] = stat[frow[e]];
    #pragma unroll
    for (int d = 0; d < ND; d++) {
        #pragma unroll
        for (int e = 0; e < FA_ACC_N; e++) o[d].x[e] *= inv[e];
        wmma::store_matrix_sync(sw + 16 * d, o[d], FA_LDS, wmma::mem_row_major);
    }
    __syncwarp();
    fa_store_rows<HS>(out + row0 * C + h * HS, C, sw, q0 + 16 * w, T);
}

// --- backward ---

// delta (B,NH,T) = rowsum(dout * out) per head: the softmax backward's dot term.
// One thread per 8 channels (16-byte loads), hs/8 consecutive lanes per row
// and head, summed by shuffles in a fixed order.
template <int HS>
__global__ void flash_delta_kernel(float *delta, const floatX *dout, const floatX *out, int B, int T, int NH) {
    constexpr int G = HS / 8;
    int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;  // 16-byte chunk of (B,T,C)
    const int64_t n = (int64_t)B * T * NH * G;
    float acc = 0.0f;
    if (e < n) {
        uint4 a = ((const uint4 *)dout)[e], o = ((const uint4 *)out)[e];
        const floatX2 *a2 = (const floatX2 *)&a, *o2 = (const floatX2 *)&o;
        #pragma unroll
        for (int k = 0; k < 4; k++) {
            float2 af = to_float2(a2[k]), of = to_float2(o2[k]);
            acc += af.x * of.x + af.y * of.y;
        }
    }
    #pragma unroll
    for (int off = G / 2; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
    if (e < n && e % G == 0) {
        int64_t row = e / G;  // (b*T + t)*NH + hd
        int hd = (int)(row % NH);
        int64_t bt = row / NH;
        int t = (int)(bt % T), bb = (int)(bt / T);
        delta[((int64_t)bb * NH + hd) * T + t] = acc;
    }
}

// dk, dv: grid (NH, B, Tk/64), 128 threads; block = key tile kt (longest first),
// warp w = its keys k0+16w .. k0+16w+15 (their k and v stay in shared memory;
// fragments reloaded per query tile, which keeps the kernel within 168
// registers: 3 blocks per SM where 3 fit; FA_DKDV_MIN_BLOCKS). For each query
// tile of each segment with a query that sees a key of the tile (one process:
// qt >= kt; fa_seek_query_tile) (64 queries, column c):
// S^T = k q^T and dP^T = v dout^T (16 x 64), then in registers
// p = 2^(s*sl2 - lse2[c]) where the query's position >= key and the query is a row (else 0),
// ds = p (dp - delta[c]); both as floatX to shared memory, then dv += p^T dout,
// dk += ds^T q. dk is scaled by 1/sqrt(hs) at the end, and written as OutT
// (floatX, or fp32 for context parallel's sum over ranks) to dkv's rows.
// Blocks per SM the dk/dv kernel is built for: its 73 KB of shared memory at
// hs=64 fit 3 blocks in sm_90's and sm_100's 228 KB but only 2 in sm_80's 164
// KB (1 in sm_86's and sm_89's 100 KB), where asking for 3 would cap it at 168
// registers and spill 52 bytes for nothing (nvcc -Xptxas -v); 2 allow 255.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#define FA_DKDV_MIN_BLOCKS 2
#else
#define FA_DKDV_MIN_BLOCKS 3
#endif
template <int HS, typename OutT>
__global__ void __launch_bounds__(FA_THREADS, FA_DKDV_MIN_BLOCKS) flash_backward_dkdv_kernel(
    OutT *dkv, int64_t dkvs, const floatX *qkv, int Tq, const floatX *kv, int64_t kvs, int Tk, FaQueries qry,
    const floatX *dout, const float *lse, const float *delta, int NH, float sl2, float scale) {
    using namespace nvcuda;
    using SM = FaDkvSmem<HS>;
    constexpr int LDH = FaTile<HS>::LDH, ND = HS / 16, TE = FA_TILE * LDH;
    DYNAMIC_SMEM(unsigned char, fa_smem);
    floatX *qs = (floatX *)(fa_smem + SM::Q), *dos = (floatX *)(fa_smem + SM::DO);
    float2 *lds = (float2 *)(fa_smem + SM::LD);  // [2][64] (lse * log2e, delta) per query
    const int w = threadIdx.x >> 5;
    floatX *pt = (floatX *)(fa_smem + SM::PT + w * 2 * FA_WARP_P_BYTES), *dst = pt + 16 * FA_LDS;
    const floatX *kstage = (floatX *)(fa_smem + SM::KV) + 16 * w * LDH, *vstage = kstage + TE;
    const int h = blockIdx.x, b = blockIdx.y, kt = blockIdx.z, k0 = kt * FA_TILE;
    const int C = NH * HS;
    const int64_t C3 = 3 * (int64_t)C;
    const floatX *kbase = kv + (int64_t)b * Tk * kvs + h * HS;
    const floatX *qbase = qkv + (int64_t)b * Tq * C3 + h * HS, *dobase = dout + (int64_t)b * Tq * C + h * HS;
    const float *lrow = lse + ((int64_t)b * NH + h) * Tq, *drow = delta + ((int64_t)b * NH + h) * Tq;

    // query tile qt of segment s: its q and dout tiles into buffer buf, its
    // (lse*log2e, delta) into lds[buf] (plain stores, visible after a barrier)
    auto load_queries = [&](int buf, int s, int qt) {
        const int r0 = qry.row[s], n = qry.len[s];
        fa_load_tile<HS>(qs + buf * TE, qbase + (int64_t)r0 * C3, C3, qt * FA_TILE, n);
        fa_load_tile<HS>(dos + buf * TE, dobase + (int64_t)r0 * C, C, qt * FA_TILE, n);
        if (threadIdx.x < FA_TILE) {
            int q = qt * FA_TILE + threadIdx.x;
            lds[buf * FA_TILE + threadIdx.x] =
                q < n ? make_float2(lrow[r0 + q] * FA_LOG2E, drow[r0 + q]) : make_float2(0.0f, 0.0f);
        }
    };
    int seg = 0, qt = 0;  // the first query tile that sees this key tile
    fa_seek_query_tile(qry, k0, seg, qt);
    fa_load_tile<HS>((floatX *)(fa_smem + SM::KV), kbase, kvs, k0, Tk);
    fa_load_tile<HS>((floatX *)(fa_smem + SM::KV) + TE, kbase + C, kvs, k0, Tk);
    if (seg < qry.n) load_queries(0, seg, qt);
    fa_cp_async_commit();
    fa_cp_async_wait<0>();
    __syncthreads();
    int frow[FA_ACC_N], fcol[FA_ACC_N];
    fa_fragment_coords(frow, fcol, (float *)pt);

    FaFragC dk[ND], dv[ND];
    #pragma unroll
    for (int d = 0; d < ND; d++) {
        wmma::fill_fragment(dk[d], 0.0f);
        wmma::fill_fragment(dv[d], 0.0f);
    }
    for (int it = 0; seg < qry.n; it++) {
        const int buf = it & 1;
        int next_seg = seg, next_qt = qt + 1;
        fa_seek_query_tile(qry, k0, next_seg, next_qt);
        if (next_seg < qry.n) {
            load_queries(buf ^ 1, next_seg, next_qt);
            fa_cp_async_commit();
            fa_cp_async_wait<1>();
        } else {
            fa_cp_async_wait<0>();
        }
        __syncthreads();
        const floatX *q_s = qs + buf * TE, *do_s = dos + buf * TE;
        const float2 *ld_s = lds + buf * FA_TILE;
        const int q0 = qt * FA_TILE, T = qry.len[seg], p0 = qry.pos[seg] + q0;  // (T: the segment's rows)
        FaFragA kf[ND], vf[ND];
        #pragma unroll
        for (int kk = 0; kk < ND; kk++) {
            wmma::load_matrix_sync(kf[kk], kstage + 16 * kk, LDH);
            wmma::load_matrix_sync(vf[kk], vstage + 16 * kk, LDH);
        }
        #pragma unroll 1  // (unrolled, the compiler hoists the loads of all four past 168 registers)
        for (int n = 0; n < 4; n++) {  // queries 16n..16n+15 of the tile
            FaFragC sacc, pacc;
            wmma::fill_fragment(sacc, 0.0f);
            wmma::fill_fragment(pacc, 0.0f);
            #pragma unroll
            for (int kk = 0; kk < ND; kk++) {
                FaFragBt qb, ob;
                wmma::load_matrix_sync(qb, q_s + 16 * n * LDH + 16 * kk, LDH);
                wmma::mma_sync(sacc, kf[kk], qb, sacc);
                wmma::load_matrix_sync(ob, do_s + 16 * n * LDH + 16 * kk, LDH);
                wmma::mma_sync(pacc, vf[kk], ob, pacc);
            }
            #pragma unroll
            for (int e = 0; e < FA_ACC_N; e++) {
                const int c = 16 * n + fcol[e], qi = q0 + c, kj = k0 + 16 * w + frow[e];
                const float2 st = ld_s[c];
                const float p = (p0 + c >= kj && qi < T) ? fa_exp2(sacc.x[e] * sl2 - st.x) : 0.0f;
                pt[frow[e] * FA_LDS + c] = to_floatX(p);
                dst[frow[e] * FA_LDS + c] = to_floatX(p * (pacc.x[e] - st.y));
            }
        }
        __syncwarp();
        fa_mma_16x64_tile<HS>(dv, pt, do_s);   // dv += p^T dout
        fa_mma_16x64_tile<HS>(dk, dst, q_s);   // dk += ds^T q
        __syncthreads();  // buffer buf and this warp's p^T / ds^T free for the next tile
        seg = next_seg, qt = next_qt;
    }
    float *stage = (float *)fa_smem + w * (FA_WARP_S_BYTES / 4);  // over the q tiles, now unused
    OutT *drow0 = dkv + (int64_t)b * Tk * dkvs + h * HS;
    #pragma unroll
    for (int d = 0; d < ND; d++) {
        #pragma unroll
        for (int e = 0; e < FA_ACC_N; e++) dk[d].x[e] *= scale;
        wmma::store_matrix_sync(stage + 16 * d, dk[d], FA_LDS, wmma::mem_row_major);
    }
    __syncwarp();
    fa_store_rows<HS>(drow0, dkvs, stage, k0 + 16 * w, Tk);
    __syncwarp();
    #pragma unroll
    for (int d = 0; d < ND; d++) wmma::store_matrix_sync(stage + 16 * d, dv[d], FA_LDS, wmma::mem_row_major);
    __syncwarp();
    fa_store_rows<HS>(drow0 + C, dkvs, stage, k0 + 16 * w, Tk);
}

// dq: grid (NH, B, query tiles), 128 threads; block = query tile qt of
// segment s (the last positions first), warp w = its queries, whose q and dout
// fragments stay in registers, and whose lse and delta per accumulator element
// are loaded once. For each key tile up to the one of the tile's last query:
// S = q k^T and dP = dout v^T (16 x 64), p and ds = p (dp - delta) in
// registers (key <= the query's position, the query a row, else 0), ds as
// floatX to shared memory, dq += ds k.
template <int HS>
__global__ void __launch_bounds__(FA_THREADS, 3) flash_backward_dq_kernel(floatX *dqkv, const floatX *qkv, int Tq,
                                                                       const floatX *kv, int64_t kvs, int Tk,
                                                                       FaQueries qry, const floatX *dout,
                                                                       const float *lse, const float *delta, int NH,
                                                                       float sl2, float scale) {
    using namespace nvcuda;
    using SM = FaDqSmem<HS>;
    constexpr int LDH = FaTile<HS>::LDH, ND = HS / 16, TE = FA_TILE * LDH;
    DYNAMIC_SMEM(unsigned char, fa_smem);
    floatX *ks = (floatX *)(fa_smem + SM::K), *vs = (floatX *)(fa_smem + SM::V);
    const int w = threadIdx.x >> 5;
    floatX *dsw = (floatX *)(fa_smem + SM::DS + w * FA_WARP_P_BYTES);
    floatX *qstage = ks + TE, *dostage = vs + TE;  // buffer 1 of each, before the loop
    const int h = blockIdx.x, b = blockIdx.y;
    int seg, qt;
    fa_query_tile(qry, gridDim.z - 1 - blockIdx.z, seg, qt);
    const int q0 = qt * FA_TILE, T = qry.len[seg], p0 = qry.pos[seg] + q0;  // (T: the segment's rows)
    const int last = fa_last_key_tile(qry, seg, qt);
    const int C = NH * HS;
    const int64_t C3 = 3 * (int64_t)C, row0 = (int64_t)b * Tq + qry.row[seg];
    const floatX *qbase = qkv + row0 * C3 + h * HS, *dobase = dout + row0 * C + h * HS;
    const floatX *kbase = kv + (int64_t)b * Tk * kvs + h * HS, *vbase = kbase + C;
    const int64_t lse0 = ((int64_t)b * NH + h) * Tq + qry.row[seg];

    fa_load_tile<HS>(qstage, qbase, C3, q0, T);
    fa_load_tile<HS>(dostage, dobase, C, q0, T);
    fa_load_tile<HS>(ks, kbase, kvs, 0, Tk);
    fa_load_tile<HS>(vs, vbase, kvs, 0, Tk);
    fa_cp_async_commit();
    int frow[FA_ACC_N], fcol[FA_ACC_N];
    fa_fragment_coords(frow, fcol, (float *)dsw);
    float lse2[FA_ACC_N], dl[FA_ACC_N];
    #pragma unroll
    for (int e = 0; e < FA_ACC_N; e++) {
        const int qi = q0 + 16 * w + frow[e];
        lse2[e] = qi < T ? lse[lse0 + qi] * FA_LOG2E : 0.0f;
        dl[e] = qi < T ? delta[lse0 + qi] : 0.0f;
    }
    fa_cp_async_wait<0>();
    __syncthreads();
    FaFragA qf[ND], of[ND];
    #pragma unroll
    for (int kk = 0; kk < ND; kk++) {
        wmma::load_matrix_sync(qf[kk], qstage + 16 * w * LDH + 16 * kk, LDH);
        wmma::load_matrix_sync(of[kk], dostage + 16 * w * LDH + 16 * kk, LDH);
    }
    __syncthreads();  // every warp has its q, dout: buffer 1 is free for key tile 1

    FaFragC dq[ND];
    #pragma unroll
    for (int d = 0; d < ND; d++) wmma::fill_fragment(dq[d], 0.0f);
    for (int kt = 0; kt <= last; kt++) {
        const int buf = kt & 1;
        fa_next_kv_tile<HS>(ks, vs, kbase, vbase, kvs, kt, last, Tk);
        __syncthreads();
        const floatX *kt_s = ks + buf * TE, *vt_s = vs + buf * TE;
        #pragma unroll
        for (int n = 0; n < 4; n++) {  // keys 16n..16n+15 of the tile
            FaFragC sacc, pacc;
            wmma::fill_fragment(sacc, 0.0f);
            wmma::fill_fragment(pacc, 0.0f);
            #pragma unroll
            for (int kk = 0; kk < ND; kk++) {
                FaFragBt kb, vb;
                wmma::load_matrix_sync(kb, kt_s + 16 * n * LDH + 16 * kk, LDH);
                wmma::mma_sync(sacc, qf[kk], kb, sacc);
                wmma::load_matrix_sync(vb, vt_s + 16 * n * LDH + 16 * kk, LDH);
                wmma::mma_sync(pacc, of[kk], vb, pacc);
            }
            #pragma unroll
            for (int e = 0; e < FA_ACC_N; e++) {
                const int qi = q0 + 16 * w + frow[e], kj = kt * FA_TILE + 16 * n + fcol[e];
                const float p = (kj <= p0 + (qi - q0) && qi < T) ? fa_exp2(sacc.x[e] * sl2 - lse2[e]) : 0.0f;
                dsw[frow[e] * FA_LDS + 16 * n + fcol[e]] = to_floatX(p * (pacc.x[e] - dl[e]));
            }
        }
        __syncwarp();
        fa_mma_16x64_tile<HS>(dq, dsw, kt_s);  // dq += ds k
        __syncthreads();  // buffer buf and this warp's ds free for the next tile
    }
    float *stage = (float *)fa_smem + w * (FA_WARP_S_BYTES / 4);  // over the k tiles, now unused
    #pragma unroll
    for (int d = 0; d < ND; d++) {
        #pragma unroll
        for (int e = 0; e < FA_ACC_N; e++) dq[d].x[e] *= scale;
        wmma::store_matrix_sync(stage + 16 * d, dq[d], FA_LDS, wmma::mem_row_major);
    }
    __syncwarp();
    fa_store_rows<HS>(dqkv + row0 * C3 + h * HS, C3, stage, q0 + 16 * w, T);
}

// --- host side ---

// Head sizes with a compiled kernel (every GPT-2 preset has 64).
static inline int flash_supports_head_size(int hs) { return hs == 32 || hs == 64; }

// The kernels move 16 bytes at a time: every tensor must start 16-byte aligned
// (the trainer's buffers are 256-byte aligned; C is a multiple of 32).
static inline void flash_check_aligned(const void *p, const char *what) {
    if ((uintptr_t)p % 16 != 0) DIE("flash attention: %s is not 16-byte aligned", what);
}

// Lets kernel use `bytes` of dynamic shared memory (above the 48 KB default).
// The launchers keep the result in a function-local static: set once per
// kernel and process (one GPU a process), not on every launch.
template <typename Kernel> static bool flash_smem_opt_in(Kernel kernel, int bytes) {
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
    return true;
}

// The queries qry of q in qkv (B,Tq,3C) against k (at kv) and v (at kv + C),
// rows of stride kvs, Tk a sequence.
template <int HS>
static void flash_forward_hs(floatX *out, float *lse, const floatX *qkv, int Tq, const floatX *kv, int64_t kvs, int Tk,
                             const FaQueries &qry, int B, int NH, cudaStream_t s) {
    flash_check_aligned(qkv, "qkv");
    flash_check_aligned(kv, "kv");
    flash_check_aligned(out, "out");
    int bytes = FaFwdSmem<HS>::BYTES;
    static const bool opted_in = flash_smem_opt_in(flash_forward_kernel<HS>, bytes);
    (void)opted_in;
    dim3 grid(NH, B, fa_query_tiles(qry));  // tiles slowest: see the top
    launch_kernel(flash_forward_kernel<HS>, grid, FA_THREADS, bytes, s, out, lse, qkv, Tq, kv, kvs, Tk, qry, NH,
                  FA_LOG2E / sqrtf((float)HS));
    CUDA_CHECK_LAUNCH();
}

// dq into dqkv's q channels, dk and dv into dkv (OutT rows of stride dkvs,
// dk at 0, dv at C; Tk a sequence: every key's, from these queries).
template <int HS, typename OutT>
static void flash_backward_hs(floatX *dqkv, OutT *dkv, int64_t dkvs, float *delta, const floatX *dout,
                              const floatX *qkv, int Tq, const floatX *kv, int64_t kvs, int Tk, const FaQueries &qry,
                              const floatX *out, const float *lse, int B, int NH, cudaStream_t s) {
    flash_check_aligned(qkv, "qkv");
    flash_check_aligned(kv, "kv");
    flash_check_aligned(out, "out");
    flash_check_aligned(dout, "dout");
    flash_check_aligned(dqkv, "dqkv");
    flash_check_aligned(dkv, "dkv");
    float scale = 1.0f / sqrtf((float)HS), sl2 = FA_LOG2E * scale;
    int64_t chunks = (int64_t)B * Tq * NH * (HS / 8);
    launch_kernel(flash_delta_kernel<HS>, ceil_div_int(chunks, 256), 256, 0, s, delta, dout, out, B, Tq, NH);
    CUDA_CHECK_LAUNCH();
    int bytes_kv = FaDkvSmem<HS>::BYTES, bytes_q = FaDqSmem<HS>::BYTES;
    static const bool opted_in = flash_smem_opt_in(flash_backward_dkdv_kernel<HS, OutT>, bytes_kv) &&
                                 flash_smem_opt_in(flash_backward_dq_kernel<HS>, bytes_q);
    (void)opted_in;
    launch_kernel(flash_backward_dkdv_kernel<HS, OutT>, dim3(NH, B, ceil_div_int(Tk, FA_TILE)), FA_THREADS, bytes_kv, s,
                  dkv, dkvs, qkv, Tq, kv, kvs, Tk, qry, dout, lse, delta, NH, sl2, scale);
    CUDA_CHECK_LAUNCH();
    launch_kernel(flash_backward_dq_kernel<HS>, dim3(NH, B, fa_query_tiles(qry)), FA_THREADS, bytes_q, s, dqkv, qkv,
                  Tq, kv, kvs, Tk, qry, dout, lse, delta, NH, sl2, scale);  // (tiles slowest: see the top)
    CUDA_CHECK_LAUNCH();
}

// out (B,Tq,C), lse (B,NH,Tq) of the queries qry of qkv (B,Tq,3C) against k
// (at kv) and v (at kv + C), rows of stride kvs, Tk a sequence.
static inline void gpu_flash_attention_forward_queries(floatX *out, float *lse, const floatX *qkv, int Tq,
                                                       const floatX *kv, int64_t kvs, int Tk, const FaQueries &qry,
                                                       int B, int C, int NH, cudaStream_t s) {
    int hs = C / NH;
    if (hs == 64) flash_forward_hs<64>(out, lse, qkv, Tq, kv, kvs, Tk, qry, B, NH, s);
    else if (hs == 32) flash_forward_hs<32>(out, lse, qkv, Tq, kv, kvs, Tk, qry, B, NH, s);
    else DIE("flash attention: head size %d has no kernel (32 or 64)", hs);
}
// out (B,T,C), lse (B,NH,T) from qkv (B,T,3C).
static inline void gpu_flash_attention_forward(floatX *out, float *lse, const floatX *qkv, int B, int T, int C, int NH,
                                               cudaStream_t s) {
    gpu_flash_attention_forward_queries(out, lse, qkv, T, qkv + C, 3 * (int64_t)C, T, fa_queries_whole(T), B, C, NH, s);
}

// The backward of gpu_flash_attention_forward_queries: dq into dqkv's q
// channels (B,Tq,3C), every key's dk | dv from these queries into dkv (B,Tk,2C)
// fp32 (overwritten); delta: (B,NH,Tq) floats of scratch.
static inline void gpu_flash_attention_backward_queries(floatX *dqkv, float *dkv, float *delta, const floatX *dout,
                                                        const floatX *qkv, int Tq, const floatX *kv, int64_t kvs,
                                                        int Tk, const FaQueries &qry, const floatX *out,
                                                        const float *lse, int B, int C, int NH, cudaStream_t s) {
    int hs = C / NH;
    int64_t dkvs = 2 * (int64_t)C;
    if (hs == 64) flash_backward_hs<64>(dqkv, dkv, dkvs, delta, dout, qkv, Tq, kv, kvs, Tk, qry, out, lse, B, NH, s);
    else if (hs == 32) flash_backward_hs<32>(dqkv, dkv, dkvs, delta, dout, qkv, Tq, kv, kvs, Tk, qry, out, lse, B, NH, s);
    else DIE("flash attention: head size %d has no kernel (32 or 64)", hs);
}
// dqkv (B,T,3C) overwritten; delta: (B,NH,T) floats of scratch.
static inline void gpu_flash_attention_backward(floatX *dqkv, float *delta, const floatX *dout, const floatX *qkv,
                                                const floatX *out, const float *lse, int B, int T, int C, int NH,
                                                cudaStream_t s) {
    int hs = C / NH;
    const FaQueries whole = fa_queries_whole(T);
    int64_t C3 = 3 * (int64_t)C;
    if (hs == 64) flash_backward_hs<64>(dqkv, dqkv + C, C3, delta, dout, qkv, T, qkv + C, C3, T, whole, out, lse, B, NH, s);
    else if (hs == 32)
        flash_backward_hs<32>(dqkv, dqkv + C, C3, delta, dout, qkv, T, qkv + C, C3, T, whole, out, lse, B, NH, s);
    else DIE("flash attention: head size %d has no kernel (32 or 64)", hs);
}

#endif  // LLMC_ATTENTION_FLASH_CUH
