// args.h: a table-driven GNU-style long-flag parser. One table of FlagSpec
// rows drives parsing (--name VALUE and --name=VALUE; a boolean flag given
// bare means 1), defaults, validation of each value, the --help text (grouped
// by each row's section), a settings file (--config FILE) and the record of
// every setting a run used, so they can never disagree.
// Any error is one line on stderr naming the flag (or FILE:LINE), and exit
// status 2; an unknown flag gets the nearest ones ("did you mean").
//
// --config FILE: the flags as settings, applied before the command line (which
// overrides them). One setting a line, TOML as torchtitan's job files write it:
//   # a comment          [section]   (headings group lines; their names are not checked)
//   steps = 100          lr = 6e-4   data_train = "data/*train*.bin"   shuffle = true
// Keys are the flag names (- or _ alike); values are numbers, true/false,
// "quoted" (TOML's escapes \" and \\) or 'literal' strings, or a bare word.
#ifndef LLMC_ARGS_H
#define LLMC_ARGS_H

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "utils.h"  // defines: die_usage

typedef enum { FLAG_INT, FLAG_INT64, FLAG_FLOAT, FLAG_STRING, FLAG_CHOICE, FLAG_BOOL } FlagType;

typedef struct {
    const char *name;      // without the leading "--"
    FlagType type;
    size_t offset;         // offsetof(options struct, field)
    const char *dflt;      // default, parsed like a command-line value
    const char *choices;   // FLAG_CHOICE: "a|b|c" (the field holds a copy of the chosen string)
    double min, max;       // numeric range, inclusive
    const char *help;
    const char *section;   // --help lists the flags under these headings, in the order each first appears
} FlagSpec;

#define FLAG_STR_MAX 512

// A boolean flag's value: "1" or "true" is 1, "0" or "false" is 0, anything else -1.
static inline int flag_bool_value(const char *s) {
    if (strcmp(s, "1") == 0 || strcmp(s, "true") == 0) return 1;
    if (strcmp(s, "0") == 0 || strcmp(s, "false") == 0) return 0;
    return -1;
}

// Sets the flag's field from value: 0, or -1 with why not (naming the flag) in err.
static inline int flag_try_set(const FlagSpec *f, void *opts, const char *value, char *err, size_t err_size) {
    char *field = (char *)opts + f->offset;
    char *end = NULL;
    errno = 0;
    switch (f->type) {
        case FLAG_INT:
        case FLAG_INT64: {
            long long v = strtoll(value, &end, 10);
            if (errno || end == value || *end != '\0')
                return snprintf(err, err_size, "--%s: '%s' is not an integer", f->name, value), -1;
            if ((double)v < f->min || (double)v > f->max)
                return snprintf(err, err_size, "--%s: %lld is out of range [%.0f, %.0f]", f->name, v, f->min, f->max), -1;
            if (f->type == FLAG_INT) *(int *)field = (int)v;
            else *(long long *)field = v;
            return 0;
        }
        case FLAG_FLOAT: {
            double v = strtod(value, &end);
            if (errno || end == value || *end != '\0' || !isfinite(v))
                return snprintf(err, err_size, "--%s: '%s' is not a number", f->name, value), -1;
            if (v < f->min || v > f->max)
                return snprintf(err, err_size, "--%s: %g is out of range [%g, %g]", f->name, v, f->min, f->max), -1;
            *(float *)field = (float)v;
            return 0;
        }
        case FLAG_BOOL: {
            int v = flag_bool_value(value);
            if (v < 0) return snprintf(err, err_size, "--%s: '%s' is not 0 or 1", f->name, value), -1;
            *(int *)field = v;
            return 0;
        }
        case FLAG_CHOICE: {
            size_t n = strlen(value);
            const char *p = f->choices;
            int ok = 0;
            while (*p) {
                const char *bar = strchr(p, '|');
                size_t len = bar ? (size_t)(bar - p) : strlen(p);
                if (len == n && strncmp(p, value, n) == 0) { ok = 1; break; }
                p += len + (bar ? 1 : 0);
            }
            if (!ok) return snprintf(err, err_size, "--%s: '%s' is not one of %s", f->name, value, f->choices), -1;
        }
        /* fall through */  // store the string
        case FLAG_STRING:
            if (strlen(value) >= FLAG_STR_MAX) return snprintf(err, err_size, "--%s: value is too long", f->name), -1;
            snprintf(field, FLAG_STR_MAX, "%s", value);
            return 0;
    }
    return 0;
}

