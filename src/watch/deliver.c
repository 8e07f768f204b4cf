/* Delivery of alert transitions off the sampler thread. Every sink (the C
 * callbacks, each webhook, each Alertmanager, each exec hook) has its own
 * bounded queue drained by its own thread: a receiver that hangs or retries
 * delays only itself. At shutdown every sink gets one grace period to
 * deliver what is queued (one attempt each, no more retries); then transfers
 * in flight are aborted, hooks killed and what is left dropped and logged,
 * so vramd stops within seconds whatever the receivers do. */
#include "watch_internal.h"

#include <curl/curl.h>
#include <errno.h>
#include <jansson.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define OUTBOX_CAP     256
#define EXEC_TIMEOUT_S 30
#define AM_RESEND_S    60                /* firing alerts go to Alertmanager again this often */
#define AM_ENDS_AFTER  (4 * AM_RESEND_S) /* ... and end there unless sent again */

extern char **environ;

struct vram_watch_outbox {
    vram_watch_t *w;
    watch_sink_kind_t kind;
    char *target; /* URL or command; NULL for the callbacks */
    pthread_mutex_t lock;
    pthread_cond_t cond; /* CLOCK_MONOTONIC */
    vram_alert_t items[OUTBOX_CAP];
    size_t head, count;
    bool busy, stop;
    _Atomic uint64_t abort_at_ns; /* 0, or when work in flight is abandoned */
    pthread_t thread;
};

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* True once the shutdown grace of this sink has passed. */
static bool abandoned(watch_outbox_t *o)
{
    uint64_t at = atomic_load(&o->abort_at_ns);
    return at && mono_ns() >= at;
}

static const char *sink_kind_name(watch_sink_kind_t k)
{
    static const char *const names[] = {"callbacks", "webhook", "alertmanager", "exec hook"};
    return (unsigned)k < 4 ? names[k] : "sink";
}

static void deliver(watch_outbox_t *o, const vram_alert_t *a);
static void alertmanager_resend(watch_outbox_t *o);

static void *outbox_thread(void *arg)
{
    watch_outbox_t *o = arg;
    static const char *const thread_names[] = {"vramd-alerts", "vramd-webhook", "vramd-alertmgr",
                                               "vramd-exec"};
    pthread_setname_np(pthread_self(), thread_names[o->kind]);
    uint64_t resend_at = mono_ns() + (uint64_t)AM_RESEND_S * 1000000000ull;
    pthread_mutex_lock(&o->lock);
    for (;;) {
        bool resend = false;
        while (!o->count && !o->stop && !resend) {
            if (o->kind != WATCH_SINK_ALERTMANAGER) {
                pthread_cond_wait(&o->cond, &o->lock);
                continue;
            }
            struct timespec until = {(time_t)(resend_at / 1000000000ull),
                                     (long)(resend_at % 1000000000ull)};
            if (pthread_cond_timedwait(&o->cond, &o->lock, &until) == ETIMEDOUT) resend = true;
        }
        if (resend) {
            pthread_mutex_unlock(&o->lock);
            alertmanager_resend(o);
            resend_at = mono_ns() + (uint64_t)AM_RESEND_S * 1000000000ull;
            pthread_mutex_lock(&o->lock);
            continue;
        }
        if (!o->count) break; /* stopping, and everything was delivered */
        if (abandoned(o)) {
            size_t lost = o->count;
            o->count = 0;
            atomic_fetch_add(&o->w->deliveries_failed, lost);
            vram_watch_log(o->w, "warn", "alert %s %s: %zu alert(s) not delivered: vramd stopped",
                           sink_kind_name(o->kind), o->target ? o->target : "", lost);
            break;
        }
        vram_alert_t a = o->items[o->head];
        o->head = (o->head + 1) % OUTBOX_CAP;
        o->count--;
        o->busy = true;
        pthread_mutex_unlock(&o->lock);
        deliver(o, &a);
        pthread_mutex_lock(&o->lock);
        o->busy = false;
        pthread_cond_broadcast(&o->cond);
    }
    pthread_mutex_unlock(&o->lock);
    return NULL;
}

