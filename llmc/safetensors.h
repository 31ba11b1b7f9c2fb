// safetensors.h: Hugging Face's safetensors format, read and written.
//   file: u64 little-endian N | N bytes of JSON header | data
//   header: {"NAME": {"dtype": "F32"|"F16"|"BF16", "shape": [d0, ...],
//            "data_offsets": [begin, end]}, ..., "__metadata__": {"k": "v"}}
//   offsets are bytes from the start of the data; the tensors tile the data
//   exactly (no gap, no overlap, nothing after the last).
// The reader takes the file as hostile input: the header's length is checked
// against the file and ST_MAX_HEADER_BYTES before it is read, the JSON parsed
// within a bound on its values (json.h), every tensor's dtype, rank, shape
// (ST_MAX_DIM per dimension, the product exact) and offsets checked against
// the data's size before any tensor is allocated or read. Any problem: one
// line naming the file, exit 2. Also the dtype conversions (fp16 and bf16 to
// fp32, fp32 to bf16 rounded to nearest even).
#ifndef LLMC_SAFETENSORS_H
#define LLMC_SAFETENSORS_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "file_io.h"  // defines: open_input
#include "json.h"     // defines: JsonValue, json_get, JSON_OBJECT, JSON_STRING, ...
#include "utils.h"    // defines: die_usage, mallocCheck, callocCheck, freadExact

#define ST_MAX_HEADER_BYTES (100 << 20)  // safetensors' own limit
#define ST_MAX_TENSORS 65536
#define ST_MAX_DIMS 4                    // (GPT-2's tensors have 1 or 2)
#define ST_MAX_DIM ((int64_t)1 << 32)
#define ST_NAME_MAX 128

typedef enum { ST_F32, ST_F16, ST_BF16 } StDtype;
static const char *const ST_DTYPE_NAMES[] = {"F32", "F16", "BF16"};
static inline int st_dtype_bytes(StDtype d) { return d == ST_F32 ? 4 : 2; }

typedef struct {
    char name[ST_NAME_MAX];
    StDtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    int64_t numel;
    int64_t begin, end;  // bytes of the data
} StTensor;

typedef struct {
    const char *path;
    FILE *f;
    int64_t data_start;  // 8 + N
    int n;
    StTensor *tensors;
} StFile;

// ---------------------------------------------------------------------------
// dtypes

static inline float st_bf16_to_f32(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float x;
    memcpy(&x, &bits, sizeof(x));
    return x;
}

static inline uint16_t st_f32_to_bf16(float x) {
    uint32_t bits;
    memcpy(&bits, &x, sizeof(bits));
    if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x007fffffu)) return (uint16_t)((bits >> 16) | 0x40);  // NaN stays NaN
    bits += 0x7fffu + ((bits >> 16) & 1u);  // round to nearest even
    return (uint16_t)(bits >> 16);
}

static inline float st_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ffu, bits;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (man << 13);  // inf, NaN
    } else if (exp != 0) {
        bits = sign | ((exp + 112u) << 23) | (man << 13);
    } else if (man == 0) {
        bits = sign;
    } else {  // subnormal: normalise
        int e = -1;
        do { man <<= 1; e++; } while (!(man & 0x400u));
        bits = sign | ((uint32_t)(112 - e) << 23) | ((man & 0x3ffu) << 13);
    }
    float x;
    memcpy(&x, &bits, sizeof(x));
    return x;
}

// ---------------------------------------------------------------------------
// reading

static inline int st_cmp_begin(const void *a, const void *b) {
    const StTensor *x = *(const StTensor *const *)a, *y = *(const StTensor *const *)b;
    return (x->begin > y->begin) - (x->begin < y->begin);
}

