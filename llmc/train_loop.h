// train_loop.h: the training loop both trainers run (train_gpt.c on the CPU,
// train_gpt.cu on the GPU), over a model behind TrainModel: evaluation and
// sampling at their steps, micro-steps with gradient accumulation, the
// distributed gradient reduction, the optimizer step, timing and the log.
// Also the start-up pieces both print or load the same way (the run's header
// lines, the tokenizer). The trainers keep what differs: the model, its
// distributed layer (zero_cpu.h / zero_gpu.cuh), memory and compute lines.
#ifndef LLMC_TRAIN_LOOP_H
#define LLMC_TRAIN_LOOP_H

#include <stdio.h>

#include "checkpoint.h"     // defines: CkptRanges, CkptRun, ckpt_ranges, CkptTargets, ...
#include "comm.h"           // defines: CommGroup, comm_mean, Comm, comm_size, ...
#include "dataloader.h"     // defines: DataLoader, dataloader_reset, dataloader_next, dataloader_restore
#include "file_io.h"        // defines: make_dirs, output_refuse_input, path_is_or_under, output_path_check
#include "logger.h"         // defines: Logger, logger_flush_checked, StepRecord, logger_step, ...
#include "optimizer.h"      // defines: AdamWConfig, grad_clip_scale
#include "param_gather.h"   // defines: ParamGather, param_gather_init, param_gather_fetch, param_gather_free
#include "sampler.h"        // defines: SampleParams, SampleWindow, sample_window_push, sample_window_init, ...
#include "schedule.h"       // defines: LrSchedule, lr_at_step
#include "tokenizer.h"      // defines: Tokenizer, tokenizer_load, tokenizer_vocab_size, tokenizer_eot, ...
#include "train_options.h"  // defines: TrainOptions, TRAIN_FLAGS, train_profile_range
#include "train_setup.h"    // defines: BatchPlan, train_tokenizer_dir, train_sample_rng, train_saves_model, ...

// A model with its distributed layer, as the loop drives it.
typedef struct {
    void *ctx;
    // One optimizer step's forwards and backwards over accum micro-batches xs,
    // ys ((accum, B*T) each), as the trainer orders them (micro-step by
    // micro-step, or a pipeline's schedule), its reductions started as the
    // ZeRO stage says; returns the sum of the micro-batches' mean losses.
    float (*train_step)(void *ctx, const int *xs, const int *ys, int accum);
    // Evaluation and sampling: the mean loss over the batch x, y (B,T); without
    // targets (y NULL) it leaves logits for `logits`.
    float (*forward)(void *ctx, const int *x, const int *y, int B, int T);
    // After a forward without targets: a token drawn from row `row`'s logits
    // as sp says (sampler.h; the same on every rank: each draws from the same generator).
    int (*sample)(void *ctx, int row, const SampleParams *sp, Rng *rng);
    float (*finish_grads)(void *ctx);  // completes the reductions; the global gradient norm
    // AdamW on this rank's shard (step 0-based; the weights made whole as the
    // ZeRO stage says), finished before it returns, so the step's time is real.
    void (*optimizer_step)(void *ctx, const AdamWConfig *ac, float grad_scale, int step);
    // --profile-steps: a profiler's capture on (1) before the first step and
    // off (0) after the last (cudaProfilerStart/Stop; perf_control.h);
    // returns whether a profiler is there to take it (as far as it can tell).
    int (*profile)(void *ctx, int on);
    // Profiler ranges around the loop's phases (NVTX on the GPU); NULL: none.
    void (*range_push)(const char *name);
    void (*range_pop)(void);
    // Checkpoints (checkpoint.h). stage: copies [lo, hi) of the global order
    // (held by this rank) of the fp32 master weights, AdamW m and v into
    // staging (CKPT_STATES, hi - lo), in ckpt_stage.h's chunks with their
    // CRC32Cs into crcs (NULL: none wanted), or queues that copy (crcs then
    // NULL: the writer takes the CRC32C); wait_staged: waits
    // for a queued copy (NULL: stage copies at once: on the training threads
    // at the step boundary, or on the writer's thread where it has a core,
    // beside the next step, which the next update waits for); stage_in_update: the next optimizer_step also
    // writes its results over [lo, hi) as stage would copy them (NULL: it
    // cannot; a checkpoint due after it is copied by stage); load: installs the states over ranges->hold from host arrays
    // (states[s]: hold[s]'s pieces one after the other), as they were after `step` steps.
    void (*ckpt_stage)(void *ctx, float *staging, int64_t lo, int64_t hi, uint32_t *crcs);
    void (*ckpt_wait_staged)(void *ctx);
    void (*ckpt_stage_in_update)(void *ctx, float *staging, int64_t lo, int64_t hi, uint32_t *crcs);
    void (*ckpt_load)(void *ctx, float *const states[CKPT_STATES], const CkptRanges *ranges, int64_t step);
    int host_threads;  // the CPU threads a step keeps busy on this rank (the checkpoint writer gets the other cores)
} TrainModel;

