/* Every strategy on every recorded trace, side by side with the baselines
 * (`device`: each request straight to a simulated GPU, no caching; `malloc`;
 * `torch` and `torch-expandable`: our re-implementation of PyTorch's default
 * caching policy without and with expandable segments), in one run: the
 * same figures as `vram replay --json`. "cost ns" is the mean time per
 * operation with every device call at the default device cost model (the
 * simulated device's own time taken out); "p50+dev" the median operation
 * plus the calls' modelled cost spread over the operations (robust when
 * other work preempts the replay, which inflates means); "floor" the peak
 * of the 2 MiB granules live requests overlap / peak requested (what the
 * same placement would reserve if only those granules were mapped at every
 * moment); "steady" the most of those granules one pass after the first
 * touches over its course / peak requested (what a mapping policy that
 * makes no device call in that pass must keep mapped); "2nd" the device
 * calls of the second pass, "later" the most in any pass after the first. "batch50" and
 * "b50+dev" are the same two figures from a batch-timed replay (runs of 64
 * events timed whole, so without the clock's ~20 ns per operation, which is
 * the same for every allocator and compresses their ratios; see replay.h).
 * Each trace ends with the ratios torch / pool (BALANCED, the default) of
 * the figures with device costs, from this run. The torch baselines take
 * the two locks PyTorch takes per call (torch_policy.c); "torch, no locks"
 * is the policy without them, to show their share.
 *
 * Usage: bench_pool_traces [DIR with *.trace (default ../shared/traces)] [repeat (default 3)]
 *                          [device cost as for vram replay, e.g. map=231,unmap=26,move=63] */
#include "pool/tools/replay.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static vram_device_cost_t cost; /* set in main */

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* A pass's device calls, 0 when there was no such pass. */
static uint64_t pass_calls(uint64_t calls)
{
    return calls == UINT64_MAX ? 0 : calls;
}

/* p50 per operation plus the cost model's device time per operation. */
static double p50_with_cost(const vram_replay_result_t *r)
{
    return r->all.p50 + (r->ops ? r->device_cost_ns / (double)r->ops : 0);
}

static void row(const char *label, const vram_replay_result_t *r)
{
    printf("  %-24s %7.0f %7.0f %8.1f %7.0f %8.1f %8.1f %8.1f %8.1f %9.1f %9.1f %7.3f %7.3f %7.3f "
           "%6llu %6llu %6llu %6llu %5llu\n",
           label, r->all.p50, r->all.p99, r->all.mean, r->pair.p50, r->ns_per_op_with_cost,
           p50_with_cost(r), r->batch_p50, r->batch_with_cost,
           (double)r->peak_requested_bytes / 1048576.0, (double)r->peak_reserved_bytes / 1048576.0,
           r->fragmentation_ratio, r->floor_ratio, r->steady_floor_ratio,
           (unsigned long long)r->device_allocs, (unsigned long long)(r->device_maps),
           (unsigned long long)pass_calls(r->second_pass_device_calls),
           (unsigned long long)pass_calls(r->later_pass_device_calls_max),
           (unsigned long long)r->ooms);
}

