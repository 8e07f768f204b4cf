/* Why a queued job is still waiting, in words, from the free memory for
 * admission of each device (what GET /v1/status reports). */
#include "vram.h"

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
    uint64_t need = req->mem_bytes;
    if (req->batch_size && req->per_sample_bytes)
        need = vram_job_mem_at_batch(req, req->min_batch_size ? req->min_batch_size : 1);
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
