/* Workload simulation: the same random jobs on 2 simulated 80 GiB GPUs,
 * started naively (each at its arrival on the GPU that looks freest, no
 * reservation) versus admitted by vramd's scheduler (the libvram code the
 * daemon runs, here with a virtual clock). Jobs ramp their memory up over
 * the first 10% of their run, as training jobs do, so a GPU that looks free
 * at one instant is not. Reports OOM failures, makespan, mean memory
 * utilization and queueing for both.
 *
 *   bench_simulate [JOBS=200] [SEED=1] */
#include "vram.h"
#include "sched/sched.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GiB    (1024.0 * 1024 * 1024)
#define NDEV   2
#define DT     0.25
#define MAXJOB 10000

typedef struct {
    double arrival, duration;
    uint64_t need;
    int state; /* 0 not arrived, 1 queued, 2 running, 3 done, 4 oom */
    int dev;
    double start, end;
    int64_t id;
} job_t;

static const uint64_t total = 80ull << 30;
static double now_s;
static double clock_fn(void)
{
    return now_s;
}
static int dev_count(void *a)
{
    (void)a;
    return NDEV;
}
static int dev_info(void *a, int i, vram_device_info_t *o)
{
    (void)a;
    snprintf(o->name, sizeof o->name, "sim%d", i);
    o->total_bytes = total;
    o->used_bytes = 0; /* all memory is used by jobs vramd manages */
    o->free_bytes = total;
    o->health = VRAM_HEALTH_AVAILABLE;
    return 0;
}

static double usage_at(const job_t *j, double t)
{
    double ramp = fmax(2.0, 0.1 * j->duration);
    return (double)j->need * fmin(1.0, (t - j->start) / ramp);
}

typedef struct {
    int oom, done;
    double makespan, util, useful_util, mean_wait, max_wait;
} result_t;

/* Sums running jobs' usage per device; returns the integral step. */
static void device_usage(job_t *jobs, int n, double t, double *use)
{
    for (int d = 0; d < NDEV; d++)
        use[d] = 0;
    for (int i = 0; i < n; i++)
        if (jobs[i].state == 2) use[jobs[i].dev] += usage_at(&jobs[i], t);
}

static void finish_stats(job_t *jobs, int n, double util_integral, double useful_integral,
                         result_t *r)
{
    double first = jobs[0].arrival, last = 0, wait = 0;
    for (int i = 0; i < n; i++) {
        if (jobs[i].end > last) last = jobs[i].end;
        if (jobs[i].state == 3) r->done++;
        if (jobs[i].state == 4) r->oom++;
        double w = jobs[i].start - jobs[i].arrival;
        wait += w;
        if (w > r->max_wait) r->max_wait = w;
    }
    r->makespan = last - first;
    r->util = util_integral / (r->makespan * NDEV * (double)total);
    r->useful_util = useful_integral / (r->makespan * NDEV * (double)total);
    r->mean_wait = wait / n;
}

static void run_naive(job_t *jobs, int n, result_t *r)
{
    double util = 0, useful = 0;
    int left = n;
    for (double t = jobs[0].arrival; left > 0; t += DT) {
        double use[NDEV];
        device_usage(jobs, n, t, use);
        for (int i = 0; i < n; i++) {
            if (jobs[i].state != 0 || jobs[i].arrival > t) continue;
            int best = 0; /* what nvidia-smi shows right now */
            for (int d = 1; d < NDEV; d++)
                if (use[d] < use[best]) best = d;
            jobs[i].state = 2;
            jobs[i].dev = best;
            jobs[i].start = t;
        }
        for (int i = 0; i < n; i++)
            if (jobs[i].state == 2 && t >= jobs[i].start + jobs[i].duration) {
                jobs[i].state = 3;
                jobs[i].end = t;
                left--;
            }
        device_usage(jobs, n, t, use);
        for (int d = 0; d < NDEV; d++) {
            /* Over capacity: the newest job on the device fails its allocation. */
            while (use[d] > (double)total) {
                int victim = -1;
                for (int i = 0; i < n; i++)
                    if (jobs[i].state == 2 && jobs[i].dev == d &&
                        (victim < 0 || jobs[i].start > jobs[victim].start))
                        victim = i;
                use[d] -= usage_at(&jobs[victim], t);
                jobs[victim].state = 4;
                jobs[victim].end = t;
                left--;
            }
        }
        device_usage(jobs, n, t, use);
        for (int d = 0; d < NDEV; d++)
            util += use[d] * DT;
    }
    /* Useful utilization: re-integrate only the jobs that completed. */
    for (int i = 0; i < n; i++) {
        if (jobs[i].state != 3) continue;
        for (double t = jobs[i].start; t < jobs[i].end; t += DT)
            useful += usage_at(&jobs[i], t) * DT;
    }
    finish_stats(jobs, n, util, useful, r);
}