// One header entry into t (name checked by the caller); dies naming the file and tensor.
static inline void st_parse_entry(const StFile *sf, const JsonValue *v, StTensor *t, int64_t data_bytes) {
    const char *p = sf->path, *n = v->key;
    const JsonValue *dt = json_get(v, "dtype"), *sh = json_get(v, "shape"), *off = json_get(v, "data_offsets");
    if (v->type != JSON_OBJECT || !dt || dt->type != JSON_STRING || !sh || sh->type != JSON_ARRAY || !off ||
        off->type != JSON_ARRAY || off->count != 2 || v->count != 3)
        die_usage("'%s': tensor '%.64s' is not {\"dtype\", \"shape\", \"data_offsets\": [begin, end]}", p, n);
    snprintf(t->name, sizeof(t->name), "%s", n);
    int found = 0;
    for (int d = 0; d < 3; d++)
        if (strcmp(dt->text, ST_DTYPE_NAMES[d]) == 0) t->dtype = (StDtype)d, found = 1;
    if (!found) die_usage("'%s': tensor '%.64s' has dtype '%.16s' (F32, F16 and BF16 are read)", p, n, dt->text);
    if (sh->count > ST_MAX_DIMS) die_usage("'%s': tensor '%.64s' has %d dimensions (at most %d)", p, n, sh->count, ST_MAX_DIMS);
    t->ndim = sh->count;
    t->numel = 1;
    for (int d = 0; d < sh->count; d++) {
        if (!json_int64(&sh->items[d], 0, ST_MAX_DIM, &t->shape[d]))
            die_usage("'%s': tensor '%.64s': dimension %d is not an integer in [0, 2^32]", p, n, d);
        if (__builtin_mul_overflow(t->numel, t->shape[d], &t->numel) || t->numel > ((int64_t)1 << 60))
            die_usage("'%s': tensor '%.64s' has too many elements", p, n);
    }
    if (!json_int64(&off->items[0], 0, data_bytes, &t->begin) || !json_int64(&off->items[1], t->begin, data_bytes, &t->end))
        die_usage("'%s': tensor '%.64s': data_offsets are not 0 <= begin <= end <= %lld (the data's size)", p, n,
                  (long long)data_bytes);
    if (t->end - t->begin != t->numel * st_dtype_bytes(t->dtype))
        die_usage("'%s': tensor '%.64s': %lld bytes of data for %lld elements of %s", p, n,
                  (long long)(t->end - t->begin), (long long)t->numel, ST_DTYPE_NAMES[t->dtype]);
}

// Opens and checks a safetensors file (what: the flag it came from). The
// tensors stay unread until st_read_f32.
static inline void st_open(StFile *sf, const char *path, const char *what) {
    memset(sf, 0, sizeof(*sf));
    sf->path = path;
    int64_t size;
    sf->f = open_input(path, what, &size);
    uint8_t len8[8];
    if (size < 8 || fread(len8, 1, 8, sf->f) != 8) die_usage("'%s' is too short for a safetensors file", path);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | len8[i];
    if (hlen < 2 || hlen > ST_MAX_HEADER_BYTES || (int64_t)hlen > size - 8)
        die_usage("'%s': safetensors header of %llu bytes (the file has %lld; at most %d): not a safetensors file, or "
                  "truncated", path, (unsigned long long)hlen, (long long)size, ST_MAX_HEADER_BYTES);
    char *text = (char *)mallocCheck((size_t)hlen);
    if (fread(text, 1, (size_t)hlen, sf->f) != hlen) die_usage("'%s': cannot read its header", path);
    size_t tlen = (size_t)hlen;
    while (tlen > 0 && text[tlen - 1] == ' ') tlen--;  // (the header is padded with spaces)
    char err[256];
    JsonValue *root = json_parse(text, tlen, 8 * (size_t)ST_MAX_TENSORS, err, sizeof(err));
    if (!root) die_usage("'%s': the safetensors header is not valid JSON (%s)", path, err);
    if (root->type != JSON_OBJECT) die_usage("'%s': the safetensors header is not a JSON object", path);
    sf->data_start = 8 + (int64_t)hlen;
    int64_t data_bytes = size - sf->data_start;
    sf->tensors = (StTensor *)callocCheck((size_t)root->count + 1, sizeof(StTensor));
    for (int i = 0; i < root->count; i++) {
        const JsonValue *v = &root->items[i];
        if (strcmp(v->key, "__metadata__") == 0) {
            for (int k = 0; v->type == JSON_OBJECT && k < v->count; k++)
                if (v->items[k].type != JSON_STRING) die_usage("'%s': __metadata__ values must be strings", path);
            if (v->type != JSON_OBJECT) die_usage("'%s': __metadata__ is not an object", path);
            continue;
        }
        if (sf->n == ST_MAX_TENSORS) die_usage("'%s': more than %d tensors", path, ST_MAX_TENSORS);
        if (strlen(v->key) == 0 || strlen(v->key) >= ST_NAME_MAX)
            die_usage("'%s': a tensor name of %zu bytes (1 to %d)", path, strlen(v->key), ST_NAME_MAX - 1);
        st_parse_entry(sf, v, &sf->tensors[sf->n++], data_bytes);
    }
    json_free(root);
    free(text);
    // the tensors tile the data: sorted by begin, each starts where the last ended
    const StTensor **order = (const StTensor **)mallocCheck(sizeof(StTensor *) * (size_t)(sf->n + 1));
    for (int i = 0; i < sf->n; i++) order[i] = &sf->tensors[i];
    qsort(order, (size_t)sf->n, sizeof(order[0]), st_cmp_begin);
    int64_t at = 0;
    for (int i = 0; i < sf->n; i++) {
        if (order[i]->begin != at)
            die_usage("'%s': tensor '%s' starts at byte %lld of the data, expected %lld (a gap or an overlap)", path,
                      order[i]->name, (long long)order[i]->begin, (long long)at);
        at = order[i]->end;
    }
    free(order);
    if (at != data_bytes)
        die_usage("'%s': the tensors hold %lld bytes, the file has %lld after the header (truncated or extra data)",
                  path, (long long)at, (long long)data_bytes);
}

