// train_gpt.cu: the GPU trainer (train_gptcu). The same flags
// (llmc/train_options.h), data, logs (llmc/logger.h) and llm.c model files as
// the CPU trainer train_gpt.c, whose loop it mirrors step for step, on NVIDIA
// GPUs: floatX weights and activations, fp32 master weights, gradients and AdamW
// state (llmc/gpt_gpu.cuh). GPU-only flag: --attention flash|cudnn (--recompute:
// gpt_gpu.cuh says what each policy keeps). Data parallel like train_gpt.c (one process per GPU,
// started by mpirun or srun; alone it is a single process without MPI), with
// ZeRO 0-3 (llmc/zero_gpu.cuh) over NCCL (--comm nccl, or auto when built
// with it) or MPI staged through host memory (--comm mpi, also for several
// ranks on one GPU). Tensor parallel (--tp) and context parallel (--cp,
// llmc/context_parallel.cuh: the positions of every sequence over the context
// ranks, K and V all-gathered for attention) over the same device groups.
#include <math.h>

#include "llmc/comm.h"  // defines: CommGroup, Comm, comm_init, comm_group, ...
#ifdef LLMC_NCCL
#include "llmc/comm_nccl.cuh"  // defines: comm_nccl_init, COMM_NCCL, comm_nccl_set_compute_stream, comm_nccl_free
#endif
#include "llmc/comm_staged.cuh"    // defines: comm_staged_init, comm_pick_device, comm_staged_free
#include "llmc/dataloader.h"       // defines: DataLoader, dataloader_init, dataloader_free
#include "llmc/generate.h"         // defines: generate_check, train_generate
#include "llmc/device_check.cuh"   // defines: device_check_ranks, DeviceCode, device_check_code
#include "llmc/gpt_gpu.cuh"        // defines: GPTGPU, gpu_gpt_init, gpu_gpt_update, gpu_gpt_load_state, ...
#include "llmc/logger.h"           // defines: Logger, logger_close
#include "llmc/model_init.h"       // defines: gpt2_init_params
#include "llmc/model_source.h"     // defines: train_build_config, train_load_weights
#include "llmc/optimizer.h"        // defines: AdamWConfig
#include "llmc/pipeline_gpu.cuh"   // defines: PipelineGPU, pipeline_gpu_step, pipeline_gpu_forward, pipeline_gpu_sample, ...
#include "llmc/step_time_gpu.cuh"  // defines: StepEventClock, step_event_clock_init, step_event_clock_free
#include "llmc/tokenizer.h"        // defines: Tokenizer, tokenizer_free
#include "llmc/train_options.h"    // defines: TrainOptions, train_options_parse
#include "llmc/train_loop.h"       // defines: TrainModel, TrainRun, train_run, train_save_final, ...
#include "llmc/train_setup.h"      // defines: train_print_schedule_and_exit, train_check_layout, train_grid, BatchPlan, ...
#include "llmc/zero_gpu.cuh"       // defines: Zero, zero_init, zero_gather_params, zero_memory, ...

static const char *SUMMARY =
    "Train a GPT-2 on NVIDIA GPUs, data parallel under mpirun or srun (" FLOATX_NAME ", cuBLASLt, flash or cuDNN attention). Data: llm.c token shards.\n"
    "Example: ./train_gptcu --data-train 'data/default/*train*.bin' --model d12 --batch-size 16 --seq-len 1024";

// TrainModel (llmc/train_loop.h) over the GPU model, its ZeRO layer and its
// pipeline schedule (one stage without --pp).
typedef struct {
    GPTGPU *model;
    Zero *zero;
    PipelineGPU *pipeline;  // the stages' runtime (one stage without --pp)
    CPGPU *cp;              // the context group (--cp), else NULL
    uint64_t seed;  // --seed, for the stochastic rounding of each step's floatX weights
    TPContext host_tp;  // the tensor group on host buffers (sampling's scalars)
    float *logits;      // (V) host copy of one row of logits (the rank's vocabulary slice), for sampling
    // checkpoints: the staging copy runs on its own stream after `ready`; the
    // next update waits (on the device) for `copied`
    cudaStream_t ckpt_stream;
    cudaEvent_t ckpt_ready, ckpt_copied;
    int ckpt_copy_pending;
} GpuTrainer;

// The stochastic rounding seed of step `step` (0-based).
static uint64_t gpu_step_seed(const GpuTrainer *t, int64_t step) { return t->seed * 0x9e3779b97f4a7c15ull + (uint64_t)step; }

