/* The watch object: configuration, the sampler thread, callbacks, counters
 * and the JSON of the last sample. */
#include "core/proc.h"
#include "watch_internal.h"
#include "sched/device_source.h"

#include <curl/curl.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define JOB_ROWS_PER_DEVICE 4 /* job history rows kept per device row */
/* At close, alert sinks may deliver what is queued this long; then what is
 * in flight is abandoned (vramd's stop stays within systemd's
 * TimeoutStopSec, packaging/vramd.service.in). */
#define WATCH_STOP_GRACE_S 2.0

static double real_clock(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

double vram_watch_now(const vram_watch_t *w)
{
    return w->cfg.clock ? w->cfg.clock() : real_clock();
}

void vram_watch_log(vram_watch_t *w, const char *level, const char *fmt, ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (w->cfg.log)
        w->cfg.log(w->cfg.log_arg, level, msg);
    else
        fprintf(stderr, "vram watch %s: %s\n", level, msg);
}

bool vram_watch_grow(void **array, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap) return true;
    size_t n = *cap ? *cap * 2 : 16;
    while (n < need)
        n *= 2;
    void *a = realloc(*array, n * elem);
    if (!a) return false;
    *array = a;
    *cap = n;
    return true;
}

/* ---- configuration --------------------------------------------------------- */

static int seconds_option(vram_option_t opt, double lo, double hi, double *out)
{
    int rc = vram_option_double(opt, out);
    if (rc) return rc;
    if (!(*out >= lo && *out <= hi))
        return vram_fail(VRAM_EINVAL, "%s: %g s is out of range (%g to %g s)", vram_option_env(opt),
                         *out, lo, hi);
    return 0;
}

int vram_watch_config_from_options(vram_watch_config_t *cfg)
{
    if (!cfg) return vram_fail(VRAM_EINVAL, "NULL config");
    memset(cfg, 0, sizeof *cfg);
    int rc;
    if ((rc = seconds_option(VRAM_OPT_WATCH_INTERVAL, 0.01, 3600, &cfg->interval_s)) ||
        (rc = seconds_option(VRAM_OPT_WATCH_HISTORY, 1, 7 * 86400, &cfg->history_s)) ||
        (rc = seconds_option(VRAM_OPT_WATCH_RETENTION, 1, 3650 * 86400.0, &cfg->retention_s)))
        return rc;
    const char *db = vram_option_str(VRAM_OPT_DB);
    cfg->db_path = *db ? db : NULL;
    cfg->rules_path = vram_option_str(VRAM_OPT_ALERT_RULES);
    cfg->webhook_url = vram_option_str(VRAM_OPT_ALERT_WEBHOOK);
    cfg->exec_command = vram_option_str(VRAM_OPT_ALERT_EXEC);
    cfg->alertmanager_url = vram_option_str(VRAM_OPT_ALERT_ALERTMANAGER);
    cfg->cluster = vram_option_str(VRAM_OPT_ALERT_CLUSTER);
    const vram_option_t urls[] = {VRAM_OPT_ALERT_WEBHOOK, VRAM_OPT_ALERT_ALERTMANAGER};
    for (size_t i = 0; i < sizeof urls / sizeof urls[0]; i++) {
        const char *u = vram_option_str(urls[i]);
        if (*u && strncmp(u, "http://", 7) && strncmp(u, "https://", 8))
            return vram_fail(VRAM_EINVAL, "%s: \"%s\" is not an http(s) URL",
                             vram_option_env(urls[i]), u);
    }
    return 0;
}

/* ---- open / close ------------------------------------------------------------- */

