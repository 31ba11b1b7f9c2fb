// train_gpt.c: the CPU trainer. fp32 GPT-2 forward and backward (llmc/gpt_cpu.h),
// AdamW with global-norm clipping and a learning-rate schedule, gradient
// accumulation to a total batch in tokens, validation and sampling, llm.c model
// files in and out. It is the correctness reference for the GPU trainer
// (train_gpt.cu), which takes the same flags (llmc/train_options.h) and writes
// the same logs (llmc/logger.h). With --pp the layers are split over
// pipeline ranks (llmc/pipeline_cpu.h); with --cp the positions of every
// sequence over context ranks (llmc/context_parallel.h).
#include <sys/resource.h>

#include "llmc/comm.h"           // defines: CommGroup, comm_broadcast, comm_barrier, COMM_F64, Comm, ...
#include "llmc/dataloader.h"     // defines: DataLoader, dataloader_init, dataloader_free
#include "llmc/generate.h"       // defines: generate_check, train_generate
#include "llmc/gpt_cpu.h"        // defines: GPT, gpt_init_held, gpt_shard_params, gpt_stage_state, gpt_load_state, ...
#include "llmc/logger.h"         // defines: Logger, logger_close
#include "llmc/model_source.h"   // defines: train_build_config, train_load_weights
#include "llmc/optimizer.h"      // defines: AdamWConfig
#include "llmc/perf_control.h"   // defines: perf_control, perf_control_attached
#include "llmc/pipeline_cpu.h"   // defines: Pipeline, pipeline_init, pipeline_step, pipeline_forward, ...
#include "llmc/rank_memory.h"    // defines: RankPlace, RankMemory, cpu_rank_memory, cp_act_slots, cp_rank_shared_floats
#include "llmc/tokenizer.h"      // defines: Tokenizer, tokenizer_free
#include "llmc/train_options.h"  // defines: TrainOptions, train_options_parse
#include "llmc/train_loop.h"     // defines: TrainModel, TrainRun, train_run, train_save_final, ...
#include "llmc/train_setup.h"    // defines: train_print_schedule_and_exit, train_check_layout, train_grid, BatchPlan, ...
#include "llmc/zero_cpu.h"       // defines: Zero, zero_init, zero_memory, zero_free

static const char *SUMMARY =
    "Train a GPT-2 on the CPU (fp32, OpenMP). Data: llm.c token shards (see ./tokenize).\n"
    "Example: ./train_gpt --data-train 'data/default/*train*.bin' --model d12 --steps 100";

// TrainModel (llmc/train_loop.h) over the CPU model and its pipeline schedule
// (one stage without --pp), which drives the ZeRO layer.
typedef struct {
    GPT *model;
    Pipeline *pipeline;
    int B;  // sequences a micro-batch
} CpuTrainer;

// The model's tokens of n sequences x, y (n,T): the rank's positions under
// context parallelism (*ly NULL without targets), else x and y themselves.
static const int *cpu_positions(GPT *m, const int *x, const int *y, int n, const int **ly) {
    if (m->cp.size == 1) {
        *ly = y;
        return x;
    }
    return cp_local_tokens(&m->cp, x, y, n, ly);
}

// One step's micro-batches in the pipeline's schedule (one stage: each
// forward and backward in turn; the hooks reduce the last one's gradients at
// ZeRO-0/1, each one's at 2/3).
static float cpu_train_step(void *ctx, const int *xs, const int *ys, int accum) {
    CpuTrainer *t = (CpuTrainer *)ctx;
    const int *local_ys, *local_xs = cpu_positions(t->model, xs, ys, t->B * accum, &local_ys);
    return pipeline_step(t->pipeline, local_xs, local_ys, accum);
}
// --profile-steps: perf's recording on or off (perf_control.h).
static int cpu_profile(void *ctx, int on) {
    (void)ctx;
    perf_control(on);
    return perf_control_attached();
}

// This process's peak resident memory (bytes).
static double peak_rss_bytes(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss * 1024.0;  // (KiB)
}