// One step's micro-batches in the pipeline's schedule: uploaded at once, each
// forward and backward queued in turn on one stage (the hooks reduce the last
// one's gradients at ZeRO-0/1, each one's at 2/3), the losses read back once.
static float gpu_train_step(void *ctx, const int *xs, const int *ys, int accum) {
    GpuTrainer *t = (GpuTrainer *)ctx;
    if (t->cp) xs = cp_local_tokens(&t->cp->pos, xs, ys, t->model->B * accum, &ys);  // (the rank's positions)
    return pipeline_gpu_step(t->pipeline, xs, ys, accum);
}
static float gpu_forward(void *ctx, const int *x, const int *y, int B, int T) {
    GpuTrainer *t = (GpuTrainer *)ctx;
    if (t->cp) x = cp_local_tokens(&t->cp->pos, x, y, B, &y), T /= t->cp->pos.size;  // (the rank's positions)
    return pipeline_gpu_forward(t->pipeline, x, y, B, T);
}
// A token from position `row` of the last forward's logits; under context
// parallelism the rank holding it draws and sends it to its context group (the
// others make the same draw from their generators, which so stay the same), as train_gpt.c.
static int gpu_sample(void *ctx, int row, const SampleParams *sp, Rng *rng) {
    GpuTrainer *t = (GpuTrainer *)ctx;
    if (!t->cp) return pipeline_gpu_sample(t->pipeline, &t->host_tp, row, sp, rng, t->logits);
    CPContext *cp = &t->cp->pos;
    int owner, local;
    cp_position_owner(cp, row, &owner, &local);
    double token = 0.0;
    if (owner != cp->rank) rng_uniform(rng);
    else token = pipeline_gpu_sample(t->pipeline, &t->host_tp, local, sp, rng, t->logits);
    comm_broadcast(cp->group, &token, 1, COMM_F64, owner);
    return (int)token;
}
// --profile-steps: the profiler's capture range (nsys --capture-range=cudaProfilerApi, ncu --profile-from-start
// off), after the queued work so the range holds exactly the steps.
static int gpu_profile(void *ctx, int on) {
    CUDA_CHECK(cudaStreamSynchronize(((GpuTrainer *)ctx)->model->stream));
    CUDA_CHECK(on ? cudaProfilerStart() : cudaProfilerStop());
    return 1;
}
static float gpu_finish_grads(void *ctx) { return pipeline_gpu_finish_grads(((GpuTrainer *)ctx)->pipeline); }
static void gpu_optimizer_step(void *ctx, const AdamWConfig *ac, float grad_scale, int step) {
    GpuTrainer *t = (GpuTrainer *)ctx;
    if (t->ckpt_copy_pending) {  // the update rewrites what a checkpoint's copy reads
        StepPart left = step_time_enter(STEP_CKPT);
        CUDA_CHECK(cudaStreamWaitEvent(t->model->stream, t->ckpt_copied, 0));
        step_time_enter(left);
        t->ckpt_copy_pending = 0;
    }
    gpu_gpt_update(t->model, ac, grad_scale, gpu_step_seed(t, step));
    zero_gather_params(t->zero);
    pipeline_gpu_sync_tied(t->pipeline);
    CUDA_CHECK(cudaStreamSynchronize(t->model->stream));
}
// [lo, hi) of this rank's buffer (inside its shard)
static void gpu_ckpt_stage(void *ctx, float *staging, int64_t lo, int64_t hi, uint32_t *crcs) {
    (void)crcs;  // (NULL: the copy is queued; the writer takes the CRC32C)
    GpuTrainer *t = (GpuTrainer *)ctx;
    CUDA_CHECK(cudaEventRecord(t->ckpt_ready, t->model->stream));
    CUDA_CHECK(cudaStreamWaitEvent(t->ckpt_stream, t->ckpt_ready, 0));
    gpu_gpt_stage_state(t->model, staging, lo, hi, t->ckpt_stream);
    CUDA_CHECK(cudaEventRecord(t->ckpt_copied, t->ckpt_stream));
    t->ckpt_copy_pending = 1;
}
static void gpu_ckpt_wait_staged(void *ctx) { CUDA_CHECK(cudaEventSynchronize(((GpuTrainer *)ctx)->ckpt_copied)); }
static void gpu_ckpt_load(void *ctx, float *const states[CKPT_STATES], const CkptRanges *ranges, int64_t step) {
    (void)ranges;  // the model's shard: [shard.begin, shard.end) of every state
    GpuTrainer *t = (GpuTrainer *)ctx;
    gpu_gpt_load_state(t->model, states, gpu_step_seed(t, step - 1));
    zero_gather_params(t->zero);
    pipeline_gpu_sync_tied(t->pipeline);
    CUDA_CHECK(cudaStreamSynchronize(t->model->stream));
}
static void gpu_range_push(const char *name) { nvtxRangePushA(name); }
static void gpu_range_pop(void) { nvtxRangePop(); }

