/* Statistics (PyTorch memory_stats meanings) and the consistency check that
 * the randomized tests run against the pool's own bookkeeping. */
#include "pool/pool_internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* The largest free block sits in the highest non-empty bin of some stream:
 * with exact-size ranks it is that bin's last block; with size classes
 * (consolidated) that one bin is scanned, which only this statistic does. */
static uint64_t largest_in_index(const vram_free_index_t *x, bool exact_rank)
{
    uint64_t best = 0;
    for (const vram_free_heap_t *h = x->heaps; h; h = h->next) {
        int top = vram_free_heap_top(h);
        if (top < 0) continue;
        uint64_t largest = vram_free_bin_largest(x, &h->bins[top], exact_rank);
        if (largest > best) best = largest;
    }
    return best;
}

uint64_t vram_pool_largest_free_locked(const vram_pool_t *pool)
{
    bool exact = pool->strategy != VRAM_POOL_CONSOLIDATED;
    uint64_t a = largest_in_index(&pool->free_blocks[0], exact);
    uint64_t b = largest_in_index(&pool->free_blocks[1], exact);
    if (b > a) a = b;
    /* The wildernesses of expandable segments are outside the bins. */
    for (const vram_pool_reservation_t *r = pool->reservations; r; r = r->next) {
        const vram_pool_block_t *w = vram_pool_wilderness(pool, r);
        if (w && w->size > a) a = w->size;
    }
    return a;
}

/* The public entries of a counter: all, small, large. */
static void counter_read(const vram_pool_counter_t *c, vram_pool_stat_t out[VRAM_POOL_STAT_KINDS_])
{
    static const int entry[2] = {VRAM_POOL_STAT_SMALL, VRAM_POOL_STAT_LARGE};
    vram_pool_stat_t all = {.peak = c->peak_all};
    for (int k = 0; k < 2; k++) {
        vram_pool_stat_t *e = &out[entry[k]];
        e->current = c->current[k];
        e->peak = c->peak[k];
        e->allocated = c->added[k];
        e->freed = c->added[k] - c->current[k];
        all.current += e->current;
        all.allocated += e->allocated;
        all.freed += e->freed;
    }
    out[VRAM_POOL_STAT_ALL] = all;
}

static void counter_reset_peaks(vram_pool_counter_t *c)
{
    c->peak[0] = c->current[0];
    c->peak[1] = c->current[1];
    c->peak_all = c->current[0] + c->current[1];
}

void vram_pool_stats_derive_locked(const vram_pool_t *pool, vram_pool_stats_t *out)
{
    *out = pool->stats;
    const vram_pool_counters_t *c = &pool->counters;
    counter_read(&c->allocation, out->allocation);
    counter_read(&c->allocated_bytes, out->allocated_bytes);
    counter_read(&c->requested_bytes, out->requested_bytes);
    counter_read(&c->inactive_split, out->inactive_split);
    counter_read(&c->inactive_split_bytes, out->inactive_split_bytes);
    /* Without cross-stream frees no block is freed-but-in-use, so "active"
     * is "allocation", update for update (peaks included): copied here
     * rather than kept twice on every allocation and free. */
    memcpy(out->active, out->allocation, sizeof out->active);
    memcpy(out->active_bytes, out->allocated_bytes, sizeof out->active_bytes);
    out->largest_free_block = vram_pool_largest_free_locked(pool);
    int64_t reserved = out->reserved_bytes[VRAM_POOL_STAT_ALL].current;
    int64_t cached = reserved - out->allocated_bytes[VRAM_POOL_STAT_ALL].current;
    /* A free block of an expandable segment may lie partly over unmapped
     * granules (mapped again when used): the figure counts at most what
     * is cached. */
    if (out->largest_free_block > (uint64_t)cached) out->largest_free_block = (uint64_t)cached;
    out->fragmentation = cached > 0 ? 1.0 - (double)out->largest_free_block / (double)cached : 0.0;
    out->efficiency =
        reserved > 0 ? (double)out->requested_bytes[VRAM_POOL_STAT_ALL].current / (double)reserved
                     : 1.0;
}

