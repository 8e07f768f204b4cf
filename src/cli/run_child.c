/* vram run's COMMAND: started in its own process group (which gets the
 * terminal when vram run has it), stdin/stdout/stderr left as they are. With
 * --retry-oom a copy of stderr is read for out-of-memory messages: through a
 * pseudo-terminal when stderr is a terminal (so isatty(2) stays true in the
 * job), else through a pipe. Signals to vram run become SIGTERM to the
 * group, then SIGKILL after --grace. */
#include "cli/run.h"
#include "sched/sched.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

/* ---- signals ------------------------------------------------------------------ */

static int signal_pipe[2] = {-1, -1};
static volatile sig_atomic_t first_signal;

static void on_signal(int sig)
{
    int saved = errno;
    if (sig != SIGCHLD && sig != SIGWINCH && !first_signal) first_signal = sig;
    unsigned char b = (unsigned char)sig;
    ssize_t w = write(signal_pipe[1], &b, 1);
    (void)w;
    errno = saved;
}

int run_signals_install(void)
{
    if (pipe2(signal_pipe, O_CLOEXEC | O_NONBLOCK) != 0) return -1;
    struct sigaction sa = {.sa_handler = on_signal};
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    const int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGCHLD, SIGWINCH};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
        sigaction(sigs[i], &sa, NULL);
    /* vram run leaves the terminal's foreground to COMMAND and takes it back */
    signal(SIGTTOU, SIG_IGN);
    return 0;
}

int run_signal_received(void)
{
    return first_signal;
}

/* ---- the copy of stderr ------------------------------------------------------ */

typedef struct {
    int read_fd;  /* -1: no copy (COMMAND writes to stderr itself) */
    int child_fd; /* COMMAND's fd 2 */
    bool pty;
    vram_oom_scan_t scan;
} tee_t;

static int tee_open(const run_opts_t *o, tee_t *t)
{
    memset(t, 0, sizeof *t);
    t->read_fd = t->child_fd = -1;
    vram_oom_scan_init(&t->scan);
    if (!o->retry_oom) return 0;
    if (!isatty(2)) {
        int p[2];
        if (pipe2(p, O_CLOEXEC) != 0) return -1;
        t->read_fd = p[0];
        t->child_fd = p[1];
        return 0;
    }
    int m = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (m < 0 || grantpt(m) != 0 || unlockpt(m) != 0) goto fail;
    const char *name = ptsname(m);
    int s = name ? open(name, O_RDWR | O_NOCTTY | O_CLOEXEC) : -1;
    if (s < 0) goto fail;
    /* the real terminal's settings, but bytes pass unchanged: the real
     * terminal does the output processing when they are copied to it */
    struct termios tio;
    if (tcgetattr(2, &tio) == 0) {
        tio.c_oflag &= (tcflag_t)~OPOST;
        tcsetattr(s, TCSANOW, &tio);
    }
    struct winsize ws;
    if (ioctl(2, TIOCGWINSZ, &ws) == 0) ioctl(s, TIOCSWINSZ, &ws);
    t->read_fd = m;
    t->child_fd = s;
    t->pty = true;
    return 0;
fail:
    if (m >= 0) close(m);
    return -1;
}

/* Copies what is readable now to stderr and scans it; false at EOF. */
static bool tee_pump(tee_t *t)
{
    char buf[4096];
    ssize_t n = read(t->read_fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) return true;
    if (n <= 0) return false; /* EOF, or EIO from a pty whose slaves are closed */
    for (ssize_t off = 0; off < n;) {
        ssize_t w = write(2, buf + off, (size_t)(n - off));
        if (w <= 0) break;
        off += w;
    }
    vram_oom_scan_feed(&t->scan, buf, (size_t)n);
    return true;
}

/* ---- starting COMMAND ------------------------------------------------------------- */

static void set_env_int(const char *name, long long v)
{
    char buf[32];
    snprintf(buf, sizeof buf, "%lld", v);
    setenv(name, buf, 1);
}

static long long int_of(json_t *job, const char *key)
{
    return (long long)json_integer_value(json_object_get(job, key));
}

static const char *devices_text(json_t *job, char *devs, size_t len)
{
    size_t at = 0, i;
    json_t *d;
    devs[0] = 0;
    json_array_foreach(json_object_get(job, "devices"), i, d)
    {
        if (at < len)
            at += (size_t)snprintf(devs + at, len - at, i ? ",%lld" : "%lld",
                                   (long long)json_integer_value(d));
    }
    return devs;
}

