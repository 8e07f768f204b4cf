/* A copy of the active jobs for observers (the watch module) that must not
 * hold the scheduler lock while they work. */
#include "sched_internal.h"

#include <stdlib.h>

int vram_sched_active_jobs(vram_sched_t *s, vram_job_t **jobs, size_t *count)
{
    if (!s || !jobs || !count) return vram_fail(VRAM_EINVAL, "NULL argument");
    pthread_mutex_lock(&s->lock);
    vram_job_t *copy = malloc((s->nactive + 1) * sizeof *copy);
    size_t n = copy ? s->nactive : 0;
    for (size_t i = 0; i < n; i++)
        copy[i] = s->active[i]->job;
    pthread_mutex_unlock(&s->lock);
    if (!copy) return vram_fail(VRAM_ENOMEM, "out of memory");
    *jobs = copy;
    *count = n;
    return 0;
}
