// file_io.h: the files a user hands us and the files we write, for every host
// program (train_gpt, train_gptcu, tokenize, the tests and benchmarks).
//   Inputs: open_input() opens a path only if it is a regular file: a FIFO, a
//   device or a directory is refused (one line, exit 2) before anything blocks
//   on it, and the size returned is the file's real size, which every size read
//   from a header is checked against before it is allocated.
//   Outputs: AtomicOut writes to a temporary created exclusively (mkstemp) next
//   to the final path, so a stale temporary or a symlink planted there is never
//   followed; commit fsyncs it, renames it into place and fsyncs the directory.
//   A file is complete or absent, and the file it replaces survives any failed
//   write. A write that fails (disk full) removes the temporary and exits 2
//   with one line naming the file; temporaries still open when the process
//   exits (any die_usage) are removed too.
//   Start-up checks: output_path_check() proves at start that an output can be
//   created (so no run trains for hours and then cannot save), and
//   output_refuse_input() refuses an output that names one of the run's inputs
//   or lies inside one that is a directory (a checkpoint), compared by device
//   and inode through symlinks and hard links (path_is_or_under).
#ifndef LLMC_FILE_IO_H
#define LLMC_FILE_IO_H

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "utils.h"  // defines: die_usage, mallocCheck, CHECK

// "--flag: " or "" before a message about a file.
#define FILE_WHAT_FMT "%s%s"
#define FILE_WHAT_ARGS(what) (what) ? (what) : "", (what) ? ": " : ""

// Opens path for reading if it is a regular file; *size (may be NULL) gets its
// size in bytes. `what` names the flag the path came from (NULL: none).
static inline FILE *open_input(const char *path, const char *what, int64_t *size) {
    // O_NONBLOCK: opening a FIFO for reading then returns at once instead of
    // waiting for a writer; it is cleared again for the regular file.
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) die_usage(FILE_WHAT_FMT "cannot open '%s': %s", FILE_WHAT_ARGS(what), path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        die_usage(FILE_WHAT_FMT "'%s' is not a regular file", FILE_WHAT_ARGS(what), path);
    }
    int flags = fcntl(fd, F_GETFL);
    FILE *f = flags >= 0 && fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) == 0 ? fdopen(fd, "rb") : NULL;
    if (!f) {
        close(fd);
        die_usage(FILE_WHAT_FMT "cannot open '%s': %s", FILE_WHAT_ARGS(what), path, strerror(errno));
    }
    if (size) *size = (int64_t)st.st_size;
    return f;
}

// Dies unless path is a regular file; returns its size.
static inline int64_t input_file_size(const char *path, const char *what) {
    int64_t size;
    fclose(open_input(path, what, &size));
    return size;
}

// Reads f to its end into a NUL-terminated buffer (*len bytes before the NUL).
// The size is what was read, never st_size (a /proc file reports 0).
static inline uint8_t *read_stream(FILE *f, const char *name, size_t *len) {
    size_t cap = 1 << 16, n = 0;
    uint8_t *buf = (uint8_t *)mallocCheck(cap);
    for (size_t got; (got = fread(buf + n, 1, cap - n - 1, f)) > 0;) {
        n += got;
        if (n + 1 == cap) {
            cap *= 2;
            uint8_t *grown = (uint8_t *)realloc(buf, cap);
            CHECK(grown != NULL, "out of memory reading '%s' (%zu bytes so far)", name, n);
            buf = grown;
        }
    }
    if (ferror(f)) die_usage("reading '%s' failed: %s", name, strerror(errno));
    buf[n] = 0;
    *len = n;
    return buf;
}

// A whole regular file (open_input) read to its end (read_stream).
static inline uint8_t *read_whole_file(const char *path, const char *what, size_t *len) {
    FILE *f = open_input(path, what, NULL);
    uint8_t *buf = read_stream(f, path, len);
    fclose(f);
    return buf;
}

