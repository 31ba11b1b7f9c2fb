// hf_gpt2.h: Hugging Face's GPT-2 (GPT2LMHeadModel) as files, both ways.
//   DIR/model.safetensors  the weights (safetensors.h), fp32 or bf16
//   DIR/config.json        n_layer, n_embd, n_head, n_positions, vocab_size,
//                          gelu_new, layer_norm_epsilon 1e-5, tied embeddings
//   DIR/vocab.json, merges.txt, tokenizer_config.json   GPT-2's BPE files
//                          (written when the run's --tokenizer has them)
// Names: ours (model.h) with "transformer." before them, e.g.
// transformer.h.3.attn.c_attn.weight. Hugging Face's linear layers are Conv1D,
// weight [in, out]: our (out, in) transposed. wte has the real vocabulary's
// rows only (our padded rows are zero). The classifier is wte (tied): no
// lm_head.weight is written, and one read is ignored; so are the attention's
// mask buffers (attn.bias, attn.masked_bias). Names without "transformer."
// (GPT2Model's files, as on the hub's gpt2) are read too.
// Reading: --model is a directory holding model.safetensors, or a
// .safetensors file; n_head comes from config.json beside it (else --n-head).
// Every weight goes through the one mapping of model.h and param_map.h:
// global tensors in the whole model's order, each rank taking its slice.
#ifndef LLMC_HF_GPT2_H
#define LLMC_HF_GPT2_H

#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <sys/stat.h>

#include "file_io.h"      // defines: path_dirname, read_whole_file, AtomicOut, atomic_out_open, ...
#include "json.h"         // defines: JsonValue, json_parse, JSON_OBJECT, json_int64, ...
#include "model.h"        // defines: ParamTensor, GPTConfig, PK_WTE, GPT_MAX_HEADS, ...
#include "modelfile.h"    // defines: ModelFileFetch, MODELFILE_CHUNK_ELEMS
#include "param_map.h"    // defines: param_slice_from_global
#include "safetensors.h"  // defines: StEntry, StTensor, StFile, ST_NAME_MAX, ...

#define HF_WEIGHTS_FILE "model.safetensors"
#define HF_CONFIG_MAX_BYTES (1 << 20)

// A 2-D weight of a layer: stored transposed (Conv1D).
static inline int hf_transposed(const ParamTensor *t) { return t->layer >= 0 && t->ndim == 2; }

// Hugging Face's name and shape of a global tensor (model.h's layout of the whole model).
static inline void hf_entry(const ParamTensor *g, const GPTConfig *c, StEntry *e) {
    snprintf(e->name, sizeof(e->name), "transformer.%s", g->name);
    e->ndim = g->ndim;
    e->shape[0] = hf_transposed(g) ? g->shape[1] : g->kind == PK_WTE ? c->vocab_size : g->shape[0];
    e->shape[1] = hf_transposed(g) ? g->shape[0] : g->shape[1];
}

// Whether path is a Hugging Face model: a directory with model.safetensors, or
// a file whose name ends in .safetensors. *weights: the safetensors file.
static inline int hf_model_weights(const char *path, char weights[PATH_MAX]) {
    struct stat st;
    size_t n = strlen(path);
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        snprintf(weights, PATH_MAX, "%.*s/" HF_WEIGHTS_FILE, PATH_MAX - 20, path);
        return access(weights, F_OK) == 0;
    }
    snprintf(weights, PATH_MAX, "%.*s", PATH_MAX - 1, path);
    return n > 12 && strcmp(path + n - 12, ".safetensors") == 0;
}

