/* The OOM chain (cached segments first, then the handlers in order, retrying
 * after each that freed something), the OOM message, the memory limit, and
 * trim returning memory to the simulated device as another context sees it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "vram.h"
#include "pool/pool_internal.h"
#include "unit/pool_sim.h"

#define MiB ((size_t)1 << 20)

static pool_sim_t sim;

static int setup(void **state)
{
    (void)state;
    return pool_sim_open(&sim, "1xoom:1GiB");
}

static int teardown(void **state)
{
    (void)state;
    pool_sim_close(&sim);
    return 0;
}

static uint64_t reserved_of(vram_pool_t *pool)
{
    vram_pool_stats_t s;
    assert_int_equal(vram_pool_stats(pool, &s), 0);
    return (uint64_t)s.reserved_bytes[VRAM_POOL_STAT_ALL].current;
}

/* ---- chain order ------------------------------------------------------ */

typedef struct {
    int order[8];
    int calls;
    uint64_t reserved_seen_first; /* pool reserve when the first handler ran */
    void *to_free;
} chain_t;

static int handler_one(vram_pool_t *pool, size_t request, void *user)
{
    chain_t *c = user;
    assert_int_equal(request, 700 * MiB);
    c->order[c->calls++] = 1;
    c->reserved_seen_first = reserved_of(pool);
    return 0; /* freed nothing */
}

static int handler_two(vram_pool_t *pool, size_t request, void *user)
{
    (void)request;
    chain_t *c = user;
    c->order[c->calls++] = 2;
    assert_int_equal(vram_pool_free(pool, c->to_free), 0); /* e.g. an offload */
    return 1;
}

static int handler_three(vram_pool_t *pool, size_t request, void *user)
{
    (void)pool;
    (void)request;
    chain_t *c = user;
    c->order[c->calls++] = 3;
    return 1;
}

static void chain_order(void **state)
{
    (void)state;
    vram_pool_config_t cfg = {.strategy = VRAM_POOL_GREEDY, /* keeps what it caches */
                              .expandable = VRAM_POOL_EXPANDABLE_OFF};
    vram_pool_t *pool;
    assert_int_equal(vram_pool_create(sim.ctx, 0, &cfg, &pool), 0);
    chain_t c = {0};
    void *a, *b, *big;
    assert_int_equal(vram_pool_alloc(pool, 600 * MiB, NULL, &a), 0);
    assert_int_equal(vram_pool_alloc(pool, 300 * MiB, NULL, &b), 0);
    assert_int_equal(vram_pool_free(pool, b), 0); /* cached, not returned */
    assert_int_equal(reserved_of(pool), 900 * MiB);
    c.to_free = a;
    assert_int_equal(vram_pool_add_oom_handler(pool, handler_one, &c), 0);
    assert_int_equal(vram_pool_add_oom_handler(pool, handler_two, &c), 0);
    assert_int_equal(vram_pool_add_oom_handler(pool, handler_three, &c), 0);

    assert_int_equal(vram_pool_alloc(pool, 700 * MiB, NULL, &big), 0);
    assert_int_equal(c.calls, 2); /* the retry after handler two succeeded */
    assert_int_equal(c.order[0], 1);
    assert_int_equal(c.order[1], 2);
    /* The cached 300 MiB went back before any handler ran. */
    assert_int_equal(c.reserved_seen_first, 600 * MiB);
    vram_pool_stats_t s;
    assert_int_equal(vram_pool_stats(pool, &s), 0);
    assert_int_equal(s.num_alloc_retries, 2); /* after the cache release, after handler two */
    assert_int_equal(s.num_ooms, 0);
    assert_int_equal(s.reserved_bytes[VRAM_POOL_STAT_ALL].current, 700 * MiB);
    assert_int_equal(pool_sim_used(sim.ctx), 700 * MiB);
    assert_int_equal(vram_pool_free(pool, big), 0);
    vram_pool_destroy(pool);
    assert_int_equal(pool_sim_used(sim.ctx), 0);
}

/* ---- the message ------------------------------------------------------ */

static int refusing_handler(vram_pool_t *pool, size_t request, void *user)
{
    (void)pool;
    (void)request;
    (*(int *)user)++;
    return 0;
}

static void expect_in(const char *msg, const char *label, uint64_t bytes)
{
    char size[32], want[96];
    vram_format_size(bytes, size, sizeof size);
    snprintf(want, sizeof want, "%s%s", label, size);
    if (!strstr(msg, want)) fail_msg("\"%s\" not in the OOM message: %s", want, msg);
}

