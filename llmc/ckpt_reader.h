// ckpt_reader.h: the strict checkpoint reader, which resumes a run on any
// layout: a manifest parsed within its limits and checked against itself
// (format, version, seal, step) and against the run (model, kept flags,
// batch, tensor table, data position and data set); then each data file's
// ranges (of the writing rank's buffer, ckpt_format.h) mapped onto the global
// order and scattered into what this rank holds, every element from exactly
// one file, each file's size and CRC32C checked. Errors are one message
// naming the file, and say whether the checkpoint is damaged (--resume auto
// skips it for an older one) or of another run.
#ifndef LLMC_CKPT_READER_H
#define LLMC_CKPT_READER_H

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#ifdef LLMC_ZSTD
#include <zstd.h>
#endif

#include "ckpt_dir.h"       // defines: CKPT_PATH_MAX, CKPT_FILE_MAX, CKPT_WHY_MAX, ckpt_parse_step_name, ...
#include "ckpt_format.h"    // defines: CkptRun, CkptPoint, CkptPieces, CkptLayout, ckpt_layout_params, ...
#include "ckpt_io.h"        // defines: CKPT_ERR_MAX, CKPT_CHUNK, ckpt_slurp
#include "ckpt_manifest.h"  // defines: CKPT_MANIFEST_MAX_BYTES, ckpt_seal_crc, ckpt_tiling_problem, ...
#include "crc32c.h"         // defines: crc32c_update
#include "dataloader.h"     // defines: DataLoader, DataLoaderState, DataSetId, dataloader_identity
#include "json.h"           // defines: JsonValue, json_parse, json_get, json_int64, ...
#include "model.h"          // defines: GPTConfig, ParamLayout, ParamTensor, param_layout_init, ...
#include "param_map.h"      // defines: ParamMap, param_map_runs, param_map_init, param_map_free
#include "utils.h"          // defines: mallocCheck, array_room

// A checkpoint's manifest, parsed and checked against this run. Errors go to
// err (a message naming the file); damaged (vs. conflicting) says whether
// --resume auto may skip it for an older one.
typedef struct {
    char dir[CKPT_PATH_MAX];
    JsonValue *root;
    int version;
    CkptPoint point;
    DataSetId data_set;                // its training data's identity (version 3)
    char data_change[CKPT_ERR_MAX];    // how this run's data differs, accepted (--resume-data-changed); "": none
    char *err;
    int damaged;
} CkptReader;

static inline int ckpt_reader_fail(CkptReader *r, int damaged, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static inline int ckpt_reader_fail(CkptReader *r, int damaged, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->err, CKPT_ERR_MAX, fmt, ap);
    va_end(ap);
    r->damaged = damaged;
    return 0;
}


static inline int ckpt_get_int(CkptReader *r, const JsonValue *obj, const char *key, int64_t lo, int64_t hi,
                               int64_t *out) {
    if (json_int64(json_get(obj, key), lo, hi, out)) return 1;
    return ckpt_reader_fail(r, 1, "%s/manifest.json: '%s' is missing or not an integer in [%lld, %lld]", r->dir, key,
                            (long long)lo, (long long)hi);
}

// The ranges the 'files' of a manifest list.
static inline int64_t ckpt_count_ranges(const JsonValue *root) {
    const JsonValue *files = json_get(root, "files");
    int64_t n = 0;
    for (int i = 0; files && files->type == JSON_ARRAY && i < files->count; i++) {
        const JsonValue *jr = json_get(&files->items[i], "ranges");
        n += jr ? jr->count : 0;
    }
    return n;
}

// The manifest's text parsed into r->root within the limits (bytes, values,
// ranges: ckpt_manifest.h), its format and version checked, and (version 3)
// its seal. Returns 1, or 0 with r->err.
static inline int ckpt_reader_parse(CkptReader *r, const char *path) {
    struct stat st;
    if (stat(path, &st) == 0 && S_ISREG(st.st_mode) && (size_t)st.st_size > CKPT_MANIFEST_MAX_BYTES)
        return ckpt_reader_fail(r, 1, "%s: %lld bytes, more than the %zu a manifest may have", path,
                                (long long)st.st_size, CKPT_MANIFEST_MAX_BYTES);
    size_t len;
    char *text = ckpt_slurp(path, CKPT_MANIFEST_MAX_BYTES, &len);
    if (!text) return ckpt_reader_fail(r, 1, "%s: cannot read it (%s): not a complete checkpoint", path, strerror(errno));
    char jerr[256];
    r->root = json_parse(text, len, CKPT_MANIFEST_MAX_VALUES, jerr, sizeof(jerr));
    int64_t version = 0, sealed = 0, nranges = 0;
    const JsonValue *root = r->root, *fmt = json_get(root, "format");
    int ok = 1, found;
    if (!root) ok = ckpt_reader_fail(r, 1, "%s: %s", path, jerr);
    else if ((nranges = ckpt_count_ranges(root)) > CKPT_MAX_RANGES)
        ok = ckpt_reader_fail(r, 1, "%s: its 'files' list %lld 'ranges', more than the %d a checkpoint may have", path,
                              (long long)nranges, CKPT_MAX_RANGES);
    else if (!fmt || fmt->type != JSON_STRING || strcmp(fmt->text, CKPT_FORMAT) != 0)
        ok = ckpt_reader_fail(r, 1, "%s: not an %s manifest", path, CKPT_FORMAT);
    else if (!ckpt_get_int(r, root, "version", 0, INT32_MAX, &version)) ok = 0;
    else if (version < 1 || version > CKPT_VERSION)
        ok = ckpt_reader_fail(r, 0, "%s: format version %lld, this program reads versions 1 to %d", path,
                              (long long)version, CKPT_VERSION);
    else if (version >= 3 && (strcmp(root->items[root->count - 1].key, CKPT_SEAL_KEY) != 0 ||
                              !json_int64(&root->items[root->count - 1], 0, UINT32_MAX, &sealed)))
        ok = ckpt_reader_fail(r, 1, "%s: '%s' is missing, not an integer in [0, %u] or not the last member", path,
                              CKPT_SEAL_KEY, UINT32_MAX);
    else if (version >= 3) {
        uint32_t crc = ckpt_seal_crc(text, len, &found);
        if (!found || crc != (uint32_t)sealed)
            ok = ckpt_reader_fail(r, 1, "%s: its CRC32C %u does not match its '%s' %lld (damaged or edited)", path,
                                  crc, CKPT_SEAL_KEY, (long long)sealed);
    }
    free(text);
    r->version = (int)version;
    return ok;
}

