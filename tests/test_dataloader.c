// test_dataloader.c: token shards (llmc/shards.h) and the data loader
// (llmc/dataloader.h). Without arguments it runs the unit tests on shards it
// writes to a temporary directory. tests/test_dataloader.sh uses two helper
// modes for the error cases (each must exit 2 naming the file):
//   test_dataloader --write-bad DIR         write good and defective shards to DIR
//   test_dataloader --load PATTERN T VOCAB  read one epoch (B=1, prefetch 2)
#include <dirent.h>
#include <unistd.h>

#include "llmc/dataloader.h"
#include "tests/testing.h"

// The test data set: token i of the data set has the value i (so a sample is
// identified by its first token), split into shards of these sizes.
static const int64_t SHARD_SIZES[] = {1000, 37, 10, 2500, 613};
#define NUM_TEST_SHARDS 5
#define TEST_T 16
#define TEST_VOCAB 65536

static char tmpdir[256];

static void write_shard(const char *path, int token_bytes, int zstd_level, uint32_t first, int64_t n) {
    ShardWriter *w = shard_writer_open(path, token_bytes, zstd_level);
    uint32_t chunk[777];  // appended in odd-sized pieces to exercise block boundaries
    for (int64_t done = 0; done < n;) {
        int64_t k = n - done < 777 ? n - done : 777;
        for (int64_t i = 0; i < k; i++) chunk[i] = first + (uint32_t)(done + i);
        shard_writer_append(w, chunk, (size_t)k);
        done += k;
    }
    shard_writer_close(w);
}

// Writes the data set as NAME_000.bin, ...; returns its glob pattern.
static void make_dataset(const char *name, int token_bytes, int zstd_level, char *pattern, size_t cap) {
    uint32_t first = 0;
    for (int s = 0; s < NUM_TEST_SHARDS; s++) {
        char path[512];
        snprintf(path, sizeof(path), "%s/%s_%03d.bin", tmpdir, name, s);
        write_shard(path, token_bytes, zstd_level, first, SHARD_SIZES[s]);
        first += (uint32_t)SHARD_SIZES[s];
    }
    snprintf(pattern, cap, "%s/%s_*.bin", tmpdir, name);
}

static int64_t expected_samples(int T) {
    int64_t s = 0;
    for (int i = 0; i < NUM_TEST_SHARDS; i++) s += SHARD_SIZES[i] > T ? (SHARD_SIZES[i] - 1) / T : 0;
    return s;
}

// Runs a loader for nb batches; starts (nb * B): the first token of each sample.
// Returns 1 if every sample is T+1 aligned consecutive tokens of one shard with
// targets shifted by one.
typedef struct { int B, rank, world, shuffle, prefetch; uint64_t seed; } Config;

static int check_sample(const int *in, const int *tg, int T) {
    int64_t base = 0, s = 0;
    while (s < NUM_TEST_SHARDS && in[0] >= base + SHARD_SIZES[s]) base += SHARD_SIZES[s++];
    if (s == NUM_TEST_SHARDS || (in[0] - base) % T != 0 || in[0] - base + T + 1 > SHARD_SIZES[s]) return 0;
    for (int t = 0; t < T; t++) {
        if (in[t] != in[0] + t || tg[t] != in[0] + t + 1) return 0;
    }
    return 1;
}

static int run_batches(DataLoader *dl, int nb, int *starts) {
    int B = dl->B, T = dl->T, ok = 1;
    int *in = (int *)mallocCheck(sizeof(int) * (size_t)B * T), *tg = (int *)mallocCheck(sizeof(int) * (size_t)B * T);
    for (int b = 0; b < nb; b++) {
        dataloader_next(dl, in, tg);
        for (int i = 0; i < B; i++) {
            ok &= check_sample(in + i * T, tg + i * T, T);
            starts[b * B + i] = in[i * T];
        }
    }
    free(in);
    free(tg);
    return ok;
}

