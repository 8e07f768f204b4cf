/* The pool's internal data structures (see docs/pool.md for the design).
 *
 * A pool owns segments (device allocations). Each segment is cut into blocks
 * that tile it exactly, kept in an address-ordered doubly linked list so a
 * freed block finds its neighbours in O(1). Free blocks sit in size bins per
 * pool kind (small/large) and stream, each bin a short sorted array or a
 * red-black tree ordered by (rank, tie, address), so best fit is a bitmap
 * lookup plus one search in a bin; allocated blocks sit in the bucket their
 * address hashes to (or, when it is full, in an overflow map), so free()
 * finds them with one read. Everything is guarded by pool->lock. */
#ifndef VRAM_POOL_INTERNAL_H
#define VRAM_POOL_INTERNAL_H

#include "core/map.h"
#include "pool/pool_lock.h"
#include "vram.h"

#include <stdio.h>

#define VRAM_POOL_ALIGN            512u        /* every block size is a multiple */
#define VRAM_POOL_SMALL_MAX        (1u << 20)  /* requests up to 1 MiB use the small pool */
#define VRAM_POOL_SMALL_SEG        (2u << 20)  /* small-pool segment */
#define VRAM_POOL_LARGE_MIN        (10u << 20) /* above: a segment of the request's size */
#define VRAM_POOL_MID_SEG          (20u << 20) /* segment for 1..10 MiB requests */
#define VRAM_POOL_GRANULE          (2u << 20)  /* large segments are multiples */
#define VRAM_POOL_MAX_OOM_HANDLERS 16

typedef struct vram_pool_segment vram_pool_segment_t;
typedef struct vram_pool_block vram_pool_block_t;

enum { VRAM_POOL_KIND_SMALL = 0, VRAM_POOL_KIND_LARGE = 1 };

/* Blocks link to each other by 32-bit ids (index into the pool's block
 * table; 0 = none) rather than pointers, so a block fits one 64-byte cache
 * line: with 100,000 live blocks the metadata is far beyond L2 and a random
 * free touches the block and both neighbours, so every line saved is a
 * cache miss saved (docs/pool.md, "Data structures"). */
typedef uint32_t vram_block_id_t;

/* A block tiles part of a segment. Allocated blocks use `live`, free blocks
 * the tree links (a free block is in a bin, an allocated one is found by
 * its address). */
struct vram_pool_block {
    uintptr_t addr;
    size_t size; /* multiple of VRAM_POOL_ALIGN */
    uintptr_t stream;
    vram_pool_segment_t *segment;
    vram_block_id_t prev, next; /* address order within the segment */
    union {
        struct {
            vram_block_id_t left, right, parent;
            uint32_t idle_pos; /* spanning an idle segment: its place in pool->idle */
        } node;
        struct {
            size_t requested;  /* bytes asked for */
            uint64_t trace_id; /* id in the trace file, 0 when not tracing */
        } live;
    } u;
    uint32_t seg_seq; /* the segment's creation order (low 32 bits), the tree's tie */
    bool allocated;   /* also in the table's free map, which neighbours read */
    unsigned red : 1;
    unsigned kind : 1;       /* the segment's, copied so the hot paths need not touch it */
    unsigned expandable : 1; /* the segment is expandable (copied likewise) */
} __attribute__((aligned(64)));

_Static_assert(sizeof(vram_pool_block_t) == 64, "a block must fit one cache line");

/* Block structs live in one address range the pool reserves up front (not
 * backed by memory until used), so ids and pointers convert with an add and
 * a shift. The lower half is a slab (with a list of spare slots) where
 * blocks are made; the upper half holds buckets of two slots, and a block in
 * a bucket always sits in the bucket its address hashes to, its *home*. An
 * allocation moves its block home when there is room, so free() finds the
 * block by reading the one 128-byte bucket its pointer names: one cache miss
 * where a map slot followed by the block was two dependent ones at 100,000
 * live blocks. Allocated blocks whose bucket is full stay in the slab and are
 * found through an overflow map; free blocks stay where they are. A moved
 * block's neighbours and segment follow it (their ids change, nothing else
 * holds a block across calls). Slot 0 is never used: id 0 means "none".
 *
 * The buckets grow one at a time (linear hashing): with 2^level + split
 * buckets, an address whose hash falls below `split` in the low `level`
 * bits uses one more bit. Adding bucket 2^level + split moves the blocks of
 * bucket `split` whose extra bit is set, at most two, so the table never
 * stops to rehash everything. */
