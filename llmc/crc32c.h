// crc32c.h: CRC32C (Castagnoli), the SSE4.2 instruction where the build has
// it, a table otherwise. Checkpoints use it for their data files and their
// manifest (checkpoint.h, ckpt_manifest.h), the data loader for the sample of
// a data set's contents a checkpoint records (dataloader.h).
#ifndef LLMC_CRC32C_H
#define LLMC_CRC32C_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

// The CRC32C of data[0..n) continuing from crc (0 to start).
static inline uint32_t crc32c_update(uint32_t crc, const void *data, size_t n) {
    const unsigned char *p = (const unsigned char *)data;
    crc = ~crc;
#if defined(__SSE4_2__) && defined(__x86_64__)
    for (; n >= 8; n -= 8, p += 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        crc = (uint32_t)__builtin_ia32_crc32di(crc, w);
    }
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

#endif  // LLMC_CRC32C_H