int vram_watch_open(const vram_watch_config_t *cfg, vram_watch_t **out)
{
    if (!out) return vram_fail(VRAM_EINVAL, "NULL argument");
    *out = NULL;
    if (!cfg || (!cfg->devices && !cfg->ctx))
        return vram_fail(VRAM_EINVAL, "the watch needs a device context or device source");
    if (!(cfg->interval_s > 0) || !(cfg->history_s >= cfg->interval_s) || !(cfg->retention_s > 0))
        return vram_fail(VRAM_EINVAL,
                         "watch: interval %g s, history %g s, retention %g s (need interval > 0, "
                         "history >= interval, retention > 0)",
                         cfg->interval_s, cfg->history_s, cfg->retention_s);
    vram_watch_t *w = calloc(1, sizeof *w);
    if (!w) return vram_fail(VRAM_ENOMEM, "out of memory");
    w->cfg = *cfg;
    w->cfg.db_path = w->cfg.rules_path = NULL; /* not kept: the caller owns them */
    if (gethostname(w->host, sizeof w->host - 1) != 0) snprintf(w->host, sizeof w->host, "unknown");
    if ((cfg->cluster && *cfg->cluster && !(w->cluster = strdup(cfg->cluster))) ||
        (cfg->generator_url && *cfg->generator_url &&
         !(w->generator_url = strdup(cfg->generator_url)))) {
        free(w->cluster);
        free(w);
        return vram_fail(VRAM_ENOMEM, "out of memory");
    }
    w->dev = cfg->devices ? *cfg->devices : vram_ctx_device_source(cfg->ctx);
    pthread_mutex_init(&w->lock, NULL);
    pthread_mutex_init(&w->sample_lock, NULL);
    pthread_mutex_init(&w->stop_lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&w->stop_cond, &ca);
    pthread_condattr_destroy(&ca);
    int rc = 0;
    w->ndev = w->dev.count(w->dev.arg);
    if (w->ndev < 0 || w->ndev > 1024) {
        rc = vram_fail(VRAM_ENODEV, "device count %d is not usable", w->ndev);
        goto fail;
    }
    rc = cfg->rules_path && *cfg->rules_path ? vram_watch_rules_load(cfg->rules_path, &w->rules)
                                             : vram_watch_rules_default(&w->rules);
    if (rc) goto fail;
    size_t samples = (size_t)ceil(cfg->history_s / cfg->interval_s) + 1;
    size_t ndev = w->ndev ? (size_t)w->ndev : 1;
    w->peaks.device = calloc(ndev, sizeof *w->peaks.device);
    w->peaks.device_since = calloc(ndev, sizeof *w->peaks.device_since);
    if (!w->peaks.device || !w->peaks.device_since) {
        rc = vram_fail(VRAM_ENOMEM, "out of memory");
        goto fail;
    }
    w->peaks.since = vram_watch_now(w);
    for (size_t d = 0; d < ndev; d++)
        w->peaks.device_since[d] = w->peaks.since;
    if ((rc = vram_watch_ring_init(&w->ring, samples * ndev)) ||
        (rc = vram_watch_ring_init(&w->job_ring, samples * ndev * JOB_ROWS_PER_DEVICE)))
        goto fail;
    if (cfg->db_path && (rc = vram_watch_store_open(cfg->db_path, &w->store))) goto fail;
    if ((rc = vram_watch_history_reload(w)) || (rc = vram_watch_alerts_reload(w))) goto fail;
    w->last_flush = w->last_expire = 0;
    *out = w;
    return 0;
fail:
    vram_watch_close(w);
    return rc;
}

static uint64_t monotonic_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

bool vram_watch_wait_until(vram_watch_t *w, uint64_t until_ns)
{
    struct timespec until = {(time_t)(until_ns / 1000000000ull), (long)(until_ns % 1000000000ull)};
    pthread_mutex_lock(&w->stop_lock);
    while (!w->stopping && pthread_cond_timedwait(&w->stop_cond, &w->stop_lock, &until) == 0) {
    }
    bool running = !w->stopping;
    pthread_mutex_unlock(&w->stop_lock);
    return running;
}

bool vram_watch_sleep(vram_watch_t *w, double seconds)
{
    return vram_watch_wait_until(w, monotonic_ns() + (uint64_t)(seconds * 1e9));
}

/* The sinks of alert transitions: the callbacks, then each receiver of the
 * rules file and of the options, each with its own thread. */
