// fuzz_shard.c: the token shard reader (llmc/shards.h), plain and zstd, on
// arbitrary file contents (any defect must be one line and exit 2, never a
// read out of bounds or an allocation the file cannot back), and the property
// that what the writer writes the reader reads back unchanged.
//   input[0] bit 0 = 0: the rest is a shard file, read whole in ranges
//   input[0] bit 0 = 1: the rest is tokens (uint16 pairs), written at zstd
//                       level input[0] >> 1 (0: plain) and read back
#include "llmc/shards.h"
#include "tests/fuzz/fuzz_harness.h"

#define FUZZ_SHARD_MAX_READ (1 << 20)  // tokens read from a file that claims more

static ShardReader reader;  // file scope: release_zstd frees its zstd context after an exit
static ShardWriter *writer;

static void release_zstd(void) {
#ifdef LLMC_ZSTD
    if (reader.dctx) ZSTD_freeDCtx(reader.dctx);
    if (writer && writer->cctx) ZSTD_freeCCtx(writer->cctx);
#endif
    memset(&reader, 0, sizeof(reader));
    writer = NULL;
}

static void read_shard_file(const uint8_t *data, size_t size) {
    const char *path = fuzz_write_file("shard.bin", data, size);
    ShardReader *r = &reader;
    shard_reader_open(r, path);
    int64_t n = r->num_tokens < FUZZ_SHARD_MAX_READ ? r->num_tokens : FUZZ_SHARD_MAX_READ;
    uint32_t *out = (uint32_t *)mallocCheck(sizeof(uint32_t) * (size_t)(n > 0 ? n : 1));
    // ranges of a few lengths, so reads that start and end inside zstd blocks are covered
    for (int64_t pos = 0, len = 1; pos < n; pos += len, len = len * 3 + 1) {
        int64_t end = pos + len < n ? pos + len : n;
        shard_reader_read(r, pos, end, 50257, out);
    }
    free(out);
    shard_reader_close(r);
}

static void write_then_read(const uint8_t *data, size_t size) {
    int level = data[0] >> 1;
    size_t n = (size - 1) / 2;
    uint32_t *tokens = (uint32_t *)mallocCheck(sizeof(uint32_t) * (n + 1));
    for (size_t i = 0; i < n; i++) tokens[i] = (uint32_t)data[1 + 2 * i] | (uint32_t)data[2 + 2 * i] << 8;
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/roundtrip.bin", fuzz_scratch_dir());
    writer = shard_writer_open(path, 2, level > 19 ? 19 : level);
    for (size_t done = 0, chunk = 1; done < n; done += chunk, chunk = chunk * 2 + 1)
        shard_writer_append(writer, tokens + done, done + chunk < n ? chunk : n - done);
    shard_writer_close(writer);
    writer = NULL;
    ShardReader *r = &reader;
    shard_reader_open(r, path);
    if (r->num_tokens != (int64_t)n) abort();
    uint32_t *back = (uint32_t *)mallocCheck(sizeof(uint32_t) * (n + 1));
    shard_reader_read(r, 0, (int64_t)n, 0, back);
    if (n && memcmp(back, tokens, sizeof(uint32_t) * n) != 0) abort();
    shard_reader_close(r);
    free(back);
    free(tokens);
}

static void fuzz_one(const uint8_t *data, size_t size) {
    if (size == 0) return;
    if (data[0] & 1) write_then_read(data, size);
    else read_shard_file(data + 1, size - 1);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_run(fuzz_one, release_zstd, data, size);
    return 0;
}
