// test_tokenizer.c: llmc/tokenizer.h: GPT-2's pre-tokenisation on hand-checked
// cases, encoding equal to GPT-2's reference ids on every fixture in
// ../shared/data/gpt2/fixtures (SKIP when absent), decode(encode(x)) == x on
// arbitrary bytes (invalid UTF-8 included), the BPE trainer, split-parallel
// encoding equal to serial, and the llm.c .bin and encoder.json/vocab.bpe round trips.
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "llmc/rand.h"
#include "llmc/tokenizer.h"
#include "tests/testing.h"

static const char *data_dir(void) {
    static char dir[4096];
    snprintf(dir, sizeof(dir), "%s/../shared/data", getenv("REPO") ? getenv("REPO") : ".");
    return dir;
}

// Pre-tokens of text joined with '|', compared to the regex's split (from
// Python's `regex` module with GPT-2's pattern; invalid bytes as \p{Cs}).
static void test_pretokenize(void) {
    static const char *cases[][2] = {
        {"Hello  world\n\n x's 'RE they'll", "Hello| | world|\n\n| x|'s| '|RE| they|'ll"},
        {"a \n\tb   \n", "a| \n|\t|b|   \n"},
        {"x?'s  12ab\xc2\xa0\xc2\xa0" "c", "x|?'|s| | 12|ab|\xc2\xa0|\xc2\xa0|c"},
        {"caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e 42\xc2\xbd \xf0\x9f\x9a\x80!!",
         "caf\xc3\xa9| \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e| 42\xc2\xbd| \xf0\x9f\x9a\x80!!"},
        {"end   ", "end|   "},
        {"a\xff\xfe" "b \xc3(\xed\xa0\x80z", "a|\xff\xfe|b| \xc3(\xed\xa0\x80|z"},
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        const uint8_t *s = (const uint8_t *)cases[c][0];
        size_t n = strlen(cases[c][0]), m = 0;
        char got[256];
        for (size_t i = 0; i < n;) {
            size_t j = pretoken_end(s, i, n);
            if (i) got[m++] = '|';
            memcpy(got + m, s + i, j - i);
            m += j - i;
            i = j;
        }
        got[m] = 0;
        test_result(strcmp(got, cases[c][1]) == 0, "pretokenize case %zu", c);
    }
    int cls;
    const uint8_t ideo_space[] = {0xE3, 0x80, 0x80}, fs[] = {0x1C}, overlong[] = {0xC0, 0xAF};
    utf8_char(ideo_space, ideo_space + 3, &cls);
    int ok = cls == CC_SPACE;
    utf8_char(fs, fs + 1, &cls);
    ok &= cls == CC_OTHER;
    ok &= utf8_char(overlong, overlong + 2, &cls) == 1 && cls == CC_OTHER;
    test_result(ok, "unicode classes: U+3000 is space, U+001C and overlong UTF-8 are other");
}

static int roundtrip(const Tokenizer *t, const uint8_t *s, size_t n, size_t *ntok) {
    U32Vec ids = {0};
    tokenizer_encode_text(t, s, n, 1, &ids);
    uint8_t *back = (uint8_t *)mallocCheck(n + 1);
    size_t m = 0;
    int ok = 1;
    for (size_t i = 0; i < ids.len && ok; i++) {
        size_t len;
        const char *b = tokenizer_decode(t, ids.data[i], &len);
        ok = ids.data[i] != tokenizer_eot(t) && m + len <= n;
        if (ok) memcpy(back + m, b, len);
        m += len;
    }
    ok = ok && m == n && memcmp(back, s, n) == 0;
    *ntok = ids.len;
    free(back);
    u32vec_free(&ids);
    return ok;
}

// Random bytes: biased towards spaces, letters, newlines, apostrophes and UTF-8
// lead/continuation bytes so that every rule and every invalid form shows up.
static uint8_t *random_bytes(size_t n, uint64_t seed) {
    static const uint8_t pool[] = {' ', ' ', '\n', '\t', '\'', 's', 'l', 'a', 'Z', '7', '!', 0xC3, 0xA9, 0xE6, 0x97,
                                   0xF0, 0x9F, 0x80, 0xFF, 0xED, 0xA0, 0x00};
    Rng r;
    rng_seed(&r, seed);
    uint8_t *s = (uint8_t *)mallocCheck(n);
    for (size_t i = 0; i < n; i++)
        s[i] = rng_below(&r, 4) == 0 ? (uint8_t)rng_below(&r, 256) : pool[rng_below(&r, sizeof(pool))];
    return s;
}

static int same_decode_tables(const Tokenizer *a, const Tokenizer *b) {
    if (a->vocab_size != b->vocab_size || a->eot != b->eot) return 0;
    for (uint32_t i = 0; i < a->vocab_size; i++) {
        size_t la, lb;
        const char *x = tokenizer_decode(a, i, &la), *y = tokenizer_decode(b, i, &lb);
        if (la != lb || memcmp(x, y, la) != 0) return 0;
    }
    return 1;
}

