/* The cluster simulation's engine (cluster_sim.c): one run of a job mix
 * under one way of sharing GPUs; bench_cluster.c drives and prints. */
#ifndef BENCH_CLUSTER_SIM_H
#define BENCH_CLUSTER_SIM_H

#include "mix.h"

#define GPUS_PER_NODE 8

typedef enum { WHOLE, SHARD_S, VRAM, VRAM_SHARD, NSTRATEGY } strategy_t;
extern const char *const strategy_names[NSTRATEGY];

typedef struct {
    double util, idle_wait, idle_vramd_wait, wait_p50, wait_p99, wait_mean;
    int ooms, dropped, done, started, unstarted;
    double slurm_us, vramd_us;
} result_t;

/* One shard's memory (shard, vram+shard); 8 GiB unless set. */
void cluster_set_shard_bytes(uint64_t bytes);

/* Runs jobs[0..njobs) (arrival order) on nnodes nodes under strategy and
 * fills *res; returns 0, or -1 after printing why (out of memory, a vramd
 * that refused a job, a broken ledger invariant). */
int cluster_run(strategy_t strategy, int nnodes, const mix_type_t *types, int ntypes,
                const mix_job_t *jobs, int njobs, double hours, result_t *res);

#endif
