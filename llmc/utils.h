// utils.h: error handling shared by every host program: fatal errors that name
// file:line (each line one write(2)), checked allocation (and zeroed buffers
// mapped a page at a time), checked file I/O, a monotonic clock, and the OpenMP
// thread count and index (1 and 0 in a build without OpenMP).
// Convention: a user error (bad flag, bad file) exits with status 2 and one line
// on stderr; an internal error (allocation, I/O failure) exits with status 1.
#ifndef LLMC_UTILS_H
#define LLMC_UTILS_H

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#define EXIT_USAGE 2  // bad flag, bad value, bad input file

// Only the first thread to fail reports and exits; any other (a data loader's
// prefetch thread finding a bad shard at the same moment) waits for the exit,
// so a failure is always exactly one line.
// (GCC's __atomic builtin: the header is also compiled as C++ by nvcc, where
// <stdatomic.h>'s atomic_int does not exist before C++23.)
// (File scope, so that the fuzz harness, tests/fuzz/fuzz_harness.h, which
// survives the exit, can clear it for the next input.)
static int die_claimed = 0;
static inline void die_claim(void) {
    if (__atomic_exchange_n(&die_claimed, 1, __ATOMIC_SEQ_CST)) for (;;) pause();
}

// Writes prefix, the formatted message and a newline to stderr in one
// write(2): the ranks of a job share one terminal or one launcher pipe, and a
// line written in pieces interleaves with theirs ("error: error: ..."). A line
// longer than the buffer is cut short (still one line).
static inline void stderr_line_v(const char *prefix, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));
static inline void stderr_line_v(const char *prefix, const char *fmt, va_list ap) {
    char buf[8192];
    size_t cap = sizeof(buf) - 1, n = (size_t)snprintf(buf, cap, "%s", prefix);
    if (n < cap) {
        int m = vsnprintf(buf + n, cap - n, fmt, ap);
        n += m > 0 ? (size_t)m : 0;
    }
    if (n > cap - 1) n = cap - 1;
    buf[n++] = '\n';
    fflush(stderr);  // (anything a stream holds goes first)
    for (size_t off = 0; off < n;) {
        ssize_t w = write(STDERR_FILENO, buf + off, n - off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) break;
        off += (size_t)w;
    }
}

// Set while every rank of a job checks the same flags alike (the trainers'
// start-up: train_options.h): a usage error is then every rank's, and only
// the launcher's rank 0 prints it; the others exit with the same status silently.
static int die_usage_quiet = 0;

