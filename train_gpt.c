// train_gpt.c: the CPU trainer. fp32 GPT-2 forward and backward (llmc/gpt_cpu.h),
// AdamW with global-norm clipping and a learning-rate schedule, gradient
// accumulation to a total batch in tokens, validation and sampling, llm.c model
// files in and out. It is the correctness reference for the GPU trainer
// (train_gpt.cu), which takes the same flags (llmc/train_options.h) and writes
// the same logs (llmc/logger.h). With --pp the layers are split over
// pipeline ranks (llmc/pipeline_cpu.h).
#include <sys/resource.h>

#include "llmc/comm.h"
#include "llmc/dataloader.h"
#include "llmc/gpt_cpu.h"
#include "llmc/logger.h"
#include "llmc/modelfile.h"
#include "llmc/optimizer.h"
#include "llmc/param_gather.h"
#include "llmc/pipeline_cpu.h"
#include "llmc/tokenizer.h"
#include "llmc/train_options.h"
#include "llmc/train_loop.h"
#include "llmc/train_setup.h"
#include "llmc/zero_cpu.h"

static const char *SUMMARY =
    "Train a GPT-2 on the CPU (fp32, OpenMP). Data: llm.c token shards (see ./tokenize).\n"
    "Example: ./train_gpt --data-train 'data/default/*train*.bin' --model d12 --steps 100";

// TrainModel (llmc/train_loop.h) over the CPU model and its ZeRO layer.
typedef struct {
    GPT *model;
    Zero *zero;
} CpuTrainer;

static float cpu_forward(void *ctx, const int *x, const int *y, int B, int T, float dloss) {
    return gpt_forward(((CpuTrainer *)ctx)->model, x, y, B, T, dloss);
}
static void cpu_backward(void *ctx) { gpt_backward(((CpuTrainer *)ctx)->model); }
static const float *cpu_logits(void *ctx, int row) {
    GPT *m = ((CpuTrainer *)ctx)->model;
    return m->acts.logits + (size_t)row * m->cfg.vocab_size;
}
static void cpu_begin_step(void *ctx) { zero_begin_step(((CpuTrainer *)ctx)->zero); }
static void cpu_begin_micro(void *ctx, int micro, int accum) { zero_begin_micro(((CpuTrainer *)ctx)->zero, micro, accum); }
static float cpu_finish_grads(void *ctx) { return zero_finish_grads(((CpuTrainer *)ctx)->zero); }
static void cpu_optimizer_step(void *ctx, const AdamWConfig *ac, float grad_scale, int step) {
    (void)step;
    zero_optimizer_step(((CpuTrainer *)ctx)->zero, ac, grad_scale);
}
static void cpu_ckpt_stage(void *ctx, float *staging, int64_t lo, int64_t hi) {
    zero_ckpt_stage(((CpuTrainer *)ctx)->zero, staging, lo, hi);
}
static void cpu_ckpt_load(void *ctx, float *const states[CKPT_STATES], const CkptRanges *ranges, int64_t step) {
    (void)step;
    int64_t holds[CKPT_STATES][2];
    for (int s = 0; s < CKPT_STATES; s++) holds[s][0] = ranges->hold[s].r[0].lo, holds[s][1] = ranges->hold[s].r[0].hi;
    zero_ckpt_load(((CpuTrainer *)ctx)->zero, states, holds);
}