// The three states' names, shapes and dtypes (each the flat buffer of the
// model whose whole layout is pl, in fp32) and the table of parameters
// (names, shapes, offsets) against pl.
static inline int ckpt_check_tensor_table(CkptReader *r, const char *path, const ParamLayout *pl) {
    const JsonValue *root = r->root, *ts = json_get(root, "tensors");
    if (!ts || ts->type != JSON_ARRAY || ts->count != CKPT_STATES)
        return ckpt_reader_fail(r, 1, "%s: 'tensors' is not a list of %d", path, CKPT_STATES);
    int64_t N = pl->num_elements, n;
    for (int s = 0; s < CKPT_STATES; s++) {
        const JsonValue *name = json_get(&ts->items[s], "name"), *shape = json_get(&ts->items[s], "shape");
        const JsonValue *dtype = json_get(&ts->items[s], "dtype");
        if (!name || name->type != JSON_STRING || strcmp(name->text, CKPT_STATE_NAMES[s]) != 0)
            return ckpt_reader_fail(r, 1, "%s: 'tensors' entry %d is not named '%s'", path, s, CKPT_STATE_NAMES[s]);
        if (!shape || shape->type != JSON_ARRAY || shape->count != 1 || !json_int64(&shape->items[0], N, N, &n))
            return ckpt_reader_fail(r, 1, "%s: 'tensors' entry %d (%s) has not the 'shape' [%lld] of this model's flat "
                                    "buffer", path, s, CKPT_STATE_NAMES[s], (long long)N);
        if (!dtype || dtype->type != JSON_STRING || strcmp(dtype->text, "f32") != 0)
            return ckpt_reader_fail(r, 1, "%s: 'tensors' entry %d (%s) has not the 'dtype' \"f32\"", path, s,
                                    CKPT_STATE_NAMES[s]);
    }
    // the tensor table: the flat order this program lays out
    const JsonValue *params = json_get(root, "parameters");
    if (!params || params->type != JSON_ARRAY || params->count != pl->num_tensors)
        return ckpt_reader_fail(r, 1, "%s: 'parameters' is not the table of %d tensors", path, pl->num_tensors);
    for (int i = 0; i < params->count; i++) {
        const ParamTensor *pt = &pl->tensors[i];
        const JsonValue *name = json_get(&params->items[i], "name"), *shape = json_get(&params->items[i], "shape");
        int64_t off, d0, d1;
        if (!name || name->type != JSON_STRING || strcmp(name->text, pt->name) != 0 ||
            !json_int64(json_get(&params->items[i], "offset"), 0, INT64_MAX, &off) || off != pt->offset)
            return ckpt_reader_fail(r, 0, "%s: parameter %d is not %s at offset %lld of the flat order", path, i,
                                    pt->name, (long long)pt->offset);
        if (!shape || shape->type != JSON_ARRAY || shape->count != 2 ||
            !json_int64(&shape->items[0], pt->shape[0], pt->shape[0], &d0) ||
            !json_int64(&shape->items[1], pt->shape[1], pt->shape[1], &d1))
            return ckpt_reader_fail(r, 1, "%s: parameter %d (%s) has not the 'shape' [%lld, %lld] of this model's", path,
                                    i, pt->name, (long long)pt->shape[0], (long long)pt->shape[1]);
    }
    return 1;
}

