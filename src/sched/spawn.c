/* vram submit, the scheduler's side: the spawn spec stored with a job, the
 * pid of the process vramd started for it, how it ended (the exit file its
 * monitor wrote, read when its process is gone, also after a restart), and
 * the environment variables a submitted job may carry. */
#include "sched_internal.h"

#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* What `vram submit` passes from the submitting shell (docs/cli.md). HOME,
 * USER, LOGNAME and SHELL come from the password database instead, and
 * CUDA_VISIBLE_DEVICES and VRAM_* from the scheduler. */
static const char *const env_names[] = {
    "PATH",
    "LANG",
    "LANGUAGE",
    "TZ",
    "TERM",
    "TMPDIR",
    "PYTHONPATH",
    "VIRTUAL_ENV",
    "CONDA_PREFIX",
    "CONDA_DEFAULT_ENV",
    "LD_LIBRARY_PATH",
    "CUDA_HOME",
    "CUDA_PATH",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "PYTORCH_CUDA_ALLOC_CONF",
};
static const char *const env_prefixes[] = {"LC_", "NCCL_", "HF_", "TORCH_"};

bool vram_spawn_env_allowed(const char *name)
{
    if (!name) return false;
    for (size_t i = 0; i < sizeof env_names / sizeof env_names[0]; i++)
        if (!strcmp(name, env_names[i])) return true;
    for (size_t i = 0; i < sizeof env_prefixes / sizeof env_prefixes[0]; i++)
        if (!strncmp(name, env_prefixes[i], strlen(env_prefixes[i])) &&
            name[strlen(env_prefixes[i])])
            return true;
    return false;
}

int vram_sched_spawn_spec(vram_sched_t *s, int64_t id, char **spec)
{
    if (!s || !spec) return vram_fail(VRAM_EINVAL, "NULL argument");
    pthread_mutex_lock(&s->lock);
    int rc = vram_store_get_spawn(s->store, id, spec);
    pthread_mutex_unlock(&s->lock);
    return rc;
}

typedef struct {
    int64_t id;
    pid_t pid;
} attach_arg_t;

static int do_attach(vram_sched_t *s, void *arg)
{
    attach_arg_t *a = arg;
    sched_job_t *j = vram_sched_find_active(s, a->id);
    if (!j || j->job.state != VRAM_JOB_RUNNING) {
        /* cancelled before its process was known: nobody else may stop it */
        vram_pid_kill_now(a->pid);
        return vram_fail(VRAM_ESTATE, "job %lld is not running", (long long)a->id);
    }
    if (j->job.req.pid > 0)
        return vram_fail(VRAM_ESTATE, "job %lld already has process %d", (long long)a->id,
                         (int)j->job.req.pid);
    uint64_t start = vram_proc_start_time(a->pid);
    int rc = vram_store_set_pid(s->store, a->id, a->pid, start);
    if (rc) return rc;
    char msg[64];
    snprintf(msg, sizeof msg, "started by vramd as process %d", (int)a->pid);
    if ((rc = vram_store_event(s->store, a->id, vram_sched_now(s), "started", msg))) return rc;
    j->job.req.pid = a->pid;
    j->pid_start = start;
    j->pidfd = vram_pid_open_fd(a->pid);
    s->obs_valid = false; /* its usage now belongs to the job */
    return 0;
}

int vram_sched_attach_pid(vram_sched_t *s, int64_t id, pid_t pid)
{
    if (!s || pid <= 0) return vram_fail(VRAM_EINVAL, "bad argument");
    attach_arg_t a = {id, pid};
    int rc = vram_sched_locked(s, do_attach, &a);
    return rc < 0 ? rc : 0;
}

/* Notes that job id's exit file is to go once the operation commits; when
 * there is no room, the file stays until the next start's sweep, which
 * finds the job ended. */
static void exit_recorded(vram_sched_t *s, int64_t id)
{
    if (s->nexits == s->exits_cap) {
        size_t cap = s->exits_cap ? 2 * s->exits_cap : 8;
        int64_t *grown = realloc(s->exits_read, cap * sizeof *grown);
        if (!grown) return;
        s->exits_read = grown;
        s->exits_cap = cap;
    }
    s->exits_read[s->nexits++] = id;
}

void vram_spawn_exits_done(vram_sched_t *s, bool committed)
{
    for (size_t i = 0; committed && i < s->nexits; i++)
        vram_spawn_remove_exit(s->exit_dir, s->exits_read[i]);
    s->nexits = 0;
}

int vram_sched_process_ended(vram_sched_t *s, sched_job_t *j, const char *kind, const char *message)
{
    vram_job_end_t end = {0};
    /* The file goes only once the status is committed (vram_spawn_exits_done):
     * a crash in between leaves it for the next start, never loses it. */
    if (j->job.has_spawn && s->exit_dir[0] &&
        vram_spawn_peek_exit(s->exit_dir, j->job.id, &end.exit_status, end.error,
                             sizeof end.error) == 0) {
        int rc = vram_sched_end_running(s, j, &end);
        if (rc == 0) exit_recorded(s, j->job.id);
        return rc;
    }
    char msg[300];
    if (j->job.has_spawn)
        snprintf(msg, sizeof msg, "%s; its monitor recorded no exit status (killed?)", message);
    else
        snprintf(msg, sizeof msg, "%s", message);
    return vram_sched_transition(s, j, VRAM_JOB_FAILED, kind, msg);
}

void vram_spawn_sweep_exits(vram_sched_t *s)
{
    if (!s->exit_dir[0]) return;
    DIR *d = opendir(s->exit_dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        char *end;
        long long id = strtoll(e->d_name, &end, 10);
        if (e->d_name[0] == '.' || id <= 0) continue;
        pthread_mutex_lock(&s->lock);
        sched_job_t *j = vram_sched_find_active(s, id);
        bool running = j && j->job.state == VRAM_JOB_RUNNING;
        pthread_mutex_unlock(&s->lock);
        if (!running) (void)unlinkat(dirfd(d), e->d_name, 0);
    }
    closedir(d);
}