// config.json next to the weights: its n_head (0 when there is none), and its
// other fields checked against the tensors' shape and what the model computes.
static inline int hf_config_heads(const char *weights, const GPTConfig *c) {
    char dir[PATH_MAX], path[PATH_MAX + 16];
    path_dirname(weights, dir);
    snprintf(path, sizeof(path), "%s/config.json", dir);
    if (access(path, F_OK) != 0) return 0;
    size_t len;
    char *text = (char *)read_whole_file(path, "--model", &len);
    if (len > HF_CONFIG_MAX_BYTES) die_usage("'%s' is over %d bytes", path, HF_CONFIG_MAX_BYTES);
    char err[256];
    JsonValue *root = json_parse(text, len, 4096, err, sizeof(err));
    if (!root || root->type != JSON_OBJECT) die_usage("'%s' is not a JSON object (%s)", path, err);
    int64_t heads = 0;
    if (!json_int64(json_get(root, "n_head"), 1, GPT_MAX_HEADS, &heads)) die_usage("'%s': no valid n_head", path);
    struct { const char *key; int want; } dims[] = {{"n_layer", c->num_layers}, {"n_embd", c->channels},
                                                    {"vocab_size", c->vocab_size}, {"n_positions", c->max_seq_len}};
    for (size_t i = 0; i < sizeof(dims) / sizeof(dims[0]); i++) {
        int64_t v;
        const JsonValue *jv = json_get(root, dims[i].key);
        if (jv && (!json_int64(jv, 0, INT32_MAX, &v) || v != dims[i].want))
            die_usage("'%s': %s is %s, the weights have %d", path, dims[i].key, jv->text ? jv->text : "not a number",
                      dims[i].want);
    }
    const JsonValue *act = json_get(root, "activation_function");
    if (act && (act->type != JSON_STRING || (strcmp(act->text, "gelu_new") != 0 &&
                                             strcmp(act->text, "gelu_pytorch_tanh") != 0)))
        die_usage("'%s': activation_function '%s': this model computes GELU's tanh form (gelu_new)", path,
                  act->type == JSON_STRING ? act->text : "?");
    double eps;
    const JsonValue *je = json_get(root, "layer_norm_epsilon");
    if (je && (!json_double(je, &eps) || fabs(eps - 1e-5) > 1e-9))
        die_usage("'%s': layer_norm_epsilon %s: this model's LayerNorm uses 1e-5", path, je->text ? je->text : "?");
    json_free(root);
    free(text);
    return (int)heads;
}

// A tensor of sf by our name, with or without "transformer.".
static inline const StTensor *hf_find(const StFile *sf, const ParamTensor *g) {
    char name[ST_NAME_MAX];
    snprintf(name, sizeof(name), "transformer.%s", g->name);
    const StTensor *t = st_find(sf, name);
    return t ? t : st_find(sf, g->name);
}

// A tensor a reader skips: the tied classifier, the attention's mask buffers.
static inline int hf_ignored(const char *name) {
    size_t n = strlen(name);
    return strcmp(name, "lm_head.weight") == 0 || (n >= 10 && strcmp(name + n - 10, ".attn.bias") == 0) ||
           (n >= 17 && strcmp(name + n - 17, ".attn.masked_bias") == 0);
}

// The model's shape from the weights' header (and config.json's n_head, or
// n_head_flag where there is none); dies naming the file when it is not a GPT-2.
static inline void hf_read_config(const char *weights, int n_head_flag, GPTConfig *cfg) {
    StFile sf;
    st_open(&sf, weights, "--model");
    const StTensor *wte = st_find(&sf, "transformer.wte.weight"), *wpe = st_find(&sf, "transformer.wpe.weight");
    if (!wte) wte = st_find(&sf, "wte.weight");
    if (!wpe) wpe = st_find(&sf, "wpe.weight");
    if (!wte || !wpe || wte->ndim != 2 || wpe->ndim != 2 || wte->shape[1] != wpe->shape[1])
        die_usage("'%s': no GPT-2 embeddings (transformer.wte.weight [V, C] and transformer.wpe.weight [T, C])", weights);
    int layers = 0;
    for (int i = 0; i < sf.n; i++) {
        const char *n = sf.tensors[i].name;
        if (strncmp(n, "transformer.", 12) == 0) n += 12;
        char *end;
        long l = strncmp(n, "h.", 2) == 0 ? strtol(n + 2, &end, 10) : -1;  // (an overflow: LONG_MAX)
        if (l >= 0 && *end == '.' && l >= layers) layers = l >= GPT_MAX_LAYERS ? GPT_MAX_LAYERS + 1 : (int)l + 1;
    }
    memset(cfg, 0, sizeof(*cfg));
    cfg->vocab_size = (int)(wte->shape[0] < INT_MAX ? wte->shape[0] : INT_MAX);
    cfg->channels = (int)(wte->shape[1] < INT_MAX ? wte->shape[1] : INT_MAX);
    cfg->max_seq_len = (int)(wpe->shape[0] < INT_MAX ? wpe->shape[0] : INT_MAX);
    cfg->num_layers = layers;
    cfg->num_heads = 1;
    cfg->padded_vocab_size = cfg->vocab_size;
    const char *problem = gpt_config_problem(cfg);
    if (problem) die_usage("'%s': not a model this program runs (%s)", weights, problem);
    cfg->padded_vocab_size = pad_vocab(cfg->vocab_size);
    st_close(&sf);
    int heads = hf_config_heads(weights, cfg);
    if (!heads && !n_head_flag)
        die_usage("'%s': the number of heads is in config.json, and there is none beside it: give --n-head", weights);
    if (heads && n_head_flag && heads != n_head_flag)
        die_usage("--n-head %d disagrees with the model's config.json (%d)", n_head_flag, heads);
    cfg->num_heads = heads ? heads : n_head_flag;
    problem = gpt_config_problem(cfg);
    if (problem) die_usage("'%s': not a model this program runs (%s)", weights, problem);
}