static void oom_message(void **state)
{
    (void)state;
    vram_pool_config_t cfg = {.strategy = VRAM_POOL_BALANCED,
                              .expandable = VRAM_POOL_EXPANDABLE_OFF};
    vram_pool_t *pool;
    assert_int_equal(vram_pool_create(sim.ctx, 0, &cfg, &pool), 0);
    void *big, *x, *y, *p = (void *)&p;
    assert_int_equal(vram_pool_alloc(pool, 600 * MiB, NULL, &big), 0);
    /* BALANCED: a 20 MiB segment (five whole 4 MiB requests fit in it) */
    assert_int_equal(vram_pool_alloc(pool, 4 * MiB, NULL, &x), 0);
    assert_int_equal(vram_pool_alloc(pool, 4 * MiB, NULL, &y), 0);
    assert_int_equal(vram_pool_free(pool, x), 0); /* 4 MiB hole before y, 12 MiB after */
    int calls = 0;
    assert_int_equal(vram_pool_add_oom_handler(pool, refusing_handler, &calls), 0);

    assert_int_equal(vram_pool_alloc(pool, 500 * MiB, NULL, &p), VRAM_ENOMEM);
    assert_null(p);
    assert_int_equal(calls, 1);
    const char *msg = vram_last_error();
    expect_in(msg, "tried to allocate ", 500 * MiB);
    assert_non_null(strstr(msg, "524288000 bytes"));
    assert_non_null(strstr(msg, "reserved but unallocated"));
    expect_in(msg, "of which ", 16 * MiB); /* 20 MiB segment, 4 MiB allocated */
    expect_in(msg, "largest free block ", 12 * MiB);
    expect_in(msg, "device free memory ", 1024 * MiB - 620 * MiB);
    expect_in(msg, "of ", (uint64_t)1 << 30);
    assert_non_null(strstr(msg, "device 0"));
    assert_non_null(strstr(msg, "the device refused"));
    vram_pool_stats_t s;
    assert_int_equal(vram_pool_stats(pool, &s), 0);
    assert_int_equal(s.num_ooms, 1);
    assert_int_equal(s.largest_free_block, 12 * MiB);
    assert_int_equal(s.allocation[VRAM_POOL_STAT_ALL].current, 2); /* nothing leaked */
    vram_pool_destroy(pool);
}

/* ---- limit ------------------------------------------------------------ */

static void limit_enforced(void **state)
{
    (void)state;
    vram_pool_config_t cfg = {.strategy = VRAM_POOL_BALANCED,
                              .limit_bytes = 100 * MiB,
                              .expandable = VRAM_POOL_EXPANDABLE_OFF};
    vram_pool_t *pool;
    assert_int_equal(vram_pool_create(sim.ctx, 0, &cfg, &pool), 0);
    int calls = 0;
    assert_int_equal(vram_pool_add_oom_handler(pool, refusing_handler, &calls), 0);
    void *a, *b, *p;
    assert_int_equal(vram_pool_alloc(pool, 60 * MiB, NULL, &a), 0);
    assert_int_equal(vram_pool_alloc(pool, 60 * MiB, NULL, &b), VRAM_ENOMEM);
    assert_non_null(strstr(vram_last_error(), "pool limit would be exceeded"));
    assert_int_equal(calls, 1);
    assert_int_equal(vram_pool_alloc(pool, 101 * MiB, NULL, &p), VRAM_ENOMEM);
    assert_non_null(strstr(vram_last_error(), "exceeds the pool limit"));
    assert_int_equal(calls, 1); /* at once: no handler can make it fit */

    /* Small blocks fill up to the limit and never past it. */
    void *small[64];
    int n = 0;
    while (n < 64 && vram_pool_alloc(pool, 900 * 1024, NULL, &small[n]) == 0) {
        assert_true(reserved_of(pool) <= 100 * MiB);
        n++;
    }
    assert_true(n > 0 && n < 64);
    assert_true(reserved_of(pool) <= 100 * MiB);
    assert_true(pool_sim_used(sim.ctx) <= 100 * MiB);

    /* Lifting the limit lets the pool grow again. */
    assert_int_equal(vram_pool_set_limit(pool, 0), 0);
    assert_int_equal(vram_pool_alloc(pool, 60 * MiB, NULL, &b), 0);
    assert_int_equal(vram_pool_free(pool, b), 0);
    for (int i = 0; i < n; i++)
        assert_int_equal(vram_pool_free(pool, small[i]), 0);
    /* A lower limit releases what is cached above it. */
    assert_int_equal(vram_pool_set_limit(pool, 61 * MiB), 0);
    assert_int_equal(reserved_of(pool), 60 * MiB); /* only a's segment is left */
    vram_pool_stats_t s;
    assert_int_equal(vram_pool_stats(pool, &s), 0);
    assert_int_equal(s.limit_bytes, 61 * MiB);
    assert_int_equal(vram_pool_free(pool, a), 0);
    vram_pool_destroy(pool);
}

