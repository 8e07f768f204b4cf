/* vram submit, the process side: vramd starts an admitted job as the user
 * who submitted it. A small monitor process (the job's registered pid) leaves
 * vramd's session, takes the user's uid and groups, starts COMMAND in the
 * submitting directory with the whitelisted environment and the output
 * files, waits for it, reports the exit status on a pipe and stays alive
 * until vramd has recorded it (so vramd never mistakes the end for a crash).
 * Everything that allocates happens before fork: vramd has threads. */
#include "sched_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <jansson.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

enum { MAX_ARGS = 256, MAX_ENV = 96, MAX_PATHS = 64, MAX_GROUPS = 256 };

typedef struct {
    int status;
    char message[200];
} report_t;

/* Everything the child needs, prepared in the parent. */
typedef struct {
    uid_t uid;
    gid_t gid;
    gid_t groups[MAX_GROUPS];
    int ngroups;
    char *argv[MAX_ARGS + 1];
    char *envp[MAX_ENV + 1];
    int nenv;
    char *paths[MAX_PATHS]; /* candidates for argv[0], tried in order */
    int npaths;
    char cwd[4096], output[4096], error[4096];
    json_t *spec;
} plan_t;

static int add_env(plan_t *p, const char *name, const char *value)
{
    if (p->nenv >= MAX_ENV) return vram_fail(VRAM_EINVAL, "env: more than %d variables", MAX_ENV);
    if (asprintf(&p->envp[p->nenv], "%s=%s", name, value) < 0)
        return vram_fail(VRAM_ENOMEM, "out of memory");
    p->nenv++;
    return 0;
}

static int add_env_int(plan_t *p, const char *name, long long v)
{
    char buf[32];
    snprintf(buf, sizeof buf, "%lld", v);
    return add_env(p, name, buf);
}

int vram_spawn_expand_path(const char *pattern, int64_t id, char *out, size_t len)
{
    size_t at = 0;
    for (const char *c = pattern; *c; c++) {
        char piece[32] = {*c, 0};
        if (c[0] == '%' && c[1] == 'j') {
            snprintf(piece, sizeof piece, "%lld", (long long)id);
            c++;
        } else if (c[0] == '%' && c[1] == '%') {
            c++;
        }
        size_t n = strlen(piece);
        if (at + n >= len) return vram_fail(VRAM_EINVAL, "output path is too long");
        memcpy(out + at, piece, n);
        at += n;
    }
    out[at] = 0;
    return 0;
}

static int plan_user(plan_t *p, uid_t uid)
{
    struct passwd pw, *res = NULL;
    char buf[4096];
    if (getpwuid_r(uid, &pw, buf, sizeof buf, &res) != 0 || !res)
        return vram_fail(VRAM_ENOENT, "uid %u has no entry in the password database",
                         (unsigned)uid);
    p->uid = uid;
    p->gid = pw.pw_gid;
    p->ngroups = MAX_GROUPS;
    if (getgrouplist(pw.pw_name, pw.pw_gid, p->groups, &p->ngroups) < 0) p->ngroups = 0;
    int rc = add_env(p, "HOME", pw.pw_dir);
    if (!rc) rc = add_env(p, "USER", pw.pw_name);
    if (!rc) rc = add_env(p, "LOGNAME", pw.pw_name);
    if (!rc) rc = add_env(p, "SHELL", *pw.pw_shell ? pw.pw_shell : "/bin/sh");
    return rc;
}

static int plan_paths(plan_t *p, const char *path_env)
{
    const char *cmd = p->argv[0];
    if (strchr(cmd, '/')) {
        p->paths[p->npaths++] = strdup(cmd);
        return p->paths[0] ? 0 : vram_fail(VRAM_ENOMEM, "out of memory");
    }
    const char *dir = path_env;
    while (dir && p->npaths < MAX_PATHS) {
        const char *end = strchr(dir, ':');
        size_t n = end ? (size_t)(end - dir) : strlen(dir);
        if (asprintf(&p->paths[p->npaths], "%.*s/%s", (int)n, n ? dir : ".", cmd) < 0)
            return vram_fail(VRAM_ENOMEM, "out of memory");
        p->npaths++;
        dir = end ? end + 1 : NULL;
    }
    return 0;
}