static inline void train_range_push(const TrainModel *tm, const char *name) {
    if (tm->range_push) tm->range_push(name);
}
static inline void train_range_pop(const TrainModel *tm) {
    if (tm->range_pop) tm->range_pop();
}

// Everything one run of the loop needs.
typedef struct {
    const TrainOptions *o;
    const GPTConfig *cfg;
    BatchPlan plan;
    const TrainModel *model;
    DataLoader *train, *val;   // val: NULL without --data-val
    const Tokenizer *tokenizer;  // NULL: samples print as bytes or ids
    CommGroup *dp;             // the data group on host buffers (means of losses)
    CommGroup *world;          // every rank: the checkpoints' writers, the step times over the ranks, the summary
    int rank;                  // only rank 0 prints
    double flops_per_step, peak_flops;  // FLOP (all ranks), FLOP/s (all ranks: a device's peak x ranks), for MFU
    double (*peak_memory_bytes)(void);  // this rank's peak memory (host RSS, or the device's in use)
    const char *memory_kind;            // what peak_memory_bytes measures, for the summary
    // checkpoints: what the manifest describes, this rank's ranges (of its
    // buffer) and that buffer's mapping onto the global order, its staging
    // buffer ((CKPT_STATES, write range) floats; NULL without --ckpt-dir)
    CkptRun ckpt;
    CkptRanges ckpt_ranges;
    const ParamMap *map;
    float *ckpt_staging;
} TrainRun;

// --tokenizer, when given, else a Hugging Face --model directory's own
// (vocab.json + merges.txt), into *tok; returns whether one was loaded.
static int train_load_tokenizer(const TrainOptions *o, Tokenizer *tok, int vocab_size) {
    const char *path = train_tokenizer_dir(o);
    if (!path[0]) path = o->tokenizer;
    if (path[0] == '\0') return 0;
    tokenizer_load(tok, path);
    if ((int)tokenizer_vocab_size(tok) > vocab_size)
        die_usage("--tokenizer '%s' has %u tokens, more than the model's vocabulary %d", path,
                  tokenizer_vocab_size(tok), vocab_size);
    return 1;
}

