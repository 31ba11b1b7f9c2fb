// shards.h: token shard files -- llm.c's plain format and our zstd-compressed
// variant -- with a streaming writer and a reader of any token range that never
// loads the whole shard. All integers are little-endian (the host's order).
//
// Plain (llm.c) format:
//   header: 256 x int32 (1024 bytes): [0] magic, [1] version, [2] number of tokens N
//     magic 20240520, version 1: tokens are uint16
//     magic 20240801, version 7: tokens are uint32
//   then N tokens. File size must be exactly 1024 + N * token_bytes.
//
// Zstd format (only readable/writable when built with LLMC_ZSTD):
//   header: 256 x int32 (1024 bytes):
//     [0] magic SHARD_ZSTD_MAGIC (20241101)  [1] version SHARD_ZSTD_VERSION (1)
//     [2] token_bytes (2 or 4)               [3] block_tokens (tokens per block, B)
//     [4..5] number of tokens N (int64)      [6..7] number of blocks K (int64)
//     [8..9] byte offset of the index (int64), the rest zero
//   then K zstd frames: frame k holds tokens [k*B, min((k+1)*B, N)) as
//     token_bytes-wide integers, with zstd's content size and checksum set;
//   then the index: K x {int64 token_offset, int64 byte_offset, int64 compressed_size}.
//   File size must be exactly index_offset + K * 24. A reader seeks to a block
//   through the index and decodes only the blocks a range needs.
//
// Every defect in a file (wrong magic or version, truncation, a token id >=
// vocab_size, a corrupted zstd frame) is a one-line die_usage naming the file.
#ifndef LLMC_SHARDS_H
#define LLMC_SHARDS_H

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#ifdef LLMC_ZSTD
#include <zstd.h>
#endif

#include "file_io.h"  // defines: AtomicOut, atomic_out_open, atomic_out_write, atomic_out_fail, ...
#include "utils.h"    // defines: CHECK, die_usage, callocCheck, mallocCheck, ...

#define SHARD_HEADER_INTS 256
#define SHARD_HEADER_BYTES (SHARD_HEADER_INTS * (int64_t)sizeof(int32_t))
#define SHARD_U16_MAGIC 20240520
#define SHARD_U16_VERSION 1
#define SHARD_U32_MAGIC 20240801
#define SHARD_U32_VERSION 7
#define SHARD_ZSTD_MAGIC 20241101
#define SHARD_ZSTD_VERSION 1
#define SHARD_ZSTD_BLOCK_TOKENS 16384  // tokens per zstd frame written by shard_writer
#define SHARD_ZSTD_MAX_BLOCK_TOKENS (1 << 24)  // a reader's bound on a header's block size (64 MB decoded)
#define SHARD_PATH_MAX 4096

typedef struct {
    int64_t token_offset;     // first token of the block
    int64_t byte_offset;      // where its frame starts in the file
    int64_t compressed_size;  // bytes of the frame
} ShardBlock;

static inline int64_t shard_get_i64(const int32_t *h, int i) {
    int64_t v;
    memcpy(&v, h + i, sizeof(v));
    return v;
}
static inline void shard_put_i64(int32_t *h, int i, int64_t v) { memcpy(h + i, &v, sizeof(v)); }

// ---------------------------------------------------------------------------
// writer

typedef struct {
    const char *path;   // out.path
    AtomicOut out;      // a temporary next to the shard until shard_writer_close
    int token_bytes;    // 2 or 4
    int zstd_level;     // 0: plain llm.c format
    int64_t num_tokens;
    int64_t file_pos;   // bytes written so far
    uint8_t *buf;       // plain: conversion buffer; zstd: the block being filled (token_bytes wide)
    int64_t buf_tokens; // tokens in buf (zstd)
#ifdef LLMC_ZSTD
    ZSTD_CCtx *cctx;
    uint8_t *frame;     // (ZSTD_compressBound(block bytes)) compressed frame
    size_t frame_cap;
    ShardBlock *index;  // (num_blocks)
    int64_t num_blocks, index_cap;
#endif
} ShardWriter;

