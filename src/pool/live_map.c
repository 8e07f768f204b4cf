/* Address of an allocated block -> its block id, for vram_pool_free: the
 * pool's overflow map, for blocks whose home bucket was full (blocks.c).
 *
 * Open addressing with linear probing and backward-shift deletion (no
 * tombstones), load <= 1/2. A slot is 8 bytes: the block's id and a tag,
 * the address in 512-byte units truncated to 32 bits. The home slot is a hash
 * of the tag alone, so deletion can move entries without reading their
 * blocks; a tag match is confirmed against the block's address (tags of
 * addresses 2 TiB apart collide, which costs a probe, never a wrong answer).
 * Half the size of a (key, pointer) table. */
#include "pool/pool_internal.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define HUGE_PAGE ((size_t)2 << 20)

static uint32_t tag_of(uintptr_t addr)
{
    return (uint32_t)(addr / VRAM_POOL_ALIGN);
}

static size_t home_of(const vram_live_map_t *m, uint32_t tag)
{
    /* Fibonacci hashing: the multiply spreads the low bits into the high ones. */
    return (size_t)(((uint64_t)tag * 0x9E3779B97F4A7C15ull) >> m->shift);
}

static int init_slots(vram_live_map_t *m, size_t capacity)
{
    size_t cap = 16;
    int bits = 4;
    while (cap < capacity) {
        cap <<= 1;
        bits++;
    }
    size_t bytes = cap * sizeof *m->slots;
    if (bytes >= HUGE_PAGE) {
        /* Big tables in huge pages where the kernel allows: fewer TLB misses
         * for lookups that are random by design. */
        m->slots = aligned_alloc(HUGE_PAGE, bytes);
#ifdef MADV_HUGEPAGE
        if (m->slots) madvise(m->slots, bytes, MADV_HUGEPAGE); /* a hint: failure is fine */
#endif
        if (m->slots) memset(m->slots, 0, bytes);
    } else {
        m->slots = calloc(cap, sizeof *m->slots);
    }
    if (!m->slots) return vram_fail(VRAM_ENOMEM, "pool: out of host memory for the block map");
    m->mask = cap - 1;
    m->shift = 64 - bits;
    m->count = 0;
    return 0;
}

int vram_live_map_init(vram_live_map_t *m, size_t capacity)
{
    return init_slots(m, capacity);
}

void vram_live_map_release(vram_live_map_t *m)
{
    free(m->slots);
    m->slots = NULL;
    m->mask = 0;
    m->count = 0;
}

static void put_slot(vram_live_map_t *m, vram_live_slot_t s)
{
    size_t i = home_of(m, s.tag);
    while (m->slots[i].id)
        i = (i + 1) & m->mask;
    m->slots[i] = s;
    m->count++;
}

int vram_live_map_reserve(vram_live_map_t *m)
{
    if ((m->count + 1) * 2 <= m->mask + 1) return 0;
    vram_live_map_t bigger;
    if (init_slots(&bigger, (m->mask + 1) * 2)) return VRAM_ENOMEM;
    for (size_t i = 0; i <= m->mask; i++)
        if (m->slots[i].id) put_slot(&bigger, m->slots[i]);
    vram_live_map_release(m);
    *m = bigger;
    return 0;
}

void vram_live_map_put(vram_live_map_t *m, const vram_block_table_t *blocks,
                       const vram_pool_block_t *b)
{
    put_slot(m, (vram_live_slot_t){tag_of(b->addr), vram_block_id(blocks, b)});
}

static size_t find(const vram_live_map_t *m, const vram_block_table_t *blocks, uintptr_t addr)
{
    uint32_t tag = tag_of(addr);
    size_t i = home_of(m, tag);
    for (; m->slots[i].id; i = (i + 1) & m->mask)
        if (m->slots[i].tag == tag && vram_block_at(blocks, m->slots[i].id)->addr == addr) return i;
    return SIZE_MAX;
}

vram_pool_block_t *vram_live_map_get(const vram_live_map_t *m, const vram_block_table_t *blocks,
                                     uintptr_t addr)
{
    size_t i = find(m, blocks, addr);
    return i == SIZE_MAX ? NULL : vram_block_at(blocks, m->slots[i].id);
}

vram_pool_block_t *vram_live_map_take(vram_live_map_t *m, const vram_block_table_t *blocks,
                                      uintptr_t addr)
{
    size_t i = find(m, blocks, addr);
    if (i == SIZE_MAX) return NULL;
    vram_pool_block_t *found = vram_block_at(blocks, m->slots[i].id);
    /* Backward shift: move later entries of the cluster into the hole when
     * their home slot does not lie (cyclically) between the hole and them. */
    size_t hole = i, j = i;
    for (;;) {
        j = (j + 1) & m->mask;
        if (!m->slots[j].id) break;
        size_t home = home_of(m, m->slots[j].tag);
        bool stays = hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
        if (stays) continue;
        m->slots[hole] = m->slots[j];
        hole = j;
    }
    m->slots[hole] = (vram_live_slot_t){0, 0};
    m->count--;
    return found;
}