// At start-up, before anything is written (rank 0, which writes the files):
// every output the flags name can be created, none names one of the run's
// inputs (the model file, a data shard, the tokenizer's files) or another
// output, and none is or lies inside a checkpoint directory (the --resume
// checkpoint, --ckpt-dir: its step directories, `latest` and what else the
// writer keeps there), which --ckpt-dir itself may not lie inside either; so
// a run never finds out only after training that it cannot save, and never
// truncates its own input or a checkpoint.
static void train_check_outputs(const TrainOptions *o, int model_from_file, const DataLoader *train,
                                const DataLoader *val) {
    char final_path[FLAG_STR_MAX + 32] = "", hf_path[FLAG_STR_MAX + 32] = "";
    if (o->out_dir[0]) {
        make_dirs(o->out_dir, "--out-dir");
        snprintf(final_path, sizeof(final_path), "%s/model_final.bin", o->out_dir);
    }
    if (o->save_hf[0]) {
        make_dirs(o->save_hf, "--save-hf");
        snprintf(hf_path, sizeof(hf_path), "%s/" HF_WEIGHTS_FILE, o->save_hf);
    }
    const char *resume_dir = strcmp(o->resume, "auto") == 0 ? "" : o->resume;
    output_refuse_input(o->ckpt_dir, "--ckpt-dir", resume_dir, "--resume");
    // the log may also be a stream (/dev/stdout, a FIFO a tool reads): its writes are checked as they happen
    struct { const char *path, *flag; int stream_ok; } outs[] = {
        {o->log_json, "--log-json", 1}, {o->save_model, "--save-model", 0}, {final_path, "--out-dir", 0},
        {hf_path, "--save-hf", 0}};
    const int nouts = (int)(sizeof(outs) / sizeof(outs[0]));
    for (int i = 0; i < nouts; i++) {
        const char *out = outs[i].path, *flag = outs[i].flag;
        if (!out[0]) continue;
        if (model_from_file) output_refuse_input(out, flag, o->model, "--model");
        output_refuse_input(out, flag, o->tokenizer, "--tokenizer");  // (a directory: its files)
        output_refuse_input(out, flag, resume_dir, "--resume");
        output_refuse_input(out, flag, o->ckpt_dir, "--ckpt-dir");
        const DataLoader *loaders[2] = {train, val};
        const char *data_flags[2] = {"--data-train", "--data-val"};
        for (int d = 0; d < 2; d++)
            for (int s = 0; loaders[d] && s < loaders[d]->num_shards; s++)
                output_refuse_input(out, flag, loaders[d]->paths[s], data_flags[d]);
        for (int j = 0; j < i; j++)
            if (outs[j].path[0] && path_is_or_under(out, outs[j].path))
                die_usage("%s '%s' is also the %s output", flag, out, outs[j].flag);
        struct stat st;
        if (!(outs[i].stream_ok && stat(out, &st) == 0 && (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode))))
            output_path_check(out, flag);
    }
}

// The model, batch and data lines every run starts with (rank 0); train: NULL without training data.
// model_params: the whole model's; rank_params: what rank 0 holds of them (its tensor and pipeline share).
static void train_print_header(const TrainOptions *o, const GPTConfig *cfg, int64_t model_params,
                               int64_t rank_params, int from_file, const BatchPlan *plan, int world,
                               const DataLoader *train, int have_val) {
    char share[64] = "";
    if (rank_params != model_params)
        snprintf(share, sizeof(share), " (rank 0 holds %.2fM of them)", rank_params / 1e6);
    printf("model: L=%d C=%d NH=%d V=%d (padded %d) maxT=%d | %.2fM parameters%s%s%s\n", cfg->num_layers,
           cfg->channels, cfg->num_heads, cfg->vocab_size, cfg->padded_vocab_size, cfg->max_seq_len,
           model_params / 1e6, share, from_file ? " | from " : "", from_file ? o->model : "");
    printf("batch: B=%d T=%d x %d ranks x %d accumulation = %lld tokens/step | %d steps\n", plan->B, plan->T, world,
           plan->accum, plan->total_tokens, o->steps);
    if (train)
        printf("data: %lld train tokens in %d shards%s\n", (long long)train->num_tokens, train->num_shards,
               have_val ? " | validation data given" : "");
    else printf("data: none (nothing is trained)\n");
}

// Mean loss over eval_batches batches of the validation data (from its start),
// each data rank on its own samples, averaged over the ranks.
static float train_evaluate(const TrainRun *r, int *x, int *y) {
    const TrainModel *tm = r->model;
    train_range_push(tm, "evaluate");
    dataloader_reset(r->val);
    double total = 0.0;
    for (int i = 0; i < r->o->eval_batches; i++) {
        dataloader_next(r->val, x, y);
        total += tm->forward(tm->ctx, x, y, r->plan.B, r->plan.T);
    }
    train_range_pop(tm);
    return (float)comm_mean(r->dp, total / r->o->eval_batches);
}

// The token the sample starts from: the tokenizer's end-of-text, else the last id.
static inline int sample_start_token(const Tokenizer *tok, int V) { return tok ? (int)tokenizer_eot(tok) : V - 1; }