#define SHARD_WRITE_CHUNK 65536  // tokens converted per fwrite in plain mode

// Opens a temporary next to PATH for writing (file_io.h); shard_writer_close moves it to PATH.
static inline ShardWriter *shard_writer_open(const char *path, int token_bytes, int zstd_level) {
    CHECK(token_bytes == 2 || token_bytes == 4, "token_bytes must be 2 or 4, not %d", token_bytes);
    CHECK(zstd_level >= 0, "zstd level %d < 0", zstd_level);
    if (strlen(path) >= SHARD_PATH_MAX) die_usage("shard path '%s' is too long", path);
#ifndef LLMC_ZSTD
    if (zstd_level > 0) die_usage("'%s': writing zstd shards needs a build with libzstd", path);
#endif
    ShardWriter *w = (ShardWriter *)callocCheck(1, sizeof(ShardWriter));
    atomic_out_open(&w->out, path);
    w->path = w->out.path;
    w->token_bytes = token_bytes;
    w->zstd_level = zstd_level;
    int32_t header[SHARD_HEADER_INTS] = {0};  // placeholder, rewritten at close
    atomic_out_write(&w->out, header, sizeof(header));
    w->file_pos = SHARD_HEADER_BYTES;
    int64_t buf_tokens = zstd_level > 0 ? SHARD_ZSTD_BLOCK_TOKENS : SHARD_WRITE_CHUNK;
    w->buf = (uint8_t *)mallocCheck((size_t)(buf_tokens * token_bytes));
#ifdef LLMC_ZSTD
    if (zstd_level > 0) {
        w->cctx = ZSTD_createCCtx();
        CHECK(w->cctx != NULL, "ZSTD_createCCtx failed");
        CHECK(!ZSTD_isError(ZSTD_CCtx_setParameter(w->cctx, ZSTD_c_compressionLevel, zstd_level)),
              "bad zstd level %d", zstd_level);
        CHECK(!ZSTD_isError(ZSTD_CCtx_setParameter(w->cctx, ZSTD_c_checksumFlag, 1)), "zstd checksum flag");
        w->frame_cap = ZSTD_compressBound((size_t)(SHARD_ZSTD_BLOCK_TOKENS * token_bytes));
        w->frame = (uint8_t *)mallocCheck(w->frame_cap);
    }
#endif
    return w;
}

// Stores token t at slot i of a token_bytes-wide buffer.
static inline void shard_store_token(const ShardWriter *w, uint8_t *buf, int64_t i, uint32_t t) {
    if (w->token_bytes == 2) {
        if (t > UINT16_MAX) die_usage("'%s': token %u does not fit in a uint16 shard", w->path, t);
        uint16_t v = (uint16_t)t;
        memcpy(buf + 2 * i, &v, 2);
    } else {
        memcpy(buf + 4 * i, &t, 4);
    }
}

#ifdef LLMC_ZSTD
static inline void shard_writer_flush_block(ShardWriter *w) {
    if (w->buf_tokens == 0) return;
    size_t csize = ZSTD_compress2(w->cctx, w->frame, w->frame_cap, w->buf, (size_t)(w->buf_tokens * w->token_bytes));
    CHECK(!ZSTD_isError(csize), "zstd compression of '%s' failed: %s", w->path, ZSTD_getErrorName(csize));
    atomic_out_write(&w->out, w->frame, csize);
    if (w->num_blocks == w->index_cap) {
        w->index_cap = w->index_cap ? 2 * w->index_cap : 64;
        ShardBlock *grown = (ShardBlock *)realloc(w->index, (size_t)w->index_cap * sizeof(ShardBlock));
        CHECK(grown != NULL, "out of memory growing the index of '%s'", w->path);
        w->index = grown;
    }
    w->index[w->num_blocks++] = (ShardBlock){w->num_tokens - w->buf_tokens, w->file_pos, (int64_t)csize};
    w->file_pos += (int64_t)csize;
    w->buf_tokens = 0;
}
#endif

