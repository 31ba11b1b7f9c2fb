// args.h: a table-driven GNU-style long-flag parser. One table of FlagSpec
// rows drives parsing (--name VALUE and --name=VALUE), defaults, validation of
// each value, and the --help text, so the three can never disagree.
// Any error is one line on stderr naming the flag, and exit status 2.
#ifndef LLMC_ARGS_H
#define LLMC_ARGS_H

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "utils.h"

typedef enum { FLAG_INT, FLAG_INT64, FLAG_FLOAT, FLAG_STRING, FLAG_CHOICE, FLAG_BOOL } FlagType;

typedef struct {
    const char *name;      // without the leading "--"
    FlagType type;
    size_t offset;         // offsetof(options struct, field)
    const char *dflt;      // default, parsed like a command-line value
    const char *choices;   // FLAG_CHOICE: "a|b|c" (the field holds a copy of the chosen string)
    double min, max;       // numeric range, inclusive
    const char *help;
} FlagSpec;

#define FLAG_STR_MAX 512

static inline void flag_set(const FlagSpec *f, void *opts, const char *value) {
    char *field = (char *)opts + f->offset;
    char *end = NULL;
    errno = 0;
    switch (f->type) {
        case FLAG_INT:
        case FLAG_INT64: {
            long long v = strtoll(value, &end, 10);
            if (errno || end == value || *end != '\0') die_usage("--%s: '%s' is not an integer", f->name, value);
            if ((double)v < f->min || (double)v > f->max)
                die_usage("--%s: %lld is out of range [%.0f, %.0f]", f->name, v, f->min, f->max);
            if (f->type == FLAG_INT) *(int *)field = (int)v;
            else *(long long *)field = v;
            return;
        }
        case FLAG_FLOAT: {
            double v = strtod(value, &end);
            if (errno || end == value || *end != '\0' || !isfinite(v))
                die_usage("--%s: '%s' is not a number", f->name, value);
            if (v < f->min || v > f->max) die_usage("--%s: %g is out of range [%g, %g]", f->name, v, f->min, f->max);
            *(float *)field = (float)v;
            return;
        }
        case FLAG_BOOL: {
            if (strcmp(value, "1") == 0 || strcmp(value, "true") == 0) *(int *)field = 1;
            else if (strcmp(value, "0") == 0 || strcmp(value, "false") == 0) *(int *)field = 0;
            else die_usage("--%s: '%s' is not 0 or 1", f->name, value);
            return;
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
            if (!ok) die_usage("--%s: '%s' is not one of %s", f->name, value, f->choices);
        }
        /* fall through */  // store the string
        case FLAG_STRING:
            if (strlen(value) >= FLAG_STR_MAX) die_usage("--%s: value is too long", f->name);
            snprintf(field, FLAG_STR_MAX, "%s", value);
            return;
    }
}

static inline void flags_print_help(const char *prog, const char *summary, const FlagSpec *flags, int n) {
    printf("usage: %s [flags]\n%s\n\nflags:\n", prog, summary);
    for (int i = 0; i < n; i++) {
        const FlagSpec *f = &flags[i];
        char lhs[96];
        const char *meta = f->type == FLAG_INT || f->type == FLAG_INT64 ? "N"
                         : f->type == FLAG_FLOAT ? "X"
                         : f->type == FLAG_BOOL ? "0|1"
                         : f->type == FLAG_CHOICE ? f->choices : "S";
        snprintf(lhs, sizeof(lhs), "--%s %s", f->name, meta);
        printf("  %-34s %s", lhs, f->help);
        if (f->dflt && f->dflt[0]) printf(" (default %s)", f->dflt);
        printf("\n");
    }
}

// Parses argv into opts: defaults first, then the command line. "--help" or
// "-h" prints the table and exits 0. A boolean flag alone (last, or before
// another --flag) means 1.
static inline void flags_parse(int argc, char **argv, const FlagSpec *flags, int n, void *opts,
                               const char *summary) {
    for (int i = 0; i < n; i++) flag_set(&flags[i], opts, flags[i].dflt ? flags[i].dflt : "");
    for (int a = 1; a < argc; a++) {
        const char *arg = argv[a];
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            flags_print_help(argv[0], summary, flags, n);
            exit(0);
        }
        if (strncmp(arg, "--", 2) != 0) die_usage("unexpected argument '%s' (flags are --name VALUE; see --help)", arg);
        const char *name = arg + 2;
        const char *eq = strchr(name, '=');
        size_t name_len = eq ? (size_t)(eq - name) : strlen(name);
        const FlagSpec *f = NULL;
        for (int i = 0; i < n; i++) {
            if (strlen(flags[i].name) == name_len && strncmp(flags[i].name, name, name_len) == 0) { f = &flags[i]; break; }
        }
        if (!f) die_usage("unknown flag '--%.*s' (see --help)", (int)name_len, name);
        const char *value;
        if (eq) value = eq + 1;
        else if (f->type == FLAG_BOOL && (a + 1 == argc || strncmp(argv[a + 1], "--", 2) == 0)) value = "1";  // bare
        else if (a + 1 < argc) value = argv[++a];
        else die_usage("--%s needs a value", f->name);
        flag_set(f, opts, value);
    }
}

#define FLAGS_COUNT(table) ((int)(sizeof(table) / sizeof((table)[0])))

#endif  // LLMC_ARGS_H
