/* Which granules of an expandable segment are backed by physical memory,
 * and by which chunk (one map call each, unmapped whole). A segment's
 * blocks tile its extent; free blocks may lie over unmapped granules, and
 * a block is mapped when it is handed out (docs/pool.md, "Expandable
 * segments"). */
#include "pool/pool_internal.h"

#include <stdlib.h>
#include <string.h>

static bool is_mapped(const vram_pool_reservation_t *r, size_t i)
{
    return (r->mapped[i / 64] >> (i % 64)) & 1;
}

static void set_mapped(vram_pool_reservation_t *r, size_t i, size_t n, bool on)
{
    for (size_t j = i; j < i + n; j++) {
        uint64_t bit = (uint64_t)1 << (j % 64);
        r->mapped[j / 64] = on ? r->mapped[j / 64] | bit : r->mapped[j / 64] & ~bit;
    }
}

int vram_granules_reserve(vram_pool_reservation_t *r, size_t granules)
{
    if (granules <= r->cap) return 0;
    size_t cap = r->cap ? r->cap : 64;
    while (cap < granules)
        cap *= 2;
    uint32_t *chunk = realloc(r->chunk, cap * sizeof *chunk);
    if (chunk) r->chunk = chunk;
    uint64_t *mapped = chunk ? realloc(r->mapped, (cap / 64) * sizeof *mapped) : NULL;
    if (!chunk || !mapped)
        return vram_fail(VRAM_ENOMEM, "pool: out of host memory for granule metadata");
    r->mapped = mapped;
    memset(r->chunk + r->cap, 0, (cap - r->cap) * sizeof *r->chunk);
    memset(r->mapped + r->cap / 64, 0, (cap - r->cap) / 64 * sizeof *r->mapped);
    r->cap = cap;
    return 0;
}

void vram_granules_release(vram_pool_reservation_t *r)
{
    free(r->chunk);
    free(r->mapped);
    r->chunk = NULL;
    r->mapped = NULL;
    r->cap = 0;
}

/* Granule range [*i, *n) covering [lo, hi). */
static void span(const vram_pool_t *pool, const vram_pool_reservation_t *r, uintptr_t lo,
                 uintptr_t hi, size_t *i, size_t *end)
{
    size_t g = pool->granularity;
    *i = (lo - r->base) / g;
    *end = (hi - r->base + g - 1) / g;
}

size_t vram_granules_unmapped_bytes(const vram_pool_t *pool, const vram_pool_reservation_t *r,
                                    uintptr_t lo, uintptr_t hi)
{
    size_t i, end, n = 0;
    span(pool, r, lo, hi, &i, &end);
    for (; i < end; i++)
        n += !is_mapped(r, i);
    return n * pool->granularity;
}

int vram_granules_map(vram_pool_t *pool, vram_pool_reservation_t *r, uintptr_t lo, uintptr_t hi)
{
    size_t i, end, g = pool->granularity;
    span(pool, r, lo, hi, &i, &end);
    for (size_t n; (n = vram_granules_unmapped_run(r, i, end, &i));) {
        int rc = pool->src.vmm_map(pool->src.user, (void *)(r->base + i * g), n * g);
        if (rc) return rc;
        r->chunk[i] = (uint32_t)n;
        set_mapped(r, i, n, true);
        r->mapped_bytes += n * g;
        pool->unmapped_extent -= n * g;
        pool->stats.num_device_map++;
        vram_pool_stat_update(pool->stats.reserved_bytes, r->kind, (int64_t)(n * g));
        i += n;
    }
    return 0;
}

/* The granules wholly inside [lo, hi): [*i, *end). */
static void inside(const vram_pool_t *pool, const vram_pool_reservation_t *r, uintptr_t lo,
                   uintptr_t hi, size_t *i, size_t *end)
{
    size_t g = pool->granularity;
    *i = (lo - r->base + g - 1) / g;
    *end = hi > lo ? (hi - r->base) / g : *i;
}

/* The next chunk lying wholly inside granules [*i, end): *i moves to its
 * first granule; returns its length, 0 when there is none (a chunk that
 * starts before the first *i is not inside, nor one that runs past end). */