int main(int argc, char **argv) {
    TrainOptions o;
    train_options_parse(argc, argv, &o, SUMMARY);
    matmul_set_backend(o.matmul);
    if (strcmp(o.comm, "nccl") == 0) die_usage("--comm nccl: the CPU trainer communicates over MPI (--comm mpi)");
    int from_file;
    GPTConfig cfg = train_build_config(&o, &from_file);
    if (o.print_schedule) {
        LaunchInfo li = launch_detect();
        train_print_schedule_and_exit(&o, &cfg, li.rank, li.world);
    }
    const int pipelined = o.pp > 1;
    if (pipelined && o.zero > 1) die_usage("--pp %d with --zero %d: pipeline parallel runs at ZeRO-0 and 1 for now", o.pp, o.zero);
    Comm comm;
    comm_init(&comm, &argc, &argv, 1, o.pp, o.comm_timeout);
    CommGroup *dp = comm_group(&comm, COMM_DATA);
    const int rank = comm.rank, world = dp->size;  // data-parallel ranks; only rank 0 logs and writes files
    BatchPlan plan = train_batch_plan(&o, &cfg, world);
    const int B = plan.B, T = plan.T;
    PPLayout pp_layout;
    PPKind pp_kind = pipelined ? train_pipeline_plan(&o, &cfg, &plan, &pp_layout) : PP_1F1B;

    {  // the memory this rank will hold (zero_shard.h's formula), checked before anything is allocated
        ParamLayout pl;
        param_layout_init(&pl, &cfg);
        ShardMap sm;
        shard_map_init(&sm, pl.num_elements, dp->rank, world);
        ZeroMemory need = zero_memory(o.zero, &sm, 4, 4, 8);
        double acts = 4.0 * gpt_activation_floats(&cfg, B, T);
        if (pipelined) {  // this rank's stages (pipeline_cpu.h)
            PPRange held[PP_MAX_RANK_RANGES];
            int pipe_rank = comm_group(&comm, COMM_PIPELINE)->rank, n = pp_rank_ranges(&pl, &pp_layout, pipe_rank, held);
            double h = 0;
            for (int k = 0; k < n; k++) h += (double)(held[k].hi - held[k].lo);
            need.params = need.grads = 4.0 * h;
            need.optimizer = 8.0 * h / (o.zero ? world : 1);
            acts = 4.0 * pipeline_rank_activation_floats(&cfg, &pp_layout, pp_kind, pipe_rank, plan.accum, B, T);
        }
        param_layout_free(&pl);
        train_check_host_memory(need.params, need.grads, need.optimizer, acts);
    }
    GPT model;
    gpt_init(&model, &cfg);
    if (from_file) modelfile_load(o.model, &model.layout, model.params);
    else if (!pipelined) gpt2_init_params(&model.layout, model.params, (uint64_t)o.seed);
    else {  // only this rank's stages' tensors, as the whole model's initialisation draws them
        PPRange held[PP_MAX_RANK_RANGES];
        int64_t lo[PP_MAX_RANK_RANGES], hi[PP_MAX_RANK_RANGES];
        int n = pp_rank_ranges(&model.layout, &pp_layout, comm_group(&comm, COMM_PIPELINE)->rank, held);
        for (int k = 0; k < n; k++) lo[k] = held[k].lo, hi[k] = held[k].hi;
        gpt2_init_params_in(&model.layout, model.params, (uint64_t)o.seed, lo, hi, n);
    }

    DataLoader train_loader, val_loader;
    dataloader_init(&train_loader, o.data_train, B, T, dp->rank, world, o.shuffle, (uint64_t)o.seed, cfg.vocab_size,
                    4);
    int have_val = o.data_val[0] != '\0';
    if (have_val)
        dataloader_init(&val_loader, o.data_val, B, T, dp->rank, world, 0, (uint64_t)o.seed, cfg.vocab_size, 2);

    Zero zero;  // gradient reduction, sharded AdamW state (and gradients, weights)
    Pipeline pipeline;  // or the stages of a pipeline and their AdamW state
    if (pipelined) pipeline_init(&pipeline, &model, &comm, pp_layout, pp_kind, o.zero, B, T, plan.dloss, o.pp_trace);
    else zero_init(&zero, &model, &comm, o.zero, o.bucket_mb);
    Tokenizer tokenizer;
    int have_tokenizer = train_load_tokenizer(&o, &tokenizer, cfg.vocab_size);
    if (!pipelined) gpt_alloc_activations(&model, B, T);
    double act_bytes = 4.0 * (pipelined ? pipeline_activation_floats(&pipeline, plan.accum) : model.acts.num_floats);

    double peak_gflops = o.peak_tflops > 0 ? o.peak_tflops * 1e3 : matmul_measure_peak_gflops(1024, 10);
    double flops_per_step = gpt_flops_per_token(&cfg, T) * (double)plan.total_tokens;
    ZeroMemory zm = {0, 0, 0};
    if (pipelined) {  // what this rank's stages hold (pipeline_cpu.h)
        zm.params = zm.grads = 4.0 * (double)pipeline_held_elements(&pipeline);
        for (int k = 0; k < pipeline.nheld; k++) zm.optimizer += 8.0 * (pipeline.shards[k].end - pipeline.shards[k].begin);
    } else {
        zm = zero_cpu_memory(&zero);
    }
    if (rank == 0) {
        train_print_header(&o, &cfg, model.layout.num_params, from_file, &plan, world, &train_loader, have_val);
        printf("ranks: %d (%s launch, MPI %s) | data parallel %d x tensor %d x pipeline %d | ZeRO-%d | bucket %.1f MB | "
               "comm timeout %.0f s\n", comm.world, comm.launcher, comm.mpi_initialized ? "on" : "off", comm.dp, comm.tp,
               comm.pp, o.zero, pipelined ? 0.0 : zero.bucket_elems * 4 / 1e6, o.comm_timeout);
        if (pipelined)
            printf("pipeline: %d stages over %d ranks | schedule %s | %d micro-batches a step | predicted bubble %.3f "
                   "(F = B = W; --print-schedule shows it)\n", pp_layout.stages, o.pp, pp_kind_names[pp_kind],
                   plan.accum, pp_bubble_theory(pp_kind, o.pp, o.virtual_stages, plan.accum));
        if (pipelined)
            printf("memory of rank 0 (its stages hold H = %lld of N = %lld elements, ZeRO-%d over %d data ranks): "
                   "params %.3f MB + grads %.3f MB (4 B x H each) + AdamW m,v %.3f MB (8 B x H%s) = %.3f MB | "
                   "activations %.1f MB at the schedule's peak\n",
                   (long long)pipeline_held_elements(&pipeline), (long long)model.layout.num_elements, o.zero,
                   world, zm.params / 1e6, zm.grads / 1e6, zm.optimizer / 1e6, o.zero ? " / data ranks" : "",
                   (zm.params + zm.grads + zm.optimizer) / 1e6, act_bytes / 1e6);
        else
            printf("memory per rank (ZeRO-%d: N = %lld elements, shard S = %lld): params %.3f MB (4 B x %s) + grads "
                   "%.3f MB (4 B x %s) + AdamW m,v %.3f MB (8 B x %s; the fp32 params are the master copy) = %.3f MB | "
                   "activations %.1f MB\n", o.zero, (long long)zero.map.num_elements, (long long)zero.map.shard,
                   zm.params / 1e6, o.zero >= 3 ? "S" : "N", zm.grads / 1e6, o.zero >= 2 ? "S" : "N",
                   zm.optimizer / 1e6, o.zero >= 1 ? "S" : "N", (zm.params + zm.grads + zm.optimizer) / 1e6,
                   act_bytes / 1e6);
        printf("compute: %d threads, matmul %s, peak %.1f GFLOP/s (%s), %.2f GFLOP/step\n", omp_threads(),
               matmul_backend_name(), peak_gflops, o.peak_tflops > 0 ? "--peak-tflops" : MATMUL_PEAK_SOURCE,
               flops_per_step * 1e-9);
        fflush(stdout);
    }

    CpuTrainer trainer = {&model, &zero};
    TrainModel tm = {&trainer, cpu_forward, cpu_backward, cpu_logits, cpu_begin_step, cpu_begin_micro,
                     cpu_finish_grads, cpu_optimizer_step, NULL, NULL, cpu_ckpt_stage, NULL, cpu_ckpt_load, NULL};
    if (pipelined)
        tm = (TrainModel){&pipeline, pipeline_forward, pipeline_nothing, pipeline_logits, pipeline_nothing,
                          pipeline_nothing_micro, pipeline_finish_grads, pipeline_optimizer_step, NULL, NULL,
                          pipeline_ckpt_stage, NULL, pipeline_ckpt_load, pipeline_step};
    CkptRanges ranges = pipelined ? pipeline_ckpt_ranges(&pipeline) : ckpt_ranges(&zero.map, o.zero, 3);
    float *ckpt_staging = NULL;  // what this rank writes of each checkpoint
    if (o.ckpt_dir[0])
        ckpt_staging = (float *)alignedMallocCheck(sizeof(float) * CKPT_STATES *
                                                   (size_t)(ckpt_pieces_elems(&ranges.write) + 1));
    TrainRun run = {&o, &cfg, plan, &tm, &train_loader, have_val ? &val_loader : NULL,
                    have_tokenizer ? &tokenizer : NULL, dp, pipelined ? comm_group(&comm, COMM_WORLD) : dp, rank,
                    flops_per_step, peak_gflops * 1e9,
                    {&o, &cfg, &model.layout, &plan, &comm, "train_gpt"}, ranges, ckpt_staging};
    if (rank == 0) train_check_outputs(&o, from_file, &train_loader, have_val ? &val_loader : NULL);
    Logger log;
    logger_open(&log, o.log_json, rank == 0);
    int finished = train_loop(&run, &log);  // 0: preempted, its checkpoint committed
    free(ckpt_staging);

    if (pipelined) pipeline_report(&pipeline, rank == 0);
    if (finished && (o.out_dir[0] || o.save_model[0]) && pipelined) pipeline_gather_params(&pipeline);
    if (finished && (o.out_dir[0] || o.save_model[0]) && (!pipelined || pipeline.rank == 0)) {
        // every rank of rank 0's data group takes part; rank 0 writes
        ParamGather pg;
        float *views[3] = {model.params, NULL, NULL};
        if (!pipelined) zero_state_views(&zero, views);
        param_gather_init(&pg, dp, model.layout.num_elements, o.zero >= 3, modelfile_fetch_local, views[0]);
        train_save_model_files(&o, &model.layout, rank == 0, param_gather_fetch, &pg);
        param_gather_free(&pg);
    }
    if (rank == 0) {
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        printf("peak memory of rank 0: %.1f MB (RSS)\n", ru.ru_maxrss / 1e3);
    }
    logger_close(&log);
    if (have_tokenizer) tokenizer_free(&tokenizer);
    dataloader_free(&train_loader);
    if (have_val) dataloader_free(&val_loader);
    if (pipelined) pipeline_free(&pipeline);
    else zero_free(&zero);
    gpt_free(&model);
    comm_finalize(&comm);
    return 0;
}
