// dataloader.h: the streaming, resumable, multi-rank loader of (B, T) training
// batches from token shards (shards.h), with a background prefetch thread.
//
// Order of samples. A sample is T+1 consecutive tokens starting at a multiple
// of T inside one shard (samples never cross shards); a shard of N tokens has
// (N-1)/T samples. Shards with no full sample are skipped; it is an error only
// if no shard matching the pattern has one. The global order of an epoch is:
// shards in glob order (shuffle: a permutation drawn from seed and epoch), and
// inside each shard its samples in order (shuffle: a permutation drawn from
// seed, epoch and shard). Rank r of world takes global samples r, r+world,
// r+2*world, ... and packs B of them into a batch, so ranks are disjoint and
// in step. An epoch has floor(S / (B*world)) batches for S samples; the tail
// that cannot fill a batch on every rank is dropped, then the next epoch
// begins with new permutations.
//
// Permutations are keyed Feistel networks over splitmix64 (rand.h) (cycle-walked into
// [0, n)): portable, identical on every run, and random-access, so the loader
// keeps no per-shard tables and its whole position is (epoch, global sample).
//
// A data set's identity (dataloader_identity, which checkpoints record and a
// resume checks) is its shards' names and token counts and a sample of their
// contents: the CRC32C of DL_ID_BLOCKS blocks of DL_ID_BLOCK_TOKENS tokens at
// fixed places in each shard (its start, its end, evenly between), so a
// different data set of the same size (the same tokens in another order) is
// told apart at a few small reads a shard.
//
// Memory is constant in the data size: one open shard at a time, read by
// range (pread; zstd shards decode only the blocks needed), and a ring of
// prefetch_batches buffers of B*(T+1) tokens filled by one pthread.
// prefetch_batches = 0 reads each batch synchronously in dataloader_next.
#ifndef LLMC_DATALOADER_H
#define LLMC_DATALOADER_H

#include <glob.h>
#include <pthread.h>
#include <stdint.h>

#include "crc32c.h"  // defines: crc32c_update
#include "rand.h"    // defines: splitmix64
#include "shards.h"  // defines: SHARD_PATH_MAX, ShardReader, shard_reader_close, shard_reader_open, ...
#include "utils.h"   // defines: CHECK, die_usage, mallocCheck

// The loader's position, as checkpoints store it. It is global, not per rank:
// the epoch and the global sample number (in the epoch's order) where the next
// batch of every rank begins. Ranks stay in step, so one rank's copy restores
// all of them, and it re-splits over another B x ranks that divides it (the
// same global batch on another layout continues at the same global sample).
// The samples read so far are epoch * num_samples - dropped + sample.
typedef struct {
    int64_t epoch;        // epoch of the next batch
    int64_t sample;       // global sample number of the next batch's first sample: batch * B * world
    int64_t dropped;      // samples the epochs so far left out (each epoch's tail that filled no batch; after
                          // a resume on other data, also epoch x the change in num_samples: then maybe < 0)
    uint64_t seed;        // shuffle seed (the RNG is stateless: seed, epoch, shard)
    int64_t num_samples;  // samples in the data set, to detect a changed data set
    int32_t T, shuffle;
} DataLoaderState;

typedef struct DataLoader {
    // configuration
    int B, T, rank, world, shuffle, vocab_size, prefetch;
    uint64_t seed;
    char pattern[SHARD_PATH_MAX];
    // the data set: shards with at least one sample, in glob order
    int num_shards;
    char **paths;             // (num_shards)
    int64_t *shard_samples;   // (num_shards) samples in each shard
    int64_t num_samples;      // S: sum of shard_samples
    int64_t num_tokens;       // tokens in those shards
    int64_t batches_per_epoch;
    int64_t base_epoch, base_dropped;  // the position restored last: its epoch and the samples dropped before it
    // producer side (the prefetch thread, or the caller when prefetch = 0)
    int64_t order_epoch;      // epoch whose shard order is in order/cum, -1: none
    int *order;               // (num_shards) shard visited at each position of the epoch
    int64_t *cum;             // (num_shards + 1) samples before each position
    ShardReader reader;
    int open_shard;           // shard open in reader, -1: none
    // ring of prefetched batches: batch number seq lives in slot seq % prefetch
    uint32_t *ring;           // (max(prefetch, 1), B, T+1)
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int running, stop;
    int64_t next_seq;         // batch number (epoch * batches_per_epoch + batch) the caller gets next
    int64_t prod_seq;         // batch number the producer fills next (prefetch > 0)
} DataLoader;

