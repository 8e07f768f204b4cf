/* Randomized test of the pool against a reference model, per strategy:
 * 1,000,000 operations each on a simulated GPU. Every
 * operation is checked against the model cheaply (alignment, no pointer
 * handed out twice, counts and requested bytes); every CHECK_EVERY operations
 * the whole pool is checked: live blocks never overlap, lie inside segments,
 * keep their sizes and streams, the pool's own invariants hold (tiling,
 * coalescing, tree, map), and every statistic equals what the model or the
 * blocks say, and the device holds exactly the reserved bytes. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "core/map.h"
#include "pool/pool_internal.h"
#include "unit/pool_sim.h"

#define OPS_PER_STRATEGY 1000000
#define CHECK_EVERY      2500
#define MAX_LIVE         1500

typedef struct {
    void *ptr;
    size_t size;
    uintptr_t stream;
} live_t;

typedef struct {
    live_t live[MAX_LIVE];
    size_t count;
    vram_map_t index; /* ptr -> live slot */
    int64_t requested, requested_peak, requested_in, requested_out;
    int64_t allocs_peak, allocs_in, allocs_out;
} model_t;

static uint64_t rng_state;

static uint64_t rnd(void)
{
    /* xorshift64* */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 2685821657736338717ull;
}

static double rnd_unit(void)
{
    return (double)(rnd() >> 11) / 9007199254740992.0;
}

/* Log-uniform in [lo, hi]. */
static size_t rnd_log(double lo, double hi)
{
    return (size_t)exp(log(lo) + rnd_unit() * (log(hi) - log(lo)));
}

static size_t random_size(void)
{
    static const size_t repeated[] = {512,     4096,    65536,    1 << 20,
                                      3 << 20, 9437184, 12845056, 51380224};
    double u = rnd_unit();
    if (u < 0.15) return repeated[rnd() % (sizeof repeated / sizeof repeated[0])];
    if (u < 0.65) return rnd_log(1, 1 << 20);
    return rnd_log(1 << 20, 64 << 20);
}

static void model_add(model_t *m, void *ptr, size_t size, uintptr_t stream)
{
    assert_true(m->count < MAX_LIVE);
    m->live[m->count] = (live_t){ptr, size, stream};
    assert_true(vram_map_put(&m->index, (uintptr_t)ptr, m->count));
    m->count++;
    m->requested += (int64_t)size;
    m->requested_in += (int64_t)size;
    if (m->requested > m->requested_peak) m->requested_peak = m->requested;
    m->allocs_in++;
    if ((int64_t)m->count > m->allocs_peak) m->allocs_peak = (int64_t)m->count;
}

static live_t model_remove(model_t *m, size_t i)
{
    live_t gone = m->live[i];
    assert_true(vram_map_take(&m->index, (uintptr_t)gone.ptr, NULL));
    m->count--;
    if (i != m->count) {
        m->live[i] = m->live[m->count];
        assert_true(vram_map_put(&m->index, (uintptr_t)m->live[i].ptr, i));
    }
    m->requested -= (int64_t)gone.size;
    m->requested_out += (int64_t)gone.size;
    m->allocs_out++;
    return gone;
}

/* ---- full check ------------------------------------------------------ */

typedef struct {
    uintptr_t addr;
    size_t size, requested;
    uintptr_t seg_base;
    size_t seg_size;
    uintptr_t stream;
} seen_block_t;

typedef struct {
    seen_block_t *blocks;
    size_t count, cap;
    int64_t reserved, segments;
    uintptr_t last_seg;
} walk_t;

static void collect(const vram_pool_segment_t *seg, const vram_pool_block_t *b, void *user)
{
    walk_t *w = user;
    if (seg->base != w->last_seg && !b->prev) {
        /* An expandable segment holds what is mapped of its extent. */
        w->reserved += (int64_t)(seg->reservation ? seg->reservation->mapped_bytes : seg->size);
        w->segments++;
        w->last_seg = seg->base;
    }
    if (!b->allocated) return;
    if (w->count == w->cap) {
        w->cap = w->cap ? w->cap * 2 : 1024;
        w->blocks = realloc(w->blocks, w->cap * sizeof *w->blocks);
        assert_non_null(w->blocks);
    }
    w->blocks[w->count++] =
        (seen_block_t){b->addr, b->size, b->u.live.requested, seg->base, seg->size, seg->stream};
}