static void limit_from_fraction_and_options(void **state)
{
    (void)state;
    vram_pool_config_t cfg = {.strategy = VRAM_POOL_BALANCED, .limit_fraction = 0.25};
    vram_pool_t *pool;
    vram_pool_stats_t s;
    assert_int_equal(vram_pool_create(sim.ctx, 0, &cfg, &pool), 0);
    assert_int_equal(vram_pool_stats(pool, &s), 0);
    assert_int_equal(s.limit_bytes, 256 * MiB);
    vram_pool_destroy(pool);

    assert_int_equal(vram_option_set(VRAM_OPT_POOL_LIMIT, "0.5"), 0);
    assert_int_equal(vram_pool_create(sim.ctx, 0, NULL, &pool), 0);
    assert_int_equal(vram_pool_stats(pool, &s), 0);
    assert_int_equal(s.limit_bytes, 512 * MiB);
    vram_pool_destroy(pool);

    assert_int_equal(vram_option_set(VRAM_OPT_POOL_LIMIT, "128MiB"), 0);
    assert_int_equal(vram_pool_create(sim.ctx, 0, NULL, &pool), 0);
    assert_int_equal(vram_pool_stats(pool, &s), 0);
    assert_int_equal(s.limit_bytes, 128 * MiB);
    vram_pool_destroy(pool);
    assert_int_equal(vram_option_set(VRAM_OPT_POOL_LIMIT, "1.5"), VRAM_EINVAL); /* not a fraction */
    assert_int_equal(vram_option_set(VRAM_OPT_POOL_LIMIT, "0"), 0);
    vram_pool_config_t from_options;
    assert_int_equal(vram_pool_config_from_options(&from_options), 0);
    assert_int_equal(from_options.limit_bytes, 0);
    assert_true(from_options.limit_fraction == 0.0);
}

/* ---- trim ------------------------------------------------------------- */

static void trim_returns_memory_to_the_device(void **state)
{
    (void)state;
    vram_pool_config_t cfg = {.strategy = VRAM_POOL_GREEDY, .expandable = VRAM_POOL_EXPANDABLE_OFF};
    vram_pool_t *pool;
    assert_int_equal(vram_pool_create(sim.ctx, 0, &cfg, &pool), 0);
    void *p[3];
    assert_int_equal(vram_pool_alloc(pool, 100 * MiB, NULL, &p[0]), 0);
    assert_int_equal(vram_pool_alloc(pool, 5 * MiB, (void *)0x77, &p[1]), 0);
    assert_int_equal(vram_pool_alloc(pool, 1000, NULL, &p[2]), 0);
    for (int i = 0; i < 3; i++)
        assert_int_equal(vram_pool_free(pool, p[i]), 0);
    uint64_t reserved = reserved_of(pool);
    assert_true(reserved >= 100 * MiB + 64 * MiB);

    /* A second context (what `vram info` opens) sees the memory held... */
    vram_ctx_t *other;
    assert_int_equal(vram_ctx_open_backend("sim", &other), 0);
    assert_int_equal(pool_sim_used(other), reserved);
    uint64_t released = 0;
    assert_int_equal(vram_pool_trim(pool, &released), 0);
    assert_int_equal(released, reserved);
    /* ...and then given back. */
    assert_int_equal(pool_sim_used(other), 0);
    vram_pool_stats_t s;
    assert_int_equal(vram_pool_stats(pool, &s), 0);
    assert_int_equal(s.num_device_alloc, 3);
    assert_int_equal(s.num_device_free, 3);
    assert_int_equal(s.reserved_bytes[VRAM_POOL_STAT_ALL].current, 0);
    assert_int_equal(s.reserved_bytes[VRAM_POOL_STAT_ALL].peak, (int64_t)reserved);
    vram_ctx_close(other);
    vram_pool_destroy(pool);
}

/* ---- expandable segments ---------------------------------------------- */

/* A balanced pool with expandable segments on the sim device (limit 0:
 * none). */
