/* The queue: higher priority first, then arrival order. With backfill, jobs
 * behind a waiting head may start when they fit now; without it the head
 * blocks everything behind it. */
#include "sched_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int queue_order(const void *a, const void *b)
{
    const sched_job_t *x = *(sched_job_t *const *)a, *y = *(sched_job_t *const *)b;
    if (x->job.req.priority != y->job.req.priority)
        return x->job.req.priority > y->job.req.priority ? -1 : 1;
    return x->job.id < y->job.id ? -1 : x->job.id > y->job.id;
}

/* Negative when x goes before y. */
static int before(const sched_job_t *x, const sched_job_t *y)
{
    return queue_order(&x, &y);
}

/* Room for one more queued job. */
static bool queue_room(vram_sched_t *s)
{
    if (s->nqueue < s->qcap) return true;
    size_t cap = s->qcap ? s->qcap * 2 : 64;
    sched_job_t **a = realloc(s->queue, cap * sizeof *a);
    if (!a) return false;
    s->queue = a;
    s->qcap = cap;
    return true;
}

int vram_queue_insert(vram_sched_t *s, sched_job_t *j)
{
    if (!queue_room(s)) return vram_fail(VRAM_ENOMEM, "out of memory");
    size_t lo = 0, hi = s->nqueue;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (before(s->queue[mid], j) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    memmove(s->queue + lo + 1, s->queue + lo, (s->nqueue - lo) * sizeof *s->queue);
    s->queue[lo] = j;
    s->nqueue++;
    for (size_t i = lo; i < s->nqueue; i++) /* later jobs move back one place */
        s->queue[i]->queue_pos = (int)i + 1;
    return 0;
}

void vram_queue_compact(vram_sched_t *s)
{
    size_t k = 0;
    for (size_t i = 0; i < s->nqueue; i++) {
        sched_job_t *j = s->queue[i];
        if (j->job.state != VRAM_JOB_QUEUED) continue;
        j->queue_pos = (int)k + 1;
        s->queue[k++] = j;
    }
    s->nqueue = k;
}

int vram_queue_rebuild(vram_sched_t *s)
{
    s->nqueue = 0;
    for (size_t i = 0; i < s->nactive; i++) {
        if (s->active[i]->job.state != VRAM_JOB_QUEUED) continue;
        if (!queue_room(s)) return vram_fail(VRAM_ENOMEM, "out of memory");
        s->queue[s->nqueue++] = s->active[i];
    }
    if (s->nqueue > 1) qsort(s->queue, s->nqueue, sizeof *s->queue, queue_order);
    vram_queue_compact(s);
    return 0;
}

int vram_queue_timeouts(vram_sched_t *s, double now)
{
    int changed = 0;
    for (size_t i = 0; i < s->nactive; i++) {
        sched_job_t *j = s->active[i];
        if (j->job.state != VRAM_JOB_QUEUED || j->deadline <= 0 || now < j->deadline) continue;
        double waited = j->deadline - j->job.submitted_at;
        char msg[128];
        snprintf(msg, sizeof msg, "GPU memory timeout after %.0f s", waited);
        int rc = vram_sched_transition(s, j, VRAM_JOB_TIMEOUT, "timeout", msg);
        if (rc) return rc;
        changed++;
    }
    return changed;
}

/* Running jobs of one uid: counted only for a job about to be admitted
 * (few per pass), so a pass allocates nothing for the quota. */
static int running_of(const vram_sched_t *s, uid_t uid)
{
    int n = 0;
    for (size_t i = 0; i < s->nactive; i++)
        n += s->active[i]->job.state == VRAM_JOB_RUNNING && s->active[i]->job.req.uid == uid;
    return n;
}

int vram_queue_admit(vram_sched_t *s, double now)
{
    return vram_queue_admit_only(s, NULL, now);
}

int vram_queue_admit_only(vram_sched_t *s, sched_job_t *only, double now)
{
    /* A daemon going down admits nothing more: queued jobs stay queued (and
     * stored) for the next start, rather than starting while it exits. */
    if (s->shutting_down) return 0;
    if (s->nqueue == 0) return 0;
    /* Without backfill the jobs behind the first one that does not fit only
     * record that they wait for it, and a new job may have become the head. */
    if (!s->cfg.backfill) only = NULL;
    sched_dev_t *devs = calloc((size_t)s->ndev + 1, sizeof *devs);
    int changed = 0, rc = 0;
    if (!devs) {
        rc = vram_fail(VRAM_ENOMEM, "out of memory");
        goto out;
    }
    if ((rc = vram_ledger_probe(s, devs, s->cfg.probe_interval_s)) != 0) goto out;
    /* The outside use the waiting jobs were found not to fit with: a full
     * pass sets it, a pass for one job can only raise it (do_tick runs the
     * next full pass when it falls below). */
    for (int d = 0; d < s->ndev && d < 64; d++)
        if (!only || devs[d].unmanaged > s->unmanaged_seen[d])
            s->unmanaged_seen[d] = devs[d].unmanaged;
    int limit = s->cfg.max_running_per_uid;
    int64_t blocked_by = 0; /* without backfill: the first job that did not fit */

    /* Every job the pass considers records why it still waits. */
    for (size_t i = 0; i < s->nqueue; i++) {
        sched_job_t *j = s->queue[i];
        if (j->job.state != VRAM_JOB_QUEUED || (only && j != only)) continue;
        if (blocked_by) {
            j->wait = SCHED_WAIT_PRIORITY;
            j->wait_detail = blocked_by;
            continue;
        }
        int placed[VRAM_SCHED_MAX_GPUS];
        uint64_t per_gpu;
        uint32_t batch, accum;
        if (!vram_place(s, devs, &j->job.req, placed, &per_gpu, &batch, &accum)) {
            j->wait = (int)vram_wait_explain(s, devs, &j->job.req);
            if (!s->cfg.backfill) blocked_by = j->job.id;
            continue;
        }
        /* A uid at its quota waits without holding the others back. */
        uid_t uid = j->job.req.uid;
        int running = limit > 0 && uid != 0 ? running_of(s, uid) : 0;
        if (limit > 0 && uid != 0 && running >= limit) {
            j->wait = SCHED_WAIT_USER_LIMIT;
            j->wait_detail = running;
            continue;
        }
        int n = j->job.req.npinned > 0 ? j->job.req.npinned : j->job.req.gpus;
        j->job.ndevices = n;
        for (int k = 0; k < n; k++) {
            j->job.devices[k] = placed[k];
            devs[placed[k]].reserved += per_gpu;
            devs[placed[k]].jobs++;
        }
        j->job.reserved_bytes = per_gpu;
        j->job.granted_batch = batch;
        j->job.grad_accum = accum;
        j->job.started_at = now;
        /* vramd watches the process of a job it starts: no client renews */
        j->lease_until = s->cfg.lease_s > 0 && !j->job.has_spawn ? now + s->cfg.lease_s : 0;
        char msg[160];
        if (batch && batch < j->job.req.batch_size)
            snprintf(msg, sizeof msg, "degraded: batch %u x %u accumulation steps (asked %u)",
                     batch, accum, j->job.req.batch_size);
        else
            snprintf(msg, sizeof msg, "admitted on %d GPU(s)", n);
        if ((rc = vram_sched_transition(s, j, VRAM_JOB_RUNNING, "admitted", msg)) != 0) goto out;
        changed++;
    }
    for (int d = 0; d < s->ndev && d < 64; d++)
        s->pass_free[d] = devs[d].usable > devs[d].reserved ? devs[d].usable - devs[d].reserved : 0;
out:
    free(devs);
    return rc ? rc : changed;
}
