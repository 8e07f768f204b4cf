/* The training_automations YAML: the issue's example, old configs without
 * the lq keys, and every kind of bad input named by key and line. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "vram.h"

static const char *full = "model: resnet50   # other sections belong to the user\n"
                          "training_automations:\n"
                          "  enabled: true\n"
                          "  DynamicBatchSizeOptimizer:\n"
                          "    enabled: true\n"
                          "    target_vram_usage: 0.85    # fraction of the device\n"
                          "    safety_margin: 0.05\n"
                          "    adjustment_frequency: 100  # iterations between adjustments\n"
                          "    min_batch_size: 2\n"
                          "    max_batch_size: 64\n"
                          "    min_lq_size: 32\n"
                          "    max_lq_size: 256\n"
                          "    vram_history_size: 50\n"
                          "    max_adjustments: 50        # optional\n";

static void reads_the_issue_example(void **state)
{
    (void)state;
    vram_batchopt_config_t c;
    vram_batchopt_config_init(&c);
    c.enabled = false;
    assert_int_equal(vram_batchopt_config_parse(full, "train.yaml", &c), 0);
    assert_true(c.enabled);
    assert_float_equal(c.target_usage, 0.85, 1e-12);
    assert_float_equal(c.safety_margin, 0.05, 1e-12);
    assert_int_equal(c.adjustment_frequency, 100);
    assert_int_equal(c.min_batch, 2);
    assert_int_equal(c.max_batch, 64);
    assert_int_equal(c.min_lq, 32);
    assert_int_equal(c.max_lq, 256);
    assert_int_equal(c.history_size, 50);
    assert_int_equal(c.max_adjustments, 50);
}

static void old_config_without_lq(void **state)
{
    (void)state;
    vram_batchopt_config_t c;
    vram_batchopt_config_init(&c);
    assert_int_equal(vram_batchopt_config_parse("training_automations:\n"
                                                "  enabled: yes\n"
                                                "  DynamicBatchSizeOptimizer:\n"
                                                "    target_vram_usage: 0.9\n"
                                                "    max_batch_size: 128\n",
                                                "old.yaml", &c),
                     0);
    assert_true(c.enabled);
    assert_int_equal(c.min_lq, 0);
    assert_int_equal(c.max_lq, 0);
    assert_int_equal(c.max_batch, 128);
    assert_int_equal(c.min_batch, 2); /* default */
    vram_batchopt_t *o;
    assert_int_equal(vram_batchopt_create(&c, 8, 0, &o), 0);
    vram_batchopt_destroy(o);
    /* disabled at either level */
    assert_int_equal(vram_batchopt_config_parse("training_automations:\n  enabled: false\n"
                                                "  DynamicBatchSizeOptimizer:\n    enabled: true\n",
                                                "off.yaml", &c),
                     0);
    assert_false(c.enabled);
    vram_batchopt_config_init(&c);
    assert_int_equal(
        vram_batchopt_config_parse("training_automations:\n  enabled: true\n", "x", &c), 0);
    assert_false(c.enabled); /* not listed: off */
}

/* Parses text and expects EPARSE with every needle in the message. */
static void expect_error(const char *text, const char *n1, const char *n2)
{
    vram_batchopt_config_t c, before;
    vram_batchopt_config_init(&c);
    before = c;
    int rc = vram_batchopt_config_parse(text, "bad.yaml", &c);
    if (rc != VRAM_EPARSE) fail_msg("expected EPARSE for:\n%s\ngot %d", text, rc);
    const char *msg = vram_last_error();
    if (!strstr(msg, n1) || (n2 && !strstr(msg, n2)))
        fail_msg("message \"%s\" lacks \"%s\" / \"%s\"", msg, n1, n2 ? n2 : "");
    assert_memory_equal(&c, &before, sizeof c); /* untouched */
}

#define HEAD "training_automations:\n  DynamicBatchSizeOptimizer:\n"

static void errors_name_key_and_line(void **state)
{
    (void)state;
    expect_error(HEAD "    target_vram_usage: 0.8\n    max_batchsize: 64\n", "bad.yaml:4",
                 "unknown key \"max_batchsize\"");
    expect_error(HEAD "    target_vram_usage: 1.5\n", "bad.yaml:3", "target_vram_usage");
    expect_error(HEAD "    safety_margin: -0.1\n", "bad.yaml:3", "safety_margin");
    expect_error(HEAD "    min_batch_size: 8\n    max_batch_size: 4\n", "bad.yaml:4",
                 "max_batch_size");
    expect_error(HEAD "    min_batch_size: 0\n", "bad.yaml:3", "min_batch_size");
    expect_error(HEAD "    adjustment_frequency: 1.5\n", "bad.yaml:3", "adjustment_frequency");
    expect_error(HEAD "    adjustment_frequency: lots\n", "bad.yaml:3", "whole number");
    expect_error(HEAD "    enabled: maybe\n", "bad.yaml:3", "enabled");
    expect_error(HEAD "    min_lq_size: 32\n", "bad.yaml:3", "min_lq_size needs max_lq_size");
    expect_error(HEAD "    min_lq_size: 300\n    max_lq_size: 256\n", "bad.yaml:4", "max_lq_size");
    expect_error(HEAD "    vram_history_size: 0\n", "bad.yaml:3", "vram_history_size");
    expect_error(HEAD "    max_adjustments: -1\n", "bad.yaml:3", "max_adjustments");
    expect_error(HEAD "    oom_cooldown_windows: 0\n", "bad.yaml:3", "oom_cooldown_windows");
    expect_error(HEAD "    max_batch_size: 64\n    max_batch_size: 32\n", "bad.yaml:4", "twice");
    expect_error(HEAD "    max_batch_size: [1, 2]\n", "bad.yaml:3", "max_batch_size");
    expect_error(HEAD "    target_vram_usage: 0.8\n  Other: {}\n", "bad.yaml:4", "\"Other\"");
    expect_error("training_automations: [1]\n", "bad.yaml:1", "training_automations");
    expect_error("model: x\n", "bad.yaml", "no training_automations");
    expect_error(HEAD "    target_vram_usage: [0.8\n", "bad.yaml:", NULL); /* malformed */
    expect_error("training_automations:\n  DynamicBatchSizeOptimizer: 3\n", "bad.yaml:2",
                 "DynamicBatchSizeOptimizer");
}

/* Every field of vram_batchopt_config_t but the policy has its key. */
static void reads_the_oom_cooldown(void **state)
{
    (void)state;
    vram_batchopt_config_t c;
    vram_batchopt_config_init(&c);
    assert_int_equal(
        vram_batchopt_config_parse(HEAD "    oom_cooldown_windows: 7\n", "cd.yaml", &c), 0);
    assert_int_equal(c.oom_cooldown_windows, 7);
}

static void loads_a_file(void **state)
{
    (void)state;
    char path[] = "/tmp/vram-tune-config-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, full, strlen(full)), (ssize_t)strlen(full));
    close(fd);
    vram_batchopt_config_t c;
    vram_batchopt_config_init(&c);
    assert_int_equal(vram_batchopt_config_load(path, &c), 0);
    assert_int_equal(c.max_lq, 256);
    unlink(path);
    assert_int_equal(vram_batchopt_config_load(path, &c), VRAM_EIO);
    assert_non_null(strstr(vram_last_error(), path));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(reads_the_issue_example),
        cmocka_unit_test(old_config_without_lq),
        cmocka_unit_test(errors_name_key_and_line),
        cmocka_unit_test(reads_the_oom_cooldown),
        cmocka_unit_test(loads_a_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