static void job_env(json_t *job)
{
    char devs[128];
    setenv("CUDA_VISIBLE_DEVICES", devices_text(job, devs, sizeof devs), 1);
    set_env_int("VRAM_JOB_ID", int_of(job, "id"));
    /* what vramd granted and recorded: no batch arithmetic here */
    if (int_of(job, "granted_batch_size")) {
        set_env_int("VRAM_BATCH_SIZE", int_of(job, "granted_batch_size"));
        set_env_int("VRAM_GRAD_ACCUM", int_of(job, "grad_accum"));
    }
}

static void child_exec(const run_opts_t *o, json_t *job, const tee_t *t, int go_fd, pid_t parent)
{
    /* COMMAND must not outlive vram run: its reservation ends with us. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(137);
    setpgid(0, 0);
    const int defaults[] = {SIGINT, SIGTERM, SIGHUP, SIGCHLD, SIGWINCH, SIGTTOU, SIGTSTP};
    for (size_t i = 0; i < sizeof defaults / sizeof defaults[0]; i++)
        signal(defaults[i], SIG_DFL);
    char go;
    while (read(go_fd, &go, 1) < 0 && errno == EINTR) {
    }
    job_env(job);
    if (t->child_fd >= 0) dup2(t->child_fd, 2);
    execvp(o->command[0], o->command);
    fprintf(stderr, "vram run: cannot run \"%s\": %s\n", o->command[0], strerror(errno));
    _exit(127);
}

/* The terminal vram run is attached to (stdin, else stdout, else stderr), -1. */
static int terminal_fd(void)
{
    for (int fd = 0; fd < 3; fd++)
        if (isatty(fd)) return fd;
    return -1;
}

/* Forks COMMAND in its own group and hands it the terminal if we hold it. */
static pid_t start(const run_opts_t *o, json_t *job, const tee_t *t, int tty)
{
    int go[2];
    if (pipe2(go, O_CLOEXEC) != 0) return -1;
    pid_t parent = getpid(), child = fork();
    if (child == 0) {
        close(go[1]);
        child_exec(o, job, t, go[0], parent);
    }
    close(go[0]);
    if (child > 0) {
        setpgid(child, child); /* both sides, whichever runs first */
        if (tty >= 0 && tcgetpgrp(tty) == getpgrp()) tcsetpgrp(tty, child);
    }
    close(go[1]); /* lets COMMAND exec */
    return child;
}

/* ---- supervision ------------------------------------------------------------------ */

typedef struct {
    pid_t child;
    double kill_at; /* SIGKILL the group then (0 = not asked to stop) */
} stopper_t;

static double now_s(void)
{
    return (double)vram_now_ns() / 1e9;
}

static void stop_group(const run_opts_t *o, stopper_t *s, const char *why)
{
    if (s->kill_at) return;
    run_say(o, "%s: SIGTERM to the job's processes, SIGKILL after %.0f s", why, o->grace_s);
    kill(-s->child, SIGTERM);
    s->kill_at = now_s() + o->grace_s;
}

/* Once a second: renew the lease; true when the job was cancelled through vramd. */
static bool cancelled_by_daemon(json_t *job)
{
    char path[96];
    long st;
    json_t *reply = NULL;
    long long id = int_of(job, "id");
    if (json_real_value(json_object_get(job, "lease_s")) > 0) {
        snprintf(path, sizeof path, "/v1/jobs/%lld/renew", id);
        cli_daemon_call("POST", path, NULL, &st, &reply);
    } else {
        snprintf(path, sizeof path, "/v1/jobs/%lld", id);
        cli_daemon_call("GET", path, NULL, &st, &reply);
    }
    const char *state = json_string_value(json_object_get(reply, "state"));
    bool cancelled = reply && st == 200 && state && !strcmp(state, "cancelled");
    json_decref(reply);
    return cancelled;
}

static void handle_signals(const run_opts_t *o, tee_t *t, stopper_t *s, int *interrupted)
{
    unsigned char sig;
    while (read(signal_pipe[0], &sig, 1) == 1) {
        if (sig == SIGWINCH && t->pty) {
            struct winsize ws;
            if (ioctl(2, TIOCGWINSZ, &ws) == 0) ioctl(t->child_fd, TIOCSWINSZ, &ws);
        } else if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP) {
            if (!*interrupted) *interrupted = sig;
            stop_group(o, s, strsignal(sig));
        }
    }
}

/* COMMAND stopped (Ctrl-Z): stop vram run too, so the shell gets the terminal
 * back; when continued, COMMAND continues too, with the terminal if the
 * shell gave it to us (`fg`), without it (`bg`). */
