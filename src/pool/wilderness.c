/* The wilderness of an expandable segment: its free last block, the only
 * free block that can grow. It stays out of the bins so that best fit
 * gives it only requests no other free block fits (docs/pool.md,
 * "Fragmentation"); a request that misses the bins looks here before it
 * takes the slow path. */
#include "pool/pool_internal.h"

vram_pool_block_t *vram_pool_wilderness(const vram_pool_t *pool, const vram_pool_reservation_t *r)
{
    vram_pool_block_t *w = r->segment ? vram_block_at(&pool->blocks, r->segment->last) : NULL;
    return w && !w->allocated ? w : NULL;
}

vram_pool_block_t *vram_pool_wilderness_fit(const vram_pool_t *pool, uintptr_t stream,
                                            size_t rounded)
{
    /* One reservation per stream (streams are few). */
    for (const vram_pool_reservation_t *r = pool->reservations; r; r = r->next) {
        if (r->stream != stream) continue;
        vram_pool_block_t *w = vram_pool_wilderness(pool, r);
        return w && w->size >= rounded ? w : NULL;
    }
    return NULL;
}