static int start_sinks(vram_watch_t *w)
{
    const watch_rules_t *r = &w->rules;
    struct {
        watch_sink_kind_t kind;
        char *const *targets;
        size_t n;
        const char *option;
    } lists[] = {
        {WATCH_SINK_WEBHOOK, r->webhooks, r->nwebhooks, w->cfg.webhook_url},
        {WATCH_SINK_ALERTMANAGER, r->alertmanagers, r->nalertmanagers, w->cfg.alertmanager_url},
        {WATCH_SINK_EXEC, r->execs, r->nexecs, w->cfg.exec_command},
    };
    size_t total = 1;
    for (size_t l = 0; l < 3; l++)
        total += lists[l].n + (lists[l].option && *lists[l].option);
    if (!(w->sinks = calloc(total, sizeof *w->sinks)))
        return vram_fail(VRAM_ENOMEM, "out of memory");
    int rc = vram_watch_outbox_start(w, WATCH_SINK_CALLBACKS, NULL, &w->sinks[w->nsinks]);
    if (rc == 0) w->nsinks++;
    for (size_t l = 0; rc == 0 && l < 3; l++)
        for (size_t i = 0; rc == 0 && i <= lists[l].n; i++) {
            const char *target = i < lists[l].n ? lists[l].targets[i] : lists[l].option;
            if (!target || !*target) continue;
            rc = vram_watch_outbox_start(w, lists[l].kind, target, &w->sinks[w->nsinks]);
            if (rc == 0) w->nsinks++;
        }
    return rc;
}

static void *sampler_thread(void *arg)
{
    vram_watch_t *w = arg;
    pthread_setname_np(pthread_self(), "vramd-sampler");
    uint64_t period = (uint64_t)(w->cfg.interval_s * 1e9), next = monotonic_ns();
    /* vram_watch_start took the first sample. A fixed schedule, so samples do
     * not drift by their own cost; one that fell behind skips ahead instead
     * of bursting. */
    for (;;) {
        next += period;
        if (next <= monotonic_ns()) next = monotonic_ns() + period;
        if (!vram_watch_wait_until(w, next)) break;
        if (vram_watch_sample(w) != 0 && atomic_fetch_add(&w->sample_errors, 1) % 60 == 0)
            vram_watch_log(w, "warn", "sampler: %s", vram_last_error());
    }
    return NULL;
}

int vram_watch_start(vram_watch_t *w)
{
    if (!w) return vram_fail(VRAM_EINVAL, "NULL watch");
    if (w->started) return vram_fail(VRAM_ESTATE, "the watch is already started");
    curl_global_init(CURL_GLOBAL_DEFAULT);
    int rc = start_sinks(w);
    /* One sample before returning: /metrics and /v1/watch have data at once. */
    if (rc == 0 && vram_watch_sample(w) != 0)
        vram_watch_log(w, "warn", "sampler: %s", vram_last_error());
    if (rc == 0 && pthread_create(&w->thread, NULL, sampler_thread, w) != 0)
        rc = vram_fail(VRAM_EIO, "cannot start the sampler thread");
    if (rc) return rc;
    w->started = true;
    return 0;
}

void vram_watch_close(vram_watch_t *w)
{
    if (!w) return;
    pthread_mutex_lock(&w->stop_lock);
    w->stopping = true;
    pthread_cond_broadcast(&w->stop_cond);
    pthread_mutex_unlock(&w->stop_lock);
    if (w->started) pthread_join(w->thread, NULL);
    vram_watch_outbox_stop(w->sinks, w->nsinks, WATCH_STOP_GRACE_S);
    free(w->sinks);
    free(w->cluster);
    free(w->generator_url);
    pthread_mutex_lock(&w->lock);
    (void)vram_watch_history_flush(w, true);
    pthread_mutex_unlock(&w->lock);
    vram_watch_store_close(w->store);
    vram_watch_rules_free(&w->rules);
    vram_watch_sample_free(&w->last);
    vram_watch_pids_free(&w->pids);
    free(w->ring.rows);
    free(w->job_ring.rows);
    free(w->minutes);
    free(w->pending);
    free(w->alerts);
    free(w->peaks.device);
    free(w->peaks.device_since);
    vram_watch_peaks_free(&w->peaks);
    pthread_mutex_destroy(&w->lock);
    pthread_mutex_destroy(&w->sample_lock);
    pthread_mutex_destroy(&w->stop_lock);
    pthread_cond_destroy(&w->stop_cond);
    free(w);
}

