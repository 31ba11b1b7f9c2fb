// tensorboard.h: TensorBoard event files written from C (--tensorboard DIR),
// so a run shows in `tensorboard --logdir DIR` with no Python in the trainer.
// A file DIR/events.out.tfevents.<unix seconds>.<host>.<pid> (created, never
// an existing one) holds TFRecords: uint64 length, the masked CRC32C of those
// 8 bytes, a serialized tf.Event, its masked CRC32C (little-endian). The
// Events are protobuf, encoded here by hand: the first has file_version
// "brain.Event:2"; each scalar is Event{wall_time 1, step 2, summary 5 =
// Summary{value 1 = Value{tag 1, simple_value 2}}}. Each scalar is flushed as
// it is written (the file can be followed live); a failed write stops the run
// with one line naming the file, exit 2.
#ifndef LLMC_TENSORBOARD_H
#define LLMC_TENSORBOARD_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "crc32c.h"   // defines: crc32c_update
#include "file_io.h"  // defines: make_dirs
#include "utils.h"    // defines: die_usage, DIE

typedef struct {
    FILE *f;  // NULL: no --tensorboard
    char path[FILENAME_MAX];
} TBWriter;

static inline uint32_t tb_masked_crc(const void *data, size_t n) {
    uint32_t crc = crc32c_update(0, data, n);
    return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

// A protobuf varint at p; returns its length.
static inline size_t tb_varint(unsigned char *p, uint64_t v) {
    size_t n = 0;
    do {
        p[n++] = (unsigned char)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
        v >>= 7;
    } while (v);
    return n;
}

// One TFRecord around event[0..n), flushed.
static inline void tb_record(TBWriter *w, const unsigned char *event, size_t n) {
    unsigned char head[12];
    uint64_t len = n;
    for (int i = 0; i < 8; i++) head[i] = (unsigned char)(len >> (8 * i));
    uint32_t crcs[2] = {tb_masked_crc(head, 8), tb_masked_crc(event, n)};
    for (int i = 0; i < 4; i++) head[8 + i] = (unsigned char)(crcs[0] >> (8 * i));
    unsigned char tail[4];
    for (int i = 0; i < 4; i++) tail[i] = (unsigned char)(crcs[1] >> (8 * i));
    if (fwrite(head, 1, 12, w->f) != 12 || fwrite(event, 1, n, w->f) != n || fwrite(tail, 1, 4, w->f) != 4 ||
        fflush(w->f) != 0)
        die_usage("--tensorboard: writing '%s' failed: %s", w->path, strerror(errno ? errno : EIO));
}

// Event fields 1 (wall_time, seconds since the epoch) and 2 (step) at p; returns their length.
static inline size_t tb_event_head(unsigned char *p, int64_t step) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    double wall = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
    p[0] = 0x09;  // field 1, 64-bit
    memcpy(p + 1, &wall, 8);  // (little-endian hosts)
    p[9] = 0x10;  // field 2, varint
    return 10 + tb_varint(p + 10, (uint64_t)step);
}

// With dir "" nothing is written; else dir is made and a new event file opened in it.
static inline void tb_open(TBWriter *w, const char *dir) {
    w->f = NULL;
    if (!dir[0]) return;
    make_dirs(dir, "--tensorboard");
    char host[64] = "host";
    gethostname(host, sizeof(host) - 1);
    host[sizeof(host) - 1] = '\0';
    int len = snprintf(w->path, sizeof(w->path), "%s/events.out.tfevents.%lld.%s.%d", dir, (long long)time(NULL),
                       host, (int)getpid());
    if (len < 0 || (size_t)len >= sizeof(w->path))
        die_usage("--tensorboard: the directory's name is too long (%zu bytes)", strlen(dir));
    w->f = fopen(w->path, "wx");
    if (!w->f) die_usage("--tensorboard: cannot create '%s': %s", w->path, strerror(errno));
    unsigned char ev[64];
    size_t n = tb_event_head(ev, 0);
    const char *version = "brain.Event:2";
    ev[n++] = 0x1a;  // field 3 (file_version), length-delimited
    ev[n++] = (unsigned char)strlen(version);
    memcpy(ev + n, version, strlen(version));
    tb_record(w, ev, n + strlen(version));
}

// The scalar `tag` (under 100 bytes) at `step`.
static inline void tb_scalar(TBWriter *w, const char *tag, int64_t step, float value) {
    if (!w->f) return;
    size_t tag_len = strlen(tag);
    if (tag_len >= 100) DIE("TensorBoard tag '%s' is too long", tag);
    unsigned char ev[160], value_msg[128];
    size_t v = 0;
    value_msg[v++] = 0x0a;  // Value field 1 (tag), length-delimited
    value_msg[v++] = (unsigned char)tag_len;
    memcpy(value_msg + v, tag, tag_len);
    v += tag_len;
    value_msg[v++] = 0x15;  // Value field 2 (simple_value), 32-bit
    memcpy(value_msg + v, &value, 4);
    v += 4;
    size_t n = tb_event_head(ev, step);
    ev[n++] = 0x2a;  // Event field 5 (summary), length-delimited: Summary{field 1 (value): value_msg}
    ev[n++] = (unsigned char)(v + 2);
    ev[n++] = 0x0a;
    ev[n++] = (unsigned char)v;
    memcpy(ev + n, value_msg, v);
    tb_record(w, ev, n + v);
}

static inline void tb_close(TBWriter *w) {
    if (!w->f) return;
    FILE *f = w->f;
    w->f = NULL;
    if (fclose(f) != 0) die_usage("--tensorboard: writing '%s' failed: %s", w->path, strerror(errno));
}

#endif  // LLMC_TENSORBOARD_H
