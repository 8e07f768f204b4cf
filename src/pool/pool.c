/* The caching allocator: allocation, free, release of cached segments, the
 * OOM chain. Design and the strategies' rules: docs/pool.md. */
#include "pool/pool_internal.h"
#include "core/array.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* ---- free tree membership, with the inactive_split statistics -------- */

static unsigned bin_of(const vram_pool_t *pool, const vram_pool_block_t *b)
{
    /* vram_pool_rank_bin(vram_pool_block_rank(size)), inlined: a block's bin
     * is its size's bin at the index's resolution for every strategy (with
     * size classes the rank is the class index, which is that bin). */
    return vram_index_bin(b->size, pool->free_blocks[b->kind].bin_bits);
}

static void tree_put(vram_pool_t *pool, vram_pool_block_t *b)
{
    /* Among equal ranks the oldest segment wins (the tree's tie is seg_seq):
     * deterministic whatever addresses the device hands out, and it packs
     * toward old segments. */
    if (!vram_pool_block_is_wilderness(b))
        vram_free_index_insert(&pool->free_blocks[b->kind], b, bin_of(pool, b));
    if (!vram_pool_block_spans_segment(b)) {
        vram_pool_counter_add(&pool->counters.inactive_split, b->kind, 1);
        vram_pool_counter_add(&pool->counters.inactive_split_bytes, b->kind, (int64_t)b->size);
    }
}

static void tree_take(vram_pool_t *pool, vram_pool_block_t *b)
{
    if (!vram_pool_block_is_wilderness(b))
        vram_free_index_remove(&pool->free_blocks[b->kind], b, bin_of(pool, b));
    if (!vram_pool_block_spans_segment(b)) {
        vram_pool_counter_sub(&pool->counters.inactive_split, b->kind, 1);
        vram_pool_counter_sub(&pool->counters.inactive_split_bytes, b->kind, (int64_t)b->size);
    }
}

/* ---- segments --------------------------------------------------------- */

static void segment_link(vram_pool_t *pool, vram_pool_segment_t *seg)
{
    seg->prev = NULL;
    seg->next = pool->segments;
    if (pool->segments) pool->segments->prev = seg;
    pool->segments = seg;
}

static void segment_unlink(vram_pool_t *pool, vram_pool_segment_t *seg)
{
    if (seg->prev)
        seg->prev->next = seg->next;
    else
        pool->segments = seg->next;
    if (seg->next) seg->next->prev = seg->prev;
}

/* A segment with no allocated block joins the idle array (so releasing
 * cached memory never walks busy segments) through the free block that spans
 * it, and leaves it on its first allocation. */
static void idle_enter(vram_pool_t *pool, vram_pool_block_t *b)
{
    b->u.node.idle_pos = (uint32_t)pool->idle_n;
    pool->idle[pool->idle_n++] = vram_block_id(&pool->blocks, b);
    pool->idle_segment_bytes += b->size;
    pool->idle_count[b->kind]++;
}

static void idle_leave(vram_pool_t *pool, vram_pool_block_t *b)
{
    vram_block_id_t last = pool->idle[--pool->idle_n];
    pool->idle[b->u.node.idle_pos] = last;
    pool->blocks.base[last].u.node.idle_pos = b->u.node.idle_pos;
    pool->idle_segment_bytes -= b->size;
    pool->idle_count[b->kind]--;
}

/* Makes room for one more segment of `kind` on `stream`: its bins, its
 * place in the idle array, its struct and its first block. */
static int segment_prepare(vram_pool_t *pool, int kind, uintptr_t stream, vram_pool_segment_t **seg,
                           vram_pool_block_t **b)
{
    int rc = vram_free_index_reserve(&pool->free_blocks[kind], stream, false);
    if (rc) return rc;
    /* Room in the idle array for every segment, this one included. */
    if ((size_t)pool->stats.segment[VRAM_POOL_STAT_ALL].current >= pool->idle_cap) {
        vram_block_id_t *idle = vram_array_grow(pool->idle, &pool->idle_cap, sizeof *idle, 64);
        if (!idle) return vram_fail(VRAM_ENOMEM, "pool: out of host memory for segment metadata");
        pool->idle = idle;
    }
    *seg = calloc(1, sizeof **seg);
    *b = vram_blocks_new(&pool->blocks);
    if (!*seg || !*b) {
        free(*seg);
        if (*b) vram_blocks_delete(&pool->blocks, *b);
        return vram_fail(VRAM_ENOMEM, "pool: out of host memory for segment metadata");
    }
    return 0;
}

/* Wraps [base, base + size) in a prepared segment holding one free block
 * (in the bins and the idle array). */
static void segment_init(vram_pool_t *pool, vram_pool_segment_t *seg, vram_pool_block_t *b,
                         int kind, uintptr_t stream, uintptr_t base, size_t size)
{
    seg->base = base;
    seg->size = size;
    seg->stream = stream;
    seg->kind = kind;
    seg->seq = pool->next_seq++;
    seg->first = seg->last = vram_block_id(&pool->blocks, b);
    b->addr = seg->base;
    b->size = size;
    b->stream = stream;
    b->segment = seg;
    b->kind = (uint8_t)kind;
    b->seg_seq = (uint32_t)seg->seq;
    vram_block_set_allocated(&pool->blocks, b, false);
    segment_link(pool, seg);
    vram_pool_stat_update(pool->stats.segment, kind, 1);
    idle_enter(pool, b);
    tree_put(pool, b);
}

static int limit_refuses(vram_pool_t *pool, size_t size)
{
    uint64_t reserved = (uint64_t)pool->stats.reserved_bytes[VRAM_POOL_STAT_ALL].current;
    if (pool->limit && reserved + size > pool->limit) {
        pool->refused_by_limit = true;
        return vram_fail(VRAM_ENOMEM, "pool limit reached");
    }
    if (size > pool->device_total) return vram_fail(VRAM_ENOMEM, "larger than the device");
    return 0;
}

/* Asks the source for `size` bytes and wraps them in a segment holding one
 * free block (in the tree). ENOMEM when the limit or the device refuses. */
