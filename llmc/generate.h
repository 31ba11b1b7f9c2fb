// generate.h: --generate, a continuation of --prompt printed as text, on
// either trainer (over TrainModel's forward and sample: any layout, every rank
// taking part, rank 0 printing). The context starts with <|endoftext|> (a new
// document) and holds the last --seq-len tokens: a longer prompt loses its
// first tokens, and the context then slides as tokens are added. The prompt is
// encoded by the run's tokenizer (a GPT-2 BPE directory); a byte-level model
// (vocabulary <= 257) takes its bytes without one. Tokens are drawn as
// --temperature and --top-k say (sampler.h), from --seed's sampling generator.
#ifndef LLMC_GENERATE_H
#define LLMC_GENERATE_H

#include <stdio.h>
#include <string.h>

#include "sampler.h"     // defines: SampleWindow, sample_window_init, sample_window_push, sample_window_free
#include "tokenizer.h"   // defines: Tokenizer, U32Vec, tokenizer_encode_text, u32vec_push, ...
#include "train_loop.h"  // defines: TrainRun, TrainModel, sample_start_token, sample_print_token, ...

#define GENERATE_NO_TOKENIZER \
    "give --tokenizer DIR (GPT-2's encoder.json + vocab.bpe, or a Hugging Face model directory's vocab.json + " \
    "merges.txt)"

// At start-up (before training): the prompt can be encoded. One line, exit 2, when not.
static void generate_check(const TrainOptions *o, const Tokenizer *tok, int vocab_size) {
    if (!o->generate || !o->prompt[0]) return;
    if (!tok && vocab_size > 257)
        die_usage("--prompt: the model's %d tokens need a tokenizer to encode it: " GENERATE_NO_TOKENIZER, vocab_size);
    if (tok && !tok->can_encode)
        die_usage("--prompt: --tokenizer '%s' decodes only (an llm.c .bin has no merges): " GENERATE_NO_TOKENIZER,
                  o->tokenizer);
}

// The prompt's ids (ids: --max-new-tokens + its length at most).
static void generate_encode(const TrainOptions *o, const Tokenizer *tok, U32Vec *ids) {
    const uint8_t *s = (const uint8_t *)o->prompt;
    size_t n = strlen(o->prompt);
    if (tok) tokenizer_encode_text(tok, s, n, 1, ids);
    else
        for (size_t i = 0; i < n; i++) u32vec_push(ids, s[i]);
}

// Prints the prompt and --max-new-tokens tokens after it (every rank runs it).
static void train_generate(const TrainRun *r) {
    const TrainModel *tm = r->model;
    const TrainOptions *o = r->o;
    int V = r->cfg->vocab_size, T = r->plan.T, show = r->rank == 0;
    U32Vec ids = {NULL, 0, 0};
    generate_encode(o, r->tokenizer, &ids);
    SampleWindow w;
    sample_window_init(&w, T, sample_start_token(r->tokenizer, V));
    for (size_t i = 0; i < ids.len; i++) sample_window_push(&w, (int)ids.data[i]);
    Rng rng = train_sample_rng(o);
    if (show) {
        if (ids.len + 1 > (size_t)T)
            printf("note: the prompt's %zu tokens and <|endoftext|> exceed the context of --seq-len %d: its first %zu "
                   "tokens are not seen\n", ids.len, T, ids.len + 1 - (size_t)T);
        if (!r->tokenizer && V > 257) printf("note: no tokenizer: tokens print as <id>; " GENERATE_NO_TOKENIZER "\n");
        printf("---- generate (temperature %g, top-k %d, seed %lld) ----\n", o->temperature, o->top_k, o->seed);
        for (size_t i = 0; i < ids.len; i++) sample_print_token(stdout, r->tokenizer, (int)ids.data[i], V);
    }
    train_range_push(tm, "generate");
    train_continue(r, &w, o->max_new_tokens, &rng);
    train_range_pop(tm);
    sample_window_free(&w);
    u32vec_free(&ids);
}

#endif  // LLMC_GENERATE_H
