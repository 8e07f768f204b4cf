/* PyTorch pluggable-allocator entry points (CUDAPluggableAllocator).
 *
 * PyTorch calls plain C functions with no user pointer, so the pools live in
 * the one mutable global this module adds: a process-wide context, opened on
 * first use with vram_ctx_open() (VRAM_BACKEND and friends), and one pool per
 * device created from the options (VRAM_POOL_STRATEGY, VRAM_POOL_LIMIT,
 * VRAM_POOL_TRACE). They live until the process exits: PyTorch may free
 * tensors during interpreter shutdown, after any destructor we could run. */
#include "pool/pool_internal.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>

#define TORCH_MAX_DEVICES 64

static struct {
    pthread_mutex_t lock; /* guards creation; lookups are lock-free */
    vram_ctx_t *ctx;
    bool ctx_failed;
    _Atomic(vram_pool_t *) pools[TORCH_MAX_DEVICES];
} torch_state = {.lock = PTHREAD_MUTEX_INITIALIZER};

static vram_pool_t *pool_for(int device, bool create)
{
    if (device < 0 || device >= TORCH_MAX_DEVICES) return NULL;
    vram_pool_t *pool = atomic_load_explicit(&torch_state.pools[device], memory_order_acquire);
    if (pool || !create) return pool;
    pthread_mutex_lock(&torch_state.lock);
    pool = atomic_load_explicit(&torch_state.pools[device], memory_order_relaxed);
    if (!pool && !torch_state.ctx_failed) {
        if (!torch_state.ctx && vram_ctx_open(&torch_state.ctx)) {
            /* Report once: PyTorch only sees NULL. */
            fprintf(stderr, "vram: cannot open a device context for PyTorch: %s\n",
                    vram_last_error());
            torch_state.ctx_failed = true;
        }
        if (torch_state.ctx && !vram_pool_create(torch_state.ctx, device, NULL, &pool))
            atomic_store_explicit(&torch_state.pools[device], pool, memory_order_release);
        else if (torch_state.ctx)
            fprintf(stderr, "vram: cannot create the pool of device %d: %s\n", device,
                    vram_last_error());
    }
    pthread_mutex_unlock(&torch_state.lock);
    return pool;
}

void *vram_torch_malloc(ssize_t size, int device, void *stream)
{
    if (size <= 0) return NULL;
    vram_pool_t *pool = pool_for(device, true);
    if (!pool) return NULL;
    void *ptr = NULL;
    if (vram_pool_alloc(pool, (size_t)size, stream, &ptr)) return NULL;
    return ptr;
}

void vram_torch_free(void *ptr, ssize_t size, int device, void *stream)
{
    (void)size;
    (void)stream;
    vram_pool_t *pool = pool_for(device, false);
    if (pool && ptr) vram_pool_free(pool, ptr); /* unknown pointers are counted there */
}

vram_pool_t *vram_torch_pool(int device)
{
    return pool_for(device, false);
}
