/* Internal state of the watch module shared by its files: the sampler
 * (sample.c), history (history.c, store.c), alerts (alerts.c, rules_yaml.c,
 * deliver.c), peaks (peaks.c) and the renderers (prometheus.c, vram_watch_json.c). */
#ifndef VRAM_WATCH_INTERNAL_H
#define VRAM_WATCH_INTERNAL_H

#include "watch/watch.h"
#include "core/map.h"

#include <pthread.h>
#include <stdatomic.h>
#include <sqlite3.h>

/* ---- one sample ----------------------------------------------------------- */

typedef struct {
    int device;
    pid_t pid;
    uid_t uid; /* (uid_t)-1 when unknown */
    uint64_t used_bytes;
    int64_t job_id; /* 0: not a vramd job's process */
    char name[64];
} watch_proc_t;

/* A running job's use of one of its devices. */
typedef struct {
    int64_t job_id;
    int device;
    uint64_t used_bytes, reserved_bytes;
} watch_job_use_t;

typedef struct {
    double t; /* Unix seconds */
    int ndev;
    vram_device_info_t *devs;
    uint64_t *reserved; /* per device: running jobs' reservations */
    uint64_t *free_adm; /* per device: free for admission (the scheduler's figure);
                           VRAM_UNKNOWN_U64 without a scheduler or an answer */
    watch_proc_t *procs;
    size_t nprocs;
    vram_job_t *jobs; /* active jobs (queued and running) */
    size_t njobs;
    watch_job_use_t *uses;
    size_t nuses;
    double duration_s; /* what taking it cost */
} watch_sample_t;

/* What the sampler remembers about a process between samples: reading
 * /proc for every process at every sample would cost more than the rest of
 * the sample (bench/watch). */
typedef struct {
    pid_t pid;
    uid_t uid;
    int64_t job_id;
    bool seen;
} watch_pid_t;

typedef struct {
    watch_pid_t *entries;
    size_t n, cap;
    vram_map_t index;  /* pid -> entry + 1 */
    uint64_t jobs_key; /* running jobs' (id, pid) when the owners were found */
} watch_pids_t;

void vram_watch_pids_free(watch_pids_t *c);

/* sample.c: takes a sample (no watch lock held: it queries the devices). */
int vram_watch_take_sample(vram_watch_t *w, watch_sample_t *out);
void vram_watch_sample_free(watch_sample_t *s);
/* Used bytes of a job over all its devices in a sample. */
uint64_t vram_watch_job_used(const watch_sample_t *s, int64_t job_id);

/* ---- history ---------------------------------------------------------------- */

/* One row of history: a device (job_id 0) or a job on a device. Job rows
 * keep used and reserved only. Unknown figures are negative. */
typedef struct {
    double t;
    int64_t job_id;
    int device;
    int health;
    double used, free, reserved, util, temp, power;
} watch_row_t;

typedef struct {
    watch_row_t *rows;
    size_t cap, head, count; /* head: next slot to write */
} watch_ring_t;

/* Mean and max of one (device, job) over the current minute. */
typedef struct {
    int64_t job_id;
    int device;
    double minute; /* start, Unix seconds */
    int n;
    double used_sum, used_max, free_sum, reserved_sum, util_sum, util_max, temp_sum, temp_max,
        power_sum, power_max;
} watch_minute_t;

/* store.c: the watch's tables in vramd's database. Callers hold w->lock. */
typedef struct vram_watch_store watch_store_t;
int vram_watch_store_open(const char *path, watch_store_t **out);
void vram_watch_store_close(watch_store_t *st);
int vram_watch_store_samples(watch_store_t *st, const watch_row_t *rows, size_t n);
int vram_watch_store_minutes(watch_store_t *st, const watch_minute_t *m, size_t n);
int vram_watch_store_expire(watch_store_t *st, double samples_before, double minutes_before);
typedef void (*vram_watch_row_fn)(void *arg, const watch_row_t *row);
int vram_watch_store_load_samples(watch_store_t *st, double from, vram_watch_row_fn fn, void *arg);
/* Minute rows of one device (and its jobs) in [from, to), handed to fn as
 * accumulators (sums = mean * n, maxima as stored). */
typedef void (*vram_watch_minute_fn)(void *arg, const watch_minute_t *m);
int vram_watch_store_load_minutes(watch_store_t *st, int device, double from, double to,
                                  vram_watch_minute_fn fn, void *arg);