static int by_addr(const void *a, const void *b)
{
    uintptr_t x = ((const seen_block_t *)a)->addr, y = ((const seen_block_t *)b)->addr;
    return x < y ? -1 : x > y;
}

static void check_stat_eq(const char *name, const vram_pool_stat_t *s, int64_t cur, int64_t peak,
                          int64_t in, int64_t out)
{
    if (s->current != cur || s->peak != peak || s->allocated != in || s->freed != out)
        fail_msg("%s: pool {cur %lld peak %lld in %lld out %lld}, model {%lld %lld %lld %lld}",
                 name, (long long)s->current, (long long)s->peak, (long long)s->allocated,
                 (long long)s->freed, (long long)cur, (long long)peak, (long long)in,
                 (long long)out);
}

static void full_check(vram_pool_t *pool, vram_ctx_t *ctx, model_t *m)
{
    char err[256];
    if (vram_pool_check(pool, err, sizeof err)) fail_msg("pool invariant broken: %s", err);
    walk_t w = {0};
    vram_pool_walk(pool, collect, &w);
    assert_int_equal(w.count, m->count);
    if (w.count) qsort(w.blocks, w.count, sizeof *w.blocks, by_addr);
    for (size_t i = 0; i < w.count; i++) {
        const seen_block_t *b = &w.blocks[i];
        uint64_t slot;
        if (!vram_map_get(&m->index, b->addr, &slot))
            fail_msg("pool holds block 0x%zx the model does not", (size_t)b->addr);
        const live_t *l = &m->live[slot];
        assert_int_equal(b->requested, l->size); /* keeps its size */
        assert_true(b->size >= l->size);         /* room for what was asked */
        assert_int_equal(b->stream, l->stream);  /* on its stream */
        assert_true(b->addr >= b->seg_base);     /* inside its segment */
        assert_true(b->addr + b->size <= b->seg_base + b->seg_size);
        if (i + 1 < w.count && b->addr + b->size > w.blocks[i + 1].addr)
            fail_msg("blocks 0x%zx (+%zu) and 0x%zx overlap", (size_t)b->addr, b->size,
                     (size_t)w.blocks[i + 1].addr);
    }
    vram_pool_stats_t s;
    assert_int_equal(vram_pool_stats(pool, &s), 0);
    check_stat_eq("allocation", &s.allocation[VRAM_POOL_STAT_ALL], (int64_t)m->count,
                  m->allocs_peak, m->allocs_in, m->allocs_out);
    check_stat_eq("requested_bytes", &s.requested_bytes[VRAM_POOL_STAT_ALL], m->requested,
                  m->requested_peak, m->requested_in, m->requested_out);
    assert_int_equal(s.reserved_bytes[VRAM_POOL_STAT_ALL].current, w.reserved);
    assert_int_equal(s.segment[VRAM_POOL_STAT_ALL].current, w.segments);
    int64_t expandable = 0;
    for (const vram_pool_segment_t *seg = pool->segments; seg; seg = seg->next)
        expandable += seg->reservation != NULL;
    assert_int_equal((int64_t)(s.num_device_alloc - s.num_device_free) + expandable, w.segments);
    assert_true(s.num_device_map >= s.num_device_unmap);
    assert_int_equal(pool_sim_used(ctx), (uint64_t)w.reserved); /* the device agrees */
    int64_t cached = w.reserved - s.allocated_bytes[VRAM_POOL_STAT_ALL].current;
    assert_true(cached >= 0);
    assert_true(s.largest_free_block <= (uint64_t)cached);
    assert_true(s.fragmentation >= 0.0 && s.fragmentation <= 1.0);
    free(w.blocks);
}

/* After a trim no mapped chunk lies wholly inside a free block of an
 * expandable segment (holes included): they all went back. */