static int same_encoding(const Tokenizer *a, const Tokenizer *b, int threads_a, int threads_b, const uint8_t *s, size_t n) {
    U32Vec x = {0}, y = {0};
    tokenizer_encode_text(a, s, n, threads_a, &x);
    tokenizer_encode_text(b, s, n, threads_b, &y);
    int ok = x.len == y.len && memcmp(x.data, y.data, x.len * sizeof(uint32_t)) == 0;
    u32vec_free(&x);
    u32vec_free(&y);
    return ok;
}

static void test_bin_roundtrip(const Tokenizer *t, const char *what) {
    char path[] = "/tmp/test_tokenizer_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0, "mkstemp");
    close(fd);
    tokenizer_save_bin(t, path);
    Tokenizer b;
    tokenizer_load(&b, path);
    test_result(same_decode_tables(t, &b) && !b.can_encode, "%s: llm.c tokenizer .bin round trip", what);
    tokenizer_free(&b);
    unlink(path);
}

// tokenizer_load(path) in a child process must exit 2 with one stderr line naming path.
static void expect_load_exit2(const char *path, const char *what) {
    char err_path[] = "/tmp/test_tokenizer_err_XXXXXX";
    int fd = mkstemp(err_path);
    CHECK(fd >= 0, "mkstemp");
    fflush(stdout);
    pid_t pid = fork();
    CHECK(pid >= 0, "fork");
    if (pid == 0) {
        dup2(fd, 2);
        Tokenizer t;
        tokenizer_load(&t, path);
        _exit(0);
    }
    int status;
    waitpid(pid, &status, 0);
    size_t n;
    char *err = (char *)read_whole_file(err_path, NULL, &n);
    int lines = 0;
    for (size_t i = 0; i < n; i++) lines += err[i] == '\n';
    if (n > 0 && err[n - 1] == '\n') err[n - 1] = '\0';
    test_result(WIFEXITED(status) && WEXITSTATUS(status) == 2 && lines == 1 && strstr(err, path) != NULL,
                "bad tokenizer file (%s): exit 2, one line naming it (%.200s)", what, err);
    free(err);
    close(fd);
    unlink(err_path);
}

static void test_bad_bin(void) {
    char path[] = "/tmp/test_tokenizer_bad_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0, "mkstemp");
    close(fd);
    // 1030 bytes (then padding): header, tokens "a" "b" "c"
    struct { uint32_t header[256]; uint8_t tokens[6]; } file = {{TOKENIZER_BIN_MAGIC, 2, 3, 2}, {1, 'a', 1, 'b', 1, 'c'}};
    static const struct { int field; uint32_t value; size_t size; const char *what; } cases[] = {
        {0, 12345, 1030, "bad magic"},      {1, 3, 1030, "version 3"},
        {3, 3, 1030, "eot >= vocab size"}, {2, 4, 1030, "truncated token table"},
        {2, 3, 100, "truncated header"},
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        uint32_t saved = file.header[cases[c].field];
        file.header[cases[c].field] = cases[c].value;
        FILE *f = fopenCheck(path, "wb");
        fwriteExact(&file, 1, cases[c].size, f, path);
        fcloseCheck(f, path);
        expect_load_exit2(path, cases[c].what);
        file.header[cases[c].field] = saved;
    }
    FILE *f = fopenCheck(path, "wb");
    fwriteExact(&file, 1, 1030, f, path);
    fcloseCheck(f, path);
    Tokenizer t;
    tokenizer_load(&t, path);
    size_t len;
    const char *b = tokenizer_decode(&t, 1, &len);
    test_result(t.vocab_size == 3 && t.eot == 2 && len == 1 && b[0] == 'b', "hand-made llm.c tokenizer .bin loads");
    tokenizer_free(&t);
    unlink(path);
    expect_load_exit2("/nonexistent/tokenizer.bin", "missing file");
}

// A corpus of many short lines: shakespeare's start when present, else words
// made of random syllables.
static uint8_t *training_corpus(size_t *n) {
    char path[4200];
    snprintf(path, sizeof(path), "%s/tinyshakespeare.txt", data_dir());
    struct stat st;
    if (stat(path, &st) == 0) {
        uint8_t *s = read_whole_file(path, NULL, n);
        if (*n > 200000) *n = 200000;
        return s;
    }
    static const char *syl[] = {"th", "e", "ki", "ng", "qu", "een", "sh", "all", "spe", "ak", "ou", "ar", "t", "my", "lo", "rd", "of", "yo", "rk", "is"};
    Rng r;
    rng_seed(&r, 7);
    size_t cap = 200000, m = 0;
    uint8_t *s = (uint8_t *)mallocCheck(cap + 16);
    while (m < cap) {
        for (uint64_t k = 1 + rng_below(&r, 3); k > 0; k--) {
            const char *w = syl[rng_below(&r, sizeof(syl) / sizeof(syl[0]))];
            memcpy(s + m, w, strlen(w));
            m += strlen(w);
        }
        s[m++] = rng_below(&r, 6) == 0 ? '\n' : ' ';
    }
    *n = m;
    return s;
}

