/* Corners of the pool's compact metadata (docs/pool.md, "Block metadata is
 * one cache line") that a simulated GPU never reaches: full buckets whose
 * blocks overflow into the map, at addresses 2 TiB apart (equal in their low
 * 32 bits of 512-byte units); blocks of 2 TiB and more (they share the free index's last bin);
 * and many blocks (ids past the first 2 MiB chunk of the block array, buckets
 * that split while free blocks sit in them). Segments come from a synthetic
 * address space whose layout each test chooses; the pool never touches
 * device memory. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "pool/pool_internal.h"

#define TiB ((uint64_t)1 << 40)
#define MiB ((size_t)1 << 20)

/* Hands out segments at base, base + stride, base + 2 * stride, ... or, with
 * a list, the listed addresses in order. */
typedef struct {
    uintptr_t next;
    uintptr_t stride; /* 0: packed, 2 MiB aligned */
    size_t allocs, frees;
    const uintptr_t *list;
} space_t;

static int space_alloc(void *user, size_t size, void **ptr)
{
    space_t *s = user;
    if (s->list) {
        *ptr = (void *)s->list[s->allocs++];
        return 0;
    }
    *ptr = (void *)s->next;
    s->next += s->stride ? s->stride : (size + (2 * MiB - 1)) & ~(2 * MiB - 1);
    s->allocs++;
    return 0;
}

static int space_free(void *user, void *ptr)
{
    (void)ptr;
    ((space_t *)user)->frees++;
    return 0;
}

static int space_memory(void *user, uint64_t *total, uint64_t *free_bytes)
{
    (void)user;
    *total = *free_bytes = (uint64_t)1 << 46;
    return 0;
}

static vram_pool_t *open_pool(space_t *space, vram_pool_strategy_t strategy)
{
    vram_pool_source_t src = {
        .alloc = space_alloc, .free = space_free, .memory = space_memory, .user = space};
    vram_pool_config_t cfg = {.strategy = strategy};
    vram_pool_t *pool = NULL;
    assert_int_equal(vram_pool_create_on(&src, &cfg, &pool), 0);
    return pool;
}

static void assert_intact(vram_pool_t *pool)
{
    char err[256];
    if (vram_pool_check(pool, err, sizeof err)) fail_msg("pool broken: %s", err);
}

static uint64_t rng = 0x9E3779B97F4A7C15ull;

static uint64_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* Frees p[0..n) in random order, each freed twice (the second must fail
 * and leave the others alone), checking the pool every `check_every`. */
static void free_in_random_order(vram_pool_t *pool, void **p, int n, int check_every)
{
    for (int i = n - 1; i > 0; i--) {
        int j = (int)(rnd() % (uint64_t)(i + 1));
        void *t = p[i];
        p[i] = p[j];
        p[j] = t;
    }
    for (int i = 0; i < n; i++) {
        assert_int_equal(vram_pool_free(pool, p[i]), 0);
        assert_int_equal(vram_pool_free(pool, p[i]), VRAM_EINVAL);
        if (i % check_every == 0) assert_intact(pool);
    }
}

/* Every segment starts 2 TiB after the previous one, so the first blocks of
 * all segments agree in the low 32 bits of their 512-byte units (what a
 * truncating hash would see): each free must find exactly its own block. */
