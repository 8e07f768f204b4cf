/* Bad input to the pool: foreign pointers, double frees, impossible
 * requests, NULL arguments. Each is refused with the documented code, counted
 * where documented, and leaves the pool intact. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "pool/pool_internal.h"
#include "unit/pool_sim.h"

static pool_sim_t sim;

static int setup(void **state)
{
    (void)state;
    return pool_sim_open(&sim, "1xbad:1GiB");
}

static int teardown(void **state)
{
    (void)state;
    pool_sim_close(&sim);
    return 0;
}

static void assert_intact(vram_pool_t *pool)
{
    char err[256];
    if (vram_pool_check(pool, err, sizeof err)) fail_msg("pool broken: %s", err);
}

static int handler_calls;

static int counting_handler(vram_pool_t *pool, size_t request, void *user)
{
    (void)pool;
    (void)request;
    (void)user;
    handler_calls++;
    return 0;
}

static void foreign_and_double_free(void **state)
{
    (void)state;
    vram_pool_config_t cfg = {.strategy = VRAM_POOL_BALANCED};
    vram_pool_t *pool, *other;
    assert_int_equal(vram_pool_create(sim.ctx, 0, &cfg, &pool), 0);
    assert_int_equal(vram_pool_create(sim.ctx, 0, &cfg, &other), 0);
    void *a, *b, *c;
    assert_int_equal(vram_pool_alloc(pool, 4096, NULL, &a), 0);
    assert_int_equal(vram_pool_alloc(pool, 3 << 20, NULL, &b), 0);
    assert_int_equal(vram_pool_alloc(other, 4096, NULL, &c), 0);
    vram_pool_stats_t before, after;
    assert_int_equal(vram_pool_stats(pool, &before), 0);

    int on_stack;
    void *foreign[] = {&on_stack, (char *)a + 512, (char *)b + 4096, c, (void *)(uintptr_t)1};
    for (size_t i = 0; i < sizeof foreign / sizeof foreign[0]; i++) {
        assert_int_equal(vram_pool_free(pool, foreign[i]), VRAM_EINVAL);
        assert_non_null(strstr(vram_last_error(), "was not allocated by this pool"));
    }
    assert_int_equal(vram_pool_free(pool, a), 0);
    assert_int_equal(vram_pool_free(pool, a), VRAM_EINVAL); /* twice */
    assert_int_equal(vram_pool_free(pool, NULL), 0);        /* like free(NULL): not counted */

    assert_int_equal(vram_pool_stats(pool, &after), 0);
    assert_int_equal(after.num_invalid_frees, 6);
    assert_int_equal(after.allocation[VRAM_POOL_STAT_ALL].current,
                     before.allocation[VRAM_POOL_STAT_ALL].current - 1);
    assert_int_equal(after.reserved_bytes[VRAM_POOL_STAT_ALL].current,
                     before.reserved_bytes[VRAM_POOL_STAT_ALL].current);
    assert_intact(pool);
    assert_intact(other);

    /* Still fully usable: the freed block comes back, b is still live. */
    void *again;
    assert_int_equal(vram_pool_alloc(pool, 4096, NULL, &again), 0);
    assert_ptr_equal(again, a);
    assert_int_equal(vram_pool_free(pool, b), 0);
    assert_int_equal(vram_pool_free(pool, again), 0);
    assert_int_equal(vram_pool_free(other, c), 0);
    assert_intact(pool);
    vram_pool_destroy(pool);
    vram_pool_destroy(other);
}

static void request_above_device_fails_at_once(void **state)
{
    (void)state;
    vram_pool_config_t cfg = {.strategy = VRAM_POOL_GREEDY};
    vram_pool_t *pool;
    assert_int_equal(vram_pool_create(sim.ctx, 0, &cfg, &pool), 0);
    assert_int_equal(vram_pool_add_oom_handler(pool, counting_handler, NULL), 0);
    handler_calls = 0;
    void *p = (void *)&p;
    assert_int_equal(vram_pool_alloc(pool, ((size_t)1 << 30) + 1, NULL, &p), VRAM_ENOMEM);
    assert_null(p);
    assert_non_null(strstr(vram_last_error(), "exceeds the device's total memory"));
    assert_int_equal(vram_pool_alloc(pool, SIZE_MAX, NULL, &p), VRAM_ENOMEM);
    assert_int_equal(vram_pool_alloc(pool, SIZE_MAX - 100, NULL, &p), VRAM_ENOMEM);
    assert_int_equal(handler_calls, 0); /* no chain: nothing could help */
    vram_pool_stats_t s;
    assert_int_equal(vram_pool_stats(pool, &s), 0);
    assert_int_equal(s.num_device_alloc, 0);
    assert_int_equal(s.num_ooms, 3);
    assert_int_equal(s.num_alloc_retries, 0);
    /* Exactly the device's size is not "above" it. */
    assert_int_equal(vram_pool_alloc(pool, (size_t)1 << 30, NULL, &p), 0);
    assert_int_equal(vram_pool_free(pool, p), 0);
    assert_intact(pool);
    vram_pool_destroy(pool);
}

