// sampler.h: drawing the next token from logits (softmax with temperature,
// greedy at temperature 0, optionally among the top k) and the sliding context
// window of a sample: the sampling math, which the models and
// tensor_parallel.h's vocabulary-parallel draw use. Printing the tokens as text
// (through the tokenizer) is train_loop.h's.
#ifndef LLMC_SAMPLER_H
#define LLMC_SAMPLER_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rand.h"   // defines: Rng, rng_uniform
#include "utils.h"  // defines: callocCheck, mallocCheck

// How a token is drawn: softmax(logits / temperature) (0: the most likely
// token, the first of equals), over the top_k most likely only (0: all; the
// tokens equal to the k-th are in too).
typedef struct {
    float temperature;
    int top_k;
} SampleParams;

static int sample_cmp_desc(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x < y) - (x > y);
}

// The k-th largest of logits (V), the least a top-k token may have (-inf: k is 0 or >= V).
static float sample_top_k_floor(const float *logits, int V, int k) {
    if (k <= 0 || k >= V) return -INFINITY;
    float *sorted = (float *)mallocCheck(sizeof(float) * (size_t)V);
    memcpy(sorted, logits, sizeof(float) * (size_t)V);
    qsort(sorted, (size_t)V, sizeof(float), sample_cmp_desc);
    float floor = sorted[k - 1];
    free(sorted);
    return floor;
}

// logits (V); returns a token id drawn as sp says. One draw from rng either way,
// so what follows a greedy token does not depend on the temperature.
static int sample_token(const float *logits, int V, const SampleParams *sp, Rng *rng) {
    float mx = -INFINITY, floor = sample_top_k_floor(logits, V, sp->top_k);
    int best = 0;
    for (int v = 0; v < V; v++)
        if (logits[v] > mx) mx = logits[v], best = v;
    double u = (double)rng_uniform(rng);
    if (sp->temperature == 0) return best;
    double sum = 0.0;
    for (int v = 0; v < V; v++)
        if (logits[v] >= floor) sum += exp((double)(logits[v] - mx) / sp->temperature);
    double r = u * sum, cdf = 0.0;
    for (int v = 0; v < V; v++) {
        if (logits[v] < floor) continue;
        cdf += exp((double)(logits[v] - mx) / sp->temperature);
        if (r < cdf) return v;
    }
    return best;
}

// The context of a sample: a sliding window of the last T tokens (T,), which
// starts with one token (the end-of-text token: a new document).
typedef struct {
    int *tokens;
    int len, T;
} SampleWindow;

static void sample_window_init(SampleWindow *w, int T, int start) {
    w->tokens = (int *)callocCheck((size_t)T, sizeof(int));
    w->T = T;
    w->tokens[0] = start;
    w->len = 1;
}

static void sample_window_push(SampleWindow *w, int token) {
    if (w->len == w->T) {
        memmove(w->tokens, w->tokens + 1, sizeof(int) * (size_t)(w->T - 1));
        w->len--;
    }
    w->tokens[w->len++] = token;
}

static void sample_window_free(SampleWindow *w) { free(w->tokens); }

#endif  // LLMC_SAMPLER_H
