// ckpt_dir.h: the checkpoint directory (--ckpt-dir) is the run's own. Its
// entries, what a step directory may hold, the lock a run holds on it, and the
// only ways checkpoint.h removes or replaces anything in it:
//   step_NNNNNNNN/      a checkpoint (N: optimizer steps done); the run's own
//                       only when it is a real directory holding nothing but
//                       what the writer writes (manifest.json, rank_NNNNN.bin,
//                       regular files)
//   step_NNNNNNNN.tmp/  a checkpoint being written
//   latest              names the newest step directory (a hint)
//   latest.tmp.XXXXXX   `latest` being written
//   lock                the lock: "pid P on host H" of the run that holds it
// Never followed: a step directory is opened with O_DIRECTORY | O_NOFOLLOW and
// only the writer's file names in it are unlinked (unlinkat never follows), so
// a symbolic link is never a way into another directory.
// Never deleted unless the run's own: anything else under a step directory's
// name (a symbolic link, a file, a directory holding anything the writer does
// not write) is never resumed, counted or deleted by --ckpt-keep; where the run
// needs its name (a stale step_N.tmp, a step_N it commits again after a resume)
// it is renamed aside to NAME.foreign (NAME.foreign.2, ...), one line saying so.
// At start-up (rank 0, under the lock) what a killed run left is removed and
// each such entry is named once. An old checkpoint that cannot be deleted is a
// warning; the run goes on.
// The lock: rank 0 creates `lock` (O_NOFOLLOW: failing to create it is how an
// unwritable directory is found at start-up), takes an exclusive flock, writes
// its pid and host into it and turns the lock into a shared one, which every
// other rank then takes too. While any rank of a run lives another run's
// exclusive flock fails, and that run is refused at start with one line naming
// the directory and the holder. The kernel releases a dead process's locks, so
// a killed run never leaves a stale lock (the file stays).
#ifndef LLMC_CKPT_DIR_H
#define LLMC_CKPT_DIR_H

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "utils.h"  // defines: die_usage, mallocCheck, reallocCheck, CHECK

#define CKPT_PATH_MAX 1024                  // a directory
#define CKPT_FILE_MAX (CKPT_PATH_MAX + 300)  // a file in one
#define CKPT_LATEST_FILE "latest"
#define CKPT_LOCK_FILE "lock"
#define CKPT_ASIDE_SUFFIX ".foreign"
#define CKPT_NAME_MAX 300  // an entry's name, with an aside suffix
#define CKPT_WHY_MAX 400   // what an entry is, for a message

// The directory of step N under dir.
static inline void ckpt_step_dir(char *out, size_t n, const char *dir, int64_t step, const char *suffix) {
    int k = snprintf(out, n, "%s/step_%08lld%s", dir, (long long)step, suffix);
    if (k < 0 || (size_t)k >= n) die_usage("--ckpt-dir '%s' is too long", dir);
}

// Parses "step_NNNNNNNN" (exactly: 8 or more digits, nothing after); -1 if not.
static inline int64_t ckpt_parse_step_name(const char *name) {
    if (strncmp(name, "step_", 5) != 0) return -1;
    const char *d = name + 5;
    size_t len = strlen(d);
    if (len < 8 || len > 18 || strspn(d, "0123456789") != len) return -1;
    return strtoll(d, NULL, 10);
}

static inline int ckpt_name_has_suffix(const char *name, const char *suffix) {
    size_t n = strlen(name), k = strlen(suffix);
    return n >= k && strcmp(name + n - k, suffix) == 0;
}

// Whether name is one the writer writes into a step directory: manifest.json, rank_NNNNN.bin.
static inline int ckpt_writer_file(const char *name) {
    if (strcmp(name, "manifest.json") == 0) return 1;
    size_t len = strlen(name);
    return strncmp(name, "rank_", 5) == 0 && len >= 14 && ckpt_name_has_suffix(name, ".bin") &&
           strspn(name + 5, "0123456789") == len - 9;
}

// Text read from a file, made fit for a one-line message: control bytes become '?'.
static inline void ckpt_printable(char *s) {
    for (; *s; s++)
        if ((unsigned char)*s < 32 || *s == 127) *s = '?';
}

static inline void ckpt_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline void ckpt_warn(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("warning: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    fflush(stderr);
    va_end(ap);
}

static inline int ckpt_open_dir(const char *dir) { return open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC); }

// ---------------------------------------------------------------------------
// step directories

typedef enum { CKPT_ABSENT, CKPT_OWN, CKPT_NOT_OWN } CkptEntry;

