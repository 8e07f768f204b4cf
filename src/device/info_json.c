/* vram_info_json: the devices of a context as one JSON document, with the
 * schema of `vram info --json` (docs/info-json.md). */
#include "vram.h"

#include <jansson.h>
#include <stdlib.h>

static json_t *u64_or_null(uint64_t v)
{
    return v == VRAM_UNKNOWN_U64 ? json_null() : json_integer((json_int_t)v);
}

static json_t *int_or_null(int v)
{
    return v == VRAM_UNKNOWN_INT ? json_null() : json_integer(v);
}

static json_t *text_or_null(const char *s)
{
    return *s ? json_string(s) : json_null();
}

/* The processes of one device; null when the driver cannot list them. */
static json_t *processes(vram_ctx_t *ctx, int index)
{
    size_t n = 0, cap = 0;
    vram_process_info_t *procs = NULL;
    json_t *list = json_null();
    /* the list may grow between the calls: retry a few times with room */
    for (int tries = 0; tries < 4; tries++) {
        cap = n + 8;
        vram_process_info_t *bigger = realloc(procs, cap * sizeof *procs);
        if (!bigger) goto out;
        procs = bigger;
        if (vram_device_processes(ctx, index, procs, cap, &n)) goto out;
        if (n <= cap) break;
    }
    if (n > cap) goto out;
    list = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(list, json_pack("{s:i, s:o, s:o}", "pid", (int)procs[i].pid, "name",
                                              text_or_null(procs[i].name), "used_bytes",
                                              u64_or_null(procs[i].used_bytes)));
out:
    free(procs);
    return list;
}

static json_t *device(vram_ctx_t *ctx, const vram_device_info_t *d)
{
    json_t *o = json_object();
    json_object_set_new(o, "index", json_integer(d->index));
    json_object_set_new(o, "name", text_or_null(d->name));
    json_object_set_new(o, "uuid", text_or_null(d->uuid));
    json_object_set_new(o, "backend", json_string(d->backend));
    json_object_set_new(o, "total_bytes", u64_or_null(d->total_bytes));
    json_object_set_new(o, "used_bytes", u64_or_null(d->used_bytes));
    json_object_set_new(o, "free_bytes", u64_or_null(d->free_bytes));
    char cc[24];
    snprintf(cc, sizeof cc, "%d.%d", d->cc_major, d->cc_minor);
    json_object_set_new(o, "compute_capability",
                        d->cc_major == VRAM_UNKNOWN_INT || d->cc_minor == VRAM_UNKNOWN_INT
                            ? json_null()
                            : json_string(cc));
    json_object_set_new(o, "multiprocessors", int_or_null(d->multiprocessors));
    json_object_set_new(o, "utilization_pct", int_or_null(d->utilization_pct));
    json_object_set_new(o, "temperature_c", int_or_null(d->temperature_c));
    json_object_set_new(o, "power_w", d->power_w < 0 ? json_null() : json_real(d->power_w));
    json_object_set_new(o, "health", json_string(vram_health_name(d->health)));
    json_object_set_new(o, "error", text_or_null(d->error));
    json_object_set_new(o, "processes",
                        d->health == VRAM_HEALTH_ERROR ? json_null() : processes(ctx, d->index));
    return o;
}

int vram_info_json(vram_ctx_t *ctx, int index, char **out)
{
    if (!ctx || !out) return vram_fail(VRAM_EINVAL, "vram_info_json: NULL argument");
    *out = NULL;
    int count = vram_ctx_device_count(ctx);
    if (index < -1 || index >= count)
        return vram_fail(VRAM_ENODEV, "no device %d (%d device%s)", index, count,
                         count == 1 ? "" : "s");
    json_t *devs = json_array();
    int rc = 0;
    for (int i = index < 0 ? 0 : index; i < (index < 0 ? count : index + 1); i++) {
        vram_device_info_t info;
        if ((rc = vram_device_info(ctx, i, &info))) goto out;
        json_array_append_new(devs, device(ctx, &info));
    }
    json_t *root = json_pack("{s:s, s:s, s:i, s:O}", "backend", vram_ctx_backend(ctx), "reason",
                             vram_ctx_reason(ctx), "device_count", count, "devices", devs);
    *out = root ? json_dumps(root, JSON_COMPACT) : NULL;
    json_decref(root);
    if (!*out) rc = vram_fail(VRAM_ENOMEM, "out of memory formatting the device list");
out:
    json_decref(devs);
    return rc;
}
