/* vram_estimate_json / vram_plan_json: the estimator and the planner for
 * callers that speak JSON instead of C structs (the Python package). The
 * request carries the same knobs as `vram estimate` / `vram plan`; the reply
 * has the keys of their --json output. */
#include "plan/estimate_json.h"
#include "vram.h"
#include "estimate_limits.h"
#include "gpu_names.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

/* A parsed request: the model, the estimate settings and the planner target. */
typedef struct {
    vram_model_t model;
    vram_estimate_config_t est;
    vram_plan_config_t dev;
    bool host;         /* "host": the budget is host memory (vram_plan_host) */
    int64_t min_batch; /* "min_batch_size" of a batch table request */
    char gpu_label[160];
} request_t;

/* Besides the estimate settings (vram_estimate_settings): the model's keys,
 * and the planner's target. */
static const char *const model_keys[] = {"model", "hf_config", "profile", NULL};
static const char *const plan_keys[] = {"gpu",          "gpu_mem", "gpu_name", "target",
                                        "power_of_two", "host",    NULL};
static const char *const table_keys[] = {"min_batch_size", NULL};
static const char *const no_keys[] = {NULL};

/* What a request is for: which keys besides the settings it takes. */
typedef enum { REQ_ESTIMATE, REQ_PLAN, REQ_TABLE } request_kind_t;

static bool listed(const char *key, const char *const *keys)
{
    for (; *keys; keys++)
        if (!strcmp(key, *keys)) return true;
    return false;
}

/* An integer field in [min, max]; absent leaves *out alone. */
static int get_int(json_t *req, const char *key, int64_t min, int64_t max, int64_t *out)
{
    json_t *v = json_object_get(req, key);
    if (!v) return 0;
    if (!json_is_integer(v)) return vram_fail(VRAM_EINVAL, "\"%s\" must be an integer", key);
    json_int_t n = json_integer_value(v);
    if (n < min || n > max)
        return vram_fail(VRAM_EINVAL, "\"%s\" is %lld; it must be in [%lld, %lld]", key,
                         (long long)n, (long long)min, (long long)max);
    *out = n;
    return 0;
}

/* A size: an integer of bytes or a text such as "24GiB". */
static int get_size(json_t *req, const char *key, uint64_t *out)
{
    json_t *v = json_object_get(req, key);
    if (json_is_string(v)) {
        if (vram_parse_size(json_string_value(v), out))
            return vram_fail(VRAM_EINVAL, "\"%s\": %s", key, vram_last_error());
        return 0;
    }
    int64_t n = 0;
    int rc = get_int(req, key, 0, VRAM_MAX_BYTES, &n);
    if (!rc && v) *out = (uint64_t)n;
    return rc;
}

static int read_model(json_t *req, vram_model_t *m)
{
    json_t *name = json_object_get(req, "model"), *hf = json_object_get(req, "hf_config"),
           *prof = json_object_get(req, "profile");
    if ((name != NULL) + (hf != NULL) + (prof != NULL) != 1)
        return vram_fail(VRAM_EINVAL,
                         "give exactly one of \"model\", \"hf_config\" or \"profile\"");
    if (name) {
        if (!json_is_string(name)) return vram_fail(VRAM_EINVAL, "\"model\" must be a string");
        return vram_model_find(json_string_value(name), m);
    }
    if (json_is_string(hf)) return vram_model_from_hf_config(json_string_value(hf), m);
    if (json_is_string(prof)) return vram_model_from_profile(json_string_value(prof), m);
    /* the file's content, as an object */
    json_t *obj = hf ? hf : prof;
    if (!json_is_object(obj))
        return vram_fail(VRAM_EINVAL, "\"%s\" must be a file name or the file's JSON object",
                         hf ? "hf_config" : "profile");
    char *text = json_dumps(obj, JSON_COMPACT);
    if (!text) return vram_fail(VRAM_ENOMEM, "out of memory");
    int rc = hf ? vram_model_from_hf_json(text, "hf_config", m)
                : vram_model_from_profile_json(text, "profile", m);
    free(text);
    return rc;
}

