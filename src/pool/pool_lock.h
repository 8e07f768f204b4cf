/* The pool's lock: a mutex on one atomic int and the futex system call
 * (the third mutex of Drepper, "Futexes Are Tricky"; docs/pool.md,
 * "Locking"). Uncontended, lock and unlock are one atomic instruction each,
 * inline: pthread_mutex_lock and _unlock are calls through the PLT that also
 * check the mutex's type and keep an owner and a user count, ~55
 * instructions per operation that every alloc and free paid. Contended, a
 * waiter spins briefly, then sleeps in the kernel until the holder wakes
 * it. Acquire on lock and release on unlock, so ThreadSanitizer sees the
 * ordering through the atomics. Not recursive; no owner checks.
 *
 * While the process has one thread (glibc's __libc_single_threaded, which
 * pthread_create clears), nobody can contend: lock and unlock are plain
 * loads and stores, as glibc's own mutex does then. A thread created while
 * the lock is held sees it held (pthread_create orders the store before
 * the thread starts) and the holder's unlock is then the atomic one. */
#ifndef VRAM_POOL_LOCK_H
#define VRAM_POOL_LOCK_H

#include <stdatomic.h>
#include <stdbool.h>
#if defined(__has_include)
#if __has_include(<sys/single_threaded.h>)
#include <sys/single_threaded.h>
#define VRAM_POOL_SINGLE_THREADED() (__libc_single_threaded != 0)
#endif
#endif
#ifndef VRAM_POOL_SINGLE_THREADED
#define VRAM_POOL_SINGLE_THREADED() false
#endif

typedef struct {
    atomic_int state; /* 0 free, 1 held, 2 held and a thread may be sleeping on it */
} vram_pool_lock_t;

/* The contended paths (pool_lock.c). */
void vram_pool_lock_wait(vram_pool_lock_t *l);
void vram_pool_lock_wake(vram_pool_lock_t *l);

static inline void vram_pool_lock(vram_pool_lock_t *l)
{
    int expected = 0;
    if (VRAM_POOL_SINGLE_THREADED() && !atomic_load_explicit(&l->state, memory_order_relaxed)) {
        atomic_store_explicit(&l->state, 1, memory_order_relaxed);
        return;
    }
    if (!atomic_compare_exchange_strong_explicit(&l->state, &expected, 1, memory_order_acquire,
                                                 memory_order_relaxed))
        vram_pool_lock_wait(l);
}

static inline void vram_pool_unlock(vram_pool_lock_t *l)
{
    if (VRAM_POOL_SINGLE_THREADED()) {
        atomic_store_explicit(&l->state, 0, memory_order_relaxed); /* no other thread to wake */
        return;
    }
    if (atomic_exchange_explicit(&l->state, 0, memory_order_release) == 2) vram_pool_lock_wake(l);
}

#endif
