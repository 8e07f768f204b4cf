/* The PyTorch-policy baseline (src/pool/torch_policy.c) takes the two locks
 * PyTorch's caching allocator takes per call, so several threads may share
 * one: here 4 threads allocate and free at random on one policy, and no
 * address is ever held by two threads at once (a shared record of who
 * holds what, kept under its own lock, says so). Without the locks the
 * threads corrupt its tree and its map. Also run under ThreadSanitizer
 * (label "threads", `make tsan`). cmocka's assertions are not thread-safe,
 * so threads count failures and the main thread reports them. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <cmocka.h>

#include "core/map.h"
#include "pool/tools/torch_policy.h"

#define THREADS 4
#define OPS     100000
#define LIVE    64

/* The benchmarks' synthetic address space as the device (the policy calls
 * it under its own lock). */
#include "../../bench/pool/space_source.h"

static vram_torch_policy_t *policy;
static pthread_mutex_t holders_lock = PTHREAD_MUTEX_INITIALIZER;
static vram_map_t holders; /* address -> thread id + 1 */
static atomic_int failures;

static uint64_t rnd(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* Records that thread `id` holds p; fails if another holds it. */
static void hold(void *p, int id)
{
    pthread_mutex_lock(&holders_lock);
    uint64_t who;
    if (vram_map_get(&holders, (uintptr_t)p, &who) || !vram_map_put(&holders, (uintptr_t)p, id + 1))
        atomic_fetch_add(&failures, 1);
    pthread_mutex_unlock(&holders_lock);
}

/* Before freeing: p must be thread id's. */
static void let_go(void *p, int id)
{
    pthread_mutex_lock(&holders_lock);
    uint64_t who;
    if (!vram_map_take(&holders, (uintptr_t)p, &who) || who != (uint64_t)id + 1)
        atomic_fetch_add(&failures, 1);
    pthread_mutex_unlock(&holders_lock);
}

static void *worker(void *arg)
{
    int id = (int)(intptr_t)arg;
    uint64_t s = 0x9E3779B97F4A7C15ull * (uint64_t)(id + 1);
    void *live[LIVE] = {0};
    for (int i = 0; i < OPS; i++) {
        int k = (int)(rnd(&s) % LIVE);
        if (live[k]) {
            let_go(live[k], id);
            if (vram_torch_policy_free(policy, live[k])) atomic_fetch_add(&failures, 1);
            live[k] = NULL;
            continue;
        }
        /* 512 B to ~8 MiB: both pools, splits and merges. */
        size_t size = ((size_t)512 << (rnd(&s) % 14)) + (size_t)(rnd(&s) % 4096);
        if (vram_torch_policy_alloc(policy, size, 0, &live[k]) || !live[k]) {
            atomic_fetch_add(&failures, 1);
            live[k] = NULL;
            continue;
        }
        hold(live[k], id);
    }
    for (int k = 0; k < LIVE; k++) {
        if (!live[k]) continue;
        let_go(live[k], id);
        if (vram_torch_policy_free(policy, live[k])) atomic_fetch_add(&failures, 1);
    }
    return NULL;
}

static void threads_share_one_policy(void **state)
{
    (void)state;
    vram_pool_source_t src = space_source(false);
    assert_int_equal(vram_torch_policy_create(&src, false, true, &policy), 0);
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++)
        assert_int_equal(pthread_create(&t[i], NULL, worker, (void *)(intptr_t)i), 0);
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    assert_int_equal(atomic_load(&failures), 0);
    assert_int_equal(holders.count, 0);
    vram_torch_policy_stats_t st;
    vram_torch_policy_stats(policy, &st);
    assert_int_equal(st.ooms, 0);
    assert_true(st.device_allocs > 0);
    assert_true(st.reserved_bytes > 0 && st.reserved_bytes <= st.peak_reserved_bytes);
    /* Everything came back: a double free is refused, and the cache serves
     * a new request without a device call. */
    void *p;
    assert_int_equal(vram_torch_policy_alloc(policy, 1 << 20, 0, &p), 0);
    vram_torch_policy_stats_t after;
    vram_torch_policy_stats(policy, &after);
    assert_int_equal(after.device_allocs, st.device_allocs);
    assert_int_equal(vram_torch_policy_free(policy, p), 0);
    assert_int_equal(vram_torch_policy_free(policy, p), VRAM_EINVAL);
    vram_torch_policy_destroy(policy);
    vram_map_clear(&holders);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(threads_share_one_policy),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
