/* A synthetic address space as the pools' segment source in the pool
 * benchmarks: no device calls, so the figures are the pool's own
 * bookkeeping. Header-only; each benchmark includes it once. */
#ifndef VRAM_BENCH_SPACE_SOURCE_H
#define VRAM_BENCH_SPACE_SOURCE_H

#include "pool/pool_internal.h"

static uintptr_t next_addr = (uintptr_t)1 << 44;

static int space_alloc(void *user, size_t size, void **ptr)
{
    (void)user;
    *ptr = (void *)next_addr;
    next_addr += (size + ((size_t)2 << 20)) & ~(((size_t)2 << 20) - 1);
    return 0;
}

static int space_free(void *user, void *ptr)
{
    (void)user;
    (void)ptr;
    return 0;
}

static int space_memory(void *user, uint64_t *total, uint64_t *free_bytes)
{
    (void)user;
    *total = *free_bytes = (uint64_t)1 << 46;
    return 0;
}

/* Virtual memory for expandable segments: reservations are ranges of the
 * same synthetic space; mapping costs nothing. */
static int space_granularity(void *user, size_t *granularity)
{
    (void)user;
    *granularity = (size_t)2 << 20;
    return 0;
}

static int space_reserve(void *user, size_t size, void **va)
{
    return space_alloc(user, size, va);
}

static int space_unreserve(void *user, void *va, size_t size)
{
    (void)size;
    return space_free(user, va);
}

static int space_map(void *user, void *addr, size_t size)
{
    (void)user;
    (void)addr;
    (void)size;
    return 0;
}

static int space_move(void *user, void *from, void *to, size_t size)
{
    (void)user;
    (void)from;
    (void)to;
    (void)size;
    return 0;
}

/* The source, with or without virtual memory. */
static inline vram_pool_source_t space_source(bool vmm)
{
    vram_pool_source_t src = {.alloc = space_alloc, .free = space_free, .memory = space_memory};
    if (vmm) {
        src.vmm_granularity = space_granularity;
        src.vmm_reserve = space_reserve;
        src.vmm_unreserve = space_unreserve;
        src.vmm_map = space_map;
        src.vmm_unmap = space_map;
        src.vmm_move = space_move;
    }
    return src;
}

#endif
