/* sched/sched.h — the scheduler's interface to vramd, the CLI and the tests
 * (not libvram's: include/vram.h never declares it). Built into vram_core, the
 * static library of vramd's core (docs/design.md, "Libraries and headers");
 * libvram.so neither exports nor needs any of it.
 */
#ifndef VRAM_SCHED_SCHED_H
#define VRAM_SCHED_SCHED_H

#include "vram.h"

/* Life of a job: QUEUED -> RUNNING -> DONE | FAILED | CANCELLED, or
 * QUEUED -> TIMEOUT | CANCELLED. Only QUEUED and RUNNING jobs hold state in
 * memory; every change is written to the store in one transaction. */
typedef enum {
    VRAM_JOB_QUEUED,
    VRAM_JOB_RUNNING,
    VRAM_JOB_DONE,
    VRAM_JOB_FAILED,
    VRAM_JOB_CANCELLED,
    VRAM_JOB_TIMEOUT,
} vram_job_state_t;

#define VRAM_SCHED_MAX_GPUS 16

/* A label a client attaches to its job (e.g. the Slurm job and step ids):
 * a key of [a-z_][a-z0-9_]{0,31} and a value of at most 64 printable ASCII
 * bytes. Shown in the job JSON and as label_<key> on the job's metrics. */
#define VRAM_JOB_MAX_LABELS 8
typedef struct {
    char key[33];
    char value[65];
} vram_job_label_t;

/* How a job ended besides its exit status (POST /v1/jobs/{id}/finish
 * "reason"): "exit" (its command ended: the default) or "oom" (it ran out
 * of GPU memory). */
typedef enum { VRAM_END_EXIT = 0, VRAM_END_OOM = 1 } vram_end_reason_t;
/* "exit" or "oom" (static); vram_end_reason_parse: the reason, -1 if none. */
const char *vram_end_reason_name(vram_end_reason_t r);
int vram_end_reason_parse(const char *name);

/* The end of a job as its client reports it: exit status (-1000..1000), an
 * optional message, the reason, and for VRAM_END_OOM the micro-batch a retry
 * asks for (0 = none). */
typedef struct {
    int exit_status;
    char error[256];
    vram_end_reason_t reason;
    uint32_t retry_batch;
} vram_job_end_t;

/* Most entries of a job's batch_bytes table. */
#define VRAM_JOB_MAX_BATCHES VRAM_BATCH_TABLE_MAX

/* What a client asks for. mem_bytes is per GPU for batch_size. When the
 * client lists batch_bytes (the memory at smaller batches it accepts, from
 * full estimates: vram_estimate_batch_table) the scheduler may start the job
 * with the largest listed batch whose memory fits, reserving exactly that
 * entry's bytes; without a table the batch is never lowered. */
typedef struct {
    char name[64];
    char command[512];
    uid_t uid;                       /* owner (peer credentials) */
    pid_t pid;                       /* process whose exit releases the job; 0 = none */
    uint64_t mem_bytes;              /* per GPU, > 0 */
    int gpus;                        /* >= 1 */
    int priority;                    /* higher first */
    double timeout_s;                /* queue timeout; < 0: VRAM_JOB_TIMEOUT; 0: never */
    int pinned[VRAM_SCHED_MAX_GPUS]; /* exact devices when npinned > 0 */
    int npinned;
    uint32_t batch_size, min_batch_size; /* 0 = no degradation */
    /* batch_bytes[0..nbatch_bytes): batches increasing within [min_batch_size,
     * batch_size], bytes non-decreasing and at most mem_bytes (mem_bytes at
     * batch_size itself); vram_job_batch_bytes_check. */
    vram_batch_bytes_t batch_bytes[VRAM_JOB_MAX_BATCHES];
    int nbatch_bytes;
    /* Largest micro-batch the scheduler may grant (0 = batch_size): a retry
     * after out-of-memory asks for less while batch_size stays the effective
     * batch, so grad_accum covers it. */
    uint32_t max_batch_size;
    vram_job_label_t labels[VRAM_JOB_MAX_LABELS]; /* labels[0..nlabels), sorted by key */
    int nlabels;
    /* vram submit: what vramd starts when the job is admitted (JSON, see
     * src/sched/spawn.c); stored with the job, NULL in memory. */
    const char *spawn;
} vram_job_request_t;

