/* The error table: every code has a name, a message and one HTTP answer,
 * and vram_fail remembers the code as well as the message. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "vram.h"

static void http_statuses_are_one_table(void **state)
{
    (void)state;
    static const struct {
        int err, status;
        const char *code;
    } cases[] = {
        {VRAM_EINVAL, 422, "invalid_value"}, {VRAM_EPARSE, 400, "bad_request"},
        {VRAM_ENOENT, 404, "not_found"},     {VRAM_ENODEV, 404, "not_found"},
        {VRAM_EPERM, 403, "forbidden"},      {VRAM_ESTATE, 409, "conflict"},
        {VRAM_EBUSY, 429, "quota"},          {VRAM_EIO, 500, "internal"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *code = NULL;
        assert_int_equal(vram_err_http(cases[i].err, &code), cases[i].status);
        assert_string_equal(code, cases[i].code);
    }
    const char *code = NULL;
    assert_int_equal(vram_err_http(-999, &code), 500);
    assert_string_equal(code, "internal");
    assert_int_equal(vram_err_http(VRAM_EINVAL, NULL), 422);
}

static void every_code_has_a_name_a_message_and_an_error_status(void **state)
{
    (void)state;
    for (int err = -1; err >= VRAM_ECONN; err--) {
        assert_string_not_equal(vram_err_name(err), "VRAM_EUNKNOWN");
        assert_string_not_equal(vram_strerror(err), "unknown error");
        assert_true(vram_err_http(err, NULL) >= 400);
    }
}

static void fail_keeps_the_code(void **state)
{
    (void)state;
    assert_int_equal(vram_fail(VRAM_ENODEV, "device=%d: no such device", 7), VRAM_ENODEV);
    assert_int_equal(vram_last_error_code(), VRAM_ENODEV);
    assert_string_equal(vram_last_error(), "device=7: no such device");
    vram_clear_error();
    assert_int_equal(vram_last_error_code(), 0);
    assert_string_equal(vram_last_error(), "");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(http_statuses_are_one_table),
        cmocka_unit_test(every_code_has_a_name_a_message_and_an_error_status),
        cmocka_unit_test(fail_keeps_the_code),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