static void no_chunk_in_free_block(const vram_pool_segment_t *seg, const vram_pool_block_t *b,
                                   void *user)
{
    const vram_pool_t *pool = user;
    const vram_pool_reservation_t *r = seg->reservation;
    if (b->allocated || !r) return;
    size_t g = pool->granularity;
    size_t first = (b->addr - r->base + g - 1) / g, end = (b->addr + b->size - r->base) / g;
    for (size_t i = first; i < end; i++)
        if (r->chunk[i] && i + r->chunk[i] <= end)
            fail_msg("chunk at granule %zu lies in free block 0x%zx after trim", i,
                     (size_t)b->addr);
}

static void run_strategy(vram_pool_strategy_t strategy, vram_pool_expandable_t expandable,
                         uint64_t seed)
{
    pool_sim_t sim;
    assert_int_equal(pool_sim_open(&sim, "1xrandom:64GiB"), 0);
    vram_pool_config_t cfg = {.strategy = strategy, .expandable = expandable};
    vram_pool_t *pool;
    assert_int_equal(vram_pool_create(sim.ctx, 0, &cfg, &pool), 0);
    model_t *m = calloc(1, sizeof *m);
    assert_non_null(m);
    rng_state = seed;
    print_message("strategy %s, %s, seed %llu\n", vram_pool_strategy_name(strategy),
                  expandable == VRAM_POOL_EXPANDABLE_ON ? "expandable segments" : "segments",
                  (unsigned long long)seed);
    int ops = expandable == VRAM_POOL_EXPANDABLE_ON ? OPS_PER_STRATEGY / 2 : OPS_PER_STRATEGY;
    static const uintptr_t streams[] = {0, 0x1000, 0x2000};
    double grow_bias = 0.6;
    bool limited = false;
    uint64_t reclaims = 0;
    for (int op = 1; op <= ops; op++) {
        /* Phases of growth and shrinkage empty whole segments now and then. */
        if (op % 20000 == 0) grow_bias = grow_bias > 0.5 ? 0.35 : 0.6;
        bool do_alloc = m->count == 0 || (m->count < MAX_LIVE && rnd_unit() < grow_bias);
        if (do_alloc) {
            size_t size = random_size();
            uintptr_t stream = streams[rnd() % 3];
            void *ptr = NULL;
            uint64_t unmaps = pool->stats.num_device_unmap, retries = pool->stats.num_alloc_retries;
            uint64_t moves = pool->stats.num_device_move;
            int rc = vram_pool_alloc(pool, size, (void *)stream, &ptr);
            if (rc == VRAM_ENOMEM && limited) continue; /* refused by the limit: nothing changed */
            if (rc) fail_msg("alloc of %zu failed: %s", size, vram_last_error());
            if (limited) {
                assert_true(pool->stats.reserved_bytes[VRAM_POOL_STAT_ALL].current <=
                            (int64_t)pool->limit);
                /* Chunks moved, or unmapped without the OOM chain: taken for
                 * this request (reclaim.c). */
                reclaims += (pool->stats.num_device_move > moves ||
                             pool->stats.num_device_unmap > unmaps) &&
                            pool->stats.num_alloc_retries == retries;
            }
            assert_non_null(ptr);
            assert_int_equal((uintptr_t)ptr % VRAM_POOL_ALIGN, 0);
            if (vram_map_get(&m->index, (uintptr_t)ptr, NULL))
                fail_msg("pointer %p handed out twice", ptr);
            model_add(m, ptr, size, stream);
        } else {
            live_t gone = model_remove(m, rnd() % m->count);
            assert_int_equal(vram_pool_free(pool, gone.ptr), 0);
        }
        if (op % 97 == 0) {
            vram_pool_stats_t s;
            assert_int_equal(vram_pool_stats(pool, &s), 0);
            assert_int_equal(s.allocation[VRAM_POOL_STAT_ALL].current, (int64_t)m->count);
            assert_int_equal(s.requested_bytes[VRAM_POOL_STAT_ALL].current, m->requested);
        }
        /* Expandable segments trim more often: a trim unmaps the chunks of
         * holes, and the requests that land there map them again. */
        if (op % (expandable == VRAM_POOL_EXPANDABLE_ON ? 5000 : 50000) == 0) {
            uint64_t released = 0;
            assert_int_equal(vram_pool_trim(pool, &released), 0);
            if (expandable == VRAM_POOL_EXPANDABLE_ON)
                vram_pool_walk(pool, no_chunk_in_free_block, pool);
            vram_pool_stats_t s;
            assert_int_equal(vram_pool_stats(pool, &s), 0);
            assert_int_equal(pool->idle_segment_bytes, 0); /* nothing wholly free is kept */
        }
        /* Expandable segments: half of the time between trims under a limit
         * of what is reserved then, so that growing must take the physical
         * memory of chunks in free blocks (reclaim.c) or be refused. */
        if (expandable == VRAM_POOL_EXPANDABLE_ON && op % 2500 == 0) {
            limited = op % 5000 != 0;
            vram_pool_stats_t s;
            assert_int_equal(vram_pool_stats(pool, &s), 0);
            uint64_t reserved = (uint64_t)s.reserved_bytes[VRAM_POOL_STAT_ALL].current;
            /* (+ 1: a limit of 0 is none) */
            assert_int_equal(vram_pool_set_limit(pool, limited ? reserved + 1 : 0), 0);
        }
        if (op % 30011 == 0) {
            vram_pool_reset_peaks(pool);
            m->requested_peak = m->requested;
            m->allocs_peak = (int64_t)m->count;
        }
        if (op % CHECK_EVERY == 0) full_check(pool, sim.ctx, m);
    }
    while (m->count)
        assert_int_equal(vram_pool_free(pool, model_remove(m, 0).ptr), 0);
    full_check(pool, sim.ctx, m);
    assert_int_equal(vram_pool_trim(pool, NULL), 0);
    vram_pool_stats_t s;
    assert_int_equal(vram_pool_stats(pool, &s), 0);
    assert_int_equal(s.reserved_bytes[VRAM_POOL_STAT_ALL].current, 0);
    assert_int_equal(s.num_device_alloc, s.num_device_free);
    assert_int_equal(s.num_device_map, s.num_device_unmap);
    if (expandable == VRAM_POOL_EXPANDABLE_ON) {
        assert_true(s.num_device_map > 0);
        print_message("%llu allocations under the limit took chunks of free blocks (%llu moved)\n",
                      (unsigned long long)reclaims, (unsigned long long)s.num_device_move);
        assert_true(reclaims > 0 && s.num_device_move > 0);
    } else
        assert_int_equal(s.num_device_map, 0);
    assert_int_equal(s.num_invalid_frees, 0);
    assert_int_equal(pool_sim_used(sim.ctx), 0);
    vram_pool_destroy(pool);
    vram_map_clear(&m->index);
    free(m);
    pool_sim_close(&sim);
}

