/* Benchmarks of the watch module (bench/RESULTS.md, "watch"):
 *
 *  1. sampler cost: 8 devices and 200 live processes sampled at 10 Hz for
 *     SECONDS, as CPU time of this process over wall time (one core = 100%),
 *     over (a) the sim backend (200 child processes holding sim memory) and
 *     (b) an in-memory device source listing the same 200 real pids, which
 *     isolates the sampler's own work (attribution, history, SQLite) from
 *     the backend's;
 *  2. /metrics render time with 1,000 running jobs (median of 200 renders),
 *     beside the scheduler's own /v1/jobs JSON of the same jobs.
 *
 * usage: bench_watch [SECONDS]   (default 10)
 */
#include "vram.h"
#include "watch/watch.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define NDEV  8
#define NPROC 200
#define NJOBS 1000
#define GiB   (1024ull * 1024 * 1024)

static pid_t kids[NPROC];

static double cpu_seconds(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

static double wall_seconds(void)
{
    return (double)vram_now_ns() / 1e9;
}

/* ---- an in-memory device source: 8 devices, the 200 children --------------- */

static int mem_count(void *arg)
{
    (void)arg;
    return NDEV;
}
static int mem_info(void *arg, int i, vram_device_info_t *out)
{
    (void)arg;
    memset(out, 0, sizeof *out);
    out->index = i;
    snprintf(out->name, sizeof out->name, "bench-%d", i);
    out->total_bytes = 80 * GiB;
    out->used_bytes = (NPROC / NDEV) * GiB / 4;
    out->free_bytes = out->total_bytes - out->used_bytes;
    out->utilization_pct = 50;
    out->temperature_c = 60;
    out->power_w = 300;
    return 0;
}
static int mem_procs(void *arg, int i, vram_process_info_t *p, size_t cap, size_t *n)
{
    (void)arg;
    size_t k = 0;
    for (int j = i; j < NPROC; j += NDEV, k++)
        if (k < cap) p[k] = (vram_process_info_t){kids[j], GiB / 4, "bench"};
    *n = k;
    return 0;
}

/* Runs a started watch for `seconds`; returns CPU % of one core. */
static double sampler_cost(vram_watch_t *w, double seconds)
{
    double c0 = cpu_seconds(), t0 = wall_seconds();
    if (vram_watch_start(w) != 0) {
        fprintf(stderr, "start: %s\n", vram_last_error());
        exit(1);
    }
    struct timespec ts = {(time_t)seconds, (long)((seconds - (double)(time_t)seconds) * 1e9)};
    while (nanosleep(&ts, &ts) != 0) {
    }
    double c1 = cpu_seconds(), t1 = wall_seconds();
    return 100.0 * (c1 - c0) / (t1 - t0);
}

/* CPU milliseconds per vram_watch_sample (no database, median-free mean of 100). */
static double synchronous_ms(vram_ctx_t *ctx)
{
    vram_watch_config_t cfg = {.ctx = ctx, .interval_s = 0.1, .history_s = 60, .retention_s = 60};
    vram_watch_t *w;
    if (vram_watch_open(&cfg, &w) != 0 || vram_watch_sample(w) != 0) exit(1);
    double c0 = cpu_seconds();
    for (int i = 0; i < 100; i++)
        vram_watch_sample(w);
    double ms = (cpu_seconds() - c0) * 10;
    vram_watch_close(w);
    return ms;
}

/* CPU milliseconds per round of the device queries a sample makes. */
static double queries_ms(vram_ctx_t *ctx)
{
    static vram_process_info_t procs[1024];
    double c0 = cpu_seconds();
    for (int i = 0; i < 100; i++)
        for (int d = 0; d < NDEV; d++) {
            vram_device_info_t info;
            size_t n;
            vram_device_info(ctx, d, &info);
            vram_device_processes(ctx, d, procs, 1024, &n);
        }
    return (cpu_seconds() - c0) * 10;
}

static void spawn_children(bool sim)
{
    for (int i = 0; i < NPROC; i++) {
        int ready[2];
        if (pipe(ready) != 0) exit(1);
        pid_t pid = fork();
        if (pid == 0) {
            close(ready[0]);
            if (sim) {
                vram_ctx_t *ctx;
                void *ptr;
                if (vram_ctx_open_backend("sim", &ctx) != 0 ||
                    vram_device_alloc(ctx, i % NDEV, GiB / 4, &ptr) != 0)
                    _exit(1);
            }
            if (write(ready[1], "y", 1) != 1) _exit(1);
            pause();
            _exit(0);
        }
        close(ready[1]);
        char c;
        if (read(ready[0], &c, 1) != 1) {
            fprintf(stderr, "child %d failed\n", i);
            exit(1);
        }
        close(ready[0]);
        kids[i] = pid;
    }
}

static void reap_children(void)
{
    for (int i = 0; i < NPROC; i++)
        kill(kids[i], SIGTERM);
    for (int i = 0; i < NPROC; i++)
        waitpid(kids[i], NULL, 0);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void metrics_render(const char *dir)
{
    static const vram_sched_devices_t source = {mem_count, mem_info, NULL, NULL};
    char db[256];
    snprintf(db, sizeof db, "%s/sched.db", dir);
    vram_sched_config_t sc;
    memset(&sc, 0, sizeof sc);
    sc.db_path = db;
    sc.devices = &source;
    snprintf(sc.safety_margin, sizeof sc.safety_margin, "0");
    vram_sched_t *s;
    if (vram_sched_open(&sc, &s) != 0) {
        fprintf(stderr, "sched: %s\n", vram_last_error());
        exit(1);
    }
    for (int i = 0; i < NJOBS; i++) {
        vram_job_request_t r;
        memset(&r, 0, sizeof r);
        snprintf(r.name, sizeof r.name, "job-%d", i);
        r.uid = getuid();
        r.mem_bytes = 64ull << 20;
        r.gpus = 1;
        r.timeout_s = -1;
        vram_job_t j;
        if (vram_sched_submit(s, &r, &j) != 0 || j.state != VRAM_JOB_RUNNING) {
            fprintf(stderr, "submit %d: %s\n", i, vram_last_error());
            exit(1);
        }
    }
    vram_watch_config_t wc = {
        .devices = &source, .sched = s, .interval_s = 1, .history_s = 60, .retention_s = 3600};
    vram_watch_t *w;
    if (vram_watch_open(&wc, &w) != 0 || vram_watch_sample(w) != 0) {
        fprintf(stderr, "watch: %s\n", vram_last_error());
        exit(1);
    }
    enum { RUNS = 200 };
    double metrics[RUNS], jobs[RUNS];
    size_t bytes = 0, jobs_bytes = 0;
    for (int i = 0; i < RUNS; i++) {
        double t0 = wall_seconds();
        char *text = vram_watch_metrics_text(w);
        double t1 = wall_seconds();
        char *js = vram_sched_jobs_json(s, 0);
        double t2 = wall_seconds();
        metrics[i] = t1 - t0;
        jobs[i] = t2 - t1;
        bytes = strlen(text);
        jobs_bytes = strlen(js);
        free(text);
        free(js);
    }
    qsort(metrics, RUNS, sizeof *metrics, cmp_double);
    qsort(jobs, RUNS, sizeof *jobs, cmp_double);
    printf("/metrics with %d running jobs: median %.3f ms, p90 %.3f ms, %zu bytes\n", NJOBS,
           metrics[RUNS / 2] * 1e3, metrics[RUNS * 9 / 10] * 1e3, bytes);
    printf("  beside /v1/jobs JSON of the same jobs: median %.3f ms (%zu bytes); ratio %.2f\n",
           jobs[RUNS / 2] * 1e3, jobs_bytes, metrics[RUNS / 2] / jobs[RUNS / 2]);
    vram_watch_close(w);
    vram_sched_close(s);
}

int main(int argc, char **argv)
{
    double seconds = argc > 1 ? atof(argv[1]) : 10;
    char dir[] = "/tmp/vram-bench-watch-XXXXXX";
    if (!mkdtemp(dir)) return 1;
    char state[256], db[256];
    snprintf(state, sizeof state, "%s/sim.state", dir);
    setenv("VRAM_SIM", "8xH100-80GB", 1);
    setenv("VRAM_SIM_STATE", state, 1);
    signal(SIGPIPE, SIG_IGN);

    /* (a) the sim backend */
    spawn_children(true);
    vram_ctx_t *ctx;
    if (vram_ctx_open_backend("sim", &ctx) != 0) return 1;
    snprintf(db, sizeof db, "%s/a.db", dir);
    vram_watch_config_t cfg = {
        .ctx = ctx, .db_path = db, .interval_s = 0.1, .history_s = 3600, .retention_s = 86400};
    vram_watch_t *w;
    if (vram_watch_open(&cfg, &w) != 0) return 1;
    double sim = sampler_cost(w, seconds);
    char *sample = vram_watch_sample_json(w);
    int listed = 0;
    for (const char *p = sample; (p = strstr(p, "\"pid\":")); p++)
        listed++;
    free(sample);
    vram_watch_close(w);
    /* Per sample, synchronously: a whole watch sample against the bare
     * device queries it makes (the backend's share), same devices. */
    double per_sample = synchronous_ms(ctx), per_query = queries_ms(ctx);
    vram_ctx_close(ctx);
    reap_children();
    printf("sampler, sim backend, %d devices, %d processes seen, 10 Hz, %.0f s: %.3f%% of one "
           "core\n",
           NDEV, listed, seconds, sim);
    printf("  per sample: %.3f ms for the whole sample, %.3f ms of it the backend's queries "
           "(info + processes of %d devices): the sampler's own share %.1f%%\n",
           per_sample, per_query, NDEV,
           per_sample > 0 ? 100 * (per_sample - per_query) / per_sample : 0);

    /* (b) the in-memory source: the sampler's own work */
    spawn_children(false);
    static const vram_sched_devices_t source = {mem_count, mem_info, mem_procs, NULL};
    snprintf(db, sizeof db, "%s/b.db", dir);
    vram_watch_config_t cfg2 = {.devices = &source,
                                .db_path = db,
                                .interval_s = 0.1,
                                .history_s = 3600,
                                .retention_s = 86400};
    if (vram_watch_open(&cfg2, &w) != 0) return 1;
    double own = sampler_cost(w, seconds);
    vram_watch_close(w);
    reap_children();
    printf("sampler, in-memory source, %d devices, %d processes, 10 Hz, %.0f s: %.3f%% of one "
           "core (sim backend / own work: %.1fx)\n",
           NDEV, NPROC, seconds, own, own > 0 ? sim / own : 0);

    metrics_render(dir);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    return system(cmd) == 0 ? 0 : 1;
}
