/* watch/watch.h — the monitor's interface to vramd, the CLI and the tests
 * (not libvram's: include/vram.h never declares it). Built into vram_core
 * (docs/design.md, "Libraries and headers").
 */
#ifndef VRAM_WATCH_WATCH_H
#define VRAM_WATCH_WATCH_H

#include "sched/sched.h"

/* A monitor of the devices: a sampler thread reads every device and its
 * processes each interval, attributes processes to vramd's running jobs (a
 * job's pid and its descendants), keeps a full-rate history ring and
 * per-minute mean/max rows (both in SQLite when a database is given), peaks
 * and alerts. docs/monitoring.md. */
typedef struct vram_watch vram_watch_t;

typedef enum {
    VRAM_ALERT_INFO,
    VRAM_ALERT_WARNING,
    VRAM_ALERT_ERROR,
    VRAM_ALERT_CRITICAL,
} vram_alert_level_t;

/* One alert: a rule that held on a subject (a device or a job) for its
 * duration. resolved_at is 0 while it fires. */
typedef struct {
    int64_t id; /* row in the database; 0 without one */
    char rule[64];
    vram_alert_level_t level;
    char metric[40];
    char subject[48]; /* "gpu0", "job 12", "queue" */
    int device;       /* -1 when not about one device */
    int64_t job_id;   /* 0 when not about a job */
    double value, threshold;
    double pending_since, fired_at, resolved_at; /* Unix seconds */
    char message[256]; /* firing: what holds; resolved: why it ended, the value then */
    char reason[16];   /* resolved: "cleared" (the value came back) or "gone" (its
                          job or device left); "" while firing */
} vram_alert_t;

/* Called once when an alert fires and once when it resolves (alert->
 * resolved_at > 0), from the watch's delivery thread, never the sampler's:
 * it may block briefly, must not call vram_watch_close. */
typedef void (*vram_alert_fn)(void *arg, const vram_alert_t *alert);

typedef struct {
    vram_ctx_t *ctx;                     /* borrowed; used when devices is NULL */
    const vram_sched_devices_t *devices; /* borrowed; wins over ctx (tests) */
    vram_sched_t *sched;                 /* borrowed, optional: jobs and queue */
    const char *db_path;                 /* SQLite file (vramd's); NULL = memory only */
    double interval_s;                   /* sampling period (> 0) */
    double history_s;                    /* full-rate history kept */
    double retention_s;                  /* per-minute rows kept */
    const char *rules_path;              /* YAML rules; NULL/"" = built-in rules */
    const char *webhook_url;             /* extra webhook; NULL/"" = none */
    const char *exec_command;            /* extra exec hook (sh -c); NULL/"" = none */
    const char *alertmanager_url;        /* extra Alertmanager (base URL); NULL/"" = none */
    const char *cluster;                 /* `cluster` label of every alert; NULL/"" = none */
    const char *generator_url;           /* link back (the dashboard); NULL/"" = none */
    double (*clock)(void);               /* Unix seconds; NULL = real time (tests) */
    /* Log lines of the watch (alerts, delivery failures); NULL = stderr. */
    void (*log)(void *arg, const char *level, const char *message);
    void *log_arg;
} vram_watch_config_t;

/* Fills a config from the options (WATCH_*, ALERT_*, DB); ctx and sched
 * stay NULL. EINVAL names a bad option. */
int vram_watch_config_from_options(vram_watch_config_t *cfg);
/* Opens the watch: loads the rules (EPARSE naming the file, line and key),
 * creates its tables and reloads the history and the alerts still firing.
 * Does not sample until vram_watch_start or vram_watch_sample. */
int vram_watch_open(const vram_watch_config_t *cfg, vram_watch_t **out);
/* Starts the sampler and delivery threads. ESTATE when already started. */
int vram_watch_start(vram_watch_t *w);
/* Stops the threads, writes what is pending to the database, frees. NULL ok. */
void vram_watch_close(vram_watch_t *w);
/* Takes one sample now (tests, benchmarks; thread-safe with the sampler). */
int vram_watch_sample(vram_watch_t *w);
/* Waits until the delivery queue is empty or timeout_ms passes; 0 or
 * ETIMEDOUT (tests). */
int vram_watch_flush(vram_watch_t *w, int timeout_ms);
/* Registers a callback for alert transitions (up to 8). Thread-safe. */
int vram_watch_on_alert(vram_watch_t *w, vram_alert_fn fn, void *arg);
/* Counts a scheduler event (the scheduler's on_event: "admitted",
 * "finished", "timeout", ...) for the Prometheus counters. Thread-safe and
 * cheap: may be called under the scheduler lock. */
void vram_watch_job_event(vram_watch_t *w, const vram_job_t *job, const char *kind,
                          const char *message);
/* Resets peaks: every peak (device < 0 and job_id 0), one device's, or one
 * job's. ENODEV / ENOENT for an unknown device / job. */
int vram_watch_reset_peaks(vram_watch_t *w, int device, int64_t job_id);

/* JSON documents (malloc'd, caller frees; NULL with vram_last_error set):
 * history of one device between Unix times from..to in steps of `step`
 * seconds (0 = the finest available; EINVAL names a bad range); alerts
 * (firing first, then up to `limit` resolved, newest first); peaks; the last
 * sample (devices, processes, jobs). docs/monitoring.md has the schemas. */
char *vram_watch_history_json(vram_watch_t *w, int device, double from, double to, double step);
char *vram_watch_alerts_json(vram_watch_t *w, int limit);
char *vram_watch_peaks_json(vram_watch_t *w);
char *vram_watch_sample_json(vram_watch_t *w);
/* Prometheus text exposition (format 0.0.4) of the last sample, the jobs,
 * the counters and the firing alerts. No command lines. NULL on ENOMEM. */
char *vram_watch_metrics_text(vram_watch_t *w);
/* Rules: the built-in set, or a YAML file's ("rules:" list; docs). On
 * EPARSE the message names the file, the line and the key. *text_out gets a
 * one-line-per-rule description (malloc'd; caller frees; may be NULL). */
int vram_watch_check_rules(const char *path, char **text_out);
/* Static lower-case name of a level ("warning"); "unknown" if out of range. */
const char *vram_alert_level_name(vram_alert_level_t level);
/* "info", "WARNING", ... (case-insensitive); -1 if unknown or NULL. */
int vram_alert_level_parse(const char *name);

#endif
