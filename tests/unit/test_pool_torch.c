/* The PyTorch pluggable-allocator entry points: lazily created process-wide
 * pools per device, NULL on failure, unknown pointers counted not fatal. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "vram.h"
#include "unit/pool_sim.h"

static void malloc_and_free(void **state)
{
    (void)state;
    pool_sim_t sim;
    assert_int_equal(pool_sim_open(&sim, "2xtorch:2GiB"), 0); /* the options torch reads */
    assert_null(vram_torch_pool(0));                          /* created on first use */

    void *stream = (void *)0x5000;
    void *a = vram_torch_malloc(1000, 0, stream);
    void *b = vram_torch_malloc(50 << 20, 1, NULL);
    assert_non_null(a);
    assert_non_null(b);
    vram_pool_t *p0 = vram_torch_pool(0), *p1 = vram_torch_pool(1);
    assert_non_null(p0);
    assert_non_null(p1);
    assert_ptr_not_equal(p0, p1);
    vram_pool_stats_t s;
    assert_int_equal(vram_pool_stats(p0, &s), 0);
    assert_int_equal(s.requested_bytes[VRAM_POOL_STAT_ALL].current, 1000);
    /* The pools' device memory is visible to another context. */
    vram_device_info_t info;
    assert_int_equal(vram_device_info(sim.ctx, 1, &info), 0);
    assert_true(info.used_bytes >= 50u << 20);

    assert_null(vram_torch_malloc(0, 0, NULL));
    assert_null(vram_torch_malloc(-5, 0, NULL));
    assert_null(vram_torch_malloc(100, 64, NULL));             /* no such device slot */
    assert_null(vram_torch_malloc(100, 7, NULL));              /* the context has 2 devices */
    assert_null(vram_torch_malloc((ssize_t)3 << 30, 0, NULL)); /* larger than the GPU */

    vram_torch_free(a, 1000, 0, stream);
    vram_torch_free(a, 1000, 0, stream); /* twice: counted, not fatal */
    vram_torch_free(b, 50 << 20, 1, NULL);
    vram_torch_free(NULL, 0, 0, NULL);
    vram_torch_free(b, 0, 9, NULL); /* a device without a pool: ignored */
    assert_int_equal(vram_pool_stats(p0, &s), 0);
    assert_int_equal(s.allocation[VRAM_POOL_STAT_ALL].current, 0);
    assert_int_equal(s.num_invalid_frees, 1);
    assert_int_equal(s.num_ooms, 1);
    /* The same pool serves later calls. */
    void *c = vram_torch_malloc(1000, 0, stream);
    assert_ptr_equal(c, a);
    vram_torch_free(c, 1000, 0, stream);
    /* The process-wide pools live until exit (documented); trim them here so
     * the state file can go. */
    assert_int_equal(vram_pool_trim(p0, NULL), 0);
    assert_int_equal(vram_pool_trim(p1, NULL), 0);
    assert_int_equal(vram_device_info(sim.ctx, 1, &info), 0);
    assert_int_equal(info.used_bytes, 0);
    pool_sim_close(&sim);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(malloc_and_free)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
