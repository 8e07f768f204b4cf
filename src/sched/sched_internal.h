/* Internal state of the scheduler shared by ledger, queue, placement, store. */
#ifndef VRAM_SCHED_INTERNAL_H
#define VRAM_SCHED_INTERNAL_H

#include "sched/sched.h"
#include "core/json_writer.h"
#include "core/proc.h"

#include <pthread.h>

typedef struct vram_store vram_store_t;

/* An active (queued or running) job and what the scheduler tracks about it. */
typedef struct {
    vram_job_t job;
    uint64_t pid_start;                       /* /proc start time of job.req.pid, 0 = unknown */
    int pidfd;                                /* -1 when not watched through a pidfd */
    double deadline;                          /* queued: give up at this time; 0 = never */
    double lease_until;                       /* running: released after this time; 0 = no lease */
    uint64_t used_bytes[VRAM_SCHED_MAX_GPUS]; /* last seen usage per placed device */
    bool over_reported;                       /* an over_reservation event was recorded */
    int queue_pos;                            /* 1-based place in s->queue while queued */
    bool released;       /* running, but its process is gone and the store could not record that
                            yet (a full disk): the ledger no longer counts its reservation */
    int wait;            /* queued: why it waited at the last admission pass (sched_wait_t) */
    int64_t wait_detail; /* PRIORITY: the job ahead; USER_LIMIT: the uid's running jobs */
} sched_job_t;

/* Why a queued job did not start at the last admission pass that saw it
 * (Slurm's Reason): every pass records one for each job it considers. */
typedef enum {
    SCHED_WAIT_NEW,         /* not yet considered by a pass */
    SCHED_WAIT_MEMORY,      /* not enough free memory on enough eligible GPUs */
    SCHED_WAIT_PRIORITY,    /* without backfill: behind a job that does not fit */
    SCHED_WAIT_USER_LIMIT,  /* its uid runs MAX_RUNNING_PER_USER jobs */
    SCHED_WAIT_DEVICE_JOBS, /* its GPUs run MAX_CONCURRENT_JOBS jobs each */
    SCHED_WAIT_DEVICE_DOWN, /* too few of its GPUs are available */
} sched_wait_t;

/* One device as the ledger sees it during one pass. */
typedef struct {
    bool ok; /* answered and is not ERROR/DISABLED */
    char name[96];
    uint64_t total;     /* device memory */
    uint64_t used;      /* used by every process */
    uint64_t unmanaged; /* used outside vramd's reservations */
    uint64_t margin;    /* safety margin */
    uint64_t usable;    /* total - margin - unmanaged (>= 0) */
    uint64_t reserved;  /* sum of running jobs' reservations */
    int jobs;           /* running jobs placed here */
} sched_dev_t;

/* What a new job may still reserve on a device: /v1/status and /metrics. */
static inline uint64_t sched_dev_free_for_admission(const sched_dev_t *v)
{
    return v->usable > v->reserved ? v->usable - v->reserved : 0;
}

/* A state change waiting for its transaction to commit before it is told. */
typedef struct {
    vram_job_t job;
    char kind[32];
    char message[300];
} sched_event_t;

/* A process group sent SIGTERM, to be sent SIGKILL at `at` if it still runs. */
typedef struct {
    pid_t pid, pgid; /* pgid 0: signal the pid alone */
    uint64_t pid_start;
    double at;
} sched_kill_t;