// The device groups: NCCL's, or MPI's staged through host memory (the device
// self backend on a single process without MPI).
static CommGroup *device_groups(Comm *comm, const char *choice) {
#ifdef LLMC_NCCL
    if (strcmp(choice, "nccl") == 0 || (strcmp(choice, "auto") == 0 && comm->world > 1)) return comm_nccl_init(comm);
#else
    if (strcmp(choice, "nccl") == 0)
        die_usage("--comm nccl: this train_gptcu was built without NCCL (set NCCL_HOME and rebuild, or use --comm mpi)");
#endif
    return comm_staged_init(comm);
}

// Whether the device groups pair point-to-point messages by order (NCCL), so
// a pipeline runs fused lists (pp_schedule.h): --comm nccl, or auto with NCCL
// built in and more than one rank.
static int device_p2p_fused(const char *choice, int world) {
#ifdef LLMC_NCCL
    return strcmp(choice, "nccl") == 0 || (strcmp(choice, "auto") == 0 && world > 1);
#else
    (void)choice, (void)world;
    return 0;
#endif
}

int main(int argc, char **argv) {
    TrainOptions o;
    train_options_parse(argc, argv, &o, SUMMARY);
    if (o.ckpt_dir[0]) ckpt_catch_preemption();  // (first, before MPI: a signal during start-up stops the run cleanly)
    if (o.print_schedule) {  // (the pipeline's plan needs no GPU)
        int from_file;
        GPTConfig cfg = train_build_config(&o, &from_file);
        LaunchInfo li = launch_detect();
        train_print_schedule_and_exit(&o, &cfg, li.rank, li.world, device_p2p_fused(o.comm, li.world));
    }
    {
        int from_file;
        GPTConfig cfg = train_build_config(&o, &from_file);
        train_check_layout(&o, &cfg, launch_detect().world);
    }
    if (!cuda_device_present()) die_usage("no CUDA device found (train_gptcu needs one GPU; ./train_gpt runs on the CPU)");
    const int pipelined = o.pp > 1;
    Comm comm;
    comm_init(&comm, &argc, &argv, train_grid(&o), o.comm_timeout);
    device_check_ranks(comm.rank, comm.local_rank, launch_detect().local_world, device_p2p_fused(o.comm, comm.world));
    CUDA_CHECK(cudaSetDevice(comm_pick_device(&comm)));  // before any CUDA allocation
    const DeviceCode code = device_check_code();
    CommGroup *host_dp = comm_group(&comm, COMM_DATA);  // (each data rank reads its own sequences)
    CommGroup *host_replica = comm_group(&comm, COMM_REPLICA);  // data x context: ZeRO's shards, the losses' mean
    const int rank = comm.rank, world = host_dp->size;  // data-parallel ranks; only rank 0 logs and writes files
    int from_file;
    GPTConfig cfg = train_build_config(&o, &from_file);
    BatchPlan plan = train_batch_plan(&o, &cfg, world);
    const int B = plan.B, T = plan.T, Tl = T / o.cp;  // (Tl: this rank's positions of a sequence)
    AttentionKind attention = strcmp(o.attention, "cudnn") == 0 ? ATTENTION_CUDNN : ATTENTION_FLASH;
    PPLayout pp_layout;
    PPKind pp_kind = train_pipeline_plan(&o, &cfg, &plan, &pp_layout);  // (one stage without --pp)
    const int fused = device_p2p_fused(o.comm, comm.world);
    if (pipelined && fused) train_check_fused_lists(&o, pp_kind, plan.accum);

    // NCCL's set-up waits for every rank: bounded by --comm-timeout like MPI's (comm.h's phase watchdog)
    comm_test_stop(&comm, "setup", comm.rank);
    comm_phase_begin(&comm, "device communication set-up (ncclCommInitRank)");
    CommGroup *dev_groups = device_groups(&comm, o.comm);
    CommGroup *dp = &dev_groups[COMM_REPLICA];  // the ranks holding the same parameters: data x context
    comm_phase_end(&comm);
    TPContext tp = o.tp > 1 ? tp_context(&dev_groups[COMM_TENSOR], o.sequence_parallel) : tp_none();
    const int pipe_rank = comm_group(&comm, COMM_PIPELINE)->rank;

    cudaDeviceProp prop;
    int dev = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
    const char *peak_source = "--peak-tflops", *datasheet = NULL;
    double peak_tflops = o.peak_tflops;
    if (peak_tflops <= 0) peak_tflops = cuda_datasheet_bf16_tflops(prop.name, &datasheet);
    char datasheet_text[64] = "";
    if (datasheet) {
        snprintf(datasheet_text, sizeof(datasheet_text), "%s dense bf16 datasheet, by device name", datasheet);
        peak_source = datasheet_text;
    }
    if (peak_tflops <= 0) {  // measured before the model takes the memory
        peak_source = "measured " FLOATX_NAME " cuBLASLt";
        MatmulContext probe;
        matmul_init(&probe);
        peak_tflops = matmul_measure_peak_tflops(&probe, 8192, 5, 0);
        matmul_free(&probe);
        if (!(peak_tflops > 0 && isfinite(peak_tflops))) peak_tflops = 0, peak_source = "unknown: MFU not given";
    }

    unsigned char *held_layers = (unsigned char *)mallocCheck((size_t)cfg.num_layers);
    ParamHolding holding = {1, 1, NULL};  // what this rank holds: everything, or its pipeline stages
    if (pipelined) holding = pp_holding(&pp_layout, pipe_rank, -1, cfg.num_layers, held_layers);
    GPTGPU model;  // its weights, gradients and AdamW state, sharded for ZeRO over the replica group
    // (a pipeline rank's activation sets: those its runtime allocates for the lists it runs)
    PPRankSets act_sets = pp_rank_sets_count(&pp_layout, pp_kind, pipe_rank, plan.accum, fused);
    char act_sets_text[1100] = "";  // (the memory line's)
    if (pipelined) {
        strcpy(act_sets_text, ", the schedule's peak: sets ");
        pp_sets_format(act_sets.sets, o.virtual_stages, act_sets_text + strlen(act_sets_text), 1024);
    }
    gpu_gpt_init(&model, &cfg, pipelined ? &holding : NULL, tp, B, Tl, o.cp, o.recompute_policy, attention,
                 zero_sharding(o.zero, dp->rank, dp->size), pipelined ? &act_sets : NULL, pp_kind == PP_ZB1P, o.mem_limit_mb);
    free(held_layers);
#ifdef LLMC_NCCL
    for (int k = 0; k < COMM_NUM_GROUPS; k++)
        if (dev_groups[k].be == &COMM_NCCL) comm_nccl_set_compute_stream(&dev_groups[k], model.stream);
#endif
    CPGPU cp;  // the context group's positions and attention buffers
    if (o.cp > 1) {
        cp_gpu_init(&cp, &dev_groups[COMM_CONTEXT], comm_group(&comm, COMM_CONTEXT), B, T, plan.accum, cfg.num_layers,
                    cfg.channels, cfg.channels / tp.size, cfg.num_heads / tp.size, model.stream);
        if (attention == ATTENTION_CUDNN) cp_gpu_use_cudnn(&cp, &model.cudnn);
        model.cp = &cp;
    }
    {  // this rank's part of the weights, as the whole model's initialisation or file has them
        float *h = (float *)alignedMallocCheck(sizeof(float) * (size_t)model.layout.num_elements);
        if (from_file) train_load_weights(&o, &model.layout, h);
        else gpt2_init_params(&model.layout, h, (uint64_t)o.seed);
        gpu_gpt_set_params(&model, h);
        free(h);
    }
    Zero zero;  // gradient reduction and gathers of the sharded state
    zero_init(&zero, &model, dp, o.zero, o.bucket_mb);
    PipelineGPU pipeline;  // the stages' schedule, the tied wte between the ends
    pipeline_gpu_init(&pipeline, &model, &zero, &comm, dev_groups, pp_layout, pp_kind, fused, B, Tl, plan.dloss,
                      o.pp_trace);
    pipeline_gpu_sync_tied(&pipeline);
    ParamLayout global;  // the whole model's order: checkpoints and model files
    param_layout_init(&global, &cfg);

    DataLoader train_loader, val_loader;
    const int have_data = o.data_train[0] != '\0';  // (without it nothing is trained: --generate, --steps 0)
    if (have_data)
        dataloader_init(&train_loader, o.data_train, B, T, host_dp->rank, world, o.shuffle, (uint64_t)o.seed, cfg.vocab_size, 4);
    int have_val = o.data_val[0] != '\0';
    if (have_val)
        dataloader_init(&val_loader, o.data_val, B, T, host_dp->rank, world, 0, (uint64_t)o.seed, cfg.vocab_size, 2);

    Tokenizer tokenizer;
    int have_tokenizer = train_load_tokenizer(&o, &tokenizer, cfg.vocab_size);
    generate_check(&o, have_tokenizer ? &tokenizer : NULL, cfg.vocab_size);

    double flops_per_step = gpt_flops_per_token(&cfg, T) * (double)plan.total_tokens;
    const GPUMemory *mem = &model.mem;
    ZeroMemory zm = zero_memory(&zero);
    if (rank == 0) {
        train_print_header(&o, &cfg, global.num_params, model.layout.num_params, from_file, &plan, world,
                           have_data ? &train_loader : NULL, have_val);
        printf("ranks: %d (%s launch, MPI %s) | data parallel %d x tensor %d x pipeline %d x context %d | ZeRO-%d | comm "
               "%s | bucket %.1f MB | comm timeout %.0f s\n", comm.world, comm.launcher, comm.mpi_initialized ? "on" : "off",
               comm_size(&comm, GRID_DP), comm_size(&comm, GRID_TP), comm_size(&comm, GRID_PP),
               comm_size(&comm, GRID_CP), o.zero, dp->be->name, zero.bucket_elems * sizeof(float) / 1e6, o.comm_timeout);
        if (o.cp > 1)
            printf("context parallel: %d ranks a sequence, each %d positions (chunks i and %d-i of %d) | attention "
                   "all-gathers K and V: %.3f MB a layer (kept with the activations), %.3f MB of shared context buffers "
                   "(the gathered pieces, fp32 dK and dV)\n", o.cp, Tl, 2 * o.cp - 1, 2 * o.cp,
                   (double)sizeof(floatX) * B * T * 2 * (cfg.channels / tp.size) / 1e6, cp.bytes / 1e6);
        if (pipelined)
            printf("pipeline: %d stages over %d ranks | schedule %s%s | %d micro-batches a step | predicted bubble %.3f "
                   "(F = B = W; --print-schedule shows it)\n", pp_layout.stages, o.pp, pp_kind_names[pp_kind],
                   fused ? " (receives fused: NCCL)" : "", plan.accum,
                   pp_bubble_theory(pp_kind, o.pp, o.virtual_stages, plan.accum));
        printf("memory per rank (ZeRO-%d: N = %lld elements%s, shard S = %lld): params %.3f MB (%zu B x %s, " FLOATX_NAME ") + grads "
               "%.3f MB (%zu B x %s) + master weights and AdamW m,v %.3f MB (%zu B x %s) = %.3f MB | segment buffers "
               "and layer slots %.3f MB\n", o.zero, (long long)zero.map.num_elements,
               pipelined ? " of rank 0's stages" : "", (long long)zero.map.shard,
               zm.params / 1e6, sizeof(floatX), o.zero >= 3 ? "S" : "N", zm.grads / 1e6, sizeof(float),
               o.zero >= 2 ? "S" : "N", zm.optimizer / 1e6, 3 * sizeof(float), o.zero >= 1 ? "S" : "N",
               (zm.params + zm.grads + zm.optimizer) / 1e6, mem->segment_buffers / 1e6);
        printf("memory: params %.1f MB (fp32 + " FLOATX_NAME "), grads %.1f MB, AdamW %.1f MB, activations %.3f MB "
               "(a layer %.3f MB, recompute %s%s), workspace %.1f MB | total %.2f GB of %.2f GB\n",
               mem->params / 1e6, mem->grads / 1e6, mem->optimizer / 1e6, mem->activations / 1e6,
               mem->layer_activations / 1e6, o.recompute,
               act_sets_text,
               mem->workspace / 1e6, gpu_memory_total(mem) / 1e9, prop.totalGlobalMem / 1e9);
        char code_text[48];
        if (code.ptx < code.binary) snprintf(code_text, sizeof(code_text), "PTX compute_%d JIT-compiled", code.ptx);
        else snprintf(code_text, sizeof(code_text), "sm_%d", code.binary);
        printf("compute: %s (sm_%d%d, code %s, %d SMs), attention %s, peak %.1f TFLOP/s (%s), %.2f GFLOP/step\n",
               prop.name, prop.major, prop.minor, code_text, prop.multiProcessorCount, o.attention, peak_tflops,
               peak_source, flops_per_step * 1e-9);
        fflush(stdout);
    }

    GpuTrainer trainer = {&model, &zero, &pipeline, o.cp > 1 ? &cp : NULL, (uint64_t)o.seed,
                          o.tp > 1 ? tp_context(comm_group(&comm, COMM_TENSOR), o.sequence_parallel) : tp_none(),
                          (float *)mallocCheck(sizeof(float) * (size_t)cfg.vocab_size),
                          NULL, NULL, NULL, 0};
    TrainModel tm = {&trainer, gpu_train_step, gpu_forward, gpu_sample, gpu_finish_grads, gpu_optimizer_step,
                     gpu_profile, gpu_range_push, gpu_range_pop, gpu_ckpt_stage, gpu_ckpt_wait_staged, NULL,
                     gpu_ckpt_load, 1};
    // checkpoints: the fp32 master weights are sharded with the moments (from ZeRO-1), as global ranges
    CkptRanges ranges = ckpt_ranges(&zero.map, o.zero, 1, &model.layout);
    float *ckpt_staging = NULL;  // (pinned) what this rank writes of each checkpoint
    if (o.ckpt_dir[0]) {
        CUDA_CHECK(cudaMallocHost((void **)&ckpt_staging, sizeof(float) * CKPT_STATES *
                                  (size_t)(ckpt_pieces_elems(&ranges.write) + 1)));
        CUDA_CHECK(cudaStreamCreateWithFlags(&trainer.ckpt_stream, cudaStreamNonBlocking));
        CUDA_CHECK(cudaEventCreateWithFlags(&trainer.ckpt_ready, cudaEventDisableTiming));
        CUDA_CHECK(cudaEventCreateWithFlags(&trainer.ckpt_copied, cudaEventDisableTiming));
    }
    TrainRun run = {&o, &cfg, plan, &tm, have_data ? &train_loader : NULL, have_val ? &val_loader : NULL,
                    have_tokenizer ? &tokenizer : NULL, host_replica, comm_group(&comm, COMM_WORLD), rank, flops_per_step,
                    peak_tflops * 1e12 * comm.world, cuda_used_bytes, "device in use", ckpt_run_of(&o, &cfg, &global, &plan, &comm,
                    "train_gptcu"), ranges, &model.map, ckpt_staging};
    // the steps' parts on the device's timeline (step_time.h)
    StepEventClock *step_events = (StepEventClock *)mallocCheck(sizeof(StepEventClock));
    step_time_use_device(step_event_clock_init(step_events, model.stream));
    Logger log;
    int finished = train_run(&run, from_file, &log);  // 0: stopped by a signal (exit CKPT_EXIT_SIGNAL)
    if (finished && o.generate) train_generate(&run);
    step_event_clock_free(step_events);
    free(step_events);
    if (ckpt_staging) {
        CUDA_CHECK(cudaStreamSynchronize(trainer.ckpt_stream));
        CUDA_CHECK(cudaFreeHost(ckpt_staging));
        CUDA_CHECK(cudaEventDestroy(trainer.ckpt_ready));
        CUDA_CHECK(cudaEventDestroy(trainer.ckpt_copied));
        CUDA_CHECK(cudaStreamDestroy(trainer.ckpt_stream));
    }

    pp_runner_report(&pipeline.core.run, rank == 0);
    if (finished) train_save_final(&run, gpu_gpt_read_params, &model);
    logger_close(&log);
    if (have_data) dataloader_free(&train_loader);
    if (have_val) dataloader_free(&val_loader);
    if (have_tokenizer) tokenizer_free(&tokenizer);
    free(trainer.logits);
    tp_free(&trainer.host_tp);
    pipeline_gpu_free(&pipeline);
    zero_free(&zero);
    if (o.cp > 1) cp_gpu_free(&cp);
    param_layout_free(&global);
    ckpt_ranges_free(&ranges);
    gpu_gpt_free(&model);
    tp_free(&tp);
#ifdef LLMC_NCCL
    comm_nccl_free();
#endif
    comm_staged_free();
    comm_finalize(&comm);
    return finished ? 0 : CKPT_EXIT_SIGNAL;
}
