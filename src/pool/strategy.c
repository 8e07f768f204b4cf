/* What distinguishes the four strategies: rounding, segment sizes, the order
 * of the free tree and which free blocks may serve a request. When cached
 * segments go back to the device is decided in pool.c (release_policy). */
#include "pool/pool_internal.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

static const char *const strategy_names[VRAM_POOL_STRATEGY_COUNT_] = {
    "greedy", "balanced", "consolidated", "fragmentation-aware"};

const char *vram_pool_strategy_name(vram_pool_strategy_t s)
{
    return (unsigned)s < VRAM_POOL_STRATEGY_COUNT_ ? strategy_names[s] : "?";
}

int vram_pool_strategy_parse(const char *text, vram_pool_strategy_t *out)
{
    char norm[32];
    size_t n = text ? strlen(text) : 0;
    if (!text || n >= sizeof norm) goto bad;
    for (size_t i = 0; i <= n; i++)
        norm[i] = text[i] == '_' ? '-' : text[i];
    for (int s = 0; s < VRAM_POOL_STRATEGY_COUNT_; s++) {
        if (!strcasecmp(norm, strategy_names[s])) {
            *out = (vram_pool_strategy_t)s;
            return 0;
        }
    }
bad:
    return vram_fail(VRAM_EINVAL,
                     "unknown pool strategy \"%s\": use greedy, balanced, consolidated or "
                     "fragmentation-aware",
                     text ? text : "(null)");
}

static size_t round_up(size_t n, size_t to)
{
    return (n + to - 1) / to * to;
}

static int floor_log2(size_t n)
{
    return 63 - __builtin_clzll((unsigned long long)n);
}

/* Size classes split each power of two into 2^bits steps; sizes below
 * 2^(bits+9) keep the 512-byte granularity (the step would be smaller). */
static size_t class_round(size_t n, int bits)
{
    int e = floor_log2(n);
    if (e - bits < 9) return n;
    size_t step = (size_t)1 << (e - bits);
    return round_up(n, step);
}

static uint64_t class_index(size_t n, int bits)
{
    int e = floor_log2(n);
    return ((uint64_t)e << bits) | ((n >> (e - bits)) & (((size_t)1 << bits) - 1));
}

enum {
    CONSOLIDATED_CLASS_BITS = 4, /* 16 classes per doubling: at most 6.25% rounding */
    FRAG_AWARE_CLASS_BITS = 3,   /* 8 classes per doubling: at most 12.5% rounding */
};

/* Fragmentation-aware: blocks this big are never split for smaller requests. */
#define FRAG_AWARE_OVERSIZE ((size_t)32 << 20)

size_t vram_pool_round(vram_pool_strategy_t s, size_t size)
{
    if (size > SIZE_MAX / 2) return 0;
    size_t r = round_up(size, VRAM_POOL_ALIGN);
    if (s == VRAM_POOL_CONSOLIDATED) return class_round(r, CONSOLIDATED_CLASS_BITS);
    if (s == VRAM_POOL_FRAGMENTATION_AWARE && r > VRAM_POOL_SMALL_MAX)
        return class_round(r, FRAG_AWARE_CLASS_BITS);
    return r;
}

size_t vram_pool_segment_size(vram_pool_strategy_t s, int kind, size_t rounded)
{
    if (kind == VRAM_POOL_KIND_SMALL) return VRAM_POOL_SMALL_SEG;
    if (s == VRAM_POOL_GREEDY) {
        size_t seg = round_up(rounded, VRAM_POOL_GRANULE);
        return seg < ((size_t)64 << 20) ? (size_t)64 << 20 : seg;
    }
    if (rounded >= VRAM_POOL_LARGE_MIN) return round_up(rounded, VRAM_POOL_GRANULE);
    if (s == VRAM_POOL_BALANCED) {
        /* As many whole copies of the request as fit in a mid segment: DL
         * programs repeat tensor sizes, so the segment's tail is what stays
         * unusable; this keeps it below one request (and below 2 MiB after
         * rounding) instead of whatever 20 MiB leaves (e.g. 2 MiB for 9 MiB). */
        return round_up(VRAM_POOL_MID_SEG / rounded * rounded, VRAM_POOL_GRANULE);
    }
    return VRAM_POOL_MID_SEG;
}

bool vram_pool_idle_segment_eligible(vram_pool_strategy_t s, size_t segment_size, size_t rounded)
{
    /* BALANCED reuses a wholly free segment bigger than a mid segment only
     * for a request that leaves at most half of it + 2 MiB: carving a small
     * block out of it would strand the rest as a hole in a segment that can
     * then never be released. The caller releases it and grows instead. */
    if (s != VRAM_POOL_BALANCED || segment_size <= VRAM_POOL_MID_SEG) return true;
    return segment_size - rounded <= segment_size / 2 + VRAM_POOL_GRANULE;
}