static inline void flag_set(const FlagSpec *f, void *opts, const char *value) {
    char err[FLAG_STR_MAX + 256];
    if (flag_try_set(f, opts, value, err, sizeof(err))) die_usage("%s", err);
}

// The flag named name[0..len) ('_' taken as '-'), or NULL.
static inline const FlagSpec *flag_find(const FlagSpec *flags, int n, const char *name, size_t len) {
    for (int i = 0; i < n; i++) {
        size_t k = 0;
        while (k < len && flags[i].name[k] && (name[k] == '_' ? '-' : name[k]) == flags[i].name[k]) k++;
        if (k == len && flags[i].name[k] == '\0') return &flags[i];
    }
    return NULL;
}

// Edits (insert, delete, replace) from a[0..na) to b; '_' and '-' alike, case ignored.
static inline int flag_edit_distance(const char *a, size_t na, const char *b) {
    enum { MAXLEN = 64 };
    size_t nb = strlen(b);
    if (na > MAXLEN || nb > MAXLEN) return MAXLEN;
    int row[MAXLEN + 1];
    for (size_t j = 0; j <= nb; j++) row[j] = (int)j;
    for (size_t i = 1; i <= na; i++) {
        int diag = row[0];
        row[0] = (int)i;
        char x = a[i - 1] == '_' ? '-' : (char)(a[i - 1] | (a[i - 1] >= 'A' && a[i - 1] <= 'Z' ? 0x20 : 0));
        for (size_t j = 1; j <= nb; j++) {
            int up = row[j], best = diag + (x != b[j - 1]);
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            diag = up;
            row[j] = best;
        }
    }
    return row[nb];
}

// " (did you mean --a or --b?)" for an unknown flag name[0..len): the flags
// within a small edit distance of it, or that start with it; else " (see --help)".
static inline void flag_suggest(const FlagSpec *flags, int n, const char *name, size_t len, char *out, size_t size) {
    enum { MAX_SHOWN = 4 };
    int best = len <= 4 ? 1 : 2, shown[MAX_SHOWN], nshown = 0;
    for (int i = 0; i < n; i++) {
        int d = flag_edit_distance(name, len, flags[i].name);
        if (d < best) best = d;
    }
    for (int pass = 0; pass < 2; pass++)  // the nearest first, then those that start with the name
        for (int i = 0; i < n && nshown < MAX_SHOWN; i++) {
            int near = flag_edit_distance(name, len, flags[i].name) <= best;
            int starts = len > 0 && strncmp(flags[i].name, name, len) == 0;
            if (pass == 0 ? near : starts && !near) shown[nshown++] = i;
        }
    if (nshown == 0) {
        snprintf(out, size, " (see --help)");
        return;
    }
    size_t at = (size_t)snprintf(out, size, " (did you mean");
    for (int k = 0; k < nshown && at < size; k++)
        at += (size_t)snprintf(out + at, size - at, "%s--%s", k == 0 ? " " : k + 1 == nshown ? " or " : ", ",
                               flags[shown[k]].name);
    if (at < size) snprintf(out + at, size - at, "?)");
}

// An argument that names no flag: one line with the nearest flags, exit 2.
static inline void flag_unknown(const FlagSpec *flags, int n, const char *arg) __attribute__((noreturn));
static inline void flag_unknown(const FlagSpec *flags, int n, const char *arg) {
    char hint[512];
    int dashes = arg[0] == '-' ? (arg[1] == '-' ? 2 : 1) : 0;
    const char *name = arg + dashes, *eq = strchr(name, '=');
    size_t len = eq ? (size_t)(eq - name) : strlen(name);
    if (dashes == 0) die_usage("unexpected argument '%s' (flags are --name VALUE; see --help)", arg);
    flag_suggest(flags, n, name, len, hint, sizeof(hint));
    die_usage("unknown flag '%.*s'%s%s", (int)(len + (size_t)dashes), arg,
              dashes == 1 ? ": flags are long, --name VALUE" : "", hint);
}

static inline void flag_print_row(const FlagSpec *f) {
    char lhs[96];
    const char *meta = f->type == FLAG_INT || f->type == FLAG_INT64 ? "N"
                     : f->type == FLAG_FLOAT ? "X"
                     : f->type == FLAG_BOOL ? "[0|1]"
                     : f->type == FLAG_CHOICE ? f->choices : "S";
    snprintf(lhs, sizeof(lhs), "--%s %s", f->name, meta);
    printf("  %-34s %s", lhs, f->help);
    if (f->dflt && f->dflt[0]) printf(" (default %s)", f->dflt);
    printf("\n");
}

