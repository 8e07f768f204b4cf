/* JSON views of the scheduler: the bodies of /v1/jobs, /v1/status, /v1/devices. */
#include "sched_internal.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static json_t *int_array(const int *v, int n)
{
    json_t *a = json_array();
    for (int i = 0; i < n; i++)
        json_array_append_new(a, json_integer(v[i]));
    return a;
}

static json_t *job_json(const vram_job_t *j)
{
    const vram_job_request_t *r = &j->req;
    json_t *o = json_object();
    json_object_set_new(o, "id", json_integer(j->id));
    json_object_set_new(o, "name", json_string(r->name));
    json_object_set_new(o, "state", json_string(vram_job_state_name(j->state)));
    json_object_set_new(o, "owner_uid", json_integer(r->uid));
    json_object_set_new(o, "pid", json_integer(r->pid));
    json_object_set_new(o, "command", json_string(r->command));
    json_object_set_new(o, "mem_bytes", json_integer((json_int_t)r->mem_bytes));
    json_object_set_new(o, "gpus", json_integer(r->gpus));
    json_object_set_new(o, "priority", json_integer(r->priority));
    json_object_set_new(o, "timeout_s", json_real(r->timeout_s));
    json_object_set_new(o, "pinned", int_array(r->pinned, r->npinned));
    json_object_set_new(o, "batch_size", json_integer(r->batch_size));
    json_object_set_new(o, "min_batch_size", json_integer(r->min_batch_size));
    json_object_set_new(o, "per_sample_bytes", json_integer((json_int_t)r->per_sample_bytes));
    json_object_set_new(o, "max_batch_size", json_integer(r->max_batch_size));
    json_object_set_new(o, "devices", int_array(j->devices, j->ndevices));
    json_object_set_new(o, "reserved_bytes", json_integer((json_int_t)j->reserved_bytes));
    json_object_set_new(o, "granted_batch_size", json_integer(j->granted_batch));
    json_object_set_new(o, "grad_accum", json_integer(j->grad_accum));
    json_object_set_new(
        o, "degraded",
        json_boolean(j->granted_batch && r->batch_size && j->granted_batch < r->batch_size));
    json_object_set_new(o, "submitted_at", json_real(j->submitted_at));
    json_object_set_new(o, "started_at", j->started_at ? json_real(j->started_at) : json_null());
    json_object_set_new(o, "ended_at", j->ended_at ? json_real(j->ended_at) : json_null());
    json_object_set_new(o, "exit_status",
                        j->exit_status >= 0 && j->ended_at ? json_integer(j->exit_status)
                                                           : json_null());
    json_object_set_new(o, "error", json_string(j->error));
    return o;
}

static int queue_before(const sched_job_t *a, const sched_job_t *b)
{
    if (a->job.req.priority != b->job.req.priority)
        return a->job.req.priority > b->job.req.priority;
    return a->job.id < b->job.id;
}

/* 1-based place among queued jobs, 0 when not queued. */
static int queue_position(vram_sched_t *s, const sched_job_t *j)
{
    if (j->job.state != VRAM_JOB_QUEUED) return 0;
    int pos = 1;
    for (size_t i = 0; i < s->nactive; i++) {
        const sched_job_t *o = s->active[i];
        if (o != j && o->job.state == VRAM_JOB_QUEUED && queue_before(o, j)) pos++;
    }
    return pos;
}

static json_t *active_json(vram_sched_t *s, const sched_job_t *j)
{
    json_t *o = job_json(&j->job);
    json_object_set_new(o, "queue_position", json_integer(queue_position(s, j)));
    if (j->job.state == VRAM_JOB_RUNNING) {
        uint64_t used = 0;
        for (int k = 0; k < j->job.ndevices; k++)
            used += j->used_bytes[k];
        json_object_set_new(o, "used_bytes", json_integer((json_int_t)used));
        json_object_set_new(o, "over_reservation", json_boolean(j->over_reported));
        json_object_set_new(o, "lease_s", json_real(s->cfg.lease_s));
    }
    return o;
}