int vram_watch_store_alert_insert(watch_store_t *st, vram_alert_t *a);
int vram_watch_store_alert_resolve(watch_store_t *st, const vram_alert_t *a);
typedef void (*vram_watch_alert_fn)(void *arg, const vram_alert_t *a);
/* Firing alerts (resolved_at 0) then up to `limit` resolved, newest first. */
int vram_watch_store_alerts(watch_store_t *st, bool firing, int limit, vram_watch_alert_fn fn,
                            void *arg);

/* history.c */
int vram_watch_ring_init(watch_ring_t *r, size_t cap);
void vram_watch_ring_push(watch_ring_t *r, const watch_row_t *row);
/* Records a sample in the rings, the minute accumulators and the pending
 * database rows; writes to the store every few seconds. Holds w->lock. */
void vram_watch_history_add(vram_watch_t *w, const watch_sample_t *s);
/* Writes pending rows and expires old ones (w->lock held). */
int vram_watch_history_flush(vram_watch_t *w, bool close_minutes);
/* Reloads the rings from the store at open. */
int vram_watch_history_reload(vram_watch_t *w);

/* ---- alerts ------------------------------------------------------------------- */

typedef enum {
    WATCH_M_MEMORY_USED_RATIO,
    WATCH_M_MEMORY_FREE_BYTES,
    WATCH_M_TEMPERATURE,
    WATCH_M_POWER,
    WATCH_M_UTILIZATION,
    WATCH_M_JOB_OVER_RESERVATION,
    WATCH_M_DEVICE_ERROR,
    WATCH_M_QUEUE_WAIT,
    WATCH_M_COUNT_
} watch_metric_t;

typedef struct {
    char name[64];
    watch_metric_t metric;
    bool below;       /* fires when the value is below the threshold */
    double threshold; /* fires past it ... */
    double clear;     /* ... and resolves only back past this one */
    double for_s;     /* the condition must hold this long */
    vram_alert_level_t level;
} watch_rule_t;

typedef struct {
    watch_rule_t *rules;
    size_t nrules;
    char **webhooks;
    size_t nwebhooks;
    char **alertmanagers; /* base URLs of Prometheus Alertmanagers (v2 API) */
    size_t nalertmanagers;
    char **execs;
    size_t nexecs;
    int webhook_retries;
    double webhook_timeout_s;
} watch_rules_t;

const char *vram_watch_metric_name(watch_metric_t m);
/* A value of a metric as people write it: 90%, 8GiB, 7.5GiB, 85 C, 120 s. */
void vram_watch_describe(int metric, double v, char *buf, size_t len);
int vram_watch_metric_parse(const char *name); /* -1 if unknown */
void vram_watch_rules_free(watch_rules_t *r);
/* rules_yaml.c: the built-in rules, or a YAML file's. */
int vram_watch_rules_default(watch_rules_t *out);
int vram_watch_rules_load(const char *path, watch_rules_t *out);

/* The state of one rule on one subject. */
typedef struct {
    size_t rule;
    int device;
    int64_t job_id;
    bool seen;    /* present in the current evaluation */
    bool pending; /* condition holds, not yet for long enough */
    bool firing;
    char detail[96]; /* the subject's name as last seen ("(H100-80GB)", "\"train\"") */
    vram_alert_t alert;
} watch_alert_state_t;

/* alerts.c: evaluates the rules on a sample (w->lock held); transitions go
 * to the store and the delivery queues. */
void vram_watch_alerts_eval(vram_watch_t *w, const watch_sample_t *s);
int vram_watch_alerts_reload(vram_watch_t *w);
int vram_watch_alerts_firing_by_level(vram_watch_t *w, int counts[4]);

/* deliver.c: one queue of alert transitions per sink, each drained by its
 * own thread, so a slow receiver never holds the sampler or another sink. */
typedef enum {
    WATCH_SINK_CALLBACKS,    /* vram_watch_on_alert's callbacks */
    WATCH_SINK_WEBHOOK,      /* target: URL; the alert's JSON POSTed */
    WATCH_SINK_ALERTMANAGER, /* target: Alertmanager's base URL (API v2) */
    WATCH_SINK_EXEC,         /* target: sh -c command */
} watch_sink_kind_t;
typedef struct vram_watch_outbox watch_outbox_t;
int vram_watch_outbox_start(vram_watch_t *w, watch_sink_kind_t kind, const char *target,
                            watch_outbox_t **out);
