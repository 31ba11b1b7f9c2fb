// train_setup.h: trainer set-up shared by train_gpt.c and train_gpt.cu: the
// model shape from --model (a preset or an llm.c model file) and the explicit
// shape flags, and the output directory.
#ifndef LLMC_TRAIN_SETUP_H
#define LLMC_TRAIN_SETUP_H

#include <sys/stat.h>
#include <unistd.h>

#include "model.h"
#include "modelfile.h"
#include "train_options.h"

// The model shape: a preset, or the header of a model file, then any explicit
// overrides (which a model file must agree with).
static GPTConfig train_build_config(const TrainOptions *o, int *from_file) {
    GPTConfig cfg;
    *from_file = !gpt_config_preset(o->model, &cfg);
    if (*from_file) {
        if (access(o->model, R_OK) != 0)
            die_usage("--model: '%s' is neither a preset (d12|d24|d36|d48) nor a readable file", o->model);
        modelfile_read_config(o->model, &cfg);
    }
    struct { int value; int *field; const char *flag; } overrides[] = {
        {o->n_layer, &cfg.num_layers, "--n-layer"}, {o->n_embd, &cfg.channels, "--n-embd"},
        {o->n_head, &cfg.num_heads, "--n-head"}, {o->vocab_size, &cfg.vocab_size, "--vocab-size"},
        {o->max_seq_len, &cfg.max_seq_len, "--max-seq-len"},
    };
    for (size_t i = 0; i < sizeof(overrides) / sizeof(overrides[0]); i++) {
        if (overrides[i].value == 0) continue;
        if (*from_file && overrides[i].value != *overrides[i].field)
            die_usage("%s %d disagrees with the model file '%s' (%d)", overrides[i].flag, overrides[i].value, o->model,
                      *overrides[i].field);
        *overrides[i].field = overrides[i].value;
    }
    if (!*from_file) cfg.padded_vocab_size = pad_vocab(cfg.vocab_size);
    const char *problem = gpt_config_problem(&cfg);
    if (problem) die_usage("bad model shape: %s", problem);
    return cfg;
}

static void train_make_dir(const char *path) {
    struct stat st;
    if (mkdir(path, 0755) != 0 && (stat(path, &st) != 0 || !S_ISDIR(st.st_mode)))
        die_usage("--out-dir: cannot create directory '%s'", path);
}

#endif  // LLMC_TRAIN_SETUP_H
