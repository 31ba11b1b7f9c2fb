// train_gpt.cu: the GPU trainer (train_gptcu). The same flags
// (llmc/train_options.h), data, logs (llmc/logger.h) and llm.c model files as
// the CPU trainer train_gpt.c, whose loop it mirrors step for step, on one
// NVIDIA GPU: bf16 weights and activations, fp32 master weights, gradients and
// AdamW state (llmc/gpt_gpu.cuh). GPU-only flags: --attention flash|cudnn,
// --recompute 0|1|2. The distributed flags (--zero, --comm, ...) have no
// effect on one GPU.
#include <math.h>

#include "llmc/dataloader.h"
#include "llmc/gpt_gpu.cuh"
#include "llmc/logger.h"
#include "llmc/model_init.h"
#include "llmc/modelfile.h"
#include "llmc/optimizer.h"
#include "llmc/sampler.h"
#include "llmc/schedule.h"
#include "llmc/tokenizer.h"
#include "llmc/train_options.h"
#include "llmc/train_setup.h"

static const char *SUMMARY =
    "Train a GPT-2 on one NVIDIA GPU (bf16, cuBLASLt, flash or cuDNN attention). Data: llm.c token shards.\n"
    "Example: ./train_gptcu --data-train 'data/default/*train*.bin' --model d12 --batch-size 16 --seq-len 1024";

// Mean loss over eval_batches batches of the validation data (from its start).
static float evaluate(GPTGPU *m, DataLoader *val, int *x, int *y, int B, int T, int batches) {
    NVTX_RANGE("evaluate");
    dataloader_reset(val);
    double total = 0.0;
    for (int i = 0; i < batches; i++) {
        dataloader_next(val, x, y);
        total += gpu_gpt_forward(m, x, y, B, T, 0.0f);
    }
    return (float)(total / batches);
}

// Generates n tokens after the end-of-text token and prints them, as train_gpt.c does.
static void print_sample(GPTGPU *m, const Tokenizer *tok, int T, int n, float temperature, Rng *rng) {
    NVTX_RANGE("sample");
    int V = m->cfg.vocab_size;
    int *ctx = (int *)callocCheck((size_t)T, sizeof(int));
    float *logits = (float *)mallocCheck(sizeof(float) * (size_t)V);
    int len = 1;
    ctx[0] = tok ? (int)tokenizer_eot(tok) : V - 1;
    printf("---- sample ----\n");
    for (int i = 0; i < n; i++) {
        gpu_gpt_forward(m, ctx, NULL, 1, T, 0.0f);  // causal: positions >= len do not affect len-1
        gpu_gpt_logits(m, len - 1, 1, logits);
        int next = sample_token(logits, V, temperature, rng);
        size_t nbytes;
        const char *bytes =
            tok && next < (int)tokenizer_vocab_size(tok) ? tokenizer_decode(tok, (uint32_t)next, &nbytes) : NULL;
        if (bytes) fwrite(bytes, 1, nbytes, stdout);
        else if (next < 256 && V <= 257) putchar(next);
        else printf("<%d>", next);
        if (len == T) { memmove(ctx, ctx + 1, sizeof(int) * (size_t)(T - 1)); len--; }
        ctx[len++] = next;
    }
    printf("\n----------------\n");
    fflush(stdout);
    free(logits);
    free(ctx);
}

static void save_model(GPTGPU *m, const char *path) {
    float *h = (float *)alignedMallocCheck(sizeof(float) * (size_t)m->layout.num_elements);
    gpu_gpt_get_params(m, h);
    modelfile_save(path, &m->layout, h);
    free(h);
    printf("saved %s\n", path);
}

