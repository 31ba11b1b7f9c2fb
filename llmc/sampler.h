// sampler.h: drawing the next token from logits (softmax with temperature)
// and the sliding context window of a sample: the sampling math, which the
// models and tensor_parallel.h's vocabulary-parallel draw use. Printing the
// tokens as text (through the tokenizer) is train_loop.h's.
#ifndef LLMC_SAMPLER_H
#define LLMC_SAMPLER_H

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "rand.h"   // defines: Rng, rng_uniform
#include "utils.h"  // defines: callocCheck

// logits (V); returns a token id drawn from softmax(logits / temperature).
static int sample_token(const float *logits, int V, float temperature, Rng *rng) {
    float mx = -INFINITY;
    for (int v = 0; v < V; v++) mx = logits[v] > mx ? logits[v] : mx;
    double sum = 0.0;
    for (int v = 0; v < V; v++) sum += exp((double)(logits[v] - mx) / temperature);
    double r = (double)rng_uniform(rng) * sum, cdf = 0.0;
    for (int v = 0; v < V; v++) {
        cdf += exp((double)(logits[v] - mx) / temperature);
        if (r < cdf) return v;
    }
    return V - 1;
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
