/* GET /metrics: the Prometheus text exposition format (version 0.0.4) of the
 * last sample, the jobs, the scheduler counters and the firing alerts.
 * Names follow Prometheus conventions (base units, _bytes, _seconds, _ratio,
 * _total for counters). Labels carry job names and users but never command
 * lines: the endpoint is unauthenticated. */
#include "core/proc.h"
#include "watch_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    char *buf;
    size_t len, cap;
    bool failed;
} out_t;

static void put(out_t *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(out_t *o, const char *fmt, ...)
{
    if (o->failed) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(o->buf + o->len, o->cap - o->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            o->failed = true;
            return;
        }
        if ((size_t)n < o->cap - o->len) {
            o->len += (size_t)n;
            return;
        }
        size_t cap = o->cap * 2 + (size_t)n;
        char *b = realloc(o->buf, cap);
        if (!b) {
            o->failed = true;
            return;
        }
        o->buf = b;
        o->cap = cap;
    }
}

static void family(out_t *o, const char *name, const char *type, const char *help)
{
    put(o, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* A label value: backslash, double quote and newline escaped; bytes that are
 * not printable ASCII pass through (the format is UTF-8). */
static void escaped(char *dst, size_t len, const char *src)
{
    size_t k = 0;
    for (; *src && k + 3 < len; src++) {
        char c = *src;
        if (c == '\\' || c == '"') {
            dst[k++] = '\\';
            dst[k++] = c;
        } else if (c == '\n') {
            dst[k++] = '\\';
            dst[k++] = 'n';
        } else if ((unsigned char)c >= 0x20 && c != 0x7f) {
            dst[k++] = c;
        }
    }
    dst[k] = 0;
}

/* gpu, name and uuid: every device series carries the uuid, to join with
 * other exporters' (DCGM's UUID label, docs/monitoring.md). */
static void device_labels(const watch_sample_t *s, int d, char *dst, size_t len)
{
    char name[200], uuid[200];
    escaped(name, sizeof name, s->devs[d].name);
    escaped(uuid, sizeof uuid, s->devs[d].uuid);
    snprintf(dst, len, "gpu=\"%d\",name=\"%s\",uuid=\"%s\"", d, name, uuid);
}

static void device_gauge(out_t *o, const watch_sample_t *s, const char *name, const char *help,
                         double (*get)(const watch_sample_t *, const vram_watch_t *, int),
                         const vram_watch_t *w)
{
    family(o, name, "gauge", help);
    for (int d = 0; d < s->ndev; d++) {
        double v = get(s, w, d);
        if (v < 0) continue; /* unknown: no sample rather than a made-up one */
        char labels[512];
        device_labels(s, d, labels, sizeof labels);
        put(o, "%s{%s} %.17g\n", name, labels, v);
    }
}

static double u64_figure(uint64_t v)
{
    return v == VRAM_UNKNOWN_U64 ? -1 : (double)v;
}
static double total_of(const watch_sample_t *s, const vram_watch_t *w, int d)
{
    (void)w;
    return u64_figure(s->devs[d].total_bytes);
}
static double used_of(const watch_sample_t *s, const vram_watch_t *w, int d)
{
    (void)w;
    return u64_figure(s->devs[d].used_bytes);
}
static double free_of(const watch_sample_t *s, const vram_watch_t *w, int d)
{
    (void)w;
    return u64_figure(s->devs[d].free_bytes);
}
static double free_adm_of(const watch_sample_t *s, const vram_watch_t *w, int d)
{
    (void)w;
    return u64_figure(s->free_adm[d]);
}
static double reserved_of(const watch_sample_t *s, const vram_watch_t *w, int d)
{
    (void)w;
    return (double)s->reserved[d];
}
static double peak_of(const watch_sample_t *s, const vram_watch_t *w, int d)
{
    (void)s;
    return (double)w->peaks.device[d];
}
static double util_of(const watch_sample_t *s, const vram_watch_t *w, int d)
{
    (void)w;
    int u = s->devs[d].utilization_pct;
    return u < 0 ? -1 : u / 100.0;
}
static double temp_of(const watch_sample_t *s, const vram_watch_t *w, int d)
{
    (void)w;
    return s->devs[d].temperature_c < 0 ? -1 : s->devs[d].temperature_c;
}
static double power_of(const watch_sample_t *s, const vram_watch_t *w, int d)
{
    (void)w;
    return s->devs[d].power_w;
}

/* Job labels: id, name, user. Users are looked up once per distinct uid. */
typedef struct {
    uid_t uid[16];
    char name[16][64];
    int n;
} users_t;

static const char *user_of(users_t *u, uid_t uid)
{
    for (int i = 0; i < u->n; i++)
        if (u->uid[i] == uid) return u->name[i];
    int slot = u->n < 16 ? u->n++ : (int)(uid % 16);
    u->uid[slot] = uid;
    vram_user_name(uid, u->name[slot], sizeof u->name[slot]);
    return u->name[slot];
}

/* A job's own labels (vram_job_label_t) as ,label_<key>="value": keys are
 * already [a-z_][a-z0-9_]*, values are escaped like the others. */
static void extra_labels(char *dst, size_t len, const vram_job_request_t *r)
{
    size_t at = 0;
    dst[0] = 0;
    for (int i = 0; i < r->nlabels && at < len; i++) {
        char value[140];
        escaped(value, sizeof value, r->labels[i].value);
        at += (size_t)snprintf(dst + at, len - at, ",label_%s=\"%s\"", r->labels[i].key, value);
    }
}

static void job_gauge(out_t *o, const watch_sample_t *s, users_t *users, const char *name,
                      const char *help, bool used)
{
    family(o, name, "gauge", help);
    /* uses[] lists the running jobs' devices in the order of jobs[]. */
    size_t k = 0;
    for (size_t i = 0; i < s->njobs && k < s->nuses; i++) {
        const vram_job_t *j = &s->jobs[i];
        if (j->state != VRAM_JOB_RUNNING) continue;
        char jname[200], user[140], extra[VRAM_JOB_MAX_LABELS * 192];
        escaped(jname, sizeof jname, j->req.name);
        escaped(user, sizeof user, user_of(users, j->req.uid));
        extra_labels(extra, sizeof extra, &j->req);
        for (; k < s->nuses && s->uses[k].job_id == j->id; k++) {
            int d = s->uses[k].device;
            char uuid[200] = "";
            if (d >= 0 && d < s->ndev) escaped(uuid, sizeof uuid, s->devs[d].uuid);
            put(o,
                "%s{job_id=\"%lld\",job_name=\"%s\",user=\"%s\",gpu=\"%d\",uuid=\"%s\"%s} %llu\n",
                name, (long long)j->id, jname, user, d, uuid, extra,
                (unsigned long long)(used ? s->uses[k].used_bytes : s->uses[k].reserved_bytes));
        }
    }
}

/* The most a running job used at once over all its devices since it
 * started (or its peak was reset). */
static void job_peaks(out_t *o, const vram_watch_t *w, const watch_sample_t *s, users_t *users)
{
    family(o, "vram_job_memory_peak_bytes", "gauge",
           "Most memory a running job used at once over its devices (since its last reset).");
    for (size_t i = 0; i < s->njobs; i++) {
        const vram_job_t *j = &s->jobs[i];
        uint64_t peak;
        if (j->state != VRAM_JOB_RUNNING || !vram_map_get(&w->peaks.job, (uint64_t)j->id, &peak))
            continue;
        char jname[200], user[140], extra[VRAM_JOB_MAX_LABELS * 192];
        escaped(jname, sizeof jname, j->req.name);
        escaped(user, sizeof user, user_of(users, j->req.uid));
        extra_labels(extra, sizeof extra, &j->req);
        put(o, "vram_job_memory_peak_bytes{job_id=\"%lld\",job_name=\"%s\",user=\"%s\"%s} %llu\n",
            (long long)j->id, jname, user, extra, (unsigned long long)peak);
    }
}

/* Every process holding device memory: its short name (never its command
 * line), user and job. */
static void process_gauge(out_t *o, const watch_sample_t *s, users_t *users)
{
    family(o, "vram_process_memory_used_bytes", "gauge",
           "Device memory a process uses (job_id when it belongs to a vramd job).");
    for (size_t i = 0; i < s->nprocs; i++) {
        const watch_proc_t *p = &s->procs[i];
        if (p->used_bytes == VRAM_UNKNOWN_U64 || p->device < 0 || p->device >= s->ndev) continue;
        char uuid[200], pname[140], user[140], job[40] = "";
        escaped(uuid, sizeof uuid, s->devs[p->device].uuid);
        escaped(pname, sizeof pname, p->name);
        escaped(user, sizeof user, p->uid == (uid_t)-1 ? "" : user_of(users, p->uid));
        if (p->job_id) snprintf(job, sizeof job, ",job_id=\"%lld\"", (long long)p->job_id);
        put(o,
            "vram_process_memory_used_bytes{gpu=\"%d\",uuid=\"%s\",pid=\"%d\",process=\"%s\",user="
            "\"%s\"%s} %llu\n",
            p->device, uuid, (int)p->pid, pname, user, job, (unsigned long long)p->used_bytes);
    }
}

/* build info and the process_* family of this process (vramd) */
static void self_metrics(out_t *o)
{
    family(o, "vram_build_info", "gauge", "Always 1: the version and build of libvram.");
    char build[140];
    escaped(build, sizeof build, vram_build_id());
    put(o, "vram_build_info{version=\"%s\",build=\"%s\",api=\"%d\"} 1\n", vram_version(), build,
        vram_api_version());
    watch_self_t me;
    if (vram_watch_self(&me) != 0) return;
    struct {
        const char *name, *type, *help;
        double v;
    } m[] = {
        {"process_cpu_seconds_total", "counter", "User and system CPU time spent.", me.cpu_seconds},
        {"process_resident_memory_bytes", "gauge", "Resident memory.", me.resident_bytes},
        {"process_virtual_memory_bytes", "gauge", "Virtual memory.", me.virtual_bytes},
        {"process_open_fds", "gauge", "Open file descriptors.", me.open_fds},
        {"process_max_fds", "gauge", "Limit of open file descriptors.", me.max_fds},
        {"process_threads", "gauge", "Threads.", me.threads},
        {"process_start_time_seconds", "gauge", "Start time, Unix seconds.", me.start_time_seconds},
    };
    for (size_t i = 0; i < sizeof m / sizeof m[0]; i++) {
        if (m[i].v < 0) continue;
        family(o, m[i].name, m[i].type, m[i].help);
        put(o, "%s %.17g\n", m[i].name, m[i].v);
    }
}

static void counter(out_t *o, const char *name, const char *help, uint64_t v)
{
    family(o, name, "counter", help);
    put(o, "%s %llu\n", name, (unsigned long long)v);
}

char *vram_watch_metrics_text(vram_watch_t *w)
{
    if (!w) {
        vram_fail(VRAM_EINVAL, "NULL watch");
        return NULL;
    }
    uint64_t t0 = vram_now_ns();
    out_t o = {.buf = malloc(16384), .cap = 16384};
    if (!o.buf) return NULL;
    o.buf[0] = 0;
    users_t users = {.n = 0};
    pthread_mutex_lock(&w->lock);
    const watch_sample_t *s = &w->last;
    device_gauge(&o, s, "vram_device_memory_total_bytes", "Device memory.", total_of, w);
    device_gauge(&o, s, "vram_device_memory_used_bytes", "Device memory in use by any process.",
                 used_of, w);
    device_gauge(&o, s, "vram_device_memory_free_bytes", "Device memory free.", free_of, w);
    device_gauge(&o, s, "vram_device_memory_free_for_admission_bytes",
                 "Device memory a new job may still reserve (vram status' FREE-ADM).", free_adm_of,
                 w);
    device_gauge(&o, s, "vram_device_memory_reserved_bytes",
                 "Device memory reserved by vramd for running jobs.", reserved_of, w);
    device_gauge(&o, s, "vram_device_memory_peak_bytes",
                 "Most device memory in use since the last peak reset.", peak_of, w);
    device_gauge(&o, s, "vram_device_utilization_ratio", "Compute utilization (0 to 1).", util_of,
                 w);
    device_gauge(&o, s, "vram_device_temperature_celsius", "Device temperature.", temp_of, w);
    device_gauge(&o, s, "vram_device_power_watts", "Device power draw.", power_of, w);
    family(&o, "vram_device_health", "gauge",
           "Device health: 1 for the current state (available, busy, error, disabled).");
    static const char *const states[] = {"available", "busy", "error", "disabled"};
    for (int d = 0; d < s->ndev; d++) {
        char labels[512];
        device_labels(s, d, labels, sizeof labels);
        for (int h = VRAM_HEALTH_AVAILABLE; h <= VRAM_HEALTH_DISABLED; h++)
            put(&o, "vram_device_health{%s,state=\"%s\"} %d\n", labels, states[h],
                (int)s->devs[d].health == h);
    }
    process_gauge(&o, s, &users);
    job_gauge(&o, s, &users, "vram_job_memory_reserved_bytes",
              "Memory vramd reserved for a running job on a device.", false);
    job_gauge(&o, s, &users, "vram_job_memory_used_bytes",
              "Memory a running job's processes use on a device.", true);
    job_peaks(&o, w, s, &users);
    int queued = 0, running = 0;
    for (size_t i = 0; i < s->njobs; i++) {
        queued += s->jobs[i].state == VRAM_JOB_QUEUED;
        running += s->jobs[i].state == VRAM_JOB_RUNNING;
    }
    family(&o, "vram_jobs", "gauge", "vramd's jobs by state.");
    put(&o, "vram_jobs{state=\"queued\"} %d\nvram_jobs{state=\"running\"} %d\n", queued, running);
    int levels[4];
    vram_watch_alerts_firing_by_level(w, levels);
    family(&o, "vram_alerts_firing", "gauge", "Alerts firing now, by level.");
    for (int l = 0; l < 4; l++)
        put(&o, "vram_alerts_firing{level=\"%s\"} %d\n",
            vram_alert_level_name((vram_alert_level_t)l), levels[l]);
    double sample_t = s->t, sample_cost = s->duration_s;
    pthread_mutex_unlock(&w->lock);
    counter(&o, "vram_job_admissions_total", "Jobs admitted (memory reserved) by vramd.",
            w->admissions);
    counter(&o, "vram_job_releases_total", "Reservations released (a running job ended).",
            w->releases);
    counter(&o, "vram_job_timeouts_total", "Queued jobs that gave up waiting.", w->timeouts);
    counter(&o, "vram_job_oom_total", "Jobs that ended out of memory (reported by vram run).",
            w->ooms);
    counter(&o, "vram_job_oom_retries_total",
            "Jobs ended out of memory that vram run --retry-oom runs again with a smaller batch.",
            w->oom_retries);
    counter(&o, "vram_alerts_fired_total", "Alerts that fired.", w->alerts_fired);
    counter(&o, "vram_alert_delivery_failures_total",
            "Alert deliveries that failed (webhook, exec hook) or were dropped.",
            w->deliveries_failed);
    counter(&o, "vram_watch_samples_total", "Samples taken by the sampler.", w->samples);
    family(&o, "vram_watch_sample_duration_seconds", "gauge", "What the last sample took.");
    put(&o, "vram_watch_sample_duration_seconds %.9f\n", sample_cost);
    family(&o, "vram_watch_last_sample_timestamp_seconds", "gauge",
           "Unix time of the last sample.");
    put(&o, "vram_watch_last_sample_timestamp_seconds %.3f\n", sample_t);
    self_metrics(&o);
    family(&o, "vram_scrape_duration_seconds", "gauge", "Time spent rendering this page.");
    put(&o, "vram_scrape_duration_seconds %.9f\n", (double)(vram_now_ns() - t0) / 1e9);
    if (o.failed) {
        free(o.buf);
        vram_fail(VRAM_ENOMEM, "out of memory");
        return NULL;
    }
    return o.buf;
}
