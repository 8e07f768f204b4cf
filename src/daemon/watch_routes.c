/* Monitoring routes of vramd (docs/monitoring.md): GET /metrics (Prometheus,
 * on both listeners, read-only), GET /v1/history, GET /v1/alerts,
 * GET /v1/peaks, POST /v1/peaks/reset and GET /v1/watch (the last sample,
 * which the dashboard and `vram top` poll). */
#include "daemon/daemon.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define fail vramd_error /* escapes the message (it quotes client input) */

/* The watch is off only in tests and fuzzers that build a daemon without it. */
static bool watching(const vramd_state_t *d, vramd_response_t *r)
{
    if (d->watch) return true;
    fail(r, 404, "not_found", "monitoring is not running in this vramd");
    return false;
}

/* A number query parameter; `def` when absent. */
static bool query_number(const vramd_request_t *q, vramd_response_t *r, const char *key, double lo,
                         double hi, double def, double *out)
{
    const char *v = q->query ? q->query(q->query_arg, key) : NULL;
    *out = def;
    if (!v) return true;
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (errno || end == v || *end || !isfinite(x) || x < lo || x > hi) {
        fail(r, 400, "bad_query", "%s=%.40s: expected a number from %g to %g", key, v, lo, hi);
        return false;
    }
    *out = x;
    return true;
}

static double unix_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void vramd_watch_history(vramd_state_t *d, const vramd_request_t *q, vramd_response_t *r,
                         int64_t id)
{
    (void)id;
    if (!watching(d, r)) return;
    double now = unix_now(), device, to, from, step;
    if (!query_number(q, r, "device", 0, 1023, 0, &device) ||
        !query_number(q, r, "to", 0, 1e11, now, &to) ||
        !query_number(q, r, "from", -1e11, 1e11, to - 600, &from) ||
        !query_number(q, r, "step", 0, 1e9, 0, &step))
        return;
    if (device != floor(device)) {
        fail(r, 400, "bad_query", "device=%g: expected a device index", device);
        return;
    }
    if (from < 0) from = to + from; /* from=-3600: the last hour */
    if (from >= to) {
        fail(r, 400, "bad_query", "from=%g to=%g: from must be before to", from, to);
        return;
    }
    char *text = vram_watch_history_json(d->watch, (int)device, from, to, step);
    if (!text) {
        int rc = vram_last_error_code();
        vramd_fail(r, rc ? rc : VRAM_EIO);
        return;
    }
    vramd_reply_text(r, 200, text);
}

void vramd_watch_alerts(vramd_state_t *d, const vramd_request_t *q, vramd_response_t *r, int64_t id)
{
    (void)id;
    if (!watching(d, r)) return;
    double limit;
    if (!query_number(q, r, "limit", 0, 10000, 50, &limit)) return;
    char *text = vram_watch_alerts_json(d->watch, (int)limit);
    if (!text)
        vramd_fail(r, VRAM_EIO);
    else
        vramd_reply_text(r, 200, text);
}

/* POST /v1/peaks/reset {"device": N} | {"job": ID} | {}: a job's peak may be
 * reset by its owner; device and global peaks, which every user sees, by
 * root or the daemon's own user. */
