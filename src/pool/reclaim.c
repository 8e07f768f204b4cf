/* Under the pool limit, a request that needs granules of an expandable
 * segment mapped takes the physical memory of chunks lying wholly inside
 * free blocks elsewhere in the segment: they are unmapped first, just
 * enough of them, lowest address first. Without this the limit refuses the
 * map and the OOM chain unmaps every such chunk and grows at the segment's
 * end instead; those chunks are mapped again when requests return to
 * them, so a workload held just above its floor paid calls (and refused
 * requests) in every pass (docs/pool.md, "Expandable segments"). */
#include "pool/pool_internal.h"

size_t vram_pool_reclaim_for_limit(vram_pool_t *pool, vram_pool_reservation_t *r, uintptr_t lo,
                                   uintptr_t hi, size_t more)
{
    uint64_t reserved = (uint64_t)pool->stats.reserved_bytes[VRAM_POOL_STAT_ALL].current;
    if (!pool->limit || reserved + more <= pool->limit || !r->segment) return 0;
    size_t want = (size_t)(reserved + more - pool->limit), got = 0, g = pool->granularity;
    /* The granules the request uses stay (they are what it maps). */
    uintptr_t glo = r->base + (lo - r->base) / g * g;
    uintptr_t ghi = r->base + (hi - r->base + g - 1) / g * g;
    for (vram_pool_block_t *b = vram_pool_first_block(pool, r->segment); b && got < want;
         b = vram_pool_next_block(pool, b)) {
        if (b->allocated) continue;
        uintptr_t s = b->addr, e = b->addr + b->size;
        if (s < glo) got += vram_granules_unmap_inside(pool, r, s, e < glo ? e : glo);
        if (e > ghi) got += vram_granules_unmap_inside(pool, r, s > ghi ? s : ghi, e);
    }
    return got;
}