static vram_pool_t *expandable_pool(uint64_t limit)
{
    vram_pool_config_t cfg = {.strategy = VRAM_POOL_BALANCED,
                              .expandable = VRAM_POOL_EXPANDABLE_ON,
                              .limit_bytes = limit};
    vram_pool_t *pool = NULL;
    assert_int_equal(vram_pool_create(sim.ctx, 0, &cfg, &pool), 0);
    return pool;
}

/* Granules mapped at the end as blocks need them, the same segment for
 * every request of a kind and stream; the limit counts mapped bytes; trim
 * unmaps the unused end and a wholly free segment; another context sees
 * the mapped memory as used; the OOM chain unmaps cached granules before
 * it gives up. */
static void expandable_segments(void **state)
{
    (void)state;
    vram_pool_t *pool = expandable_pool(200 * MiB);
    void *a, *b, *c;
    assert_int_equal(vram_pool_alloc(pool, 3 * MiB, NULL, &a), 0);
    assert_int_equal(reserved_of(pool), 4 * MiB); /* two granules, not a 20 MiB segment */
    assert_int_equal(vram_pool_alloc(pool, 50 * MiB, NULL, &b), 0);
    assert_ptr_equal(b, (char *)a + 3 * MiB); /* the same range, right after a */
    assert_int_equal(reserved_of(pool), 54 * MiB);
    vram_ctx_t *other;
    assert_int_equal(vram_ctx_open_backend("sim", &other), 0);
    assert_int_equal(pool_sim_used(other), 54 * MiB);
    vram_pool_stats_t s;
    assert_int_equal(vram_pool_stats(pool, &s), 0);
    assert_int_equal(s.segment[VRAM_POOL_STAT_ALL].current, 1);
    assert_int_equal(s.num_device_alloc, 0);
    assert_int_equal(s.num_device_map, 2); /* one chunk per growth */

    /* Freed and allocated again: no device call (hysteresis). */
    assert_int_equal(vram_pool_free(pool, b), 0);
    assert_int_equal(vram_pool_alloc(pool, 50 * MiB, NULL, &b), 0);
    assert_int_equal(vram_pool_free(pool, b), 0);
    assert_int_equal(vram_pool_stats(pool, &s), 0);
    assert_int_equal(s.num_device_map, 2);
    assert_int_equal(s.num_device_unmap, 0);

    /* The limit: 200 MiB mapped at most; the OOM chain unmaps the cached
     * end (50 MiB) before the device is asked again. */
    assert_int_equal(vram_pool_alloc(pool, 190 * MiB, NULL, &c), 0);
    assert_true(reserved_of(pool) <= 200 * MiB);
    assert_int_equal(vram_pool_free(pool, c), 0);
    char err[256];
    assert_int_equal(vram_pool_check(pool, err, sizeof err), 0);

    /* Trim unmaps everything a cannot be in: the granules after it. */
    uint64_t released = 0;
    assert_int_equal(vram_pool_trim(pool, &released), 0);
    assert_int_equal(reserved_of(pool), 4 * MiB);
    assert_int_equal(pool_sim_used(other), 4 * MiB);
    assert_int_equal(vram_pool_check(pool, err, sizeof err), 0);
    assert_int_equal(vram_pool_free(pool, a), 0);
    assert_int_equal(vram_pool_trim(pool, &released), 0);
    assert_int_equal(released, 4 * MiB);
    assert_int_equal(pool_sim_used(other), 0);
    assert_int_equal(vram_pool_stats(pool, &s), 0);
    assert_int_equal(s.num_device_map, s.num_device_unmap);
    assert_int_equal(s.segment[VRAM_POOL_STAT_ALL].current, 0);
    vram_ctx_close(other);
    vram_pool_destroy(pool);
}

/* Trim unmaps whole chunks inside a hole too (not only at the end), and a
 * request that lands there maps them again. A chunk shared with a live
 * block stays (a chunk is unmapped whole). */
