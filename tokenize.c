// tokenize.c: the `tokenize` command. Turns text files (or stdin) into token
// shards for training (llm.c's layout: OUTDIR/NAME_val_000000.bin, then
// OUTDIR/NAME_train_000001.bin, ...; every document preceded by EOT), writes the
// raw ids of one file (--raw IN OUT), or learns a BPE vocabulary from a corpus
// (--train-vocab N). Tokenizers: GPT-2's (--gpt2 DIR with encoder.json +
// vocab.bpe, also the format --train-vocab writes) or bytes (--bytes).
//
// usage:
//   tokenize --gpt2 DIR --out-dir OUT [--name NAME --val-tokens N ...] FILE... (none or -: stdin)
//   tokenize --gpt2 DIR --raw IN OUT [--threads N --bench]
//   tokenize --train-vocab N --out-dir DIR FILE...
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "llmc/args.h"       // defines: FLAGS_COUNT, flags_parse
#include "llmc/file_io.h"    // defines: read_stream, read_whole_file, output_refuse_input, output_path_check, ...
#include "llmc/shards.h"     // defines: ShardWriter, SHARD_PATH_MAX, shard_writer_open, shard_writer_append, ...
#include "llmc/tokenizer.h"  // defines: Tokenizer, tokenizer_split, U32Vec, tokenizer_eot, ...
#include "llmc/utils.h"      // defines: die_usage, CHECK, wall_seconds, duration_text, ...

typedef struct {
    char gpt2[FLAG_STR_MAX];
    int bytes;
    char raw[FLAG_STR_MAX];
    char out_dir[FLAG_STR_MAX];
    char name[FLAG_STR_MAX];
    long long val_tokens;
    long long shard_tokens;
    int zstd;
    char doc_sep[FLAG_STR_MAX];
    int threads;
    int train_vocab;
    int bench;
} Options;

static const FlagSpec FLAGS[] = {
    {"gpt2", FLAG_STRING, offsetof(Options, gpt2), "", NULL, 0, 0,
     "tokenizer: DIR holding encoder.json + vocab.bpe (GPT-2's, or one written by --train-vocab)", "tokenizer"},
    {"bytes", FLAG_BOOL, offsetof(Options, bytes), "0", NULL, 0, 1,
     "tokenizer: bytes (ids 0..255, EOT 256, vocab 257), no files needed; bare --bytes means 1", "tokenizer"},
    {"raw", FLAG_STRING, offsetof(Options, raw), "", NULL, 0, 0,
     "IN OUT (two values): write the ids of text file IN to OUT as raw little-endian uint16 (uint32 if the vocab needs it), nothing added", "input and output"},
    {"out-dir", FLAG_STRING, offsetof(Options, out_dir), "", NULL, 0, 0,
     "directory for the shards (or, with --train-vocab, for encoder.json, vocab.bpe, tokenizer.bin); created if missing", "input and output"},
    {"name", FLAG_STRING, offsetof(Options, name), "data", NULL, 0, 0, "shard name prefix: OUTDIR/NAME_val_000000.bin, OUTDIR/NAME_train_000001.bin, ...", "input and output"},
    {"val-tokens", FLAG_INT64, offsetof(Options, val_tokens), "0", NULL, 0, 1e15,
     "the first N tokens go to the val shard (0: no val shard)", "input and output"},
    {"shard-tokens", FLAG_INT64, offsetof(Options, shard_tokens), "100000000", NULL, 1, 1e15, "tokens per train shard", "input and output"},
    {"zstd", FLAG_INT, offsetof(Options, zstd), "0", NULL, 0, 22, "zstd level of the shards (0: plain llm.c format)", "input and output"},
    {"doc-sep", FLAG_STRING, offsetof(Options, doc_sep), "", NULL, 0, 0,
     "a line equal to S separates documents (default: each file is one document)", "input and output"},
    {"threads", FLAG_INT, offsetof(Options, threads), "1", NULL, 1, 256, "encoding threads (output is the same for any count)", "performance"},
    {"train-vocab", FLAG_INT, offsetof(Options, train_vocab), "0", NULL, 0, 1 << 24,
     "learn a BPE vocabulary of N tokens (256 bytes + merges + EOT) from the input, write it to --out-dir", "tokenizer"},
    {"bench", FLAG_BOOL, offsetof(Options, bench), "0", NULL, 0, 1, "print the encoding speed (MB/s) of --raw; bare --bench means 1", "performance"},
};