static float cpu_forward(void *ctx, const int *x, const int *y, int B, int T) {
    CpuTrainer *t = (CpuTrainer *)ctx;
    const int *ly, *lx = cpu_positions(t->model, x, y, B, &ly);
    int Tl = T / t->model->cp.size;
    return pipeline_forward(t->pipeline, lx, ly, B, Tl);
}
// A token from position `row` of the last forward's logits; under context
// parallelism the rank holding it draws and sends it to its context group (the
// others make the same draw from their generators, which so stay the same).
static int cpu_sample(void *ctx, int row, const SampleParams *sp, Rng *rng) {
    CpuTrainer *t = (CpuTrainer *)ctx;
    CPContext *cp = &t->model->cp;
    int owner = cp->rank, local = row;
    if (cp->size > 1) cp_position_owner(cp, row, &owner, &local);
    double token = 0.0;
    if (owner != cp->rank) rng_uniform(rng);
    else token = pipeline_sample(t->pipeline, local, sp, rng);
    if (cp->size > 1) comm_broadcast(cp->group, &token, 1, COMM_F64, owner);
    return (int)token;
}
static float cpu_finish_grads(void *ctx) { return pipeline_finish_grads(((CpuTrainer *)ctx)->pipeline); }
static void cpu_optimizer_step(void *ctx, const AdamWConfig *ac, float grad_scale, int step) {
    (void)step;
    pipeline_optimizer_step(((CpuTrainer *)ctx)->pipeline, ac, grad_scale);
}
// [lo, hi) of this rank's buffer: weights, m and v into staging
static void cpu_ckpt_stage(void *ctx, float *staging, int64_t lo, int64_t hi, uint32_t *crcs) {
    gpt_stage_state(((CpuTrainer *)ctx)->model, staging, lo, hi, crcs);
}
// the next update also writes [lo, hi) of its results into staging
static void cpu_ckpt_stage_in_update(void *ctx, float *staging, int64_t lo, int64_t hi, uint32_t *crcs) {
    gpt_stage_in_update(((CpuTrainer *)ctx)->model, staging, lo, hi, crcs);
}
static void cpu_ckpt_load(void *ctx, float *const states[CKPT_STATES], const CkptRanges *ranges, int64_t step) {
    (void)step;
    CpuTrainer *t = (CpuTrainer *)ctx;
    int64_t holds[CKPT_STATES][2];  // (ZeRO's holds are one range each)
    for (int s = 0; s < CKPT_STATES; s++) holds[s][0] = ranges->hold[s].r[0].lo, holds[s][1] = ranges->hold[s].r[0].hi;
    gpt_load_state(t->model, states, holds);
    pipeline_sync_tied(t->pipeline);  // the last stage's copy of wte from the loaded one
}
// A ModelFileFetch over what this rank holds: [lo, hi) of its buffer into dst.
static void cpu_read_held(void *ctx, int64_t lo, int64_t hi, float *dst) {
    CpuTrainer *t = (CpuTrainer *)ctx;
    float *views[3];
    gpt_state_views(t->model, views);
    memcpy(dst, views[0] + lo, sizeof(float) * (size_t)(hi - lo));
}

