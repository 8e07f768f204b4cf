/* vram submit, the daemon's side: checks the spawn part of POST /v1/jobs,
 * starts admitted submitted jobs as their owner (src/sched/spawn_exec.c),
 * records their exit status, stops cancelled ones (SIGTERM to the group,
 * SIGKILL after a grace period), and GET /v1/jobs/{id}/output. */
#include "daemon/daemon.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { MAX_SPEC_ARGS = 256, MAX_PATH_LEN = 4096 };

/* KILL_GRACE: SIGKILL this long after the SIGTERM of a cancel (as sched.c). */
static double kill_grace(void)
{
    double s = 10;
    vram_option_double(VRAM_OPT_KILL_GRACE, &s);
    return s;
}

/* ---- replies ----------------------------------------------------------------- */

static void fail(vramd_response_t *r, int status, const char *code, const char *message)
{
    vramd_error(r, status, code, "%s", message); /* escaped there */
}

/* ---- POST /v1/jobs with "spawn" ---------------------------------------------- */

static const char *check_path(json_t *v, const char *what, bool required)
{
    if (!v || json_is_null(v)) return required ? "is required" : NULL;
    const char *s = json_string_value(v);
    if (!s) return "must be a string";
    if (s[0] != '/') return "must be an absolute path";
    if (strlen(s) >= MAX_PATH_LEN) return "is too long";
    (void)what;
    return NULL;
}

static bool check_spawn(json_t *spawn, char *why, size_t len)
{
    static const char *const known[] = {"argv", "cwd", "env", "output", "error", NULL};
    const char *key, *bad;
    json_t *v;
    if (!json_is_object(spawn)) return snprintf(why, len, "\"spawn\" must be an object"), false;
    json_object_foreach(spawn, key, v)
    {
        bool ok = false;
        for (const char *const *k = known; *k; k++)
            ok |= !strcmp(*k, key);
        if (!ok) return snprintf(why, len, "unknown field \"spawn.%.40s\"", key), false;
    }
    json_t *argv = json_object_get(spawn, "argv");
    size_t i, total = 0;
    if (!json_is_array(argv) || !json_array_size(argv) || json_array_size(argv) > MAX_SPEC_ARGS)
        return snprintf(why, len, "\"spawn.argv\" must be 1 to %d strings", MAX_SPEC_ARGS), false;
    json_array_foreach(argv, i, v)
    {
        if (!json_is_string(v) || (i == 0 && !json_string_length(v)))
            return snprintf(why, len, "\"spawn.argv[%zu]\" must be a non-empty string", i), false;
        total += json_string_length(v);
    }
    if (total > 32768) return snprintf(why, len, "\"spawn.argv\" is longer than 32 KiB"), false;
    if ((bad = check_path(json_object_get(spawn, "cwd"), "cwd", true)))
        return snprintf(why, len, "\"spawn.cwd\" %s", bad), false;
    if ((bad = check_path(json_object_get(spawn, "output"), "output", true)))
        return snprintf(why, len, "\"spawn.output\" %s", bad), false;
    json_t *err = json_object_get(spawn, "error");
    if (!(json_is_string(err) && !json_string_length(err)) &&
        (bad = check_path(err, "error", false)))
        return snprintf(why, len, "\"spawn.error\" %s", bad), false;
    json_t *env = json_object_get(spawn, "env");
    if (env && (!json_is_object(env) || json_object_size(env) > 64))
        return snprintf(why, len, "\"spawn.env\" must be an object of at most 64 variables"), false;
    json_object_foreach(env, key, v)
    {
        if (!vram_spawn_env_allowed(key))
            return snprintf(why, len, "\"spawn.env\": %.40s is not passed to jobs (docs/cli.md)",
                            key),
                   false;
        if (!json_is_string(v) || json_string_length(v) > MAX_PATH_LEN)
            return snprintf(why, len, "\"spawn.env.%.40s\" must be a string", key), false;
    }
    return true;
}

char *vramd_submit_spec(const vramd_state_t *d, const vramd_request_t *q, vramd_response_t *r,
                        json_t *spawn)
{
    char why[200];
    /* vramd only ever starts a command as the uid the kernel vouches for. */
    if (q->transport != VRAMD_UNIX) {
        fail(r, 403, "forbidden",
             "vram submit works over the Unix socket only: vramd starts jobs as the uid it sees "
             "there");
        return NULL;
    }
    if (d->daemon_uid != 0 && q->uid != d->daemon_uid) {
        snprintf(why, sizeof why, "vramd runs as uid %u and can start jobs only for that uid",
                 (unsigned)d->daemon_uid);
        fail(r, 403, "forbidden", why);
        return NULL;
    }
    if (!check_spawn(spawn, why, sizeof why)) {
        fail(r, 422, "invalid_value", why);
        return NULL;
    }
    char *text = json_dumps(spawn, JSON_COMPACT);
    if (!text) fail(r, 500, "internal", "out of memory");
    return text;
}

