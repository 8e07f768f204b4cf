/* The pool's internal data structures (see docs/pool.md for the design).
 *
 * A pool owns segments (device allocations). Each segment is cut into blocks
 * that tile it exactly, kept in an address-ordered doubly linked list so a
 * freed block finds its neighbours in O(1). Free blocks sit in a red-black
 * tree per pool kind (small/large) ordered by (stream, rank, tie, address), so
 * best fit is one O(log n) lower-bound search; allocated blocks sit in a hash
 * map from address to block for free(). Everything is guarded by pool->lock. */
#ifndef VRAM_POOL_INTERNAL_H
#define VRAM_POOL_INTERNAL_H

#include "vram.h"

#include <pthread.h>
#include <stdio.h>

#define VRAM_POOL_ALIGN      512u                  /* every block size is a multiple */
#define VRAM_POOL_SMALL_MAX  (1u << 20)            /* requests up to 1 MiB use the small pool */
#define VRAM_POOL_SMALL_SEG  (2u << 20)            /* small-pool segment */
#define VRAM_POOL_LARGE_MIN  (10u << 20)           /* above: a segment of the request's size */
#define VRAM_POOL_MID_SEG    (20u << 20)           /* segment for 1..10 MiB requests */
#define VRAM_POOL_GRANULE    (2u << 20)            /* large segments are multiples */
#define VRAM_POOL_MAX_OOM_HANDLERS 16

typedef struct vram_pool_segment vram_pool_segment_t;
typedef struct vram_pool_block vram_pool_block_t;

enum { VRAM_POOL_KIND_SMALL = 0, VRAM_POOL_KIND_LARGE = 1 };

/* A block tiles part of a segment. Allocated blocks use `live`, free blocks
 * the tree links (a block is in exactly one of the hash map and a tree). */
struct vram_pool_block {
    uintptr_t addr;
    size_t size; /* multiple of VRAM_POOL_ALIGN */
    uintptr_t stream;
    vram_pool_segment_t *segment;
    vram_pool_block_t *prev, *next; /* address order within the segment */
    union {
        struct {
            size_t requested;  /* bytes asked for */
            uint64_t trace_id; /* id in the trace file, 0 when not tracing */
        } live;
        struct {
            vram_pool_block_t *left, *right, *parent;
            uint64_t rank, tie; /* sort key after stream, set by the strategy */
        } node;
    } u;
    bool allocated;
    bool red;
};

struct vram_pool_segment {
    uintptr_t base;
    size_t size;
    uintptr_t stream;
    int kind;
    uint64_t seq;                   /* creation order: lower = older */
    size_t allocated_blocks;        /* 0 = wholly free */
    vram_pool_block_t *first;       /* lowest block */
    vram_pool_segment_t *prev, *next; /* the pool's list of segments */
};

/* Red-black tree of free blocks; the order is (stream, rank, tie, addr). */
typedef struct {
    vram_pool_block_t *root;
    size_t count;
} vram_free_tree_t;

void vram_free_tree_insert(vram_free_tree_t *t, vram_pool_block_t *b);
void vram_free_tree_remove(vram_free_tree_t *t, vram_pool_block_t *b);
/* First block with key >= (stream, rank, 0, 0) on the same stream, or NULL. */
vram_pool_block_t *vram_free_tree_lower_bound(const vram_free_tree_t *t, uintptr_t stream,
                                              uint64_t rank);
vram_pool_block_t *vram_free_tree_first(const vram_free_tree_t *t);
vram_pool_block_t *vram_free_tree_next(const vram_pool_block_t *b);
/* Last block of `stream` (largest key), or NULL. */
vram_pool_block_t *vram_free_tree_last_of(const vram_free_tree_t *t, uintptr_t stream);
/* Checks order, parent links and red-black rules; returns the black height or
 * -1 (with a message in err) when broken. For tests. */
int vram_free_tree_check(const vram_free_tree_t *t, char *err, size_t len);

/* Open-addressing hash map (linear probing, backward-shift deletion) from a
 * key (an allocated block's address; a trace id) to a non-NULL pointer. */
