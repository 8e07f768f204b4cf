/* `vramd` / `vram serve`: options, listeners, the scheduler thread, signals. */
#include "daemon/daemon.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <grp.h>
#include <sys/file.h>
#include <sys/resource.h>
#include "vram_int.h"
#include <time.h>
#include <unistd.h>

static void usage(FILE *out, const char *prog)
{
    fprintf(
        out,
        "usage: %s [--foreground] [--config FILE] [--OPTION VALUE ...]\n\n"
        "vramd admits GPU jobs against free memory, queues the rest durably and releases\n"
        "memory when a job's process ends. API: HTTP/JSON under /v1 on a Unix socket and on\n"
        "loopback TCP (read-only there unless VRAM_TOKEN is set).\n\n"
        "  --foreground     stay attached to the terminal (logs go to stderr either way)\n"
        "  --config FILE    KEY=VALUE lines, e.g. SAFETY_MARGIN=4GiB\n"
        "  --OPTION VALUE   any option below, e.g. --socket /tmp/v.sock --listen 127.0.0.1:0\n\n"
        "Options (flag, or VRAM_* environment variable):\n",
        prog);
    for (int i = 0; i < VRAM_OPT_COUNT_; i++)
        fprintf(out, "  %-26s %s (default \"%s\")\n", vram_option_env((vram_option_t)i),
                vram_option_help((vram_option_t)i), vram_option_default((vram_option_t)i));
}

/* The directory of a file the daemon keeps: created (with its parents) when
 * missing if `create`, then, if `check`, refused unless owned by the daemon's
 * user and writable by nobody else. `mode` is what it gets when created (the
 * umask is 077). */
static int own_dir(const char *path_of_file, bool create, bool check, mode_t mode)
{
    char dir[512];
    snprintf(dir, sizeof dir, "%s", path_of_file);
    char *slash = strrchr(dir, '/');
    if (!slash) return 0; /* the working directory */
    if (slash == dir)
        slash[1] = 0;
    else
        *slash = 0;
    struct stat st;
    if (create && stat(dir, &st) != 0) {
        for (char *p = dir + 1; *p; p++) {
            if (*p != '/') continue;
            *p = 0;
            if (mkdir(dir, 0755) == 0) chmod(dir, 0755); /* parents: like mkdir -p */
            *p = '/';
        }
        if (mkdir(dir, mode) == 0) chmod(dir, mode);
    }
    return check ? vram_private_dir(dir, false, mode) : 0;
}

static int listen_unix(const char *path, mode_t mode, gid_t group, int *out)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof a.sun_path)
        return vram_fail(VRAM_EINVAL, "socket path %s is too long", path);
    snprintf(a.sun_path, sizeof a.sun_path, "%s", path);
    /* The default socket directory is checked; an explicit socket may live
     * wherever its operator put it (its parents are created as before). */
    int rc = own_dir(path, true, !*vram_option_str(VRAM_OPT_SOCKET), 0755);
    if (rc) return rc;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return vram_fail(VRAM_EIO, "socket: %s", strerror(errno));
    /* A live daemon answers on the socket; a stale file from a crash does not. */
    if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0) {
        close(fd);
        return vram_fail(VRAM_EBUSY, "another vramd is already listening on %s", path);
    }
    unlink(path);
    /* The system daemon's socket belongs to SOCKET_GROUP: its members may
     * connect (mode 0660), nobody else. */
    if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || chmod(path, mode) != 0 ||
        (group != (gid_t)-1 && chown(path, (uid_t)-1, group) != 0) || listen(fd, 256) != 0) {
        rc = vram_fail(VRAM_EIO, "cannot listen on %s: %s", path, strerror(errno));
        close(fd);
        return rc;
    }
    *out = fd;
    return 0;
}

