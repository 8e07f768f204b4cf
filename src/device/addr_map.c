/* Open-addressing hash map keyed by address (linear probing, tombstones). */
#include "device/addr_map.h"

#include <stdlib.h>

enum { EMPTY = 0, DELETED = 1 };

static size_t slot_of(uint64_t key, size_t cap)
{
    /* Addresses are page- or block-aligned: mix the bits before masking. */
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdull;
    key ^= key >> 33;
    return (size_t)key & (cap - 1);
}

static bool grow(vram_addr_map_t *map)
{
    size_t cap = map->cap ? map->cap : 64;
    while (cap < 2 * (map->live + 1) * 2)
        cap *= 2;
    uint64_t *keys = calloc(cap, sizeof *keys);
    uint64_t *values = calloc(cap, sizeof *values);
    if (!keys || !values) {
        free(keys);
        free(values);
        return false;
    }
    for (size_t i = 0; i < map->cap; i++) {
        if (map->keys[i] <= DELETED) continue;
        size_t s = slot_of(map->keys[i], cap);
        while (keys[s] != EMPTY)
            s = (s + 1) & (cap - 1);
        keys[s] = map->keys[i];
        values[s] = map->values[i];
    }
    free(map->keys);
    free(map->values);
    map->keys = keys;
    map->values = values;
    map->cap = cap;
    map->used = map->live;
    return true;
}

bool vram_addr_map_put(vram_addr_map_t *map, uint64_t key, uint64_t value)
{
    if ((map->used + 1) * 4 > map->cap * 3 && !grow(map)) return false;
    size_t s = slot_of(key, map->cap);
    size_t tomb = SIZE_MAX;
    while (map->keys[s] != EMPTY) {
        if (map->keys[s] == key) {
            map->values[s] = value;
            return true;
        }
        if (map->keys[s] == DELETED && tomb == SIZE_MAX) tomb = s;
        s = (s + 1) & (map->cap - 1);
    }
    if (tomb != SIZE_MAX)
        s = tomb;
    else
        map->used++;
    map->keys[s] = key;
    map->values[s] = value;
    map->live++;
    return true;
}

bool vram_addr_map_take(vram_addr_map_t *map, uint64_t key, uint64_t *value, bool remove)
{
    if (!map->cap || key <= DELETED) return false;
    size_t s = slot_of(key, map->cap);
    while (map->keys[s] != EMPTY) {
        if (map->keys[s] == key) {
            if (value) *value = map->values[s];
            if (remove) {
                map->keys[s] = DELETED;
                map->live--;
            }
            return true;
        }
        s = (s + 1) & (map->cap - 1);
    }
    return false;
}

void vram_addr_map_each(const vram_addr_map_t *map, void (*fn)(uint64_t, uint64_t, void *),
                        void *arg)
{
    for (size_t i = 0; i < map->cap; i++)
        if (map->keys[i] > DELETED) fn(map->keys[i], map->values[i], arg);
}

void vram_addr_map_clear(vram_addr_map_t *map)
{
    free(map->keys);
    free(map->values);
    *map = (vram_addr_map_t){0};
}