void vramd_watch_reset_peaks(vramd_state_t *d, const vramd_request_t *q, vramd_response_t *r,
                             int64_t id)
{
    (void)id;
    if (!watching(d, r)) return;
    if (q->body_too_large) {
        fail(r, 413, "too_large", "request body is larger than %d bytes", VRAMD_MAX_BODY);
        return;
    }
    json_error_t e;
    json_t *o =
        q->body_len ? json_loadb(q->body, q->body_len, JSON_REJECT_DUPLICATES, &e) : json_object();
    if (!json_is_object(o)) {
        json_decref(o);
        fail(r, 400, "bad_json", "the body must be a JSON object like {\"device\": 0}");
        return;
    }
    json_t *dev = json_object_get(o, "device"), *job = json_object_get(o, "job");
    const char *key;
    json_t *v;
    json_object_foreach(o, key, v) if (strcmp(key, "device") && strcmp(key, "job"))
    {
        fail(r, 400, "unknown_field", "unknown field \"%.40s\" (device or job)", key);
        json_decref(o);
        return;
    }
    if ((dev && !json_is_integer(dev)) || (job && !json_is_integer(job)) || (dev && job)) {
        json_decref(o);
        fail(r, 400, "bad_type", "give one integer field: \"device\" or \"job\"");
        return;
    }
    int device = dev ? (int)json_integer_value(dev) : -1;
    int64_t job_id = job ? (int64_t)json_integer_value(job) : 0;
    bool bad = (dev && json_integer_value(dev) < 0) || (job && job_id <= 0);
    json_decref(o);
    if (bad) {
        fail(r, 422, "invalid_value", "device must be >= 0 and job > 0");
        return;
    }
    uid_t uid = q->transport == VRAMD_UNIX ? q->uid : 0;
    bool admin = uid == 0 || uid == d->daemon_uid;
    if (job_id) {
        vram_job_t j;
        int rc = vram_sched_job(d->sched, job_id, &j);
        if (rc) {
            vramd_fail(r, rc);
            return;
        }
        if (!admin && j.req.uid != uid) {
            fail(r, 403, "forbidden", "job %lld belongs to uid %u", (long long)job_id,
                 (unsigned)j.req.uid);
            return;
        }
    } else if (!admin) {
        fail(r, 403, "forbidden",
             "only root or vramd's user may reset device peaks; give "
             "{\"job\": ID} to reset one of your jobs");
        return;
    }
    int rc = vram_watch_reset_peaks(d->watch, device, job_id);
    if (rc) {
        vramd_fail(r, rc);
        return;
    }
    vramd_reply_text(r, 200, vram_watch_peaks_json(d->watch));
}

void vramd_watch_metrics(vramd_state_t *d, const vramd_request_t *q, vramd_response_t *r,
                         int64_t id)
{
    (void)q;
    (void)id;
    if (!watching(d, r)) return;
    char *text = vram_watch_metrics_text(d->watch);
    vramd_reply_text(r, 200, text);
    if (text) r->content_type = "text/plain; version=0.0.4; charset=utf-8";
}

void vramd_watch_peaks(vramd_state_t *d, const vramd_request_t *q, vramd_response_t *r, int64_t id)
{
    (void)q;
    (void)id;
    if (watching(d, r)) vramd_reply_text(r, 200, vram_watch_peaks_json(d->watch));
}

void vramd_watch_sample(vramd_state_t *d, const vramd_request_t *q, vramd_response_t *r, int64_t id)
{
    (void)q;
    (void)id;
    if (watching(d, r)) vramd_reply_text(r, 200, vram_watch_sample_json(d->watch));
}

static void watch_log_line(void *arg, const char *level, const char *message)
{
    (void)arg;
    vramd_log(level, "%s", message);
}

int vramd_watch_start(vramd_state_t *d, vram_ctx_t *ctx, vram_sched_t *sched, const char *db)
{
    vram_watch_config_t cfg;
    int rc = vram_watch_config_from_options(&cfg);
    if (rc) return rc;
    cfg.ctx = ctx;
    cfg.sched = sched;
    cfg.db_path = db;
    cfg.log = watch_log_line;
    /* alerts link back to the dashboard (Alertmanager's generatorURL) */
    char dashboard[sizeof d->tcp_address + 16] = "";
    if (*d->tcp_address) snprintf(dashboard, sizeof dashboard, "http://%s/", d->tcp_address);
    cfg.generator_url = dashboard;
    vram_watch_t *w = NULL;
    if ((rc = vram_watch_open(&cfg, &w)) != 0) return rc;
    if ((rc = vram_watch_start(w)) != 0) {
        vram_watch_close(w);
        return rc;
    }
    d->watch = w;
    return 0;
}