// ---------------------------------------------------------------------------
// permutations

static inline uint64_t dl_hash(uint64_t z) { return splitmix64(&z); }  // a stateless 64-bit mix

// The image of x under a key-dependent permutation of [0, n).
static inline int64_t dl_permute(int64_t x, int64_t n, uint64_t key) {
    if (n <= 1) return x;
    int bits = 0;
    while ((1LL << bits) < n) bits++;
    int half = (bits + 1) / 2;
    uint64_t mask = (1ULL << half) - 1;
    uint64_t y = (uint64_t)x;
    do {  // cycle-walk: apply the permutation of [0, 4^half) until y lands in [0, n)
        uint64_t L = y >> half, R = y & mask;
        for (uint64_t round = 0; round < 4; round++) {
            uint64_t F = dl_hash(key ^ dl_hash(R ^ (round << 56))) & mask;
            uint64_t t = L ^ F;
            L = R;
            R = t;
        }
        y = (L << half) | R;
    } while (y >= (uint64_t)n);
    return (int64_t)y;
}

static inline uint64_t dl_epoch_key(uint64_t seed, int64_t epoch) { return dl_hash(seed ^ dl_hash((uint64_t)epoch)); }

// ---------------------------------------------------------------------------
// producing one batch

static inline void dl_set_epoch(DataLoader *dl, int64_t epoch) {
    if (dl->order_epoch == epoch) return;
    uint64_t key = dl_epoch_key(dl->seed, epoch);
    dl->cum[0] = 0;
    for (int p = 0; p < dl->num_shards; p++) {
        dl->order[p] = dl->shuffle ? (int)dl_permute(p, dl->num_shards, key) : p;
        dl->cum[p + 1] = dl->cum[p] + dl->shard_samples[dl->order[p]];
    }
    dl->order_epoch = epoch;
}

// out (B, T+1): batch number seq.
static inline void dl_load_batch(DataLoader *dl, int64_t seq, uint32_t *out) {
    int64_t epoch = seq / dl->batches_per_epoch, b = seq % dl->batches_per_epoch;
    dl_set_epoch(dl, epoch);
    uint64_t key = dl_epoch_key(dl->seed, epoch);
    for (int i = 0; i < dl->B; i++) {
        int64_t g = ((b * dl->B) + i) * dl->world + dl->rank;  // global sample number in the epoch
        int lo = 0, hi = dl->num_shards - 1;                   // find p with cum[p] <= g < cum[p+1]
        while (lo < hi) {
            int mid = (lo + hi + 1) / 2;
            if (dl->cum[mid] <= g) lo = mid;
            else hi = mid - 1;
        }
        int shard = dl->order[lo];
        int64_t local = g - dl->cum[lo];
        int64_t sample = dl->shuffle ? dl_permute(local, dl->shard_samples[shard], dl_hash(key ^ dl_hash(~(uint64_t)shard)))
                                     : local;
        if (dl->open_shard != shard) {
            if (dl->open_shard >= 0) shard_reader_close(&dl->reader);
            shard_reader_open(&dl->reader, dl->paths[shard]);
            dl->open_shard = shard;
        }
        int64_t start = sample * dl->T;
        shard_reader_read(&dl->reader, start, start + dl->T + 1, dl->vocab_size, out + (size_t)i * (dl->T + 1));
    }
}

