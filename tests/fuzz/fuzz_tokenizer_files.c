// fuzz_tokenizer_files.c: the tokenizer's file loaders (llmc/tokenizer.h) on
// arbitrary contents -- GPT-2's encoder.json + vocab.bpe, and llm.c's
// tokenizer .bin -- and, for a vocabulary that loads, the property that
// decoding the encoding of a text gives the text back.
//   input[0] bit 0 = 0: the rest is a tokenizer .bin
//   input[0] bit 0 = 1: input[1..2] (little-endian, modulo the rest's length)
//                       splits the rest into encoder.json and vocab.bpe
#include "llmc/tokenizer.h"
#include "tests/fuzz/fuzz_harness.h"

static const char FUZZ_TEXT[] = "Hello world! The quick brown fox.\n\tNumbers 12345, symbols <|> and \xc3\xa9t\xc3\xa9.";

static void check_round_trip(const Tokenizer *t) {
    for (uint32_t i = 0; i < tokenizer_vocab_size(t); i++) {
        size_t len;
        tokenizer_decode(t, i, &len);
    }
    if (!t->can_encode) return;  // an llm.c .bin: decode only
    U32Vec ids = {0};
    tokenizer_encode_text(t, (const uint8_t *)FUZZ_TEXT, sizeof(FUZZ_TEXT) - 1, 1, &ids);
    size_t pos = 0;
    for (size_t i = 0; i < ids.len; i++) {
        size_t len;
        const char *b = tokenizer_decode(t, ids.data[i], &len);
        if (pos + len > sizeof(FUZZ_TEXT) - 1 || memcmp(FUZZ_TEXT + pos, b, len) != 0) abort();
        pos += len;
    }
    if (pos != sizeof(FUZZ_TEXT) - 1) abort();
    u32vec_free(&ids);
}

static void fuzz_one(const uint8_t *data, size_t size) {
    if (size < 3) return;
    Tokenizer t;
    if ((data[0] & 1) == 0) {
        tokenizer_load_bin(&t, fuzz_write_file("tokenizer.bin", data + 1, size - 1));
    } else {
        size_t rest = size - 3, split = rest ? ((size_t)data[1] | (size_t)data[2] << 8) % (rest + 1) : 0;
        fuzz_write_file("encoder.json", data + 3, split);
        fuzz_write_file("vocab.bpe", data + 3 + split, rest - split);
        tokenizer_load_gpt2(&t, fuzz_scratch_dir());
    }
    check_round_trip(&t);
    tokenizer_free(&t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_run(fuzz_one, NULL, data, size);
    return 0;
}