static int plan_job(plan_t *p, const vram_job_t *job, const char *spec_text)
{
    json_error_t e;
    p->spec = json_loads(spec_text, 0, &e);
    json_t *argv = json_object_get(p->spec, "argv"), *env = json_object_get(p->spec, "env");
    const char *cwd = json_string_value(json_object_get(p->spec, "cwd"));
    const char *out = json_string_value(json_object_get(p->spec, "output"));
    const char *err = json_string_value(json_object_get(p->spec, "error"));
    if (!json_is_array(argv) || !json_array_size(argv) || json_array_size(argv) > MAX_ARGS ||
        !cwd || !out)
        return vram_fail(VRAM_EPARSE, "job %lld: malformed spawn spec", (long long)job->id);
    size_t i;
    json_t *v;
    json_array_foreach(argv, i, v)
    {
        if (!json_is_string(v) || !(p->argv[i] = strdup(json_string_value(v))))
            return vram_fail(VRAM_EPARSE, "job %lld: bad argument %zu", (long long)job->id, i);
    }
    snprintf(p->cwd, sizeof p->cwd, "%s", cwd);
    int rc = vram_spawn_expand_path(out, job->id, p->output, sizeof p->output);
    if (!rc)
        rc = vram_spawn_expand_path(err && *err ? err : out, job->id, p->error, sizeof p->error);
    if (!rc) rc = plan_user(p, job->req.uid);
    const char *key, *path = "/usr/local/bin:/usr/bin:/bin";
    json_object_foreach(env, key, v)
    {
        if (rc) break;
        if (!vram_spawn_env_allowed(key) || !json_is_string(v)) continue;
        if (!strcmp(key, "PATH")) path = json_string_value(v);
        rc = add_env(p, key, json_string_value(v));
    }
    if (!rc && !json_object_get(env, "PATH")) rc = add_env(p, "PATH", path);
    /* the same variables `vram run` sets */
    char devs[128] = "";
    size_t at = 0;
    for (int k = 0; k < job->ndevices && at < sizeof devs; k++)
        at += (size_t)snprintf(devs + at, sizeof devs - at, k ? ",%d" : "%d", job->devices[k]);
    if (!rc) rc = add_env(p, "CUDA_VISIBLE_DEVICES", devs);
    if (!rc) rc = add_env_int(p, "VRAM_JOB_ID", job->id);
    if (!rc && job->granted_batch) rc = add_env_int(p, "VRAM_BATCH_SIZE", job->granted_batch);
    if (!rc && job->granted_batch) rc = add_env_int(p, "VRAM_GRAD_ACCUM", job->grad_accum);
    if (!rc) rc = plan_paths(p, path);
    return rc;
}

static void plan_free(plan_t *p)
{
    for (int i = 0; i < MAX_ARGS && p->argv[i]; i++)
        free(p->argv[i]);
    for (int i = 0; i < p->nenv; i++)
        free(p->envp[i]);
    for (int i = 0; i < p->npaths; i++)
        free(p->paths[i]);
    json_decref(p->spec);
}

/* ---- after fork: async-signal-safe calls only ---------------------------- */

static void put(char *buf, size_t len, const char *a, const char *b, const char *c)
{
    size_t at = 0;
    const char *parts[] = {a, b, c};
    for (int i = 0; i < 3; i++)
        for (const char *s = parts[i]; s && *s && at + 1 < len; s++)
            buf[at++] = *s;
    buf[at] = 0;
}

