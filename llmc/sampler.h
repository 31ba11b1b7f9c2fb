// sampler.h: drawing the next token from logits (softmax with temperature),
// and printing tokens as text: through a tokenizer file when one is given,
// else as bytes for a byte-level vocabulary (ids < 256), else as ids.
#ifndef LLMC_SAMPLER_H
#define LLMC_SAMPLER_H

#include <math.h>
#include <stdio.h>

#include "rand.h"

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

#endif  // LLMC_SAMPLER_H
