/* vram run: reserve GPU memory through vramd, wait for a place, then run
 * COMMAND on the granted GPUs and release when it ends (however it ends: the
 * daemon also watches this process). */
#include "cli/daemon_client.h"
#include "cli/model_args.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t got_signal;

static void on_signal(int sig)
{
    got_signal = sig;
}

static void usage(FILE *out)
{
    fprintf(
        out,
        "usage: vram run --mem SIZE [options] -- COMMAND [ARGS...]\n\n"
        "Registers with vramd, waits in its queue until the memory is reserved, then runs\n"
        "COMMAND with CUDA_VISIBLE_DEVICES, VRAM_JOB_ID, VRAM_BATCH_SIZE and VRAM_GRAD_ACCUM\n"
        "set, and returns COMMAND's exit status.\n\n"
        "  --mem SIZE             memory per GPU for the full batch (e.g. 20GiB)\n"
        "  --gpus N               GPUs needed at once (default 1)\n"
        "  --devices LIST         exactly these GPUs, e.g. 0,1\n"
        "  --priority P           higher runs first (default 0)\n"
        "  --timeout S            give up when still queued after S (e.g. 90, 10m)\n"
        "  --batch-size B         the batch COMMAND wants\n"
        "  --min-batch-size b     smallest acceptable batch (enables degradation)\n"
        "  --per-sample-mem SIZE  memory per sample of the batch (for degradation)\n"
        "  --retry-oom N          on out-of-memory rerun with half the batch, N times\n"
        "  --oom-exit-code C      also treat exit status C as out of memory\n"
        "  --name NAME            job name (default: COMMAND)\n"
        "  --quiet                only COMMAND's output and errors\n\n"
        "Instead of --mem, the memory may come from the estimator (`vram estimate` flags):\n"
        "  vram run --model llama-7b --precision bf16 --batch-size 8 --min-batch-size 2 -- ...\n"
        "(memory per GPU and per sample are estimated at the batch size).\n\n");
    cli_model_args_help(out);
}

/* Memory per GPU for batch B from the estimator, and the memory one sample adds
 * (every component is affine in the batch size). */
static int estimate_memory(const cli_model_args_t *ma, uint64_t *mem, uint64_t *per_sample)
{
    vram_model_t model;
    int rc = cli_model_args_build(ma, &model);
    if (rc) return rc;
    vram_estimate_config_t cfg = ma->est;
    vram_estimate_t at_b, at_other;
    int64_t b = cfg.batch_size;
    if (vram_estimate(&model, &cfg, &at_b) != 0)
        return cli_usage_error("run", "%s", vram_last_error());
    cfg.batch_size = b > 1 ? b - 1 : 2;
    if (vram_estimate(&model, &cfg, &at_other) != 0)
        return cli_usage_error("run", "%s", vram_last_error());
    *mem = at_b.total;
    *per_sample = b > 1 ? at_b.total - at_other.total : at_other.total - at_b.total;
    return 0;
}

typedef struct {
    json_t *request;           /* POST /v1/jobs body (without batch fields) */
    uint32_t batch, min_batch; /* asked; 0 = none */
    uint64_t mem, per_sample;
    int retry_oom, oom_exit_code;
    bool quiet;
    char **command;
} run_opts_t;