int vram_pool_stats(vram_pool_t *pool, vram_pool_stats_t *out)
{
    if (!pool || !out) return vram_fail(VRAM_EINVAL, "vram_pool_stats: pool and out required");
    vram_pool_lock(&pool->lock);
    vram_pool_stats_derive_locked(pool, out);
    vram_pool_unlock(&pool->lock);
    return 0;
}

static void reset_array(vram_pool_stat_t *stat)
{
    for (int k = 0; k < VRAM_POOL_STAT_KINDS_; k++)
        stat[k].peak = stat[k].current;
}

void vram_pool_reset_peaks(vram_pool_t *pool)
{
    if (!pool) return;
    vram_pool_lock(&pool->lock);
    vram_pool_stats_t *s = &pool->stats;
    reset_array(s->segment);
    reset_array(s->reserved_bytes);
    vram_pool_counters_t *c = &pool->counters;
    counter_reset_peaks(&c->allocation);
    counter_reset_peaks(&c->allocated_bytes);
    counter_reset_peaks(&c->requested_bytes);
    counter_reset_peaks(&c->inactive_split);
    counter_reset_peaks(&c->inactive_split_bytes);
    vram_pool_unlock(&pool->lock);
}

void vram_pool_walk(vram_pool_t *pool, vram_pool_walk_fn fn, void *user)
{
    vram_pool_lock(&pool->lock);
    for (vram_pool_segment_t *seg = pool->segments; seg; seg = seg->next)
        for (vram_pool_block_t *b = vram_pool_first_block(pool, seg); b;
             b = vram_pool_next_block(pool, b))
            fn(seg, b, user);
    vram_pool_unlock(&pool->lock);
}

/* ---- consistency check ----------------------------------------------- */

#define FAIL(...)                                                                                  \
    do {                                                                                           \
        snprintf(err, len, __VA_ARGS__);                                                           \
        return -1;                                                                                 \
    } while (0)

typedef struct {
    int64_t blocks, bytes, requested, segments, reserved, split_blocks, split_bytes;
    int64_t homed, overflowed; /* blocks in buckets, allocated blocks outside them */
} kind_totals_t;

/* Where a block is kept: in its own bucket, or (allocated) in the overflow
 * map; and only allocated blocks are found by address. */
static int check_place(const vram_pool_t *pool, const vram_pool_block_t *b, kind_totals_t *t,
                       char *err, size_t len)
{
    const vram_block_table_t *bt = &pool->blocks;
    bool homed = vram_blocks_homed(bt, b);
    if (homed) {
        const vram_pool_block_t *slots = vram_blocks_bucket(bt, b->addr);
        if (b != &slots[0] && b != &slots[1])
            FAIL("block 0x%" PRIxPTR " sits in another address's bucket", b->addr);
        t->homed++;
    }
    const vram_pool_block_t *found = vram_blocks_find_homed(bt, b->addr);
    uint64_t id;
    if (!found && vram_map_get(&pool->overflow, b->addr, &id)) found = bt->base + id;
    if (b->allocated && found != b)
        FAIL("allocated block 0x%" PRIxPTR " cannot be found by its address", b->addr);
    if (!b->allocated && found) FAIL("free block 0x%" PRIxPTR " found by its address", b->addr);
    if (b->allocated && !homed) t->overflowed++;
    return 0;
}

/* Adds the segment to the totals of its kind, and each allocated block to
 * those of its request's kind (an expandable segment serves both). */
