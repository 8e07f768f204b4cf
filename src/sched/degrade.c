/* Graceful degradation: a smaller batch with gradient accumulation. */
#include "sched/sched.h"

uint64_t vram_job_mem_at_batch(const vram_job_request_t *req, uint32_t batch)
{
    if (!req->per_sample_bytes || !req->batch_size || batch >= req->batch_size)
        return req->mem_bytes;
    uint64_t saved = (uint64_t)(req->batch_size - batch) * req->per_sample_bytes;
    /* The per-sample part can never exceed the whole; keep one sample's worth. */
    return saved >= req->mem_bytes ? req->per_sample_bytes : req->mem_bytes - saved;
}

uint32_t vram_job_degrade(const vram_job_request_t *req, uint64_t avail, uint32_t *grad_accum)
{
    uint32_t full = req->batch_size, lo = req->min_batch_size ? req->min_batch_size : 1;
    uint32_t top = req->max_batch_size && req->max_batch_size < full ? req->max_batch_size : full;
    if (!full || lo > top) return 0;
    uint32_t b = top;
    uint64_t at_top = vram_job_mem_at_batch(req, top);
    if (at_top > avail) {
        if (!req->per_sample_bytes) return 0;
        /* memory falls by per_sample_bytes per sample removed */
        uint64_t cut = (at_top - avail + req->per_sample_bytes - 1) / req->per_sample_bytes;
        if (cut >= top) return 0;
        b = (uint32_t)(top - cut);
        if (b < lo || vram_job_mem_at_batch(req, b) > avail) return 0;
    }
    /* Accumulate to keep the effective batch; then take the smallest batch
     * that still reaches it (b*accum closest to full, never below). */
    uint32_t accum = (full + b - 1) / b;
    uint32_t even = (full + accum - 1) / accum;
    if (even >= lo && even <= b) b = even;
    if (grad_accum) *grad_accum = accum;
    return b;
}