static inline void shard_writer_append(ShardWriter *w, const uint32_t *tokens, size_t n) {
    size_t done = 0;
    while (done < n) {
        if (w->zstd_level == 0) {
            size_t k = n - done < SHARD_WRITE_CHUNK ? n - done : SHARD_WRITE_CHUNK;
            for (size_t i = 0; i < k; i++) shard_store_token(w, w->buf, (int64_t)i, tokens[done + i]);
            atomic_out_write(&w->out, w->buf, (size_t)w->token_bytes * k);
            w->file_pos += (int64_t)(k * (size_t)w->token_bytes);
            w->num_tokens += (int64_t)k;
            done += k;
        }
#ifdef LLMC_ZSTD
        else {
            size_t room = (size_t)(SHARD_ZSTD_BLOCK_TOKENS - w->buf_tokens);
            size_t k = n - done < room ? n - done : room;
            for (size_t i = 0; i < k; i++) shard_store_token(w, w->buf, w->buf_tokens + (int64_t)i, tokens[done + i]);
            w->buf_tokens += (int64_t)k;
            w->num_tokens += (int64_t)k;
            done += k;
            if (w->buf_tokens == SHARD_ZSTD_BLOCK_TOKENS) shard_writer_flush_block(w);
        }
#endif
    }
}

// Writes the header (and the zstd index), fsyncs, and renames the temporary to PATH.
static inline void shard_writer_close(ShardWriter *w) {
    int32_t header[SHARD_HEADER_INTS] = {0};
    if (w->zstd_level == 0) {
        if (w->num_tokens > INT32_MAX)
            die_usage("'%s': %lld tokens do not fit in one llm.c shard (max %d)", w->path, (long long)w->num_tokens,
                      INT32_MAX);
        header[0] = w->token_bytes == 2 ? SHARD_U16_MAGIC : SHARD_U32_MAGIC;
        header[1] = w->token_bytes == 2 ? SHARD_U16_VERSION : SHARD_U32_VERSION;
        header[2] = (int32_t)w->num_tokens;
    }
#ifdef LLMC_ZSTD
    else {
        shard_writer_flush_block(w);
        atomic_out_write(&w->out, w->index, sizeof(ShardBlock) * (size_t)w->num_blocks);
        header[0] = SHARD_ZSTD_MAGIC;
        header[1] = SHARD_ZSTD_VERSION;
        header[2] = w->token_bytes;
        header[3] = SHARD_ZSTD_BLOCK_TOKENS;
        shard_put_i64(header, 4, w->num_tokens);
        shard_put_i64(header, 6, w->num_blocks);
        shard_put_i64(header, 8, w->file_pos);
        ZSTD_freeCCtx(w->cctx);
        free(w->frame);
        free(w->index);
    }
#endif
    if (fseek(w->out.f, 0, SEEK_SET) != 0) atomic_out_fail(&w->out, "writing", errno);
    atomic_out_write(&w->out, header, sizeof(header));
    atomic_out_commit(&w->out);
    free(w->buf);
    free(w);
}

// ---------------------------------------------------------------------------
// reader

typedef struct {
    char path[SHARD_PATH_MAX];
    FILE *f;              // read with pread(fileno(f)); never loaded whole
    int zstd;             // 1: zstd format
    int token_bytes;      // 2 or 4
    int64_t num_tokens;
#ifdef LLMC_ZSTD
    int64_t block_tokens;
    int64_t num_blocks;
    ShardBlock *index;    // (num_blocks)
    ZSTD_DCtx *dctx;
    uint8_t *frame;       // (max compressed_size) one compressed frame
    uint8_t *block;       // (block_tokens * token_bytes) the decoded block cached
    int64_t cached_block; // index of the block in `block`, -1: none
#endif
} ShardReader;

static inline void shard_pread(const ShardReader *r, void *dst, size_t n, int64_t off) {
    uint8_t *p = (uint8_t *)dst;
    while (n > 0) {
        ssize_t got = pread(fileno(r->f), p, n, (off_t)off);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) die_usage("'%s' is truncated or unreadable at byte %lld", r->path, (long long)off);
        p += got;
        n -= (size_t)got;
        off += got;
    }
}

