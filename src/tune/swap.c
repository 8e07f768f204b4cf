/* Swap-cache bookkeeping: which named tensors live on the GPU (under a byte
 * budget) and which in host memory, least recently used first out. The
 * caller moves the tensors; get() tells it what to move, in an order that
 * never takes a tier over its budget. */
#include "core/array.h"
#include "core/map.h"

#include "vram.h"

#include <stdlib.h>
#include <string.h>

#define NIL SIZE_MAX

typedef struct {
    uint64_t key, size;
    vram_swap_tier_t tier; /* NONE: a free slot */
    size_t prev, next;     /* neighbours in the tier's list (NIL at the ends) */
} entry_t;

typedef struct {
    size_t head, tail;             /* most and least recently used */
    uint64_t bytes, items, budget; /* budget 0: unlimited */
} tier_t;

struct vram_swap {
    entry_t *e;
    size_t cap, free_head; /* free slots chained through next */
    vram_map_t map;        /* key -> slot */
    tier_t t[3];           /* indexed by vram_swap_tier_t; [NONE] unused */
    vram_swap_move_t *moves;
    size_t nmoves, moves_cap;
    vram_swap_stats_t st;
};

int vram_swap_create(uint64_t gpu_budget, uint64_t host_budget, vram_swap_t **out)
{
    if (!out) return vram_fail(VRAM_EINVAL, "swap cache: NULL out");
    if (gpu_budget == 0) return vram_fail(VRAM_EINVAL, "swap cache: gpu_budget must be >= 1 byte");
    vram_swap_t *sc = calloc(1, sizeof *sc);
    if (!sc) return vram_fail(VRAM_ENOMEM, "swap cache: out of memory");
    sc->free_head = NIL;
    for (int i = 0; i < 3; i++)
        sc->t[i].head = sc->t[i].tail = NIL;
    sc->t[VRAM_SWAP_GPU].budget = gpu_budget;
    sc->t[VRAM_SWAP_HOST].budget = host_budget;
    *out = sc;
    return 0;
}

void vram_swap_destroy(vram_swap_t *sc)
{
    if (!sc) return;
    vram_map_clear(&sc->map);
    free(sc->e);
    free(sc->moves);
    free(sc);
}

static void unlink_entry(vram_swap_t *sc, size_t i)
{
    entry_t *x = &sc->e[i];
    tier_t *t = &sc->t[x->tier];
    if (x->prev != NIL)
        sc->e[x->prev].next = x->next;
    else
        t->head = x->next;
    if (x->next != NIL)
        sc->e[x->next].prev = x->prev;
    else
        t->tail = x->prev;
    t->bytes -= x->size;
    t->items--;
}

static void push_front(vram_swap_t *sc, size_t i, vram_swap_tier_t tier)
{
    entry_t *x = &sc->e[i];
    tier_t *t = &sc->t[tier];
    x->tier = tier;
    x->prev = NIL;
    x->next = t->head;
    if (t->head != NIL)
        sc->e[t->head].prev = i;
    else
        t->tail = i;
    t->head = i;
    t->bytes += x->size;
    t->items++;
}

static bool fits(const tier_t *t, uint64_t more)
{
    return t->budget == 0 || (more <= t->budget && t->bytes <= t->budget - more);
}

/* Moves are recorded into room reserved before any state changes. */
static void record(vram_swap_t *sc, const entry_t *x, vram_swap_tier_t from, vram_swap_tier_t to)
{
    sc->moves[sc->nmoves++] = (vram_swap_move_t){x->key, x->size, from, to};
}

/* Drops host items (least recent first, never `keep`) until `size` more fits. */
static void room_on_host(vram_swap_t *sc, uint64_t size, size_t keep)
{
    tier_t *host = &sc->t[VRAM_SWAP_HOST];
    size_t i = host->tail;
    while (!fits(host, size) && i != NIL) {
        size_t prev = sc->e[i].prev;
        if (i != keep) {
            unlink_entry(sc, i);
            record(sc, &sc->e[i], VRAM_SWAP_HOST, VRAM_SWAP_NONE);
            sc->st.evictions_host++;
            vram_map_take(&sc->map, sc->e[i].key, NULL);
            sc->e[i].tier = VRAM_SWAP_NONE;
            sc->e[i].next = sc->free_head;
            sc->free_head = i;
        }
        i = prev;
    }
}

/* Demotes GPU items (least recent first) to the host until `size` more fits
 * on the GPU; one the host cannot take (larger than its budget, or with
 * `keep` still there) is dropped instead. */
