// train_options.h: the trainers' flags. One table (TRAIN_FLAGS) is shared by
// train_gpt.c and train_gpt.cu, so both accept the same flags and print the same
// --help. Cross-flag checks that do not need the data live in
// train_options_validate(); ones that need the model config are in the trainer.
#ifndef LLMC_TRAIN_OPTIONS_H
#define LLMC_TRAIN_OPTIONS_H

#include <stddef.h>

#include "args.h"          // defines: flags_parse, FLAGS_COUNT
#include "launcher_env.h"  // defines: launch_detect
#include "model.h"         // defines: GPT_MAX_LAYERS, GPT_MAX_CHANNELS, GPT_MAX_HEADS, GPT_MAX_VOCAB, ...
#include "recompute.h"     // defines: RecomputePolicy, recompute_parse

typedef struct {
    char data_train[FLAG_STR_MAX];
    char data_val[FLAG_STR_MAX];
    char model[FLAG_STR_MAX];
    int n_layer, n_embd, n_head, vocab_size, max_seq_len;
    int batch_size, seq_len;
    long long total_batch_tokens;
    int steps;
    float lr, min_lr_frac;
    int warmup_steps;
    char lr_schedule[FLAG_STR_MAX];
    float decay_frac;
    float weight_decay, grad_clip, beta1, beta2, eps;
    long long seed;
    int shuffle;
    int eval_every, eval_batches;
    int sample_every, sample_tokens;
    float temperature;
    char tokenizer[FLAG_STR_MAX];
    char log_json[FLAG_STR_MAX];
    char tensorboard[FLAG_STR_MAX];  // TensorBoard event files' directory (tensorboard.h)
    char out_dir[FLAG_STR_MAX];
    char save_model[FLAG_STR_MAX];
    char save_hf[FLAG_STR_MAX];      // a Hugging Face model directory (hf_gpt2.h)
    char save_dtype[FLAG_STR_MAX];   // its weights' dtype: fp32 or bf16
    int generate;                    // --generate: print a continuation of --prompt (generate.h)
    char prompt[FLAG_STR_MAX];
    int max_new_tokens, top_k;
    int lr_decay_steps;              // the schedule's length (0: --steps, or on --resume the checkpoint's)
    int log_every;
    char matmul[FLAG_STR_MAX];
    float peak_tflops;
    char attention[FLAG_STR_MAX];  // GPU: attention kernel (gpt_gpu.cuh)
    char recompute[FLAG_STR_MAX];  // activation recompute policy (recompute.h), parsed into recompute_policy
    RecomputePolicy recompute_policy;
    int zero;                     // ZeRO stage (zero_cpu.h)
    char comm[FLAG_STR_MAX];      // communication backend (comm.h)
    float comm_timeout;           // seconds a collective may wait
    float bucket_mb;              // gradient reduction bucket
    float mem_limit_mb;           // a rank's memory budget (utils.h's mem_budget; 0: what is available)
    char ckpt_dir[FLAG_STR_MAX];  // checkpoints (checkpoint.h)
    int ckpt_every, ckpt_keep, ckpt_compress;
    char ckpt_writer_cores[FLAG_STR_MAX];  // "auto", "0" or "1": whether the checkpoint writer has a core of its own
    char resume[FLAG_STR_MAX];    // "", "auto" or a checkpoint directory
    int resume_data_changed;      // resume onto training data other than the checkpoint's
    int tp, sequence_parallel;    // tensor parallel (tensor_parallel.h)
    int pp, virtual_stages;       // pipeline parallel (pp_layout.h, pp_schedule.h)
    int cp;                       // context parallel (context_parallel.h)
    char pp_layers[FLAG_STR_MAX];
    char pp_schedule[FLAG_STR_MAX];
    int print_schedule;
    char pp_trace[FLAG_STR_MAX];
    char profile_steps[FLAG_STR_MAX];  // "A:B" (train_profile_range)
} TrainOptions;