#define VRAM_BLOCK_IDS_MAX (1u << 28) /* 16 GiB of address space, less under `ulimit -v` */
#define VRAM_BLOCK_IDS_MIN (1u << 20) /* 64 MiB: 512 K blocks in the slab */

typedef struct {
    void *reservation;       /* the mapping, for munmap */
    size_t reserved;         /* its bytes */
    vram_pool_block_t *base; /* the reserved slots, 2 MiB aligned */
    uint32_t slab_max;       /* the slab's half (ids below); buckets are the other */
    /* One bit per id, set when the block is free (kept with `allocated`).
     * At a bit per block it stays in the L2 cache where the 64-byte blocks
     * do not, so free() learns whether its neighbours are free, the common
     * answer being no, without touching them. */
    uint64_t *free_map;
    uint32_t used;           /* slab slots handed out so far (ids 1 .. used - 1) */
    uint32_t mapped;         /* slab slots backed by read-write memory */
    vram_block_id_t spare;   /* slab slots given back, linked through `next` */
    int level;               /* 2^level + split buckets */
    uint32_t split;          /* next bucket to split, < 2^level */
    uint32_t buckets_mapped; /* buckets backed by read-write memory */
    size_t homed;            /* blocks in buckets */
} vram_block_table_t;

static inline vram_pool_block_t *vram_block_at(const vram_block_table_t *t, vram_block_id_t id)
{
    return id ? t->base + id : NULL;
}

static inline vram_block_id_t vram_block_id(const vram_block_table_t *t, const vram_pool_block_t *b)
{
    return b ? (vram_block_id_t)(b - t->base) : 0;
}

static inline void vram_block_set_free(vram_block_table_t *t, vram_block_id_t id, bool free)
{
    uint64_t bit = (uint64_t)1 << (id % 64);
    t->free_map[id / 64] = free ? t->free_map[id / 64] | bit : t->free_map[id / 64] & ~bit;
}

static inline bool vram_block_free_at(const vram_block_table_t *t, vram_block_id_t id)
{
    return (t->free_map[id / 64] >> (id % 64)) & 1; /* id 0 ("none") is never free */
}

static inline void vram_block_set_allocated(vram_block_table_t *t, vram_pool_block_t *b,
                                            bool allocated)
{
    b->allocated = allocated;
    vram_block_set_free(t, (vram_block_id_t)(b - t->base), !allocated);
}

/* Block table (blocks.c). */
int vram_blocks_reserve(vram_block_table_t *t);
void vram_blocks_release(vram_block_table_t *t);
/* A zeroed slab slot, or NULL when host memory runs out. */
vram_pool_block_t *vram_blocks_new(vram_block_table_t *t);
/* Gives a slot back: a slab slot to the spare list, a bucket slot emptied. */
void vram_blocks_delete(vram_block_table_t *t, vram_pool_block_t *b);
/* A mix of the address (its 512-byte unit) whose low bits linear hashing
 * uses: one multiply, then the high half folded onto the low one (a plain
 * multiply leaves the low bits depending on the low bits alone). Every free
 * waits on it before it can read its bucket: a second multiply and
 * xor-shift round cost ~7 more cycles there. */
