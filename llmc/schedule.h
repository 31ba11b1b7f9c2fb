// schedule.h: learning-rate schedules. Linear warmup over warmup_steps, then
// constant, cosine or linear decay to min_lr_frac * lr at the last step, or
// warmup-stable-decay (wsd: constant until the last decay_frac of the steps,
// then linear to the minimum).
#ifndef LLMC_SCHEDULE_H
#define LLMC_SCHEDULE_H

#include <math.h>
#include <string.h>

typedef enum { LR_CONSTANT, LR_COSINE, LR_LINEAR, LR_WSD } LrScheduleKind;

typedef struct {
    LrScheduleKind kind;
    float lr, min_lr_frac, decay_frac;
    int warmup_steps, total_steps;
} LrSchedule;

static inline LrScheduleKind lr_schedule_kind(const char *name) {
    if (strcmp(name, "cosine") == 0) return LR_COSINE;
    if (strcmp(name, "linear") == 0) return LR_LINEAR;
    if (strcmp(name, "wsd") == 0) return LR_WSD;
    return LR_CONSTANT;
}

// Learning rate for 0-based step.
static inline float lr_at_step(const LrSchedule *s, int step) {
    if (step < s->warmup_steps) return s->lr * (float)(step + 1) / (float)s->warmup_steps;
    float min_lr = s->lr * s->min_lr_frac;
    int decay_steps = s->total_steps - s->warmup_steps;
    if (s->kind == LR_CONSTANT || decay_steps <= 1) return s->lr;
    float progress = (float)(step - s->warmup_steps) / (float)(decay_steps - 1);  // 0 .. 1
    if (progress > 1.0f) progress = 1.0f;
    switch (s->kind) {
        case LR_COSINE: return min_lr + 0.5f * (s->lr - min_lr) * (1.0f + cosf((float)M_PI * progress));
        case LR_LINEAR: return s->lr + (min_lr - s->lr) * progress;
        case LR_WSD: {
            float start = 1.0f - s->decay_frac;
            if (progress <= start || s->decay_frac <= 0.0f) return s->lr;
            return s->lr + (min_lr - s->lr) * (progress - start) / s->decay_frac;
        }
        default: return s->lr;
    }
}

#endif  // LLMC_SCHEDULE_H
