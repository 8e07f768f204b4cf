/* vram sim: hold simulated GPU memory (for demos and tests), show or clear
 * the shared sim state. Always uses the sim backend, whatever VRAM_BACKEND
 * says: these commands are about the simulation itself. */
#include "cli.h"
#include "vram_int.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void usage(FILE *out)
{
    fprintf(out, "usage: vram sim alloc --mem SIZE [--device N] [--seconds T]\n"
                 "       vram sim status [--json]\n"
                 "       vram sim free-all [--json]\n\n"
                 "Simulated GPUs come from VRAM_SIM (e.g. 2xH100-80GB); their allocations are\n"
                 "shared by every process using the same state file (VRAM_SIM_STATE).\n\n"
                 "  alloc      hold SIZE (e.g. 10GiB) on device N for T (e.g. 30, 5m; default:\n"
                 "             until SIGINT/SIGTERM), then free it and exit 0; N defaults to the\n"
                 "             first of CUDA_VISIBLE_DEVICES (as set by vram run), else 0\n"
                 "  status     the state file, each device's use and the processes holding memory\n"
                 "  free-all   drop every allocation in the state file (also of live processes)\n");
}

static int open_sim(const char *cmd, vram_ctx_t **ctx)
{
    int rc = vram_ctx_open_backend("sim", ctx);
    if (rc == VRAM_EINVAL) return cli_usage_error(cmd, "%s", vram_last_error());
    if (rc) return cli_runtime_error(cmd, "%s", vram_last_error());
    return 0;
}

static bool parse_index(const char *text, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (errno || end == text || *end || v < 0 || v > INT_MAX) return false;
    *out = (int)v;
    return true;
}

/* The GPU a job was given: like CUDA, a job started by `vram run` with
 * CUDA_VISIBLE_DEVICES=1 lands on device 1 by default. */
static const char *default_device(void)
{
    static char first[16];
    const char *visible = getenv("CUDA_VISIBLE_DEVICES");
    int index;
    snprintf(first, sizeof first, "%.*s", (int)strcspn(visible ? visible : "", ","),
             visible ? visible : "");
    return parse_index(first, &index) ? first : "0";
}

/* Waits for SIGINT/SIGTERM/SIGHUP (blocked by the caller) or `seconds`
 * (negative: forever). */
static void wait_for_signal(double seconds)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGHUP);
    if (seconds < 0) {
        int sig;
        sigwait(&set, &sig);
        return;
    }
    uint64_t deadline = vram_now_ns() + (uint64_t)(seconds * 1e9);
    for (;;) {
        uint64_t now = vram_now_ns();
        if (now >= deadline) return;
        uint64_t left = deadline - now;
        struct timespec ts = {.tv_sec = (time_t)(left / 1000000000u),
                              .tv_nsec = (long)(left % 1000000000u)};
        if (sigtimedwait(&set, NULL, &ts) >= 0) return;
        if (errno != EINTR && errno != EAGAIN) return;
    }
}

