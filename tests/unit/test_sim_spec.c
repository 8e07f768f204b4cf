/* VRAM_SIM parsing: accepted forms, and rejections that name the bad token. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "device/sim_spec.h"

#define GIB (1ull << 30)

static vram_sim_spec_t spec;

static void repeated_model(void **state)
{
    (void)state;
    assert_int_equal(vram_sim_spec_parse("2xH100-80GB", &spec), 0);
    assert_int_equal(spec.count, 2);
    for (int i = 0; i < 2; i++) {
        assert_string_equal(spec.gpus[i].name, "H100-80GB");
        assert_int_equal(spec.gpus[i].total_bytes, 80 * GIB);
        assert_int_equal(spec.gpus[i].cc_major, 9);
        assert_int_equal(spec.gpus[i].cc_minor, 0);
        assert_int_equal(spec.gpus[i].multiprocessors, 132);
        assert_int_equal(spec.gpus[i].fail, VRAM_SIM_FAIL_NONE);
    }
}

static void list_of_models_case_insensitive(void **state)
{
    (void)state;
    assert_int_equal(vram_sim_spec_parse(" a100-40gb , RTX3060-12GB ", &spec), 0);
    assert_int_equal(spec.count, 2);
    assert_string_equal(spec.gpus[0].name, "A100-40GB"); /* canonical spelling */
    assert_int_equal(spec.gpus[0].total_bytes, 40 * GIB);
    assert_string_equal(spec.gpus[1].name, "RTX3060-12GB");
    assert_int_equal(spec.gpus[1].total_bytes, 12 * GIB);
    assert_int_equal(spec.gpus[1].cc_minor, 6);
}

static void custom_models(void **state)
{
    (void)state;
    assert_int_equal(vram_sim_spec_parse("mygpu:24GiB", &spec), 0);
    assert_int_equal(spec.count, 1);
    assert_string_equal(spec.gpus[0].name, "mygpu");
    assert_int_equal(spec.gpus[0].total_bytes, 24 * GIB);
    assert_int_equal(spec.gpus[0].cc_major, VRAM_UNKNOWN_INT);
    assert_int_equal(spec.gpus[0].multiprocessors, VRAM_UNKNOWN_INT);
    assert_true(spec.gpus[0].power_limit_w < 0);

    assert_int_equal(vram_sim_spec_parse("3xtiny:1.5GB,H100-80GB", &spec), 0);
    assert_int_equal(spec.count, 4);
    assert_int_equal(spec.gpus[2].total_bytes, 1500000000ull);
    assert_string_equal(spec.gpus[3].name, "H100-80GB");
}

static void failure_hooks(void **state)
{
    (void)state;
    assert_int_equal(vram_sim_spec_parse("H100-80GB,A100-40GB@fail,2xg:1GiB@flaky=3", &spec), 0);
    assert_int_equal(spec.count, 4);
    assert_int_equal(spec.gpus[0].fail, VRAM_SIM_FAIL_NONE);
    assert_int_equal(spec.gpus[1].fail, VRAM_SIM_FAIL_ALWAYS);
    assert_int_equal(spec.gpus[2].fail, VRAM_SIM_FAIL_FLAKY);
    assert_int_equal(spec.gpus[3].fail_count, 3);
}

static void largest_count(void **state)
{
    (void)state;
    assert_int_equal(vram_sim_spec_parse("64xT4-16GB", &spec), 0);
    assert_int_equal(spec.count, VRAM_SIM_MAX_DEVICES);
}

/* Each bad spec fails with EINVAL, names `token`, and leaves the output alone. */
static void rejected_with_named_token(void **state)
{
    (void)state;
    static const struct {
        const char *spec, *token;
    } bad[] = {
        {"bogus", "\"bogus\""},
        {"2xH100-80GB,bogus", "\"bogus\""},
        {"H100-80GB,,A100-40GB", "empty"},
        {"0xH100-80GB", "0xH100-80GB"},
        {"65xH100-80GB", "65xH100-80GB"},
        {"40xH100-80GB,30xA100-40GB", "30xA100-40GB"},
        {"mygpu:", "\"\""},
        {"mygpu:24XB", "24XB"},
        {"mygpu:0", "\"0\""},
        {"my gpu:4GiB", "my gpu"},
        {":4GiB", "\"\""},
        {"3x", "3x"},
        {"64x4xmygpu:1GiB", "4xmygpu"},
        {"mygpu:0x1p3GiB", "0x1p3GiB"},
        {"H100-80GB@explode", "explode"},
        {"H100-80GB@flaky=-1", "flaky=-1"},
        {"", "empty"},
        {"  ", "empty"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        spec.count = 77;
        vram_clear_error();
        int rc = vram_sim_spec_parse(bad[i].spec, &spec);
        if (rc != VRAM_EINVAL || !strstr(vram_last_error(), bad[i].token))
            fail_msg("spec \"%s\": rc %d, message \"%s\" should name %s", bad[i].spec, rc,
                     vram_last_error(), bad[i].token);
        assert_int_equal(spec.count, 77);
    }
}

static void hash_ignores_spelling_and_hooks(void **state)
{
    (void)state;
    vram_sim_spec_t *b = malloc(sizeof *b);
    assert_non_null(b);
    assert_int_equal(vram_sim_spec_parse("2xH100-80GB", &spec), 0);
    assert_int_equal(vram_sim_spec_parse("h100-80gb, H100-80GB@flaky=2", b), 0);
    assert_true(vram_sim_spec_hash(&spec) == vram_sim_spec_hash(b));
    assert_int_equal(vram_sim_spec_parse("H100-80GB,A100-80GB", b), 0);
    assert_true(vram_sim_spec_hash(&spec) != vram_sim_spec_hash(b));
    assert_int_equal(vram_sim_spec_parse("3xH100-80GB", b), 0);
    assert_true(vram_sim_spec_hash(&spec) != vram_sim_spec_hash(b));
    free(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(repeated_model),
        cmocka_unit_test(list_of_models_case_insensitive),
        cmocka_unit_test(custom_models),
        cmocka_unit_test(failure_hooks),
        cmocka_unit_test(largest_count),
        cmocka_unit_test(rejected_with_named_token),
        cmocka_unit_test(hash_ignores_spelling_and_hooks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
