/* The one decoder of job-request bodies (POST /v1/jobs and
 * POST /v1/jobs/{id}/finish, /peak), shared by vramd, the CLI and the fuzzers.
 * Every field is checked before anything reaches the scheduler: a wrong type
 * or malformed JSON is a 400, a bad value a 422, both naming the field. */
#include "sched_internal.h"
#include "core/escape.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define MAX_BYTES (1ULL << 60) /* sizes, as integers or strings */

typedef struct {
    vram_request_error_t *err;
    bool failed;
} check_t;

static void refuse(check_t *c, int status, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void refuse(check_t *c, int status, const char *code, const char *fmt, ...)
{
    if (c->failed) return;
    c->failed = true;
    c->err->status = status;
    snprintf(c->err->code, sizeof c->err->code, "%s", code);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err->message, sizeof c->err->message, fmt, ap);
    va_end(ap);
}

/* The body as a JSON object (an empty body is {} unless required). */
static json_t *parse_object(check_t *c, const char *text, size_t len, bool required)
{
    if (len == 0 && !required) return json_object();
    if (len == 0) {
        refuse(c, 400, "bad_json", "request body is empty; a JSON object is required");
        return NULL;
    }
    json_error_t e;
    json_t *v = json_loadb(text, len, JSON_REJECT_DUPLICATES, &e);
    if (!v) {
        refuse(c, 400, "bad_json", "malformed JSON at line %d, column %d: %s", e.line, e.column,
               e.text);
        return NULL;
    }
    if (!json_is_object(v)) {
        json_decref(v);
        refuse(c, 400, "bad_json", "the body must be a JSON object");
        return NULL;
    }
    return v;
}

static json_t *field(check_t *c, json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    return c->failed || !v || json_is_null(v) ? NULL : v;
}

/* Integer field in [lo, hi]; absent leaves *out unchanged. */
static void get_int(check_t *c, json_t *o, const char *key, long long lo, long long hi,
                    long long *out)
{
    json_t *v = field(c, o, key);
    if (!v) return;
    if (!json_is_integer(v)) {
        refuse(c, 400, "bad_type", "field \"%s\" must be an integer", key);
        return;
    }
    long long x = json_integer_value(v);
    if (x < lo || x > hi) {
        refuse(c, 422, "invalid_value", "field \"%s\" is %lld; it must be between %lld and %lld",
               key, x, lo, hi);
        return;
    }
    *out = x;
}

/* A size: an integer number of bytes or a string like "10GiB", held to the
 * same limit either way. */
static void get_size(check_t *c, json_t *o, const char *key, uint64_t *out)
{
    json_t *v = field(c, o, key);
    if (!v) return;
    if (!json_is_string(v)) {
        long long x = 0;
        get_int(c, o, key, 0, (long long)MAX_BYTES, &x);
        if (!c->failed) *out = (uint64_t)x;
        return;
    }
    uint64_t b;
    if (vram_parse_size(json_string_value(v), &b) != 0)
        refuse(c, 422, "invalid_value", "field \"%s\": %s", key, vram_last_error());
    else if (b > MAX_BYTES)
        refuse(c, 422, "invalid_value", "field \"%s\" is \"%s\"; it must be at most %llu bytes",
               key, json_string_value(v), MAX_BYTES);
    else
        *out = b;
}

static void get_string(check_t *c, json_t *o, const char *key, char *buf, size_t len)
{
    json_t *v = field(c, o, key);
    if (!v) return;
    if (!json_is_string(v)) {
        refuse(c, 400, "bad_type", "field \"%s\" must be a string", key);
        return;
    }
    /* A NUL inside would silently cut the string: refuse it instead. */
    if (json_string_length(v) >= len || strlen(json_string_value(v)) != json_string_length(v)) {
        refuse(c, 422, "invalid_value",
               "field \"%s\" is longer than %zu characters or contains a NUL", key, len - 1);
        return;
    }
    snprintf(buf, len, "%s", json_string_value(v));
}

/* A number in [lo, hi]; -0 is refused along with the negatives. */
static void get_number(check_t *c, json_t *o, const char *key, double lo, double hi, double *out)
{
    json_t *v = field(c, o, key);
    if (!v) return;
    if (!json_is_number(v)) {
        refuse(c, 400, "bad_type", "field \"%s\" must be a number", key);
        return;
    }
    double x = json_number_value(v);
    if (!isfinite(x) || x < lo || x > hi || (lo >= 0 && signbit(x))) {
        refuse(c, 422, "invalid_value", "field \"%s\" is %g; it must be between %g and %g", key, x,
               lo, hi);
        return;
    }
    *out = x;
}