// Prints one token: decoded by the tokenizer when there is one, as a byte for a
// byte-level vocabulary (V <= 257), else as <id>.
static void sample_print_token(FILE *out, const Tokenizer *tok, int id, int V) {
    size_t nbytes;
    if (tok && id < (int)tokenizer_vocab_size(tok)) {
        const char *bytes = tokenizer_decode(tok, (uint32_t)id, &nbytes);
        fwrite(bytes, 1, nbytes, out);
    } else if (id < 256 && V <= 257) {
        fputc(id, out);
    } else {
        fprintf(out, "<%d>", id);
    }
}

// Generates --sample-tokens tokens after the end-of-text token and prints them
// (sample_print_token). Every rank runs it (ZeRO-3 gathers weights
// collectively, in step); only rank 0 prints.
// Draws n tokens after the context w as --temperature and --top-k say, each
// pushed onto w; rank 0 prints them, then the closing rule (every rank runs it).
static void train_continue(const TrainRun *r, SampleWindow *w, int n, Rng *rng) {
    const TrainModel *tm = r->model;
    int V = r->cfg->vocab_size, show = r->rank == 0;
    SampleParams sp = {r->o->temperature, r->o->top_k};
    for (int i = 0; i < n; i++) {
        tm->forward(tm->ctx, w->tokens, NULL, 1, r->plan.T);  // causal: positions >= len do not affect len-1
        int next = tm->sample(tm->ctx, w->len - 1, &sp, rng);
        if (show) sample_print_token(stdout, r->tokenizer, next, V);
        sample_window_push(w, next);
    }
    if (show) {
        printf("\n----------------\n");
        fflush(stdout);
    }
}

static void train_print_sample(const TrainRun *r, Rng *rng) {
    const TrainModel *tm = r->model;
    train_range_push(tm, "sample");
    SampleWindow w;
    sample_window_init(&w, r->plan.T, sample_start_token(r->tokenizer, r->cfg->vocab_size));
    if (r->rank == 0) printf("---- sample ----\n");
    train_continue(r, &w, r->o->sample_tokens, rng);
    sample_window_free(&w);
    train_range_pop(tm);
}

// --resume: the model's states, the data position and the sampling RNG from
// the checkpoint (checkpoint.h); returns the step to continue from (0: fresh)
// and, when it resumed, the checkpoint's schedule length in *lr_decay_steps.
static int train_resume(const TrainRun *r, Rng *sample_rng, int *lr_decay_steps) {
    CkptTargets t;
    memset(&t, 0, sizeof(t));
    t.map = r->map;
    for (int s = 0; s < CKPT_STATES; s++) {
        t.hold[s] = r->ckpt_ranges.hold[s];
        t.dst[s] = (float *)mallocCheck(sizeof(float) * (size_t)(ckpt_pieces_elems(&t.hold[s]) + 1));
    }
    CkptPoint p;
    int resumed = ckpt_resume(&r->ckpt, r->world, r->train, &t, &p);
    if (resumed) {
        r->model->ckpt_load(r->model->ctx, t.dst, &r->ckpt_ranges, p.step);
        dataloader_restore(r->train, &p.data);
        *sample_rng = p.sample_rng;
        *lr_decay_steps = (int)p.lr_decay_steps;
        if (r->rank == 0) {
            printf("resume: continuing at step %lld (epoch %lld, global sample %lld) from %s\n", (long long)p.step,
                   (long long)p.data.epoch, (long long)p.data.sample,
                   strcmp(r->o->resume, "auto") == 0 ? r->o->ckpt_dir : r->o->resume);
        }
    }
    fflush(stdout);  // (the resume: lines at once, also into a launcher's pipe)
    for (int s = 0; s < CKPT_STATES; s++) free(t.dst[s]);
    return resumed ? (int)p.step : 0;
}

// The program's version in the run record: the Makefile passes `git describe` of the tree it built.
#ifndef LLMC_VERSION
#define LLMC_VERSION "unknown"
#endif