/* One setting's JSON value as the text vram_estimate_set reads, checking
 * the JSON type the setting's type asks for. */
static int setting_text(const vram_estimate_setting_t *st, json_t *v, char *buf, size_t len)
{
    switch (st->type) {
    case VRAM_SETTING_INT:
        if (!json_is_integer(v))
            return vram_fail(VRAM_EINVAL, "\"%s\" must be an integer", st->key);
        snprintf(buf, len, "%lld", (long long)json_integer_value(v));
        return 0;
    case VRAM_SETTING_NUMBER:
        if (!json_is_number(v)) return vram_fail(VRAM_EINVAL, "\"%s\" must be a number", st->key);
        snprintf(buf, len, "%.17g", json_number_value(v));
        return 0;
    case VRAM_SETTING_BOOL:
        if (!json_is_boolean(v))
            return vram_fail(VRAM_EINVAL, "\"%s\" must be true or false", st->key);
        snprintf(buf, len, "%s", json_is_true(v) ? "on" : "off");
        return 0;
    case VRAM_SETTING_SIZE:
        if (json_is_integer(v)) {
            if (json_integer_value(v) < 0)
                return vram_fail(VRAM_EINVAL, "\"%s\" cannot be negative", st->key);
            snprintf(buf, len, "%lld", (long long)json_integer_value(v));
            return 0;
        }
        /* a size text, read like a name */
        __attribute__((fallthrough));
    case VRAM_SETTING_NAME:
    case VRAM_SETTING_TEXT:
        if (!json_is_string(v))
            return vram_fail(VRAM_EINVAL, "\"%s\" must be a string%s", st->key,
                             st->type == VRAM_SETTING_SIZE ? " or an integer of bytes" : "");
        if (json_string_length(v) >= len)
            return vram_fail(VRAM_EINVAL, "\"%s\" is too long", st->key);
        snprintf(buf, len, "%s", json_string_value(v));
        return 0;
    }
    return vram_fail(VRAM_EINVAL, "\"%s\": unknown type", st->key);
}

/* Every estimate setting of the request, through the one table. */
static int read_settings(json_t *req, vram_estimate_config_t *e)
{
    const char *key;
    json_t *v;
    json_object_foreach(req, key, v)
    {
        const vram_estimate_setting_t *st = vram_estimate_setting_find(key);
        if (!st || !strncmp(key, "--", 2)) continue; /* keys, not "--flags" */
        char text[256];
        int rc = setting_text(st, v, text, sizeof text);
        if (!rc) rc = vram_estimate_set(e, key, text);
        if (rc) return rc;
    }
    return 0;
}

/* Capacity from exactly one of "gpu" (device index, its free memory now),
 * "gpu_mem" (bytes, all free) or "gpu_name" (the table of GPU models). */
