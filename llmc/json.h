// json.h: a small strict JSON reader (RFC 8259) for the files this project
// writes and reads back (checkpoint manifests, checkpoint.h). It parses a whole
// document into a tree; numbers keep their literal text, so 64-bit integers
// and floats written with enough digits come back exactly. Strings must be
// valid UTF-8 (no overlong forms, no surrogates, nothing above U+10FFFF; a
// \u escape of a surrogate only as a pair). Errors are returned, not fatal:
// the caller names the file (a reader of checkpoints must be able to skip a
// bad one). Nesting is limited to JSON_MAX_DEPTH.
//
// Memory is proportional to the document and bounded before it is taken: a
// first pass checks the text and counts its values and string bytes (it keeps
// only one int per array or object); a document with more than the caller's
// max_values is refused there; then one block holds the tree: 32 bytes a
// value plus the decoded strings and number literals (at most the document's
// length plus a NUL each), so a document of n bytes takes at most
// 32 x max_values + 2n bytes.
#ifndef LLMC_JSON_H
#define LLMC_JSON_H

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "utils.h"  // defines: mallocCheck, reallocCheck, callocCheck

#define JSON_MAX_DEPTH 32

typedef enum { JSON_NULL, JSON_TRUE, JSON_FALSE, JSON_NUMBER, JSON_STRING, JSON_ARRAY, JSON_OBJECT } JsonType;

typedef struct JsonValue {
    JsonType type;
    int count;                // ARRAY, OBJECT: entries
    const char *text;         // STRING: the decoded text; NUMBER: the literal
    const char *key;          // an OBJECT's member: its key (decoded); else NULL
    struct JsonValue *items;  // ARRAY, OBJECT: (count) entries, in document order
} JsonValue;

typedef struct {
    const char *s;
    size_t n, pos;
    char *err;
    size_t err_size;
    const char *key;  // the member whose value is being read (for errors): raw text, key_len bytes
    size_t key_len;
    // the first pass counts; the second builds into the block
    size_t values, max_values, string_bytes;
    int *counts;      // each array's and object's entries, in document order
    size_t ncontainers, counts_cap, next_container;
    JsonValue *nodes;  // (values) the root first, then each container's entries together
    size_t used;
    char *strings;     // (string_bytes)
    size_t string_pos;
} JsonParser;