// Whether the entry `name` of the directory dfd is a step directory of the
// run's own; for CKPT_NOT_OWN, why not in why[CKPT_WHY_MAX] (a clause: "is a
// symbolic link", "holds 'x', which ...").
static inline CkptEntry ckpt_step_entry(int dfd, const char *name, char *why) {
    struct stat st;
    if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
        if (errno == ENOENT) return CKPT_ABSENT;
        snprintf(why, CKPT_WHY_MAX, "cannot be examined (%s)", strerror(errno));
        return CKPT_NOT_OWN;
    }
    if (S_ISLNK(st.st_mode) || !S_ISDIR(st.st_mode)) {
        snprintf(why, CKPT_WHY_MAX, "%s", S_ISLNK(st.st_mode) ? "is a symbolic link" : "is not a directory");
        return CKPT_NOT_OWN;
    }
    int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        snprintf(why, CKPT_WHY_MAX, "cannot be read (%s)", strerror(errno));
        if (fd >= 0) close(fd);
        return CKPT_NOT_OWN;
    }
    CkptEntry kind = CKPT_OWN;
    struct dirent *e;
    while (kind == CKPT_OWN && (e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        struct stat fs;
        if (!ckpt_writer_file(e->d_name) || fstatat(dirfd(d), e->d_name, &fs, AT_SYMLINK_NOFOLLOW) != 0 ||
            !S_ISREG(fs.st_mode)) {
            snprintf(why, CKPT_WHY_MAX, "holds '%.255s', which is not a file the checkpoint writer writes", e->d_name);
            ckpt_printable(why);
            kind = CKPT_NOT_OWN;
        }
    }
    closedir(d);
    return kind;
}

// Removes the step directory `name` of dfd: the writer's files in it, then
// the directory itself (which fails when anything else is left in it).
// Nothing is followed. Returns 0 or an errno.
static inline int ckpt_remove_step(int dfd, const char *name) {
    int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return errno == ENOENT ? 0 : errno;
    DIR *d = fdopendir(fd);
    if (!d) {
        int err = errno;
        close(fd);
        return err;
    }
    int err = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (ckpt_writer_file(e->d_name) && unlinkat(dirfd(d), e->d_name, 0) != 0 && !err) err = errno;
    closedir(d);
    if (unlinkat(dfd, name, AT_REMOVEDIR) != 0 && !err) err = errno;
    return err;
}

// Renames the entry `name` of dfd (never followed) to NAME.foreign, or
// NAME.foreign.2, ... (never over anything: RENAME_NOREPLACE), the new name in
// aside[CKPT_NAME_MAX]. Returns 0 or an errno.
static inline int ckpt_rename_aside(int dfd, const char *name, char *aside) {
    for (int k = 1; k <= 100; k++) {
        if (k == 1) snprintf(aside, CKPT_NAME_MAX, "%.255s" CKPT_ASIDE_SUFFIX, name);
        else snprintf(aside, CKPT_NAME_MAX, "%.255s" CKPT_ASIDE_SUFFIX ".%d", name, k);
        if (renameat2(dfd, name, dfd, aside, RENAME_NOREPLACE) == 0) return 0;
        if (errno != EEXIST) return errno;
    }
    return EEXIST;
}

// Clears the name `name` in dir (open as dfd) for the run: a step directory
// of its own is removed (announce: one line says so), anything else, or one
// that cannot be removed, is renamed aside (a warning says so). Returns 0, or
// an errno when neither worked (nothing said).
static inline int ckpt_make_way(const char *dir, int dfd, const char *name, int announce) {
    char why[CKPT_WHY_MAX], aside[CKPT_NAME_MAX];
    CkptEntry kind = ckpt_step_entry(dfd, name, why);
    if (kind == CKPT_ABSENT) return 0;
    if (kind == CKPT_OWN) {
        int err = ckpt_remove_step(dfd, name);
        if (err == 0) {
            if (announce) printf("checkpoint: removed the incomplete %s/%s\n", dir, name);
            return 0;
        }
        snprintf(why, sizeof(why), "cannot be removed (%s)", strerror(err));
    }
    int err = ckpt_rename_aside(dfd, name, aside);
    if (err == 0) ckpt_warn("checkpoint: %s/%s %s: renamed to %s (never deleted)", dir, name, why, aside);
    return err;
}

// Creates a step directory's .tmp (every rank calls it; the first makes it):
// an existing one must be a real directory. Returns 0 or an errno.
static inline int ckpt_make_tmp_dir(const char *path) {
    if (mkdir(path, 0755) == 0) return 0;
    if (errno != EEXIST) return errno;
    struct stat st;
    return lstat(path, &st) == 0 && S_ISDIR(st.st_mode) ? 0 : EEXIST;
}

