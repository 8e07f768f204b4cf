/* spank_vram: Slurm job steps admitted by the node's vramd (docs/slurm.md).
 * spank_vram.c holds the SPANK hooks and options; admit.c talks to vramd. */
#ifndef SPANK_VRAM_H
#define SPANK_VRAM_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* X(ID, name, arginfo, has_arg, usage): the plugin's srun/sbatch/salloc options. */
#define SPANK_VRAM_OPTIONS(X)                                                                      \
    X(MEM, "vram-mem", "SIZE", 1, "GPU memory per GPU the step needs, e.g. 60GiB")                 \
    X(MODEL, "vram-model", "NAME", 1, "estimate the memory of model NAME (vram estimate --list)")  \
    X(ESTIMATE_ARGS, "vram-estimate-args", "ARGS", 1,                                              \
      "more `vram estimate` flags, e.g. \"--batch-size 64 --seq-len 1024\"")                       \
    X(MIN_BATCH, "vram-min-batch", "B", 1,                                                         \
      "may start with a batch down to B plus gradient accumulation (with --vram-model)")           \
    X(TIMEOUT, "vram-timeout", "S", 1, "give up after S seconds in vramd's queue (default: wait)") \
    X(GPUS, "vram-gpus", "N", 1, "GPUs to reserve when Slurm gave the step none (default 1)")      \
    X(REPORT, "vram-report", "FILE", 1, "write the step's reservation as JSON to FILE")            \
    X(OPTIONAL, "vram-optional", NULL, 0,                                                          \
      "run without admission, with a warning, if vramd is not running")

typedef enum {
#define SPANK_VRAM_ENUM_(id, name, arg, has_arg, usage) SPANK_VRAM_OPT_##id,
    SPANK_VRAM_OPTIONS(SPANK_VRAM_ENUM_)
#undef SPANK_VRAM_ENUM_
        SPANK_VRAM_OPT_COUNT_
} spank_vram_opt_t;

/* What the step asks for, gathered from the options and the step's
 * environment in the task that registers it. */
typedef struct {
    const char *opt[SPANK_VRAM_OPT_COUNT_]; /* option values, NULL when absent */
    const char *socket;                     /* vramd's socket; NULL: vram_endpoint's */
    const char *vram_bin;                   /* the vram program, for --vram-model */
    char name[64];                          /* "slurm-JOB.STEP" */
    char command[512];                      /* the step's argv, for people */
    uint32_t slurm_job_id, slurm_step_id;
    int step_gpus[64];     /* the GPUs Slurm gave the step (SLURM_STEP_GPUS) */
    char step_cvd[64][64]; /* their CUDA_VISIBLE_DEVICES entries, same order */
    int nstep_gpus;
    int pid; /* the process whose end releases the reservation */
} spank_vram_step_t;

/* What vramd granted, as the task's environment will show it. */
typedef struct {
    long long job_id;
    char cuda_visible_devices[256];
    long long batch_size, grad_accum; /* 0 when the step has no batch */
    bool admitted;                    /* false: running without admission */
} spank_vram_grant_t;

/* Registers the step with vramd, waits in its queue (telling the user on
 * stderr) and fills *grant. Returns 0, or -1 after printing why on stderr
 * (refused, timed out, vramd unreachable without --vram-optional). */
int spank_vram_admit(const spank_vram_step_t *step, spank_vram_grant_t *grant);

/* Tells vramd the step ended with `status` (0 ok, else failed). Best effort. */
void spank_vram_finish(const char *socket, long long job_id, int status);

#endif
