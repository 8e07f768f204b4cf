/* PyTorch's default caching policy, re-implemented as a baseline (see
 * torch_policy.h; the rules and where they come from: docs/pool.md,
 * "Baselines"). Blocks tile segments in address order; free blocks sit in
 * one ordered set per pool kind keyed by (stream, size, address), so best
 * fit is a lower bound, as PyTorch's std::set of blocks. The set here is a
 * treap (a randomized balanced tree): the shape of the cost, O(log n) per
 * search, is PyTorch's.
 *
 * Locks: PyTorch's DeviceCachingAllocator takes its (recursive) mutex in
 * every public method, malloc and free included ("All public methods ...
 * acquire the allocator mutex"), and the map from pointers to allocated
 * blocks has a mutex of its own (add_allocated_block, get_allocated_block;
 * sharded since PyTorch 2.1, one std::mutex before): two lock/unlock pairs
 * per malloc and per free, uncontended or not (c10/cuda/
 * CUDACachingAllocator.cpp). The baseline takes the same two, so its
 * figures are what a thread-safe allocator with this policy costs, like
 * the pool's (one mutex per call); `locked` false leaves them out, to show
 * what they cost. */
#include "pool/tools/torch_policy.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* PyTorch's constants (CUDACachingAllocator.cpp). */
#define TP_MIN_BLOCK      512u                /* kMinBlockSize: every size a multiple */
#define TP_SMALL_SIZE     ((size_t)1 << 20)   /* kSmallSize: the small pool's largest request */
#define TP_SMALL_BUFFER   ((size_t)2 << 20)   /* kSmallBuffer: small-pool segments */
#define TP_LARGE_BUFFER   ((size_t)20 << 20)  /* kLargeBuffer: segments for 1-10 MiB requests */
#define TP_MIN_LARGE      ((size_t)10 << 20)  /* kMinLargeAlloc: above, the request rounded */
#define TP_ROUND_LARGE    ((size_t)2 << 20)   /* kRoundLarge */
#define TP_VA_PER_SEGMENT ((uint64_t)1 << 40) /* expandable: address space per stream and kind */

typedef struct tp_segment tp_segment_t;

typedef struct tp_block {
    uintptr_t addr;
    size_t size;
    uintptr_t stream;
    tp_segment_t *seg;
    struct tp_block *prev, *next;  /* address order within the segment */
    struct tp_block *left, *right; /* treap links while free */
    uint32_t prio;
    bool allocated;
} tp_block_t;

struct tp_segment {
    uintptr_t base;
    size_t size; /* bytes held on the device (expandable: mapped so far) */
    uintptr_t stream;
    int kind;
    tp_block_t *first, *last;
    tp_segment_t *next_seg;
};

struct vram_torch_policy {
    vram_pool_source_t src;
    bool expandable;
    uint64_t device_total;
    tp_block_t *free_set[2]; /* per kind: treap roots */
    tp_segment_t *segments;
    vram_map_t live; /* address -> block of allocated blocks */
    uint64_t rng;
    uintptr_t next_va; /* expandable: the next reservation */
    vram_torch_policy_stats_t stats;
    bool locked;
    pthread_mutex_t mutex;        /* everything but `live`; recursive, as PyTorch's */
    pthread_mutex_t blocks_mutex; /* `live` */
};

static void lock(const vram_torch_policy_t *p, pthread_mutex_t *m)
{
    if (p->locked) pthread_mutex_lock(m);
}

static void unlock(const vram_torch_policy_t *p, pthread_mutex_t *m)
{
    if (p->locked) pthread_mutex_unlock(m);
}

/* ---- the ordered set of free blocks ----------------------------------- */

static bool key_less(const tp_block_t *a, const tp_block_t *b)
{
    if (a->stream != b->stream) return a->stream < b->stream;
    if (a->size != b->size) return a->size < b->size;
    return a->addr < b->addr;
}

static tp_block_t *rotate_right(tp_block_t *t)
{
    tp_block_t *l = t->left;
    t->left = l->right;
    l->right = t;
    return l;
}

static tp_block_t *rotate_left(tp_block_t *t)
{
    tp_block_t *r = t->right;
    t->right = r->left;
    r->left = t;
    return r;
}

static tp_block_t *set_insert(tp_block_t *t, tp_block_t *b)
{
    if (!t) return b;
    if (key_less(b, t)) {
        t->left = set_insert(t->left, b);
        if (t->left->prio > t->prio) t = rotate_right(t);
    } else {
        t->right = set_insert(t->right, b);
        if (t->right->prio > t->prio) t = rotate_left(t);
    }
    return t;
}

