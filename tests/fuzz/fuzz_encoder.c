// fuzz_encoder.c: the BPE encoder (llmc/tokenizer.h) on arbitrary bytes, with
// a vocabulary learned at start-up from a built-in corpus (no files needed).
// Properties: decode(encode(x)) == x; encoding x cut into pieces at the
// encoder's safe boundaries (tokenizer_split, as the threaded encoder cuts it)
// gives the same ids as encoding it whole.
// gcc 12 at -O1 with AddressSanitizer folds the built-in corpus through tokenizer_train into
// tokenizer_set_merges and reports a memcpy of n merges into the n-merge buffer as out of bounds
// (-Warray-bounds, -Wstringop-overread; false positives: the same code builds clean everywhere else)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Warray-bounds"
#pragma GCC diagnostic ignored "-Wstringop-overread"
#endif
#include "llmc/tokenizer.h"
#include "tests/fuzz/fuzz_harness.h"

static Tokenizer fuzz_tok;

static void learn_vocabulary(void) {
    static const char *corpus =
        "It was the best of times, it was the worst of times, it was the age of wisdom, it was the age of "
        "foolishness.\nstatic inline int64_t ceil_div_i64(int64_t a, int64_t b) { return a / b + (a % b != 0); }\n"
        "  Numbers: 0 1 12 123 1234 3.14159; caf\xc3\xa9 na\xc3\xafve \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80 's 't 're 've\n";
    const uint8_t *texts[1] = {(const uint8_t *)corpus};
    size_t lens[1] = {strlen(corpus)};
    tokenizer_train(&fuzz_tok, texts, lens, 1, 400);
}

static void encode_whole(const uint8_t *s, size_t n, U32Vec *out) {
    WordCache cache;
    wordcache_init(&cache);
    tokenizer_encode(&fuzz_tok, &cache, s, n, out);
    wordcache_free(&cache);
}

static void fuzz_one(const uint8_t *data, size_t size) {
    U32Vec whole = {0}, pieces = {0};
    encode_whole(data, size, &whole);
    size_t pos = 0;  // decode(encode(x)) == x
    for (size_t i = 0; i < whole.len; i++) {
        size_t len;
        const char *b = tokenizer_decode(&fuzz_tok, whole.data[i], &len);
        if (pos + len > size || memcmp(data + pos, b, len) != 0) abort();
        pos += len;
    }
    if (pos != size) abort();
    size_t max_pieces = 1 + (size ? data[0] % 16 : 0);
    size_t *starts = (size_t *)mallocCheck((max_pieces + 1) * sizeof(size_t));
    size_t k = tokenizer_split(data, size, max_pieces, starts);
    for (size_t p = 0; p < k; p++) encode_whole(data + starts[p], starts[p + 1] - starts[p], &pieces);
    if (pieces.len != whole.len || (whole.len && memcmp(pieces.data, whole.data, whole.len * sizeof(uint32_t)) != 0))
        abort();
    free(starts);
    u32vec_free(&whole);
    u32vec_free(&pieces);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!fuzz_tok.vocab_size) learn_vocabulary();  // outside fuzz_run: kept for every input
    fuzz_run(fuzz_one, NULL, data, size);
    return 0;
}