/* ---- starting and watching submitted jobs ---------------------------------- */

typedef struct {
    int64_t id;
    uid_t uid;
    vram_spawn_t sp;
    double kill_at; /* SIGKILL the group at this time (after a cancel); 0 = no */
} started_t;

static struct {
    pthread_mutex_t lock;
    int64_t *admitted; /* ids admitted since the last pass */
    size_t nadmitted, cap;
    int64_t *cancelled;
    size_t ncancelled, ccap;
    int wake[2];
    started_t *started;
    size_t nstarted, scap;
    vram_sched_t *sched;
    pthread_t thread;
    bool running, stop;
} sp = {.lock = PTHREAD_MUTEX_INITIALIZER, .wake = {-1, -1}};

static double now_s(void)
{
    return (double)vram_now_ns() / 1e9;
}

static void push(int64_t **a, size_t *n, size_t *cap, int64_t id)
{
    if (*n == *cap) {
        size_t c = *cap ? *cap * 2 : 16;
        int64_t *na = realloc(*a, c * sizeof *na);
        if (!na) return; /* the job then stays unstarted until its lease/pid rules end it */
        *a = na;
        *cap = c;
    }
    (*a)[(*n)++] = id;
}

void vramd_submit_event(const vram_job_t *job, const char *kind)
{
    /* Only jobs vramd starts itself concern the starter thread: waking it for
     * every `vram run` admission cost a thread switch and a store read each. */
    if (!job->has_spawn) return;
    bool admitted = !strcmp(kind, "admitted"), cancelled = !strcmp(kind, "cancelled");
    if (!admitted && !cancelled) return;
    pthread_mutex_lock(&sp.lock);
    if (admitted)
        push(&sp.admitted, &sp.nadmitted, &sp.cap, job->id);
    else
        push(&sp.cancelled, &sp.ncancelled, &sp.ccap, job->id);
    pthread_mutex_unlock(&sp.lock);
    if (sp.wake[1] >= 0) {
        ssize_t w = write(sp.wake[1], "w", 1);
        (void)w;
    }
}

static void start_one(int64_t id)
{
    char *spec = NULL;
    vram_job_t job;
    if (vram_sched_spawn_spec(sp.sched, id, &spec) != 0 || !spec) return; /* a `vram run` job */
    if (vram_sched_job(sp.sched, id, &job) != 0 || job.state != VRAM_JOB_RUNNING) {
        free(spec);
        return;
    }
    vram_spawn_t s;
    int rc = vram_spawn_job(&job, spec, &s);
    free(spec);
    if (rc) {
        char msg[300];
        snprintf(msg, sizeof msg, "vramd could not start the job: %s", vram_last_error());
        vramd_log("warn", "job %lld: %s", (long long)id, msg);
        vram_sched_finish(sp.sched, id, 0, 127, msg);
        return;
    }
    if (vram_sched_attach_pid(sp.sched, id, s.pid) != 0) /* cancelled meanwhile */
        kill(-s.pid, SIGKILL);
    if (sp.nstarted == sp.scap) {
        size_t c = sp.scap ? sp.scap * 2 : 16;
        started_t *n = realloc(sp.started, c * sizeof *n);
        if (!n) {
            kill(-s.pid, SIGKILL);
            vram_spawn_release(&s);
            return;
        }
        sp.started = n;
        sp.scap = c;
    }
    sp.started[sp.nstarted++] = (started_t){id, job.req.uid, s, 0};
}

static void stop_one(int64_t id)
{
    for (size_t i = 0; i < sp.nstarted; i++)
        if (sp.started[i].id == id && !sp.started[i].kill_at) {
            kill(-sp.started[i].sp.pid, SIGTERM);
            sp.started[i].kill_at = now_s() + kill_grace();
        }
}

/* Records the ends the monitors reported; kills groups past their grace. */
static void collect(void)
{
    size_t k = 0;
    for (size_t i = 0; i < sp.nstarted; i++) {
        started_t *s = &sp.started[i];
        int status;
        char msg[256];
        if (s->kill_at && now_s() >= s->kill_at) {
            kill(-s->sp.pid, SIGKILL);
            s->kill_at = now_s() + kill_grace();
        }
        if (!vram_spawn_collect(&s->sp, &status, msg, sizeof msg)) {
            sp.started[k++] = *s;
            continue;
        }
        if (status < 0 || *msg)
            vram_sched_finish(sp.sched, s->id, s->uid, status < 0 ? 1 : status, msg);
        else
            vram_sched_finish(sp.sched, s->id, s->uid, status, "");
        vram_spawn_release(&s->sp);
    }
    sp.nstarted = k;
}