/* A job as stored. devices/ndevices and granted batch are set once running. */
typedef struct {
    int64_t id;
    vram_job_request_t req;
    vram_job_state_t state;
    int devices[VRAM_SCHED_MAX_GPUS];
    int ndevices;
    uint64_t reserved_bytes; /* per placed GPU (after degradation) */
    uint32_t granted_batch, grad_accum;
    double submitted_at, started_at, ended_at; /* Unix seconds; 0 = not yet */
    int exit_status;                           /* -1 = none */
    char error[256];
    /* Largest peak usage (bytes per GPU) the job reported about itself
     * (POST /v1/jobs/{id}/peak); has_peak is false until one is reported. */
    bool has_peak;
    uint64_t peak_bytes;
    /* Submitted with a spawn spec (vram submit): vramd starts its process
     * when it is admitted. The spec itself stays in the store. */
    bool has_spawn;
    /* How it ended, as the finish request said in fields of its own (never
     * read back from the error text): VRAM_END_OOM for out of memory, and
     * then the micro-batch the next attempt asks for (0 = not retried). */
    vram_end_reason_t end_reason;
    uint32_t retry_batch;
} vram_job_t;

typedef enum { VRAM_PLACE_BEST_FIT, VRAM_PLACE_LEAST_LOADED } vram_placement_t;

/* Where the scheduler sees devices: a context, or (tests) plain callbacks. */
typedef struct {
    int (*count)(void *arg);
    int (*info)(void *arg, int index, vram_device_info_t *out);
    int (*processes)(void *arg, int index, vram_process_info_t *procs, size_t cap, size_t *count);
    void *arg;
} vram_sched_devices_t;

typedef struct {
    const char *db_path;                 /* SQLite file (created); ":memory:" = not durable */
    vram_ctx_t *ctx;                     /* borrowed; used when devices is NULL */
    const vram_sched_devices_t *devices; /* borrowed; wins over ctx */
    char safety_margin[32];              /* size or fraction of each device's total */
    int max_concurrent_jobs;             /* per device; 0 = no limit */
    double job_timeout_s;                /* default queue timeout; 0 = never */
    vram_placement_t placement;
    bool backfill;         /* start later jobs that fit while the head waits */
    double lease_s;        /* running jobs not renewed within this are released; 0 = off */
    double (*clock)(void); /* Unix seconds; NULL = real time (tests inject one) */
    /* Admission decisions may reuse an observation of the devices this long
     * (seconds; 0 = query the devices for every decision). Reservations are
     * always current; only outside usage may be this old. */
    double probe_interval_s;
    double status_cache_s;   /* GET /v1/status may reuse an observation this old */
    int max_queued_per_uid;  /* submissions past it are refused (EBUSY); 0 = none; root exempt */
    int max_running_per_uid; /* admission holds a uid's further jobs back; 0 = none; root exempt */
    /* Cancelling a running job sends SIGTERM to its process group (its pid
     * alone when that group is the scheduler's own), then SIGKILL after this
     * many seconds if it still runs; < 0 = signal nothing. */
    double kill_grace_s;
    /* Ended jobs and their events are deleted from the store this long after
     * they ended (checked each minute by the tick); 0 = kept forever. */
    double job_retention_s;
    /* Called after each state change once its transaction has committed
     * (never for rolled-back work), outside the scheduler lock, in order,
     * e.g. to log it: must not block long; NULL = none. */
    void (*on_event)(void *arg, const vram_job_t *job, const char *kind, const char *message);
    void *event_arg;
    /* Where the monitors of the jobs vramd starts write their exit status
     * (vram_spawn_job; copied). The scheduler reads it when such a job's
     * process ends, also after a restart. NULL or "": jobs end FAILED when
     * their process ends. */
    const char *exit_dir;
} vram_sched_config_t;

typedef struct vram_sched vram_sched_t;

/* Fills a config from the option table (SAFETY_MARGIN, MAX_CONCURRENT_JOBS,
 * JOB_TIMEOUT, PLACEMENT, BACKFILL, LEASE, DB). EINVAL names a bad option. */
int vram_sched_config_from_options(vram_sched_config_t *cfg);
/* Opens the store, reloads it (alive running jobs keep their reservations,
 * dead ones end FAILED with the reason, queued keep their order) and admits
 * what fits. EIO names the database on SQLite errors. All vram_sched_* calls
 * are thread-safe (one internal lock). */
