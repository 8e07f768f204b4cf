/* Job labels ({"slurm_job_id": "123", ...}): the one place that says what a
 * label may be, used by the request decoder, the store and the job JSON. Keys
 * are Prometheus-safe (they become label_<key>), values short and printable,
 * so metrics and terminals never see control bytes. */
#include "sched_internal.h"
#include "core/escape.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool key_ok(const char *k)
{
    size_t n = strlen(k);
    if (n == 0 || n > 32 || !((k[0] >= 'a' && k[0] <= 'z') || k[0] == '_')) return false;
    for (size_t i = 1; i < n; i++)
        if (!((k[i] >= 'a' && k[i] <= 'z') || (k[i] >= '0' && k[i] <= '9') || k[i] == '_'))
            return false;
    return true;
}

static bool value_ok(const char *v, size_t len)
{
    if (len > 64 || strlen(v) != len) return false; /* a NUL inside */
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)v[i] < 0x20 || (unsigned char)v[i] > 0x7e) return false;
    return true;
}

static int by_key(const void *a, const void *b)
{
    return strcmp(((const vram_job_label_t *)a)->key, ((const vram_job_label_t *)b)->key);
}

int vram_labels_parse(json_t *obj, vram_job_request_t *r, char *why, size_t len)
{
    r->nlabels = 0;
    if (!json_is_object(obj)) {
        snprintf(why, len, "field \"labels\" must be an object of string labels");
        return 400;
    }
    if (json_object_size(obj) > VRAM_JOB_MAX_LABELS) {
        snprintf(why, len, "field \"labels\" has %zu labels; at most %d are allowed",
                 json_object_size(obj), VRAM_JOB_MAX_LABELS);
        return 422;
    }
    const char *key;
    json_t *v;
    json_object_foreach(obj, key, v)
    {
        char shown[48];
        vram_escape_text(key, shown, sizeof shown);
        if (!json_is_string(v)) {
            snprintf(why, len, "field \"labels\": label \"%s\" must be a string", shown);
            return 400;
        }
        if (!key_ok(key)) {
            snprintf(why, len, "field \"labels\": key \"%s\" must match [a-z_][a-z0-9_]{0,31}",
                     shown);
            return 422;
        }
        if (!value_ok(json_string_value(v), json_string_length(v))) {
            snprintf(why, len,
                     "field \"labels\": label \"%s\" must be at most 64 printable ASCII bytes",
                     key);
            return 422;
        }
        vram_job_label_t *l = &r->labels[r->nlabels++];
        snprintf(l->key, sizeof l->key, "%s", key);
        snprintf(l->value, sizeof l->value, "%s", json_string_value(v));
    }
    qsort(r->labels, (size_t)r->nlabels, sizeof r->labels[0], by_key);
    return 0;
}

void vram_labels_write(vram_jw_t *w, const char *key, const vram_job_request_t *r)
{
    vram_jw_open(w, key, '{');
    for (int i = 0; i < r->nlabels; i++) /* sorted by key already */
        vram_jw_string(w, r->labels[i].key, r->labels[i].value);
    vram_jw_close(w, '}');
}

char *vram_labels_dump(const vram_job_request_t *r)
{
    vram_jw_t w = {0};
    vram_labels_write(&w, NULL, r);
    return vram_jw_finish(&w);
}

void vram_labels_load(const char *text, vram_job_request_t *r)
{
    char why[160];
    json_t *o = json_loads(text, 0, NULL);
    /* Written by vram_labels_dump; anything else (a hand-edited database)
     * is dropped rather than trusted. */
    if (!o || vram_labels_parse(o, r, why, sizeof why) != 0) r->nlabels = 0;
    json_decref(o);
}
