/* One hash map for the library: a 64-bit key (an address, a trace id; never
 * 0) to a 64-bit value. Open addressing with linear probing and
 * backward-shift deletion, so lookups stay short however many entries come
 * and go. A zeroed map is empty and ready. Not thread-safe: the owner's lock
 * guards it. */
#ifndef VRAM_CORE_MAP_H
#define VRAM_CORE_MAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint64_t key; /* 0 = empty slot */
    uint64_t value;
} vram_map_entry_t;

typedef struct {
    vram_map_entry_t *slots; /* key and value side by side: one cache miss */
    size_t mask;             /* capacity - 1 (a power of two), 0 when unallocated */
    size_t count;
} vram_map_t;

/* Makes room for `more` new keys, so that many puts cannot fail for want of
 * memory; false (map unchanged) when out of memory. */
bool vram_map_reserve(vram_map_t *map, size_t more);
/* Inserts or replaces; false (map unchanged) when out of memory or key is 0. */
bool vram_map_put(vram_map_t *map, uint64_t key, uint64_t value);
/* Finds key and copies its value (value may be NULL); false when absent. */
bool vram_map_get(const vram_map_t *map, uint64_t key, uint64_t *value);
/* Like get, and removes the entry. */
bool vram_map_take(vram_map_t *map, uint64_t key, uint64_t *value);
/* Calls fn for every entry; the map must not change meanwhile. */
void vram_map_each(const vram_map_t *map, void (*fn)(uint64_t key, uint64_t value, void *arg),
                   void *arg);
/* Frees the slots; the map is empty and usable again. */
void vram_map_clear(vram_map_t *map);

#endif
