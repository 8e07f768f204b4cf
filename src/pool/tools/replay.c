/* Trace replay with per-request timing (see replay.h). */
#include "pool/tools/replay.h"

#include "core/map.h"

#include <errno.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *const mode_names[VRAM_REPLAY_MODE_COUNT_] = {"none", "device", "malloc", "torch",
                                                                "torch-expandable"};

const char *vram_replay_mode_name(vram_replay_mode_t mode)
{
    return (unsigned)mode < VRAM_REPLAY_MODE_COUNT_ ? mode_names[mode] : "?";
}

int vram_replay_mode_parse(const char *name, vram_replay_mode_t *out)
{
    for (int m = 0; m < VRAM_REPLAY_MODE_COUNT_; m++) {
        if (name && !strcmp(name, mode_names[m])) {
            *out = (vram_replay_mode_t)m;
            return 0;
        }
    }
    return vram_fail(VRAM_EINVAL,
                     "unknown baseline \"%s\": use none, device, malloc, torch or "
                     "torch-expandable",
                     name ? name : "(null)");
}

int vram_device_cost_parse(const char *text, vram_device_cost_t *cost)
{
    vram_device_cost_t c = *cost;
    const char *p = text;
    while (p && *p) {
        size_t len = strcspn(p, ",");
        const char *eq = memchr(p, '=', len);
        double *field = NULL;
        size_t key = eq ? (size_t)(eq - p) : len;
        if (key == 5 && !strncmp(p, "alloc", 5)) field = &c.alloc_us;
        if (key == 4 && !strncmp(p, "free", 4)) field = &c.free_us;
        if (key == 3 && !strncmp(p, "map", 3)) field = &c.map_us;
        if (key == 5 && !strncmp(p, "unmap", 5)) field = &c.unmap_us;
        if (key == 4 && !strncmp(p, "move", 4)) field = &c.move_us;
        char *end = NULL;
        double v = eq ? strtod(eq + 1, &end) : -1;
        if (!field || !eq || end == eq + 1 || end != p + len || !(v >= 0 && v <= 1e7))
            return vram_fail(
                VRAM_EINVAL,
                "device cost \"%.*s\": use alloc=US, free=US, map=US, unmap=US or move=US "
                "with a number of microseconds from 0 to 1e7",
                (int)len, p);
        *field = v;
        p += len;
        if (*p == ',') p++;
    }
    if (!text || !*text) return vram_fail(VRAM_EINVAL, "device cost: empty");
    *cost = c;
    return 0;
}

/* The device of the replay as the segment source of the pool and the torch
 * baselines, timing its calls: the simulated device's own cost is replaced
 * by the cost model in the figures "with device costs". */
typedef struct {
    const vram_replay_config_t *cfg;
    uint64_t ns; /* spent in device calls */
} timed_source_t;

static int ctx_alloc(void *user, size_t size, void **ptr)
{
    timed_source_t *s = user;
    uint64_t t0 = vram_now_ns();
    int rc = vram_device_alloc(s->cfg->ctx, s->cfg->device, size, ptr);
    s->ns += vram_now_ns() - t0;
    return rc;
}

static int ctx_free(void *user, void *ptr)
{
    timed_source_t *s = user;
    uint64_t t0 = vram_now_ns();
    int rc = vram_device_free(s->cfg->ctx, s->cfg->device, ptr);
    s->ns += vram_now_ns() - t0;
    return rc;
}

/* The device's virtual memory, timed like its allocations. */
static int ctx_vmm(timed_source_t *s, int op, void *addr, size_t size, void **out)
{
    vram_ctx_t *ctx = s->cfg->ctx;
    int dev = s->cfg->device, rc;
    uint64_t t0 = vram_now_ns();
    switch (op) {
    case 'g':
        rc = vram_device_vmm_granularity(ctx, dev, (size_t *)out);
        break;
    case 'r':
        rc = vram_device_vmm_reserve(ctx, dev, size, out);
        break;
    case 'u':
        rc = vram_device_vmm_unreserve(ctx, dev, addr, size);
        break;
    case 'm':
        rc = vram_device_vmm_map(ctx, dev, addr, size);
        break;
    default:
        rc = vram_device_vmm_unmap(ctx, dev, addr, size);
        break;
    }
    s->ns += vram_now_ns() - t0;
    return rc;
}

static int ctx_vmm_granularity(void *user, size_t *granularity)
{
    return ctx_vmm(user, 'g', NULL, 0, (void **)granularity);
}

