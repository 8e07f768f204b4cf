/* vram sim: hold simulated GPU memory (for demos and tests), show or clear
 * the shared sim state. Always uses the sim backend, whatever VRAM_BACKEND
 * says: these commands are about the simulation itself. */
#include "cli.h"
#include "device/sim.h"

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
                 "       vram sim status\n"
                 "       vram sim free-all\n\n"
                 "Simulated GPUs come from VRAM_SIM (e.g. 2xH100-80GB); their allocations are\n"
                 "shared by every process using the same state file (VRAM_SIM_STATE).\n\n"
                 "  alloc      hold SIZE (e.g. 10GiB) on device N (default 0) for T (e.g. 30, 5m;\n"
                 "             default: until SIGINT/SIGTERM), then free it and exit 0\n"
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
    const char *mem_text = NULL, *device_text = "0";
    double seconds = -1;
    uint64_t bytes = 0;
    int device = 0;
    opterr = 0;
    optind = 1;
    int c;
    while ((c = getopt_long(argc, argv, ":hm:d:s:", longopts, NULL)) != -1) {
        switch (c) {
        case 'm':
            mem_text = optarg;
            if (vram_parse_size(optarg, &bytes) != 0)
                return cli_usage_error("sim alloc", "%s", vram_last_error());
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

static int sim_status(void)
{
    char path[PATH_MAX];
    vram_ctx_t *ctx;
    int rc = open_sim("sim status", &ctx);
    if (rc) return rc;
    if (vram_sim_state_path(path, sizeof path) != 0) snprintf(path, sizeof path, "?");
    printf("state file: %s\n", path);
    for (int i = 0; i < vram_ctx_device_count(ctx); i++) {
        vram_device_info_t d;
        if (vram_device_info(ctx, i, &d) != 0) {
            rc = cli_runtime_error("sim status", "%s", vram_last_error());
            break;
        }
        char used[32], total[32];
        printf("device %d  %-14s  %s of %s used  %s\n", i, d.name,
               vram_format_size(d.used_bytes, used, sizeof used),
               vram_format_size(d.total_bytes, total, sizeof total), vram_health_name(d.health));
        vram_process_info_t procs[64];
        size_t n = 0;
        if (d.health == VRAM_HEALTH_ERROR ||
            vram_device_processes(ctx, i, procs, sizeof procs / sizeof procs[0], &n) != 0)
            continue;
        for (size_t k = 0; k < n && k < sizeof procs / sizeof procs[0]; k++)
            printf("    pid %-8d %-16s %s\n", (int)procs[k].pid,
                   *procs[k].name ? procs[k].name : "-",
                   vram_format_size(procs[k].used_bytes, used, sizeof used));
        if (n > sizeof procs / sizeof procs[0])
            printf("    ... and %zu more processes\n", n - sizeof procs / sizeof procs[0]);
    }
    vram_ctx_close(ctx);
    return rc;
}

static int sim_free_all(void)
{
    size_t freed = 0;
    int rc = vram_sim_free_all(&freed);
    if (rc == VRAM_EINVAL) return cli_usage_error("sim free-all", "%s", vram_last_error());
    if (rc) return cli_runtime_error("sim free-all", "%s", vram_last_error());
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
    if (argc > 2) return cli_usage_error("sim", "unexpected argument \"%s\"", argv[2]);
    if (!strcmp(sub, "status")) return sim_status();
    if (!strcmp(sub, "free-all")) return sim_free_all();
    return cli_usage_error("sim", "unknown subcommand \"%s\" (alloc, status or free-all)", sub);
}
