/* vram submit, the process side: vramd starts an admitted job as the user
 * who submitted it. A small monitor process (the job's registered pid)
 * leaves vramd's session and family (it is a grandchild whose parent exits
 * at once, so it is never vramd's child and outlives a restart of vramd),
 * starts COMMAND as the user in the submitting directory with the
 * whitelisted environment and the output files, waits for it and writes its
 * exit status to a file in vramd's exit directory before it exits. Whichever
 * vramd then sees the monitor's end (the one that started it, or the next
 * after a restart) reads the file: a pipe to the vramd that started it was
 * lost with that vramd, so a job that exited 0 after a restart was recorded
 * failed. The monitor keeps vramd's identity, so the user can neither kill it
 * (losing the status) nor forge the file; COMMAND drops to the user before it
 * creates its output files, so they are created with the user's rights.
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

enum { MESSAGE_MAX = 200 };

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
    char exit_tmp[4096], exit_path[4096]; /* the monitor writes tmp, then renames it */
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
    case EEXIST:
        return "it exists and is not your own file (vram submit never writes through a link or "
               "into another user's file: remove it or choose another --output)";
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

/* Closes every descriptor from 3 up: vramd's sockets, database and other
 * jobs' descriptors stay out of a job. */
static void close_from_3(void)
{
    if (syscall(SYS_close_range, 3u, ~0u, 0u) == 0) return;
    for (int fd = 3; fd < 4096; fd++) /* older kernels */
        close(fd);
}

static void fail_to(int fd, const char *a, const char *b, int e, int status)
{
    char msg[MESSAGE_MAX], what[160];
    put(what, sizeof what, a, b, ": ");
    put(msg, sizeof msg, what, errno_text(e), NULL);
    ssize_t w = write(fd, msg, strlen(msg));
    (void)w;
    _exit(status);
}

/* An output file, opened by the job's user: a new one (mode 0600), or the
 * user's own earlier output at that path (a rerun, or job ids that started
 * over), truncated; never a link planted in a shared directory, a file of
 * another user, or a second name (hard link) of some other file. */
static int create_output(const char *path)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd >= 0 || errno != EEXIST) return fd;
    fd = open(path, O_WRONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    struct stat st;
    if (fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == getuid() &&
        st.st_nlink == 1 && ftruncate(fd, 0) == 0 && fchmod(fd, 0600) == 0)
        return fd;
    if (fd >= 0) close(fd);
    errno = EEXIST;
    return -1;
}

/* The job's process: the user's identity, output files, directory,
 * environment, exec. */
static void run_command(const plan_t *p, int errfd)
{
    static const int defaults[] = {SIGPIPE, SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGTTOU, SIGCHLD};
    for (size_t i = 0; i < sizeof defaults / sizeof defaults[0]; i++)
        signal(defaults[i], SIG_DFL);
    if (geteuid() == 0 && p->uid != 0) {
        if (setgroups((size_t)p->ngroups, p->groups) != 0 || setgid(p->gid) != 0 ||
            setuid(p->uid) != 0 || getuid() != p->uid || geteuid() != p->uid)
            fail_to(errfd, "vramd could not take the submitting user's identity", "", errno, 126);
    } else if (geteuid() != p->uid) {
        fail_to(errfd, "vramd runs as another user and cannot start this job", "", EPERM, 126);
    }
    umask(022);
    if (chdir(p->cwd) != 0) fail_to(errfd, "cannot enter the submitting directory", "", errno, 127);
    int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
    int out = create_output(p->output);
    if (out < 0) fail_to(errfd, "cannot create the output file ", p->output, errno, 127);
    int err = strcmp(p->output, p->error) ? create_output(p->error) : dup(out);
    if (err < 0) fail_to(errfd, "cannot create the error file ", p->error, errno, 127);
    if (null < 0 || dup2(null, 0) < 0 || dup2(out, 1) < 0 || dup2(err, 2) < 0)
        fail_to(errfd, "cannot set up stdio", "", errno, 127);
    int e = ENOENT;
    for (int i = 0; i < p->npaths; i++) {
        execve(p->paths[i], p->argv, p->envp);
        if (errno != ENOENT) e = errno;
    }
    fail_to(errfd, "cannot run ", p->argv[0], e, 127);
}

/* "STATUS\nMESSAGE" to exit_path, through a temporary file and a rename,
 * so that a reader sees all of it or nothing. */