static int segment_create(vram_pool_t *pool, int kind, uintptr_t stream, size_t size,
                          vram_pool_segment_t **out)
{
    vram_pool_segment_t *seg;
    vram_pool_block_t *b;
    int rc = limit_refuses(pool, size);
    if (!rc) rc = segment_prepare(pool, kind, stream, &seg, &b);
    if (rc) return rc;
    void *base = NULL;
    rc = pool->src.alloc(pool->src.user, size, &base);
    if (rc) {
        free(seg);
        vram_blocks_delete(&pool->blocks, b);
        return rc;
    }
    pool->stats.num_device_alloc++;
    segment_init(pool, seg, b, kind, stream, (uintptr_t)base, size);
    vram_pool_stat_update(pool->stats.reserved_bytes, kind, (int64_t)size);
    *out = seg;
    return 0;
}

/* Returns a wholly free segment to the device. */
static void segment_release(vram_pool_t *pool, vram_pool_segment_t *seg)
{
    vram_pool_block_t *b = vram_pool_first_block(pool, seg);
    tree_take(pool, b);
    idle_leave(pool, b);
    vram_blocks_delete(&pool->blocks, b);
    /* A refused free (a driver error) cannot be retried meaningfully; the
     * segment is forgotten either way so the pool stays consistent. */
    if (seg->reservation) {
        vram_granules_unmap_inside(pool, seg->reservation, seg->base, seg->base + seg->size);
        pool->unmapped_extent -= seg->size; /* all of it now */
        seg->reservation->segment = NULL;
    } else {
        pool->src.free(pool->src.user, (void *)seg->base);
        pool->stats.num_device_free++;
        vram_pool_stat_update(pool->stats.reserved_bytes, seg->kind, -(int64_t)seg->size);
    }
    vram_pool_stat_update(pool->stats.segment, seg->kind, -1);
    segment_unlink(pool, seg);
    free(seg);
}

/* Releases wholly free segments (of one stream and kind when kind >= 0)
 * until at least `want` bytes went back (UINT64_MAX: all). Returns bytes. */
static uint64_t release_idle(vram_pool_t *pool, int kind, uintptr_t stream, bool any_stream,
                             bool expandable_too, uint64_t want)
{
    uint64_t released = 0;
    /* From the most recently idle; a release moves the last entry into the
     * hole, one already passed. */
    for (size_t i = pool->idle_n; i-- > 0 && released < want;) {
        const vram_pool_block_t *b = pool->blocks.base + pool->idle[i];
        if (kind >= 0 && b->kind != kind) continue;
        if (!any_stream && b->stream != stream) continue;
        if (!expandable_too && b->segment->reservation) continue;
        /* An expandable segment gives back what is mapped of its extent. */
        const vram_pool_reservation_t *r = b->segment->reservation;
        released += r ? r->mapped_bytes : b->size;
        segment_release(pool, b->segment);
    }
    return released;
}

/* Unmaps every chunk of the expandable segments that lies wholly inside a
 * free block, and cuts each segment's extent back to its last mapped
 * granule (a segment without any allocated block goes whole through
 * release_idle). Walks the blocks: for trim, the limit and the OOM chain
 * only. Returns bytes. */
static uint64_t shrink_expandable(vram_pool_t *pool, uint64_t want)
{
    uint64_t released = 0;
    size_t g = pool->granularity;
    for (vram_pool_reservation_t *r = pool->reservations; r && released < want; r = r->next) {
        vram_pool_segment_t *seg = r->segment;
        if (!seg) continue;
        vram_pool_block_t *tail = NULL;
        for (vram_pool_block_t *b = vram_pool_first_block(pool, seg); b;
             b = vram_pool_next_block(pool, b)) {
            if (!b->allocated)
                released += vram_granules_unmap_inside(pool, r, b->addr, b->addr + b->size);
            tail = b;
        }
        if (tail->allocated || vram_pool_block_spans_segment(tail)) continue;
        uintptr_t end = seg->base + seg->size;
        uintptr_t new_end = vram_granules_mapped_end(pool, r, end);
        uintptr_t floor = (tail->addr - r->base + g - 1) / g * g + r->base;
        if (new_end < floor) new_end = floor;
        if (new_end >= end) continue;
        tree_take(pool, tail);
        seg->size -= end - new_end;
        pool->unmapped_extent -= end - new_end;
        if (new_end == tail->addr) {
            /* Its neighbour before is allocated (free ones merge). */
            vram_pool_prev_block(pool, tail)->next = 0;
            seg->last = tail->prev;
            vram_blocks_delete(&pool->blocks, tail);
        } else {
            tail->size -= end - new_end;
            tree_put(pool, tail);
        }
    }
    return released;
}

/* Everything cached that can go back: idle segments, and the unused ends of
 * expandable segments. For trim, the limit and the OOM chain. */
static uint64_t release_cache(vram_pool_t *pool, uint64_t want)
{
    uint64_t released = release_idle(pool, -1, 0, true, true, want);
    if (released < want && pool->reservations) released += shrink_expandable(pool, want - released);
    return released;
}

/* ---- when cached memory goes back ------------------------------------ */

/* BALANCED keeps at most this much in wholly free segments... */
#define BALANCED_IDLE_MIN ((uint64_t)64 << 20)
/* ...or this fraction of what it reserves, whichever is more. */
#define BALANCED_IDLE_FRACTION 0.125
/* FRAGMENTATION_AWARE trims when fragmentation passes this... */
#define FRAG_AWARE_THRESHOLD 0.5
/* ...checked every this many frees. */
#define FRAG_AWARE_CHECK_EVERY 64

static uint64_t balanced_idle_cap(const vram_pool_t *pool)
{
    uint64_t reserved = (uint64_t)pool->stats.reserved_bytes[VRAM_POOL_STAT_ALL].current;
    uint64_t frac = (uint64_t)((double)reserved * BALANCED_IDLE_FRACTION);
    return frac > BALANCED_IDLE_MIN ? frac : BALANCED_IDLE_MIN;
}

/* A segment just became wholly free: keep it cached or give it back. An
 * expandable segment stays mapped (hysteresis: what was needed once per
 * iteration is needed again; trim and the limit give it back). */