static inline void *dl_producer(void *arg) {
    DataLoader *dl = (DataLoader *)arg;
    size_t slot = (size_t)dl->B * (dl->T + 1);
    pthread_mutex_lock(&dl->mu);
    while (!dl->stop) {
        if (dl->prod_seq - dl->next_seq >= dl->prefetch) {
            pthread_cond_wait(&dl->cv, &dl->mu);
            continue;
        }
        int64_t seq = dl->prod_seq;
        pthread_mutex_unlock(&dl->mu);
        dl_load_batch(dl, seq, dl->ring + (size_t)(seq % dl->prefetch) * slot);
        pthread_mutex_lock(&dl->mu);
        dl->prod_seq = seq + 1;
        pthread_cond_broadcast(&dl->cv);
    }
    pthread_mutex_unlock(&dl->mu);
    return NULL;
}

static inline void dl_stop(DataLoader *dl) {
    if (!dl->running) return;
    pthread_mutex_lock(&dl->mu);
    dl->stop = 1;
    pthread_cond_broadcast(&dl->cv);
    pthread_mutex_unlock(&dl->mu);
    CHECK(pthread_join(dl->thread, NULL) == 0, "joining the data loader thread failed");
    dl->running = 0;
}

// Moves to batch number seq, restarting the prefetch thread there.
static inline void dl_seek(DataLoader *dl, int64_t seq) {
    dl_stop(dl);
    dl->next_seq = seq;
    dl->prod_seq = seq;
    if (dl->prefetch == 0) return;
    dl->stop = 0;
    CHECK(pthread_create(&dl->thread, NULL, dl_producer, dl) == 0, "starting the data loader thread failed");
    dl->running = 1;
}

// ---------------------------------------------------------------------------
// public API

static inline void dataloader_init(DataLoader *dl, const char *glob_pattern, int B, int T, int rank, int world,
                                   int shuffle, uint64_t seed, int vocab_size, int prefetch_batches) {
    CHECK(B > 0 && T > 0 && world > 0 && 0 <= rank && rank < world && prefetch_batches >= 0,
          "bad data loader arguments B=%d T=%d rank=%d world=%d prefetch=%d", B, T, rank, world, prefetch_batches);
    memset(dl, 0, sizeof(*dl));
    dl->B = B; dl->T = T; dl->rank = rank; dl->world = world;
    dl->shuffle = shuffle ? 1 : 0; dl->seed = seed; dl->vocab_size = vocab_size; dl->prefetch = prefetch_batches;
    if (strlen(glob_pattern) >= SHARD_PATH_MAX) die_usage("data pattern '%s' is too long", glob_pattern);
    snprintf(dl->pattern, sizeof(dl->pattern), "%s", glob_pattern);

    glob_t g;
    int rc = glob(glob_pattern, 0, NULL, &g);
    if (rc == GLOB_NOMATCH) die_usage("no file matches the data pattern '%s'", glob_pattern);
    CHECK(rc == 0, "glob('%s') failed with code %d", glob_pattern, rc);
    dl->paths = (char **)mallocCheck(g.gl_pathc * sizeof(char *));
    dl->shard_samples = (int64_t *)mallocCheck(g.gl_pathc * sizeof(int64_t));
    for (size_t i = 0; i < g.gl_pathc; i++) {
        ShardReader r;
        shard_reader_open(&r, g.gl_pathv[i]);  // validates magic, version and size
        int64_t ntok = r.num_tokens, n = ntok > T ? (ntok - 1) / T : 0;
        shard_reader_close(&r);
        if (n == 0) continue;
        dl->paths[dl->num_shards] = strdup(g.gl_pathv[i]);
        CHECK(dl->paths[dl->num_shards] != NULL, "out of memory");
        dl->shard_samples[dl->num_shards++] = n;
        dl->num_samples += n;
        dl->num_tokens += ntok;
    }
    if (dl->num_shards == 0)
        die_usage("no shard matching '%s' has a full sample of T+1 = %d tokens (e.g. '%s')", glob_pattern, T + 1,
                  g.gl_pathv[0]);
    globfree(&g);
    dl->batches_per_epoch = dl->num_samples / ((int64_t)B * world);
    if (dl->batches_per_epoch == 0)
        die_usage("the data '%s' has %lld samples of %d tokens: too few for one batch of %d on each of %d ranks",
                  glob_pattern, (long long)dl->num_samples, T + 1, B, world);

    dl->order = (int *)mallocCheck((size_t)dl->num_shards * sizeof(int));
    dl->cum = (int64_t *)mallocCheck((size_t)(dl->num_shards + 1) * sizeof(int64_t));
    dl->order_epoch = -1;
    dl->open_shard = -1;
    size_t slots = prefetch_batches > 0 ? (size_t)prefetch_batches : 1;
    dl->ring = (uint32_t *)mallocCheck(slots * (size_t)B * (size_t)(T + 1) * sizeof(uint32_t));
    CHECK(pthread_mutex_init(&dl->mu, NULL) == 0 && pthread_cond_init(&dl->cv, NULL) == 0, "pthread init failed");
    dl_seek(dl, 0);
}