// The batch and the tensors against this run: the total batch (kept), the
// writer's batch plan (B x T x data ranks x accumulation = the total: its
// batches of plan[0] samples, plan[1] a step, of T plan[2]), the tensor table.
static inline int ckpt_check_model_tables(CkptReader *r, const char *path, const CkptRun *run, int64_t plan[3]) {
    const JsonValue *root = r->root, *batch = json_get(root, "batch");
    int64_t total = 0, B = 0, T = 0, accum = 0, dp = 0, tokens;
    if (!ckpt_get_int(r, batch, "total_tokens", 1, INT64_MAX, &total)) return 0;
    if (total != run->total_tokens)
        return ckpt_reader_fail(r, 0, "%s: written with a total batch of %lld tokens, this run has %lld: resume "
                                "with --total-batch-tokens %lld (a multiple of batch-size x seq-len x ranks)", path,
                                (long long)total, run->total_tokens, (long long)total);
    if (!ckpt_get_int(r, batch, "B", 1, INT32_MAX, &B) || !ckpt_get_int(r, batch, "T", 1, INT32_MAX, &T) ||
        !ckpt_get_int(r, batch, "accum", 1, INT32_MAX, &accum) ||
        !ckpt_get_int(r, json_get(root, "layout"), "dp", 1, INT32_MAX, &dp))
        return 0;
    if (__builtin_mul_overflow(B * T, dp, &tokens) || __builtin_mul_overflow(tokens, accum, &tokens) || tokens != total)
        return ckpt_reader_fail(r, 1, "%s: 'batch' B %lld x T %lld x 'layout' dp %lld x accum %lld is not its "
                                "total_tokens %lld", path, (long long)B, (long long)T, (long long)dp,
                                (long long)accum, (long long)total);
    plan[0] = B * dp, plan[1] = total / T, plan[2] = T;
    return ckpt_check_tensor_table(r, path, run->pl);
}

// The data position (against the step and the writer's batch plan, as
// ckpt_check_model_tables gives it), the data set's identity (version 3) and
// the sampling RNG into r.
static inline int ckpt_read_position(CkptReader *r, const char *path, const int64_t plan[3]) {
    const JsonValue *root = r->root, *data = json_get(root, "data");
    int64_t epoch = 0, sample = 0, dropped = 0, num_samples = 0, T = 0, shuffle = 0;
    uint64_t seed;
    if (!ckpt_get_int(r, data, "epoch", 0, INT64_MAX / 2, &epoch) ||
        !ckpt_get_int(r, data, "sample", 0, INT64_MAX / 2, &sample) ||
        (r->version >= 3 && !ckpt_get_int(r, data, "dropped", -INT64_MAX / 2, INT64_MAX / 2, &dropped)) ||
        !ckpt_get_int(r, data, "num_samples", 1, INT64_MAX / 2, &num_samples) ||
        !ckpt_get_int(r, data, "T", 1, INT32_MAX, &T) || !ckpt_get_int(r, data, "shuffle", 0, 1, &shuffle))
        return 0;
    if (!json_u64_string(json_get(data, "seed"), &seed))
        return ckpt_reader_fail(r, 1, "%s: data 'seed' is missing or not a decimal string", path);
    if (T != plan[2]) return ckpt_reader_fail(r, 1, "%s: data 'T' %lld is not the batch's %lld", path, (long long)T,
                                              (long long)plan[2]);
    DataLoaderState ds = {epoch, sample, dropped, seed, num_samples, (int32_t)T, (int32_t)shuffle};
    char why[CKPT_ERR_MAX / 2];
    if (ckpt_position_problem(&ds, r->version >= 3, r->point.step, plan[1], plan[0], why, sizeof(why)))
        return ckpt_reader_fail(r, 1, "%s: %s", path, why);
    r->point.data = ds;
    if (r->version >= 3) {
        const JsonValue *set = json_get(root, "data_set");
        int64_t v[4];
        const char *keys[4] = {"shards", "tokens", "list_crc32c", "contents_crc32c"};
        const int64_t hi[4] = {INT32_MAX, INT64_MAX / 2, UINT32_MAX, UINT32_MAX};
        for (int k = 0; k < 4; k++)
            if (!ckpt_get_int(r, set, keys[k], k < 2, hi[k], &v[k])) return 0;
        DataSetId id = {v[0], v[1], (uint32_t)v[2], (uint32_t)v[3]};
        r->data_set = id;
    }
    const JsonValue *rng = json_get(root, "sample_rng");
    if (!rng || rng->type != JSON_ARRAY || rng->count != 4)
        return ckpt_reader_fail(r, 1, "%s: 'sample_rng' is not 4 decimal strings", path);
    for (int i = 0; i < 4; i++)
        if (!json_u64_string(&rng->items[i], &r->point.sample_rng.s[i]))
            return ckpt_reader_fail(r, 1, "%s: 'sample_rng' is not 4 decimal strings", path);
    return 1;
}

// The manifest's "model" keys, and where a GPTConfig holds each.
static const char *const CKPT_MODEL_KEYS[] = {"max_seq_len", "vocab_size", "padded_vocab_size", "num_layers",
                                              "num_heads", "channels"};
#define CKPT_NUM_MODEL_KEYS ((int)(sizeof(CKPT_MODEL_KEYS) / sizeof(CKPT_MODEL_KEYS[0])))
static inline int *ckpt_model_field(GPTConfig *c, int key) {
    int *fields[CKPT_NUM_MODEL_KEYS] = {&c->max_seq_len, &c->vocab_size, &c->padded_vocab_size, &c->num_layers,
                                        &c->num_heads, &c->channels};
    return fields[key];
}