static void room_on_gpu(vram_swap_t *sc, uint64_t size, size_t keep)
{
    tier_t *gpu = &sc->t[VRAM_SWAP_GPU];
    while (!fits(gpu, size)) {
        size_t v = gpu->tail;
        entry_t *x = &sc->e[v];
        unlink_entry(sc, v);
        sc->st.evictions_gpu++;
        tier_t *host = &sc->t[VRAM_SWAP_HOST];
        /* the item being fetched may still sit on the host: room for both? */
        uint64_t held = keep != NIL && sc->e[keep].tier == VRAM_SWAP_HOST ? sc->e[keep].size : 0;
        if (host->budget && (x->size > host->budget || held > host->budget - x->size)) {
            record(sc, x, VRAM_SWAP_GPU, VRAM_SWAP_NONE);
            vram_map_take(&sc->map, x->key, NULL);
            x->tier = VRAM_SWAP_NONE;
            x->next = sc->free_head;
            sc->free_head = v;
            continue;
        }
        room_on_host(sc, x->size, keep);
        record(sc, x, VRAM_SWAP_GPU, VRAM_SWAP_HOST);
        sc->st.bytes_to_host += x->size;
        push_front(sc, v, VRAM_SWAP_HOST);
    }
}

/* Space for the worst case of one get: every item moves once, plus the new. */
static int reserve(vram_swap_t *sc)
{
    size_t items = (size_t)(sc->t[VRAM_SWAP_GPU].items + sc->t[VRAM_SWAP_HOST].items);
    size_t need = 2 * items + 1;
    if (need > sc->moves_cap) {
        vram_swap_move_t *m = realloc(sc->moves, need * sizeof *m);
        if (!m) return vram_fail(VRAM_ENOMEM, "swap cache: out of memory");
        sc->moves = m;
        sc->moves_cap = need;
    }
    if (sc->free_head == NIL) {
        size_t old = sc->cap;
        entry_t *e = vram_array_grow(sc->e, &sc->cap, sizeof *e, 16);
        if (!e) return vram_fail(VRAM_ENOMEM, "swap cache: out of memory");
        sc->e = e;
        for (size_t i = sc->cap; i-- > old;) { /* the new entries, onto the free list */
            e[i] = (entry_t){.tier = VRAM_SWAP_NONE, .next = sc->free_head};
            sc->free_head = i;
        }
    }
    if (!vram_map_reserve(&sc->map, 1)) return vram_fail(VRAM_ENOMEM, "swap cache: out of memory");
    return 0;
}

int vram_swap_get(vram_swap_t *sc, uint64_t key, uint64_t size, vram_swap_tier_t *found,
                  vram_swap_tier_t *now, size_t *nmoves)
{
    if (!sc || key == 0) return vram_fail(VRAM_EINVAL, "swap cache: NULL handle or key 0");
    sc->nmoves = 0;
    uint64_t slot;
    bool present = vram_map_get(&sc->map, key, &slot);
    size_t i = present ? (size_t)slot : NIL;
    if (present)
        size = sc->e[i].size;
    else if (size == 0)
        return vram_fail(VRAM_EINVAL, "swap cache: size 0 for new item %llu",
                         (unsigned long long)key);
    tier_t *gpu = &sc->t[VRAM_SWAP_GPU], *host = &sc->t[VRAM_SWAP_HOST];
    bool to_gpu = size <= gpu->budget;
    if (!present && !to_gpu && host->budget && size > host->budget)
        return vram_fail(VRAM_ENOMEM,
                         "swap cache: item %llu of %llu bytes fits neither the GPU "
                         "budget (%llu) nor the host budget (%llu)",
                         (unsigned long long)key, (unsigned long long)size,
                         (unsigned long long)gpu->budget, (unsigned long long)host->budget);
    int rc = reserve(sc);
    if (rc) return rc;
    vram_swap_tier_t was = present ? sc->e[i].tier : VRAM_SWAP_NONE;
    if (was == VRAM_SWAP_GPU)
        sc->st.hits_gpu++;
    else if (was == VRAM_SWAP_HOST)
        sc->st.hits_host++;
    else
        sc->st.misses++;
    if (!present) {
        i = sc->free_head;
        sc->free_head = sc->e[i].next;
        sc->e[i] = (entry_t){.key = key, .size = size, .tier = VRAM_SWAP_NONE};
        vram_map_put(&sc->map, key, i); /* cannot fail: reserved */
    } else {
        unlink_entry(sc, i);
        /* Until it moves it still takes its room where it is. */
        sc->t[was].bytes += size;
    }
    vram_swap_tier_t dest = to_gpu ? VRAM_SWAP_GPU : VRAM_SWAP_HOST;
    if (dest != was) {
        if (dest == VRAM_SWAP_GPU)
            room_on_gpu(sc, size, i);
        else
            room_on_host(sc, size, i);
        record(sc, &sc->e[i], was, dest);
        if (was == VRAM_SWAP_HOST)
            sc->st.bytes_to_gpu += size;
        else
            sc->st.bytes_loaded += size;
    }
    if (present) sc->t[was].bytes -= size;
    push_front(sc, i, dest);
    if (found) *found = was;
    if (now) *now = dest;
    if (nmoves) *nmoves = sc->nmoves;
    return 0;
}

