// train_setup.h: trainer set-up shared by train_gpt.c and train_gpt.cu: the
// batch plan (micro-batch, accumulation, loss scale), the layout checks, the
// learning-rate schedule, when to evaluate, sample and log, the step record,
// and the final model files. (The model's shape and weights from --model:
// model_source.h.)
#ifndef LLMC_TRAIN_SETUP_H
#define LLMC_TRAIN_SETUP_H

#include <limits.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "comm.h"           // defines: CommGrid, grid_model_parallel, GRID_TP, GRID_PP, ...
#include "file_io.h"        // defines: make_dirs
#include "hf_gpt2.h"        // defines: hf_save_streamed
#include "model.h"          // defines: GPTConfig, param_tp_problem, ParamLayout
#include "modelfile.h"      // defines: ModelFileFetch, modelfile_save_streamed
#include "pp_layout.h"      // defines: PPLayout, pp_layout_init, pp_layout_free, pp_stage_params
#include "pp_schedule.h"    // defines: pp_kind_from_name, pp_schedule_unusable, pp_kind_names, PPSchedule, ...
#include "rand.h"           // defines: rng_seed
#include "schedule.h"       // defines: LrSchedule, lr_schedule_kind
#include "train_options.h"  // defines: TrainOptions, train_flags_checked

// How a step is made of micro-steps: B x T tokens per rank per micro-step,
// accum micro-steps, total_tokens over all ranks; dloss is d(objective)/d(loss
// at one position) for the mean over the whole step.
typedef struct {
    int B, T, accum;
    long long total_tokens;
    float dloss;
} BatchPlan;

// The most accumulation micro-steps a step may take. Far above any real plan
// (GPT-3's 3.2M-token batch at B x T = 1024 tokens on one rank is 3125), low
// enough that a mistyped --total-batch-tokens is refused at once, not taken as
// hours of micro-steps a step and a step's tokens that do not fit in memory.
#define TRAIN_MAX_ACCUM 65536

// Validates the batch flags against the model and the number of data ranks.
static BatchPlan train_batch_plan(const TrainOptions *o, const GPTConfig *cfg, int world) {
    BatchPlan p;
    p.B = o->data_train[0] ? o->batch_size : 1;  // (a run without data only generates: one sequence)
    p.T = o->seq_len;
    if (p.T > cfg->max_seq_len) die_usage("--seq-len %d exceeds the model's max-seq-len %d", p.T, cfg->max_seq_len);
    // the kernels index a micro-batch's B x T positions with an int
    if ((long long)p.B * p.T > INT_MAX)
        die_usage("--batch-size %d x --seq-len %d = %lld positions per micro-batch: more than %d", p.B, p.T,
                  (long long)p.B * p.T, INT_MAX);
    long long micro_tokens = checked_mul_i64((int64_t)p.B * p.T, world, "batch-size x seq-len x ranks");
    p.total_tokens = o->total_batch_tokens ? o->total_batch_tokens : micro_tokens;
    if (p.total_tokens % micro_tokens != 0)
        die_usage("--total-batch-tokens %lld is not a multiple of batch-size x seq-len x ranks = %lld", p.total_tokens,
                  micro_tokens);
    long long accum = p.total_tokens / micro_tokens;
    if (accum > TRAIN_MAX_ACCUM)
        die_usage("--total-batch-tokens %lld needs %lld accumulation micro-steps of %lld tokens (batch-size x seq-len "
                  "x ranks): more than the limit of %d; raise --batch-size or lower --total-batch-tokens",
                  p.total_tokens, accum, micro_tokens, TRAIN_MAX_ACCUM);
    p.accum = (int)accum;
    p.dloss = (float)(1.0 / (double)p.total_tokens);
    if (o->eval_every > 0 && o->data_val[0] == '\0') die_usage("--eval-every needs --data-val");
    return p;
}