int vram_watch_outbox_start(vram_watch_t *w, watch_sink_kind_t kind, const char *target,
                            watch_outbox_t **out)
{
    watch_outbox_t *o = calloc(1, sizeof *o);
    if (!o) return vram_fail(VRAM_ENOMEM, "out of memory");
    o->w = w;
    o->kind = kind;
    if (target && !(o->target = strdup(target))) {
        free(o);
        return vram_fail(VRAM_ENOMEM, "out of memory");
    }
    pthread_mutex_init(&o->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&o->cond, &ca);
    pthread_condattr_destroy(&ca);
    if (pthread_create(&o->thread, NULL, outbox_thread, o) != 0) {
        pthread_mutex_destroy(&o->lock);
        pthread_cond_destroy(&o->cond);
        free(o->target);
        free(o);
        return vram_fail(VRAM_EIO, "cannot start the alert delivery thread");
    }
    *out = o;
    return 0;
}

void vram_watch_outbox_stop(watch_outbox_t **sinks, size_t n, double grace_s)
{
    uint64_t abort_at = mono_ns() + (uint64_t)(grace_s * 1e9);
    for (size_t i = 0; i < n; i++) {
        watch_outbox_t *o = sinks[i];
        atomic_store(&o->abort_at_ns, abort_at);
        pthread_mutex_lock(&o->lock);
        o->stop = true;
        pthread_cond_broadcast(&o->cond);
        pthread_mutex_unlock(&o->lock);
    }
    for (size_t i = 0; i < n; i++) {
        watch_outbox_t *o = sinks[i];
        pthread_join(o->thread, NULL);
        pthread_mutex_destroy(&o->lock);
        pthread_cond_destroy(&o->cond);
        free(o->target);
        free(o);
    }
}

void vram_watch_outbox_push(watch_outbox_t *o, const vram_alert_t *a)
{
    if (!o) return;
    pthread_mutex_lock(&o->lock);
    if (o->count == OUTBOX_CAP) {
        /* A sink that cannot keep up loses the oldest, never blocks the sampler. */
        o->head = (o->head + 1) % OUTBOX_CAP;
        o->count--;
        atomic_fetch_add(&o->w->deliveries_failed, 1);
    }
    o->items[(o->head + o->count) % OUTBOX_CAP] = *a;
    o->count++;
    pthread_cond_broadcast(&o->cond);
    pthread_mutex_unlock(&o->lock);
}

bool vram_watch_outbox_idle(watch_outbox_t *o)
{
    if (!o) return true;
    pthread_mutex_lock(&o->lock);
    bool idle = !o->count && !o->busy;
    pthread_mutex_unlock(&o->lock);
    return idle;
}

/* The shortest decimal that reads back as v: 0.6, not 0.59999999999999998. */
void vram_watch_number_text(double v, char *buf, size_t len)
{
    for (int digits = 1; digits <= 17; digits++) {
        snprintf(buf, len, "%.*g", digits, v);
        if (strtod(buf, NULL) == v) return;
    }
}

/* ---- exec hooks ------------------------------------------------------------ */

/* The child's environment: ours (but the API token) plus VRAM_ALERT_*.
 * Built in a copy so the daemon's own environment never changes. Numbers are
 * the shortest text that reads back exactly; what the alert is not about
 * (a device, a job, a cluster) is left unset. */
