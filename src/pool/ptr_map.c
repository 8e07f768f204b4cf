/* Key -> pointer (address -> allocated block in the pool, id -> slot in traces),
 * open addressing with linear probing. Deletion shifts later entries back
 * instead of leaving tombstones, so lookups stay short however many
 * allocations come and go. Load factor stays <= 1/2. */
#include "pool/pool_internal.h"

#include <stdlib.h>

static size_t slot_of(const vram_ptr_map_t *m, uintptr_t key)
{
    /* Addresses are 512-aligned: multiply to spread the high bits, fold down. */
    uint64_t h = (uint64_t)key * 0x9E3779B97F4A7C15ull;
    return (size_t)(h ^ (h >> 29)) & m->mask;
}

int vram_ptr_map_init(vram_ptr_map_t *m, size_t capacity)
{
    size_t cap = 16;
    while (cap < capacity)
        cap <<= 1;
    m->slots = calloc(cap, sizeof *m->slots);
    if (!m->slots) return vram_fail(VRAM_ENOMEM, "pool: out of host memory for a hash map");
    m->mask = cap - 1;
    m->count = 0;
    return 0;
}

void vram_ptr_map_release(vram_ptr_map_t *m)
{
    free(m->slots);
    m->slots = NULL;
    m->mask = 0;
    m->count = 0;
}

static void put_unchecked(vram_ptr_map_t *m, uintptr_t key, void *value)
{
    size_t i = slot_of(m, key);
    while (m->slots[i].value && m->slots[i].key != key)
        i = (i + 1) & m->mask;
    if (!m->slots[i].value) m->count++;
    m->slots[i] = (vram_ptr_map_entry_t){key, value};
}

static int grow(vram_ptr_map_t *m)
{
    vram_ptr_map_t bigger;
    if (vram_ptr_map_init(&bigger, (m->mask + 1) * 2)) return VRAM_ENOMEM;
    for (size_t i = 0; i <= m->mask; i++)
        if (m->slots[i].value) put_unchecked(&bigger, m->slots[i].key, m->slots[i].value);
    vram_ptr_map_release(m);
    *m = bigger;
    return 0;
}

int vram_ptr_map_put(vram_ptr_map_t *m, uintptr_t key, void *value)
{
    if ((m->count + 1) * 2 > m->mask + 1 && grow(m)) return VRAM_ENOMEM;
    put_unchecked(m, key, value);
    return 0;
}

void *vram_ptr_map_get(const vram_ptr_map_t *m, uintptr_t key)
{
    size_t i = slot_of(m, key);
    while (m->slots[i].value) {
        if (m->slots[i].key == key) return m->slots[i].value;
        i = (i + 1) & m->mask;
    }
    return NULL;
}

void *vram_ptr_map_take(vram_ptr_map_t *m, uintptr_t key)
{
    size_t i = slot_of(m, key);
    while (m->slots[i].value && m->slots[i].key != key)
        i = (i + 1) & m->mask;
    void *found = m->slots[i].value;
    if (!found) return NULL;
    /* Backward shift: move later entries of the cluster into the hole when
     * their home slot does not lie (cyclically) between the hole and them. */
    size_t hole = i, j = i;
    for (;;) {
        j = (j + 1) & m->mask;
        if (!m->slots[j].value) break;
        size_t home = slot_of(m, m->slots[j].key);
        bool stays = hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
        if (stays) continue;
        m->slots[hole] = m->slots[j];
        hole = j;
    }
    m->slots[hole] = (vram_ptr_map_entry_t){0, NULL};
    m->count--;
    return found;
}
