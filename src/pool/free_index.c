/* Segregated bins of free blocks per stream (see pool_internal.h). */
#include "pool/pool_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

vram_free_heap_t *vram_free_index_heap(vram_free_index_t *x, uintptr_t stream)
{
    if (x->last && x->last->stream == stream) return x->last;
    /* Streams are few (one per CUDA stream in use): a short list. */
    for (vram_free_heap_t *h = x->heaps; h; h = h->next)
        if (h->stream == stream) return x->last = h;
    return NULL;
}

int vram_free_index_reserve(vram_free_index_t *x, uintptr_t stream, bool prefault)
{
    if (vram_free_index_heap(x, stream)) return 0;
    /* 513 KiB of bins, cache-line aligned. Mapped, not malloc'ed and zeroed:
     * the kernel hands out zero pages lazily, so a fresh pool pays for the
     * few pages its first blocks touch (~1 µs) instead of zeroing (and
     * faulting in) all of them (0.6-0.8 ms on first use). */
    int populate = prefault ? MAP_POPULATE : 0;
    vram_free_heap_t *h = mmap(NULL, sizeof *h, PROT_READ | PROT_WRITE,
                               MAP_PRIVATE | MAP_ANONYMOUS | populate, -1, 0);
    if (h == MAP_FAILED)
        return vram_fail(VRAM_ENOMEM, "pool: out of host memory for a stream's free bins");
#ifdef MADV_POPULATE_WRITE
    if (!prefault) madvise(h, 4096, MADV_POPULATE_WRITE); /* the bitmaps: every search reads them */
#endif
    h->stream = stream;
    h->next = x->heaps;
    x->heaps = h;
    x->last = h;
    return 0;
}

/* ---- a bin: sorted slots, or a tree when they overflow ---------------- */

/* The slots hold a block's rank in 32 bits: with size classes the class
 * index; with exact sizes the size in 512-byte units, which fits for every
 * bin but the last (sizes of 2 TiB and more), which always uses its tree. */
static uint32_t rank32(const vram_tree_ctx_t *c, uint64_t rank)
{
    return (uint32_t)(c->rank_class_bits ? rank : (rank + VRAM_POOL_ALIGN - 1) / VRAM_POOL_ALIGN);
}

static uint64_t slot_key(const vram_tree_ctx_t *c, const vram_pool_block_t *b)
{
    return (uint64_t)rank32(c, vram_tree_rank(c, b->size)) << 32 | b->seg_seq;
}

static bool slots_allowed(unsigned bin)
{
    return bin != VRAM_FREE_BINS - 1;
}

static uint32_t bin_count(const vram_free_bin_t *bin)
{
    return bin->n + bin->tree.count;
}

/* Whether the block in slot i sorts after b (key, then address; the
 * address is read only for equal keys). */
static bool slot_after(const vram_tree_ctx_t *c, const vram_free_bin_t *bin, uint32_t i,
                       uint64_t key, const vram_pool_block_t *b)
{
    if (bin->keys[i] != key) return bin->keys[i] > key;
    return c->base[bin->ids[i]].addr > b->addr;
}

/* With a tree, slot 0 caches the tree's first block (except in the last
 * bin, whose keys would not fit): in a bin of thousands of equal-size
 * blocks, the bin a small request maps to, every search answers with the
 * first block, and a descent to it would read a block per level. */
static void cache_first(const vram_tree_ctx_t *c, vram_free_bin_t *bin, vram_pool_block_t *first)
{
    bin->ids[0] = (vram_block_id_t)(first - c->base);
    bin->keys[0] = slot_key(c, first);
}

static void slots_to_tree(const vram_tree_ctx_t *c, vram_free_bin_t *bin)
{
    for (uint32_t i = 0; i < bin->n; i++)
        vram_free_tree_insert(c, &bin->tree, c->base + bin->ids[i]);
    bin->n = 0;
}