static tp_block_t *set_remove(tp_block_t *t, tp_block_t *b)
{
    if (!t) return NULL;
    if (t == b) {
        if (!t->left) return t->right;
        if (!t->right) return t->left;
        if (t->left->prio > t->right->prio) {
            t = rotate_right(t);
            t->right = set_remove(t->right, b);
        } else {
            t = rotate_left(t);
            t->left = set_remove(t->left, b);
        }
        return t;
    }
    if (key_less(b, t))
        t->left = set_remove(t->left, b);
    else
        t->right = set_remove(t->right, b);
    return t;
}

/* Smallest free block of `stream` with size >= size (PyTorch's lower_bound
 * on (stream, size) and its check that the stream matches). */
static tp_block_t *set_best_fit(tp_block_t *t, uintptr_t stream, size_t size)
{
    tp_block_t *best = NULL;
    while (t) {
        bool t_fits = t->stream > stream || (t->stream == stream && t->size >= size);
        if (t_fits) {
            best = t;
            t = t->left;
        } else {
            t = t->right;
        }
    }
    return best && best->stream == stream ? best : NULL;
}

static void free_put(vram_torch_policy_t *p, tp_block_t *b)
{
    p->rng ^= p->rng << 13;
    p->rng ^= p->rng >> 7;
    p->rng ^= p->rng << 17;
    b->prio = (uint32_t)p->rng;
    b->left = b->right = NULL;
    b->allocated = false;
    p->free_set[b->seg->kind] = set_insert(p->free_set[b->seg->kind], b);
}

static void free_take(vram_torch_policy_t *p, tp_block_t *b)
{
    p->free_set[b->seg->kind] = set_remove(p->free_set[b->seg->kind], b);
}

/* ---- sizes (PyTorch's round_size, get_allocation_size, should_split) -- */

static size_t round_size(size_t size)
{
    if (size < TP_MIN_BLOCK) return TP_MIN_BLOCK;
    return (size + TP_MIN_BLOCK - 1) / TP_MIN_BLOCK * TP_MIN_BLOCK;
}

static size_t allocation_size(size_t rounded)
{
    if (rounded <= TP_SMALL_SIZE) return TP_SMALL_BUFFER;
    if (rounded < TP_MIN_LARGE) return TP_LARGE_BUFFER;
    return (rounded + TP_ROUND_LARGE - 1) / TP_ROUND_LARGE * TP_ROUND_LARGE;
}

static bool should_split(int kind, size_t remaining)
{
    return kind == VRAM_POOL_KIND_SMALL ? remaining >= TP_MIN_BLOCK : remaining > TP_SMALL_SIZE;
}

/* ---- segments --------------------------------------------------------- */

static tp_block_t *block_new(tp_segment_t *seg, uintptr_t addr, size_t size)
{
    tp_block_t *b = calloc(1, sizeof *b);
    if (!b) return NULL;
    b->addr = addr;
    b->size = size;
    b->stream = seg->stream;
    b->seg = seg;
    return b;
}

static void reserve_add(vram_torch_policy_t *p, int64_t delta)
{
    p->stats.reserved_bytes += (uint64_t)delta;
    if (p->stats.reserved_bytes > p->stats.peak_reserved_bytes)
        p->stats.peak_reserved_bytes = p->stats.reserved_bytes;
}

/* cudaMalloc of a segment holding one free block (in the set). */
static int segment_alloc(vram_torch_policy_t *p, int kind, uintptr_t stream, size_t size)
{
    if (size > p->device_total) return VRAM_ENOMEM;
    tp_segment_t *seg = calloc(1, sizeof *seg);
    if (!seg) return vram_fail(VRAM_ENOMEM, "torch policy: out of host memory");
    void *base;
    int rc = p->src.alloc(p->src.user, size, &base);
    if (rc) {
        free(seg);
        return rc;
    }
    seg->base = (uintptr_t)base;
    seg->size = size;
    seg->stream = stream;
    seg->kind = kind;
    seg->first = seg->last = block_new(seg, seg->base, size);
    if (!seg->first) {
        p->src.free(p->src.user, base);
        free(seg);
        return vram_fail(VRAM_ENOMEM, "torch policy: out of host memory");
    }
    seg->next_seg = p->segments;
    p->segments = seg;
    p->stats.device_allocs++;
    reserve_add(p, (int64_t)size);
    free_put(p, seg->first);
    return 0;
}

/* Expandable: the stream's segment of this kind (reserved on first use),
 * grown by mapping whole units at its end until its last free block can
 * hold `rounded` bytes. */
