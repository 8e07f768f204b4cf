/* vram_info_json: the devices of a context as one JSON document, with the
 * schema of `vram info --json` (docs/info-json.md). */
#include "device/info_json.h"
#include "core/proc.h"

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

vram_process_info_t *vram_device_process_list(vram_ctx_t *ctx, int index, size_t *n)
{
    vram_process_info_t *procs = NULL;
    *n = 0;
    /* the list may grow between the calls: retry a few times with room */
    for (int tries = 0; tries < 4; tries++) {
        size_t cap = *n + 8;
        vram_process_info_t *bigger = realloc(procs, cap * sizeof *procs);
        if (!bigger) {
            vram_fail(VRAM_ENOMEM, "out of memory listing processes");
            break;
        }
        procs = bigger;
        if (vram_device_processes(ctx, index, procs, cap, n)) break;
        if (*n <= cap) return procs;
        if (tries == 3) vram_fail(VRAM_EDRIVER, "the process list kept growing");
    }
    free(procs);
    return NULL;
}

/* The processes of one device; null when the driver cannot list them. */
static json_t *processes(vram_ctx_t *ctx, int index)
{
    size_t n;
    vram_process_info_t *procs = vram_device_process_list(ctx, index, &n);
    if (!procs) return json_null();
    json_t *list = json_array();
    for (size_t i = 0; i < n; i++) {
        char user[64], cmd[1024];
        vram_proc_user(procs[i].pid, user, sizeof user);
        vram_proc_command(procs[i].pid, cmd, sizeof cmd);
        json_array_append_new(list, json_pack("{s:i, s:o, s:o, s:o, s:o}", "pid", (int)procs[i].pid,
                                              "name", text_or_null(procs[i].name), "used_bytes",
                                              u64_or_null(procs[i].used_bytes), "user",
                                              text_or_null(user), "command", text_or_null(cmd)));
    }
    free(procs);
    return list;
}

json_t *vram_device_to_json(vram_ctx_t *ctx, const vram_device_info_t *d)
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
        json_array_append_new(devs, vram_device_to_json(ctx, &info));
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
