/* Growing a heap array by doubling, for the arrays that keep a count and a
 * capacity beside their pointer. */
#ifndef VRAM_CORE_ARRAY_H
#define VRAM_CORE_ARRAY_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

/* Doubles the capacity of items (elements of elem bytes; an empty array
 * gets first). Returns the moved array and sets *cap; on NULL (out of
 * memory, or the size would overflow) items and *cap are untouched. */
static inline void *vram_array_grow(void *items, size_t *cap, size_t elem, size_t first)
{
    size_t n = *cap ? 2 * *cap : first;
    if (n < *cap || n > SIZE_MAX / elem) return NULL;
    void *moved = realloc(items, n * elem);
    if (moved) *cap = n;
    return moved;
}

#endif