static void follow_stop(pid_t child, int tty)
{
    if (tcgetpgrp(tty) == child) tcsetpgrp(tty, getpgrp());
    raise(SIGTSTP);
    if (tcgetpgrp(tty) == getpgrp()) tcsetpgrp(tty, child);
    kill(-child, SIGCONT);
}

static int supervise(const run_opts_t *o, json_t *job, tee_t *t, pid_t child, int tty,
                     run_outcome_t *out)
{
    stopper_t s = {child, 0};
    double next_check = now_s() + 1;
    bool tee_open_fd = t->read_fd >= 0;
    int status = 0, rc = 0;
    for (;;) {
        struct pollfd p[2] = {{.fd = signal_pipe[0], .events = POLLIN},
                              {.fd = tee_open_fd ? t->read_fd : -1, .events = POLLIN}};
        double wait = next_check - now_s();
        if (s.kill_at && s.kill_at - now_s() < wait) wait = s.kill_at - now_s();
        (void)poll(p, 2, wait > 0 ? (int)(wait * 1000) + 1 : 0);
        if (p[1].revents) tee_open_fd = tee_pump(t);
        handle_signals(o, t, &s, &out->interrupted);
        pid_t w = waitpid(child, &status, WNOHANG | WUNTRACED);
        if (w == child && WIFSTOPPED(status)) {
            /* Ctrl-Z, or a read of the terminal from the background: stop
             * with COMMAND so the shell can `fg` both (no terminal: whoever
             * stopped it continues it) */
            if (tty >= 0 && !s.kill_at) follow_stop(child, tty);
            continue;
        }
        if (w == child) break;
        if (w < 0 && errno != EINTR) {
            rc = cli_runtime_error(o->cmd, "waitpid: %s", strerror(errno));
            goto out;
        }
        if (s.kill_at && now_s() >= s.kill_at) {
            kill(-child, SIGKILL);
            s.kill_at = now_s() + o->grace_s;
        }
        if (now_s() >= next_check) {
            next_check = now_s() + 1;
            if (!out->cancelled && cancelled_by_daemon(job)) {
                out->cancelled = true;
                stop_group(o, &s, "the job was cancelled");
            }
        }
    }
    /* What COMMAND's own children still write is not waited for. */
    for (int k = 0; tee_open_fd && k < 64; k++) {
        struct pollfd p = {.fd = t->read_fd, .events = POLLIN};
        if (poll(&p, 1, 0) <= 0 || !tee_pump(t)) break;
    }
    out->code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    /* Ctrl-C at the terminal reaches COMMAND's group, not vram run */
    if (!out->interrupted && WIFSIGNALED(status) && WTERMSIG(status) == SIGINT)
        out->interrupted = SIGINT;
out:
    return rc;
}

int run_command(const run_opts_t *o, json_t *job, run_outcome_t *out)
{
    memset(out, 0, sizeof *out);
    tee_t t;
    int tty = terminal_fd(), rc = 0;
    pid_t child = -1;
    if (tee_open(o, &t) != 0) {
        rc = cli_runtime_error(o->cmd, "pseudo-terminal: %s", strerror(errno));
        goto out;
    }
    child = start(o, job, &t, tty);
    if (child < 0) {
        rc = cli_runtime_error(o->cmd, "fork: %s", strerror(errno));
        goto out;
    }
    if (!t.pty && t.child_fd >= 0) { /* the pipe's write end is COMMAND's alone */
        close(t.child_fd);
        t.child_fd = -1;
    }
    char size[32], devs[128];
    vram_format_size((uint64_t)int_of(job, "reserved_bytes"), size, sizeof size);
    long long batch = int_of(job, "granted_batch_size");
    if (batch)
        run_say(o,
                "job %lld running on GPU %s with batch %lld x %lld accumulation steps (%s "
                "reserved per GPU), pid %d",
                int_of(job, "id"), devices_text(job, devs, sizeof devs), batch,
                int_of(job, "grad_accum"), size, (int)child);
    else
        run_say(o, "job %lld running on GPU %s (%s reserved per GPU), pid %d", int_of(job, "id"),
                devices_text(job, devs, sizeof devs), size, (int)child);
    rc = supervise(o, job, &t, child, tty, out);
    out->oom = t.scan.match;
    out->oom_status = o->oom_exit_code > 0 && out->code == o->oom_exit_code;
out:
    if (tty >= 0 && child > 0 && tcgetpgrp(tty) == child) tcsetpgrp(tty, getpgrp());
    if (t.read_fd >= 0) close(t.read_fd);
    if (t.child_fd >= 0) close(t.child_fd);
    return rc;
}