// inputs, targets (B, T): the next batch; targets[b][t] = inputs[b][t+1] in the sample.
static inline void dataloader_next(DataLoader *dl, int *inputs, int *targets) {
    size_t slot = (size_t)dl->B * (dl->T + 1);
    const uint32_t *src = dl->ring;
    if (dl->prefetch == 0) {
        dl_load_batch(dl, dl->next_seq, dl->ring);
    } else {
        pthread_mutex_lock(&dl->mu);
        while (dl->prod_seq == dl->next_seq) pthread_cond_wait(&dl->cv, &dl->mu);
        pthread_mutex_unlock(&dl->mu);
        src = dl->ring + (size_t)(dl->next_seq % dl->prefetch) * slot;
    }
    for (int b = 0; b < dl->B; b++) {
        const uint32_t *row = src + (size_t)b * (dl->T + 1);
        for (int t = 0; t < dl->T; t++) {
            inputs[(size_t)b * dl->T + t] = (int)row[t];
            targets[(size_t)b * dl->T + t] = (int)row[t + 1];
        }
    }
    pthread_mutex_lock(&dl->mu);
    dl->next_seq++;
    pthread_cond_broadcast(&dl->cv);
    pthread_mutex_unlock(&dl->mu);
}

// Back to the first batch of epoch 0.
static inline void dataloader_reset(DataLoader *dl) {
    dl->base_epoch = dl->base_dropped = 0;
    dl_seek(dl, 0);
}

// The position of the next batch dataloader_next returns.
static inline DataLoaderState dataloader_state(const DataLoader *dl) {
    DataLoaderState s;
    memset(&s, 0, sizeof(s));
    s.epoch = dl->next_seq / dl->batches_per_epoch;
    s.sample = dl->next_seq % dl->batches_per_epoch * dl->B * dl->world;
    int64_t tail = dl->num_samples - dl->batches_per_epoch * dl->B * dl->world;  // dropped at each epoch's end
    s.dropped = dl->base_dropped + (s.epoch - dl->base_epoch) * tail;
    s.seed = dl->seed;
    s.num_samples = dl->num_samples;
    s.T = dl->T; s.shuffle = dl->shuffle;
    return s;
}