static int check_segment(const vram_pool_t *pool, const vram_pool_segment_t *seg,
                         kind_totals_t totals[2], size_t *free_count, uint64_t *idle,
                         uint64_t *unmapped, char *err, size_t len)
{
    kind_totals_t *t = &totals[seg->kind];
    const vram_pool_block_t *first = vram_pool_first_block(pool, seg);
    if (!first || first->addr != seg->base)
        FAIL("segment 0x%" PRIxPTR " does not start with a block", seg->base);
    uintptr_t expect = seg->base;
    size_t allocated = 0;
    const vram_pool_block_t *prev = NULL;
    size_t visited = 0;
    for (const vram_pool_block_t *b = first; b; prev = b, b = vram_pool_next_block(pool, b)) {
        if (++visited > pool->blocks.used + pool->blocks.homed)
            FAIL("block list of segment 0x%" PRIxPTR " has a cycle", seg->base);
        if (b->addr != expect) FAIL("gap or overlap at 0x%" PRIxPTR " in its segment", b->addr);
        if (vram_pool_prev_block(pool, b) != prev)
            FAIL("bad prev link at block 0x%" PRIxPTR, b->addr);
        if (vram_block_free_at(&pool->blocks, vram_block_id(&pool->blocks, b)) == b->allocated)
            FAIL("the free map is wrong about block 0x%" PRIxPTR, b->addr);
        if (b->segment != seg || b->stream != seg->stream || b->kind != seg->kind ||
            b->expandable != (seg->reservation != NULL) || b->seg_seq != (uint32_t)seg->seq)
            FAIL("block 0x%" PRIxPTR " names the wrong segment or stream", b->addr);
        if (!b->size || b->size % VRAM_POOL_ALIGN)
            FAIL("block 0x%" PRIxPTR " has size %zu", b->addr, b->size);
        expect += b->size;
        if (check_place(pool, b, t, err, len)) return -1;
        if (b->allocated) {
            kind_totals_t *r = &totals[vram_pool_size_kind(b->u.live.requested)];
            if (!seg->reservation && r != t)
                FAIL("block 0x%" PRIxPTR " of a %s request in a %s segment", b->addr,
                     r == totals ? "small" : "large", t == totals ? "small" : "large");
            allocated++;
            r->blocks++;
            r->bytes += (int64_t)b->size;
            r->requested += (int64_t)b->u.live.requested;
            if (b->u.live.requested > b->size)
                FAIL("block 0x%" PRIxPTR " smaller than its request", b->addr);
            if (seg->reservation &&
                vram_granules_unmapped_bytes(pool, seg->reservation, b->addr, b->addr + b->size))
                FAIL("allocated block 0x%" PRIxPTR " lies over unmapped granules", b->addr);
        } else {
            if (!vram_pool_block_is_wilderness(b)) free_count[seg->kind]++; /* in the bins */
            if (prev && !prev->allocated)
                FAIL("free neighbours not coalesced at 0x%" PRIxPTR, b->addr);
            if (b->size < seg->size) {
                t->split_blocks++;
                t->split_bytes += (int64_t)b->size;
            }
        }
    }
    if (expect != seg->base + seg->size)
        FAIL("blocks of segment 0x%" PRIxPTR " do not cover it", seg->base);
    if (seg->reservation && vram_block_at(&pool->blocks, seg->last) != prev)
        FAIL("segment 0x%" PRIxPTR " names the wrong last block", seg->base);
    const vram_pool_reservation_t *r = seg->reservation;
    if (r && (r->segment != seg || seg->base != r->base || seg->size > r->size ||
              seg->size % pool->granularity || r->stream != seg->stream || r->kind != seg->kind))
        FAIL("expandable segment 0x%" PRIxPTR " (%zu bytes) does not match its reservation",
             seg->base, seg->size);
    if (r && vram_granules_check(pool, r, seg->size, err, len)) return -1;
    if (r) *unmapped += seg->size - r->mapped_bytes;
    if (!allocated) *idle += seg->size;
    t->segments++;
    t->reserved += (int64_t)(r ? r->mapped_bytes : seg->size);
    return 0;
}

static int check_stat(const char *name, const vram_pool_stat_t *stat, int64_t want, char *err,
                      size_t len)
{
    if (stat->current != want)
        FAIL("%s is %" PRId64 ", blocks say %" PRId64, name, stat->current, want);
    if (stat->peak < stat->current || stat->allocated - stat->freed != stat->current)
        FAIL("%s: peak/allocated/freed inconsistent", name);
    return 0;
}