int vram_watch_sample(vram_watch_t *w)
{
    if (!w) return vram_fail(VRAM_EINVAL, "NULL watch");
    pthread_mutex_lock(&w->sample_lock);
    watch_sample_t s;
    int rc = vram_watch_take_sample(w, &s);
    if (rc == 0) {
        pthread_mutex_lock(&w->lock);
        vram_watch_history_add(w, &s);
        vram_watch_peaks_add(&w->peaks, &s);
        vram_watch_alerts_eval(w, &s);
        vram_watch_sample_free(&w->last);
        w->last = s;
        pthread_mutex_unlock(&w->lock);
        atomic_fetch_add(&w->samples, 1);
    }
    pthread_mutex_unlock(&w->sample_lock);
    return rc;
}

int vram_watch_flush(vram_watch_t *w, int timeout_ms)
{
    if (!w) return vram_fail(VRAM_EINVAL, "NULL watch");
    for (int waited = 0;; waited += 5) {
        bool idle = true;
        for (size_t i = 0; i < w->nsinks; i++)
            idle = idle && vram_watch_outbox_idle(w->sinks[i]);
        if (idle) return 0;
        if (waited >= timeout_ms) return vram_fail(VRAM_ETIMEDOUT, "alert delivery still busy");
        nanosleep(&(struct timespec){0, 5 * 1000 * 1000}, NULL);
    }
}

int vram_watch_on_alert(vram_watch_t *w, vram_alert_fn fn, void *arg)
{
    if (!w || !fn) return vram_fail(VRAM_EINVAL, "NULL argument");
    int rc = 0;
    pthread_mutex_lock(&w->lock);
    if (w->ncallbacks == WATCH_MAX_CALLBACKS)
        rc = vram_fail(VRAM_EBUSY, "at most %d alert callbacks", WATCH_MAX_CALLBACKS);
    else
        w->callbacks[w->ncallbacks++] = (watch_callback_t){fn, arg};
    pthread_mutex_unlock(&w->lock);
    return rc;
}

void vram_watch_job_event(vram_watch_t *w, const vram_job_t *job, const char *kind,
                          const char *message)
{
    (void)message; /* how a job ended is in its fields */
    if (!w || !job || !kind) return;
    if (!strcmp(kind, "admitted")) atomic_fetch_add(&w->admissions, 1);
    if (!strcmp(kind, "timeout")) atomic_fetch_add(&w->timeouts, 1);
    bool ended = job->state != VRAM_JOB_QUEUED && job->state != VRAM_JOB_RUNNING;
    if (ended && job->ndevices > 0) atomic_fetch_add(&w->releases, 1);
    /* An attempt that ran out of memory says so in its finish request's
     * fields (reason "oom", retry_batch), never only in the words. */
    if (!strcmp(kind, "finished") && job->end_reason == VRAM_END_OOM) {
        atomic_fetch_add(&w->ooms, 1);
        if (job->retry_batch) atomic_fetch_add(&w->oom_retries, 1);
    }
}

/* ---- JSON of the last sample ----------------------------------------------------- */

static json_t *u64_or_null(uint64_t v)
{
    return v == VRAM_UNKNOWN_U64 ? json_null() : json_integer((json_int_t)v);
}

static json_t *int_or_null(int v)
{
    return v < 0 ? json_null() : json_integer(v);
}

