// perf_control.h: turning a `perf record` of this process on and off from
// inside the run, for --profile-steps on the CPU trainer. perf started with
// `-D -1 --control fifo:CTL,ACK` records nothing until "enable" arrives on
// the CTL FIFO; the trainer writes "enable" / "disable" there
// ($LLMC_PERF_CTL) and, when $LLMC_PERF_ACK names perf's ACK FIFO, waits for
// its "ack" so the steps start only once perf records. scripts/profile.sh
// sets both. Unset: nothing to control.
#ifndef LLMC_PERF_CONTROL_H
#define LLMC_PERF_CONTROL_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "utils.h"  // defines: die_usage

// Whether a perf control FIFO is given.
static inline int perf_control_attached(void) {
    const char *ctl = getenv("LLMC_PERF_CTL");
    return ctl && ctl[0];
}

static inline void perf_control(int on) {
    if (!perf_control_attached()) return;
    const char *ctl = getenv("LLMC_PERF_CTL"), *ack = getenv("LLMC_PERF_ACK");
    FILE *f = fopen(ctl, "w");
    if (!f) die_usage("LLMC_PERF_CTL '%s': cannot open perf's control FIFO: %s", ctl, strerror(errno));
    fputs(on ? "enable\n" : "disable\n", f);
    if (fclose(f) != 0) die_usage("LLMC_PERF_CTL '%s': writing to perf's control FIFO failed", ctl);
    if (!ack || !ack[0]) return;
    FILE *a = fopen(ack, "r");
    char line[16] = "";
    if (!a || !fgets(line, sizeof(line), a) || strncmp(line, "ack", 3) != 0)
        die_usage("LLMC_PERF_ACK '%s': perf did not acknowledge '%s'", ack, on ? "enable" : "disable");
    fclose(a);
}

#endif  // LLMC_PERF_CONTROL_H
