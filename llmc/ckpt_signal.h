// ckpt_signal.h: preemption and Ctrl-C with --ckpt-dir. SIGTERM, SIGUSR1 and
// SIGINT set one flag (ckpt_signal_received) that the checkpoint writer
// (ckpt_writer.h) reads at each step boundary: the run checkpoints and exits
// CKPT_EXIT_SIGNAL. A second SIGINT exits at once.
#ifndef LLMC_CKPT_SIGNAL_H
#define LLMC_CKPT_SIGNAL_H

#include <signal.h>
#include <string.h>
#include <unistd.h>

// The exit status of a run that a signal stopped (SIGTERM, SIGUSR1 or SIGINT
// with --ckpt-dir): its checkpoint is committed, or none was due (the signal
// came before the first step), and --resume auto continues it. A job script
// requeues on this status alone (scripts/train_slurm.sbatch). 75: sysexits.h's
// EX_TEMPFAIL, "try again later".
#define CKPT_EXIT_SIGNAL 75

static volatile sig_atomic_t ckpt_signal_received = 0;  // SIGTERM / SIGUSR1 / SIGINT: checkpoint and exit
static inline void ckpt_on_signal(int sig) {
    if (sig == SIGINT && ckpt_signal_received) {  // a second Ctrl-C: exit at once, as without --ckpt-dir
        static const char line[] = "\ninterrupted again: exiting at once, without a checkpoint\n";
        if (write(STDERR_FILENO, line, sizeof(line) - 1) < 0) {}
        signal(SIGINT, SIG_DFL);
        raise(SIGINT);
    }
    ckpt_signal_received = sig;
}

// Preemption and Ctrl-C (--ckpt-dir): SIGTERM, SIGUSR1 and SIGINT are caught
// from the start of main, before MPI's start-up and the resume's load, so one
// that comes during start-up is not the default's silent exit (143, 138, 130):
// the run stops before its first step (ckpt_stop_before_first_step), later at
// the next step boundary after a checkpoint, and exits CKPT_EXIT_SIGNAL. A
// second SIGINT exits at once. SA_RESTART: a read or write that the signal
// interrupts goes on.
static inline void ckpt_catch_preemption(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = ckpt_on_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
}

#endif  // LLMC_CKPT_SIGNAL_H