static void only_known_fields(check_t *c, json_t *o, const char *const *known)
{
    const char *key;
    json_t *v;
    json_object_foreach(o, key, v)
    {
        bool ok = false;
        for (const char *const *k = known; *k && !ok; k++)
            ok = !strcmp(*k, key);
        if (!ok) {
            refuse(c, 400, "unknown_field", "unknown field \"%s\"", key);
            return;
        }
    }
}

static void get_devices(check_t *c, json_t *o, vram_job_request_t *q)
{
    json_t *devs = field(c, o, "devices");
    if (!devs) return;
    if (!json_is_array(devs) || json_array_size(devs) > VRAM_SCHED_MAX_GPUS) {
        refuse(c, 400, "bad_type",
               "field \"devices\" must be an array of at most %d device indexes",
               VRAM_SCHED_MAX_GPUS);
        return;
    }
    size_t i;
    json_t *d;
    json_array_foreach(devs, i, d)
    {
        if (!json_is_integer(d)) {
            refuse(c, 400, "bad_type", "field \"devices\" must hold integers");
            return;
        }
        long long x = json_integer_value(d);
        if (x < 0 || x >= 1024) {
            refuse(c, 422, "invalid_value", "field \"devices\": no device %lld", x);
            return;
        }
        q->pinned[q->npinned++] = (int)x;
    }
}

static void get_labels(check_t *c, json_t *o, vram_job_request_t *q)
{
    json_t *labels = field(c, o, "labels");
    if (!labels) return;
    char why[200];
    int status = vram_labels_parse(labels, q, why, sizeof why);
    if (status) refuse(c, status, status == 400 ? "bad_type" : "invalid_value", "%s", why);
}

/* batch_bytes: [{"batch": B, "bytes": N or "SIZE"}, ...], read here and
 * checked against the other fields by vram_job_batch_bytes_check. */
static void get_batch_bytes(check_t *c, json_t *o, vram_job_request_t *q)
{
    static const char *const known[] = {"batch", "bytes", NULL};
    json_t *list = field(c, o, "batch_bytes");
    if (!list) return;
    if (!json_is_array(list)) {
        refuse(c, 400, "bad_type",
               "field \"batch_bytes\" must be an array of {\"batch\": B, \"bytes\": N}");
        return;
    }
    if (json_array_size(list) > VRAM_JOB_MAX_BATCHES) {
        refuse(c, 422, "invalid_value", "field \"batch_bytes\" has %zu entries; at most %d",
               json_array_size(list), VRAM_JOB_MAX_BATCHES);
        return;
    }
    size_t i;
    json_t *e;
    json_array_foreach(list, i, e)
    {
        if (!json_is_object(e)) {
            refuse(c, 400, "bad_type",
                   "batch_bytes[%zu] must be an object {\"batch\": B, \"bytes\": N}", i);
            return;
        }
        only_known_fields(c, e, known);
        long long batch = 0;
        uint64_t bytes = 0;
        get_int(c, e, "batch", 1, 1LL << 30, &batch);
        get_size(c, e, "bytes", &bytes);
        if (!c->failed && (!json_object_get(e, "batch") || !json_object_get(e, "bytes")))
            refuse(c, 422, "invalid_value", "batch_bytes[%zu] needs both \"batch\" and \"bytes\"",
                   i);
        if (c->failed) {
            /* name the entry as well as its field */
            char why[sizeof c->err->message];
            memcpy(why, c->err->message, sizeof why);
            int at = snprintf(c->err->message, sizeof c->err->message, "batch_bytes[%zu]: ", i);
            if (at > 0 && (size_t)at < sizeof c->err->message)
                strncat(c->err->message, why, sizeof c->err->message - (size_t)at - 1);
            return;
        }
        q->batch_bytes[q->nbatch_bytes++] = (vram_batch_bytes_t){(uint32_t)batch, bytes};
    }
}

static int result(check_t *c)
{
    if (!c->failed) return 0;
    return c->err->status == 422 ? VRAM_EINVAL : VRAM_EPARSE;
}