static void expandable_hole_unmapped_by_trim(void **state)
{
    (void)state;
    vram_pool_t *pool = expandable_pool(0);
    void *a, *b, *c;
    /* Offsets in MiB: a 0..4 and b 4..12 each map one chunk of their own;
     * c 12..15 maps 12..16. */
    assert_int_equal(vram_pool_alloc(pool, 4 * MiB, NULL, &a), 0);
    assert_int_equal(vram_pool_alloc(pool, 8 * MiB, NULL, &b), 0);
    assert_int_equal(vram_pool_alloc(pool, 3 * MiB, NULL, &c), 0);
    assert_int_equal(reserved_of(pool), 16 * MiB);
    assert_int_equal(vram_pool_free(pool, b), 0);
    uint64_t released = 0;
    assert_int_equal(vram_pool_trim(pool, &released), 0);
    assert_int_equal(released, 8 * MiB); /* b's chunk, wholly in the hole; c keeps 12..16 */
    char err[256];
    assert_int_equal(vram_pool_check(pool, err, sizeof err), 0);
    vram_ctx_t *other;
    assert_int_equal(vram_ctx_open_backend("sim", &other), 0);
    assert_int_equal(pool_sim_used(other), 8 * MiB);
    /* The snapshot shows the range the blocks tile and what is mapped of it. */
    char *json = vram_pool_snapshot_json(pool);
    assert_non_null(strstr(json, "\"total_size\":16777216"));
    assert_non_null(strstr(json, "\"mapped_size\":8388608"));
    free(json);
    /* The hole is used again: its chunk is mapped again, one call. */
    vram_pool_stats_t s;
    assert_int_equal(vram_pool_stats(pool, &s), 0);
    uint64_t maps = s.num_device_map;
    assert_int_equal(vram_pool_alloc(pool, 8 * MiB, NULL, &b), 0);
    assert_int_equal(vram_pool_stats(pool, &s), 0);
    assert_int_equal(s.num_device_map, maps + 1);
    assert_int_equal(reserved_of(pool), 16 * MiB);
    assert_int_equal(pool_sim_used(other), 16 * MiB);
    assert_int_equal(vram_pool_check(pool, err, sizeof err), 0);
    assert_int_equal(vram_pool_free(pool, a), 0);
    assert_int_equal(vram_pool_free(pool, b), 0);
    assert_int_equal(vram_pool_free(pool, c), 0);
    assert_int_equal(vram_pool_trim(pool, &released), 0);
    assert_int_equal(pool_sim_used(other), 0);
    vram_ctx_close(other);
    vram_pool_destroy(pool);
}

/* A request the limit refuses after the extent grew leaves unmapped
 * address space at the end; trim reports the mapped bytes it gave back,
 * not the extent. */
static void expandable_trim_counts_mapped_bytes(void **state)
{
    (void)state;
    vram_pool_t *pool = expandable_pool(64 * MiB);
    void *a, *b;
    assert_int_equal(vram_pool_alloc(pool, 30 * MiB, NULL, &a), 0);
    assert_int_equal(vram_pool_alloc(pool, 40 * MiB, NULL, &b), VRAM_ENOMEM);
    char err[256];
    assert_int_equal(vram_pool_check(pool, err, sizeof err), 0);
    assert_int_equal(vram_pool_free(pool, a), 0);
    uint64_t reserved = reserved_of(pool), released = 0;
    assert_int_equal(reserved, 30 * MiB);
    assert_int_equal(vram_pool_trim(pool, &released), 0);
    assert_int_equal(released, reserved);
    assert_int_equal(reserved_of(pool), 0);
    vram_pool_destroy(pool);
}

/* Offsets in MiB as in expandable_hole_unmapped_by_trim: a (0..4), b
 * (4..12) and c (12..15) map chunks 0..4, 4..12 and 12..16; then b goes
 * free, a hole of 8 MiB with its chunk mapped. */
static void make_hole(vram_pool_t *pool, void **a, void **c)
{
    void *b;
    assert_int_equal(vram_pool_alloc(pool, 4 * MiB, NULL, a), 0);
    assert_int_equal(vram_pool_alloc(pool, 8 * MiB, NULL, &b), 0);
    assert_int_equal(vram_pool_alloc(pool, 3 * MiB, NULL, c), 0);
    assert_int_equal(vram_pool_free(pool, b), 0);
}

/* After make_hole, when no new memory may be had: 9 MiB fit neither the
 * hole nor the wilderness (15..16), so the range grows to 24 and needs
 * 16..24 mapped; the hole's chunk moves there, without the OOM chain. */
static void hole_moves_to_the_end(vram_pool_t *pool, vram_ctx_t *other, void *c, void **d)
{
    uint64_t used = pool_sim_used(other);
    assert_int_equal(vram_pool_alloc(pool, 9 * MiB, NULL, d), 0);
    assert_ptr_equal(*d, (char *)c + 3 * MiB);
    vram_pool_stats_t s;
    assert_int_equal(vram_pool_stats(pool, &s), 0);
    assert_int_equal(s.num_alloc_retries, 0);
    assert_int_equal(s.num_ooms, 0);
    assert_int_equal(s.num_device_move, 1);
    assert_int_equal(s.num_device_unmap, 0);
    assert_int_equal(s.num_device_map, 3);
    assert_int_equal(reserved_of(pool), 16 * MiB);
    assert_int_equal(pool_sim_used(other), used);
    char err[256];
    assert_int_equal(vram_pool_check(pool, err, sizeof err), 0);
}