static bool release_on_idle(vram_pool_t *pool, const vram_pool_block_t *b)
{
    int kind = b->kind;
    uint64_t reserved = (uint64_t)pool->stats.reserved_bytes[VRAM_POOL_STAT_ALL].current;
    if (pool->limit && reserved > pool->limit) return true;
    if (pool->reservations && b->segment->reservation) return false;
    switch (pool->strategy) {
    case VRAM_POOL_GREEDY:
    case VRAM_POOL_FRAGMENTATION_AWARE:
        return false;
    case VRAM_POOL_BALANCED:
        return pool->idle_segment_bytes > balanced_idle_cap(pool);
    case VRAM_POOL_CONSOLIDATED:
        /* Keep one idle segment per kind as a buffer against alloc/free
         * ping-pong; packing into old segments empties the others. */
        return pool->idle_count[kind] > 1;
    default:
        return false;
    }
}

/* Before asking the device for a new segment: wholly free segments of this
 * kind and stream could not serve the request (the search missed them), so
 * all strategies but GREEDY give them back first instead of growing. */
static void release_before_growing(vram_pool_t *pool, int kind, uintptr_t stream)
{
    if (pool->strategy == VRAM_POOL_GREEDY || !pool->idle_segment_bytes) return;
    release_idle(pool, kind, stream, false, false, UINT64_MAX);
}

static void fragmentation_check(vram_pool_t *pool)
{
    if (++pool->free_ops < FRAG_AWARE_CHECK_EVERY || !pool->idle_segment_bytes) return;
    pool->free_ops = 0;
    vram_pool_stats_t s;
    vram_pool_stats_derive_locked(pool, &s);
    if (s.fragmentation > FRAG_AWARE_THRESHOLD) release_idle(pool, -1, 0, true, false, UINT64_MAX);
}

/* ---- allocation ------------------------------------------------------- */

static vram_pool_block_t *find_in(vram_pool_t *pool, int kind, uintptr_t stream, size_t rounded)
{
    uint64_t rank = vram_pool_request_rank(pool->strategy, rounded);
    vram_pool_block_t *b = vram_free_index_find(&pool->free_blocks[kind], stream, rank,
                                                vram_pool_rank_bin(pool->strategy, rank));
    /* The strategies' eligibility rules keep big blocks of fixed segments
     * whole; in an expandable segment any free block is address space that
     * coalesces again, so best fit alone decides there. */
    if (b && !b->expandable && !vram_pool_block_eligible(pool->strategy, b->size, rounded))
        return NULL;
    /* An ineligible idle segment is released by alloc_slow before it grows. */
    if (b && vram_pool_block_spans_segment(b) && !b->segment->reservation &&
        !vram_pool_idle_segment_eligible(pool->strategy, b->size, rounded))
        return NULL;
    return b;
}

/* With expandable segments a stream has one range for requests of every
 * size (the large kind's), so small requests look there first, then in
 * the small segments made when the range could not grow (never in large
 * ones). */
static vram_pool_block_t *find_free(vram_pool_t *pool, int kind, uintptr_t stream, size_t rounded)
{
    if (!pool->granularity) return find_in(pool, kind, stream, rounded);
    vram_pool_block_t *b = find_in(pool, VRAM_POOL_KIND_LARGE, stream, rounded);
    if (b && (b->expandable || kind == VRAM_POOL_KIND_LARGE)) return b;
    if (kind == VRAM_POOL_KIND_SMALL && (b = find_in(pool, kind, stream, rounded))) return b;
    /* Nothing in the bins fits: the wilderness, before the slow path. */
    return vram_pool_wilderness_fit(pool, stream, rounded);
}

/* Adds a bucket while the buckets hold more than half a block each on
 * average (so a bucket of two rarely overflows): the blocks of the bucket
 * that splits whose address now hashes to the new bucket move there, at
 * most two. Free blocks leave their bins while they move (bins hold ids).
 * Without memory for another bucket nothing changes: new allocations
 * overflow. */
static void bucket_split(vram_pool_t *pool)
{
    vram_block_table_t *t = &pool->blocks;
    vram_pool_block_t *slots = vram_blocks_add_bucket(t);
    for (int i = 0; slots && i < 2; i++) {
        vram_pool_block_t *b = &slots[i];
        if (!b->addr || vram_blocks_bucket(t, b->addr) == slots) continue;
        bool in_bin = !b->allocated;
        if (in_bin) tree_take(pool, b);
        /* The new bucket was never used: it has room for both. */
        vram_pool_block_t *moved = vram_blocks_move(t, b, vram_blocks_home(t, b->addr));
        vram_blocks_delete(t, b);
        if (in_bin && vram_pool_block_spans_segment(moved))
            pool->idle[moved->u.node.idle_pos] = vram_block_id(t, moved);
        if (in_bin) tree_put(pool, moved);
    }
}

/* Whether serving `rounded` bytes from free block b splits off the rest. */
static bool splits(const vram_pool_block_t *b, size_t rounded)
{
    size_t remainder = b->size - rounded;
    return vram_pool_should_split(vram_pool_size_kind(rounded), rounded, remainder) ||
           (remainder && !b->next && b->expandable);
}

/* Hands out the front of free block b (already chosen), splitting off the
 * rest. The allocated block moves into its bucket when b is not there yet
 * and the bucket has room (the rest then takes b's slab slot), else it stays
 * in the slab and goes into the overflow map. */