int vram_sched_open(const vram_sched_config_t *cfg, vram_sched_t **out);
/* Accepts NULL. No other vram_sched_* call may be running or start. */
void vram_sched_close(vram_sched_t *s);
/* Queues a job and runs admission; *out gets the job (QUEUED or already
 * RUNNING). EINVAL names the bad field (mem_bytes, gpus, devices,
 * min_batch_size, timeout_s, pid), also for a request no device could ever
 * hold; EIO on store errors. Nothing is stored on failure. */
int vram_sched_submit(vram_sched_t *s, const vram_job_request_t *req, vram_job_t *out);
/* Cancels a queued or running job. EPERM unless caller_uid owns it or is 0;
 * ENOENT for an unknown id; ESTATE when it already ended. */
int vram_sched_cancel(vram_sched_t *s, int64_t id, uid_t caller_uid);
/* Ends a running job: DONE when exit_status is 0, FAILED otherwise (error
 * text optional). Same errors as cancel; a queued job is cancelled instead.
 * A running job vramd started itself (vram submit) is refused with ESTATE:
 * vramd records how its command ends; cancel stops it. */
int vram_sched_finish(vram_sched_t *s, int64_t id, uid_t caller_uid, int exit_status,
                      const char *error);
/* vram_sched_finish with the whole report: reason and retry batch are kept
 * with the job (its JSON, the store) and told to on_event with it. */
int vram_sched_finish_end(vram_sched_t *s, int64_t id, uid_t caller_uid, const vram_job_end_t *end);
/* Renews a running job's lease. ENOENT, EPERM, ESTATE as above. */
int vram_sched_renew(vram_sched_t *s, int64_t id, uid_t caller_uid);
/* Records the peak usage a running job measured itself (bytes per GPU): the
 * job keeps the largest value ever reported, in memory and in the store.
 * ENOENT, EPERM, ESTATE (not running) as above. */
int vram_sched_report_peak(vram_sched_t *s, int64_t id, uid_t caller_uid, uint64_t peak_bytes);
/* Reaps dead processes, expired leases and queue timeouts, checks usage
 * against reservations (once a second), then admits what fits. Returns the
 * number of jobs that changed state, or an error. Call tick/run_once from one
 * thread only (it closes the pidfds run_once polls). */
int vram_sched_tick(vram_sched_t *s);
/* Waits up to timeout_ms for a watched process to exit or a wake-up, then
 * ticks. The daemon's scheduler thread loops on it. */
int vram_sched_run_once(vram_sched_t *s, int timeout_ms);
/* Wakes vram_sched_run_once (e.g. for shutdown). */
void vram_sched_wake(vram_sched_t *s);
/* Shutdown: every current and later vram_sched_wait returns at once, and no
 * queued job is admitted any more (they stay queued, and stored). */
void vram_sched_shutdown(vram_sched_t *s);
/* Copies a job (active or ended). ENOENT for unknown ids. */
int vram_sched_job(vram_sched_t *s, int64_t id, vram_job_t *out);
/* Waits until job `id` is no longer QUEUED or timeout_ms passes; copies it. */
int vram_sched_wait(vram_sched_t *s, int64_t id, int timeout_ms, vram_job_t *out);
/* Waits until job `id` is in another state than `from` (a vram_job_state_t,
 * or VRAM_JOB_MISSING: until it is submitted) or timeout_ms passes; copies
 * it. ENOENT when the job does not exist (after the wait, for MISSING).
 * Thread-safe; returns at once after vram_sched_shutdown. */
#define VRAM_JOB_MISSING (-1)
int vram_sched_wait_change(vram_sched_t *s, int64_t id, int from, int timeout_ms, vram_job_t *out);
/* JSON documents (malloc'd, caller frees; NULL on ENOMEM, for an unknown
 * job id, or when the devices cannot be read for the status): one job; the jobs
 * (active first, then up to `limit` ended ones, newest first); the memory
 * summary of GET /v1/status; the device list. */
char *vram_sched_job_json(vram_sched_t *s, int64_t id);
char *vram_sched_jobs_json(vram_sched_t *s, int limit);
char *vram_sched_status_json(vram_sched_t *s);
char *vram_sched_devices_json(vram_sched_t *s);
/* The same views as one reader (a uid; 0 is root) sees them (the plain ones
 * are root's view): a uid sees the pid and command of its own jobs only. */
char *vram_sched_job_json_for(vram_sched_t *s, int64_t id, int64_t viewer);
char *vram_sched_jobs_json_for(vram_sched_t *s, int limit, int64_t viewer);
/* The event log of one job, oldest first: {"id", "events": [{"at", "kind",
 * "message"}]}; NULL for an unknown id (ENOENT) or a store error. */