/* Under the limit, a request that needs granules mapped takes the physical
 * memory of a chunk lying wholly inside a free block elsewhere: the chunk
 * is moved (one call, no memory created or released, the device's use
 * unchanged), without going through the OOM chain. */
static void expandable_limit_moves_free_chunks(void **state)
{
    (void)state;
    vram_pool_t *pool = expandable_pool(20 * MiB);
    vram_ctx_t *other;
    assert_int_equal(vram_ctx_open_backend("sim", &other), 0);
    void *a, *b, *c, *d;
    make_hole(pool, &a, &c);
    hole_moves_to_the_end(pool, other, c, &d); /* 24 MiB mapped would pass the limit */
    vram_pool_stats_t s;
    char err[256];
    /* d goes free; 8 MiB best fit the hole, and the chunk moves back. */
    assert_int_equal(vram_pool_free(pool, d), 0);
    assert_int_equal(vram_pool_alloc(pool, 8 * MiB, NULL, &b), 0);
    assert_ptr_equal(b, (char *)a + 4 * MiB);
    assert_int_equal(vram_pool_stats(pool, &s), 0);
    assert_int_equal(s.num_alloc_retries, 0);
    assert_int_equal(s.num_device_move, 2);
    assert_int_equal(s.num_device_map, 3);
    assert_int_equal(reserved_of(pool), 16 * MiB);
    assert_int_equal(pool_sim_used(other), 16 * MiB);
    assert_int_equal(vram_pool_check(pool, err, sizeof err), 0);
    /* Nothing free is mapped now: a request needing more is refused. */
    assert_int_equal(vram_pool_alloc(pool, 6 * MiB, NULL, &d), VRAM_ENOMEM);
    assert_int_equal(reserved_of(pool), 16 * MiB);
    assert_int_equal(vram_pool_check(pool, err, sizeof err), 0);
    assert_int_equal(vram_pool_free(pool, a), 0);
    assert_int_equal(vram_pool_free(pool, b), 0);
    assert_int_equal(vram_pool_free(pool, c), 0);
    assert_int_equal(vram_pool_trim(pool, NULL), 0);
    assert_int_equal(pool_sim_used(other), 0);
    vram_ctx_close(other);
    vram_pool_destroy(pool);
}

/* With the device full (another process holds the rest), a request that
 * needs granules mapped takes a chunk of a free block by moving it, before
 * the OOM chain: no retry, the device's use unchanged. */
static void expandable_full_device_moves_free_chunks(void **state)
{
    (void)state;
    vram_pool_t *pool = expandable_pool(0);
    vram_ctx_t *other;
    assert_int_equal(vram_ctx_open_backend("sim", &other), 0);
    void *rest, *a, *b, *c, *d;
    make_hole(pool, &a, &c);
    assert_int_equal(vram_device_alloc(other, 0, 1024 * MiB - 16 * MiB, &rest), 0);
    assert_int_equal(pool_sim_used(other), 1024 * MiB);
    hole_moves_to_the_end(pool, other, c, &d); /* the device has nothing left */
    char err[256];
    /* Nothing free is mapped now: the device refuses, so does the pool. */
    assert_int_equal(vram_pool_alloc(pool, 8 * MiB, NULL, &b), VRAM_ENOMEM);
    assert_int_equal(vram_pool_check(pool, err, sizeof err), 0);
    assert_int_equal(vram_pool_free(pool, a), 0);
    assert_int_equal(vram_pool_free(pool, c), 0);
    assert_int_equal(vram_pool_free(pool, d), 0);
    assert_int_equal(vram_pool_trim(pool, NULL), 0);
    assert_int_equal(vram_device_free(other, 0, rest), 0);
    assert_int_equal(pool_sim_used(other), 0);
    vram_ctx_close(other);
    vram_pool_destroy(pool);
}

/* When no free chunk fits the request's unmapped granules, chunks of free
 * blocks are unmapped instead until the limit takes the new map. */