static int *run_config(const char *pattern, Config c, int nb, int *ok) {
    DataLoader dl;
    dataloader_init(&dl, pattern, c.B, TEST_T, c.rank, c.world, c.shuffle, c.seed, TEST_VOCAB, c.prefetch);
    int *starts = (int *)mallocCheck(sizeof(int) * (size_t)nb * c.B);
    *ok = run_batches(&dl, nb, starts);
    dataloader_free(&dl);
    return starts;
}

static int cmp_int(const void *a, const void *b) { return (*(const int *)a > *(const int *)b) - (*(const int *)a < *(const int *)b); }

static int same(const int *a, const int *b, size_t n) { return memcmp(a, b, n * sizeof(int)) == 0; }

// ---------------------------------------------------------------------------

static void test_shards_roundtrip(void) {
    const int64_t n = 40000;  // > 2 zstd blocks
    const struct { const char *name; int bytes, level; } fmts[] = {{"u16", 2, 0}, {"u32", 4, 0}, {"zstd16", 2, 3}, {"zstd32", 4, 1}};
    uint32_t *out = (uint32_t *)mallocCheck(sizeof(uint32_t) * (size_t)n);
    for (size_t f = 0; f < sizeof(fmts) / sizeof(fmts[0]); f++) {
#ifndef LLMC_ZSTD
        if (fmts[f].level > 0) {
            test_skip("shards_roundtrip_%s (built without libzstd)", fmts[f].name);
            continue;
        }
#endif
        char path[512];
        snprintf(path, sizeof(path), "%s/rt_%s.bin", tmpdir, fmts[f].name);
        uint32_t first = fmts[f].bytes == 4 ? 100000 : 0;  // uint32 shards hold ids beyond 16 bits
        write_shard(path, fmts[f].bytes, fmts[f].level, first, n);
        ShardReader r;
        shard_reader_open(&r, path);
        int ok = r.num_tokens == n && r.token_bytes == fmts[f].bytes && r.zstd == (fmts[f].level > 0);
        uint64_t x = 7;
        for (int k = 0; k < 300 && ok; k++) {
            int64_t b = (int64_t)((x = dl_hash(x)) % (uint64_t)n);
            int64_t e = b + (int64_t)((x = dl_hash(x)) % 20000);
            if (e > n) e = n;
            shard_reader_read(&r, b, e, 0, out);
            for (int64_t i = b; i < e && ok; i++) ok = out[i - b] == first + (uint32_t)i;
        }
        shard_reader_read(&r, 0, n, 0, out);  // the whole shard, every block boundary
        for (int64_t i = 0; i < n && ok; i++) ok = out[i] == first + (uint32_t)i;
        shard_reader_close(&r);
        test_result(ok, "shards_roundtrip_%s", fmts[f].name);
        // no temporary file is left behind by the atomic rename
        char tmp[600];
        snprintf(tmp, sizeof(tmp), "%s.tmp", path);
        test_result(access(tmp, F_OK) != 0, "shards_no_tmp_left_%s", fmts[f].name);
        remove(path);
    }
    free(out);
}

static void test_permute_bijection(void) {
    int ok = 1, identity_everywhere = 1;
    char *seen = (char *)mallocCheck(1000);
    for (int64_t n = 1; n <= 1000 && ok; n += (n < 40 ? 1 : 37)) {
        memset(seen, 0, (size_t)n);
        for (int64_t x = 0; x < n && ok; x++) {
            int64_t y = dl_permute(x, n, 12345 + (uint64_t)n);
            ok = 0 <= y && y < n && !seen[y];
            if (ok) seen[y] = 1;
            if (n > 2 && y != x) identity_everywhere = 0;
        }
    }
    free(seen);
    test_result(ok, "permute_is_bijection");
    test_result(!identity_everywhere, "permute_is_not_identity");
}