int vram_job_request_decode(const char *text, size_t len, vram_job_request_t *q,
                            vram_request_error_t *err)
{
    static const char *const known[] = {
        "name",    "mem_bytes",  "gpus",           "priority",    "timeout_s", "pid",
        "command", "batch_size", "min_batch_size", "batch_bytes", "devices",   "max_batch_size",
        "labels",  NULL};
    check_t c = {err, false};
    memset(err, 0, sizeof *err);
    memset(q, 0, sizeof *q);
    q->timeout_s = -1; /* the daemon's default */
    json_t *o = parse_object(&c, text, len, true);
    if (!o) return result(&c);
    if (json_object_get(o, "per_sample_bytes"))
        refuse(&c, 422, "invalid_value",
               "field \"per_sample_bytes\" is no longer accepted: vramd does not assume memory "
               "grows linearly with the batch; send \"batch_bytes\", the memory at each smaller "
               "batch (docs/daemon.md)");
    only_known_fields(&c, o, known);
    if (!c.failed && !json_object_get(o, "mem_bytes"))
        refuse(&c, 422, "invalid_value", "field \"mem_bytes\" is required (bytes per GPU)");
    long long gpus = 0, prio = 0, pid = 0, batch = 0, minb = 0, maxb = 0;
    get_string(&c, o, "name", q->name, sizeof q->name);
    /* every user's terminal shows names (vram jobs, top, history, alerts) */
    if (!c.failed && !vram_text_printable(q->name))
        refuse(&c, 422, "invalid_value",
               "field \"name\" holds a control character (names are printable text)");
    get_string(&c, o, "command", q->command, sizeof q->command);
    get_size(&c, o, "mem_bytes", &q->mem_bytes);
    get_int(&c, o, "gpus", 1, VRAM_SCHED_MAX_GPUS, &gpus);
    get_int(&c, o, "priority", -1000000, 1000000, &prio);
    get_number(&c, o, "timeout_s", 0, 365.0 * 86400, &q->timeout_s);
    get_int(&c, o, "pid", 0, (1LL << 31) - 1, &pid); /* pid_t range */
    get_int(&c, o, "batch_size", 0, 1LL << 30, &batch);
    get_int(&c, o, "min_batch_size", 0, 1LL << 30, &minb);
    get_int(&c, o, "max_batch_size", 0, 1LL << 30, &maxb); /* a retry's cap (vram run) */
    get_batch_bytes(&c, o, q);
    get_devices(&c, o, q);
    get_labels(&c, o, q);
    json_decref(o);
    if (!c.failed && q->mem_bytes == 0)
        refuse(&c, 422, "invalid_value", "field \"mem_bytes\" must be greater than 0");
    q->gpus = (int)gpus;
    q->priority = (int)prio;
    q->pid = (pid_t)pid;
    q->batch_size = (uint32_t)batch;
    q->min_batch_size = (uint32_t)minb;
    q->max_batch_size = (uint32_t)maxb;
    if (!c.failed && vram_job_batch_bytes_check(q) != 0)
        refuse(&c, 422, "invalid_value", "%s", vram_last_error());
    return result(&c);
}

const char *vram_end_reason_name(vram_end_reason_t r)
{
    return r == VRAM_END_OOM ? "oom" : "exit";
}

int vram_end_reason_parse(const char *name)
{
    if (name && !strcmp(name, "exit")) return VRAM_END_EXIT;
    if (name && !strcmp(name, "oom")) return VRAM_END_OOM;
    return -1;
}

int vram_job_finish_decode(const char *text, size_t len, vram_job_end_t *end,
                           vram_request_error_t *err)
{
    static const char *const known[] = {"exit_status", "error", "reason", "retry_batch", NULL};
    check_t c = {err, false};
    memset(err, 0, sizeof *err);
    memset(end, 0, sizeof *end);
    json_t *o = parse_object(&c, text, len, false);
    if (!o) return result(&c);
    long long status = 0, retry = 0;
    char reason[16] = "exit";
    only_known_fields(&c, o, known);
    get_int(&c, o, "exit_status", -1000, 1000, &status);
    get_string(&c, o, "error", end->error, sizeof end->error);
    get_string(&c, o, "reason", reason, sizeof reason);
    get_int(&c, o, "retry_batch", 0, INT32_MAX, &retry);
    int r = vram_end_reason_parse(reason);
    if (!c.failed && r < 0)
        refuse(&c, 422, "invalid_value", "field \"reason\" is \"%s\"; it must be exit or oom",
               reason);
    else if (!c.failed && retry && r != VRAM_END_OOM)
        refuse(&c, 422, "invalid_value", "field \"retry_batch\" goes with \"reason\": \"oom\"");
    json_decref(o);
    end->exit_status = (int)status;
    end->reason = r < 0 ? VRAM_END_EXIT : (vram_end_reason_t)r;
    end->retry_batch = (uint32_t)retry;
    return result(&c);
}

int vram_job_peak_decode(const char *text, size_t len, uint64_t *peak_bytes,
                         vram_request_error_t *err)
{
    static const char *const known[] = {"peak_bytes", NULL};
    check_t c = {err, false};
    memset(err, 0, sizeof *err);
    *peak_bytes = 0;
    json_t *o = parse_object(&c, text, len, true);
    if (!o) return result(&c);
    only_known_fields(&c, o, known);
    if (!c.failed && !field(&c, o, "peak_bytes"))
        refuse(&c, 422, "invalid_value", "field \"peak_bytes\" is required (bytes per GPU)");
    long long peak = 0;
    get_int(&c, o, "peak_bytes", 0, (long long)MAX_BYTES, &peak);
    json_decref(o);
    if (!c.failed) *peak_bytes = (uint64_t)peak;
    return result(&c);
}