static int bench_trace(const char *path, int repeat)
{
    vram_trace_t trace;
    if (vram_trace_load(path, &trace)) {
        fprintf(stderr, "%s\n", vram_last_error());
        return 1;
    }
    vram_replay_device_t dev;
    if (vram_replay_device_open(vram_replay_device_size(&trace), &dev)) {
        fprintf(stderr, "sim device: %s\n", vram_last_error());
        vram_trace_release(&trace);
        return 1;
    }
    printf("\n%s: %zu events, %zu allocations, peak live %.1f MiB; %d passes\n", path, trace.count,
           trace.allocs, (double)trace.peak_live_bytes / 1048576.0, repeat);
    printf("  %-24s %7s %7s %8s %7s %8s %8s %8s %8s %9s %9s %7s %7s %7s %6s %6s %6s %6s %5s\n",
           "allocator", "p50 ns", "p99 ns", "mean ns", "pair50", "cost ns", "p50+dev", "batch50",
           "b50+dev", "req MiB", "res MiB", "ratio", "floor", "steady", "allocs", "maps", "2nd",
           "later", "OOMs");
    int rc = 0;
    vram_replay_result_t r, pool = {0}, torch[3] = {{0}, {0}, {0}};
    for (int s = 0; s < VRAM_POOL_STRATEGY_COUNT_ && !rc; s++) {
        vram_replay_config_t cfg = {.mode = VRAM_REPLAY_POOL,
                                    .strategy = (vram_pool_strategy_t)s,
                                    .repeat = repeat,
                                    .ctx = dev.ctx,
                                    .cost = cost};
        char label[64];
        snprintf(label, sizeof label, "pool %s", vram_pool_strategy_name(cfg.strategy));
        rc = vram_replay_run(&trace, &cfg, &r);
        if (!rc) row(label, &r);
        if (!rc && cfg.strategy == VRAM_POOL_BALANCED) pool = r;
    }
    for (int m = VRAM_REPLAY_DEVICE; m < VRAM_REPLAY_MODE_COUNT_ && !rc; m++) {
        vram_replay_config_t cfg = {
            .mode = (vram_replay_mode_t)m, .repeat = repeat, .ctx = dev.ctx, .cost = cost};
        char label[64];
        snprintf(label, sizeof label, "baseline %s", vram_replay_mode_name(cfg.mode));
        rc = vram_replay_run(&trace, &cfg, &r);
        if (!rc) row(label, &r);
        if (!rc && m >= VRAM_REPLAY_TORCH) torch[m - VRAM_REPLAY_TORCH] = r;
    }
    if (!rc) {
        vram_replay_config_t cfg = {.mode = VRAM_REPLAY_TORCH,
                                    .repeat = repeat,
                                    .ctx = dev.ctx,
                                    .cost = cost,
                                    .torch_unlocked = true};
        rc = vram_replay_run(&trace, &cfg, &torch[2]);
        if (!rc) row("baseline torch, no locks", &torch[2]);
    }
    static const char *const torch_names[3] = {"torch", "torch-expandable", "torch, no locks"};
    for (int t = 0; t < 3 && !rc; t++) {
        printf("  %s / pool balanced: p50+dev %.2fx, b50+dev %.2fx, batch50 %.2fx\n",
               torch_names[t], p50_with_cost(&torch[t]) / p50_with_cost(&pool),
               torch[t].batch_with_cost / pool.batch_with_cost,
               torch[t].batch_p50 / pool.batch_p50);
    }
    if (rc) fprintf(stderr, "replay failed: %s\n", vram_last_error());
    printf("  (clock cost %.0f ns, included; malloc's \"reserved\" is glibc's arena + mmap "
           "footprint)\n",
           r.timer_overhead_ns);
    vram_replay_device_close(&dev);
    vram_trace_release(&trace);
    return rc ? 1 : 0;
}

int main(int argc, char **argv)
{
    const char *dir = argc > 1 ? argv[1] : "../shared/traces";
    int repeat = argc > 2 ? atoi(argv[2]) : 3;
    if (repeat < 1) repeat = 1;
    cost = VRAM_DEVICE_COST_DEFAULT;
    if (argc > 3 && vram_device_cost_parse(argv[3], &cost)) {
        fprintf(stderr, "%s\n", vram_last_error());
        return 2;
    }
    DIR *d = opendir(dir);
    if (!d) {
        printf("# bench_pool_traces: no trace directory %s; nothing to do\n", dir);
        return 0;
    }
    char *names[256];
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < 256) {
        size_t len = strlen(e->d_name);
        if (len > 6 && !strcmp(e->d_name + len - 6, ".trace")) names[n++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(names, n, sizeof *names, by_name);
    printf("# bench_pool_traces: strategies and baselines on %s (ratio = peak reserved / peak "
           "requested; device cost alloc %g, free %g, map %g, unmap %g, move %g us)\n",
           dir, cost.alloc_us, cost.free_us, cost.map_us, cost.unmap_us, cost.move_us);
    int rc = 0;
    for (size_t i = 0; i < n; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        rc |= bench_trace(path, repeat);
        free(names[i]);
    }
    return rc;
}