static inline int json_fail(JsonParser *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static inline int json_fail(JsonParser *p, const char *fmt, ...) {
    if (p->err[0]) return 0;  // the first error wins
    int k = snprintf(p->err, p->err_size, "JSON error at byte %zu", p->pos);
    if (p->key && k >= 0 && (size_t)k < p->err_size)
        k += snprintf(p->err + k, p->err_size - (size_t)k, " (in \"%.*s\")", (int)(p->key_len < 64 ? p->key_len : 64),
                      p->key);
    if (k >= 0 && (size_t)k + 2 < p->err_size) {
        memcpy(p->err + k, ": ", 3);
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(p->err + k + 2, p->err_size - (size_t)k - 2, fmt, ap);
        va_end(ap);
    }
    return 0;
}

static inline void json_skip_space(JsonParser *p) {
    while (p->pos < p->n && (p->s[p->pos] == ' ' || p->s[p->pos] == '\t' || p->s[p->pos] == '\n' || p->s[p->pos] == '\r'))
        p->pos++;
}

// The length of the UTF-8 sequence at s[0..n) (a lead byte >= 0x80), or 0 if
// it is not one: overlong, a surrogate, above U+10FFFF, truncated.
static inline int json_utf8_length(const unsigned char *s, size_t n) {
    unsigned char c = s[0];
    int len = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    if (len == 0 || n < (size_t)len) return 0;
    unsigned char lo = 0x80, hi = 0xBF;  // the second byte's range
    if (c == 0xE0) lo = 0xA0;            // overlong
    if (c == 0xED) hi = 0x9F;            // surrogates
    if (c == 0xF0) lo = 0x90;            // overlong
    if (c == 0xF4) hi = 0x8F;            // above U+10FFFF
    if (s[1] < lo || s[1] > hi) return 0;
    for (int i = 2; i < len; i++)
        if (s[i] < 0x80 || s[i] > 0xBF) return 0;
    return len;
}

static inline int json_hex4(JsonParser *p, unsigned *code) {
    if (p->n - p->pos < 4) return json_fail(p, "short \\u escape");
    *code = 0;
    for (int i = 0; i < 4; i++) {
        char h = p->s[p->pos++];
        int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10
              : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
        if (d < 0) return json_fail(p, "bad \\u escape");
        *code = *code * 16 + (unsigned)d;
    }
    return 1;
}

// A string at p->pos (the opening quote): checked, and decoded into out when
// out is not NULL. Returns its decoded length + 1 (the NUL), or 0 on an error.
static inline size_t json_read_string(JsonParser *p, char *out) {
    p->pos++;
    size_t len = 0;
    for (;;) {
        if (p->pos >= p->n) return json_fail(p, "unterminated string");
        unsigned char c = (unsigned char)p->s[p->pos];
        if (c == '"') break;
        if (c < 0x20) return json_fail(p, "control character in a string");
        if (c >= 0x80) {  // raw UTF-8, copied as it is
            int k = json_utf8_length((const unsigned char *)p->s + p->pos, p->n - p->pos);
            if (k == 0) return json_fail(p, "invalid UTF-8 in a string");
            if (out) memcpy(out + len, p->s + p->pos, (size_t)k);
            len += (size_t)k;
            p->pos += (size_t)k;
            continue;
        }
        p->pos++;
        unsigned code = c;
        if (c == '\\') {
            if (p->pos >= p->n) return json_fail(p, "unterminated string");
            char e = p->s[p->pos++];
            const char *simple = "\"\\/bfnrt", *value = "\"\\/\b\f\n\r\t";
            const char *hit = e ? strchr(simple, e) : NULL;
            if (hit) {
                code = (unsigned char)value[hit - simple];
            } else if (e == 'u') {
                if (!json_hex4(p, &code)) return 0;
                if (code >= 0xDC00 && code < 0xE000) return json_fail(p, "a lone low surrogate \\u escape");
                if (code >= 0xD800 && code < 0xDC00) {  // a pair: \uD800-\uDBFF then \uDC00-\uDFFF
                    unsigned low = 0;
                    if (p->n - p->pos < 2 || p->s[p->pos] != '\\' || p->s[p->pos + 1] != 'u')
                        return json_fail(p, "a lone high surrogate \\u escape");
                    p->pos += 2;
                    if (!json_hex4(p, &low)) return 0;
                    if (low < 0xDC00 || low >= 0xE000) return json_fail(p, "a lone high surrogate \\u escape");
                    code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00);
                }
                if (code == 0) return json_fail(p, "NUL in a string");
            } else {
                return json_fail(p, "bad escape '\\%c'", e);
            }
        }
        // code as UTF-8
        unsigned char u[4];
        int k = 0;
        if (code < 0x80) {
            u[k++] = (unsigned char)code;
        } else if (code < 0x800) {
            u[k++] = (unsigned char)(0xC0 | (code >> 6));
            u[k++] = (unsigned char)(0x80 | (code & 0x3F));
        } else if (code < 0x10000) {
            u[k++] = (unsigned char)(0xE0 | (code >> 12));
            u[k++] = (unsigned char)(0x80 | ((code >> 6) & 0x3F));
            u[k++] = (unsigned char)(0x80 | (code & 0x3F));
        } else {
            u[k++] = (unsigned char)(0xF0 | (code >> 18));
            u[k++] = (unsigned char)(0x80 | ((code >> 12) & 0x3F));
            u[k++] = (unsigned char)(0x80 | ((code >> 6) & 0x3F));
            u[k++] = (unsigned char)(0x80 | (code & 0x3F));
        }
        if (out) memcpy(out + len, u, (size_t)k);
        len += (size_t)k;
    }
    p->pos++;
    if (out) out[len] = '\0';
    return len + 1;
}

// Where the next string goes in the second pass (NULL in the first).
static inline char *json_string_slot(JsonParser *p) { return p->strings ? p->strings + p->string_pos : NULL; }

// A string (a key or a value) at p->pos; *text: its decoded copy (second pass).
static inline int json_take_string(JsonParser *p, const char **text) {
    char *out = json_string_slot(p);
    size_t k = json_read_string(p, out);
    if (k == 0) return 0;
    if (out) {
        *text = out;
        p->string_pos += k;
    } else {
        p->string_bytes += k;
    }
    return 1;
}

static inline int json_value(JsonParser *p, JsonValue *v, int depth);

static inline int json_key_cmp(const void *a, const void *b) {
    return strcmp((*(const JsonValue *const *)a)->key, (*(const JsonValue *const *)b)->key);
}