static int ctx_vmm_reserve(void *user, size_t size, void **va)
{
    return ctx_vmm(user, 'r', NULL, size, va);
}

static int ctx_vmm_unreserve(void *user, void *va, size_t size)
{
    return ctx_vmm(user, 'u', va, size, NULL);
}

static int ctx_vmm_map(void *user, void *addr, size_t size)
{
    return ctx_vmm(user, 'm', addr, size, NULL);
}

static int ctx_vmm_unmap(void *user, void *addr, size_t size)
{
    return ctx_vmm(user, 'x', addr, size, NULL);
}

static int ctx_vmm_move(void *user, void *from, void *to, size_t size)
{
    timed_source_t *s = user;
    uint64_t t0 = vram_now_ns();
    int rc = vram_device_vmm_move(s->cfg->ctx, s->cfg->device, from, to, size);
    s->ns += vram_now_ns() - t0;
    return rc;
}

static int ctx_memory(void *user, uint64_t *total, uint64_t *free_bytes)
{
    timed_source_t *s = user;
    vram_device_info_t info;
    int rc = vram_device_info(s->cfg->ctx, s->cfg->device, &info);
    if (rc) return rc;
    *total = info.total_bytes;
    *free_bytes = info.free_bytes;
    return 0;
}

typedef struct {
    const vram_replay_config_t *cfg;
    vram_pool_t *pool;
    vram_torch_policy_t *torch;
    timed_source_t source;
    uint64_t device_held, device_peak; /* DEVICE: bytes allocated on the device */
    uint64_t malloc_peak;              /* MALLOC: the heap's footprint */
    uint64_t device_allocs, device_frees, ooms;
    /* 2 MiB granules that live requests overlap: granule -> live requests
     * in it, their number and its peak (the floor any mapping policy has
     * for this placement). */
    vram_map_t touched;
    uint64_t touched_peak;
    /* Granules touched at any time in the current pass (a set: granule ->
     * 1), and the most one pass after the first touched: the least any
     * mapping policy holds while making no device call in such a pass. */
    vram_map_t pass_touched;
    uint64_t pass_touched_peak;
} replayer_t;

#define FLOOR_GRANULE_SHIFT 21

/* Counts the granules [p, p + size) overlaps in or out (outside the timed
 * region). Out of host memory the figure is left incomplete (it is a
 * benchmark figure, not a result the replay depends on). */
static void touch(replayer_t *r, uintptr_t p, size_t size, bool in)
{
    if (!size) return;
    for (uint64_t g = p >> FLOOR_GRANULE_SHIFT; g <= (p + size - 1) >> FLOOR_GRANULE_SHIFT; g++) {
        uint64_t n = 0;
        bool had = vram_map_get(&r->touched, g, &n);
        if (in) {
            if (!vram_map_put(&r->touched, g, n + 1)) return;
            if (r->touched.count > r->touched_peak) r->touched_peak = r->touched.count;
            vram_map_put(&r->pass_touched, g, 1);
        } else if (n > 1) {
            vram_map_put(&r->touched, g, n - 1);
        } else if (had) {
            vram_map_take(&r->touched, g, &n);
        }
    }
}

static int do_alloc(replayer_t *r, size_t size, void **ptr)
{
    switch (r->cfg->mode) {
    case VRAM_REPLAY_POOL:
        return vram_pool_alloc(r->pool, size, NULL, ptr);
    case VRAM_REPLAY_DEVICE:
        if (!size) {
            *ptr = NULL;
            return 0;
        }
        return ctx_alloc(&r->source, size, ptr);
    case VRAM_REPLAY_MALLOC:
        *ptr = malloc(size);
        return *ptr || !size ? 0 : VRAM_ENOMEM;
    case VRAM_REPLAY_TORCH:
    case VRAM_REPLAY_TORCH_EXPANDABLE:
        return vram_torch_policy_alloc(r->torch, size, 0, ptr);
    case VRAM_REPLAY_MODE_COUNT_:
        break;
    }
    return VRAM_EINVAL;
}

static int do_free(replayer_t *r, void *ptr)
{
    switch (r->cfg->mode) {
    case VRAM_REPLAY_POOL:
        return vram_pool_free(r->pool, ptr);
    case VRAM_REPLAY_DEVICE:
        return ctx_free(&r->source, ptr);
    case VRAM_REPLAY_MALLOC:
        free(ptr);
        return 0;
    case VRAM_REPLAY_TORCH:
    case VRAM_REPLAY_TORCH_EXPANDABLE:
        return vram_torch_policy_free(r->torch, ptr);
    case VRAM_REPLAY_MODE_COUNT_:
        break;
    }
    return VRAM_EINVAL;
}