/* Stops n sinks together: each may deliver what is queued for grace_s, then
 * transfers in flight are aborted and the rest dropped. Frees them. */
void vram_watch_outbox_stop(watch_outbox_t **sinks, size_t n, double grace_s);
void vram_watch_outbox_push(watch_outbox_t *o, const vram_alert_t *a);
bool vram_watch_outbox_idle(watch_outbox_t *o);
/* The alert as the JSON object webhooks and exec hooks receive, with the
 * host and cluster (malloc'd). */
char *vram_watch_alert_json_text(vram_watch_t *w, const vram_alert_t *a);
/* The shortest decimal text that reads back as v (0.6, 8589934592). */
void vram_watch_number_text(double v, char *buf, size_t len);

/* ---- peaks ---------------------------------------------------------------------- */

typedef struct {
    uint64_t *device;     /* per device */
    double *device_since; /* per device: last reset */
    vram_map_t process;   /* (device << 32 | pid) + 1 -> bytes */
    vram_map_t job;       /* job id -> bytes over its devices */
    double since;         /* last reset of everything */
    /* the name each process had (it outlives the process, for `vram peaks`) */
    vram_map_t process_name; /* process key -> index + 1 into names */
    char (*names)[64];
    size_t nnames, names_cap;
} watch_peaks_t;

void vram_watch_peaks_add(watch_peaks_t *p, const watch_sample_t *s);
void vram_watch_peaks_free(watch_peaks_t *p);

/* ---- the process itself (self.c) ------------------------------------------------ */

/* Figures of this process; negative when unknown. */
typedef struct {
    double cpu_seconds, resident_bytes, virtual_bytes, threads, start_time_seconds;
    double open_fds, max_fds;
} watch_self_t;
int vram_watch_self(watch_self_t *out);

/* ---- the watch ---------------------------------------------------------------------- */

#define WATCH_MAX_CALLBACKS 8

typedef struct {
    vram_alert_fn fn;
    void *arg;
} watch_callback_t;

struct vram_watch {
    pthread_mutex_t lock; /* everything below but the atomics */
    vram_watch_config_t cfg;
    vram_sched_devices_t dev;
    int ndev;
    watch_store_t *store; /* NULL without a database */
    watch_rules_t rules;
    watch_ring_t ring;       /* device rows */
    watch_ring_t job_ring;   /* job rows */
    watch_minute_t *minutes; /* accumulators of the current minute */
    size_t nminutes, minutes_cap;
    watch_row_t *pending; /* rows not yet in the store */
    size_t npending, pending_cap;
    double last_flush, last_expire;
    watch_sample_t last;         /* the latest sample (t == 0: none yet) */
    watch_pids_t pids;           /* sampler thread only (sample_lock) */
    pthread_mutex_t sample_lock; /* one sample at a time */
    watch_peaks_t peaks;
    watch_alert_state_t *alerts;
    size_t nalerts, alerts_cap;
    watch_callback_t callbacks[WATCH_MAX_CALLBACKS];
    int ncallbacks;
    watch_outbox_t **sinks; /* the callbacks' first, then one per receiver */
    size_t nsinks;
    char host[256];      /* gethostname: on every alert sent out */
    char *cluster;       /* cfg.cluster, or NULL */
    char *generator_url; /* cfg.generator_url, or NULL */
    pthread_t thread;
    bool started;
    pthread_mutex_t stop_lock;
    pthread_cond_t stop_cond;
    bool stopping;
    /* counters for Prometheus (scheduler events, samples) */
    _Atomic uint64_t admissions, releases, timeouts, ooms, oom_retries, samples, sample_errors;
    _Atomic uint64_t alerts_fired, deliveries_failed;
};

double vram_watch_now(const vram_watch_t *w);
/* Waits until a CLOCK_MONOTONIC time (ns) or the watch closing; false when
 * it is closing. */
bool vram_watch_wait_until(vram_watch_t *w, uint64_t until_ns);
bool vram_watch_sleep(vram_watch_t *w, double seconds);
/* A log line through cfg.log (or stderr). */
void vram_watch_log(vram_watch_t *w, const char *level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Appends to a growing array (elem bytes each); false on ENOMEM. */
bool vram_watch_grow(void **array, size_t *cap, size_t need, size_t elem);

#endif