static inline uint64_t vram_blocks_hash(uintptr_t addr)
{
    uint64_t h = (uint64_t)addr / 512u * 0x9e3779b97f4a7c15ull;
    return h ^ (h >> 32);
}
static inline uint64_t vram_blocks_bucket_index(const vram_block_table_t *t, uintptr_t addr)
{
    uint64_t h = vram_blocks_hash(addr), i = h & (((uint64_t)1 << t->level) - 1);
    return i < t->split ? h & (((uint64_t)2 << t->level) - 1) : i;
}
/* The two slots of the bucket `addr` hashes to. */
static inline vram_pool_block_t *vram_blocks_bucket(const vram_block_table_t *t, uintptr_t addr)
{
    return t->base + t->slab_max + 2 * vram_blocks_bucket_index(t, addr);
}
static inline bool vram_blocks_homed(const vram_block_table_t *t, const vram_pool_block_t *b)
{
    return b - t->base >= (ptrdiff_t)t->slab_max;
}
static inline size_t vram_blocks_bucket_count(const vram_block_table_t *t)
{
    return ((size_t)1 << t->level) + t->split;
}
/* An empty slot of addr's bucket, or NULL when both are taken. */
vram_pool_block_t *vram_blocks_home(const vram_block_table_t *t, uintptr_t addr);
/* The allocated block at `addr` in its bucket, or NULL. */
vram_pool_block_t *vram_blocks_find_homed(const vram_block_table_t *t, uintptr_t addr);
/* Adds a bucket: maps it, then returns the two slots of the bucket that
 * splits, whose blocks the caller must pass to vram_blocks_rehome (they may
 * belong to the new bucket now). NULL when out of memory or buckets. */
vram_pool_block_t *vram_blocks_add_bucket(vram_block_table_t *t);
/* Copies b into the unused slot `to` and points b's neighbours and, when b
 * is the first block of its segment, the segment at it. Returns `to`; b's
 * old slot is the caller's to delete or reuse. */
vram_pool_block_t *vram_blocks_move(vram_block_table_t *t, vram_pool_block_t *b,
                                    vram_pool_block_t *to);
/* A block with no neighbours spans its whole segment; when it is free, the
 * segment is idle (holds no allocation). */
static inline bool vram_pool_block_spans_segment(const vram_pool_block_t *b)
{
    return !b->prev && !b->next;
}
/* The last block of an expandable segment, when free, is its wilderness:
 * the only free block that can grow. It stays out of the bins, so a
 * request takes it only when no other free block fits (docs/pool.md,
 * "Fragmentation"). */
static inline bool vram_pool_block_is_wilderness(const vram_pool_block_t *b)
{
    return b->expandable && !b->next && !b->allocated;
}
/* The pool kind of a request (rounded or not: rounding never crosses
 * 1 MiB): small up to 1 MiB. Allocation statistics count by it. */
static inline int vram_pool_size_kind(size_t size)
{
    return size <= VRAM_POOL_SMALL_MAX ? VRAM_POOL_KIND_SMALL : VRAM_POOL_KIND_LARGE;
}

typedef struct vram_pool_reservation vram_pool_reservation_t;

struct vram_pool_segment {
    uintptr_t base;
    size_t size;
    uintptr_t stream;
    int kind;
    uint64_t seq;                     /* creation order: lower = older */
    vram_block_id_t first;            /* lowest block */
    vram_block_id_t last;             /* highest block (kept for expandable segments only) */
    vram_pool_segment_t *prev, *next; /* the pool's list of segments */
    /* Expandable: the reservation whose prefix this segment is (its extent
     * grows and shrinks at its end, granule by granule; its granules are
     * mapped as blocks need them); NULL for a segment from one device
     * allocation. */
    vram_pool_reservation_t *reservation;
};

/* Address space reserved for the expandable segment of one stream, which
 * serves requests of both kinds and is filed as large (docs/pool.md,
 * "Expandable segments"). */
struct vram_pool_reservation {
    uintptr_t base;
    size_t size;
    uintptr_t stream;
    int kind;
    vram_pool_segment_t *segment; /* NULL until the first request */
    /* Per granule of the segment's extent (granules.c): at the first
     * granule of a mapped chunk, the chunk's length in granules (one map
     * call mapped it, one unmap call unmaps it whole), else 0; and a bit
     * per granule, set while mapped. Free blocks may lie over unmapped
     * granules; allocated ones never do. */
    uint32_t *chunk;
    uint64_t *mapped;
    size_t cap;          /* granules both arrays cover (a multiple of 64) */
    size_t mapped_bytes; /* counted in reserved_bytes */
    vram_pool_reservation_t *next;
};

