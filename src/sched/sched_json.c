/* JSON views of the scheduler: the bodies of /v1/jobs, /v1/status, /v1/devices. */
#include "sched_internal.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

/* The pid and command line of a job are its owner's and root's business. */
static bool sees_private(const vram_job_t *j, int64_t viewer)
{
    return viewer == 0 || viewer == (int64_t)j->req.uid;
}

/* What a view needs of a job, copied under the lock so that the JSON is
 * written after it is released. Only queued and running jobs have a queue
 * position, usage and a lease. */
typedef struct {
    vram_job_t job;
    int queue_pos;
    uint64_t used;
    bool over;
    const char *wait_code; /* queued: why it waits (reason.c); NULL otherwise */
    char wait_text[240];
} job_copy_t;

static void copy_active(const vram_sched_t *s, const sched_job_t *j, job_copy_t *c)
{
    c->job = j->job;
    c->wait_code = j->job.state == VRAM_JOB_QUEUED
                       ? vram_wait_text(s, j, c->wait_text, sizeof c->wait_text)
                       : NULL;
    c->queue_pos = j->job.state == VRAM_JOB_QUEUED ? j->queue_pos : 0;
    c->used = 0;
    for (int k = 0; k < j->job.ndevices; k++)
        c->used += j->used_bytes[k];
    c->over = j->over_reported;
}

static void time_or_null(vram_jw_t *w, const char *key, double t)
{
    if (t)
        vram_jw_real(w, key, t);
    else
        vram_jw_null(w, key);
}

/* One job object; written directly (not through jansson) because every
 * submit and finish answers with one. */
static void write_job(vram_jw_t *w, const job_copy_t *c, double lease_s, int64_t viewer)
{
    const vram_job_t *j = &c->job;
    const vram_job_request_t *r = &j->req;
    vram_jw_open(w, NULL, '{');
    vram_jw_int(w, "id", j->id);
    vram_jw_string(w, "name", r->name);
    vram_jw_string(w, "state", vram_job_state_name(j->state));
    vram_jw_int(w, "owner_uid", r->uid);
    if (sees_private(j, viewer)) {
        vram_jw_int(w, "pid", r->pid);
        vram_jw_string(w, "command", r->command);
    }
    vram_jw_int(w, "mem_bytes", (int64_t)r->mem_bytes);
    vram_jw_int(w, "gpus", r->gpus);
    vram_jw_int(w, "priority", r->priority);
    vram_jw_real(w, "timeout_s", r->timeout_s);
    vram_jw_int_array(w, "pinned", r->pinned, r->npinned);
    vram_jw_int(w, "batch_size", r->batch_size);
    vram_jw_int(w, "min_batch_size", r->min_batch_size);
    vram_jw_open(w, "batch_bytes", '[');
    for (int i = 0; i < r->nbatch_bytes; i++) {
        vram_jw_open(w, NULL, '{');
        vram_jw_int(w, "batch", r->batch_bytes[i].batch);
        vram_jw_int(w, "bytes", (int64_t)r->batch_bytes[i].bytes);
        vram_jw_close(w, '}');
    }
    vram_jw_close(w, ']');
    vram_jw_int(w, "max_batch_size", r->max_batch_size);
    vram_jw_int_array(w, "devices", j->devices, j->ndevices);
    vram_jw_int(w, "reserved_bytes", (int64_t)j->reserved_bytes);
    vram_jw_int(w, "granted_batch_size", j->granted_batch);
    vram_jw_int(w, "grad_accum", j->grad_accum);
    vram_jw_bool(w, "degraded",
                 j->granted_batch && r->batch_size && j->granted_batch < r->batch_size);
    vram_jw_real(w, "submitted_at", j->submitted_at);
    time_or_null(w, "started_at", j->started_at);
    time_or_null(w, "ended_at", j->ended_at);
    if (j->exit_status >= 0 && j->ended_at)
        vram_jw_int(w, "exit_status", j->exit_status);
    else
        vram_jw_null(w, "exit_status");
    vram_jw_string(w, "error", j->error);
    if (j->state != VRAM_JOB_QUEUED && j->state != VRAM_JOB_RUNNING) {
        vram_jw_string(w, "end_reason", vram_end_reason_name(j->end_reason));
        vram_jw_int(w, "retry_batch", j->retry_batch);
    }
    vram_labels_write(w, "labels", r);
    if (j->has_peak)
        vram_jw_int(w, "peak_bytes", (int64_t)j->peak_bytes);
    else
        vram_jw_null(w, "peak_bytes");
    vram_jw_int(w, "queue_position", c->queue_pos);
    if (c->wait_code) {
        vram_jw_string(w, "reason_code", c->wait_code);
        vram_jw_string(w, "reason", c->wait_text);
    }
    if (j->state == VRAM_JOB_RUNNING) {
        vram_jw_int(w, "used_bytes", (int64_t)c->used);
        vram_jw_bool(w, "over_reservation", c->over);
        vram_jw_real(w, "lease_s", lease_s);
    }
    vram_jw_close(w, '}');
}

