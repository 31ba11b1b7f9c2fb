// crc32c.h: CRC32C (Castagnoli), the SSE4.2 instruction where the build has
// it, a table otherwise. Checkpoints use it for their data files and their
// manifest (checkpoint.h, ckpt_manifest.h), the data loader for the sample of
// a data set's contents a checkpoint records (dataloader.h).
//
// The instruction has a latency of 3 cycles and a throughput of 1: one chain
// of it runs at a third of its speed. Blocks of 3 x CRC32C_STRIDE bytes are
// therefore checksummed as three interleaved chains, the first continuing
// the running CRC, the other two from zero, joined by shifting a chain's
// register over the CRC32C_STRIDE bytes that follow it (a linear map of the
// register, kept as four byte tables, built once) and xoring the next.
#ifndef LLMC_CRC32C_H
#define LLMC_CRC32C_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__SSE4_2__) && defined(__x86_64__)
#define CRC32C_STRIDE 4096  // bytes per chain in a block of three

static inline uint64_t crc32c_load64(const unsigned char *p) {
    uint64_t w;
    memcpy(&w, p, 8);
    return w;
}

// The raw register (not inverted) after n zero bytes (n a multiple of 8).
static inline uint32_t crc32c_zeros(uint32_t r, size_t n) {
    for (; n > 0; n -= 8) r = (uint32_t)__builtin_ia32_crc32di(r, 0);
    return r;
}

// The register r moved over CRC32C_STRIDE zero bytes, by its four bytes' tables.
static inline uint32_t crc32c_shift(uint32_t r) {
    static uint32_t table[4][256];
    static int ready = 0;
    if (!__atomic_load_n(&ready, __ATOMIC_ACQUIRE)) {  // (racing builders write the same values)
        uint32_t bit[32];
        for (int b = 0; b < 32; b++) bit[b] = crc32c_zeros(1u << b, CRC32C_STRIDE);
        for (int k = 0; k < 4; k++)
            for (uint32_t v = 0; v < 256; v++) {
                uint32_t s = 0;
                for (int b = 0; b < 8; b++)
                    if (v >> b & 1) s ^= bit[8 * k + b];
                table[k][v] = s;
            }
        __atomic_store_n(&ready, 1, __ATOMIC_RELEASE);
    }
    return table[0][r & 0xFF] ^ table[1][r >> 8 & 0xFF] ^ table[2][r >> 16 & 0xFF] ^ table[3][r >> 24];
}
#endif

// The CRC32C of data[0..n) continuing from crc (0 to start).
static inline uint32_t crc32c_update(uint32_t crc, const void *data, size_t n) {
    const unsigned char *p = (const unsigned char *)data;
    crc = ~crc;
#if defined(__SSE4_2__) && defined(__x86_64__)
    for (; n >= 3 * CRC32C_STRIDE; n -= 3 * CRC32C_STRIDE, p += 3 * CRC32C_STRIDE) {
        uint64_t a = crc, b = 0, c = 0;
        for (size_t i = 0; i < CRC32C_STRIDE; i += 8) {
            a = __builtin_ia32_crc32di((uint32_t)a, crc32c_load64(p + i));
            b = __builtin_ia32_crc32di((uint32_t)b, crc32c_load64(p + CRC32C_STRIDE + i));
            c = __builtin_ia32_crc32di((uint32_t)c, crc32c_load64(p + 2 * CRC32C_STRIDE + i));
        }
        crc = crc32c_shift(crc32c_shift((uint32_t)a) ^ (uint32_t)b) ^ (uint32_t)c;
    }
    for (; n >= 8; n -= 8, p += 8) crc = (uint32_t)__builtin_ia32_crc32di(crc, crc32c_load64(p));
    for (; n > 0; n--) crc = __builtin_ia32_crc32qi(crc, *p++);
#else
    static uint32_t table[256];
    static int ready = 0;
    if (!__atomic_load_n(&ready, __ATOMIC_ACQUIRE)) {
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = i;
            for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
            table[i] = c;
        }
        __atomic_store_n(&ready, 1, __ATOMIC_RELEASE);
    }
    for (; n > 0; n--) crc = table[(crc ^ *p++) & 0xFF] ^ (crc >> 8);
#endif
    return ~crc;
}

// a(x) b(x) mod P(x), bit-reflected (the CRC's own order: bit 31 is x^0).
static inline uint32_t crc32c_multiply(uint32_t a, uint32_t b) {
    uint32_t product = 0;
    for (uint32_t m = 1u << 31; m != 0; m >>= 1) {
        if (a & m) product ^= b;
        b = b & 1 ? (b >> 1) ^ 0x82F63B78u : b >> 1;
    }
    return product;
}

// The CRC32C of A followed by B, from crc_a, crc_b (each crc32c_update's
// from 0) and B's length: crc_a moved over len_b zero bytes (a product with
// x^(8 len_b), from the powers x^(2^k)), xored with crc_b.
static inline uint32_t crc32c_combine(uint32_t crc_a, uint32_t crc_b, size_t len_b) {
    uint32_t power = 1u << 23;  // x^8: one byte
    for (; len_b > 0; len_b >>= 1) {
        if (len_b & 1) crc_a = crc32c_multiply(power, crc_a);
        power = crc32c_multiply(power, power);
    }
    return crc_a ^ crc_b;
}

#endif  // LLMC_CRC32C_H
