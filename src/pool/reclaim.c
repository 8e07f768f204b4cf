/* When a request needs granules of an expandable segment mapped and no new
 * physical memory may be had for them — the pool limit would be passed,
 * or the device refused — the request takes the memory of chunks lying
 * wholly inside free blocks elsewhere in the segment: first by moving such
 * chunks into its unmapped granules (the same memory mapped elsewhere: one
 * call, none created or released, so no other process can take it
 * meanwhile); under the limit, then by unmapping more of them, a free
 * block at a time, until the limit takes the rest. Without this the map
 * was refused and the OOM chain unmapped every such chunk and grew at the
 * segment's end instead; the chunks were mapped again when requests came
 * back to them, so a workload held between its floor and its unlimited
 * peak paid calls (and refused requests) in every pass (docs/pool.md,
 * "Expandable segments"). */
#include "pool/pool_internal.h"

static uint64_t reserved_now(const vram_pool_t *pool)
{
    return (uint64_t)pool->stats.reserved_bytes[VRAM_POOL_STAT_ALL].current;
}

/* The largest chunk of at most `max` granules lying wholly inside a free
 * block of r's segment, outside granules [skip, skip_end). */
static size_t largest_free_chunk(const vram_pool_t *pool, const vram_pool_reservation_t *r,
                                 size_t skip, size_t skip_end, size_t max, size_t *at)
{
    size_t best = 0;
    for (vram_pool_block_t *b = vram_pool_first_block(pool, r->segment); b && best < max;
         b = vram_pool_next_block(pool, b)) {
        size_t i = 0, n;
        if (b->allocated) continue;
        n = vram_granules_chunk_inside(pool, r, b->addr, b->addr + b->size, skip, skip_end, max,
                                       &i);
        if (n > best) {
            best = n;
            *at = i;
        }
    }
    return best;
}

/* Moves free chunks into the unmapped granules of [skip, skip_end), the
 * largest that fits first, while more than `room` bytes of them are left
 * unmapped. Returns the bytes left unmapped (of `more`). */
static size_t move_into(vram_pool_t *pool, vram_pool_reservation_t *r, size_t skip, size_t skip_end,
                        size_t more, size_t room)
{
    size_t g = pool->granularity;
    for (size_t j = skip, run, m; pool->src.vmm_move && more > room &&
                                  (m = vram_granules_unmapped_run(r, j, skip_end, &run));) {
        size_t from = 0, n = largest_free_chunk(pool, r, skip, skip_end, m, &from);
        if (n && vram_granules_move(pool, r, from, run)) break; /* the map takes it from here */
        more -= n * g;
        j = run + (n ? n : m);
    }
    return more;
}

size_t vram_pool_reclaim_for_limit(vram_pool_t *pool, vram_pool_reservation_t *r, uintptr_t lo,
                                   uintptr_t hi, size_t more)
{
    uint64_t reserved = reserved_now(pool);
    if (!pool->limit || reserved + more <= pool->limit || !r->segment) return more;
    size_t g = pool->granularity;
    size_t skip = (lo - r->base) / g, skip_end = (hi - r->base + g - 1) / g;
    more = move_into(pool, r, skip, skip_end, more,
                     reserved < pool->limit ? (size_t)(pool->limit - reserved) : 0);
    /* Unmaps, a free block's chunks at a time. */
    uintptr_t glo = r->base + skip * g, ghi = r->base + skip_end * g;
    for (vram_pool_block_t *b = vram_pool_first_block(pool, r->segment);
         b && reserved_now(pool) + more > pool->limit; b = vram_pool_next_block(pool, b)) {
        if (b->allocated) continue;
        uintptr_t s = b->addr, e = b->addr + b->size;
        if (s < glo) vram_granules_unmap_inside(pool, r, s, e < glo ? e : glo);
        if (e > ghi) vram_granules_unmap_inside(pool, r, s > ghi ? s : ghi, e);
    }
    return more;
}

size_t vram_pool_reclaim_for_device(vram_pool_t *pool, vram_pool_reservation_t *r, uintptr_t lo,
                                    uintptr_t hi)
{
    size_t g = pool->granularity;
    size_t more = vram_granules_unmapped_bytes(pool, r, lo, hi);
    if (!r->segment) return more;
    return move_into(pool, r, (lo - r->base) / g, (hi - r->base + g - 1) / g, more, 0);
}