static const char *SUMMARY =
    "Tokenizes text with GPT-2's BPE (or bytes) into llm.c token shards, writes raw ids (--raw IN OUT),\n"
    "or learns a BPE vocabulary (--train-vocab N). Inputs: FILE arguments, none or '-' for stdin.";

// Splits argv into flags (for flags_parse) and input files. "--raw IN OUT" takes
// two values: OUT goes to *raw_out. A boolean flag given without 0|1 means 1.
static int split_args(int argc, char **argv, char **flag_argv, const char **inputs, int *n_inputs,
                      const char **raw_out) {
    int nf = 0;
    flag_argv[nf++] = argv[0];
    *n_inputs = 0;
    for (int a = 1; a < argc; a++) {
        const char *arg = argv[a];
        if (strncmp(arg, "--", 2) != 0) {
            if (strcmp(arg, "-h") == 0) flag_argv[nf++] = argv[a];
            else inputs[(*n_inputs)++] = arg;
            continue;
        }
        flag_argv[nf++] = argv[a];
        const char *name = arg + 2;
        if (strchr(name, '=')) continue;
        const FlagSpec *f = NULL;
        for (int i = 0; i < FLAGS_COUNT(FLAGS); i++)
            if (strcmp(FLAGS[i].name, name) == 0) f = &FLAGS[i];
        int has_next = a + 1 < argc;
        if (strcmp(name, "config") == 0 && has_next) flag_argv[nf++] = argv[++a];  // (flags_parse reads the file)
        if (f == NULL) continue;  // --help, --config, or an unknown flag flags_parse reports
        if (f->type == FLAG_BOOL) {
            flag_argv[nf++] = has_next && flag_bool_value(argv[a + 1]) >= 0 ? argv[++a] : (char *)"1";
        } else if (strcmp(f->name, "raw") == 0) {
            if (a + 2 >= argc) die_usage("--raw needs two values: IN OUT");
            flag_argv[nf++] = argv[++a];
            *raw_out = argv[++a];
        } else if (has_next) {
            flag_argv[nf++] = argv[++a];
        }
    }
    return nf;
}

// Reads a whole input file (a regular file, read to its end), or stdin for "-".
static uint8_t *read_input(const char *path, size_t *len) {
    if (strcmp(path, "-") == 0) return read_stream(stdin, "stdin", len);
    return read_whole_file(path, "input", len);
}

// The documents of one file: whole, or split at lines equal to sep; empty ones dropped.
typedef struct {
    const uint8_t **text;
    size_t *len;
    size_t n, cap;
} Docs;

static void docs_add(Docs *d, const uint8_t *s, size_t n) {
    if (n == 0) return;
    if (d->n == d->cap) {
        d->cap = d->cap ? 2 * d->cap : 64;
        d->text = (const uint8_t **)realloc(d->text, d->cap * sizeof(*d->text));
        d->len = (size_t *)realloc(d->len, d->cap * sizeof(size_t));
        CHECK(d->text && d->len, "out of memory");
    }
    d->text[d->n] = s;
    d->len[d->n++] = n;
}

static void split_docs(const uint8_t *s, size_t n, const char *sep, Docs *d) {
    size_t sep_len = strlen(sep), doc = 0;
    for (size_t line = 0; sep_len > 0 && line < n;) {
        const uint8_t *nl = memchr(s + line, '\n', n - line);
        size_t line_end = nl ? (size_t)(nl - s) : n;
        if (line_end - line == sep_len && memcmp(s + line, sep, sep_len) == 0) {
            docs_add(d, s + doc, line - doc);
            doc = line_end + (nl != NULL);
        }
        line = line_end + 1;
    }
    docs_add(d, s + doc, n - doc);
}

// Dies if the output `out` is one of the n inputs (they are read whole first,
// but a failed run must not have replaced its own input).
static void refuse_output_over_inputs(const char *out, const char *flag, const char **inputs, int n) {
    for (int i = 0; i < n; i++) output_refuse_input(out, flag, inputs[i], "a file to tokenize");
}

// Shard output: the first val_tokens to the val shard, then train shards.
typedef struct {
    const Options *o;
    const char **inputs;
    int n_inputs;
    int token_bytes;
    ShardWriter *w;
    int64_t in_shard, val_left, total, val_total;
    int next_train;  // index of the next train shard
} Sink;