static char **alert_environ(vram_watch_t *w, const vram_alert_t *a, char *json)
{
    size_t n = 0;
    while (environ[n])
        n++;
    char **env = calloc(n + 24, sizeof *env);
    if (!env) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (strncmp(environ[i], "VRAM_ALERT_", 11) && strncmp(environ[i], "VRAM_TOKEN=", 11))
            env[k++] = strdup(environ[i]);
    char buf[512], num[32];
#define PUT(fmt, ...)                                                                              \
    do {                                                                                           \
        snprintf(buf, sizeof buf, fmt, __VA_ARGS__);                                               \
        env[k++] = strdup(buf);                                                                    \
    } while (0)
    PUT("VRAM_ALERT_STATE=%s", a->resolved_at > 0 ? "resolved" : "firing");
    PUT("VRAM_ALERT_RULE=%s", a->rule);
    PUT("VRAM_ALERT_LEVEL=%s", vram_alert_level_name(a->level));
    PUT("VRAM_ALERT_METRIC=%s", a->metric);
    PUT("VRAM_ALERT_SUBJECT=%s", a->subject);
    PUT("VRAM_ALERT_HOST=%s", w->host);
    if (w->cluster) PUT("VRAM_ALERT_CLUSTER=%s", w->cluster);
    if (a->device >= 0) PUT("VRAM_ALERT_DEVICE=%d", a->device);
    if (a->job_id) PUT("VRAM_ALERT_JOB=%lld", (long long)a->job_id);
    vram_watch_number_text(a->value, num, sizeof num);
    PUT("VRAM_ALERT_VALUE=%s", num);
    vram_watch_number_text(a->threshold, num, sizeof num);
    PUT("VRAM_ALERT_THRESHOLD=%s", num);
    PUT("VRAM_ALERT_FIRED_AT=%.3f", a->fired_at);
    if (a->resolved_at > 0) {
        PUT("VRAM_ALERT_RESOLVED_AT=%.3f", a->resolved_at);
        PUT("VRAM_ALERT_REASON=%s", a->reason);
    }
    PUT("VRAM_ALERT_MESSAGE=%s", a->message);
#undef PUT
    if (json) {
        size_t len = strlen(json) + 32;
        char *j = malloc(len);
        if (j) snprintf(j, len, "VRAM_ALERT_JSON=%s", json);
        env[k++] = j;
    }
    return env;
}

static void free_environ(char **env)
{
    for (size_t i = 0; env && env[i]; i++)
        free(env[i]);
    free(env);
}

/* Runs `sh -c COMMAND` (the operator's command: alert text only ever goes in
 * the environment, never into the command line) and waits up to 30 s, or
 * until the shutdown grace ends. */
static void run_hook(watch_outbox_t *o, const vram_alert_t *a)
{
    vram_watch_t *w = o->w;
    const char *command = o->target;
    char *json = vram_watch_alert_json_text(w, a);
    char **env = alert_environ(w, a, json);
    free(json);
    if (!env) return;
    char *argv[] = {"sh", "-c", (char *)command, NULL};
    pid_t pid;
    int rc = posix_spawn(&pid, "/bin/sh", NULL, NULL, argv, env);
    free_environ(env);
    if (rc != 0) {
        vram_watch_log(w, "warn", "alert exec hook \"%s\": %s", command, strerror(rc));
        atomic_fetch_add(&w->deliveries_failed, 1);
        return;
    }
    int status = 0;
    for (int waited_ms = 0;; waited_ms += 10) {
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid || (r < 0 && errno != EINTR)) break;
        bool stopping = abandoned(o);
        if (stopping || waited_ms >= EXEC_TIMEOUT_S * 1000) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            vram_watch_log(w, "warn", "alert exec hook \"%s\" killed %s", command,
                           stopping ? "at shutdown" : "after 30 s");
            break;
        }
        nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        vram_watch_log(w, "warn", "alert exec hook \"%s\" failed (status %d)", command, status);
        atomic_fetch_add(&w->deliveries_failed, 1);
    }
}

