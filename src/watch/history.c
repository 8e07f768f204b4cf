/* History: a fixed-size ring of full-rate rows (the last WATCH_HISTORY), the
 * mean and max of each minute, both written to the store in batches, and the
 * query behind GET /v1/history. */
#include "watch_internal.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define FLUSH_EVERY_S  5.0
#define EXPIRE_EVERY_S 60.0
#define MAX_POINTS     10000
#define DEFAULT_POINTS 1000

int vram_watch_ring_init(watch_ring_t *r, size_t cap)
{
    memset(r, 0, sizeof *r);
    r->rows = calloc(cap ? cap : 1, sizeof *r->rows);
    if (!r->rows) return vram_fail(VRAM_ENOMEM, "out of memory for %zu history rows", cap);
    r->cap = cap ? cap : 1;
    return 0;
}

void vram_watch_ring_push(watch_ring_t *r, const watch_row_t *row)
{
    r->rows[r->head] = *row;
    r->head = (r->head + 1) % r->cap;
    if (r->count < r->cap) r->count++;
}

/* The i-th oldest row. */
static const watch_row_t *ring_at(const watch_ring_t *r, size_t i)
{
    return &r->rows[(r->head + r->cap - r->count + i) % r->cap];
}

static double known(double v)
{
    return v < 0 ? 0 : v;
}

static void accumulate(watch_minute_t *m, const watch_row_t *r)
{
    m->n++;
    m->used_sum += known(r->used);
    m->free_sum += known(r->free);
    m->reserved_sum += known(r->reserved);
    m->util_sum += known(r->util);
    m->temp_sum += known(r->temp);
    m->power_sum += known(r->power);
    if (r->used > m->used_max) m->used_max = r->used;
    if (r->util > m->util_max) m->util_max = r->util;
    if (r->temp > m->temp_max) m->temp_max = r->temp;
    if (r->power > m->power_max) m->power_max = r->power;
}

static void merge(watch_minute_t *m, const watch_minute_t *src)
{
    m->n += src->n;
    m->used_sum += known(src->used_sum);
    m->free_sum += known(src->free_sum);
    m->reserved_sum += known(src->reserved_sum);
    m->util_sum += known(src->util_sum);
    m->temp_sum += known(src->temp_sum);
    m->power_sum += known(src->power_sum);
    m->used_max = fmax(m->used_max, src->used_max);
    m->util_max = fmax(m->util_max, src->util_max);
    m->temp_max = fmax(m->temp_max, src->temp_max);
    m->power_max = fmax(m->power_max, src->power_max);
}

static watch_minute_t empty_bucket(int64_t job_id, int device, double start)
{
    return (watch_minute_t){.job_id = job_id,
                            .device = device,
                            .minute = start,
                            .used_max = -1,
                            .util_max = -1,
                            .temp_max = -1,
                            .power_max = -1};
}

/* The accumulator of (device, job) in *arr for the bucket starting at
 * `start`; arr is in time order, so only its tail is searched. */
static watch_minute_t *bucket(watch_minute_t **arr, size_t *n, size_t *cap, int64_t job_id,
                              int device, double start)
{
    for (size_t i = *n; i-- > 0 && (*arr)[i].minute == start;)
        if ((*arr)[i].job_id == job_id && (*arr)[i].device == device) return &(*arr)[i];
    if (!vram_watch_grow((void **)arr, cap, *n + 1, sizeof **arr)) return NULL;
    (*arr)[*n] = empty_bucket(job_id, device, start);
    return &(*arr)[(*n)++];
}

static void add_row(vram_watch_t *w, watch_ring_t *ring, const watch_row_t *row)
{
    vram_watch_ring_push(ring, row);
    double minute = floor(row->t / 60) * 60;
    if (w->nminutes && w->minutes[0].minute != minute) {
        /* A new minute: the finished one goes to the store in one batch. */
        if (w->store && vram_watch_store_minutes(w->store, w->minutes, w->nminutes) != 0)
            vram_watch_log(w, "warn", "history: %s", vram_last_error());
        w->nminutes = 0;
    }
    watch_minute_t *m =
        bucket(&w->minutes, &w->nminutes, &w->minutes_cap, row->job_id, row->device, minute);
    if (m) accumulate(m, row);
    if (w->store &&
        vram_watch_grow((void **)&w->pending, &w->pending_cap, w->npending + 1, sizeof *w->pending))
        w->pending[w->npending++] = *row;
}

static double figure_u64(uint64_t v)
{
    return v == VRAM_UNKNOWN_U64 ? -1 : (double)v;
}