// The model and batch rows the planner (plan.c) shares: TO(field) is the options struct's offset of
// a TrainOptions field.
#define TRAIN_MODEL_FLAGS(TO) \
    {"model", FLAG_STRING, TO(model), "d12", NULL, 0, 0, \
     "preset d12|d24|d36|d48, or a model to start from: an llm.c file, a Hugging Face GPT-2 directory or " \
     ".safetensors file, a checkpoint (a step directory, or a --ckpt-dir: its newest) (docs/models.md)", "model"}, \
    {"n-layer", FLAG_INT, TO(n_layer), "0", NULL, 0, GPT_MAX_LAYERS, "layers (0: from --model)", "model"}, \
    {"n-embd", FLAG_INT, TO(n_embd), "0", NULL, 0, GPT_MAX_CHANNELS, "channels (0: from --model)", "model"}, \
    {"n-head", FLAG_INT, TO(n_head), "0", NULL, 0, GPT_MAX_HEADS, "attention heads (0: from --model)", "model"}, \
    {"vocab-size", FLAG_INT, TO(vocab_size), "0", NULL, 0, GPT_MAX_VOCAB, "vocabulary size (0: from --model)", "model"}, \
    {"max-seq-len", FLAG_INT, TO(max_seq_len), "0", NULL, 0, GPT_MAX_SEQ_LEN, "maximum sequence length (0: from --model)", "model"}
#define TRAIN_BATCH_FLAGS(TO) \
    {"seq-len", FLAG_INT, TO(seq_len), "64", NULL, 1, GPT_MAX_SEQ_LEN, "sequence length T", "data and batch"}, \
    {"total-batch-tokens", FLAG_INT64, TO(total_batch_tokens), "0", NULL, 0, 1e15, \
     "tokens per optimizer step over all ranks; a multiple of B*T*ranks (0: B*T*ranks)", "data and batch"}

