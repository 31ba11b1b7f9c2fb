// fuzz_harness.h: what every fuzz target in tests/fuzz/ shares. The code
// under test ends on bad input with exit(2) (die_usage) and that must not end
// the fuzzer, so each input runs in-process between fuzz_begin() and
// fuzz_end(), and the link (-Wl,--wrap=...) routes into this file:
//   exit        longjmps back into fuzz_run instead (the status is kept);
//   malloc, calloc, realloc, posix_memalign, free, strdup
//               record what the input allocated, so that what an input that
//               died still held is freed before the next one (and an input
//               that returned normally must have freed everything: a leak
//               aborts, so LeakSanitizer's job is kept);
//   fopen, fdopen, fclose
//               likewise for the files it opened.
// (What a shared library allocates itself, a zstd context, is the target's to
// release: fuzz_run's after_exit.)
// The atomic-output temporaries it left (file_io.h) are removed, and
// die_claimed (utils.h) is cleared. Crashes, sanitizer reports and aborts are
// left alone: they are what the fuzzer looks for.
// Entry: LLVMFuzzerTestOneInput (libFuzzer), or fuzz_replay_main.c, which runs
// the same function over the committed corpus in every build (gcc, ASan, UBSan).
#ifndef LLMC_FUZZ_HARNESS_H
#define LLMC_FUZZ_HARNESS_H

#include <dirent.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "llmc/file_io.h"
#include "llmc/utils.h"

void __real_exit(int status) __attribute__((noreturn));
void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t n);
int __real_posix_memalign(void **p, size_t align, size_t n);
void __real_free(void *p);
char *__real_strdup(const char *s);
FILE *__real_fopen(const char *path, const char *mode);
FILE *__real_fdopen(int fd, const char *mode);
int __real_fclose(FILE *f);

// Pointers held by the running input: an open-addressing set (NULL: empty,
// FUZZ_GONE: a removed entry).
#define FUZZ_SET_CAP (1 << 15)
#define FUZZ_GONE ((void *)1)
typedef struct {
    void *slot[FUZZ_SET_CAP];
    int count;
} FuzzSet;

static FuzzSet fuzz_allocs, fuzz_files;
static pthread_mutex_t fuzz_set_lock = PTHREAD_MUTEX_INITIALIZER;  // the code may allocate on several threads
static int fuzz_active;        // inside an input
static jmp_buf fuzz_jmp;
static int fuzz_exit_status;

static inline size_t fuzz_hash(const void *p) { return (size_t)(((uintptr_t)p >> 4) * 0x9E3779B97F4A7C15ull) & (FUZZ_SET_CAP - 1); }

static void fuzz_set_add(FuzzSet *s, void *p) {
    if (!p) return;
    pthread_mutex_lock(&fuzz_set_lock);
    if (s->count >= FUZZ_SET_CAP / 2) abort();  // an input holding 16384 blocks at once: a bug of its own
    size_t i = fuzz_hash(p);
    while (s->slot[i] && s->slot[i] != FUZZ_GONE) i = (i + 1) & (FUZZ_SET_CAP - 1);
    s->slot[i] = p;
    s->count++;
    pthread_mutex_unlock(&fuzz_set_lock);
}

static void fuzz_set_remove(FuzzSet *s, void *p) {
    if (!p) return;
    pthread_mutex_lock(&fuzz_set_lock);
    for (size_t i = fuzz_hash(p); s->count > 0 && s->slot[i]; i = (i + 1) & (FUZZ_SET_CAP - 1)) {
        if (s->slot[i] == p) {
            s->slot[i] = FUZZ_GONE;
            s->count--;
            break;
        }
    }
    pthread_mutex_unlock(&fuzz_set_lock);
}

void __wrap_exit(int status) {
    if (fuzz_active) {
        fuzz_exit_status = status;
        longjmp(fuzz_jmp, 1);
    }
    __real_exit(status);
}