// The directory part of path ("." when it has none), in dir[PATH_MAX].
static inline void path_dirname(const char *path, char dir[PATH_MAX]) {
    const char *slash = strrchr(path, '/');
    if (!slash) snprintf(dir, PATH_MAX, ".");
    else if (slash == path) snprintf(dir, PATH_MAX, "/");
    else snprintf(dir, PATH_MAX, "%.*s", (int)(slash - path), path);
}

// Makes a rename or a file creation in dir durable; 0 or an errno.
static inline int fsync_dir_err(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC), err = 0;
    if (fd < 0 || fsync(fd) != 0) err = errno;
    if (fd >= 0) close(fd);
    return err;
}

// The same, or one line and exit 2.
static inline void fsync_dir(const char *dir) {
    int err = fsync_dir_err(dir);
    if (err) die_usage("cannot sync directory '%s': %s", dir, strerror(err));
}

// ---------------------------------------------------------------------------
// temporaries open in this process, removed at exit (a die_usage elsewhere, a
// failed write) so no partial file is ever left behind

#define FILE_IO_MAX_TEMPS 64
static pthread_mutex_t file_io_temps_lock = PTHREAD_MUTEX_INITIALIZER;
static char file_io_temps[FILE_IO_MAX_TEMPS][PATH_MAX + 16];

static void file_io_remove_temps(void) {
    // at exit: another thread may be inside a write, so no lock (a held one would never be released)
    for (int i = 0; i < FILE_IO_MAX_TEMPS; i++)
        if (file_io_temps[i][0]) unlink(file_io_temps[i]);
}

static inline int file_io_track_temp(const char *tmp) {
    static int registered = 0;
    pthread_mutex_lock(&file_io_temps_lock);
    if (!registered) {
        atexit(file_io_remove_temps);
        registered = 1;
    }
    int slot = -1;
    for (int i = 0; i < FILE_IO_MAX_TEMPS && slot < 0; i++)
        if (!file_io_temps[i][0]) slot = i;
    if (slot >= 0) snprintf(file_io_temps[slot], sizeof(file_io_temps[slot]), "%s", tmp);
    pthread_mutex_unlock(&file_io_temps_lock);
    CHECK(slot >= 0, "more than %d output files open at once", FILE_IO_MAX_TEMPS);
    return slot;
}

static inline void file_io_untrack_temp(int slot) {
    pthread_mutex_lock(&file_io_temps_lock);
    file_io_temps[slot][0] = '\0';
    pthread_mutex_unlock(&file_io_temps_lock);
}

// ---------------------------------------------------------------------------
// atomic output files

typedef struct {
    FILE *f;
    int slot;                // in file_io_temps
    char path[PATH_MAX];     // the final name
    char tmp[PATH_MAX + 16]; // PATH.tmp.XXXXXX, created exclusively
} AtomicOut;

// Removes the temporary, then one line naming the file and exit status 2.
static inline void atomic_out_fail(AtomicOut *o, const char *doing, int err) __attribute__((noreturn));
static inline void atomic_out_fail(AtomicOut *o, const char *doing, int err) {
    if (o->f) fclose(o->f);
    o->f = NULL;
    unlink(o->tmp);
    file_io_untrack_temp(o->slot);
    die_usage("%s '%s' failed: %s", doing, o->path, strerror(err ? err : EIO));
}

static inline void atomic_out_open(AtomicOut *o, const char *path) {
    memset(o, 0, sizeof(*o));
    if (strlen(path) + 16 >= PATH_MAX) die_usage("output path '%s' is too long", path);
    snprintf(o->path, PATH_MAX, "%s", path);
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) die_usage("cannot write '%s': it is a directory", path);
    snprintf(o->tmp, sizeof(o->tmp), "%s.tmp.XXXXXX", path);
    int fd = mkstemp(o->tmp);  // O_CREAT | O_EXCL: never an existing file or symlink
    if (fd < 0) die_usage("cannot create a file next to '%s': %s", path, strerror(errno));
    o->slot = file_io_track_temp(o->tmp);
    if (fchmod(fd, 0644) != 0 || !(o->f = fdopen(fd, "wb"))) {
        int err = errno;
        close(fd);
        atomic_out_fail(o, "creating", err);
    }
}

