/* Segregated bins of free blocks per stream (see pool_internal.h). */
#include "pool/pool_internal.h"

#include <stdio.h>
#include <stdlib.h>

vram_free_heap_t *vram_free_index_heap(vram_free_index_t *x, uintptr_t stream)
{
    if (x->last && x->last->stream == stream) return x->last;
    /* Streams are few (one per CUDA stream in use): a short list. */
    for (vram_free_heap_t *h = x->heaps; h; h = h->next)
        if (h->stream == stream) return x->last = h;
    return NULL;
}

int vram_free_index_reserve(vram_free_index_t *x, uintptr_t stream)
{
    if (vram_free_index_heap(x, stream)) return 0;
    vram_free_heap_t *h = calloc(1, sizeof *h);
    if (!h) return vram_fail(VRAM_ENOMEM, "pool: out of host memory for a stream's free bins");
    h->stream = stream;
    h->next = x->heaps;
    x->heaps = h;
    x->last = h;
    return 0;
}

void vram_free_index_insert(vram_free_index_t *x, vram_pool_block_t *b, unsigned bin)
{
    vram_free_heap_t *h = vram_free_index_heap(x, b->stream);
    vram_free_tree_insert(&x->ctx, &h->bins[bin], b);
    h->bitmap[bin >> 6] |= 1ull << (bin & 63);
    h->summary |= 1ull << (bin >> 6);
    x->count++;
}

void vram_free_index_remove(vram_free_index_t *x, vram_pool_block_t *b, unsigned bin)
{
    vram_free_heap_t *h = vram_free_index_heap(x, b->stream);
    vram_free_tree_remove(&x->ctx, &h->bins[bin], b);
    if (!h->bins[bin].root) {
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
        vram_pool_block_t *b = vram_free_tree_lower_bound(&x->ctx, &h->bins[bin], rank);
        if (b) return b;
    }
    int next = next_bin(h, bin);
    return next < 0 ? NULL : vram_free_tree_first(&x->ctx, &h->bins[next]);
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
        free(h);
    }
    x->heaps = x->last = NULL;
    x->count = 0;
}

int vram_free_index_check(const vram_free_index_t *x, char *err, size_t len)
{
    size_t total = 0;
    for (const vram_free_heap_t *h = x->heaps; h; h = h->next) {
        for (unsigned bin = 0; bin < VRAM_FREE_BINS; bin++) {
            const vram_free_tree_t *t = &h->bins[bin];
            bool marked = h->bitmap[bin >> 6] & (1ull << (bin & 63));
            if (marked != (t->root != 0)) {
                snprintf(err, len, "bin %u of stream 0x%zx: bitmap says %s", bin, (size_t)h->stream,
                         marked ? "full" : "empty");
                return -1;
            }
            if (!t->root) continue;
            if (vram_free_tree_check(&x->ctx, t, err, len) < 0) return -1;
            for (vram_pool_block_t *b = vram_free_tree_first(&x->ctx, t); b;
                 b = vram_free_tree_next(&x->ctx, b)) {
                if (b->stream != h->stream) {
                    snprintf(err, len, "block 0x%zx in the bins of another stream",
                             (size_t)b->addr);
                    return -1;
                }
                if (vram_index_bin(b->size, x->bin_bits) != bin) {
                    snprintf(err, len, "block 0x%zx (%zu bytes) in the wrong bin %u",
                             (size_t)b->addr, b->size, bin);
                    return -1;
                }
            }
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
