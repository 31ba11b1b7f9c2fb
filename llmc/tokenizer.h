// tokenizer.h: GPT-2's byte-level BPE tokenizer: encoding identical to GPT-2's
// (its pre-tokenisation regex on UTF-8, then BPE by merge rank), decoding, a BPE
// trainer, and the file formats:
//   encoder.json  {"<token in byte-level unicode>": id, ...}  (GPT-2's)
//   vocab.bpe     "#version: 0.2" then one merge "A B" per line, by rank (GPT-2's)
//   llm.c .bin    header 256 x uint32: [0] 20240328, [1] version 1|2,
//                 [2] vocab_size, [3] eot (version 2); then per token a uint8
//                 length and that many bytes (decode only: it has no merges)
// The vocabulary is the 256 byte tokens, the merges in rank order, then
// <|endoftext|> (EOT, the document separator) as the last id.
// Invalid UTF-8 bytes are single characters of the "other" class, so every
// byte string encodes, and decode(encode(x)) == x for any x.
#ifndef LLMC_TOKENIZER_H
#define LLMC_TOKENIZER_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "file_io.h"          // defines: read_whole_file, AtomicOut, atomic_out_open, atomic_out_write, ...
#include "unicode_classes.h"  // defines: UNICODE_LETTER_RANGES, UNICODE_NUMBER_RANGES, UNICODE_SPACE_RANGES
#include "utils.h"            // defines: CHECK, callocCheck, mallocCheck, die_usage

#define TOKENIZER_BIN_MAGIC 20240328
#define TOKENIZER_EOT_STRING "<|endoftext|>"
#define TOKENIZER_MAX_TOKEN_BYTES 255      // llm.c's .bin stores a uint8 length
#define TOKENIZER_CACHE_MAX_WORD 256       // longer pre-tokens bypass the word cache
#define TOKENIZER_CACHE_MAX_ENTRIES (1u << 22)  // a full word cache is emptied and refilled
#define TOKENIZER_CACHE_MAX_IDS (1u << 26)

// ---------------------------------------------------------------------------
// growable uint32 vector

typedef struct {
    uint32_t *data;
    size_t len, cap;
} U32Vec;

static inline void u32vec_reserve(U32Vec *v, size_t n) {
    if (n <= v->cap) return;
    size_t cap = v->cap ? v->cap : 16;
    while (cap < n) cap *= 2;
    uint32_t *d = (uint32_t *)realloc(v->data, cap * sizeof(uint32_t));
    CHECK(d != NULL, "out of memory growing a vector to %zu ids", cap);
    v->data = d;
    v->cap = cap;
}
static inline void u32vec_push(U32Vec *v, uint32_t x) {
    if (v->len == v->cap) u32vec_reserve(v, v->len + 1);
    v->data[v->len++] = x;
}
static inline void u32vec_append(U32Vec *v, const uint32_t *x, size_t n) {
    u32vec_reserve(v, v->len + n);
    if (n) memcpy(v->data + v->len, x, n * sizeof(uint32_t));
    v->len += n;
}
static inline void u32vec_free(U32Vec *v) {
    free(v->data);
    memset(v, 0, sizeof(*v));
}

// ---------------------------------------------------------------------------
// hash maps (open addressing, power-of-two capacity, at most half full)

static inline uint64_t tok_hash_bytes(const uint8_t *p, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull ^ n;  // FNV-1a
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h | 1;  // 0 marks an empty slot
}

// BytesMap: byte string -> two uint32 values; keys are copied into an arena.
typedef struct {
    uint64_t hash;      // 0: empty
    size_t key_off;     // into keys
    uint32_t key_len;
    uint32_t val[2];
} BytesMapEntry;

typedef struct {
    BytesMapEntry *slots;  // (cap)
    size_t cap, count;
    uint8_t *keys;         // (keys_cap) arena
    size_t keys_len, keys_cap;
} BytesMap;

static inline void bytesmap_init(BytesMap *m, size_t cap) {
    memset(m, 0, sizeof(*m));
    m->cap = 64;
    while (m->cap < 2 * cap) m->cap *= 2;
    m->slots = (BytesMapEntry *)callocCheck(m->cap, sizeof(BytesMapEntry));
}

static inline BytesMapEntry *bytesmap_slot(const BytesMap *m, const uint8_t *k, size_t n, uint64_t h) {
    size_t mask = m->cap - 1;
    for (size_t i = (size_t)(h >> 7) & mask;; i = (i + 1) & mask) {
        BytesMapEntry *e = &m->slots[i];
        if (e->hash == 0) return e;
        if (e->hash == h && e->key_len == n && memcmp(m->keys + e->key_off, k, n) == 0) return e;
    }
}

static inline BytesMapEntry *bytesmap_find(const BytesMap *m, const uint8_t *k, size_t n, uint64_t h) {
    BytesMapEntry *e = bytesmap_slot(m, k, n, h);
    return e->hash ? e : NULL;
}

// Returns the entry of key k, inserting it (values zero) when absent; *is_new says which.
static inline BytesMapEntry *bytesmap_insert(BytesMap *m, const uint8_t *k, size_t n, uint64_t h, int *is_new) {
    if (2 * (m->count + 1) > m->cap) {
        BytesMap grown = *m;
        grown.cap = m->cap * 2;
        grown.slots = (BytesMapEntry *)callocCheck(grown.cap, sizeof(BytesMapEntry));
        for (size_t i = 0; i < m->cap; i++) {
            BytesMapEntry *e = &m->slots[i];
            if (e->hash) *bytesmap_slot(&grown, m->keys + e->key_off, e->key_len, e->hash) = *e;
        }
        free(m->slots);
        *m = grown;
    }
    BytesMapEntry *e = bytesmap_slot(m, k, n, h);
    *is_new = e->hash == 0;
    if (*is_new) {
        if (m->keys_len + n > m->keys_cap) {
            size_t cap = m->keys_cap ? m->keys_cap : 4096;
            while (cap < m->keys_len + n) cap *= 2;
            uint8_t *keys = (uint8_t *)realloc(m->keys, cap);
            CHECK(keys != NULL, "out of memory growing a key arena to %zu bytes", cap);
            m->keys = keys;
            m->keys_cap = cap;
        }
        memcpy(m->keys + m->keys_len, k, n);
        e->hash = h;
        e->key_off = m->keys_len;
        e->key_len = (uint32_t)n;
        e->val[0] = e->val[1] = 0;
        m->keys_len += n;
        m->count++;
    }
    return e;
}

static inline void bytesmap_clear(BytesMap *m) {
    memset(m->slots, 0, m->cap * sizeof(BytesMapEntry));
    m->count = 0;
    m->keys_len = 0;
}

static inline void bytesmap_free(BytesMap *m) {
    free(m->slots);
    free(m->keys);
    memset(m, 0, sizeof(*m));
}

// PairMap: (uint32 a, uint32 b) -> two uint32 values.
typedef struct {
    uint64_t key;  // a << 32 | b; UINT64_MAX: empty
    uint32_t val[2];
} PairEntry;