static int take_block(vram_pool_t *pool, vram_pool_block_t *b, size_t rounded, size_t requested,
                      vram_pool_block_t **out)
{
    vram_block_table_t *t = &pool->blocks;
    int kind = vram_pool_size_kind(rounded); /* the request's: one range serves both */
    size_t remainder = b->size - rounded;
    /* At the end of an expandable segment the remainder is always split
     * off: it merges with the chunk mapped next, so it is no sliver. (Every
     * remainder, as a first version did, made the pair 1.5-1.6x slower at
     * 10,000 live blocks - the slivers fill the bins; it saved 1-3 % of
     * memory on random traces and cost 1 % on resnet18_train.) */
    bool split = splits(b, rounded);
    bool homed = vram_blocks_homed(t, b);
    vram_pool_block_t *home = homed ? b : vram_blocks_home(t, b->addr);
    vram_pool_block_t *rest = NULL;
    if (split && (homed || !home)) {
        rest = vram_blocks_new(&pool->blocks);
        if (!rest) return vram_fail(VRAM_ENOMEM, "pool: out of host memory for block metadata");
    }
    if (!home && !vram_map_reserve(&pool->overflow, 1)) {
        if (rest) vram_blocks_delete(&pool->blocks, rest);
        return vram_fail(VRAM_ENOMEM, "pool: out of host memory for the block map");
    }
    tree_take(pool, b);
    if (vram_pool_block_spans_segment(b)) idle_leave(pool, b);
    if (home && home != b) {
        vram_pool_block_t *slab_slot = b;
        b = vram_blocks_move(t, b, home);
        if (split) {
            rest = slab_slot;
            memset(rest, 0, sizeof *rest);
        } else {
            vram_blocks_delete(&pool->blocks, slab_slot);
        }
    }
    if (rest) {
        rest->addr = b->addr + rounded;
        rest->size = remainder;
        rest->stream = b->stream;
        rest->segment = b->segment;
        rest->kind = b->kind;
        rest->expandable = b->expandable;
        rest->seg_seq = b->seg_seq;
        vram_pool_block_t *after = vram_pool_next_block(pool, b);
        rest->prev = vram_block_id(t, b);
        rest->next = b->next;
        if (after)
            after->prev = vram_block_id(t, rest);
        else if (b->expandable)
            b->segment->last = vram_block_id(t, rest);
        b->next = vram_block_id(t, rest);
        b->size = rounded;
        vram_block_set_allocated(t, rest, false);
        tree_put(pool, rest);
    }
    vram_block_set_allocated(t, b, true);
    b->u.live.requested = requested;
    b->u.live.trace_id = 0;
    if (!home) vram_map_put(&pool->overflow, b->addr, vram_block_id(t, b)); /* room reserved */
    vram_pool_counter_add(&pool->counters.allocation, kind, 1);
    vram_pool_counter_add(&pool->counters.allocated_bytes, kind, (int64_t)b->size);
    vram_pool_counter_add(&pool->counters.requested_bytes, kind, (int64_t)requested);
    *out = b;
    return 0;
}

/* One attempt to get a new segment for the request: preferred size, then the
 * smallest that fits. ENOMEM when the device or the limit refuses. */
static int grow(vram_pool_t *pool, int kind, uintptr_t stream, size_t rounded,
                vram_pool_block_t **out)
{
    size_t preferred = vram_pool_segment_size(pool->strategy, kind, rounded);
    /* The fallback: the request rounded to the granule, whatever the strategy. */
    size_t minimal = kind == VRAM_POOL_KIND_SMALL ? VRAM_POOL_SMALL_SEG
                                                  : (rounded + VRAM_POOL_GRANULE - 1) /
                                                        VRAM_POOL_GRANULE * VRAM_POOL_GRANULE;
    if (preferred < minimal) preferred = minimal;
    vram_pool_segment_t *seg;
    int rc = segment_create(pool, kind, stream, preferred, &seg);
    if (rc == VRAM_ENOMEM && minimal < preferred)
        rc = segment_create(pool, kind, stream, minimal, &seg);
    if (rc) return rc;
    *out = vram_pool_first_block(pool, seg);
    return 0;
}

/* The reservation of `stream` and `kind`, made on first use: the device's
 * memory and an eighth more of address space (as PyTorch reserves), so the
 * segment can grow to whatever the device holds. NULL when the source
 * refuses; the pool then uses ordinary segments. */
static vram_pool_reservation_t *reservation_for(vram_pool_t *pool, int kind, uintptr_t stream)
{
    vram_pool_reservation_t *r = pool->reservations;
    while (r && (r->kind != kind || r->stream != stream))
        r = r->next;
    if (r) return r;
    size_t g = pool->granularity;
    uint64_t total = pool->device_total == UINT64_MAX ? (uint64_t)1 << 40 : pool->device_total;
    size_t size = (size_t)((total + total / 8 + g - 1) / g * g);
    void *va;
    r = calloc(1, sizeof *r);
    if (!r || pool->src.vmm_reserve(pool->src.user, size, &va)) {
        free(r);
        return NULL;
    }
    r->base = (uintptr_t)va;
    r->size = size;
    r->stream = stream;
    r->kind = kind;
    r->next = pool->reservations;
    pool->reservations = r;
    return r;
}

/* Appends a free block of `size` bytes after `tail`, the segment's last. */
static int append_free_block(vram_pool_t *pool, vram_pool_segment_t *seg, vram_pool_block_t *tail,
                             size_t size, vram_pool_block_t **out)
{
    vram_block_table_t *t = &pool->blocks;
    vram_pool_block_t *b = vram_blocks_new(t);
    if (!b) return vram_fail(VRAM_ENOMEM, "pool: out of host memory for block metadata");
    b->addr = tail->addr + tail->size;
    b->size = size;
    b->stream = seg->stream;
    b->segment = seg;
    b->kind = (uint8_t)seg->kind;
    b->expandable = 1;
    b->seg_seq = tail->seg_seq;
    b->prev = vram_block_id(t, tail);
    tail->next = vram_block_id(t, b);
    seg->last = vram_block_id(t, b);
    vram_block_set_allocated(t, b, false);
    tree_put(pool, b);
    *out = b;
    return 0;
}

/* Extends the expandable segment of `stream` and `kind` at its end (or
 * starts it) until its last block is free and holds `rounded` bytes; that
 * block in *out. Nothing is mapped here: claim() maps what the request
 * uses. ENOMEM when the reservation is full or host memory runs out. */
