/* The scheduler object the daemon drives: submit, cancel, finish, renew and a
 * periodic tick. One lock guards everything; every operation writes its state
 * changes to the store in one transaction before it returns. */
#include "sched/device_source.h"
#include "sched_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

const char *vram_job_state_name(vram_job_state_t st)
{
    switch (st) {
    case VRAM_JOB_QUEUED:
        return "queued";
    case VRAM_JOB_RUNNING:
        return "running";
    case VRAM_JOB_DONE:
        return "done";
    case VRAM_JOB_FAILED:
        return "failed";
    case VRAM_JOB_CANCELLED:
        return "cancelled";
    case VRAM_JOB_TIMEOUT:
        return "timeout";
    }
    return "unknown";
}

int vram_job_state_parse(const char *name)
{
    for (int st = VRAM_JOB_QUEUED; st <= VRAM_JOB_TIMEOUT; st++)
        if (name && !strcasecmp(name, vram_job_state_name((vram_job_state_t)st))) return st;
    return -1;
}

static double real_clock(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

double vram_sched_now(const vram_sched_t *s)
{
    return s->cfg.clock ? s->cfg.clock() : real_clock();
}

/* ---- configuration ---------------------------------------------------- */

int vram_sched_config_from_options(vram_sched_config_t *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    const char *margin = vram_option_str(VRAM_OPT_SAFETY_MARGIN);
    uint64_t probe;
    if (vram_parse_size_or_fraction(margin, 1, &probe) != 0 ||
        strlen(margin) >= sizeof cfg->safety_margin)
        return vram_fail(VRAM_EINVAL, "VRAM_SAFETY_MARGIN: bad value \"%s\"", margin);
    snprintf(cfg->safety_margin, sizeof cfg->safety_margin, "%s", margin);
    long long n;
    int rc;
    if ((rc = vram_option_int(VRAM_OPT_MAX_CONCURRENT_JOBS, &n)) != 0) return rc;
    if (n < 0 || n > 1000000)
        return vram_fail(VRAM_EINVAL, "VRAM_MAX_CONCURRENT_JOBS: %lld is out of range", n);
    cfg->max_concurrent_jobs = (int)n;
    if ((rc = vram_option_double(VRAM_OPT_JOB_TIMEOUT, &cfg->job_timeout_s)) != 0) return rc;
    if ((rc = vram_option_double(VRAM_OPT_LEASE, &cfg->lease_s)) != 0) return rc;
    if ((rc = vram_option_bool(VRAM_OPT_BACKFILL, &cfg->backfill)) != 0) return rc;
    const char *pl = vram_option_str(VRAM_OPT_PLACEMENT);
    if (!strcasecmp(pl, "best-fit") || !strcasecmp(pl, "best_fit"))
        cfg->placement = VRAM_PLACE_BEST_FIT;
    else if (!strcasecmp(pl, "least-loaded") || !strcasecmp(pl, "least_loaded"))
        cfg->placement = VRAM_PLACE_LEAST_LOADED;
    else
        return vram_fail(VRAM_EINVAL,
                         "VRAM_PLACEMENT: unknown placement \"%s\" (best-fit or least-loaded)", pl);
    const char *db = vram_option_str(VRAM_OPT_DB);
    cfg->db_path = *db ? db : NULL;
    cfg->probe_interval_s = 0.05; /* below the daemon's 100 ms tick */
    if ((rc = vram_option_double(VRAM_OPT_STATUS_CACHE, &cfg->status_cache_s)) != 0) return rc;
    if ((rc = vram_option_double(VRAM_OPT_KILL_GRACE, &cfg->kill_grace_s)) != 0) return rc;
    if ((rc = vram_option_double(VRAM_OPT_JOB_RETENTION, &cfg->job_retention_s)) != 0) return rc;
    static const struct {
        vram_option_t opt;
        const char *name;
    } quotas[] = {{VRAM_OPT_MAX_QUEUED_PER_USER, "VRAM_MAX_QUEUED_PER_USER"},
                  {VRAM_OPT_MAX_RUNNING_PER_USER, "VRAM_MAX_RUNNING_PER_USER"}};
    int *quota_out[] = {&cfg->max_queued_per_uid, &cfg->max_running_per_uid};
    for (int i = 0; i < 2; i++) {
        if ((rc = vram_option_int(quotas[i].opt, &n)) != 0) return rc;
        if (n < 0 || n > 10000000)
            return vram_fail(VRAM_EINVAL, "%s: %lld is out of range (0 to 10000000)",
                             quotas[i].name, n);
        *quota_out[i] = (int)n;
    }
    return 0;
}

/* ---- active jobs -------------------------------------------------------- */

static int add_active(vram_sched_t *s, sched_job_t *j)
{
    if (s->nactive == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 64;
        sched_job_t **a = realloc(s->active, cap * sizeof *a);
        if (!a) return vram_fail(VRAM_ENOMEM, "out of memory");
        s->active = a;
        s->cap = cap;
    }
    s->active[s->nactive++] = j;
    return 0;
}

sched_job_t *vram_sched_find_active(vram_sched_t *s, int64_t id)
{
    /* active is in arrival (id) order: binary search */
    size_t lo = 0, hi = s->nactive;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (s->active[mid]->job.id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < s->nactive && s->active[lo]->job.id == id ? s->active[lo] : NULL;
}

static void bury_fd(vram_sched_t *s, int fd)
{
    if (fd < 0) return;
    if (s->ndead == s->dead_cap) {
        size_t cap = s->dead_cap ? s->dead_cap * 2 : 16;
        int *a = realloc(s->dead_fds, cap * sizeof *a);
        if (!a) {
            close(fd); /* rare: better a racy close than a leak */
            return;
        }
        s->dead_fds = a;
        s->dead_cap = cap;
    }
    s->dead_fds[s->ndead++] = fd;
}

void vram_sched_drop_ended(vram_sched_t *s)
{
    vram_queue_compact(s); /* before the ended jobs are freed */
    size_t k = 0;
    for (size_t i = 0; i < s->nactive; i++) {
        sched_job_t *j = s->active[i];
        if (j->job.state == VRAM_JOB_QUEUED || j->job.state == VRAM_JOB_RUNNING)
            s->active[k++] = j;
        else {
            bury_fd(s, j->pidfd);
            free(j);
        }
    }
    s->nactive = k;
}

/* Keeps a state change for on_event until the transaction commits; an event
 * that cannot be kept (out of memory) is lost, never the state change. */
static void defer_event(vram_sched_t *s, const vram_job_t *job, const char *kind,
                        const char *message)
{
    if (s->nevents == s->events_cap) {
        size_t cap = s->events_cap ? s->events_cap * 2 : 16;
        sched_event_t *a = realloc(s->events, cap * sizeof *a);
        if (!a) return;
        s->events = a;
        s->events_cap = cap;
    }
    sched_event_t *e = &s->events[s->nevents++];
    e->job = *job;
    snprintf(e->kind, sizeof e->kind, "%s", kind);
    snprintf(e->message, sizeof e->message, "%s", message ? message : "");
}

int vram_sched_transition(vram_sched_t *s, sched_job_t *j, vram_job_state_t to, const char *kind,
                          const char *message)
{
    double now = vram_sched_now(s);
    s->dirty = true;
    /* A job that ends stops covering its processes' usage: observe again
     * rather than count its last-seen usage as outside use. */
    if (j->job.state == VRAM_JOB_RUNNING && to != VRAM_JOB_RUNNING)
        for (int k = 0; k < j->job.ndevices; k++)
            if (j->used_bytes[k]) s->obs_valid = false;
    j->job.state = to;
    if (to == VRAM_JOB_RUNNING) {
        if (j->job.req.pid > 0 && j->pidfd < 0) j->pidfd = vram_pid_open_fd(j->job.req.pid);
    } else if (to != VRAM_JOB_QUEUED) {
        j->job.ended_at = now;
        if (message && to != VRAM_JOB_DONE)
            snprintf(j->job.error, sizeof j->job.error, "%s", message);
    }
    int rc = vram_store_update_job(s->store, &j->job);
    if (rc == 0) rc = vram_store_event(s->store, j->job.id, now, kind, message);
    if (s->cfg.on_event) defer_event(s, &j->job, kind, message);
    pthread_cond_broadcast(&s->changed);
    return rc;
}

static int reload_one(void *arg, const vram_job_t *job, uint64_t pid_start);

/* After a failed transaction the store kept the old state: rebuild the
 * in-memory jobs from it, so memory and store never disagree. */
static void resync(vram_sched_t *s)
{
    for (size_t i = 0; i < s->nactive; i++) {
        bury_fd(s, s->active[i]->pidfd);
        free(s->active[i]);
    }
    s->nactive = 0;
    s->nqueue = 0;
    s->obs_valid = false;
    if (vram_store_load_active(s->store, reload_one, s) != 0 || vram_queue_rebuild(s) != 0) return;
    double now = vram_sched_now(s);
    for (size_t i = 0; i < s->nactive; i++) {
        sched_job_t *j = s->active[i];
        if (j->job.state != VRAM_JOB_RUNNING) continue;
        if (j->job.req.pid > 0) j->pidfd = vram_pid_open_fd(j->job.req.pid);
        j->lease_until = s->cfg.lease_s > 0 && !j->job.has_spawn ? now + s->cfg.lease_s : 0;
        /* The store could not record that its process ended (each tick
         * tries again): its memory is free meanwhile, in memory. */
        j->released = j->job.req.pid > 0 && !vram_proc_alive(j->job.req.pid, j->pid_start);
    }
    pthread_cond_broadcast(&s->changed);
}

/* Tells on_event the committed state changes, outside the scheduler lock but
 * in commit order (deliver_lock is taken before the lock is released). */
static void unlock_and_deliver(vram_sched_t *s)
{
    if (s->nevents == 0) {
        pthread_mutex_unlock(&s->lock);
        return;
    }
    /* Two buffers, swapped: the next operation fills one while this one is
     * told from the other (the spare is guarded by deliver_lock). */
    pthread_mutex_lock(&s->deliver_lock);
    sched_event_t *ev = s->events;
    size_t n = s->nevents, cap = s->events_cap;
    s->events = s->spare_events;
    s->events_cap = s->spare_cap;
    s->nevents = 0;
    pthread_mutex_unlock(&s->lock);
    for (size_t i = 0; i < n; i++)
        s->cfg.on_event(s->cfg.event_arg, &ev[i].job, ev[i].kind, ev[i].message);
    s->spare_events = ev;
    s->spare_cap = cap;
    pthread_mutex_unlock(&s->deliver_lock);
}

/* Runs fn inside one transaction under the lock, then drops ended jobs. The
 * state changes are told (on_event) only once the transaction committed. */
static int locked_op(vram_sched_t *s, int (*fn)(vram_sched_t *, void *), void *arg)
{
    pthread_mutex_lock(&s->lock);
    s->dirty = false;
    s->nevents = 0;
    s->nexits = 0;
    int rc = vram_store_begin(s->store);
    if (rc == 0) {
        rc = fn(s, arg);
        if (rc >= 0) {
            int c = vram_store_commit(s->store);
            if (c) rc = c;
        }
        if (rc < 0) {
            s->nevents = 0; /* rolled back: nothing happened */
            vram_store_rollback(s->store);
            if (s->dirty) {
                /* keep the operation's error message, not resync's */
                char msg[512];
                snprintf(msg, sizeof msg, "%s", vram_last_error());
                resync(s);
                vram_fail(rc, "%s", msg);
            }
        }
    }
    if (rc < 0) s->nevents = 0; /* a failed begin or commit */
    vram_spawn_exits_done(s, rc >= 0);
    vram_sched_drop_ended(s);
    unlock_and_deliver(s);
    return rc;
}

/* ---- reload ------------------------------------------------------------- */

static int reload_one(void *arg, const vram_job_t *job, uint64_t pid_start)
{
    vram_sched_t *s = arg;
    sched_job_t *j = calloc(1, sizeof *j);
    if (!j) return vram_fail(VRAM_ENOMEM, "out of memory");
    j->job = *job;
    j->pid_start = pid_start;
    j->pidfd = -1;
    double timeout = j->job.req.timeout_s;
    j->deadline = timeout > 0 ? j->job.submitted_at + timeout : 0;
    int rc = add_active(s, j);
    if (rc) free(j);
    return rc;
}

/* A queued job whose client died will never run anything: drop it before it
 * is admitted for nobody. */
static int reap_dead_queued(vram_sched_t *s)
{
    int changed = 0;
    for (size_t i = 0; i < s->nactive; i++) {
        sched_job_t *j = s->active[i];
        pid_t pid = j->job.req.pid;
        if (j->job.state != VRAM_JOB_QUEUED || pid <= 0 || vram_proc_alive(pid, j->pid_start))
            continue;
        char msg[160];
        snprintf(msg, sizeof msg, "process %d exited while the job was queued", (int)pid);
        int rc = vram_sched_transition(s, j, VRAM_JOB_FAILED, "process_exited", msg);
        if (rc) return rc;
        changed++;
    }
    return changed;
}

static int recover(vram_sched_t *s, void *arg)
{
    (void)arg;
    double now = vram_sched_now(s);
    for (size_t i = 0; i < s->nactive; i++) {
        sched_job_t *j = s->active[i];
        if (j->job.state != VRAM_JOB_RUNNING) continue;
        pid_t pid = j->job.req.pid;
        char msg[200];
        int rc;
        if (pid <= 0 && j->job.has_spawn) {
            rc = vram_sched_transition(s, j, VRAM_JOB_FAILED, "recovered_dead",
                                       "vramd stopped before it started the job's command");
            if (rc) return rc;
            continue;
        }
        if (pid > 0 && !vram_proc_alive(pid, j->pid_start)) {
            snprintf(msg, sizeof msg, "process %d ended while vramd was down; reservation released",
                     (int)pid);
            if ((rc = vram_sched_process_ended(s, j, "recovered_dead", msg))) return rc;
            continue;
        }
        if (pid > 0) j->pidfd = vram_pid_open_fd(pid);
        j->lease_until = s->cfg.lease_s > 0 && !j->job.has_spawn ? now + s->cfg.lease_s : 0;
        rc = vram_store_event(s->store, j->job.id, now, "recovered",
                              "still running after vramd restart; reservation kept");
        if (rc) return rc;
    }
    int rc = reap_dead_queued(s);
    if (rc >= 0) rc = vram_queue_timeouts(s, now);
    if (rc < 0) return rc;
    return vram_queue_admit(s, now);
}

int vram_sched_open(const vram_sched_config_t *cfg, vram_sched_t **out)
{
    *out = NULL;
    if (!cfg || (!cfg->devices && !cfg->ctx))
        return vram_fail(VRAM_EINVAL, "scheduler needs a device context or device source");
    uint64_t probe;
    if (vram_parse_size_or_fraction(cfg->safety_margin[0] ? cfg->safety_margin : "0", 1, &probe))
        return vram_fail(VRAM_EINVAL, "safety margin: bad value \"%s\"", cfg->safety_margin);
    vram_sched_t *s = calloc(1, sizeof *s);
    if (!s) return vram_fail(VRAM_ENOMEM, "out of memory");
    s->cfg = *cfg;
    if (!s->cfg.safety_margin[0]) snprintf(s->cfg.safety_margin, sizeof s->cfg.safety_margin, "0");
    s->cfg.db_path = NULL; /* not kept: the caller owns the string */
    snprintf(s->exit_dir, sizeof s->exit_dir, "%s", cfg->exit_dir ? cfg->exit_dir : "");
    s->cfg.exit_dir = NULL;
    if (cfg->devices)
        s->dev = *cfg->devices;
    else
        s->dev = vram_ctx_device_source(cfg->ctx);
    s->wake[0] = s->wake[1] = -1;
    pthread_mutex_init(&s->lock, NULL);
    pthread_mutex_init(&s->deliver_lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->changed, &ca);
    pthread_condattr_destroy(&ca);

    int rc = 0;
    s->ndev = s->dev.count(s->dev.arg);
    if (s->ndev < 0 || s->ndev > 64) {
        rc = vram_fail(VRAM_ENODEV, "device count %d is not usable", s->ndev);
        goto fail;
    }
    s->obs = calloc((size_t)s->ndev + 1, sizeof *s->obs);
    if (!s->obs) {
        rc = vram_fail(VRAM_ENOMEM, "out of memory");
        goto fail;
    }
    if (pipe2(s->wake, O_CLOEXEC | O_NONBLOCK) != 0) {
        rc = vram_fail(VRAM_EIO, "pipe: %s", strerror(errno));
        goto fail;
    }
    const char *path = cfg->db_path ? cfg->db_path : ":memory:";
    if ((rc = vram_store_open(path, &s->store)) != 0) goto fail;
    if ((rc = vram_store_load_active(s->store, reload_one, s)) != 0) goto fail;
    if ((rc = vram_queue_rebuild(s)) != 0) goto fail;
    if ((rc = locked_op(s, recover, NULL)) < 0) goto fail;
    vram_spawn_sweep_exits(s);
    *out = s;
    return 0;
fail:
    vram_sched_close(s);
    return rc;
}

void vram_sched_close(vram_sched_t *s)
{
    if (!s) return;
    for (size_t i = 0; i < s->nactive; i++) {
        if (s->active[i]->pidfd >= 0) close(s->active[i]->pidfd);
        free(s->active[i]);
    }
    for (size_t i = 0; i < s->ndead; i++)
        close(s->dead_fds[i]);
    free(s->dead_fds);
    free(s->active);
    free(s->queue);
    free(s->events);
    free(s->spare_events);
    free(s->exits_read);
    free(s->kills);
    pthread_mutex_destroy(&s->deliver_lock);
    free(s->obs);
    vram_store_close(s->store);
    if (s->wake[0] >= 0) close(s->wake[0]);
    if (s->wake[1] >= 0) close(s->wake[1]);
    pthread_mutex_destroy(&s->lock);
    pthread_cond_destroy(&s->changed);
    free(s);
}

/* ---- submit ------------------------------------------------------------- */

typedef struct {
    const vram_job_request_t *req;
    vram_job_t *out;
} submit_arg_t;

/* The process whose exit releases a job must be the caller's own (root may
 * name any): else one user could tie a job to another's process, or be
 * signalled through it on cancel. Never pid 1 or a kernel thread. */
static int check_pid(const vram_job_request_t *r)
{
    uid_t owner;
    bool kthread;
    if (!vram_proc_alive(r->pid, 0) || !vram_proc_owner(r->pid, &owner, &kthread))
        return vram_fail(VRAM_EINVAL, "pid: process %d is not running", (int)r->pid);
    if (r->pid == 1 || kthread)
        return vram_fail(VRAM_EINVAL, "pid: process %d is %s, not a job's process", (int)r->pid,
                         r->pid == 1 ? "init" : "a kernel thread");
    if (r->uid != 0 && owner != r->uid)
        return vram_fail(VRAM_EPERM, "pid: process %d belongs to uid %u, not to uid %u",
                         (int)r->pid, (unsigned)owner, (unsigned)r->uid);
    return 0;
}

/* One uid may not hold more than max_queued_per_uid queued jobs (root may). */
static int check_queue_quota(vram_sched_t *s, const vram_job_request_t *r)
{
    int limit = s->cfg.max_queued_per_uid;
    if (limit <= 0 || r->uid == 0) return 0;
    int n = 0;
    for (size_t i = 0; i < s->nqueue; i++)
        if (s->queue[i]->job.state == VRAM_JOB_QUEUED && s->queue[i]->job.req.uid == r->uid) n++;
    if (n < limit) return 0;
    return vram_fail(VRAM_EBUSY,
                     "uid %u already has %d queued jobs (MAX_QUEUED_PER_USER is %d): wait for "
                     "some to start or cancel them",
                     (unsigned)r->uid, n, limit);
}

static int validate(vram_sched_t *s, vram_job_request_t *r)
{
    if (r->mem_bytes == 0) return vram_fail(VRAM_EINVAL, "mem_bytes: must be greater than 0");
    if (r->npinned < 0 || r->npinned > VRAM_SCHED_MAX_GPUS)
        return vram_fail(VRAM_EINVAL, "devices: at most %d pinned devices", VRAM_SCHED_MAX_GPUS);
    for (int k = 0; k < r->npinned; k++) {
        if (r->pinned[k] < 0 || r->pinned[k] >= s->ndev)
            return vram_fail(VRAM_EINVAL, "devices: no device %d (this machine has %d)",
                             r->pinned[k], s->ndev);
        for (int m = 0; m < k; m++)
            if (r->pinned[m] == r->pinned[k])
                return vram_fail(VRAM_EINVAL, "devices: device %d is listed twice", r->pinned[k]);
    }
    if (r->npinned > 0) {
        if (r->gpus > 0 && r->gpus != r->npinned)
            return vram_fail(VRAM_EINVAL, "gpus: %d does not match the %d pinned devices", r->gpus,
                             r->npinned);
        r->gpus = r->npinned;
    }
    if (r->gpus < 1 || r->gpus > s->ndev || r->gpus > VRAM_SCHED_MAX_GPUS)
        return vram_fail(VRAM_EINVAL, "gpus: %d requested but this machine has %d GPU(s)", r->gpus,
                         s->ndev);
    if (r->batch_size && r->min_batch_size > r->batch_size)
        return vram_fail(VRAM_EINVAL, "min_batch_size: %u is larger than batch_size %u",
                         r->min_batch_size, r->batch_size);
    if (r->max_batch_size && (!r->batch_size || r->max_batch_size > r->batch_size ||
                              r->max_batch_size < r->min_batch_size))
        return vram_fail(VRAM_EINVAL,
                         "max_batch_size: %u must be between min_batch_size %u and batch_size %u",
                         r->max_batch_size, r->min_batch_size, r->batch_size);
    if (vram_job_batch_bytes_check(r) != 0) return VRAM_EINVAL;
    if (!isfinite(r->timeout_s)) return vram_fail(VRAM_EINVAL, "timeout_s: must be finite");
    if (r->pid < 0) return vram_fail(VRAM_EINVAL, "pid: must not be negative");
    if (r->pid > 0) {
        int rc = check_pid(r);
        if (rc) return rc;
    }

    /* A request no device could ever hold would wait forever: refuse it. */
    uint64_t need = vram_job_least_bytes(r);
    sched_dev_t *devs = calloc((size_t)s->ndev + 1, sizeof *devs);
    if (!devs) return vram_fail(VRAM_ENOMEM, "out of memory");
    int rc = vram_ledger_probe(s, devs, s->cfg.probe_interval_s);
    int fits = 0;
    uint64_t best = 0;
    for (int d = 0; rc == 0 && d < s->ndev; d++) {
        bool eligible = r->npinned == 0;
        for (int k = 0; k < r->npinned; k++)
            if (r->pinned[k] == d) eligible = true;
        uint64_t cap = devs[d].total > devs[d].margin ? devs[d].total - devs[d].margin : 0;
        if (!eligible) continue;
        if (cap > best) best = cap;
        if (cap >= need) fits++;
    }
    free(devs);
    if (rc) return rc;
    if (fits < r->gpus) {
        char a[32], b[32];
        return vram_fail(VRAM_EINVAL,
                         "mem_bytes: %s per GPU on %d GPU(s) can never fit (largest device "
                         "offers %s after the safety margin)",
                         vram_format_size(need, a, sizeof a), r->gpus,
                         vram_format_size(best, b, sizeof b));
    }
    return 0;
}

static int do_submit(vram_sched_t *s, void *arg)
{
    submit_arg_t *a = arg;
    vram_job_request_t r = *a->req;
    r.name[sizeof r.name - 1] = 0;
    r.command[sizeof r.command - 1] = 0;
    if (r.gpus == 0 && r.npinned == 0) r.gpus = 1;
    int rc = validate(s, &r);
    if (rc == 0) rc = check_queue_quota(s, &r);
    if (rc) return rc;
    double now = vram_sched_now(s);
    if (r.timeout_s < 0) r.timeout_s = s->cfg.job_timeout_s;

    sched_job_t *j = calloc(1, sizeof *j);
    if (!j) return vram_fail(VRAM_ENOMEM, "out of memory");
    j->pidfd = -1;
    j->job.req = r;
    j->job.state = VRAM_JOB_QUEUED;
    j->job.submitted_at = now;
    j->job.exit_status = -1;
    j->job.has_spawn = r.spawn && *r.spawn;
    j->pid_start = r.pid > 0 ? vram_proc_start_time(r.pid) : 0;
    j->deadline = r.timeout_s > 0 ? now + r.timeout_s : 0;
    s->dirty = true;
    int stored = vram_store_insert_job(s->store, &j->job, j->pid_start);
    j->job.req.spawn = NULL; /* stored; the caller's text is not kept */
    if ((rc = stored) != 0 ||
        (rc = vram_store_event(s->store, j->job.id, now, "submitted", "queued")) != 0 ||
        (rc = add_active(s, j)) != 0) {
        free(j);
        return rc;
    }
    if ((rc = vram_queue_insert(s, j)) != 0) return rc; /* j is active: resync frees it */
    rc = vram_queue_admit_only(s, j, now);
    if (rc < 0) return rc;
    *a->out = j->job;
    pthread_cond_broadcast(&s->changed);
    return 0;
}

int vram_sched_submit(vram_sched_t *s, const vram_job_request_t *req, vram_job_t *out)
{
    if (!s || !req || !out) return vram_fail(VRAM_EINVAL, "NULL argument");
    vram_job_t tmp;
    submit_arg_t a = {req, &tmp};
    int rc = locked_op(s, do_submit, &a);
    if (rc < 0) return rc;
    *out = tmp;
    return 0;
}

/* ---- cancel / finish / renew -------------------------------------------- */

typedef enum { END_CANCEL, END_FINISH, END_RENEW, END_PEAK, END_SPAWN_FAILED } end_kind_t;

typedef struct {
    int64_t id;
    uid_t uid;
    const vram_job_end_t *end;
    end_kind_t kind;
    uint64_t peak_bytes;
} end_arg_t;

static int owned(vram_sched_t *s, int64_t id, uid_t uid, sched_job_t **out)
{
    sched_job_t *j = vram_sched_find_active(s, id);
    if (!j) {
        vram_job_t old;
        int rc = vram_store_get_job(s->store, id, &old);
        if (rc) return rc;
        if (uid != 0 && uid != old.req.uid)
            return vram_fail(VRAM_EPERM, "job %lld belongs to uid %u", (long long)id,
                             (unsigned)old.req.uid);
        return vram_fail(VRAM_ESTATE, "job %lld already ended (%s)", (long long)id,
                         vram_job_state_name(old.state));
    }
    if (uid != 0 && uid != j->job.req.uid)
        return vram_fail(VRAM_EPERM,
                         "job %lld belongs to uid %u; only its owner or root may "
                         "change it",
                         (long long)id, (unsigned)j->job.req.uid);
    *out = j;
    return 0;
}

int vram_sched_end_running(vram_sched_t *s, sched_job_t *j, const vram_job_end_t *e)
{
    j->job.exit_status = e->exit_status;
    j->job.end_reason = e->reason;
    j->job.retry_batch = e->reason == VRAM_END_OOM ? e->retry_batch : 0;
    char msg[300];
    if (*e->error)
        snprintf(msg, sizeof msg, "%s", e->error);
    else
        snprintf(msg, sizeof msg, "exit status %d", e->exit_status);
    return vram_sched_transition(s, j, e->exit_status == 0 ? VRAM_JOB_DONE : VRAM_JOB_FAILED,
                                 "finished", msg);
}

static int do_end(vram_sched_t *s, void *arg)
{
    end_arg_t *a = arg;
    sched_job_t *j = NULL;
    int rc = owned(s, a->id, a->uid, &j);
    if (rc) return rc;
    double now = vram_sched_now(s);
    bool was_running = j->job.state == VRAM_JOB_RUNNING;
    if (a->kind == END_RENEW) {
        if (!was_running)
            return vram_fail(VRAM_ESTATE, "job %lld is not running", (long long)a->id);
        if (s->cfg.lease_s > 0 && !j->job.has_spawn) j->lease_until = now + s->cfg.lease_s;
        return 0;
    }
    if (a->kind == END_PEAK) {
        if (!was_running)
            return vram_fail(VRAM_ESTATE, "job %lld is not running", (long long)a->id);
        /* Reports may come from several processes or arrive out of order:
         * the largest one is the job's peak. */
        if (j->job.has_peak && j->job.peak_bytes >= a->peak_bytes) return 0;
        s->dirty = true;
        j->job.has_peak = true;
        j->job.peak_bytes = a->peak_bytes;
        return vram_store_update_job(s->store, &j->job);
    }
    if (a->kind == END_SPAWN_FAILED && !was_running)
        return vram_fail(VRAM_ESTATE, "job %lld is not running", (long long)a->id);
    /* A command vramd started ends when vramd sees it end: a finish from a
     * client would free its memory and its uid's running slot while it runs. */
    if (a->kind == END_FINISH && was_running && j->job.has_spawn)
        return vram_fail(VRAM_ESTATE,
                         "job %lld was started by vramd, which records how its command ends; "
                         "cancel it to stop it",
                         (long long)a->id);
    if (a->kind == END_CANCEL || !was_running) {
        char msg[96];
        snprintf(msg, sizeof msg, "cancelled by uid %u", (unsigned)a->uid);
        rc = vram_sched_transition(s, j, VRAM_JOB_CANCELLED, "cancelled", msg);
        if (rc == 0 && was_running) vram_pid_terminate(s, j, now);
    } else {
        rc = vram_sched_end_running(s, j, a->end);
    }
    if (rc) return rc;
    /* Freed memory (or a removed head of the queue) lets the queue advance at once. */
    return vram_queue_admit(s, now);
}

static int end_op(vram_sched_t *s, end_arg_t *a)
{
    if (!s) return vram_fail(VRAM_EINVAL, "NULL scheduler");
    int rc = locked_op(s, do_end, a);
    return rc < 0 ? rc : 0;
}

int vram_sched_cancel(vram_sched_t *s, int64_t id, uid_t caller_uid)
{
    end_arg_t a = {id, caller_uid, NULL, END_CANCEL, 0};
    return end_op(s, &a);
}

int vram_sched_finish_end(vram_sched_t *s, int64_t id, uid_t caller_uid, const vram_job_end_t *end)
{
    if (!end) return vram_fail(VRAM_EINVAL, "NULL end");
    end_arg_t a = {id, caller_uid, end, END_FINISH, 0};
    return end_op(s, &a);
}

int vram_sched_finish(vram_sched_t *s, int64_t id, uid_t caller_uid, int exit_status,
                      const char *error)
{
    vram_job_end_t end = {.exit_status = exit_status};
    snprintf(end.error, sizeof end.error, "%s", error ? error : "");
    return vram_sched_finish_end(s, id, caller_uid, &end);
}

int vram_sched_spawn_failed(vram_sched_t *s, int64_t id, const char *message)
{
    vram_job_end_t end = {.exit_status = 127};
    snprintf(end.error, sizeof end.error, "%s", message ? message : "");
    end_arg_t a = {id, 0, &end, END_SPAWN_FAILED, 0};
    return end_op(s, &a);
}

int vram_sched_renew(vram_sched_t *s, int64_t id, uid_t caller_uid)
{
    end_arg_t a = {id, caller_uid, NULL, END_RENEW, 0};
    return end_op(s, &a);
}

int vram_sched_report_peak(vram_sched_t *s, int64_t id, uid_t caller_uid, uint64_t peak_bytes)
{
    end_arg_t a = {id, caller_uid, NULL, END_PEAK, peak_bytes};
    return end_op(s, &a);
}

/* ---- tick ----------------------------------------------------------------- */

enum { PRUNE_BATCH = 500 };

static int check_usage(vram_sched_t *s, double now)
{
    sched_dev_t *devs = calloc((size_t)s->ndev + 1, sizeof *devs);
    if (!devs) return vram_fail(VRAM_ENOMEM, "out of memory");
    int rc = vram_ledger_probe(s, devs, 0);
    free(devs);
    for (size_t i = 0; rc == 0 && i < s->nactive; i++) {
        sched_job_t *j = s->active[i];
        if (j->job.state != VRAM_JOB_RUNNING || j->over_reported) continue;
        for (int k = 0; k < j->job.ndevices; k++) {
            if (j->used_bytes[k] <= j->job.reserved_bytes) continue;
            char msg[200], a[32], b[32];
            snprintf(msg, sizeof msg, "uses %s on GPU %d, above its reservation of %s",
                     vram_format_size(j->used_bytes[k], a, sizeof a), j->job.devices[k],
                     vram_format_size(j->job.reserved_bytes, b, sizeof b));
            rc = vram_store_event(s->store, j->job.id, now, "over_reservation", msg);
            j->over_reported = true;
            break;
        }
    }
    return rc;
}

/* A tick's admission pass costs one placement per queued job: it is only
 * worth it when memory may have been freed since the last pass (a job ended,
 * which ticks count, or memory used outside vramd fell); frees through the
 * API run their own pass (vram_queue_admit_only records what each saw). */
static bool outside_use_fell(vram_sched_t *s)
{
    if (s->nqueue == 0) return false;
    sched_dev_t *devs = calloc((size_t)s->ndev + 1, sizeof *devs);
    if (!devs || vram_ledger_probe(s, devs, s->cfg.probe_interval_s) != 0) {
        free(devs);
        return true; /* cannot tell: try */
    }
    bool fell = false;
    for (int d = 0; d < s->ndev; d++)
        fell |= devs[d].unmanaged < s->unmanaged_seen[d];
    free(devs);
    return fell;
}

static int do_tick(vram_sched_t *s, void *arg)
{
    (void)arg;
    double now = vram_sched_now(s);
    int changed = 0, rc;
    vram_pid_kill_overdue(s, now);
    for (size_t i = 0; i < s->nactive; i++) {
        sched_job_t *j = s->active[i];
        if (j->job.state != VRAM_JOB_RUNNING) continue;
        pid_t pid = j->job.req.pid;
        char msg[200];
        if (pid > 0 &&
            (j->pidfd >= 0 ? vram_pid_fd_exited(j->pidfd) : !vram_proc_alive(pid, j->pid_start))) {
            snprintf(msg, sizeof msg, "process %d exited without reporting; reservation released",
                     (int)pid);
            if ((rc = vram_sched_process_ended(s, j, "process_exited", msg))) return rc;
            changed++;
        } else if (j->lease_until > 0 && now > j->lease_until) {
            snprintf(msg, sizeof msg, "lease of %.0f s expired; reservation released",
                     s->cfg.lease_s);
            if ((rc = vram_sched_transition(s, j, VRAM_JOB_FAILED, "lease_expired", msg)))
                return rc;
            changed++;
        }
    }
    if ((rc = reap_dead_queued(s)) < 0) return rc;
    changed += rc;
    if ((rc = vram_queue_timeouts(s, now)) < 0) return rc;
    changed += rc;
    if (now - s->last_usage_check >= 1.0) {
        s->last_usage_check = now;
        if ((rc = check_usage(s, now)) < 0) return rc;
    }
    /* Ended jobs past the retention, a bounded batch per tick: a backlog is
     * worked off tick by tick, the lock is never held long. */
    if (s->cfg.job_retention_s > 0 && (s->prune_more || now - s->last_prune >= 60)) {
        s->last_prune = now;
        int n = vram_store_prune(s->store, now - s->cfg.job_retention_s, PRUNE_BATCH);
        if (n < 0) return n;
        s->prune_more = n == PRUNE_BATCH;
    }
    if (changed == 0 && !outside_use_fell(s)) return 0; /* nothing could fit now */
    if ((rc = vram_queue_admit(s, now)) < 0) return rc;
    return changed + rc;
}

int vram_sched_tick(vram_sched_t *s)
{
    pthread_mutex_lock(&s->lock);
    for (size_t i = 0; i < s->ndead; i++)
        close(s->dead_fds[i]);
    s->ndead = 0;
    pthread_mutex_unlock(&s->lock);
    return locked_op(s, do_tick, NULL);
}

void vram_sched_wake(vram_sched_t *s)
{
    if (s && s->wake[1] >= 0) {
        ssize_t w = write(s->wake[1], "w", 1);
        (void)w;
    }
}

void vram_sched_shutdown(vram_sched_t *s)
{
    pthread_mutex_lock(&s->lock);
    s->shutting_down = true;
    pthread_cond_broadcast(&s->changed);
    pthread_mutex_unlock(&s->lock);
}

int vram_sched_run_once(vram_sched_t *s, int timeout_ms)
{
    struct pollfd *fds = NULL;
    size_t n = 0;
    pthread_mutex_lock(&s->lock);
    fds = calloc(s->nactive + 1, sizeof *fds);
    if (fds) {
        fds[n++] = (struct pollfd){.fd = s->wake[0], .events = POLLIN};
        for (size_t i = 0; i < s->nactive; i++)
            if (s->active[i]->pidfd >= 0)
                fds[n++] = (struct pollfd){.fd = s->active[i]->pidfd, .events = POLLIN};
    }
    pthread_mutex_unlock(&s->lock);
    if (fds) {
        /* pidfds closed meanwhile are only buried, never closed before the
         * next tick, so poll never sees a reused descriptor. */
        (void)poll(fds, (nfds_t)n, timeout_ms);
        free(fds);
    } else {
        usleep((useconds_t)timeout_ms * 1000);
    }
    char buf[64];
    while (read(s->wake[0], buf, sizeof buf) > 0) {
    }
    /* The store is only closed by vram_sched_close, never while this runs. */
    (void)vram_store_checkpoint(s->store);
    return vram_sched_tick(s);
}

/* ---- queries ---------------------------------------------------------------- */

int vram_sched_job(vram_sched_t *s, int64_t id, vram_job_t *out)
{
    pthread_mutex_lock(&s->lock);
    sched_job_t *j = vram_sched_find_active(s, id);
    int rc = 0;
    if (j)
        *out = j->job;
    else
        rc = vram_store_get_job(s->store, id, out);
    pthread_mutex_unlock(&s->lock);
    return rc;
}

/* Waits while job `id` is in state `from` (VRAM_JOB_MISSING: not yet
 * submitted) or, until_end, while it is queued or running. */
static int wait_while(vram_sched_t *s, int64_t id, int from, bool until_end, int timeout_ms,
                      vram_job_t *out)
{
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += timeout_ms / 1000;
    until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&s->lock);
    int rc = 0;
    for (;;) {
        sched_job_t *j = vram_sched_find_active(s, id);
        if (j)
            *out = j->job;
        else
            rc = vram_store_get_job(s->store, id, out);
        int now = rc == VRAM_ENOENT ? VRAM_JOB_MISSING : (int)out->state;
        bool waiting = until_end ? rc == 0 && (now == VRAM_JOB_QUEUED || now == VRAM_JOB_RUNNING)
                                 : now == from;
        if ((rc && rc != VRAM_ENOENT) || !waiting || s->shutting_down) break;
        if (pthread_cond_timedwait(&s->changed, &s->lock, &until) == ETIMEDOUT) break;
        rc = 0;
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

int vram_sched_wait_change(vram_sched_t *s, int64_t id, int from, int timeout_ms, vram_job_t *out)
{
    return wait_while(s, id, from, false, timeout_ms, out);
}

int vram_sched_wait(vram_sched_t *s, int64_t id, int timeout_ms, vram_job_t *out)
{
    return wait_while(s, id, VRAM_JOB_QUEUED, false, timeout_ms, out);
}

int vram_sched_wait_end(vram_sched_t *s, int64_t id, int timeout_ms, vram_job_t *out)
{
    return wait_while(s, id, 0, true, timeout_ms, out);
}

/* A running job with a table holds its full ask, or exactly the table's
 * entry for the batch it was granted. (One without a table holds mem_bytes,
 * but a job degraded by an earlier release, reloaded from the store, may
 * hold what that release reserved.) */
static bool reserves_an_entry(const vram_job_t *j)
{
    if (j->req.nbatch_bytes == 0 || j->reserved_bytes == j->req.mem_bytes) return true;
    for (int i = 0; i < j->req.nbatch_bytes; i++)
        if (j->req.batch_bytes[i].batch == j->granted_batch &&
            j->req.batch_bytes[i].bytes == j->reserved_bytes)
            return true;
    return false;
}

int vram_sched_check(vram_sched_t *s)
{
    pthread_mutex_lock(&s->lock);
    sched_dev_t *devs = calloc((size_t)s->ndev + 1, sizeof *devs);
    int rc = devs ? vram_ledger_probe(s, devs, 0) : vram_fail(VRAM_ENOMEM, "out of memory");
    for (int d = 0; rc == 0 && d < s->ndev; d++) {
        if (devs[d].reserved > devs[d].usable)
            rc =
                vram_fail(VRAM_ESTATE, "device %d: reserved %llu > usable %llu", d,
                          (unsigned long long)devs[d].reserved, (unsigned long long)devs[d].usable);
        else if (s->cfg.max_concurrent_jobs > 0 && devs[d].jobs > s->cfg.max_concurrent_jobs)
            rc = vram_fail(VRAM_ESTATE, "device %d: %d jobs > limit %d", d, devs[d].jobs,
                           s->cfg.max_concurrent_jobs);
    }
    /* the queue: every queued job once, in queue order, numbered 1..n */
    size_t nq = 0;
    for (size_t i = 0; i < s->nactive; i++)
        nq += s->active[i]->job.state == VRAM_JOB_QUEUED;
    if (rc == 0 && nq != s->nqueue)
        rc = vram_fail(VRAM_ESTATE, "%zu queued jobs, %zu in the queue", nq, s->nqueue);
    for (size_t i = 0; rc == 0 && i < s->nqueue; i++) {
        const sched_job_t *j = s->queue[i];
        const vram_job_request_t *a = i ? &s->queue[i - 1]->job.req : NULL, *b = &j->job.req;
        if (j->job.state != VRAM_JOB_QUEUED || j->queue_pos != (int)i + 1)
            rc = vram_fail(VRAM_ESTATE, "queue entry %zu: job %lld (%s, position %d)", i,
                           (long long)j->job.id, vram_job_state_name(j->job.state), j->queue_pos);
        else if (a && (a->priority < b->priority ||
                       (a->priority == b->priority && s->queue[i - 1]->job.id > j->job.id)))
            rc = vram_fail(VRAM_ESTATE, "queue out of order at job %lld", (long long)j->job.id);
    }
    for (size_t i = 0; rc == 0 && i < s->nactive; i++) {
        const vram_job_t *j = &s->active[i]->job;
        if (i > 0 && s->active[i - 1]->job.id >= j->id)
            rc = vram_fail(VRAM_ESTATE, "active jobs out of order at %lld", (long long)j->id);
        else if (j->state == VRAM_JOB_RUNNING && j->ndevices != j->req.gpus)
            rc = vram_fail(VRAM_ESTATE, "job %lld runs on %d devices, wants %d", (long long)j->id,
                           j->ndevices, j->req.gpus);
        else if (j->state == VRAM_JOB_QUEUED && j->ndevices != 0)
            rc = vram_fail(VRAM_ESTATE, "queued job %lld holds devices", (long long)j->id);
        else if (j->state == VRAM_JOB_RUNNING && !reserves_an_entry(j))
            rc = vram_fail(VRAM_ESTATE, "job %lld reserves %llu at batch %u: not its table's",
                           (long long)j->id, (unsigned long long)j->reserved_bytes,
                           j->granted_batch);
        for (int a = 0; rc == 0 && a < j->ndevices; a++)
            for (int b = 0; b < a; b++)
                if (j->devices[a] == j->devices[b])
                    rc = vram_fail(VRAM_ESTATE, "job %lld placed twice on device %d",
                                   (long long)j->id, j->devices[a]);
    }
    free(devs);
    pthread_mutex_unlock(&s->lock);
    return rc;
}

/* For the other files of the scheduler (spawn.c). */
int vram_sched_locked(vram_sched_t *s, int (*fn)(vram_sched_t *, void *), void *arg)
{
    return locked_op(s, fn, arg);
}
