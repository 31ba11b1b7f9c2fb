// test_json.c: the strict JSON reader (llmc/json.h): UTF-8 in strings (every
// valid length taken as it is; overlong forms, surrogates, code points above
// U+10FFFF, stray and missing continuation bytes refused), \u escapes
// (surrogate pairs decoded, lone surrogates refused), the limit on values,
// duplicate keys in a small and a large object, the tree's shape, and the
// errors naming the byte and the member.
#include "llmc/json.h"
#include "tests/testing.h"

// Parses text (len bytes) with at most max_values values; err gets the error.
static JsonValue *parse(const char *text, size_t len, size_t max_values, char *err) {
    return json_parse(text, len, max_values, err, 256);
}

// Whether the string member "s" of {"s": "<body>"} parses, and (valid) decodes to want.
static int string_case(const char *body, size_t body_len, const char *want) {
    char text[128], err[256];
    int n = snprintf(text, sizeof(text), "{\"s\": \"");
    memcpy(text + n, body, body_len);
    n += (int)body_len;
    n += snprintf(text + n, sizeof(text) - (size_t)n, "\"}");
    JsonValue *v = parse(text, (size_t)n, 100, err);
    const JsonValue *s = json_get(v, "s");
    int ok = want ? s && strcmp(s->text, want) == 0 : v == NULL && strstr(err, "(in \"s\")") != NULL;
    json_free(v);
    return ok;
}
#define STRING_CASE(body, want) string_case(body, sizeof(body) - 1, want)

static void test_utf8(void) {
    test_result(STRING_CASE("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \xf4\x8f\xbf\xbf",
                            "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \xf4\x8f\xbf\xbf"),
                "utf8_valid_2_3_4_bytes_and_u10ffff_kept");
    const struct { const char *bytes; const char *what; } bad[] = {
        {"\x80", "a stray continuation byte"}, {"\xc0\xaf", "overlong 2 bytes (C0)"},
        {"\xc1\xbf", "overlong 2 bytes (C1)"}, {"\xe0\x80\xaf", "overlong 3 bytes"},
        {"\xf0\x80\x80\xaf", "overlong 4 bytes"}, {"\xed\xa0\x80", "a high surrogate"},
        {"\xed\xbf\xbf", "a low surrogate"}, {"\xf4\x90\x80\x80", "above U+10FFFF"},
        {"\xf5\x80\x80\x80", "lead byte F5"}, {"\xff", "byte FF"}, {"\xc3", "a truncated sequence"},
        {"\xe2\x82", "a truncated 3-byte sequence"}, {"\xc3\x41", "a missing continuation byte"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        test_result(string_case(bad[i].bytes, strlen(bad[i].bytes), NULL), "utf8_refuses %s", bad[i].what);
}

static void test_escapes(void) {
    test_result(STRING_CASE("\\u00e9\\u20ac\\ud83d\\ude00\\n", "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\n"),
                "escapes_decode_to_utf8_with_a_surrogate_pair");
    test_result(STRING_CASE("\\ud800", NULL) && STRING_CASE("\\udc00", NULL) && STRING_CASE("\\ud800\\u0041", NULL) &&
                    STRING_CASE("\\ud800x", NULL) && STRING_CASE("\\u0000", NULL),
                "escapes_refuse_lone_surrogates_and_nul");
}

static void test_limits_and_shape(void) {
    char err[256];
    const char *doc = "{\"a\": [1, 2, {\"b\": null}], \"c\": \"x\"}";  // 7 values
    JsonValue *v = parse(doc, strlen(doc), 7, err);
    const JsonValue *a = json_get(v, "a"), *b = a && a->count == 3 ? json_get(&a->items[2], "b") : NULL;
    int64_t two = 0;
    test_result(v && v->count == 2 && a && a->type == JSON_ARRAY && json_int64(&a->items[1], 0, 9, &two) && two == 2 &&
                    b && b->type == JSON_NULL && strcmp(json_get(v, "c")->text, "x") == 0,
                "tree_of_nested_containers");
    json_free(v);
    v = parse(doc, strlen(doc), 6, err);
    test_result(!v && strstr(err, "more than 6 values") != NULL, "values_limit_refuses_one_more (%s)", err);
    const char *dup = "{\"k\": 1, \"k\": 2}";
    v = parse(dup, strlen(dup), 100, err);
    test_result(!v && strstr(err, "duplicate key 'k'") != NULL, "duplicate_key_in_a_small_object");
    char big[1024];
    int n = snprintf(big, sizeof(big), "{");
    for (int i = 0; i < 40; i++) n += snprintf(big + n, sizeof(big) - (size_t)n, "\"k%d\": %d, ", i, i);
    n += snprintf(big + n, sizeof(big) - (size_t)n, "\"k17\": 0}");
    v = parse(big, (size_t)n, 1000, err);
    test_result(!v && strstr(err, "duplicate key 'k17'") != NULL, "duplicate_key_in_a_large_object (%s)", err);
    const char *nested = "{\"outer\": {\"inner\": [1, 2,]}}";
    v = parse(nested, strlen(nested), 100, err);
    test_result(!v && strstr(err, "JSON error at byte 26 (in \"inner\")") != NULL, "errors_name_byte_and_member (%s)",
                err);
}

int main(void) {
    test_utf8();
    test_escapes();
    test_limits_and_shape();
    return test_exit_code();
}