static inline void atomic_out_write(AtomicOut *o, const void *buf, size_t n) {
    if (n > 0 && fwrite(buf, 1, n, o->f) != n) atomic_out_fail(o, "writing", errno);
}

// fprintf into the file, checked.
static inline void atomic_out_printf(AtomicOut *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static inline void atomic_out_printf(AtomicOut *o, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vfprintf(o->f, fmt, ap);
    va_end(ap);
    if (n < 0) atomic_out_fail(o, "writing", errno);
}

// Flushes, fsyncs, renames into place and fsyncs the directory.
// Writes made straight to o->f (fputs, fprintf) are checked here through ferror.
static inline void atomic_out_commit(AtomicOut *o) {
    if (ferror(o->f)) atomic_out_fail(o, "writing", errno);
    if (fflush(o->f) != 0 || fsync(fileno(o->f)) != 0) atomic_out_fail(o, "writing", errno);
    FILE *f = o->f;
    o->f = NULL;
    if (fclose(f) != 0) atomic_out_fail(o, "writing", errno);
    if (rename(o->tmp, o->path) != 0) atomic_out_fail(o, "renaming the new", errno);
    file_io_untrack_temp(o->slot);
    char dir[PATH_MAX];
    path_dirname(o->path, dir);
    fsync_dir(dir);
}

// Gives up the file: the temporary is removed and the old file stays.
static inline void atomic_out_abort(AtomicOut *o) {
    if (o->f) fclose(o->f);
    o->f = NULL;
    unlink(o->tmp);
    file_io_untrack_temp(o->slot);
}

// Writes a whole file atomically from memory.
static inline void write_file_atomic(const char *path, const void *buf, size_t n) {
    AtomicOut o;
    atomic_out_open(&o, path);
    atomic_out_write(&o, buf, n);
    atomic_out_commit(&o);
}

// Creates dir and its parents (mkdir -p); dies naming `what` (the flag) and the
// directory that could not be made.
static inline void make_dirs(const char *dir, const char *what) {
    char path[PATH_MAX];
    if (strlen(dir) >= sizeof(path)) die_usage("%s: path '%s' is too long", what, dir);
    snprintf(path, sizeof(path), "%s", dir);
    for (char *p = path + 1;; p++) {
        if (*p != '/' && *p != '\0') continue;
        char saved = *p;
        *p = '\0';
        if (mkdir(path, 0755) != 0 && errno != EEXIST) die_usage("%s: cannot create '%s': %s", what, path, strerror(errno));
        *p = saved;
        if (saved == '\0') break;
    }
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) die_usage("%s: '%s' is not a directory", what, dir);
}

// ---------------------------------------------------------------------------
// start-up checks on outputs

// Dies (naming `what`) unless a file can be created at path: its directory
// exists and is writable (a temporary is created there and removed), and path
// is not a directory or another non-regular file.
static inline void output_path_check(const char *path, const char *what) {
    struct stat st;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode))
        die_usage("%s: '%s' exists and is not a regular file", what, path);
    char probe[PATH_MAX + 16];
    if (strlen(path) + 16 >= PATH_MAX) die_usage("%s: path '%s' is too long", what, path);
    snprintf(probe, sizeof(probe), "%s.tmp.XXXXXX", path);
    int fd = mkstemp(probe);
    if (fd < 0) die_usage("%s: cannot write '%s': %s", what, path, strerror(errno));
    close(fd);
    unlink(probe);
}

