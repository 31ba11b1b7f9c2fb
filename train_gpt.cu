// train_gpt.cu: the GPU trainer (train_gptcu). The same flags
// (llmc/train_options.h), data, logs (llmc/logger.h) and llm.c model files as
// the CPU trainer train_gpt.c, whose loop it mirrors step for step, on NVIDIA
// GPUs: bf16 weights and activations, fp32 master weights, gradients and AdamW
// state (llmc/gpt_gpu.cuh). GPU-only flags: --attention flash|cudnn,
// --recompute 0|1|2. Data parallel like train_gpt.c (one process per GPU,
// started by mpirun or srun; alone it is a single process without MPI), with
// ZeRO 0-3 (llmc/zero_gpu.cuh) over NCCL (--comm nccl, or auto when built
// with it) or MPI staged through host memory (--comm mpi, also for several
// ranks on one GPU).
#include <math.h>

#include "llmc/comm.h"
#ifdef LLMC_NCCL
#include "llmc/comm_nccl.cuh"
#endif
#include "llmc/comm_staged.cuh"
#include "llmc/dataloader.h"
#include "llmc/gpt_gpu.cuh"
#include "llmc/logger.h"
#include "llmc/model_init.h"
#include "llmc/modelfile.h"
#include "llmc/optimizer.h"
#include "llmc/param_gather.h"
#include "llmc/tokenizer.h"
#include "llmc/train_options.h"
#include "llmc/train_loop.h"
#include "llmc/train_setup.h"
#include "llmc/zero_gpu.cuh"

static const char *SUMMARY =
    "Train a GPT-2 on NVIDIA GPUs, data parallel under mpirun or srun (bf16, cuBLASLt, flash or cuDNN attention). Data: llm.c token shards.\n"
    "Example: ./train_gptcu --data-train 'data/default/*train*.bin' --model d12 --batch-size 16 --seq-len 1024";

// TrainModel (llmc/train_loop.h) over the GPU model and its ZeRO layer.
typedef struct {
    GPTGPU *model;
    ZeroGPU *zero;
    uint64_t seed;  // --seed, for the stochastic rounding of each step's bf16 weights
    float *logits;  // (V) host copy of one row of logits, for sampling
    // checkpoints: the staging copy runs on its own stream after `ready`; the
    // next update waits (on the device) for `copied`
    cudaStream_t ckpt_stream;
    cudaEvent_t ckpt_ready, ckpt_copied;
    int ckpt_copy_pending;
} GpuTrainer;

// The stochastic rounding seed of step `step` (0-based).
static uint64_t gpu_step_seed(const GpuTrainer *t, int64_t step) { return t->seed * 0x9e3779b97f4a7c15ull + (uint64_t)step; }