static void test_bytes_tokenizer(void) {
    Tokenizer t;
    tokenizer_init_bytes(&t);
    size_t n = 5000, ntok;
    uint8_t *s = random_bytes(n, 1);
    test_result(roundtrip(&t, s, n, &ntok) && ntok == n && t.vocab_size == 257 && t.eot == 256,
                "bytes tokenizer: one id per byte, round trip, vocab 257, EOT 256");
    free(s);
    tokenizer_free(&t);
}

static void test_trainer(void) {
    size_t n;
    uint8_t *corpus = training_corpus(&n);
    const uint8_t *texts[1] = {corpus};
    Tokenizer t;
    tokenizer_train(&t, texts, &n, 1, 600);
    test_result(t.vocab_size == 600 && t.eot == 599 && t.num_merges == 343, "trainer: vocab 600 = 256 bytes + 343 merges + EOT (got %u)", t.vocab_size);
    size_t ntok;
    int ok = roundtrip(&t, corpus, n, &ntok);
    test_result(ok && ntok * 2 < n, "trainer: corpus round trips and is %.2f bytes/token (> 2)", (double)n / (double)ntok);
    uint8_t *rnd = random_bytes(20000, 2);
    test_result(roundtrip(&t, rnd, 20000, &ntok), "trainer: random bytes round trip");
    test_result(same_encoding(&t, &t, 1, 2, corpus, n) && same_encoding(&t, &t, 1, 7, corpus, n) &&
                same_encoding(&t, &t, 1, 3, rnd, 20000),
                "trainer vocab: split-parallel encoding (2, 7 threads) equals 1 thread");

    char dir[] = "/tmp/test_tokenizer_dir_XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    tokenizer_save_dir(&t, dir);
    Tokenizer back;
    tokenizer_load(&back, dir);
    test_result(same_decode_tables(&t, &back) && back.num_merges == t.num_merges && same_encoding(&t, &back, 1, 1, corpus, n) &&
                same_encoding(&t, &back, 1, 1, rnd, 20000),
                "trainer: encoder.json + vocab.bpe reload encodes identically");
    char path[4200];
    const char *files[] = {"encoder.json", "vocab.bpe", "tokenizer.bin"};
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof(path), "%s/%s", dir, files[i]);
        unlink(path);
    }
    rmdir(dir);
    test_bin_roundtrip(&t, "trained vocab");
    tokenizer_free(&back);
    tokenizer_free(&t);
    free(rnd);
    free(corpus);
}

static void test_gpt2(void) {
    char dir[4200], fixtures[4300];
    snprintf(dir, sizeof(dir), "%s/gpt2", data_dir());
    snprintf(fixtures, sizeof(fixtures), "%s/fixtures", dir);
    DIR *d = opendir(fixtures);
    if (d == NULL) {
        test_skip("gpt2 fixtures: %s not found", fixtures);
        return;
    }
    Tokenizer t;
    tokenizer_load(&t, dir);
    test_result(t.vocab_size == 50257 && t.eot == 50256 && t.num_merges == 50000, "gpt2: vocab 50257, EOT 50256, 50000 merges");
    int n_fixtures = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        size_t nl = strlen(e->d_name);
        if (nl < 5 || strcmp(e->d_name + nl - 4, ".txt") != 0) continue;
        char txt[4600], ref[4600];
        snprintf(txt, sizeof(txt), "%s/%s", fixtures, e->d_name);
        snprintf(ref, sizeof(ref), "%s/%.*s.u16", fixtures, (int)(nl - 4), e->d_name);
        size_t n, m;
        uint8_t *s = read_whole_file(txt, NULL, &n), *r = read_whole_file(ref, NULL, &m);
        U32Vec ids = {0};
        tokenizer_encode_text(&t, s, n, 1, &ids);
        size_t first_bad = ids.len == m / 2 ? SIZE_MAX : 0;
        for (size_t i = 0; i < ids.len && i < m / 2 && first_bad == SIZE_MAX; i++) {
            uint16_t v;
            memcpy(&v, r + 2 * i, 2);
            if (v != ids.data[i]) first_bad = i;
        }
        test_result(first_bad == SIZE_MAX, "gpt2 fixture %s: %zu ids equal the reference (%zu)", e->d_name, ids.len, m / 2);
        size_t ntok;
        test_result(roundtrip(&t, s, n, &ntok) && same_encoding(&t, &t, 1, 2, s, n), "gpt2 fixture %s: round trip, 2 threads equal 1",
                    e->d_name);
        n_fixtures++;
        u32vec_free(&ids);
        free(s);
        free(r);
    }
    closedir(d);
    test_result(n_fixtures > 0, "gpt2: %d fixtures checked", n_fixtures);
    size_t ntok;
    uint8_t *rnd = random_bytes(20000, 3);
    test_result(roundtrip(&t, rnd, 20000, &ntok), "gpt2: random bytes (invalid UTF-8 included) round trip");
    free(rnd);
    test_bin_roundtrip(&t, "gpt2");
    tokenizer_free(&t);
}

int main(void) {
    test_pretokenize();
    test_bytes_tokenizer();
    test_bad_bin();
    test_trainer();
    test_gpt2();
    return test_exit_code();
}