static void colliding_tags(void **state)
{
    (void)state;
    space_t space = {.next = (uintptr_t)1 << 42, .stride = (uintptr_t)2 * TiB};
    vram_pool_t *pool = open_pool(&space, VRAM_POOL_GREEDY);
    enum { N = 300 };
    void *p[N];
    for (int i = 0; i < N; i++) {
        /* 65 MiB: above GREEDY's 64 MiB segments, so one segment each */
        assert_int_equal(vram_pool_alloc(pool, 65 * MiB, NULL, &p[i]), 0);
        assert_int_equal((uintptr_t)p[i], ((uintptr_t)1 << 42) + (uintptr_t)i * 2 * TiB);
    }
    assert_intact(pool);
    /* A pointer of the same kind that the pool never handed out. */
    void *foreign = (void *)(((uintptr_t)1 << 42) + (uintptr_t)N * 2 * TiB);
    assert_int_equal(vram_pool_free(pool, foreign), VRAM_EINVAL);
    /* Free in random order; each must find exactly its own block. */
    free_in_random_order(pool, p, N, 37);
    vram_pool_stats_t s;
    assert_int_equal(vram_pool_stats(pool, &s), 0);
    assert_int_equal(s.allocation[VRAM_POOL_STAT_ALL].current, 0);
    assert_int_equal(s.num_invalid_frees, N + 1);
    assert_intact(pool);
    vram_pool_destroy(pool);
}

/* Ten segments whose addresses, 2 TiB apart, all hash to the pool's first
 * bucket (two slots): eight blocks overflow into the map, lookups must tell
 * them apart by address, and deleting from the map must keep the others. */
static void full_bucket(void **state)
{
    (void)state;
    enum { N = 10 };
    uintptr_t addrs[N + 1];
    space_t probe = {0};
    vram_pool_t *pool = open_pool(&probe, VRAM_POOL_GREEDY);
    vram_pool_block_t *bucket0 = vram_blocks_bucket(&pool->blocks, 0);
    int found = 0;
    for (uintptr_t k = 1; found <= N; k++) {
        uintptr_t a = ((uintptr_t)1 << 42) + k * 2 * TiB;
        if (vram_blocks_bucket(&pool->blocks, a) == bucket0) addrs[found++] = a;
    }
    vram_pool_destroy(pool);
    space_t space = {.list = addrs};
    pool = open_pool(&space, VRAM_POOL_GREEDY);
    void *p[N];
    for (int i = 0; i < N; i++) {
        assert_int_equal(vram_pool_alloc(pool, 65 * MiB, NULL, &p[i]), 0);
        assert_int_equal((uintptr_t)p[i], addrs[i]);
    }
    /* No bucket split (the test's premise): 32 buckets. */
    assert_int_equal(vram_blocks_bucket_count(&pool->blocks), 32);
    assert_int_equal(pool->overflow.count, N - 2);
    assert_intact(pool);
    /* Same bucket, 2 TiB further, never handed out. */
    assert_int_equal(vram_pool_free(pool, (void *)addrs[N]), VRAM_EINVAL);
    free_in_random_order(pool, p, N, 1);
    /* The freed blocks stay cached where they are; allocating them again
     * finds them, whichever of bucket and slab they sit in. */
    for (int i = 0; i < N; i++)
        assert_int_equal(vram_pool_alloc(pool, 65 * MiB, NULL, &p[i]), 0);
    assert_int_equal(space.allocs, N);
    assert_intact(pool);
    for (int i = 0; i < N; i++)
        assert_int_equal(vram_pool_free(pool, p[i]), 0);
    assert_intact(pool);
    vram_pool_destroy(pool);
}

/* Blocks of 2 TiB and more share the free index's last bin; best fit must
 * still pick the smallest that fits. */