static void expandable_limit_unmaps_when_no_chunk_fits(void **state)
{
    (void)state;
    vram_pool_t *pool = expandable_pool(0);
    void *a, *b, *c, *d;
    /* Chunks 0..2, 2..6, 6..8, 8..12 (MiB); a goes and trim unmaps its
     * chunk, d goes and its chunk (two granules) stays in the wilderness. */
    assert_int_equal(vram_pool_alloc(pool, 2 * MiB, NULL, &a), 0);
    assert_int_equal(vram_pool_alloc(pool, 4 * MiB, NULL, &b), 0);
    assert_int_equal(vram_pool_alloc(pool, 2 * MiB, NULL, &c), 0);
    assert_int_equal(vram_pool_alloc(pool, 4 * MiB, NULL, &d), 0);
    assert_int_equal(vram_pool_free(pool, a), 0);
    assert_int_equal(vram_pool_trim(pool, NULL), 0);
    assert_int_equal(vram_pool_free(pool, d), 0);
    assert_int_equal(reserved_of(pool), 10 * MiB);
    assert_int_equal(vram_pool_set_limit(pool, 11 * MiB), 0);
    /* 2 MiB best fit a's hole, one unmapped granule: 12 MiB would be
     * mapped; the wilderness's chunk is too large to move there, so it is
     * unmapped. */
    void *e;
    assert_int_equal(vram_pool_alloc(pool, 2 * MiB, NULL, &e), 0);
    assert_ptr_equal(e, a);
    vram_pool_stats_t s;
    assert_int_equal(vram_pool_stats(pool, &s), 0);
    assert_int_equal(s.num_alloc_retries, 0);
    assert_int_equal(s.num_device_move, 0);
    assert_int_equal(s.num_device_unmap, 2);
    assert_int_equal(s.num_device_map, 5);
    assert_int_equal(reserved_of(pool), 8 * MiB);
    char err[256];
    assert_int_equal(vram_pool_check(pool, err, sizeof err), 0);
    assert_int_equal(vram_pool_free(pool, b), 0);
    assert_int_equal(vram_pool_free(pool, c), 0);
    assert_int_equal(vram_pool_free(pool, e), 0);
    vram_pool_destroy(pool);
}

/* With expandable segments one range per stream serves requests of every
 * size, and its wilderness (the free block at its end, the only one that
 * can grow) serves a request only when no other free block fits, even a
 * better fitting one by size. Allocation statistics still count small and
 * large requests apart; reserved memory is the range's (large). */
static void expandable_one_range_and_wilderness(void **state)
{
    (void)state;
    vram_pool_t *pool = expandable_pool(0);
    char *a, *s, *b, *c;
    assert_int_equal(vram_pool_alloc(pool, 3 * MiB, NULL, (void **)&a), 0);
    assert_int_equal(reserved_of(pool), 4 * MiB); /* the wilderness: 3..4 MiB */
    assert_int_equal(vram_pool_alloc(pool, MiB / 4, NULL, (void **)&s), 0);
    assert_ptr_equal(s, a + 3 * MiB); /* a small request in the same range */
    assert_int_equal(reserved_of(pool), 4 * MiB);
    vram_pool_stats_t st;
    assert_int_equal(vram_pool_stats(pool, &st), 0);
    assert_int_equal(st.segment[VRAM_POOL_STAT_ALL].current, 1);
    assert_int_equal(st.allocated_bytes[VRAM_POOL_STAT_SMALL].current, MiB / 4);
    assert_int_equal(st.allocated_bytes[VRAM_POOL_STAT_LARGE].current, 3 * MiB);
    assert_int_equal(st.allocation[VRAM_POOL_STAT_SMALL].current, 1);
    assert_int_equal(st.reserved_bytes[VRAM_POOL_STAT_LARGE].current, 4 * MiB);
    assert_int_equal(st.reserved_bytes[VRAM_POOL_STAT_SMALL].current, 0);
    assert_int_equal(st.largest_free_block, 3 * MiB / 4); /* the wilderness counts */

    /* b does not fit the wilderness (0.75 MiB): one granule more, and
     * 0.25 MiB of wilderness is left at 5.75..6 MiB. */
    assert_int_equal(vram_pool_alloc(pool, 5 * MiB / 2, NULL, (void **)&b), 0);
    assert_ptr_equal(b, a + 13 * MiB / 4);
    assert_int_equal(reserved_of(pool), 6 * MiB);
    assert_int_equal(vram_pool_free(pool, a), 0); /* a hole of 3 MiB at the start */
    /* By size the wilderness fits c best; the hole serves it. */
    assert_int_equal(vram_pool_alloc(pool, MiB / 8, NULL, (void **)&c), 0);
    assert_ptr_equal(c, a);
    char err[256];
    assert_int_equal(vram_pool_check(pool, err, sizeof err), 0);
    assert_int_equal(vram_pool_stats(pool, &st), 0);
    assert_int_equal(st.largest_free_block, 3 * MiB - MiB / 8);
    assert_int_equal(st.allocated_bytes[VRAM_POOL_STAT_SMALL].current, MiB / 4 + MiB / 8);
    assert_int_equal(st.num_device_map, 2);

    assert_int_equal(vram_pool_free(pool, s), 0);
    assert_int_equal(vram_pool_free(pool, b), 0);
    assert_int_equal(vram_pool_free(pool, c), 0);
    assert_int_equal(vram_pool_check(pool, err, sizeof err), 0);
    assert_int_equal(vram_pool_stats(pool, &st), 0);
    assert_int_equal(st.largest_free_block, 6 * MiB); /* all of it: the wilderness */
    assert_int_equal(st.allocated_bytes[VRAM_POOL_STAT_SMALL].current, 0);
    /* A wholly free range is served again without a device call. */
    assert_int_equal(vram_pool_alloc(pool, 6 * MiB, NULL, (void **)&a), 0);
    assert_int_equal(vram_pool_free(pool, a), 0);
    uint64_t released = 0;
    assert_int_equal(vram_pool_trim(pool, &released), 0);
    assert_int_equal(released, 6 * MiB);
    assert_int_equal(vram_pool_stats(pool, &st), 0);
    assert_int_equal(st.num_device_map, 2);
    assert_int_equal(vram_pool_check(pool, err, sizeof err), 0);
    vram_pool_destroy(pool);
}

