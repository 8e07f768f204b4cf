/* The front cache: freed blocks kept whole for the next request of the same
 * rounded size on the same stream (see pool_internal.h and docs/pool.md,
 * "Front cache"). Everything here runs under the pool lock. */
#include "pool/pool_internal.h"

#include <inttypes.h>
#include <stdio.h>

/* An alloc that misses a set holding another size's blocks counts against
 * them; after this many such misses in a row the set goes back to the free
 * index and serves the size that asks (a size nobody frees any more must
 * not hold its set, nor its memory, for ever). */
#define FRONT_MISSES_TO_EVICT 4

static vram_front_set_t *set_of(vram_front_t *f, uintptr_t stream, uint32_t units)
{
    uint64_t h =
        ((uint64_t)units ^ ((uint64_t)stream * 0x9E3779B97F4A7C15ull)) * 0xff51afd7ed558ccdull;
    return &f->sets[h >> (64 - VRAM_FRONT_SET_BITS)];
}

/* The cached block leaves the cache as an (unaccounted) free block: to the
 * index, merged with its free neighbours. */
static void flush_set(vram_pool_t *pool, vram_front_set_t *s)
{
    vram_front_t *f = &pool->front;
    for (uint32_t i = 0; i < s->n; i++) {
        vram_pool_block_t *b = pool->blocks.base + s->ids[i];
        f->count--;
        f->bytes -= b->size;
        b->cached = 0;
        vram_pool_release_block(pool, b);
    }
    s->n = 0;
    s->misses = 0;
}

static uint32_t units_of(size_t rounded)
{
    /* Blocks of 2 TiB and more are never cached (the key would not fit). */
    uint64_t units = rounded / VRAM_POOL_ALIGN;
    return units > UINT32_MAX ? 0 : (uint32_t)units;
}

bool vram_front_put(vram_pool_t *pool, vram_pool_block_t *b, size_t rounded)
{
    vram_front_t *f = &pool->front;
    uint32_t units = units_of(rounded);
    vram_front_set_t *s = set_of(f, b->stream, units);
    /* Only into a set an allocation of this size claimed (a size that is
     * asked for), while it has room and the cache stays under its bound. */
    uint64_t reserved = (uint64_t)pool->stats.reserved_bytes[VRAM_POOL_STAT_ALL].current;
    if (!units || s->units != units || s->stream != b->stream || s->n == VRAM_FRONT_DEPTH ||
        f->bytes + b->size > reserved / VRAM_FRONT_RESERVED_SHARE)
        return false;
    s->ids[s->n] = vram_block_id(&pool->blocks, b);
    s->addrs[s->n++] = b->addr;
    s->misses = 0;
    f->count++;
    f->bytes += b->size;
    b->cached = 1;
    return true;
}

vram_pool_block_t *vram_front_take(vram_pool_t *pool, uintptr_t stream, size_t rounded)
{
    vram_front_t *f = &pool->front;
    uint32_t units = units_of(rounded);
    vram_front_set_t *s = set_of(f, stream, units);
    if (s->units == units && s->stream == stream) {
        if (!s->n) return NULL;
        /* The lowest address, as best fit breaks ties in the bins: it keeps
         * an expandable segment's blocks low (the most recently freed, a
         * first version, let the extent creep: resnet18_train 1.036 ->
         * 1.056 and calls in every pass). */
        uint32_t low = 0;
        for (uint32_t i = 1; i < s->n; i++)
            if (s->addrs[i] < s->addrs[low]) low = i;
        vram_pool_block_t *b = pool->blocks.base + s->ids[low];
        s->n--;
        s->ids[low] = s->ids[s->n];
        s->addrs[low] = s->addrs[s->n];
        f->count--;
        f->bytes -= b->size;
        b->cached = 0;
        return b;
    }
    /* A miss on a set of another size: claim it when it is empty, or when
     * its blocks were passed over often enough. */
    if (s->n && ++s->misses < FRONT_MISSES_TO_EVICT) return NULL;
    if (s->n) flush_set(pool, s);
    s->units = units;
    s->stream = stream;
    s->misses = 0;
    return NULL;
}

