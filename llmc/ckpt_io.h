// ckpt_io.h: the checkpoint writer's file operations (ckpt_writer.h), each
// failure returned as one message naming the file (for the writer's thread to
// hand back): a data file written raw (with O_DIRECT where the file system
// takes it) or zstd-compressed, fsynced; `latest` replaced by rename; a small
// file read whole (the reader's manifest and `latest`).
//
// Tests only: LLMC_TEST_CKPT_FAULT=POINT:STEP makes the writer SIGKILL its own
// process at POINT (after-data, before-manifest, after-manifest, after-rename)
// of the first checkpoint at a step >= STEP, or (POINT write-error) fail the
// data file's write as a full disk would, (latest-error) `latest`'s, (POINT
// slow-MS) sleep MS ms after the data file, a slow disk the loop must not wait
// for, (crawl-MS) sleep MS ms before each chunk of it, a disk whose write
// takes long enough to report its progress, (copy-MS) sleep MS ms before the
// writer thread's staging copy (where it makes it: a writer that lost its core,
// whose copy the next update must wait for), or (direct-refused) fail its
// first O_DIRECT write with EINVAL, as a file system that takes the flag but
// not the write (tests/test_checkpoint.sh, tests/test_ckpt_dir.sh,
// tests/test_ckpt_cost.sh). The writer gives each checkpoint's POINT
// (CkptIO.kill_point).
#ifndef LLMC_CKPT_IO_H
#define LLMC_CKPT_IO_H

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#ifdef LLMC_ZSTD
#include <zstd.h>
#endif

#include "ckpt_dir.h"  // defines: CKPT_FILE_MAX, CKPT_NAME_MAX, CKPT_LATEST_FILE
#include "crc32c.h"    // defines: crc32c_update
#include "file_io.h"   // defines: fsync_dir_err
#include "utils.h"     // defines: wall_seconds, mallocCheck, CHECK, DIE

#define CKPT_ERR_MAX 1400
#define CKPT_CHUNK ((size_t)8 << 20)  // bytes per read, write, compression call
#define CKPT_DIRECT_ALIGN 4096         // O_DIRECT writes: the buffer's address, the offsets and lengths multiples of this
#define CKPT_PROGRESS_S 5.0            // a data file's write longer than this says how far it got, this often

typedef struct {
    char *err;  // (CKPT_ERR_MAX)
    const char *kill_point;  // LLMC_TEST_CKPT_FAULT's point for this checkpoint, or NULL
    const char *progress;    // the data file whose write reports its progress on stdout (rank 0's), or NULL
} CkptIO;

static inline int ckpt_io_fail(CkptIO *io, const char *what, const char *path, int err) {
    snprintf(io->err, CKPT_ERR_MAX, "checkpoint: %s '%s' failed: %s", what, path, strerror(err));
    return 0;
}

// Tests only: dies by SIGKILL at the named point of the writing.
static inline void ckpt_kill_point(const CkptIO *io, const char *point) {
    if (io->kill_point && strcmp(io->kill_point, point) == 0) {
        fprintf(stderr, "LLMC_TEST_CKPT_FAULT: killed at %s\n", point);
        fflush(stderr);
        raise(SIGKILL);
    }
}

// The sleep of the fault point KIND-MS (slow-, crawl-, copy-), when it is this checkpoint's.
static inline void ckpt_fault_sleep(const CkptIO *io, const char *kind) {
    size_t len = strlen(kind);
    if (!io->kill_point || strncmp(io->kill_point, kind, len) != 0) return;
    int ms = atoi(io->kill_point + len);
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}