typedef struct {
    uintptr_t *keys;
    void **values; /* NULL = empty slot */
    size_t mask;                /* capacity - 1 (capacity a power of two) */
    size_t count;
} vram_ptr_map_t;

int vram_ptr_map_init(vram_ptr_map_t *m, size_t capacity);
void vram_ptr_map_release(vram_ptr_map_t *m);
/* VRAM_ENOMEM when growing fails (the map is unchanged then). */
int vram_ptr_map_put(vram_ptr_map_t *m, uintptr_t key, void *value);
void *vram_ptr_map_get(const vram_ptr_map_t *m, uintptr_t key);
/* Removes and returns the value, or NULL when absent. */
void *vram_ptr_map_take(vram_ptr_map_t *m, uintptr_t key);

/* Where segments come from: the device of a context, or (tests, benchmarks)
 * any other provider of address ranges. Calls are made under the pool lock. */
typedef struct {
    int (*alloc)(void *user, size_t size, void **ptr);
    int (*free)(void *user, void *ptr);
    /* Device memory for limits and messages; VRAM_UNKNOWN_U64 when unknown. */
    int (*memory)(void *user, uint64_t *total, uint64_t *free_bytes);
    void *user;
    int device; /* reported in messages and snapshots */
} vram_pool_source_t;

int vram_pool_create_on(const vram_pool_source_t *src, const vram_pool_config_t *cfg,
                        vram_pool_t **out);

/* Block structs come from slabs so splitting never calls malloc in the hot path. */
typedef struct vram_block_slab vram_block_slab_t;

struct vram_pool {
    pthread_mutex_t lock;
    vram_pool_source_t src;
    bool owns_source_user; /* src.user is ours to free (vram_pool_create) */
    bool refused_by_limit; /* why the last grow failed, for the OOM message */
    vram_pool_strategy_t strategy;
    uint64_t device_total; /* requests above fail at once */
    uint64_t limit;        /* 0 = none */
    vram_free_tree_t free_blocks[2]; /* per kind */
    vram_ptr_map_t live;
    vram_pool_segment_t *segments; /* doubly linked, newest first */
    uint64_t next_seq;
    uint64_t idle_segment_bytes; /* bytes of wholly free segments */
    uint64_t free_ops;           /* frees since the last fragmentation check */
    vram_pool_stats_t stats;     /* counters and current/peak values */
    /* block allocator */
    vram_pool_block_t *spare_blocks;
    vram_block_slab_t *slabs;
    /* OOM handlers (copied before being called without the lock) */
    struct {
        vram_pool_oom_fn fn;
        void *user;
    } handlers[VRAM_POOL_MAX_OOM_HANDLERS];
    int handler_count;
    /* tracing */
    FILE *trace;
    uint64_t next_trace_id;
};

/* Strategy policy (strategy.c). */
/* Request size after rounding (512 B, or size classes), 0 on overflow. */
size_t vram_pool_round(vram_pool_strategy_t s, size_t size);
/* Size of the segment to ask the device for, given the rounded request. */
size_t vram_pool_segment_size(vram_pool_strategy_t s, int kind, size_t rounded);
/* The tree rank of a free block and the least rank any block serving `size` may have. */
uint64_t vram_pool_block_rank(vram_pool_strategy_t s, size_t block_size);
uint64_t vram_pool_request_rank(vram_pool_strategy_t s, size_t rounded);
/* Whether a free block of `block_size` may serve a request of `rounded` bytes. */
bool vram_pool_block_eligible(vram_pool_strategy_t s, size_t block_size, size_t rounded);
/* Whether splitting off `remainder` bytes is worth a separate free block. */
bool vram_pool_should_split(int kind, size_t remainder);

/* Statistics bookkeeping (stats.c); all under the pool lock. */
void vram_pool_stat_add(vram_pool_stat_t *stat, int64_t delta);
/* Adds delta to the "all" entry and the kind's entry. */
void vram_pool_stat_update(vram_pool_stat_t stat[VRAM_POOL_STAT_KINDS_], int kind, int64_t delta);
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