static inline const char *flag_section(const FlagSpec *f) { return f->section ? f->section : "flags"; }

// The flags under their sections' headings (each section where its first flag is).
static inline void flags_print_help(const char *prog, const char *summary, const FlagSpec *flags, int n) {
    printf("usage: %s [flags]\n%s\n", prog, summary);
    for (int i = 0; i < n; i++) {
        int first = 1;
        for (int j = 0; j < i && first; j++) first = strcmp(flag_section(&flags[j]), flag_section(&flags[i])) != 0;
        if (!first) continue;
        printf("\n%s:\n", flag_section(&flags[i]));
        for (int j = i; j < n; j++)
            if (strcmp(flag_section(&flags[j]), flag_section(&flags[i])) == 0) flag_print_row(&flags[j]);
    }
    printf("\nA boolean flag given bare means 1 (--name is --name 1). --config FILE reads flags from FILE first\n"
           "(TOML: key = value lines, [headings] ignored; keys are the flag names, - or _), the command line overrides.\n");
}

// The value of TOML-style line text after "key = ": a "quoted" (\" \\ \n \t
// escapes) or 'literal' string, or a bare word, into out; NULL with why in err,
// else the rest of the line (spaces, a # comment).
static inline const char *flag_config_value(const char *p, char *out, size_t size, char *err, size_t err_size) {
    size_t n = 0;
    char quote = *p == '"' || *p == '\'' ? *p++ : 0;
    for (; *p && (quote ? *p != quote : *p != ' ' && *p != '\t' && *p != '#'); p++) {
        char c = *p;
        if (quote == '"' && c == '\\') {
            c = *++p;
            c = c == 'n' ? '\n' : c == 't' ? '\t' : c;
            if (c != '"' && c != '\\' && c != '\n' && c != '\t')
                { snprintf(err, err_size, "unknown escape in a quoted value"); return NULL; }
        }
        if (n + 1 >= size) { snprintf(err, err_size, "value is too long"); return NULL; }
        out[n++] = c;
    }
    out[n] = '\0';
    if (quote && *p++ != quote) { snprintf(err, err_size, "the value's %c is not closed on its line", quote); return NULL; }
    if (!quote && n == 0) { snprintf(err, err_size, "no value after '='"); return NULL; }
    return p;
}