static void tree_to_slots(const vram_tree_ctx_t *c, vram_free_bin_t *bin)
{
    uint32_t n = 0;
    for (vram_pool_block_t *b = vram_free_tree_first(c, &bin->tree); b;
         b = vram_free_tree_next(c, b)) {
        bin->ids[n] = (vram_block_id_t)(b - c->base);
        bin->keys[n] = slot_key(c, b);
        n++;
    }
    bin->tree.root = 0;
    bin->tree.count = 0;
    bin->n = n;
}

static void bin_insert(const vram_tree_ctx_t *c, vram_free_bin_t *bin, unsigned index,
                       vram_pool_block_t *b)
{
    if (!slots_allowed(index)) {
        vram_free_tree_insert(c, &bin->tree, b);
        return;
    }
    uint64_t key = slot_key(c, b);
    if (bin->tree.root) {
        vram_free_tree_insert(c, &bin->tree, b);
        if (slot_after(c, bin, 0, key, b)) cache_first(c, bin, b);
        return;
    }
    if (bin->n == VRAM_BIN_SLOTS) {
        slots_to_tree(c, bin);
        vram_free_tree_insert(c, &bin->tree, b);
        cache_first(c, bin, vram_free_tree_first(c, &bin->tree));
        return;
    }
    uint32_t i = bin->n;
    while (i > 0 && slot_after(c, bin, i - 1, key, b)) {
        bin->keys[i] = bin->keys[i - 1];
        bin->ids[i] = bin->ids[i - 1];
        i--;
    }
    bin->keys[i] = key;
    bin->ids[i] = (vram_block_id_t)(b - c->base);
    bin->n++;
}

static void bin_remove(const vram_tree_ctx_t *c, vram_free_bin_t *bin, unsigned index,
                       vram_pool_block_t *b)
{
    vram_block_id_t id = (vram_block_id_t)(b - c->base);
    if (bin->tree.root) {
        if (!slots_allowed(index)) {
            vram_free_tree_remove(c, &bin->tree, b);
            return;
        }
        vram_pool_block_t *next = bin->ids[0] == id ? vram_free_tree_next(c, b) : NULL;
        vram_free_tree_remove(c, &bin->tree, b);
        /* Back to the slots at half their capacity, not at full: a bin whose
         * size hovers at the limit must not move its blocks on every call. */
        if (bin->tree.count <= VRAM_BIN_SLOTS / 2)
            tree_to_slots(c, bin);
        else if (next)
            cache_first(c, bin, next);
        return;
    }
    /* One pass that keeps every other slot, rather than a search and a
     * shift: the compiler turns a shift loop into two memmove calls, which
     * cost more than the at most 9 slots they move. */
    uint32_t kept = 0;
    for (uint32_t i = 0; i < bin->n; i++) {
        if (bin->ids[i] == id) continue;
        bin->keys[kept] = bin->keys[i];
        bin->ids[kept] = bin->ids[i];
        kept++;
    }
    bin->n = kept;
}

static vram_pool_block_t *bin_first(const vram_tree_ctx_t *c, const vram_free_bin_t *bin)
{
    /* Slots, or a tree with its first block cached (all bins but the last). */
    return bin->n || bin->ids[0] ? c->base + bin->ids[0] : vram_free_tree_first(c, &bin->tree);
}

static vram_pool_block_t *bin_lower_bound(const vram_tree_ctx_t *c, const vram_free_bin_t *bin,
                                          uint64_t rank)
{
    if (!bin->n) {
        if (bin->ids[0] && rank32(c, rank) <= (uint32_t)(bin->keys[0] >> 32))
            return c->base + bin->ids[0]; /* the cached first block */
        return vram_free_tree_lower_bound(c, &bin->tree, rank);
    }
    uint32_t r = rank32(c, rank);
    for (uint32_t i = 0; i < bin->n; i++)
        if ((uint32_t)(bin->keys[i] >> 32) >= r) return c->base + bin->ids[i];
    return NULL;
}