static char *dump(json_t *v)
{
    char *text = v ? json_dumps(v, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(v);
    return text;
}

char *vram_sched_job_json_for(vram_sched_t *s, int64_t id, int64_t viewer)
{
    job_copy_t c = {0};
    int rc = 0;
    pthread_mutex_lock(&s->lock);
    sched_job_t *j = vram_sched_find_active(s, id);
    if (j)
        copy_active(s, j, &c);
    else
        rc = vram_store_get_job(s->store, id, &c.job);
    double lease_s = s->cfg.lease_s;
    pthread_mutex_unlock(&s->lock);
    if (rc) return NULL;
    vram_jw_t w = {0};
    write_job(&w, &c, lease_s, viewer);
    return vram_jw_finish(&w);
}

char *vram_sched_job_json(vram_sched_t *s, int64_t id)
{
    return vram_sched_job_json_for(s, id, 0);
}

typedef struct {
    job_copy_t *jobs;
    size_t n, cap;
    bool failed;
} copies_t;

static int append_ended(void *arg, const vram_job_t *job, uint64_t pid_start)
{
    (void)pid_start;
    copies_t *a = arg;
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 64;
        job_copy_t *n = realloc(a->jobs, cap * sizeof *n);
        if (!n) {
            a->failed = true;
            return 1;
        }
        a->jobs = n;
        a->cap = cap;
    }
    a->jobs[a->n++] = (job_copy_t){.job = *job};
    return 0;
}

char *vram_sched_jobs_json_for(vram_sched_t *s, int limit, int64_t viewer)
{
    copies_t ended = {0};
    pthread_mutex_lock(&s->lock);
    size_t n = s->nactive;
    job_copy_t *copies = malloc((n ? n : 1) * sizeof *copies);
    for (size_t i = 0; copies && i < n; i++)
        copy_active(s, s->active[i], &copies[i]);
    /* The ended jobs come from the store, which only this lock guards. */
    if (copies && limit > 0) (void)vram_store_list_ended(s->store, limit, append_ended, &ended);
    double lease_s = s->cfg.lease_s;
    pthread_mutex_unlock(&s->lock);
    char *text = NULL;
    if (copies && !ended.failed) {
        vram_jw_t w = {0};
        vram_jw_open(&w, NULL, '{');
        vram_jw_open(&w, "jobs", '[');
        for (size_t i = 0; i < n; i++)
            write_job(&w, &copies[i], lease_s, viewer);
        for (size_t i = 0; i < ended.n; i++)
            write_job(&w, &ended.jobs[i], lease_s, viewer);
        vram_jw_close(&w, ']');
        vram_jw_close(&w, '}');
        text = vram_jw_finish(&w);
    }
    free(copies);
    free(ended.jobs);
    return text;
}

char *vram_sched_jobs_json(vram_sched_t *s, int limit)
{
    return vram_sched_jobs_json_for(s, limit, 0);
}

/* The status lists the first jobs of the queue only: a reply (and the time
 * under the lock) must not grow with a queue of tens of thousands. */
#define STATUS_PENDING_MAX 100

static json_t *known(bool ok, uint64_t bytes)
{
    return ok ? json_integer((json_int_t)bytes) : json_null();
}