static int sim_alloc(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"mem", required_argument, NULL, 'm'},
        {"device", required_argument, NULL, 'd'},
        {"seconds", required_argument, NULL, 's'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *mem_text = NULL, *device_text = default_device();
    double seconds = -1;
    uint64_t bytes = 0;
    int device = 0;
    if (!parse_index(device_text, &device)) device = 0;
    opterr = 0;
    optind = 1;
    int c;
    while ((c = getopt_long(argc, argv, ":hm:d:s:", longopts, NULL)) != -1) {
        switch (c) {
        case 'm':
            mem_text = optarg;
            if (cli_parse_size("sim alloc", "--mem", optarg, &bytes) != 0) return CLI_USAGE;
            if (bytes == 0) return cli_usage_error("sim alloc", "--mem must be more than 0");
            break;
        case 'd':
            device_text = optarg;
            if (!parse_index(optarg, &device))
                return cli_usage_error("sim alloc", "bad device id \"%s\" (a number from 0)",
                                       optarg);
            break;
        case 's':
            if (vram_parse_seconds(optarg, &seconds) != 0)
                return cli_usage_error("sim alloc", "%s", vram_last_error());
            break;
        case 'h':
            usage(stdout);
            return CLI_OK;
        case ':':
            return cli_usage_error("sim alloc", "option \"%s\" needs a value", argv[optind - 1]);
        default:
            if (optopt) return cli_usage_error("sim alloc", "unknown option \"-%c\"", optopt);
            return cli_usage_error("sim alloc", "unknown option \"%s\"", argv[optind - 1]);
        }
    }
    if (optind < argc)
        return cli_usage_error("sim alloc", "unexpected argument \"%s\"", argv[optind]);
    if (!mem_text) return cli_usage_error("sim alloc", "--mem SIZE is required (e.g. 10GiB)");

    vram_ctx_t *ctx;
    int rc = open_sim("sim alloc", &ctx);
    if (rc) return rc;
    int count = vram_ctx_device_count(ctx);
    if (device >= count) {
        vram_ctx_close(ctx);
        return cli_usage_error("sim alloc", "no device %s (%d simulated GPU%s: 0-%d)", device_text,
                               count, count == 1 ? "" : "s", count - 1);
    }
    /* Block the stop signals first: one that arrives while allocating must
     * still lead to a clean free. */
    sigset_t set, old;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGHUP);
    sigprocmask(SIG_BLOCK, &set, &old);
    void *ptr = NULL;
    if (vram_device_alloc(ctx, device, (size_t)bytes, &ptr) != 0) {
        rc = cli_runtime_error("sim alloc", "%s", vram_last_error());
        vram_ctx_close(ctx);
        return rc;
    }
    vram_device_info_t info;
    char size[32];
    vram_format_size(bytes, size, sizeof size);
    const char *name = vram_device_info(ctx, device, &info) == 0 ? info.name : "?";
    if (seconds < 0)
        printf("holding %s on sim device %d (%s) as pid %d until SIGINT/SIGTERM\n", size, device,
               name, (int)getpid());
    else
        printf("holding %s on sim device %d (%s) as pid %d for %g s\n", size, device, name,
               (int)getpid(), seconds);
    fflush(stdout);
    wait_for_signal(seconds);
    rc = vram_device_free(ctx, device, ptr);
    vram_ctx_close(ctx);
    sigprocmask(SIG_SETMASK, &old, NULL);
    if (rc) return cli_runtime_error("sim alloc", "%s", vram_last_error());
    printf("released %s on sim device %d\n", size, device);
    return CLI_OK;
}

/* The state of every simulated device: {state_file, devices[{index, name,
 * total_bytes, used_bytes, free_bytes, health, processes[{pid, name,
 * used_bytes}]}]}. */
static json_t *status_json(vram_ctx_t *ctx, const char *path)
{
    json_t *root = json_object(), *devices = json_array();
    json_object_set_new(root, "state_file", json_string(path));
    for (int i = 0; i < vram_ctx_device_count(ctx); i++) {
        vram_device_info_t d;
        if (vram_device_info(ctx, i, &d) != 0) {
            json_decref(root);
            json_decref(devices);
            return NULL;
        }
        json_t *dev = json_object(), *procs = json_null();
        json_object_set_new(dev, "index", json_integer(i));
        json_object_set_new(dev, "name", json_string(d.name));
        bool known = d.used_bytes != VRAM_UNKNOWN_U64 && d.total_bytes != VRAM_UNKNOWN_U64;
        json_object_set_new(dev, "total_bytes",
                            known ? json_integer((json_int_t)d.total_bytes) : json_null());
        json_object_set_new(dev, "used_bytes",
                            known ? json_integer((json_int_t)d.used_bytes) : json_null());
        json_object_set_new(dev, "free_bytes",
                            known ? json_integer((json_int_t)d.free_bytes) : json_null());
        json_object_set_new(dev, "health", json_string(vram_health_name(d.health)));
        size_t n = 0;
        vram_process_info_t *list = NULL;
        if (d.health != VRAM_HEALTH_ERROR && vram_device_processes(ctx, i, NULL, 0, &n) == 0 &&
            (list = calloc(n + 1, sizeof *list)) &&
            vram_device_processes(ctx, i, list, n + 1, &n) == 0) {
            procs = json_array();
            for (size_t k = 0; k < n; k++) {
                json_t *p = json_object();
                json_object_set_new(p, "pid", json_integer(list[k].pid));
                json_object_set_new(p, "name",
                                    *list[k].name ? json_string(list[k].name) : json_null());
                json_object_set_new(p, "used_bytes", json_integer((json_int_t)list[k].used_bytes));
                json_array_append_new(procs, p);
            }
        }
        free(list);
        json_object_set_new(dev, "processes", procs);
        json_array_append_new(devices, dev);
    }
    json_object_set_new(root, "devices", devices);
    return root;
}