static void test_contents_and_determinism(const char *pattern) {
    DataLoader dl;
    dataloader_init(&dl, pattern, 4, TEST_T, 0, 1, 1, 42, TEST_VOCAB, 2);
    int64_t S = expected_samples(TEST_T);
    test_result(dl.num_samples == S && dl.num_shards == NUM_TEST_SHARDS - 1 && dl.batches_per_epoch == S / 4,
                "loader_counts (samples %lld want %lld, shards %d, batches %lld)", (long long)dl.num_samples,
                (long long)S, dl.num_shards, (long long)dl.batches_per_epoch);
    dataloader_free(&dl);
    int nb = (int)(3 * (S / 4)), ok1, ok2;
    Config c = {4, 0, 1, 1, 2, 42};
    int *a = run_config(pattern, c, nb, &ok1), *b = run_config(pattern, c, nb, &ok2);
    test_result(ok1 && ok2, "samples_are_aligned_shifted_windows");
    test_result(same(a, b, (size_t)nb * 4), "deterministic_across_runs");
    free(a);
    free(b);
}

// One epoch of every rank: disjoint, and together the world-1 order's prefix.
static void test_ranks(const char *pattern, int shuffle) {
    int S = (int)expected_samples(TEST_T), B = 3, ok;
    Config ref_c = {1, 0, 1, shuffle, 2, 7};
    int *ref = run_config(pattern, ref_c, S, &ok);  // B=1, world=1: the whole global order
    const int worlds[] = {1, 2, 4};
    for (int w = 0; w < 3; w++) {
        int world = worlds[w], nb = S / (B * world), n = nb * B * world;
        int *all = (int *)mallocCheck(sizeof(int) * (size_t)n);
        int good = ok;
        for (int r = 0; r < world; r++) {
            Config c = {B, r, world, shuffle, 3, 7};
            int *s = run_config(pattern, c, nb, &ok);
            good &= ok;
            for (int b = 0; b < nb; b++)  // rank r's i-th sample is global sample i*world + r
                for (int i = 0; i < B; i++) {
                    all[(b * B + i) * world + r] = s[b * B + i];
                }
            free(s);
        }
        int in_order = same(all, ref, (size_t)n);
        qsort(all, (size_t)n, sizeof(int), cmp_int);
        int repeats = 0;
        for (int i = 1; i < n; i++) repeats += all[i] == all[i - 1];
        test_result(good && repeats == 0 && in_order, "ranks_disjoint_cover_world%d_shuffle%d (repeats %d, in_order %d)",
                    world, shuffle, repeats, in_order);
        free(all);
    }
    free(ref);
}

static void test_shuffle(const char *pattern) {
    int S = (int)expected_samples(TEST_T), ok = 1, o;
    Config plain = {1, 0, 1, 0, 2, 42}, sh = {1, 0, 1, 1, 2, 42}, sh2 = {1, 0, 1, 1, 2, 43};
    int *p = run_config(pattern, plain, S, &o); ok &= o;
    int *a = run_config(pattern, sh, 2 * S, &o); ok &= o;  // epochs 0 and 1
    int *c = run_config(pattern, sh2, S, &o); ok &= o;
    int sorted_in_plain = 1;
    for (int i = 1; i < S; i++) sorted_in_plain &= p[i] > p[i - 1];
    test_result(ok && sorted_in_plain, "unshuffled_order_is_glob_then_position");
    int *e0 = (int *)mallocCheck(sizeof(int) * (size_t)S), *e1 = (int *)mallocCheck(sizeof(int) * (size_t)S);
    memcpy(e0, a, sizeof(int) * (size_t)S);
    memcpy(e1, a + S, sizeof(int) * (size_t)S);
    test_result(!same(a, p, (size_t)S), "shuffle_changes_order");
    test_result(!same(e0, e1, (size_t)S), "shuffle_differs_between_epochs");
    test_result(!same(a, c, (size_t)S), "shuffle_differs_between_seeds");
    qsort(e0, (size_t)S, sizeof(int), cmp_int);
    qsort(e1, (size_t)S, sizeof(int), cmp_int);
    test_result(same(e0, p, (size_t)S) && same(e1, p, (size_t)S), "shuffle_is_permutation_of_samples");
    // the first sample of the epoch comes from a shard other than the first one for some seed:
    // shards are permuted, not only the samples inside them
    int other_first_shard = 0;
    for (uint64_t seed = 1; seed <= 8 && !other_first_shard; seed++) {
        Config s = {1, 0, 1, 1, 0, seed};
        int *f = run_config(pattern, s, 1, &o);
        other_first_shard = f[0] >= SHARD_SIZES[0];
        free(f);
    }
    test_result(other_first_shard, "shuffle_permutes_shards");
    free(p); free(a); free(c); free(e0); free(e1);
}