// Opens dir's manifest and checks it against itself: format, version, seal,
// step (against the directory's name when it is a step_N); *model: the
// model's shape it records (unchecked). Returns 1, or 0 with r->err.
static inline int ckpt_manifest_open(CkptReader *r, const char *dir, GPTConfig *model, char *err) {
    memset(r, 0, sizeof(*r));
    r->err = err;
    snprintf(r->dir, sizeof(r->dir), "%s", dir);
    char path[CKPT_FILE_MAX];
    snprintf(path, sizeof(path), "%s/manifest.json", dir);
    if (!ckpt_reader_parse(r, path)) return 0;
    const JsonValue *root = r->root;
    int64_t step = 0;
    if (!ckpt_get_int(r, root, "step", 0, INT32_MAX, &step)) return 0;
    r->point.step = step;
    size_t end = strlen(r->dir);  // the directory's own name (a copy under another name is not checked)
    while (end > 1 && r->dir[end - 1] == '/') end--;
    size_t start = end;
    while (start > 0 && r->dir[start - 1] != '/') start--;
    char name[CKPT_PATH_MAX];
    snprintf(name, sizeof(name), "%.*s", (int)(end - start), r->dir + start);
    int64_t named = ckpt_parse_step_name(name);
    if (named >= 0 && named != step)
        return ckpt_reader_fail(r, 1, "%s: 'step' %lld is not the step of its directory %s", path, (long long)step,
                                name);
    const JsonValue *jm = json_get(root, "model");
    for (int i = 0; i < CKPT_NUM_MODEL_KEYS; i++) {
        int64_t v = 0;
        if (!ckpt_get_int(r, jm, CKPT_MODEL_KEYS[i], 0, INT32_MAX, &v)) return 0;
        *ckpt_model_field(model, i) = (int)v;
    }
    return 1;
}

// Opens dir's manifest and checks it against itself (ckpt_manifest_open) and
// against this run: step, model, kept flags, batch, tensors, data position.
// Returns 1, or 0 with r->err.
static inline int ckpt_reader_open(CkptReader *r, const char *dir, const CkptRun *run, char *err) {
    GPTConfig have, want = *run->cfg;
    if (!ckpt_manifest_open(r, dir, &have, err)) return 0;
    const JsonValue *root = r->root;
    char path[CKPT_FILE_MAX];
    snprintf(path, sizeof(path), "%s/manifest.json", dir);
    int64_t step = r->point.step;
    if (step > run->set.steps)
        return ckpt_reader_fail(r, 0, "%s: the checkpoint is at step %lld, past this run's --steps %d: give --steps %lld "
                                "or more (%lld: evaluate, sample and save only; more: train on)", path, (long long)step,
                                run->set.steps, (long long)step, (long long)step);
    for (int i = 0; i < CKPT_NUM_MODEL_KEYS; i++)
        if (*ckpt_model_field(&have, i) != *ckpt_model_field(&want, i))
            return ckpt_reader_fail(r, 0, "%s: a model with %s %d, this run's has %d", path, CKPT_MODEL_KEYS[i],
                                    *ckpt_model_field(&have, i), *ckpt_model_field(&want, i));
    // the flags a resume keeps: compared as the manifest writes them
    const JsonValue *flags = json_get(root, "flags");
    for (int i = 0; i < CKPT_NUM_KEPT_FLAGS; i++) {
        const char *name = CKPT_KEPT_FLAGS[i], *want = run->set.kept[i];
        const JsonValue *v = json_get(flags, name);
        char got[CKPT_FLAG_JSON_MAX];
        if (!v || (v->type != JSON_NUMBER && v->type != JSON_STRING))
            return ckpt_reader_fail(r, 1, "%s: flag '%s' is missing", path, name);
        if (v->type == JSON_STRING) snprintf(got, sizeof(got), "\"%s\"", v->text);
        else snprintf(got, sizeof(got), "%s", v->text);
        if (strcmp(want, got) != 0)
            return ckpt_reader_fail(r, 0, "%s: written with --%s %s, this run has --%s %s (a resume keeps it: "
                                    "resume with --%s %s)", path, name, got, name, want, name, got);
    }
    // the schedule's length (a manifest before it was recorded: its run's --steps, the length then)
    int64_t decay = 0;
    if (!ckpt_get_int(r, flags, json_get(flags, "lr-decay-steps") ? "lr-decay-steps" : "steps", 0, INT32_MAX, &decay))
        return 0;
    r->point.lr_decay_steps = decay;
    int64_t plan[3] = {0, 0, 0};
    return ckpt_check_model_tables(r, path, run, plan) && ckpt_read_position(r, path, plan);
}

static inline void ckpt_reader_close(CkptReader *r) { json_free(r->root); }

// Where a file's bytes go: for each state, this rank's destination over the
// pieces of `hold` (ranges of its own buffer), one after the other.
typedef struct {
    int64_t global, n, at;  // global elements [global, global + n) are dst[at .. at + n)
} CkptSpan;