/* Consolidated orders free blocks by size class, then by segment age (the
 * tie), so among the blocks of the smallest fitting class the one in the
 * oldest segment wins; requests are rounded to class boundaries so a block
 * freed by a request of the same class is always found. Every other
 * strategy orders by exact size: plain best fit. */
uint64_t vram_pool_block_rank(vram_pool_strategy_t s, size_t block_size)
{
    if (s == VRAM_POOL_CONSOLIDATED) return class_index(block_size, CONSOLIDATED_CLASS_BITS);
    return block_size;
}

uint64_t vram_pool_request_rank(vram_pool_strategy_t s, size_t rounded)
{
    if (s == VRAM_POOL_CONSOLIDATED) {
        uint64_t c = class_index(rounded, CONSOLIDATED_CLASS_BITS);
        /* A class holds sizes [lo, next lo); only classes starting at or above
         * the request are sure to fit. */
        int e = floor_log2(rounded);
        bool at_class_start = e < CONSOLIDATED_CLASS_BITS ||
                              (rounded & (((size_t)1 << (e - CONSOLIDATED_CLASS_BITS)) - 1)) == 0;
        return at_class_start ? c : c + 1;
    }
    return rounded;
}

int vram_pool_rank_class_bits(vram_pool_strategy_t s)
{
    return s == VRAM_POOL_CONSOLIDATED ? CONSOLIDATED_CLASS_BITS : 0;
}

int vram_pool_bin_bits(vram_pool_strategy_t s)
{
    /* 128 bins per doubling keep each bin's tree small (a few blocks at
     * 100,000 live), so a descent touches fewer cache lines. */
    return s == VRAM_POOL_CONSOLIDATED ? CONSOLIDATED_CLASS_BITS : 7;
}

unsigned vram_pool_rank_bin(vram_pool_strategy_t s, uint64_t rank)
{
    /* Consolidated ranks are already class indexes, one bin per class. */
    if (s == VRAM_POOL_CONSOLIDATED) return (unsigned)rank;
    return vram_index_bin((size_t)rank, vram_pool_bin_bits(s));
}

bool vram_pool_block_eligible(vram_pool_strategy_t s, size_t block_size, size_t rounded)
{
    if (block_size < rounded) return false;
    if (s != VRAM_POOL_FRAGMENTATION_AWARE) return true;
    if (rounded < FRAG_AWARE_OVERSIZE) return block_size < FRAG_AWARE_OVERSIZE;
    /* A big request may take a big block only if little of it is left over. */
    return block_size - rounded <= rounded / 8 + VRAM_POOL_GRANULE;
}

bool vram_pool_should_split(int kind, size_t rounded, size_t remainder)
{
    /* A remainder under 1/8 of the request stays inside the block (at most
     * 12.5 % slack, like a size class). Split off, such slivers can serve
     * only requests as small as they are, so they pile up: after 100,000
     * random requests the small pool held ~8,600 free blocks, most of them
     * 512 B - 8 KiB slivers in bins of hundreds of equal blocks; with the
     * rule, ~1,500 (bench/RESULTS.md). */
    if (remainder < rounded / 8) return false;
    /* Large-pool slivers of 1 MiB or less could only ever serve small
     * requests, which use the small pool: keep them inside the block too. */
    return kind == VRAM_POOL_KIND_SMALL ? remainder >= VRAM_POOL_ALIGN
                                        : remainder > VRAM_POOL_SMALL_MAX;
}

int vram_pool_expandable_parse(const char *text, vram_pool_expandable_t *out)
{
    static const struct {
        const char *name;
        vram_pool_expandable_t value;
    } names[] = {{"auto", VRAM_POOL_EXPANDABLE_AUTO}, {"true", VRAM_POOL_EXPANDABLE_ON},
                 {"on", VRAM_POOL_EXPANDABLE_ON},     {"yes", VRAM_POOL_EXPANDABLE_ON},
                 {"1", VRAM_POOL_EXPANDABLE_ON},      {"false", VRAM_POOL_EXPANDABLE_OFF},
                 {"off", VRAM_POOL_EXPANDABLE_OFF},   {"no", VRAM_POOL_EXPANDABLE_OFF},
                 {"0", VRAM_POOL_EXPANDABLE_OFF}};
    for (size_t i = 0; text && i < sizeof names / sizeof names[0]; i++) {
        if (!strcasecmp(text, names[i].name)) {
            *out = names[i].value;
            return 0;
        }
    }
    return vram_fail(VRAM_EINVAL, "\"%s\" is not auto, true or false", text ? text : "(null)");
}
