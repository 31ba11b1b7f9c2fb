// ckpt_manifest.h: the rules a checkpoint's manifest.json keeps beyond its
// fields (checkpoint.h writes it and reads it, and checks it with these):
//   its limits: bytes, JSON values, ranges, so that reading one takes memory
//     bounded by the limits whatever the file says;
//   its seal: the last member, "manifest_crc32c": N on a line of its own, N
//     the CRC32C of every byte before that line (version 3; versions 1 and 2
//     have none and are still read);
//   the tiling of a data file by its ranges: their bytes cover the file once,
//     and each state holds the same elements, each once;
//   the data position a step implies: the samples read so far, epoch x
//     samples - dropped + sample, are step x the batch's samples;
//   the data set's identity against the one a resume trains on.
// Each returns NULL or a message, which the reader prefixes with the file.
#ifndef LLMC_CKPT_MANIFEST_H
#define LLMC_CKPT_MANIFEST_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "crc32c.h"      // defines: crc32c_update
#include "dataloader.h"  // defines: DataLoaderState, DataSetId

#define CKPT_FORMAT "llmc-checkpoint"
#define CKPT_VERSION 3
#define CKPT_STATES 3  // the fp32 master weights and the AdamW moments, each over the flat order
static const char *const CKPT_STATE_NAMES[CKPT_STATES] = {"params", "adam_m", "adam_v"};

// A manifest is at most 64 MiB of at most 2^21 JSON values (json.h: the tree
// then takes at most 32 B x 2^21 + 2 x 64 MiB = 192 MiB besides the text and
// the first pass's 4 B a container), and its files at most 2^18 ranges in
// all. A run on 16384 ranks with tensor parallelism writes a few MB and under
// a million values.
#define CKPT_MANIFEST_MAX_BYTES ((size_t)64 << 20)
#define CKPT_MANIFEST_MAX_VALUES ((size_t)1 << 21)
#define CKPT_MAX_RANGES (1 << 18)

#define CKPT_SEAL_KEY "manifest_crc32c"
#define CKPT_SEAL_LINE "\n  \"" CKPT_SEAL_KEY "\": "

// The seal's line (appended after a manifest's other members, whose last ends
// with ",\n"): crc is the CRC32C of the text before it.
static inline void ckpt_seal_line(const char *text, size_t len, char *out, size_t n) {
    snprintf(out, n, "  \"%s\": %u\n}\n", CKPT_SEAL_KEY, (unsigned)crc32c_update(0, text, len));
}

// The CRC32C of the bytes before the seal's line in text[0..len) (*found: 0
// when no line holds it; the reader has checked that it is the last member).
static inline uint32_t ckpt_seal_crc(const char *text, size_t len, int *found) {
    size_t k = strlen(CKPT_SEAL_LINE);
    *found = 0;
    for (size_t i = len >= k ? len - k + 1 : 0; i-- > 0;)
        if (memcmp(text + i, CKPT_SEAL_LINE, k) == 0) {
            *found = 1;
            return crc32c_update(0, text, i + 1);  // (the newline ends the line before)
        }
    return 0;
}

// A data file's range: elements [lo, hi) of the writer's buffer's state at raw byte off.
typedef struct {
    int state;
    int64_t lo, hi, off;
} CkptFileRange;

static inline int ckpt_range_by_off(const void *a, const void *b) {
    int64_t x = ((const CkptFileRange *)a)->off, y = ((const CkptFileRange *)b)->off;
    return (x > y) - (x < y);
}
static inline int ckpt_range_by_state(const void *a, const void *b) {
    const CkptFileRange *x = (const CkptFileRange *)a, *y = (const CkptFileRange *)b;
    if (x->state != y->state) return x->state - y->state;
    return (x->lo > y->lo) - (x->lo < y->lo);
}

// NULL, or (in why) how the n ranges of a file of raw_bytes fail to tile it:
// their bytes must cover [0, raw_bytes) once, each state's elements must not
// overlap, and every state must hold the same elements. Reorders rs.
static inline const char *ckpt_tiling_problem(CkptFileRange *rs, int n, int64_t raw_bytes, char *why, size_t size) {
    qsort(rs, (size_t)n, sizeof(*rs), ckpt_range_by_off);
    int64_t end = 0;
    for (int i = 0; i < n; i++) {
        const CkptFileRange *q = &rs[i];
        if (q->off != end) {
            snprintf(why, size, "its %s range [%lld, %lld) at byte %lld %s (the ranges before it end at byte %lld)",
                     CKPT_STATE_NAMES[q->state], (long long)q->lo, (long long)q->hi, (long long)q->off,
                     q->off < end ? "overlaps another" : "leaves a gap", (long long)end);
            return why;
        }
        end += (q->hi - q->lo) * 4;
    }
    if (end != raw_bytes) {
        snprintf(why, size, "its ranges end at byte %lld of its %lld", (long long)end, (long long)raw_bytes);
        return why;
    }
    qsort(rs, (size_t)n, sizeof(*rs), ckpt_range_by_state);
    int first[CKPT_STATES + 1] = {0};  // each state's first range in rs
    for (int s = 0, i = 0; s <= CKPT_STATES; s++) {
        while (i < n && rs[i].state < s) i++;
        first[s] = i;
    }
    for (int s = 0; s < CKPT_STATES; s++) {
        for (int i = first[s] + 1; i < first[s + 1]; i++)
            if (rs[i].lo < rs[i - 1].hi) {
                snprintf(why, size, "its %s ranges [%lld, %lld) and [%lld, %lld) overlap", CKPT_STATE_NAMES[s],
                         (long long)rs[i - 1].lo, (long long)rs[i - 1].hi, (long long)rs[i].lo, (long long)rs[i].hi);
                return why;
            }
        int same = first[s + 1] - first[s] == first[1] - first[0];
        for (int i = 0; same && i < first[1] - first[0]; i++)
            same = rs[first[s] + i].lo == rs[i].lo && rs[first[s] + i].hi == rs[i].hi;
        if (!same) {
            snprintf(why, size, "its %s ranges do not hold the elements its %s ranges hold", CKPT_STATE_NAMES[s],
                     CKPT_STATE_NAMES[0]);
            return why;
        }
    }
    return NULL;
}

