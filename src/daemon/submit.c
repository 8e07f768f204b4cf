/* vram submit, the daemon's side: checks the spawn part of POST /v1/jobs,
 * starts admitted submitted jobs as their owner (src/sched/spawn_exec.c;
 * the scheduler supervises them from then on), and GET /v1/jobs/{id}/output. */
#include "daemon/daemon.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { MAX_SPEC_ARGS = 256, MAX_PATH_LEN = 4096 };

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

/* ---- starting submitted jobs ------------------------------------------------ */

/* The starter thread: forks the monitors of admitted submitted jobs (fork
 * and the password database stay off the scheduler's and the connections'
 * threads). Everything after the start is the scheduler's: it watches the
 * monitor's pid, signals the job on cancel and reads the exit status the
 * monitor writes to exit_dir. */
static struct {
    pthread_mutex_t lock;
    int64_t *admitted; /* ids admitted since the last pass */
    size_t nadmitted, cap;
    int wake[2];
    vram_sched_t *sched;
    char exit_dir[512];
    pthread_t thread;
    bool running, stop;
} sp = {.lock = PTHREAD_MUTEX_INITIALIZER, .wake = {-1, -1}};

void vramd_submit_event(const vram_job_t *job, const char *kind)
{
    /* Only jobs vramd starts itself concern the starter thread: waking it for
     * every `vram run` admission cost a thread switch and a store read each. */
    if (!job->has_spawn || strcmp(kind, "admitted")) return;
    pthread_mutex_lock(&sp.lock);
    if (sp.nadmitted == sp.cap) {
        size_t c = sp.cap ? sp.cap * 2 : 16;
        int64_t *na = realloc(sp.admitted, c * sizeof *na);
        if (!na) {
            /* the job is then never started: end it rather than hold memory */
            pthread_mutex_unlock(&sp.lock);
            vramd_log("error", "job %lld: out of memory, not started", (long long)job->id);
            return;
        }
        sp.admitted = na;
        sp.cap = c;
    }
    sp.admitted[sp.nadmitted++] = job->id;
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
    int rc = vram_spawn_job(&job, spec, sp.exit_dir, &s);
    free(spec);
    if (rc) {
        char msg[300];
        snprintf(msg, sizeof msg, "vramd could not start the job: %s", vram_last_error());
        vramd_log("warn", "job %lld: %s", (long long)id, msg);
        vram_sched_spawn_failed(sp.sched, id, msg);
        return;
    }
    /* cancelled meanwhile: the scheduler kills what was started */
    (void)vram_sched_attach_pid(sp.sched, id, s.pid);
}

static void *starter(void *arg)
{
    (void)arg;
    pthread_setname_np(pthread_self(), "vramd-spawner"); /* for top -H, ps -L */
    while (!sp.stop) {
        struct pollfd fd = {.fd = sp.wake[0], .events = POLLIN};
        (void)poll(&fd, 1, -1);
        char buf[64];
        while (read(sp.wake[0], buf, sizeof buf) > 0) {
        }
        pthread_mutex_lock(&sp.lock);
        int64_t *adm = sp.admitted;
        size_t nadm = sp.nadmitted;
        sp.admitted = NULL;
        sp.nadmitted = sp.cap = 0;
        pthread_mutex_unlock(&sp.lock);
        for (size_t i = 0; i < nadm && !sp.stop; i++)
            start_one(adm[i]);
        free(adm);
    }
    return NULL;
}

int vramd_submit_start(vram_sched_t *sched, const char *exit_dir)
{
    if (pipe2(sp.wake, O_CLOEXEC | O_NONBLOCK) != 0)
        return vram_fail(VRAM_EIO, "pipe: %s", strerror(errno));
    sp.sched = sched;
    snprintf(sp.exit_dir, sizeof sp.exit_dir, "%s", exit_dir);
    sp.stop = false;
    if (pthread_create(&sp.thread, NULL, starter, NULL) != 0)
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
    /* Jobs still running keep running: their monitors record how they end
     * for the next vramd. */
    free(sp.admitted);
    sp.admitted = NULL;
    sp.nadmitted = sp.cap = 0;
}

/* ---- GET /v1/jobs/{id}/output ------------------------------------------------ */

void vramd_job_output(vramd_state_t *d, const vramd_request_t *q, vramd_response_t *r, int64_t id)
{
    vram_job_t job;
    int rc = vram_sched_job(d->sched, id, &job);
    if (rc) {
        vramd_fail(r, rc);
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