static int expand(vram_pool_t *pool, int kind, uintptr_t stream, size_t rounded,
                  vram_pool_block_t **out)
{
    vram_pool_reservation_t *r = reservation_for(pool, kind, stream);
    if (!r) return vram_fail(VRAM_ENOMEM, "pool: no address space for an expandable segment");
    vram_pool_segment_t *seg = r->segment;
    vram_pool_block_t *tail = seg ? vram_block_at(&pool->blocks, seg->last) : NULL;
    size_t g = pool->granularity, have = tail && !tail->allocated ? tail->size : 0;
    if (have >= rounded) { /* the wilderness, outside the bins: nothing else fit */
        *out = tail;
        return 0;
    }
    size_t more = (rounded - have + g - 1) / g * g;
    size_t used = seg ? seg->size : 0;
    if (more > r->size - used) return vram_fail(VRAM_ENOMEM, "expandable segment is full");
    if (more > pool->device_total) return vram_fail(VRAM_ENOMEM, "larger than the device");
    int rc = vram_granules_reserve(r, (used + more) / g);
    if (rc) return rc;
    uintptr_t at = r->base + used;
    if (!seg) {
        vram_pool_block_t *b;
        rc = segment_prepare(pool, kind, stream, &seg, &b);
        if (rc) return rc;
        b->expandable = 1; /* before segment_init files it: the wilderness stays out of the bins */
        segment_init(pool, seg, b, kind, stream, at, more);
        pool->unmapped_extent += more;
        seg->reservation = r;
        r->segment = seg;
        *out = b;
        return 0;
    }
    if (!have) {
        rc = append_free_block(pool, seg, tail, more, out);
        if (!rc) seg->size += more;
        if (!rc) pool->unmapped_extent += more;
        return rc;
    }
    seg->size += more;
    pool->unmapped_extent += more;
    bool idle = vram_pool_block_spans_segment(tail);
    tree_take(pool, tail);
    if (idle) idle_leave(pool, tail);
    tail->size += more;
    if (idle) idle_enter(pool, tail);
    tree_put(pool, tail);
    *out = tail;
    return 0;
}

/* ---- expandable segments: mapping what requests use ------------------- */

/* Maps the granules the front `rounded` bytes of free block b overlap, if
 * any is not mapped (expandable segments only; one call per run of
 * unmapped granules: at the end of a segment that grew, the new chunk; in
 * a hole whose chunks trim or the OOM chain unmapped, those). When the
 * limit or the device would refuse new memory, chunks lying in free blocks
 * elsewhere move there first (reclaim.c). ENOMEM when the limit or the
 * device refuses. */
static int claim(vram_pool_t *pool, vram_pool_block_t *b, size_t rounded)
{
    /* Usually every extent is wholly mapped: then no granule (nor the
     * segment, a likely cache miss) is looked at. */
    if (!b->expandable || !pool->unmapped_extent) return 0;
    vram_pool_reservation_t *r = b->segment->reservation;
    uintptr_t hi = b->addr + (splits(b, rounded) ? rounded : b->size); /* what serving it uses */
    size_t more = vram_granules_unmapped_bytes(pool, r, b->addr, hi);
    if (!more) return 0;
    if (pool->limit) more = vram_pool_reclaim_for_limit(pool, r, b->addr, hi, more);
    int rc = more ? limit_refuses(pool, more) : 0;
    if (rc) return rc;
    rc = vram_granules_map(pool, r, b->addr, hi);
    /* The device is full: memory the pool holds in free blocks moves. */
    if (rc == VRAM_ENOMEM && !vram_pool_reclaim_for_device(pool, r, b->addr, hi)) rc = 0;
    return rc;
}

/* An expandable segment where the pool has them, else a new segment. */
static int grow_any(vram_pool_t *pool, int kind, uintptr_t stream, size_t rounded,
                    vram_pool_block_t **out)
{
    if (pool->granularity) {
        int rc = expand(pool, VRAM_POOL_KIND_LARGE, stream, rounded, out);
        if (!rc) rc = claim(pool, *out, rounded);
        if (rc != VRAM_ENOMEM) return rc;
    }
    return grow(pool, kind, stream, rounded, out);
}

/* The best free block for the request, its granules mapped; NULL when none
 * fits or mapping them was refused (the slow path then grows or frees). */
static vram_pool_block_t *find_claimed(vram_pool_t *pool, int kind, uintptr_t stream,
                                       size_t rounded)
{
    vram_pool_block_t *b = find_free(pool, kind, stream, rounded);
    return b && claim(pool, b, rounded) ? NULL : b;
}

static _Thread_local int in_oom_handler; /* handlers that allocate do not recurse */

static int oom_error(vram_pool_t *pool, size_t size, size_t rounded, uintptr_t stream,
                     const char *why)
{
    vram_pool_stats_t s;
    vram_pool_stats_derive_locked(pool, &s);
    uint64_t total = VRAM_UNKNOWN_U64, free_bytes = VRAM_UNKNOWN_U64;
    if (pool->src.memory) pool->src.memory(pool->src.user, &total, &free_bytes);
    uint64_t reserved = (uint64_t)pool->stats.reserved_bytes[VRAM_POOL_STAT_ALL].current;
    uint64_t allocated = (uint64_t)vram_pool_counter_total(&pool->counters.allocated_bytes);
    char req[32], res[32], unal[32], big[32], dfree[32], dtotal[32], lim[32];
    vram_format_size(size, req, sizeof req);
    vram_format_size(reserved, res, sizeof res);
    vram_format_size(reserved - allocated, unal, sizeof unal);
    vram_format_size(s.largest_free_block, big, sizeof big);
    if (free_bytes == VRAM_UNKNOWN_U64)
        snprintf(dfree, sizeof dfree, "unknown");
    else
        vram_format_size(free_bytes, dfree, sizeof dfree);
    if (total == VRAM_UNKNOWN_U64)
        snprintf(dtotal, sizeof dtotal, "unknown");
    else
        vram_format_size(total, dtotal, sizeof dtotal);
    if (pool->limit)
        vram_format_size(pool->limit, lim, sizeof lim);
    else
        snprintf(lim, sizeof lim, "none");
    pool->stats.num_ooms++;
    return vram_fail(VRAM_ENOMEM,
                     "out of memory on device %d (%s): tried to allocate %s (%zu bytes, %zu "
                     "after rounding) on stream 0x%" PRIxPTR "; the pool has %s reserved, of "
                     "which %s (%" PRIu64 " bytes) is reserved but unallocated; largest free "
                     "block %s (%" PRIu64 " bytes); device free memory %s of %s; pool limit %s. %s",
                     pool->src.device, why, req, size, rounded, stream, res, unal,
                     reserved - allocated, big, s.largest_free_block, dfree, dtotal, lim,
                     !rounded || rounded > pool->device_total
                         ? "No amount of freeing makes it fit: split the tensor or use a larger "
                           "device."
                     : reserved - allocated >= rounded
                         ? "Much is reserved but unallocated: the cache is fragmented; try "
                           "VRAM_POOL_STRATEGY=fragmentation-aware."
                         : "Free memory (smaller batch, offload) or raise the limit.");
}