int main(int argc, char **argv) {
    TrainOptions o;
    train_options_parse(argc, argv, &o, SUMMARY);
    if (o.ckpt_dir[0]) ckpt_catch_preemption();  // (first, before MPI: a signal during start-up stops the run cleanly)
    matmul_set_backend(o.matmul);
    if (strcmp(o.comm, "nccl") == 0) die_usage("--comm nccl: the CPU trainer communicates over MPI (--comm mpi)");
    int from_file;
    GPTConfig cfg = train_build_config(&o, &from_file);
    if (o.print_schedule) {
        LaunchInfo li = launch_detect();
        train_print_schedule_and_exit(&o, &cfg, li.rank, li.world, 0);
    }
    train_check_layout(&o, &cfg, launch_detect().world);
    const int pipelined = o.pp > 1;
    Comm comm;
    comm_init(&comm, &argc, &argv, train_grid(&o), o.comm_timeout);
    CommGroup *dp = comm_group(&comm, COMM_DATA);  // (each data rank reads its own sequences)
    CommGroup *replica = comm_group(&comm, COMM_REPLICA);  // data x context: ZeRO's shards, the losses' mean
    TPContext tp = o.tp > 1 ? tp_context(comm_group(&comm, COMM_TENSOR), o.sequence_parallel) : tp_none();
    const int rank = comm.rank, world = dp->size;  // data-parallel ranks; only rank 0 logs and writes files
    BatchPlan plan = train_batch_plan(&o, &cfg, world);
    const int B = plan.B, T = plan.T, Tl = T / o.cp;  // (Tl: this rank's positions of a sequence)
    PPLayout pp_layout;
    PPKind pp_kind = train_pipeline_plan(&o, &cfg, &plan, &pp_layout);  // (one stage without --pp)
    const int pipe_rank = comm_group(&comm, COMM_PIPELINE)->rank;
    // the memory this rank will hold (rank_memory.h), checked before anything is allocated
    RankPlace place = {o.zero, replica->size, replica->rank, tp.size, tp.rank, tp.sp, o.cp,
                       pipelined ? &pp_layout : NULL, pp_kind, pipe_rank, plan.accum, B, T, o.recompute_policy, NULL};
    RankMemory need = cpu_rank_memory(&cfg, &place);
    train_check_host_memory(&o, need.params + need.tied / 2, need.grads + need.tied / 2, need.optimizer,
                            need.activations);
    unsigned char *held_layers = (unsigned char *)mallocCheck((size_t)cfg.num_layers);
    // what this rank holds: its pipeline stages (one stage: everything)
    ParamHolding holding = pp_holding(&pp_layout, pipe_rank, -1, cfg.num_layers, held_layers);
    GPT model;  // its weights, gradients and AdamW state, sharded for ZeRO over the replica group
    gpt_init_held(&model, &cfg, &holding, tp, zero_sharding(o.zero, replica->rank, replica->size));
    model.recompute = o.recompute_policy;
    if (o.cp > 1)
        cp_init(&model.cp, comm_group(&comm, COMM_CONTEXT), B, T, plan.accum, cfg.num_layers, cfg.channels,
                cfg.channels / tp.size, cfg.num_heads / tp.size);
    free(held_layers);
    // this rank's part of the weights, as the whole model's initialisation or file has them
    if (from_file) train_load_weights(&o, &model.layout, model.params);
    else gpt2_init_params(&model.layout, model.params, (uint64_t)o.seed);
    gpt_shard_params(&model);
    Zero zero;  // gradient reduction and gathers of the sharded state
    zero_init(&zero, &model, replica, o.zero, o.bucket_mb);
    ParamLayout global;  // the whole model's order: checkpoints and model files
    param_layout_init(&global, &cfg);
    ParamMap map;
    param_map_init(&map, &model.layout);

    DataLoader train_loader, val_loader;
    const int have_data = o.data_train[0] != '\0';  // (without it nothing is trained: --generate, --steps 0)
    if (have_data)
        dataloader_init(&train_loader, o.data_train, B, T, dp->rank, world, o.shuffle, (uint64_t)o.seed, cfg.vocab_size,
                        4);
    int have_val = o.data_val[0] != '\0';
    if (have_val)
        dataloader_init(&val_loader, o.data_val, B, T, dp->rank, world, 0, (uint64_t)o.seed, cfg.vocab_size, 2);

    Pipeline pipeline;  // the stages' schedule, the tied wte between the ends
    pipeline_init(&pipeline, &model, &zero, &comm, pp_layout, pp_kind, B, Tl, plan.dloss, o.pp_trace);
    pipeline_sync_tied(&pipeline);
    Tokenizer tokenizer;
    int have_tokenizer = train_load_tokenizer(&o, &tokenizer, cfg.vocab_size);
    generate_check(&o, have_tokenizer ? &tokenizer : NULL, cfg.vocab_size);
    // (one stage: what was allocated, context parallel's slots as they will be)
    double cp_floats = o.cp > 1 ? cp_act_slots(&o.recompute_policy, 0, cfg.num_layers) *
                                          (double)cp_layer_floats(&model.cp) +
                                      cp_rank_shared_floats(&cfg, B, T, tp.size, o.cp)
                                : 0.0;
    double act_bytes = 4.0 * (pipelined ? pipeline_rank_activation_floats(&cfg, &pipeline.core.run.layout, pp_kind,
                                                                            pipe_rank, plan.accum, NULL, B, T, tp.size,
                                                                            tp.sp, o.cp, &o.recompute_policy)
                                        : model.acts.num_floats + cp_floats);

    // a rank's peak, measured once: rank 0 probes alone, after every rank's set-up and while the others wait
    // (asleep), so that ranks sharing the cores do not slow its probe; every rank is taken to reach it (ranks
    // that share cores reach less together: MFU then reads low, never above 100%)
    double peak_gflops = o.peak_tflops * 1e3;
    if (o.peak_tflops <= 0) {
        comm_barrier(comm_group(&comm, COMM_WORLD));
        if (comm.rank == 0) peak_gflops = matmul_measure_peak_gflops(1024, 5);
        comm_broadcast(comm_group(&comm, COMM_WORLD), &peak_gflops, 1, COMM_F64, 0);
    }
    if (!(peak_gflops > 0 && isfinite(peak_gflops))) peak_gflops = 0;  // (MFU then not given)
    double flops_per_step = gpt_flops_per_token(&cfg, T) * (double)plan.total_tokens;
    ZeroMemory zm = zero_memory(&zero);
    char act_sets[1100] = "";  // a pipeline rank's activation sets of each chunk, as its formula counts them
    if (pipelined) {
        PPRankSets sets = pp_rank_sets_count(&pipeline.core.run.layout, pp_kind, pipe_rank, plan.accum, 0);
        strcpy(act_sets, " at the schedule's peak: sets ");
        pp_sets_format(sets.sets, o.virtual_stages, act_sets + strlen(act_sets), 1024);
    }
    if (rank == 0) {
        train_print_header(&o, &cfg, global.num_params, model.layout.num_params, from_file, &plan, world,
                           have_data ? &train_loader : NULL, have_val);
        printf("ranks: %d (%s launch, MPI %s) | data parallel %d x tensor %d x pipeline %d x context %d | ZeRO-%d | "
               "bucket %.1f MB | comm timeout %.0f s\n", comm.world, comm.launcher, comm.mpi_initialized ? "on" : "off",
               comm_size(&comm, GRID_DP), comm_size(&comm, GRID_TP), comm_size(&comm, GRID_PP),
               comm_size(&comm, GRID_CP), o.zero, zero.bucket_elems * 4 / 1e6, o.comm_timeout);
        if (o.cp > 1)
            printf("context parallel: %d ranks a sequence, each %d positions (chunks i and %d-i of %d) | attention "
                   "all-gathers K and V: %.3f MB a layer\n", o.cp, Tl, 2 * o.cp - 1, 2 * o.cp,
                   4.0 * B * T * 2 * (cfg.channels / tp.size) / 1e6);
        if (pipelined)
            printf("pipeline: %d stages over %d ranks | schedule %s | %d micro-batches a step | predicted bubble %.3f "
                   "(F = B = W; --print-schedule shows it)\n", pp_layout.stages, o.pp, pp_kind_names[pp_kind],
                   plan.accum, pp_bubble_theory(pp_kind, o.pp, o.virtual_stages, plan.accum));
        printf("memory per rank (ZeRO-%d: N = %lld elements%s, shard S = %lld): params %.3f MB (4 B x %s) + grads "
               "%.3f MB (4 B x %s) + AdamW m,v %.3f MB (8 B x %s; the fp32 params are the master copy) = %.3f MB | "
               "activations %.3f MB%s (recompute %s)\n", o.zero, (long long)zero.map.num_elements,
               pipelined ? " of rank 0's stages" : "", (long long)zero.map.shard, zm.params / 1e6,
               o.zero >= 3 ? "S" : "N", zm.grads / 1e6, o.zero >= 2 ? "S" : "N", zm.optimizer / 1e6,
               o.zero >= 1 ? "S" : "N", (zm.params + zm.grads + zm.optimizer) / 1e6, act_bytes / 1e6,
               act_sets, o.recompute);
        printf("compute: %d threads, matmul %s, peak %.1f GFLOP/s%s (%s%s), %.2f GFLOP/step\n", omp_threads(),
               matmul_backend_name(), peak_gflops, comm.world > 1 ? " a rank" : "",
               o.peak_tflops > 0 ? "--peak-tflops" : matmul_peak_source(),
               o.peak_tflops <= 0 && comm.world > 1 ? ", by rank 0 alone" : "", flops_per_step * 1e-9);
        fflush(stdout);
    }

    CpuTrainer trainer = {&model, &pipeline, B};
    TrainModel tm = {&trainer, cpu_train_step, cpu_forward, cpu_sample, cpu_finish_grads, cpu_optimizer_step,
                     cpu_profile, NULL, NULL, cpu_ckpt_stage, NULL, cpu_ckpt_stage_in_update, cpu_ckpt_load,
                     omp_threads()};
    // checkpoints: each rank's ZeRO shard of its buffer (ranges of it; the manifest maps them)
    CkptRanges ranges = ckpt_ranges(&zero.map, o.zero, 3, &model.layout);
    float *ckpt_staging = o.ckpt_dir[0] ? ckpt_staging_alloc(&ranges) : NULL;  // what this rank writes of each checkpoint
    TrainRun run = {&o, &cfg, plan, &tm, have_data ? &train_loader : NULL, have_val ? &val_loader : NULL,
                    have_tokenizer ? &tokenizer : NULL, replica, comm_group(&comm, COMM_WORLD), rank,
                    flops_per_step, peak_gflops * 1e9 * comm.world, peak_rss_bytes, "host RSS",
                    ckpt_run_of(&o, &cfg, &global, &plan, &comm, "train_gpt"), ranges, &map, ckpt_staging};
    Logger log;
    int finished = train_run(&run, from_file, &log);  // 0: stopped by a signal (exit CKPT_EXIT_SIGNAL)
    if (finished && o.generate) train_generate(&run);
    free(ckpt_staging);

    if (rank == 0) matmul_print_shape_choices(stdout);
    pp_runner_report(&pipeline.core.run, rank == 0);
    cp_report(&model.cp, rank == 0);
    if (finished) train_save_final(&run, cpu_read_held, &trainer);
    logger_close(&log);
    if (have_tokenizer) tokenizer_free(&tokenizer);
    if (have_data) dataloader_free(&train_loader);
    if (have_val) dataloader_free(&val_loader);
    pipeline_free(&pipeline);
    zero_free(&zero);
    ckpt_ranges_free(&ranges);
    param_map_free(&map);
    param_layout_free(&global);
    cp_free(&model.cp);
    gpt_free(&model);
    tp_free(&tp);
    comm_finalize(&comm);
    return finished ? 0 : CKPT_EXIT_SIGNAL;
}
