/* Graceful degradation: a smaller batch with gradient accumulation, at the
 * memory the client's table gives for that batch (full estimates at each
 * batch: nothing here assumes how memory grows with the batch). */
#include "sched/sched.h"

#include <stdbool.h>

int vram_job_batch_bytes_check(const vram_job_request_t *r)
{
    if (r->nbatch_bytes < 0 || r->nbatch_bytes > VRAM_JOB_MAX_BATCHES)
        return vram_fail(VRAM_EINVAL, "batch_bytes: %d entries; at most %d", r->nbatch_bytes,
                         VRAM_JOB_MAX_BATCHES);
    if (r->nbatch_bytes == 0) return 0;
    if (!r->batch_size)
        return vram_fail(VRAM_EINVAL, "batch_bytes needs batch_size (the batch of mem_bytes)");
    for (int i = 0; i < r->nbatch_bytes; i++) {
        const vram_batch_bytes_t *e = &r->batch_bytes[i], *prev = i ? e - 1 : NULL;
        unsigned long long bytes = e->bytes;
        if (e->batch < 1 || e->batch > r->batch_size || e->batch < r->min_batch_size)
            return vram_fail(VRAM_EINVAL,
                             "batch_bytes[%d]: batch %u is outside min_batch_size %u to "
                             "batch_size %u",
                             i, e->batch, r->min_batch_size ? r->min_batch_size : 1, r->batch_size);
        if (prev && e->batch <= prev->batch)
            return vram_fail(VRAM_EINVAL,
                             "batch_bytes[%d]: batch %u follows batch %u (batches must increase)",
                             i, e->batch, prev->batch);
        if (e->bytes == 0)
            return vram_fail(VRAM_EINVAL, "batch_bytes[%d]: 0 bytes at batch %u", i, e->batch);
        if (prev && e->bytes < prev->bytes)
            return vram_fail(VRAM_EINVAL,
                             "batch_bytes[%d]: %llu bytes at batch %u, less than %llu at the "
                             "smaller batch %u (memory cannot fall as the batch grows)",
                             i, bytes, e->batch, (unsigned long long)prev->bytes, prev->batch);
        if (e->bytes > r->mem_bytes)
            return vram_fail(VRAM_EINVAL,
                             "batch_bytes[%d]: %llu bytes at batch %u, more than mem_bytes %llu "
                             "at batch_size %u",
                             i, bytes, e->batch, (unsigned long long)r->mem_bytes, r->batch_size);
        if (e->batch == r->batch_size && e->bytes != r->mem_bytes)
            return vram_fail(VRAM_EINVAL,
                             "batch_bytes[%d]: %llu bytes at batch_size %u, but mem_bytes says "
                             "%llu",
                             i, bytes, e->batch, (unsigned long long)r->mem_bytes);
    }
    uint32_t cap = r->max_batch_size;
    if (cap && cap < r->batch_size && r->batch_bytes[0].batch > cap)
        return vram_fail(VRAM_EINVAL,
                         "max_batch_size %u is below every batch of batch_bytes (the smallest "
                         "is %u)",
                         cap, r->batch_bytes[0].batch);
    return 0;
}

uint64_t vram_job_least_bytes(const vram_job_request_t *req)
{
    return req->nbatch_bytes > 0 ? req->batch_bytes[0].bytes : req->mem_bytes;
}

/* The batches req may be granted, smallest first, into out (at most
 * VRAM_JOB_MAX_BATCHES + 1): the table's at or below the cap, and the cap
 * itself at mem_bytes when it is batch_size (or there is no table). */
static int accepted(const vram_job_request_t *req, vram_batch_bytes_t *out)
{
    uint32_t full = req->batch_size, lo = req->min_batch_size ? req->min_batch_size : 1;
    uint32_t top = req->max_batch_size && req->max_batch_size < full ? req->max_batch_size : full;
    if (!full || lo > top) return 0;
    int n = 0;
    for (int i = 0; i < req->nbatch_bytes && i < VRAM_JOB_MAX_BATCHES; i++)
        if (req->batch_bytes[i].batch <= top && req->batch_bytes[i].batch < full)
            out[n++] = req->batch_bytes[i];
    if (top == full || req->nbatch_bytes == 0) out[n++] = (vram_batch_bytes_t){top, req->mem_bytes};
    return n;
}

uint32_t vram_job_degrade(const vram_job_request_t *req, uint64_t avail, uint32_t *grad_accum,
                          uint64_t *bytes)
{
    vram_batch_bytes_t ok[VRAM_JOB_MAX_BATCHES + 1];
    int n = accepted(req, ok), at = n - 1;
    while (at >= 0 && ok[at].bytes > avail)
        at--;
    if (at < 0) return 0;
    /* Accumulate to keep the effective batch; then the smallest accepted
     * batch needing as many steps (b*accum closest to full, never below). */
    uint32_t full = req->batch_size, accum = (full + ok[at].batch - 1) / ok[at].batch;
    uint32_t even = (full + accum - 1) / accum;
    while (at > 0 && ok[at - 1].batch >= even)
        at--;
    if (grad_accum) *grad_accum = accum;
    if (bytes) *bytes = ok[at].bytes;
    return ok[at].batch;
}