/* LISTEN is "HOST:PORT" with a loopback host; port 0 picks a free port. */
static int listen_tcp(const char *spec, int *out, char *actual, size_t len)
{
    char host[64];
    const char *colon = strrchr(spec, ':');
    if (!colon || colon == spec || (size_t)(colon - spec) >= sizeof host)
        return vram_fail(VRAM_EINVAL, "VRAM_LISTEN: \"%s\" is not HOST:PORT", spec);
    memcpy(host, spec, (size_t)(colon - spec));
    host[colon - spec] = 0;
    if (host[0] == '[') { /* [::1] */
        memmove(host, host + 1, strlen(host));
        char *end = strchr(host, ']');
        if (end) *end = 0;
    }
    char *end;
    long port = strtol(colon + 1, &end, 10);
    if (end == colon + 1 || *end || port < 0 || port > 65535)
        return vram_fail(VRAM_EINVAL, "VRAM_LISTEN: bad port in \"%s\"", spec);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai = NULL;
    if (getaddrinfo(host, colon + 1, &hints, &ai) != 0 || !ai)
        return vram_fail(VRAM_EINVAL, "VRAM_LISTEN: cannot resolve \"%s\"", host);
    bool loopback = false;
    if (ai->ai_family == AF_INET)
        loopback = (ntohl(((struct sockaddr_in *)ai->ai_addr)->sin_addr.s_addr) >> 24) == 127;
    else if (ai->ai_family == AF_INET6)
        loopback = IN6_IS_ADDR_LOOPBACK(&((struct sockaddr_in6 *)ai->ai_addr)->sin6_addr);
    if (!loopback) {
        freeaddrinfo(ai);
        return vram_fail(VRAM_EINVAL,
                         "VRAM_LISTEN: %s is not a loopback address (vramd listens on "
                         "127.0.0.1 or ::1 only)",
                         host);
    }
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    if (fd >= 0) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (fd < 0 || bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, 256) != 0) {
        int rc = vram_fail(VRAM_EIO, "cannot listen on %s: %s", spec, strerror(errno));
        if (fd >= 0) close(fd);
        freeaddrinfo(ai);
        return rc;
    }
    freeaddrinfo(ai);
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    getsockname(fd, (struct sockaddr *)&ss, &sl);
    char addr[64] = "?";
    int p = 0;
    if (ss.ss_family == AF_INET) {
        inet_ntop(AF_INET, &((struct sockaddr_in *)&ss)->sin_addr, addr, sizeof addr);
        p = ntohs(((struct sockaddr_in *)&ss)->sin_port);
        snprintf(actual, len, "%s:%d", addr, p);
    } else {
        inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&ss)->sin6_addr, addr, sizeof addr);
        p = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
        snprintf(actual, len, "[%s]:%d", addr, p);
    }
    *out = fd;
    return 0;
}

static _Atomic int stopping;

/* A persistent error (a full disk) fails every tick: report it when it
 * starts, once a minute while it lasts, and when it ends. */
static void *scheduler_thread(void *arg)
{
    vram_sched_t *s = arg;
    uint64_t last_report = 0, failures = 0;
    pthread_setname_np(pthread_self(), "vramd-sched"); /* for top -H, ps -L */
    while (!stopping) {
        int rc = vram_sched_run_once(s, 100);
        uint64_t now = vram_now_ns();
        if (rc < 0) {
            failures++;
            if (failures == 1 || now - last_report >= 60000000000ULL) {
                vramd_log("error",
                          "scheduler: %s (%llu failed ticks so far; reported once a minute)",
                          vram_last_error(), (unsigned long long)failures);
                last_report = now;
            }
        } else if (failures) {
            vramd_log("info", "scheduler: recovered after %llu failed ticks",
                      (unsigned long long)failures);
            failures = 0;
        }
    }
    return NULL;
}

static void log_event(void *arg, const vram_job_t *job, const char *kind, const char *message)
{
    vramd_state_t *d = arg;
    vramd_submit_event(job, kind); /* vram submit: start or stop its process */
    if (d && d->watch) vram_watch_job_event(d->watch, job, kind, message); /* watch counters */
    char devs[64] = "";
    size_t at = 0;
    for (int i = 0; i < job->ndevices && at < sizeof devs; i++)
        at += (size_t)snprintf(devs + at, sizeof devs - at, i ? ",%d" : "%d", job->devices[i]);
    char size[32];
    vram_format_size(job->reserved_bytes ? job->reserved_bytes : job->req.mem_bytes, size,
                     sizeof size);
    vramd_log("info", "job %lld \"%s\" (uid %u) %s -> %s%s%s [%s x %d GPU] %s", (long long)job->id,
              job->req.name, (unsigned)job->req.uid, kind, vram_job_state_name(job->state),
              *devs ? " on GPU " : "", devs, size, job->ndevices ? job->ndevices : job->req.gpus,
              message ? message : "");
}

