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
 * pages: at 100,000 live blocks the slab and the buckets take ~20 MB that
 * would otherwise span ~5,000 4 KiB pages, and on a VM a TLB miss on top of
 * a cache miss costs a two-level page walk. */
#define HUGE_PAGE         ((size_t)2 << 20)
#define BLOCKS_PER_GROWTH ((uint32_t)(HUGE_PAGE / sizeof(vram_pool_block_t)))

/* Buckets are mapped 2 MiB (16,384 buckets) at a time, like the slab. */
#define BUCKETS_PER_GROWTH ((uint32_t)(HUGE_PAGE / (2 * sizeof(vram_pool_block_t))))
#define LEVEL_MIN          5 /* 32 buckets to start with */

/* Makes chunk `n` (2 MiB) of the range starting at `first` read-write. Not
 * the first chunk: a small pool should not pay 2 MiB. When the second one
 * is mapped the first is collapsed into a huge page too (Linux 6.1+;
 * elsewhere the hint fails harmlessly). */
static int map_chunk(vram_pool_block_t *first, size_t n)
{
    char *chunk = (char *)first + n * HUGE_PAGE;
    if (mprotect(chunk, HUGE_PAGE, PROT_READ | PROT_WRITE)) return VRAM_ENOMEM;
#ifdef MADV_HUGEPAGE
    if (n) madvise(chunk, HUGE_PAGE, MADV_HUGEPAGE);
    if (n == 1) {
        madvise(first, HUGE_PAGE, MADV_HUGEPAGE);
        madvise(first, HUGE_PAGE, MADV_COLLAPSE);
    }
#endif
    return 0;
}

static int map_buckets(vram_block_table_t *t)
{
    if (t->buckets_mapped == t->slab_max / 2 ||
        map_chunk(t->base + t->slab_max, t->buckets_mapped / BUCKETS_PER_GROWTH))
        return VRAM_ENOMEM;
    t->buckets_mapped += BUCKETS_PER_GROWTH;
    return 0;
}

vram_pool_block_t *vram_blocks_add_bucket(vram_block_table_t *t)
{
    size_t count = vram_blocks_bucket_count(t);
    if (count >= t->buckets_mapped && map_buckets(t)) return NULL;
    vram_pool_block_t *splitting = t->base + t->slab_max + 2 * (size_t)t->split;
    if (++t->split == (uint32_t)1 << t->level) {
        t->level++;
        t->split = 0;
    }
    return splitting;
}

int vram_blocks_reserve(vram_block_table_t *t)
{
    /* As much address space as the process may have, up to 16 GiB: under a
     * low `ulimit -v` a pool holds fewer blocks rather than none. */
    size_t ids = VRAM_BLOCK_IDS_MAX, bytes;
    void *map;
    for (;;) {
        bytes = ids * sizeof(vram_pool_block_t) + ids / 8 + HUGE_PAGE; /* blocks, free map */
        map = mmap(NULL, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (map != MAP_FAILED) break;
        if (ids == VRAM_BLOCK_IDS_MIN)
            return vram_fail(VRAM_ENOMEM, "pool: cannot reserve address space for block metadata");
        ids /= 2;
    }
    memset(t, 0, sizeof *t);
    t->reservation = map;
    t->reserved = bytes;
    t->base = (vram_pool_block_t *)(((uintptr_t)map + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1));
    t->slab_max = (uint32_t)(ids / 2);
    t->free_map = (uint64_t *)(t->base + ids);
    if (mprotect(t->free_map, ids / 8, PROT_READ | PROT_WRITE)) {
        munmap(map, bytes);
        t->reservation = NULL;
        return vram_fail(VRAM_ENOMEM, "pool: out of host memory for the block free map");
    }
    t->used = 1; /* id 0 is "none" */
    t->mapped = BLOCKS_PER_GROWTH;
    t->level = LEVEL_MIN;
    if (map_chunk(t->base, 0) || map_buckets(t)) {
        munmap(map, bytes);
        t->reservation = NULL;
        return vram_fail(VRAM_ENOMEM, "pool: out of host memory for blocks");
    }
    /* The pages every first allocation touches (the slab's first blocks, the
     * first buckets, the free map's first word) are faulted in now, at
     * creation, rather than one page fault each (2-3 µs on a VM) inside the
     * first allocation. A hint: without it the first use just pays. */
#ifdef MADV_POPULATE_WRITE
    madvise(t->base, 4096, MADV_POPULATE_WRITE);
    madvise(t->base + t->slab_max, 4096, MADV_POPULATE_WRITE);
    madvise(t->free_map, 4096, MADV_POPULATE_WRITE);
#endif
    return 0;
}

void vram_blocks_release(vram_block_table_t *t)
{
    if (t->reservation) munmap(t->reservation, t->reserved);
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
            if (t->mapped == t->slab_max || map_chunk(t->base, t->mapped / BLOCKS_PER_GROWTH))
                return NULL;
            t->mapped += BLOCKS_PER_GROWTH;
        }
        b = t->base + t->used++;
    }
    memset(b, 0, sizeof *b);
    return b;
}

void vram_blocks_delete(vram_block_table_t *t, vram_pool_block_t *b)
{
    vram_block_set_free(t, vram_block_id(t, b), false);
    if (vram_blocks_homed(t, b)) {
        b->addr = 0; /* an empty bucket slot */
        t->homed--;
        return;
    }
    b->next = t->spare;
    t->spare = vram_block_id(t, b);
}

/* The free slot is picked with arithmetic: which of the two it is follows
 * no pattern on kv_cache_server (1-2 ns per operation there as a branch);
 * only "none" (a full bucket, rare) is a branch. The same for the lookup
 * of vram_blocks_find_homed measured slower on the random mix (probably
 * because its buckets miss the cache there, and the second slot's load
 * then waits on the first slot's). */
vram_pool_block_t *vram_blocks_home(const vram_block_table_t *t, uintptr_t addr)
{
    vram_pool_block_t *slots = vram_blocks_bucket(t, addr);
    vram_pool_block_t *slot = slots + (slots[0].addr != 0); /* slot 0 when empty */
    return slot->addr ? NULL : slot;
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
    vram_block_set_free(t, id, vram_block_free_at(t, vram_block_id(t, b)));
    if (to->prev)
        t->base[to->prev].next = id;
    else
        to->segment->first = id;
    if (to->next)
        t->base[to->next].prev = id;
    else if (to->expandable)
        to->segment->last = id; /* kept for expandable segments only: they grow at the end */
    if (vram_blocks_homed(t, to)) t->homed++;
    return to;
}