static void write_exit(const plan_t *p, int status, const char *message)
{
    char text[32 + MESSAGE_MAX], digits[16];
    unsigned v = status < 0 ? (unsigned)-status : (unsigned)status;
    int n = 0;
    do {
        digits[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v && n < 12);
    size_t at = 0;
    if (status < 0) text[at++] = '-';
    while (n)
        text[at++] = digits[--n];
    text[at++] = '\n';
    for (const char *c = message; *c && at + 1 < sizeof text; c++)
        text[at++] = *c;
    int fd = open(p->exit_tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) return;
    bool ok = write(fd, text, at) == (ssize_t)at && fsync(fd) == 0;
    close(fd);
    if (!ok || rename(p->exit_tmp, p->exit_path) != 0) unlink(p->exit_tmp);
}

/* The monitor: a new session, COMMAND as the user, its exit status. */
static void monitor(const plan_t *p)
{
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    signal(SIGPIPE, SIG_IGN);
    /* a cancel signals the whole group: the monitor stays to record */
    signal(SIGTERM, SIG_IGN);
    signal(SIGINT, SIG_IGN);
    signal(SIGHUP, SIG_IGN);
    signal(SIGCHLD, SIG_DFL);
    setsid();
    close_from_3();
    int errp[2];
    if (pipe2(errp, O_CLOEXEC) != 0) {
        write_exit(p, 126, "vramd could not start the job: pipe failed");
        _exit(1);
    }
    pid_t child = fork();
    if (child == 0) {
        close(errp[0]);
        run_command(p, errp[1]);
    }
    close(errp[1]);
    if (child < 0) {
        write_exit(p, 126, "vramd could not start the job: fork failed");
        _exit(1);
    }
    int st = 0;
    while (waitpid(child, &st, 0) < 0 && errno == EINTR) {
    }
    char msg[MESSAGE_MAX] = "";
    ssize_t n = read(errp[0], msg, sizeof msg - 1);
    msg[n > 0 ? n : 0] = 0;
    write_exit(p, WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st), msg);
    _exit(0);
}

/* ---- the parent's side ---------------------------------------------------- */

static int exit_paths(const char *dir, int64_t id, char *tmp, char *path, size_t len)
{
    if (!dir || !*dir) return vram_fail(VRAM_EINVAL, "no exit directory for started jobs");
    int a = snprintf(tmp, len, "%s/%lld.tmp", dir, (long long)id);
    int b = snprintf(path, len, "%s/%lld", dir, (long long)id);
    return a < 0 || b < 0 || (size_t)a >= len || (size_t)b >= len
               ? vram_fail(VRAM_EINVAL, "exit directory path is too long")
               : 0;
}

int vram_spawn_job(const vram_job_t *job, const char *spec, const char *exit_dir, vram_spawn_t *out)
{
    if (!job || !spec || !out) return vram_fail(VRAM_EINVAL, "NULL argument");
    plan_t *p = calloc(1, sizeof *p);
    if (!p) return vram_fail(VRAM_ENOMEM, "out of memory");
    int pp[2] = {-1, -1};
    int rc = exit_paths(exit_dir, job->id, p->exit_tmp, p->exit_path, sizeof p->exit_path);
    if (!rc) rc = plan_job(p, job, spec);
    if (rc) goto out;
    (void)unlink(p->exit_path); /* a stale one from a database that was reset */
    if (pipe2(pp, O_CLOEXEC) != 0) {
        rc = vram_fail(VRAM_EIO, "pipe: %s", strerror(errno));
        goto out;
    }
    pid_t mid = fork();
    if (mid < 0) {
        rc = vram_fail(VRAM_EIO, "fork: %s", strerror(errno));
        goto out;
    }
    if (mid == 0) {
        /* The intermediate: forks the monitor, tells its pid and exits, so
         * the monitor is reparented away from vramd. */
        close(pp[0]);
        pid_t m = fork();
        if (m == 0) monitor(p);
        ssize_t w = write(pp[1], &m, sizeof m);
        (void)w;
        _exit(0);
    }
    close(pp[1]);
    pp[1] = -1;
    pid_t m = -1;
    ssize_t n;
    while ((n = read(pp[0], &m, sizeof m)) < 0 && errno == EINTR) {
    }
    while (waitpid(mid, NULL, 0) < 0 && errno == EINTR) {
    }
    if (n != (ssize_t)sizeof m || m <= 0) {
        rc = vram_fail(VRAM_EIO, "fork of the job's monitor failed");
        goto out;
    }
    *out = (vram_spawn_t){.pid = m};
out:
    for (int i = 0; i < 2; i++)
        if (pp[i] >= 0) close(pp[i]);
    plan_free(p);
    free(p);
    return rc;
}

int vram_spawn_peek_exit(const char *exit_dir, int64_t id, int *exit_status, char *message,
                         size_t len)
{
    char tmp[4096], path[4096], text[512];
    int rc = exit_paths(exit_dir, id, tmp, path, sizeof path);
    if (rc) return rc;
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return vram_fail(VRAM_ENOENT, "job %lld: no exit status recorded", (long long)id);
    ssize_t n = read(fd, text, sizeof text - 1);
    close(fd);
    text[n > 0 ? n : 0] = 0;
    char *end;
    long status = strtol(text, &end, 10);
    if (n <= 0 || end == text || *end != '\n' || status < -1000 || status > 1000)
        return vram_fail(VRAM_EPARSE, "%s: malformed exit status", path);
    *exit_status = (int)status;
    if (len) snprintf(message, len, "%s", end + 1);
    return 0;
}

void vram_spawn_remove_exit(const char *exit_dir, int64_t id)
{
    char tmp[4096], path[4096];
    if (exit_paths(exit_dir, id, tmp, path, sizeof path) == 0) (void)unlink(path);
}

int vram_spawn_read_exit(const char *exit_dir, int64_t id, int *exit_status, char *message,
                         size_t len)
{
    int rc = vram_spawn_peek_exit(exit_dir, id, exit_status, message, len);
    if (rc == 0) vram_spawn_remove_exit(exit_dir, id);
    return rc;
}
