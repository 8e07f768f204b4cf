/* Why a queued job is still waiting: the reason its last admission pass
 * recorded (sched_wait_t), in a short code and in words, the memory part
 * from the free memory for admission of each device. */
#include "sched_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int dev;
    uint64_t free;
} slot_t;

static int by_free_desc(const void *a, const void *b)
{
    const slot_t *x = a, *y = b;
    if (x->free != y->free) return x->free > y->free ? -1 : 1;
    return x->dev - y->dev;
}

const char *vram_job_pending_reason(const vram_job_request_t *req, const uint64_t *free_bytes,
                                    int ndev, int position, char *buf, size_t len)
{
    slot_t slots[VRAM_SCHED_MAX_GPUS * 4];
    int n = 0;
    for (int d = 0; d < ndev && n < (int)(sizeof slots / sizeof slots[0]); d++) {
        bool eligible = req->npinned == 0;
        for (int k = 0; k < req->npinned; k++)
            eligible |= req->pinned[k] == d;
        if (eligible) slots[n++] = (slot_t){d, free_bytes[d]};
    }
    qsort(slots, (size_t)n, sizeof slots[0], by_free_desc);
    int gpus = req->npinned > 0 ? req->npinned : (req->gpus > 0 ? req->gpus : 1);
    /* the least it could start with: the smallest batch it accepts */
    uint64_t need = vram_job_least_bytes(req);
    int fit = 0;
    for (int i = 0; i < n; i++)
        fit += slots[i].free >= need;
    char a[32], b[32];
    if (fit >= gpus) {
        if (position > 1)
            snprintf(buf, len, "fits now; %d job(s) ahead in the queue go first", position - 1);
        else
            snprintf(buf, len, "fits now; admitted at the next pass");
        return buf;
    }
    size_t at = (size_t)snprintf(buf, len, "waiting for %s on %d GPU%s",
                                 vram_format_size(need, a, sizeof a), gpus, gpus > 1 ? "s" : "");
    for (int i = 0; i < n && i < gpus && at < len; i++)
        at += (size_t)snprintf(buf + at, len - at, "%sGPU %d has %s free for admission",
                               i ? ", " : "; ", slots[i].dev,
                               vram_format_size(slots[i].free, b, sizeof b));
    if (n == 0 && at < len) snprintf(buf + at, len - at, "; no such GPU is available");
    return buf;
}

sched_wait_t vram_wait_explain(const vram_sched_t *s, const sched_dev_t *devs,
                               const vram_job_request_t *req)
{
    int need = req->npinned > 0 ? req->npinned : req->gpus, up = 0, room = 0;
    int max = s->cfg.max_concurrent_jobs;
    for (int d = 0; d < s->ndev; d++) {
        bool eligible = req->npinned == 0;
        for (int k = 0; k < req->npinned; k++)
            eligible |= req->pinned[k] == d;
        if (!eligible || !devs[d].ok) continue;
        up++;
        room += max <= 0 || devs[d].jobs < max;
    }
    if (up < need) return SCHED_WAIT_DEVICE_DOWN;
    if (room < need) return SCHED_WAIT_DEVICE_JOBS;
    return SCHED_WAIT_MEMORY;
}

static const char *const wait_codes[] = {
    [SCHED_WAIT_NEW] = "new",
    [SCHED_WAIT_MEMORY] = "memory",
    [SCHED_WAIT_PRIORITY] = "priority",
    [SCHED_WAIT_USER_LIMIT] = "user_running_limit",
    [SCHED_WAIT_DEVICE_JOBS] = "device_job_limit",
    [SCHED_WAIT_DEVICE_DOWN] = "device_unavailable",
};

const char *vram_wait_text(const vram_sched_t *s, const sched_job_t *j, char *buf, size_t len)
{
    const vram_job_request_t *r = &j->job.req;
    int need = r->npinned > 0 ? r->npinned : r->gpus;
    switch ((sched_wait_t)j->wait) {
    case SCHED_WAIT_NEW:
        snprintf(buf, len, "not yet considered by an admission pass");
        break;
    case SCHED_WAIT_MEMORY:
        vram_job_pending_reason(r, s->pass_free, s->ndev, j->queue_pos, buf, len);
        break;
    case SCHED_WAIT_PRIORITY:
        snprintf(buf, len, "behind job %lld, which goes first and does not fit yet (no backfill)",
                 (long long)j->wait_detail);
        break;
    case SCHED_WAIT_USER_LIMIT:
        snprintf(buf, len,
                 "uid %u runs %lld job(s), its limit (MAX_RUNNING_PER_USER is %d); starts when one "
                 "ends",
                 (unsigned)r->uid, (long long)j->wait_detail, s->cfg.max_running_per_uid);
        break;
    case SCHED_WAIT_DEVICE_JOBS:
        snprintf(buf, len, "fewer than %d eligible GPU(s) run under MAX_CONCURRENT_JOBS (%d each)",
                 need, s->cfg.max_concurrent_jobs);
        break;
    case SCHED_WAIT_DEVICE_DOWN:
        snprintf(buf, len, "fewer than %d eligible GPU(s) are available (disabled or in error)",
                 need);
        break;
    }
    int w = j->wait;
    return w >= 0 && w < (int)(sizeof wait_codes / sizeof wait_codes[0]) ? wait_codes[w] : "new";
}
