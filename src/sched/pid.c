/* Signals to a running job's processes: SIGTERM to its group on cancel,
 * SIGKILL after the grace period. (Its pidfd, polled to release the job the
 * moment it ends, comes from core/proc.c.) */
#include "sched_internal.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <unistd.h>

/* The group to signal for a job's pid: its process group when the pid leads
 * it (the job's own group, as `vram run`, `vram submit` and a shell job make
 * them), else the pid alone (pgid 0): a process that registered itself from
 * inside a bigger group (a test runner, a pipeline, a service) must not take
 * its siblings down with it. Never init's group nor the scheduler's own. */
static pid_t group_of(pid_t pid)
{
    pid_t pgid = getpgid(pid);
    return pgid != pid || pgid <= 1 || pgid == getpgrp() ? 0 : pgid;
}

static void signal_job(pid_t pid, pid_t pgid, int sig)
{
    if (pgid > 1)
        (void)killpg(pgid, sig);
    else
        (void)kill(pid, sig);
}

/* Whether a group recorded at SIGTERM is still the job's. A group's number
 * cannot be given to a new process while any process is in the group, so it
 * has been reused only if a process with that pid now exists that is not
 * the leader (another start time). The leader gone and no process with its
 * pid: the group may still hold the leader's children, and is theirs. */
static bool still_the_jobs(const sched_kill_t *x)
{
    if (x->pgid <= 1) return vram_proc_alive(x->pid, x->pid_start);
    uint64_t start = vram_proc_start_time(x->pgid);
    return start == 0 || start == x->pid_start;
}

void vram_pid_terminate(vram_sched_t *s, const sched_job_t *j, double now)
{
    pid_t pid = j->job.req.pid;
    if (pid <= 1 || s->cfg.kill_grace_s < 0 || !vram_proc_alive(pid, j->pid_start)) return;
    pid_t pgid = group_of(pid);
    signal_job(pid, pgid, SIGTERM);
    if (s->nkills == s->kills_cap) {
        size_t cap = s->kills_cap ? s->kills_cap * 2 : 8;
        sched_kill_t *a = realloc(s->kills, cap * sizeof *a);
        if (!a) return; /* SIGTERM was sent; only the follow-up is lost */
        s->kills = a;
        s->kills_cap = cap;
    }
    s->kills[s->nkills++] = (sched_kill_t){pid, pgid, j->pid_start, now + s->cfg.kill_grace_s};
}

/* SIGKILL once the grace has passed, to the whole group even when its
 * leader has exited meanwhile (a child that ignores SIGTERM stays in it). */
void vram_pid_kill_overdue(vram_sched_t *s, double now)
{
    size_t k = 0;
    for (size_t i = 0; i < s->nkills; i++) {
        sched_kill_t *x = &s->kills[i];
        if (!still_the_jobs(x)) continue;
        if (now >= x->at) {
            signal_job(x->pid, x->pgid, SIGKILL);
            continue;
        }
        s->kills[k++] = *x;
    }
    s->nkills = k;
}

void vram_pid_kill_now(pid_t pid)
{
    if (pid <= 1) return;
    pid_t pgid = group_of(pid);
    signal_job(pid, pgid, SIGKILL);
    if (pgid > 1) (void)kill(pid, SIGKILL); /* raced its setsid: the pid itself */
}