static const char *errno_text(int e)
{
    switch (e) {
    case ENOENT:
        return "no such file or directory";
    case EACCES:
        return "permission denied";
    case ENOEXEC:
        return "not an executable";
    case ENOTDIR:
        return "not a directory";
    case EISDIR:
        return "is a directory";
    case EPERM:
        return "operation not permitted";
    default:
        return "system error";
    }
}

/* Closes (or, cloexec, marks close-on-exec) every descriptor from 3 but a
 * and b: vramd's sockets, database and other jobs' pipes stay out of a job. */
static void close_except(int a, int b, bool cloexec)
{
    int lo = a < b ? a : b, hi = a < b ? b : a;
    unsigned flags = cloexec ? 4u /* CLOSE_RANGE_CLOEXEC */ : 0u;
    int ranges[3][2] = {{3, lo - 1}, {lo + 1, hi - 1}, {hi + 1, -1}};
    for (int i = 0; i < 3; i++) {
        unsigned first = (unsigned)ranges[i][0];
        unsigned last = ranges[i][1] < 0 ? ~0u : (unsigned)ranges[i][1];
        if (ranges[i][1] >= 0 && ranges[i][1] < ranges[i][0]) continue;
        if (syscall(SYS_close_range, first, last, flags) == 0) continue;
        for (unsigned fd = first; fd <= last && fd < 4096; fd++) /* older kernels */
            cloexec ? fcntl((int)fd, F_SETFD, FD_CLOEXEC) : close((int)fd);
    }
}

static void fail_to(int fd, const char *a, const char *b, int e)
{
    char msg[sizeof(((report_t *)0)->message)], what[160];
    put(what, sizeof what, a, b, ": ");
    put(msg, sizeof msg, what, errno_text(e), NULL);
    ssize_t w = write(fd, msg, strlen(msg));
    (void)w;
    _exit(127);
}

/* The job's process: output files, directory, environment, exec. */
static void run_command(const plan_t *p, int errfd)
{
    static const int defaults[] = {SIGPIPE, SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGTTOU, SIGCHLD};
    for (size_t i = 0; i < sizeof defaults / sizeof defaults[0]; i++)
        signal(defaults[i], SIG_DFL);
    umask(022);
    if (chdir(p->cwd) != 0) fail_to(errfd, "cannot enter the submitting directory", "", errno);
    int null = open("/dev/null", O_RDONLY);
    int out = open(p->output, O_WRONLY | O_CREAT | O_TRUNC, 0666);
    if (out < 0) fail_to(errfd, "cannot open the output file ", p->output, errno);
    int err =
        strcmp(p->output, p->error) ? open(p->error, O_WRONLY | O_CREAT | O_TRUNC, 0666) : dup(out);
    if (err < 0) fail_to(errfd, "cannot open the error file ", p->error, errno);
    if (null < 0 || dup2(null, 0) < 0 || dup2(out, 1) < 0 || dup2(err, 2) < 0)
        fail_to(errfd, "cannot set up stdio", "", errno);
    close_except(errfd, errfd, true);
    int e = ENOENT;
    for (int i = 0; i < p->npaths; i++) {
        execve(p->paths[i], p->argv, p->envp);
        if (errno != ENOENT) e = errno;
    }
    fail_to(errfd, "cannot run ", p->argv[0], e);
}

static void report(int fd, int status, const char *message)
{
    report_t r = {.status = status};
    put(r.message, sizeof r.message, message, NULL, NULL);
    ssize_t w = write(fd, &r, sizeof r);
    (void)w;
}