// The JSON log's first record: every setting (so the run can be repeated:
// --config takes them back), the program and its version, the layout, model
// and batch (rank 0 writes it).
static void train_log_run(const TrainRun *r, Logger *log, int start) {
    if (!log->json) return;
    const CkptRun *c = &r->ckpt;  // (its layout)
    const GPTConfig *m = r->cfg;
    fprintf(log->json, "{\"run\":{\"program\":\"%s\",\"version\":\"%s\",\"start_step\":%d,\"settings\":",
            r->ckpt.trainer, LLMC_VERSION, start);
    flags_write_json(log->json, TRAIN_FLAGS, FLAGS_COUNT(TRAIN_FLAGS), r->o);
    fprintf(log->json, ",\"layout\":{\"ranks\":%d,\"dp\":%d,\"tp\":%d,\"pp\":%d,\"zero\":%d}", c->ranks,
            c->dp, c->tp, c->pp, r->o->zero);  // (--cp: in the settings)
    fprintf(log->json, ",\"model\":{\"num_layers\":%d,\"channels\":%d,\"num_heads\":%d,\"vocab_size\":%d,"
            "\"padded_vocab_size\":%d,\"max_seq_len\":%d,\"parameters\":%lld}", m->num_layers, m->channels,
            m->num_heads, m->vocab_size, m->padded_vocab_size, m->max_seq_len, (long long)r->ckpt.pl->num_params);
    fprintf(log->json, ",\"batch\":{\"B\":%d,\"T\":%d,\"accum\":%d,\"total_tokens\":%lld},\"flops_per_step\":%.6g,"
            "\"peak_flops\":%.6g}}\n", r->plan.B, r->plan.T, r->plan.accum, r->plan.total_tokens, r->flops_per_step,
            r->peak_flops);
    logger_flush_checked(log);
}

// The schedule's length: --lr-decay-steps when given, else a resumed
// checkpoint's (kept: -1 when there is none), else --steps. A resume whose
// schedule is not simply --steps long (an extended run, --lr-decay-steps)
// says which and how the steps after the schedule run (at its last rate), on
// stdout and as a {"resume":...} record of the JSON log.
static int train_lr_decay_steps(const TrainRun *r, Logger *log, int start, int kept) {
    const TrainOptions *o = r->o;
    int decay = o->lr_decay_steps ? o->lr_decay_steps : kept >= 0 ? kept : o->steps;
    if (kept < 0 || r->rank != 0 || (!o->lr_decay_steps && kept == o->steps)) return decay;
    const char *from = o->lr_decay_steps ? "--lr-decay-steps" : "the checkpoint's";
    printf("resume: --steps %d from step %d; the %s schedule is %d steps long (%s)%s\n", o->steps, start,
           o->lr_schedule, decay, from,
           o->steps > decay ? ": the steps after it run at its last rate (--lr-decay-steps N re-fits it)" : "");
    if (log->json) {
        fprintf(log->json, "{\"resume\":{\"step\":%d,\"steps\":%d,\"lr_decay_steps\":%d,\"from\":\"%s\","
                "\"checkpoint_lr_decay_steps\":%d}}\n", start, o->steps, decay, o->lr_decay_steps ? "flag" : "checkpoint",
                kept);
        logger_flush_checked(log);
    }
    return decay;
}

// --profile-steps: the capture on (before step first) or off (after step last).
static void train_profile(const TrainRun *r, int on, int first, int last) {
    int attached = r->model->profile(r->model->ctx, on);
    if (r->rank == 0) {
        if (on) printf("profile: capturing steps %d-%d%s\n", first, last, attached ? "" : " (no profiler attached)");
        else printf("profile: capture of steps %d-%d ended\n", first, last);
        fflush(stdout);
    }
}

// Each step's wall time and parts (step_time.h), for the summary.
typedef struct {
    int n, cap;
    double *ms;
    double (*parts)[STEP_PARTS];
} StepHistory;

static void step_history_add(StepHistory *h, double ms, const double parts[STEP_PARTS]) {
    if (h->n == h->cap) {
        h->cap = h->cap ? 2 * h->cap : 64;
        h->ms = (double *)reallocCheck(h->ms, sizeof(double) * (size_t)h->cap);
        h->parts = (double(*)[STEP_PARTS])reallocCheck(h->parts, sizeof(double) * STEP_PARTS * (size_t)h->cap);
    }
    h->ms[h->n] = ms;
    memcpy(h->parts[h->n], parts, sizeof(double) * STEP_PARTS);
    h->n++;
}

