/* 8 threads allocate and free concurrently on one pool (sharing streams,
 * with trims, statistics and snapshots mixed in). Between rounds the threads
 * stop at a barrier and one of them checks the same invariants as the
 * randomized test against the union of the threads' models. Also run under
 * ThreadSanitizer (label "threads", `make tsan`). cmocka's assertions are not
 * thread-safe, so threads record failures and the main thread reports them. */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "pool/pool_internal.h"
#include "unit/pool_sim.h"

#define THREADS       8
#define ROUNDS        10
#define OPS_PER_ROUND 2500
#define MAX_LIVE      200

typedef struct {
    void *ptr;
    size_t size;
    uintptr_t stream;
} live_t;

typedef struct {
    int id;
    uint64_t rng;
    live_t live[MAX_LIVE];
    size_t count;
} worker_t;

static vram_pool_t *pool;
static pool_sim_t sim;
static worker_t workers[THREADS];
static pthread_barrier_t barrier;
static atomic_int failures;
static char first_failure[512];
static pthread_mutex_t failure_lock = PTHREAD_MUTEX_INITIALIZER;

static void record_failure(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void record_failure(const char *fmt, ...)
{
    pthread_mutex_lock(&failure_lock);
    if (atomic_fetch_add(&failures, 1) == 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(first_failure, sizeof first_failure, fmt, ap);
        va_end(ap);
    }
    pthread_mutex_unlock(&failure_lock);
}

static uint64_t rnd(worker_t *w)
{
    w->rng ^= w->rng >> 12;
    w->rng ^= w->rng << 25;
    w->rng ^= w->rng >> 27;
    return w->rng * 2685821657736338717ull;
}

static size_t random_size(worker_t *w)
{
    double u = (double)(rnd(w) >> 11) / 9007199254740992.0;
    double hi = (rnd(w) & 3) ? 1 << 20 : 32 << 20; /* mostly small, some large */
    return (size_t)exp(u * log(hi)) + 1;
}

/* ---- the check between rounds ------------------------------------------ */

typedef struct {
    uintptr_t addr;
    size_t size, requested;
    uintptr_t stream, seg_base;
    size_t seg_size;
} seen_t;

typedef struct {
    seen_t *v;
    size_t n, cap;
} seen_list_t;

static void collect(const vram_pool_segment_t *seg, const vram_pool_block_t *b, void *user)
{
    seen_list_t *l = user;
    if (!b->allocated) return;
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 512;
        l->v = realloc(l->v, l->cap * sizeof *l->v);
    }
    l->v[l->n++] =
        (seen_t){b->addr, b->size, b->u.live.requested, seg->stream, seg->base, seg->size};
}

static int by_addr(const void *a, const void *b)
{
    uintptr_t x = ((const seen_t *)a)->addr, y = ((const seen_t *)b)->addr;
    return x < y ? -1 : x > y;
}

static const live_t *find_live(uintptr_t addr)
{
    for (int t = 0; t < THREADS; t++)
        for (size_t i = 0; i < workers[t].count; i++)
            if ((uintptr_t)workers[t].live[i].ptr == addr) return &workers[t].live[i];
    return NULL;
}

static void check_everything(void)
{
    char err[256];
    if (vram_pool_check(pool, err, sizeof err)) {
        record_failure("pool invariant broken: %s", err);
        return;
    }
    seen_list_t l = {0};
    vram_pool_walk(pool, collect, &l);
    size_t model_count = 0;
    int64_t model_requested = 0;
    for (int t = 0; t < THREADS; t++) {
        model_count += workers[t].count;
        for (size_t i = 0; i < workers[t].count; i++)
            model_requested += (int64_t)workers[t].live[i].size;
    }
    if (l.n != model_count) record_failure("pool holds %zu blocks, threads %zu", l.n, model_count);
    if (l.n) qsort(l.v, l.n, sizeof *l.v, by_addr);
    for (size_t i = 0; i < l.n; i++) {
        const seen_t *b = &l.v[i];
        const live_t *m = find_live(b->addr);
        if (!m) {
            record_failure("block 0x%zx belongs to no thread", (size_t)b->addr);
            break;
        }
        if (m->size != b->requested || b->size < m->size || m->stream != b->stream)
            record_failure("block 0x%zx lost its size or stream", (size_t)b->addr);
        if (b->addr < b->seg_base || b->addr + b->size > b->seg_base + b->seg_size)
            record_failure("block 0x%zx outside its segment", (size_t)b->addr);
        if (i + 1 < l.n && b->addr + b->size > l.v[i + 1].addr)
            record_failure("blocks 0x%zx and 0x%zx overlap", (size_t)b->addr,
                           (size_t)l.v[i + 1].addr);
    }
    vram_pool_stats_t s;
    vram_pool_stats(pool, &s);
    if (s.allocation[VRAM_POOL_STAT_ALL].current != (int64_t)model_count ||
        s.requested_bytes[VRAM_POOL_STAT_ALL].current != model_requested)
        record_failure("statistics disagree with the threads' models");
    if (pool_sim_used(sim.ctx) != (uint64_t)s.reserved_bytes[VRAM_POOL_STAT_ALL].current)
        record_failure("device holds %llu bytes, pool reserves %lld",
                       (unsigned long long)pool_sim_used(sim.ctx),
                       (long long)s.reserved_bytes[VRAM_POOL_STAT_ALL].current);
    free(l.v);
}

