// model_source.h: what --model names, for both trainers and the planner: a
// preset (the trainer initialises its weights from --seed), an llm.c model
// file (modelfile.h), a Hugging Face model (hf_gpt2.h) or a checkpoint
// (ckpt_reader.h: a step directory, or a --ckpt-dir, whose newest
// complete checkpoint it takes). The model's shape (with the explicit shape
// flags) and this rank's part of the weights. A checkpoint gives its fp32
// weights ("params"; the AdamW moments, data position and kept flags are not
// used: this starts a model, a --resume continues a run), read from the files
// of whatever layout wrote them onto this rank's layout.
#ifndef LLMC_MODEL_SOURCE_H
#define LLMC_MODEL_SOURCE_H

#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt_reader.h"    // defines: CkptReader, CKPT_ERR_MAX, ckpt_manifest_open, ckpt_check_tensor_table, ...
#include "hf_gpt2.h"        // defines: hf_model_weights, hf_read_config, hf_load
#include "model.h"          // defines: GPTConfig, gpt_config_problem, ParamLayout, param_layout_init, ...
#include "modelfile.h"      // defines: modelfile_read_config, modelfile_load
#include "train_options.h"  // defines: TrainOptions

// Whether path is a checkpoint: a directory holding manifest.json (a step
// directory, *step_dir = path), or a checkpoint directory holding step
// directories of its own (ckpt_dir.h; *step_dir = the newest).
static int model_checkpoint_dir(const char *path, char step_dir[CKPT_PATH_MAX]) {
    char manifest[CKPT_FILE_MAX];
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode) || strlen(path) >= CKPT_PATH_MAX) return 0;
    snprintf(manifest, sizeof(manifest), "%s/manifest.json", path);
    if (access(manifest, F_OK) == 0) {
        snprintf(step_dir, CKPT_PATH_MAX, "%s", path);
        return 1;
    }
    int n = 0;
    int64_t *steps = ckpt_list_steps(path, &n);
    if (n > 0) ckpt_step_dir(step_dir, CKPT_PATH_MAX, path, steps[0], "");
    free(steps);
    return n > 0;
}

// The checkpoint dir's manifest, checked against itself (format, seal, step,
// a model shape within model.h's bounds, its tensor table this program's
// layout of that shape): r open, *cfg its model. Bad input: one line, exit 2.
static void model_checkpoint_open(CkptReader *r, const char *dir, GPTConfig *cfg, char err[CKPT_ERR_MAX]) {
    int ok = ckpt_manifest_open(r, dir, cfg, err);
    const char *problem = ok ? gpt_config_problem(cfg) : NULL;
    if (ok && !problem) {
        char path[CKPT_FILE_MAX];
        snprintf(path, sizeof(path), "%s/manifest.json", dir);
        ParamLayout global;
        param_layout_init(&global, cfg);
        ok = ckpt_check_tensor_table(r, path, &global);
        param_layout_free(&global);
    }
    if (ok && !problem) return;
    ckpt_reader_close(r);
    if (problem) die_usage("--model: %s/manifest.json: bad model shape: %s", dir, problem);
    die_usage("--model: %s", err);
}

// This rank's part (pl: its layout) of the checkpoint dir's fp32 weights.
static void model_checkpoint_load(const char *dir, const ParamLayout *pl, float *params) {
    CkptReader r;
    char err[CKPT_ERR_MAX];
    GPTConfig cfg;
    model_checkpoint_open(&r, dir, &cfg, err);
    if (memcmp(&cfg, &pl->cfg, sizeof(cfg)) != 0) {
        ckpt_reader_close(&r);
        die_usage("--model: %s/manifest.json: model shape differs from the configured model", dir);
    }
    memset(params, 0, sizeof(float) * (size_t)pl->num_elements);
    ParamMap map;
    param_map_init(&map, pl);
    CkptTargets t;  // the weights alone: no piece of the moments
    memset(&t, 0, sizeof(t));
    t.map = &map;
    t.hold[0] = ckpt_one_piece(0, pl->num_elements);
    t.dst[0] = params;
    int ok = ckpt_read_tensors(&r, &t, &cfg);
    ckpt_pieces_free(&t.hold[0]);
    param_map_free(&map);
    ckpt_reader_close(&r);
    if (!ok) die_usage("--model: %s", err);
}

// The model shape: a preset, or what --model's files say (llm.c's header, a
// Hugging Face model's safetensors and config.json, a checkpoint's manifest),
// then any explicit overrides (which a model file must agree with). A
// checkpoint directory (--ckpt-dir) becomes its newest step directory in
// o->model, so the shape and the weights come from one checkpoint.
static GPTConfig train_build_config(TrainOptions *o, int *from_file) {
    GPTConfig cfg;
    *from_file = !gpt_config_preset(o->model, &cfg);
    if (*from_file) {  // (a file may differ between nodes: each rank reports its own errors)
        int quiet = die_usage_quiet;
        die_usage_quiet = 0;
        char weights[PATH_MAX], step_dir[CKPT_PATH_MAX];
        struct stat st;
        if (access(o->model, R_OK) != 0)
            die_usage("--model: '%s' is neither a preset (d12|d24|d36|d48) nor a readable file or directory", o->model);
        if (hf_model_weights(o->model, weights)) {
            hf_read_config(weights, o->n_head, &cfg);
        } else if (model_checkpoint_dir(o->model, step_dir)) {
            if (strlen(step_dir) >= sizeof(o->model)) die_usage("--model: '%s' is too long a path", step_dir);
            snprintf(o->model, sizeof(o->model), "%.*s", (int)sizeof(o->model) - 1, step_dir);
            CkptReader r;
            char err[CKPT_ERR_MAX];
            model_checkpoint_open(&r, o->model, &cfg, err);
            ckpt_reader_close(&r);
        } else if (stat(o->model, &st) == 0 && S_ISDIR(st.st_mode)) {
            die_usage("--model: the directory '%s' holds no model: neither a Hugging Face model (model.safetensors), "
                      "a checkpoint (manifest.json) nor a checkpoint directory (step_NNNNNNNN/)", o->model);
        } else {
            modelfile_read_config(o->model, &cfg);
        }
        die_usage_quiet = quiet;
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

// This rank's part of the weights (pl: its layout) from --model (after
// train_build_config): a Hugging Face model, a checkpoint or an llm.c model file.
static void train_load_weights(const TrainOptions *o, const ParamLayout *pl, float *params) {
    char weights[PATH_MAX], step_dir[CKPT_PATH_MAX];
    if (hf_model_weights(o->model, weights)) hf_load(weights, pl, params);
    else if (model_checkpoint_dir(o->model, step_dir)) model_checkpoint_load(step_dir, pl, params);
    else modelfile_load(o->model, pl, params);
}

#endif  // LLMC_MODEL_SOURCE_H