struct vram_sched {
    pthread_mutex_t lock;
    pthread_cond_t changed; /* broadcast on every job state change */
    vram_sched_config_t cfg;
    vram_sched_devices_t dev;
    vram_store_t *store;
    int ndev;
    sched_job_t **active; /* queued and running jobs, in arrival order */
    size_t nactive, cap;
    sched_job_t **queue; /* queued jobs in queue order (may hold jobs that just left it
                            until vram_queue_compact) */
    size_t nqueue, qcap;
    int wake[2];   /* self-pipe that interrupts run_once */
    int *dead_fds; /* pidfds to close in tick (poll may hold them) */
    size_t ndead, dead_cap;
    double last_usage_check;
    double last_prune;            /* when ended jobs past cfg.job_retention_s were last deleted */
    bool prune_more;              /* the last prune hit its batch: go on at the next tick */
    bool shutting_down;           /* vram_sched_shutdown: waiters return, nothing is admitted */
    bool dirty;                   /* the current operation changed jobs in memory */
    pthread_mutex_t deliver_lock; /* keeps committed events in order outside the lock */
    sched_event_t *events;        /* state changes of the current operation (on_event) */
    size_t nevents, events_cap;
    sched_event_t *spare_events; /* the other buffer (deliver_lock) */
    size_t spare_cap;
    sched_kill_t *kills; /* cancelled running jobs' processes, SIGKILLed after the grace */
    size_t nkills, kills_cap;
    uint64_t unmanaged_seen[64]; /* outside use per device the waiting jobs did not fit with */
    uint64_t pass_free[64];      /* free memory for admission per device after the last pass */
    char exit_dir[512];          /* cfg.exit_dir, copied; "" = none */
    int64_t *exits_read;      /* jobs whose exit file the current operation recorded: the files */
    size_t nexits, exits_cap; /* are removed once it committed (vram_spawn_exits_done) */
    sched_dev_t *obs;         /* last observation of the devices (reservations not filled) */
    uint64_t obs_ns;          /* when it was made (monotonic) */
    bool obs_valid;
};

/* ledger.c: fills devs[0..s->ndev) from an observation of the devices (and
 * per-job usage) no older than max_age_s (0: a new one). */
int vram_ledger_probe(vram_sched_t *s, sched_dev_t *devs, double max_age_s);
/* placement.c: chooses devices (and batch) for a job, or returns false. */
bool vram_place(const vram_sched_t *s, const sched_dev_t *devs, const vram_job_request_t *req,
                int *devices, uint64_t *per_gpu, uint32_t *batch, uint32_t *accum);
/* queue.c: s->queue is kept in queue order (priority, then arrival): insert
 * is O(n) and keeps it sorted; compact drops the jobs that left the queue and
 * numbers the rest (queue_pos), so readers never sort; rebuild after a reload. */
int vram_queue_insert(vram_sched_t *s, sched_job_t *j);
void vram_queue_compact(vram_sched_t *s);
int vram_queue_rebuild(vram_sched_t *s);
/* times out, then admits queued jobs in priority/arrival order. */
int vram_queue_admit(vram_sched_t *s, double now);
/* Admission of one new job (with backfill): every other queued job was already found not to
 * fit, and nothing was freed since (frees and ticks run vram_queue_admit), so
 * a submission costs O(1) placements, not one per queued job. */
int vram_queue_admit_only(vram_sched_t *s, sched_job_t *only, double now);
int vram_queue_timeouts(vram_sched_t *s, double now);
/* sched.c helpers used by queue.c */
double vram_sched_now(const vram_sched_t *s);
int vram_sched_transition(vram_sched_t *s, sched_job_t *j, vram_job_state_t to, const char *kind,
                          const char *message);
void vram_sched_drop_ended(vram_sched_t *s);
/* locked_op, for spawn.c. */
int vram_sched_locked(vram_sched_t *s, int (*fn)(vram_sched_t *, void *), void *arg);
sched_job_t *vram_sched_find_active(vram_sched_t *s, int64_t id); /* binary search */

/* reason.c: why placement found no devices for req (MEMORY, DEVICE_JOBS
 * or DEVICE_DOWN); and the reason a queued job waits as its short code
 * ("memory", ...) and words for people, from its last pass. Lock held. */
sched_wait_t vram_wait_explain(const vram_sched_t *s, const sched_dev_t *devs,
                               const vram_job_request_t *req);
const char *vram_wait_text(const vram_sched_t *s, const sched_job_t *j, char *buf, size_t len);

/* pid.c: signals to a job's processes (pidfds and liveness: core/proc.h). */
/* Cancel of a running job: SIGTERM to its process group now, SIGKILL from
 * vram_pid_kill_overdue (each tick) once cfg.kill_grace_s has passed. */
