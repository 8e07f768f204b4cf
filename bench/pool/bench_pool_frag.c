/* Fragmentation (peak reserved / peak requested) and device calls on random
 * traces with 1,000 / 10,000 / 100,000 live blocks, for the pool's default
 * configuration and the alternatives, in one run on a private simulated
 * GPU: the same replay as `vram replay`, two passes (the second shows the
 * steady state's device calls).
 *
 * A trace fills up to N live blocks, then frees a random live block and
 * allocates a new one, 4 N times, then frees everything; sizes are
 * log-uniform from 512 B to `max` (default 4 MiB, so 100,000 live blocks fit
 * the simulated device's table of 32,768 mapped granules), drawn from a
 * fixed seed. No size repeats on purpose: the traces do not resemble the
 * recorded ones, so a rule fitted to those gains nothing here.
 *
 * Usage: bench_pool_frag [max size in bytes (default 4194304)] [seed] */
#include "pool/tools/replay.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static uint64_t rng;

static uint64_t rnd(void)
{
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return rng * 2685821657736338717ull;
}

static uint64_t log_uniform(double lo, double hi)
{
    double u = (double)(rnd() >> 11) / 9007199254740992.0;
    return (uint64_t)exp(log(lo) + u * (log(hi) - log(lo)));
}

/* The random trace described above, as events on dense slots. */
static int make_trace(size_t live, double max, vram_trace_t *t)
{
    size_t n = 2 * live + 8 * live;
    t->events = calloc(n, sizeof *t->events);
    uint32_t *slots = malloc(live * sizeof *slots);
    uint64_t *sizes = calloc(live, sizeof *sizes);
    if (!t->events || !slots || !sizes) {
        free(slots);
        free(sizes);
        return 1;
    }
    uint64_t cur = 0;
    size_t k = 0;
    for (size_t i = 0; i < live; i++) {
        slots[i] = (uint32_t)i;
        sizes[i] = log_uniform(512, max);
        cur += sizes[i];
        t->events[k++] = (vram_trace_event_t){sizes[i], (uint32_t)i, true};
        if (sizes[i] > t->max_size) t->max_size = sizes[i];
    }
    t->peak_live_bytes = cur;
    for (size_t i = 0; i < 4 * live; i++) {
        uint32_t s = slots[rnd() % live];
        t->events[k++] = (vram_trace_event_t){0, s, false};
        cur -= sizes[s];
        sizes[s] = log_uniform(512, max);
        cur += sizes[s];
        t->events[k++] = (vram_trace_event_t){sizes[s], s, true};
        if (cur > t->peak_live_bytes) t->peak_live_bytes = cur;
        if (sizes[s] > t->max_size) t->max_size = sizes[s];
    }
    for (size_t i = 0; i < live; i++)
        t->events[k++] = (vram_trace_event_t){0, (uint32_t)i, false};
    t->count = k;
    t->allocs = live + 4 * live;
    t->slots = live;
    free(slots);
    free(sizes);
    return 0;
}

int main(int argc, char **argv)
{
    double max = argc > 1 ? atof(argv[1]) : 4194304.0;
    rng = argc > 2 ? strtoull(argv[2], NULL, 10) : 20261123;
    if (max < 512) max = 512;
    const size_t lives[] = {1000, 10000, 100000};
    printf("# bench_pool_frag: random traces, sizes log-uniform 512 B - %.0f B, 2 passes; "
           "ratio = peak reserved / peak requested; floor = peak of the 2 MiB granules live "
           "requests overlap / peak requested; steady = those the second pass touches over its "
           "course / peak requested\n",
           max);
    printf("%-8s %-34s %7s %7s %7s %9s %9s %9s %9s\n", "live", "allocator", "ratio", "floor",
           "steady", "res MiB", "calls 1st", "calls 2nd", "cost ns");
    int rc = 0;
    for (size_t l = 0; l < sizeof lives / sizeof lives[0] && !rc; l++) {
        vram_trace_t t = {0};
        if (make_trace(lives[l], max, &t)) return 1;
        vram_replay_device_t dev;
        if (vram_replay_device_open(vram_replay_device_size(&t), &dev)) {
            fprintf(stderr, "sim device: %s\n", vram_last_error());
            vram_trace_release(&t);
            return 1;
        }
        const struct {
            const char *label;
            vram_replay_mode_t mode;
            vram_pool_strategy_t strategy;
            vram_pool_expandable_t expandable;
        } rows[] = {
            {"pool balanced (default)", VRAM_REPLAY_POOL, VRAM_POOL_BALANCED,
             VRAM_POOL_EXPANDABLE_AUTO},
            {"pool greedy, expandable", VRAM_REPLAY_POOL, VRAM_POOL_GREEDY,
             VRAM_POOL_EXPANDABLE_AUTO},
            {"pool balanced, segments", VRAM_REPLAY_POOL, VRAM_POOL_BALANCED,
             VRAM_POOL_EXPANDABLE_OFF},
            {"baseline torch", VRAM_REPLAY_TORCH, 0, 0},
            {"baseline torch-expandable", VRAM_REPLAY_TORCH_EXPANDABLE, 0, 0},
        };
        for (size_t i = 0; i < sizeof rows / sizeof rows[0] && !rc; i++) {
            vram_replay_config_t cfg = {.mode = rows[i].mode,
                                        .strategy = rows[i].strategy,
                                        .expandable = rows[i].expandable,
                                        .repeat = 2,
                                        .ctx = dev.ctx,
                                        .cost = VRAM_DEVICE_COST_DEFAULT};
            vram_replay_result_t r;
            rc = vram_replay_run(&t, &cfg, &r);
            if (rc) {
                fprintf(stderr, "%s: %s\n", rows[i].label, vram_last_error());
                break;
            }
            printf("%-8zu %-34s %7.3f %7.3f %7.3f %9.1f %9llu %9llu %9.1f\n", lives[l],
                   rows[i].label, r.fragmentation_ratio, r.floor_ratio, r.steady_floor_ratio,
                   (double)r.peak_reserved_bytes / 1048576.0,
                   (unsigned long long)r.first_pass_device_calls,
                   (unsigned long long)r.second_pass_device_calls, r.ns_per_op_with_cost);
            fflush(stdout);
        }
        vram_replay_device_close(&dev);
        vram_trace_release(&t);
    }
    return rc;
}