/* Accounting outside the timed region. */
static void after_alloc(replayer_t *r, size_t size)
{
    if (r->cfg->mode == VRAM_REPLAY_DEVICE && size) {
        r->device_allocs++;
        r->device_held += size;
        if (r->device_held > r->device_peak) r->device_peak = r->device_held;
    } else if (r->cfg->mode == VRAM_REPLAY_MALLOC) {
        struct mallinfo2 mi = mallinfo2();
        uint64_t footprint = (uint64_t)mi.arena + (uint64_t)mi.hblkhd;
        if (footprint > r->malloc_peak) r->malloc_peak = footprint;
    }
}

/* Device calls so far: allocs, frees, maps, unmaps, moves. */
#define CALL_KINDS 5
static void device_calls(const replayer_t *r, uint64_t calls[CALL_KINDS])
{
    memset(calls, 0, CALL_KINDS * sizeof *calls);
    if (r->cfg->mode == VRAM_REPLAY_POOL) {
        vram_pool_stats_t s;
        vram_pool_stats(r->pool, &s);
        calls[0] = s.num_device_alloc;
        calls[1] = s.num_device_free;
        calls[2] = s.num_device_map;
        calls[3] = s.num_device_unmap;
        calls[4] = s.num_device_move;
    } else if (r->cfg->mode == VRAM_REPLAY_DEVICE) {
        calls[0] = r->device_allocs;
        calls[1] = r->device_frees;
    } else if (r->torch) {
        vram_torch_policy_stats_t s;
        vram_torch_policy_stats(r->torch, &s);
        calls[0] = s.device_allocs;
        calls[1] = s.device_frees;
        calls[2] = s.maps;
        calls[3] = s.unmaps;
    }
}