static void say(const run_opts_t *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(const run_opts_t *o, const char *fmt, ...)
{
    if (o->quiet) return;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "vram run: ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

/* Calls vramd, riding out a restart of the daemon for up to 30 s. */
static int call_patiently(const run_opts_t *o, const char *method, const char *path, json_t *body,
                          long *status, json_t **reply)
{
    bool warned = false;
    for (int tries = 0;; tries++) {
        int rc = cli_daemon_call(method, path, body, status, reply);
        if (rc == 0 || tries >= 150) return rc;
        if (rc != VRAM_ECONN && rc != VRAM_EIO) return rc;
        if (!warned) say(o, "%s; retrying for 30 s", vram_last_error());
        warned = true;
        usleep(200000);
    }
}

static int submit(const run_opts_t *o, uint32_t batch, uint32_t min_batch, json_t **job)
{
    json_t *req = json_deep_copy(o->request);
    if (batch) {
        uint64_t mem = o->mem;
        if (o->per_sample && batch < o->batch) mem -= (uint64_t)(o->batch - batch) * o->per_sample;
        json_object_set_new(req, "mem_bytes", json_integer((json_int_t)mem));
        json_object_set_new(req, "batch_size", json_integer(batch));
        json_object_set_new(req, "min_batch_size", json_integer(min_batch));
        json_object_set_new(req, "per_sample_bytes", json_integer((json_int_t)o->per_sample));
    }
    long status;
    json_t *reply;
    int rc = cli_daemon_call("POST", "/v1/jobs", req, &status, &reply);
    json_decref(req);
    if (rc) return cli_runtime_error("run", "%s", vram_last_error());
    if (status != 201) {
        int code = status == 400 || status == 422 ? CLI_USAGE : CLI_RUNTIME;
        fprintf(stderr, "vram run: vramd refused the job: %s\n", cli_daemon_error_message(reply));
        json_decref(reply);
        return code;
    }
    *job = reply;
    return 0;
}

static const char *state_of(json_t *job)
{
    const char *s = json_string_value(json_object_get(job, "state"));
    return s ? s : "?";
}

static long long int_of(json_t *job, const char *key)
{
    return (long long)json_integer_value(json_object_get(job, key));
}

/* Waits until the job leaves the queue; 0 when running, else an exit code. */
static int wait_for_place(const run_opts_t *o, json_t **job)
{
    long long id = int_of(*job, "id"), last_pos = -1;
    char path[96];
    snprintf(path, sizeof path, "/v1/jobs/%lld?wait=1", id);
    for (;;) {
        const char *st = state_of(*job);
        if (!strcmp(st, "running")) return 0;
        if (strcmp(st, "queued")) {
            const char *err = json_string_value(json_object_get(*job, "error"));
            fprintf(stderr, "vram run: job %lld %s%s%s\n", id, st, err && *err ? ": " : "",
                    err ? err : "");
            return CLI_RUNTIME;
        }
        long long pos = int_of(*job, "queue_position");
        if (pos != last_pos) {
            char size[32];
            vram_format_size((uint64_t)int_of(*job, "mem_bytes"), size, sizeof size);
            say(o, "job %lld queued at position %lld (needs %s on %lld GPU(s))", id, pos, size,
                int_of(*job, "gpus"));
            last_pos = pos;
        }
        if (got_signal) {
            char del[64];
            snprintf(del, sizeof del, "/v1/jobs/%lld", id);
            long status;
            json_t *reply = NULL;
            cli_daemon_call("DELETE", del, NULL, &status, &reply);
            json_decref(reply);
            say(o, "job %lld cancelled while queued", id);
            return 128 + got_signal;
        }
        long status;
        json_t *reply;
        int rc = call_patiently(o, "GET", path, NULL, &status, &reply);
        if (rc) return cli_runtime_error("run", "%s", vram_last_error());
        if (status != 200) {
            rc = cli_daemon_fail("run", 0, status, reply);
            json_decref(reply);
            return rc;
        }
        json_decref(*job);
        *job = reply;
    }
}

/* Finds "out of memory" in a stream read in pieces (kept tail covers splits). */
typedef struct {
    char tail[32];
    bool seen;
} oom_scan_t;

static void scan_oom(oom_scan_t *s, const char *data, size_t n)
{
    if (s->seen) return;
    static const char needle[] = "out of memory";
    char buf[4096 + 32];
    size_t keep = strlen(s->tail);
    while (n > 0) {
        size_t take = n > 4096 ? 4096 : n;
        memcpy(buf, s->tail, keep);
        for (size_t i = 0; i < take; i++) {
            char c = data[i];
            buf[keep + i] = (c >= 'A' && c <= 'Z') ? (char)(c + 32) : (c ? c : ' ');
        }
        size_t len = keep + take;
        buf[len] = 0;
        if (strstr(buf, needle)) {
            s->seen = true;
            return;
        }
        keep = len < sizeof needle - 1 ? len : sizeof needle - 1;
        memcpy(s->tail, buf + len - keep, keep);
        s->tail[keep] = 0;
        data += take;
        n -= take;
    }
}

static void set_env_int(const char *name, long long v)
{
    char buf[32];
    snprintf(buf, sizeof buf, "%lld", v);
    setenv(name, buf, 1);
}

/* Runs COMMAND for the placed job; returns its exit status (128+signal). */
static int run_child(const run_opts_t *o, json_t *job, uint32_t want_batch, bool *oom)
{
    long long id = int_of(job, "id");
    char devs[128] = "";
    size_t at = 0, i;
    json_t *d;
    json_array_foreach(json_object_get(job, "devices"), i, d)
    {
        if (at < sizeof devs)
            at += (size_t)snprintf(devs + at, sizeof devs - at, i ? ",%lld" : "%lld",
                                   (long long)json_integer_value(d));
    }
    long long batch = int_of(job, "granted_batch_size");
    long long accum = batch ? (want_batch + batch - 1) / batch : 1;
    int errpipe[2];
    if (pipe2(errpipe, O_CLOEXEC) != 0)
        return cli_runtime_error("run", "pipe: %s", strerror(errno));
    pid_t parent = getpid();
    pid_t child = fork();
    if (child < 0) return cli_runtime_error("run", "fork: %s", strerror(errno));
    if (child == 0) {
        /* The child must not outlive `vram run`: its reservation ends with us. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) _exit(137);
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        setenv("CUDA_VISIBLE_DEVICES", devs, 1);
        set_env_int("VRAM_JOB_ID", id);
        if (batch) {
            set_env_int("VRAM_BATCH_SIZE", batch);
            set_env_int("VRAM_GRAD_ACCUM", accum);
        }
        dup2(errpipe[1], 2);
        execvp(o->command[0], o->command);
        fprintf(stderr, "vram run: cannot run \"%s\": %s\n", o->command[0], strerror(errno));
        _exit(127);
    }
    close(errpipe[1]);
    char size[32];
    vram_format_size((uint64_t)int_of(job, "reserved_bytes"), size, sizeof size);
    if (batch && batch < want_batch)
        say(o,
            "job %lld running on GPU %s with batch %lld x %lld accumulation steps (asked %u; "
            "%s reserved per GPU)",
            id, devs, batch, accum, want_batch, size);
    else
        say(o, "job %lld running on GPU %s (%s reserved per GPU), pid %d", id, devs, size,
            (int)child);

    bool in_terminal_foreground = isatty(0) && tcgetpgrp(0) == getpgrp();
    oom_scan_t scan = {.tail = "", .seen = false};
    int status = 0, forwarded = 0;
    bool pipe_open = true;
    double lease = json_real_value(json_object_get(job, "lease_s"));
    uint64_t last_check = vram_now_ns();
    char path[64];
    snprintf(path, sizeof path, "/v1/jobs/%lld", id);
    for (;;) {
        if (pipe_open) {
            struct pollfd p = {.fd = errpipe[0], .events = POLLIN};
            if (poll(&p, 1, 100) > 0) {
                char buf[4096];
                ssize_t n = read(errpipe[0], buf, sizeof buf);
                if (n > 0) {
                    ssize_t w = write(2, buf, (size_t)n);
                    (void)w;
                    scan_oom(&scan, buf, (size_t)n);
                } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
                    pipe_open = false;
                }
            }
        } else {
            usleep(100000);
        }
        pid_t w = waitpid(child, &status, WNOHANG);
        if (w == child) break;
        if (got_signal && forwarded != got_signal) {
            forwarded = got_signal;
            /* Ctrl-C at a terminal already reached COMMAND (same foreground
             * process group): a second SIGINT could cut its own clean-up short. */
            if (got_signal != SIGINT || !in_terminal_foreground) kill(child, got_signal);
        }
        /* Once a second: renew the lease, and stop COMMAND if the job was cancelled. */
        uint64_t now = vram_now_ns();
        if (now - last_check >= 1000000000ull) {
            last_check = now;
            long st;
            json_t *reply = NULL;
            if (lease > 0) {
                char renew[80];
                snprintf(renew, sizeof renew, "%s/renew", path);
                cli_daemon_call("POST", renew, NULL, &st, &reply);
            } else {
                cli_daemon_call("GET", path, NULL, &st, &reply);
            }
            if (reply && st == 200 && !strcmp(state_of(reply), "cancelled") && !forwarded) {
                say(o, "job %lld was cancelled; stopping COMMAND", id);
                forwarded = SIGTERM;
                kill(child, SIGTERM);
            }
            json_decref(reply);
        }
    }
    /* Whatever COMMAND's children still write is not waited for. */
    for (int k = 0; pipe_open && k < 10; k++) {
        struct pollfd p = {.fd = errpipe[0], .events = POLLIN};
        if (poll(&p, 1, 0) <= 0) break;
        char buf[4096];
        ssize_t n = read(errpipe[0], buf, sizeof buf);
        if (n <= 0) break;
        ssize_t wr = write(2, buf, (size_t)n);
        (void)wr;
        scan_oom(&scan, buf, (size_t)n);
    }
    close(errpipe[0]);
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    *oom = code != 0 && (scan.seen || (o->oom_exit_code > 0 && code == o->oom_exit_code));
    return code;
}

static void finish(const run_opts_t *o, long long id, int code, bool oom)
{
    char path[80];
    snprintf(path, sizeof path, "/v1/jobs/%lld/finish", id);
    json_t *body = json_pack("{s:i,s:s}", "exit_status", code, "error", oom ? "out of memory" : "");
    long status;
    json_t *reply = NULL;
    int rc = call_patiently(o, "POST", path, body, &status, &reply);
    json_decref(body);
    /* 409: the daemon already ended it (cancelled, or it saw us die) */
    if (rc) say(o, "could not report the end of job %lld: %s", id, vram_last_error());
    json_decref(reply);
}

static int parse_u32(const char *opt, const char *text, uint32_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (errno || end == text || *end || v < 0 || v > (1LL << 30))
        return cli_usage_error("run", "%s: \"%s\" is not a count", opt, text);
    *out = (uint32_t)v;
    return 0;
}

int vram_cli_run(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"mem", required_argument, NULL, 'm'},
        {"gpus", required_argument, NULL, 'g'},
        {"devices", required_argument, NULL, 'd'},
        {"priority", required_argument, NULL, 'p'},
        {"timeout", required_argument, NULL, 't'},
        {"batch-size", required_argument, NULL, 'b'},
        {"min-batch-size", required_argument, NULL, 'B'},
        {"per-sample-mem", required_argument, NULL, 's'},
        {"retry-oom", required_argument, NULL, 'r'},
        {"oom-exit-code", required_argument, NULL, 'o'},
        {"name", required_argument, NULL, 'n'},
        {"quiet", no_argument, NULL, 'q'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    /* The estimator's flags (also --batch-size and --gpus) come out of the
     * options before "--"; COMMAND's own arguments are never touched. */
    int split = 1;
    while (split < argc && strcmp(argv[split], "--"))
        split++;
    char **opts = calloc((size_t)argc + 1, sizeof *opts);
    if (!opts) return cli_runtime_error("run", "out of memory");
    memcpy(opts, argv, (size_t)split * sizeof *opts);
    int nopts = split;
    cli_model_args_t ma;
    cli_model_args_init(&ma, "run");
    int mrc = cli_model_args_parse(&nopts, opts, &ma);
    if (mrc) {
        free(opts);
        return mrc;
    }
    for (int i = split; i < argc; i++)
        opts[nopts + i - split] = argv[i];
    argc = nopts + argc - split;
    opts[argc] = NULL;
    argv = opts;
    run_opts_t o = {.request = json_object()};
    if (ma.batch_given) o.batch = (uint32_t)ma.est.batch_size;
    if (ma.est.gpus > 1) json_object_set_new(o.request, "gpus", json_integer(ma.est.gpus));
    uint32_t gpus = 0, retries = 0, oomc = 0;
    const char *name = NULL;
    int rc = 0, c;
    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, "+:hqm:g:d:p:t:b:B:s:r:o:n:", longopts, NULL)) != -1) {
        switch (c) {
        case 'm':
            if (vram_parse_size(optarg, &o.mem) != 0 || o.mem == 0)
                rc = cli_usage_error("run", "--mem: \"%s\" is not a size like 20GiB", optarg);
            break;
        case 'g':
            rc = parse_u32("--gpus", optarg, &gpus);
            if (!rc) json_object_set_new(o.request, "gpus", json_integer(gpus));
            break;
        case 'd': {
            json_t *list = json_array();
            for (char *tok = strtok(optarg, ","); tok; tok = strtok(NULL, ",")) {
                uint32_t dev;
                if ((rc = parse_u32("--devices", tok, &dev))) break;
                json_array_append_new(list, json_integer(dev));
            }
            json_object_set_new(o.request, "devices", list);
            break;
        }
        case 'p': {
            char *end;
            long p = strtol(optarg, &end, 10);
            if (*end || end == optarg || p < -1000000 || p > 1000000)
                rc = cli_usage_error("run", "--priority: \"%s\" is not an integer", optarg);
            json_object_set_new(o.request, "priority", json_integer(p));
            break;
        }
        case 't': {
            double t;
            if (vram_parse_seconds(optarg, &t) != 0)
                rc = cli_usage_error("run", "--timeout: %s", vram_last_error());
            else
                json_object_set_new(o.request, "timeout_s", json_real(t));
            break;
        }
        case 'b':
            rc = parse_u32("--batch-size", optarg, &o.batch);
            break;
        case 'B':
            rc = parse_u32("--min-batch-size", optarg, &o.min_batch);
            break;
        case 's':
            if (vram_parse_size(optarg, &o.per_sample) != 0)
                rc = cli_usage_error("run", "--per-sample-mem: \"%s\" is not a size", optarg);
            break;
        case 'r':
            rc = parse_u32("--retry-oom", optarg, &retries);
            o.retry_oom = (int)retries;
            break;
        case 'o':
            rc = parse_u32("--oom-exit-code", optarg, &oomc);
            o.oom_exit_code = (int)oomc;
            break;
        case 'n':
            name = optarg;
            break;
        case 'q':
            o.quiet = true;
            break;
        case 'h':
            usage(stdout);
            json_decref(o.request);
            free(opts);
            return CLI_OK;
        case ':':
            rc = cli_usage_error("run", "option \"%s\" needs a value", argv[optind - 1]);
            break;
        default:
            rc = cli_usage_error("run", "unknown option \"%s\"", argv[optind - 1]);
            break;
        }
        if (rc) {
            json_decref(o.request);
            free(opts);
            return rc;
        }
    }
    if (optind < argc && !strcmp(argv[optind], "--")) optind++;
    if (optind >= argc) {
        json_decref(o.request);
        free(opts);
        return cli_usage_error("run",
                               "COMMAND is missing: vram run --mem 10GiB -- python train.py");
    }
    if (ma.has_model) {
        uint64_t per_sample = 0;
        if (o.mem) {
            json_decref(o.request);
            free(opts);
            return cli_usage_error("run", "give --mem or a model (--model ...), not both");
        }
        if ((rc = estimate_memory(&ma, &o.mem, &per_sample))) {
            json_decref(o.request);
            free(opts);
            return rc;
        }
        if (!o.per_sample) o.per_sample = per_sample;
        if (!o.batch) o.batch = (uint32_t)ma.est.batch_size;
        char size[32];
        vram_format_size(o.mem, size, sizeof size);
        if (!o.quiet)
            fprintf(stderr, "vram run: estimated %s per GPU at batch %u\n", size, o.batch);
    }
    if (!o.mem) {
        json_decref(o.request);
        free(opts);
        return cli_usage_error("run", "how much memory? give --mem SIZE (per GPU) or a model "
                                      "(--model NAME, see vram estimate)");
    }
    if (o.min_batch && !o.batch) {
        json_decref(o.request);
        free(opts);
        return cli_usage_error("run", "--min-batch-size needs --batch-size");
    }
    if (o.min_batch > o.batch) {
        json_decref(o.request);
        free(opts);
        return cli_usage_error("run", "--min-batch-size %u is larger than --batch-size %u",
                               o.min_batch, o.batch);
    }
    o.command = argv + optind;
    char cmdline[512] = "";
    size_t at = 0;
    for (int i = optind; i < argc && at < sizeof cmdline; i++)
        at +=
            (size_t)snprintf(cmdline + at, sizeof cmdline - at, i > optind ? " %s" : "%s", argv[i]);
    char short_name[64];
    const char *name_src = name ? name : cmdline; /* cut to the API's 63 characters */
    size_t name_len = strnlen(name_src, sizeof short_name - 1);
    memcpy(short_name, name_src, name_len);
    short_name[name_len] = 0;
    json_object_set_new(o.request, "name", json_string(short_name));
    json_object_set_new(o.request, "command", json_string(cmdline));
    json_object_set_new(o.request, "mem_bytes", json_integer((json_int_t)o.mem));
    json_object_set_new(o.request, "pid", json_integer(getpid()));

    struct sigaction sa = {.sa_handler = on_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);

    /* With a degradable batch the daemon may grant less; retries halve it. */
    uint32_t batch = o.batch,
             min_batch = o.per_sample ? (o.min_batch ? o.min_batch : o.batch) : o.batch;
    int code = CLI_RUNTIME;
    for (int attempt = 0;; attempt++) {
        json_t *job = NULL;
        if ((rc = submit(&o, batch, min_batch < batch ? min_batch : batch, &job))) {
            code = rc;
            break;
        }
        if ((rc = wait_for_place(&o, &job))) {
            json_decref(job);
            code = rc;
            break;
        }
        bool oom = false;
        long long id = int_of(job, "id");
        long long granted = int_of(job, "granted_batch_size");
        code = run_child(&o, job, o.batch, &oom);
        json_decref(job);
        finish(&o, id, code, oom);
        if (!oom || attempt >= o.retry_oom || got_signal) {
            if (oom) say(&o, "COMMAND ran out of memory (exit status %d)", code);
            break;
        }
        uint32_t have = granted ? (uint32_t)granted : batch;
        if (have <= 1) {
            say(&o, "COMMAND ran out of memory with batch %u; cannot halve it further", have);
            break;
        }
        batch = have / 2;
        min_batch = batch;
        say(&o, "out of memory: retrying with batch %u x %u accumulation steps (retry %d of %d)",
            batch, (o.batch + batch - 1) / batch, attempt + 1, o.retry_oom);
    }
    json_decref(o.request);
    free(opts);
    return code;
}
