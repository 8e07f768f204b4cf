/* The block table: a slab where blocks are made and buckets where allocated
 * blocks live at their address's hash (see pool_internal.h). */
#include "pool/pool_internal.h"

#include <string.h>
#include <sys/mman.h>

#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25 /* Linux 6.1, <asm-generic/mman-common.h>; older libc headers lack it */
#endif

/* The slab is mapped read-write 2 MiB (32,768 blocks) at a time, in 2 MiB
 * aligned chunks; all but the first are offered to the kernel for huge
 * pages, as are buckets of 2 MiB or more: at 100,000 live blocks their
 * ~20 MB would otherwise span ~5,000 4 KiB pages, and on a VM a TLB miss on
 * top of a cache miss costs a two-level page walk. */
#define HUGE_PAGE         ((size_t)2 << 20)
#define BLOCKS_PER_GROWTH ((uint32_t)(HUGE_PAGE / sizeof(vram_pool_block_t)))
#define RESERVATION       ((size_t)VRAM_BLOCK_IDS_MAX * sizeof(vram_pool_block_t) + HUGE_PAGE)

/* Buckets of 2^bits (2^(bits+1) slots) start at slot VRAM_SLAB_IDS_MAX +
 * 2^(bits+1), so the regions of successive sizes never overlap and a table
 * can move into the next size while the old one is still mapped. */
#define BUCKET_BITS_MIN 5  /* 64 slots: one 4 KiB page */
#define BUCKET_BITS_MAX 25 /* the last region ends at VRAM_BLOCK_IDS_MAX */

static size_t region_bytes(int bits)
{
    return ((size_t)2 << bits) * sizeof(vram_pool_block_t);
}

vram_pool_block_t *vram_blocks_bucket_region(const vram_block_table_t *t, int bits)
{
    return t->base + VRAM_SLAB_IDS_MAX + ((size_t)2 << bits);
}

int vram_blocks_map_buckets(vram_block_table_t *t, int bits)
{
    if (bits > BUCKET_BITS_MAX)
        return vram_fail(VRAM_ENOMEM, "pool: block buckets at their maximum");
    vram_pool_block_t *region = vram_blocks_bucket_region(t, bits);
    if (mprotect(region, region_bytes(bits), PROT_READ | PROT_WRITE))
        return vram_fail(VRAM_ENOMEM, "pool: out of host memory for block buckets");
#ifdef MADV_HUGEPAGE
    if (region_bytes(bits) >= HUGE_PAGE) madvise(region, region_bytes(bits), MADV_HUGEPAGE);
#endif
    return 0;
}

void vram_blocks_switch_buckets(vram_block_table_t *t, int bits)
{
    vram_pool_block_t *old = t->base + t->buckets;
    size_t old_bytes = region_bytes(t->bucket_bits);
    t->bucket_bits = bits;
    t->buckets = (uint32_t)(vram_blocks_bucket_region(t, bits) - t->base);
    /* Gone from memory (read as zeros if ever mapped again) and from reach. */
    madvise(old, old_bytes, MADV_DONTNEED);
    mprotect(old, old_bytes, PROT_NONE);
}

int vram_blocks_reserve(vram_block_table_t *t)
{
    void *map =
        mmap(NULL, RESERVATION, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (map == MAP_FAILED)
        return vram_fail(VRAM_ENOMEM, "pool: cannot reserve address space for block metadata");
    memset(t, 0, sizeof *t);
    t->reservation = map;
    t->base = (vram_pool_block_t *)(((uintptr_t)map + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1));
    t->used = 1; /* id 0 is "none" */
    if (vram_blocks_map_buckets(t, BUCKET_BITS_MIN)) {
        munmap(map, RESERVATION);
        t->reservation = NULL;
        return VRAM_ENOMEM;
    }
    t->bucket_bits = BUCKET_BITS_MIN;
    t->buckets = (uint32_t)(vram_blocks_bucket_region(t, BUCKET_BITS_MIN) - t->base);
    return 0;
}

void vram_blocks_release(vram_block_table_t *t)
{
    if (t->reservation) munmap(t->reservation, RESERVATION);
    t->reservation = NULL;
    t->base = NULL;
}

vram_pool_block_t *vram_blocks_new(vram_block_table_t *t)
{
    vram_pool_block_t *b;
    if (t->spare) {
        b = t->base + t->spare;
        t->spare = b->next;
    } else {
        if (t->used >= t->mapped) {
            if (t->mapped == VRAM_SLAB_IDS_MAX) return NULL;
            vram_pool_block_t *chunk = t->base + t->mapped;
            if (mprotect(chunk, HUGE_PAGE, PROT_READ | PROT_WRITE)) return NULL;
#ifdef MADV_HUGEPAGE
            /* Not the first chunk: a small pool should not pay 2 MiB. When
             * the pool outgrows it, the first chunk is collapsed into a huge
             * page too (Linux 6.1+; elsewhere the hint fails harmlessly). */
            if (t->mapped) madvise(chunk, HUGE_PAGE, MADV_HUGEPAGE);
            if (t->mapped == BLOCKS_PER_GROWTH) {
                madvise(t->base, HUGE_PAGE, MADV_HUGEPAGE);
                madvise(t->base, HUGE_PAGE, MADV_COLLAPSE);
            }
#endif
            t->mapped += BLOCKS_PER_GROWTH;
        }
        b = t->base + t->used++;
    }
    memset(b, 0, sizeof *b);
    return b;
}

void vram_blocks_delete(vram_block_table_t *t, vram_pool_block_t *b)
{
    if (vram_blocks_homed(t, b)) {
        b->addr = 0; /* an empty bucket slot */
        t->homed--;
        return;
    }
    b->next = t->spare;
    t->spare = vram_block_id(t, b);
}

vram_pool_block_t *vram_blocks_home(const vram_block_table_t *t, uintptr_t addr)
{
    vram_pool_block_t *slots = vram_blocks_bucket(t, addr);
    if (!slots[0].addr) return &slots[0];
    if (!slots[1].addr) return &slots[1];
    return NULL;
}

vram_pool_block_t *vram_blocks_find_homed(const vram_block_table_t *t, uintptr_t addr)
{
    /* Free blocks may sit in buckets too (they stay where they were
     * allocated): only an allocated one answers. */
    vram_pool_block_t *slots = vram_blocks_bucket(t, addr);
    if (slots[0].addr == addr && slots[0].allocated) return &slots[0];
    if (slots[1].addr == addr && slots[1].allocated) return &slots[1];
    return NULL;
}

vram_pool_block_t *vram_blocks_move(vram_block_table_t *t, vram_pool_block_t *b,
                                    vram_pool_block_t *to)
{
    *to = *b;
    vram_block_id_t id = vram_block_id(t, to);
    if (to->prev)
        t->base[to->prev].next = id;
    else
        to->segment->first = id;
    if (to->next) t->base[to->next].prev = id;
    if (vram_blocks_homed(t, to)) t->homed++;
    return to;
}