static uint64_t sum_calls(const uint64_t c[CALL_KINDS])
{
    return c[0] + c[1] + c[2] + c[3] + c[4];
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

static vram_latency_t summarize(uint32_t *ns, size_t n)
{
    vram_latency_t l = {0};
    if (!n) return l;
    qsort(ns, n, sizeof *ns, cmp_u32);
    double sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += ns[i];
    l.count = n;
    l.mean = sum / (double)n;
    l.p50 = ns[(n - 1) / 2];
    l.p99 = ns[(size_t)((double)(n - 1) * 0.99)];
    return l;
}

static uint32_t clamp_ns(uint64_t ns)
{
    return ns > UINT32_MAX ? UINT32_MAX : (uint32_t)ns;
}

static double timer_overhead(void)
{
    uint32_t ns[1001];
    for (int i = 0; i < 1001; i++) {
        uint64_t t0 = vram_now_ns();
        ns[i] = clamp_ns(vram_now_ns() - t0);
    }
    return summarize(ns, 1001).p50;
}

/* Creates the allocator the mode replays through, on the replay's timed
 * device. */
static int replayer_open(replayer_t *r, const vram_replay_config_t *cfg)
{
    memset(r, 0, sizeof *r);
    r->cfg = cfg;
    r->source.cfg = cfg;
    vram_pool_source_t src = {.alloc = ctx_alloc,
                              .free = ctx_free,
                              .memory = ctx_memory,
                              .user = &r->source,
                              .device = cfg->device,
                              .vmm_granularity = ctx_vmm_granularity,
                              .vmm_reserve = ctx_vmm_reserve,
                              .vmm_unreserve = ctx_vmm_unreserve,
                              .vmm_map = ctx_vmm_map,
                              .vmm_unmap = ctx_vmm_unmap,
                              .vmm_move = ctx_vmm_move};
    if (cfg->mode == VRAM_REPLAY_POOL) {
        vram_pool_config_t pc = {.strategy = cfg->strategy,
                                 .expandable = cfg->expandable,
                                 .limit_bytes = cfg->limit_bytes};
        return vram_pool_create_on(&src, &pc, &r->pool);
    }
    if (cfg->mode == VRAM_REPLAY_TORCH || cfg->mode == VRAM_REPLAY_TORCH_EXPANDABLE)
        return vram_torch_policy_create(&src, cfg->mode == VRAM_REPLAY_TORCH_EXPANDABLE,
                                        !cfg->torch_unlocked, &r->torch);
    return 0;
}

static void replayer_close(replayer_t *r)
{
    vram_map_clear(&r->touched);
    vram_map_clear(&r->pass_touched);
    if (r->pool) vram_pool_destroy(r->pool);
    vram_torch_policy_destroy(r->torch);
    r->pool = NULL;
    r->torch = NULL;
}

static double device_cost_ns(const vram_replay_config_t *cfg, const uint64_t calls[CALL_KINDS])
{
    return 1000.0 * ((double)calls[0] * cfg->cost.alloc_us + (double)calls[1] * cfg->cost.free_us +
                     (double)calls[2] * cfg->cost.map_us + (double)calls[3] * cfg->cost.unmap_us +
                     (double)calls[4] * cfg->cost.move_us);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The batch figures: the same passes again through a fresh allocator, with
 * the clock read once per run of VRAM_REPLAY_BATCH_EVENTS consecutive events
 * instead of twice per operation (its ~20 ns would otherwise be in every
 * operation's figure, the same for every allocator, which compresses their
 * ratios). No accounting runs between the operations of a run. Each run's
 * time, less what the simulated device's calls took in it, over its
 * operations gives one ns-per-op figure; out->batch_p50 is their median
 * (robust to preemption, like the per-operation p50), out->batch_mean the
 * whole replay's time over all its operations. */
static int run_batch(const vram_trace_t *trace, const vram_replay_config_t *cfg,
                     vram_replay_result_t *out)
{
    replayer_t r;
    int rc = replayer_open(&r, cfg);
    if (rc) return rc;
    size_t slots = trace->slots ? trace->slots : 1;
    size_t runs_max = (trace->count / VRAM_REPLAY_BATCH_EVENTS + 1) * (size_t)cfg->repeat;
    void **live = calloc(slots, sizeof *live);
    double *per_op = malloc(runs_max * sizeof *per_op);
    size_t runs = 0;
    uint64_t ops = 0, net_ns = 0;
    if (!live || !per_op) {
        rc = vram_fail(VRAM_ENOMEM, "out of host memory for the replay");
        goto out;
    }
    for (int pass = 0; pass < cfg->repeat && !rc; pass++) {
        for (size_t i = 0; i < trace->count && !rc; i += VRAM_REPLAY_BATCH_EVENTS) {
            size_t end = i + VRAM_REPLAY_BATCH_EVENTS < trace->count ? i + VRAM_REPLAY_BATCH_EVENTS
                                                                     : trace->count;
            uint64_t n = 0, sim0 = r.source.ns, t0 = vram_now_ns();
            for (size_t j = i; j < end; j++) {
                const vram_trace_event_t *e = &trace->events[j];
                void **slot = &live[e->slot];
                if (e->is_alloc) {
                    int arc = do_alloc(&r, (size_t)e->size, slot);
                    if (arc == VRAM_ENOMEM) continue; /* *slot is NULL: its free is skipped */
                    if (arc) {
                        rc = arc;
                        break;
                    }
                } else {
                    if (!*slot) continue;
                    rc = do_free(&r, *slot);
                    *slot = NULL;
                    if (rc) break;
                }
                n++;
            }
            uint64_t dt = vram_now_ns() - t0, sim = r.source.ns - sim0;
            dt = dt > sim ? dt - sim : 0;
            net_ns += dt;
            ops += n;
            if (n) per_op[runs++] = (double)dt / (double)n;
        }
        for (size_t s = 0; s < slots && !rc; s++) {
            if (live[s]) rc = do_free(&r, live[s]);
            live[s] = NULL;
        }
    }
    if (rc) goto out;
    qsort(per_op, runs, sizeof *per_op, cmp_double);
    out->batch_p50 = runs ? per_op[(runs - 1) / 2] : 0;
    out->batch_mean = ops ? (double)net_ns / (double)ops : 0;
    /* The same calls as the timed run's (the same events through a fresh
     * allocator of the same kind): its cost model's total. */
    out->batch_with_cost = out->ops ? out->batch_p50 + out->device_cost_ns / (double)out->ops : 0;
out:
    replayer_close(&r);
    free(live);
    free(per_op);
    return rc;
}

int vram_replay_run(const vram_trace_t *trace, const vram_replay_config_t *cfg,
                    vram_replay_result_t *out)
{
    if (!trace || !cfg || !out || cfg->repeat < 1)
        return vram_fail(VRAM_EINVAL, "vram_replay_run: bad arguments");
    replayer_t r;
    int rc = replayer_open(&r, cfg);
    if (rc) return rc;
    uint64_t calls[CALL_KINDS], pass_start = 0, pass_calls[3] = {0, UINT64_MAX, UINT64_MAX};
    size_t total = trace->count * (size_t)cfg->repeat;
    size_t slots = trace->slots ? trace->slots : 1;
    void **live = calloc(slots, sizeof *live);
    uint64_t *alloc_ns = calloc(slots, sizeof *alloc_ns);
    uint32_t *all = malloc((total ? total : 1) * sizeof *all);
    uint32_t *allocs = malloc((total ? total : 1) * sizeof *allocs);
    uint32_t *frees = malloc((total ? total : 1) * sizeof *frees);
    uint32_t *pairs = malloc((total ? total : 1) * sizeof *pairs);
    size_t n_all = 0, n_alloc = 0, n_free = 0, n_pair = 0;
    uint64_t requested = 0, peak_requested = 0;
    uint64_t *slot_size = calloc(slots, sizeof *slot_size);
    if (!live || !alloc_ns || !all || !allocs || !frees || !pairs || !slot_size) {
        rc = vram_fail(VRAM_ENOMEM, "out of host memory for the replay");
        goto done;
    }
    for (int pass = 0; pass < cfg->repeat && !rc; pass++) {
        for (size_t i = 0; i < trace->count; i++) {
            const vram_trace_event_t *e = &trace->events[i];
            if (e->is_alloc) {
                void *p = NULL;
                uint64_t t0 = vram_now_ns();
                int arc = do_alloc(&r, (size_t)e->size, &p);
                uint64_t dt = vram_now_ns() - t0;
                if (arc == VRAM_ENOMEM) {
                    r.ooms++;
                    live[e->slot] = NULL;
                    slot_size[e->slot] = 0;
                    continue;
                }
                if (arc) {
                    rc = arc;
                    break;
                }
                live[e->slot] = p;
                slot_size[e->slot] = e->size;
                alloc_ns[e->slot] = dt;
                all[n_all++] = allocs[n_alloc++] = clamp_ns(dt);
                requested += e->size;
                if (requested > peak_requested) peak_requested = requested;
                after_alloc(&r, (size_t)e->size);
                touch(&r, (uintptr_t)p, (size_t)e->size, true);
            } else {
                void *p = live[e->slot];
                if (!p) continue; /* its allocation was refused, or was of 0 bytes */
                uint64_t t0 = vram_now_ns();
                int frc = do_free(&r, p);
                uint64_t dt = vram_now_ns() - t0;
                if (frc) {
                    rc = frc;
                    break;
                }
                all[n_all++] = frees[n_free++] = clamp_ns(dt);
                pairs[n_pair++] = clamp_ns(dt + alloc_ns[e->slot]);
                requested -= slot_size[e->slot];
                touch(&r, (uintptr_t)p, (size_t)slot_size[e->slot], false);
                if (cfg->mode == VRAM_REPLAY_DEVICE) {
                    r.device_held -= slot_size[e->slot];
                    r.device_frees++;
                }
                live[e->slot] = NULL;
                slot_size[e->slot] = 0;
            }
        }
        /* Blocks the trace leaves live go before the next pass (untimed). */
        for (size_t s = 0; s < slots && !rc; s++) {
            if (live[s]) {
                rc = do_free(&r, live[s]);
                touch(&r, (uintptr_t)live[s], (size_t)slot_size[s], false);
                if (cfg->mode == VRAM_REPLAY_DEVICE) {
                    r.device_held -= slot_size[s];
                    r.device_frees++;
                }
            }
            requested -= slot_size[s];
            live[s] = NULL;
            slot_size[s] = 0;
        }
        /* The steady floor: passes after the first (the only one with one pass). */
        if ((pass > 0 || cfg->repeat == 1) && r.pass_touched.count > r.pass_touched_peak)
            r.pass_touched_peak = r.pass_touched.count;
        vram_map_clear(&r.pass_touched);
        device_calls(&r, calls);
        uint64_t n = sum_calls(calls) - pass_start;
        if (pass < 2) pass_calls[pass] = n;
        if (pass > 0 && (pass_calls[2] == UINT64_MAX || n > pass_calls[2])) pass_calls[2] = n;
        pass_start = sum_calls(calls);
    }
    if (rc) goto done;

    memset(out, 0, sizeof *out);
    out->ops = n_all;
    out->all = summarize(all, n_all);
    out->alloc = summarize(allocs, n_alloc);
    out->free = summarize(frees, n_free);
    out->pair = summarize(pairs, n_pair);
    out->peak_requested_bytes = peak_requested;
    out->ooms = r.ooms;
    if (cfg->mode == VRAM_REPLAY_POOL) {
        vram_pool_stats_t s;
        vram_pool_stats(r.pool, &s);
        out->peak_reserved_bytes = (uint64_t)s.reserved_bytes[VRAM_POOL_STAT_ALL].peak;
        out->ooms = s.num_ooms;
    } else if (cfg->mode == VRAM_REPLAY_DEVICE) {
        out->peak_reserved_bytes = r.device_peak;
    } else if (r.torch) {
        vram_torch_policy_stats_t s;
        vram_torch_policy_stats(r.torch, &s);
        out->peak_reserved_bytes = s.peak_reserved_bytes;
        out->ooms = s.ooms;
    } else {
        out->peak_reserved_bytes = r.malloc_peak;
    }
    device_calls(&r, calls);
    out->device_allocs = calls[0];
    out->device_frees = calls[1];
    out->device_maps = calls[2];
    out->device_unmaps = calls[3];
    out->device_moves = calls[4];
    out->first_pass_device_calls = pass_calls[0];
    out->second_pass_device_calls = pass_calls[1];
    out->later_pass_device_calls_max = pass_calls[2];
    out->device_cost_ns = device_cost_ns(cfg, calls);
    out->sim_device_ns = (double)r.source.ns;
    out->ns_per_op_with_cost =
        n_all ? (out->all.mean * (double)n_all - out->sim_device_ns + out->device_cost_ns) /
                    (double)n_all
              : 0;
    out->fragmentation_ratio =
        peak_requested ? (double)out->peak_reserved_bytes / (double)peak_requested : 0.0;
    out->peak_touched_bytes = r.touched_peak << FLOOR_GRANULE_SHIFT;
    out->pass_touched_bytes = r.pass_touched_peak << FLOOR_GRANULE_SHIFT;
    if (peak_requested) {
        out->floor_ratio = (double)out->peak_touched_bytes / (double)peak_requested;
        out->steady_floor_ratio = (double)out->pass_touched_bytes / (double)peak_requested;
    }
    out->timer_overhead_ns = timer_overhead();
done:
    replayer_close(&r);
    free(live);
    free(alloc_ns);
    free(all);
    free(allocs);
    free(frees);
    free(pairs);
    free(slot_size);
    return rc ? rc : run_batch(trace, cfg, out);
}

uint64_t vram_replay_device_size(const vram_trace_t *t)
{
    uint64_t want = t->peak_live_bytes > UINT64_MAX / 4 ? UINT64_MAX / 4 : t->peak_live_bytes * 4;
    if (want / 2 < t->max_size) want = t->max_size > UINT64_MAX / 2 ? UINT64_MAX : t->max_size * 2;
    uint64_t gib = (uint64_t)1 << 30, step = (uint64_t)256 << 20;
    if (want < gib) want = gib;
    return want > UINT64_MAX - step ? want : (want + step - 1) / step * step;
}

static void state_path(const vram_replay_device_t *dev, char *buf, size_t len)
{
    snprintf(buf, len, "%.*s/sim.state", (int)(len - 16), dev->dir);
}

int vram_replay_device_open(uint64_t bytes, vram_replay_device_t *dev)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(dev->dir, sizeof dev->dir, "%s/vram-replay-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    dev->ctx = NULL;
    if (!mkdtemp(dev->dir)) {
        int rc = vram_fail(VRAM_EIO, "cannot create a temporary directory %s: %s", dev->dir,
                           strerror(errno));
        dev->dir[0] = '\0';
        return rc;
    }
    char spec[64], state[4200];
    snprintf(spec, sizeof spec, "replay:%llu", (unsigned long long)bytes);
    state_path(dev, state, sizeof state);
    int rc = vram_option_set(VRAM_OPT_SIM, spec);
    if (!rc) rc = vram_option_set(VRAM_OPT_SIM_STATE, state);
    if (!rc) rc = vram_option_set(VRAM_OPT_BACKEND, "sim");
    if (!rc) rc = vram_ctx_open_backend("sim", &dev->ctx);
    if (rc) vram_replay_device_close(dev);
    return rc;
}

void vram_replay_device_close(vram_replay_device_t *dev)
{
    vram_ctx_close(dev->ctx);
    dev->ctx = NULL;
    if (!dev->dir[0]) return;
    char state[4200];
    state_path(dev, state, sizeof state);
    unlink(state);
    rmdir(dev->dir);
    dev->dir[0] = '\0';
}
