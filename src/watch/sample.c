/* The sampler's one pass: every device, its processes, and which vramd job
 * each process belongs to (the job's pid or a descendant of it). */
#include "watch_internal.h"
#include "core/proc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MAX_PROCS_PER_DEVICE 1024
#define MAX_DEPTH            64

void vram_watch_pids_free(watch_pids_t *c)
{
    free(c->entries);
    vram_map_clear(&c->index);
    memset(c, 0, sizeof *c);
}

static uid_t proc_uid(pid_t pid)
{
    char path[32];
    struct stat st;
    snprintf(path, sizeof path, "/proc/%d", (int)pid);
    return stat(path, &st) == 0 ? st.st_uid : (uid_t)-1;
}

/* The running job whose process tree holds pid, or 0. */
static int64_t owner_of(const vram_job_t *jobs, size_t njobs, pid_t pid)
{
    for (int depth = 0; pid > 1 && depth < MAX_DEPTH; depth++) {
        for (size_t i = 0; i < njobs; i++)
            if (jobs[i].state == VRAM_JOB_RUNNING && jobs[i].req.pid == pid) return jobs[i].id;
        pid = vram_proc_parent(pid);
    }
    return 0;
}

/* A fingerprint of the running jobs' (id, pid): owners are looked up again
 * only when it changes. */
static uint64_t jobs_key(const vram_job_t *jobs, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) {
        if (jobs[i].state != VRAM_JOB_RUNNING) continue;
        h = (h ^ (uint64_t)jobs[i].id) * 1099511628211ull;
        h = (h ^ (uint64_t)jobs[i].req.pid) * 1099511628211ull;
    }
    return h;
}

/* The cached facts of pid, looked up on first sight. */
static watch_pid_t *pid_facts(watch_pids_t *c, pid_t pid, const vram_job_t *jobs, size_t njobs)
{
    uint64_t at;
    if (vram_map_get(&c->index, (uint64_t)pid + 1, &at)) {
        c->entries[at].seen = true;
        return &c->entries[at];
    }
    if (!vram_watch_grow((void **)&c->entries, &c->cap, c->n + 1, sizeof *c->entries) ||
        !vram_map_put(&c->index, (uint64_t)pid + 1, c->n))
        return NULL;
    watch_pid_t *e = &c->entries[c->n++];
    e->pid = pid;
    e->uid = proc_uid(pid);
    e->job_id = owner_of(jobs, njobs, pid);
    e->seen = true;
    return e;
}

/* Forgets processes not seen in this sample (their pids may be reused). */
static void pids_sweep(watch_pids_t *c)
{
    size_t k = 0;
    for (size_t i = 0; i < c->n; i++)
        if (c->entries[i].seen) {
            c->entries[k] = c->entries[i];
            c->entries[k++].seen = false;
        }
    c->n = k;
    vram_map_clear(&c->index);
    for (size_t i = 0; i < c->n; i++)
        vram_map_put(&c->index, (uint64_t)c->entries[i].pid + 1, i);
}

void vram_watch_sample_free(watch_sample_t *s)
{
    free(s->devs);
    free(s->reserved);
    free(s->free_adm);
    free(s->procs);
    free(s->jobs);
    free(s->uses);
    memset(s, 0, sizeof *s);
}

uint64_t vram_watch_job_used(const watch_sample_t *s, int64_t job_id)
{
    uint64_t used = 0;
    for (size_t i = 0; i < s->nuses; i++)
        if (s->uses[i].job_id == job_id) used += s->uses[i].used_bytes;
    return used;
}

static void credit(watch_sample_t *s, int64_t job_id, int device, uint64_t bytes)
{
    for (size_t i = 0; i < s->nuses; i++)
        if (s->uses[i].job_id == job_id && s->uses[i].device == device) {
            s->uses[i].used_bytes += bytes;
            return;
        }
}

/* One row per (running job, placed device), with the reservation. */
static int job_uses(watch_sample_t *s)
{
    size_t n = 0;
    for (size_t i = 0; i < s->njobs; i++)
        if (s->jobs[i].state == VRAM_JOB_RUNNING) n += (size_t)s->jobs[i].ndevices;
    s->uses = calloc(n + 1, sizeof *s->uses);
    if (!s->uses) return vram_fail(VRAM_ENOMEM, "out of memory");
    for (size_t i = 0; i < s->njobs; i++) {
        const vram_job_t *j = &s->jobs[i];
        if (j->state != VRAM_JOB_RUNNING) continue;
        for (int k = 0; k < j->ndevices; k++) {
            s->uses[s->nuses++] = (watch_job_use_t){j->id, j->devices[k], 0, j->reserved_bytes};
            if (j->devices[k] >= 0 && j->devices[k] < s->ndev)
                s->reserved[j->devices[k]] += j->reserved_bytes;
        }
    }
    return 0;
}