uint64_t vram_free_bin_largest(const vram_free_index_t *x, const vram_free_bin_t *bin,
                               bool ordered_by_size)
{
    const vram_tree_ctx_t *c = &x->ctx;
    uint64_t best = 0;
    if (bin->n) {
        if (ordered_by_size) return c->base[bin->ids[bin->n - 1]].size;
        for (uint32_t i = 0; i < bin->n; i++)
            if (c->base[bin->ids[i]].size > best) best = c->base[bin->ids[i]].size;
        return best;
    }
    if (ordered_by_size) return vram_free_tree_last(c, &bin->tree)->size;
    for (vram_pool_block_t *b = vram_free_tree_first(c, &bin->tree); b;
         b = vram_free_tree_next(c, b))
        if (b->size > best) best = b->size;
    return best;
}

/* ---- the index -------------------------------------------------------- */

void vram_free_index_insert(vram_free_index_t *x, vram_pool_block_t *b, unsigned bin)
{
    vram_free_heap_t *h = vram_free_index_heap(x, b->stream);
    bin_insert(&x->ctx, &h->bins[bin], bin, b);
    h->bitmap[bin >> 6] |= 1ull << (bin & 63);
    h->summary |= 1ull << (bin >> 6);
    x->count++;
}

void vram_free_index_remove(vram_free_index_t *x, vram_pool_block_t *b, unsigned bin)
{
    vram_free_heap_t *h = vram_free_index_heap(x, b->stream);
    bin_remove(&x->ctx, &h->bins[bin], bin, b);
    if (!bin_count(&h->bins[bin])) {
        h->bitmap[bin >> 6] &= ~(1ull << (bin & 63));
        if (!h->bitmap[bin >> 6]) h->summary &= ~(1ull << (bin >> 6));
    }
    x->count--;
}

/* First non-empty bin after `bin`, or -1. */
static int next_bin(const vram_free_heap_t *h, unsigned bin)
{
    unsigned from = bin + 1;
    if (from >= VRAM_FREE_BINS) return -1;
    unsigned w = from >> 6;
    uint64_t bits = h->bitmap[w] & (~0ull << (from & 63));
    if (bits) return (int)(w * 64 + (unsigned)__builtin_ctzll(bits));
    uint64_t words = w + 1 < 64 ? h->summary & (~0ull << (w + 1)) : 0;
    if (!words) return -1;
    w = (unsigned)__builtin_ctzll(words);
    return (int)(w * 64 + (unsigned)__builtin_ctzll(h->bitmap[w]));
}

vram_pool_block_t *vram_free_index_find(vram_free_index_t *x, uintptr_t stream, uint64_t rank,
                                        unsigned bin)
{
    vram_free_heap_t *h = vram_free_index_heap(x, stream);
    if (!h) return NULL;
    if (h->bitmap[bin >> 6] & (1ull << (bin & 63))) {
        vram_pool_block_t *b = bin_lower_bound(&x->ctx, &h->bins[bin], rank);
        if (b) return b;
    }
    int next = next_bin(h, bin);
    return next < 0 ? NULL : bin_first(&x->ctx, &h->bins[next]);
}

int vram_free_heap_top(const vram_free_heap_t *h)
{
    if (!h->summary) return -1;
    unsigned w = 63u - (unsigned)__builtin_clzll(h->summary);
    return (int)(w * 64 + 63u - (unsigned)__builtin_clzll(h->bitmap[w]));
}

void vram_free_index_release(vram_free_index_t *x)
{
    vram_free_heap_t *h = x->heaps, *next;
    for (; h; h = next) {
        next = h->next;
        munmap(h, sizeof *h);
    }
    x->heaps = x->last = NULL;
    x->count = 0;
}

/* Every block of a bin (slots or tree) must be free, of this heap's stream
 * and of this bin; slots must hold their blocks' keys in strictly
 * increasing (key, address) order. */
