// json.h: a small strict JSON reader (RFC 8259) for the files this project
// writes and reads back (checkpoint manifests, checkpoint.h). It parses a whole
// document into a tree; numbers keep their literal text, so 64-bit integers
// and floats written with enough digits come back exactly. Errors are
// returned, not fatal: the caller names the file (a reader of checkpoints
// must be able to skip a bad one). Nesting is limited to JSON_MAX_DEPTH.
#ifndef LLMC_JSON_H
#define LLMC_JSON_H

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "utils.h"

#define JSON_MAX_DEPTH 32

typedef enum { JSON_NULL, JSON_TRUE, JSON_FALSE, JSON_NUMBER, JSON_STRING, JSON_ARRAY, JSON_OBJECT } JsonType;

typedef struct JsonValue {
    JsonType type;
    char *text;               // STRING: the decoded text; NUMBER: the literal
    int count;                // ARRAY, OBJECT: entries
    struct JsonValue *items;  // (count)
    char **keys;              // OBJECT: (count) keys, in document order
} JsonValue;

typedef struct {
    const char *s;
    size_t n, pos;
    char *err;
    size_t err_size;
} JsonParser;

static inline int json_fail(JsonParser *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static inline int json_fail(JsonParser *p, const char *fmt, ...) {
    if (p->err[0]) return 0;  // the first error wins
    int k = snprintf(p->err, p->err_size, "JSON error at byte %zu: ", p->pos);
    va_list ap;
    va_start(ap, fmt);
    if (k >= 0 && (size_t)k < p->err_size) vsnprintf(p->err + k, p->err_size - (size_t)k, fmt, ap);
    va_end(ap);
    return 0;
}

static inline void json_skip_space(JsonParser *p) {
    while (p->pos < p->n && (p->s[p->pos] == ' ' || p->s[p->pos] == '\t' || p->s[p->pos] == '\n' || p->s[p->pos] == '\r'))
        p->pos++;
}

static inline void json_free(JsonValue *v) {
    for (int i = 0; i < v->count; i++) {
        json_free(&v->items[i]);
        if (v->keys) free(v->keys[i]);
    }
    free(v->items);
    free(v->keys);
    free(v->text);
    memset(v, 0, sizeof(*v));
}

// A string at p->pos (the opening quote), decoded into *out (malloc'd).
static inline int json_parse_string(JsonParser *p, char **out) {
    p->pos++;
    size_t cap = 16, len = 0;
    char *buf = (char *)mallocCheck(cap);
    for (;;) {
        if (p->pos >= p->n) { free(buf); return json_fail(p, "unterminated string"); }
        unsigned char c = (unsigned char)p->s[p->pos++];
        unsigned code = c;
        if (c == '"') break;
        if (c < 0x20) { free(buf); return json_fail(p, "control character in a string"); }
        if (c == '\\') {
            if (p->pos >= p->n) { free(buf); return json_fail(p, "unterminated string"); }
            char e = p->s[p->pos++];
            const char *simple = "\"\\/bfnrt", *value = "\"\\/\b\f\n\r\t";
            const char *hit = strchr(simple, e);
            if (e && hit) code = (unsigned char)value[hit - simple];
            else if (e == 'u') {
                if (p->n - p->pos < 4) { free(buf); return json_fail(p, "short \\u escape"); }
                code = 0;
                for (int i = 0; i < 4; i++) {
                    char h = p->s[p->pos++];
                    int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10
                          : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
                    if (d < 0) { free(buf); return json_fail(p, "bad \\u escape"); }
                    code = code * 16 + (unsigned)d;
                }
                if (code >= 0xD800 && code < 0xE000) { free(buf); return json_fail(p, "surrogate \\u escape"); }
            } else {
                free(buf);
                return json_fail(p, "bad escape '\\%c'", e);
            }
        }
        if (len + 4 >= cap) {
            cap *= 2;
            buf = (char *)realloc(buf, cap);
            CHECK(buf != NULL, "out of memory");
        }
        if (c == '\\' && code >= 0x80) {  // \u escape above ASCII: UTF-8
            if (code < 0x800) {
                buf[len++] = (char)(0xC0 | (code >> 6));
            } else {
                buf[len++] = (char)(0xE0 | (code >> 12));
                buf[len++] = (char)(0x80 | ((code >> 6) & 0x3F));
            }
            buf[len++] = (char)(0x80 | (code & 0x3F));
        } else {
            buf[len++] = (char)code;
        }
    }
    buf[len] = '\0';
    if (strlen(buf) != len) { free(buf); return json_fail(p, "NUL in a string"); }
    *out = buf;
    return 1;
}

static inline int json_parse_value(JsonParser *p, JsonValue *v, int depth);

static inline int json_parse_container(JsonParser *p, JsonValue *v, int depth, int object) {
    char close = object ? '}' : ']';
    v->type = object ? JSON_OBJECT : JSON_ARRAY;
    p->pos++;
    json_skip_space(p);
    if (p->pos < p->n && p->s[p->pos] == close) { p->pos++; return 1; }
    int cap = 0;
    for (;;) {
        if (v->count == cap) {
            cap = cap ? 2 * cap : 8;
            v->items = (JsonValue *)realloc(v->items, sizeof(JsonValue) * (size_t)cap);
            CHECK(v->items != NULL, "out of memory");
            if (object) {
                v->keys = (char **)realloc(v->keys, sizeof(char *) * (size_t)cap);
                CHECK(v->keys != NULL, "out of memory");
            }
        }
        JsonValue *item = &v->items[v->count];
        memset(item, 0, sizeof(*item));
        if (object) {
            json_skip_space(p);
            if (p->pos >= p->n || p->s[p->pos] != '"') return json_fail(p, "expected a key");
            if (!json_parse_string(p, &v->keys[v->count])) return 0;
            for (int i = 0; i < v->count; i++)
                if (strcmp(v->keys[i], v->keys[v->count]) == 0) {
                    free(v->keys[v->count]);
                    return json_fail(p, "duplicate key '%s'", v->keys[i]);
                }
            json_skip_space(p);
            if (p->pos >= p->n || p->s[p->pos] != ':') { free(v->keys[v->count]); return json_fail(p, "expected ':'"); }
            p->pos++;
        }
        v->count++;  // counted before parsing, so json_free frees a half-parsed item
        if (!json_parse_value(p, item, depth + 1)) return 0;
        json_skip_space(p);
        if (p->pos < p->n && p->s[p->pos] == ',') { p->pos++; continue; }
        if (p->pos < p->n && p->s[p->pos] == close) { p->pos++; return 1; }
        return json_fail(p, "expected ',' or '%c'", close);
    }
}

static inline int json_parse_value(JsonParser *p, JsonValue *v, int depth) {
    if (depth > JSON_MAX_DEPTH) return json_fail(p, "nested deeper than %d", JSON_MAX_DEPTH);
    json_skip_space(p);
    if (p->pos >= p->n) return json_fail(p, "unexpected end");
    char c = p->s[p->pos];
    if (c == '{' || c == '[') return json_parse_container(p, v, depth, c == '{');
    if (c == '"') {
        v->type = JSON_STRING;
        return json_parse_string(p, &v->text);
    }
    static const struct { const char *word; JsonType type; } words[] = {
        {"null", JSON_NULL}, {"true", JSON_TRUE}, {"false", JSON_FALSE}};
    for (int i = 0; i < 3; i++) {
        size_t len = strlen(words[i].word);
        if (p->n - p->pos >= len && strncmp(p->s + p->pos, words[i].word, len) == 0) {
            p->pos += len;
            v->type = words[i].type;
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
    v->type = JSON_NUMBER;
    v->text = (char *)mallocCheck(i - start + 1);
    memcpy(v->text, p->s + start, i - start);
    v->text[i - start] = '\0';
    p->pos = i;
    return 1;
}

// Parses text[0..n) (one value and nothing after it) into *out. Returns 1, or
// 0 with the reason in err.
static inline int json_parse(const char *text, size_t n, JsonValue *out, char *err, size_t err_size) {
    JsonParser p = {text, n, 0, err, err_size};
    err[0] = '\0';
    memset(out, 0, sizeof(*out));
    int ok = json_parse_value(&p, out, 0);
    if (ok) {
        json_skip_space(&p);
        if (p.pos != n) ok = json_fail(&p, "text after the value");
    }
    if (!ok) json_free(out);
    return ok;
}

// The member `key` of an object (NULL: absent, or v is not an object).
static inline const JsonValue *json_get(const JsonValue *v, const char *key) {
    if (!v || v->type != JSON_OBJECT) return NULL;
    for (int i = 0; i < v->count; i++)
        if (strcmp(v->keys[i], key) == 0) return &v->items[i];
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