void vram_watch_history_add(vram_watch_t *w, const watch_sample_t *s)
{
    for (int d = 0; d < s->ndev; d++) {
        const vram_device_info_t *i = &s->devs[d];
        watch_row_t row = {
            .t = s->t,
            .device = d,
            .health = (int)i->health,
            .used = figure_u64(i->used_bytes),
            .free = figure_u64(i->free_bytes),
            .reserved = (double)s->reserved[d],
            .util = i->utilization_pct < 0 ? -1 : i->utilization_pct,
            .temp = i->temperature_c < 0 ? -1 : i->temperature_c,
            .power = i->power_w,
        };
        add_row(w, &w->ring, &row);
    }
    for (size_t k = 0; k < s->nuses; k++) {
        const watch_job_use_t *u = &s->uses[k];
        watch_row_t row = {.t = s->t,
                           .job_id = u->job_id,
                           .device = u->device,
                           .used = (double)u->used_bytes,
                           .free = -1,
                           .reserved = (double)u->reserved_bytes,
                           .util = -1,
                           .temp = -1,
                           .power = -1};
        add_row(w, &w->job_ring, &row);
    }
    if (w->store && s->t - w->last_flush >= FLUSH_EVERY_S) (void)vram_watch_history_flush(w, false);
}

int vram_watch_history_flush(vram_watch_t *w, bool close_minutes)
{
    if (!w->store) return 0;
    double now = vram_watch_now(w);
    w->last_flush = now;
    int rc = vram_watch_store_samples(w->store, w->pending, w->npending);
    w->npending = 0;
    if (rc == 0 && close_minutes) {
        /* The minute in progress is written as it stands (a restart keeps it). */
        rc = vram_watch_store_minutes(w->store, w->minutes, w->nminutes);
    }
    if (rc == 0 && now - w->last_expire >= EXPIRE_EVERY_S) {
        w->last_expire = now;
        rc = vram_watch_store_expire(w->store, now - w->cfg.history_s, now - w->cfg.retention_s);
    }
    if (rc) vram_watch_log(w, "warn", "history: %s", vram_last_error());
    return rc;
}

static void reload_row(void *arg, const watch_row_t *row)
{
    vram_watch_t *w = arg;
    if (row->device < 0 || row->device >= w->ndev) return;
    vram_watch_ring_push(row->job_id ? &w->job_ring : &w->ring, row);
}

/* The minute in progress when vramd stopped goes on from what it had. */
static void reload_minute(void *arg, const watch_minute_t *src)
{
    vram_watch_t *w = arg;
    watch_minute_t *m =
        bucket(&w->minutes, &w->nminutes, &w->minutes_cap, src->job_id, src->device, src->minute);
    if (m) merge(m, src);
}

int vram_watch_history_reload(vram_watch_t *w)
{
    if (!w->store) return 0;
    double now = vram_watch_now(w), minute = floor(now / 60) * 60;
    int rc = vram_watch_store_load_samples(w->store, now - w->cfg.history_s, reload_row, w);
    for (int d = 0; rc == 0 && d < w->ndev; d++)
        rc = vram_watch_store_load_minutes(w->store, d, minute, minute + 60, reload_minute, w);
    return rc;
}

/* ---- the query ------------------------------------------------------------- */

typedef struct {
    double from, step;
    watch_minute_t *b;
    size_t n, cap;
    bool failed;
} query_t;

static double bucket_start(const query_t *q, double t)
{
    return q->from + floor((t - q->from) / q->step) * q->step;
}

static void query_row(query_t *q, const watch_row_t *r)
{
    watch_minute_t *m = bucket(&q->b, &q->n, &q->cap, r->job_id, r->device, bucket_start(q, r->t));
    if (m)
        accumulate(m, r);
    else
        q->failed = true;
}

static void query_minute(void *arg, const watch_minute_t *src)
{
    query_t *q = arg;
    watch_minute_t *m =
        bucket(&q->b, &q->n, &q->cap, src->job_id, src->device, bucket_start(q, src->minute));
    if (m)
        merge(m, src);
    else
        q->failed = true;
}

/* Whole numbers (bytes, most means) as JSON integers: exact at any print
 * precision, and shorter. */
static json_t *number(double v)
{
    return v == floor(v) && fabs(v) < 9e15 ? json_integer((json_int_t)v) : json_real(v);
}

static json_t *figure(double sum, int n, double max)
{
    return max < 0 || n == 0 ? json_null() : number(sum / n);
}

