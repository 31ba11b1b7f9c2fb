// train_gpt.c: the CPU trainer. fp32 GPT-2 forward and backward (llmc/gpt_cpu.h),
// AdamW with global-norm clipping and a learning-rate schedule, gradient
// accumulation to a total batch in tokens, validation and sampling, llm.c model
// files in and out. It is the correctness reference for the GPU trainer
// (train_gpt.cu), which takes the same flags (llmc/train_options.h) and writes
// the same logs (llmc/logger.h).
#include <sys/resource.h>

#include "llmc/comm.h"
#include "llmc/dataloader.h"
#include "llmc/gpt_cpu.h"
#include "llmc/logger.h"
#include "llmc/modelfile.h"
#include "llmc/optimizer.h"
#include "llmc/sampler.h"
#include "llmc/schedule.h"
#include "llmc/tokenizer.h"
#include "llmc/train_options.h"
#include "llmc/train_setup.h"
#include "llmc/zero_cpu.h"

static const char *SUMMARY =
    "Train a GPT-2 on the CPU (fp32, OpenMP). Data: llm.c token shards (see ./tokenize).\n"
    "Example: ./train_gpt --data-train 'data/default/*train*.bin' --model d12 --steps 100";

// Mean loss over eval_batches batches of the validation data (from its start),
// each data rank on its own samples, averaged over the ranks.
static float evaluate(GPT *m, DataLoader *val, int *x, int *y, int B, int T, int batches, CommGroup *dp) {
    dataloader_reset(val);
    double total = 0.0;
    for (int i = 0; i < batches; i++) {
        dataloader_next(val, x, y);
        total += gpt_forward(m, x, y, B, T, 0.0f);
    }
    return (float)comm_mean(dp, total / batches);
}

// Generates n tokens after the end-of-text token and prints them
// (sample_print_token). Every rank runs it (ZeRO-3 gathers weights
// collectively); only the one with show prints.
static void print_sample(GPT *m, const Tokenizer *tok, int T, int n, float temperature, Rng *rng, int show) {
    int V = m->cfg.vocab_size;
    SampleWindow w;
    sample_window_init(&w, T, sample_start_token(tok, V));
    if (show) printf("---- sample ----\n");
    for (int i = 0; i < n; i++) {
        gpt_forward(m, w.tokens, NULL, 1, T, 0.0f);  // causal: positions >= len do not affect len-1
        int next = sample_token(m->acts.logits + (size_t)(w.len - 1) * V, V, temperature, rng);
        if (show) sample_print_token(stdout, tok, next, V);
        sample_window_push(&w, next);
    }
    if (show) {
        printf("\n----------------\n");
        fflush(stdout);
    }
    sample_window_free(&w);
}

