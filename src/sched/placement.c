/* Placement: which devices a job gets. All N GPUs at once or none; best fit
 * packs jobs onto the fullest device that still fits (keeping big holes for
 * big jobs), least loaded spreads them. Pinned jobs get exactly their list. */
#include "sched_internal.h"

#include <stdlib.h>

typedef struct {
    int dev;
    uint64_t free;
} cand_t;

static int by_free_asc(const void *a, const void *b)
{
    const cand_t *x = a, *y = b;
    if (x->free != y->free) return x->free < y->free ? -1 : 1;
    return x->dev - y->dev;
}

static int by_free_desc(const void *a, const void *b)
{
    return by_free_asc(b, a);
}

static uint64_t free_of(const sched_dev_t *d)
{
    return d->usable > d->reserved ? d->usable - d->reserved : 0;
}

/* Devices that may take one more job, with their free memory. */
static int candidates(const vram_sched_t *s, const sched_dev_t *devs, const vram_job_request_t *req,
                      cand_t *out)
{
    int n = 0;
    if (req->npinned > 0) {
        for (int k = 0; k < req->npinned; k++) {
            int d = req->pinned[k];
            if (d < 0 || d >= s->ndev || !devs[d].ok) return 0;
            if (s->cfg.max_concurrent_jobs > 0 && devs[d].jobs >= s->cfg.max_concurrent_jobs)
                return 0;
            out[n++] = (cand_t){d, free_of(&devs[d])};
        }
        return n;
    }
    for (int d = 0; d < s->ndev; d++) {
        if (!devs[d].ok) continue;
        if (s->cfg.max_concurrent_jobs > 0 && devs[d].jobs >= s->cfg.max_concurrent_jobs) continue;
        out[n++] = (cand_t){d, free_of(&devs[d])};
    }
    return n;
}

bool vram_place(const vram_sched_t *s, const sched_dev_t *devs, const vram_job_request_t *req,
                int *devices, uint64_t *per_gpu, uint32_t *batch, uint32_t *accum)
{
    cand_t *c = calloc((size_t)s->ndev + 1, sizeof *c);
    if (!c) return false;
    int n = candidates(s, devs, req, c);
    int need = req->npinned > 0 ? req->npinned : req->gpus;
    bool placed = false;
    if (n < need || need <= 0) goto out;

    /* The need-th largest free amount bounds what every chosen GPU can hold
     * (pinned: the smallest, keeping the order the client gave). */
    uint64_t bound = c[0].free;
    if (req->npinned > 0) {
        for (int i = 1; i < n; i++)
            if (c[i].free < bound) bound = c[i].free;
    } else {
        qsort(c, (size_t)n, sizeof *c, by_free_desc);
        bound = c[need - 1].free;
    }
    uint64_t mem = req->mem_bytes;
    uint32_t b = req->batch_size, acc = 1;
    bool capped = req->max_batch_size && req->max_batch_size < req->batch_size;
    if (mem > bound || capped) {
        b = vram_job_degrade(req, bound, &acc, &mem);
        if (!b) goto out;
    }
    if (req->npinned == 0 && s->cfg.placement == VRAM_PLACE_BEST_FIT)
        qsort(c, (size_t)n, sizeof *c, by_free_asc);
    int k = 0;
    for (int i = 0; i < n && k < need; i++)
        if (c[i].free >= mem) devices[k++] = c[i].dev;
    if (k < need) goto out;
    *per_gpu = mem;
    *batch = b;
    *accum = acc;
    placed = true;
out:
    free(c);
    return placed;
}