typedef struct {
    PairEntry *slots;  // (cap)
    size_t cap, count;
} PairMap;

#define PAIR_EMPTY UINT64_MAX

static inline void pairmap_init(PairMap *m, size_t cap) {
    m->cap = 64;
    while (m->cap < 2 * cap) m->cap *= 2;
    m->count = 0;
    m->slots = (PairEntry *)mallocCheck(m->cap * sizeof(PairEntry));
    for (size_t i = 0; i < m->cap; i++) m->slots[i].key = PAIR_EMPTY;
}

static inline PairEntry *pairmap_slot(const PairMap *m, uint64_t key) {
    size_t mask = m->cap - 1;
    for (size_t i = (size_t)((key * 0x9E3779B97F4A7C15ull) >> 20) & mask;; i = (i + 1) & mask) {
        PairEntry *e = &m->slots[i];
        if (e->key == key || e->key == PAIR_EMPTY) return e;
    }
}

static inline const PairEntry *pairmap_find(const PairMap *m, uint32_t a, uint32_t b) {
    const PairEntry *e = pairmap_slot(m, (uint64_t)a << 32 | b);
    return e->key == PAIR_EMPTY ? NULL : e;
}

static inline PairEntry *pairmap_insert(PairMap *m, uint32_t a, uint32_t b, int *is_new) {
    if (2 * (m->count + 1) > m->cap) {
        PairMap grown;
        pairmap_init(&grown, m->cap);
        for (size_t i = 0; i < m->cap; i++)
            if (m->slots[i].key != PAIR_EMPTY) *pairmap_slot(&grown, m->slots[i].key) = m->slots[i];
        grown.count = m->count;
        free(m->slots);
        *m = grown;
    }
    uint64_t key = (uint64_t)a << 32 | b;
    PairEntry *e = pairmap_slot(m, key);
    *is_new = e->key == PAIR_EMPTY;
    if (*is_new) {
        e->key = key;
        e->val[0] = e->val[1] = 0;
        m->count++;
    }
    return e;
}

static inline void pairmap_free(PairMap *m) {
    free(m->slots);
    memset(m, 0, sizeof(*m));
}

// ---------------------------------------------------------------------------
// the tokenizer

typedef struct {
    uint32_t left, right, id;  // merge rank r joins tokens left + right into token id
} BpeMerge;

typedef struct Tokenizer {
    uint32_t vocab_size;
    uint32_t eot;          // id of <|endoftext|>
    int can_encode;        // 0 when loaded from an llm.c .bin (no merges in it)
    uint8_t *bytes;        // all tokens' bytes, concatenated
    size_t *offsets;       // (vocab_size + 1) token i is bytes[offsets[i] .. offsets[i+1])
    uint32_t byte_id[256]; // id of the token of each single byte
    uint32_t num_merges;
    BpeMerge *merges;      // (num_merges) in rank order
    PairMap merge_map;     // (left, right) -> {rank, id}
} Tokenizer;

static inline uint32_t tokenizer_vocab_size(const Tokenizer *t) { return t->vocab_size; }
static inline uint32_t tokenizer_eot(const Tokenizer *t) { return t->eot; }

// Bytes of one token (not NUL-terminated); *len receives their count.
static inline const char *tokenizer_decode(const Tokenizer *t, uint32_t id, size_t *len) {
    CHECK(id < t->vocab_size, "token id %u >= vocab size %u", id, t->vocab_size);
    *len = t->offsets[id + 1] - t->offsets[id];
    return (const char *)t->bytes + t->offsets[id];
}

// Builds the decode table from token strings given as (bytes, lens) per id.
static inline void tokenizer_set_tokens(Tokenizer *t, uint32_t vocab_size, const uint8_t *const *tok,
                                        const size_t *lens) {
    t->vocab_size = vocab_size;
    t->offsets = (size_t *)mallocCheck((vocab_size + 1) * sizeof(size_t));
    size_t total = 0;
    for (uint32_t i = 0; i < vocab_size; i++) total += lens[i];
    t->bytes = (uint8_t *)mallocCheck(total);
    t->offsets[0] = 0;
    for (uint32_t i = 0; i < vocab_size; i++) {
        memcpy(t->bytes + t->offsets[i], tok[i], lens[i]);
        t->offsets[i + 1] = t->offsets[i] + lens[i];
    }
}

// Records the merges (rank order) and their lookup map.
static inline void tokenizer_set_merges(Tokenizer *t, const BpeMerge *merges, uint32_t n) {
    t->num_merges = n;
    t->merges = (BpeMerge *)mallocCheck(n * sizeof(BpeMerge));
    if (n) memcpy(t->merges, merges, n * sizeof(BpeMerge));
    pairmap_init(&t->merge_map, n);
    for (uint32_t r = 0; r < n; r++) {
        int is_new;
        PairEntry *e = pairmap_insert(&t->merge_map, merges[r].left, merges[r].right, &is_new);
        if (is_new) {  // a repeated merge keeps its first (lowest) rank
            e->val[0] = r;
            e->val[1] = merges[r].id;
        }
    }
    t->can_encode = 1;
}

// The byte-level tokenizer: ids 0..255 are the bytes, 256 is EOT.
static inline void tokenizer_init_bytes(Tokenizer *t) {
    memset(t, 0, sizeof(*t));
    uint8_t all[257];
    const uint8_t *tok[257];
    size_t lens[257];
    for (int i = 0; i < 256; i++) {
        all[i] = (uint8_t)i;
        tok[i] = &all[i];
        lens[i] = 1;
        t->byte_id[i] = (uint32_t)i;
    }
    tok[256] = (const uint8_t *)TOKENIZER_EOT_STRING;
    lens[256] = strlen(TOKENIZER_EOT_STRING);
    tokenizer_set_tokens(t, 257, tok, lens);
    t->eot = 256;
    tokenizer_set_merges(t, NULL, 0);
}

static inline void tokenizer_free(Tokenizer *t) {
    free(t->bytes);
    free(t->offsets);
    free(t->merges);
    pairmap_free(&t->merge_map);
    memset(t, 0, sizeof(*t));
}

// ---------------------------------------------------------------------------
// GPT-2's byte <-> unicode mapping: printable bytes map to themselves as code
// points, the other 68 to 256, 257, ... in byte order.

static inline int gpt2_byte_is_printable(int b) {
    return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}
static inline uint32_t gpt2_byte_to_unicode(int b) {
    if (gpt2_byte_is_printable(b)) return (uint32_t)b;
    uint32_t n = 0;
    for (int i = 0; i < b; i++) n += !gpt2_byte_is_printable(i);
    return 256 + n;
}
// The byte of code point cp, or -1 when cp is not in the mapping.
static inline int gpt2_unicode_to_byte(uint32_t cp) {
    if (cp < 256) return gpt2_byte_is_printable((int)cp) ? (int)cp : -1;
    uint32_t n = cp - 256;
    for (int b = 0; b < 256; b++)
        if (!gpt2_byte_is_printable(b) && n-- == 0) return b;
    return -1;
}