static void null_and_zero_arguments(void **state)
{
    (void)state;
    vram_pool_t *pool;
    void *p = (void *)&p;
    assert_int_equal(vram_pool_create(NULL, 0, NULL, &pool), VRAM_EINVAL);
    assert_int_equal(vram_pool_create(sim.ctx, 0, NULL, NULL), VRAM_EINVAL);
    assert_int_equal(vram_pool_create(sim.ctx, 1, NULL, &pool), VRAM_ENODEV);
    assert_int_equal(vram_pool_create(sim.ctx, -1, NULL, &pool), VRAM_ENODEV);
    vram_pool_config_t bad = {.strategy = (vram_pool_strategy_t)42};
    assert_int_equal(vram_pool_create(sim.ctx, 0, &bad, &pool), VRAM_EINVAL);
    bad = (vram_pool_config_t){.strategy = VRAM_POOL_BALANCED, .limit_fraction = 1.5};
    assert_int_equal(vram_pool_create(sim.ctx, 0, &bad, &pool), VRAM_EINVAL);
    assert_int_equal(vram_pool_alloc(NULL, 10, NULL, &p), VRAM_EINVAL);
    assert_int_equal(vram_pool_free(NULL, p), VRAM_EINVAL);
    assert_int_equal(vram_pool_trim(NULL, NULL), VRAM_EINVAL);
    assert_int_equal(vram_pool_stats(NULL, NULL), VRAM_EINVAL);
    assert_null(vram_pool_snapshot_json(NULL));
    vram_pool_destroy(NULL);
    vram_pool_reset_peaks(NULL);

    assert_int_equal(vram_pool_create(sim.ctx, 0, NULL, &pool), 0);
    assert_int_equal(vram_pool_alloc(pool, 0, NULL, &p), 0);
    assert_null(p);
    assert_int_equal(vram_pool_add_oom_handler(pool, NULL, NULL), VRAM_EINVAL);
    for (int i = 0; i < VRAM_POOL_MAX_OOM_HANDLERS; i++)
        assert_int_equal(vram_pool_add_oom_handler(pool, counting_handler, NULL), 0);
    assert_int_equal(vram_pool_add_oom_handler(pool, counting_handler, NULL), VRAM_ENOMEM);
    vram_pool_destroy(pool);
}

static void strategy_names(void **state)
{
    (void)state;
    vram_pool_strategy_t s;
    assert_int_equal(vram_pool_strategy_parse("Fragmentation_Aware", &s), 0);
    assert_int_equal(s, VRAM_POOL_FRAGMENTATION_AWARE);
    assert_int_equal(vram_pool_strategy_parse("greedy", &s), 0);
    assert_int_equal(s, VRAM_POOL_GREEDY);
    assert_int_equal(vram_pool_strategy_parse("best", &s), VRAM_EINVAL);
    assert_non_null(strstr(vram_last_error(), "\"best\""));
    assert_int_equal(vram_pool_strategy_parse(NULL, &s), VRAM_EINVAL);
    assert_string_equal(vram_pool_strategy_name(VRAM_POOL_CONSOLIDATED), "consolidated");
    assert_string_equal(vram_pool_strategy_name((vram_pool_strategy_t)9), "?");

    /* A bad VRAM_POOL_STRATEGY is named when a pool takes its options. */
    assert_int_equal(vram_option_set(VRAM_OPT_POOL_STRATEGY, "fastest"), 0);
    vram_pool_t *pool;
    assert_int_equal(vram_pool_create(sim.ctx, 0, NULL, &pool), VRAM_EINVAL);
    assert_non_null(strstr(vram_last_error(), "VRAM_POOL_STRATEGY"));
    assert_int_equal(vram_option_set(VRAM_OPT_POOL_STRATEGY, "consolidated"), 0);
    assert_int_equal(vram_pool_create(sim.ctx, 0, NULL, &pool), 0);
    char *json = vram_pool_snapshot_json(pool);
    assert_non_null(strstr(json, "\"strategy\":\"consolidated\""));
    free(json);
    vram_pool_destroy(pool);
    assert_int_equal(vram_option_set(VRAM_OPT_POOL_STRATEGY, "balanced"), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(foreign_and_double_free),
        cmocka_unit_test(request_above_device_fails_at_once),
        cmocka_unit_test(null_and_zero_arguments),
        cmocka_unit_test(strategy_names),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