#define TO(field) offsetof(TrainOptions, field)
static const FlagSpec TRAIN_FLAGS[] = {
    TRAIN_MODEL_FLAGS(TO),
    {"data-train", FLAG_STRING, TO(data_train), "", NULL, 0, 0, "glob of training token shards (llm.c format)", "data and batch"},
    {"data-val", FLAG_STRING, TO(data_val), "", NULL, 0, 0, "glob of validation token shards", "data and batch"},
    {"batch-size", FLAG_INT, TO(batch_size), "4", NULL, 1, 1 << 20, "micro-batch size B (sequences per rank per micro-step)", "data and batch"},
    TRAIN_BATCH_FLAGS(TO),
    {"steps", FLAG_INT, TO(steps), "20", NULL, 0, 1e9, "optimizer steps", "schedule"},
    {"lr", FLAG_FLOAT, TO(lr), "3e-4", NULL, 0, 10, "peak learning rate", "schedule"},
    {"min-lr-frac", FLAG_FLOAT, TO(min_lr_frac), "0", NULL, 0, 1, "final learning rate as a fraction of --lr", "schedule"},
    {"warmup-steps", FLAG_INT, TO(warmup_steps), "0", NULL, 0, 1e9, "linear warmup steps", "schedule"},
    {"lr-decay-steps", FLAG_INT, TO(lr_decay_steps), "0", NULL, 0, 1e9,
     "the schedule's length in steps: warmup and decay fit it, steps after it run at its last rate (0: --steps; "
     "on --resume: the checkpoint's, so a run extended with a larger --steps keeps its schedule)", "schedule"},
    {"lr-schedule", FLAG_CHOICE, TO(lr_schedule), "cosine", "constant|cosine|linear|wsd", 0, 0, "learning-rate schedule after warmup", "schedule"},
    {"decay-frac", FLAG_FLOAT, TO(decay_frac), "0.2", NULL, 0, 1, "wsd: fraction of the steps spent decaying", "schedule"},
    {"weight-decay", FLAG_FLOAT, TO(weight_decay), "0", NULL, 0, 10, "AdamW decoupled weight decay (2-D weights only)", "optimizer"},
    {"grad-clip", FLAG_FLOAT, TO(grad_clip), "1.0", NULL, 0, 1e9, "clip the global gradient norm to this (0: off)", "optimizer"},
    {"beta1", FLAG_FLOAT, TO(beta1), "0.9", NULL, 0, 0.999999, "AdamW beta1", "optimizer"},
    {"beta2", FLAG_FLOAT, TO(beta2), "0.95", NULL, 0, 0.999999, "AdamW beta2", "optimizer"},
    {"eps", FLAG_FLOAT, TO(eps), "1e-8", NULL, 0, 1, "AdamW epsilon", "optimizer"},
    {"seed", FLAG_INT64, TO(seed), "1337", NULL, 0, 9.2e18, "random seed (weights init, sampling, data order)", "model"},
    {"shuffle", FLAG_BOOL, TO(shuffle), "0", NULL, 0, 1,
     "shuffle the training data: shards and samples in a permutation drawn from --seed and the epoch", "data and batch"},
    {"eval-every", FLAG_INT, TO(eval_every), "0", NULL, 0, 1e9, "validation loss every N steps (0: off)", "evaluation and sampling"},
    {"eval-batches", FLAG_INT, TO(eval_batches), "8", NULL, 1, 1e9, "micro-batches per validation", "evaluation and sampling"},
    {"sample-every", FLAG_INT, TO(sample_every), "0", NULL, 0, 1e9, "print a text sample every N steps (0: off)", "evaluation and sampling"},
    {"sample-tokens", FLAG_INT, TO(sample_tokens), "64", NULL, 1, 1 << 20, "tokens per sample", "evaluation and sampling"},
    {"temperature", FLAG_FLOAT, TO(temperature), "1.0", NULL, 0, 100, "sampling temperature (0: greedy, the most likely token)", "evaluation and sampling"},
    {"top-k", FLAG_INT, TO(top_k), "0", NULL, 0, GPT_MAX_VOCAB,
     "sample among the K most likely tokens only (ties with the K-th included; 0: all)", "evaluation and sampling"},
    {"generate", FLAG_BOOL, TO(generate), "0", NULL, 0, 1,
     "print a continuation of --prompt from the model (after training, if --data-train is given; without it nothing "
     "is trained)", "evaluation and sampling"},
    {"prompt", FLAG_STRING, TO(prompt), "", NULL, 0, 0,
     "--generate's text, encoded by --tokenizer (a GPT-2 BPE directory) after <|endoftext|>; the context keeps its "
     "last --seq-len tokens", "evaluation and sampling"},
    {"max-new-tokens", FLAG_INT, TO(max_new_tokens), "64", NULL, 1, 1 << 20, "tokens --generate adds to the prompt", "evaluation and sampling"},
    {"tokenizer", FLAG_STRING, TO(tokenizer), "", NULL, 0, 0, "tokenizer file for decoding samples (none: byte-level)", "evaluation and sampling"},
    {"log-json", FLAG_STRING, TO(log_json), "", NULL, 0, 0, "write the log to this file as JSON lines: the run's settings first, then every step and evaluation", "logging"},
    {"tensorboard", FLAG_STRING, TO(tensorboard), "", NULL, 0, 0,
     "write TensorBoard event files into DIR (loss, validation loss, lr, gradient norm, tokens/s, MFU)", "logging"},
    {"out-dir", FLAG_STRING, TO(out_dir), "", NULL, 0, 0, "directory for the final model (model_final.bin)", "checkpoints and model files"},
    {"save-model", FLAG_STRING, TO(save_model), "", NULL, 0, 0, "write the final weights to this llm.c model file", "checkpoints and model files"},
    {"save-hf", FLAG_STRING, TO(save_hf), "", NULL, 0, 0,
     "write the final weights as a Hugging Face GPT-2 directory: model.safetensors, config.json and, with a GPT-2 "
     "--tokenizer directory, its tokenizer files (docs/models.md)", "checkpoints and model files"},
    {"save-dtype", FLAG_CHOICE, TO(save_dtype), "fp32", "fp32|bf16", 0, 0, "--save-hf's weights: fp32 or bf16", "checkpoints and model files"},
    {"log-every", FLAG_INT, TO(log_every), "1", NULL, 1, 1e9, "print a step line every N steps (the JSON log and TensorBoard get every step)", "logging"},
    {"matmul", FLAG_CHOICE, TO(matmul), "auto", "auto|blas|native|tuned", 0, 0, "CPU matmul backend (auto: BLAS if built with it, unless its kernel for this CPU is narrower than the native one, or built for the other vendor's cores and no wider; tuned: each shape a layer multiplies on the faster of the two, timed at its first use)", "compute and memory"},
    {"profile-steps", FLAG_STRING, TO(profile_steps), "", NULL, 0, 0,
     "A:B: bracket steps A..B (1-based) for a profiler: cudaProfilerStart/Stop on the GPU (nsys "
     "--capture-range=cudaProfilerApi, ncu --profile-from-start off); on the CPU perf's control FIFO "
     "$LLMC_PERF_CTL (scripts/profile.sh)", "logging"},
    {"peak-tflops", FLAG_FLOAT, TO(peak_tflops), "0", NULL, 0, 1e6,
     "peak FLOP/s for MFU, in TFLOP/s (0: measured: sgemm on the CPU, a cuBLASLt bf16 matmul on the GPU)", "logging"},
    {"attention", FLAG_CHOICE, TO(attention), "flash", "flash|cudnn", 0, 0,
     "GPU attention: our flash kernel or cuDNN's fused attention (the CPU trainer ignores it)", "GPU only (train_gpt.cu: the CPU trainer accepts and ignores these)"},
    {"recompute", FLAG_STRING, TO(recompute), "none", NULL, 0, 0,
     "activation recompute per layer: none, selective (attention's softmax path and GELU), full (keep only each "
     "layer's input, run its forward again before its backward), full:K (layers l with l % K == 0 full, the rest "
     "none); 0 and 1 also name none and selective", "compute and memory"},
    {"zero", FLAG_INT, TO(zero), "0", NULL, 0, 3,
     "ZeRO stage over the data-parallel ranks: 0 all-reduce, 1 shard AdamW state, 2 + gradients, 3 + parameters", "parallelism"},
    {"comm", FLAG_CHOICE, TO(comm), "auto", "auto|mpi|nccl", 0, 0,
     "communication backend (auto: NCCL on the GPU when built with it, else MPI; the CPU trainer uses MPI)", "parallelism"},
    {"comm-timeout", FLAG_FLOAT, TO(comm_timeout), "300", NULL, 0, 1e7,
     "seconds a collective may wait before every rank is aborted (0: forever)", "parallelism"},
    {"bucket-mb", FLAG_FLOAT, TO(bucket_mb), "25", NULL, 0.001, 1e5, "MB of gradients per reduction bucket", "parallelism"},
    {"mem-limit-mb", FLAG_FLOAT, TO(mem_limit_mb), "0", NULL, 0, 1e12,
     "memory budget of each rank in MB (host memory on the CPU trainer, device memory on the GPU trainer): a run "
     "whose ranks need more (weights, gradients, AdamW state, activations) is refused before allocating, as one "
     "that needs more than is available is (0: only what is available)", "compute and memory"},
    {"ckpt-dir", FLAG_STRING, TO(ckpt_dir), "", NULL, 0, 0,
     "checkpoint directory: step_N/ per checkpoint (written in the background), 'latest' names the newest", "checkpoints and model files"},
    {"ckpt-every", FLAG_INT, TO(ckpt_every), "0", NULL, 0, 1e9,
     "checkpoint every N steps (0: only at the end of the run); needs --ckpt-dir", "checkpoints and model files"},
    {"ckpt-keep", FLAG_INT, TO(ckpt_keep), "3", NULL, 0, 1e9,
     "keep the newest K checkpoints, delete older ones once a newer one is complete (0: keep all)", "checkpoints and model files"},
    {"ckpt-compress", FLAG_INT, TO(ckpt_compress), "0", NULL, 0, 19, "zstd level for checkpoint data (0: raw)", "checkpoints and model files"},
    {"ckpt-writer-cores", FLAG_CHOICE, TO(ckpt_writer_cores), "auto", "auto|0|1", 0, 0,
     "cores the checkpoint writer has beside the training threads: auto (those the process may run on less the "
     "node's training threads), 0 (none: it runs at nice 19, and the CPU trainer's AdamW update makes the staging "
     "copy), 1 (one: it makes the copy itself, beside the next step)", "checkpoints and model files"},
    {"resume", FLAG_STRING, TO(resume), "", NULL, 0, 0,
     "continue from a checkpoint: auto (the newest complete one in --ckpt-dir; none: start fresh) or a step_N directory", "checkpoints and model files"},
    {"resume-data-changed", FLAG_BOOL, TO(resume_data_changed), "0", NULL, 0, 1,
     "with --resume: continue although the training data is not the checkpoint's (other shards, sizes or sampled "
     "contents; a warning says how), at the same global sample of the new data's order", "checkpoints and model files"},
    {"tp", FLAG_INT, TO(tp), "1", NULL, 1, 4096,
     "tensor-parallel ranks: each layer's heads and MLP columns split over them (ranks = data x tensor x pipeline; "
     "one node)", "parallelism"},
    {"sequence-parallel", FLAG_BOOL, TO(sequence_parallel), "0", NULL, 0, 1,
     "with --tp: LayerNorms and residual adds on each rank's slice of the positions (B*T), all-gathered and "
     "reduce-scattered around the tensor-parallel regions", "parallelism"},
    {"pp", FLAG_INT, TO(pp), "1", NULL, 1, 32767,
     "pipeline-parallel stages: the layers split over this many ranks (ranks = data x pipeline)", "parallelism"},
    {"cp", FLAG_INT, TO(cp), "1", NULL, 1, 4096,
     "context-parallel ranks (CPU trainer): each holds chunks i and 2cp-1-i of 2 x cp of every sequence; attention "
     "all-gathers K and V over them (ranks = data x pipeline x context x tensor)", "parallelism"},
    {"pp-layers", FLAG_STRING, TO(pp_layers), "", NULL, 0, 0,
     "layers of each stage, comma-separated, --pp x --virtual-stages counts (default: as even as they go)", "parallelism"},
    {"pp-schedule", FLAG_CHOICE, TO(pp_schedule), "1f1b", "gpipe|1f1b|interleaved|zb1p", 0, 0,
     "pipeline schedule: GPipe, 1F1B, interleaved 1F1B (--virtual-stages), zero-bubble ZB-H1", "parallelism"},
    {"virtual-stages", FLAG_INT, TO(virtual_stages), "1", NULL, 1, 127,
     "chunks of layers per pipeline rank (the interleaved schedule: 2 or more)", "parallelism"},
    {"print-schedule", FLAG_BOOL, TO(print_schedule), "0", NULL, 0, 1,
     "print the pipeline's stages, each rank's actions as a timeline and the predicted bubble, then exit", "parallelism"},
    {"pp-trace", FLAG_STRING, TO(pp_trace), "", NULL, 0, 0,
     "debug: each rank writes the pipeline actions it executes, a line per step, to FILE.rankN", "parallelism"},
};
#undef TO