static void step_history_free(StepHistory *h) {
    free(h->ms);
    free(h->parts);
}

// Logs optimizer step `step` (0-based; this process started at step `start`):
// every rank calls it, the parts' minimum and maximum over the ranks are
// gathered, and rank 0's logger writes the JSON record, and the human line
// when --log-every says so.
static void train_log_step(const TrainRun *r, Logger *log, int step, int start, float loss, float lr, float norm,
                           double ms, const double parts[STEP_PARTS]) {
    const TrainOptions *o = r->o;
    int n = r->world->size;
    double *all = (double *)mallocCheck(sizeof(double) * STEP_PARTS * (size_t)n), lo[STEP_PARTS], hi[STEP_PARTS];
    size_t *counts = (size_t *)mallocCheck(sizeof(size_t) * (size_t)n);
    for (int k = 0; k < n; k++) counts[k] = STEP_PARTS;
    CommRequest q = comm_all_gather_start(r->world, parts, all, counts, COMM_F64);
    comm_wait(&q);
    for (int p = 0; p < STEP_PARTS; p++) {
        lo[p] = hi[p] = all[p];
        for (int k = 1; k < n; k++) {
            double v = all[(size_t)k * STEP_PARTS + p];
            lo[p] = v < lo[p] ? v : lo[p];
            hi[p] = v > hi[p] ? v : hi[p];
        }
    }
    double elapsed = wall_seconds() - log->start_s;
    StepRecord rec = {step + 1, o->steps, (step + 1) % o->log_every == 0 || step + 1 == o->steps,
                      elapsed / (step + 1 - start) * (o->steps - step - 1), loss, lr, norm, r->plan.total_tokens, ms,
                      r->peak_flops > 0 ? r->flops_per_step / (ms * 1e-3) / r->peak_flops : -1.0, parts,
                      n > 1 ? lo : NULL, n > 1 ? hi : NULL};
    logger_step(log, &rec);
    free(all);
    free(counts);
}