typedef struct {
    float *dst[CKPT_STATES];       // (the elements of hold[s]): piece k at the sum of the earlier pieces' lengths
    CkptPieces hold[CKPT_STATES];  // ranges of the reader's buffer
    const ParamMap *map;           // the reader's buffer onto the global order
    int64_t filled[CKPT_STATES];   // bytes copied (every element of the spans exactly once when complete)
    // (ckpt_read_tensors) each state's hold as global spans, sorted by global, and their elements
    CkptSpan *spans[CKPT_STATES];
    int nspans[CKPT_STATES];
    int64_t want[CKPT_STATES];
} CkptTargets;

// One copy from a file into the targets: n elements at raw byte offset off.
typedef struct {
    int64_t off, n, at;
    int state;
} CkptCopy;

typedef struct {
    CkptSpan *s;
    int n, cap;
    int64_t piece_lo, piece_at;  // the hold piece being mapped: its first element and where it starts in dst
} CkptSpanList;
static inline void ckpt_span_run(void *ctx, int64_t local, int64_t global, int64_t n) {
    CkptSpanList *l = (CkptSpanList *)ctx;
    array_room(l->s, l->n, l->cap, 64);
    l->s[l->n++] = (CkptSpan){global, n, l->piece_at + (local - l->piece_lo)};
}
static inline int ckpt_span_cmp(const void *a, const void *b) {
    int64_t x = ((const CkptSpan *)a)->global, y = ((const CkptSpan *)b)->global;
    return (x > y) - (x < y);
}

// The targets' global spans, from the reader's map (alignment gaps are in no
// span: dst keeps them, zero, as the pieces' elements one after the other).
static inline void ckpt_targets_spans(CkptTargets *t) {
    for (int s = 0; s < CKPT_STATES; s++) {
        CkptSpanList l = {NULL, 0, 0, 0, 0};
        for (int k = 0; k < t->hold[s].n; k++) {
            l.piece_lo = t->hold[s].r[k].lo;
            param_map_runs(t->map, t->hold[s].r[k].lo, t->hold[s].r[k].hi, ckpt_span_run, &l);
            l.piece_at += t->hold[s].r[k].hi - t->hold[s].r[k].lo;
        }
        if (l.n > 0) qsort(l.s, (size_t)l.n, sizeof(CkptSpan), ckpt_span_cmp);  // (a state held nowhere: none)
        t->spans[s] = l.s, t->nspans[s] = l.n, t->want[s] = 0;
        for (int i = 0; i < l.n; i++) t->want[s] += l.s[i].n;
    }
}

static inline void ckpt_targets_free_spans(CkptTargets *t) {
    for (int s = 0; s < CKPT_STATES; s++) {
        free(t->spans[s]);
        t->spans[s] = NULL;
    }
}

// A file's global run [g, g + n) of state s at raw byte offset off: a copy
// for each overlap with the targets' spans.
typedef struct {
    CkptTargets *t;
    int state;
    int64_t lo, off;  // the file range's first local element and its byte offset
    CkptCopy *c;
    int n, cap;
} CkptCopyList;
static inline void ckpt_copy_run(void *ctx, int64_t local, int64_t g, int64_t n) {
    CkptCopyList *l = (CkptCopyList *)ctx;
    const CkptSpan *sp = l->t->spans[l->state];
    int ns = l->t->nspans[l->state], lo = 0, hi = ns;
    while (lo < hi) {  // the first span ending after g
        int mid = (lo + hi) / 2;
        if (sp[mid].global + sp[mid].n <= g) lo = mid + 1;
        else hi = mid;
    }
    for (int i = lo; i < ns && sp[i].global < g + n; i++) {
        int64_t a = g > sp[i].global ? g : sp[i].global, z = g + n < sp[i].global + sp[i].n ? g + n : sp[i].global + sp[i].n;
        if (z <= a) continue;
        array_room(l->c, l->n, l->cap, 64);
        l->c[l->n++] = (CkptCopy){l->off + (local + (a - g) - l->lo) * 4, z - a, sp[i].at + (a - sp[i].global), l->state};
    }
}
static inline int ckpt_copy_cmp(const void *a, const void *b) {
    int64_t x = ((const CkptCopy *)a)->off, y = ((const CkptCopy *)b)->off;
    return (x > y) - (x < y);
}

// Raw bytes [pos, pos+n) of a file: copied where the copies (sorted by
// offset; *next: the first not yet wholly done) say.
static inline void ckpt_scatter(CkptTargets *t, const CkptCopy *copies, int ncopies, int *next, int64_t pos,
                                const char *bytes, int64_t n) {
    for (int i = *next; i < ncopies && copies[i].off < pos + n; i++) {
        const CkptCopy *c = &copies[i];
        int64_t b0 = c->off, b1 = c->off + c->n * 4, a = pos > b0 ? pos : b0, z = pos + n < b1 ? pos + n : b1;
        if (z > a) {
            memcpy((char *)(t->dst[c->state] + c->at) + (a - b0), bytes + (a - pos), (size_t)(z - a));
            t->filled[c->state] += z - a;
        }
        if (b1 <= pos + n && i == *next) (*next)++;
    }
}