// "[d0, d1, ...]" into out.
static inline void st_shape_text(int ndim, const int64_t *shape, char *out, size_t n) {
    size_t at = (size_t)snprintf(out, n, "[");
    for (int d = 0; d < ndim && at < n; d++) at += (size_t)snprintf(out + at, n - at, "%s%lld", d ? ", " : "", (long long)shape[d]);
    if (at < n) snprintf(out + at, n - at, "]");
}

static inline const StTensor *st_find(const StFile *sf, const char *name) {
    for (int i = 0; i < sf->n; i++)
        if (strcmp(sf->tensors[i].name, name) == 0) return &sf->tensors[i];
    return NULL;
}

// The tensor's values as fp32 into dst (numel): 16-bit values are read into
// dst's first half and widened back to front.
static inline void st_read_f32(const StFile *sf, const StTensor *t, float *dst) {
    if (fseek(sf->f, (long)(sf->data_start + t->begin), SEEK_SET) != 0) die_usage("cannot seek in '%s'", sf->path);
    if (t->dtype == ST_F32) {
        freadExact(dst, sizeof(float), (size_t)t->numel, sf->f, sf->path);
        return;
    }
    uint16_t *h = (uint16_t *)dst;
    freadExact(h, sizeof(uint16_t), (size_t)t->numel, sf->f, sf->path);
    for (int64_t i = t->numel - 1; i >= 0; i--) dst[i] = t->dtype == ST_BF16 ? st_bf16_to_f32(h[i]) : st_f16_to_f32(h[i]);
}

static inline void st_close(StFile *sf) {
    fclose(sf->f);
    free(sf->tensors);
    memset(sf, 0, sizeof(*sf));
}

// ---------------------------------------------------------------------------
// writing

// A tensor to write: its name, dtype and shape (1 or 2 dimensions).
typedef struct {
    char name[ST_NAME_MAX];
    int ndim;
    int64_t shape[2];
} StEntry;

// The 8-byte length and the header of n tensors of dtype, laid out one after
// the other in the given order, with __metadata__ {"format": "pt"} (what
// transformers' loader expects), padded with spaces to a multiple of 8 bytes.
// Returns a malloc'd block of *len bytes.
static inline char *st_header(const StEntry *e, int n, StDtype dtype, size_t *len) {
    size_t cap = 256 + (size_t)n * (ST_NAME_MAX + 128), at = 8;
    char *h = (char *)mallocCheck(cap + 8);
    at += (size_t)snprintf(h + at, cap - at, "{\"__metadata__\":{\"format\":\"pt\"}");
    int64_t off = 0;
    for (int i = 0; i < n; i++) {
        int64_t bytes = e[i].shape[0] * (e[i].ndim == 2 ? e[i].shape[1] : 1) * st_dtype_bytes(dtype);
        at += (size_t)snprintf(h + at, cap - at, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[%lld", e[i].name,
                               ST_DTYPE_NAMES[dtype], (long long)e[i].shape[0]);
        if (e[i].ndim == 2) at += (size_t)snprintf(h + at, cap - at, ",%lld", (long long)e[i].shape[1]);
        at += (size_t)snprintf(h + at, cap - at, "],\"data_offsets\":[%lld,%lld]}", (long long)off, (long long)(off + bytes));
        off += bytes;
    }
    at += (size_t)snprintf(h + at, cap - at, "}");
    while ((at - 8) % 8) h[at++] = ' ';
    uint64_t hlen = at - 8;
    for (int i = 0; i < 8; i++) h[i] = (char)((hlen >> (8 * i)) & 0xff);
    *len = at;
    return h;
}

#endif  // LLMC_SAFETENSORS_H