// Before each chunk of a data file (done of n bytes, t0 its start): crawl-MS's
// sleep, and every CKPT_PROGRESS_S seconds (*next_s) a line on how far the
// write got.
static inline void ckpt_write_progress(const CkptIO *io, size_t done, size_t n, double t0, double *next_s) {
    ckpt_fault_sleep(io, "crawl-");
    double t = wall_seconds() - t0;
    if (!io->progress || t < *next_s) return;
    printf("checkpoint: writing %s: %.0f of %.0f MB (%.0f%%) after %.0f s\n", io->progress, done / 1e6, n / 1e6,
           100.0 * (double)done / (double)(n ? n : 1), t);
    fflush(stdout);
    *next_s += CKPT_PROGRESS_S;
}

static inline int ckpt_write_all(int fd, const void *buf, size_t n) {
    const char *p = (const char *)buf;
    while (n > 0) {
        ssize_t k = write(fd, p, n);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) return errno;
        if (k == 0) return EIO;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

// O_DIRECT on fd (on = 1) or off: 1 when it is now on. A direct write goes
// from the buffer to the disk with no copy into the page cache, the largest
// CPU cost of a buffered one (taken from the training threads where no core
// is spare). A file system may refuse the flag (EINVAL: 0, buffered writes).
static inline int ckpt_direct(int fd, int on) {
    int fl = fcntl(fd, F_GETFL);
    return fl >= 0 && fcntl(fd, F_SETFL, on ? fl | O_DIRECT : fl & ~O_DIRECT) == 0 && on;
}

// Writes data[0..n) to fd, the new file path, zstd-compressed at level
// compress > 0, fsynced and closed (removed on a failure). crc_known: raw
// data whose CRC32C *crc already holds (the staging copy's). Raw data from a
// CKPT_DIRECT_ALIGN-aligned buffer goes with O_DIRECT where the file system
// takes it (the tail that is not a whole block, and everything after a
// direct write it refuses with EINVAL, buffered; *direct says whether any
// went direct; NULL: buffered). Returns 1 with its size and CRC32C, or 0
// (io->err).
static inline int ckpt_write_fd(CkptIO *io, int fd, const char *path, const void *data, size_t n, int compress,
                                int *direct, int64_t *bytes, uint32_t *crc, int crc_known) {
    int err = 0;
    double t0 = wall_seconds(), next_s = CKPT_PROGRESS_S;
    *bytes = 0;
    if (!crc_known) *crc = 0;
    if (compress <= 0) {
        int on = direct && n >= CKPT_DIRECT_ALIGN && (uintptr_t)data % CKPT_DIRECT_ALIGN == 0 && ckpt_direct(fd, 1);
        int refuse = on && io->kill_point && strcmp(io->kill_point, "direct-refused") == 0;  // (tests)
        if (direct) *direct = 0;
        for (size_t off = 0; off < n && !err;) {
            size_t len = n - off < CKPT_CHUNK ? n - off : CKPT_CHUNK;
            if (on && len % CKPT_DIRECT_ALIGN != 0) {  // the last chunk's whole blocks direct, then its tail buffered
                if (len > CKPT_DIRECT_ALIGN) len -= len % CKPT_DIRECT_ALIGN;
                else on = ckpt_direct(fd, 0);
            }
            ckpt_write_progress(io, off, n, t0, &next_s);
            err = refuse ? EINVAL : ckpt_write_all(fd, (const char *)data + off, len);
            if (err == EINVAL && on) {  // the flag taken, the write refused: this chunk again, and the rest, buffered
                ckpt_direct(fd, 0);
                on = refuse = 0;
                err = lseek(fd, (off_t)off, SEEK_SET) < 0 ? errno : 0;
                continue;
            }
            if (on && !err) *direct = 1;
            if (!crc_known) *crc = crc32c_update(*crc, (const char *)data + off, len);
            off += len;
        }
        *bytes = (int64_t)n;
    } else {
#ifdef LLMC_ZSTD
        ZSTD_CCtx *cc = ZSTD_createCCtx();
        CHECK(cc != NULL, "out of memory");
        ZSTD_CCtx_setParameter(cc, ZSTD_c_compressionLevel, compress);
        ZSTD_CCtx_setPledgedSrcSize(cc, n);
        size_t out_cap = ZSTD_CStreamOutSize();
        char *out = (char *)mallocCheck(out_cap);
        ZSTD_inBuffer in = {data, n, 0};
        size_t left;
        do {
            ckpt_write_progress(io, in.pos, n, t0, &next_s);
            ZSTD_outBuffer ob = {out, out_cap, 0};
            left = ZSTD_compressStream2(cc, &ob, &in, ZSTD_e_end);
            CHECK(!ZSTD_isError(left), "zstd compression failed: %s", ZSTD_getErrorName(left));
            *crc = crc32c_update(*crc, out, ob.pos);
            *bytes += (int64_t)ob.pos;
            err = ckpt_write_all(fd, out, ob.pos);
        } while (left != 0 && !err);
        free(out);
        ZSTD_freeCCtx(cc);
#else
        DIE("--ckpt-compress needs a build with zstd");
#endif
    }
    if (!err && fsync(fd) != 0) err = errno;
    if (close(fd) != 0 && !err) err = errno;
    if (err) {
        unlink(path);
        return ckpt_io_fail(io, "writing", path, err);
    }
    return 1;
}

// The same into path, created (never over an existing file or a link).
static inline int ckpt_write_file(CkptIO *io, const char *path, const void *data, size_t n, int compress,
                                  int *direct, int64_t *bytes, uint32_t *crc, int crc_known) {
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) return ckpt_io_fail(io, "creating", path, errno);
    return ckpt_write_fd(io, fd, path, data, n, compress, direct, bytes, crc, crc_known);
}