static json_t *devices_json(const vram_watch_t *w, const watch_sample_t *s)
{
    json_t *a = json_array();
    for (int d = 0; d < s->ndev; d++) {
        const vram_device_info_t *i = &s->devs[d];
        json_t *o = json_object();
        json_object_set_new(o, "index", json_integer(d));
        json_object_set_new(o, "name", json_string(i->name));
        json_object_set_new(o, "uuid", json_string(i->uuid));
        json_object_set_new(o, "total_bytes", u64_or_null(i->total_bytes));
        json_object_set_new(o, "used_bytes", u64_or_null(i->used_bytes));
        json_object_set_new(o, "free_bytes", u64_or_null(i->free_bytes));
        json_object_set_new(o, "reserved_bytes", json_integer((json_int_t)s->reserved[d]));
        json_object_set_new(o, "free_for_admission_bytes", u64_or_null(s->free_adm[d]));
        json_object_set_new(o, "peak_used_bytes", json_integer((json_int_t)w->peaks.device[d]));
        json_object_set_new(o, "utilization_pct", int_or_null(i->utilization_pct));
        json_object_set_new(o, "temperature_c", int_or_null(i->temperature_c));
        json_object_set_new(o, "power_w", i->power_w < 0 ? json_null() : json_real(i->power_w));
        json_object_set_new(o, "health", json_string(vram_health_name(i->health)));
        json_object_set_new(o, "error", json_string(i->error));
        json_array_append_new(a, o);
    }
    return a;
}

static json_t *jobs_json(const watch_sample_t *s)
{
    json_t *a = json_array();
    for (size_t i = 0; i < s->njobs; i++) {
        const vram_job_t *j = &s->jobs[i];
        char user[64];
        vram_user_name(j->req.uid, user, sizeof user);
        json_t *devs = json_array();
        for (int k = 0; k < j->ndevices; k++)
            json_array_append_new(devs, json_integer(j->devices[k]));
        json_t *o = json_object();
        json_object_set_new(o, "id", json_integer(j->id));
        json_object_set_new(o, "name", json_string(j->req.name));
        json_object_set_new(o, "user", json_string(user));
        json_object_set_new(o, "state", json_string(vram_job_state_name(j->state)));
        json_object_set_new(o, "devices", devs);
        json_object_set_new(o, "gpus", json_integer(j->req.gpus));
        json_object_set_new(o, "mem_bytes", json_integer((json_int_t)j->req.mem_bytes));
        json_object_set_new(o, "reserved_bytes", json_integer((json_int_t)j->reserved_bytes));
        json_object_set_new(o, "used_bytes",
                            json_integer((json_int_t)vram_watch_job_used(s, j->id)));
        json_object_set_new(o, "priority", json_integer(j->req.priority));
        json_object_set_new(o, "submitted_at", json_real(j->submitted_at));
        json_object_set_new(o, "started_at",
                            j->started_at > 0 ? json_real(j->started_at) : json_null());
        json_array_append_new(a, o);
    }
    return a;
}

static json_t *processes_json(const watch_sample_t *s)
{
    json_t *a = json_array();
    for (size_t i = 0; i < s->nprocs; i++) {
        const watch_proc_t *p = &s->procs[i];
        char user[64];
        vram_user_name(p->uid, user, sizeof user);
        json_array_append_new(a, json_pack("{s:i,s:i,s:s,s:s,s:o,s:o}", "device", p->device, "pid",
                                           (int)p->pid, "user", user, "name", p->name, "used_bytes",
                                           u64_or_null(p->used_bytes), "job_id",
                                           p->job_id ? json_integer(p->job_id) : json_null()));
    }
    return a;
}

char *vram_watch_sample_json(vram_watch_t *w)
{
    if (!w) {
        vram_fail(VRAM_EINVAL, "NULL watch");
        return NULL;
    }
    pthread_mutex_lock(&w->lock);
    const watch_sample_t *s = &w->last;
    int levels[4];
    vram_watch_alerts_firing_by_level(w, levels);
    json_t *o =
        json_pack("{s:f,s:f,s:o,s:o,s:o,s:{s:i,s:i,s:i,s:i}}", "t", s->t, "interval_s",
                  w->cfg.interval_s, "devices", devices_json(w, s), "processes", processes_json(s),
                  "jobs", jobs_json(s), "alerts_firing", "info", levels[0], "warning", levels[1],
                  "error", levels[2], "critical", levels[3]);
    pthread_mutex_unlock(&w->lock);
    char *text = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(o);
    if (!text) vram_fail(VRAM_ENOMEM, "out of memory");
    return text;
}