size_t vram_front_flush(vram_pool_t *pool, int kind, uintptr_t stream)
{
    vram_front_t *f = &pool->front;
    size_t flushed = 0;
    for (size_t i = 0; i < VRAM_FRONT_SETS && f->count; i++) {
        vram_front_set_t *s = &f->sets[i];
        if (!s->n) continue;
        int set_kind = (size_t)s->units * VRAM_POOL_ALIGN <= VRAM_POOL_SMALL_MAX
                           ? VRAM_POOL_KIND_SMALL
                           : VRAM_POOL_KIND_LARGE;
        if (kind >= 0 && (set_kind != kind || s->stream != stream)) continue;
        flushed += s->n;
        flush_set(pool, s);
    }
    return flushed;
}

static vram_front_set_t *set_holding(vram_pool_t *pool, const vram_pool_block_t *b)
{
    size_t rounded = vram_pool_round(pool->strategy, b->u.live.requested);
    return set_of(&pool->front, b->stream, units_of(rounded));
}

void vram_front_remove(vram_pool_t *pool, vram_pool_block_t *b)
{
    vram_front_t *f = &pool->front;
    vram_front_set_t *s = set_holding(pool, b);
    vram_block_id_t id = vram_block_id(&pool->blocks, b);
    uint32_t i = 0;
    while (s->ids[i] != id)
        i++; /* b is in this set: found within VRAM_FRONT_DEPTH steps */
    s->n--;
    s->ids[i] = s->ids[s->n];
    s->addrs[i] = s->addrs[s->n];
    f->count--;
    f->bytes -= b->size;
    b->cached = 0;
}

void vram_front_moved(vram_pool_t *pool, vram_block_id_t from, const vram_pool_block_t *to)
{
    vram_front_set_t *s = set_holding(pool, to);
    for (uint32_t i = 0; i < s->n; i++)
        if (s->ids[i] == from) s->ids[i] = vram_block_id(&pool->blocks, to);
}

int vram_front_check(const vram_pool_t *pool, size_t walked, uint64_t walked_bytes, char *err,
                     size_t len)
{
    const vram_front_t *f = &pool->front;
    size_t count = 0;
    uint64_t bytes = 0;
    for (size_t i = 0; i < VRAM_FRONT_SETS; i++) {
        const vram_front_set_t *s = &f->sets[i];
        if (s->n > VRAM_FRONT_DEPTH || (s->n && !s->units)) {
            snprintf(err, len, "front cache set %zu holds %u blocks of %u units", i, s->n,
                     s->units);
            return -1;
        }
        for (uint32_t j = 0; j < s->n; j++) {
            const vram_pool_block_t *b = pool->blocks.base + s->ids[j];
            size_t rounded = (size_t)s->units * VRAM_POOL_ALIGN;
            int kind = rounded <= VRAM_POOL_SMALL_MAX ? VRAM_POOL_KIND_SMALL : VRAM_POOL_KIND_LARGE;
            if (!b->cached || b->allocated || b->addr != s->addrs[j] || b->stream != s->stream ||
                b->kind != kind || b->size < rounded ||
                set_of((vram_front_t *)f, s->stream, s->units) != s ||
                vram_pool_round(pool->strategy, b->u.live.requested) != rounded) {
                snprintf(err, len,
                         "front cache set %zu entry %u (block 0x%" PRIxPTR
                         ") is not a cached block of %zu bytes on its stream",
                         i, j, b->addr, rounded);
                return -1;
            }
            count++;
            bytes += b->size;
        }
    }
    if (count != f->count || bytes != f->bytes || count != walked || bytes != walked_bytes) {
        snprintf(err, len,
                 "front cache holds %zu blocks (%" PRIu64 " bytes), counts %zu (%" PRIu64
                 "), segments have %zu (%" PRIu64 ")",
                 count, bytes, f->count, f->bytes, walked, walked_bytes);
        return -1;
    }
    return 0;
}
