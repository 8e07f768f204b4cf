/* Cost of the first allocation and free of a fresh pool (issue 15: ≤ 5 µs
 * for the pair), small and large, every strategy. Segments come from a
 * synthetic address space, so the figures are the pool's own bookkeeping
 * (its host-side tables), not a device call. Each figure is the median over
 * fresh pools; the pool's creation itself is outside the clock.
 *
 * Usage: bench_pool_first_use [pools per row (default 200)] */
#include "pool/pool_internal.h"
#include "space_source.h"

#include <stdio.h>
#include <stdlib.h>

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 200;
    if (n < 1) n = 1;
    uint64_t *pair = malloc((size_t)n * sizeof *pair), *second = malloc((size_t)n * sizeof *second);
    uint64_t *create = malloc((size_t)n * sizeof *create);
    if (!pair || !second || !create) return 1;
    vram_pool_source_t src = space_source(false);
    const size_t sizes[] = {4096, 64u << 20};
    printf("# bench_pool_first_use: median of %d fresh pools; ns, clock included\n", n);
    printf("%-22s %-6s %12s %12s %12s\n", "strategy", "size", "create", "first pair",
           "second pair");
    for (int s = 0; s < VRAM_POOL_STRATEGY_COUNT_; s++) {
        for (int z = 0; z < 2; z++) {
            for (int i = 0; i < n; i++) {
                vram_pool_config_t cfg = {.strategy = (vram_pool_strategy_t)s};
                vram_pool_t *pool;
                uint64_t tc = vram_now_ns();
                if (vram_pool_create_on(&src, &cfg, &pool)) return 1;
                void *p;
                uint64_t t0 = vram_now_ns();
                create[i] = t0 - tc;
                int rc = vram_pool_alloc(pool, sizes[z], NULL, &p);
                if (!rc) rc = vram_pool_free(pool, p);
                uint64_t t1 = vram_now_ns();
                if (!rc) rc = vram_pool_alloc(pool, sizes[z], NULL, &p);
                if (!rc) rc = vram_pool_free(pool, p);
                uint64_t t2 = vram_now_ns();
                if (rc) return 1;
                pair[i] = t1 - t0;
                second[i] = t2 - t1;
                vram_pool_destroy(pool);
            }
            qsort(pair, (size_t)n, sizeof *pair, cmp_u64);
            qsort(second, (size_t)n, sizeof *second, cmp_u64);
            qsort(create, (size_t)n, sizeof *create, cmp_u64);
            printf("%-22s %-6s %12llu %12llu %12llu\n",
                   vram_pool_strategy_name((vram_pool_strategy_t)s), z ? "64MiB" : "4KiB",
                   (unsigned long long)create[n / 2], (unsigned long long)pair[n / 2],
                   (unsigned long long)second[n / 2]);
        }
    }
    free(pair);
    free(second);
    free(create);
    return 0;
}