static char *dump(json_t *v)
{
    char *text = v ? json_dumps(v, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(v);
    return text;
}

static sched_job_t *find(vram_sched_t *s, int64_t id)
{
    for (size_t i = 0; i < s->nactive; i++)
        if (s->active[i]->job.id == id) return s->active[i];
    return NULL;
}

char *vram_sched_job_json(vram_sched_t *s, int64_t id)
{
    pthread_mutex_lock(&s->lock);
    json_t *o = NULL;
    sched_job_t *j = find(s, id);
    if (j) {
        o = active_json(s, j);
    } else {
        vram_job_t old;
        if (vram_store_get_job(s->store, id, &old) == 0) {
            o = job_json(&old);
            json_object_set_new(o, "queue_position", json_integer(0));
        }
    }
    pthread_mutex_unlock(&s->lock);
    if (!o) return NULL;
    return dump(o);
}

static int append_ended(void *arg, const vram_job_t *job, uint64_t pid_start)
{
    (void)pid_start;
    json_t *o = job_json(job);
    json_object_set_new(o, "queue_position", json_integer(0));
    json_array_append_new(arg, o);
    return 0;
}

char *vram_sched_jobs_json(vram_sched_t *s, int limit)
{
    json_t *jobs = json_array();
    pthread_mutex_lock(&s->lock);
    for (size_t i = 0; i < s->nactive; i++)
        json_array_append_new(jobs, active_json(s, s->active[i]));
    if (limit > 0) (void)vram_store_list_ended(s->store, limit, append_ended, jobs);
    pthread_mutex_unlock(&s->lock);
    return dump(json_pack("{s:o}", "jobs", jobs));
}

char *vram_sched_status_json(vram_sched_t *s)
{
    pthread_mutex_lock(&s->lock);
    sched_dev_t *devs = calloc((size_t)s->ndev + 1, sizeof *devs);
    if (!devs || vram_ledger_probe(s, devs, true) != 0) {
        pthread_mutex_unlock(&s->lock);
        free(devs);
        return NULL;
    }
    json_t *dl = json_array();
    uint64_t total_reserved = 0, pending_bytes = 0;
    for (int d = 0; d < s->ndev; d++) {
        const sched_dev_t *v = &devs[d];
        uint64_t free_adm = v->usable > v->reserved ? v->usable - v->reserved : 0;
        total_reserved += v->reserved;
        json_t *o = json_object();
        json_object_set_new(o, "index", json_integer(d));
        json_object_set_new(o, "name", json_string(v->name));
        json_object_set_new(o, "available", json_boolean(v->ok));
        json_object_set_new(o, "total_bytes", json_integer((json_int_t)v->total));
        json_object_set_new(o, "used_bytes", json_integer((json_int_t)v->used));
        json_object_set_new(o, "unmanaged_bytes", json_integer((json_int_t)v->unmanaged));
        json_object_set_new(o, "safety_margin_bytes", json_integer((json_int_t)v->margin));
        json_object_set_new(o, "usable_bytes", json_integer((json_int_t)v->usable));
        json_object_set_new(o, "reserved_bytes", json_integer((json_int_t)v->reserved));
        json_object_set_new(o, "free_for_admission_bytes",
                            json_integer((json_int_t)(v->ok ? free_adm : 0)));
        json_object_set_new(o, "running_jobs", json_integer(v->jobs));
        json_array_append_new(dl, o);
    }
    json_t *pending = json_array();
    int nrun = 0, nq = 0;
    for (size_t i = 0; i < s->nactive; i++) {
        const sched_job_t *j = s->active[i];
        if (j->job.state == VRAM_JOB_RUNNING) {
            nrun++;
            continue;
        }
        nq++;
        pending_bytes += j->job.req.mem_bytes * (uint64_t)j->job.req.gpus;
        json_array_append_new(
            pending, json_pack("{s:I,s:s,s:I,s:i,s:i,s:i}", "id", (json_int_t)j->job.id, "name",
                               j->job.req.name, "mem_bytes", (json_int_t)j->job.req.mem_bytes,
                               "gpus", j->job.req.gpus, "priority", j->job.req.priority,
                               "queue_position", queue_position(s, j)));
    }
    json_t *cfg = json_pack("{s:s,s:s,s:b,s:i,s:f,s:f}", "placement",
                            s->cfg.placement == VRAM_PLACE_BEST_FIT ? "best-fit" : "least-loaded",
                            "safety_margin", s->cfg.safety_margin, "backfill", s->cfg.backfill,
                            "max_concurrent_jobs", s->cfg.max_concurrent_jobs, "job_timeout_s",
                            s->cfg.job_timeout_s, "lease_s", s->cfg.lease_s);
    pthread_mutex_unlock(&s->lock);
    free(devs);
    return dump(json_pack("{s:o,s:i,s:i,s:I,s:I,s:o,s:o}", "devices", dl, "active_jobs", nrun,
                          "pending_jobs", nq, "total_reserved_bytes", (json_int_t)total_reserved,
                          "pending_bytes", (json_int_t)pending_bytes, "pending", pending, "config",
                          cfg));
}

char *vram_sched_devices_json(vram_sched_t *s)
{
    json_t *dl = json_array();
    for (int d = 0; d < s->ndev; d++) {
        vram_device_info_t info;
        memset(&info, 0, sizeof info);
        info.total_bytes = info.used_bytes = info.free_bytes = VRAM_UNKNOWN_U64;
        json_t *o = json_object();
        json_object_set_new(o, "index", json_integer(d));
        if (s->dev.info(s->dev.arg, d, &info) == 0) {
            json_object_set_new(o, "name", json_string(info.name));
            json_object_set_new(o, "uuid", json_string(info.uuid));
            json_object_set_new(o, "backend", json_string(info.backend));
            json_object_set_new(o, "total_bytes", json_integer((json_int_t)info.total_bytes));
            json_object_set_new(o, "used_bytes",
                                info.used_bytes == VRAM_UNKNOWN_U64
                                    ? json_null()
                                    : json_integer((json_int_t)info.used_bytes));
            json_object_set_new(o, "free_bytes",
                                info.free_bytes == VRAM_UNKNOWN_U64
                                    ? json_null()
                                    : json_integer((json_int_t)info.free_bytes));
            json_object_set_new(o, "health", json_string(vram_health_name(info.health)));
        } else {
            json_object_set_new(o, "error", json_string(vram_last_error()));
        }
        json_array_append_new(dl, o);
    }
    return dump(json_pack("{s:o}", "devices", dl));
}

static void append_event(void *arg, double at, const char *kind, const char *message)
{
    json_array_append_new(arg,
                          json_pack("{s:f,s:s,s:s}", "at", at, "kind", kind, "message", message));
}

char *vram_sched_events_json(vram_sched_t *s, int64_t id)
{
    json_t *events = json_array();
    vram_job_t job;
    pthread_mutex_lock(&s->lock);
    int rc = find(s, id) ? 0 : vram_store_get_job(s->store, id, &job);
    if (rc == 0) rc = vram_store_list_events(s->store, id, append_event, events);
    pthread_mutex_unlock(&s->lock);
    if (rc) {
        json_decref(events);
        return NULL;
    }
    return dump(json_pack("{s:I,s:o}", "id", (json_int_t)id, "events", events));
}
