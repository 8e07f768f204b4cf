/* Cost of an alloc+free pair in the pool with 1,000 / 10,000 / 100,000 live
 * blocks, sizes log-uniform 512 B - 64 MiB, every strategy with segments
 * and BALANCED with expandable segments (mapping costs nothing here), with
 * glibc malloc on the same request stream as a reference.
 *
 * A pair frees a random live block and allocates a new one of a random size
 * in its place, so the number of live blocks stays fixed; randomness is drawn
 * before the clock starts. Segments come from a synthetic address space (no
 * device calls: at 100,000 live blocks the pool reserves ~600 GB, beyond what
 * the sim device's 32,768-slot state table can track), so the figures are the
 * pool's own bookkeeping. Every pair is timed with the monotonic clock; the
 * clock's own cost is printed and included in the figures.
 *
 * The harness's own work is in the timed region too: reading the victim's
 * pointer from (and storing the new one into) a random slot of the live
 * array, a cache miss of its own at 100,000 blocks. So each pool row is run
 * twice: "p50" as described, and "pool p50" with that array access moved out
 * of the clock (the pool does the same work, the array is touched the same
 * way, only the timed region differs). The "empty allocator" row runs the
 * first loop with an allocator that hands out counters, i.e. the harness alone.
 *
 * A third run of each pool row, "batch", reads the clock once per 64 pairs
 * instead of twice per pair: its figure is the median over those runs of a
 * run's time / 64, so the clock's own ~20 ns is not in it (the harness's
 * live-array access is, as in "p50"); being a mean over 64 pairs, it also
 * carries the slower pairs a p50 leaves out.
 *
 * The growth from 1,000 to 100,000 live blocks is the step from a working
 * set inside the 2 MiB L2 cache to one of ~10 MB in the L3, so it follows the
 * L3's latency, which on a shared VM changes from minute to minute with the
 * neighbours' load. So the whole table is measured in rounds (the rows of
 * one round seconds apart), each round opened by the latency of a dependent
 * load over 16 MiB; the summary gives the median and the range of each
 * figure and of each round's own growth. glibc malloc (a reference, 8 s at
 * 100,000 live) runs in the first round only.
 *
 * Usage: bench_pool_mix [pairs per size (default 200000)] [rounds (default 3)] */
#include "pool/pool_internal.h"
#include "space_source.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

static uint64_t rng = 0x2545F4914F6CDD1Dull;

static uint64_t rnd(void)
{
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return rng * 2685821657736338717ull;
}