static uint64_t seed_for(int strategy)
{
    const char *env = getenv("VRAM_TEST_SEED");
    uint64_t base = env && *env ? strtoull(env, NULL, 10) : 20261122;
    return base * 1000 + (uint64_t)strategy + 1;
}

/* One test per strategy and segment mode: the cmocka name says which. */
#define STRATEGY_TESTS(X)                                                                          \
    X(greedy, VRAM_POOL_GREEDY)                                                                    \
    X(balanced, VRAM_POOL_BALANCED)                                                                \
    X(consolidated, VRAM_POOL_CONSOLIDATED)                                                        \
    X(fragmentation_aware, VRAM_POOL_FRAGMENTATION_AWARE)

#define DEFINE_TESTS(name, strategy)                                                               \
    static void name(void **state)                                                                 \
    {                                                                                              \
        (void)state;                                                                               \
        run_strategy(strategy, VRAM_POOL_EXPANDABLE_OFF, seed_for(strategy));                      \
    }                                                                                              \
    static void name##_expandable(void **state)                                                    \
    {                                                                                              \
        (void)state;                                                                               \
        run_strategy(strategy, VRAM_POOL_EXPANDABLE_ON, seed_for(strategy) + 100);                 \
    }
STRATEGY_TESTS(DEFINE_TESTS)

#define LIST_TESTS(name, strategy) cmocka_unit_test(name), cmocka_unit_test(name##_expandable),

int main(void)
{
    const struct CMUnitTest tests[] = {STRATEGY_TESTS(LIST_TESTS)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