// ---------------------------------------------------------------------------
// UTF-8 and the character classes of GPT-2's pre-tokeniser

enum { CC_OTHER, CC_LETTER, CC_NUMBER, CC_SPACE };

static inline int unicode_in_ranges(const uint32_t (*r)[2], size_t n, uint32_t cp) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < r[mid][0]) hi = mid;
        else if (cp > r[mid][1]) lo = mid + 1;
        else return 1;
    }
    return 0;
}
#define UNICODE_RANGES_IN(table, cp) unicode_in_ranges(table, sizeof(table) / sizeof(table[0]), cp)

static inline int codepoint_class(uint32_t cp) {
    if (cp < 128) {
        if ((cp | 32) >= 'a' && (cp | 32) <= 'z') return CC_LETTER;
        if (cp >= '0' && cp <= '9') return CC_NUMBER;
        if (cp == ' ' || (cp >= 9 && cp <= 13)) return CC_SPACE;
        return CC_OTHER;
    }
    if (UNICODE_RANGES_IN(UNICODE_LETTER_RANGES, cp)) return CC_LETTER;
    if (UNICODE_RANGES_IN(UNICODE_NUMBER_RANGES, cp)) return CC_NUMBER;
    if (UNICODE_RANGES_IN(UNICODE_SPACE_RANGES, cp)) return CC_SPACE;
    return CC_OTHER;
}