// --config FILE's settings into opts (the format atop this file); an error is
// one line naming FILE:LINE, exit 2.
static inline void flags_apply_config(const char *path, const FlagSpec *flags, int n, void *opts) {
    FILE *fp = fopen(path, "r");
    if (!fp) die_usage("--config: cannot read '%s': %s", path, strerror(errno));
    char line[4 * FLAG_STR_MAX], value[FLAG_STR_MAX + 1], err[FLAG_STR_MAX + 256];
    for (int lineno = 1; fgets(line, sizeof(line), fp); lineno++) {
        size_t len = strlen(line);
        if (len + 1 == sizeof(line) && line[len - 1] != '\n') die_usage("%s:%d: the line is too long", path, lineno);
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = '\0';
        const char *p = line + strspn(line, " \t");
        if (*p == '\0' || *p == '#') continue;
        if (*p == '[') {  // a heading
            const char *close = strchr(p, ']');
            if (!close || (close[1 + strspn(close + 1, " \t")] != '\0' && close[1 + strspn(close + 1, " \t")] != '#'))
                die_usage("%s:%d: a heading is [name] alone on its line", path, lineno);
            continue;
        }
        size_t key_len = strspn(p, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-");
        const char *rest = p + key_len;
        rest += strspn(rest, " \t");
        if (key_len == 0 || *rest != '=') die_usage("%s:%d: want key = value, got '%s'", path, lineno, p);
        const FlagSpec *f = flag_find(flags, n, p, key_len);
        if (!f) {
            char hint[512];
            flag_suggest(flags, n, p, key_len, hint, sizeof(hint));
            die_usage("%s:%d: unknown setting '%.*s'%s", path, lineno, (int)key_len, p, hint);
        }
        rest = flag_config_value(rest + 1 + strspn(rest + 1, " \t"), value, sizeof(value), err, sizeof(err));
        if (!rest) die_usage("%s:%d: %s: %s", path, lineno, f->name, err);
        rest += strspn(rest, " \t");
        if (*rest != '\0' && *rest != '#') die_usage("%s:%d: unexpected '%s' after the value", path, lineno, rest);
        if (flag_try_set(f, opts, value, err, sizeof(err))) die_usage("%s:%d: %s", path, lineno, err);
    }
    if (ferror(fp)) die_usage("--config: reading '%s' failed", path);
    fclose(fp);
}

// Parses argv into opts: defaults first, then --config FILE's settings, then
// the rest of the command line. "--help" or "-h" prints the table and exits 0.
static inline void flags_parse(int argc, char **argv, const FlagSpec *flags, int n, void *opts,
                               const char *summary) {
    for (int i = 0; i < n; i++) flag_set(&flags[i], opts, flags[i].dflt ? flags[i].dflt : "");
    for (int a = 1; a < argc; a++)
        if (strcmp(argv[a], "--help") == 0 || strcmp(argv[a], "-h") == 0) {
            flags_print_help(argv[0], summary, flags, n);
            exit(0);
        }
    for (int a = 1; a < argc; a++) {
        if (strcmp(argv[a], "--config") == 0 && a + 1 == argc) die_usage("--config needs a value");
        if (strcmp(argv[a], "--config") == 0) flags_apply_config(argv[++a], flags, n, opts);
        else if (strncmp(argv[a], "--config=", 9) == 0) flags_apply_config(argv[a] + 9, flags, n, opts);
    }
    for (int a = 1; a < argc; a++) {
        const char *arg = argv[a];
        if (strcmp(arg, "--config") == 0 || strncmp(arg, "--config=", 9) == 0) {
            a += arg[8] == '\0';  // (applied above)
            continue;
        }
        if (strncmp(arg, "--", 2) != 0) flag_unknown(flags, n, arg);
        const char *name = arg + 2;
        const char *eq = strchr(name, '=');
        size_t name_len = eq ? (size_t)(eq - name) : strlen(name);
        const FlagSpec *f = NULL;
        for (int i = 0; i < n && !f; i++)
            if (strlen(flags[i].name) == name_len && strncmp(flags[i].name, name, name_len) == 0) f = &flags[i];
        if (!f) flag_unknown(flags, n, arg);
        const char *value;
        if (eq) value = eq + 1;
        else if (f->type == FLAG_BOOL && !(a + 1 < argc && flag_bool_value(argv[a + 1]) >= 0)) value = "1";  // bare
        else if (a + 1 < argc) value = argv[++a];
        else die_usage("--%s needs a value", f->name);
        flag_set(f, opts, value);
    }
}

// A flag's value as a JSON literal (strings quoted and escaped) into out.
static inline void flag_value_json(const FlagSpec *f, const void *opts, char *out, size_t size) {
    const char *field = (const char *)opts + f->offset;
    switch (f->type) {
        case FLAG_INT: case FLAG_BOOL: snprintf(out, size, "%d", *(const int *)field); return;
        case FLAG_INT64: snprintf(out, size, "%lld", *(const long long *)field); return;
        case FLAG_FLOAT: snprintf(out, size, "%.9g", (double)*(const float *)field); return;  // exact for a float
        case FLAG_STRING: case FLAG_CHOICE: {
            size_t at = 0;
            if (size < 8) return;
            out[at++] = '"';
            for (const unsigned char *c = (const unsigned char *)field; *c && at + 8 < size; c++) {
                if (*c == '"' || *c == '\\') out[at++] = '\\', out[at++] = (char)*c;
                else if (*c < 0x20) at += (size_t)snprintf(out + at, size - at, "\\u%04x", *c);
                else out[at++] = (char)*c;
            }
            out[at++] = '"';
            out[at] = '\0';
            return;
        }
    }
}

// Every flag's value as one JSON object {"name":value,...}, to f.
static inline void flags_write_json(FILE *f, const FlagSpec *flags, int n, const void *opts) {
    char v[8 * FLAG_STR_MAX];
    fputc('{', f);
    for (int i = 0; i < n; i++) {
        flag_value_json(&flags[i], opts, v, sizeof(v));
        fprintf(f, "%s\"%s\":%s", i ? "," : "", flags[i].name, v);
    }
    fputc('}', f);
}

#define FLAGS_COUNT(table) ((int)(sizeof(table) / sizeof((table)[0])))

#endif  // LLMC_ARGS_H