static void test_rollover(const char *pattern) {
    int S = (int)expected_samples(TEST_T), B = 4, nb = S / B;
    DataLoader dl;
    dataloader_init(&dl, pattern, B, TEST_T, 0, 1, 0, 1, TEST_VOCAB, 2);
    int *s = (int *)mallocCheck(sizeof(int) * (size_t)(2 * nb + 1) * B);
    run_batches(&dl, nb, s);
    DataLoaderState st = dataloader_state(&dl);
    run_batches(&dl, nb + 1, s + nb * B);
    DataLoaderState st2 = dataloader_state(&dl);
    test_result(st.epoch == 1 && st.sample == 0 && st2.epoch == 2 && st2.sample == B, "epoch_rollover_state");
    test_result(same(s, s + nb * B, (size_t)nb * B) && s[2 * nb * B] == s[0], "epoch_rollover_unshuffled_repeats");
    // the dropped tail: the last S % B samples of the epoch never appear
    int max_seen = 0;
    for (int i = 0; i < nb * B; i++) max_seen = s[i] > max_seen ? s[i] : max_seen;
    int64_t last_start = 0;
    for (int i = 0; i < NUM_TEST_SHARDS - 1; i++) last_start += SHARD_SIZES[i];
    last_start += ((SHARD_SIZES[NUM_TEST_SHARDS - 1] - 1) / TEST_T - 1) * TEST_T;  // last sample of the data
    test_result(S % B != 0 && max_seen < last_start, "epoch_drops_tail (S %% B = %d)", S % B);
    dataloader_reset(&dl);
    int first[4];
    run_batches(&dl, 1, first);
    test_result(same(first, s, 4), "reset_returns_to_first_batch");
    free(s);
    dataloader_free(&dl);
}

static void test_resume(const char *pattern) {
    Config c = {4, 1, 2, 1, 3, 99};
    int N = 150, ok;  // 32 batches per epoch: crosses 4 epochs
    int *ref = run_config(pattern, c, N, &ok);
    const int ks[] = {0, 1, 5, 31, 32, 70};
    int good = ok;
    int *s = (int *)mallocCheck(sizeof(int) * (size_t)N * c.B);
    for (int j = 0; j < 6; j++) {
        int k = ks[j];
        DataLoader a, b;
        dataloader_init(&a, pattern, c.B, TEST_T, c.rank, c.world, c.shuffle, c.seed, TEST_VOCAB, c.prefetch);
        run_batches(&a, k, s);
        DataLoaderState st = dataloader_state(&a);
        dataloader_free(&a);
        // a fresh loader, with a different prefetch depth: prefetching is invisible
        dataloader_init(&b, pattern, c.B, TEST_T, c.rank, c.world, c.shuffle, c.seed, TEST_VOCAB, j % 3);
        dataloader_restore(&b, &st);
        run_batches(&b, N - k, s + k * c.B);
        dataloader_free(&b);
        good &= same(s, ref, (size_t)N * c.B);
    }
    test_result(good, "resume_fresh_loader_matches_uninterrupted");
    // restoring into a loader that has prefetched far ahead drains its ring
    DataLoader d;
    dataloader_init(&d, pattern, c.B, TEST_T, c.rank, c.world, c.shuffle, c.seed, TEST_VOCAB, 4);
    run_batches(&d, 10, s);
    DataLoaderState at10 = dataloader_state(&d);
    run_batches(&d, 60, s);
    dataloader_restore(&d, &at10);
    run_batches(&d, N - 10, s + 10 * c.B);
    test_result(same(s + 10 * c.B, ref + 10 * c.B, (size_t)(N - 10) * c.B), "resume_same_loader_drains_prefetch");
    dataloader_free(&d);
    free(s);
    free(ref);
}