// The writing rank's buffer a 'files' entry describes ("layout"; without
// one, version 1: the whole model) as its layout in *pl. 1, or 0 with r->err.
static inline int ckpt_file_layout(CkptReader *r, const JsonValue *entry, const GPTConfig *cfg, ParamLayout *pl) {
    const JsonValue *jl = json_get(entry, "layout");
    if (!jl) {
        param_layout_init(pl, cfg);
        return 1;
    }
    int64_t v[4];
    const char *keys[4] = {"tp", "tp_rank", "embeddings", "lnf"};
    for (int k = 0; k < 4; k++)
        if (jl->type != JSON_OBJECT || !ckpt_get_int(r, jl, keys[k], 0, GPT_MAX_HEADS, &v[k])) return 0;
    const JsonValue *jlayers = json_get(jl, "layers");
    if (!jlayers || jlayers->type != JSON_ARRAY || jlayers->count > cfg->num_layers)
        return ckpt_reader_fail(r, 1, "%s/manifest.json: a file's layout has no list of layers", r->dir);
    CkptLayout cl = {(int)v[0], (int)v[1], (int)v[2], (int)v[3], {0, 0, NULL}};
    for (int k = 0; k < jlayers->count; k++) {
        const JsonValue *q = &jlayers->items[k];
        int64_t lo = -1, hi = -1;
        if (q->type != JSON_ARRAY || q->count != 2 || !json_int64(&q->items[0], 0, cfg->num_layers, &lo) ||
            !json_int64(&q->items[1], 0, cfg->num_layers, &hi) || hi <= lo) {
            ckpt_pieces_free(&cl.layers);
            return ckpt_reader_fail(r, 1, "%s/manifest.json: a file's layout lists a bad layer range", r->dir);
        }
        ckpt_pieces_add(&cl.layers, lo, hi);
    }
    const char *why = ckpt_layout_params(&cl, cfg, pl);
    ckpt_pieces_free(&cl.layers);
    if (why) return ckpt_reader_fail(r, 1, "%s/manifest.json: %s", r->dir, why);
    return 1;
}

// Reads one data file: its size and CRC32C against the manifest, its bytes
// (decompressed) into the targets: its ranges (of the writing rank's buffer)
// mapped onto the global order, where they meet the targets' spans. A file
// that holds nothing the targets need is not opened. Returns 1, or 0 with
// r->err (damaged).
static inline int ckpt_read_file(CkptReader *r, const JsonValue *entry, CkptTargets *t, const GPTConfig *cfg) {
    const JsonValue *name = json_get(entry, "file"), *comp = json_get(entry, "compression");
    const JsonValue *jr = json_get(entry, "ranges");
    if (!name || name->type != JSON_STRING || strchr(name->text, '/') || !comp || comp->type != JSON_STRING ||
        (strcmp(comp->text, "none") != 0 && strcmp(comp->text, "zstd") != 0) || !jr || jr->type != JSON_ARRAY ||
        jr->count < 1)
        return ckpt_reader_fail(r, 1, "%s/manifest.json: a bad 'files' entry", r->dir);
    int64_t bytes = 0, raw_bytes = 0, crc = 0;
    if (!ckpt_get_int(r, entry, "bytes", 0, INT64_MAX / 2, &bytes) ||
        !ckpt_get_int(r, entry, "raw_bytes", 0, INT64_MAX / 2, &raw_bytes) ||
        !ckpt_get_int(r, entry, "crc32c", 0, UINT32_MAX, &crc))
        return 0;
    int zstd = strcmp(comp->text, "zstd") == 0;
    if (!zstd && raw_bytes != bytes)
        return ckpt_reader_fail(r, 1, "%s/manifest.json: '%s' is uncompressed but its sizes differ", r->dir, name->text);
    ParamLayout wl;  // the writer's buffer
    if (!ckpt_file_layout(r, entry, cfg, &wl)) return 0;
    CkptFileRange *rs = (CkptFileRange *)mallocCheck(sizeof(CkptFileRange) * (size_t)jr->count);
    int ok = 1;
    for (int i = 0; i < jr->count && ok; i++) {
        const JsonValue *tn = json_get(&jr->items[i], "tensor");
        CkptFileRange *q = &rs[i];
        q->state = -1;
        for (int k = 0; k < CKPT_STATES && tn && tn->type == JSON_STRING; k++)
            if (strcmp(tn->text, CKPT_STATE_NAMES[k]) == 0) q->state = k;
        if (q->state < 0) ok = ckpt_reader_fail(r, 1, "%s/manifest.json: '%s' holds an unknown tensor", r->dir, name->text);
        else if (!ckpt_get_int(r, &jr->items[i], "lo", 0, wl.num_elements, &q->lo) ||
                 !ckpt_get_int(r, &jr->items[i], "hi", q->lo, wl.num_elements, &q->hi) ||
                 !ckpt_get_int(r, &jr->items[i], "offset", 0, raw_bytes, &q->off))
            ok = 0;
    }
    char why[CKPT_ERR_MAX / 2];
    if (ok && ckpt_tiling_problem(rs, jr->count, raw_bytes, why, sizeof(why)))
        ok = ckpt_reader_fail(r, 1, "%s/manifest.json: 'ranges' of '%s': %s", r->dir, name->text, why);
    ParamMap wmap;
    param_map_init(&wmap, &wl);
    CkptCopyList cl = {t, 0, 0, 0, NULL, 0, 0};
    for (int i = 0; i < jr->count && ok; i++) {
        cl.state = rs[i].state, cl.lo = rs[i].lo, cl.off = rs[i].off;
        param_map_runs(&wmap, rs[i].lo, rs[i].hi, ckpt_copy_run, &cl);
    }
    free(rs);
    param_map_free(&wmap);
    param_layout_free(&wl);
    if (!ok || cl.n == 0) {  // (a file this rank needs nothing of)
        free(cl.c);
        return ok;
    }
    qsort(cl.c, (size_t)cl.n, sizeof(CkptCopy), ckpt_copy_cmp);
    int next = 0;
    char path[CKPT_FILE_MAX];
    if (strlen(name->text) > 255) {
        free(cl.c);
        return ckpt_reader_fail(r, 1, "%s/manifest.json: a file name is too long", r->dir);
    }
    snprintf(path, sizeof(path), "%s/%s", r->dir, name->text);
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    struct stat st;
    if (fd < 0) {
        free(cl.c);
        return ckpt_reader_fail(r, 1, "%s: missing or unreadable (%s)", path, strerror(errno));
    }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        free(cl.c);
        return ckpt_reader_fail(r, 1, "%s: not a regular file", path);
    }
    if ((int64_t)st.st_size != bytes) {
        close(fd);
        free(cl.c);
        return ckpt_reader_fail(r, 1, "%s: %lld bytes, the manifest says %lld (truncated or damaged)", path,
                                (long long)st.st_size, (long long)bytes);
    }
    char *buf = (char *)mallocCheck(CKPT_CHUNK);
    uint32_t got_crc = 0;
    int64_t pos = 0, raw_pos = 0;
