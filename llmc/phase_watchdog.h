// phase_watchdog.h: a time limit on a phase of this process (MPI's start-up or
// shut-down, a device communicator's set-up) that holds even when the process
// is stopped (SIGSTOP, a debugger, a frozen node's scheduler): a stopped process
// runs none of its threads, so no watchdog inside it can end it. The limit is
// kept by a second process, forked once at start-up, that shares one page with
// this one (an anonymous MAP_SHARED mapping): the phase's deadline and the line
// to print. Past the deadline the watchdog writes that line to stderr and
// SIGKILLs this process (the one signal a stopped process obeys), and the
// launcher sees a rank killed and ends the job.
//
// The watchdog is forked before MPI_Init (comm_init), so it holds no MPI,
// network or device state: Open MPI advises against fork() in an MPI process
// because of the network stacks' registered memory (UCX, libfabric, verbs), of
// which there is none yet; the child never calls MPI, CUDA, malloc or stdio,
// only async-signal-safe system calls. It dies with this process
// (PR_SET_PDEATHSIG, and a getppid() check for a parent that died before that
// was set), and ignores the signals a launcher or a terminal sends the whole
// job (SIGTERM, SIGUSR1, SIGINT, SIGHUP): those are this process's to handle.
#ifndef LLMC_PHASE_WATCHDOG_H
#define LLMC_PHASE_WATCHDOG_H

#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "utils.h"  // defines: wall_seconds, CHECK

#define PHASE_WATCHDOG_POLL_MS 100  // how often the watchdog looks at the page (and the time past a deadline)

// The page both processes see. A seqlock: the process writes deadline and line
// only while gen is even (no phase armed), then makes gen odd; the watchdog
// acts only on what it read between two equal odd readings of gen.
typedef struct {
    uint32_t gen;
    double deadline;   // wall_seconds() (CLOCK_MONOTONIC) past which the watchdog acts
    char line[512];    // what it prints then (one line, newline included)
} PhaseWatchdogPage;

typedef struct {
    PhaseWatchdogPage *page;  // NULL: no watchdog (every call below is then a no-op)
    pid_t pid;
} PhaseWatchdog;

// The watchdog process: polls the page until its parent is gone.
static void phase_watchdog_main(volatile PhaseWatchdogPage *page, pid_t parent) __attribute__((noreturn));
static void phase_watchdog_main(volatile PhaseWatchdogPage *page, pid_t parent) {
    for (;;) {
        if (getppid() != parent) _exit(0);
        uint32_t gen = __atomic_load_n(&page->gen, __ATOMIC_ACQUIRE);
        if (gen & 1) {
            char line[sizeof(page->line)];
            double deadline = page->deadline;
            for (size_t i = 0; i < sizeof(line); i++) line[i] = page->line[i];
            __atomic_thread_fence(__ATOMIC_ACQUIRE);
            if (__atomic_load_n(&page->gen, __ATOMIC_RELAXED) == gen && wall_seconds() > deadline) {
                line[sizeof(line) - 1] = '\0';
                size_t len = strlen(line);
                for (size_t off = 0; off < len;) {
                    ssize_t n = write(STDERR_FILENO, line + off, len - off);
                    if (n <= 0) break;
                    off += (size_t)n;
                }
                kill(parent, SIGKILL);
                _exit(0);
            }
        }
        struct timespec ts = {0, PHASE_WATCHDOG_POLL_MS * 1000000L};
        nanosleep(&ts, NULL);
    }
}

// Forks the watchdog process (once, before MPI_Init).
static inline void phase_watchdog_start(PhaseWatchdog *w) {
    memset(w, 0, sizeof(*w));
    void *p = mmap(NULL, sizeof(PhaseWatchdogPage), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(p != MAP_FAILED, "mmap of the watchdog's shared page failed");
    memset(p, 0, sizeof(PhaseWatchdogPage));
    pid_t parent = getpid();
    pid_t pid = fork();
    CHECK(pid >= 0, "fork of the watchdog process failed");
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        prctl(PR_SET_NAME, "llmc-watchdog");
        const int launcher_signals[] = {SIGTERM, SIGUSR1, SIGUSR2, SIGINT, SIGHUP, SIGPIPE};
        for (size_t i = 0; i < sizeof(launcher_signals) / sizeof(launcher_signals[0]); i++)
            signal(launcher_signals[i], SIG_IGN);
#ifdef SYS_close_range
        syscall(SYS_close_range, 3, ~0U, 0);  // (the parent's files and pipes are not the watchdog's to hold open)
#endif
        phase_watchdog_main((volatile PhaseWatchdogPage *)p, parent);
    }
    w->page = (PhaseWatchdogPage *)p;
    w->pid = pid;
}

// Arms the watchdog: if phase_watchdog_end has not come within timeout_s, it
// prints line (one line, newline added) and kills this process.
static inline void phase_watchdog_begin(PhaseWatchdog *w, double timeout_s, const char *line) {
    if (!w->page) return;
    PhaseWatchdogPage *p = w->page;
    CHECK((p->gen & 1) == 0, "a phase began while another was being watched");
    snprintf(p->line, sizeof(p->line), "%.*s\n", (int)sizeof(p->line) - 2, line);
    p->deadline = wall_seconds() + timeout_s;
    __atomic_store_n(&p->gen, p->gen + 1, __ATOMIC_RELEASE);
}

static inline void phase_watchdog_end(PhaseWatchdog *w) {
    if (!w->page) return;
    CHECK(w->page->gen & 1, "a phase ended that was not being watched");
    __atomic_store_n(&w->page->gen, w->page->gen + 1, __ATOMIC_RELEASE);
}

// Ends the watchdog process (nothing left to watch).
static inline void phase_watchdog_stop(PhaseWatchdog *w) {
    if (!w->page) return;
    kill(w->pid, SIGKILL);
    waitpid(w->pid, NULL, 0);
    munmap(w->page, sizeof(PhaseWatchdogPage));
    memset(w, 0, sizeof(*w));
}

#endif  // LLMC_PHASE_WATCHDOG_H