static void huge_blocks_share_the_last_bin(void **state)
{
    (void)state;
    space_t space = {.next = (uintptr_t)1 << 44};
    vram_pool_t *pool = open_pool(&space, VRAM_POOL_GREEDY);
    const size_t sizes[] = {(size_t)5 * TiB, (size_t)3 * TiB, (size_t)4 * TiB,
                            (size_t)2 * TiB + 64 * MiB};
    void *p[4];
    for (int i = 0; i < 4; i++)
        assert_int_equal(vram_pool_alloc(pool, sizes[i], NULL, &p[i]), 0);
    for (int i = 0; i < 4; i++)
        assert_int_equal(vram_pool_free(pool, p[i]), 0);
    assert_intact(pool);
    size_t before = space.allocs;
    void *q;
    /* 3.5 TiB: the 4 TiB block is the best fit (not 5, not 3). */
    assert_int_equal(vram_pool_alloc(pool, (size_t)7 * TiB / 2, NULL, &q), 0);
    assert_ptr_equal(q, p[2]);
    void *r;
    /* 2 TiB: the 2 TiB + 64 MiB block. */
    assert_int_equal(vram_pool_alloc(pool, (size_t)2 * TiB, NULL, &r), 0);
    assert_ptr_equal(r, p[3]);
    assert_int_equal(space.allocs, before); /* all from the cache */
    assert_intact(pool);
    assert_int_equal(vram_pool_free(pool, q), 0);
    assert_int_equal(vram_pool_free(pool, r), 0);
    /* A mid-size request searches the bins above its own: the huge blocks
     * must be there (the last bin), so the smallest of them serves it. */
    void *m;
    assert_int_equal(vram_pool_alloc(pool, 3 * MiB, NULL, &m), 0);
    assert_ptr_equal(m, p[3]);
    assert_int_equal(space.allocs, before);
    assert_int_equal(vram_pool_free(pool, m), 0);
    assert_intact(pool);
    vram_pool_destroy(pool);
}

/* More blocks than the first 2 MiB chunk of the block array holds (32,768),
 * split and merged at random, then all freed: ids in later chunks link and
 * recycle like the first ones, and everything merges back. While they are
 * made, blocks are freed and made again now and then, so buckets split
 * (tens of thousands of times) with free blocks in them and in the bins,
 * which hold their ids: every block must move with its links, bins and
 * segment. */
static void many_blocks(void **state)
{
    (void)state;
    space_t space = {.next = (uintptr_t)1 << 44};
    vram_pool_t *pool = open_pool(&space, VRAM_POOL_BALANCED);
    enum { N = 50000 };
    void **p = calloc(N, sizeof *p);
    assert_non_null(p);
    size_t buckets = vram_blocks_bucket_count(&pool->blocks), splits = 0;
    for (int i = 0; i < N; i++) {
        assert_int_equal(vram_pool_alloc(pool, 512 * (1 + rnd() % 64), NULL, &p[i]), 0);
        if (i > 10 && rnd() % 3 == 0) {
            int j = (int)(rnd() % (uint64_t)i);
            assert_int_equal(vram_pool_free(pool, p[j]), 0);
            assert_int_equal(vram_pool_alloc(pool, 512 * (1 + rnd() % 64), NULL, &p[j]), 0);
        }
        if (vram_blocks_bucket_count(&pool->blocks) != buckets) {
            buckets = vram_blocks_bucket_count(&pool->blocks);
            if (++splits % 1000 == 0) assert_intact(pool);
        }
    }
    assert_true(splits >= 30000);
    assert_intact(pool);
    for (int k = 0; k < 4 * N; k++) {
        int i = (int)(rnd() % N);
        assert_int_equal(vram_pool_free(pool, p[i]), 0);
        assert_int_equal(vram_pool_alloc(pool, 512 * (1 + rnd() % 64), NULL, &p[i]), 0);
    }
    assert_intact(pool);
    for (int i = 0; i < N; i++)
        assert_int_equal(vram_pool_free(pool, p[i]), 0);
    assert_intact(pool);
    vram_pool_stats_t s;
    assert_int_equal(vram_pool_stats(pool, &s), 0);
    assert_int_equal(s.allocation[VRAM_POOL_STAT_ALL].current, 0);
    assert_int_equal(s.inactive_split[VRAM_POOL_STAT_ALL].current, 0); /* all merged */
    uint64_t released = 0;
    assert_int_equal(vram_pool_trim(pool, &released), 0);
    assert_int_equal(space.frees, space.allocs);
    assert_intact(pool);
    free(p);
    vram_pool_destroy(pool);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(colliding_tags),
        cmocka_unit_test(full_bucket),
        cmocka_unit_test(huge_blocks_share_the_last_bin),
        cmocka_unit_test(many_blocks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
