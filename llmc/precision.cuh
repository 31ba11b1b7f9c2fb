// precision.cuh: the GPU trainer's compute precision, in one place (llm.c's
// floatX). The weights' compute copy, the activations and the gradients the
// matmuls read are floatX; master weights, gradients, AdamW moments, LayerNorm
// statistics and losses stay fp32. Here: the type, its pair type, the matching
// data type constants of cuBLASLt, cuDNN and llmc/comm.h, the conversions
// (round to nearest, stochastic, bits) and the 16-byte vectors of 8 values the
// memory-bound kernels move. Today floatX is bf16: another 2-byte precision
// (fp16) is a change of this file; FP8 (1 byte, scaled) also changes the
// 8-per-vector helpers below and the kernels' tolerances.
// LLMC_CUDA_EMULATION: tests/cuda_emulator.h stands in for cuda_bf16.h.
#ifndef LLMC_PRECISION_CUH
#define LLMC_PRECISION_CUH

#ifndef LLMC_CUDA_EMULATION
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#endif
#include <stdint.h>

typedef __nv_bfloat16 floatX;   // the compute type
typedef __nv_bfloat162 floatX2; // two of them, packed in 32 bits
#define FLOATX_NAME "bf16"       // as the trainer's messages name it
static_assert(sizeof(floatX) == 2, "the 16-byte vectors below hold 8 floatX");

// The same type as each library names it. Macros, so that this file needs
// none of those headers: each expands where the library's header is included
// (matmul.cuh: cuBLASLt, attention_cudnn.cuh: cuDNN, comm.h: CommDType).
#define CUDA_R_FLOATX CUDA_R_16BF
#define CUDNN_DATA_FLOATX CUDNN_DATA_BFLOAT16
#define COMM_FLOATX COMM_BF16

// The relative error of one round-to-nearest into floatX (2^-8: an 8-bit
// significand): the kernel checks' tolerance for a floatX result.
static const double FLOATX_UNIT_ROUNDOFF = 1.0 / 256;

// ---------------------------------------------------------------------------
// conversions (round to nearest even; exact the other way)

__host__ __device__ __forceinline__ floatX to_floatX(float x) { return __float2bfloat16_rn(x); }
__host__ __device__ __forceinline__ float to_float(floatX x) { return __bfloat162float(x); }
__device__ __forceinline__ floatX2 to_floatX2(float lo, float hi) { return __floats2bfloat162_rn(lo, hi); }
__device__ __forceinline__ float2 to_float2(floatX2 x) { return __bfloat1622float2(x); }
// x rounded to the nearest floatX, as a float (what the device holds of x)
__host__ __device__ __forceinline__ float floatX_round(float x) { return to_float(to_floatX(x)); }
__host__ __device__ __forceinline__ unsigned short floatX_bits(floatX x) { return __bfloat16_as_ushort(x); }
__host__ __device__ __forceinline__ floatX floatX_from_bits(unsigned short u) { return __ushort_as_bfloat16(u); }

// fp32 -> floatX with stochastic rounding: add 16 random low bits, truncate
// (bf16 is fp32's high half). Unbiased: E[result] = x. bits is a per-element
// random 32-bit word.
__device__ __forceinline__ floatX to_floatX_stochastic(float x, uint32_t bits) {
    uint32_t u = __float_as_uint(x);
    if ((u & 0x7f800000u) == 0x7f800000u) return to_floatX(x);  // inf / nan unchanged
    u += bits & 0xffffu;
    return floatX_from_bits((unsigned short)(u >> 16));
}

// ---------------------------------------------------------------------------
// 16-byte vectors: 8 floatX packed in a uint4 (element 2i in the low half of
// word i, as in memory), moved with one 16-byte load or store. The memory-bound
// kernels use them when their pointers are 16-byte aligned and the row length
// is a multiple of 8 (aligned16 in cuda_common.cuh, tested at launch); the _n
// forms move only the first n elements one by one (n <= 0: none; the rest read
// as 0), for the general case with the same element order.

__device__ __forceinline__ uint4 ld_floatX8(const floatX *p) { return *reinterpret_cast<const uint4 *>(p); }
__device__ __forceinline__ void st_floatX8(floatX *p, uint4 v) { *reinterpret_cast<uint4 *>(p) = v; }

__device__ __forceinline__ uint4 ld_floatX8_n(const floatX *p, int n) {
    uint32_t w[4] = {0u, 0u, 0u, 0u};
#pragma unroll
    for (int j = 0; j < 8; j++)
        if (j < n) w[j / 2] |= (uint32_t)floatX_bits(p[j]) << (16 * (j % 2));
    return make_uint4(w[0], w[1], w[2], w[3]);
}
__device__ __forceinline__ void st_floatX8_n(floatX *p, uint4 v, int n) {
    uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int j = 0; j < 8; j++)
        if (j < n) p[j] = floatX_from_bits((unsigned short)(w[j / 2] >> (16 * (j % 2))));
}

// The 8 values as floats (exact: a bf16 is the high half of its fp32), and 8
// floats rounded to nearest into a vector.
__device__ __forceinline__ void floatX8_unpack(float f[8], uint4 v) {
    uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        f[2 * i] = __uint_as_float(w[i] << 16);
        f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
}
// The same values through byte permutes (bf16's bytes placed as fp32's high
// half): a second unpacking that ptxas does not recognise as the first one, so
// it re-derives the floats from a packed row held in registers instead of
// keeping (or spilling) them from an earlier pass.
__device__ __forceinline__ void floatX8_unpack_prmt(float f[8], uint4 v) {
    uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        f[2 * i] = __uint_as_float(__byte_perm(w[i], 0u, 0x1044));
        f[2 * i + 1] = __uint_as_float(__byte_perm(w[i], 0u, 0x3244));
    }
}
__device__ __forceinline__ uint4 floatX8_pack(const float f[8]) {
    uint32_t w[4];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        floatX2 h = to_floatX2(f[2 * i], f[2 * i + 1]);  // .x (low half) = f[2i]
        w[i] = (uint32_t)floatX_bits(h.x) | ((uint32_t)floatX_bits(h.y) << 16);
    }
    return make_uint4(w[0], w[1], w[2], w[3]);
}

#endif  // LLMC_PRECISION_CUH
