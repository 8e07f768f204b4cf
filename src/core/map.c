/* Open-addressing hash map, load factor at most 1/2. */
#include "core/map.h"

#include <stdlib.h>

static size_t home_of(const vram_map_t *m, uint64_t key)
{
    /* Keys are often aligned addresses: mix the high bits down. */
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdull;
    key ^= key >> 33;
    return (size_t)key & m->mask;
}

static size_t find(const vram_map_t *m, uint64_t key)
{
    size_t i = home_of(m, key);
    while (m->slots[i].key && m->slots[i].key != key)
        i = (i + 1) & m->mask;
    return i;
}

static bool grow(vram_map_t *m)
{
    size_t cap = m->slots ? (m->mask + 1) * 2 : 64;
    vram_map_t bigger = {.slots = calloc(cap, sizeof *bigger.slots), .mask = cap - 1};
    if (!bigger.slots) return false;
    for (size_t i = 0; m->slots && i <= m->mask; i++)
        if (m->slots[i].key) bigger.slots[find(&bigger, m->slots[i].key)] = m->slots[i];
    bigger.count = m->count;
    free(m->slots);
    *m = bigger;
    return true;
}

bool vram_map_reserve(vram_map_t *m, size_t more)
{
    while (!m->slots || (m->count + more) * 2 > m->mask + 1)
        if (!grow(m)) return false;
    return true;
}

bool vram_map_put(vram_map_t *m, uint64_t key, uint64_t value)
{
    if (!key || !vram_map_reserve(m, 1)) return false;
    size_t i = find(m, key);
    if (!m->slots[i].key) m->count++;
    m->slots[i] = (vram_map_entry_t){key, value};
    return true;
}

bool vram_map_get(const vram_map_t *m, uint64_t key, uint64_t *value)
{
    if (!m->slots || !key) return false;
    size_t i = find(m, key);
    if (!m->slots[i].key) return false;
    if (value) *value = m->slots[i].value;
    return true;
}

bool vram_map_take(vram_map_t *m, uint64_t key, uint64_t *value)
{
    if (!m->slots || !key) return false;
    size_t hole = find(m, key);
    if (!m->slots[hole].key) return false;
    if (value) *value = m->slots[hole].value;
    /* Backward shift: pull later entries of the cluster into the hole unless
     * their home lies cyclically in (hole, j], where they already are. */
    for (size_t j = hole;;) {
        j = (j + 1) & m->mask;
        if (!m->slots[j].key) break;
        size_t home = home_of(m, m->slots[j].key);
        bool stays = hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
        if (stays) continue;
        m->slots[hole] = m->slots[j];
        hole = j;
    }
    m->slots[hole] = (vram_map_entry_t){0, 0};
    m->count--;
    return true;
}

void vram_map_each(const vram_map_t *m, void (*fn)(uint64_t, uint64_t, void *), void *arg)
{
    for (size_t i = 0; m->slots && i <= m->mask; i++)
        if (m->slots[i].key) fn(m->slots[i].key, m->slots[i].value, arg);
}

void vram_map_clear(vram_map_t *m)
{
    free(m->slots);
    *m = (vram_map_t){0};
}