void vram_pid_terminate(vram_sched_t *s, const sched_job_t *j, double now);
void vram_pid_kill_overdue(vram_sched_t *s, double now);
/* SIGKILL to pid's group (or pid alone, as group_of decides) at once: a
 * process vramd started for a job that was cancelled before it was attached. */
void vram_pid_kill_now(pid_t pid);

/* sched.c: ends running job j DONE (exit status 0) or FAILED with e's
 * status, message, reason and retry batch ("finished"). spawn.c: j's
 * process has ended: a job vramd started ends with the status its monitor
 * wrote to exit_dir, any other (or one whose monitor wrote nothing) FAILED
 * with kind and message. Lock held, in a transaction. */
int vram_sched_end_running(vram_sched_t *s, sched_job_t *j, const vram_job_end_t *e);
int vram_sched_process_ended(vram_sched_t *s, sched_job_t *j, const char *kind,
                             const char *message);
/* spawn.c: at open, exit files of jobs that are not running any more
 * (also one whose status was committed just before a crash). */
void vram_spawn_sweep_exits(vram_sched_t *s);
/* spawn.c: the end of an operation (locked_op): the exit files it recorded
 * are removed when it committed, kept (read again next time) when not. An
 * exit status is never lost between its file and the database. */
void vram_spawn_exits_done(vram_sched_t *s, bool committed);
/* spawn_exec.c: vram_spawn_read_exit without removing the file, and the
 * removal. */
int vram_spawn_peek_exit(const char *exit_dir, int64_t id, int *exit_status, char *message,
                         size_t len);
void vram_spawn_remove_exit(const char *exit_dir, int64_t id);

/* labels.c: job labels (vram_job_label_t). parse fills r->labels from a
 * JSON object, sorted by key, and returns 0, or 400 (wrong type) / 422 (bad
 * key or value, too many) with `why` naming the label. load accepts only
 * what parse accepts (else no labels); write puts them in w as the object
 * `key`; dump's text is malloc'd (NULL: ENOMEM). */
struct json_t;
int vram_labels_parse(struct json_t *obj, vram_job_request_t *r, char *why, size_t len);
void vram_labels_write(vram_jw_t *w, const char *key, const vram_job_request_t *r);
char *vram_labels_dump(const vram_job_request_t *r);
void vram_labels_load(const char *text, vram_job_request_t *r);

/* store.c: SQLite persistence. Not thread-safe: callers hold the sched lock. */
int vram_store_open(const char *path, vram_store_t **out);
void vram_store_close(vram_store_t *st);
int vram_store_begin(vram_store_t *st);
int vram_store_commit(vram_store_t *st);
/* PASSIVE WAL checkpoint through a second connection: may run concurrently
 * with the scheduler's writes (only one thread may call it). */
int vram_store_checkpoint(vram_store_t *st);
void vram_store_rollback(vram_store_t *st);
int vram_store_insert_job(vram_store_t *st, vram_job_t *job, uint64_t pid_start);
int vram_store_update_job(vram_store_t *st, const vram_job_t *job);
int vram_store_event(vram_store_t *st, int64_t job_id, double at, const char *kind,
                     const char *message);
typedef int (*vram_store_job_fn)(void *arg, const vram_job_t *job, uint64_t pid_start);
int vram_store_load_active(vram_store_t *st, vram_store_job_fn fn, void *arg);
int vram_store_list_ended(vram_store_t *st, int limit, vram_store_job_fn fn, void *arg);
int vram_store_get_job(vram_store_t *st, int64_t id, vram_job_t *out);
/* Deletes up to `batch` jobs that ended before `before` (Unix seconds), with
 * their events; returns how many, or EIO. */
int vram_store_prune(vram_store_t *st, double before, int batch);
typedef void (*vram_store_event_fn)(void *arg, double at, const char *kind, const char *message);
int vram_store_list_events(vram_store_t *st, int64_t job_id, vram_store_event_fn fn, void *arg);
/* vram submit: the spawn spec stored with a job (*spec malloc'd, NULL when
 * the job has none), and the pid of the process vramd started for it. */
int vram_store_get_spawn(vram_store_t *st, int64_t id, char **spec);
int vram_store_set_pid(vram_store_t *st, int64_t id, pid_t pid, uint64_t pid_start);

#endif