// Opens a shard and validates its header against the file size.
static inline void shard_reader_open(ShardReader *r, const char *path) {
    memset(r, 0, sizeof(*r));
    if (strlen(path) >= SHARD_PATH_MAX) die_usage("shard path '%s' is too long", path);
    snprintf(r->path, sizeof(r->path), "%s", path);
    int64_t size;
    r->f = open_input(path, NULL, &size);
    if (size < SHARD_HEADER_BYTES) die_usage("'%s' is truncated: %lld bytes, shorter than a shard header", path, (long long)size);
    int32_t h[SHARD_HEADER_INTS];
    shard_pread(r, h, sizeof(h), 0);
    if (h[0] == SHARD_U16_MAGIC || h[0] == SHARD_U32_MAGIC) {
        int want = h[0] == SHARD_U16_MAGIC ? SHARD_U16_VERSION : SHARD_U32_VERSION;
        if (h[1] != want) die_usage("'%s': shard version %d, expected %d for magic %d", path, h[1], want, h[0]);
        r->token_bytes = h[0] == SHARD_U16_MAGIC ? 2 : 4;
        r->num_tokens = h[2];
        if (r->num_tokens < 0) die_usage("'%s': negative token count %lld in the header", path, (long long)r->num_tokens);
        int64_t want_size = SHARD_HEADER_BYTES + r->num_tokens * r->token_bytes;
        if (size != want_size)
            die_usage("'%s' is truncated or padded: %lld bytes, the header says %lld tokens (%lld bytes)", path,
                      (long long)size, (long long)r->num_tokens, (long long)want_size);
        return;
    }
    if (h[0] != SHARD_ZSTD_MAGIC)
        die_usage("'%s' is not a token shard: magic %d (expected %d, %d or %d)", path, h[0], SHARD_U16_MAGIC,
                  SHARD_U32_MAGIC, SHARD_ZSTD_MAGIC);
#ifndef LLMC_ZSTD
    die_usage("'%s' is a zstd shard; this build has no libzstd (rebuild with libzstd installed)", path);
#else
    if (h[1] != SHARD_ZSTD_VERSION) die_usage("'%s': zstd shard version %d, expected %d", path, h[1], SHARD_ZSTD_VERSION);
    r->zstd = 1;
    r->token_bytes = h[2];
    r->block_tokens = h[3];
    r->num_tokens = shard_get_i64(h, 4);
    r->num_blocks = shard_get_i64(h, 6);
    int64_t index_off = shard_get_i64(h, 8);
    // every count is checked against the file's real size before it is multiplied or allocated
    if ((r->token_bytes != 2 && r->token_bytes != 4) || r->block_tokens <= 0 ||
        r->block_tokens > SHARD_ZSTD_MAX_BLOCK_TOKENS || r->num_tokens < 0 ||
        r->num_blocks != ceil_div_i64(r->num_tokens, r->block_tokens) || index_off < SHARD_HEADER_BYTES)
        die_usage("'%s': corrupted zstd shard header", path);
    if (index_off > size || r->num_blocks > (size - index_off) / (int64_t)sizeof(ShardBlock) ||
        size != index_off + r->num_blocks * (int64_t)sizeof(ShardBlock))
        die_usage("'%s' is truncated or padded: %lld bytes, the header's index of %lld blocks at byte %lld does not "
                  "end there", path, (long long)size, (long long)r->num_blocks, (long long)index_off);
    r->index = (ShardBlock *)mallocCheck((size_t)r->num_blocks * sizeof(ShardBlock));
    if (r->num_blocks > 0) shard_pread(r, r->index, (size_t)r->num_blocks * sizeof(ShardBlock), index_off);
    int64_t max_frame = 1, next_byte = SHARD_HEADER_BYTES;
    for (int64_t k = 0; k < r->num_blocks; k++) {
        const ShardBlock *b = &r->index[k];
        if (b->token_offset != k * r->block_tokens || b->byte_offset != next_byte || b->compressed_size <= 0 ||
            b->compressed_size > index_off - next_byte)
            die_usage("'%s': corrupted zstd index at block %lld", path, (long long)k);
        next_byte += b->compressed_size;
        if (b->compressed_size > max_frame) max_frame = b->compressed_size;
    }
    if (next_byte != index_off) die_usage("'%s': corrupted zstd index (frames end at %lld, index at %lld)", path,
                                          (long long)next_byte, (long long)index_off);
    r->dctx = ZSTD_createDCtx();
    CHECK(r->dctx != NULL, "ZSTD_createDCtx failed");
    r->frame = (uint8_t *)mallocCheck((size_t)max_frame);
    r->block = (uint8_t *)mallocCheck((size_t)(r->block_tokens * r->token_bytes));
    r->cached_block = -1;
#endif
}