static void sink_put(Sink *s, const uint32_t *tok, size_t n) {
    while (n > 0) {
        int is_val = s->val_left > 0;
        if (s->w == NULL) {
            char path[SHARD_PATH_MAX];
            int idx = is_val ? 0 : s->next_train++;
            snprintf(path, sizeof(path), "%s/%s_%s_%06d.bin", s->o->out_dir, s->o->name, is_val ? "val" : "train", idx);
            refuse_output_over_inputs(path, "--out-dir", s->inputs, s->n_inputs);
            s->w = shard_writer_open(path, s->token_bytes, s->o->zstd);
        }
        int64_t cap = is_val ? s->val_left : s->o->shard_tokens - s->in_shard;
        size_t take = (int64_t)n < cap ? n : (size_t)cap;
        shard_writer_append(s->w, tok, take);
        s->in_shard += (int64_t)take;
        s->total += (int64_t)take;
        if (is_val) { s->val_left -= (int64_t)take; s->val_total += (int64_t)take; }
        tok += take;
        n -= take;
        if ((is_val && s->val_left == 0) || (!is_val && s->in_shard == s->o->shard_tokens)) {
            shard_writer_close(s->w);
            s->w = NULL;
            s->in_shard = 0;
        }
    }
}

// Progress on long inputs, one line on stderr redrawn in place when stderr is
// a terminal: bytes encoded of all inputs, MB/s and an ETA (total 0: unknown, stdin).
typedef struct {
    int on;
    size_t done, total;
    double start, shown;
} Progress;

static void progress_add(Progress *p, size_t bytes, int last) {
    p->done += bytes;
    double now = wall_seconds();
    if (!p->on || (!last && now - p->shown < 0.5)) return;
    p->shown = now;
    double mb_s = (double)p->done / 1e6 / (now > p->start ? now - p->start : 1e-9);
    char eta[32] = "";
    if (p->total && !last && mb_s > 0) {
        memcpy(eta, " | ETA ", 8);
        duration_text(eta + 7, sizeof(eta) - 7, (double)(p->total - p->done) / 1e6 / mb_s);
    }
    if (p->total)
        fprintf(stderr, "\rtokenize: %.1f of %.1f MB (%.0f%%) | %.1f MB/s%s   %s", p->done / 1e6, p->total / 1e6,
                100.0 * (double)p->done / (double)p->total, mb_s, eta, last ? "\n" : "");
    else
        fprintf(stderr, "\rtokenize: %.1f MB | %.1f MB/s   %s", p->done / 1e6, mb_s, last ? "\n" : "");
    fflush(stderr);
}

// Encodes the documents in d (each preceded by EOT) and hands the ids to sink,
// some MB of pieces at a time (progress after each).
static void encode_docs(const Tokenizer *t, const Docs *d, int threads, Sink *sink, Progress *progress) {
    // pieces of about piece_bytes (cut at safe boundaries: the ids are the same), for the threads and the progress
    const size_t piece_bytes = 1 << 18, batch_bytes = (size_t)16 << 20;
    Docs pieces = {0};
    unsigned char *starts_doc = NULL;  // (per piece) whether it is a document's first
    size_t *starts = NULL;
    for (size_t i = 0; i < d->n; i++) {
        size_t want = 1 + d->len[i] / piece_bytes;
        starts = (size_t *)reallocCheck(starts, (want + 1) * sizeof(size_t));
        size_t k = tokenizer_split(d->text[i], d->len[i], want, starts);
        for (size_t p = 0; p < k; p++) {
            docs_add(&pieces, d->text[i] + starts[p], starts[p + 1] - starts[p]);
            starts_doc = (unsigned char *)reallocCheck(starts_doc, pieces.n);
            starts_doc[pieces.n - 1] = p == 0;
        }
    }
    U32Vec *outs = (U32Vec *)callocCheck(pieces.n, sizeof(U32Vec));
    uint32_t eot = tokenizer_eot(t);
    for (size_t lo = 0, hi; lo < pieces.n; lo = hi) {
        size_t bytes = 0;
        for (hi = lo; hi < pieces.n && (hi == lo || bytes < batch_bytes); hi++) bytes += pieces.len[hi];
        tokenizer_encode_many(t, pieces.text + lo, pieces.len + lo, hi - lo, threads, outs + lo);
        for (size_t p = lo; p < hi; p++) {
            if (starts_doc[p]) sink_put(sink, &eot, 1);
            sink_put(sink, outs[p].data, outs[p].len);
            u32vec_free(&outs[p]);
        }
        progress_add(progress, bytes, 0);
    }
    free(outs);
    free(starts);
    free(starts_doc);
    free(pieces.text);
    free(pieces.len);
}

