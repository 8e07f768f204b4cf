/* bench_cluster: the same job mix on a simulated cluster under whole GPUs,
 * shards, vram and vram+shard (cluster_sim.c), in one table; the figures
 * and the command are in bench/RESULTS.md, the assumptions in README.md.
 *
 *   bench_cluster [NODES=1000] [HOURS=24] [LOAD=1.0] [SEED=1]
 *                 [STRATEGIES=whole,shard,vram,vram+shard] [SHARD_GIB=8] */
#include "cluster_sim.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#define GiB (1024.0 * 1024 * 1024)

/* Is name one of the comma-separated words of list? */
static bool listed(const char *list, const char *name)
{
    size_t len = strlen(name);
    for (const char *p = list; p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
        if (!strncmp(p, name, len) && (p[len] == ',' || p[len] == 0)) return true;
    return false;
}

static void fmt_time(double s, char *buf, size_t len)
{
    if (s < 60)
        snprintf(buf, len, "%.0f s", s);
    else if (s < 3600)
        snprintf(buf, len, "%.1f min", s / 60);
    else
        snprintf(buf, len, "%.1f h", s / 3600);
}

int main(int argc, char **argv)
{
    int nodes = argc > 1 ? atoi(argv[1]) : 1000;
    double hours = argc > 2 ? atof(argv[2]) : 24, load = argc > 3 ? atof(argv[3]) : 1.0;
    unsigned seed = argc > 4 ? (unsigned)atoi(argv[4]) : 1;
    const char *which = argc > 5 ? argv[5] : "whole,shard,vram,vram+shard";
    int shard_gib = argc > 6 ? atoi(argv[6]) : 8;
    if (nodes < 1 || nodes > 100000 || !(hours > 0) || !(load > 0) || shard_gib < 1 ||
        shard_gib > 40 || 40 % shard_gib || 48 % shard_gib) {
        fprintf(stderr, "usage: bench_cluster [NODES=1000] [HOURS=24] [LOAD=1.0] [SEED=1] "
                        "[STRATEGIES=whole,shard,vram,vram+shard] [SHARD_GIB=8: divides 40 "
                        "and 48]\n");
        return 2;
    }
    cluster_set_shard_bytes((uint64_t)shard_gib << 30);
    /* one pipe per node's scheduler */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    mix_type_t types[MIX_MAX_TYPES];
    int ntypes = mix_types(types);
    if (ntypes < 0) return 1;
    mix_job_t *jobs;
    int njobs = mix_jobs(types, ntypes, nodes * GPUS_PER_NODE, hours, load, seed, &jobs);
    if (njobs < 0) return 1;
    printf("bench_cluster %d %g %g %u %s %d: %d nodes x %d GPUs (80/48/40 GiB: 50/25/25%%), "
           "%d jobs over %g h, offered load %.2f, shards of %d GiB\n",
           nodes, hours, load, seed, which, shard_gib, nodes, GPUS_PER_NODE, njobs, hours, load,
           shard_gib);
    printf("\njob types (per-GPU memory from vram_estimate):\n");
    int count[MIX_MAX_TYPES] = {0};
    for (int i = 0; i < njobs; i++)
        count[jobs[i].type]++;
    for (int i = 0; i < ntypes; i++)
        printf("  %-42s %7.1f GiB  batch %3u  %6.1f GiB at batch 1  %d GPU  median %4.0f min  %5d "
               "jobs\n",
               types[i].label, (double)types[i].mem / GiB, types[i].batch,
               (double)types[i].table[0].bytes / GiB, types[i].gpus, types[i].median_minutes,
               count[i]);
    printf("\n| strategy | memory util | GPUs idle while jobs wait | … while one waits in a vramd "
           "queue | wait p50 | wait p99 | wait "
           "mean | OOM kills | never fit | done | Slurm-model µs/decision | vramd µs/decision "
           "|\n|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (int s = 0; s < NSTRATEGY; s++) {
        if (!listed(which, strategy_names[s])) continue;
        result_t r;
        if (cluster_run((strategy_t)s, nodes, types, ntypes, jobs, njobs, hours, &r) != 0) return 1;
        char p50[32], p99[32], mean[32], vramd[32] = "–";
        fmt_time(r.wait_p50, p50, sizeof p50);
        fmt_time(r.wait_p99, p99, sizeof p99);
        fmt_time(r.wait_mean, mean, sizeof mean);
        if (s == VRAM || s == VRAM_SHARD) snprintf(vramd, sizeof vramd, "%.1f", r.vramd_us);
        printf("| %s | %.1f%% | %.1f%% | %.1f%% | %s | %s | %s | %d | %d | %d/%d | %.2f | %s |\n",
               strategy_names[s], 100 * r.util, 100 * r.idle_wait, 100 * r.idle_vramd_wait, p50,
               p99, mean, r.ooms, r.dropped, r.done, njobs, r.slurm_us, vramd);
        fflush(stdout);
    }
    free(jobs);
    return 0;
}
