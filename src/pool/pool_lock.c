/* The pool lock's contended paths (see pool_lock.h). */
#include "pool/pool_lock.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Spins before sleeping: the pool holds its lock for ~50-300 ns, far less
 * than a sleep and a wake-up cost, so a waiter on another core usually
 * gets it within a few rounds. */
#define SPINS 100

static void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ volatile("yield");
#endif
}

void vram_pool_lock_wait(vram_pool_lock_t *l)
{
    for (int i = 0; i < SPINS; i++) {
        int expected = 0;
        if (atomic_load_explicit(&l->state, memory_order_relaxed) == 0 &&
            atomic_compare_exchange_weak_explicit(&l->state, &expected, 1, memory_order_acquire,
                                                  memory_order_relaxed))
            return;
        cpu_relax();
    }
    /* Marks the lock contended (2) whenever it takes it from here: the
     * holder then wakes a sleeper on unlock. Taking it as 2 when no one else
     * waits costs one needless wake-up call, never a lost one. */
    while (atomic_exchange_explicit(&l->state, 2, memory_order_acquire) != 0)
        syscall(SYS_futex, &l->state, FUTEX_WAIT_PRIVATE, 2, NULL, NULL, 0);
}

void vram_pool_lock_wake(vram_pool_lock_t *l)
{
    syscall(SYS_futex, &l->state, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}
