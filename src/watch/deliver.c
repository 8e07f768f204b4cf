/* Delivery of alert transitions off the sampler thread. An outbox is a
 * bounded queue drained by one thread; the watch has two: the local one (C
 * callbacks, exec hooks) and the webhook one, whose retries with backoff may
 * take seconds without delaying anything else. */
#include "watch_internal.h"

#include <curl/curl.h>
#include <errno.h>
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

extern char **environ;

struct vram_watch_outbox {
    vram_watch_t *w;
    vram_watch_deliver_fn fn;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    vram_alert_t items[OUTBOX_CAP];
    size_t head, count;
    bool busy, stop;
    pthread_t thread;
};

static void *outbox_thread(void *arg)
{
    watch_outbox_t *o = arg;
    pthread_mutex_lock(&o->lock);
    for (;;) {
        while (!o->count && !o->stop)
            pthread_cond_wait(&o->cond, &o->lock);
        if (!o->count) break; /* stopping, and everything was delivered */
        vram_alert_t a = o->items[o->head];
        o->head = (o->head + 1) % OUTBOX_CAP;
        o->count--;
        o->busy = true;
        pthread_mutex_unlock(&o->lock);
        o->fn(o->w, &a);
        pthread_mutex_lock(&o->lock);
        o->busy = false;
        pthread_cond_broadcast(&o->cond);
    }
    pthread_mutex_unlock(&o->lock);
    return NULL;
}

int vram_watch_outbox_start(vram_watch_t *w, vram_watch_deliver_fn fn, watch_outbox_t **out)
{
    watch_outbox_t *o = calloc(1, sizeof *o);
    if (!o) return vram_fail(VRAM_ENOMEM, "out of memory");
    o->w = w;
    o->fn = fn;
    pthread_mutex_init(&o->lock, NULL);
    pthread_cond_init(&o->cond, NULL);
    if (pthread_create(&o->thread, NULL, outbox_thread, o) != 0) {
        pthread_mutex_destroy(&o->lock);
        pthread_cond_destroy(&o->cond);
        free(o);
        return vram_fail(VRAM_EIO, "cannot start the alert delivery thread");
    }
    *out = o;
    return 0;
}

/* Delivers what is queued, then ends the thread. */
void vram_watch_outbox_stop(watch_outbox_t *o)
{
    if (!o) return;
    pthread_mutex_lock(&o->lock);
    o->stop = true;
    pthread_cond_broadcast(&o->cond);
    pthread_mutex_unlock(&o->lock);
    pthread_join(o->thread, NULL);
    pthread_mutex_destroy(&o->lock);
    pthread_cond_destroy(&o->cond);
    free(o);
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

/* ---- exec hooks ------------------------------------------------------------ */

/* The child's environment: ours (but the API token) plus VRAM_ALERT_*.
 * Built in a copy so the daemon's own environment never changes. */
static char **alert_environ(const vram_alert_t *a, char *json)
{
    size_t n = 0;
    while (environ[n])
        n++;
    char **env = calloc(n + 16, sizeof *env);
    if (!env) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (strncmp(environ[i], "VRAM_ALERT_", 11) && strncmp(environ[i], "VRAM_TOKEN=", 11))
            env[k++] = strdup(environ[i]);
    char buf[512];
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
    PUT("VRAM_ALERT_DEVICE=%d", a->device);
    PUT("VRAM_ALERT_JOB=%lld", (long long)a->job_id);
    PUT("VRAM_ALERT_VALUE=%.17g", a->value);
    PUT("VRAM_ALERT_THRESHOLD=%.17g", a->threshold);
    PUT("VRAM_ALERT_FIRED_AT=%.3f", a->fired_at);
    PUT("VRAM_ALERT_RESOLVED_AT=%.3f", a->resolved_at);
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
 * the environment, never into the command line) and waits up to 30 s. */
static void run_hook(vram_watch_t *w, const char *command, const vram_alert_t *a)
{
    char *json = vram_watch_alert_json_text(a);
    char **env = alert_environ(a, json);
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
        if (waited_ms >= EXEC_TIMEOUT_S * 1000) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            vram_watch_log(w, "warn", "alert exec hook \"%s\" killed after %d s", command,
                           EXEC_TIMEOUT_S);
            break;
        }
        nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        vram_watch_log(w, "warn", "alert exec hook \"%s\" failed (status %d)", command, status);
        atomic_fetch_add(&w->deliveries_failed, 1);
    }
}

void vram_watch_deliver_local(vram_watch_t *w, const vram_alert_t *a)
{
    pthread_mutex_lock(&w->lock);
    int n = w->ncallbacks;
    watch_callback_t cbs[WATCH_MAX_CALLBACKS];
    memcpy(cbs, w->callbacks, sizeof cbs);
    pthread_mutex_unlock(&w->lock);
    for (int i = 0; i < n; i++)
        cbs[i].fn(cbs[i].arg, a);
    for (size_t i = 0; i < w->rules.nexecs; i++)
        run_hook(w, w->rules.execs[i], a);
    if (w->cfg.exec_command && *w->cfg.exec_command) run_hook(w, w->cfg.exec_command, a);
}

/* ---- webhooks ------------------------------------------------------------------ */

static size_t discard(char *p, size_t size, size_t n, void *arg)
{
    (void)p;
    (void)arg;
    return size * n;
}

/* One POST; true on a 2xx answer. */
static bool post(vram_watch_t *w, const char *url, const char *body, char *why, size_t len)
{
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
    CURLcode rc = curl_easy_perform(c);
    long status = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    if (rc != CURLE_OK) {
        snprintf(why, len, "%s", curl_easy_strerror(rc));
        return false;
    }
    snprintf(why, len, "HTTP %ld", status);
    return status >= 200 && status < 300;
}

static void deliver_one(vram_watch_t *w, const char *url, const char *body)
{
    char why[128] = "";
    double wait = 0.5;
    for (int attempt = 0; attempt <= w->rules.webhook_retries; attempt++) {
        if (attempt > 0) {
            if (!vram_watch_sleep(w, wait)) break; /* closing: give up */
            wait = wait * 2 > 30 ? 30 : wait * 2;
        }
        if (post(w, url, body, why, sizeof why)) return;
    }
    atomic_fetch_add(&w->deliveries_failed, 1);
    vram_watch_log(w, "warn", "alert webhook %s: gave up after %d attempt(s): %s", url,
                   w->rules.webhook_retries + 1, why);
}

void vram_watch_deliver_webhooks(vram_watch_t *w, const vram_alert_t *a)
{
    char *body = vram_watch_alert_json_text(a);
    if (!body) return;
    for (size_t i = 0; i < w->rules.nwebhooks; i++)
        deliver_one(w, w->rules.webhooks[i], body);
    if (w->cfg.webhook_url && *w->cfg.webhook_url) deliver_one(w, w->cfg.webhook_url, body);
    free(body);
}