int vram_swap_set_gpu_budget(vram_swap_t *sc, uint64_t gpu_budget, size_t *nmoves)
{
    if (!sc) return vram_fail(VRAM_EINVAL, "swap cache: NULL handle");
    if (gpu_budget == 0) return vram_fail(VRAM_EINVAL, "swap cache: gpu_budget must be >= 1 byte");
    sc->nmoves = 0;
    int rc = reserve(sc);
    if (rc) return rc;
    sc->t[VRAM_SWAP_GPU].budget = gpu_budget;
    room_on_gpu(sc, 0, NIL);
    if (nmoves) *nmoves = sc->nmoves;
    return 0;
}

int vram_swap_move(const vram_swap_t *sc, size_t i, vram_swap_move_t *out)
{
    if (!sc || !out) return vram_fail(VRAM_EINVAL, "swap cache: NULL argument");
    if (i >= sc->nmoves)
        return vram_fail(VRAM_ENOENT, "swap cache: no move %zu (%zu moves)", i, sc->nmoves);
    *out = sc->moves[i];
    return 0;
}

int vram_swap_remove(vram_swap_t *sc, uint64_t key)
{
    if (!sc) return vram_fail(VRAM_EINVAL, "swap cache: NULL handle");
    uint64_t slot;
    if (!key || !vram_map_take(&sc->map, key, &slot))
        return vram_fail(VRAM_ENOENT, "swap cache: no item %llu", (unsigned long long)key);
    size_t i = (size_t)slot;
    unlink_entry(sc, i);
    sc->e[i].tier = VRAM_SWAP_NONE;
    sc->e[i].next = sc->free_head;
    sc->free_head = i;
    sc->nmoves = 0;
    return 0;
}

vram_swap_tier_t vram_swap_where(const vram_swap_t *sc, uint64_t key)
{
    uint64_t slot;
    if (!sc || !key || !vram_map_get(&sc->map, key, &slot)) return VRAM_SWAP_NONE;
    return sc->e[slot].tier;
}

int vram_swap_stats(const vram_swap_t *sc, vram_swap_stats_t *out)
{
    if (!sc || !out) return vram_fail(VRAM_EINVAL, "swap cache: NULL argument");
    *out = sc->st;
    out->gpu_budget = sc->t[VRAM_SWAP_GPU].budget;
    out->host_budget = sc->t[VRAM_SWAP_HOST].budget;
    out->gpu_bytes = sc->t[VRAM_SWAP_GPU].bytes;
    out->host_bytes = sc->t[VRAM_SWAP_HOST].bytes;
    out->gpu_items = sc->t[VRAM_SWAP_GPU].items;
    out->host_items = sc->t[VRAM_SWAP_HOST].items;
    return 0;
}

int vram_swap_check(const vram_swap_t *sc)
{
    if (!sc) return vram_fail(VRAM_EINVAL, "swap cache: NULL handle");
    uint64_t total = 0;
    for (int tier = VRAM_SWAP_GPU; tier <= VRAM_SWAP_HOST; tier++) {
        const tier_t *t = &sc->t[tier];
        uint64_t bytes = 0, items = 0;
        size_t prev = NIL;
        for (size_t i = t->head; i != NIL; prev = i, i = sc->e[i].next) {
            const entry_t *x = &sc->e[i];
            uint64_t slot;
            if (x->tier != (vram_swap_tier_t)tier || x->prev != prev)
                return vram_fail(VRAM_ESTATE, "swap cache: item %llu misplaced in its list",
                                 (unsigned long long)x->key);
            if (!vram_map_get(&sc->map, x->key, &slot) || slot != i)
                return vram_fail(VRAM_ESTATE, "swap cache: item %llu not in the map",
                                 (unsigned long long)x->key);
            bytes += x->size;
            if (++items > sc->cap) return vram_fail(VRAM_ESTATE, "swap cache: a list loops");
        }
        if (t->tail != prev || bytes != t->bytes || items != t->items)
            return vram_fail(VRAM_ESTATE,
                             "swap cache: %s tier holds %llu bytes in %llu items, "
                             "counted %llu in %llu",
                             tier == VRAM_SWAP_GPU ? "GPU" : "host", (unsigned long long)bytes,
                             (unsigned long long)items, (unsigned long long)t->bytes,
                             (unsigned long long)t->items);
        if (t->budget && bytes > t->budget)
            return vram_fail(VRAM_ESTATE, "swap cache: %s tier over its budget",
                             tier == VRAM_SWAP_GPU ? "GPU" : "host");
        total += items;
    }
    if (total != sc->map.count)
        return vram_fail(VRAM_ESTATE, "swap cache: %llu items listed, %zu in the map",
                         (unsigned long long)total, sc->map.count);
    return 0;
}