/* The OOM chain: release cached segments, retry; call the handlers in order,
 * retrying after each that freed something. Called and returns with the lock. */
static int alloc_slow(vram_pool_t *pool, int kind, uintptr_t stream, size_t size, size_t rounded,
                      vram_pool_block_t **out)
{
    pool->refused_by_limit = false;
    release_before_growing(pool, kind, stream);
    int rc = grow_any(pool, kind, stream, rounded, out);
    if (rc != VRAM_ENOMEM) return rc;

    pool->stats.num_alloc_retries++;
    release_cache(pool, UINT64_MAX);
    rc = grow_any(pool, kind, stream, rounded, out);
    if (rc != VRAM_ENOMEM) return rc;

    if (!in_oom_handler && pool->handler_count) {
        int count = pool->handler_count;
        vram_pool_handler_t handlers[VRAM_POOL_MAX_OOM_HANDLERS];
        memcpy(handlers, pool->handlers, sizeof handlers[0] * (size_t)count);
        for (int i = 0; i < count; i++) {
            vram_pool_unlock(&pool->lock);
            in_oom_handler = 1;
            int freed = handlers[i].fn(pool, size, handlers[i].user);
            in_oom_handler = 0;
            vram_pool_lock(&pool->lock);
            if (!freed) continue;
            pool->stats.num_alloc_retries++;
            *out = find_claimed(pool, kind, stream, rounded);
            if (*out) return 0;
            release_cache(pool, UINT64_MAX);
            rc = grow_any(pool, kind, stream, rounded, out);
            if (rc != VRAM_ENOMEM) return rc;
        }
    }
    return oom_error(pool, size, rounded, stream,
                     pool->refused_by_limit ? "the pool limit would be exceeded"
                                            : "the device refused");
}

int vram_pool_alloc(vram_pool_t *pool, size_t size, void *stream_handle, void **ptr)
{
    if (!pool || !ptr)
        return vram_fail(VRAM_EINVAL, "vram_pool_alloc: pool and ptr must not be NULL");
    *ptr = NULL;
    if (size == 0) return 0;
    uintptr_t stream = (uintptr_t)stream_handle;
    size_t rounded = vram_pool_round(pool->strategy, size);
    vram_pool_lock(&pool->lock);
    if (!rounded || rounded > pool->device_total || (pool->limit && rounded > pool->limit)) {
        const char *why = pool->limit && rounded <= pool->device_total && rounded
                              ? "the request exceeds the pool limit"
                              : "the request exceeds the device's total memory";
        int rc = oom_error(pool, size, rounded, stream, why);
        vram_pool_unlock(&pool->lock);
        return rc;
    }
    int kind = vram_pool_size_kind(rounded);
    /* Before a block is chosen: a split moves blocks. Two per allocation
     * keep up with homed blocks growing by one. */
    for (int i = 0; i < 2 && 2 * pool->blocks.homed >= vram_blocks_bucket_count(&pool->blocks); i++)
        bucket_split(pool);
    vram_pool_block_t *b = find_claimed(pool, kind, stream, rounded);
    int rc = 0;
    if (!b) rc = alloc_slow(pool, kind, stream, size, rounded, &b);
    if (!rc) rc = take_block(pool, b, rounded, size, &b);
    if (!rc) {
        if (pool->trace) vram_pool_trace_alloc(pool, b, size);
        *ptr = (void *)b->addr;
    }
    vram_pool_unlock(&pool->lock);
    return rc;
}

/* ---- free ------------------------------------------------------------- */

/* Merges free block `b` with free neighbour `n` (n directly after b). */
static void absorb_next(vram_pool_t *pool, vram_pool_block_t *b, vram_pool_block_t *n)
{
    vram_pool_block_t *after = vram_pool_next_block(pool, n);
    b->size += n->size;
    b->next = n->next;
    if (after)
        after->prev = vram_block_id(&pool->blocks, b);
    else if (b->expandable)
        b->segment->last = vram_block_id(&pool->blocks, b);
    vram_blocks_delete(&pool->blocks, n);
}

int vram_pool_free(vram_pool_t *pool, void *ptr)
{
    if (!pool) return vram_fail(VRAM_EINVAL, "vram_pool_free: pool must not be NULL");
    if (!ptr) return 0;
    vram_pool_lock(&pool->lock);
    vram_pool_block_t *b = vram_blocks_find_homed(&pool->blocks, (uintptr_t)ptr);
    uint64_t id;
    if (!b && pool->overflow.count && vram_map_take(&pool->overflow, (uintptr_t)ptr, &id))
        b = pool->blocks.base + id;
    if (!b) {
        pool->stats.num_invalid_frees++;
        vram_pool_unlock(&pool->lock);
        return vram_fail(VRAM_EINVAL,
                         "vram_pool_free: pointer %p was not allocated by this pool or was "
                         "already freed",
                         ptr);
    }
    if (pool->trace) vram_pool_trace_free(pool, b);
    int kind = vram_pool_size_kind(b->u.live.requested);
    vram_pool_counter_sub(&pool->counters.allocation, kind, 1);
    vram_pool_counter_sub(&pool->counters.allocated_bytes, kind, (int64_t)b->size);
    vram_pool_counter_sub(&pool->counters.requested_bytes, kind, (int64_t)b->u.live.requested);
    vram_block_table_t *t = &pool->blocks;
    vram_block_set_allocated(t, b, false);
    /* The free map answers without reading the neighbours: they are read
     * only to merge with them. */
    if (vram_block_free_at(t, b->next)) {
        vram_pool_block_t *next = vram_pool_next_block(pool, b);
        tree_take(pool, next);
        absorb_next(pool, b, next);
    }
    if (vram_block_free_at(t, b->prev)) {
        vram_pool_block_t *prev = vram_pool_prev_block(pool, b);
        tree_take(pool, prev);
        absorb_next(pool, prev, b);
        b = prev;
    }
    if (vram_pool_block_spans_segment(b)) {
        idle_enter(pool, b);
        tree_put(pool, b);
        if (release_on_idle(pool, b)) segment_release(pool, b->segment);
    } else {
        tree_put(pool, b);
    }
    if (pool->strategy == VRAM_POOL_FRAGMENTATION_AWARE) fragmentation_check(pool);
    vram_pool_unlock(&pool->lock);
    return 0;
}