// The step directories of the run's own in dir, newest first (*n of them; malloc'd).
static inline int64_t *ckpt_list_steps(const char *dir, int *n) {
    *n = 0;
    DIR *d = opendir(dir);
    if (!d) return NULL;
    int cap = 16;
    int64_t *steps = (int64_t *)mallocCheck(sizeof(int64_t) * (size_t)cap);
    char why[CKPT_WHY_MAX];
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        int64_t s = ckpt_parse_step_name(e->d_name);
        if (s < 0 || ckpt_step_entry(dirfd(d), e->d_name, why) != CKPT_OWN) continue;
        if (*n == cap) {
            cap *= 2;
            steps = (int64_t *)reallocCheck(steps, sizeof(int64_t) * (size_t)cap);
            CHECK(steps != NULL, "out of memory");
        }
        steps[(*n)++] = s;
    }
    closedir(d);
    for (int i = 1; i < *n; i++)  // insertion sort, descending
        for (int j = i; j > 0 && steps[j] > steps[j - 1]; j--) {
            int64_t t = steps[j]; steps[j] = steps[j - 1]; steps[j - 1] = t;
        }
    return steps;
}

// Puts the complete step directory tmp_name of dir in place as final_name.
// One of the run's own already there (a resumed run redoing the step) is
// swapped out atomically (RENAME_EXCHANGE), then removed (or, failing that,
// renamed aside or left with a warning); anything else there is renamed aside
// first. Returns 0, or an errno and what failed (*doing).
static inline int ckpt_dir_commit(const char *dir, const char *tmp_name, const char *final_name, const char **doing) {
    int dfd = ckpt_open_dir(dir), err = 0;
    if (dfd < 0) {
        *doing = "opening";
        return errno;
    }
    char why[CKPT_WHY_MAX];
    CkptEntry kind = ckpt_step_entry(dfd, final_name, why);
    if (kind == CKPT_OWN) {
        if (renameat2(dfd, tmp_name, dfd, final_name, RENAME_EXCHANGE) != 0) {
            err = errno;
            *doing = "replacing";
        } else if ((err = ckpt_make_way(dir, dfd, tmp_name, 0)) != 0) {
            ckpt_warn("checkpoint: the replaced %s/%s cannot be removed or renamed (%s): it stays", dir, tmp_name,
                      strerror(err));
            err = 0;
        }
    } else if (kind == CKPT_NOT_OWN && (err = ckpt_make_way(dir, dfd, final_name, 0)) != 0) {
        *doing = "renaming aside what is in the way of";
    } else if (renameat(dfd, tmp_name, dfd, final_name) != 0) {
        err = errno;
        *doing = "renaming the complete checkpoint to";
    }
    close(dfd);
    return err;
}

// --ckpt-keep: deletes the run's own step directories older than `step`
// beyond the newest `keep` of them (newer ones, of a run that went further,
// are neither counted nor deleted; nor is anything not the run's own). One
// that cannot be deleted is a warning, and it stays.
static inline void ckpt_prune(const char *dir, int64_t step, int keep) {
    int n, kept = 0, dfd = ckpt_open_dir(dir);
    int64_t *steps = ckpt_list_steps(dir, &n);
    char name[CKPT_NAME_MAX];
    for (int i = 0; i < n && dfd >= 0; i++) {
        if (steps[i] > step || ++kept <= keep) continue;
        snprintf(name, sizeof(name), "step_%08lld", (long long)steps[i]);
        int err = ckpt_remove_step(dfd, name);
        if (err) ckpt_warn("checkpoint: cannot delete the old checkpoint %s/%s (%s): it stays", dir, name, strerror(err));
    }
    if (dfd >= 0) close(dfd);
    free(steps);
}

// ---------------------------------------------------------------------------
// start-up (rank 0, under the lock)

// What a killed run left is removed (step_N.tmp directories, latest.tmp.*
// files: removing a link never touches its target); a `latest` that is a
// directory (which no commit could replace) is renamed aside; each step_N
// that is not the run's own is named, once.
static inline void ckpt_dir_tidy(const char *dir) {
    int dfd = ckpt_open_dir(dir);
    DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
    if (!d) die_usage("--ckpt-dir: cannot read '%s': %s", dir, strerror(errno));
    char why[CKPT_WHY_MAX], aside[CKPT_NAME_MAX];
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        const char *name = e->d_name;
        struct stat st;
        if (strncmp(name, "step_", 5) == 0 && ckpt_name_has_suffix(name, ".tmp")) {
            int err = ckpt_make_way(dir, dirfd(d), name, 1);
            if (err) ckpt_warn("checkpoint: cannot remove or rename the incomplete %s/%s (%s): it stays", dir, name,
                               strerror(err));
        } else if (strncmp(name, CKPT_LATEST_FILE ".tmp.", strlen(CKPT_LATEST_FILE) + 5) == 0) {
            if (unlinkat(dirfd(d), name, 0) == 0) printf("checkpoint: removed the incomplete %s/%s\n", dir, name);
            else ckpt_warn("checkpoint: cannot remove the incomplete %s/%s (%s): it stays", dir, name, strerror(errno));
        } else if (strcmp(name, CKPT_LATEST_FILE) == 0) {
            if (fstatat(dirfd(d), name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(st.st_mode)) continue;
            int err = ckpt_rename_aside(dirfd(d), name, aside);
            if (err) die_usage("--ckpt-dir: %s/%s is a directory and cannot be renamed: %s", dir, name, strerror(err));
            ckpt_warn("checkpoint: %s/%s is a directory: renamed to %s (never deleted)", dir, name, aside);
        } else if (ckpt_parse_step_name(name) >= 0 && ckpt_step_entry(dirfd(d), name, why) == CKPT_NOT_OWN) {
            ckpt_warn("checkpoint: %s/%s %s: not a checkpoint of this run (never resumed, deleted or followed)",
                      dir, name, why);
        }
    }
    closedir(d);
    fflush(stdout);
}

