/* The JSON writer against jansson as the reference: random strings (control
 * bytes, UTF-8, C1 controls, invalid bytes), integers and reals must parse
 * back to what was written, and numbers must read exactly as jansson writes
 * them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <jansson.h>
#include <math.h>

#include "core/escape.h"
#include "core/json_writer.h"

/* What a reader must get back: the input with each byte that does not start
 * a valid UTF-8 sequence replaced by U+FFFD. */
static void expected_text(const char *in, char *out)
{
    const unsigned char *p = (const unsigned char *)in;
    while (*p) {
        size_t n = vram_utf8_length(p);
        if (n == 0) {
            memcpy(out, "\xef\xbf\xbd", 3);
            out += 3;
            p++;
        } else {
            memcpy(out, p, n);
            out += n;
            p += n;
        }
    }
    *out = 0;
}

static void random_text(char *s, size_t len)
{
    static const char *const pieces[] = {"a",
                                         "\"",
                                         "\\",
                                         "\n",
                                         "\x1b[31m",
                                         "\x7f",
                                         "\xc3\xa9",
                                         "\xc2\x9b",
                                         "\xe2\x82\xac",
                                         "\xf0\x9f\x98\x80",
                                         "\xff",
                                         "\xc3",
                                         "\xed\xa0\x80",
                                         "/",
                                         "\t",
                                         "\x01",
                                         "Z"};
    size_t n = 0;
    int k = rand() % 12;
    for (int i = 0; i < k; i++) {
        const char *p = pieces[rand() % (int)(sizeof pieces / sizeof *pieces)];
        if (n + strlen(p) + 1 > len) break;
        memcpy(s + n, p, strlen(p));
        n += strlen(p);
    }
    s[n] = 0;
}

static void strings_parse_back(void **state)
{
    (void)state;
    srand(4242);
    for (int round = 0; round < 20000; round++) {
        char key[64], value[64], want_key[200], want_value[200];
        random_text(key, sizeof key);
        random_text(value, sizeof value);
        vram_jw_t w = {0};
        vram_jw_open(&w, NULL, '{');
        vram_jw_string(&w, key, value);
        vram_jw_string(&w, "null", NULL);
        vram_jw_close(&w, '}');
        char *text = vram_jw_finish(&w);
        assert_non_null(text);
        for (const char *c = text; *c; c++) /* no raw control byte reaches a terminal */
            assert_true((unsigned char)*c >= 0x20 && *c != 0x7f);
        assert_null(strstr(text, "\xc2\x9b"));
        json_error_t err;
        json_t *o = json_loads(text, 0, &err);
        if (!o) fail_msg("%s does not parse: %s", text, err.text);
        expected_text(key, want_key);
        expected_text(value, want_value);
        json_t *v = json_object_get(o, want_key);
        assert_non_null(v);
        assert_string_equal(json_string_value(v), want_value);
        assert_true(json_is_null(json_object_get(o, "null")));
        json_decref(o);
        free(text);
    }
}

static void numbers_as_jansson(void **state)
{
    (void)state;
    srand(99);
    double reals[] = {0.0,   1.0,  -1.0,     0.1,  1763937123.4567891, 3600,
                      1e300, 1e-5, -2.5e-12, 1e16, 9007199254740993.0, 123456789012345.0};
    for (int i = 0; i < 2000; i++) {
        double v = i < (int)(sizeof reals / sizeof *reals)
                       ? reals[i]
                       : (double)rand() / 7.0 * (rand() % 2 ? 1e-3 : 1e9) - 1e6;
        int64_t n =
            (int64_t)(((uint64_t)rand() << 33) ^ ((uint64_t)rand() << 2) ^ (uint64_t)rand());
        if (i % 3 == 0 && n != INT64_MIN) n = -n;
        if (i == 1) n = INT64_MIN;
        if (i == 2) n = INT64_MAX;
        vram_jw_t w = {0};
        vram_jw_open(&w, NULL, '[');
        vram_jw_real(&w, NULL, v);
        vram_jw_int(&w, NULL, n);
        vram_jw_close(&w, ']');
        char *mine = vram_jw_finish(&w);
        json_t *ref = json_pack("[f,I]", v, (json_int_t)n);
        char *theirs = json_dumps(ref, JSON_COMPACT);
        assert_string_equal(mine, theirs);
        free(mine);
        free(theirs);
        json_decref(ref);
    }
}

static void shapes(void **state)
{
    (void)state;
    int v[] = {3, 1};
    vram_jw_t w = {0};
    vram_jw_open(&w, NULL, '{');
    vram_jw_int_array(&w, "empty", v, 0);
    vram_jw_int_array(&w, "two", v, 2);
    vram_jw_open(&w, "o", '{');
    vram_jw_close(&w, '}');
    vram_jw_bool(&w, "t", true);
    vram_jw_bool(&w, "f", false);
    vram_jw_null(&w, "n");
    vram_jw_real(&w, "inf", INFINITY);
    vram_jw_close(&w, '}');
    char *text = vram_jw_finish(&w);
    assert_string_equal(text, "{\"empty\":[],\"two\":[3,1],\"o\":{},\"t\":true,\"f\":false,"
                              "\"n\":null,\"inf\":null}");
    free(text);
    vram_jw_t empty = {0};
    text = vram_jw_finish(&empty); /* nothing written: an empty string, not NULL */
    assert_string_equal(text, "");
    free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(strings_parse_back),
        cmocka_unit_test(numbers_as_jansson),
        cmocka_unit_test(shapes),
    };
    return cmocka_run_group_tests(tests, 0, NULL);
}