// Loads the safetensors weights of a model of shape pl->cfg into params (the
// flat buffer of pl: the whole model, or what a rank holds of it). Every GPT-2
// tensor must be there at its shape; others than the tied lm_head and the
// attention's mask buffers are refused.
static inline void hf_load(const char *weights, const ParamLayout *pl, float *params) {
    StFile sf;
    st_open(&sf, weights, "--model");
    ParamLayout global;
    param_layout_init(&global, &pl->cfg);
    int used = 0;
    for (int i = 0; i < sf.n; i++) used += hf_ignored(sf.tensors[i].name);
    int64_t most = 0;
    for (int k = 0; k < global.num_tensors; k++) most = global.tensors[k].numel > most ? global.tensors[k].numel : most;
    float *values = (float *)mallocCheck(sizeof(float) * (size_t)most), *file = (float *)mallocCheck(sizeof(float) * (size_t)most);
    memset(params, 0, sizeof(float) * (size_t)pl->num_elements);
    for (int k = 0; k < global.num_tensors; k++) {
        const ParamTensor *g = &global.tensors[k];
        StEntry want;
        hf_entry(g, &pl->cfg, &want);
        const StTensor *t = hf_find(&sf, g);
        if (!t) die_usage("'%s': no tensor %s", weights, want.name);
        used++;
        if (t->ndim != want.ndim || t->shape[0] != want.shape[0] || (want.ndim == 2 && t->shape[1] != want.shape[1])) {
            char have[64], expect[64];
            st_shape_text(t->ndim, t->shape, have, sizeof(have));
            st_shape_text(want.ndim, want.shape, expect, sizeof(expect));
            die_usage("'%s': %s has shape %s, expected %s", weights, t->name, have, expect);
        }
        int at = pl->tensor_at[g->id];
        if (at < 0) continue;  // (another rank's)
        st_read_f32(&sf, t, file);
        if (hf_transposed(g)) {  // [in, out] -> (out, in)
            int64_t R = g->shape[0], K = g->shape[1];
            for (int64_t r = 0; r < R; r++)
                for (int64_t c = 0; c < K; c++) values[r * K + c] = file[c * R + r];
        } else {
            memcpy(values, file, sizeof(float) * (size_t)t->numel);
            memset(values + t->numel, 0, sizeof(float) * (size_t)(g->numel - t->numel));  // wte's padded rows
        }
        const ParamTensor *mine = &pl->tensors[at];
        if (mine->split == SPLIT_NONE) memcpy(params + mine->offset, values, sizeof(float) * (size_t)g->numel);
        else param_slice_from_global(pl, &global, mine, values, params);
    }
    for (int i = 0; used != sf.n && i < sf.n; i++) {  // (a name of no GPT-2 tensor: say which)
        int known = hf_ignored(sf.tensors[i].name);
        for (int k = 0; k < global.num_tensors && !known; k++) known = hf_find(&sf, &global.tensors[k]) == &sf.tensors[i];
        if (!known) die_usage("'%s': tensor '%s' is not part of a GPT-2 of this shape", weights, sf.tensors[i].name);
    }
    free(values);
    free(file);
    param_layout_free(&global);
    st_close(&sf);
}

// ---------------------------------------------------------------------------
// writing

