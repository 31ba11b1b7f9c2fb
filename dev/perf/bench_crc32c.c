// bench_crc32c.c: the checkpoint writer's CRC32C (llmc/crc32c.h, three
// interleaved chains of the SSE4.2 instruction) against one chain of it, and
// a memcpy of the same bytes, on a buffer larger than the caches; GB/s, the
// best of 5 rounds. Not part of `make test`. Build and run:
//   make build/dev/perf/bench_crc32c && build/dev/perf/bench_crc32c [MB]
#include <stdio.h>
#include <stdlib.h>

#include "llmc/crc32c.h"
#include "llmc/utils.h"

#if !defined(__SSE4_2__) || !defined(__x86_64__)
int main(void) {
    puts("bench_crc32c: this build has no SSE4.2 CRC32 instruction (x86-64 only)");
    return 0;
}
#else

// One dependent chain of the instruction (n a multiple of 8): its latency, not its throughput, sets the pace.
static uint32_t crc32c_one_chain(uint32_t crc, const unsigned char *p, size_t n) {
    crc = ~crc;
    for (; n >= 8; n -= 8, p += 8) crc = (uint32_t)__builtin_ia32_crc32di(crc, crc32c_load64(p));
    return ~crc;
}

int main(int argc, char **argv) {
    size_t n = (size_t)(argc > 1 ? atol(argv[1]) : 512) << 20;
    unsigned char *buf = (unsigned char *)alignedMallocCheck(n), *dst = (unsigned char *)alignedMallocCheck(n);
    for (size_t i = 0; i < n; i++) buf[i] = (unsigned char)(i * 2654435761u >> 13);
    memset(dst, 0, n);
    double best[3] = {1e30, 1e30, 1e30};
    uint32_t c[2] = {0, 0};
    for (int round = 0; round < 5; round++) {
        double t0 = wall_seconds();
        c[0] = crc32c_one_chain(0, buf, n);
        double t1 = wall_seconds();
        c[1] = crc32c_update(0, buf, n);
        double t2 = wall_seconds();
        memcpy(dst, buf, n);
        double t3 = wall_seconds(), t[3] = {t1 - t0, t2 - t1, t3 - t2};
        for (int k = 0; k < 3; k++) best[k] = t[k] < best[k] ? t[k] : best[k];
    }
    printf("%zu MB: one chain %.2f GB/s | three chains (crc32c_update) %.2f GB/s | memcpy %.2f GB/s%s\n", n >> 20,
           n / best[0] / 1e9, n / best[1] / 1e9, n / best[2] / 1e9, c[0] == c[1] ? "" : " | CRCs DIFFER");
    free(buf);
    free(dst);
    return c[0] != c[1];
}
#endif