// die_usage: a one-line user-facing error (no file:line, the message names the
// flag or file), exit status 2.
static inline void die_usage(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
static inline void die_usage(const char *fmt, ...) {
    die_claim();
    va_list ap;
    va_start(ap, fmt);
    if (!die_usage_quiet) stderr_line_v("error: ", fmt, ap);
    va_end(ap);
    // A silent rank waits before it exits: under mpirun a rank's non-zero exit aborts the job, which would
    // otherwise kill rank 0 before its line is written (rank 0's own exit ends the wait)
    if (die_usage_quiet) sleep(2);
    exit(EXIT_USAGE);
}

// die_at: an internal failure, reported with the source location.
static inline void die_at(const char *file, int line, const char *fmt, ...)
    __attribute__((noreturn, format(printf, 3, 4)));
static inline void die_at(const char *file, int line, const char *fmt, ...) {
    die_claim();
    char prefix[FILENAME_MAX + 32];
    snprintf(prefix, sizeof(prefix), "error at %s:%d: ", file, line);
    va_list ap;
    va_start(ap, fmt);
    stderr_line_v(prefix, fmt, ap);
    va_end(ap);
    exit(EXIT_FAILURE);
}
#define DIE(...) die_at(__FILE__, __LINE__, __VA_ARGS__)
#define CHECK(cond, ...) do { if (!(cond)) die_at(__FILE__, __LINE__, __VA_ARGS__); } while (0)

static inline void *malloc_check_at(size_t size, const char *file, int line) {
    void *p = malloc(size > 0 ? size : 1);
    if (p == NULL) die_at(file, line, "out of memory allocating %zu bytes", size);
    return p;
}
#define mallocCheck(size) malloc_check_at((size), __FILE__, __LINE__)

static inline void *calloc_check_at(size_t n, size_t size, const char *file, int line) {
    void *p = calloc(n > 0 ? n : 1, size > 0 ? size : 1);
    if (p == NULL) die_at(file, line, "out of memory allocating %zu x %zu bytes", n, size);
    return p;
}
#define callocCheck(n, size) calloc_check_at((n), (size), __FILE__, __LINE__)

static inline void *realloc_check_at(void *p, size_t size, const char *file, int line) {
    void *q = realloc(p, size > 0 ? size : 1);
    if (q == NULL) die_at(file, line, "out of memory growing a buffer to %zu bytes", size);
    return q;
}
#define reallocCheck(p, size) realloc_check_at((p), (size), __FILE__, __LINE__)

// Room for one more item in a growable array p holding n of cap items: when full, cap doubles (from
// `first`) and p is reallocated (checked). p and cap are assigned.
static inline void *array_room_at(void *p, int n, int *cap, int first, size_t item, const char *file, int line) {
    if (n < *cap) return p;
    *cap = *cap ? 2 * *cap : first;
    return realloc_check_at(p, item * (size_t)*cap, file, line);
}
#define array_room(p, n, cap, first) \
    ((p) = (__typeof__(p))array_room_at((p), (n), &(cap), (first), sizeof(*(p)), __FILE__, __LINE__))

// 64-byte aligned allocation for vectorised kernels. A buffer of 2 MB or more
// (the activations, every byte of which a step writes and reads again) is
// 2 MB aligned and asks for transparent huge pages (madvise: Linux's default
// THP mode takes them only where asked): the step's passes over tens of MB
// then miss the TLB once per 2 MB, not once per 4 KB page (the v65 benchmark
// model's step 1.5-2% faster, dev/perf/NOTES.md). Without THP the advice does nothing.
#define HUGE_PAGE_BYTES ((size_t)2 << 20)
static inline void *aligned_malloc_check_at(size_t size, const char *file, int line) {
    void *p = NULL;
    size_t align = size >= HUGE_PAGE_BYTES ? HUGE_PAGE_BYTES : 64;
    size_t rounded = (size + align - 1) / align * align;
    if (posix_memalign(&p, align, rounded > 0 ? rounded : 64) != 0) {
        die_at(file, line, "out of memory allocating %zu bytes", size);
    }
#ifdef MADV_HUGEPAGE
    if (align == HUGE_PAGE_BYTES) (void)madvise(p, rounded, MADV_HUGEPAGE);
#endif
    return p;
}
#define alignedMallocCheck(size) aligned_malloc_check_at((size), __FILE__, __LINE__)

// Files opened by the user's flags: failure is a usage error naming the file.
static inline FILE *fopen_check_at(const char *path, const char *mode, const char *file, int line) {
    FILE *f = fopen(path, mode);
    if (f == NULL) {
        (void)file; (void)line;
        die_usage("cannot open '%s' (mode %s)", path, mode);
    }
    return f;
}
#define fopenCheck(path, mode) fopen_check_at((path), (mode), __FILE__, __LINE__)

// Reads exactly n items or dies naming the file: a short read means truncation.
static inline void fread_exact_at(void *ptr, size_t size, size_t n, FILE *f, const char *path,
                                  const char *file, int line) {
    size_t got = fread(ptr, size, n, f);
    if (got != n) {
        (void)file; (void)line;
        die_usage("'%s' is truncated or unreadable (wanted %zu items of %zu bytes, got %zu)", path, n,
                  size, got);
    }
}
#define freadExact(ptr, size, n, f, path) fread_exact_at((ptr), (size), (n), (f), (path), __FILE__, __LINE__)

static inline void fwrite_exact_at(const void *ptr, size_t size, size_t n, FILE *f, const char *path,
                                   const char *file, int line) {
    if (fwrite(ptr, size, n, f) != n) die_at(file, line, "write to '%s' failed", path);
}
#define fwriteExact(ptr, size, n, f, path) fwrite_exact_at((ptr), (size), (n), (f), (path), __FILE__, __LINE__)

static inline void fclose_check_at(FILE *f, const char *path, const char *file, int line) {
    if (fclose(f) != 0) die_at(file, line, "closing '%s' failed", path);
}
#define fcloseCheck(f, path) fclose_check_at((f), (path), __FILE__, __LINE__)

// Seconds on a monotonic clock.
// A zeroed buffer of `bytes` as an anonymous mapping (page-aligned): its pages
// take memory only once written, so a buffer addressed in full but used in
// part (a ZeRO shard, a pipeline stage's ranges) costs only the part.
static inline float *map_zeroed(size_t bytes) {
    void *p = mmap(NULL, bytes ? bytes : 1, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(p != MAP_FAILED, "mmap of %zu bytes failed", bytes);
    return (float *)p;
}

// Zeroes buf[lo, hi) of a map_zeroed buffer and hands its whole pages back to the OS.
static inline void release_range(float *buf, int64_t lo, int64_t hi) {
    uintptr_t a = (uintptr_t)(buf + lo), b = (uintptr_t)(buf + hi);
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t pa = (a + page - 1) / page * page, pb = b / page * page;
    if (pa >= pb) {
        memset((void *)a, 0, b - a);
        return;
    }
    memset((void *)a, 0, pa - a);
    memset((void *)pb, 0, b - pb);
    CHECK(madvise((void *)pa, pb - pa, MADV_DONTNEED) == 0, "madvise failed");
}

// ---------------------------------------------------------------------------
// The memory budget a trainer's rank checks before it allocates anything big.

// The unit a refusal gives `bytes` in at %.2f: MB below a GB, else GB; *scale: the bytes of one.
static inline const char *mem_unit(double bytes, double *scale) {
    *scale = bytes < 1e9 ? 1e6 : 1e9;
    return bytes < 1e9 ? "MB" : "GB";
}

// What a rank may take: `available` bytes (what the host or device has; 0: unknown), or the
// --mem-limit-mb budget (limit_mb > 0) where that is less; text: which, for the refusal, in the unit
// mem_unit picks for `need` ("--mem-limit-mb 300 allows 300.00 MB", "1.52 GB are available").
typedef struct {
    double bytes;  // 0: unknown (nothing to check against)
    char text[96];
} MemBudget;

static inline MemBudget mem_budget(double available, const char *available_word, double limit_mb, double need) {
    MemBudget b;
    double scale;
    const char *unit = mem_unit(need, &scale);
    if (limit_mb > 0 && (available <= 0 || limit_mb * 1e6 < available)) {
        b.bytes = limit_mb * 1e6;
        snprintf(b.text, sizeof(b.text), "--mem-limit-mb %g allows %.2f %s", limit_mb, b.bytes / scale, unit);
    } else {
        b.bytes = available;
        snprintf(b.text, sizeof(b.text), "%.2f %s are %s", available / scale, unit, available_word);
    }
    return b;
}

// Seconds on a clock: the monotonic wall clock, or CPU time.
static inline double clock_seconds(clockid_t clock) {
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
static inline double wall_seconds(void) { return clock_seconds(CLOCK_MONOTONIC); }

// The calling thread's CPU time (user and system).
static inline double thread_cpu_seconds(void) { return clock_seconds(CLOCK_THREAD_CPUTIME_ID); }
// The process's: every thread's.
static inline double process_cpu_seconds(void) { return clock_seconds(CLOCK_PROCESS_CPUTIME_ID); }

// A duration for people: "42.0s", "3m05s" or "2h07m".
static inline void duration_text(char *out, size_t n, double s) {
    if (s < 60) snprintf(out, n, "%.1fs", s);
    else if (s < 3600) snprintf(out, n, "%dm%02ds", (int)(s / 60), (int)s % 60);
    else snprintf(out, n, "%dh%02dm", (int)(s / 3600), (int)(s / 60) % 60);
}

// ---------------------------------------------------------------------------
// Checked arithmetic: every size computed from a file's header or a flag goes
// through these before it is compared, used or allocated. An overflow is a
// usage error (the input is bad), one line naming what was being computed.

static inline int64_t checked_mul_i64(int64_t a, int64_t b, const char *what) {
    int64_t r;
    if (__builtin_mul_overflow(a, b, &r)) die_usage("%s overflows: %lld x %lld", what, (long long)a, (long long)b);
    return r;
}
static inline int64_t checked_add_i64(int64_t a, int64_t b, const char *what) {
    int64_t r;
    if (__builtin_add_overflow(a, b, &r)) die_usage("%s overflows: %lld + %lld", what, (long long)a, (long long)b);
    return r;
}
// a as an int, or one line naming what it is.
static inline int checked_int(int64_t a, const char *what) {
    if (a < INT32_MIN || a > INT32_MAX) die_usage("%s = %lld does not fit in 32 bits", what, (long long)a);
    return (int)a;
}

// ceil(a / b) for a >= 0, b > 0, without forming a + b - 1 (no overflow for any a).
static inline int64_t ceil_div_i64(int64_t a, int64_t b) { return a / b + (a % b != 0); }
// a rounded up to a multiple of b (a >= 0, b > 0); an overflow dies naming `what`.
static inline int64_t round_up_checked(int64_t a, int64_t b, const char *what) {
    return checked_mul_i64(ceil_div_i64(a, b), b, what);
}
// For sizes already known to be in range (set up from checked values).
static inline int64_t round_up_i64(int64_t a, int64_t b) { return ceil_div_i64(a, b) * b; }

static inline int omp_threads(void) {
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}
static inline int omp_thread_id(void) {
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

#endif  // LLMC_UTILS_H