#ifdef LLMC_ZSTD
    ZSTD_DCtx *dc = zstd ? ZSTD_createDCtx() : NULL;
    char *out = zstd ? (char *)mallocCheck(ZSTD_DStreamOutSize()) : NULL;
#else
    if (zstd) {
        close(fd);
        free(buf);
        free(cl.c);
        return ckpt_reader_fail(r, 0, "%s: zstd-compressed, and this program was built without zstd", path);
    }
#endif
    while (ok && pos < bytes) {
        size_t want = bytes - pos < (int64_t)CKPT_CHUNK ? (size_t)(bytes - pos) : CKPT_CHUNK;
        ssize_t k = read(fd, buf, want);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) { ok = ckpt_reader_fail(r, 1, "%s: read failed at byte %lld", path, (long long)pos); break; }
        got_crc = crc32c_update(got_crc, buf, (size_t)k);
        pos += k;
        if (!zstd) {
            ckpt_scatter(t, cl.c, cl.n, &next, raw_pos, buf, k);
            raw_pos += k;
            continue;
        }
#ifdef LLMC_ZSTD
        ZSTD_inBuffer in = {buf, (size_t)k, 0};
        while (ok && in.pos < in.size) {
            ZSTD_outBuffer ob = {out, ZSTD_DStreamOutSize(), 0};
            size_t rc = ZSTD_decompressStream(dc, &ob, &in);
            if (ZSTD_isError(rc) || raw_pos + (int64_t)ob.pos > raw_bytes) {
                ok = ckpt_reader_fail(r, 1, "%s: corrupt zstd data", path);
                break;
            }
            ckpt_scatter(t, cl.c, cl.n, &next, raw_pos, out, (int64_t)ob.pos);
            raw_pos += (int64_t)ob.pos;
        }
#endif
    }
#ifdef LLMC_ZSTD
    if (dc) ZSTD_freeDCtx(dc);
    free(out);
#endif
    close(fd);
    free(buf);
    free(cl.c);
    if (!ok) return 0;
    if (got_crc != (uint32_t)crc)
        return ckpt_reader_fail(r, 1, "%s: CRC32C %u does not match the manifest's %u (damaged)", path, got_crc,
                                (unsigned)crc);
    if (raw_pos != raw_bytes)
        return ckpt_reader_fail(r, 1, "%s: %lld bytes decompressed, the manifest says %lld", path, (long long)raw_pos,
                                (long long)raw_bytes);
    return 1;
}

// Fills this rank's ranges (t->hold) of every state from the files that
// overlap them. Returns 1 when every element came from exactly one file.
static inline int ckpt_read_tensors(CkptReader *r, CkptTargets *t, const GPTConfig *cfg) {
    const JsonValue *files = json_get(r->root, "files");
    if (!files || files->type != JSON_ARRAY) return ckpt_reader_fail(r, 1, "%s/manifest.json: no 'files'", r->dir);

    ckpt_targets_spans(t);
    int ok = 1;
    for (int s = 0; s < CKPT_STATES; s++) t->filled[s] = 0;
    for (int i = 0; i < files->count && ok; i++) ok = ckpt_read_file(r, &files->items[i], t, cfg);
    for (int s = 0; s < CKPT_STATES && ok; s++)
        if (t->filled[s] != t->want[s] * 4)
            ok = ckpt_reader_fail(r, 1, "%s/manifest.json: the files do not cover %s [%lld, %lld)%s exactly once",
                                  r->dir, CKPT_STATE_NAMES[s], (long long)t->hold[s].r[0].lo,
                                  (long long)t->hold[s].r[0].hi, t->hold[s].n > 1 ? " and the rest" : "");
    ckpt_targets_free_spans(t);
    return ok;
}

