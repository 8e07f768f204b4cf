/* EXPERIMENT (measured, not kept; bench/RESULTS.md, "Physical memory of
 * expandable segments"): before mapping more, take physical memory back
 * from chunks lying wholly inside free blocks elsewhere, as moving them
 * would (cuMemUnmap there, cuMemMap + cuMemSetAccess of the same handle
 * here); simulated as an unmap and a map. VRAM_EXP_MOVE=0 off, 1 whenever
 * mapping would raise the peak of reserved bytes, 2 likewise but only
 * when the extent grows (the pool is setting its high water), 3 only when
 * the pool limit would refuse the map. VRAM_EXP_LIMIT=BYTES sets the
 * replay's pool limit. */
#include "pool/pool_internal.h"

#include <stdlib.h>

int vram_exp_move_mode(void)
{
    static int mode = -1;
    if (mode < 0) {
        const char *e = getenv("VRAM_EXP_MOVE");
        mode = e ? atoi(e) : 0;
    }
    return mode;
}

uint64_t vram_exp_moves;

void vram_exp_make_room(vram_pool_t *pool, vram_pool_reservation_t *r, uintptr_t lo, uintptr_t hi,
                        size_t more, bool growing)
{
    int mode = vram_exp_move_mode();
    if (!mode || (mode == 2 && !growing)) return;
    int64_t reserved = pool->stats.reserved_bytes[VRAM_POOL_STAT_ALL].current;
    int64_t peak =
        mode == 3 ? (int64_t)pool->limit : pool->stats.reserved_bytes[VRAM_POOL_STAT_ALL].peak;
    if (mode == 3 && !pool->limit) return;
    if (reserved + (int64_t)more <= peak) return;
    size_t want = (size_t)(reserved + (int64_t)more - peak), got = 0;
    size_t g = pool->granularity;
    uintptr_t glo = (lo - r->base) / g * g + r->base,
              ghi = (hi - r->base + g - 1) / g * g + r->base;
    for (vram_pool_block_t *b = vram_pool_first_block(pool, r->segment); b && got < want;
         b = vram_pool_next_block(pool, b)) {
        if (b->allocated) continue;
        uintptr_t s = b->addr, e = b->addr + b->size;
        if (e <= glo || s >= ghi) {
            got += vram_granules_unmap_inside(pool, r, s, e);
        } else {
            if (s < glo) got += vram_granules_unmap_inside(pool, r, s, glo);
            if (e > ghi) got += vram_granules_unmap_inside(pool, r, ghi, e);
        }
    }
    vram_exp_moves += got / g;
}
