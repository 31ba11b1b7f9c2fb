// train_setup.h: trainer set-up shared by train_gpt.c and train_gpt.cu: the
// model shape from --model (a preset or an llm.c model file) and the explicit
// shape flags, the batch plan (micro-batch, accumulation, loss scale), the
// learning-rate schedule, when to evaluate, sample and log, the step record,
// and the final model files.
#ifndef LLMC_TRAIN_SETUP_H
#define LLMC_TRAIN_SETUP_H

#include <sys/stat.h>
#include <unistd.h>

#include "model.h"
#include "modelfile.h"
#include "logger.h"
#include "rand.h"
#include "schedule.h"
#include "train_options.h"

// The model shape: a preset, or the header of a model file, then any explicit
// overrides (which a model file must agree with).
static GPTConfig train_build_config(const TrainOptions *o, int *from_file) {
    GPTConfig cfg;
    *from_file = !gpt_config_preset(o->model, &cfg);
    if (*from_file) {
        if (access(o->model, R_OK) != 0)
            die_usage("--model: '%s' is neither a preset (d12|d24|d36|d48) nor a readable file", o->model);
        modelfile_read_config(o->model, &cfg);
    }
    struct { int value; int *field; const char *flag; } overrides[] = {
        {o->n_layer, &cfg.num_layers, "--n-layer"}, {o->n_embd, &cfg.channels, "--n-embd"},
        {o->n_head, &cfg.num_heads, "--n-head"}, {o->vocab_size, &cfg.vocab_size, "--vocab-size"},
        {o->max_seq_len, &cfg.max_seq_len, "--max-seq-len"},
    };
    for (size_t i = 0; i < sizeof(overrides) / sizeof(overrides[0]); i++) {
        if (overrides[i].value == 0) continue;
        if (*from_file && overrides[i].value != *overrides[i].field)
            die_usage("%s %d disagrees with the model file '%s' (%d)", overrides[i].flag, overrides[i].value, o->model,
                      *overrides[i].field);
        *overrides[i].field = overrides[i].value;
    }
    if (!*from_file) cfg.padded_vocab_size = pad_vocab(cfg.vocab_size);
    const char *problem = gpt_config_problem(&cfg);
    if (problem) die_usage("bad model shape: %s", problem);
    return cfg;
}

// How a step is made of micro-steps: B x T tokens per rank per micro-step,
// accum micro-steps, total_tokens over all ranks; dloss is d(objective)/d(loss
// at one position) for the mean over the whole step.
typedef struct {
    int B, T, accum;
    long long total_tokens;
    float dloss;
} BatchPlan;

// Validates the batch flags against the model and the number of data ranks.
static BatchPlan train_batch_plan(const TrainOptions *o, const GPTConfig *cfg, int world) {
    BatchPlan p;
    p.B = o->batch_size;
    p.T = o->seq_len;
    if (p.T > cfg->max_seq_len) die_usage("--seq-len %d exceeds the model's max-seq-len %d", p.T, cfg->max_seq_len);
    long long micro_tokens = (long long)p.B * p.T * world;
    p.total_tokens = o->total_batch_tokens ? o->total_batch_tokens : micro_tokens;
    if (p.total_tokens % micro_tokens != 0)
        die_usage("--total-batch-tokens %lld is not a multiple of batch-size x seq-len x ranks = %lld", p.total_tokens,
                  micro_tokens);
    p.accum = (int)(p.total_tokens / micro_tokens);
    p.dloss = (float)(1.0 / (double)p.total_tokens);
    if (o->eval_every > 0 && o->data_val[0] == '\0') die_usage("--eval-every needs --data-val");
    return p;
}

// The sampling RNG: its own stream from --seed, the same in both trainers.
static Rng train_sample_rng(const TrainOptions *o) {
    Rng r;
    rng_seed(&r, (uint64_t)o->seed ^ 0x5a5a5a5aULL);
    return r;
}

static LrSchedule train_lr_schedule(const TrainOptions *o) {
    LrSchedule s = {lr_schedule_kind(o->lr_schedule), o->lr, o->min_lr_frac, o->decay_frac, o->warmup_steps, o->steps};
    return s;
}

static void train_make_dir(const char *path) {
    struct stat st;
    if (mkdir(path, 0755) != 0 && (stat(path, &st) != 0 || !S_ISDIR(st.st_mode)))
        die_usage("--out-dir: cannot create directory '%s'", path);
}

// The loop runs steps 0..steps; at step == steps only evaluation and sampling happen.
static inline int train_eval_now(const TrainOptions *o, int step) {
    return o->data_val[0] && o->eval_every > 0 && (step % o->eval_every == 0 || step == o->steps);
}
static inline int train_sample_now(const TrainOptions *o, int step) {
    return o->sample_every > 0 && (step % o->sample_every == 0 || step == o->steps);
}

// Logs optimizer step `step` (0-based) when --log-every says so; peak_flops in FLOP/s.
static void train_log_step(Logger *log, const TrainOptions *o, int step, float loss, float lr, float norm,
                           long long tokens, double ms, double flops_per_step, double peak_flops) {
    if ((step + 1) % o->log_every != 0 && step + 1 != o->steps) return;
    StepRecord r = {step, o->steps, loss, lr, norm, tokens, ms, flops_per_step / (ms * 1e-3) / peak_flops};
    logger_step(log, &r);
}

// Writes the final weights (the full flat buffer) where --out-dir and --save-model say.
static void train_save_model_files(const TrainOptions *o, const ParamLayout *pl, const float *params) {
    if (o->out_dir[0]) {
        train_make_dir(o->out_dir);
        char path[FILENAME_MAX];
        snprintf(path, sizeof(path), "%s/model_final.bin", o->out_dir);
        modelfile_save(path, pl, params);
        printf("saved %s\n", path);
    }
    if (o->save_model[0]) {
        modelfile_save(o->save_model, pl, params);
        printf("saved %s\n", o->save_model);
    }
}

#endif  // LLMC_TRAIN_SETUP_H