// NULL, or (in why) how the data position d disagrees with `step` steps of
// per_step samples each, read in batches of per_batch samples (the writer's B
// x data ranks): the samples read, epoch x num_samples - dropped + sample, must
// be step x per_step. d->dropped: as recorded (version 3), or (dropped_known 0:
// versions 1 and 2) set to what the equation gives, then only bounded: an
// epoch drops less than a batch (< per_step samples), so in epoch 0 it is exact.
static inline const char *ckpt_position_problem(DataLoaderState *d, int dropped_known, int64_t step, int64_t per_step,
                                                int64_t per_batch, char *why, size_t size) {
    int64_t N = d->num_samples, read, full, dropped = d->dropped, max_dropped, expect;
    if (d->sample % per_batch != 0 || d->sample / per_batch >= N / per_batch) {
        snprintf(why, size, "'sample' %lld is not the start of one of the %lld batches of %lld samples (B x data ranks "
                 "of the run that wrote it) of an epoch of %lld", (long long)d->sample, (long long)(N / per_batch),
                 (long long)per_batch, (long long)N);
        return why;
    }
    int overflow = __builtin_mul_overflow(step, per_step, &read) || __builtin_mul_overflow(d->epoch, N, &full) ||
                   __builtin_mul_overflow(d->epoch, per_step - 1, &max_dropped);
    if (!overflow && !dropped_known) overflow = __builtin_add_overflow(full - read, d->sample, &dropped);
    if (!overflow)
        overflow = __builtin_sub_overflow(full, dropped, &expect) || __builtin_add_overflow(expect, d->sample, &expect);
    if (overflow || expect != read || (!dropped_known && (dropped < 0 || dropped > max_dropped))) {
        snprintf(why, size, "'step' %lld and the data position ('epoch' %lld, 'sample' %lld, 'dropped' %lld) disagree: "
                 "%lld steps of %lld samples read %lld", (long long)step, (long long)d->epoch, (long long)d->sample,
                 (long long)dropped, (long long)step, (long long)per_step, overflow ? -1LL : (long long)read);
        return why;
    }
    d->dropped = dropped;
    return NULL;
}

// NULL when the checkpoint's data set (was) is the one a resume trains on
// (now: its identity; prefix: that of its first was->shards shards, NULL when
// it has no more); else (in why) how they differ, named by pattern.
static inline int ckpt_same_data_set(const DataSetId *a, const DataSetId *b) {
    return a->shards == b->shards && a->tokens == b->tokens && a->list_crc32c == b->list_crc32c &&
           a->contents_crc32c == b->contents_crc32c;
}
static inline const char *ckpt_data_set_change(const DataSetId *was, const DataSetId *now, const DataSetId *prefix,
                                               const char *pattern, char *why, size_t size) {
    if (ckpt_same_data_set(was, now)) return NULL;
    if (prefix && ckpt_same_data_set(was, prefix))
        snprintf(why, size, "'%.400s' is the checkpoint's data set with %lld shard%s appended", pattern,
                 (long long)(now->shards - was->shards), now->shards - was->shards > 1 ? "s" : "");
    else if (was->shards != now->shards || was->tokens != now->tokens)
        snprintf(why, size, "the checkpoint's data set has %lld shards of %lld tokens, '%.400s' has %lld of %lld",
                 (long long)was->shards, (long long)was->tokens, pattern, (long long)now->shards,
                 (long long)now->tokens);
    else if (was->list_crc32c != now->list_crc32c)
        snprintf(why, size, "the shards of '%.400s' have other names or token counts than the checkpoint's data set",
                 pattern);
    else
        snprintf(why, size, "the shards of '%.400s' have the names and sizes of the checkpoint's data set but other "
                 "contents", pattern);
    return why;
}

#endif  // LLMC_CKPT_MANIFEST_H