// The pipeline's stages (*layout) and schedule from --pp, --pp-layers,
// --pp-schedule and --virtual-stages, checked against the model and the batch
// plan (its accumulation steps are the micro-batches): one line, exit 2, when
// they do not fit.
static PPKind train_pipeline_plan(const TrainOptions *o, const GPTConfig *cfg, const BatchPlan *plan,
                                  PPLayout *layout) {
    char err[512];
    if (pp_layout_init(layout, cfg->num_layers, o->pp, o->virtual_stages, o->pp_layers, err, sizeof(err)))
        die_usage("%s", err);
    PPKind kind = (PPKind)pp_kind_from_name(o->pp_schedule);
    const char *why = pp_schedule_unusable(kind, o->pp, o->virtual_stages, plan->accum);
    if (why)
        die_usage("--pp-schedule %s with --pp %d, --virtual-stages %d and %d micro-batches a step (the accumulation "
                  "steps): %s", o->pp_schedule, o->pp, o->virtual_stages, plan->accum, why);
    return kind;
}

// --tp and --sequence-parallel against the model and the batch: every split
// tensor divides (model.h's param_tp_problem), and under sequence parallel the
// positions split evenly. One line, exit 2, when they do not.
static void train_tensor_plan(const TrainOptions *o, const GPTConfig *cfg) {
    if (o->tp == 1) return;
    const char *why = param_tp_problem(cfg, o->tp);
    if (why)
        die_usage("--tp %d: %s (n-head %d, n-embd %d, padded vocabulary %d)", o->tp, why, cfg->num_heads,
                  cfg->channels, cfg->padded_vocab_size);
    if (o->sequence_parallel && o->seq_len % o->tp != 0)
        die_usage("--sequence-parallel: --seq-len %d is not a multiple of --tp %d (each rank holds T/tp positions of "
                  "every sequence)", o->seq_len, o->tp);
}

// --cp against the batch: the sequence cuts into 2 x cp equal chunks
// (context_parallel.h), each tensor rank's share of them under sequence
// parallel. One line, exit 2, when not.
static void train_context_plan(const TrainOptions *o) {
    if (o->cp == 1) return;
    if (o->seq_len % (2 * o->cp) != 0)
        die_usage("--cp %d: --seq-len %d is not a multiple of 2 x cp = %d (each rank holds chunks i and 2cp-1-i of "
                  "2 x cp equal chunks of every sequence)", o->cp, o->seq_len, 2 * o->cp);
    if (o->sequence_parallel && o->seq_len / o->cp % o->tp != 0)
        die_usage("--sequence-parallel: --seq-len %d / --cp %d is not a multiple of --tp %d (each tensor rank holds "
                  "1/tp of a context rank's positions)", o->seq_len, o->cp, o->tp);
}

// The rank grid the flags ask for (comm.h): --pp x --cp x --tp model-parallel
// ranks, data parallel over the rest.
static CommGrid train_grid(const TrainOptions *o) {
    CommGrid g = grid_model_parallel(GRID_TP, o->tp);
    g.size[GRID_PP] = o->pp;
    g.size[GRID_CP] = o->cp;
    return g;
}

// Before any rank connects: the checks every rank makes alike from the flags,
// the model shape and the launcher's world (so rank 0 alone reports a failure:
// train_options.h): the tensor split, the ranks split into data x --tp x --pp,
// the batch plan and the pipeline's stages; then usage errors are each rank's again.
static void train_check_layout(const TrainOptions *o, const GPTConfig *cfg, int launcher_world) {
    train_tensor_plan(o, cfg);
    train_context_plan(o);
    int group = o->tp * o->pp * o->cp;
    if (launcher_world == 1 && group > 1)
        die_usage("--tp %d x --pp %d x --cp %d needs %d processes (or a multiple of %d) and this is one: launch it "
                  "with mpirun -np %d (or srun -n %d)", o->tp, o->pp, o->cp, group, group, group, group);
    CommGrid grid = train_grid(o);
    char err[200];
    if (grid_split(&grid, launcher_world, err, sizeof(err))) die_usage("%s", err);
    BatchPlan plan = train_batch_plan(o, cfg, grid.size[GRID_DP]);
    if (o->pp > 1) {
        PPLayout layout;
        train_pipeline_plan(o, cfg, &plan, &layout);
        pp_layout_free(&layout);
    }
    train_flags_checked();
}