static void run_callbacks(vram_watch_t *w, const vram_alert_t *a)
{
    pthread_mutex_lock(&w->lock);
    int n = w->ncallbacks;
    watch_callback_t cbs[WATCH_MAX_CALLBACKS];
    memcpy(cbs, w->callbacks, sizeof cbs);
    pthread_mutex_unlock(&w->lock);
    for (int i = 0; i < n; i++)
        cbs[i].fn(cbs[i].arg, a);
}

/* ---- HTTP receivers ------------------------------------------------------------ */

static size_t discard(char *p, size_t size, size_t n, void *arg)
{
    (void)p;
    (void)arg;
    return size * n;
}

/* libcurl asks this at least once a second: abandoning a transfer at
 * shutdown does not wait for the receiver's timeout. */
static int progress(void *arg, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un)
{
    (void)dt;
    (void)dn;
    (void)ut;
    (void)un;
    return abandoned(arg) ? 1 : 0;
}

/* One POST; true on a 2xx answer. */
static bool post(watch_outbox_t *o, const char *url, const char *body, char *why, size_t len)
{
    vram_watch_t *w = o->w;
    CURL *c = curl_easy_init();
    if (!c) {
        snprintf(why, len, "curl_easy_init failed");
        return false;
    }
    struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_USERAGENT, "vramd-alerts/0.1");
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)(w->rules.webhook_timeout_s * 1000));
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, discard);
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, progress);
    curl_easy_setopt(c, CURLOPT_XFERINFODATA, o);
    CURLcode rc = curl_easy_perform(c);
    long status = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    if (rc == CURLE_ABORTED_BY_CALLBACK) {
        snprintf(why, len, "abandoned: vramd is stopping");
        return false;
    }
    if (rc != CURLE_OK) {
        snprintf(why, len, "%s", curl_easy_strerror(rc));
        return false;
    }
    snprintf(why, len, "HTTP %ld", status);
    return status >= 200 && status < 300;
}

/* POSTs with retries and backoff; at shutdown, one attempt. Logs how many
 * attempts were really made. */
static void post_retrying(watch_outbox_t *o, const vram_alert_t *a, const char *url,
                          const char *body)
{
    vram_watch_t *w = o->w;
    char why[128] = "";
    double wait = 0.5;
    int attempts = 0;
    for (int attempt = 0; attempt <= w->rules.webhook_retries; attempt++) {
        if (attempt > 0) {
            if (abandoned(o) || !vram_watch_sleep(w, wait)) break; /* closing: no retries */
            wait = wait * 2 > 30 ? 30 : wait * 2;
        }
        attempts++;
        if (post(o, url, body, why, sizeof why)) {
            if (attempts > 1)
                vram_watch_log(w, "info", "alert %s %s on %s: %s %s took %d attempts", a->rule,
                               a->resolved_at > 0 ? "resolved" : "firing", a->subject,
                               sink_kind_name(o->kind), url, attempts);
            return;
        }
    }
    atomic_fetch_add(&w->deliveries_failed, 1);
    vram_watch_log(w, "warn", "alert %s %s on %s: %s %s: gave up after %d attempt%s: %s", a->rule,
                   a->resolved_at > 0 ? "resolved" : "firing", a->subject, sink_kind_name(o->kind),
                   url, attempts, attempts == 1 ? "" : "s", why);
}

/* ---- Prometheus Alertmanager (API v2: POST /api/v2/alerts) ----------------------- */

static json_t *rfc3339(double t)
{
    time_t s = (time_t)t;
    struct tm tm;
    gmtime_r(&s, &tm);
    char buf[40], out[48];
    strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
    int ms = (int)((t - (double)s) * 1000);
    snprintf(out, sizeof out, "%s.%03dZ", buf, ms < 0 ? 0 : ms > 999 ? 999 : ms);
    return json_string(out);
}

/* One alert as Alertmanager's postableAlert: the labels identify it (the
 * same for its firing and its resolution), the annotations describe it. A
 * firing alert ends AM_ENDS_AFTER from now unless sent again, which the
 * sink does every AM_RESEND_S: an alert of a vramd that died resolves. */