/* ---- the workers ------------------------------------------------------- */

static void one_op(worker_t *w)
{
    uint64_t r = rnd(w);
    if (r % 997 == 0) {
        vram_pool_trim(pool, NULL);
    } else if (r % 499 == 0) {
        vram_pool_stats_t s;
        vram_pool_stats(pool, &s);
    } else if (r % 1999 == 0) {
        free(vram_pool_snapshot_json(pool));
    }
    bool grow = w->count == 0 || (w->count < MAX_LIVE && (r >> 32) % 100 < 52);
    if (grow) {
        size_t size = random_size(w);
        uintptr_t stream = (uintptr_t)(w->id % 3) * 0x100; /* threads share streams */
        void *p = NULL;
        int rc = vram_pool_alloc(pool, size, (void *)stream, &p);
        if (rc || !p || (uintptr_t)p % 512) {
            record_failure("thread %d: alloc of %zu: %s", w->id, size, vram_last_error());
            return;
        }
        w->live[w->count++] = (live_t){p, size, stream};
    } else {
        size_t i = (size_t)(r % w->count);
        if (vram_pool_free(pool, w->live[i].ptr))
            record_failure("thread %d: free: %s", w->id, vram_last_error());
        w->live[i] = w->live[--w->count];
    }
}

static void *worker_main(void *arg)
{
    worker_t *w = arg;
    for (int round = 0; round < ROUNDS; round++) {
        for (int op = 0; op < OPS_PER_ROUND; op++)
            one_op(w);
        int serial = pthread_barrier_wait(&barrier);
        if (serial == PTHREAD_BARRIER_SERIAL_THREAD) check_everything();
        pthread_barrier_wait(&barrier);
    }
    return NULL;
}

static void run(vram_pool_strategy_t strategy, vram_pool_expandable_t expandable)
{
    assert_int_equal(pool_sim_open(&sim, "1xthreads:64GiB"), 0);
    vram_pool_config_t cfg = {.strategy = strategy, .expandable = expandable};
    assert_int_equal(vram_pool_create(sim.ctx, 0, &cfg, &pool), 0);
    atomic_store(&failures, 0);
    assert_int_equal(pthread_barrier_init(&barrier, NULL, THREADS), 0);
    pthread_t tid[THREADS];
    for (int t = 0; t < THREADS; t++) {
        workers[t] =
            (worker_t){.id = t, .rng = 0x9E3779B97F4A7C15ull * (uint64_t)(t + 1) + strategy};
        assert_int_equal(pthread_create(&tid[t], NULL, worker_main, &workers[t]), 0);
    }
    for (int t = 0; t < THREADS; t++)
        pthread_join(tid[t], NULL);
    pthread_barrier_destroy(&barrier);
    if (atomic_load(&failures))
        fail_msg("%d failures, first: %s", atomic_load(&failures), first_failure);
    for (int t = 0; t < THREADS; t++)
        for (size_t i = 0; i < workers[t].count; i++)
            assert_int_equal(vram_pool_free(pool, workers[t].live[i].ptr), 0);
    assert_int_equal(vram_pool_trim(pool, NULL), 0);
    vram_pool_stats_t s;
    assert_int_equal(vram_pool_stats(pool, &s), 0);
    assert_int_equal(s.allocation[VRAM_POOL_STAT_ALL].current, 0);
    assert_int_equal(s.reserved_bytes[VRAM_POOL_STAT_ALL].current, 0);
    assert_int_equal(s.num_invalid_frees, 0);
    assert_int_equal(s.num_device_map, s.num_device_unmap);
    assert_true(expandable == VRAM_POOL_EXPANDABLE_ON ? s.num_device_map > 0
                                                      : s.num_device_map == 0);
    assert_int_equal(pool_sim_used(sim.ctx), 0);
    vram_pool_destroy(pool);
    pool_sim_close(&sim);
}

static void balanced_threads(void **state)
{
    (void)state;
    run(VRAM_POOL_BALANCED, VRAM_POOL_EXPANDABLE_OFF);
}

static void consolidated_threads(void **state)
{
    (void)state;
    run(VRAM_POOL_CONSOLIDATED, VRAM_POOL_EXPANDABLE_OFF);
}

/* Expandable segments: 8 threads growing the same few segments at their
 * ends (three streams, two kinds) while others free into them. */
static void balanced_expandable_threads(void **state)
{
    (void)state;
    run(VRAM_POOL_BALANCED, VRAM_POOL_EXPANDABLE_ON);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(balanced_threads),
        cmocka_unit_test(consolidated_threads),
        cmocka_unit_test(balanced_expandable_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
