/* Replays a trace through the pool, straight to the device, or through
 * malloc, timing every request. Part of vram_pool_tools (not libvram.so):
 * `vram replay`, bench/ and the tests. */
#ifndef VRAM_POOL_TOOLS_REPLAY_H
#define VRAM_POOL_TOOLS_REPLAY_H

#include "pool/tools/torch_policy.h"
#include "pool/tools/trace.h"

typedef enum {
    VRAM_REPLAY_POOL,             /* vram_pool_alloc / vram_pool_free */
    VRAM_REPLAY_DEVICE,           /* vram_device_alloc / vram_device_free: no caching */
    VRAM_REPLAY_MALLOC,           /* the C library's malloc / free */
    VRAM_REPLAY_TORCH,            /* PyTorch's default caching policy (torch_policy.h) */
    VRAM_REPLAY_TORCH_EXPANDABLE, /* the same with expandable segments */
    VRAM_REPLAY_MODE_COUNT_
} vram_replay_mode_t;

/* What device calls would cost on a GPU, in µs, added to the measured time
 * (the simulated device's calls cost far less). A segment allocation, a
 * segment release, mapping one chunk of physical memory into a reserved
 * range (create + map + set access), unmapping one (unmap + release), and
 * moving one (unmap + map + set access of the same memory). Defaults and
 * their sources: docs/pool.md. */
typedef struct {
    double alloc_us, free_us, map_us, unmap_us, move_us;
} vram_device_cost_t;

#define VRAM_DEVICE_COST_DEFAULT ((vram_device_cost_t){50.0, 14.0, 29.0, 11.0, 33.0})

/* Events per batch-timed run (see vram_replay_result_t.batch_p50). */
#define VRAM_REPLAY_BATCH_EVENTS 64

typedef struct {
    vram_replay_mode_t mode;
    vram_pool_strategy_t strategy;     /* VRAM_REPLAY_POOL */
    vram_pool_expandable_t expandable; /* VRAM_REPLAY_POOL */
    uint64_t limit_bytes;              /* VRAM_REPLAY_POOL: the pool limit, 0 = none */
    int repeat;                        /* passes over the trace (>= 1) */
    vram_ctx_t *ctx;                   /* POOL, DEVICE and TORCH */
    int device;
    vram_device_cost_t cost;
    /* TORCH and TORCH_EXPANDABLE without the two locks PyTorch takes per call
     * (torch_policy.c), to show what they cost (bench_pool_traces). */
    bool torch_unlocked;
} vram_replay_config_t;

/* Latencies in ns: p50, p99, mean. */
typedef struct {
    double p50, p99, mean;
    uint64_t count;
} vram_latency_t;

typedef struct {
    uint64_t ops;
    vram_latency_t all, alloc, free, pair; /* pair: an alloc plus the free of its block */
    uint64_t peak_requested_bytes;
    uint64_t peak_reserved_bytes; /* pool: reserved; device: bytes held; malloc: arena + mmap */
    double fragmentation_ratio;   /* peak reserved / peak requested */
    /* Peak over time of the bytes of the 2 MiB-aligned granules that live
     * requests overlap: what an allocator that placed blocks where this one
     * did, but mapped only those granules at every moment, would reserve. */
    uint64_t peak_touched_bytes;
    /* The most bytes of such granules one pass touches over its course, for
     * the passes after the first (the first with one pass): a pass with no
     * device call keeps all of them mapped throughout, so no mapping policy
     * both makes no call in it and reserves less (the steady floor). */
    uint64_t pass_touched_bytes;
    double floor_ratio, steady_floor_ratio; /* the two above / peak requested (0: none) */
    uint64_t device_allocs, device_frees;
    uint64_t device_maps, device_unmaps; /* units of physical memory (expandable) */
    uint64_t device_moves;               /* such units moved (the pool under a limit) */
    /* Device calls (allocs + frees + maps + unmaps + moves) in the first pass, in
     * the second, and the most in any pass after the first (UINT64_MAX with
     * one pass). */
    uint64_t first_pass_device_calls, second_pass_device_calls, later_pass_device_calls_max;
    double device_cost_ns; /* the calls at cfg->cost */
    double sim_device_ns;  /* what the simulated device's calls took (in the measured time) */
    /* (measured time - sim_device_ns + device_cost_ns) / ops: the device's
     * calls at the model's cost instead of the simulation's */
    double ns_per_op_with_cost;
    uint64_t ooms;
    double timer_overhead_ns; /* p50 of an empty timed region, included in every figure */
    /* Batch timing: the same passes replayed again through a fresh allocator
     * with the clock read once per VRAM_REPLAY_BATCH_EVENTS consecutive events,
     * so no clock cost is in the figures; ns per op net of the simulated
     * device's calls. batch_p50: the median run; batch_mean: all runs' time
     * over all operations; batch_with_cost: batch_p50 + device_cost_ns / ops. */
    double batch_p50, batch_mean, batch_with_cost;
} vram_replay_result_t;

/* Runs cfg->repeat passes; blocks still live at the end of a pass are freed
 * (untimed) before the next. A refused allocation counts as an OOM and its
 * block's later free is skipped. ENOMEM: host memory; other errors of the
 * backend end the replay. */
int vram_replay_run(const vram_trace_t *trace, const vram_replay_config_t *cfg,
                    vram_replay_result_t *out);
const char *vram_replay_mode_name(vram_replay_mode_t mode);
/* The mode named `name` ("none", "device", "malloc", "torch",
 * "torch-expandable"); EINVAL otherwise. */
int vram_replay_mode_parse(const char *name, vram_replay_mode_t *out);
/* Parses "alloc=US,free=US,map=US,unmap=US,move=US" (any subset, any order) over *cost;
 * EINVAL naming the bad part. */
int vram_device_cost_parse(const char *text, vram_device_cost_t *cost);

/* A private simulated GPU for a replay: VRAM_BACKEND=sim, VRAM_SIM of one
 * device of `bytes`, and a state file in a fresh directory under $TMPDIR
 * (set through vram_option_set, so it affects this process's options). */
typedef struct {
    char dir[4096];
    vram_ctx_t *ctx;
} vram_replay_device_t;

int vram_replay_device_open(uint64_t bytes, vram_replay_device_t *dev);
/* Closes the context and removes the state file and its directory. */
void vram_replay_device_close(vram_replay_device_t *dev);
/* Enough for every strategy: four times the trace's peak, at least 1 GiB. */
uint64_t vram_replay_device_size(const vram_trace_t *trace);

#endif
