/* Key -> pointer (address -> allocated block in the pool, id -> slot in traces), open addressing with linear probing. Deletion
 * shifts later entries back instead of leaving tombstones, so lookups stay
 * short however many allocations come and go. Load factor stays <= 1/2. */
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
    while (cap < capacity) cap <<= 1;
    m->keys = calloc(cap, sizeof *m->keys);
    m->values = calloc(cap, sizeof *m->values);
    if (!m->keys || !m->values) {
        free(m->keys);
        free(m->values);
        return vram_fail(VRAM_ENOMEM, "pool: out of host memory for the block map");
    }
    m->mask = cap - 1;
    m->count = 0;
    return 0;
}

void vram_ptr_map_release(vram_ptr_map_t *m)
{
    free(m->keys);
    free(m->values);
    m->keys = NULL;
    m->values = NULL;
    m->mask = 0;
    m->count = 0;
}

static void put_unchecked(vram_ptr_map_t *m, uintptr_t key, void *b)
{
    size_t i = slot_of(m, key);
    while (m->values[i] && m->keys[i] != key) i = (i + 1) & m->mask;
    if (!m->values[i]) m->count++;
    m->keys[i] = key;
    m->values[i] = b;
}

static int grow(vram_ptr_map_t *m)
{
    vram_ptr_map_t bigger;
    if (vram_ptr_map_init(&bigger, (m->mask + 1) * 2)) return VRAM_ENOMEM;
    for (size_t i = 0; i <= m->mask; i++)
        if (m->values[i]) put_unchecked(&bigger, m->keys[i], m->values[i]);
    vram_ptr_map_release(m);
    *m = bigger;
    return 0;
}

int vram_ptr_map_put(vram_ptr_map_t *m, uintptr_t key, void *b)
{
    if ((m->count + 1) * 2 > m->mask + 1 && grow(m)) return VRAM_ENOMEM;
    put_unchecked(m, key, b);
    return 0;
}

void *vram_ptr_map_get(const vram_ptr_map_t *m, uintptr_t key)
{
    size_t i = slot_of(m, key);
    while (m->values[i]) {
        if (m->keys[i] == key) return m->values[i];
        i = (i + 1) & m->mask;
    }
    return NULL;
}

void *vram_ptr_map_take(vram_ptr_map_t *m, uintptr_t key)
{
    size_t i = slot_of(m, key);
    while (m->values[i] && m->keys[i] != key) i = (i + 1) & m->mask;
    void *found = m->values[i];
    if (!found) return NULL;
    /* Backward shift: move later entries of the cluster into the hole when
     * their home slot does not lie (cyclically) between the hole and them. */
    size_t hole = i, j = i;
    for (;;) {
        j = (j + 1) & m->mask;
        if (!m->values[j]) break;
        size_t home = slot_of(m, m->keys[j]);
        bool stays = hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
        if (stays) continue;
        m->keys[hole] = m->keys[j];
        m->values[hole] = m->values[j];
        hole = j;
    }
    m->values[hole] = NULL;
    m->keys[hole] = 0;
    m->count--;
    return found;
}
