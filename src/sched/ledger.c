/* The ledger: how much memory each device can still hand out.
 * usable = total - safety margin - memory used outside vramd's reservations.
 * A running job's own processes (its pid and descendants) count against its
 * reservation, not as outside use, except for what they use beyond it. */
#include "sched_internal.h"

#include <stdlib.h>
#include <string.h>

#define MAX_PROCS 256
#define MAX_DEPTH 64

/* The running job whose process tree holds pid, or NULL. */
static sched_job_t *owner_of(vram_sched_t *s, pid_t pid)
{
    for (int depth = 0; pid > 1 && depth < MAX_DEPTH; depth++) {
        for (size_t i = 0; i < s->nactive; i++) {
            sched_job_t *j = s->active[i];
            if (j->job.state == VRAM_JOB_RUNNING && j->job.req.pid == pid) return j;
        }
        pid = vram_proc_parent(pid);
    }
    return NULL;
}

static int placed_slot(const sched_job_t *j, int dev)
{
    for (int k = 0; k < j->job.ndevices; k++)
        if (j->job.devices[k] == dev) return k;
    return -1;
}

/* Lists a device's processes; 0 entries when the backend cannot tell. */
static size_t list_processes(vram_sched_t *s, int d, vram_process_info_t *procs)
{
    size_t n = 0;
    if (!s->dev.processes || s->dev.processes(s->dev.arg, d, procs, MAX_PROCS, &n) != 0) return 0;
    return n > MAX_PROCS ? MAX_PROCS : n;
}

static bool listed(const vram_process_info_t *procs, size_t n, pid_t pid)
{
    for (size_t i = 0; i < n; i++)
        if (procs[i].pid == pid) return true;
    return false;
}

/* Credits a process's usage to job j (its owner, or NULL) on device d. */
static void credit(sched_job_t *j, int d, const vram_process_info_t *p)
{
    int slot = j ? placed_slot(j, d) : -1;
    if (slot >= 0) j->used_bytes[slot] += p->used_bytes; /* else not ours */
}

/* Queries the devices and attributes their processes to running jobs.
 * Processes are listed before and after the device's used memory is read, so
 * a job process that allocates or frees in between is still credited to its
 * job instead of showing up as outside use (which would block admission).
 * Owners of the first listing are resolved at once: a process that exits
 * meanwhile can no longer be traced to its job through /proc. The cost of
 * that choice: for one observation, a job that just freed may be credited
 * with memory no longer in `used`, never beyond its reservation. */
static int observe(vram_sched_t *s)
{
    vram_process_info_t *before = malloc(sizeof *before * MAX_PROCS * 2);
    sched_job_t **before_owner = malloc(sizeof *before_owner * MAX_PROCS);
    if (!before || !before_owner) {
        free(before);
        free(before_owner);
        return vram_fail(VRAM_ENOMEM, "out of memory");
    }
    vram_process_info_t *after = before + MAX_PROCS;
    for (size_t i = 0; i < s->nactive; i++)
        memset(s->active[i]->used_bytes, 0, sizeof s->active[i]->used_bytes);
    for (int d = 0; d < s->ndev; d++) {
        sched_dev_t *dv = &s->obs[d];
        memset(dv, 0, sizeof *dv);
        size_t nbefore = list_processes(s, d, before);
        for (size_t p = 0; p < nbefore; p++)
            before_owner[p] = owner_of(s, before[p].pid);
        vram_device_info_t info;
        memset(&info, 0, sizeof info);
        info.total_bytes = info.used_bytes = VRAM_UNKNOWN_U64;
        if (s->dev.info(s->dev.arg, d, &info) != 0 || info.total_bytes == VRAM_UNKNOWN_U64)
            continue;
        size_t nafter = list_processes(s, d, after);
        dv->ok = info.health != VRAM_HEALTH_ERROR && info.health != VRAM_HEALTH_DISABLED;
        dv->total = info.total_bytes;
        memcpy(dv->name, info.name, sizeof dv->name);
        dv->name[sizeof dv->name - 1] = 0;
        dv->used = info.used_bytes == VRAM_UNKNOWN_U64 ? 0 : info.used_bytes;
        if (vram_parse_size_or_fraction(s->cfg.safety_margin, dv->total, &dv->margin) != 0)
            dv->margin = 0;
        uint64_t dead = 0;
        for (size_t p = 0; p < nafter; p++) {
            if (after[p].used_bytes == VRAM_UNKNOWN_U64) continue;
            /* An exited process not yet reaped (a zombie) holds no device
             * memory any more, whatever a backend's bookkeeping says. */
            if (!vram_proc_alive(after[p].pid, 0)) {
                dead += after[p].used_bytes;
                continue;
            }
            credit(owner_of(s, after[p].pid), d, &after[p]);
        }
        for (size_t p = 0; p < nbefore; p++) /* freed or exited meanwhile */
            if (before[p].used_bytes != VRAM_UNKNOWN_U64 && !listed(after, nafter, before[p].pid))
                credit(before_owner[p], d, &before[p]);
        dv->used = dv->used > dead ? dv->used - dead : 0;
    }
    free(before);
    free(before_owner);
    s->obs_ns = vram_now_ns();
    s->obs_valid = true;
    return 0;
}

int vram_ledger_probe(vram_sched_t *s, sched_dev_t *devs, double max_age_s)
{
    uint64_t ttl = max_age_s > 0 ? (uint64_t)(max_age_s * 1e9) : 0;
    if (!s->obs_valid || ttl == 0 || vram_now_ns() - s->obs_ns >= ttl) {
        int rc = observe(s);
        if (rc) return rc;
    }
    for (int d = 0; d < s->ndev; d++) {
        sched_dev_t *dv = &devs[d];
        *dv = s->obs[d];
        if (!dv->total) continue;
        /* What running jobs' own processes use here, capped by their reservation. */
        uint64_t covered = 0;
        for (size_t i = 0; i < s->nactive; i++) {
            sched_job_t *j = s->active[i];
            if (j->job.state != VRAM_JOB_RUNNING || j->released) continue;
            int slot = placed_slot(j, d);
            if (slot < 0) continue;
            dv->reserved += j->job.reserved_bytes;
            dv->jobs++;
            uint64_t u = j->used_bytes[slot];
            covered += u < j->job.reserved_bytes ? u : j->job.reserved_bytes;
        }
        dv->unmanaged = dv->used > covered ? dv->used - covered : 0;
        uint64_t off = dv->margin + dv->unmanaged;
        dv->usable = dv->total > off ? dv->total - off : 0;
    }
    return 0;
}

int vram_sched_free_for_admission(vram_sched_t *s, double max_age_s, uint64_t *out, int n)
{
    if (!s || !out || n < 0) return vram_fail(VRAM_EINVAL, "NULL argument");
    pthread_mutex_lock(&s->lock);
    sched_dev_t *devs = calloc((size_t)s->ndev + 1, sizeof *devs);
    int rc = devs ? vram_ledger_probe(s, devs, max_age_s) : vram_fail(VRAM_ENOMEM, "out of memory");
    for (int d = 0; rc == 0 && d < n; d++)
        out[d] =
            d < s->ndev && devs[d].ok ? sched_dev_free_for_admission(&devs[d]) : VRAM_UNKNOWN_U64;
    pthread_mutex_unlock(&s->lock);
    free(devs);
    return rc;
}
