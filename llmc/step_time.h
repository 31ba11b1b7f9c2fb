// step_time.h: where a training step's time goes, for both trainers. The
// step is cut into consecutive intervals, each charged to one part:
//   data    waiting for the loader's batches
//   fwd     forward passes (with the classifier's fused backward)
//   bwd     backward passes (B and W)
//   comm    waiting for a collective that compute did not hide
//   bubble  a pipeline stage waiting for its neighbour (the pipeline group's waits)
//   opt     the gradient norm, clipping, AdamW, the weights' gathering
//   ckpt    the checkpoint's stall at the step boundary (staging, a wait for the one before)
// The code says which part it enters (step_time_enter, which returns the part
// it left, so a wait can go back to it); comm.h's waits charge their time to
// comm or bubble. Every instant of the step belongs to exactly one part, so
// the parts add up to the step's time by construction.
//
// Clocks: the host's wall clock (the CPU trainer), or a device clock (the GPU
// trainer, StepDeviceClock): each cut is an event recorded on the compute
// stream, so an interval is how long the device's timeline spent on what was
// queued in that part. A host wait while the stream is busy then costs nothing
// (the device was working: hidden), and a stream's wait for a collective is
// charged to comm. The intervals are read once the step's stream has drained.
#ifndef LLMC_STEP_TIME_H
#define LLMC_STEP_TIME_H

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "utils.h"  // defines: wall_seconds

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

// The q-quantile (0..1, nearest rank) of v[0..n) (n > 0; v is reordered): of step times.
static double quantile(double *v, int n, double q) {
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    int k = (int)(q * n + 0.999999) - 1;
    return v[k < 0 ? 0 : k >= n ? n - 1 : k];
}

typedef enum { STEP_DATA, STEP_FWD, STEP_BWD, STEP_COMM, STEP_BUBBLE, STEP_OPT, STEP_CKPT, STEP_PARTS } StepPart;
static const char *const step_part_names[STEP_PARTS] = {"data", "fwd", "bwd", "comm", "bubble", "opt", "ckpt"};

// A device clock: mark(dev, part) records a cut on the device's timeline
// where `part` begins (part < 0: the step's end); collect(dev, ms) waits for
// the marks and adds each interval's milliseconds to ms[its part], then
// forgets them.
typedef struct {
    void *dev;
    void (*mark)(void *dev, int part);
    void (*collect)(void *dev, double ms[STEP_PARTS]);
} StepDeviceClock;

typedef struct {
    int on;           // inside a step
    pthread_t thread; // the one that runs it (others' waits, a background writer's, are not the step's)
    StepPart part;    // the part now running
    double since;     // host clock: when it began (s)
    double ms[STEP_PARTS];
    StepDeviceClock device;  // dev NULL: the host clock
} StepClock;

static StepClock step_clock;  // one per process (each trainer is one translation unit)

static inline void step_time_use_device(StepDeviceClock d) { step_clock.device = d; }

// Enters part p; returns the part left (p itself outside a step).
static inline StepPart step_time_enter(StepPart p) {
    StepClock *c = &step_clock;
    if (!c->on || p == c->part || !pthread_equal(pthread_self(), c->thread)) return p;
    StepPart left = c->part;
    if (c->device.dev) {
        c->device.mark(c->device.dev, (int)p);
    } else {
        double now = wall_seconds();
        c->ms[left] += (now - c->since) * 1e3;
        c->since = now;
    }
    c->part = p;
    return left;
}

// A step begins, in part p.
static inline void step_time_start(StepPart p) {
    StepClock *c = &step_clock;
    memset(c->ms, 0, sizeof(c->ms));
    c->on = 1;
    c->thread = pthread_self();
    c->part = p;
    if (c->device.dev) c->device.mark(c->device.dev, (int)p);
    else c->since = wall_seconds();
}

// The step ends: its parts' milliseconds into ms.
static inline void step_time_stop(double ms[STEP_PARTS]) {
    StepClock *c = &step_clock;
    if (c->device.dev) {
        c->device.mark(c->device.dev, -1);
        c->device.collect(c->device.dev, c->ms);
    } else {
        c->ms[c->part] += (wall_seconds() - c->since) * 1e3;
    }
    c->on = 0;
    memcpy(ms, c->ms, sizeof(c->ms));
}

#endif  // LLMC_STEP_TIME_H