static json_t *device_point(const watch_minute_t *m)
{
    return json_pack("[f,o,o,o,o,o,o,o]", m->minute, figure(m->used_sum, m->n, m->used_max),
                     m->used_max < 0 ? json_null() : number(m->used_max),
                     figure(m->free_sum, m->n, m->free_sum), number(m->reserved_sum / m->n),
                     figure(m->util_sum, m->n, m->util_max), figure(m->temp_sum, m->n, m->temp_max),
                     figure(m->power_sum, m->n, m->power_max));
}

static json_t *job_series(json_t *jobs, vram_watch_t *w, int64_t id)
{
    size_t i;
    json_t *o;
    json_array_foreach(jobs, i, o) if (json_integer_value(json_object_get(o, "id")) == id) return o;
    vram_job_t job;
    const char *name = "";
    if (w->cfg.sched && vram_sched_job(w->cfg.sched, id, &job) == 0) name = job.req.name;
    o = json_pack("{s:I,s:s,s:[]}", "id", (json_int_t)id, "name", name, "points");
    json_array_append_new(jobs, o);
    return o;
}

char *vram_watch_history_json(vram_watch_t *w, int device, double from, double to, double step)
{
    if (!w) {
        vram_fail(VRAM_EINVAL, "NULL watch");
        return NULL;
    }
    if (device < 0 || device >= w->ndev) {
        vram_fail(VRAM_ENODEV, "device=%d: no such device (%d devices)", device, w->ndev);
        return NULL;
    }
    if (!isfinite(from) || !isfinite(to) || !isfinite(step) || from >= to || step < 0) {
        vram_fail(VRAM_EINVAL, "from=%g to=%g step=%g: need from < to and step >= 0", from, to,
                  step);
        return NULL;
    }
    if (step > 0 && (to - from) / step > MAX_POINTS) {
        vram_fail(VRAM_EINVAL, "step=%g: at most %d points (step >= %g for this range)", step,
                  MAX_POINTS, (to - from) / MAX_POINTS);
        return NULL;
    }
    pthread_mutex_lock(&w->lock);
    /* Full rate while the ring covers `from` (it holds WATCH_HISTORY); the
     * minutes in the store otherwise. */
    bool minutes = w->store && from < vram_watch_now(w) - w->cfg.history_s - w->cfg.interval_s;
    double finest = minutes ? 60 : w->cfg.interval_s;
    if (step <= 0) step = fmax(finest, (to - from) / DEFAULT_POINTS);
    if (step < finest) step = finest;
    query_t q = {.from = from, .step = step};
    int rc = 0;
    if (minutes) {
        rc = vram_watch_store_load_minutes(w->store, device, from, to, query_minute, &q);
    } else {
        const watch_ring_t *rings[2] = {&w->ring, &w->job_ring};
        for (int k = 0; k < 2; k++)
            for (size_t i = 0; i < rings[k]->count; i++) {
                const watch_row_t *r = ring_at(rings[k], i);
                if (r->device == device && r->t >= from && r->t < to) query_row(&q, r);
            }
    }
    pthread_mutex_unlock(&w->lock);
    if (rc || q.failed) {
        free(q.b);
        if (!rc) vram_fail(VRAM_ENOMEM, "out of memory");
        return NULL;
    }
    json_t *points = json_array(), *jobs = json_array();
    /* The job rows came after the device rows: order everything by time. */
    for (int pass = 0; pass < 2; pass++)
        for (size_t i = 0; i < q.n; i++) {
            const watch_minute_t *m = &q.b[i];
            if (pass == 0 && m->job_id == 0)
                json_array_append_new(points, device_point(m));
            else if (pass == 1 && m->job_id != 0)
                json_array_append_new(json_object_get(job_series(jobs, w, m->job_id), "points"),
                                      json_pack("[f,o,o,o]", m->minute, number(m->used_sum / m->n),
                                                number(m->used_max),
                                                number(m->reserved_sum / m->n)));
        }
    free(q.b);
    json_t *cols = json_pack("[s,s,s,s,s,s,s,s]", "t", "used_bytes", "used_max_bytes", "free_bytes",
                             "reserved_bytes", "utilization_pct", "temperature_c", "power_w");
    json_t *out = json_pack(
        "{s:i,s:f,s:f,s:f,s:s,s:o,s:o,s:[s,s,s,s],s:o}", "device", device, "from", from, "to", to,
        "step", step, "resolution", minutes ? "minute" : "sample", "columns", cols, "points",
        points, "job_columns", "t", "used_bytes", "used_max_bytes", "reserved_bytes", "jobs", jobs);
    char *text = json_dumps(out, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(out);
    if (!text) vram_fail(VRAM_ENOMEM, "out of memory");
    return text;
}
