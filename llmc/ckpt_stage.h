// ckpt_stage.h: a checkpoint's staging copy on the CPU (checkpoint.h, the
// CPU trainer's ZeRO layer zero_cpu.h): elements [lo, hi) of the three states
// (fp32 weights, AdamW m, v) one after the other into the staging buffer, in
// chunks of CKPT_STAGE_CHUNK floats that the training threads share (or the
// writer thread makes, where a core is spare). Each chunk's CRC32C is taken
// as it is written, while it is in cache: the writer combines them
// (ckpt_stage_crc) instead of reading the whole buffer again.
#ifndef LLMC_CKPT_STAGE_H
#define LLMC_CKPT_STAGE_H

#include <stdint.h>
#include <string.h>

#include "crc32c.h"  // defines: crc32c_update, crc32c_combine

#define CKPT_STAGE_CHUNK ((int64_t)1 << 18)  // floats a chunk (1 MB)

// The chunks of a copy of n elements of each state.
static inline int64_t ckpt_stage_chunks(int64_t n) { return 3 * ((n + CKPT_STAGE_CHUNK - 1) / CKPT_STAGE_CHUNK); }

// Chunk k of the copy of src[s][0..n) to staging + s n (s = 0, 1, 2); crcs:
// NULL, or crcs[k] gets its CRC32C.
static inline void ckpt_stage_chunk(float *staging, const float *const src[3], int64_t n, int64_t k, uint32_t *crcs) {
    const int64_t per_state = ckpt_stage_chunks(n) / 3, s = k / per_state, at = (k % per_state) * CKPT_STAGE_CHUNK;
    const size_t bytes = sizeof(float) * (size_t)(n - at < CKPT_STAGE_CHUNK ? n - at : CKPT_STAGE_CHUNK);
    float *dst = staging + s * n + at;
    memcpy(dst, src[s] + at, bytes);
    if (crcs) crcs[k] = crc32c_update(0, dst, bytes);
}

// The CRC32C of a copy of n elements a state (its chunks' crcs), continuing crc.
static inline uint32_t ckpt_stage_crc(uint32_t crc, const uint32_t *crcs, int64_t n) {
    const int64_t chunks = ckpt_stage_chunks(n), per_state = chunks / 3;
    for (int64_t k = 0; k < chunks; k++) {
        int64_t at = (k % per_state) * CKPT_STAGE_CHUNK;
        crc = crc32c_combine(crc, crcs[k], sizeof(float) * (size_t)(n - at < CKPT_STAGE_CHUNK ? n - at : CKPT_STAGE_CHUNK));
    }
    return crc;
}

#endif  // LLMC_CKPT_STAGE_H
