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

#endif