static void print_status(json_t *root)
{
    printf("state file: %s\n", json_string_value(json_object_get(root, "state_file")));
    size_t i, k;
    json_t *dev, *p;
    json_array_foreach(json_object_get(root, "devices"), i, dev)
    {
        char used[32], total[32];
        json_t *used_json = json_object_get(dev, "used_bytes");
        printf("device %zu  %-14s  %s of %s used  %s\n", i,
               json_string_value(json_object_get(dev, "name")),
               json_is_integer(used_json)
                   ? vram_format_size((uint64_t)json_integer_value(used_json), used, sizeof used)
                   : "unknown",
               json_is_integer(used_json)
                   ? vram_format_size(
                         (uint64_t)json_integer_value(json_object_get(dev, "total_bytes")), total,
                         sizeof total)
                   : "unknown",
               json_string_value(json_object_get(dev, "health")));
        json_array_foreach(json_object_get(dev, "processes"), k, p)
        {
            const char *name = json_string_value(json_object_get(p, "name"));
            printf("    pid %-8d %-16s %s\n", (int)json_integer_value(json_object_get(p, "pid")),
                   name ? name : "-",
                   vram_format_size((uint64_t)json_integer_value(json_object_get(p, "used_bytes")),
                                    used, sizeof used));
        }
    }
}

static int sim_status(bool json)
{
    char path[PATH_MAX];
    vram_ctx_t *ctx;
    int rc = open_sim("sim status", &ctx);
    if (rc) return rc;
    if (vram_sim_state_path(path, sizeof path) != 0) snprintf(path, sizeof path, "?");
    json_t *root = status_json(ctx, path);
    if (!root) rc = cli_runtime_error("sim status", "%s", vram_last_error());
    vram_ctx_close(ctx);
    if (!root) return rc;
    if (json) {
        cli_print_json(root);
    } else {
        print_status(root);
        json_decref(root);
    }
    return CLI_OK;
}

static int sim_free_all(bool json)
{
    size_t freed = 0;
    int rc = vram_sim_free_all(&freed);
    if (rc == VRAM_EINVAL) return cli_usage_error("sim free-all", "%s", vram_last_error());
    if (rc) return cli_runtime_error("sim free-all", "%s", vram_last_error());
    if (json)
        cli_print_json(json_pack("{s:I}", "dropped", (json_int_t)freed));
    else
        printf("dropped %zu allocation%s\n", freed, freed == 1 ? "" : "s");
    return CLI_OK;
}

int vram_cli_sim(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return CLI_USAGE;
    }
    const char *sub = argv[1];
    if (!strcmp(sub, "-h") || !strcmp(sub, "--help") || !strcmp(sub, "help")) {
        usage(stdout);
        return CLI_OK;
    }
    if (!strcmp(sub, "alloc")) return sim_alloc(argc - 1, argv + 1);
    bool json = false;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--json"))
            json = true;
        else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return CLI_OK;
        } else
            return cli_usage_error("sim", "unexpected argument \"%s\"", argv[i]);
    }
    if (!strcmp(sub, "status")) return sim_status(json);
    if (!strcmp(sub, "free-all")) return sim_free_all(json);
    return cli_usage_error("sim", "unknown subcommand \"%s\" (alloc, status or free-all)", sub);
}
