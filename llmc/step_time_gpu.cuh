// step_time_gpu.cuh: step_time.h's device clock for the GPU trainer. Each cut
// in a step is an event recorded on the compute stream (a pool, reused every
// step), so an interval is the device timeline's time between two cuts: the
// work queued in that part, and the stream's waits for collectives queued as
// comm. A step with more cuts than the pool holds charges the rest to the
// last part it could mark.
#ifndef LLMC_STEP_TIME_GPU_CUH
#define LLMC_STEP_TIME_GPU_CUH

#include "cuda_common.cuh"  // defines: CUDA_CHECK
#include "step_time.h"      // defines: STEP_PARTS, StepDeviceClock

#define STEP_EVENTS 16384

typedef struct {
    cudaStream_t stream;
    cudaEvent_t ev[STEP_EVENTS];
    int part[STEP_EVENTS];  // the part that begins at ev[i] (-1: the step's end)
    int n;
} StepEventClock;

static void step_event_mark(void *dev, int part) {
    StepEventClock *c = (StepEventClock *)dev;
    if (c->n == STEP_EVENTS - 1 && part >= 0) return;  // (full: keep the last slot for the end)
    CUDA_CHECK(cudaEventRecord(c->ev[c->n], c->stream));
    c->part[c->n++] = part;
}

static void step_event_collect(void *dev, double ms[STEP_PARTS]) {
    StepEventClock *c = (StepEventClock *)dev;
    if (c->n > 0) CUDA_CHECK(cudaEventSynchronize(c->ev[c->n - 1]));
    for (int i = 0; i + 1 < c->n; i++) {
        float t = 0.0f;
        CUDA_CHECK(cudaEventElapsedTime(&t, c->ev[i], c->ev[i + 1]));
        if (c->part[i] >= 0) ms[c->part[i]] += t;
    }
    c->n = 0;
}

// The clock on `stream` (c: heap, it is large); step_time_use_device(the result) makes the steps use it.
static StepDeviceClock step_event_clock_init(StepEventClock *c, cudaStream_t stream) {
    c->stream = stream;
    c->n = 0;
    for (int i = 0; i < STEP_EVENTS; i++) CUDA_CHECK(cudaEventCreate(&c->ev[i]));
    StepDeviceClock d = {c, step_event_mark, step_event_collect};
    return d;
}

static void step_event_clock_free(StepEventClock *c) {
    for (int i = 0; i < STEP_EVENTS; i++) CUDA_CHECK(cudaEventDestroy(c->ev[i]));
}

#endif  // LLMC_STEP_TIME_GPU_CUH
