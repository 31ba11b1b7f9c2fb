// bench_dataloader.c: the data loader's memory and speed on a large generated
// data set. Writes --gb GB of random-token shards into --dir (shards.h
// writer), streams one epoch through the loader, prints peak RSS
// (getrusage ru_maxrss) and tokens/s, and deletes the shards. Not part of
// `make test`. Build and run:
//   make build/dev/perf/bench_dataloader
//   build/dev/perf/bench_dataloader --gb 4 --dir /tmp/llmc_bench
#include <stddef.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "llmc/args.h"
#include "llmc/dataloader.h"
#include "llmc/rand.h"

typedef struct {
    float gb;
    char dir[FLAG_STR_MAX];
    int shard_mtok, B, T, shuffle, prefetch, zstd, token_bytes, keep;
} Opts;

static const FlagSpec FLAGS[] = {
    {"gb", FLAG_FLOAT, offsetof(Opts, gb), "4", NULL, 0.001, 1024, "GB of shards to generate", NULL},
    {"dir", FLAG_STRING, offsetof(Opts, dir), "/tmp/llmc_bench_dataloader", NULL, 0, 0, "directory for the shards (created)", NULL},
    {"shard-mtok", FLAG_INT, offsetof(Opts, shard_mtok), "100", NULL, 1, 2000, "million tokens per shard", NULL},
    {"token-bytes", FLAG_INT, offsetof(Opts, token_bytes), "2", NULL, 2, 4, "2 (uint16) or 4 (uint32) tokens", NULL},
    {"zstd", FLAG_INT, offsetof(Opts, zstd), "0", NULL, 0, 22, "zstd level (0: plain llm.c shards)", NULL},
    {"B", FLAG_INT, offsetof(Opts, B), "16", NULL, 1, 4096, "batch size", NULL},
    {"T", FLAG_INT, offsetof(Opts, T), "1024", NULL, 1, 65536, "sequence length", NULL},
    {"shuffle", FLAG_BOOL, offsetof(Opts, shuffle), "1", NULL, 0, 1, "shuffle shards and samples", NULL},
    {"prefetch", FLAG_INT, offsetof(Opts, prefetch), "4", NULL, 0, 1024, "prefetched batches", NULL},
    {"keep", FLAG_BOOL, offsetof(Opts, keep), "0", NULL, 0, 1, "keep the shards afterwards", NULL},
};

static long peak_rss_mb(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss / 1024;  // ru_maxrss is in KiB on Linux
}

int main(int argc, char **argv) {
    Opts o;
    flags_parse(argc, argv, FLAGS, FLAGS_COUNT(FLAGS), &o, "Generates shards, streams them through the data loader, reports peak RSS and tokens/s.");
    if (o.token_bytes == 3) die_usage("--token-bytes: must be 2 or 4");
    if (mkdir(o.dir, 0755) != 0 && errno != EEXIST) die_usage("--dir: cannot create '%s': %s", o.dir, strerror(errno));
    int64_t total = (int64_t)((double)o.gb * 1e9 / o.token_bytes), per_shard = (int64_t)o.shard_mtok * 1000000;
    int nshards = (int)ceil_div_i64(total, per_shard);
    enum { CHUNK = 1 << 20 };
    uint32_t *chunk = (uint32_t *)mallocCheck(CHUNK * sizeof(uint32_t));
    Rng rng;
    rng_seed(&rng, 1);
    double t0 = wall_seconds();
    char path[FLAG_STR_MAX + 32];
    for (int s = 0; s < nshards; s++) {
        snprintf(path, sizeof(path), "%s/bench_%06d.bin", o.dir, s);
        ShardWriter *w = shard_writer_open(path, o.token_bytes, o.zstd);
        int64_t n = total - (int64_t)s * per_shard < per_shard ? total - (int64_t)s * per_shard : per_shard;
        for (int64_t done = 0; done < n; done += CHUNK) {
            int64_t k = n - done < CHUNK ? n - done : CHUNK;
            for (int64_t i = 0; i < k; i++) chunk[i] = (uint32_t)rng_below(&rng, 50257);
            shard_writer_append(w, chunk, (size_t)k);
        }
        shard_writer_close(w);
    }
    free(chunk);
    double t1 = wall_seconds();
    printf("wrote %d shards, %lld tokens in %.1f s; peak RSS so far %ld MB\n", nshards, (long long)total, t1 - t0,
           peak_rss_mb());
    fflush(stdout);

    DataLoader dl;
    snprintf(path, sizeof(path), "%s/bench_*.bin", o.dir);
    dataloader_init(&dl, path, o.B, o.T, 0, 1, o.shuffle, 1337, 50257, o.prefetch);
    size_t bt = (size_t)o.B * o.T;
    int *in = (int *)mallocCheck(bt * sizeof(int)), *tg = (int *)mallocCheck(bt * sizeof(int));
    uint64_t checksum = 0;
    double t2 = wall_seconds();
    for (int64_t b = 0; b < dl.batches_per_epoch; b++) {
        dataloader_next(&dl, in, tg);
        checksum += (uint64_t)in[b % (int64_t)bt];
    }
    double t3 = wall_seconds();
    int64_t tokens = dl.batches_per_epoch * (int64_t)bt;
    printf("streamed 1 epoch: %lld batches of %dx%d, %lld tokens in %.1f s = %.1f M tokens/s (shuffle %d, prefetch %d, "
           "checksum %llu)\n",
           (long long)dl.batches_per_epoch, o.B, o.T, (long long)tokens, t3 - t2, (double)tokens / (t3 - t2) / 1e6,
           o.shuffle, o.prefetch, (unsigned long long)checksum);
    printf("peak RSS %ld MB for %.2f GB of shards\n", peak_rss_mb(), o.gb);
    free(in);
    free(tg);
    dataloader_free(&dl);
    if (!o.keep) {
        for (int s = 0; s < nshards; s++) {
            snprintf(path, sizeof(path), "%s/bench_%06d.bin", o.dir, s);
            remove(path);
        }
        rmdir(o.dir);
    }
    return 0;
}
