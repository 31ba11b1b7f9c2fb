// logger.h: the training log. A human line per step on stdout and, with
// --log-json FILE, one JSON object per line that tools and tests read:
//   {"step":N,"loss":x,"lr":x,"grad_norm":x,"tokens":N,"ms":x,"tok_per_s":x,"mfu":x}
//   {"step":N,"val_loss":x}
// Keep the keys stable. Only rank 0 logs (the caller passes enabled = rank == 0).
#ifndef LLMC_LOGGER_H
#define LLMC_LOGGER_H

#include <stdio.h>

#include "utils.h"

typedef struct {
    FILE *json;
    const char *json_path;
    int enabled;
} Logger;

typedef struct {
    int step;            // 0-based optimizer step
    int total_steps;
    float loss, lr, grad_norm;
    long long tokens;    // tokens processed in this step, all ranks
    double ms;           // wall time of the step
    double mfu;          // model FLOPs utilisation, 0..1 (negative: unknown)
} StepRecord;

static void logger_open(Logger *lg, const char *json_path, int enabled) {
    lg->json = NULL;
    lg->json_path = json_path;
    lg->enabled = enabled;
    if (enabled && json_path && json_path[0]) {
        lg->json = fopen(json_path, "w");
        if (!lg->json) die_usage("--log-json: cannot write '%s'", json_path);
    }
}

static void logger_step(Logger *lg, const StepRecord *r) {
    if (!lg->enabled) return;
    double tok_per_s = r->ms > 0 ? (double)r->tokens / (r->ms / 1000.0) : 0.0;
    printf("step %5d/%d | loss %.6f | lr %.3e | norm %.4f | %.1f ms | %.0f tok/s | MFU %.1f%%\n", r->step + 1,
           r->total_steps, r->loss, r->lr, r->grad_norm, r->ms, tok_per_s, r->mfu * 100.0);
    fflush(stdout);
    if (lg->json) {
        fprintf(lg->json,
                "{\"step\":%d,\"loss\":%.6f,\"lr\":%.6e,\"grad_norm\":%.6f,\"tokens\":%lld,\"ms\":%.3f,"
                "\"tok_per_s\":%.1f,\"mfu\":%.5f}\n",
                r->step, r->loss, r->lr, r->grad_norm, r->tokens, r->ms, tok_per_s, r->mfu);
        fflush(lg->json);
    }
}

static void logger_eval(Logger *lg, int step, float val_loss) {
    if (!lg->enabled) return;
    printf("step %5d | val loss %.6f\n", step, val_loss);
    fflush(stdout);
    if (lg->json) {
        fprintf(lg->json, "{\"step\":%d,\"val_loss\":%.6f}\n", step, val_loss);
        fflush(lg->json);
    }
}

static void logger_close(Logger *lg) {
    if (lg->json) fcloseCheck(lg->json, lg->json_path);
    lg->json = NULL;
}

#endif  // LLMC_LOGGER_H