// --profile-steps A:B as 1-based steps [*first, *last]; 0, 0 without it.
static void train_profile_range(const TrainOptions *o, int *first, int *last) {
    *first = *last = 0;
    if (!o->profile_steps[0]) return;
    char tail = 0;
    if (sscanf(o->profile_steps, "%d:%d%c", first, last, &tail) != 2 || *first < 1 || *last < *first ||
        *last > o->steps)
        die_usage("--profile-steps '%s': want A:B with 1 <= A <= B <= --steps (%d)", o->profile_steps, o->steps);
}

// The flags (defaults, --config FILE, the command line) into *o, checked.
// Every rank of a job parses the same flags, so from here until the trainer's
// train_flags_checked (after the checks that need only flags and the model
// shape) a usage error is printed by rank 0 alone (utils.h's die_usage_quiet).
static inline void train_options_parse(int argc, char **argv, TrainOptions *o, const char *summary) {
    die_usage_quiet = launch_detect().rank != 0;
    memset(o, 0, sizeof(*o));
    flags_parse(argc, argv, TRAIN_FLAGS, FLAGS_COUNT(TRAIN_FLAGS), o, summary);
    if (o->data_train[0] == '\0') {  // a run that trains nothing: generate, or convert --model's weights
        if (!o->generate && o->steps != 0)
            die_usage("--data-train is required to train (see --help); --generate or --steps 0 run without it");
        const char *needs = o->eval_every ? "--eval-every" : o->sample_every ? "--sample-every" : o->resume[0] ? "--resume"
                          : o->ckpt_dir[0] ? "--ckpt-dir" : NULL;
        if (needs) die_usage("%s needs --data-train", needs);
        o->steps = 0;
    }
    if (o->prompt[0] && !o->generate) die_usage("--prompt needs --generate");
    if (o->tp > 1 && (o->temperature == 0 || o->top_k > 0))
        die_usage("--temperature 0 and --top-k sample on one tensor rank: use --tp 1");
    if (o->min_lr_frac > 1) die_usage("--min-lr-frac must be <= 1");
    if (o->ckpt_every > 0 && o->ckpt_dir[0] == '\0') die_usage("--ckpt-every needs --ckpt-dir");
    if (strcmp(o->resume, "auto") == 0 && o->ckpt_dir[0] == '\0') die_usage("--resume auto needs --ckpt-dir");
    if (o->resume_data_changed && !o->resume[0]) die_usage("--resume-data-changed needs --resume");
    if (o->pp == 1 && !o->print_schedule &&
        (o->virtual_stages != 1 || o->pp_layers[0] || o->pp_trace[0] || strcmp(o->pp_schedule, "1f1b") != 0))
        die_usage("--pp-schedule, --virtual-stages, --pp-layers and --pp-trace need --pp 2 or more");
    if (!recompute_parse(o->recompute, &o->recompute_policy))
        die_usage("--recompute '%s': want none, selective, full or full:K (K >= 1: layers l with l %% K == 0 full)",
                  o->recompute);
    if (o->sequence_parallel && o->tp == 1) die_usage("--sequence-parallel needs --tp 2 or more");
    int first, last;
    train_profile_range(o, &first, &last);  // (its errors at start-up)
#ifndef LLMC_ZSTD
    if (o->ckpt_compress > 0) die_usage("--ckpt-compress %d: this program was built without zstd", o->ckpt_compress);
#endif
}

// The end of the checks every rank makes alike: usage errors from here on
// (files, memory: they may differ between ranks) are printed by each rank.
static inline void train_flags_checked(void) { die_usage_quiet = 0; }

#endif  // LLMC_TRAIN_OPTIONS_H