int vram_pool_check(vram_pool_t *pool, char *err, size_t len)
{
    int rc = -1;
    vram_pool_lock(&pool->lock);
    kind_totals_t t[2] = {{0}, {0}};
    size_t free_count[2] = {0, 0};
    uint64_t idle = 0, unmapped = 0;
    for (vram_pool_segment_t *seg = pool->segments; seg; seg = seg->next) {
        if (seg->next && seg->next->prev != seg) {
            snprintf(err, len, "segment list links broken");
            goto out;
        }
        if (check_segment(pool, seg, t, free_count, &idle, &unmapped, err, len)) goto out;
    }
    for (const vram_pool_reservation_t *r = pool->reservations; r; r = r->next)
        if (!r->segment && r->mapped_bytes) {
            snprintf(err, len, "reservation 0x%" PRIxPTR " has %zu bytes mapped and no segment",
                     r->base, r->mapped_bytes);
            goto out;
        }
    if (unmapped != pool->unmapped_extent) {
        snprintf(err, len, "%zu unmapped bytes of extents counted, segments say %" PRIu64,
                 pool->unmapped_extent, unmapped);
        goto out;
    }
    for (int k = 0; k < 2; k++) {
        if (vram_free_index_check(&pool->free_blocks[k], err, len) < 0) goto out;
        if (pool->free_blocks[k].count != free_count[k]) {
            snprintf(err, len, "free tree %d holds %zu blocks, segments %zu", k,
                     pool->free_blocks[k].count, free_count[k]);
            goto out;
        }
    }
    if (pool->overflow.count != (size_t)(t[0].overflowed + t[1].overflowed) ||
        pool->blocks.homed != (size_t)(t[0].homed + t[1].homed)) {
        snprintf(err, len,
                 "overflow map holds %zu blocks, buckets %zu; segments say %" PRId64
                 " and %" PRId64,
                 pool->overflow.count, pool->blocks.homed, t[0].overflowed + t[1].overflowed,
                 t[0].homed + t[1].homed);
        goto out;
    }
    size_t listed = 0;
    uint64_t listed_bytes = 0;
    for (size_t i = 0; i < pool->idle_n; i++) {
        const vram_pool_block_t *b = pool->blocks.base + pool->idle[i];
        if (b->allocated || !vram_pool_block_spans_segment(b) || b->u.node.idle_pos != i ||
            vram_pool_first_block(pool, b->segment) != b) {
            snprintf(err, len, "idle array entry %zu is not the free block spanning its segment",
                     i);
            goto out;
        }
        listed++;
        listed_bytes += b->size;
    }
    if (listed != pool->idle_count[0] + pool->idle_count[1] || listed_bytes != idle) {
        snprintf(err, len, "idle array holds %zu segments (%" PRIu64 " bytes), expected %zu",
                 listed, listed_bytes, pool->idle_count[0] + pool->idle_count[1]);
        goto out;
    }
    if (idle != pool->idle_segment_bytes) {
        snprintf(err, len, "idle segment bytes %" PRIu64 ", segments say %" PRIu64,
                 pool->idle_segment_bytes, idle);
        goto out;
    }
    vram_pool_stats_t derived;
    vram_pool_stats_derive_locked(pool, &derived);
    const vram_pool_stats_t *s = &derived;
    for (int k = 0; k < 3; k++) {
        kind_totals_t w = k == 0 ? (kind_totals_t){t[0].blocks + t[1].blocks,
                                                   t[0].bytes + t[1].bytes,
                                                   t[0].requested + t[1].requested,
                                                   t[0].segments + t[1].segments,
                                                   t[0].reserved + t[1].reserved,
                                                   t[0].split_blocks + t[1].split_blocks,
                                                   t[0].split_bytes + t[1].split_bytes,
                                                   0,
                                                   0}
                                 : t[k - 1];
        if (check_stat("allocation", &s->allocation[k], w.blocks, err, len) ||
            check_stat("active", &s->active[k], w.blocks, err, len) ||
            check_stat("allocated_bytes", &s->allocated_bytes[k], w.bytes, err, len) ||
            check_stat("active_bytes", &s->active_bytes[k], w.bytes, err, len) ||
            check_stat("requested_bytes", &s->requested_bytes[k], w.requested, err, len) ||
            check_stat("segment", &s->segment[k], w.segments, err, len) ||
            check_stat("reserved_bytes", &s->reserved_bytes[k], w.reserved, err, len) ||
            check_stat("inactive_split", &s->inactive_split[k], w.split_blocks, err, len) ||
            check_stat("inactive_split_bytes", &s->inactive_split_bytes[k], w.split_bytes, err,
                       len))
            goto out;
    }
    rc = 0;
out:
    vram_pool_unlock(&pool->lock);
    return rc;
}