void *__wrap_malloc(size_t n) {
    void *p = __real_malloc(n);
    if (fuzz_active) fuzz_set_add(&fuzz_allocs, p);
    return p;
}
void *__wrap_calloc(size_t n, size_t size) {
    void *p = __real_calloc(n, size);
    if (fuzz_active) fuzz_set_add(&fuzz_allocs, p);
    return p;
}
void *__wrap_realloc(void *old, size_t n) {
    void *p = __real_realloc(old, n);
    if (fuzz_active && p) {
        fuzz_set_remove(&fuzz_allocs, old);
        fuzz_set_add(&fuzz_allocs, p);
    }
    return p;
}
int __wrap_posix_memalign(void **p, size_t align, size_t n) {
    int rc = __real_posix_memalign(p, align, n);
    if (fuzz_active && rc == 0) fuzz_set_add(&fuzz_allocs, *p);
    return rc;
}
void __wrap_free(void *p) {
    if (fuzz_active) fuzz_set_remove(&fuzz_allocs, p);
    __real_free(p);
}
char *__wrap_strdup(const char *s) {
    char *p = __real_strdup(s);
    if (fuzz_active) fuzz_set_add(&fuzz_allocs, p);
    return p;
}
FILE *__wrap_fopen(const char *path, const char *mode) {
    FILE *f = __real_fopen(path, mode);
    if (fuzz_active) fuzz_set_add(&fuzz_files, f);
    return f;
}
FILE *__wrap_fdopen(int fd, const char *mode) {
    FILE *f = __real_fdopen(fd, mode);
    if (fuzz_active) fuzz_set_add(&fuzz_files, f);
    return f;
}
int __wrap_fclose(FILE *f) {
    if (fuzz_active) fuzz_set_remove(&fuzz_files, f);
    return __real_fclose(f);
}

// Releases what the input still holds: after an exit, everything; after a
// normal return, nothing may be left (a leak aborts).
static void fuzz_release(int exited) {
    fuzz_active = 0;
    if (!exited && (fuzz_allocs.count != 0 || fuzz_files.count != 0)) {
        fprintf(stderr, "fuzz harness: the input returned holding %d allocations and %d open files\n",
                fuzz_allocs.count, fuzz_files.count);
        abort();
    }
    if (exited) {
        for (size_t i = 0; i < FUZZ_SET_CAP; i++) {
            if (fuzz_files.slot[i] && fuzz_files.slot[i] != FUZZ_GONE) __real_fclose((FILE *)fuzz_files.slot[i]);
            if (fuzz_allocs.slot[i] && fuzz_allocs.slot[i] != FUZZ_GONE) __real_free(fuzz_allocs.slot[i]);
        }
        file_io_remove_temps();
        memset(file_io_temps, 0, sizeof(file_io_temps));
    }
    memset(&fuzz_allocs, 0, sizeof(fuzz_allocs));  // also clears the removed-entry marks
    memset(&fuzz_files, 0, sizeof(fuzz_files));
    die_claimed = 0;
}

// Runs body(data, size) as one input; returns the exit status it ended with
// (-1: it returned normally). after_exit (may be NULL) releases what a library
// allocated behind the wrapped calls (a zstd context) when the input exited.
static int fuzz_run(void (*body)(const uint8_t *, size_t), void (*after_exit)(void), const uint8_t *data,
                    size_t size) {
    fuzz_exit_status = -1;
    fuzz_active = 1;
    if (setjmp(fuzz_jmp) == 0) {
        body(data, size);
        fuzz_release(0);
        return -1;
    }
    if (after_exit) after_exit();
    fuzz_release(1);
    if (fuzz_exit_status != EXIT_USAGE && fuzz_exit_status != 0) {
        // bad input must be a usage error (2); anything else (an internal CHECK, exit 1) is a finding
        fprintf(stderr, "fuzz harness: the input ended with exit status %d, not %d\n", fuzz_exit_status, EXIT_USAGE);
        abort();
    }
    return fuzz_exit_status;
}

static char fuzz_dir[64];

// Removes dir and what the inputs left in it (files and directories of files).
static void fuzz_remove_tree(const char *dir) {
    DIR *d = opendir(dir);
    char path[PATH_MAX];
    for (struct dirent *e; d && (e = readdir(d));) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        snprintf(path, sizeof(path), "%s/%.200s", dir, e->d_name);
        if (unlink(path) != 0) fuzz_remove_tree(path);
    }
    if (d) closedir(d);
    rmdir(dir);
}

static void fuzz_remove_scratch(void) { fuzz_remove_tree(fuzz_dir); }

// A scratch directory for the inputs that must be files (one per process).
static const char *fuzz_scratch_dir(void) {
    char *dir = fuzz_dir;
    if (!dir[0]) {
        // memory-backed where there is one: the writers fsync every file they commit
        snprintf(dir, sizeof(fuzz_dir), "%s/llmc_fuzz_XXXXXX", access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
        if (!mkdtemp(dir)) abort();
        atexit(fuzz_remove_scratch);
    }
    return dir;
}

// Writes data to scratch file `name`; returns its path (static storage per name slot).
static const char *fuzz_write_file(const char *name, const uint8_t *data, size_t size) {
    static char paths[4][PATH_MAX];
    static int next = 0;
    char *path = paths[next++ & 3];
    snprintf(path, PATH_MAX, "%s/%s", fuzz_scratch_dir(), name);
    FILE *f = __real_fopen(path, "wb");
    if (!f || (size && fwrite(data, 1, size, f) != size) || __real_fclose(f) != 0) abort();
    return path;
}

#endif  // LLMC_FUZZ_HARNESS_H