static int read_processes(vram_watch_t *w, watch_sample_t *s, int d, vram_process_info_t *buf)
{
    size_t n = 0;
    if (!w->dev.processes || w->dev.processes(w->dev.arg, d, buf, MAX_PROCS_PER_DEVICE, &n) != 0)
        return 0; /* the device's figures still count without its processes */
    if (n > MAX_PROCS_PER_DEVICE) n = MAX_PROCS_PER_DEVICE;
    watch_proc_t *grown = realloc(s->procs, (s->nprocs + n + 1) * sizeof *grown);
    if (!grown) return vram_fail(VRAM_ENOMEM, "out of memory");
    s->procs = grown;
    for (size_t i = 0; i < n; i++) {
        watch_pid_t *facts = pid_facts(&w->pids, buf[i].pid, s->jobs, s->njobs);
        if (!facts) return vram_fail(VRAM_ENOMEM, "out of memory");
        watch_proc_t *p = &s->procs[s->nprocs++];
        p->device = d;
        p->pid = buf[i].pid;
        p->uid = facts->uid;
        p->used_bytes = buf[i].used_bytes;
        p->job_id = facts->job_id;
        snprintf(p->name, sizeof p->name, "%s", buf[i].name);
        if (p->job_id && p->used_bytes != VRAM_UNKNOWN_U64) credit(s, p->job_id, d, p->used_bytes);
    }
    return 0;
}

int vram_watch_take_sample(vram_watch_t *w, watch_sample_t *out)
{
    uint64_t t0 = vram_now_ns();
    watch_sample_t s = {.t = vram_watch_now(w), .ndev = w->ndev};
    vram_process_info_t *buf = NULL;
    int rc = 0;
    s.devs = calloc((size_t)s.ndev + 1, sizeof *s.devs);
    s.reserved = calloc((size_t)s.ndev + 1, sizeof *s.reserved);
    s.free_adm = malloc(((size_t)s.ndev + 1) * sizeof *s.free_adm);
    buf = malloc(MAX_PROCS_PER_DEVICE * sizeof *buf);
    if (!s.devs || !s.reserved || !s.free_adm || !buf) {
        rc = vram_fail(VRAM_ENOMEM, "out of memory");
        goto out;
    }
    if (w->cfg.sched && (rc = vram_sched_active_jobs(w->cfg.sched, &s.jobs, &s.njobs)) != 0)
        goto out;
    if ((rc = job_uses(&s)) != 0) goto out;
    uint64_t key = jobs_key(s.jobs, s.njobs);
    if (key != w->pids.jobs_key) { /* jobs came or went: find owners again */
        vram_watch_pids_free(&w->pids);
        w->pids.jobs_key = key;
    }
    for (int d = 0; d < s.ndev; d++) {
        vram_device_info_t *info = &s.devs[d];
        info->index = d;
        info->total_bytes = info->used_bytes = info->free_bytes = VRAM_UNKNOWN_U64;
        info->utilization_pct = info->temperature_c = VRAM_UNKNOWN_INT;
        info->power_w = -1;
        if (w->dev.info(w->dev.arg, d, info) != 0) {
            info->health = VRAM_HEALTH_ERROR;
            snprintf(info->error, sizeof info->error, "%s", vram_last_error());
            continue;
        }
        if (info->health != VRAM_HEALTH_ERROR && (rc = read_processes(w, &s, d, buf)) != 0)
            goto out;
    }
    pids_sweep(&w->pids);
    /* The scheduler owns the admission figure; a probe of /v1/status younger
     * than a sample period is reused. */
    if (!w->cfg.sched ||
        vram_sched_free_for_admission(w->cfg.sched, w->cfg.interval_s, s.free_adm, s.ndev) != 0)
        for (int d = 0; d < s.ndev; d++)
            s.free_adm[d] = VRAM_UNKNOWN_U64;
out:
    free(buf);
    s.duration_s = (double)(vram_now_ns() - t0) / 1e9;
    if (rc)
        vram_watch_sample_free(&s);
    else
        *out = s;
    return rc;
}