// An object's keys, once built, are distinct (sorted, for a big object).
static inline int json_check_keys(JsonParser *p, const JsonValue *v) {
    const JsonValue *dup = NULL;
    if (v->count <= 16) {
        for (int i = 1; i < v->count && !dup; i++)
            for (int j = 0; j < i && !dup; j++)
                if (strcmp(v->items[i].key, v->items[j].key) == 0) dup = &v->items[i];
    } else {
        const JsonValue **order = (const JsonValue **)mallocCheck(sizeof(JsonValue *) * (size_t)v->count);
        for (int i = 0; i < v->count; i++) order[i] = &v->items[i];
        qsort(order, (size_t)v->count, sizeof(order[0]), json_key_cmp);
        for (int i = 1; i < v->count && !dup; i++)
            if (strcmp(order[i]->key, order[i - 1]->key) == 0) dup = order[i];
        free(order);
    }
    return dup ? json_fail(p, "duplicate key '%.64s'", dup->key) : 1;
}

// An array or object at p->pos: counted (first pass) or built into v.
static inline int json_container(JsonParser *p, JsonValue *v, int depth, int object) {
    char close = object ? '}' : ']';
    size_t at = p->pos, me = 0;
    const char *outer_key = p->key;
    size_t outer_len = p->key_len;
    JsonValue *items = NULL;
    if (v) {  // second pass: its entries' places, counted by the first
        v->type = object ? JSON_OBJECT : JSON_ARRAY;
        v->count = p->counts[p->next_container++];
        v->items = items = p->nodes + p->used;
        p->used += (size_t)v->count;
    } else {  // first pass: a place for its count
        if (p->ncontainers == p->counts_cap) {
            p->counts_cap = p->counts_cap ? 2 * p->counts_cap : 64;
            p->counts = (int *)reallocCheck(p->counts, sizeof(int) * p->counts_cap);
        }
        me = p->ncontainers++;
        p->counts[me] = 0;
    }
    p->pos++;
    json_skip_space(p);
    int count = 0;
    if (p->pos < p->n && p->s[p->pos] == close) {
        p->pos++;
        return 1;
    }
    for (;; count++) {
        JsonValue *item = items ? &items[count] : NULL;
        if (object) {
            json_skip_space(p);
            if (p->pos >= p->n || p->s[p->pos] != '"') return json_fail(p, "expected a key");
            size_t key_at = p->pos;
            p->key = NULL;  // (an error inside a key is not in the previous member)
            const char *key = NULL;
            if (!json_take_string(p, &key)) return 0;
            if (item) item->key = key;
            p->key = p->s + key_at + 1;
            p->key_len = p->pos - key_at - 2;
            json_skip_space(p);
            if (p->pos >= p->n || p->s[p->pos] != ':') return json_fail(p, "expected ':'");
            p->pos++;
        }
        if (!json_value(p, item, depth + 1)) return 0;
        json_skip_space(p);
        if (p->pos < p->n && p->s[p->pos] == ',') {
            p->pos++;
            continue;
        }
        if (p->pos < p->n && p->s[p->pos] == close) break;
        return json_fail(p, "expected ',' or '%c'", close);
    }
    p->pos++;
    count++;
    if (!v) p->counts[me] = count;
    p->key = outer_key, p->key_len = outer_len;
    if (v && object) {
        size_t end = p->pos;
        p->pos = at;  // (a duplicate is reported at the object's start)
        if (!json_check_keys(p, v)) return 0;
        p->pos = end;
    }
    return 1;
}