/* vramd's own jobs have no client to renew their lease: vramd does, three
 * times per lease. */
static void renew_all(double every, double *next)
{
    if (every <= 0 || now_s() < *next) return;
    *next = now_s() + every;
    for (size_t i = 0; i < sp.nstarted; i++)
        (void)vram_sched_renew(sp.sched, sp.started[i].id, 0);
}

static void *spawner(void *arg)
{
    (void)arg;
    pthread_setname_np(pthread_self(), "vramd-spawner"); /* for top -H, ps -L */
    double lease = 0, next_renew = 0;
    (void)vram_option_double(VRAM_OPT_LEASE, &lease);
    int wait_ms = lease > 0 && lease < 1.5 ? (int)(lease * 1000 / 3) : 500;
    while (!sp.stop) {
        struct pollfd fds[1 + 256];
        nfds_t n = 0;
        fds[n++] = (struct pollfd){.fd = sp.wake[0], .events = POLLIN};
        for (size_t i = 0; i < sp.nstarted && n < 257; i++)
            fds[n++] = (struct pollfd){.fd = sp.started[i].sp.status_fd, .events = POLLIN};
        (void)poll(fds, n, wait_ms);
        char buf[64];
        while (read(sp.wake[0], buf, sizeof buf) > 0) {
        }
        pthread_mutex_lock(&sp.lock);
        int64_t *adm = sp.admitted, *can = sp.cancelled;
        size_t nadm = sp.nadmitted, ncan = sp.ncancelled;
        sp.admitted = sp.cancelled = NULL;
        sp.nadmitted = sp.ncancelled = sp.cap = sp.ccap = 0;
        pthread_mutex_unlock(&sp.lock);
        for (size_t i = 0; i < nadm; i++)
            start_one(adm[i]);
        for (size_t i = 0; i < ncan; i++)
            stop_one(can[i]);
        free(adm);
        free(can);
        collect();
        renew_all(lease / 3, &next_renew);
    }
    return NULL;
}

int vramd_submit_start(vram_sched_t *sched)
{
    if (pipe2(sp.wake, O_CLOEXEC | O_NONBLOCK) != 0)
        return vram_fail(VRAM_EIO, "pipe: %s", strerror(errno));
    sp.sched = sched;
    sp.stop = false;
    if (pthread_create(&sp.thread, NULL, spawner, NULL) != 0)
        return vram_fail(VRAM_EIO, "cannot start the job starter thread");
    sp.running = true;
    return 0;
}

void vramd_submit_stop(void)
{
    if (!sp.running) return;
    sp.stop = true;
    ssize_t w = write(sp.wake[1], "w", 1);
    (void)w;
    pthread_join(sp.thread, NULL);
    sp.running = false;
    /* Jobs still running keep running; their monitors see vramd gone. */
    for (size_t i = 0; i < sp.nstarted; i++) {
        close(sp.started[i].sp.status_fd);
        close(sp.started[i].sp.ack_fd);
    }
    sp.nstarted = 0;
}

/* ---- GET /v1/jobs/{id}/output ------------------------------------------------ */

void vramd_job_output(vramd_state_t *d, const vramd_request_t *q, vramd_response_t *r, int64_t id)
{
    vram_job_t job;
    if (vram_sched_job(d->sched, id, &job) != 0) {
        fail(r, 404, "not_found", vram_last_error());
        return;
    }
    /* the files' names say where a user works: owner and root only */
    if (q->transport != VRAMD_UNIX || (q->uid != 0 && q->uid != job.req.uid)) {
        fail(r, 403, "forbidden", "the output files of a job are shown to its owner and root only");
        return;
    }
    char *spec = NULL;
    if (vram_sched_spawn_spec(d->sched, id, &spec) != 0 || !spec) {
        free(spec);
        fail(r, 404, "not_found", "this job was not submitted with vram submit: no output files");
        return;
    }
    json_t *o = json_loads(spec, 0, NULL);
    free(spec);
    char out[MAX_PATH_LEN + 32] = "", err[MAX_PATH_LEN + 32] = "";
    const char *op = json_string_value(json_object_get(o, "output"));
    const char *ep = json_string_value(json_object_get(o, "error"));
    vram_spawn_expand_path(op ? op : "", id, out, sizeof out);
    vram_spawn_expand_path(ep && *ep ? ep : (op ? op : ""), id, err, sizeof err);
    json_t *v = json_pack("{s:I,s:s,s:s,s:s}", "id", (json_int_t)id, "output", out, "error", err,
                          "state", vram_job_state_name(job.state));
    json_decref(o);
    vramd_reply_text(r, 200, v ? json_dumps(v, JSON_COMPACT) : NULL);
    json_decref(v);
}
