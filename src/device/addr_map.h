/* A process-local map from an allocation's address to a value (its size or
 * its slot in the sim state file), so free() finds what it needs in O(1).
 * Not thread-safe: the owning context's lock guards it. */
#ifndef VRAM_DEVICE_ADDR_MAP_H
#define VRAM_DEVICE_ADDR_MAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint64_t *keys; /* 0 = empty, 1 = deleted (addresses are never 0 or 1) */
    uint64_t *values;
    size_t cap;  /* power of two, or 0 */
    size_t used; /* live + deleted keys */
    size_t live;
} vram_addr_map_t;

/* Inserts or replaces; false when out of memory. */
bool vram_addr_map_put(vram_addr_map_t *map, uint64_t key, uint64_t value);
/* Finds key; when `remove` is set, deletes it too. */
bool vram_addr_map_take(vram_addr_map_t *map, uint64_t key, uint64_t *value, bool remove);
/* Calls fn for every live entry (the map must not change meanwhile). */
void vram_addr_map_each(const vram_addr_map_t *map, void (*fn)(uint64_t, uint64_t, void *),
                        void *arg);
void vram_addr_map_clear(vram_addr_map_t *map);

#endif