static void run_raw(const Options *o, const Tokenizer *t, const char *out_path) {
    output_refuse_input(out_path, "--raw OUT", o->raw, "--raw IN");
    output_path_check(out_path, "--raw OUT");  // before the encoding, which may take long
    size_t n;
    uint8_t *text = read_input(o->raw, &n);
    U32Vec ids = {0};
    double t0 = wall_seconds();
    tokenizer_encode_text(t, text, n, o->threads, &ids);
    double dt = wall_seconds() - t0;
    AtomicOut out;
    atomic_out_open(&out, out_path);
    if (tokenizer_vocab_size(t) <= 65536) {
        uint16_t *u16 = (uint16_t *)mallocCheck(ids.len * sizeof(uint16_t));
        for (size_t i = 0; i < ids.len; i++) u16[i] = (uint16_t)ids.data[i];
        atomic_out_write(&out, u16, sizeof(uint16_t) * ids.len);
        free(u16);
    } else {
        atomic_out_write(&out, ids.data, sizeof(uint32_t) * ids.len);
    }
    atomic_out_commit(&out);
    if (o->bench)
        printf("encoded %zu bytes into %zu tokens in %.3f s: %.1f MB/s (%d thread%s)\n", n, ids.len, dt,
               (double)n / 1e6 / (dt > 0 ? dt : 1e-9), o->threads, o->threads > 1 ? "s" : "");
    u32vec_free(&ids);
    free(text);
}

static void run_train(const Options *o, const char **inputs, int n_inputs) {
    if (o->train_vocab < 257) die_usage("--train-vocab: %d is below 257 (256 bytes + EOT)", o->train_vocab);
    if (!o->out_dir[0]) die_usage("--train-vocab needs --out-dir DIR for the vocabulary files");
    make_dirs(o->out_dir, "--out-dir");
    const char *names[] = {"encoder.json", "vocab.bpe", "tokenizer.bin"};
    for (int k = 0; k < 3; k++) {
        char path[FLAG_STR_MAX + 32];
        snprintf(path, sizeof(path), "%s/%s", o->out_dir, names[k]);
        refuse_output_over_inputs(path, "--out-dir", inputs, n_inputs);
        output_path_check(path, "--out-dir");
    }
    uint8_t **texts = (uint8_t **)mallocCheck((size_t)n_inputs * sizeof(uint8_t *));
    Docs d = {0};
    size_t total = 0;
    for (int i = 0; i < n_inputs; i++) {
        size_t n;
        texts[i] = read_input(inputs[i], &n);
        split_docs(texts[i], n, o->doc_sep, &d);
        total += n;
    }
    double t0 = wall_seconds();
    Tokenizer t;
    tokenizer_train(&t, d.text, d.len, d.n, (uint32_t)o->train_vocab);
    double dt = wall_seconds() - t0;
    tokenizer_save_dir(&t, o->out_dir);
    U32Vec ids = {0};
    for (size_t i = 0; i < d.n; i++) tokenizer_encode_text(&t, d.text[i], d.len[i], o->threads, &ids);
    printf("learned %u merges (vocab %u, EOT %u) from %zu bytes in %.2f s; %.2f bytes/token on the corpus; wrote %s/{encoder.json,vocab.bpe,tokenizer.bin}\n",
           t.num_merges, t.vocab_size, t.eot, total, dt, ids.len ? (double)total / (double)ids.len : 0.0, o->out_dir);
    if (t.vocab_size < (uint32_t)o->train_vocab)
        fprintf(stderr, "note: the corpus ran out of pairs to merge before %d tokens\n", o->train_vocab);
    u32vec_free(&ids);
    tokenizer_free(&t);
    for (int i = 0; i < n_inputs; i++) free(texts[i]);
    free(texts);
    free(d.text);
    free(d.len);
}

