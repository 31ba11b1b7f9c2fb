// logger.h: the training log. A human line per --log-every steps on stdout
// and, with --log-json FILE, one JSON object per line that tools
// (scripts/plot_log.py) and tests read; every record of a step, whatever
// --log-every is. "step" is always the optimizer steps done (a step record
// N: after the N-th update; a validation at N: of the weights after N steps),
// and every record but the first has "elapsed_s" (seconds since this process
// started training) and "tokens_seen" (training tokens of the N steps, all ranks):
//   {"run":{"program":..,"version":..,"start_step":N,"settings":{every flag},
//           "layout":{"ranks":N,"dp":N,"tp":N,"pp":N,"zero":N},"model":{...},"batch":{...}}}  (first)
//   {"step":N,"loss":x,"lr":x,"grad_norm":x,"tokens":N,"ms":x,"elapsed_s":x,"tokens_seen":N,
//    "tok_per_s":x,"mfu":x,
//    "time":{"data":x,"fwd":x,"bwd":x,"comm":x,"bubble":x,"opt":x,"ckpt":x},
//    "time_min":{...},"time_max":{...}}   (step_time.h's parts in ms: rank 0's, and over the ranks)
//   {"step":N,"val_loss":x,"elapsed_s":x,"tokens_seen":N}
//   {"step":N,"ckpt":"staged","stall_ms":x,"elapsed_s":x,"tokens_seen":N}  (checkpoint.h: the loop's stall)
//   {"step":N,"ckpt":"committed","bytes":N,"seconds":x,...}  (durable; seconds since staged)
//   {"step":N,"ckpt":"cost","stall_ms":x,"first_step":F,"steps":n,"step_ms":x,"baseline_ms":x,"lost_ms":x,...}
//      (after the line of the step it was committed in: checkpoint.h's ckpt_step_cost)
//   {"summary":{...}}                        (train_loop.h's train_summary, at the end)
// With --tensorboard DIR the same step and validation scalars also go to
// TensorBoard event files (tensorboard.h), tagged train/*, val/loss, perf/*.
// Keep the keys stable. Only rank 0 logs (the caller passes enabled = rank == 0).
// The JSON log is streamed to its path as the run goes (so it can be followed
// live); every write is checked, and a failed one (a full disk) stops the run
// with one line naming the file, exit 2. train_check_outputs (train_loop.h)
// refuses a log path that names one of the run's inputs before it is opened.
#ifndef LLMC_LOGGER_H
#define LLMC_LOGGER_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "step_time.h"    // defines: STEP_PARTS, step_part_names
#include "tensorboard.h"  // defines: TBWriter, tb_open, tb_scalar, tb_close
#include "utils.h"        // defines: wall_seconds, die_usage, duration_text

typedef struct {
    FILE *json;
    const char *json_path;
    int enabled;
    TBWriter tb;                 // --tensorboard: the step and validation scalars
    double start_s;              // wall_seconds() when training started (logger_start)
    long long tokens_per_step;   // all ranks
} Logger;

typedef struct {
    int step;            // optimizer steps done (this record's step included)
    int total_steps;
    int print;           // a human line too (--log-every says so)
    double eta_s;        // seconds to the last step, from this process's steps so far (negative: unknown)
    float loss, lr, grad_norm;
    long long tokens;    // tokens processed in this step, all ranks
    double ms;           // wall time of the step
    double mfu;          // model FLOPs utilisation, 0..1 (negative: unknown)
    const double *time;  // (STEP_PARTS) ms of each part of the step (NULL: none)
    const double *time_min, *time_max;  // (STEP_PARTS) over the ranks (NULL: none)
} StepRecord;

// ,"key":{"data":x,...} for one set of parts
static void logger_json_parts(FILE *f, const char *key, const double *ms) {
    fprintf(f, ",\"%s\":{", key);
    for (int p = 0; p < STEP_PARTS; p++) fprintf(f, "%s\"%s\":%.3f", p ? "," : "", step_part_names[p], ms[p]);
    fprintf(f, "}");
}

// tb_dir: --tensorboard's directory ("" none).
static void logger_open(Logger *lg, const char *json_path, const char *tb_dir, int enabled) {
    lg->json = NULL;
    lg->json_path = json_path;
    lg->enabled = enabled;
    lg->start_s = wall_seconds();
    lg->tokens_per_step = 0;
    if (enabled && json_path && json_path[0]) {
        lg->json = fopen(json_path, "w");
        if (!lg->json) die_usage("--log-json: cannot write '%s': %s", json_path, strerror(errno));
    }
    tb_open(&lg->tb, enabled ? tb_dir : "");
}

// After each record: flushed to the file, or the run stops.
static void logger_flush_checked(Logger *lg) {
    if (ferror(lg->json) || fflush(lg->json) != 0)
        die_usage("--log-json: writing '%s' failed: %s", lg->json_path, strerror(errno ? errno : EIO));
}

// From here on, records count elapsed time and tokens seen.
static void logger_start(Logger *lg, long long tokens_per_step) {
    lg->start_s = wall_seconds();
    lg->tokens_per_step = tokens_per_step;
}

// ,"elapsed_s":x,"tokens_seen":N for a record at `step` steps done
static void logger_json_progress(Logger *lg, int step) {
    fprintf(lg->json, ",\"elapsed_s\":%.3f,\"tokens_seen\":%lld", wall_seconds() - lg->start_s,
            (long long)step * lg->tokens_per_step);
}

