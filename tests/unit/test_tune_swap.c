/* The swap cache's LRU bookkeeping against a reference model written the
 * plain way (timestamps and linear scans), op by op: tiers of every key,
 * the moves in order, the counters, and budgets at every step of the moves. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "vram.h"

#define KEYS 40

typedef struct {
    uint64_t size[KEYS + 1];
    vram_swap_tier_t tier[KEYS + 1];
    uint64_t used[KEYS + 1]; /* last use; 0 = absent */
    uint64_t clock, gpu_budget, host_budget;
    vram_swap_move_t moves[4 * KEYS];
    size_t nmoves;
    vram_swap_stats_t st;
} model_t;

static uint64_t bytes_in(const model_t *m, vram_swap_tier_t t)
{
    uint64_t b = 0;
    for (int k = 1; k <= KEYS; k++)
        if (m->used[k] && m->tier[k] == t) b += m->size[k];
    return b;
}

static int lru(const model_t *m, vram_swap_tier_t t, int except)
{
    int best = 0;
    for (int k = 1; k <= KEYS; k++)
        if (m->used[k] && m->tier[k] == t && k != except && (!best || m->used[k] < m->used[best]))
            best = k;
    return best;
}

static void model_move(model_t *m, int k, vram_swap_tier_t to)
{
    m->moves[m->nmoves++] = (vram_swap_move_t){(uint64_t)k, m->size[k], m->tier[k], to};
    if (to == VRAM_SWAP_NONE) m->used[k] = 0;
    m->tier[k] = to;
}

static bool host_fits(const model_t *m, uint64_t more)
{
    return !m->host_budget || bytes_in(m, VRAM_SWAP_HOST) + more <= m->host_budget;
}

static bool model_host_room(model_t *m, uint64_t size, int keep)
{
    int v;
    while (!host_fits(m, size) && (v = lru(m, VRAM_SWAP_HOST, keep))) {
        model_move(m, v, VRAM_SWAP_NONE);
        m->st.evictions_host++;
    }
    return host_fits(m, size);
}

static int model_get(model_t *m, int k, uint64_t size, vram_swap_tier_t *found)
{
    m->nmoves = 0;
    bool present = m->used[k] != 0;
    if (present) size = m->size[k];
    bool to_gpu = size <= m->gpu_budget;
    if (!present && !to_gpu && m->host_budget && size > m->host_budget) return VRAM_ENOMEM;
    vram_swap_tier_t was = present ? m->tier[k] : VRAM_SWAP_NONE;
    *found = was;
    if (was == VRAM_SWAP_GPU)
        m->st.hits_gpu++;
    else if (was == VRAM_SWAP_HOST)
        m->st.hits_host++;
    else
        m->st.misses++;
    if (!present) m->size[k] = size, m->tier[k] = VRAM_SWAP_NONE;
    vram_swap_tier_t dest = to_gpu ? VRAM_SWAP_GPU : VRAM_SWAP_HOST;
    if (dest != was) {
        if (dest == VRAM_SWAP_GPU) {
            while (bytes_in(m, VRAM_SWAP_GPU) + size > m->gpu_budget) {
                int v = lru(m, VRAM_SWAP_GPU, k);
                m->st.evictions_gpu++;
                uint64_t held = present && was == VRAM_SWAP_HOST ? size : 0;
                if (m->host_budget && m->size[v] + held > m->host_budget) {
                    model_move(m, v, VRAM_SWAP_NONE);
                    continue;
                }
                model_host_room(m, m->size[v], k);
                model_move(m, v, VRAM_SWAP_HOST);
                m->st.bytes_to_host += m->size[v];
                m->used[v] = ++m->clock; /* most recent on the host */
            }
        } else {
            model_host_room(m, size, k);
        }
        model_move(m, k, dest);
        if (was == VRAM_SWAP_HOST)
            m->st.bytes_to_gpu += size;
        else
            m->st.bytes_loaded += size;
    }
    m->used[k] = ++m->clock;
    return 0;
}