char *vram_sched_status_json(vram_sched_t *s)
{
    pthread_mutex_lock(&s->lock);
    sched_dev_t *devs = calloc((size_t)s->ndev + 1, sizeof *devs);
    if (!devs || vram_ledger_probe(s, devs, s->cfg.status_cache_s) != 0) {
        pthread_mutex_unlock(&s->lock);
        free(devs);
        return NULL;
    }
    size_t nq = s->nqueue, shown = nq < STATUS_PENDING_MAX ? nq : STATUS_PENDING_MAX;
    job_copy_t *head = malloc((shown ? shown : 1) * sizeof *head);
    for (size_t i = 0; head && i < shown; i++)
        copy_active(s, s->queue[i], &head[i]);
    uint64_t pending_bytes = 0;
    for (size_t i = 0; i < nq; i++)
        pending_bytes += s->queue[i]->job.req.mem_bytes * (uint64_t)s->queue[i]->job.req.gpus;
    int nrun = (int)(s->nactive - nq);
    json_t *cfg = json_pack("{s:s,s:s,s:b,s:i,s:f,s:f}", "placement",
                            s->cfg.placement == VRAM_PLACE_BEST_FIT ? "best-fit" : "least-loaded",
                            "safety_margin", s->cfg.safety_margin, "backfill", s->cfg.backfill,
                            "max_concurrent_jobs", s->cfg.max_concurrent_jobs, "job_timeout_s",
                            s->cfg.job_timeout_s, "lease_s", s->cfg.lease_s);
    pthread_mutex_unlock(&s->lock);
    if (!head) {
        free(devs);
        json_decref(cfg);
        return NULL;
    }
    json_t *dl = json_array();
    uint64_t total_reserved = 0;
    for (int d = 0; d < s->ndev; d++) {
        const sched_dev_t *v = &devs[d];
        uint64_t free_adm = sched_dev_free_for_admission(v);
        total_reserved += v->reserved;
        json_t *o = json_object();
        json_object_set_new(o, "index", json_integer(d));
        /* A device that does not answer has no figures: null, never 0 or "". */
        json_object_set_new(o, "name", v->ok || *v->name ? json_string(v->name) : json_null());
        json_object_set_new(o, "available", json_boolean(v->ok));
        json_object_set_new(o, "total_bytes", known(v->ok, v->total));
        json_object_set_new(o, "used_bytes", known(v->ok, v->used));
        json_object_set_new(o, "unmanaged_bytes", known(v->ok, v->unmanaged));
        json_object_set_new(o, "safety_margin_bytes", known(v->ok, v->margin));
        json_object_set_new(o, "usable_bytes", known(v->ok, v->usable));
        json_object_set_new(o, "reserved_bytes", json_integer((json_int_t)v->reserved));
        json_object_set_new(o, "free_for_admission_bytes", known(v->ok, free_adm));
        json_object_set_new(o, "running_jobs", json_integer(v->jobs));
        json_array_append_new(dl, o);
    }
    free(devs);
    json_t *pending = json_array();
    for (size_t i = 0; i < shown; i++) {
        const vram_job_t *j = &head[i].job;
        json_array_append_new(
            pending, json_pack("{s:I,s:s,s:I,s:I,s:i,s:i,s:i}", "id", (json_int_t)j->id, "name",
                               j->req.name, "owner_uid", (json_int_t)j->req.uid, "mem_bytes",
                               (json_int_t)j->req.mem_bytes, "gpus", j->req.gpus, "priority",
                               j->req.priority, "queue_position", head[i].queue_pos));
    }
    free(head);
    return dump(json_pack("{s:o,s:i,s:i,s:I,s:I,s:o,s:o}", "devices", dl, "active_jobs", nrun,
                          "pending_jobs", (int)nq, "total_reserved_bytes",
                          (json_int_t)total_reserved, "pending_bytes", (json_int_t)pending_bytes,
                          "pending", pending, "config", cfg));
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
    int rc = vram_sched_find_active(s, id) ? 0 : vram_store_get_job(s->store, id, &job);
    if (rc == 0) rc = vram_store_list_events(s->store, id, append_event, events);
    pthread_mutex_unlock(&s->lock);
    if (rc) {
        json_decref(events);
        return NULL;
    }
    return dump(json_pack("{s:I,s:o}", "id", (json_int_t)id, "events", events));
}