int main(int argc, char **argv) {
    TrainOptions o;
    train_options_parse(argc, argv, &o, SUMMARY);
    if (!cuda_device_present()) die_usage("no CUDA device found (train_gptcu needs one GPU; ./train_gpt runs on the CPU)");
    const int rank = 0, world = 1;

    int from_file;
    GPTConfig cfg = train_build_config(&o, &from_file);
    BatchPlan plan = train_batch_plan(&o, &cfg, world);
    const int B = plan.B, T = plan.T, accum = plan.accum;
    const long long total_tokens = plan.total_tokens;
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
    gpu_gpt_init(&model, &cfg, B, T, o.recompute, attention);
    int64_t nelem = model.layout.num_elements;
    {
        float *h = (float *)alignedMallocCheck(sizeof(float) * (size_t)nelem);
        if (from_file) modelfile_load(o.model, &model.layout, h);
        else gpt2_init_params(&model.layout, h, (uint64_t)o.seed);
        gpu_gpt_set_params(&model, h);
        free(h);
    }

    DataLoader train_loader, val_loader;
    dataloader_init(&train_loader, o.data_train, B, T, rank, world, 0, (uint64_t)o.seed, cfg.vocab_size, 4);
    int have_val = o.data_val[0] != '\0';
    if (have_val) dataloader_init(&val_loader, o.data_val, B, T, rank, world, 0, (uint64_t)o.seed, cfg.vocab_size, 2);

    Tokenizer tokenizer;
    int have_tokenizer = o.tokenizer[0] != '\0';
    if (have_tokenizer) {
        tokenizer_load(&tokenizer, o.tokenizer);
        if ((int)tokenizer_vocab_size(&tokenizer) > cfg.vocab_size)
            die_usage("--tokenizer '%s' has %u tokens, more than the model's vocabulary %d", o.tokenizer,
                      tokenizer_vocab_size(&tokenizer), cfg.vocab_size);
    }
    int *x = (int *)mallocCheck(sizeof(int) * (size_t)B * T);
    int *y = (int *)mallocCheck(sizeof(int) * (size_t)B * T);

    double flops_per_step = gpt_flops_per_token(&cfg, T) * (double)total_tokens;
    const GPUMemory *mem = &model.mem;
    printf("model: L=%d C=%d NH=%d V=%d (padded %d) maxT=%d | %.2fM parameters%s%s\n", cfg.num_layers,
           cfg.channels, cfg.num_heads, cfg.vocab_size, cfg.padded_vocab_size, cfg.max_seq_len,
           model.layout.num_params / 1e6, from_file ? " | from " : "", from_file ? o.model : "");
    printf("batch: B=%d T=%d x %d ranks x %d accumulation = %lld tokens/step | %d steps\n", B, T, world, accum,
           total_tokens, o.steps);
    printf("data: %lld train tokens in %d shards%s\n", (long long)train_loader.num_tokens, train_loader.num_shards,
           have_val ? " | validation data given" : "");
    printf("memory: params %.1f MB (fp32 + bf16), grads %.1f MB, AdamW %.1f MB, activations %.1f MB "
           "(recompute %d), workspace %.1f MB | total %.2f GB of %.2f GB\n",
           mem->params / 1e6, mem->grads / 1e6, mem->optimizer / 1e6, mem->activations / 1e6, o.recompute,
           mem->workspace / 1e6, gpu_memory_total(mem) / 1e9, prop.totalGlobalMem / 1e9);
    printf("compute: %s (sm_%d%d, %d SMs), attention %s, peak %.1f TFLOP/s (%s), %.2f GFLOP/step\n", prop.name,
           prop.major, prop.minor, prop.multiProcessorCount, o.attention, peak_tflops,
           o.peak_tflops > 0 ? "--peak-tflops" : "measured bf16 cuBLASLt", flops_per_step * 1e-9);
    fflush(stdout);

    Logger log;
    logger_open(&log, o.log_json, rank == 0);
    LrSchedule sched = train_lr_schedule(&o);
    Rng sample_rng;
    rng_seed(&sample_rng, (uint64_t)o.seed ^ 0x5a5a5a5aULL);
    const float dloss = plan.dloss;

    for (int step = 0; step <= o.steps; step++) {
        int last = step == o.steps;
        if (have_val && o.eval_every > 0 && (step % o.eval_every == 0 || last))
            logger_eval(&log, step, evaluate(&model, &val_loader, x, y, B, T, o.eval_batches));
        if (o.sample_every > 0 && (step % o.sample_every == 0 || last) && rank == 0)
            print_sample(&model, have_tokenizer ? &tokenizer : NULL, T, o.sample_tokens, o.temperature, &sample_rng);
        if (last) break;

        NVTX_RANGE("step");
        double t0 = wall_seconds();
        gpu_gpt_zero_grad(&model);
        double loss = 0.0;
        for (int micro = 0; micro < accum; micro++) {
            {
                NVTX_RANGE("data");
                dataloader_next(&train_loader, x, y);
            }
            loss += gpu_gpt_forward(&model, x, y, B, T, dloss);
            gpu_gpt_backward(&model);
        }
        loss /= accum;
        float norm = gpu_gpt_grad_norm(&model);
        float lr = lr_at_step(&sched, step);
        AdamWConfig ac = {lr, o.beta1, o.beta2, o.eps, o.weight_decay, step + 1};
        gpu_gpt_update(&model, &ac, grad_clip_scale(norm, o.grad_clip), (uint64_t)o.seed * 0x9e3779b97f4a7c15ull + step);
        CUDA_CHECK(cudaStreamSynchronize(model.stream));
        double ms = (wall_seconds() - t0) * 1e3;
        if ((step + 1) % o.log_every == 0 || step + 1 == o.steps) {
            StepRecord r = {step, o.steps, (float)loss, lr, norm, total_tokens, ms,
                            flops_per_step / (ms * 1e-3) / (peak_tflops * 1e12)};
            logger_step(&log, &r);
        }
    }

    if (o.out_dir[0]) {
        train_make_dir(o.out_dir);
        char path[FILENAME_MAX];
        snprintf(path, sizeof(path), "%s/model_final.bin", o.out_dir);
        save_model(&model, path);
    }
    if (o.save_model[0]) save_model(&model, o.save_model);
    logger_close(&log);
    dataloader_free(&train_loader);
    if (have_val) dataloader_free(&val_loader);
    if (have_tokenizer) tokenizer_free(&tokenizer);
    free(x);
    free(y);
    gpu_gpt_free(&model);
    return 0;
}