// At the end (every rank calls it; rank 0 prints): each part's mean, p50 and
// p90 over the steps after the first (the warm-up: allocation, first touch),
// tokens/s, MFU and every rank's peak memory; also as a {"summary":...} record.
static void train_summary(const TrainRun *r, Logger *log, const StepHistory *h) {
    int n = r->world->size;
    double mine = r->peak_memory_bytes ? r->peak_memory_bytes() : 0.0;
    double *mem = (double *)mallocCheck(sizeof(double) * (size_t)n);
    size_t *counts = (size_t *)mallocCheck(sizeof(size_t) * (size_t)n);
    for (int k = 0; k < n; k++) counts[k] = 1;
    CommRequest q = comm_all_gather_start(r->world, &mine, mem, counts, COMM_F64);
    comm_wait(&q);
    free(counts);
    int warm = h->n > 1 ? 1 : 0, m = h->n - warm;
    if (r->rank != 0 || m <= 0) {
        free(mem);
        return;
    }
    double *v = (double *)mallocCheck(sizeof(double) * (size_t)m), stats[STEP_PARTS + 1][3], total_ms = 0.0;
    for (int p = 0; p <= STEP_PARTS; p++) {  // (p == STEP_PARTS: the whole step)
        double sum = 0.0;
        for (int i = 0; i < m; i++) v[i] = p < STEP_PARTS ? h->parts[warm + i][p] : h->ms[warm + i], sum += v[i];
        stats[p][0] = sum / m;
        stats[p][1] = quantile(v, m, 0.5);
        stats[p][2] = quantile(v, m, 0.9);
    }
    for (int i = 0; i < m; i++) total_ms += h->ms[warm + i];
    double tok_s = (double)r->plan.total_tokens * m / (total_ms * 1e-3);
    double mfu = r->peak_flops > 0 ? r->flops_per_step * m / (total_ms * 1e-3) / r->peak_flops : -1.0;
    if (warm) printf("summary: rank 0's ms a step over steps 2-%d (step 1 is warm-up)%s\n", h->n, n > 1 ? "; the JSON "
                     "log has each step's min and max over the ranks" : "");
    else printf("summary: rank 0's ms of the one step\n");
    printf("  %-7s %10s %10s %10s %7s\n", "part", "mean", "p50", "p90", "share");
    for (int p = 0; p <= STEP_PARTS; p++)
        printf("  %-7s %10.2f %10.2f %10.2f %6.1f%%\n", p < STEP_PARTS ? step_part_names[p] : "step", stats[p][0],
               stats[p][1], stats[p][2], 100.0 * stats[p][0] / stats[STEP_PARTS][0]);
    char mfu_text[32] = "unknown";
    if (mfu >= 0) snprintf(mfu_text, sizeof(mfu_text), "%.1f%%", 100.0 * mfu);
    printf("  %.0f tokens/s (all ranks) | MFU %s | peak memory (%s), MB by rank:", tok_s, mfu_text, r->memory_kind);
    for (int k = 0; k < n; k++) printf(" %.1f", mem[k] / 1e6);
    printf("\n");
    fflush(stdout);
    if (log->json) {
        fprintf(log->json, "{\"summary\":{\"steps\":%d,\"warmup\":%d,\"time\":{", m, warm);
        for (int p = 0; p <= STEP_PARTS; p++)
            fprintf(log->json, "%s\"%s\":{\"mean\":%.3f,\"p50\":%.3f,\"p90\":%.3f}", p ? "," : "",
                    p < STEP_PARTS ? step_part_names[p] : "step", stats[p][0], stats[p][1], stats[p][2]);
        fprintf(log->json, "},\"tok_per_s\":%.1f,\"mfu\":%.5f,\"peak_memory_mb\":[", tok_s, mfu);
        for (int k = 0; k < n; k++) fprintf(log->json, "%s%.1f", k ? "," : "", mem[k] / 1e6);
        fprintf(log->json, "]}}\n");
        logger_flush_checked(log);
    }
    free(v);
    free(mem);
}