// The position counts the samples each epoch's end drops, across a restore on
// another B (samples read = epoch x S - dropped + sample); the data set's
// identity is its contents' whatever their format, and its names.
static void test_dropped_and_identity(const char *p16) {
    int64_t S = expected_samples(TEST_T), read = 0;
    int good = 1, *s = (int *)mallocCheck(sizeof(int) * (size_t)S * 4);
    DataLoaderState st;
    const int Bs[] = {4, 1, 4};  // tails S % 4, 0, S % 4
    int64_t dropped = 0;
    for (int k = 0; k < 3; k++) {
        DataLoader dl;
        dataloader_init(&dl, p16, Bs[k], TEST_T, 0, 1, 1, 7, TEST_VOCAB, 0);
        if (k > 0) dataloader_restore(&dl, &st);
        int nb = Bs[k] == 1 ? (int)S : (int)(S / Bs[k]) + 1;  // one epoch's end each, at a multiple of 4 after it
        run_batches(&dl, nb, s);
        read += (int64_t)nb * Bs[k];
        dropped += S % Bs[k];
        st = dataloader_state(&dl);
        good &= st.dropped == dropped && st.epoch * S - st.dropped + st.sample == read;
        dataloader_free(&dl);
    }
    test_result(good && dropped > 0, "state_counts_dropped_samples_across_layouts (%lld dropped)", (long long)dropped);
    free(s);
    char p32[512];
    make_dataset("id32", 4, 0, p32, sizeof(p32));
    DataLoader a, b;
    dataloader_init(&a, p16, 1, TEST_T, 0, 1, 0, 1, TEST_VOCAB, 0);
    dataloader_init(&b, p32, 1, TEST_T, 0, 1, 0, 1, TEST_VOCAB, 0);
    DataSetId ia = dataloader_identity(&a, a.num_shards), ib = dataloader_identity(&b, b.num_shards);
    DataSetId prefix = dataloader_identity(&a, 2);
    test_result(ia.shards == 4 && ia.tokens == b.num_tokens && ia.contents_crc32c == ib.contents_crc32c &&
                    ia.list_crc32c != ib.list_crc32c && prefix.shards == 2 &&
                    prefix.contents_crc32c != ia.contents_crc32c,
                "identity_of_contents_not_format_and_of_names");
    dataloader_free(&a);
    dataloader_free(&b);
}

static void test_formats(const char *p16) {
#ifndef LLMC_ZSTD
    test_skip("formats_zstd_identical (built without libzstd)");
#endif
    char p32[512], pz[512];
    make_dataset("u32", 4, 0, p32, sizeof(p32));
    Config c = {5, 0, 1, 1, 2, 3};
    int nb = 2 * (int)(expected_samples(TEST_T) / 5), o1, o2;
    int *a = run_config(p16, c, nb, &o1), *b = run_config(p32, c, nb, &o2);
    test_result(o1 && o2 && same(a, b, (size_t)nb * 5), "formats_u16_u32_identical");
#ifdef LLMC_ZSTD
    make_dataset("zstd", 2, 3, pz, sizeof(pz));
    int *z = run_config(pz, c, nb, &o2);
    test_result(o2 && same(a, z, (size_t)nb * 5), "formats_zstd_identical");
    free(z);
#else
    (void)pz;
#endif
    free(a);
    free(b);
}

static void test_prefetch_depths(const char *pattern) {
    int nb = 100, ok = 1, o;
    Config c = {2, 0, 1, 1, 0, 5};
    int *ref = run_config(pattern, c, nb, &o);
    ok &= o;
    const int depths[] = {1, 2, 8};
    for (int d = 0; d < 3; d++) {
        c.prefetch = depths[d];
        int *s = run_config(pattern, c, nb, &o);
        ok &= o && same(s, ref, (size_t)nb * 2);
        free(s);
    }
    free(ref);
    test_result(ok, "prefetch_depth_does_not_change_batches");
}