static int read_target(json_t *req, request_t *r)
{
    vram_plan_config_t *pc = &r->dev;
    json_t *gpu = json_object_get(req, "gpu"), *mem = json_object_get(req, "gpu_mem"),
           *name = json_object_get(req, "gpu_name"), *t = json_object_get(req, "target"),
           *p2 = json_object_get(req, "power_of_two"), *host = json_object_get(req, "host");
    if ((gpu != NULL) + (mem != NULL) + (name != NULL) != 1)
        return vram_fail(VRAM_EINVAL, "give exactly one of \"gpu\", \"gpu_mem\" or \"gpu_name\"");
    if (t) {
        if (!json_is_number(t) || !(json_number_value(t) > 0 && json_number_value(t) <= 1))
            return vram_fail(VRAM_EINVAL, "\"target\" must be a fraction in (0, 1]");
        pc->target = json_number_value(t);
    }
    if (p2) {
        if (!json_is_boolean(p2))
            return vram_fail(VRAM_EINVAL, "\"power_of_two\" must be true or false");
        pc->power_of_two = json_is_true(p2);
    }
    if (host) {
        if (!json_is_boolean(host)) return vram_fail(VRAM_EINVAL, "\"host\" must be true or false");
        r->host = json_is_true(host);
    }
    int rc;
    if (mem) {
        if ((rc = get_size(req, "gpu_mem", &pc->total_bytes))) return rc;
        if (!pc->total_bytes) return vram_fail(VRAM_EINVAL, "\"gpu_mem\" must be positive");
        pc->free_bytes = pc->total_bytes;
        snprintf(r->gpu_label, sizeof r->gpu_label, "%.2f GiB GPU", vram_gib(pc->total_bytes));
        return 0;
    }
    if (name) {
        const vram_gpu_model_t *g =
            json_is_string(name) ? vram_gpu_model_resolve(json_string_value(name), NULL) : NULL;
        if (!g) return vram_gpu_model_unknown(json_is_string(name) ? json_string_value(name) : "");
        pc->total_bytes = pc->free_bytes = g->total_bytes;
        snprintf(r->gpu_label, sizeof r->gpu_label, "%s", g->name);
        return 0;
    }
    int64_t idx = 0;
    if ((rc = get_int(req, "gpu", 0, 1 << 20, &idx))) return rc;
    vram_ctx_t *ctx;
    if ((rc = vram_ctx_open(&ctx))) return rc;
    vram_device_info_t info;
    rc = vram_device_info(ctx, (int)idx, &info);
    vram_ctx_close(ctx);
    if (rc) return rc;
    if (info.total_bytes == VRAM_UNKNOWN_U64 || info.free_bytes == VRAM_UNKNOWN_U64)
        return vram_fail(VRAM_EDRIVER, "GPU %lld does not report its memory", (long long)idx);
    pc->total_bytes = info.total_bytes;
    pc->free_bytes = info.free_bytes;
    pc->used_bytes =
        info.used_bytes != VRAM_UNKNOWN_U64 ? info.used_bytes : info.total_bytes - info.free_bytes;
    snprintf(r->gpu_label, sizeof r->gpu_label, "GPU %lld: %s (%s)", (long long)idx, info.name,
             info.backend);
    return 0;
}

/* Parses the request; REQ_PLAN allows (and requires) the target keys,
 * REQ_TABLE allows "min_batch_size" (default 1). */
static int read_request(const char *text, request_kind_t kind, request_t *r)
{
    bool plan = kind == REQ_PLAN;
    const char *const *extra = plan ? plan_keys : kind == REQ_TABLE ? table_keys : no_keys;
    if (!text) return vram_fail(VRAM_EINVAL, "NULL request");
    memset(r, 0, sizeof *r);
    vram_estimate_config_init(&r->est);
    vram_plan_config_init(&r->dev);
    json_error_t jerr;
    json_t *req = json_loads(text, JSON_REJECT_DUPLICATES, &jerr);
    if (!req)
        return vram_fail(VRAM_EPARSE, "request: %s at line %d, column %d", jerr.text, jerr.line,
                         jerr.column);
    int rc = 0;
    const char *key;
    json_t *v;
    if (!json_is_object(req)) {
        rc = vram_fail(VRAM_EPARSE, "request: not a JSON object");
        goto out;
    }
    const char *seen[VRAM_MAX_SETTINGS] = {0};
    json_object_foreach(req, key, v)
    {
        const vram_estimate_setting_t *st = vram_estimate_setting_find(key);
        bool setting = st && strncmp(key, "--", 2);
        if (setting && !listed(key, model_keys) && !listed(key, plan_keys) &&
            !listed(key, table_keys)) {
            /* one setting under two spellings ("zero" and "zero_stage") */
            size_t count;
            const vram_estimate_setting_t *all = vram_estimate_settings(&count);
            size_t idx = (size_t)(st - all);
            if (seen[idx]) {
                rc = vram_fail(VRAM_EINVAL, "\"%s\" and \"%s\" are the same setting: give one",
                               seen[idx], key);
                goto out;
            }
            seen[idx] = key;
        }
        if (!setting && !listed(key, model_keys) && !listed(key, extra)) {
            rc = vram_fail(VRAM_EINVAL,
                           "unknown key \"%s\" in the request (the estimate settings are "
                           "those of vram_estimate_settings: `vram estimate --help`)",
                           key);
            goto out;
        }
    }
    bool batch_given = json_object_get(req, "batch_size") != NULL;
    if ((rc = read_model(req, &r->model)) || (rc = read_settings(req, &r->est))) goto out;
    /* validate the workload before touching a device */
    vram_estimate_t probe;
    if ((rc = vram_estimate(&r->model, &r->est, &probe))) goto out;
    if (plan) {
        if ((rc = read_target(req, r))) goto out;
        r->dev.batch_size = batch_given ? r->est.batch_size : 0;
    }
    r->min_batch = 1;
    if (kind == REQ_TABLE &&
        (rc = get_int(req, "min_batch_size", 1, (int64_t)r->est.batch_size, &r->min_batch)))
        goto out;
out:
    json_decref(req);
    return rc;
}