// Whether the directory dir is path's real location (realpath: symlinks and
// "." resolved; a path that does not exist yet: its nearest existing parent)
// or one of its ancestors, by device and inode (so bind mounts too).
static inline int path_lies_in(const char *path, const struct stat *dir) {
    char p[PATH_MAX], real[PATH_MAX];
    snprintf(p, sizeof(p), "%s", path);
    while (!realpath(p, real)) {
        char up[PATH_MAX];
        path_dirname(p, up);
        if (strcmp(up, p) == 0) return 0;
        snprintf(p, sizeof(p), "%s", up);
    }
    for (;;) {
        struct stat st;
        if (stat(real, &st) == 0 && st.st_dev == dir->st_dev && st.st_ino == dir->st_ino) return 1;
        char *slash = strrchr(real, '/');
        if (!slash || real[1] == '\0') return 0;
        slash[slash == real] = '\0';  // (the parent of "/x" is "/")
    }
}

// Whether the tree under the open directory fd (depth levels; symlinks not
// followed) holds a hard link to the file *file. Closes fd.
static inline int dir_tree_holds(int fd, const struct stat *file, int depth) {
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return 0;
    }
    int found = 0;
    for (struct dirent *e; !found && (e = readdir(d)) != NULL;) {
        struct stat st;
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0 ||
            fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0)
            continue;
        found = st.st_dev == file->st_dev && st.st_ino == file->st_ino;
        if (!found && S_ISDIR(st.st_mode) && depth > 1) {
            int sub = openat(dirfd(d), e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (sub >= 0) found = dir_tree_holds(sub, file, depth - 1);
        }
    }
    closedir(d);
    return found;
}

// Whether path is in, or lies inside in when it is a directory, whether path
// exists yet or not. Compared by device and inode: through symlinks (path's
// parents', path itself: both where a rename puts it and where a write through
// it lands), bind mounts, and hard links (a file with a link anywhere in in's
// tree, 8 levels down). An in that does not exist yet is path when both name
// the same entry of the same real directory.
static inline int path_is_or_under(const char *path, const char *in) {
    struct stat si, sp;
    if (strcmp(path, in) == 0) return 1;
    char pdir[PATH_MAX], idir[PATH_MAX], preal[PATH_MAX], ireal[PATH_MAX];
    path_dirname(path, pdir);
    if (stat(in, &si) != 0) {
        path_dirname(in, idir);
        const char *pbase = strrchr(path, '/'), *ibase = strrchr(in, '/');
        return realpath(pdir, preal) && realpath(idir, ireal) && strcmp(preal, ireal) == 0 &&
               strcmp(pbase ? pbase + 1 : path, ibase ? ibase + 1 : in) == 0;
    }
    int exists = stat(path, &sp) == 0;
    if (exists && sp.st_dev == si.st_dev && sp.st_ino == si.st_ino) return 1;
    if (!S_ISDIR(si.st_mode)) return 0;
    if (path_lies_in(path, &si) || path_lies_in(pdir, &si)) return 1;
    if (!exists || S_ISDIR(sp.st_mode) || sp.st_nlink < 2) return 0;
    int fd = open(in, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    return fd >= 0 && dir_tree_holds(fd, &sp, 8);
}

// Dies if the output `out` (from flag out_what) is the input `in` (from
// in_what), or lies inside it when that is a directory (a checkpoint the run
// resumes from, --ckpt-dir, a tokenizer's): path_is_or_under.
static inline void output_refuse_input(const char *out, const char *out_what, const char *in, const char *in_what) {
    if (!out[0] || !in[0] || !path_is_or_under(out, in)) return;
    struct stat st;
    if (stat(in, &st) != 0)  // (a directory the run will make)
        die_usage("%s '%s' is also the path of %s '%s'; refusing to write there", out_what, out, in_what, in);
    if (S_ISDIR(st.st_mode))
        die_usage("%s '%s' lies inside %s '%s'; refusing to write there", out_what, out, in_what, in);
    die_usage("%s '%s' is also an input (%s); refusing to overwrite it", out_what, out, in_what);
}

#endif  // LLMC_FILE_IO_H