static float gpu_forward(void *ctx, const int *x, const int *y, int B, int T, float dloss) {
    return gpu_gpt_forward(((GpuTrainer *)ctx)->model, x, y, B, T, dloss);
}
static void gpu_backward(void *ctx) { gpu_gpt_backward(((GpuTrainer *)ctx)->model); }
static const float *gpu_logits(void *ctx, int row) {
    GpuTrainer *t = (GpuTrainer *)ctx;
    gpu_gpt_logits(t->model, row, 1, t->logits);
    return t->logits;
}
static void gpu_begin_step(void *ctx) { zero_gpu_begin_step(((GpuTrainer *)ctx)->zero); }
static void gpu_begin_micro(void *ctx, int micro, int accum) {
    zero_gpu_begin_micro(((GpuTrainer *)ctx)->zero, micro, accum);
}
static float gpu_finish_grads(void *ctx) { return zero_gpu_finish_grads(((GpuTrainer *)ctx)->zero); }
static void gpu_optimizer_step(void *ctx, const AdamWConfig *ac, float grad_scale, int step) {
    GpuTrainer *t = (GpuTrainer *)ctx;
    if (t->ckpt_copy_pending) {  // the update rewrites what a checkpoint's copy reads
        CUDA_CHECK(cudaStreamWaitEvent(t->model->stream, t->ckpt_copied, 0));
        t->ckpt_copy_pending = 0;
    }
    gpu_gpt_update(t->model, ac, grad_scale, gpu_step_seed(t, step));
    zero_gpu_gather_weights(t->zero);
    CUDA_CHECK(cudaStreamSynchronize(t->model->stream));
}
static void gpu_ckpt_stage(void *ctx, float *staging, int64_t lo, int64_t hi) {
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
    zero_gpu_gather_weights(t->zero);
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

int main(int argc, char **argv) {
    TrainOptions o;
    train_options_parse(argc, argv, &o, SUMMARY);
    if (o.print_schedule) {  // (the pipeline's plan needs no GPU)
        int from_file;
        GPTConfig cfg = train_build_config(&o, &from_file);
        LaunchInfo li = launch_detect();
        train_print_schedule_and_exit(&o, &cfg, li.rank, li.world);
    }
    if (o.pp > 1) die_usage("--pp %d: the GPU trainer's pipeline parallel is not built yet (./train_gpt has it)", o.pp);
    if (!cuda_device_present()) die_usage("no CUDA device found (train_gptcu needs one GPU; ./train_gpt runs on the CPU)");
    Comm comm;
    comm_init(&comm, &argc, &argv, 1, 1, o.comm_timeout);
    CUDA_CHECK(cudaSetDevice(comm_pick_device(&comm)));  // before any CUDA allocation
    CommGroup *host_dp = comm_group(&comm, COMM_DATA);
    CommPhaseWatch setup;  // NCCL's set-up waits for every rank: bounded by --comm-timeout like MPI's
    comm_test_stop(&comm, "setup", comm.rank);
    comm_phase_begin(&setup, "device communication set-up (ncclCommInitRank)", comm.rank,
                     comm.world > 1 ? o.comm_timeout : 0);
    CommGroup *dp = &device_groups(&comm, o.comm)[COMM_DATA];
    comm_phase_end(&setup);
    const int rank = comm.rank, world = dp->size;  // data-parallel ranks; only rank 0 logs and writes files

    int from_file;
    GPTConfig cfg = train_build_config(&o, &from_file);
    BatchPlan plan = train_batch_plan(&o, &cfg, world);
    const int B = plan.B, T = plan.T;
    AttentionKind attention = strcmp(o.attention, "cudnn") == 0 ? ATTENTION_CUDNN : ATTENTION_FLASH;

    cudaDeviceProp prop;
    int dev = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
    double peak_tflops = o.peak_tflops;
    if (peak_tflops <= 0) {  // measured before the model takes the memory
        MatmulContext probe;
        matmul_init(&probe);
        peak_tflops = matmul_measure_peak_tflops(&probe, 8192, 5, 0);
        matmul_free(&probe);
    }

    GPTGPU model;
    gpu_gpt_init(&model, &cfg, B, T, o.recompute, attention, gpu_sharding(o.zero, dp->rank, dp->size));
#ifdef LLMC_NCCL
    if (dp->be == &COMM_NCCL) comm_nccl_set_compute_stream(dp, model.stream);
#endif
    ZeroGPU zero;  // gradient reduction, sharded AdamW state (and gradients, weights)
    zero_gpu_init(&zero, &model, dp, host_dp, o.zero, o.bucket_mb);
    int64_t nelem = model.layout.num_elements;
    {
        float *h = (float *)alignedMallocCheck(sizeof(float) * (size_t)nelem);
        if (from_file) modelfile_load(o.model, &model.layout, h);
        else gpt2_init_params(&model.layout, h, (uint64_t)o.seed);
        gpu_gpt_set_params(&model, h);
        free(h);
    }

    DataLoader train_loader, val_loader;
    dataloader_init(&train_loader, o.data_train, B, T, dp->rank, world, o.shuffle, (uint64_t)o.seed, cfg.vocab_size, 4);
    int have_val = o.data_val[0] != '\0';
    if (have_val)
        dataloader_init(&val_loader, o.data_val, B, T, dp->rank, world, 0, (uint64_t)o.seed, cfg.vocab_size, 2);

    Tokenizer tokenizer;
    int have_tokenizer = train_load_tokenizer(&o, &tokenizer, cfg.vocab_size);

    double flops_per_step = gpt_flops_per_token(&cfg, T) * (double)plan.total_tokens;
    const GPUMemory *mem = &model.mem;
    ZeroMemory zm = zero_gpu_memory(&zero);
    if (rank == 0) {
        train_print_header(&o, &cfg, model.layout.num_params, from_file, &plan, world, &train_loader, have_val);
        printf("ranks: %d (%s launch, MPI %s) | data parallel %d | ZeRO-%d | comm %s | bucket %.1f MB | comm timeout "
               "%.0f s\n", comm.world, comm.launcher, comm.mpi_initialized ? "on" : "off", comm.dp, o.zero, dp->be->name,
               zero.bucket_elems * sizeof(float) / 1e6, o.comm_timeout);
        printf("memory per rank (ZeRO-%d: N = %lld elements, shard S = %lld): params %.3f MB (%zu B x %s, bf16) + grads "
               "%.3f MB (%zu B x %s) + master weights and AdamW m,v %.3f MB (%zu B x %s) = %.3f MB | segment buffers "
               "and layer slots %.3f MB\n", o.zero, (long long)zero.map.num_elements, (long long)zero.map.shard,
               zm.params / 1e6, sizeof(bf16), o.zero >= 3 ? "S" : "N", zm.grads / 1e6, sizeof(float),
               o.zero >= 2 ? "S" : "N", zm.optimizer / 1e6, 3 * sizeof(float), o.zero >= 1 ? "S" : "N",
               (zm.params + zm.grads + zm.optimizer) / 1e6, mem->segment_buffers / 1e6);
        printf("memory: params %.1f MB (fp32 + bf16), grads %.1f MB, AdamW %.1f MB, activations %.1f MB "
               "(recompute %d), workspace %.1f MB | total %.2f GB of %.2f GB\n",
               mem->params / 1e6, mem->grads / 1e6, mem->optimizer / 1e6, mem->activations / 1e6, o.recompute,
               mem->workspace / 1e6, gpu_memory_total(mem) / 1e9, prop.totalGlobalMem / 1e9);
        printf("compute: %s (sm_%d%d, %d SMs), attention %s, peak %.1f TFLOP/s (%s), %.2f GFLOP/step\n", prop.name,
               prop.major, prop.minor, prop.multiProcessorCount, o.attention, peak_tflops,
               o.peak_tflops > 0 ? "--peak-tflops" : "measured bf16 cuBLASLt", flops_per_step * 1e-9);
        fflush(stdout);
    }

    GpuTrainer trainer = {&model, &zero, (uint64_t)o.seed, (float *)mallocCheck(sizeof(float) * (size_t)cfg.vocab_size),
                          NULL, NULL, NULL, 0};
    TrainModel tm = {&trainer, gpu_forward, gpu_backward, gpu_logits, gpu_begin_step, gpu_begin_micro,
                     gpu_finish_grads, gpu_optimizer_step, gpu_range_push, gpu_range_pop, gpu_ckpt_stage,
                     gpu_ckpt_wait_staged, gpu_ckpt_load, NULL};
    // checkpoints: the fp32 master weights are sharded with the moments (from ZeRO-1)
    CkptRanges ranges = ckpt_ranges(&zero.map, o.zero, 1);
    float *ckpt_staging = NULL;  // (pinned) what this rank writes of each checkpoint
    if (o.ckpt_dir[0]) {
        CUDA_CHECK(cudaMallocHost((void **)&ckpt_staging, sizeof(float) * CKPT_STATES *
                                  (size_t)(ckpt_pieces_elems(&ranges.write) + 1)));
        CUDA_CHECK(cudaStreamCreateWithFlags(&trainer.ckpt_stream, cudaStreamNonBlocking));
        CUDA_CHECK(cudaEventCreateWithFlags(&trainer.ckpt_ready, cudaEventDisableTiming));
        CUDA_CHECK(cudaEventCreateWithFlags(&trainer.ckpt_copied, cudaEventDisableTiming));
    }
    TrainRun run = {&o, &cfg, plan, &tm, &train_loader, have_val ? &val_loader : NULL,
                    have_tokenizer ? &tokenizer : NULL, host_dp, host_dp, rank, flops_per_step, peak_tflops * 1e12,
                    {&o, &cfg, &model.layout, &plan, &comm, "train_gptcu"}, ranges, ckpt_staging};
    if (rank == 0) train_check_outputs(&o, from_file, &train_loader, have_val ? &val_loader : NULL);
    Logger log;
    logger_open(&log, o.log_json, rank == 0);
    int finished = train_loop(&run, &log);  // 0: preempted, its checkpoint committed
    if (ckpt_staging) {
        CUDA_CHECK(cudaStreamSynchronize(trainer.ckpt_stream));
        CUDA_CHECK(cudaFreeHost(ckpt_staging));
        CUDA_CHECK(cudaEventDestroy(trainer.ckpt_ready));
        CUDA_CHECK(cudaEventDestroy(trainer.ckpt_copied));
        CUDA_CHECK(cudaStreamDestroy(trainer.ckpt_stream));
    }

    if (finished && (o.out_dir[0] || o.save_model[0])) {  // every rank takes part; rank 0 writes
        ParamGather pg;
        param_gather_init(&pg, host_dp, &ranges.write, gpu_gpt_read_params, &model);
        train_save_model_files(&o, &model.layout, rank == 0, param_gather_fetch, &pg);
        param_gather_free(&pg);
    }
    logger_close(&log);
    dataloader_free(&train_loader);
    if (have_val) dataloader_free(&val_loader);
    if (have_tokenizer) tokenizer_free(&tokenizer);
    free(trainer.logits);
    zero_gpu_free(&zero);
    gpu_gpt_free(&model);
#ifdef LLMC_NCCL
    comm_nccl_free();
#endif
    comm_finalize(&comm);
    return 0;
}
