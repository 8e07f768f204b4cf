/* The option table and the error table. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "vram.h"

static void error_names_and_messages(void **state)
{
    (void)state;
    assert_string_equal(vram_err_name(VRAM_ENOMEM), "VRAM_ENOMEM");
    assert_string_equal(vram_strerror(VRAM_OK), "success");
    assert_string_equal(vram_err_name(-9999), "VRAM_EUNKNOWN");
    assert_int_equal(vram_fail(VRAM_EINVAL, "bad %s", "thing"), VRAM_EINVAL);
    assert_string_equal(vram_last_error(), "bad thing");
}

static void lookup_by_any_spelling(void **state)
{
    (void)state;
    assert_int_equal(vram_option_find("safety-margin"), VRAM_OPT_SAFETY_MARGIN);
    assert_int_equal(vram_option_find("VRAM_SAFETY_MARGIN"), VRAM_OPT_SAFETY_MARGIN);
    assert_int_equal(vram_option_find("SIM"), VRAM_OPT_SIM);
    assert_int_equal(vram_option_find("nope"), -1);
    assert_string_equal(vram_option_env(VRAM_OPT_BACKEND), "VRAM_BACKEND");
}

static void environment_then_override(void **state)
{
    (void)state;
    long long n;
    assert_int_equal(vram_option_int(VRAM_OPT_MAX_CONCURRENT_JOBS, &n), 0);
    assert_int_equal(n, 0);
    setenv("VRAM_MAX_CONCURRENT_JOBS", "3", 1);
    assert_int_equal(vram_option_int(VRAM_OPT_MAX_CONCURRENT_JOBS, &n), 0);
    assert_int_equal(n, 3);
    assert_int_equal(vram_option_set(VRAM_OPT_MAX_CONCURRENT_JOBS, "5"), 0);
    assert_int_equal(vram_option_int(VRAM_OPT_MAX_CONCURRENT_JOBS, &n), 0);
    assert_int_equal(n, 5);
    assert_int_equal(vram_option_set(VRAM_OPT_MAX_CONCURRENT_JOBS, "five"), VRAM_EINVAL);
    assert_non_null(strstr(vram_last_error(), "VRAM_MAX_CONCURRENT_JOBS"));
    assert_int_equal(vram_option_int(VRAM_OPT_MAX_CONCURRENT_JOBS, &n), 0);
    assert_int_equal(n, 5); /* the bad value was not applied */
}

static void sizes_and_fractions(void **state)
{
    (void)state;
    uint64_t v;
    assert_int_equal(vram_option_set(VRAM_OPT_SAFETY_MARGIN, "0.25"), 0);
    assert_int_equal(vram_option_size(VRAM_OPT_SAFETY_MARGIN, 1000, &v), 0);
    assert_int_equal(v, 250);
    assert_int_equal(vram_option_set(VRAM_OPT_SAFETY_MARGIN, "1GiB"), 0);
    assert_int_equal(vram_option_size(VRAM_OPT_SAFETY_MARGIN, 1000, &v), 0);
    assert_int_equal(v, 1ull << 30);
}

static void config_file_is_all_or_nothing(void **state)
{
    (void)state;
    char path[] = "/tmp/vram-options-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    fprintf(f, "# comment\nlog-level = debug\nJOB_TIMEOUT=oops\n");
    fclose(f);
    assert_int_equal(vram_options_load_file(path), VRAM_EPARSE);
    assert_non_null(strstr(vram_last_error(), ":3:"));
    assert_string_equal(vram_option_str(VRAM_OPT_LOG_LEVEL), "info");
    f = fopen(path, "w");
    fprintf(f, "log-level = debug\nJOB_TIMEOUT=5m\n");
    fclose(f);
    assert_int_equal(vram_options_load_file(path), 0);
    double s;
    assert_string_equal(vram_option_str(VRAM_OPT_LOG_LEVEL), "debug");
    assert_int_equal(vram_option_double(VRAM_OPT_JOB_TIMEOUT, &s), 0);
    assert_true(s == 300);
    unlink(path);
}

/* A config file that sets a secret (the TCP token, a webhook URL, an exec
 * command) is refused while group or others may read it. */
static void secrets_need_a_private_config_file(void **state)
{
    (void)state;
    char path[] = "/tmp/vram-options-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    fprintf(f, "LOG_LEVEL=warn\nTOKEN=hunter2\n");
    fclose(f);
    static const mode_t loose[] = {0644, 0640, 0604};
    for (size_t i = 0; i < sizeof loose / sizeof loose[0]; i++) {
        assert_int_equal(chmod(path, loose[i]), 0);
        assert_int_equal(vram_options_load_file(path), VRAM_EPERM);
        assert_non_null(strstr(vram_last_error(), "TOKEN"));
        assert_non_null(strstr(vram_last_error(), "chmod 600"));
        assert_string_equal(vram_option_str(VRAM_OPT_TOKEN), ""); /* nothing applied */
    }
    assert_int_equal(chmod(path, 0600), 0);
    assert_int_equal(vram_options_load_file(path), 0);
    assert_string_equal(vram_option_str(VRAM_OPT_TOKEN), "hunter2");
    assert_int_equal(vram_option_type(VRAM_OPT_ALERT_WEBHOOK), VRAM_OPTTYPE_SECRET);
    assert_int_equal(vram_option_type(VRAM_OPT_ALERT_EXEC), VRAM_OPTTYPE_SECRET);
    /* a file without secrets may be read by anyone */
    f = fopen(path, "w");
    fprintf(f, "LOG_LEVEL=warn\n");
    fclose(f);
    assert_int_equal(chmod(path, 0644), 0);
    assert_int_equal(vram_options_load_file(path), 0);
    assert_int_equal(vram_option_set(VRAM_OPT_TOKEN, ""), 0);
    assert_int_equal(vram_option_set(VRAM_OPT_LOG_LEVEL, "info"), 0);
    unlink(path);
}

int main(void)
{
    unsetenv("VRAM_MAX_CONCURRENT_JOBS");
    unsetenv("VRAM_LOG_LEVEL");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(error_names_and_messages),
        cmocka_unit_test(lookup_by_any_spelling),
        cmocka_unit_test(environment_then_override),
        cmocka_unit_test(sizes_and_fractions),
        cmocka_unit_test(config_file_is_all_or_nothing),
        cmocka_unit_test(secrets_need_a_private_config_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