/* Granule bookkeeping of a reservation (granules.c); map and unmap make the
 * device calls and keep num_device_map/unmap and reserved_bytes. */
int vram_granules_reserve(vram_pool_reservation_t *r, size_t granules);
void vram_granules_release(vram_pool_reservation_t *r);
/* Bytes of the granules overlapping [lo, hi) that are not mapped. */
size_t vram_granules_unmapped_bytes(const vram_pool_t *pool, const vram_pool_reservation_t *r,
                                    uintptr_t lo, uintptr_t hi);
/* Maps the granules overlapping [lo, hi) that are not mapped, one chunk
 * (one call) per run of them. */
int vram_granules_map(vram_pool_t *pool, vram_pool_reservation_t *r, uintptr_t lo, uintptr_t hi);
/* Unmaps the chunks lying wholly inside [lo, hi); returns bytes. */
size_t vram_granules_unmap_inside(vram_pool_t *pool, vram_pool_reservation_t *r, uintptr_t lo,
                                  uintptr_t hi);
/* The first run of unmapped granules in [i, end): its first granule in
 * *at, its length returned (0 when none). */
size_t vram_granules_unmapped_run(const vram_pool_reservation_t *r, size_t i, size_t end,
                                  size_t *at);
/* The largest chunk of at most `max` granules lying wholly inside [lo, hi)
 * and outside granules [skip, skip_end): its first granule in *at, its
 * length returned (0 when none). */
size_t vram_granules_chunk_inside(const vram_pool_t *pool, const vram_pool_reservation_t *r,
                                  uintptr_t lo, uintptr_t hi, size_t skip, size_t skip_end,
                                  size_t max, size_t *at);
/* Moves the chunk starting at granule `from` to the unmapped granules from
 * `to` (the source's vmm_move: one call, the same physical memory, none
 * created or released); counts num_device_move. */
int vram_granules_move(vram_pool_t *pool, vram_pool_reservation_t *r, size_t from, size_t to);
/* Before mapping `more` bytes for a request using [lo, hi) of r's segment,
 * when the pool limit would refuse them: moves chunks lying wholly inside
 * free blocks elsewhere in the segment into the request's unmapped
 * granules (the largest that fits first), then unmaps such chunks, a free
 * block at a time from the lowest address, until the limit would take the
 * rest (or none is left). Returns the bytes of [lo, hi)'s granules still
 * unmapped (reclaim.c). */
size_t vram_pool_reclaim_for_limit(vram_pool_t *pool, vram_pool_reservation_t *r, uintptr_t lo,
                                   uintptr_t hi, size_t more);
/* After the device refused to map [lo, hi)'s unmapped granules: moves
 * chunks lying wholly inside free blocks elsewhere into them, the largest
 * that fits first. Returns the bytes still unmapped (reclaim.c). */
size_t vram_pool_reclaim_for_device(vram_pool_t *pool, vram_pool_reservation_t *r, uintptr_t lo,
                                    uintptr_t hi);
/* The end of the last mapped granule below `end` (the base when none). */
uintptr_t vram_granules_mapped_end(const vram_pool_t *pool, const vram_pool_reservation_t *r,
                                   uintptr_t end);
/* Chunks whole, inside the extent, and adding up to mapped_bytes; -1 with a
 * message when not. */
int vram_granules_check(const vram_pool_t *pool, const vram_pool_reservation_t *r, size_t extent,
                        char *err, size_t len);

/* Bin of a block size: 2^bits bins per doubling (the top bits after the
 * leading one). Also the size-class index CONSOLIDATED uses as its rank. */
static inline unsigned vram_size_bin(size_t size, int bits)
{
    int e = 63 - __builtin_clzll((unsigned long long)size);
    if (e < bits) return (unsigned)size; /* tiny sizes: never happens above 512 B */
    return ((unsigned)e << bits) | (unsigned)((size >> (e - bits)) & (((size_t)1 << bits) - 1));
}

#define VRAM_FREE_BINS 4096

/* Bin of a block size in the free index: 2^bits bins per doubling. Up to 6
 * bits this is vram_size_bin; with 7, doublings count from 512 B (no block is
 * smaller) and sizes of 2 TiB and more share the last bin, so 4,096 bins
 * still do. Either way a larger size never gets a lower bin. */
