/* The /v1 API: one table of routes (method, path pattern, who may call it,
 * handler). Request bodies are decoded by libvram (vram_job_request_decode)
 * before anything reaches the scheduler, so bad input never changes state. */
#include "daemon/daemon.h"
#include "vram_int.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

void vramd_reply_text(vramd_response_t *r, int status, char *body)
{
    r->status = body ? status : 500;
    r->body =
        body ? body : strdup("{\"error\":{\"code\":\"internal\",\"message\":\"out of memory\"}}");
}

static void reply(vramd_response_t *r, int status, json_t *v)
{
    char *text = json_dumps(v, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(v);
    vramd_reply_text(r, status, text);
}

void vramd_error(vramd_response_t *r, int status, const char *code, const char *fmt, ...)
{
    char msg[512], safe[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    /* Messages quote client input; JSON strings must be valid UTF-8. */
    vram_escape_text(msg, safe, sizeof safe);
    reply(r, status, json_pack("{s:{s:s,s:s}}", "error", "code", code, "message", safe));
}

void vramd_fail(vramd_response_t *r, int rc)
{
    const char *code, *msg = *vram_last_error() ? vram_last_error() : vram_strerror(rc);
    int status = vram_err_http(rc, &code);
    vramd_error(r, status, code, "%s", msg);
}

/* ---- handlers ------------------------------------------------------------------ */

/* The uid a mutation acts as: the socket peer, or root for the TCP token. */
static uid_t actor(const vramd_request_t *q)
{
    return q->transport == VRAMD_UNIX ? q->uid : 0;
}

/* Who reads: reading routes admit identified callers only (admitted()), so
 * the reader is the actor. */
static int64_t viewer(const vramd_request_t *q)
{
    return (int64_t)actor(q);
}

static void job_reply(vramd_state_t *d, const vramd_request_t *q, vramd_response_t *r, int status,
                      int64_t id)
{
    char *text = vram_sched_job_json_for(d->sched, id, viewer(q));
    if (!text) {
        vramd_error(r, 404, "not_found", "no job %lld", (long long)id);
        return;
    }
    vramd_reply_text(r, status, text);
}

static bool body_fits(const vramd_request_t *q, vramd_response_t *r)
{
    if (!q->body_too_large) return true;
    vramd_error(r, 413, "too_large", "request body is larger than %d bytes", VRAMD_MAX_BODY);
    return false;
}

/* POST /v1/jobs. A `vram submit` body also carries "spawn" (the command
 * vramd starts itself, checked by submit.c); the rest is the job request. */
static void submit(vramd_state_t *d, const vramd_request_t *q, vramd_response_t *r, int64_t id)
{
    (void)id;
    if (!body_fits(q, r)) return;
    /* parsed a second time only when it may carry "spawn" (submit is hot) */
    json_t *body = q->body && memmem(q->body, q->body_len, "\"spawn\"", 7)
                       ? json_loadb(q->body, q->body_len, JSON_REJECT_DUPLICATES, NULL)
                       : NULL;
    json_t *spawn = json_is_object(body) ? json_incref(json_object_get(body, "spawn")) : NULL;
    char *rest = NULL, *spec = NULL;
    if (spawn) {
        json_object_del(body, "spawn");
        rest = json_dumps(body, JSON_COMPACT | JSON_PRESERVE_ORDER);
    }
    json_decref(body);
    vram_job_request_t req;
    vram_request_error_t e;
    if (vram_job_request_decode(rest ? rest : q->body, rest ? strlen(rest) : q->body_len, &req,
                                &e) != 0) {
        vramd_error(r, e.status, e.code, "%s", e.message);
        goto out;
    }
    if (spawn && !(spec = vramd_submit_spec(d, q, r, spawn))) goto out;
    req.uid = q->transport == VRAMD_UNIX ? q->uid : d->daemon_uid;
    if (spec) req.pid = 0; /* vramd's own monitor process will be the job's */
    req.spawn = spec;
    vram_job_t job;
    int rc = vram_sched_submit(d->sched, &req, &job);
    if (rc) {
        vramd_fail(r, rc);
        goto out;
    }
    job_reply(d, q, r, 201, job.id);
out:
    free(spec);
    free(rest);
    json_decref(spawn);
}

static void finish(vramd_state_t *d, const vramd_request_t *q, vramd_response_t *r, int64_t id)
{
    if (!body_fits(q, r)) return;
    vram_job_end_t end;
    vram_request_error_t e;
    if (vram_job_finish_decode(q->body, q->body_len, &end, &e) != 0) {
        vramd_error(r, e.status, e.code, "%s", e.message);
        return;
    }
    int rc = vram_sched_finish_end(d->sched, id, actor(q), &end);
    if (rc) {
        vramd_fail(r, rc);
        return;
    }
    job_reply(d, q, r, 200, id);
}

/* POST /v1/jobs/{id}/peak: the job's own measurement of its peak usage
 * (vram.job() sends it when it stops). */
static void peak(vramd_state_t *d, const vramd_request_t *q, vramd_response_t *r, int64_t id)
{
    if (!body_fits(q, r)) return;
    uint64_t bytes;
    vram_request_error_t e;
    if (vram_job_peak_decode(q->body, q->body_len, &bytes, &e) != 0) {
        vramd_error(r, e.status, e.code, "%s", e.message);
        return;
    }
    int rc = vram_sched_report_peak(d->sched, id, actor(q), bytes);
    if (rc) {
        vramd_fail(r, rc);
        return;
    }
    job_reply(d, q, r, 200, id);
}

static void cancel(vramd_state_t *d, const vramd_request_t *q, vramd_response_t *r, int64_t id)
{
    int rc = vram_sched_cancel(d->sched, id, actor(q));
    if (rc) {
        vramd_fail(r, rc);
        return;
    }
    job_reply(d, q, r, 200, id);
}

static void renew(vramd_state_t *d, const vramd_request_t *q, vramd_response_t *r, int64_t id)
{
    int rc = vram_sched_renew(d->sched, id, actor(q));
    if (rc) {
        vramd_fail(r, rc);
        return;
    }
    job_reply(d, q, r, 200, id);
}

/* ?wait=S long-polls until the job leaves `since` (default: queued; a state
 * name, or "missing" to wait for the job to be submitted), or with
 * until=end (vram wait) until it has ended. */
static void get_job(vramd_state_t *d, const vramd_request_t *q, vramd_response_t *r, int64_t id)
{
    const char *wait = q->query ? q->query(q->query_arg, "wait") : NULL;
    const char *since = q->query ? q->query(q->query_arg, "since") : NULL;
    if (wait) {
        char *end;
        double s = strtod(wait, &end);
        if (end == wait || *end || !isfinite(s) || s < 0 || s > 60) {
            vramd_error(r, 400, "bad_query", "wait=%s: expected seconds between 0 and 60", wait);
            return;
        }
        int from = VRAM_JOB_QUEUED;
        if (since)
            from = !strcmp(since, "missing") ? VRAM_JOB_MISSING : vram_job_state_parse(since);
        if (since && from == -1 && strcmp(since, "missing")) {
            vramd_error(r, 400, "bad_query", "since=%s: expected a job state or \"missing\"",
                        since);
            return;
        }
        const char *until = q->query ? q->query(q->query_arg, "until") : NULL;
        if (until && strcmp(until, "end")) {
            vramd_error(r, 400, "bad_query", "until=%s: expected \"end\"", until);
            return;
        }
        vram_job_t job;
        int rc = until ? vram_sched_wait_end(d->sched, id, (int)(s * 1000), &job)
                       : vram_sched_wait_change(d->sched, id, from, (int)(s * 1000), &job);
        if (rc) {
            vramd_fail(r, rc);
            return;
        }
    }
    job_reply(d, q, r, 200, id);
}

static void events(vramd_state_t *d, const vramd_request_t *q, vramd_response_t *r, int64_t id)
{
    vram_job_t job;
    int rc = vram_sched_job(d->sched, id, &job);
    if (rc == 0 && actor(q) != 0 && job.req.uid != actor(q))
        rc = vram_fail(VRAM_EPERM, "the events of job %lld are visible to its owner and root",
                       (long long)id);
    char *text = rc ? NULL : vram_sched_events_json(d->sched, id);
    if (!text) {
        vramd_fail(r, rc ? rc : VRAM_ENOENT);
        return;
    }
    vramd_reply_text(r, 200, text);
}

static void list_jobs(vramd_state_t *d, const vramd_request_t *q, vramd_response_t *r, int64_t id)
{
    (void)id;
    const char *lim = q->query ? q->query(q->query_arg, "limit") : NULL;
    long limit = 100;
    if (lim) {
        char *end;
        errno = 0;
        limit = strtol(lim, &end, 10);
        if (errno || end == lim || *end || limit < 0 || limit > 100000) {
            vramd_error(r, 400, "bad_query", "limit=%s: expected 0 to 100000", lim);
            return;
        }
    }
    vramd_reply_text(r, 200, vram_sched_jobs_json_for(d->sched, (int)limit, viewer(q)));
}

static void status(vramd_state_t *d, const vramd_request_t *q, vramd_response_t *r, int64_t id)
{
    (void)id;
    (void)q;
    char *t = vram_sched_status_json(d->sched);
    if (!t) {
        vramd_error(r, 500, "internal", "cannot read devices: %s", vram_last_error());
        return;
    }
    vramd_reply_text(r, 200, t);
}

static void devices(vramd_state_t *d, const vramd_request_t *q, vramd_response_t *r, int64_t id)
{
    (void)q;
    (void)id;
    vramd_reply_text(r, 200, vram_sched_devices_json(d->sched));
}

static void health(vramd_state_t *d, const vramd_request_t *q, vramd_response_t *r, int64_t id)
{
    (void)q;
    (void)id;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    double now = (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
    reply(r, 200,
          json_pack("{s:s,s:s,s:f,s:i,s:s,s:s}", "status", "ok", "version", VRAMD_VERSION,
                    "uptime_s", now - d->started_at, "pid", (int)getpid(), "socket", d->socket_path,
                    "tcp", d->tcp_address));
}

/* GET /v1/config: secrets (webhook URLs, exec commands) to root only; the
 * token to nobody. */
static void config(vramd_state_t *d, const vramd_request_t *q, vramd_response_t *r, int64_t id)
{
    (void)d;
    (void)id;
    bool root = actor(q) == 0 && (q->transport == VRAMD_UNIX || q->may_mutate);
    json_t *o = json_object();
    for (int i = 0; i < VRAM_OPT_COUNT_; i++) {
        const char *v = vram_option_str((vram_option_t)i);
        bool secret = vram_option_type((vram_option_t)i) == VRAM_OPTTYPE_SECRET;
        if (secret && *v && (!root || i == VRAM_OPT_TOKEN)) v = "(set)";
        json_object_set_new(o, vram_option_name((vram_option_t)i), json_string(v));
    }
    reply(r, 200, json_pack("{s:o}", "options", o));
}

/* GET /v1/jobs/{id}/output: a submitted job's output so far (vram attach). */
static void output(vramd_state_t *d, const vramd_request_t *q, vramd_response_t *r, int64_t id)
{
    vramd_job_output(d, q, r, id);
}

/* ---- the table ------------------------------------------------------------------ */

/* Who may call a route, the column that says what TCP without the token
 * may see. OPEN: anyone who can connect, TCP without the token included:
 * what a Prometheus scrape and a health check need, and the dashboard's
 * files (code, no data: the page asks for the token). READER: an
 * identified caller (a Unix-socket peer, or TCP with the token; it sees
 * other users' jobs without their private fields). MUTATOR: an identified
 * caller that changes state (ownership is then checked by the scheduler). */
typedef enum { OPEN, READER, MUTATOR } who_t;

typedef void (*handler_fn)(vramd_state_t *d, const vramd_request_t *q, vramd_response_t *r,
                           int64_t id);

/* "{id}" in a pattern matches one path segment holding a job id, "{file}"
 * any one non-empty segment. */
static const struct route {
    const char *method;
    const char *pattern;
    who_t who;
    handler_fn handler;
} routes[] = {
    {"GET", "/v1/health", OPEN, health},
    {"GET", "/v1/status", READER, status},
    {"GET", "/v1/devices", READER, devices},
    {"GET", "/v1/config", READER, config},
    {"GET", "/v1/jobs", READER, list_jobs},
    {"POST", "/v1/jobs", MUTATOR, submit},
    {"GET", "/v1/jobs/{id}", READER, get_job},
    {"DELETE", "/v1/jobs/{id}", MUTATOR, cancel},
    {"POST", "/v1/jobs/{id}/finish", MUTATOR, finish},
    {"POST", "/v1/jobs/{id}/renew", MUTATOR, renew},
    {"POST", "/v1/jobs/{id}/peak", MUTATOR, peak},
    {"GET", "/v1/jobs/{id}/events", READER, events},
    {"GET", "/v1/jobs/{id}/output", READER, output},
    /* monitoring (watch_routes.c, docs/monitoring.md): no command lines;
     * Prometheus scrapes /metrics without a token */
    {"GET", "/metrics", OPEN, vramd_watch_metrics},
    {"GET", "/v1/watch", READER, vramd_watch_sample},
    {"GET", "/v1/history", READER, vramd_watch_history},
    {"GET", "/v1/alerts", READER, vramd_watch_alerts},
    {"GET", "/v1/peaks", READER, vramd_watch_peaks},
    {"POST", "/v1/peaks/reset", MUTATOR, vramd_watch_reset_peaks},
    /* the estimator and the planner (estimate_routes.c, docs/daemon.md) */
    {"POST", "/v1/estimate", READER, vramd_estimate},
    {"POST", "/v1/plan", READER, vramd_plan},
    /* the dashboard's embedded files (dashboard.c; on TCP only) */
    {"GET", "/", OPEN, vramd_dashboard},
    {"GET", "/index.html", OPEN, vramd_dashboard},
    {"GET", "/static/{file}", OPEN, vramd_dashboard},
};

static bool parse_id(const char *text, size_t len, int64_t *id)
{
    if (len == 0 || len > 18) return false;
    int64_t v = 0;
    for (size_t i = 0; i < len; i++) {
        if (text[i] < '0' || text[i] > '9') return false;
        v = v * 10 + (text[i] - '0');
    }
    *id = v;
    return v > 0;
}

typedef enum { NO_MATCH, MATCH, BAD_ID } match_t;

/* Matches path against pattern segment by segment; *id gets "{id}". */
static match_t match(const char *pattern, const char *path, int64_t *id)
{
    const char *p = pattern, *s = path;
    while (*p && *s) {
        if (!strncmp(p, "{file}", 6)) {
            size_t n = strcspn(s, "/");
            if (!n) return NO_MATCH;
            p += 6;
            s += n;
            continue;
        }
        if (!strncmp(p, "{id}", 4)) {
            size_t n = strcspn(s, "/");
            const char *pend = p + 4;
            /* The rest of the path must fit the rest of the pattern first:
             * "/v1/jobs/abc" is a bad id, "/v1/jobs/abc/x" no route. */
            if ((strchr(s, '/') != NULL) != (*pend == '/')) return NO_MATCH;
            if (!parse_id(s, n, id)) return BAD_ID;
            p = pend;
            s += n;
            continue;
        }
        if (*p != *s) return NO_MATCH;
        p++;
        s++;
    }
    return *p || *s ? NO_MATCH : MATCH;
}

/* Refuses a caller the route does not admit (401: the token is missing or
 * wrong; 403: nothing the caller can send helps); returns true when
 * allowed. The message lists what unidentified callers may read, from the
 * table. */
static bool admitted(const struct route *rt, const vramd_request_t *q, vramd_response_t *r)
{
    if (rt->who == OPEN || q->may_mutate) return true;
    char open[192] = "";
    size_t at = 0;
    for (size_t i = 0; i < sizeof routes / sizeof routes[0] && at < sizeof open; i++)
        if (routes[i].who == OPEN && routes[i].handler != vramd_dashboard)
            at += (size_t)snprintf(open + at, sizeof open - at, at ? ", %s" : "%s",
                                   routes[i].pattern);
    int status = q->deny_status == 401 ? 401 : 403;
    vramd_error(r, status, status == 401 ? "unauthorized" : "forbidden",
                "%s %s is for identified callers (%s); unidentified ones may read %s and the "
                "dashboard's files",
                rt->method, rt->pattern, q->deny_reason ? q->deny_reason : "not identified", open);
    return false;
}

void vramd_route(vramd_state_t *d, const vramd_request_t *q, vramd_response_t *r)
{
    memset(r, 0, sizeof *r);
    vram_clear_error();
    const char *m = !strcmp(q->method, "HEAD") ? "GET" : q->method, *p = q->path;
    /* A NUL or control character (%00 decodes to one) must not route the
     * request as a prefix of itself: the HTTP layer turns a decoded NUL into
     * DEL (0x7f) so that it reaches this check. */
    for (size_t i = 0; p[i]; i++)
        if ((unsigned char)p[i] < 0x20 || p[i] == 0x7f) {
            vramd_error(r, 400, "bad_path",
                        "the path contains a NUL or control character at byte %zu", i);
            r->close = true; /* a client that sends this is not worth keeping */
            return;
        }
    const struct route *found = NULL;
    int64_t id = 0;
    size_t at = 0;
    bool bad_id = false;
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
        match_t mt = match(routes[i].pattern, p, &id);
        bad_id |= mt == BAD_ID;
        if (mt != MATCH) continue;
        if (!strcmp(routes[i].method, m)) {
            found = &routes[i];
            break;
        }
        /* the path exists: collect the methods it allows, for a 405 */
        at += (size_t)snprintf(r->allow_buf + at, sizeof r->allow_buf - at, at ? ", %s" : "%s",
                               routes[i].method);
        if (at >= sizeof r->allow_buf) at = sizeof r->allow_buf - 1;
    }
    if (found) {
        if (admitted(found, q, r)) found->handler(d, q, r, id);
        return;
    }
    if (at) {
        vramd_error(r, 405, "method_not_allowed", "%s is not allowed here (allowed: %s)", q->method,
                    r->allow_buf);
        r->allow = r->allow_buf;
        return;
    }
    if (bad_id) {
        vramd_error(r, 404, "not_found", "no such job in \"%.60s\" (ids are positive integers)", p);
        return;
    }
    vramd_error(r, 404, "not_found",
                "no route %s %s (the API is under /v1: health, status, devices, config, jobs, "
                "watch, history, alerts, peaks; /metrics)",
                q->method, p);
}
