/* The pool's lock (src/pool/pool_lock.h): mutual exclusion under
 * contention, the sleeping waiter woken by the holder, and the plain path
 * while the process has one thread. Also run under ThreadSanitizer (label
 * "threads", `make tsan`), which checks that the lock orders the plain
 * accesses it guards. */
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "pool/pool_lock.h"

#define THREADS    4
#define INCREMENTS 100000

static vram_pool_lock_t lock;
static uint64_t counter; /* plain: only the lock orders its updates */

/* Runs first, before any thread exists: lock and unlock take the plain
 * path and leave the same states as the atomic one. */
static void single_thread_states(void **state)
{
    (void)state;
    vram_pool_lock_t l = {0};
    vram_pool_lock(&l);
    assert_int_equal(atomic_load(&l.state), 1);
    vram_pool_unlock(&l);
    assert_int_equal(atomic_load(&l.state), 0);
}

static void *increment(void *arg)
{
    (void)arg;
    for (int i = 0; i < INCREMENTS; i++) {
        vram_pool_lock(&lock);
        counter++;
        vram_pool_unlock(&lock);
    }
    return NULL;
}

static void mutual_exclusion(void **state)
{
    (void)state;
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++)
        assert_int_equal(pthread_create(&t[i], NULL, increment, NULL), 0);
    for (int i = 0; i < THREADS; i++)
        assert_int_equal(pthread_join(t[i], NULL), 0);
    assert_int_equal(counter, (uint64_t)THREADS * INCREMENTS);
    assert_int_equal(atomic_load(&lock.state), 0);
}

static atomic_int waiter_done;

static void *wait_for_lock(void *arg)
{
    vram_pool_lock_t *l = arg;
    vram_pool_lock(l);
    atomic_store(&waiter_done, 1);
    vram_pool_unlock(l);
    return NULL;
}

/* A waiter that finds the lock held spins, then marks it contended (2) and
 * sleeps; the holder's unlock must wake it. Waits for the state the waiter
 * reaches, not for time to pass. */
static void sleeping_waiter_is_woken(void **state)
{
    (void)state;
    vram_pool_lock_t l = {0};
    vram_pool_lock(&l);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, wait_for_lock, &l), 0);
    while (atomic_load(&l.state) != 2)
        sched_yield();
    assert_int_equal(atomic_load(&waiter_done), 0);
    vram_pool_unlock(&l);
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_int_equal(atomic_load(&waiter_done), 1);
    assert_int_equal(atomic_load(&l.state), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(single_thread_states),
        cmocka_unit_test(mutual_exclusion),
        cmocka_unit_test(sleeping_waiter_is_woken),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