static void against_model(void **state)
{
    (void)state;
    uint64_t rng = 7;
    for (int run = 0; run < 60; run++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        model_t m = {.gpu_budget = 1000 + (rng >> 40) % 4000,
                     .host_budget = run % 3 == 0 ? 0 : 2000 + (rng >> 20) % 8000};
        vram_swap_t *sc;
        assert_int_equal(vram_swap_create(m.gpu_budget, m.host_budget, &sc), 0);
        for (int k = 1; k <= KEYS; k++)
            m.size[k] = 1 + (uint64_t)((k * 2654435761u + run) % 1500);
        for (int op = 0; op < 4000; op++) {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            int k = 1 + (int)((rng >> 33) % KEYS);
            if ((rng >> 20) % 23 == 0 && m.used[k]) {
                assert_int_equal(vram_swap_remove(sc, (uint64_t)k), 0);
                m.used[k] = 0;
                continue;
            }
            vram_swap_tier_t want_found, found, now;
            size_t n;
            int want = model_get(&m, k, m.size[k], &want_found);
            int rc = vram_swap_get(sc, (uint64_t)k, m.size[k], &found, &now, &n);
            assert_int_equal(rc, want);
            if (rc) continue;
            assert_int_equal(found, want_found);
            assert_int_equal(now, m.tier[k]);
            assert_int_equal(n, m.nmoves);
            for (size_t j = 0; j < n; j++) {
                vram_swap_move_t mv;
                assert_int_equal(vram_swap_move(sc, j, &mv), 0);
                assert_memory_equal(&mv, &m.moves[j], sizeof mv);
            }
            for (int j = 1; j <= KEYS; j++)
                assert_int_equal(vram_swap_where(sc, (uint64_t)j),
                                 m.used[j] ? m.tier[j] : VRAM_SWAP_NONE);
            vram_swap_stats_t s;
            assert_int_equal(vram_swap_stats(sc, &s), 0);
            assert_int_equal(s.hits_gpu, m.st.hits_gpu);
            assert_int_equal(s.hits_host, m.st.hits_host);
            assert_int_equal(s.misses, m.st.misses);
            assert_int_equal(s.bytes_to_gpu, m.st.bytes_to_gpu);
            assert_int_equal(s.bytes_to_host, m.st.bytes_to_host);
            assert_int_equal(s.bytes_loaded, m.st.bytes_loaded);
            assert_int_equal(s.evictions_gpu, m.st.evictions_gpu);
            assert_int_equal(s.evictions_host, m.st.evictions_host);
            assert_int_equal(s.gpu_bytes, bytes_in(&m, VRAM_SWAP_GPU));
            assert_int_equal(s.host_bytes, bytes_in(&m, VRAM_SWAP_HOST));
            if (op % 97 == 0) assert_int_equal(vram_swap_check(sc), 0);
        }
        assert_int_equal(vram_swap_check(sc), 0);
        vram_swap_destroy(sc);
    }
}

/* Replays the moves of each get on a byte count per tier, starting from the
 * tiers before it: the budgets hold after every single move. */
static void moves_respect_budgets(void **state)
{
    (void)state;
    vram_swap_t *sc;
    assert_int_equal(vram_swap_create(100, 150, &sc), 0);
    uint64_t rng = 99;
    for (int op = 0; op < 20000; op++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        uint64_t key = 1 + (rng >> 35) % 30, size = 1 + (key * 37) % 90;
        vram_swap_stats_t before;
        assert_int_equal(vram_swap_stats(sc, &before), 0);
        size_t n;
        assert_int_equal(vram_swap_get(sc, key, size, NULL, NULL, &n), 0);
        int64_t bytes[3] = {0, (int64_t)before.gpu_bytes, (int64_t)before.host_bytes};
        for (size_t j = 0; j < n; j++) {
            vram_swap_move_t mv;
            assert_int_equal(vram_swap_move(sc, j, &mv), 0);
            bytes[mv.from] -= (int64_t)mv.size;
            bytes[mv.to] += (int64_t)mv.size;
            assert_true(bytes[VRAM_SWAP_GPU] <= 100);
            assert_true(bytes[VRAM_SWAP_HOST] <= 150);
        }
        vram_swap_stats_t after;
        assert_int_equal(vram_swap_stats(sc, &after), 0);
        assert_int_equal(bytes[VRAM_SWAP_GPU], after.gpu_bytes);
        assert_int_equal(bytes[VRAM_SWAP_HOST], after.host_bytes);
    }
    assert_int_equal(vram_swap_check(sc), 0);
    vram_swap_destroy(sc);
}