static void rm_tmpdir(void) {
    DIR *d = opendir(tmpdir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        char path[600];
        snprintf(path, sizeof(path), "%s/%s", tmpdir, e->d_name);
        remove(path);
    }
    closedir(d);
    rmdir(tmpdir);
}

// ---------------------------------------------------------------------------
// helper modes for tests/test_dataloader.sh

static void write_bad(const char *dir) {
    snprintf(tmpdir, sizeof(tmpdir), "%s", dir);
    char path[600];
    snprintf(path, sizeof(path), "%s/good.bin", dir);
    write_shard(path, 2, 0, 0, 1000);
    snprintf(path, sizeof(path), "%s/short.bin", dir);  // no full sample for T >= 10
    write_shard(path, 2, 0, 0, 10);
    snprintf(path, sizeof(path), "%s/oov.bin", dir);  // token 60000 >= GPT-2's 50257
    write_shard(path, 2, 0, 59000, 2000);
    // bad magic, bad version, truncated: edits of a good shard
    const char *names[] = {"badmagic.bin", "badversion.bin", "truncated.bin"};
    for (int k = 0; k < 3; k++) {
        snprintf(path, sizeof(path), "%s/%s", dir, names[k]);
        write_shard(path, 2, 0, 0, 1000);
        FILE *f = fopenCheck(path, "r+b");
        int32_t v = k == 0 ? 12345 : 99;
        if (k < 2) {
            CHECK(fseek(f, k * 4, SEEK_SET) == 0, "seek");
            fwriteExact(&v, 4, 1, f, path);
        }
        fcloseCheck(f, path);
        if (k == 2) CHECK(truncate(path, 1024 + 2 * 999) == 0, "truncate '%s'", path);
    }
#ifdef LLMC_ZSTD
    snprintf(path, sizeof(path), "%s/corrupt_zstd.bin", dir);
    write_shard(path, 2, 3, 0, 40000);
    FILE *f = fopenCheck(path, "r+b");
    uint8_t junk[16];
    memset(junk, 0xA5, sizeof(junk));
    CHECK(fseek(f, 1024 + 40, SEEK_SET) == 0, "seek");  // inside the first frame
    fwriteExact(junk, 1, sizeof(junk), f, path);
    fcloseCheck(f, path);
#endif
}

static void load_epoch(const char *pattern, int T, int vocab) {
    DataLoader dl;
    dataloader_init(&dl, pattern, 1, T, 0, 1, 0, 0, vocab, 2);
    int *in = (int *)mallocCheck(sizeof(int) * (size_t)T), *tg = (int *)mallocCheck(sizeof(int) * (size_t)T);
    for (int64_t b = 0; b < dl.batches_per_epoch; b++) dataloader_next(&dl, in, tg);
    printf("read %lld batches\n", (long long)dl.batches_per_epoch);
    free(in);
    free(tg);
    dataloader_free(&dl);
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "--write-bad") == 0) {
        write_bad(argv[2]);
        return 0;
    }
    if (argc == 5 && strcmp(argv[1], "--load") == 0) {
        load_epoch(argv[2], atoi(argv[3]), atoi(argv[4]));
        return 0;
    }
    if (argc != 1) die_usage("usage: %s [--write-bad DIR | --load PATTERN T VOCAB]", argv[0]);
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/llmc_test_dataloader_XXXXXX");
    CHECK(mkdtemp(tmpdir) != NULL, "mkdtemp failed");
    char p16[512];
    make_dataset("u16", 2, 0, p16, sizeof(p16));
    test_shards_roundtrip();
    test_permute_bijection();
    test_contents_and_determinism(p16);
    test_ranks(p16, 0);
    test_ranks(p16, 1);
    test_shuffle(p16);
    test_rollover(p16);
    test_resume(p16);
    test_dropped_and_identity(p16);
    test_formats(p16);
    test_prefetch_depths(p16);
    rm_tmpdir();
    return test_exit_code();
}
