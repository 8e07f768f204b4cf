/* Device-layer allocation speed: sim (shared state file) vs cpu (host mmap)
 * vs plain malloc, as alloc+free pairs per second with some allocations live,
 * plus the cost of a sim device_info query with LIVE allocations held by
 * another context: when nothing changed since the last query (answered from
 * the context's view) and right after a change (a scan of the whole table).
 * Prints the figures and the ratios; run: build/bench/bench_device [pairs] */
#include "vram.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { LIVE = 256 };

/* Alternates frees and allocations over a ring of LIVE blocks of mixed sizes;
 * returns ns per alloc+free pair, or -1. */
static double time_ctx(vram_ctx_t *ctx, long pairs)
{
    void *ring[LIVE] = {0};
    size_t sizes[LIVE];
    for (int i = 0; i < LIVE; i++)
        sizes[i] = (size_t)(1 + i % 16) << 20; /* 1..16 MiB */
    uint64_t t0 = vram_now_ns();
    for (long k = 0; k < pairs; k++) {
        int i = (int)(k % LIVE);
        if (ring[i] && vram_device_free(ctx, 0, ring[i])) return -1;
        if (vram_device_alloc(ctx, 0, sizes[i], &ring[i])) return -1;
    }
    double ns = (double)(vram_now_ns() - t0) / (double)pairs;
    for (int i = 0; i < LIVE; i++)
        vram_device_free(ctx, 0, ring[i]);
    return ns;
}

static double time_malloc(long pairs)
{
    void *ring[LIVE] = {0};
    uint64_t t0 = vram_now_ns();
    for (long k = 0; k < pairs; k++) {
        int i = (int)(k % LIVE);
        free(ring[i]);
        ring[i] = malloc((size_t)(1 + i % 16) << 20);
    }
    double ns = (double)(vram_now_ns() - t0) / (double)pairs;
    for (int i = 0; i < LIVE; i++)
        free(ring[i]);
    return ns;
}

/* ns per device_info of `viewer`; with `changer`, that context allocates
 * and frees (outside the clock) before each query, so each one rescans. */
static double time_info(vram_ctx_t *viewer, vram_ctx_t *changer, int rounds)
{
    vram_device_info_t d;
    uint64_t spent = 0;
    for (int i = 0; i < rounds; i++) {
        void *p;
        if (changer &&
            (vram_device_alloc(changer, 0, 1 << 20, &p) || vram_device_free(changer, 0, p)))
            return -1;
        uint64_t t0 = vram_now_ns();
        if (vram_device_info(viewer, 0, &d)) return -1;
        spent += vram_now_ns() - t0;
    }
    return (double)spent / rounds;
}

int main(int argc, char **argv)
{
    long pairs = argc > 1 ? atol(argv[1]) : 200000;
    char dir[] = "/tmp/vram-bench-XXXXXX", path[64];
    if (!mkdtemp(dir)) return 1;
    snprintf(path, sizeof path, "%s/sim.state", dir);
    vram_option_set(VRAM_OPT_SIM, "H100-80GB");
    vram_option_set(VRAM_OPT_SIM_STATE, path);
    vram_ctx_t *sim, *cpu;
    if (vram_ctx_open_backend("sim", &sim) || vram_ctx_open_backend("cpu", &cpu)) {
        fprintf(stderr, "bench_device: %s\n", vram_last_error());
        return 1;
    }
    double s = time_ctx(sim, pairs), c = time_ctx(cpu, pairs), m = time_malloc(pairs);
    vram_ctx_t *viewer;
    void *held[LIVE];
    if (vram_ctx_open_backend("sim", &viewer)) return 1;
    for (int i = 0; i < LIVE; i++)
        if (vram_device_alloc(sim, 0, 1 << 20, &held[i])) return 1;
    double info = time_info(viewer, NULL, 2000), scan = time_info(viewer, sim, 200);
    for (int i = 0; i < LIVE; i++)
        vram_device_free(sim, 0, held[i]);
    vram_ctx_close(viewer);
    printf("bench_device: %ld alloc+free pairs, %d live blocks of 1-16 MiB\n", pairs, LIVE);
    printf("  sim    %8.0f ns/pair  (%.1fx malloc)\n", s, s / m);
    printf("  cpu    %8.0f ns/pair  (%.1fx malloc)\n", c, c / m);
    printf("  malloc %8.0f ns/pair\n", m);
    printf("  sim device_info, %d live, unchanged (view) %8.0f ns\n", LIVE, info);
    printf("  sim device_info, %d live, after a change (scan) %8.0f ns\n", LIVE, scan);
    vram_ctx_close(sim);
    vram_ctx_close(cpu);
    unlink(path);
    rmdir(dir);
    return s < 0 || c < 0 || info < 0 || scan < 0;
}