/* Applies --config FILE first, then every --OPTION VALUE (flags win). */
static int parse_flags(int argc, char **argv, const char *prog, bool *foreground)
{
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--config") && i + 1 < argc &&
            vram_options_load_file(argv[i + 1]) != 0) {
            fprintf(stderr, "%s: %s\n", prog, vram_last_error());
            return 2;
        }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout, prog);
            return -1;
        }
        if (!strcmp(a, "--foreground") || !strcmp(a, "-f")) {
            *foreground = true;
            continue;
        }
        if (!strcmp(a, "--config")) {
            i++;
            continue;
        }
        if (strncmp(a, "--", 2) != 0) {
            fprintf(stderr, "%s: unexpected argument \"%s\"\nTry '%s --help'.\n", prog, a, prog);
            return 2;
        }
        char name[64];
        const char *eq = strchr(a, '='), *value;
        size_t nlen = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
        if (nlen >= sizeof name) nlen = sizeof name - 1;
        memcpy(name, a + 2, nlen);
        name[nlen] = 0;
        int opt = vram_option_find(name);
        if (opt == VRAM_OPT_TOKEN) {
            fprintf(stderr,
                    "%s: the token is never given on the command line (ps would show it): use "
                    "--token-file FILE or VRAM_TOKEN_FILE (or VRAM_TOKEN in the environment)\n",
                    prog);
            return 2;
        }
        if (opt < 0) {
            fprintf(stderr, "%s: unknown option \"%s\"\nTry '%s --help'.\n", prog, a, prog);
            return 2;
        }
        if (eq)
            value = eq + 1;
        else if (i + 1 < argc)
            value = argv[++i];
        else {
            fprintf(stderr, "%s: option \"%s\" needs a value\n", prog, a);
            return 2;
        }
        if (vram_option_set((vram_option_t)opt, value) != 0) {
            fprintf(stderr, "%s: %s\n", prog, vram_last_error());
            return 2;
        }
    }
    return 0;
}

/* VRAM_TOKEN_FILE: the token's first line, from a regular file of the
 * daemon's user that nobody else may read (0600). */
static int load_token_file(const char *path)
{
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return vram_fail(VRAM_EIO, "token file %s: %s", path, strerror(errno));
    struct stat st;
    char buf[1024];
    int rc = 0;
    ssize_t n = 0;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
        rc = vram_fail(VRAM_EPERM, "token file %s is not a regular file", path);
    else if (st.st_uid != geteuid() || (st.st_mode & 077))
        rc = vram_fail(VRAM_EPERM,
                       "token file %s must belong to uid %u and be readable by it alone (chmod "
                       "600); it is uid %u, mode %03o",
                       path, (unsigned)geteuid(), (unsigned)st.st_uid,
                       (unsigned)(st.st_mode & 0777));
    else if ((n = read(fd, buf, sizeof buf - 1)) <= 0)
        rc = vram_fail(VRAM_EINVAL, "token file %s is empty", path);
    close(fd);
    if (rc) return rc;
    buf[n] = 0;
    buf[strcspn(buf, "\r\n")] = 0;
    if (!*buf) return vram_fail(VRAM_EINVAL, "token file %s: the first line is empty", path);
    rc = vram_option_set(VRAM_OPT_TOKEN, buf);
    memset(buf, 0, sizeof buf);
    return rc;
}

/* Forks into the background; the parent exits once the child is listening. */
static int daemonize(int *notify_fd)
{
    int p[2];
    if (pipe(p) != 0) return -1;
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid > 0) {
        close(p[1]);
        char ok = 0;
        ssize_t n = read(p[0], &ok, 1);
        _exit(n == 1 && ok == 'y' ? 0 : 1);
    }
    close(p[0]);
    setsid();
    int null = open("/dev/null", O_RDWR);
    if (null >= 0) {
        dup2(null, 0);
        dup2(null, 1);
        if (null > 2) close(null);
    }
    *notify_fd = p[1];
    return 0;
}