static int reply(json_t *root, char **out)
{
    *out = root ? json_dumps(root, JSON_COMPACT) : NULL;
    json_decref(root);
    return *out ? 0 : vram_fail(VRAM_ENOMEM, "out of memory formatting the reply");
}

int vram_estimate_json(const char *request, char **out)
{
    if (!out) return vram_fail(VRAM_EINVAL, "vram_estimate_json: NULL out");
    *out = NULL;
    request_t r;
    int rc = read_request(request, REQ_ESTIMATE, &r);
    if (rc) return rc;
    vram_estimate_t e;
    if ((rc = vram_estimate(&r.model, &r.est, &e))) return rc;
    return reply(vram_estimate_to_json(&r.model, &r.est, &e), out);
}

int vram_plan_json(const char *request, char **out)
{
    if (!out) return vram_fail(VRAM_EINVAL, "vram_plan_json: NULL out");
    *out = NULL;
    request_t r;
    int rc = read_request(request, REQ_PLAN, &r);
    if (rc) return rc;
    vram_plan_t p;
    if ((rc = (r.host ? vram_plan_host : vram_plan)(&r.model, &r.est, &r.dev, &p))) return rc;
    return reply(vram_plan_to_json(&r.model, &r.est, &r.dev, &p, r.gpu_label), out);
}

json_t *vram_batch_bytes_to_json(const vram_batch_bytes_t *t, int n)
{
    json_t *list = json_array();
    for (int i = 0; list && i < n; i++)
        json_array_append_new(list, json_pack("{s:I,s:I}", "batch", (json_int_t)t[i].batch, "bytes",
                                              (json_int_t)t[i].bytes));
    return list;
}

int vram_batch_table_json(const char *request, char **out)
{
    if (!out) return vram_fail(VRAM_EINVAL, "vram_batch_table_json: NULL out");
    *out = NULL;
    request_t r;
    int rc = read_request(request, REQ_TABLE, &r);
    if (rc) return rc;
    vram_batch_bytes_t t[VRAM_BATCH_TABLE_MAX];
    int n = 0;
    if ((rc =
             vram_estimate_batch_table(&r.model, &r.est, r.min_batch, t, VRAM_BATCH_TABLE_MAX, &n)))
        return rc;
    json_t *root = json_object(), *list = vram_batch_bytes_to_json(t, n);
    if (root && list) {
        json_object_set_new(root, "batch_size", json_integer((json_int_t)r.est.batch_size));
        json_object_set_new(root, "min_batch_size", json_integer((json_int_t)r.min_batch));
        json_object_set_new(root, "mem_bytes", json_integer((json_int_t)t[n - 1].bytes));
        json_object_set_new(root, "batch_bytes", list);
        list = NULL;
    }
    json_decref(list);
    return reply(root, out);
}

void vram_json_free(char *text)
{
    free(text);
}