static json_t *alertmanager_alert(vram_watch_t *w, const vram_alert_t *a, double now)
{
    json_t *labels = json_pack("{s:s,s:s,s:s,s:s,s:s}", "alertname", a->rule, "severity",
                               vram_alert_level_name(a->level), "metric", a->metric, "subject",
                               a->subject, "host", w->host);
    char num[32];
    if (w->cluster) json_object_set_new(labels, "cluster", json_string(w->cluster));
    if (a->device >= 0) {
        snprintf(num, sizeof num, "%d", a->device);
        json_object_set_new(labels, "gpu", json_string(num));
    }
    if (a->job_id) {
        snprintf(num, sizeof num, "%lld", (long long)a->job_id);
        json_object_set_new(labels, "job_id", json_string(num));
    }
    char v[48], t[48];
    int metric = vram_watch_metric_parse(a->metric);
    vram_watch_describe(metric, a->value, v, sizeof v);
    vram_watch_describe(metric, a->threshold, t, sizeof t);
    json_t *ann = json_pack("{s:s,s:s,s:s}", "summary", a->message, "value", v, "threshold", t);
    if (a->resolved_at > 0) json_object_set_new(ann, "resolution", json_string(a->reason));
    json_t *o = json_pack("{s:o,s:o,s:o,s:o}", "labels", labels, "annotations", ann, "startsAt",
                          rfc3339(a->fired_at), "endsAt",
                          rfc3339(a->resolved_at > 0 ? a->resolved_at : now + AM_ENDS_AFTER));
    if (w->generator_url) json_object_set_new(o, "generatorURL", json_string(w->generator_url));
    return o;
}

static char *alertmanager_url(const char *base)
{
    size_t n = strlen(base);
    while (n && base[n - 1] == '/')
        n--;
    char *url = malloc(n + 16);
    if (url) snprintf(url, n + 16, "%.*s/api/v2/alerts", (int)n, base);
    return url;
}

static void alertmanager_post(watch_outbox_t *o, const vram_alert_t *a, json_t *list)
{
    char *body = json_dumps(list, JSON_COMPACT);
    char *url = alertmanager_url(o->target);
    json_decref(list);
    if (body && url) post_retrying(o, a, url, body);
    free(body);
    free(url);
}

/* Sends every firing alert again, so that Alertmanager keeps them open. */
static void alertmanager_resend(watch_outbox_t *o)
{
    vram_watch_t *w = o->w;
    double now = vram_watch_now(w);
    json_t *list = json_array();
    vram_alert_t first = {0};
    pthread_mutex_lock(&w->lock);
    for (size_t i = 0; i < w->nalerts; i++)
        if (w->alerts[i].firing) {
            if (!json_array_size(list)) first = w->alerts[i].alert;
            json_array_append_new(list, alertmanager_alert(w, &w->alerts[i].alert, now));
        }
    pthread_mutex_unlock(&w->lock);
    if (!json_array_size(list)) {
        json_decref(list);
        return;
    }
    alertmanager_post(o, &first, list);
}

/* ---- dispatch -------------------------------------------------------------------- */

static void deliver(watch_outbox_t *o, const vram_alert_t *a)
{
    vram_watch_t *w = o->w;
    switch (o->kind) {
    case WATCH_SINK_CALLBACKS:
        run_callbacks(w, a);
        break;
    case WATCH_SINK_EXEC:
        run_hook(o, a);
        break;
    case WATCH_SINK_WEBHOOK: {
        char *body = vram_watch_alert_json_text(w, a);
        if (body) post_retrying(o, a, o->target, body);
        free(body);
        break;
    }
    case WATCH_SINK_ALERTMANAGER: {
        json_t *list = json_array();
        json_array_append_new(list, alertmanager_alert(w, a, vram_watch_now(w)));
        alertmanager_post(o, a, list);
        break;
    }
    }
}