char *vram_sched_events_json(vram_sched_t *s, int64_t id);
/* vram submit (src/sched/spawn.c): a job submitted with a spawn spec
 * (vram_job_request_t.spawn, JSON {"argv": [..], "cwd": "/abs", "env": {..},
 * "output": "path with %j", "error": "" or path}) is started by vramd once
 * admitted. The spec of job `id` (*spec malloc'd; NULL when it has none);
 * ENOENT for an unknown id. Thread-safe. */
int vram_sched_spawn_spec(vram_sched_t *s, int64_t id, char **spec);
/* Records `pid` as the process of running job `id` started by vramd (its
 * exit ends the job with the status its monitor wrote to cfg.exit_dir, its
 * usage is the job's). ESTATE when the job is not running (cancelled
 * meanwhile: the scheduler then kills pid's process group) or already has a
 * process. Thread-safe. */
int vram_sched_attach_pid(vram_sched_t *s, int64_t id, pid_t pid);
/* Ends running job `id` FAILED with exit status 127 and `message`: vramd
 * could not start its command. ESTATE when it is not running. */
int vram_sched_spawn_failed(vram_sched_t *s, int64_t id, const char *message);
/* Waits until job `id` has ended (done, failed, cancelled, timeout) or
 * timeout_ms passes or the scheduler shuts down; copies it. ENOENT if
 * unknown. Thread-safe. */
int vram_sched_wait_end(vram_sched_t *s, int64_t id, int timeout_ms, vram_job_t *out);
/* True for the environment variables a submitted job may take from the
 * submitting shell (PATH, LANG, LC_*, PYTHONPATH, ...; docs/cli.md). */
bool vram_spawn_env_allowed(const char *name);

/* A job's process started by vramd: its monitor's pid. */
typedef struct {
    pid_t pid;
} vram_spawn_t;
/* Starts running `job` (admitted, with its spec) as the job's uid. A
 * monitor process, which is not vramd's child and outlives it, leads a new
 * session, starts argv as the uid (vramd as root; else vramd must be that
 * uid) in cwd with stdin /dev/null, stdout/stderr to the output files
 * (opened by the uid: created O_EXCL|O_NOFOLLOW with mode 0600, or the
 * uid's own regular single-link file there truncated; a link or another
 * user's file is refused), the whitelisted environment, CUDA_VISIBLE_DEVICES and
 * VRAM_JOB_ID/VRAM_BATCH_SIZE/VRAM_GRAD_ACCUM; when argv ends it writes its
 * exit status to exit_dir/<id> (vram_spawn_read_exit) and exits. Call from a
 * thread that may fork. EPARSE for a bad spec, ENOENT for an unknown uid,
 * EINVAL without exit_dir, EIO. */
int vram_spawn_job(const vram_job_t *job, const char *spec, const char *exit_dir,
                   vram_spawn_t *out);
/* Reads (and removes) what the monitor of job `id` wrote to exit_dir:
 * 0 with *exit_status and message[len] (why it could not start, "" when it
 * ran), ENOENT when there is none (the monitor was killed). */
int vram_spawn_read_exit(const char *exit_dir, int64_t id, int *exit_status, char *message,
                         size_t len);
/* An output file name of a submitted job: "%j" becomes the job id and "%%" a
 * percent sign (as in sbatch's --output). EINVAL when out[len] is too small. */
int vram_spawn_expand_path(const char *pattern, int64_t id, char *out, size_t len);
/* Checks the ledger invariants (reserved <= usable per device, no job both
 * queued and running, per-device job counts, a running job with a
 * batch_bytes table reserving mem_bytes or the entry at its granted
 * batch); 0 or ESTATE with a message. */
int vram_sched_check(vram_sched_t *s);
const char *vram_job_state_name(vram_job_state_t st);
/* Parses "queued", "running", ...; -1 if unknown. */
int vram_job_state_parse(const char *name);

/* Why a queued job waits, for people: "waiting for 50.00 GiB on 1 GPU; GPU 0
 * has 16.00 GiB free for admission" (the smallest batch it accepts counts),
 * or "fits now; N job(s) ahead in the queue go first". free_bytes[d] is each
 * device's free memory for admission; position is 1-based in the queue.
 * Writes buf[len] and returns it. Thread-safe. */
