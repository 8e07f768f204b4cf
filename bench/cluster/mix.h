/* The job mix of the cluster simulation (bench/cluster/README.md names its
 * assumptions and sources): job types whose memory comes from libvram's
 * estimator, heavy-tailed durations, bursty arrivals. */
#ifndef BENCH_CLUSTER_MIX_H
#define BENCH_CLUSTER_MIX_H

#include "vram.h"
#include "sched/sched.h"

#include <stdint.h>

#define MIX_MAX_TYPES 16

/* One kind of job, estimated once per GPU by vram_estimate. */
typedef struct {
    const char *label; /* e.g. "llama-2-7b lora bs4 s2048" */
    uint64_t mem;      /* bytes per GPU at batch */
    uint32_t batch;    /* per-GPU batch the user asks */
    /* full estimates at the batches worth granting, 1..batch
     * (vram_estimate_batch_table); the last is mem at batch */
    vram_batch_bytes_t table[VRAM_JOB_MAX_BATCHES];
    int ntable;
    int gpus;              /* data-parallel GPUs on one node */
    double weight;         /* share of submissions */
    double median_minutes; /* median run time */
    int sweep;             /* 1: submitted in sweeps (bursts of copies) */
} mix_type_t;

typedef struct {
    double arrival;  /* seconds from the start */
    double duration; /* seconds of running, whatever the batch */
    int type;        /* index in the type table */
    double error;    /* the estimator's error for this job: actual = estimate * (1 + error) */
} mix_job_t;

/* Fills types[] from the estimator; returns the count, or -1 after printing
 * which estimate failed. */
int mix_types(mix_type_t *types);

/* Memory per GPU at batch b: the table's at the smallest listed batch >= b
 * (b itself for the halvings of the batch the simulation asks for). */
uint64_t mix_mem_at(const mix_type_t *t, uint32_t b);

/* Jobs arriving over `hours` on a cluster of `gpus` GPUs, with the offered
 * load (GPU-hours asked / GPU-hours there) near `load`. *jobs is malloc'd,
 * in arrival order; returns the count. */
int mix_jobs(const mix_type_t *types, int ntypes, int gpus, double hours, double load,
             unsigned seed, mix_job_t **jobs);

/* A deterministic generator (xorshift), so that every strategy sees the same jobs. */
double mix_uniform(uint64_t *state);
double mix_normal(uint64_t *state);

#endif
