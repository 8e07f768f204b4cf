/* Device-layer allocation speed: sim (shared state file) vs cpu (host mmap)
 * vs plain malloc, as alloc+free pairs per second with some allocations live,
 * plus the cost of a device_info query (a full scan of the sim table).
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

static double time_info(vram_ctx_t *ctx, int rounds)
{
    vram_device_info_t d;
    uint64_t t0 = vram_now_ns();
    for (int i = 0; i < rounds; i++)
        if (vram_device_info(ctx, 0, &d)) return -1;
    return (double)(vram_now_ns() - t0) / rounds;
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
    double info = time_info(sim, 200);
    printf("bench_device: %ld alloc+free pairs, %d live blocks of 1-16 MiB\n", pairs, LIVE);
    printf("  sim    %8.0f ns/pair  (%.1fx malloc)\n", s, s / m);
    printf("  cpu    %8.0f ns/pair  (%.1fx malloc)\n", c, c / m);
    printf("  malloc %8.0f ns/pair\n", m);
    printf("  sim device_info (full table scan) %8.0f ns\n", info);
    vram_ctx_close(sim);
    vram_ctx_close(cpu);
    unlink(path);
    rmdir(dir);
    return s < 0 || c < 0 || info < 0;
}