static inline unsigned vram_index_bin(size_t size, int bits)
{
    if (bits <= 6) return vram_size_bin(size, bits);
    int e = 63 - __builtin_clzll((unsigned long long)size);
    if (e < 9) return 0;
    unsigned bin =
        ((unsigned)(e - 9) << bits) | (unsigned)((size >> (e - bits)) & (((size_t)1 << bits) - 1));
    return bin < VRAM_FREE_BINS ? bin : VRAM_FREE_BINS - 1;
}

/* What the trees need besides a block: where ids point, and how a block's
 * rank follows from its size (rank_class_bits 0: the size itself; else the
 * size class with 2^bits classes per doubling). */
typedef struct {
    const vram_block_table_t *blocks;
    vram_pool_block_t *base; /* blocks->base (fixed at creation), one load closer */
    int rank_class_bits;
} vram_tree_ctx_t;

static inline uint64_t vram_tree_rank(const vram_tree_ctx_t *c, size_t size)
{
    return c->rank_class_bits ? vram_size_bin(size, c->rank_class_bits) : size;
}

/* Red-black tree of the free blocks of one bin of one stream; the order is
 * (rank, seg_seq, addr): best fit, then the oldest segment, then the lowest
 * address. */
typedef struct {
    vram_block_id_t root;
    uint32_t count;
} vram_free_tree_t;

void vram_free_tree_insert(const vram_tree_ctx_t *c, vram_free_tree_t *t, vram_pool_block_t *b);
void vram_free_tree_remove(const vram_tree_ctx_t *c, vram_free_tree_t *t, vram_pool_block_t *b);
/* First block with rank >= `rank`, or NULL. */
vram_pool_block_t *vram_free_tree_lower_bound(const vram_tree_ctx_t *c, const vram_free_tree_t *t,
                                              uint64_t rank);
vram_pool_block_t *vram_free_tree_first(const vram_tree_ctx_t *c, const vram_free_tree_t *t);
vram_pool_block_t *vram_free_tree_last(const vram_tree_ctx_t *c, const vram_free_tree_t *t);
vram_pool_block_t *vram_free_tree_next(const vram_tree_ctx_t *c, const vram_pool_block_t *b);
/* Checks order, parent links and red-black rules; returns the black height or
 * -1 (with a message in err) when broken. For tests. */
int vram_free_tree_check(const vram_tree_ctx_t *c, const vram_free_tree_t *t, char *err,
                         size_t len);

/* The free blocks of one pool kind: per stream, segregated bins (2^bits per
 * doubling of size, 4096 at most) each holding a few blocks in a sorted
 * array or more in a red-black tree, and a two-level bitmap of the non-empty
 * bins. Best fit is a lower-bound search in the request's own bin, else the
 * first block of the next non-empty bin found with two find-first-set
 * instructions: O(1) in an array of at most VRAM_BIN_SLOTS, O(log k) in a
 * tree, never a scan of a free list. A stream's bins are created with its first segment (so
 * inserting never fails) and kept until the pool is destroyed. */

/* One bin. Up to VRAM_BIN_SLOTS blocks are kept as a sorted array of (key,
 * id) pairs inside the bin's own two cache lines, so a search, insert or
 * remove reads no block struct (a tree descent reads one per level, each a
 * likely cache miss at 100,000 live blocks); only blocks with equal keys
 * (same rank and segment) are read to order them by address. A bin that
 * outgrows its slots moves them into its red-black tree and uses that until
 * it shrinks to VRAM_BIN_SLOTS / 2 blocks. Exactly one of the two holds the
 * bin's blocks: `n` is 0 whenever the tree is in use. */
#define VRAM_BIN_SLOTS 9

typedef struct {
    vram_free_tree_t tree; /* the bin's blocks when there are too many for the slots */
    uint32_t n;            /* blocks in the slots, in (key, address) order */
    vram_block_id_t ids[VRAM_BIN_SLOTS];
    uint64_t keys[VRAM_BIN_SLOTS]; /* rank (32 bits, see free_index.c) << 32 | seg_seq */
} __attribute__((aligned(64))) vram_free_bin_t;