/* Off, or on a backend without virtual memory (cpu): segments as before. */
static void expandable_off_and_unsupported(void **state)
{
    (void)state;
    vram_pool_config_t cfg = {.strategy = VRAM_POOL_BALANCED,
                              .expandable = VRAM_POOL_EXPANDABLE_OFF};
    vram_pool_t *pool;
    void *a;
    assert_int_equal(vram_pool_create(sim.ctx, 0, &cfg, &pool), 0);
    assert_int_equal(vram_pool_alloc(pool, 3 * MiB, NULL, &a), 0);
    assert_int_equal(reserved_of(pool), 18 * MiB); /* six copies of 3 MiB */
    assert_int_equal(vram_pool_free(pool, a), 0);
    vram_pool_destroy(pool);

    vram_ctx_t *cpu;
    assert_int_equal(vram_ctx_open_backend("cpu", &cpu), 0);
    cfg.expandable = VRAM_POOL_EXPANDABLE_ON;
    assert_int_equal(vram_pool_create(cpu, 0, &cfg, &pool), 0);
    assert_int_equal(vram_pool_alloc(pool, 3 * MiB, NULL, &a), 0);
    vram_pool_stats_t s;
    assert_int_equal(vram_pool_stats(pool, &s), 0);
    assert_int_equal(s.num_device_alloc, 1);
    assert_int_equal(s.num_device_map, 0);
    assert_int_equal(vram_pool_free(pool, a), 0);
    vram_pool_destroy(pool);
    vram_ctx_close(cpu);

    assert_int_equal(vram_option_set(VRAM_OPT_POOL_EXPANDABLE, "false"), 0);
    vram_pool_config_t from_options;
    assert_int_equal(vram_pool_config_from_options(&from_options), 0);
    assert_int_equal(from_options.expandable, VRAM_POOL_EXPANDABLE_OFF);
    assert_int_equal(vram_option_set(VRAM_OPT_POOL_EXPANDABLE, "maybe"), 0);
    assert_int_equal(vram_pool_config_from_options(&from_options), VRAM_EINVAL);
    assert_non_null(strstr(vram_last_error(), "VRAM_POOL_EXPANDABLE"));
    assert_int_equal(vram_option_set(VRAM_OPT_POOL_EXPANDABLE, "auto"), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(chain_order),
        cmocka_unit_test(oom_message),
        cmocka_unit_test(limit_enforced),
        cmocka_unit_test(limit_from_fraction_and_options),
        cmocka_unit_test(trim_returns_memory_to_the_device),
        cmocka_unit_test(expandable_hole_unmapped_by_trim),
        cmocka_unit_test(expandable_trim_counts_mapped_bytes),
        cmocka_unit_test(expandable_limit_moves_free_chunks),
        cmocka_unit_test(expandable_limit_unmaps_when_no_chunk_fits),
        cmocka_unit_test(expandable_full_device_moves_free_chunks),
        cmocka_unit_test(expandable_segments),
        cmocka_unit_test(expandable_one_range_and_wilderness),
        cmocka_unit_test(expandable_off_and_unsupported),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