// The training data against the checkpoint's: the same data set (its
// identity, version 3, where `have` is given: rank 0; its sample count
// everywhere) unless --resume-data-changed says go on (r->data_change then
// says how it differs, and the run continues at the same global sample of
// the new data's order), and a position that starts one of this run's batches.
static inline int ckpt_check_data(CkptReader *r, const CkptRun *run, const DataLoader *train, const DataSetId *have) {
    DataLoaderState *d = &r->point.data;
    char why[CKPT_ERR_MAX / 2];
    const char *change = NULL;
    if (have && r->version >= 3) {
        DataSetId prefix;
        int more = r->data_set.shards < have->shards;
        if (more) prefix = dataloader_identity(train, (int)r->data_set.shards);
        change = ckpt_data_set_change(&r->data_set, have, more ? &prefix : NULL, train->pattern, why, sizeof(why));
    }
    if (!change && d->num_samples != train->num_samples) {
        snprintf(why, sizeof(why), "the training data had %lld samples, '%.400s' has %lld", (long long)d->num_samples,
                 train->pattern, (long long)train->num_samples);
        change = why;
    }
    if (change && !run->set.resume_data_changed)
        return ckpt_reader_fail(r, 0, "%s/manifest.json: %s (--resume-data-changed 1 continues on it anyway)", r->dir,
                                change);
    if (change) {  // the same samples read so far, counted in epochs of the new data's size
        snprintf(r->data_change, sizeof(r->data_change), "%s", change);
        int64_t more;
        if (__builtin_mul_overflow(d->epoch, train->num_samples - d->num_samples, &more) ||
            __builtin_add_overflow(d->dropped, more, &d->dropped))
            return ckpt_reader_fail(r, 0, "%s/manifest.json: epoch %lld of %lld samples cannot continue on %lld",
                                    r->dir, (long long)d->epoch, (long long)d->num_samples,
                                    (long long)train->num_samples);
        d->num_samples = train->num_samples;
    }
    int64_t per_batch = (int64_t)train->B * train->world;
    if (d->sample % per_batch != 0)
        return ckpt_reader_fail(r, 0, "%s/manifest.json: the data continues at global sample %lld, which is not a "
                                "multiple of batch-size x ranks = %lld", r->dir, (long long)d->sample,
                                (long long)per_batch);
    if (d->sample / per_batch >= train->batches_per_epoch)
        return ckpt_reader_fail(r, 0, "%s/manifest.json: the data continues at global sample %lld, past the last of "
                                "the %lld batches of batch-size x ranks = %lld samples in an epoch of '%s'", r->dir,
                                (long long)d->sample, (long long)train->batches_per_epoch, (long long)per_batch,
                                train->pattern);
    return 1;
}

// Reads this rank's part of the checkpoint in dir into t, checked against
// the run and its training data (have: its identity, on rank 0; NULL
// elsewhere). 1: read; 0: r->err says why (r->damaged: the checkpoint is
// damaged rather than of another run).
static inline int ckpt_read(CkptReader *r, const char *dir, const CkptRun *run, const DataLoader *train,
                            const DataSetId *have, CkptTargets *t, char *err) {
    int ok = ckpt_reader_open(r, dir, run, err) && ckpt_check_data(r, run, train, have);
    if (ok) ok = ckpt_read_tensors(r, t, run->cfg);
    return ok;
}

// `latest` is a hint (--resume auto takes the newest complete step
// directory): one that cannot be read or names anything but a step directory
// of the run's own there is one warning line.
static inline void ckpt_check_latest(const char *dir) {
    char path[CKPT_FILE_MAX], why[CKPT_WHY_MAX] = "";
    snprintf(path, sizeof(path), "%s/" CKPT_LATEST_FILE, dir);
    size_t len;
    char *name = ckpt_slurp(path, 4096, &len);
    if (!name && errno == ENOENT) return;  // (none yet)
    if (!name) {
        snprintf(why, sizeof(why), "%s", errno == EINVAL ? "not a small regular file" : strerror(errno));
    } else {
        name[strcspn(name, "\n")] = '\0';
        ckpt_printable(name);
        int dfd = ckpt_open_dir(dir);
        char entry_why[CKPT_WHY_MAX];
        if (ckpt_parse_step_name(name) < 0 || dfd < 0 || ckpt_step_entry(dfd, name, entry_why) != CKPT_OWN)
            snprintf(why, sizeof(why), "it names '%.100s', which is not a checkpoint directory of this run there", name);
        if (dfd >= 0) close(dfd);
        free(name);
    }
    if (why[0]) ckpt_warn("resume: ignoring %s (%s): taking the newest complete checkpoint", path, why);
}

#endif  // LLMC_CKPT_READER_H