static void run_shards(const Options *o, const Tokenizer *t, const char **inputs, int n_inputs) {
    if (!o->out_dir[0]) die_usage("--out-dir is required to write shards (or give --raw IN OUT)");
    make_dirs(o->out_dir, "--out-dir");
    char probe[2 * FLAG_STR_MAX + 32];
    snprintf(probe, sizeof(probe), "%s/%s_train_000001.bin", o->out_dir, o->name);
    output_path_check(probe, "--out-dir");
    Sink sink = {.o = o, .inputs = inputs, .n_inputs = n_inputs, .token_bytes = tokenizer_vocab_size(t) <= 65536 ? 2 : 4, .val_left = o->val_tokens, .next_train = 1};
    double t0 = wall_seconds();
    size_t bytes = 0, docs = 0;
    Progress progress = {isatty(STDERR_FILENO), 0, 0, t0, 0.0};  // (the first batch shows at once)
    for (int i = 0; i < n_inputs; i++) {
        struct stat st;
        if (strcmp(inputs[i], "-") == 0 || stat(inputs[i], &st) != 0 || !S_ISREG(st.st_mode)) {
            progress.total = 0;  // (a stream: no ETA)
            break;
        }
        progress.total += (size_t)st.st_size;
    }
    for (int i = 0; i < n_inputs; i++) {
        size_t n;
        uint8_t *text = read_input(inputs[i], &n);
        Docs d = {0};
        split_docs(text, n, o->doc_sep, &d);
        size_t before = progress.done;
        encode_docs(t, &d, o->threads, &sink, &progress);
        progress.done = before + n;  // (with the separator lines)
        progress_add(&progress, 0, i + 1 == n_inputs);
        bytes += n;
        docs += d.n;
        free(d.text);
        free(d.len);
        free(text);
    }
    if (sink.w) shard_writer_close(sink.w);
    double dt = wall_seconds() - t0;
    printf("%zu documents, %zu bytes -> %lld tokens (val %lld, train %lld in %d shards) in %s/%s_*.bin, %.1f MB/s\n", docs, bytes,
           (long long)sink.total, (long long)sink.val_total, (long long)(sink.total - sink.val_total), sink.next_train - 1,
           o->out_dir, o->name, (double)bytes / 1e6 / (dt > 0 ? dt : 1e-9));
    if (sink.val_left > 0) fprintf(stderr, "note: only %lld tokens in all, fewer than --val-tokens; no train shard\n", (long long)sink.total);
}

// The command line split (main): the flags and the input files. File-scope, so that the paths that
// exit inside the parser (--help, a usage error) leave them reachable, not leaked: held only in main's
// registers, LeakSanitizer reported them as a leak, depending on how the compiler allocated registers.
static char **g_flag_argv;
static const char **g_inputs;

int main(int argc, char **argv) {
    g_flag_argv = (char **)mallocCheck((size_t)(argc + 1) * sizeof(char *) * 2);
    g_inputs = (const char **)mallocCheck((size_t)(argc + 1) * sizeof(char *));
    int n_inputs;
    const char *raw_out = NULL;
    int nf = split_args(argc, argv, g_flag_argv, g_inputs, &n_inputs, &raw_out);
    Options o;
    flags_parse(nf, g_flag_argv, FLAGS, FLAGS_COUNT(FLAGS), &o, SUMMARY);
    int explicit_inputs = n_inputs;
    if (n_inputs == 0) g_inputs[n_inputs++] = "-";

    if (o.train_vocab) {
        if (o.raw[0] || o.gpt2[0] || o.bytes) die_usage("--train-vocab learns a vocabulary: it takes no --raw, --gpt2 or --bytes");
        run_train(&o, g_inputs, n_inputs);
    } else {
        if (!o.gpt2[0] == !o.bytes) die_usage("give exactly one tokenizer: --gpt2 DIR or --bytes");
        Tokenizer t;
        if (o.bytes) tokenizer_init_bytes(&t);
        else tokenizer_load_gpt2(&t, o.gpt2);
        if (o.raw[0]) {
            if (explicit_inputs) die_usage("--raw IN OUT takes no other input files ('%s')", g_inputs[0]);
            run_raw(&o, &t, raw_out);
        } else {
            run_shards(&o, &t, g_inputs, n_inputs);
        }
        tokenizer_free(&t);
    }
    free(g_flag_argv);
    free(g_inputs);
    return 0;
}