/* ---- trim, limit, handlers ------------------------------------------- */

int vram_pool_trim(vram_pool_t *pool, uint64_t *released)
{
    if (!pool) return vram_fail(VRAM_EINVAL, "vram_pool_trim: pool must not be NULL");
    vram_pool_lock(&pool->lock);
    uint64_t n = release_cache(pool, UINT64_MAX);
    vram_pool_unlock(&pool->lock);
    if (released) *released = n;
    return 0;
}

int vram_pool_set_limit(vram_pool_t *pool, uint64_t limit_bytes)
{
    if (!pool) return vram_fail(VRAM_EINVAL, "vram_pool_set_limit: pool must not be NULL");
    vram_pool_lock(&pool->lock);
    pool->limit = limit_bytes;
    pool->stats.limit_bytes = limit_bytes;
    if (limit_bytes) {
        uint64_t reserved = (uint64_t)pool->stats.reserved_bytes[VRAM_POOL_STAT_ALL].current;
        if (reserved > limit_bytes) release_cache(pool, reserved - limit_bytes);
    }
    vram_pool_unlock(&pool->lock);
    return 0;
}

int vram_pool_add_oom_handler(vram_pool_t *pool, vram_pool_oom_fn fn, void *user)
{
    if (!pool || !fn)
        return vram_fail(VRAM_EINVAL, "vram_pool_add_oom_handler: pool and fn must not be NULL");
    vram_pool_lock(&pool->lock);
    int rc = 0;
    if (pool->handler_count == VRAM_POOL_MAX_OOM_HANDLERS) {
        rc = vram_fail(VRAM_ENOMEM, "vram_pool_add_oom_handler: at most %d handlers per pool",
                       VRAM_POOL_MAX_OOM_HANDLERS);
    } else {
        pool->handlers[pool->handler_count].fn = fn;
        pool->handlers[pool->handler_count].user = user;
        pool->handler_count++;
    }
    vram_pool_unlock(&pool->lock);
    return rc;
}

/* ---- create / destroy ------------------------------------------------- */

int vram_pool_config_from_options(vram_pool_config_t *cfg)
{
    if (!cfg) return vram_fail(VRAM_EINVAL, "vram_pool_config_from_options: cfg is NULL");
    vram_pool_config_t c = {0};
    int rc = vram_pool_strategy_parse(vram_option_str(VRAM_OPT_POOL_STRATEGY), &c.strategy);
    if (rc) return vram_fail(rc, "VRAM_POOL_STRATEGY: %s", vram_last_error());
    /* A fraction stays a fraction until the pool knows the device's total;
     * the core's rule tells the two forms apart and validates both. */
    const char *limit = vram_option_str(VRAM_OPT_POOL_LIMIT);
    uint64_t checked;
    rc = vram_parse_size_or_fraction(limit, 0, &checked);
    if (rc) return vram_fail(rc, "VRAM_POOL_LIMIT: %s", vram_last_error());
    if (strchr(limit, '.') && !strpbrk(limit, "bBkKmMgGtT"))
        c.limit_fraction = strtod(limit, NULL);
    else
        vram_parse_size(limit, &c.limit_bytes);
    const char *trace = vram_option_str(VRAM_OPT_POOL_TRACE);
    c.trace_path = *trace ? trace : NULL;
    rc = vram_pool_expandable_parse(vram_option_str(VRAM_OPT_POOL_EXPANDABLE), &c.expandable);
    if (rc) return vram_fail(rc, "VRAM_POOL_EXPANDABLE: %s", vram_last_error());
    *cfg = c;
    return 0;
}