_Static_assert(sizeof(vram_free_bin_t) == 128, "a bin must fit two cache lines");

/* The bitmaps come first so that they share a page with the first bins: a
 * heap is mapped zeroed and its pages are faulted in as they are used. */
typedef struct vram_free_heap {
    uintptr_t stream;
    struct vram_free_heap *next;
    uint64_t summary; /* bit w: bitmap[w] != 0 */
    uint64_t bitmap[VRAM_FREE_BINS / 64];
    vram_free_bin_t bins[VRAM_FREE_BINS];
} vram_free_heap_t;

typedef struct {
    vram_tree_ctx_t ctx;     /* the pool's block table and rank rule */
    vram_free_heap_t *heaps; /* every stream's bins */
    vram_free_heap_t *last;  /* the most recently used, checked first */
    size_t count;            /* free blocks in all heaps */
    int bin_bits;            /* bins per doubling = 2^bin_bits */
} vram_free_index_t;

vram_free_heap_t *vram_free_index_heap(vram_free_index_t *x, uintptr_t stream);
/* Makes sure `stream` has bins; VRAM_ENOMEM when host memory runs out.
 * `prefault`: fault every page in now (else only the bitmaps' page; the
 * bins' pages are faulted in as they are first used). */
int vram_free_index_reserve(vram_free_index_t *x, uintptr_t stream, bool prefault);
void vram_free_index_insert(vram_free_index_t *x, vram_pool_block_t *b, unsigned bin);
void vram_free_index_remove(vram_free_index_t *x, vram_pool_block_t *b, unsigned bin);
/* First block of `stream` with rank >= `rank`, searching from bin `bin`. */
vram_pool_block_t *vram_free_index_find(vram_free_index_t *x, uintptr_t stream, uint64_t rank,
                                        unsigned bin);
/* Highest non-empty bin of a heap, or -1. */
int vram_free_heap_top(const vram_free_heap_t *h);
/* Largest block size in a non-empty bin; `ordered_by_size`: the bin's last
 * block is its largest (exact-size ranks), else every block is looked at. */
uint64_t vram_free_bin_largest(const vram_free_index_t *x, const vram_free_bin_t *bin,
                               bool ordered_by_size);
void vram_free_index_release(vram_free_index_t *x);
/* Checks every bin's tree and the bitmaps; -1 with a message when broken. */
int vram_free_index_check(const vram_free_index_t *x, char *err, size_t len);

/* Where segments come from: the device of a context, or (tests, benchmarks)
 * any other provider of address ranges. Calls are made under the pool lock. */
typedef struct {
    int (*alloc)(void *user, size_t size, void **ptr);
    int (*free)(void *user, void *ptr);
    /* Device memory for limits and messages; VRAM_UNKNOWN_U64 when unknown. */
    int (*memory)(void *user, uint64_t *total, uint64_t *free_bytes);
    void *user;
    int device; /* reported in messages and snapshots */
    /* Virtual memory for expandable segments; all NULL when the source has
     * none (the contract of vram_device_vmm_* in vram.h). */
    int (*vmm_granularity)(void *user, size_t *granularity);
    int (*vmm_reserve)(void *user, size_t size, void **va);
    int (*vmm_unreserve)(void *user, void *va, size_t size);
    int (*vmm_map)(void *user, void *addr, size_t size);
    int (*vmm_unmap)(void *user, void *addr, size_t size);
    /* May be NULL with the others set: chunks are then never moved. */
    int (*vmm_move)(void *user, void *from, void *to, size_t size);
} vram_pool_source_t;

int vram_pool_create_on(const vram_pool_source_t *src, const vram_pool_config_t *cfg,
                        vram_pool_t **out);

/* A statistic that every allocation and free updates (allocations, their
 * bytes, inactive splits), kept per pool kind only: the "all" entry is the
 * sum, made when read, except its peak, which no sum gives; and what was
 * removed is what was added less what is current. A decrease is then one
 * subtraction where a vram_pool_stat_t per entry took four updates, an
 * increase five operations instead of six and two comparisons. */
