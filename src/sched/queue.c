/* The queue: higher priority first, then arrival order. With backfill, jobs
 * behind a waiting head may start when they fit now; without it the head
 * blocks everything behind it. */
#include "sched_internal.h"

#include <stdio.h>
#include <stdlib.h>

static int queue_order(const void *a, const void *b)
{
    const sched_job_t *x = *(sched_job_t *const *)a, *y = *(sched_job_t *const *)b;
    if (x->job.req.priority != y->job.req.priority)
        return x->job.req.priority > y->job.req.priority ? -1 : 1;
    return x->job.id < y->job.id ? -1 : x->job.id > y->job.id;
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

int vram_queue_admit(vram_sched_t *s, double now)
{
    /* A daemon going down admits nothing more: queued jobs stay queued (and
     * stored) for the next start, rather than starting while it exits. */
    if (s->shutting_down) return 0;
    size_t nq = 0;
    for (size_t i = 0; i < s->nactive; i++)
        if (s->active[i]->job.state == VRAM_JOB_QUEUED) nq++;
    if (nq == 0) return 0;
    sched_job_t **q = malloc(nq * sizeof *q);
    sched_dev_t *devs = calloc((size_t)s->ndev + 1, sizeof *devs);
    int changed = 0, rc = 0;
    if (!q || !devs) {
        rc = vram_fail(VRAM_ENOMEM, "out of memory");
        goto out;
    }
    nq = 0;
    for (size_t i = 0; i < s->nactive; i++)
        if (s->active[i]->job.state == VRAM_JOB_QUEUED) q[nq++] = s->active[i];
    qsort(q, nq, sizeof *q, queue_order);
    if ((rc = vram_ledger_probe(s, devs, false)) != 0) goto out;

    for (size_t i = 0; i < nq; i++) {
        sched_job_t *j = q[i];
        int placed[VRAM_SCHED_MAX_GPUS];
        uint64_t per_gpu;
        uint32_t batch, accum;
        if (!vram_place(s, devs, &j->job.req, placed, &per_gpu, &batch, &accum)) {
            if (!s->cfg.backfill) break;
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
        j->lease_until = s->cfg.lease_s > 0 ? now + s->cfg.lease_s : 0;
        char msg[160];
        if (batch && batch < j->job.req.batch_size)
            snprintf(msg, sizeof msg, "degraded: batch %u x %u accumulation steps (asked %u)",
                     batch, accum, j->job.req.batch_size);
        else
            snprintf(msg, sizeof msg, "admitted on %d GPU(s)", n);
        if ((rc = vram_sched_transition(s, j, VRAM_JOB_RUNNING, "admitted", msg)) != 0) goto out;
        changed++;
    }
out:
    free(q);
    free(devs);
    return rc ? rc : changed;
}
