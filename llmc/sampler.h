// sampler.h: drawing the next token from logits (softmax with temperature),
// the sliding context window of a sample, and printing tokens as text: through
// a tokenizer when one is given, else as bytes for a byte-level vocabulary
// (ids < 256), else as ids. Shared by both trainers.
#ifndef LLMC_SAMPLER_H
#define LLMC_SAMPLER_H

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "rand.h"
#include "tokenizer.h"

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

// The token the sample starts from: the tokenizer's end-of-text, else the last id.
static inline int sample_start_token(const Tokenizer *tok, int V) { return tok ? (int)tokenizer_eot(tok) : V - 1; }

// Prints one token: decoded by the tokenizer when there is one, as a byte for a
// byte-level vocabulary (V <= 257), else as <id>.
static void sample_print_token(FILE *out, const Tokenizer *tok, int id, int V) {
    size_t nbytes;
    if (tok && id < (int)tokenizer_vocab_size(tok)) {
        const char *bytes = tokenizer_decode(tok, (uint32_t)id, &nbytes);
        fwrite(bytes, 1, nbytes, out);
    } else if (id < 256 && V <= 257) {
        fputc(id, out);
    } else {
        fprintf(out, "<%d>", id);
    }
}

#endif  // LLMC_SAMPLER_H