static int segment_expand(vram_torch_policy_t *p, int kind, uintptr_t stream, size_t rounded)
{
    size_t unit = kind == VRAM_POOL_KIND_SMALL ? TP_SMALL_BUFFER : TP_LARGE_BUFFER;
    tp_segment_t *seg = p->segments;
    while (seg && (seg->stream != stream || seg->kind != kind))
        seg = seg->next_seg;
    if (!seg) {
        seg = calloc(1, sizeof *seg);
        if (!seg) return vram_fail(VRAM_ENOMEM, "torch policy: out of host memory");
        seg->base = p->next_va;
        p->next_va += TP_VA_PER_SEGMENT;
        seg->stream = stream;
        seg->kind = kind;
        seg->next_seg = p->segments;
        p->segments = seg;
    }
    tp_block_t *tail = seg->last && !seg->last->allocated ? seg->last : NULL;
    size_t have = tail ? tail->size : 0;
    size_t units = (rounded - have + unit - 1) / unit;
    if (p->stats.reserved_bytes + units * unit > p->device_total) return VRAM_ENOMEM;
    if (tail) {
        free_take(p, tail);
        tail->size += units * unit;
    } else {
        tail = block_new(seg, seg->base + seg->size, units * unit);
        if (!tail) return vram_fail(VRAM_ENOMEM, "torch policy: out of host memory");
        tail->prev = seg->last;
        if (seg->last) seg->last->next = tail;
        if (!seg->first) seg->first = tail;
        seg->last = tail;
    }
    seg->size += units * unit;
    p->stats.maps += units;
    reserve_add(p, (int64_t)(units * unit));
    free_put(p, tail);
    return 0;
}

/* PyTorch's release_cached_blocks: every segment with no allocated block
 * goes back (expandable: the free whole units at each segment's end). */
static void release_cached(vram_torch_policy_t *p)
{
    for (tp_segment_t **link = &p->segments; *link;) {
        tp_segment_t *seg = *link;
        tp_block_t *tail = seg->last;
        if (p->expandable) {
            size_t unit = seg->kind == VRAM_POOL_KIND_SMALL ? TP_SMALL_BUFFER : TP_LARGE_BUFFER;
            if (tail && !tail->allocated) {
                size_t units = (size_t)(seg->base + seg->size - tail->addr) / unit;
                size_t cut = units * unit;
                free_take(p, tail);
                if (cut == tail->size) {
                    seg->last = tail->prev;
                    if (seg->last) seg->last->next = NULL;
                    if (seg->first == tail) seg->first = NULL;
                    free(tail);
                } else {
                    tail->size -= cut;
                    free_put(p, tail);
                }
                seg->size -= cut;
                p->stats.unmaps += units;
                reserve_add(p, -(int64_t)cut);
            }
            link = &seg->next_seg;
            continue;
        }
        if (tail != seg->first || tail->allocated) {
            link = &seg->next_seg;
            continue;
        }
        free_take(p, tail);
        free(tail);
        p->src.free(p->src.user, (void *)seg->base);
        p->stats.device_frees++;
        reserve_add(p, -(int64_t)seg->size);
        *link = seg->next_seg;
        free(seg);
    }
}

/* ---- alloc and free ------------------------------------------------------ */

static int grow(vram_torch_policy_t *p, int kind, uintptr_t stream, size_t rounded)
{
    return p->expandable ? segment_expand(p, kind, stream, rounded)
                         : segment_alloc(p, kind, stream, allocation_size(rounded));
}

/* PyTorch's DeviceCachingAllocator::malloc; under p->mutex. */
static int policy_malloc(vram_torch_policy_t *p, size_t size, uintptr_t stream, tp_block_t **out)
{
    if (size > p->device_total || size > SIZE_MAX / 2) {
        p->stats.ooms++;
        return vram_fail(VRAM_ENOMEM, "torch policy: %zu bytes is more than the device has", size);
    }
    size_t rounded = round_size(size);
    int kind = rounded <= TP_SMALL_SIZE ? VRAM_POOL_KIND_SMALL : VRAM_POOL_KIND_LARGE;
    tp_block_t *b = set_best_fit(p->free_set[kind], stream, rounded);
    if (!b) {
        /* Device refusal: free every cached segment and try once more. */
        int rc = grow(p, kind, stream, rounded);
        if (rc == VRAM_ENOMEM) {
            p->stats.retries++;
            release_cached(p);
            rc = grow(p, kind, stream, rounded);
        }
        if (rc) {
            if (rc == VRAM_ENOMEM) p->stats.ooms++;
            return rc == VRAM_ENOMEM ? vram_fail(VRAM_ENOMEM, "torch policy: out of memory") : rc;
        }
        b = set_best_fit(p->free_set[kind], stream, rounded);
    }
    free_take(p, b);
    size_t remaining = b->size - rounded;
    if (should_split(kind, remaining)) {
        tp_block_t *rest = block_new(b->seg, b->addr + rounded, remaining);
        if (rest) {
            rest->prev = b;
            rest->next = b->next;
            if (b->next)
                b->next->prev = rest;
            else
                b->seg->last = rest;
            b->next = rest;
            b->size = rounded;
            free_put(p, rest);
        }
    }
    b->allocated = true;
    *out = b;
    return 0;
}