// Widens n token_bytes-wide tokens at src into out (may alias src's start).
static inline void shard_widen(const uint8_t *src, int token_bytes, int64_t n, uint32_t *out) {
    if (token_bytes == 4) {
        memmove(out, src, (size_t)n * 4);
        return;
    }
    for (int64_t i = n - 1; i >= 0; i--) {  // backwards: safe when src == (uint8_t *)out
        uint16_t v;
        memcpy(&v, src + 2 * i, 2);
        out[i] = v;
    }
}

#ifdef LLMC_ZSTD
static inline void shard_load_block(ShardReader *r, int64_t k) {
    if (r->cached_block == k) return;
    const ShardBlock *b = &r->index[k];
    shard_pread(r, r->frame, (size_t)b->compressed_size, b->byte_offset);
    int64_t ntok = (k + 1 < r->num_blocks ? r->block_tokens : r->num_tokens - b->token_offset);
    size_t want = (size_t)(ntok * r->token_bytes);
    size_t got = ZSTD_decompressDCtx(r->dctx, r->block, (size_t)(r->block_tokens * r->token_bytes), r->frame,
                                     (size_t)b->compressed_size);
    if (ZSTD_isError(got) || got != want) {
        r->cached_block = -1;
        die_usage("'%s': corrupted zstd frame at block %lld (%s)", r->path, (long long)k,
                  ZSTD_isError(got) ? ZSTD_getErrorName(got) : "wrong decoded size");
    }
    r->cached_block = k;
}
#endif

// out (end - begin): tokens [begin, end) of the shard. vocab_size > 0: every
// token must be < vocab_size.
static inline void shard_reader_read(ShardReader *r, int64_t begin, int64_t end, int vocab_size, uint32_t *out) {
    CHECK(0 <= begin && begin <= end && end <= r->num_tokens, "range [%lld, %lld) outside '%s' (%lld tokens)",
          (long long)begin, (long long)end, r->path, (long long)r->num_tokens);
    if (!r->zstd) {
        shard_pread(r, out, (size_t)((end - begin) * r->token_bytes), SHARD_HEADER_BYTES + begin * r->token_bytes);
        shard_widen((const uint8_t *)out, r->token_bytes, end - begin, out);
    }
#ifdef LLMC_ZSTD
    else {
        for (int64_t pos = begin; pos < end;) {
            int64_t k = pos / r->block_tokens;
            shard_load_block(r, k);
            int64_t block_end = r->index[k].token_offset + r->block_tokens;
            int64_t stop = end < block_end ? end : block_end;
            shard_widen(r->block + (pos - r->index[k].token_offset) * r->token_bytes, r->token_bytes, stop - pos,
                        out + (pos - begin));
            pos = stop;
        }
    }
#endif
    if (vocab_size > 0) {
        for (int64_t i = 0; i < end - begin; i++) {
            if (out[i] >= (uint32_t)vocab_size)
                die_usage("'%s': token %u at position %lld is >= vocab size %d", r->path, out[i],
                          (long long)(begin + i), vocab_size);
        }
    }
}

static inline void shard_reader_close(ShardReader *r) {
    if (r->f) fcloseCheck(r->f, r->path);
#ifdef LLMC_ZSTD
    if (r->zstd) {
        ZSTD_freeDCtx(r->dctx);
        free(r->frame);
        free(r->block);
        free(r->index);
    }
#endif
    memset(r, 0, sizeof(*r));
}

#endif  // LLMC_SHARDS_H
