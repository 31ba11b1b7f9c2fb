// recompute.h: the activation recompute policy (--recompute): which layers keep
// their activations for the backward and which recompute them from what they
// keep. none keeps everything; selective recomputes attention's softmax path
// and the GELU output (large to keep, cheap to recompute: Korthikanti et al.);
// full keeps only the layer's input and runs the layer's forward again before
// its backward; full:K makes layers l with l % K == 0 full and keeps the rest.
// The trainers (gpt_cpu.h, gpt_gpu.cuh) and the memory formulas
// (gpt_activation_sizes.h, the planner) read a layer's kind from here.
#ifndef LLMC_RECOMPUTE_H
#define LLMC_RECOMPUTE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum { RECOMPUTE_NONE, RECOMPUTE_SELECTIVE, RECOMPUTE_FULL } RecomputeKind;

typedef struct {
    RecomputeKind kind;
    int every;  // full: every K-th layer (1: all of them)
} RecomputePolicy;

static inline RecomputeKind recompute_layer(const RecomputePolicy *p, int l) {
    if (p->kind == RECOMPUTE_FULL) return l % p->every == 0 ? RECOMPUTE_FULL : RECOMPUTE_NONE;
    return p->kind;
}

// Whether any of layers [l0, l1) recomputes something.
static inline int recompute_any(const RecomputePolicy *p, int l0, int l1) {
    for (int l = l0; l < l1; l++)
        if (recompute_layer(p, l) != RECOMPUTE_NONE) return 1;
    return 0;
}

// none | selective | full | full:K (K >= 1); 0 and 1 are the older levels'
// names of none and selective. Returns 0 for anything else.
static inline int recompute_parse(const char *s, RecomputePolicy *p) {
    p->kind = RECOMPUTE_NONE, p->every = 1;
    if (strcmp(s, "none") == 0 || strcmp(s, "0") == 0) return 1;
    if (strcmp(s, "selective") == 0 || strcmp(s, "1") == 0) return (p->kind = RECOMPUTE_SELECTIVE), 1;
    if (strcmp(s, "full") == 0) return (p->kind = RECOMPUTE_FULL), 1;
    if (strncmp(s, "full:", 5) != 0 || s[5] < '1' || s[5] > '9') return 0;
    char *end;
    long k = strtol(s + 5, &end, 10);
    if (*end || k < 1 || k > 1 << 20) return 0;
    p->kind = RECOMPUTE_FULL, p->every = (int)k;
    return 1;
}

// The policy's name as --recompute spells it (into buf of n bytes).
static inline const char *recompute_name(const RecomputePolicy *p, char *buf, size_t n) {
    static const char *names[] = {"none", "selective", "full"};
    if (p->kind == RECOMPUTE_FULL && p->every > 1) snprintf(buf, n, "full:%d", p->every);
    else snprintf(buf, n, "%s", names[p->kind]);
    return buf;
}

#endif  // LLMC_RECOMPUTE_H