/* Each job holds a pidfd and the sim backend watches every owner with one, so
 * vramd lifts its soft descriptor limit to the hard one (a shell's 1024 would
 * otherwise cap both), as daemons that hold a descriptor per client do. */
static void raise_fd_limit(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
}

int vramd_main(int argc, char **argv, const char *prog)
{
    bool foreground = false;
    /* Everything vramd creates (database, -wal, -shm, locks) is its user's alone. */
    umask(077);
    raise_fd_limit();
    int rc = parse_flags(argc, argv, prog, &foreground);
    if (rc) return rc < 0 ? 0 : rc;
    const char *token_file = vram_option_str(VRAM_OPT_TOKEN_FILE);
    if (*token_file && load_token_file(token_file) != 0) {
        fprintf(stderr, "%s: %s\n", prog, vram_last_error());
        return 2;
    }

    vramd_state_t d;
    memset(&d, 0, sizeof d);
    d.daemon_uid = geteuid();
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    d.started_at = (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
    if (vram_endpoint(VRAM_ENDPOINT_LISTEN, d.socket_path, sizeof d.socket_path, NULL) != 0) {
        fprintf(stderr, "%s: %s\n", prog, vram_last_error());
        return 2;
    }
    char db[512];
    vramd_db_path(db, sizeof db);
    char *end;
    long mode = strtol(vram_option_str(VRAM_OPT_SOCKET_MODE), &end, 8);
    if (*end || mode < 0 || mode > 0777) {
        fprintf(stderr, "%s: VRAM_SOCKET_MODE: \"%s\" is not an octal mode like 0660\n", prog,
                vram_option_str(VRAM_OPT_SOCKET_MODE));
        return 2;
    }
    /* Root: the socket goes to SOCKET_GROUP; a missing default group "vram"
     * (not installed as a service) leaves it root's, a missing named one is
     * an error. */
    gid_t socket_gid = (gid_t)-1;
    const char *gname = vram_option_str(VRAM_OPT_SOCKET_GROUP);
    if (geteuid() == 0 && *gname) {
        struct group *g = getgrnam(gname);
        if (g)
            socket_gid = g->gr_gid;
        else if (strcmp(gname, "vram")) {
            fprintf(stderr, "%s: VRAM_SOCKET_GROUP: no group named \"%s\"\n", prog, gname);
            return 2;
        }
    }
    vram_sched_config_t cfg;
    if (vram_sched_config_from_options(&cfg) != 0) {
        fprintf(stderr, "%s: %s\n", prog, vram_last_error());
        return 2;
    }
    int notify = -1;
    if (!foreground && daemonize(&notify) != 0) {
        fprintf(stderr, "%s: cannot fork: %s\n", prog, strerror(errno));
        return 1;
    }
    signal(SIGPIPE, SIG_IGN);
    signal(SIGXFSZ, SIG_IGN); /* a file size limit fails the write (EFBIG), not the daemon */
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &stop, NULL); /* threads inherit it; main sigwaits */

    vram_ctx_t *ctx = NULL;
    vram_sched_t *sched = NULL;
    vramd_http_t *unix_http = NULL, *tcp_http = NULL;
    int ufd = -1, tfd = -1, exit_code = 1;
    int db_lock_fd = -1, dev_lock_fds[VRAM_SCHED_MAX_GPUS * 4], ndev_locks = 0;
    pthread_t thread;
    bool thread_started = false;

    /* One vramd per database and per set of devices: the locks come before
     * anything is recovered or admitted, so a refused start writes nothing. */
    char db_lock[560];
    snprintf(db_lock, sizeof db_lock, "%s.lock", db);
    /* The database's directory: never created for an explicit VRAM_DB (a typo
     * must not grow a tree), always private (others must not plant -wal). */
    if (own_dir(db, !*vram_option_str(VRAM_OPT_DB), true, 0700) != 0 ||
        vramd_lock(db_lock, "the database", 0600, &db_lock_fd) != 0) {
        vramd_log("error", "%s", vram_last_error());
        goto out;
    }
    if (vram_ctx_open(&ctx) != 0) {
        vramd_log("error", "devices: %s", vram_last_error());
        goto out;
    }
    if (vramd_lock_devices(ctx, dev_lock_fds, VRAM_SCHED_MAX_GPUS * 4, &ndev_locks) != 0) {
        vramd_log("error", "%s", vram_last_error());
        goto out;
    }
    /* The monitors of the jobs vramd starts write their exit status here (the
     * next vramd reads it after a restart): private, next to the database. */
    char exit_dir[600];
    snprintf(exit_dir, sizeof exit_dir, "%s.exits", db);
    if (vram_private_dir(exit_dir, true, 0700) != 0) {
        vramd_log("error", "%s", vram_last_error());
        goto out;
    }
    cfg.ctx = ctx;
    cfg.db_path = db;
    cfg.exit_dir = exit_dir;
    cfg.on_event = log_event;
    cfg.event_arg = &d;
    if (vram_sched_open(&cfg, &sched) != 0) {
        vramd_log("error", "%s", vram_last_error());
        goto out;
    }
    d.sched = sched;
    if (listen_unix(d.socket_path, (mode_t)mode, socket_gid, &ufd) != 0) {
        vramd_log("error", "%s", vram_last_error());
        goto out;
    }
    const char *listen_spec = vram_option_str(VRAM_OPT_LISTEN);
    if (*listen_spec && listen_tcp(listen_spec, &tfd, d.tcp_address, sizeof d.tcp_address) != 0) {
        vramd_log("error", "%s", vram_last_error());
        goto out;
    }
    if (vramd_submit_start(sched, exit_dir) != 0) {
        vramd_log("error", "%s", vram_last_error());
        goto out;
    }
    if (vramd_watch_start(&d, ctx, sched, db) != 0) { /* watch: monitoring */
        vramd_log("error", "%s", vram_last_error());
        goto out;
    }
    if (pthread_create(&thread, NULL, scheduler_thread, sched) != 0) goto out;
    thread_started = true;
    if (vramd_http_start(&d, ufd, VRAMD_UNIX, &unix_http) != 0 ||
        (tfd >= 0 && vramd_http_start(&d, tfd, VRAMD_TCP, &tcp_http) != 0)) {
        vramd_log("error", "%s", vram_last_error());
        goto out;
    }
    const char *tcp_mode = !*d.tcp_address                    ? "no TCP"
                           : *vram_option_str(VRAM_OPT_TOKEN) ? "TCP token set"
                                                              : "no TCP token set";
    vramd_log("info", "listening on unix:%s%s%s (%s) with %d GPU(s) from the %s backend; db %s",
              d.socket_path, *d.tcp_address ? " and http://" : "", d.tcp_address, tcp_mode,
              vram_ctx_device_count(ctx), vram_ctx_backend(ctx), db);
    if (*vram_ctx_reason(ctx)) vramd_log("info", "%s", vram_ctx_reason(ctx));
    if (notify >= 0) {
        ssize_t w = write(notify, "y", 1);
        (void)w;
        close(notify);
        notify = -1;
    }
    int sig = 0;
    sigwait(&stop, &sig);
    vramd_log("info", "signal %d: shutting down (state is kept in %s)", sig, db);
    exit_code = 0;
out:
    stopping = 1;
    if (sched) vram_sched_shutdown(sched); /* before the listeners stop: nothing more starts */
    vramd_http_stop(tcp_http);
    vramd_http_stop(unix_http);
    if (thread_started) {
        vram_sched_wake(sched);
        pthread_join(thread, NULL);
    }
    vramd_submit_stop();
    if (ufd >= 0) {
        close(ufd);
        unlink(d.socket_path);
    }
    if (tfd >= 0) close(tfd);
    vram_watch_close(d.watch); /* watch: before the scheduler it reads */
    d.watch = NULL;
    vram_sched_close(sched);
    vram_ctx_close(ctx);
    for (int i = 0; i < ndev_locks; i++)
        close(dev_lock_fds[i]);
    if (db_lock_fd >= 0) close(db_lock_fd); /* last: the database is closed */
    if (notify >= 0) close(notify);
    return exit_code;
}