// dir/name, written atomically from a printf format (errors surface at the commit).
static inline void hf_write_text(const char *dir, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static inline void hf_write_text(const char *dir, const char *name, const char *fmt, ...) {
    char path[PATH_MAX + 64];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    AtomicOut out;
    atomic_out_open(&out, path);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(out.f, fmt, ap);
    va_end(ap);
    atomic_out_commit(&out);
}

// config.json for transformers' GPT2LMHeadModel. eot: the end-of-text id (bos and eos).
static inline void hf_write_config(const char *dir, const GPTConfig *c, int eot, StDtype dtype) {
    hf_write_text(dir, "config.json",
                  "{\n  \"architectures\": [\"GPT2LMHeadModel\"],\n  \"model_type\": \"gpt2\",\n"
                  "  \"vocab_size\": %d,\n  \"n_positions\": %d,\n  \"n_ctx\": %d,\n  \"n_embd\": %d,\n"
                  "  \"n_layer\": %d,\n  \"n_head\": %d,\n  \"n_inner\": null,\n"
                  "  \"activation_function\": \"gelu_new\",\n  \"layer_norm_epsilon\": 1e-05,\n"
                  "  \"resid_pdrop\": 0.0,\n  \"embd_pdrop\": 0.0,\n  \"attn_pdrop\": 0.0,\n"
                  "  \"initializer_range\": 0.02,\n  \"scale_attn_weights\": true,\n  \"use_cache\": true,\n"
                  "  \"tie_word_embeddings\": true,\n  \"bos_token_id\": %d,\n  \"eos_token_id\": %d,\n"
                  "  \"torch_dtype\": \"%s\"\n}\n",
                  c->vocab_size, c->max_seq_len, c->max_seq_len, c->channels, c->num_layers, c->num_heads, eot, eot,
                  dtype == ST_BF16 ? "bfloat16" : "float32");
}

// GPT-2's BPE files from tokenizer_dir (encoder.json + vocab.bpe, or vocab.json
// + merges.txt) as vocab.json, merges.txt and tokenizer_config.json in dir.
// Returns 0 (nothing written) when tokenizer_dir has no such pair.
static inline int hf_write_tokenizer(const char *dir, const char *tokenizer_dir, int max_len) {
    static const char *const pairs[2][2] = {{"encoder.json", "vocab.bpe"}, {"vocab.json", "merges.txt"}};
    static const char *const outs[2] = {"vocab.json", "merges.txt"};
    char src[PATH_MAX + 32], dst[PATH_MAX + 32];
    for (int p = 0; p < 2; p++) {
        snprintf(src, sizeof(src), "%s/%s", tokenizer_dir, pairs[p][1]);
        if (access(src, R_OK) != 0) continue;
        for (int f = 0; f < 2; f++) {
            size_t len;
            snprintf(src, sizeof(src), "%s/%s", tokenizer_dir, pairs[p][f]);
            uint8_t *bytes = read_whole_file(src, "--tokenizer", &len);
            snprintf(dst, sizeof(dst), "%s/%s", dir, outs[f]);
            write_file_atomic(dst, bytes, len);
            free(bytes);
        }
        hf_write_text(dir, "tokenizer_config.json",
                      "{\n  \"tokenizer_class\": \"GPT2Tokenizer\",\n  \"model_max_length\": %d,\n"
                      "  \"bos_token\": \"<|endoftext|>\",\n  \"eos_token\": \"<|endoftext|>\",\n"
                      "  \"unk_token\": \"<|endoftext|>\",\n  \"add_prefix_space\": false\n}\n", max_len);
        return 1;
    }
    return 0;
}

typedef struct {
    AtomicOut *out;  // NULL: this rank only serves fetches
    ModelFileFetch fetch;
    void *ctx;
    StDtype dtype;
    float *buf, *tbuf;  // (the largest transposed tensor, or a chunk) on the writer; NULL elsewhere
    uint16_t *half;
} HfWriter;

// n fp32 values in the file's dtype.
static inline void hf_write_values(HfWriter *w, const float *v, int64_t n) {
    if (w->dtype == ST_F32) {
        atomic_out_write(w->out, v, sizeof(float) * (size_t)n);
        return;
    }
    for (int64_t i = 0; i < n; i++) w->half[i] = st_f32_to_bf16(v[i]);
    atomic_out_write(w->out, w->half, sizeof(uint16_t) * (size_t)n);
}

// Global elements [lo, hi) into dst (NULL: this rank only serves), a fetch's chunk at a time.
static inline void hf_fetch(HfWriter *w, int64_t lo, int64_t hi, float *dst) {
    for (int64_t a = lo; a < hi; a += MODELFILE_CHUNK_ELEMS)
        w->fetch(w->ctx, a, hi - a < MODELFILE_CHUNK_ELEMS ? hi : a + MODELFILE_CHUNK_ELEMS, dst ? dst + (a - lo) : NULL);
}

// One tensor: a Conv1D weight fetched whole and transposed, any other in
// chunks (wte's real rows only).
static inline void hf_write_tensor(HfWriter *w, const ParamTensor *g, const GPTConfig *c) {
    if (hf_transposed(g)) {
        hf_fetch(w, g->offset, g->offset + g->numel, w->buf);
        if (!w->out) return;
        int64_t R = g->shape[0], K = g->shape[1];
        for (int64_t k = 0; k < K; k++)
            for (int64_t r = 0; r < R; r++) w->tbuf[k * R + r] = w->buf[r * K + k];
        hf_write_values(w, w->tbuf, g->numel);
        return;
    }
    int64_t n = g->kind == PK_WTE ? (int64_t)c->vocab_size * g->shape[1] : g->numel;
    for (int64_t lo = g->offset, end = g->offset + n; lo < end; lo += MODELFILE_CHUNK_ELEMS) {
        int64_t hi = end - lo < MODELFILE_CHUNK_ELEMS ? end : lo + MODELFILE_CHUNK_ELEMS;
        hf_fetch(w, lo, hi, w->buf);
        if (w->out) hf_write_values(w, w->buf, hi - lo);
    }
}

// Writes dir/model.safetensors and dir/config.json (and GPT-2's tokenizer files
// from tokenizer_dir when it has them; "": none), each atomically, fetching the
// weights (global order, pl: the whole model's layout) as modelfile.h's
// streamed writer does: every rank that serves fetches calls it in the same
// order; dir is NULL on all but the writer. eot: the end-of-text id.
static inline void hf_save_streamed(const char *dir, const ParamLayout *pl, StDtype dtype, int eot,
                                    const char *tokenizer_dir, ModelFileFetch fetch, void *ctx) {
    const GPTConfig *c = &pl->cfg;
    int64_t most = MODELFILE_CHUNK_ELEMS;
    for (int k = 0; k < pl->num_tensors; k++)
        if (hf_transposed(&pl->tensors[k]) && pl->tensors[k].numel > most) most = pl->tensors[k].numel;
    HfWriter w = {NULL, fetch, ctx, dtype, NULL, NULL, NULL};
    AtomicOut out;
    if (dir) {
        char path[PATH_MAX + 32];
        snprintf(path, sizeof(path), "%s/" HF_WEIGHTS_FILE, dir);
        StEntry *e = (StEntry *)mallocCheck(sizeof(StEntry) * (size_t)pl->num_tensors);
        for (int k = 0; k < pl->num_tensors; k++) hf_entry(&pl->tensors[k], c, &e[k]);
        size_t hlen;
        char *header = st_header(e, pl->num_tensors, dtype, &hlen);
        atomic_out_open(&out, path);
        atomic_out_write(&out, header, hlen);
        free(header);
        free(e);
        w.out = &out;
        w.buf = (float *)mallocCheck(sizeof(float) * (size_t)most);
        w.tbuf = (float *)mallocCheck(sizeof(float) * (size_t)most);
        w.half = (uint16_t *)mallocCheck(sizeof(uint16_t) * (size_t)most);
    }
    for (int k = 0; k < pl->num_tensors; k++) hf_write_tensor(&w, &pl->tensors[k], c);
    if (!dir) return;
    atomic_out_commit(&out);
    free(w.buf);
    free(w.tbuf);
    free(w.half);
    hf_write_config(dir, c, eot, dtype);
    if (tokenizer_dir[0]) hf_write_tokenizer(dir, tokenizer_dir, c->max_seq_len);
}

#endif  // LLMC_HF_GPT2_H
