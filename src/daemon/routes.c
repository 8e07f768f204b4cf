/* The /v1 API: request bodies are checked field by field (wrong type -> 400,
 * bad value -> 422, both naming the field) before anything reaches the
 * scheduler, so bad input never changes state. */
#include "daemon/daemon.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void reply_text(vramd_response_t *r, int status, char *body)
{
    r->status = body ? status : 500;
    r->body =
        body ? body : strdup("{\"error\":{\"code\":\"internal\",\"message\":\"out of memory\"}}");
}

static void reply(vramd_response_t *r, int status, json_t *v)
{
    char *text = json_dumps(v, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(v);
    reply_text(r, status, text);
}

static void error(vramd_response_t *r, int status, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Replaces each byte that is not part of a valid UTF-8 sequence with '?':
 * messages quote client input (paths, bodies), and JSON strings must be
 * UTF-8, or the error reply itself would fail. */
static void make_utf8(char *s)
{
    unsigned char *p = (unsigned char *)s;
    while (*p) {
        size_t n = *p < 0x80           ? 1
                   : (*p >> 5) == 0x6  ? 2
                   : (*p >> 4) == 0xe  ? 3
                   : (*p >> 3) == 0x1e ? 4
                                       : 0;
        size_t k = 1;
        while (k < n && (p[k] & 0xc0) == 0x80)
            k++;
        /* Overlong forms, surrogates and code points above U+10FFFF too. */
        bool ok = n && k == n && !(n == 2 && *p < 0xc2) && !(n == 3 && *p == 0xe0 && p[1] < 0xa0) &&
                  !(n == 3 && *p == 0xed && p[1] >= 0xa0) &&
                  !(n == 4 && *p == 0xf0 && p[1] < 0x90) &&
                  !(n == 4 && (*p > 0xf4 || (*p == 0xf4 && p[1] >= 0x90)));
        if (!ok) {
            *p++ = '?';
            continue;
        }
        p += n;
    }
}

static void error(vramd_response_t *r, int status, const char *code, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    make_utf8(msg);
    reply(r, status, json_pack("{s:{s:s,s:s}}", "error", "code", code, "message", msg));
}

/* Maps a libvram error to an HTTP status and code. */
static void vram_error(vramd_response_t *r, int rc)
{
    const char *msg = *vram_last_error() ? vram_last_error() : vram_strerror(rc);
    switch (rc) {
    case VRAM_EINVAL:
        error(r, 422, "invalid_value", "%s", msg);
        break;
    case VRAM_ENOENT:
        error(r, 404, "not_found", "%s", msg);
        break;
    case VRAM_EPERM:
        error(r, 403, "forbidden", "%s", msg);
        break;
    case VRAM_ESTATE:
        error(r, 409, "conflict", "%s", msg);
        break;
    default:
        error(r, 500, "internal", "%s", msg);
        break;
    }
}

static void method_not_allowed(vramd_response_t *r, const char *method, const char *allow)
{
    error(r, 405, "method_not_allowed", "%s is not allowed here (allowed: %s)", method, allow);
    r->allow = allow;
}

/* ---- body parsing ---------------------------------------------------------- */

/* Parses the body as a JSON object; on failure fills r and returns NULL. */
static json_t *parse_body(const vramd_request_t *q, vramd_response_t *r, bool required)
{
    if (q->body_too_large) {
        error(r, 413, "too_large", "request body is larger than %d bytes", VRAMD_MAX_BODY);
        return NULL;
    }
    if (q->body_len == 0 && !required) return json_object();
    if (q->body_len == 0) {
        error(r, 400, "bad_json", "request body is empty; a JSON object is required");
        return NULL;
    }
    json_error_t e;
    json_t *v = json_loadb(q->body, q->body_len, JSON_REJECT_DUPLICATES, &e);
    if (!v) {
        error(r, 400, "bad_json", "malformed JSON at line %d, column %d: %s", e.line, e.column,
              e.text);
        return NULL;
    }
    if (!json_is_object(v)) {
        json_decref(v);
        error(r, 400, "bad_json", "the body must be a JSON object");
        return NULL;
    }
    return v;
}

typedef struct {
    vramd_response_t *r;
    bool failed;
} check_t;

/* Integer field in [lo, hi]; absent leaves *out unchanged. */
static void get_int(check_t *c, json_t *o, const char *key, long long lo, long long hi,
                    long long *out)
{
    json_t *v = json_object_get(o, key);
    if (c->failed || !v || json_is_null(v)) return;
    if (!json_is_integer(v)) {
        error(c->r, 400, "bad_type", "field \"%s\" must be an integer", key);
        c->failed = true;
        return;
    }
    long long x = json_integer_value(v);
    if (x < lo || x > hi) {
        error(c->r, 422, "invalid_value", "field \"%s\" is %lld; it must be between %lld and %lld",
              key, x, lo, hi);
        c->failed = true;
        return;
    }
    *out = x;
}

/* A size: an integer number of bytes or a string like "10GiB". */
static void get_size(check_t *c, json_t *o, const char *key, uint64_t *out)
{
    json_t *v = json_object_get(o, key);
    if (c->failed || !v || json_is_null(v)) return;
    if (json_is_string(v)) {
        uint64_t b;
        if (vram_parse_size(json_string_value(v), &b) != 0) {
            error(c->r, 422, "invalid_value", "field \"%s\": %s", key, vram_last_error());
            c->failed = true;
            return;
        }
        *out = b;
        return;
    }
    long long x = 0;
    get_int(c, o, key, 0, (1LL << 60), &x);
    if (!c->failed) *out = (uint64_t)x;
}

static void get_string(check_t *c, json_t *o, const char *key, char *buf, size_t len)
{
    json_t *v = json_object_get(o, key);
    if (c->failed || !v || json_is_null(v)) return;
    if (!json_is_string(v)) {
        error(c->r, 400, "bad_type", "field \"%s\" must be a string", key);
        c->failed = true;
        return;
    }
    if (json_string_length(v) >= len) {
        error(c->r, 422, "invalid_value", "field \"%s\" is longer than %zu characters", key,
              len - 1);
        c->failed = true;
        return;
    }
    snprintf(buf, len, "%s", json_string_value(v));
}

static void get_number(check_t *c, json_t *o, const char *key, double lo, double hi, double *out)
{
    json_t *v = json_object_get(o, key);
    if (c->failed || !v || json_is_null(v)) return;
    if (!json_is_number(v)) {
        error(c->r, 400, "bad_type", "field \"%s\" must be a number", key);
        c->failed = true;
        return;
    }
    double x = json_number_value(v);
    if (!isfinite(x) || x < lo || x > hi) {
        error(c->r, 422, "invalid_value", "field \"%s\" is %g; it must be between %g and %g", key,
              x, lo, hi);
        c->failed = true;
        return;
    }
    *out = x;
}

static bool only_known_fields(check_t *c, json_t *o, const char *const *known)
{
    const char *key;
    json_t *v;
    json_object_foreach(o, key, v)
    {
        bool ok = false;
        for (const char *const *k = known; *k; k++)
            if (!strcmp(*k, key)) ok = true;
        if (!ok) {
            error(c->r, 400, "unknown_field", "unknown field \"%s\"", key);
            c->failed = true;
            return false;
        }
    }
    return true;
}

static bool parse_job_request(json_t *o, vramd_response_t *r, vram_job_request_t *q)
{
    static const char *const known[] = {
        "name",    "mem_bytes",  "gpus",           "priority",         "timeout_s", "pid",
        "command", "batch_size", "min_batch_size", "per_sample_bytes", "devices",   "max_batch_size",
        NULL};
    check_t c = {r, false};
    memset(q, 0, sizeof *q);
    q->timeout_s = -1;
    q->gpus = 0;
    if (!only_known_fields(&c, o, known)) return false;
    if (!json_object_get(o, "mem_bytes")) {
        error(r, 422, "invalid_value", "field \"mem_bytes\" is required (bytes per GPU)");
        return false;
    }
    long long gpus = 0, prio = 0, pid = 0, batch = 0, minb = 0, maxb = 0;
    get_string(&c, o, "name", q->name, sizeof q->name);
    get_string(&c, o, "command", q->command, sizeof q->command);
    get_size(&c, o, "mem_bytes", &q->mem_bytes);
    get_int(&c, o, "gpus", 1, VRAM_SCHED_MAX_GPUS, &gpus);
    get_int(&c, o, "priority", -1000000, 1000000, &prio);
    get_number(&c, o, "timeout_s", 0, 365.0 * 86400, &q->timeout_s);
    get_int(&c, o, "pid", 0, (1LL << 31) - 1, &pid); /* pid_t range */
    get_int(&c, o, "batch_size", 0, 1LL << 30, &batch);
    get_int(&c, o, "min_batch_size", 0, 1LL << 30, &minb);
    get_int(&c, o, "max_batch_size", 0, 1LL << 30, &maxb);
    get_size(&c, o, "per_sample_bytes", &q->per_sample_bytes);
    json_t *devs = json_object_get(o, "devices");
    if (!c.failed && devs && !json_is_null(devs)) {
        if (!json_is_array(devs) || json_array_size(devs) > VRAM_SCHED_MAX_GPUS) {
            error(r, 400, "bad_type",
                  "field \"devices\" must be an array of at most %d device "
                  "indexes",
                  VRAM_SCHED_MAX_GPUS);
            return false;
        }
        size_t i;
        json_t *d;
        json_array_foreach(devs, i, d)
        {
            if (!json_is_integer(d)) {
                error(r, 400, "bad_type", "field \"devices\" must hold integers");
                return false;
            }
            long long x = json_integer_value(d);
            if (x < 0 || x >= 1024) {
                error(r, 422, "invalid_value", "field \"devices\": no device %lld", x);
                return false;
            }
            q->pinned[q->npinned++] = (int)x;
        }
    }
    if (c.failed) return false;
    if (q->mem_bytes == 0) {
        error(r, 422, "invalid_value", "field \"mem_bytes\" must be greater than 0");
        return false;
    }
    q->gpus = (int)gpus;
    q->priority = (int)prio;
    q->pid = (pid_t)pid;
    q->batch_size = (uint32_t)batch;
    q->min_batch_size = (uint32_t)minb;
    q->max_batch_size = (uint32_t)maxb;
    return true;
}

/* ---- handlers -------------------------------------------------------------------- */

static bool mutation_allowed(const vramd_request_t *q, vramd_response_t *r)
{
    if (q->may_mutate) return true;
    error(r, q->deny_reason && strstr(q->deny_reason, "wrong") ? 401 : 403, "forbidden", "%s",
          q->deny_reason ? q->deny_reason : "mutations are not allowed here");
    return false;
}

/* The uid a mutation acts as: the socket peer, or root for the TCP token. */
static uid_t actor(const vramd_request_t *q)
{
    return q->transport == VRAMD_UNIX ? q->uid : 0;
}

static void job_reply(vramd_state_t *d, vramd_response_t *r, int status, int64_t id)
{
    char *text = vram_sched_job_json(d->sched, id);
    if (!text) {
        error(r, 404, "not_found", "no job %lld", (long long)id);
        return;
    }
    reply_text(r, status, text);
}

static void submit(vramd_state_t *d, const vramd_request_t *q, vramd_response_t *r)
{
    if (!mutation_allowed(q, r)) return;
    json_t *o = parse_body(q, r, true);
    if (!o) return;
    /* vram submit: what vramd starts itself (submit.c) */
    json_t *spawn = json_incref(json_object_get(o, "spawn"));
    json_object_del(o, "spawn");
    vram_job_request_t req;
    bool ok = parse_job_request(o, r, &req);
    json_decref(o);
    char *spec = ok && spawn ? vramd_submit_spec(d, q, r, spawn) : NULL;
    json_decref(spawn);
    if (!ok || (spawn && !spec)) return;
    req.uid = q->transport == VRAMD_UNIX ? q->uid : d->daemon_uid;
    if (spec) req.pid = 0; /* vramd's own process will be the job's */
    req.spawn = spec;
    vram_job_t job;
    int rc = vram_sched_submit(d->sched, &req, &job);
    free(spec);
    if (rc) {
        vram_error(r, rc);
        return;
    }
    job_reply(d, r, 201, job.id);
}

static void finish(vramd_state_t *d, const vramd_request_t *q, vramd_response_t *r, int64_t id)
{
    if (!mutation_allowed(q, r)) return;
    json_t *o = parse_body(q, r, false);
    if (!o) return;
    static const char *const known[] = {"exit_status", "error", NULL};
    check_t c = {r, false};
    long long status = 0;
    char err[256] = "";
    only_known_fields(&c, o, known);
    get_int(&c, o, "exit_status", -1000, 1000, &status);
    get_string(&c, o, "error", err, sizeof err);
    json_decref(o);
    if (c.failed) return;
    int rc = vram_sched_finish(d->sched, id, actor(q), (int)status, err);
    if (rc) {
        vram_error(r, rc);
        return;
    }
    job_reply(d, r, 200, id);
}

static void get_job(vramd_state_t *d, const vramd_request_t *q, vramd_response_t *r, int64_t id)
{
    const char *wait = q->query ? q->query(q->query_arg, "wait") : NULL;
    if (wait) {
        char *end;
        double s = strtod(wait, &end);
        if (end == wait || *end || !isfinite(s) || s < 0 || s > 60) {
            error(r, 400, "bad_query", "wait=%s: expected seconds between 0 and 60", wait);
            return;
        }
        vram_job_t job;
        const char *until = q->query ? q->query(q->query_arg, "until") : NULL;
        int rc = until && !strcmp(until, "end") /* vram wait */
                     ? vram_sched_wait_end(d->sched, id, (int)(s * 1000), &job)
                     : vram_sched_wait(d->sched, id, (int)(s * 1000), &job);
        if (rc) {
            vram_error(r, rc);
            return;
        }
    }
    job_reply(d, r, 200, id);
}

static void health(vramd_state_t *d, vramd_response_t *r)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    double now = (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
    reply(r, 200,
          json_pack("{s:s,s:s,s:f,s:i,s:s,s:s}", "status", "ok", "version", VRAMD_VERSION,
                    "uptime_s", now - d->started_at, "pid", (int)getpid(), "socket", d->socket_path,
                    "tcp", d->tcp_address));
}

static void config(vramd_response_t *r)
{
    json_t *o = json_object();
    for (int i = 0; i < VRAM_OPT_COUNT_; i++) {
        const char *v = vram_option_str((vram_option_t)i);
        if (i == VRAM_OPT_TOKEN) v = *v ? "(set)" : "";
        json_object_set_new(o, vram_option_name((vram_option_t)i), json_string(v));
    }
    reply(r, 200, json_pack("{s:o}", "options", o));
}

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

void vramd_route(vramd_state_t *d, const vramd_request_t *q, vramd_response_t *r)
{
    memset(r, 0, sizeof *r);
    const char *m = q->method, *p = q->path;
    bool get = !strcmp(m, "GET") || !strcmp(m, "HEAD"), post = !strcmp(m, "POST"),
         del = !strcmp(m, "DELETE");
    vram_clear_error();
    /* watch: monitoring routes live in watch_routes.c and dashboard.c */
    if (vramd_watch_route(d, q, r) || vramd_dashboard_route(d, q, r)) return;
    if (!strcmp(p, "/v1/health")) {
        if (!get) {
            method_not_allowed(r, m, "GET");
            return;
        }
        {
            health(d, r);
            return;
        }
    }
    if (!strcmp(p, "/v1/status")) {
        if (!get) {
            method_not_allowed(r, m, "GET");
            return;
        }
        char *t = vram_sched_status_json(d->sched);
        if (!t) {
            error(r, 500, "internal", "cannot read devices: %s", vram_last_error());
            return;
        }
        {
            reply_text(r, 200, t);
            return;
        }
    }
    if (!strcmp(p, "/v1/devices")) {
        if (!get) {
            method_not_allowed(r, m, "GET");
            return;
        }
        {
            reply_text(r, 200, vram_sched_devices_json(d->sched));
            return;
        }
    }
    if (!strcmp(p, "/v1/config")) {
        if (!get) {
            method_not_allowed(r, m, "GET");
            return;
        }
        {
            config(r);
            return;
        }
    }
    if (!strcmp(p, "/v1/jobs")) {
        if (post) {
            submit(d, q, r);
            return;
        }
        if (!get) {
            method_not_allowed(r, m, "GET, POST");
            return;
        }
        const char *lim = q->query ? q->query(q->query_arg, "limit") : NULL;
        long limit = 100;
        if (lim) {
            char *end;
            errno = 0;
            limit = strtol(lim, &end, 10);
            if (errno || end == lim || *end || limit < 0 || limit > 100000) {
                error(r, 400, "bad_query", "limit=%s: expected 0 to 100000", lim);
                return;
            }
        }
        {
            reply_text(r, 200, vram_sched_jobs_json(d->sched, (int)limit));
            return;
        }
    }
    if (!strncmp(p, "/v1/jobs/", 9)) {
        const char *rest = p + 9, *slash = strchr(rest, '/');
        size_t idlen = slash ? (size_t)(slash - rest) : strlen(rest);
        int64_t id;
        if (!parse_id(rest, idlen, &id)) {
            error(r, 404, "not_found", "no such job \"%.*s\" (ids are positive integers)",
                  (int)(idlen > 40 ? 40 : idlen), rest);
            return;
        }
        if (!slash) {
            if (get) {
                get_job(d, q, r, id);
                return;
            }
            if (del) {
                if (!mutation_allowed(q, r)) return;
                int rc = vram_sched_cancel(d->sched, id, actor(q));
                if (rc) {
                    vram_error(r, rc);
                    return;
                }
                {
                    job_reply(d, r, 200, id);
                    return;
                }
            }
            {
                method_not_allowed(r, m, "GET, DELETE");
                return;
            }
        }
        if (!strcmp(slash, "/finish")) {
            if (!post) {
                method_not_allowed(r, m, "POST");
                return;
            }
            {
                finish(d, q, r, id);
                return;
            }
        }
        if (!strcmp(slash, "/output")) { /* vram attach (submit.c) */
            if (!get) {
                method_not_allowed(r, m, "GET");
                return;
            }
            vramd_job_output(d, q, r, id);
            return;
        }
        if (!strcmp(slash, "/events")) {
            if (!get) {
                method_not_allowed(r, m, "GET");
                return;
            }
            char *text = vram_sched_events_json(d->sched, id);
            if (!text) {
                error(r, 404, "not_found", "no job %lld", (long long)id);
                return;
            }
            reply_text(r, 200, text);
            return;
        }
        if (!strcmp(slash, "/renew")) {
            if (!post) {
                method_not_allowed(r, m, "POST");
                return;
            }
            if (!mutation_allowed(q, r)) return;
            int rc = vram_sched_renew(d->sched, id, actor(q));
            if (rc) {
                vram_error(r, rc);
                return;
            }
            {
                job_reply(d, r, 200, id);
                return;
            }
        }
    }
    error(r, 404, "not_found",
          "no route %s %s (the API is under /v1: health, status, devices, "
          "config, jobs)",
          m, p);
}