static size_t log_uniform_size(void)
{
    double u = (double)(rnd() >> 11) / 9007199254740992.0;
    return (size_t)exp(log(512.0) + u * (log(64.0 * 1048576.0) - log(512.0)));
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

typedef struct {
    double p50, p99, mean;
} figures_t;

static figures_t summarize(uint32_t *ns, size_t n)
{
    qsort(ns, n, sizeof *ns, cmp_u32);
    double sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += ns[i];
    return (figures_t){ns[(n - 1) / 2], ns[(size_t)((double)(n - 1) * 0.99)], sum / (double)n};
}

typedef struct {
    size_t live, pairs;
    size_t *fill_sizes; /* live */
    size_t *victims;    /* pairs */
    size_t *sizes;      /* pairs */
} workload_t;

static void make_workload(workload_t *w, size_t live, size_t pairs)
{
    w->live = live;
    w->pairs = pairs;
    w->fill_sizes = malloc(live * sizeof *w->fill_sizes);
    w->victims = malloc(pairs * sizeof *w->victims);
    w->sizes = malloc(pairs * sizeof *w->sizes);
    for (size_t i = 0; i < live; i++)
        w->fill_sizes[i] = log_uniform_size();
    for (size_t i = 0; i < pairs; i++) {
        w->victims[i] = (size_t)(rnd() % live);
        w->sizes[i] = log_uniform_size();
    }
}

static uint32_t clamp(uint64_t ns)
{
    return ns > UINT32_MAX ? UINT32_MAX : (uint32_t)ns;
}

/* The harness alone: an allocator that does nothing but count. Not inlined,
 * so the calls cost what calls cost. */
static uintptr_t empty_counter = 1;

__attribute__((noinline)) static int empty_free(void *ptr)
{
    __asm__ volatile("" : : "r"(ptr) : "memory");
    return 0;
}

__attribute__((noinline)) static int empty_alloc(size_t size, void **ptr)
{
    *ptr = (void *)(empty_counter += size | 1);
    return 0;
}

static void run_empty(const workload_t *w, uint32_t *ns, figures_t *out)
{
    void **live = malloc(w->live * sizeof *live);
    for (size_t i = 0; i < w->live; i++)
        empty_alloc(w->fill_sizes[i], &live[i]);
    size_t warm = w->pairs / 4;
    for (size_t k = 0; k < w->pairs; k++) {
        size_t i = w->victims[k];
        size_t size = w->sizes[(k + warm) % w->pairs];
        uint64_t t0 = vram_now_ns();
        empty_free(live[i]);
        empty_alloc(size, &live[i]);
        ns[k] = clamp(vram_now_ns() - t0);
    }
    *out = summarize(ns, w->pairs);
    free(live);
}

/* How a pool row times its pairs: each pair with the harness's live-array
 * access inside the clock, each pair with it outside, or runs of
 * BATCH_PAIRS pairs (the access inside). */
typedef enum { TIME_WITH_HARNESS, TIME_POOL_ONLY, TIME_BATCH } timing_t;

#define BATCH_PAIRS 64

/* Warm-up pairs (untimed) let the cache reach its steady state first. */
static int run_pool(const workload_t *w, vram_pool_strategy_t strategy, bool expandable,
                    timing_t timing, uint32_t *ns, figures_t *out, vram_pool_stats_t *stats)
{
    vram_pool_source_t src = space_source(expandable);
    vram_pool_config_t cfg = {.strategy = strategy};
    vram_pool_t *pool;
    if (vram_pool_create_on(&src, &cfg, &pool)) return -1;
    void **live = malloc(w->live * sizeof *live);
    for (size_t i = 0; i < w->live; i++)
        if (vram_pool_alloc(pool, w->fill_sizes[i], NULL, &live[i])) return -1;
    size_t warm = w->pairs / 4;
    for (size_t k = 0; k < warm; k++) {
        size_t i = w->victims[k];
        vram_pool_free(pool, live[i]);
        if (vram_pool_alloc(pool, w->sizes[k], NULL, &live[i])) return -1;
    }
    size_t timed = w->pairs;
    if (timing == TIME_BATCH) {
        timed = w->pairs / BATCH_PAIRS;
        for (size_t run = 0; run < timed; run++) {
            uint64_t t0 = vram_now_ns();
            for (size_t k = run * BATCH_PAIRS; k < (run + 1) * BATCH_PAIRS; k++) {
                size_t i = w->victims[k];
                vram_pool_free(pool, live[i]);
                if (vram_pool_alloc(pool, w->sizes[(k + warm) % w->pairs], NULL, &live[i]))
                    return -1;
            }
            ns[run] = clamp((vram_now_ns() - t0 + BATCH_PAIRS / 2) / BATCH_PAIRS);
        }
    } else {
        for (size_t k = 0; k < w->pairs; k++) {
            size_t i = w->victims[k];
            size_t size = w->sizes[(k + warm) % w->pairs];
            int rc;
            if (timing == TIME_WITH_HARNESS) {
                uint64_t t0 = vram_now_ns();
                vram_pool_free(pool, live[i]);
                rc = vram_pool_alloc(pool, size, NULL, &live[i]);
                ns[k] = clamp(vram_now_ns() - t0);
            } else {
                void *victim = live[i], *fresh;
                __asm__ volatile("" : : "r"(victim) : "memory"); /* loaded before the clock */
                uint64_t t0 = vram_now_ns();
                vram_pool_free(pool, victim);
                rc = vram_pool_alloc(pool, size, NULL, &fresh);
                ns[k] = clamp(vram_now_ns() - t0);
                live[i] = fresh;
            }
            if (rc) return -1;
        }
    }
    *out = summarize(ns, timed);
    vram_pool_stats(pool, stats);
    vram_pool_destroy(pool);
    free(live);
    return 0;
}

/* Returns how many requests malloc refused (big blocks are mmaps, and the
 * kernel caps a process at ~65,000 mappings). */
static size_t run_malloc(const workload_t *w, uint32_t *ns, figures_t *out)
{
    size_t refused = 0;
    void **live = malloc(w->live * sizeof *live);
    for (size_t i = 0; i < w->live; i++)
        refused += !(live[i] = malloc(w->fill_sizes[i]));
    size_t warm = w->pairs / 4;
    for (size_t k = 0; k < w->pairs; k++) {
        size_t i = w->victims[k];
        size_t size = w->sizes[(k + warm) % w->pairs];
        uint64_t t0 = vram_now_ns();
        free(live[i]);
        live[i] = malloc(size);
        ns[k] = clamp(vram_now_ns() - t0);
        refused += !live[i];
    }
    *out = summarize(ns, w->pairs);
    for (size_t i = 0; i < w->live; i++)
        free(live[i]);
    free(live);
    return refused;
}

/* Latency of a dependent load over `bytes` (a random cyclic permutation of
 * cache lines): what a cache miss costs on the machine right now. */
static double load_latency_ns(size_t bytes)
{
    size_t n = bytes / 64;
    uint64_t *lines = aligned_alloc(2u << 20, bytes);
    size_t *order = malloc(n * sizeof *order);
    if (!lines || !order) {
        free(lines);
        free(order);
        return 0;
    }
#ifdef MADV_HUGEPAGE
    madvise(lines, bytes, MADV_HUGEPAGE); /* like the pool's metadata */
#endif
    for (size_t i = 0; i < n; i++)
        order[i] = i;
    for (size_t i = n - 1; i > 0; i--) {
        size_t j = (size_t)(rnd() % (i + 1)), t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    for (size_t i = 0; i < n; i++)
        lines[order[i] * 8] = order[(i + 1) % n] * 8;
    size_t at = 0, steps = 2000000;
    for (size_t i = 0; i < n; i++)
        at = lines[at];
    uint64_t t0 = vram_now_ns();
    for (size_t i = 0; i < steps; i++)
        at = lines[at];
    double ns = (double)(vram_now_ns() - t0) / (double)steps;
    __asm__ volatile("" : : "r"(at));
    free(lines);
    free(order);
    return ns;
}

/* Row s of the tables: strategy s with segments, or (the last row)
 * BALANCED with expandable segments. */
static const char *row_name(int s)
{
    return s < VRAM_POOL_STRATEGY_COUNT_ ? vram_pool_strategy_name((vram_pool_strategy_t)s)
                                         : "balanced, expandable";
}

#define LIVES      3
#define MAX_ROUNDS 15

typedef struct {
    double p50[MAX_ROUNDS], own[MAX_ROUNDS],
        batch[MAX_ROUNDS]; /* per round: p50, pool p50, batch */
} series_t;

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* "median (min-max)" of n values. */
static void print_spread(const double *v, int n, const char *unit)
{
    double s[MAX_ROUNDS];
    memcpy(s, v, (size_t)n * sizeof *s);
    qsort(s, (size_t)n, sizeof *s, cmp_double);
    double med = n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
    const char *fmt = *unit == 'x' ? " %5.2f%s (%.2f-%.2f)" : " %5.0f%s (%.0f-%.0f)";
    printf(fmt, med, unit, s[0], s[n - 1]);
}

int main(int argc, char **argv)
{
    size_t pairs = argc > 1 ? strtoul(argv[1], NULL, 10) : 200000;
    int rounds = argc > 2 ? atoi(argv[2]) : 3;
    if (pairs < 100) pairs = 100;
    if (rounds < 1) rounds = 1;
    if (rounds > MAX_ROUNDS) rounds = MAX_ROUNDS;
    static const size_t lives[LIVES] = {1000, 10000, 100000};
    uint32_t *ns = malloc(pairs * sizeof *ns);
    uint32_t clock_ns[1001];
    for (int i = 0; i < 1001; i++) {
        uint64_t t0 = vram_now_ns();
        clock_ns[i] = clamp(vram_now_ns() - t0);
    }
    figures_t clock = summarize(clock_ns, 1001);
    printf("# bench_pool_mix: alloc+free pair, sizes log-uniform 512 B - 64 MiB, %zu timed pairs\n"
           "# per row after %zu warm-up pairs, %d rounds; clock cost %.0f ns (included)\n",
           pairs, pairs / 4, rounds, clock.p50);
    workload_t w[LIVES];
    for (int l = 0; l < LIVES; l++)
        make_workload(&w[l], lives[l], pairs);
    /* Rows: every strategy with segments, then BALANCED with expandable
     * segments (the default where the device has virtual memory). */
    enum { ROWS = VRAM_POOL_STRATEGY_COUNT_ + 1 };
    series_t series[ROWS][LIVES];
    double latency[MAX_ROUNDS];
    for (int r = 0; r < rounds; r++) {
        latency[r] = load_latency_ns((size_t)16 << 20);
        printf("\n# round %d: dependent load over 16 MiB %.1f ns, over 1 MiB %.1f ns\n", r + 1,
               latency[r], load_latency_ns((size_t)1 << 20));
        printf("%-26s %8s %8s %8s %8s %10s %9s %9s %9s\n", "allocator", "live", "p50 ns", "p99 ns",
               "mean ns", "segments", "frag", "pool p50", "batch");
        for (int l = 0; l < LIVES; l++) {
            figures_t e;
            run_empty(&w[l], ns, &e);
            printf("%-26s %8zu %8.0f %8.0f %8.1f %10s %9s %9s %9s\n", "empty allocator", lives[l],
                   e.p50, e.p99, e.mean, "-", "-", "-", "-");
            for (int s = 0; s < ROWS; s++) {
                figures_t f, own, batch;
                vram_pool_stats_t st, st_other;
                bool expandable = s == VRAM_POOL_STRATEGY_COUNT_;
                vram_pool_strategy_t strategy =
                    expandable ? VRAM_POOL_BALANCED : (vram_pool_strategy_t)s;
                if (run_pool(&w[l], strategy, expandable, TIME_WITH_HARNESS, ns, &f, &st) ||
                    run_pool(&w[l], strategy, expandable, TIME_POOL_ONLY, ns, &own, &st_other) ||
                    run_pool(&w[l], strategy, expandable, TIME_BATCH, ns, &batch, &st_other)) {
                    fprintf(stderr, "pool failed: %s\n", vram_last_error());
                    return 1;
                }
                printf("pool %-21s %8zu %8.0f %8.0f %8.1f %10lld %9.3f %9.0f %9.0f\n", row_name(s),
                       lives[l], f.p50, f.p99, f.mean,
                       (long long)st.segment[VRAM_POOL_STAT_ALL].current,
                       (double)st.reserved_bytes[VRAM_POOL_STAT_ALL].current /
                           (double)st.requested_bytes[VRAM_POOL_STAT_ALL].current,
                       own.p50, batch.p50);
                series[s][l].p50[r] = f.p50;
                series[s][l].own[r] = own.p50;
                series[s][l].batch[r] = batch.p50;
            }
            if (r) continue;
            figures_t m;
            size_t refused = run_malloc(&w[l], ns, &m);
            if (refused)
                printf("%-26s %8zu  n/a: malloc refused %zu requests\n", "glibc malloc (ref)",
                       lives[l], refused);
            else
                printf("%-26s %8zu %8.0f %8.0f %8.1f %10s %9s\n", "glibc malloc (ref)", lives[l],
                       m.p50, m.p99, m.mean, "-", "-");
        }
    }
    printf("\n# summary over %d rounds: median (min-max); growth = a round's 100k figure / its 1k "
           "figure\n# dependent load over 16 MiB:",
           rounds);
    print_spread(latency, rounds, " ns");
    printf("\n%-21s %-9s %20s %20s %20s %22s\n", "strategy", "figure", "1k live", "10k live",
           "100k live", "growth 1k -> 100k");
    for (int s = 0; s < ROWS; s++) {
        static const char *const figure[3] = {"p50", "pool p50", "batch"};
        for (int fig = 0; fig < 3; fig++) {
            printf("%-21s %-9s", row_name(s), figure[fig]);
            double growth[MAX_ROUNDS];
            const double *v[LIVES];
            for (int l = 0; l < LIVES; l++) {
                v[l] = fig == 0   ? series[s][l].p50
                       : fig == 1 ? series[s][l].own
                                  : series[s][l].batch;
                print_spread(v[l], rounds, " ns");
                printf(" ");
            }
            for (int r = 0; r < rounds; r++)
                growth[r] = v[LIVES - 1][r] / v[0][r];
            print_spread(growth, rounds, "x");
            printf("\n");
        }
    }
    printf(
        "# p50: the harness's read of the victim from (and store into) its live array is timed;\n"
        "# pool p50: that access is outside the clock; batch: runs of %d pairs timed whole (the\n"
        "# access inside, no clock per pair), median run / %d. frag = reserved / requested bytes "
        "at "
        "the end.\n",
        BATCH_PAIRS, BATCH_PAIRS);
    for (int l = 0; l < LIVES; l++) {
        free(w[l].fill_sizes);
        free(w[l].victims);
        free(w[l].sizes);
    }
    free(ns);
    return 0;
}
