// fuzz_flags.c: the trainers' flag parser (llmc/args.h over
// llmc/train_options.h's table) and the set-up that turns flags into a model
// shape and a batch plan (llmc/model_source.h, llmc/train_setup.h): any argument list either
// parses or ends in one usage error (exit 2), never in an overflow or a
// crash. The input is the arguments, separated by NUL bytes; its first byte
// picks the number of data ranks (1..8).
#include "llmc/model_source.h"
#include "llmc/train_setup.h"
#include "tests/fuzz/fuzz_harness.h"

#define FUZZ_MAX_ARGS 64

static void fuzz_one(const uint8_t *data, size_t size) {
    if (size == 0) return;
    int world = 1 + data[0] % 8;
    char *buf = (char *)mallocCheck(size + 1);  // the arguments, NUL-terminated
    memcpy(buf, data + 1, size - 1);
    buf[size - 1] = '\0';
    char *argv[FUZZ_MAX_ARGS + 1];
    int argc = 0;
    argv[argc++] = (char *)"train_gpt";
    for (char *p = buf; p < buf + size - 1 && argc < FUZZ_MAX_ARGS; p += strlen(p) + 1) argv[argc++] = p;
    argv[argc] = NULL;
    TrainOptions o;
    train_options_parse(argc, argv, &o, "fuzz");
    GPTConfig cfg;
    if (gpt_config_preset(o.model, &cfg)) {  // a preset: no model file is read
        int from_file;
        cfg = train_build_config(&o, &from_file);
        BatchPlan plan = train_batch_plan(&o, &cfg, world);
        if (plan.accum < 1 || plan.total_tokens != (long long)plan.B * plan.T * world * plan.accum) abort();
    }
    free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_run(fuzz_one, NULL, data, size);
    return 0;
}
