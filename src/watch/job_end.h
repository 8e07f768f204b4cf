/* How `vram run` words the end of an attempt that ran out of memory, read
 * back by the watch's counters (internal; docs/monitoring.md, "Metrics").
 *
 * The error it reports to vramd (POST /v1/jobs/ID/finish) starts with
 * VRAM_OOM_END; when --retry-oom reruns the command, it goes on with
 * VRAM_OOM_RETRY and the new batch, e.g. "out of memory: CUDA out of
 * memory. Tried to allocate 2 GiB; retrying with batch 4". The watch counts
 * the first as vram_job_oom_total and the second, too, as
 * vram_job_oom_retries_total. */
#ifndef VRAM_WATCH_JOB_END_H
#define VRAM_WATCH_JOB_END_H

#define VRAM_OOM_END   "out of memory"
#define VRAM_OOM_RETRY "; retrying with batch "

#endif