static int check_block(const vram_free_index_t *x, const vram_free_heap_t *h, unsigned bin,
                       const vram_pool_block_t *b, char *err, size_t len)
{
    if (b->stream != h->stream) {
        snprintf(err, len, "block 0x%zx in the bins of another stream", (size_t)b->addr);
        return -1;
    }
    if (vram_index_bin(b->size, x->bin_bits) != bin) {
        snprintf(err, len, "block 0x%zx (%zu bytes) in the wrong bin %u", (size_t)b->addr, b->size,
                 bin);
        return -1;
    }
    if (b->allocated) {
        snprintf(err, len, "allocated block 0x%zx in free bin %u", (size_t)b->addr, bin);
        return -1;
    }
    if (vram_pool_block_is_wilderness(b)) {
        snprintf(err, len, "the wilderness 0x%zx in free bin %u", (size_t)b->addr, bin);
        return -1;
    }
    return 0;
}

static int check_slots(const vram_free_index_t *x, const vram_free_heap_t *h, unsigned bin,
                       char *err, size_t len)
{
    const vram_tree_ctx_t *c = &x->ctx;
    const vram_free_bin_t *s = &h->bins[bin];
    if (s->n > VRAM_BIN_SLOTS || (s->n && (s->tree.root || !slots_allowed(bin)))) {
        snprintf(err, len, "bin %u: %u slots used with %s", bin, s->n,
                 s->tree.root ? "a tree too" : "slots not allowed");
        return -1;
    }
    for (uint32_t i = 0; i < s->n; i++) {
        const vram_pool_block_t *b = c->base + s->ids[i];
        if (!s->ids[i] || s->keys[i] != slot_key(c, b)) {
            snprintf(err, len, "bin %u slot %u: key does not match block %u", bin, i, s->ids[i]);
            return -1;
        }
        if (check_block(x, h, bin, b, err, len)) return -1;
        if (i && !slot_after(c, s, i, s->keys[i - 1], c->base + s->ids[i - 1])) {
            snprintf(err, len, "bin %u slot %u: out of order", bin, i);
            return -1;
        }
    }
    return 0;
}

int vram_free_index_check(const vram_free_index_t *x, char *err, size_t len)
{
    size_t total = 0;
    for (const vram_free_heap_t *h = x->heaps; h; h = h->next) {
        for (unsigned bin = 0; bin < VRAM_FREE_BINS; bin++) {
            const vram_free_bin_t *s = &h->bins[bin];
            const vram_free_tree_t *t = &s->tree;
            bool marked = h->bitmap[bin >> 6] & (1ull << (bin & 63));
            if (marked != (bin_count(s) != 0)) {
                snprintf(err, len, "bin %u of stream 0x%zx: bitmap says %s", bin, (size_t)h->stream,
                         marked ? "full" : "empty");
                return -1;
            }
            if (check_slots(x, h, bin, err, len)) return -1;
            total += s->n;
            if (!t->root) {
                if (t->count) {
                    snprintf(err, len, "bin %u: empty tree counts %u blocks", bin, t->count);
                    return -1;
                }
                continue;
            }
            if (vram_free_tree_check(&x->ctx, t, err, len) < 0) return -1;
            const vram_pool_block_t *first = vram_free_tree_first(&x->ctx, t);
            vram_block_id_t want = slots_allowed(bin) ? (vram_block_id_t)(first - x->ctx.base) : 0;
            if (s->ids[0] != want || (want && s->keys[0] != slot_key(&x->ctx, first))) {
                snprintf(err, len, "bin %u: cached first block %u, the tree's is %u", bin,
                         s->ids[0], want);
                return -1;
            }
            if (t->count <= VRAM_BIN_SLOTS / 2 && slots_allowed(bin)) {
                snprintf(err, len, "bin %u: tree of %u blocks should be slots", bin, t->count);
                return -1;
            }
            for (vram_pool_block_t *b = vram_free_tree_first(&x->ctx, t); b;
                 b = vram_free_tree_next(&x->ctx, b))
                if (check_block(x, h, bin, b, err, len)) return -1;
            total += t->count;
        }
        for (unsigned w = 0; w < 64; w++) {
            if (((h->summary >> w) & 1) != (h->bitmap[w] != 0)) {
                snprintf(err, len, "summary bitmap wrong for word %u", w);
                return -1;
            }
        }
    }
    if (total != x->count) {
        snprintf(err, len, "free index counts %zu blocks, bins hold %zu", x->count, total);
        return -1;
    }
    return 0;
}