typedef struct {
    int64_t current[2], added[2], peak[2]; /* by pool kind */
    int64_t peak_all;
} vram_pool_counter_t;

static inline void vram_pool_counter_add(vram_pool_counter_t *c, int kind, int64_t n)
{
    c->current[kind] += n;
    c->added[kind] += n;
    if (c->current[kind] > c->peak[kind]) c->peak[kind] = c->current[kind];
    int64_t all = c->current[0] + c->current[1];
    if (all > c->peak_all) c->peak_all = all;
}

static inline void vram_pool_counter_sub(vram_pool_counter_t *c, int kind, int64_t n)
{
    c->current[kind] -= n;
}

static inline int64_t vram_pool_counter_total(const vram_pool_counter_t *c)
{
    return c->current[0] + c->current[1];
}

/* The hot statistics of vram_pool_stats_t, as counters (stats.c fills the
 * public entries from them). */
typedef struct {
    vram_pool_counter_t allocation, allocated_bytes, requested_bytes;
    vram_pool_counter_t inactive_split, inactive_split_bytes;
} vram_pool_counters_t;

typedef struct {
    vram_pool_oom_fn fn;
    void *user;
} vram_pool_handler_t;

struct vram_pool {
    vram_pool_lock_t lock; /* pool_lock.h; zero (calloc) is unlocked */
    vram_pool_source_t src;
    bool owns_source_user; /* src.user is ours to free (vram_pool_create) */
    bool refused_by_limit; /* why the last grow failed, for the OOM message */
    vram_pool_strategy_t strategy;
    uint64_t device_total;            /* requests above fail at once */
    uint64_t limit;                   /* 0 = none */
    vram_free_index_t free_blocks[2]; /* per kind */
    vram_map_t overflow;              /* address -> id of allocated blocks not in their bucket */
    vram_pool_segment_t *segments;    /* doubly linked, newest first */
    uint64_t next_seq;
    /* Wholly free segments, by the block that spans each (most recently idle
     * last). An array, not a list through the segments: entering and leaving
     * it touches the block, which is at hand, and the array's end. Room for
     * every segment is made when one is created, so entering never fails. */
    vram_block_id_t *idle;
    size_t idle_n, idle_cap;
    uint64_t idle_segment_bytes; /* their bytes */
    size_t idle_count[2];        /* their number per kind */
    uint64_t free_ops;           /* frees since the last fragmentation check */
    vram_pool_stats_t stats;     /* all but the counters' entries, filled when read */
    vram_pool_counters_t counters;
    /* Expandable segments: the granule mapped at a time (0 = off) and one
     * reservation per stream and kind in use. */
    size_t granularity;
    vram_pool_reservation_t *reservations;
    /* Bytes of expandable segments' extents that are not mapped; while 0,
     * an allocation needs no look at granules (nor at the segment). */
    size_t unmapped_extent;
    vram_block_table_t blocks; /* every block struct */
    /* OOM handlers (copied before being called without the lock) */
    vram_pool_handler_t handlers[VRAM_POOL_MAX_OOM_HANDLERS];
    int handler_count;
    /* tracing */
    FILE *trace;
    uint64_t next_trace_id;
};

static inline vram_pool_block_t *vram_pool_first_block(const vram_pool_t *pool,
                                                       const vram_pool_segment_t *seg)
{
    return vram_block_at(&pool->blocks, seg->first);
}

/* Address-order neighbours of a block, NULL at the segment's ends. */
static inline vram_pool_block_t *vram_pool_next_block(const vram_pool_t *pool,
                                                      const vram_pool_block_t *b)
{
    return vram_block_at(&pool->blocks, b->next);
}

static inline vram_pool_block_t *vram_pool_prev_block(const vram_pool_t *pool,
                                                      const vram_pool_block_t *b)
{
    return vram_block_at(&pool->blocks, b->prev);
}