/* The monitor: the user's identity, a new session, COMMAND, its status. */
static void monitor(const plan_t *p, int status_fd, int ack_fd)
{
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    signal(SIGPIPE, SIG_IGN);
    /* a cancel signals the whole group; the monitor stays to report */
    signal(SIGTERM, SIG_IGN);
    signal(SIGINT, SIG_IGN);
    signal(SIGHUP, SIG_IGN);
    setsid();
    /* Other jobs' pipes must not stay open here: their monitors wait for EOF. */
    close_except(status_fd, ack_fd, false);
    if (geteuid() == 0 && p->uid != 0) {
        if (setgroups((size_t)p->ngroups, p->groups) != 0 || setgid(p->gid) != 0 ||
            setuid(p->uid) != 0 || getuid() != p->uid || geteuid() != p->uid) {
            report(status_fd, 126, "vramd could not take the submitting user's identity");
            _exit(1);
        }
    } else if (geteuid() != p->uid) {
        report(status_fd, 126, "vramd runs as another user and cannot start this job");
        _exit(1);
    }
    int errp[2];
    if (pipe2(errp, O_CLOEXEC) != 0) {
        report(status_fd, 126, "pipe failed");
        _exit(1);
    }
    pid_t child = fork();
    if (child == 0) {
        close(errp[0]);
        run_command(p, errp[1]);
    }
    close(errp[1]);
    int st = 0;
    if (child < 0) {
        report(status_fd, 126, "fork failed");
        _exit(1);
    }
    while (waitpid(child, &st, 0) < 0 && errno == EINTR) {
    }
    char msg[sizeof(((report_t *)0)->message)] = "";
    ssize_t n = read(errp[0], msg, sizeof msg - 1);
    msg[n > 0 ? n : 0] = 0;
    report(status_fd, WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st), msg);
    char ack;
    while (read(ack_fd, &ack, 1) < 0 && errno == EINTR) {
    }
    _exit(0);
}

/* ---- the parent's side ---------------------------------------------------- */

int vram_spawn_job(const vram_job_t *job, const char *spec, vram_spawn_t *out)
{
    if (!job || !spec || !out) return vram_fail(VRAM_EINVAL, "NULL argument");
    plan_t *p = calloc(1, sizeof *p);
    if (!p) return vram_fail(VRAM_ENOMEM, "out of memory");
    int status[2] = {-1, -1}, ack[2] = {-1, -1};
    int rc = plan_job(p, job, spec);
    if (rc) goto out;
    if (pipe2(status, O_CLOEXEC) != 0 || pipe2(ack, O_CLOEXEC) != 0) {
        rc = vram_fail(VRAM_EIO, "pipe: %s", strerror(errno));
        goto out;
    }
    pid_t pid = fork();
    if (pid < 0) {
        rc = vram_fail(VRAM_EIO, "fork: %s", strerror(errno));
        goto out;
    }
    if (pid == 0) {
        close(status[0]);
        close(ack[1]);
        monitor(p, status[1], ack[0]);
    }
    fcntl(status[0], F_SETFL, O_NONBLOCK);
    *out = (vram_spawn_t){.pid = pid, .status_fd = status[0], .ack_fd = ack[1]};
    status[0] = ack[1] = -1;
out:
    for (int i = 0; i < 2; i++) {
        if (status[i] >= 0) close(status[i]);
        if (ack[i] >= 0) close(ack[i]);
    }
    plan_free(p);
    free(p);
    return rc;
}

int vram_spawn_collect(vram_spawn_t *sp, int *exit_status, char *message, size_t len)
{
    report_t r;
    ssize_t n = read(sp->status_fd, &r, sizeof r);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return 0;
    if (n == (ssize_t)sizeof r) {
        r.message[sizeof r.message - 1] = 0;
        *exit_status = r.status;
        snprintf(message, len, "%s", r.message);
    } else {
        *exit_status = -1;
        snprintf(message, len, "the job's monitor process ended without a report");
    }
    return 1;
}

void vram_spawn_release(vram_spawn_t *sp)
{
    if (sp->ack_fd >= 0) close(sp->ack_fd);
    if (sp->status_fd >= 0) close(sp->status_fd);
    sp->ack_fd = sp->status_fd = -1;
    if (sp->pid > 0) {
        while (waitpid(sp->pid, NULL, 0) < 0 && errno == EINTR) {
        }
        sp->pid = 0;
    }
}