// Length of the character at p (end > p) and its class in *cls. A byte that does
// not start a valid UTF-8 sequence (overlong, surrogate, > U+10FFFF, truncated)
// is a one-byte character of class CC_OTHER.
static inline size_t utf8_char(const uint8_t *p, const uint8_t *end, int *cls) {
    uint32_t c = p[0];
    if (c < 0x80) {
        *cls = codepoint_class(c);
        return 1;
    }
    size_t n = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 0;
    *cls = CC_OTHER;
    if (n == 0 || c > 0xF4 || (size_t)(end - p) < n) return 1;
    uint32_t cp = c & (0x7F >> n);
    for (size_t i = 1; i < n; i++) {
        if ((p[i] & 0xC0) != 0x80) return 1;
        cp = cp << 6 | (p[i] & 0x3F);
    }
    static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min_cp[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 1;
    *cls = codepoint_class(cp);
    return n;
}

// End of the pre-token starting at s[i] (i < n), by GPT-2's pattern
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
static inline size_t pretoken_end(const uint8_t *s, size_t i, size_t n) {
    const uint8_t *end = s + n;
    if (s[i] == '\'' && i + 1 < n) {
        uint8_t a = s[i + 1];
        if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
        if (i + 2 < n) {
            uint8_t b = s[i + 2];
            if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
        }
    }
    int cls;
    size_t j = i, len = utf8_char(s + i, end, &cls);
    if (s[i] == ' ' && i + 1 < n) {
        int next_cls;
        size_t next_len = utf8_char(s + i + 1, end, &next_cls);
        if (next_cls != CC_SPACE) {  // " ?" then a run of letters, numbers or others
            j = i + 1;
            cls = next_cls;
            len = next_len;
        }
    }
    if (cls != CC_SPACE) {
        for (j += len; j < n; j += len) {
            int c;
            len = utf8_char(s + j, end, &c);
            if (c != cls) break;
        }
        return j;
    }
    size_t last = i;  // start of the run's last character
    for (j = i; j < n; j += len) {
        int c;
        len = utf8_char(s + j, end, &c);
        if (c != CC_SPACE) break;
        last = j;
    }
    if (j == n) return n;       // \s+ up to the end
    return last > i ? last : j; // \s+(?!\S) leaves the last space to the next word; else \s+
}

// ---------------------------------------------------------------------------
// BPE of one pre-token

typedef struct {
    uint32_t rank, pos, left, right;
} BpeCandidate;

// Per-thread encoding state: the word cache (pre-token bytes -> ids in pool)
// and scratch space for BPE.
typedef struct {
    BytesMap words;     // val[0]: offset in pool, val[1]: number of ids
    U32Vec pool;
    uint32_t *ids;      // (scratch_cap) symbol ids, UINT32_MAX: merged away
    int32_t *next, *prev;
    BpeCandidate *heap; // (3 * scratch_cap)
    size_t scratch_cap;
} WordCache;

static inline void wordcache_init(WordCache *c) {
    memset(c, 0, sizeof(*c));
    bytesmap_init(&c->words, 4096);
}

static inline void wordcache_free(WordCache *c) {
    bytesmap_free(&c->words);
    u32vec_free(&c->pool);
    free(c->ids);
    free(c->next);
    free(c->prev);
    free(c->heap);
    memset(c, 0, sizeof(*c));
}

static inline int bpe_candidate_less(const BpeCandidate *a, const BpeCandidate *b) {
    return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}

static inline void bpe_heap_push(BpeCandidate *h, size_t *n, BpeCandidate c) {
    size_t i = (*n)++;
    while (i > 0 && bpe_candidate_less(&c, &h[(i - 1) / 2])) {
        h[i] = h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h[i] = c;
}

static inline BpeCandidate bpe_heap_pop(BpeCandidate *h, size_t *n) {
    BpeCandidate top = h[0], last = h[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t k = 2 * i + 1;
        if (k >= *n) break;
        if (k + 1 < *n && bpe_candidate_less(&h[k + 1], &h[k])) k++;
        if (!bpe_candidate_less(&h[k], &last)) break;
        h[i] = h[k];
        i = k;
    }
    if (*n > 0) h[i] = last;
    return top;
}

static inline void bpe_consider(const Tokenizer *t, WordCache *c, size_t *heap_n, int32_t pos) {
    if (pos < 0 || c->next[pos] < 0) return;
    int32_t nx = c->next[pos];
    const PairEntry *e = pairmap_find(&t->merge_map, c->ids[pos], c->ids[nx]);
    if (e) {
        BpeCandidate cand = {e->val[0], (uint32_t)pos, c->ids[pos], c->ids[nx]};
        bpe_heap_push(c->heap, heap_n, cand);
    }
}

// Appends the BPE ids of word p[0..n) to out: repeatedly joins the adjacent pair
// of lowest merge rank, leftmost first (GPT-2's order).
static inline void bpe_word(const Tokenizer *t, WordCache *c, const uint8_t *p, size_t n, U32Vec *out) {
    if (n > c->scratch_cap) {
        size_t cap = n < 64 ? 64 : n;
        free(c->ids);
        free(c->next);
        free(c->prev);
        free(c->heap);
        c->ids = (uint32_t *)mallocCheck(cap * sizeof(uint32_t));
        c->next = (int32_t *)mallocCheck(cap * sizeof(int32_t));
        c->prev = (int32_t *)mallocCheck(cap * sizeof(int32_t));
        c->heap = (BpeCandidate *)mallocCheck(3 * cap * sizeof(BpeCandidate));
        c->scratch_cap = cap;
    }
    CHECK(n < INT32_MAX, "pre-token of %zu bytes is too long", n);
    for (size_t i = 0; i < n; i++) {
        c->ids[i] = t->byte_id[p[i]];
        c->prev[i] = (int32_t)i - 1;
        c->next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
    }
    size_t heap_n = 0;
    for (size_t i = 0; i + 1 < n && t->num_merges; i++) bpe_consider(t, c, &heap_n, (int32_t)i);
    while (heap_n > 0) {
        BpeCandidate m = bpe_heap_pop(c->heap, &heap_n);
        int32_t nx = c->next[m.pos];
        if (c->ids[m.pos] != m.left || nx < 0 || c->ids[nx] != m.right) continue;  // stale
        c->ids[m.pos] = pairmap_find(&t->merge_map, m.left, m.right)->val[1];
        c->ids[nx] = UINT32_MAX;
        c->next[m.pos] = c->next[nx];
        if (c->next[nx] >= 0) c->prev[c->next[nx]] = (int32_t)m.pos;
        bpe_consider(t, c, &heap_n, c->prev[m.pos]);
        bpe_consider(t, c, &heap_n, (int32_t)m.pos);
    }
    for (int32_t i = 0; i >= 0; i = c->next[i]) u32vec_push(out, c->ids[i]);
}

// Appends the ids of text s[0..n) to out (nothing added around them).
static inline void tokenizer_encode(const Tokenizer *t, WordCache *c, const uint8_t *s, size_t n, U32Vec *out) {
    CHECK(t->can_encode, "this tokenizer was loaded from an llm.c .bin, which has no merges: it can only decode");
    for (size_t i = 0; i < n;) {
        size_t j = pretoken_end(s, i, n), len = j - i;
        if (len == 1 || t->num_merges == 0) {
            for (size_t k = i; k < j; k++) u32vec_push(out, t->byte_id[s[k]]);
        } else if (len > TOKENIZER_CACHE_MAX_WORD) {
            bpe_word(t, c, s + i, len, out);
        } else {
            uint64_t h = tok_hash_bytes(s + i, len);
            BytesMapEntry *e = bytesmap_find(&c->words, s + i, len, h);
            if (!e) {
                if (c->words.count >= TOKENIZER_CACHE_MAX_ENTRIES || c->pool.len >= TOKENIZER_CACHE_MAX_IDS) {
                    bytesmap_clear(&c->words);
                    c->pool.len = 0;
                }
                size_t off = c->pool.len;
                bpe_word(t, c, s + i, len, &c->pool);
                int is_new;
                e = bytesmap_insert(&c->words, s + i, len, h, &is_new);
                e->val[0] = (uint32_t)off;
                e->val[1] = (uint32_t)(c->pool.len - off);
            }
            u32vec_append(out, c->pool.data + e->val[0], e->val[1]);
        }
        i = j;
    }
}

// Next place at or after `from` where text s[0..n) can be cut without changing
// its encoding: just after a '\n' that has a printable ASCII byte on each side
// (the '\n' is then a pre-token of its own either way). Returns n if none.
static inline size_t tokenizer_safe_split(const uint8_t *s, size_t from, size_t n) {
    for (size_t p = from < 2 ? 2 : from; p < n; p++) {
        if (s[p - 1] == '\n' && s[p - 2] > ' ' && s[p - 2] < 0x7F && s[p] > ' ' && s[p] < 0x7F) return p;
    }
    return n;
}

// Encodes k independent texts into outs[0..k) (each appended to), on up to
// `threads` threads, one word cache per thread.
static inline void tokenizer_encode_many(const Tokenizer *t, const uint8_t *const *texts, const size_t *lens,
                                         size_t k, int threads, U32Vec *outs) {
    (void)threads;
#ifdef _OPENMP
#pragma omp parallel num_threads(threads) if (threads > 1 && k > 1)
#endif
    {
        WordCache cache;
        wordcache_init(&cache);
#ifdef _OPENMP
#pragma omp for schedule(dynamic, 1)
#endif
        for (size_t i = 0; i < k; i++) {
            U32Vec local = outs[i];  // a private copy: neighbouring outs[] share cache lines
            tokenizer_encode(t, &cache, texts[i], lens[i], &local);
            outs[i] = local;
        }
        wordcache_free(&cache);
    }
}

// Splits s[0..n) into at most max_pieces pieces at safe boundaries; returns the
// count and stores piece starts in starts (starts[count] = n).
static inline size_t tokenizer_split(const uint8_t *s, size_t n, size_t max_pieces, size_t *starts) {
    size_t count = 0, pos = 0;
    while (pos < n && count < max_pieces) {
        starts[count++] = pos;
        size_t target = pos + (n - pos) / (max_pieces - count + 1);
        pos = count == max_pieces ? n : tokenizer_safe_split(s, target > pos ? target : pos + 1, n);
    }
    starts[count] = n;
    return count;
}

// Appends the ids of s[0..n) to out, on `threads` threads (the text is cut at
// safe boundaries, so the ids are the same for any thread count).
static inline void tokenizer_encode_text(const Tokenizer *t, const uint8_t *s, size_t n, int threads, U32Vec *out) {
    size_t max_pieces = threads > 1 ? (size_t)threads * 4 : 1;
    size_t *starts = (size_t *)mallocCheck((max_pieces + 1) * sizeof(size_t));
    size_t k = tokenizer_split(s, n, max_pieces, starts);
    const uint8_t **texts = (const uint8_t **)mallocCheck(k * sizeof(*texts));
    size_t *lens = (size_t *)mallocCheck(k * sizeof(size_t));
    U32Vec *outs = (U32Vec *)callocCheck(k, sizeof(U32Vec));
    for (size_t i = 0; i < k; i++) {
        texts[i] = s + starts[i];
        lens[i] = starts[i + 1] - starts[i];
    }
    tokenizer_encode_many(t, texts, lens, k, threads, outs);
    for (size_t i = 0; i < k; i++) {
        u32vec_append(out, outs[i].data, outs[i].len);
        u32vec_free(&outs[i]);
    }
    free(outs);
    free(lens);
    free(texts);
    free(starts);
}

// ---------------------------------------------------------------------------
// loading: GPT-2's encoder.json + vocab.bpe, or an llm.c .bin

// Appends code point cp to out as UTF-8 (cp < 0x110000).
static inline size_t utf8_put(uint8_t *out, uint32_t cp) {
    if (cp < 0x80) { out[0] = (uint8_t)cp; return 1; }
    if (cp < 0x800) { out[0] = (uint8_t)(0xC0 | cp >> 6); out[1] = (uint8_t)(0x80 | (cp & 63)); return 2; }
    if (cp < 0x10000) {
        out[0] = (uint8_t)(0xE0 | cp >> 12);
        out[1] = (uint8_t)(0x80 | ((cp >> 6) & 63));
        out[2] = (uint8_t)(0x80 | (cp & 63));
        return 3;
    }
    out[0] = (uint8_t)(0xF0 | cp >> 18);
    out[1] = (uint8_t)(0x80 | ((cp >> 12) & 63));
    out[2] = (uint8_t)(0x80 | ((cp >> 6) & 63));
    out[3] = (uint8_t)(0x80 | (cp & 63));
    return 4;
}

// Maps a token written in GPT-2's byte-level unicode (UTF-8 s[0..n)) back to
// its bytes in out (n bytes suffice). Returns the byte count, or -1 if some
// character is not in the mapping.
static inline long gpt2_unicode_to_bytes(const uint8_t *s, size_t n, uint8_t *out) {
    long m = 0;
    for (size_t i = 0; i < n;) {
        int cls;
        size_t len = utf8_char(s + i, s + n, &cls);
        uint32_t cp = s[i];
        if (len > 1) {
            cp = s[i] & (0x7F >> len);
            for (size_t k = 1; k < len; k++) cp = cp << 6 | (s[i + k] & 0x3F);
        } else if (cp >= 0x80) {
            return -1;
        }
        int b = gpt2_unicode_to_byte(cp);
        if (b < 0) return -1;
        out[m++] = (uint8_t)b;
        i += len;
    }
    return m;
}

// Parses a JSON string at *p (just after its opening quote) into UTF-8 in out
// (room for the raw length suffices); advances *p past the closing quote.
// Returns the length, or -1 on a malformed string.
static inline long json_string(const char **p, uint8_t *out) {
    const char *s = *p;
    long n = 0;
    for (;;) {
        char ch = *s++;
        if (ch == '"') break;
        if ((unsigned char)ch < 0x20) return -1;  // JSON: control characters (and the NUL at the end) must be escaped
        if (ch != '\\') { out[n++] = (uint8_t)ch; continue; }
        ch = *s++;
        const char *simple = strchr("\"\\/bfnrt", ch);
        if (ch && simple) { out[n++] = (uint8_t)"\"\\/\b\f\n\r\t"[simple - "\"\\/bfnrt"]; continue; }
        if (ch != 'u') return -1;
        uint32_t cp = 0;
        for (int rep = 0; rep < 2; rep++) {
            uint32_t u = 0;
            for (int k = 0; k < 4; k++, s++) {
                int v = *s >= '0' && *s <= '9' ? *s - '0' : (*s | 32) >= 'a' && (*s | 32) <= 'f' ? (*s | 32) - 'a' + 10 : -1;
                if (v < 0) return -1;
                u = u << 4 | (uint32_t)v;
            }
            if (rep == 0) {
                cp = u;
                if (u < 0xD800 || u > 0xDBFF) break;      // not a high surrogate
                if (s[0] != '\\' || s[1] != 'u') return -1;
                s += 2;
            } else {
                if (u < 0xDC00 || u > 0xDFFF) return -1;
                cp = 0x10000 + ((cp - 0xD800) << 10) + (u - 0xDC00);
            }
        }
        n += (long)utf8_put(out + n, cp);
    }
    *p = s;
    return n;
}

static inline const char *json_skip_ws(const char *p) {
    while (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t') p++;
    return p;
}

// Loads GPT-2's encoder.json + vocab.bpe from directory dir, or the same files
// under Hugging Face's names, vocab.json + merges.txt, where encoder.json is absent.
static inline void tokenizer_load_gpt2(Tokenizer *t, const char *dir) {
    memset(t, 0, sizeof(*t));
    char path[4096];
    snprintf(path, sizeof(path), "%s/encoder.json", dir);
    const char *merges_name = "vocab.bpe";
    if (access(path, F_OK) != 0) {
        snprintf(path, sizeof(path), "%s/vocab.json", dir);
        if (access(path, F_OK) == 0) merges_name = "merges.txt";
        else snprintf(path, sizeof(path), "%s/encoder.json", dir);  // (its error names GPT-2's file)
    }
    size_t json_len;
    char *json = (char *)read_whole_file(path, NULL, &json_len);
    // pass 1: the tokens, in file order
    BytesMap enc;  // token bytes -> id
    bytesmap_init(&enc, 65536);
    uint8_t *str = (uint8_t *)mallocCheck(json_len + 1), *tok = (uint8_t *)mallocCheck(json_len + 1);
    uint32_t max_id = 0;
    const char *p = json_skip_ws(json);
    if (*p++ != '{') die_usage("'%s' is not a JSON object", path);
    p = json_skip_ws(p);
    while (*p != '}') {
        if (*p++ != '"') die_usage("'%s': expected a string at byte %ld", path, (long)(p - 1 - json));
        long slen = json_string(&p, str);
        if (slen < 0) die_usage("'%s': malformed string at byte %ld", path, (long)(p - json));
        long tlen = gpt2_unicode_to_bytes(str, (size_t)slen, tok);
        if (tlen <= 0) die_usage("'%s': a token at byte %ld is not in GPT-2's byte encoding", path, (long)(p - json));
        p = json_skip_ws(p);
        if (*p++ != ':') die_usage("'%s': expected ':' at byte %ld", path, (long)(p - 1 - json));
        // a JSON integer: digits, no sign, no leading zero
        p = json_skip_ws(p);
        char *num_end;
        errno = 0;
        unsigned long id = *p >= '0' && *p <= '9' ? strtoul(p, &num_end, 10) : 0;
        if (*p < '0' || *p > '9' || errno || id >= UINT32_MAX / 2 || (*p == '0' && num_end - p > 1))
            die_usage("'%s': bad token id at byte %ld", path, (long)(p - json));
        p = json_skip_ws(num_end);
        int is_new;
        BytesMapEntry *e = bytesmap_insert(&enc, tok, (size_t)tlen, tok_hash_bytes(tok, (size_t)tlen), &is_new);
        if (!is_new) die_usage("'%s': token with id %lu appears twice", path, id);
        e->val[0] = (uint32_t)id;
        if (id > max_id) max_id = (uint32_t)id;
        if (*p == ',') {
            p = json_skip_ws(p + 1);
            if (*p != '"') die_usage("'%s': expected a string after ',' at byte %ld", path, (long)(p - json));
        } else if (*p != '}') {
            die_usage("'%s': expected ',' or '}' at byte %ld", path, (long)(p - json));
        }
    }
    p = json_skip_ws(p + 1);
    if (p != json + json_len) die_usage("'%s': unexpected data after the JSON object at byte %ld", path, (long)(p - json));
    uint32_t V = max_id + 1;
    if (enc.count != V) die_usage("'%s': ids are not 0..%u without gaps (%zu tokens)", path, max_id, enc.count);
    const uint8_t **toks = (const uint8_t **)callocCheck(V, sizeof(*toks));
    size_t *lens = (size_t *)callocCheck(V, sizeof(size_t));
    for (size_t i = 0; i < enc.cap; i++) {
        BytesMapEntry *e = &enc.slots[i];
        if (!e->hash) continue;
        if (toks[e->val[0]]) die_usage("'%s': id %u is used twice", path, e->val[0]);
        toks[e->val[0]] = enc.keys + e->key_off;
        lens[e->val[0]] = e->key_len;
    }
    tokenizer_set_tokens(t, V, toks, lens);
    const uint8_t *eot_s = (const uint8_t *)TOKENIZER_EOT_STRING;
    BytesMapEntry *eot = bytesmap_find(&enc, eot_s, strlen(TOKENIZER_EOT_STRING), tok_hash_bytes(eot_s, strlen(TOKENIZER_EOT_STRING)));
    if (!eot) die_usage("'%s' has no %s token", path, TOKENIZER_EOT_STRING);
    t->eot = eot->val[0];
    for (int b = 0; b < 256; b++) {
        uint8_t byte = (uint8_t)b;
        BytesMapEntry *e = bytesmap_find(&enc, &byte, 1, tok_hash_bytes(&byte, 1));
        if (!e) die_usage("'%s' has no token for byte %d", path, b);
        t->byte_id[b] = e->val[0];
    }
    free(json);
    free(str);
    free(toks);
    free(lens);

    // vocab.bpe: merge rank r is line r (after the #version line)
    snprintf(path, sizeof(path), "%s/%s", dir, merges_name);
    size_t bpe_len;
    char *bpe = (char *)read_whole_file(path, NULL, &bpe_len);
    if (strlen(bpe) != bpe_len) die_usage("'%s': NUL byte at byte %zu", path, strlen(bpe));
    size_t cap = 1024, n = 0;
    BpeMerge *merges = (BpeMerge *)mallocCheck(cap * sizeof(BpeMerge));
    uint8_t *joined = (uint8_t *)mallocCheck(bpe_len + 1);
    long line_no = 0;
    for (char *line = bpe; *line;) {
        char *eol = strchr(line, '\n');
        size_t line_len = eol ? (size_t)(eol - line) : strlen(line);
        line_no++;
        if (line_len > 0 && line[line_len - 1] == '\r') line_len--;
        if (line_len > 0 && !(line_no == 1 && strncmp(line, "#version", 8) == 0)) {
            char *sp = (char *)memchr(line, ' ', line_len);
            if (!sp || sp == line || sp + 1 == line + line_len || memchr(sp + 1, ' ', (size_t)(line + line_len - sp - 1)))
                die_usage("'%s' line %ld: expected two tokens separated by one space", path, line_no);
            long la = gpt2_unicode_to_bytes((const uint8_t *)line, (size_t)(sp - line), joined);
            long lb = la < 0 ? -1 : gpt2_unicode_to_bytes((const uint8_t *)sp + 1, (size_t)(line + line_len - sp - 1), joined + la);
            if (lb < 0) die_usage("'%s' line %ld: a token is not in GPT-2's byte encoding", path, line_no);
            BytesMapEntry *ea = bytesmap_find(&enc, joined, (size_t)la, tok_hash_bytes(joined, (size_t)la));
            BytesMapEntry *eb = bytesmap_find(&enc, joined + la, (size_t)lb, tok_hash_bytes(joined + la, (size_t)lb));
            BytesMapEntry *ej = bytesmap_find(&enc, joined, (size_t)(la + lb), tok_hash_bytes(joined, (size_t)(la + lb)));
            if (!ea || !eb || !ej) die_usage("'%s' line %ld: merge of tokens not in encoder.json", path, line_no);
            if (n == cap) {
                cap *= 2;
                merges = (BpeMerge *)realloc(merges, cap * sizeof(BpeMerge));
                CHECK(merges != NULL, "out of memory");
            }
            BpeMerge m = {ea->val[0], eb->val[0], ej->val[0]};
            merges[n++] = m;
        }
        line = eol ? eol + 1 : line + strlen(line);
    }
    tokenizer_set_merges(t, merges, (uint32_t)n);
    free(merges);
    free(joined);
    free(tok);
    free(bpe);
    bytesmap_free(&enc);
}

// Loads an llm.c tokenizer .bin (decode only).
static inline void tokenizer_load_bin(Tokenizer *t, const char *path) {
    memset(t, 0, sizeof(*t));
    size_t len;
    uint8_t *buf = read_whole_file(path, "--tokenizer", &len);
    uint32_t h[256];
    if (len < sizeof(h)) die_usage("'%s' is too short for an llm.c tokenizer header", path);
    memcpy(h, buf, sizeof(h));
    if (h[0] != TOKENIZER_BIN_MAGIC) die_usage("'%s' is not an llm.c tokenizer file (bad magic %u)", path, h[0]);
    if (h[1] != 1 && h[1] != 2) die_usage("'%s': unsupported tokenizer version %u", path, h[1]);
    uint32_t V = h[2];
    if (V == 0) die_usage("'%s': vocab size 0", path);
    // every token takes at least 2 bytes (length and one byte): the file's size bounds V before anything is allocated
    if (V > (len - sizeof(h)) / 2) die_usage("'%s' is truncated: %zu bytes cannot hold %u tokens", path, len, V);
    const uint8_t **toks = (const uint8_t **)mallocCheck(V * sizeof(*toks));
    size_t *lens = (size_t *)mallocCheck(V * sizeof(size_t));
    size_t pos = sizeof(h);
    for (uint32_t i = 0; i < V; i++) {
        if (pos >= len || pos + 1 + buf[pos] > len) die_usage("'%s' is truncated at token %u", path, i);
        if (buf[pos] == 0) die_usage("'%s': token %u has length 0", path, i);
        lens[i] = buf[pos];
        toks[i] = buf + pos + 1;
        pos += 1 + lens[i];
    }
    tokenizer_set_tokens(t, V, toks, lens);
    t->eot = h[1] == 2 ? h[3] : V - 1;  // version 1 is GPT-2's: EOT is the last id
    if (t->eot >= V) die_usage("'%s': eot %u >= vocab size %u", path, t->eot, V);
    free(toks);
    free(lens);
    free(buf);
}

// path: an llm.c tokenizer .bin, or a directory holding encoder.json + vocab.bpe
// (or vocab.json + merges.txt).
static inline void tokenizer_load(Tokenizer *t, const char *path) {
    struct stat st;
    if (stat(path, &st) != 0) die_usage("cannot open tokenizer '%s': %s", path, strerror(errno));
    if (S_ISDIR(st.st_mode)) tokenizer_load_gpt2(t, path);
    else tokenizer_load_bin(t, path);
}

// ---------------------------------------------------------------------------
// saving

static inline void tokenizer_save_bin(const Tokenizer *t, const char *path) {
    AtomicOut out;
    atomic_out_open(&out, path);
    uint32_t h[256] = {TOKENIZER_BIN_MAGIC, 2, t->vocab_size, t->eot};
    atomic_out_write(&out, h, sizeof(h));
    for (uint32_t i = 0; i < t->vocab_size; i++) {
        size_t len;
        const char *b = tokenizer_decode(t, i, &len);
        if (len == 0 || len > TOKENIZER_MAX_TOKEN_BYTES) {
            atomic_out_abort(&out);
            die_usage("'%s': token %u has %zu bytes; the llm.c format holds 1..%d", path, i, len, TOKENIZER_MAX_TOKEN_BYTES);
        }
        uint8_t l8 = (uint8_t)len;
        atomic_out_write(&out, &l8, 1);
        atomic_out_write(&out, b, len);
    }
    atomic_out_commit(&out);
}

// Writes bytes b[0..n) in GPT-2's byte-level unicode, JSON-escaped as GPT-2's
// files are (\uXXXX beyond ASCII) when json is set, raw UTF-8 otherwise.
// (Errors surface in atomic_out_commit.)
static inline void gpt2_write_token(FILE *f, const uint8_t *b, size_t n, int json) {
    for (size_t i = 0; i < n; i++) {
        uint32_t cp = gpt2_byte_to_unicode(b[i]);
        if (json && cp > 0x7E) fprintf(f, "\\u%04x", cp);
        else if (json && (cp == '"' || cp == '\\')) fprintf(f, "\\%c", (char)cp);
        else {
            uint8_t u[4];
            fwrite(u, 1, utf8_put(u, cp), f);
        }
    }
}

// Writes dir/encoder.json, dir/vocab.bpe (GPT-2's formats) and dir/tokenizer.bin,
// each atomically (an existing file is replaced only by a complete one).
static inline void tokenizer_save_dir(const Tokenizer *t, const char *dir) {
    char path[4096];
    AtomicOut out;
    snprintf(path, sizeof(path), "%s/encoder.json", dir);
    atomic_out_open(&out, path);
    fputc('{', out.f);
    for (uint32_t i = 0; i < t->vocab_size; i++) {
        size_t len;
        const uint8_t *b = (const uint8_t *)tokenizer_decode(t, i, &len);
        fputs(i ? ", \"" : "\"", out.f);
        gpt2_write_token(out.f, b, len, 1);
        fprintf(out.f, "\": %u", i);
    }
    fputc('}', out.f);
    atomic_out_commit(&out);
    snprintf(path, sizeof(path), "%s/vocab.bpe", dir);
    atomic_out_open(&out, path);
    fputs("#version: 0.2\n", out.f);
    for (uint32_t r = 0; r < t->num_merges; r++) {
        size_t la, lb;
        const uint8_t *a = (const uint8_t *)tokenizer_decode(t, t->merges[r].left, &la);
        const uint8_t *b = (const uint8_t *)tokenizer_decode(t, t->merges[r].right, &lb);
        gpt2_write_token(out.f, a, la, 0);
        fputc(' ', out.f);
        gpt2_write_token(out.f, b, lb, 0);
        fputc('\n', out.f);
    }
    atomic_out_commit(&out);
    snprintf(path, sizeof(path), "%s/tokenizer.bin", dir);
    tokenizer_save_bin(t, path);
}

// ---------------------------------------------------------------------------
// BPE training

typedef struct {
    int64_t count;
    uint32_t pair;
} TrainHeapItem;

typedef struct {
    uint32_t *a, *b;       // (cap) the pair's tokens
    int64_t *count;        // (cap) occurrences, weighted by word counts
    int64_t *old;          // (cap) count before the current merge step, -1: untouched
    U32Vec *where;         // (cap) words that may contain the pair (may repeat)
    size_t n, cap;
    PairMap index;         // (a, b) -> pair number
    TrainHeapItem *heap;   // max-heap on (count, then smaller a, b), with stale items
    size_t heap_n, heap_cap;
    U32Vec touched;        // pairs changed in this step
} TrainPairs;

static inline int train_item_before(const TrainPairs *p, TrainHeapItem x, TrainHeapItem y) {
    if (x.count != y.count) return x.count > y.count;
    if (p->a[x.pair] != p->a[y.pair]) return p->a[x.pair] < p->a[y.pair];
    return p->b[x.pair] < p->b[y.pair];
}

static inline void train_heap_push(TrainPairs *p, TrainHeapItem it) {
    if (p->heap_n == p->heap_cap) {
        p->heap_cap = p->heap_cap ? 2 * p->heap_cap : 1024;
        p->heap = (TrainHeapItem *)realloc(p->heap, p->heap_cap * sizeof(TrainHeapItem));
        CHECK(p->heap != NULL, "out of memory");
    }
    size_t i = p->heap_n++;
    while (i > 0 && train_item_before(p, it, p->heap[(i - 1) / 2])) {
        p->heap[i] = p->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    p->heap[i] = it;
}

static inline TrainHeapItem train_heap_pop(TrainPairs *p) {
    TrainHeapItem top = p->heap[0], last = p->heap[--p->heap_n];
    size_t i = 0, n = p->heap_n;
    for (;;) {
        size_t k = 2 * i + 1;
        if (k >= n) break;
        if (k + 1 < n && train_item_before(p, p->heap[k + 1], p->heap[k])) k++;
        if (!train_item_before(p, p->heap[k], last)) break;
        p->heap[i] = p->heap[k];
        i = k;
    }
    if (n > 0) p->heap[i] = last;
    return top;
}

// Adds delta to the count of pair (a, b) seen in word w.
static inline void train_pair_add(TrainPairs *p, uint32_t a, uint32_t b, int64_t delta, uint32_t w, int note_word) {
    int is_new;
    PairEntry *e = pairmap_insert(&p->index, a, b, &is_new);
    if (is_new) {
        if (p->n == p->cap) {
            p->cap = p->cap ? 2 * p->cap : 4096;
            p->a = (uint32_t *)realloc(p->a, p->cap * sizeof(uint32_t));
            p->b = (uint32_t *)realloc(p->b, p->cap * sizeof(uint32_t));
            p->count = (int64_t *)realloc(p->count, p->cap * sizeof(int64_t));
            p->old = (int64_t *)realloc(p->old, p->cap * sizeof(int64_t));
            p->where = (U32Vec *)realloc(p->where, p->cap * sizeof(U32Vec));
            CHECK(p->a && p->b && p->count && p->old && p->where, "out of memory");
        }
        uint32_t id = (uint32_t)p->n++;
        p->a[id] = a;
        p->b[id] = b;
        p->count[id] = 0;
        p->old[id] = -1;
        memset(&p->where[id], 0, sizeof(U32Vec));
        e->val[0] = id;
    }
    uint32_t id = e->val[0];
    if (p->old[id] < 0) {
        p->old[id] = p->count[id];
        u32vec_push(&p->touched, id);
    }
    p->count[id] += delta;
    if (note_word && (p->where[id].len == 0 || p->where[id].data[p->where[id].len - 1] != w)) u32vec_push(&p->where[id], w);
}

// Pushes the pairs whose count changed since the last call.
static inline void train_pairs_commit(TrainPairs *p) {
    for (size_t i = 0; i < p->touched.len; i++) {
        uint32_t id = p->touched.data[i];
        if (p->count[id] != p->old[id] && p->count[id] > 0) {
            TrainHeapItem it = {p->count[id], id};
            train_heap_push(p, it);
        }
        p->old[id] = -1;
    }
    p->touched.len = 0;
}

// Learns a vocabulary of at most vocab_size tokens (256 bytes + merges + EOT)
// from k texts, pre-tokenised like GPT-2. Ids 0..255 are the bytes. Ties
// between equally frequent pairs go to the smaller (left, right) ids.
static inline void tokenizer_train(Tokenizer *t, const uint8_t *const *texts, const size_t *lens, size_t k,
                                   uint32_t vocab_size) {
    CHECK(vocab_size >= 257, "vocab size %u < 257", vocab_size);
    // distinct words and their counts
    BytesMap words;
    bytesmap_init(&words, 1 << 16);
    size_t wcap = 1 << 16;
    int64_t *wcount = (int64_t *)mallocCheck(wcap * sizeof(int64_t));
    for (size_t d = 0; d < k; d++) {
        const uint8_t *s = texts[d];
        for (size_t i = 0; i < lens[d];) {
            size_t j = pretoken_end(s, i, lens[d]);
            int is_new;
            BytesMapEntry *e = bytesmap_insert(&words, s + i, j - i, tok_hash_bytes(s + i, j - i), &is_new);
            if (is_new) {
                if (words.count > wcap) {
                    wcap *= 2;
                    wcount = (int64_t *)realloc(wcount, wcap * sizeof(int64_t));
                    CHECK(wcount != NULL, "out of memory");
                }
                e->val[0] = (uint32_t)(words.count - 1);
                wcount[e->val[0]] = 0;
            }
            wcount[e->val[0]]++;
            i = j;
        }
    }
    // each word's symbols, initially its bytes (in first-seen order)
    size_t nw = words.count;
    size_t *wstart = (size_t *)mallocCheck((nw + 1) * sizeof(size_t));
    uint32_t *wlen = (uint32_t *)mallocCheck(nw * sizeof(uint32_t));
    uint32_t *syms = (uint32_t *)mallocCheck(words.keys_len * sizeof(uint32_t));
    uint32_t *stamp = (uint32_t *)callocCheck(nw, sizeof(uint32_t));
    for (size_t i = 0; i < words.cap; i++) {
        BytesMapEntry *e = &words.slots[i];
        if (e->hash) { wstart[e->val[0]] = e->key_off; wlen[e->val[0]] = e->key_len; }
    }
    for (size_t i = 0; i < words.keys_len; i++) syms[i] = words.keys[i];
    TrainPairs P;
    memset(&P, 0, sizeof(P));
    pairmap_init(&P.index, 1 << 16);
    for (uint32_t w = 0; w < nw; w++)
        for (uint32_t i = 0; i + 1 < wlen[w]; i++) train_pair_add(&P, syms[wstart[w] + i], syms[wstart[w] + i + 1], wcount[w], w, 1);
    train_pairs_commit(&P);

    uint32_t want = vocab_size - 257, n = 0;
    BpeMerge *merges = (BpeMerge *)mallocCheck((want ? want : 1) * sizeof(BpeMerge));
    size_t *tlen = (size_t *)mallocCheck((256 + want) * sizeof(size_t));  // token lengths
    for (int i = 0; i < 256; i++) tlen[i] = 1;
    while (n < want && P.heap_n > 0) {
        TrainHeapItem top = train_heap_pop(&P);
        uint32_t pr = top.pair, a = P.a[pr], b = P.b[pr];
        if (top.count != P.count[pr]) continue;  // stale
        if (tlen[a] + tlen[b] > TOKENIZER_MAX_TOKEN_BYTES) continue;
        uint32_t id = 256 + n;
        tlen[id] = tlen[a] + tlen[b];
        BpeMerge m = {a, b, id};
        merges[n++] = m;
        U32Vec where = P.where[pr];
        memset(&P.where[pr], 0, sizeof(U32Vec));
        for (size_t wi = 0; wi < where.len; wi++) {
            uint32_t w = where.data[wi];
            if (stamp[w] == id) continue;
            stamp[w] = id;
            uint32_t *s = syms + wstart[w], L = wlen[w], m = 0;
            int found = 0;
            for (uint32_t i = 0; i + 1 < L && !found; i++) found = s[i] == a && s[i + 1] == b;
            if (!found) continue;
            for (uint32_t i = 0; i + 1 < L; i++) train_pair_add(&P, s[i], s[i + 1], -wcount[w], w, 0);
            for (uint32_t i = 0; i < L; i++) {
                if (i + 1 < L && s[i] == a && s[i + 1] == b) { s[m++] = id; i++; }
                else s[m++] = s[i];
            }
            wlen[w] = m;
            for (uint32_t i = 0; i + 1 < m; i++)
                train_pair_add(&P, s[i], s[i + 1], wcount[w], w, s[i] == id || s[i + 1] == id);
        }
        u32vec_free(&where);
        train_pairs_commit(&P);
    }
    // the tokenizer: bytes, merges, EOT
    memset(t, 0, sizeof(*t));
    uint32_t V = 256 + n + 1;
    const uint8_t **toks = (const uint8_t **)mallocCheck(V * sizeof(*toks));
    size_t *lens_v = (size_t *)mallocCheck(V * sizeof(size_t));
    uint8_t *blob = (uint8_t *)mallocCheck(256 + 1);
    for (int i = 0; i < 256; i++) { blob[i] = (uint8_t)i; toks[i] = blob + i; lens_v[i] = 1; t->byte_id[i] = (uint32_t)i; }
    // merged tokens' bytes: built in rank order from their parts
    size_t total = 0;
    for (uint32_t r = 0; r < n; r++) total += tlen[256 + r];
    uint8_t *mb = (uint8_t *)mallocCheck(total ? total : 1);
    size_t off = 0;
    for (uint32_t r = 0; r < n; r++) {
        uint32_t id = 256 + r;
        memcpy(mb + off, toks[merges[r].left], lens_v[merges[r].left]);
        memcpy(mb + off + lens_v[merges[r].left], toks[merges[r].right], lens_v[merges[r].right]);
        toks[id] = mb + off;
        lens_v[id] = tlen[id];
        off += tlen[id];
    }
    toks[V - 1] = (const uint8_t *)TOKENIZER_EOT_STRING;
    lens_v[V - 1] = strlen(TOKENIZER_EOT_STRING);
    tokenizer_set_tokens(t, V, toks, lens_v);
    t->eot = V - 1;
    tokenizer_set_merges(t, merges, n);
    free(blob);
    free(mb);
    free(toks);
    free(lens_v);
    free(tlen);
    free(merges);
    for (size_t i = 0; i < P.n; i++) u32vec_free(&P.where[i]);
    free(P.a); free(P.b); free(P.count); free(P.old); free(P.where); free(P.heap);
    u32vec_free(&P.touched);
    pairmap_free(&P.index);
    free(stamp); free(syms); free(wlen); free(wstart); free(wcount);
    bytesmap_free(&words);
}

#endif  // LLMC_TOKENIZER_H