static void logger_step(Logger *lg, const StepRecord *r) {
    if (!lg->enabled) return;
    double tok_per_s = r->ms > 0 ? (double)r->tokens / (r->ms / 1000.0) : 0.0;
    if (r->print) {
        char mfu[16] = "n/a", elapsed[16], eta[24] = "";  // (MFU n/a: no peak to compare with)
        if (r->mfu >= 0) snprintf(mfu, sizeof(mfu), "%.1f%%", r->mfu * 100.0);
        duration_text(elapsed, sizeof(elapsed), wall_seconds() - lg->start_s);
        if (r->eta_s >= 0 && r->step < r->total_steps) {
            memcpy(eta, ", ETA ", 7);
            duration_text(eta + 6, sizeof(eta) - 6, r->eta_s);
        }
        printf("step %5d/%d | loss %.6f | lr %.3e | norm %.4f | %.1f ms | %.0f tok/s | MFU %s | %s%s\n", r->step,
               r->total_steps, r->loss, r->lr, r->grad_norm, r->ms, tok_per_s, mfu, elapsed, eta);
        fflush(stdout);
    }
    if (lg->json) {
        fprintf(lg->json, "{\"step\":%d,\"loss\":%.6f,\"lr\":%.6e,\"grad_norm\":%.6f,\"tokens\":%lld,\"ms\":%.3f",
                r->step, r->loss, r->lr, r->grad_norm, r->tokens, r->ms);
        logger_json_progress(lg, r->step);
        fprintf(lg->json, ",\"tok_per_s\":%.1f,\"mfu\":%.5f", tok_per_s, r->mfu);
        if (r->time) logger_json_parts(lg->json, "time", r->time);
        if (r->time_min) logger_json_parts(lg->json, "time_min", r->time_min);
        if (r->time_max) logger_json_parts(lg->json, "time_max", r->time_max);
        fprintf(lg->json, "}\n");
        logger_flush_checked(lg);
    }
    tb_scalar(&lg->tb, "train/loss", r->step, r->loss);
    tb_scalar(&lg->tb, "train/lr", r->step, r->lr);
    tb_scalar(&lg->tb, "train/grad_norm", r->step, r->grad_norm);
    tb_scalar(&lg->tb, "perf/tokens_per_s", r->step, (float)tok_per_s);
    if (r->mfu >= 0) tb_scalar(&lg->tb, "perf/mfu", r->step, (float)r->mfu);
}

// The validation loss of the weights after `step` steps.
static void logger_eval(Logger *lg, int step, float val_loss) {
    if (!lg->enabled) return;
    printf("step %5d | val loss %.6f\n", step, val_loss);
    fflush(stdout);
    if (lg->json) {
        fprintf(lg->json, "{\"step\":%d,\"val_loss\":%.6f", step, val_loss);
        logger_json_progress(lg, step);
        fprintf(lg->json, "}\n");
        logger_flush_checked(lg);
    }
    tb_scalar(&lg->tb, "val/loss", step, val_loss);
}

// A checkpoint event (the human lines are checkpoint.h's).
static void logger_ckpt(Logger *lg, int64_t step, const char *event, double stall_ms, double bytes, double seconds) {
    if (!lg->enabled || !lg->json) return;
    if (strcmp(event, "staged") == 0)
        fprintf(lg->json, "{\"step\":%lld,\"ckpt\":\"staged\",\"stall_ms\":%.3f", (long long)step, stall_ms);
    else
        fprintf(lg->json, "{\"step\":%lld,\"ckpt\":\"%s\",\"bytes\":%.0f,\"seconds\":%.3f", (long long)step,
                event, bytes, seconds);
    logger_json_progress(lg, (int)step);
    fprintf(lg->json, "}\n");
    logger_flush_checked(lg);
}

// What a checkpoint cost the run (checkpoint.h's ckpt_step_cost): its
// stall, its steps (first, how many, their wall time), the median step
// before it and the difference (null, with the baseline, when baseline_ms < 0).
static void logger_ckpt_cost(Logger *lg, int64_t step, double stall_ms, int first, int steps, double step_ms,
                             double baseline_ms) {
    if (!lg->enabled || !lg->json) return;
    fprintf(lg->json, "{\"step\":%lld,\"ckpt\":\"cost\",\"stall_ms\":%.3f,\"first_step\":%d,\"steps\":%d,"
            "\"step_ms\":%.3f,", (long long)step, stall_ms, first, steps, step_ms);
    if (baseline_ms < 0)
        fprintf(lg->json, "\"baseline_ms\":null,\"lost_ms\":null");
    else
        fprintf(lg->json, "\"baseline_ms\":%.3f,\"lost_ms\":%.3f", baseline_ms, step_ms - steps * baseline_ms);
    logger_json_progress(lg, (int)step);
    fprintf(lg->json, "}\n");
    logger_flush_checked(lg);
}

static void logger_close(Logger *lg) {
    tb_close(&lg->tb);
    if (lg->json) {
        logger_flush_checked(lg);
        FILE *f = lg->json;
        lg->json = NULL;
        if (fclose(f) != 0) die_usage("--log-json: writing '%s' failed: %s", lg->json_path, strerror(errno));
    }
}

#endif  // LLMC_LOGGER_H