// --print-schedule: each stage's layers and parameters, then the schedule as
// a timeline with its bubble, and each rank's list of actions (fused: the
// lists with their receives fused, which the GPU trainer runs over NCCL).
static void train_print_pipeline(const PPLayout *layout, PPKind kind, int micro_batches, const GPTConfig *cfg,
                                 int fused) {
    printf("pipeline: %d ranks x %d chunk%s = %d stages | schedule %s | %d micro-batches a step\n", layout->pp,
           layout->v, layout->v > 1 ? "s" : "", layout->stages, pp_kind_names[kind], micro_batches);
    for (int g = 0; g < layout->stages; g++)
        printf("  stage %d (rank %d, chunk %d): layers %d-%d | %.3fM parameters%s%s\n", g, g % layout->pp,
               g / layout->pp, layout->first_layer[g], layout->first_layer[g + 1] - 1,
               pp_stage_params(cfg, layout, g) / 1e6, g == 0 ? " | embeddings" : "",
               g == layout->stages - 1 ? " | ln_f, classifier (a copy of wte, tied)" : "");
    PPSchedule s;
    pp_schedule_build(&s, kind, layout->pp, layout->v, micro_batches);
    if (fused) {
        pp_schedule_fuse_receives(&s);
        printf("  (receives fused with the sends before their consumer: NCCL pairs point-to-point messages by order)\n");
    }
    pp_print_schedule(stdout, &s);
    pp_schedule_free(&s);
}

// A backend that pairs point-to-point messages by order (NCCL) runs the fused
// lists; a schedule whose fused lists deadlock (the simulator says so) is
// refused in one line.
static void train_check_fused_lists(const TrainOptions *o, PPKind kind, int micro_batches) {
    char err[256];
    if (pp_fused_lists_deadlock(kind, o->pp, o->virtual_stages, micro_batches, err, sizeof(err)))
        die_usage("--pp-schedule %s over NCCL: with its receives fused (NCCL pairs messages by order) the lists "
                  "deadlock (%s); use --comm mpi or another schedule", o->pp_schedule, err);
}

// --print-schedule (before any rank connects): the data ranks are the
// launcher's ranks over --tp x --pp (one, from a lone process); rank 0 prints, every
// rank exits 0.
static void train_print_schedule_and_exit(const TrainOptions *o, const GPTConfig *cfg, int launcher_rank,
                                          int launcher_world, int fused) {
    CommGrid grid = train_grid(o);
    char err[200];
    if (launcher_world > 1 && grid_split(&grid, launcher_world, err, sizeof(err))) die_usage("%s", err);
    BatchPlan plan = train_batch_plan(o, cfg, launcher_world > 1 ? grid.size[GRID_DP] : 1);
    PPLayout layout;
    PPKind kind = train_pipeline_plan(o, cfg, &plan, &layout);
    if (launcher_rank == 0) train_print_pipeline(&layout, kind, plan.accum, cfg, fused);
    pp_layout_free(&layout);
    exit(0);
}

