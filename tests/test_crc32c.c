// test_crc32c.c: llmc/crc32c.h against a bit-at-a-time CRC32C: the standard
// check value, every length around the three-chain block (3 x 4096 bytes) and
// its multiples at every alignment mod 8, and a long buffer fed in uneven
// pieces (the running CRC continued across calls, as the checkpoint writer
// does, and the pieces' own CRCs combined, as it does with the staging copy's).
#include <stdlib.h>

#include "llmc/crc32c.h"
#include "tests/testing.h"

static uint32_t crc32c_bitwise(uint32_t crc, const unsigned char *p, size_t n) {
    crc = ~crc;
    for (size_t i = 0; i < n; i++) {
        crc ^= p[i];
        for (int k = 0; k < 8; k++) crc = crc & 1 ? (crc >> 1) ^ 0x82F63B78u : crc >> 1;
    }
    return ~crc;
}

int main(void) {
    test_result(crc32c_update(0, "123456789", 9) == 0xE3069283u, "check_value (%08x)", crc32c_update(0, "123456789", 9));
    const size_t block = 3 * 4096, n = 4 * block + 64;
    unsigned char *buf = (unsigned char *)malloc(n + 8);
    uint64_t x = 88172645463325252ull;
    for (size_t i = 0; i < n + 8; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        buf[i] = (unsigned char)(x >> 32);
    }
    const size_t lens[] = {0, 1, 7, 8, 4095, 4096, block - 1, block, block + 1, block + 9, 2 * block, 3 * block - 3,
                           4 * block + 64};
    int bad = 0;
    for (size_t l = 0; l < sizeof(lens) / sizeof(lens[0]); l++)
        for (size_t off = 0; off < 8; off++)
            if (crc32c_update(0x12345678u, buf + off, lens[l]) != crc32c_bitwise(0x12345678u, buf + off, lens[l])) {
                if (!bad) printf("  differs at length %zu, offset %zu\n", lens[l], off);
                bad++;
            }
    test_result(bad == 0, "lengths_and_alignments (%d differ)", bad);
    uint32_t running = 0;
    for (size_t at = 0, piece = 1; at < n; at += piece, piece = piece * 3 + 5) {
        size_t len = n - at < piece ? n - at : piece;
        running = crc32c_update(running, buf + at, len);
    }
    test_result(running == crc32c_bitwise(0, buf, n), "continued_across_pieces");
    uint32_t joined = 0;
    size_t at = 0;
    for (size_t piece = 1; at < n; at += piece, piece = piece * 5 + 3) {
        size_t len = n - at < piece ? n - at : piece;
        joined = crc32c_combine(joined, crc32c_update(0, buf + at, len), len);
    }
    test_result(joined == crc32c_bitwise(0, buf, n) && crc32c_combine(7, 0, 0) == 7, "combined_from_pieces");
    free(buf);
    return test_exit_code();
}