int main(int argc, char **argv) {
    TrainOptions o;
    train_options_parse(argc, argv, &o, SUMMARY);
    matmul_set_backend(o.matmul);
    if (strcmp(o.comm, "nccl") == 0) die_usage("--comm nccl: the CPU trainer communicates over MPI (--comm mpi)");
    Comm comm;
    comm_init(&comm, &argc, &argv, 1, 1, o.comm_timeout);
    CommGroup *dp = comm_group(&comm, COMM_DATA);
    const int rank = comm.rank, world = dp->size;  // data-parallel ranks; only rank 0 logs and writes files

    int from_file;
    GPTConfig cfg = train_build_config(&o, &from_file);
    BatchPlan plan = train_batch_plan(&o, &cfg, world);
    const int B = plan.B, T = plan.T, accum = plan.accum;
    const long long total_tokens = plan.total_tokens;

    GPT model;
    gpt_init(&model, &cfg);
    if (from_file) modelfile_load(o.model, &model.layout, model.params);
    else gpt2_init_params(&model.layout, model.params, (uint64_t)o.seed);

    DataLoader train_loader, val_loader;
    dataloader_init(&train_loader, o.data_train, B, T, dp->rank, world, o.shuffle, (uint64_t)o.seed, cfg.vocab_size,
                    4);
    int have_val = o.data_val[0] != '\0';
    if (have_val)
        dataloader_init(&val_loader, o.data_val, B, T, dp->rank, world, 0, (uint64_t)o.seed, cfg.vocab_size, 2);

    Zero zero;  // gradient reduction, sharded AdamW state (and gradients, weights)
    zero_init(&zero, &model, &comm, o.zero, o.bucket_mb);
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
    gpt_alloc_activations(&model, B, T);

    double peak_gflops = o.peak_tflops > 0 ? o.peak_tflops * 1e3 : matmul_measure_peak_gflops(1024, 10);
    double flops_per_step = gpt_flops_per_token(&cfg, T) * (double)total_tokens;
    ZeroMemory zm = zero_cpu_memory(&zero);
    if (rank == 0) {
    printf("model: L=%d C=%d NH=%d V=%d (padded %d) maxT=%d | %.2fM parameters%s%s\n", cfg.num_layers,
           cfg.channels, cfg.num_heads, cfg.vocab_size, cfg.padded_vocab_size, cfg.max_seq_len,
           model.layout.num_params / 1e6, from_file ? " | from " : "", from_file ? o.model : "");
    printf("batch: B=%d T=%d x %d ranks x %d accumulation = %lld tokens/step | %d steps\n", B, T, world, accum,
           total_tokens, o.steps);
    printf("data: %lld train tokens in %d shards%s\n", (long long)train_loader.num_tokens, train_loader.num_shards,
           have_val ? " | validation data given" : "");
    printf("ranks: %d (%s launch, MPI %s) | data parallel %d x tensor %d x pipeline %d | ZeRO-%d | bucket %.1f MB | "
           "comm timeout %.0f s\n", comm.world, comm.launcher, comm.mpi_initialized ? "on" : "off", comm.dp, comm.tp,
           comm.pp, o.zero, zero.bucket_elems * 4 / 1e6, o.comm_timeout);
    printf("memory per rank (ZeRO-%d: N = %lld elements, shard S = %lld): params %.3f MB (4 B x %s) + grads %.3f MB "
           "(4 B x %s) + AdamW m,v %.3f MB (8 B x %s; the fp32 params are the master copy) = %.3f MB | activations "
           "%.1f MB\n", o.zero, (long long)zero.map.num_elements, (long long)zero.map.shard, zm.params / 1e6,
           o.zero >= 3 ? "S" : "N", zm.grads / 1e6, o.zero >= 2 ? "S" : "N", zm.optimizer / 1e6,
           o.zero >= 1 ? "S" : "N", (zm.params + zm.grads + zm.optimizer) / 1e6, model.acts.num_floats * 4 / 1e6);
    printf("compute: %d threads, matmul %s, peak %.1f GFLOP/s (%s), %.2f GFLOP/step\n", omp_threads(),
           matmul_backend_name(), peak_gflops, o.peak_tflops > 0 ? "--peak-tflops" : MATMUL_PEAK_SOURCE,
           flops_per_step * 1e-9);
    fflush(stdout);
    }

    Logger log;
    logger_open(&log, o.log_json, rank == 0);
    LrSchedule sched = train_lr_schedule(&o);
    Rng sample_rng = train_sample_rng(&o);
    const float dloss = plan.dloss;

    for (int step = 0; step <= o.steps; step++) {
        if (train_eval_now(&o, step))
            logger_eval(&log, step, evaluate(&model, &val_loader, x, y, B, T, o.eval_batches, dp));
        if (train_sample_now(&o, step))
            print_sample(&model, have_tokenizer ? &tokenizer : NULL, T, o.sample_tokens, o.temperature, &sample_rng,
                         rank == 0);
        if (step == o.steps) break;

        double t0 = wall_seconds();
        zero_begin_step(&zero);
        double loss = 0.0;
        for (int micro = 0; micro < accum; micro++) {
            dataloader_next(&train_loader, x, y);
            zero_begin_micro(&zero, micro, accum);
            loss += gpt_forward(&model, x, y, B, T, dloss);
            gpt_backward(&model);  // its hooks start the gradient reductions
        }
        loss = comm_mean(dp, loss / accum);
        float norm = zero_finish_grads(&zero);
        float lr = lr_at_step(&sched, step);
        AdamWConfig ac = {lr, o.beta1, o.beta2, o.eps, o.weight_decay, step + 1};
        zero_optimizer_step(&zero, &ac, grad_clip_scale(norm, o.grad_clip));
        double ms = (wall_seconds() - t0) * 1e3;
        train_log_step(&log, &o, step, (float)loss, lr, norm, total_tokens, ms, flops_per_step, peak_gflops * 1e9);
    }

    if (o.out_dir[0] || o.save_model[0]) zero_gather_params(&zero);  // every rank takes part
    if (rank == 0) train_save_model_files(&o, &model.layout, model.params);
    if (rank == 0) {
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        printf("peak memory of rank 0: %.1f MB (RSS)\n", ru.ru_maxrss / 1e3);
    }
    logger_close(&log);
    if (have_tokenizer) tokenizer_free(&tokenizer);
    dataloader_free(&train_loader);
    if (have_val) dataloader_free(&val_loader);
    free(x);
    free(y);
    zero_free(&zero);
    gpt_free(&model);
    comm_finalize(&comm);
    return 0;
}