static size_t next_chunk_inside(const vram_pool_reservation_t *r, size_t *i, size_t end)
{
    while (*i < end && !r->chunk[*i])
        (*i)++;
    return *i < end && *i + r->chunk[*i] <= end ? r->chunk[*i] : 0;
}

size_t vram_granules_unmap_inside(vram_pool_t *pool, vram_pool_reservation_t *r, uintptr_t lo,
                                  uintptr_t hi)
{
    size_t g = pool->granularity, i, end, released = 0;
    inside(pool, r, lo, hi, &i, &end);
    for (size_t n; (n = next_chunk_inside(r, &i, end));) {
        pool->src.vmm_unmap(pool->src.user, (void *)(r->base + i * g), n * g);
        pool->stats.num_device_unmap++;
        r->chunk[i] = 0;
        set_mapped(r, i, n, false);
        r->mapped_bytes -= n * g;
        pool->unmapped_extent += n * g;
        vram_pool_stat_update(pool->stats.reserved_bytes, r->kind, -(int64_t)(n * g));
        released += n * g;
        i += n;
    }
    return released;
}

size_t vram_granules_unmapped_run(const vram_pool_reservation_t *r, size_t i, size_t end,
                                  size_t *at)
{
    while (i < end && is_mapped(r, i))
        i++;
    size_t n = 0;
    while (i + n < end && !is_mapped(r, i + n))
        n++;
    *at = i;
    return n;
}

size_t vram_granules_chunk_inside(const vram_pool_t *pool, const vram_pool_reservation_t *r,
                                  uintptr_t lo, uintptr_t hi, size_t skip, size_t skip_end,
                                  size_t max, size_t *at)
{
    size_t best = 0, i, end;
    inside(pool, r, lo, hi, &i, &end);
    for (size_t n; (n = next_chunk_inside(r, &i, end)); i += n) {
        if (n <= max && n > best && (i + n <= skip || i >= skip_end)) {
            best = n;
            *at = i;
        }
    }
    return best;
}

int vram_granules_move(vram_pool_t *pool, vram_pool_reservation_t *r, size_t from, size_t to)
{
    size_t g = pool->granularity, n = r->chunk[from];
    int rc = pool->src.vmm_move(pool->src.user, (void *)(r->base + from * g),
                                (void *)(r->base + to * g), n * g);
    if (rc) return rc;
    r->chunk[from] = 0;
    set_mapped(r, from, n, false);
    r->chunk[to] = (uint32_t)n;
    set_mapped(r, to, n, true);
    pool->stats.num_device_move++;
    return 0;
}

uintptr_t vram_granules_mapped_end(const vram_pool_t *pool, const vram_pool_reservation_t *r,
                                   uintptr_t end)
{
    size_t g = pool->granularity, n = (end - r->base) / g;
    while (n && !is_mapped(r, n - 1))
        n--;
    return r->base + n * g;
}

int vram_granules_check(const vram_pool_t *pool, const vram_pool_reservation_t *r, size_t extent,
                        char *err, size_t len)
{
    size_t g = pool->granularity, granules = extent / g, mapped = 0;
    if (granules > r->cap) {
        snprintf(err, len, "granule table of %zu entries for %zu granules", r->cap, granules);
        return -1;
    }
    for (size_t i = 0; i < r->cap;) {
        size_t n = r->chunk[i];
        if (!n) {
            if (is_mapped(r, i)) {
                snprintf(err, len, "granule %zu mapped outside any chunk", i);
                return -1;
            }
            i++;
            continue;
        }
        if (i + n > granules) {
            snprintf(err, len, "chunk at granule %zu (%zu) runs past the extent", i, n);
            return -1;
        }
        for (size_t j = i; j < i + n; j++)
            if (!is_mapped(r, j) || (j > i && r->chunk[j])) {
                snprintf(err, len, "chunk at granule %zu is not mapped whole", i);
                return -1;
            }
        mapped += n;
        i += n;
    }
    if (mapped * g != r->mapped_bytes) {
        snprintf(err, len, "%zu granules mapped, %zu bytes counted", mapped, r->mapped_bytes);
        return -1;
    }
    return 0;
}