static inline int json_value(JsonParser *p, JsonValue *v, int depth) {
    if (depth > JSON_MAX_DEPTH) return json_fail(p, "nested deeper than %d", JSON_MAX_DEPTH);
    if (!v && ++p->values > p->max_values) return json_fail(p, "more than %zu values", p->max_values);
    json_skip_space(p);
    if (p->pos >= p->n) return json_fail(p, "unexpected end");
    char c = p->s[p->pos];
    if (c == '{' || c == '[') return json_container(p, v, depth, c == '{');
    if (c == '"') {
        if (v) v->type = JSON_STRING;
        return json_take_string(p, v ? &v->text : NULL);
    }
    static const struct { const char *word; JsonType type; } words[] = {
        {"null", JSON_NULL}, {"true", JSON_TRUE}, {"false", JSON_FALSE}};
    for (int i = 0; i < 3; i++) {
        size_t len = strlen(words[i].word);
        if (p->n - p->pos >= len && strncmp(p->s + p->pos, words[i].word, len) == 0) {
            p->pos += len;
            if (v) v->type = words[i].type;
            return 1;
        }
    }
    // number: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
    size_t start = p->pos, i = p->pos;
#define JSON_DIGITS(at_least_one)                                        \
    do {                                                                  \
        size_t d0 = i;                                                    \
        while (i < p->n && p->s[i] >= '0' && p->s[i] <= '9') i++;         \
        if ((at_least_one) && i == d0) return json_fail(p, "bad number"); \
    } while (0)
    if (i < p->n && p->s[i] == '-') i++;
    if (i < p->n && p->s[i] == '0') i++;
    else JSON_DIGITS(1);
    if (i < p->n && p->s[i] == '.') { i++; JSON_DIGITS(1); }
    if (i < p->n && (p->s[i] == 'e' || p->s[i] == 'E')) {
        i++;
        if (i < p->n && (p->s[i] == '+' || p->s[i] == '-')) i++;
        JSON_DIGITS(1);
    }
#undef JSON_DIGITS
    if (i == start) return json_fail(p, "unexpected character '%c'", c);
    if (v) {
        v->type = JSON_NUMBER;
        char *out = json_string_slot(p);
        memcpy(out, p->s + start, i - start);
        out[i - start] = '\0';
        v->text = out;
        p->string_pos += i - start + 1;
    } else {
        p->string_bytes += i - start + 1;
    }
    p->pos = i;
    return 1;
}

// One pass over text[0..n): the first (root NULL) checks and counts, the second builds the tree at root.
static inline int json_pass(JsonParser *p, JsonValue *root) {
    p->pos = 0;
    p->key = NULL;
    if (!json_value(p, root, 0)) return 0;
    json_skip_space(p);
    if (p->pos != p->n) return json_fail(p, "text after the value");
    return 1;
}

// Parses text[0..n) (one value and nothing after it) of at most max_values
// values (at most INT32_MAX). Returns the root (one malloc'd block: json_free), or NULL with the
// reason in err.
static inline JsonValue *json_parse(const char *text, size_t n, size_t max_values, char *err, size_t err_size) {
    JsonParser p;
    memset(&p, 0, sizeof(p));
    p.s = text, p.n = n, p.err = err, p.err_size = err_size;
    p.max_values = max_values < INT32_MAX ? max_values : INT32_MAX;  // (so that every count fits an int)
    err[0] = '\0';
    JsonValue *root = NULL;
    if (json_pass(&p, NULL)) {
        size_t node_bytes = sizeof(JsonValue) * p.values;
        root = (JsonValue *)callocCheck(1, node_bytes + p.string_bytes);
        p.nodes = root;
        p.used = 1;
        p.strings = (char *)root + node_bytes;
        if (!json_pass(&p, root)) {  // (only a duplicate key fails here)
            free(root);
            root = NULL;
        }
    }
    free(p.counts);
    return root;
}

static inline void json_free(JsonValue *root) { free(root); }

// The member `key` of an object (NULL: absent, or v is not an object).
static inline const JsonValue *json_get(const JsonValue *v, const char *key) {
    if (!v || v->type != JSON_OBJECT) return NULL;
    for (int i = 0; i < v->count; i++)
        if (strcmp(v->items[i].key, key) == 0) return &v->items[i];
    return NULL;
}

// An integer literal in [lo, hi] (no fraction or exponent). Returns 1 on success.
static inline int json_int64(const JsonValue *v, int64_t lo, int64_t hi, int64_t *out) {
    if (!v || v->type != JSON_NUMBER || strpbrk(v->text, ".eE")) return 0;
    errno = 0;
    char *end;
    long long x = strtoll(v->text, &end, 10);
    if (errno || *end || x < lo || x > hi) return 0;
    *out = x;
    return 1;
}

// An unsigned 64-bit integer written as a decimal string (JSON numbers are
// doubles to most readers, so values above 2^53 travel as strings).
static inline int json_u64_string(const JsonValue *v, uint64_t *out) {
    if (!v || v->type != JSON_STRING || v->text[0] < '0' || v->text[0] > '9') return 0;
    errno = 0;
    char *end;
    unsigned long long x = strtoull(v->text, &end, 10);
    if (errno || *end) return 0;
    *out = x;
    return 1;
}

static inline int json_double(const JsonValue *v, double *out) {
    if (!v || v->type != JSON_NUMBER) return 0;
    *out = strtod(v->text, NULL);
    return 1;
}

#endif  // LLMC_JSON_H
