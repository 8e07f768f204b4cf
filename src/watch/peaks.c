/* Peaks: the most memory seen per device, per process (on a device) and per
 * job (over all its devices) since the last reset. */
#include "watch_internal.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Processes come and go: past this many the table starts over rather than
 * grow without bound. */
#define MAX_PROCESS_PEAKS 65536
#define MAX_JOB_PEAKS     65536

static uint64_t process_key(int device, pid_t pid)
{
    return ((uint64_t)(unsigned)device << 32 | (uint32_t)pid) + 1;
}

static void raise_to(vram_map_t *m, uint64_t key, uint64_t v, size_t cap)
{
    uint64_t old = 0;
    if (vram_map_get(m, key, &old) && old >= v) return;
    if (m->count >= cap && !vram_map_get(m, key, NULL)) vram_map_clear(m);
    (void)vram_map_put(m, key, v);
}

/* Keeps the name a process had when first seen: once it exits, its peak
 * still says what it was. Bounded like the peaks. */
static void remember_name(watch_peaks_t *p, uint64_t key, const char *name)
{
    if (vram_map_get(&p->process_name, key, NULL)) return;
    if (p->nnames >= MAX_PROCESS_PEAKS) {
        vram_map_clear(&p->process_name);
        p->nnames = 0;
    }
    if (!vram_watch_grow((void **)&p->names, &p->names_cap, p->nnames + 1, sizeof *p->names))
        return;
    snprintf(p->names[p->nnames], sizeof p->names[0], "%s", name);
    if (vram_map_put(&p->process_name, key, p->nnames + 1)) p->nnames++;
}

void vram_watch_peaks_free(watch_peaks_t *p)
{
    vram_map_clear(&p->process);
    vram_map_clear(&p->job);
    vram_map_clear(&p->process_name);
    free(p->names);
    p->names = NULL;
    p->nnames = p->names_cap = 0;
}

void vram_watch_peaks_add(watch_peaks_t *p, const watch_sample_t *s)
{
    for (int d = 0; d < s->ndev; d++) {
        uint64_t u = s->devs[d].used_bytes;
        if (u != VRAM_UNKNOWN_U64 && u > p->device[d]) p->device[d] = u;
    }
    for (size_t i = 0; i < s->nprocs; i++)
        if (s->procs[i].used_bytes != VRAM_UNKNOWN_U64) {
            uint64_t key = process_key(s->procs[i].device, s->procs[i].pid);
            raise_to(&p->process, key, s->procs[i].used_bytes, MAX_PROCESS_PEAKS);
            remember_name(p, key, s->procs[i].name);
        }
    for (size_t i = 0; i < s->njobs; i++)
        if (s->jobs[i].state == VRAM_JOB_RUNNING)
            raise_to(&p->job, (uint64_t)s->jobs[i].id, vram_watch_job_used(s, s->jobs[i].id),
                     MAX_JOB_PEAKS);
}

typedef struct {
    int device; /* -1 = all */
    vram_map_t *keep;
} drop_t;

static void keep_other_devices(uint64_t key, uint64_t value, void *arg)
{
    drop_t *d = arg;
    if ((int)((key - 1) >> 32) != d->device) (void)vram_map_put(d->keep, key, value);
}

int vram_watch_reset_peaks(vram_watch_t *w, int device, int64_t job_id)
{
    if (!w) return vram_fail(VRAM_EINVAL, "NULL watch");
    if (device >= w->ndev)
        return vram_fail(VRAM_ENODEV, "device %d: no such device (%d devices)", device, w->ndev);
    int rc = 0;
    pthread_mutex_lock(&w->lock);
    watch_peaks_t *p = &w->peaks;
    double now = vram_watch_now(w);
    if (job_id > 0) {
        if (!vram_map_take(&p->job, (uint64_t)job_id, NULL))
            rc = vram_fail(VRAM_ENOENT, "job %lld has no peak (not seen running)",
                           (long long)job_id);
    } else if (device >= 0) {
        p->device[device] = 0;
        p->device_since[device] = now;
        vram_map_t keep = {0};
        drop_t d = {device, &keep};
        vram_map_each(&p->process, keep_other_devices, &d);
        vram_map_clear(&p->process);
        p->process = keep;
    } else {
        memset(p->device, 0, (size_t)w->ndev * sizeof *p->device);
        for (int i = 0; i < w->ndev; i++)
            p->device_since[i] = now;
        vram_map_clear(&p->process);
        vram_map_clear(&p->job);
        p->since = now;
    }
    pthread_mutex_unlock(&w->lock);
    return rc;
}

typedef struct {
    json_t *list;
    const watch_peaks_t *peaks;
    const watch_sample_t *last;
} process_list_t;

/* A process's peak with the name it had and whether it still runs (is in
 * the last sample). */
static void process_json(uint64_t key, uint64_t value, void *arg)
{
    process_list_t *l = arg;
    int device = (int)((key - 1) >> 32);
    pid_t pid = (pid_t)(uint32_t)(key - 1);
    uint64_t at = 0;
    const char *name = vram_map_get(&l->peaks->process_name, key, &at) && at <= l->peaks->nnames
                           ? l->peaks->names[at - 1]
                           : "";
    bool alive = false;
    for (size_t i = 0; i < l->last->nprocs && !alive; i++)
        alive = l->last->procs[i].pid == pid && l->last->procs[i].device == device;
    json_array_append_new(l->list, json_pack("{s:i,s:i,s:s,s:b,s:I}", "device", device, "pid",
                                             (int)pid, "name", name, "running", alive,
                                             "peak_used_bytes", (json_int_t)value));
}

static void job_json(uint64_t key, uint64_t value, void *arg)
{
    json_array_append_new(
        arg, json_pack("{s:I,s:I}", "id", (json_int_t)key, "peak_used_bytes", (json_int_t)value));
}

char *vram_watch_peaks_json(vram_watch_t *w)
{
    if (!w) {
        vram_fail(VRAM_EINVAL, "NULL watch");
        return NULL;
    }
    json_t *devs = json_array(), *procs = json_array(), *jobs = json_array();
    pthread_mutex_lock(&w->lock);
    const watch_peaks_t *p = &w->peaks;
    for (int d = 0; d < w->ndev; d++)
        json_array_append_new(devs,
                              json_pack("{s:i,s:I,s:f}", "index", d, "peak_used_bytes",
                                        (json_int_t)p->device[d], "since", p->device_since[d]));
    process_list_t pl = {procs, p, &w->last};
    vram_map_each(&p->process, process_json, &pl);
    vram_map_each(&p->job, job_json, jobs);
    double since = p->since;
    pthread_mutex_unlock(&w->lock);
    json_t *o = json_pack("{s:f,s:o,s:o,s:o}", "since", since, "devices", devs, "processes", procs,
                          "jobs", jobs);
    char *text = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(o);
    return text;
}