int vram_pool_create_on(const vram_pool_source_t *src, const vram_pool_config_t *cfg,
                        vram_pool_t **out)
{
    if (!src || !out) return vram_fail(VRAM_EINVAL, "vram_pool_create: source and out required");
    vram_pool_config_t c;
    if (cfg) {
        c = *cfg;
    } else {
        int rc = vram_pool_config_from_options(&c);
        if (rc) return rc;
    }
    if ((unsigned)c.strategy >= VRAM_POOL_STRATEGY_COUNT_)
        return vram_fail(VRAM_EINVAL, "vram_pool_create: unknown strategy %d", (int)c.strategy);
    if (!(c.limit_fraction >= 0 && c.limit_fraction <= 1))
        return vram_fail(VRAM_EINVAL, "vram_pool_create: limit_fraction %g is not in [0, 1]",
                         c.limit_fraction);
    uint64_t total = VRAM_UNKNOWN_U64, free_bytes = VRAM_UNKNOWN_U64;
    if (src->memory) {
        int rc = src->memory(src->user, &total, &free_bytes);
        if (rc) return rc;
    }
    vram_pool_t *pool = calloc(1, sizeof *pool);
    if (!pool) return vram_fail(VRAM_ENOMEM, "vram_pool_create: out of host memory");
    if (vram_blocks_reserve(&pool->blocks)) {
        free(pool);
        return VRAM_ENOMEM;
    }
    pool->src = *src;
    pool->strategy = c.strategy;
    for (int k = 0; k < 2; k++) {
        pool->free_blocks[k].bin_bits = vram_pool_bin_bits(c.strategy);
        pool->free_blocks[k].ctx.blocks = &pool->blocks;
        pool->free_blocks[k].ctx.base = pool->blocks.base;
        pool->free_blocks[k].ctx.rank_class_bits = vram_pool_rank_class_bits(c.strategy);
    }
    /* The default stream's bins now, not inside its first allocation: a
     * fresh pool's first alloc+free pair then costs ~2 µs instead of ~8. */
    for (int k = 0; k < 2; k++) {
        int rc = vram_free_index_reserve(&pool->free_blocks[k], 0, true);
        if (rc) {
            vram_pool_destroy(pool);
            return rc;
        }
    }
    pool->device_total = total == VRAM_UNKNOWN_U64 ? UINT64_MAX : total;
    /* Expandable segments where the source has virtual memory (a granule
     * that is a multiple of the block alignment), unless turned off. */
    size_t granularity = 0;
    if (c.expandable != VRAM_POOL_EXPANDABLE_OFF && src->vmm_granularity &&
        !src->vmm_granularity(src->user, &granularity) && granularity &&
        granularity % VRAM_POOL_ALIGN == 0)
        pool->granularity = granularity;
    pool->limit = c.limit_bytes;
    if (!pool->limit && c.limit_fraction > 0 && total != VRAM_UNKNOWN_U64)
        pool->limit = (uint64_t)((double)total * c.limit_fraction);
    pool->stats.limit_bytes = pool->limit;
    pool->next_trace_id = 1;
    if (c.trace_path && *c.trace_path) {
        int rc = vram_pool_trace_open(pool, c.trace_path);
        if (rc) {
            vram_pool_destroy(pool);
            return rc;
        }
    }
    *out = pool;
    return 0;
}

void vram_pool_destroy(vram_pool_t *pool)
{
    if (!pool) return;
    vram_pool_segment_t *seg = pool->segments, *next;
    for (; seg; seg = next) {
        next = seg->next;
        if (seg->reservation)
            vram_granules_unmap_inside(pool, seg->reservation, seg->base, seg->base + seg->size);
        else
            pool->src.free(pool->src.user, (void *)seg->base);
        free(seg);
    }
    for (vram_pool_reservation_t *r = pool->reservations, *rn; r; r = rn) {
        rn = r->next;
        pool->src.vmm_unreserve(pool->src.user, (void *)r->base, r->size);
        vram_granules_release(r);
        free(r);
    }
    vram_blocks_release(&pool->blocks);
    vram_map_clear(&pool->overflow);
    free(pool->idle);
    vram_free_index_release(&pool->free_blocks[0]);
    vram_free_index_release(&pool->free_blocks[1]);
    if (pool->trace) fclose(pool->trace);
    if (pool->owns_source_user) free(pool->src.user);
    free(pool);
}

/* ---- the device of a context as the source ---------------------------- */

typedef struct {
    vram_ctx_t *ctx;
    int device;
} ctx_source_t;

static int ctx_alloc(void *user, size_t size, void **ptr)
{
    ctx_source_t *s = user;
    return vram_device_alloc(s->ctx, s->device, size, ptr);
}

static int ctx_free(void *user, void *ptr)
{
    ctx_source_t *s = user;
    return vram_device_free(s->ctx, s->device, ptr);
}

static int ctx_memory(void *user, uint64_t *total, uint64_t *free_bytes)
{
    ctx_source_t *s = user;
    vram_device_info_t info;
    int rc = vram_device_info(s->ctx, s->device, &info);
    if (rc) return rc;
    *total = info.total_bytes;
    *free_bytes = info.free_bytes;
    return 0;
}

static int ctx_vmm_granularity(void *user, size_t *granularity)
{
    ctx_source_t *s = user;
    return vram_device_vmm_granularity(s->ctx, s->device, granularity);
}

static int ctx_vmm_reserve(void *user, size_t size, void **va)
{
    ctx_source_t *s = user;
    return vram_device_vmm_reserve(s->ctx, s->device, size, va);
}

static int ctx_vmm_unreserve(void *user, void *va, size_t size)
{
    ctx_source_t *s = user;
    return vram_device_vmm_unreserve(s->ctx, s->device, va, size);
}

static int ctx_vmm_map(void *user, void *addr, size_t size)
{
    ctx_source_t *s = user;
    return vram_device_vmm_map(s->ctx, s->device, addr, size);
}

static int ctx_vmm_unmap(void *user, void *addr, size_t size)
{
    ctx_source_t *s = user;
    return vram_device_vmm_unmap(s->ctx, s->device, addr, size);
}

static int ctx_vmm_move(void *user, void *from, void *to, size_t size)
{
    ctx_source_t *s = user;
    return vram_device_vmm_move(s->ctx, s->device, from, to, size);
}

int vram_pool_create(vram_ctx_t *ctx, int device, const vram_pool_config_t *cfg, vram_pool_t **out)
{
    if (!ctx || !out)
        return vram_fail(VRAM_EINVAL, "vram_pool_create: ctx and out must not be NULL");
    if (device < 0 || device >= vram_ctx_device_count(ctx))
        return vram_fail(VRAM_ENODEV, "vram_pool_create: no device %d (the context has %d)", device,
                         vram_ctx_device_count(ctx));
    ctx_source_t *s = malloc(sizeof *s);
    if (!s) return vram_fail(VRAM_ENOMEM, "vram_pool_create: out of host memory");
    s->ctx = ctx;
    s->device = device;
    vram_pool_source_t src = {.alloc = ctx_alloc,
                              .free = ctx_free,
                              .memory = ctx_memory,
                              .user = s,
                              .device = device,
                              .vmm_granularity = ctx_vmm_granularity,
                              .vmm_reserve = ctx_vmm_reserve,
                              .vmm_unreserve = ctx_vmm_unreserve,
                              .vmm_map = ctx_vmm_map,
                              .vmm_unmap = ctx_vmm_unmap,
                              .vmm_move = ctx_vmm_move};
    int rc = vram_pool_create_on(&src, cfg, out);
    if (rc) {
        free(s);
        return rc;
    }
    (*out)->owns_source_user = true;
    return 0;
}
