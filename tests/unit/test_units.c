/* Size, fraction and duration parsing: accepted forms and named rejections. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "vram.h"

static void sizes_accepted(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        uint64_t bytes;
    } cases[] = {
        {"512", 512},
        {"64KiB", 65536},
        {"20GiB", 20ull << 30},
        {"1.5GB", 1500000000ull},
        {"2g", 2ull << 30},
        {"80 GiB", 80ull << 30},
        {"1tb", 1000000000000ull},
        {"0", 0},
        {"100B", 100},
        {"0.5MiB", 512 * 1024},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint64_t v = 1;
        assert_int_equal(vram_parse_size(cases[i].text, &v), 0);
        assert_int_equal(v, cases[i].bytes);
    }
}

static void sizes_rejected_with_named_token(void **state)
{
    (void)state;
    static const char *bad[] = {"",         "abc", "-5GiB", "10XB", "GiB",   "1e30TiB", "5 G B",
                                "0x1p3GiB", "1e3", "inf",   "nan",  "1.2.3", ".",       "1..5GiB"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        uint64_t v = 7;
        assert_int_equal(vram_parse_size(bad[i], &v), VRAM_EINVAL);
        assert_int_equal(v, 7); /* untouched on failure */
        if (*bad[i]) assert_non_null(strstr(vram_last_error(), bad[i]));
    }
}

static void fractions_and_sizes(void **state)
{
    (void)state;
    uint64_t v;
    assert_int_equal(vram_parse_size_or_fraction("0.1", 1000, &v), 0);
    assert_int_equal(v, 100);
    assert_int_equal(vram_parse_size_or_fraction("4GiB", 1000, &v), 0);
    assert_int_equal(v, 4ull << 30);
    assert_int_equal(vram_parse_size_or_fraction("1.5", 1000, &v), VRAM_EINVAL);
}

static void durations(void **state)
{
    (void)state;
    double s;
    assert_int_equal(vram_parse_seconds("30", &s), 0);
    assert_true(s == 30);
    assert_int_equal(vram_parse_seconds("5m", &s), 0);
    assert_true(s == 300);
    assert_int_equal(vram_parse_seconds("250ms", &s), 0);
    assert_true(s > 0.249 && s < 0.251);
    assert_int_equal(vram_parse_seconds("soon", &s), VRAM_EINVAL);
    assert_int_equal(vram_parse_seconds("3d", &s), VRAM_EINVAL);
    assert_int_equal(vram_parse_seconds("1e308h", &s), VRAM_EINVAL);
    assert_int_equal(vram_parse_seconds("0x10", &s), VRAM_EINVAL);
    assert_int_equal(vram_parse_seconds("-1", &s), VRAM_EINVAL);
}

static void formatting(void **state)
{
    (void)state;
    char buf[32];
    assert_string_equal(vram_format_size(512, buf, sizeof buf), "512 B");
    assert_string_equal(vram_format_size(3ull << 29, buf, sizeof buf), "1.50 GiB");
    assert_string_equal(vram_format_size(VRAM_UNKNOWN_U64, buf, sizeof buf), "unknown");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(sizes_accepted),      cmocka_unit_test(sizes_rejected_with_named_token),
        cmocka_unit_test(fractions_and_sizes), cmocka_unit_test(durations),
        cmocka_unit_test(formatting),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