/* Strategy policy (strategy.c). */
/* "auto", "true"/"on"/"yes"/"1", "false"/"off"/"no"/"0" (any case). */
int vram_pool_expandable_parse(const char *text, vram_pool_expandable_t *out);
/* Request size after rounding (512 B, or size classes), 0 on overflow. */
size_t vram_pool_round(vram_pool_strategy_t s, size_t size);
/* Size of the segment to ask the device for, given the rounded request. */
size_t vram_pool_segment_size(vram_pool_strategy_t s, int kind, size_t rounded);
/* The tree rank of a free block and the least rank any block serving `size` may have. */
uint64_t vram_pool_block_rank(vram_pool_strategy_t s, size_t block_size);
uint64_t vram_pool_request_rank(vram_pool_strategy_t s, size_t rounded);
/* 0 when a block's rank is its size, else the size-class bits (see vram_tree_ctx_t). */
int vram_pool_rank_class_bits(vram_pool_strategy_t s);
/* Bins per doubling (log2) of the free index, and the bin a rank falls in. */
int vram_pool_bin_bits(vram_pool_strategy_t s);
unsigned vram_pool_rank_bin(vram_pool_strategy_t s, uint64_t rank);
/* Whether a free block of `block_size` may serve a request of `rounded` bytes. */
bool vram_pool_block_eligible(vram_pool_strategy_t s, size_t block_size, size_t rounded);
/* Whether a wholly free segment of `segment_size` may serve a request of
 * `rounded` bytes (BALANCED keeps big idle segments for requests that fill them). */
bool vram_pool_idle_segment_eligible(vram_pool_strategy_t s, size_t segment_size, size_t rounded);
/* Whether splitting `remainder` bytes off a block that serves a request of
 * `rounded` bytes is worth a separate free block. */
bool vram_pool_should_split(int kind, size_t rounded, size_t remainder);
/* The wilderness of r's expandable segment, NULL when it has none (its
 * last block is allocated, or no segment); and `stream`'s when it holds
 * `rounded` bytes (wilderness.c). */
vram_pool_block_t *vram_pool_wilderness(const vram_pool_t *pool, const vram_pool_reservation_t *r);
vram_pool_block_t *vram_pool_wilderness_fit(const vram_pool_t *pool, uintptr_t stream,
                                            size_t rounded);

/* Statistics bookkeeping; all under the pool lock. Inline: several run on
 * every allocation and free. */
static inline void vram_pool_stat_add(vram_pool_stat_t *stat, int64_t delta)
{
    stat->current += delta;
    if (delta >= 0) {
        stat->allocated += delta;
        if (stat->current > stat->peak) stat->peak = stat->current;
    } else {
        stat->freed -= delta;
    }
}

/* Adds delta to the "all" entry and the kind's entry. */
static inline void vram_pool_stat_update(vram_pool_stat_t stat[VRAM_POOL_STAT_KINDS_], int kind,
                                         int64_t delta)
{
    vram_pool_stat_add(&stat[VRAM_POOL_STAT_ALL], delta);
    vram_pool_stat_add(
        &stat[kind == VRAM_POOL_KIND_SMALL ? VRAM_POOL_STAT_SMALL : VRAM_POOL_STAT_LARGE], delta);
}

/* Largest cached free block over both trees and every stream. */
uint64_t vram_pool_largest_free_locked(const vram_pool_t *pool);
/* Fills derived values (fragmentation, efficiency, largest free block). */
void vram_pool_stats_derive_locked(const vram_pool_t *pool, vram_pool_stats_t *out);

/* Test hooks: walks segments and blocks in address order; checks every
 * internal invariant (tiling, coalescing, tree, map, statistics). */
typedef void (*vram_pool_walk_fn)(const vram_pool_segment_t *seg, const vram_pool_block_t *b,
                                  void *user);
void vram_pool_walk(vram_pool_t *pool, vram_pool_walk_fn fn, void *user);
/* 0 when consistent, else -1 with the first broken invariant in err. */
int vram_pool_check(vram_pool_t *pool, char *err, size_t len);

/* Trace writing (trace_writer.c). */
int vram_pool_trace_open(vram_pool_t *pool, const char *path);
void vram_pool_trace_alloc(vram_pool_t *pool, vram_pool_block_t *b, size_t size);
void vram_pool_trace_free(vram_pool_t *pool, const vram_pool_block_t *b);

#endif