// ---------------------------------------------------------------------------
// the lock

static int ckpt_lock_fd = -1;  // this process's lock on its --ckpt-dir, held until it exits

// flock, retried when a signal interrupts it; 0 or an errno.
static inline int ckpt_flock(int fd, int op) {
    while (flock(fd, op) != 0)
        if (errno != EINTR) return errno;
    return 0;
}

// Rank 0: takes the lock on dir (above). Returns 1, or 0 with the one line
// that refuses the run in err[n] (another run holds it; the directory is not
// writable). A file system without locks is a warning.
static inline int ckpt_lock_take(const char *dir, char *err, size_t n) {
    char path[CKPT_FILE_MAX];
    snprintf(path, sizeof(path), "%s/" CKPT_LOCK_FILE, dir);
    int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
    struct stat st;
    if (fd < 0) {
        snprintf(err, n, "--ckpt-dir: cannot create the lock file '%.1000s': %s", path, strerror(errno));
        return 0;
    }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_nlink != 1) {  // (its pid is written into it)
        snprintf(err, n, "--ckpt-dir: the lock file '%.1000s' is not a regular file of its own", path);
        close(fd);
        return 0;
    }
    int e = ckpt_flock(fd, LOCK_EX | LOCK_NB);
    if (e == EWOULDBLOCK) {
        char holder[256] = "";
        ssize_t k = pread(fd, holder, sizeof(holder) - 1, 0);
        holder[k > 0 ? k : 0] = '\0';
        holder[strcspn(holder, "\n")] = '\0';
        ckpt_printable(holder);
        snprintf(err, n, "--ckpt-dir '%s' is in use by another run (%s holds %.1000s); wait for it to end or use another "
                 "directory", dir, holder[0] ? holder : "a process that has not written its pid yet", path);
        close(fd);
        return 0;
    }
    if (e) ckpt_warn("--ckpt-dir: cannot lock '%s' (%s): a second run on this directory would not be refused", path,
                     strerror(e));
    char me[320], host[256] = "?";
    gethostname(host, sizeof(host));
    host[sizeof(host) - 1] = '\0';
    int len = snprintf(me, sizeof(me), "pid %d on host %s\n", (int)getpid(), host);
    if (ftruncate(fd, 0) != 0 || pwrite(fd, me, (size_t)len, 0) != len) {
        snprintf(err, n, "--ckpt-dir: cannot write the lock file '%.1000s': %s", path, strerror(errno ? errno : EIO));
        close(fd);
        return 0;
    }
    if (!e && (e = ckpt_flock(fd, LOCK_SH | LOCK_NB)) != 0) {  // (another run may take it in between, and wins)
        snprintf(err, n, "--ckpt-dir '%s' is in use by another run that started at the same moment", dir);
        close(fd);
        return 0;
    }
    ckpt_lock_fd = fd;
    return 1;
}

// Every other rank, once rank 0 holds the lock: shares it (the same file: the
// directory must be one shared by every rank). Returns 1, or 0 with err[n].
static inline int ckpt_lock_share(const char *dir, char *err, size_t n) {
    char path[CKPT_FILE_MAX];
    snprintf(path, sizeof(path), "%s/" CKPT_LOCK_FILE, dir);
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, n, "--ckpt-dir: cannot open the lock file '%.1000s' that rank 0 made: %s (every rank must see the "
                 "same directory)", path, strerror(errno));
        return 0;
    }
    int e = ckpt_flock(fd, LOCK_SH | LOCK_NB);
    if (e == EWOULDBLOCK) {
        snprintf(err, n, "--ckpt-dir '%s' is in use by another run", dir);
        close(fd);
        return 0;
    }
    ckpt_lock_fd = fd;  // (a file system without locks: rank 0 said so)
    return 1;
}

#endif  // LLMC_CKPT_DIR_H