const char *vram_job_pending_reason(const vram_job_request_t *req, const uint64_t *free_bytes,
                                    int ndev, int position, char *buf, size_t len);

/* Out-of-memory messages of GPU programs (PyTorch, CUDA driver and runtime,
 * cuDNN, cuBLAS) found in a stream read in pieces, e.g. a job's stderr.
 * Only the exact messages listed by vram_oom_message() count. One scanner
 * per stream; not thread-safe. */
typedef struct {
    char tail[63]; /* end of the previous piece (longer than any message) */
    size_t keep;
    const char *match; /* the message found, NULL until one is */
} vram_oom_scan_t;
void vram_oom_scan_init(vram_oom_scan_t *s);
/* Feeds n bytes (any content, NULs included); returns the recognized message
 * once one has been seen (and from then on), else NULL. */
const char *vram_oom_scan_feed(vram_oom_scan_t *s, const char *data, size_t n);
/* The i-th recognized message (static), NULL past the end. */
const char *vram_oom_message(size_t i);
/* Why a request body was refused: the HTTP status (400: malformed JSON or a
 * wrong type; 422: a bad value), a short code ("bad_json", "bad_type",
 * "unknown_field", "invalid_value") and a message that names the field. */
typedef struct {
    int status;
    char code[24];
    char message[256];
} vram_request_error_t;
/* Decodes the JSON body of POST /v1/jobs (text need not be NUL-terminated)
 * into *out: unknown fields, wrong types, out-of-range values, sizes (integer
 * or "10GiB") above 2^60 bytes, strings with a NUL and -0 are refused, and
 * "labels" must be an object of at most VRAM_JOB_MAX_LABELS string labels
 * (see vram_job_label_t). Uid is left 0 and timeout_s -1 (the daemon's
 * default) when absent. Returns 0, or
 * EPARSE (err->status 400) / EINVAL (422) with *err filled. Thread-safe. */
int vram_job_request_decode(const char *text, size_t len, vram_job_request_t *out,
                            vram_request_error_t *err);
/* Decodes the body of POST /v1/jobs/{id}/finish: {"exit_status": -1000..1000,
 * "error": "...", "reason": "exit" | "oom", "retry_batch": 0..2^31}, all
 * optional (an empty body is exit status 0); retry_batch only with "oom".
 * Errors as above. */
int vram_job_finish_decode(const char *text, size_t len, vram_job_end_t *end,
                           vram_request_error_t *err);
/* Decodes the body of POST /v1/jobs/{id}/peak: {"peak_bytes": N}, required,
 * an integer number of bytes up to 2^60. Errors as above. Thread-safe. */
int vram_job_peak_decode(const char *text, size_t len, uint64_t *peak_bytes,
                         vram_request_error_t *err);

/* Whether req's batch_bytes table is one vramd accepts (see the struct):
 * 0, or EINVAL with a message naming the bad entry ("batch_bytes[3]: ...").
 * Also EINVAL when max_batch_size caps below every listed batch. Pure. */
int vram_job_batch_bytes_check(const vram_job_request_t *req);
/* The least memory per GPU req can start with: its smallest batch_bytes
 * entry, or mem_bytes without a table. */
uint64_t vram_job_least_bytes(const vram_job_request_t *req);
/* The largest batch req accepts (a batch_bytes entry, or batch_size at
 * mem_bytes; at most max_batch_size when set) whose memory fits in `avail`,
 * then the smallest accepted batch needing the same accumulation steps.
 * Sets *grad_accum (steps keeping the effective batch >= batch_size) and
 * *bytes (that batch's entry: what to reserve). Returns 0 when none fits.
 * Without a table only the cap (max_batch_size or batch_size) at mem_bytes. */
uint32_t vram_job_degrade(const vram_job_request_t *req, uint64_t avail, uint32_t *grad_accum,
                          uint64_t *bytes);

/* Active (queued and running) jobs, copied under the scheduler lock
 * (malloc'd array; caller frees). */
int vram_sched_active_jobs(vram_sched_t *s, vram_job_t **jobs, size_t *count);
/* Per device (out[0..n)), what a new job may still reserve: the figure of
 * /v1/status's free_for_admission_bytes, from a device probe at most
 * max_age_s old; VRAM_UNKNOWN_U64 for a device that does not answer.
 * EINVAL; driver errors. Thread-safe. */
int vram_sched_free_for_admission(vram_sched_t *s, double max_age_s, uint64_t *out, int n);

#endif