static int run_vramd(job_t *jobs, int n, result_t *r)
{
    vram_sched_devices_t devs = {dev_count, dev_info, NULL, NULL};
    vram_sched_config_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.devices = &devs;
    cfg.db_path = ":memory:";
    snprintf(cfg.safety_margin, sizeof cfg.safety_margin, "0");
    cfg.placement = VRAM_PLACE_BEST_FIT;
    cfg.backfill = true;
    cfg.clock = clock_fn;
    vram_sched_t *s;
    now_s = jobs[0].arrival;
    if (vram_sched_open(&cfg, &s) != 0) {
        fprintf(stderr, "scheduler: %s\n", vram_last_error());
        return 1;
    }
    double util = 0;
    int left = n, violations = 0;
    for (double t = jobs[0].arrival; left > 0; t += DT) {
        now_s = t;
        for (int i = 0; i < n; i++) {
            if (jobs[i].state != 0 || jobs[i].arrival > t) continue;
            vram_job_request_t q;
            memset(&q, 0, sizeof q);
            snprintf(q.name, sizeof q.name, "job%d", i);
            q.mem_bytes = jobs[i].need;
            q.gpus = 1;
            q.timeout_s = 0;
            vram_job_t j;
            if (vram_sched_submit(s, &q, &j) != 0) {
                fprintf(stderr, "submit: %s\n", vram_last_error());
                return 1;
            }
            jobs[i].id = j.id;
            jobs[i].state = 1;
        }
        for (int i = 0; i < n; i++)
            if (jobs[i].state == 2 && t >= jobs[i].start + jobs[i].duration) {
                vram_sched_finish(s, jobs[i].id, 0, 0, NULL);
                jobs[i].state = 3;
                jobs[i].end = t;
                left--;
            }
        vram_sched_tick(s);
        for (int i = 0; i < n; i++) {
            if (jobs[i].state != 1) continue;
            vram_job_t j;
            if (vram_sched_job(s, jobs[i].id, &j) == 0 && j.state == VRAM_JOB_RUNNING) {
                jobs[i].state = 2;
                jobs[i].dev = j.devices[0];
                jobs[i].start = t;
            }
        }
        if (vram_sched_check(s) != 0) violations++;
        double use[NDEV];
        device_usage(jobs, n, t, use);
        for (int d = 0; d < NDEV; d++) {
            if (use[d] > (double)total) r->oom++; /* never: reservations cover usage */
            util += use[d] * DT;
        }
    }
    vram_sched_close(s);
    int oom = r->oom;
    r->oom = 0;
    finish_stats(jobs, n, util, util, r);
    r->oom += oom;
    if (violations) fprintf(stderr, "ledger invariant violated at %d steps\n", violations);
    return violations ? 1 : 0;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 200;
    unsigned seed = argc > 2 ? (unsigned)atoi(argv[2]) : 1;
    if (n < 1 || n > MAXJOB) return 2;
    static job_t base[MAXJOB], a[MAXJOB], b[MAXJOB];
    srand(seed);
    double t = 0;
    for (int i = 0; i < n; i++) {
        t += -12.0 * log(1.0 - (double)rand() / ((double)RAND_MAX + 1)); /* Poisson, mean 12 s */
        base[i].arrival = t;
        base[i].duration = 30 + rand() % 91;              /* 30-120 s */
        base[i].need = (uint64_t)(4 + rand() % 57) << 30; /* 4-60 GiB */
    }
    memcpy(a, base, sizeof(job_t) * (size_t)n);
    memcpy(b, base, sizeof(job_t) * (size_t)n);
    result_t naive = {0}, sched = {0};
    run_naive(a, n, &naive);
    int rc = run_vramd(b, n, &sched);
    printf("workload: %d jobs on %d x 80 GiB, seed %u; memory 4-60 GiB, run 30-120 s, "
           "Poisson arrivals every 12 s on average; memory ramps up over 10%% of a run\n",
           n, NDEV, seed);
    printf("%-34s %12s %12s\n", "", "naive", "vramd");
    printf("%-34s %12d %12d\n", "OOM failures", naive.oom, sched.oom);
    printf("%-34s %12d %12d\n", "jobs completed", naive.done, sched.done);
    printf("%-34s %12.0f %12.0f\n", "makespan (s)", naive.makespan, sched.makespan);
    printf("%-34s %11.1f%% %11.1f%%\n", "mean memory utilization", 100 * naive.util,
           100 * sched.util);
    printf("%-34s %11.1f%% %11.1f%%\n", "  of which by jobs that completed",
           100 * naive.useful_util, 100 * sched.useful_util);
    printf("%-34s %12.1f %12.1f\n", "mean wait before start (s)", naive.mean_wait, sched.mean_wait);
    printf("%-34s %12.1f %12.1f\n", "max wait before start (s)", naive.max_wait, sched.max_wait);
    return rc || sched.oom ? 1 : 0;
}