// Continues exactly where the run that saved s was: the next batches are those
// it would have produced. The state must come from the same data, T, shuffle
// and seed; B x world may differ if it divides s->sample (the global order of
// samples does not depend on it; where an epoch ends does, by its dropped
// tail, unless the epochs' lengths agree).
static inline void dataloader_restore(DataLoader *dl, const DataLoaderState *s) {
    if (s->T != dl->T || s->shuffle != dl->shuffle || s->seed != dl->seed || s->num_samples != dl->num_samples)
        die_usage("data loader state (T=%d shuffle=%d seed=%llu samples=%lld) does not match this run "
                  "(T=%d shuffle=%d seed=%llu samples=%lld of '%s')",
                  s->T, s->shuffle, (unsigned long long)s->seed, (long long)s->num_samples, dl->T, dl->shuffle,
                  (unsigned long long)dl->seed, (long long)dl->num_samples, dl->pattern);
    int64_t per_batch = (int64_t)dl->B * dl->world;
    if (s->epoch < 0 || s->epoch > INT64_MAX / dl->batches_per_epoch - 1 || s->sample < 0 ||
        s->sample % per_batch != 0 || s->sample / per_batch >= dl->batches_per_epoch)
        die_usage("data loader state: sample %lld of epoch %lld is not the start of one of the %lld batches of %lld "
                  "samples (B x ranks) of an epoch", (long long)s->sample, (long long)s->epoch,
                  (long long)dl->batches_per_epoch, (long long)per_batch);
    dl->base_epoch = s->epoch;
    dl->base_dropped = s->dropped;
    dl_seek(dl, s->epoch * dl->batches_per_epoch + s->sample / per_batch);
}

#define DL_ID_BLOCKS 8         // blocks of each shard in the sample of a data set's contents
#define DL_ID_BLOCK_TOKENS 64  // tokens a block

// What identifies a data set to a checkpoint: its shards (those with a
// sample, in glob order) by name without their directory (the data may move:
// a node-local copy, another mount) and token count, and a sample of their
// contents (the header's comment).
typedef struct {
    int64_t shards, tokens;
    uint32_t list_crc32c;      // over each shard's name, a NUL and its token count (int64)
    uint32_t contents_crc32c;  // over each shard's sampled blocks, as uint32 tokens
} DataSetId;

// The identity of the loader's first nshards shards (a few reads each).
static inline DataSetId dataloader_identity(const DataLoader *dl, int nshards) {
    DataSetId id = {nshards, 0, 0, 0};
    uint32_t block[DL_ID_BLOCK_TOKENS];
    for (int i = 0; i < nshards; i++) {
        ShardReader r;
        shard_reader_open(&r, dl->paths[i]);
        int64_t n = r.num_tokens, len = n < DL_ID_BLOCK_TOKENS ? n : DL_ID_BLOCK_TOKENS;
        const char *slash = strrchr(dl->paths[i], '/'), *name = slash ? slash + 1 : dl->paths[i];
        id.list_crc32c = crc32c_update(id.list_crc32c, name, strlen(name) + 1);
        id.list_crc32c = crc32c_update(id.list_crc32c, &n, sizeof(n));
        id.tokens += n;
        for (int k = 0; k < DL_ID_BLOCKS; k++) {
            int64_t at = k == DL_ID_BLOCKS - 1 ? n - len : (n - len) / (DL_ID_BLOCKS - 1) * k;
            shard_reader_read(&r, at, at + len, 0, block);
            id.contents_crc32c = crc32c_update(id.contents_crc32c, block, sizeof(uint32_t) * (size_t)len);
        }
        shard_reader_close(&r);
    }
    return id;
}

static inline void dataloader_free(DataLoader *dl) {
    dl_stop(dl);
    if (dl->open_shard >= 0) shard_reader_close(&dl->reader);
    for (int i = 0; i < dl->num_shards; i++) free(dl->paths[i]);
    free(dl->paths);
    free(dl->shard_samples);
    free(dl->order);
    free(dl->cum);
    free(dl->ring);
    pthread_mutex_destroy(&dl->mu);
    pthread_cond_destroy(&dl->cv);
    memset(dl, 0, sizeof(*dl));
}

#endif  // LLMC_DATALOADER_H