static void basics_and_errors(void **state)
{
    (void)state;
    vram_swap_t *sc;
    assert_int_equal(vram_swap_create(0, 0, &sc), VRAM_EINVAL);
    assert_int_equal(vram_swap_create(100, 50, &sc), 0);
    vram_swap_tier_t found, now;
    size_t n;
    assert_int_equal(vram_swap_get(sc, 1, 60, &found, &now, &n), 0);
    assert_int_equal(found, VRAM_SWAP_NONE);
    assert_int_equal(now, VRAM_SWAP_GPU);
    assert_int_equal(n, 1);
    assert_int_equal(vram_swap_get(sc, 2, 30, &found, &now, &n), 0);
    assert_int_equal(vram_swap_get(sc, 1, 0, &found, &now, &n), 0); /* 1 is now most recent */
    assert_int_equal(found, VRAM_SWAP_GPU);
    assert_int_equal(n, 0);
    assert_int_equal(vram_swap_get(sc, 3, 40, &found, &now, &n), 0); /* 2 goes to the host */
    assert_int_equal(n, 2);
    vram_swap_move_t mv;
    assert_int_equal(vram_swap_move(sc, 0, &mv), 0);
    assert_int_equal(mv.key, 2);
    assert_int_equal(mv.from, VRAM_SWAP_GPU);
    assert_int_equal(mv.to, VRAM_SWAP_HOST);
    assert_int_equal(vram_swap_move(sc, 2, &mv), VRAM_ENOENT);
    assert_int_equal(vram_swap_where(sc, 2), VRAM_SWAP_HOST);
    /* too large for the GPU budget: kept on the host */
    assert_int_equal(vram_swap_get(sc, 4, 120, &found, &now, &n), VRAM_ENOMEM); /* > host too */
    assert_int_equal(vram_swap_where(sc, 4), VRAM_SWAP_NONE);
    assert_int_equal(vram_swap_get(sc, 0, 1, &found, &now, &n), VRAM_EINVAL);
    assert_int_equal(vram_swap_get(sc, 5, 0, &found, &now, &n), VRAM_EINVAL);
    assert_int_equal(vram_swap_remove(sc, 2), 0);
    assert_int_equal(vram_swap_remove(sc, 2), VRAM_ENOENT);
    assert_int_equal(vram_swap_check(sc), 0);
    vram_swap_destroy(sc);
    vram_swap_destroy(NULL);
}

/* A smaller GPU budget demotes the least recently used items, in order; one
 * the host cannot take is dropped; the budget is kept for later gets. */
static void set_gpu_budget_demotes(void **state)
{
    (void)state;
    vram_swap_t *sc;
    vram_swap_tier_t found, now;
    size_t n;
    vram_swap_move_t mv;
    assert_int_equal(vram_swap_create(100, 0, &sc), 0);
    for (uint64_t k = 1; k <= 3; k++)
        assert_int_equal(vram_swap_get(sc, k, 50 - 10 * k, &found, &now, &n), 0); /* 40 30 20 */
    assert_int_equal(vram_swap_set_gpu_budget(sc, 50, &n), 0);
    assert_int_equal(n, 1); /* 1 (least recent, 40 bytes) leaves: 50 left */
    assert_int_equal(vram_swap_move(sc, 0, &mv), 0);
    assert_int_equal(mv.key, 1);
    assert_int_equal(mv.to, VRAM_SWAP_HOST);
    assert_int_equal(vram_swap_set_gpu_budget(sc, 1, &n), 0);
    assert_int_equal(n, 2);
    assert_int_equal(vram_swap_where(sc, 2), VRAM_SWAP_HOST);
    assert_int_equal(vram_swap_where(sc, 3), VRAM_SWAP_HOST);
    assert_int_equal(vram_swap_get(sc, 3, 0, &found, &now, &n), 0);
    assert_int_equal(now, VRAM_SWAP_HOST); /* larger than the budget now: served from the host */
    assert_int_equal(vram_swap_set_gpu_budget(sc, 0, &n), VRAM_EINVAL);
    assert_int_equal(vram_swap_set_gpu_budget(NULL, 1, &n), VRAM_EINVAL);
    assert_int_equal(vram_swap_check(sc), 0);
    vram_swap_stats_t st;
    assert_int_equal(vram_swap_stats(sc, &st), 0);
    assert_int_equal(st.gpu_budget, 1);
    assert_int_equal(st.gpu_bytes, 0);
    vram_swap_destroy(sc);

    assert_int_equal(vram_swap_create(100, 35, &sc), 0); /* the host takes 35 bytes */
    assert_int_equal(vram_swap_get(sc, 1, 40, &found, &now, &n), 0);
    assert_int_equal(vram_swap_get(sc, 2, 30, &found, &now, &n), 0);
    assert_int_equal(vram_swap_set_gpu_budget(sc, 1, &n), 0);
    assert_int_equal(n, 2);
    assert_int_equal(vram_swap_move(sc, 0, &mv), 0);
    assert_true(mv.key == 1 && mv.to == VRAM_SWAP_NONE); /* 40 > 35: dropped */
    assert_int_equal(vram_swap_move(sc, 1, &mv), 0);
    assert_true(mv.key == 2 && mv.to == VRAM_SWAP_HOST);
    assert_int_equal(vram_swap_check(sc), 0);
    vram_swap_destroy(sc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(basics_and_errors),
        cmocka_unit_test(against_model),
        cmocka_unit_test(moves_respect_budgets),
        cmocka_unit_test(set_gpu_budget_demotes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