// `latest` in dir names the step directory `name`: written to a temporary
// made by mkstemp (latest.tmp.XXXXXX), fsynced, renamed, the directory
// fsynced. Returns 1, or 0 (io->err) -- a failed write like any other.
static inline int ckpt_write_latest(CkptIO *io, const char *dir, const char *name) {
    char path[CKPT_FILE_MAX], tmp[CKPT_FILE_MAX + 16], text[CKPT_NAME_MAX];
    snprintf(path, sizeof(path), "%s/" CKPT_LATEST_FILE, dir);
    snprintf(tmp, sizeof(tmp), "%s.tmp.XXXXXX", path);
    if (io->kill_point && strcmp(io->kill_point, "latest-error") == 0) return ckpt_io_fail(io, "writing", path, ENOSPC);
    int fd = mkstemp(tmp), err;
    if (fd < 0) return ckpt_io_fail(io, "creating a file next to", path, errno);
    int64_t bytes;
    uint32_t crc;
    int len = snprintf(text, sizeof(text), "%s\n", name);
    if (fchmod(fd, 0644) != 0) {
        err = errno;
        close(fd);
        unlink(tmp);
        return ckpt_io_fail(io, "creating", tmp, err);
    }
    if (!ckpt_write_fd(io, fd, tmp, text, (size_t)len, 0, NULL, &bytes, &crc, 0)) return 0;
    if (rename(tmp, path) != 0) {
        err = errno;
        unlink(tmp);
        return ckpt_io_fail(io, "renaming the new", path, err);
    }
    if ((err = fsync_dir_err(dir)) != 0) return ckpt_io_fail(io, "syncing", dir, err);
    return 1;
}

// Reads a whole small file (the manifest, `latest`) into a NUL-terminated buffer; NULL: errno.
static inline char *ckpt_slurp(const char *path, size_t max_bytes, size_t *len) {
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return NULL;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || (size_t)st.st_size > max_bytes) {
        close(fd);
        errno = EINVAL;
        return NULL;
    }
    char *buf = (char *)mallocCheck((size_t)st.st_size + 1);
    size_t got = 0;
    while (got < (size_t)st.st_size) {
        ssize_t k = read(fd, buf + got, (size_t)st.st_size - got);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        got += (size_t)k;
    }
    close(fd);
    buf[got] = '\0';
    *len = got;
    return buf;
}

#endif  // LLMC_CKPT_IO_H