// Steps 0..steps-1 (from a checkpoint's step with --resume), with evaluation
// and sampling where the flags say (and once more after the last step), and
// checkpoints (--ckpt-dir); logs through log (rank 0 writes). Returns 0 when
// a signal stopped the run (its checkpoint committed, or it came before the
// first step), else 1.
static int train_loop(const TrainRun *r, Logger *log) {
    const TrainOptions *o = r->o;
    const TrainModel *tm = r->model;
    const int B = r->plan.B, T = r->plan.T, accum = r->plan.accum;
    int *x = (int *)mallocCheck(sizeof(int) * (size_t)B * T * (size_t)accum);  // the step's micro-batches
    int *y = (int *)mallocCheck(sizeof(int) * (size_t)B * T * (size_t)accum);
    Rng sample_rng = train_sample_rng(o);
    int kept_decay = -1;  // the resumed checkpoint's schedule length
    int start = o->resume[0] ? train_resume(r, &sample_rng, &kept_decay) : 0;
    if (r->rank == 0) train_log_run(r, log, start);
    logger_start(log, r->plan.total_tokens);
    CkptRun ckpt_run = r->ckpt;  // (its manifests record the schedule's length)
    ckpt_run.lr_decay_steps = train_lr_decay_steps(r, log, start, kept_decay);
    LrSchedule sched = train_lr_schedule(o, ckpt_run.lr_decay_steps);
    StepHistory history = {0, 0, NULL, NULL};
    int profile_first, profile_last;
    train_profile_range(o, &profile_first, &profile_last);
    CkptWriter writer, *ckpt = NULL;
    if (o->ckpt_dir[0]) {  // (the trainer claimed the directory at start-up: ckpt_dir_claim)
        ckpt = &writer;
        ckpt_writer_init(ckpt, &ckpt_run, r->world, r->train, &r->ckpt_ranges, r->ckpt_staging, tm->ckpt_wait_staged,
                         tm->ckpt_stage_in_update, tm->ctx, tm->host_threads, ckpt_log_to(log));
    }
    int finished = !(ckpt && ckpt_stop_before_first_step(ckpt, start));
    for (int step = start; finished && step <= o->steps; step++) {
        if (train_eval_now(o, step)) logger_eval(log, step, train_evaluate(r, x, y));
        if (train_sample_now(o, step)) train_print_sample(r, &sample_rng);
        if (step == o->steps) break;

        if (step + 1 == profile_first) train_profile(r, 1, step + 1, profile_last);
        train_range_push(tm, "step");
        double t0 = wall_seconds(), parts[STEP_PARTS];
        step_time_start(STEP_DATA);
        train_range_push(tm, "data");
        for (int micro = 0; micro < accum; micro++)
            dataloader_next(r->train, x + (size_t)micro * B * T, y + (size_t)micro * B * T);
        train_range_pop(tm);
        double loss = tm->train_step(tm->ctx, x, y, accum);  // the model's hooks start the gradient reductions
        loss = comm_mean(r->dp, loss / accum);
        step_time_enter(STEP_OPT);
        float norm = tm->finish_grads(tm->ctx);
        float lr = lr_at_step(&sched, step);
        AdamWConfig ac = {lr, o->beta1, o->beta2, o->eps, o->weight_decay, step + 1};
        step_time_enter(STEP_CKPT);  // (a checkpoint due after the update: the wait for the one before it)
        ckpt_before_update(ckpt, step + 1, step + 1 == o->steps);
        step_time_enter(STEP_OPT);
        tm->optimizer_step(tm->ctx, &ac, grad_clip_scale(norm, o->grad_clip), step);
        step_time_enter(STEP_CKPT);
        int stop = ckpt && ckpt_step_boundary(ckpt, step + 1, step + 1 == o->steps, r->train, &sample_rng,
                                              tm->ckpt_stage);
        step_time_stop(parts);
        double ms = (wall_seconds() - t0) * 1e3;
        train_range_pop(tm);
        step_history_add(&history, ms, parts);
        train_log_step(r, log, step, start, (float)loss, lr, norm, ms, parts);
        if (ckpt) ckpt_step_cost(ckpt, step, ms);
        if (step + 1 == profile_last) train_profile(r, 0, profile_first, step + 1);
        if (stop) {
            finished = 0;
            break;
        }
    }
    train_summary(r, log, &history);
    step_history_free(&history);
    if (ckpt) ckpt_writer_free(ckpt);
    free(x);
    free(y);
    return finished;
}

// The run: the outputs checked against every input (nothing written yet),
// then the checkpoint directory made this run's (locked, tidied) before
// anything is written or resumed, the log opened (*log; the caller closes
// it), and the loop when there is data (without it nothing is trained:
// --generate, --steps 0). Returns 0 when a signal stopped the run (exit CKPT_EXIT_SIGNAL).
static int train_run(const TrainRun *r, int model_from_file, Logger *log) {
    const TrainOptions *o = r->o;
    if (r->rank == 0) train_check_outputs(o, model_from_file, r->train, r->val);
    if (o->ckpt_dir[0]) ckpt_dir_claim(o->ckpt_dir, r->world);
    logger_open(log, o->log_json, o->tensorboard, r->rank == 0);
    return r->train ? train_loop(r, log) : 1;
}

// The final weights where --out-dir, --save-model and --save-hf say, each
// chunk gathered from the ranks holding it (read: this rank's buffer, [lo, hi)
// into dst). Every rank calls it; rank 0 writes.
static void train_save_final(const TrainRun *r, ModelFileFetch read, void *ctx) {
    if (!train_saves_model(r->o)) return;
    ParamGather pg;
    param_gather_init(&pg, r->world, &r->ckpt_ranges.write, r->map, read, ctx);
    int eot = r->tokenizer ? (int)tokenizer_eot(r->tokenizer) : r->cfg->vocab_size - 1;
    train_save_model_files(r->o, r->ckpt.pl, r->rank == 0, eot, param_gather_fetch, &pg);
    param_gather_free(&pg);
}

#endif  // LLMC_TRAIN_LOOP_H