/* Merges free block n (right after b) into b. */
static void absorb(tp_block_t *b, tp_block_t *n)
{
    b->size += n->size;
    b->next = n->next;
    if (n->next)
        n->next->prev = b;
    else
        b->seg->last = b;
    free(n);
}

/* PyTorch's DeviceCachingAllocator::free; under p->mutex. */
static void policy_free(vram_torch_policy_t *p, tp_block_t *b)
{
    b->allocated = false;
    if (b->next && !b->next->allocated) {
        free_take(p, b->next);
        absorb(b, b->next);
    }
    if (b->prev && !b->prev->allocated) {
        tp_block_t *prev = b->prev;
        free_take(p, prev);
        absorb(prev, b);
        b = prev;
    }
    free_put(p, b);
}

int vram_torch_policy_alloc(vram_torch_policy_t *p, size_t size, uintptr_t stream, void **ptr)
{
    *ptr = NULL;
    if (!size) return 0;
    tp_block_t *b = NULL;
    lock(p, &p->mutex);
    int rc = policy_malloc(p, size, stream, &b);
    unlock(p, &p->mutex);
    if (rc) return rc;
    lock(p, &p->blocks_mutex); /* add_allocated_block */
    bool added = vram_map_put(&p->live, b->addr, (uint64_t)(uintptr_t)b);
    unlock(p, &p->blocks_mutex);
    if (!added) {
        lock(p, &p->mutex);
        policy_free(p, b);
        unlock(p, &p->mutex);
        return vram_fail(VRAM_ENOMEM, "torch policy: out of host memory");
    }
    *ptr = (void *)b->addr;
    return 0;
}

int vram_torch_policy_free(vram_torch_policy_t *p, void *ptr)
{
    if (!ptr) return 0;
    uint64_t v;
    lock(p, &p->blocks_mutex); /* get_allocated_block(ptr, remove = true) */
    bool found = vram_map_take(&p->live, (uintptr_t)ptr, &v);
    unlock(p, &p->blocks_mutex);
    if (!found) return vram_fail(VRAM_EINVAL, "torch policy: %p is not allocated", ptr);
    lock(p, &p->mutex);
    policy_free(p, (tp_block_t *)(uintptr_t)v);
    unlock(p, &p->mutex);
    return 0;
}

int vram_torch_policy_create(const vram_pool_source_t *src, bool expandable, bool locked,
                             vram_torch_policy_t **out)
{
    vram_torch_policy_t *p = calloc(1, sizeof *p);
    if (!p) return vram_fail(VRAM_ENOMEM, "torch policy: out of host memory");
    p->src = *src;
    p->expandable = expandable;
    p->locked = locked;
    pthread_mutexattr_t recursive;
    pthread_mutexattr_init(&recursive);
    pthread_mutexattr_settype(&recursive, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&p->mutex, &recursive);
    pthread_mutexattr_destroy(&recursive);
    pthread_mutex_init(&p->blocks_mutex, NULL);
    p->rng = 0x9E3779B97F4A7C15ull;
    p->next_va = (uintptr_t)1 << 47;
    uint64_t total = VRAM_UNKNOWN_U64, free_bytes;
    if (src->memory && src->memory(src->user, &total, &free_bytes)) total = VRAM_UNKNOWN_U64;
    p->device_total = total == VRAM_UNKNOWN_U64 ? UINT64_MAX : total;
    *out = p;
    return 0;
}

void vram_torch_policy_stats(vram_torch_policy_t *p, vram_torch_policy_stats_t *out)
{
    lock(p, &p->mutex);
    *out = p->stats;
    unlock(p, &p->mutex);
}

void vram_torch_policy_destroy(vram_torch_policy_t *p)
{
    if (!p) return;
    for (tp_segment_t *seg = p->segments, *next; seg; seg = next) {
        next = seg->next_seg;
        for (tp_block_t *b = seg->first, *bn; b; b = bn) {
            bn = b->next;
            free(b);
        }
        if (!p->expandable) p->src.free(p->src.user, (void *)seg->base);
        free(seg);
    }
    vram_map_clear(&p->live);
    pthread_mutex_destroy(&p->mutex);
    pthread_mutex_destroy(&p->blocks_mutex);
    free(p);
}