// Bytes this process can still allocate: the kernel's MemAvailable estimate
// (/proc/meminfo), capped by the address-space and data limits (ulimit -v, -d).
// 0 when none of them is known.
static double host_memory_available(void) {
    double avail = 0.0;
    FILE *f = fopen("/proc/meminfo", "r");
    if (f) {
        char line[256];
        long long kb;
        while (fgets(line, sizeof(line), f))
            if (sscanf(line, "MemAvailable: %lld kB", &kb) == 1) avail = (double)kb * 1024.0;
        fclose(f);
    }
    int limits[] = {RLIMIT_AS, RLIMIT_DATA};
    for (size_t i = 0; i < sizeof(limits) / sizeof(limits[0]); i++) {
        struct rlimit rl;
        if (getrlimit(limits[i], &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && (avail == 0 || (double)rl.rlim_cur < avail))
            avail = (double)rl.rlim_cur;
    }
    return avail;
}

// Before anything big is allocated: a run whose rank needs more host memory than
// it may take (what is available, or --mem-limit-mb where that is less) stops with
// one line giving both figures and the parts (exit 2).
static void train_check_host_memory(const TrainOptions *o, double params, double grads, double optimizer,
                                    double activations) {
    double need = params + grads + optimizer + activations, s;
    const char *unit = mem_unit(need, &s);
    MemBudget have = mem_budget(host_memory_available(), "available", o->mem_limit_mb, need);
    if (have.bytes > 0 && need > have.bytes)
        die_usage("the run needs %.2f %s of memory per rank (params %.2f, grads %.2f, AdamW state %.2f, activations "
                  "%.2f %s) but %s; try a smaller model, --batch-size or --seq-len, a higher --zero stage over more "
                  "ranks, more --pp stages, or --cp ranks for a long --seq-len", need / s, unit, params / s, grads / s, optimizer / s, activations / s,
                  unit, have.text);
}

// The sampling RNG: its own stream from --seed, the same in both trainers.
static Rng train_sample_rng(const TrainOptions *o) {
    Rng r;
    rng_seed(&r, (uint64_t)o->seed ^ 0x5a5a5a5aULL);
    return r;
}

// The schedule over decay_steps steps (--lr-decay-steps, --steps, or a resumed checkpoint's).
static LrSchedule train_lr_schedule(const TrainOptions *o, int decay_steps) {
    LrSchedule s = {lr_schedule_kind(o->lr_schedule), o->lr, o->min_lr_frac, o->decay_frac, o->warmup_steps, decay_steps};
    return s;
}

// The loop runs steps 0..steps; at step == steps only evaluation and sampling happen.
static inline int train_eval_now(const TrainOptions *o, int step) {
    return o->data_val[0] && o->eval_every > 0 && (step % o->eval_every == 0 || step == o->steps);
}
static inline int train_sample_now(const TrainOptions *o, int step) {
    return o->sample_every > 0 && (step % o->sample_every == 0 || step == o->steps);
}

// The directory of GPT-2 BPE files the run uses ("": none): --tokenizer when it
// is a directory, else a Hugging Face --model directory holding vocab.json + merges.txt.
static const char *train_tokenizer_dir(const TrainOptions *o) {
    struct stat st;
    if (o->tokenizer[0]) return stat(o->tokenizer, &st) == 0 && S_ISDIR(st.st_mode) ? o->tokenizer : "";
    char path[PATH_MAX];
    const char *files[2] = {"vocab.json", "merges.txt"};
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof(path), "%.*s/%s", PATH_MAX - 16, o->model, files[i]);
        if (access(path, R_OK) != 0) return "";
    }
    return o->model;
}

// Whether the run writes model files at its end.
static inline int train_saves_model(const TrainOptions *o) { return o->out_dir[0] || o->save_model[0] || o->save_hf[0]; }

// Writes the final weights where --out-dir, --save-model and --save-hf say,
// fetching them (modelfile.h's modelfile_save_streamed, hf_gpt2.h's
// hf_save_streamed; param_gather.h's fetch brings each chunk from the ranks
// that hold it). Every rank that serves fetches calls it; writer: this rank
// writes the files (rank 0). eot: the tokenizer's end-of-text id (the last id without one).
static void train_save_model_files(const TrainOptions *o, const ParamLayout *pl, int writer, int eot,
                                   ModelFileFetch fetch, void *ctx) {
    char path[FILENAME_MAX];
    if (o->out_dir[0]) {
        if (writer) make_dirs(o->out_dir, "--out-dir");
        snprintf(path, sizeof(path), "%s/model_final.bin", o->out_dir);
        modelfile_save_streamed(writer ? path : NULL, pl, fetch, ctx);
        if (writer) printf("saved %s\n", path);
    }
    if (o->save_model[0]) {
        modelfile_save_streamed(writer ? o->save_model : NULL, pl, fetch, ctx);
        if (writer) printf("saved %s\n", o->save_model);
    }
    if (o->save_hf[0]) {
        const char *tok = train_tokenizer_dir(o);
        hf_save_streamed(writer ? o->save_hf : NULL, pl, strcmp(o->save_dtype, "bf16") == 0 ? ST_BF16 : ST_F32, eot,
                         tok, fetch, ctx);
        if (writer) printf("saved %s (Hugging Face GPT-2, %s%s)\n", o->save_hf, o->save_dtype,
                           tok[0] ? ", with the tokenizer's files" : "; no GPT-2 tokenizer directory: no tokenizer files");
    }
}

#endif  // LLMC_TRAIN_SETUP_H
