/* vram info: the devices and their memory, as a table or JSON
 * (schema: docs/info-json.md). */
#include "cli.h"
#include "vram_int.h"
#include "cli/daemon_client.h"
#include "cli/proc_text.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *query_field_names(void);

static void usage(FILE *out)
{
    fprintf(out,
            "usage: vram info [--json] [-i|--id N] [--watch SECONDS]\n"
            "       vram info --query FIELD,... [--format csv[,noheader][,nounits]] [-i N]\n\n"
            "Lists the devices of the selected backend (VRAM_BACKEND, default auto) with\n"
            "their memory, compute capability, utilization, temperature, power, health\n"
            "and the processes using them (user and command line). When vramd answers,\n"
            "also what it reserved on each device and what is free for admission.\n\n"
            "  --json            machine-readable output (docs/info-json.md)\n"
            "  -i, --id N        only device N\n"
            "  --watch SECONDS   redraw every SECONDS until interrupted\n"
            "  --query FIELDS    one CSV line per device, like nvidia-smi --query-gpu;\n"
            "                    fields: %s\n"
            "  --format csv[,noheader][,nounits]\n"
            "  -h, --help        this help\n\n"
            "Exit status: 0 ok, 1 runtime error, 2 usage error.\n",
            query_field_names());
}

/* A device index: a non-negative decimal number. */
static bool parse_index(const char *text, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (errno || end == text || *end || v < 0 || v > 1000000) return false;
    *out = (int)v;
    return true;
}

/* The processes of one device; NULL with *why set when they cannot be listed. */
/* ---- vramd's view (reserved, free for admission) --------------------- */

/* vramd's /v1/status device entry for index, or NULL when vramd does not
 * answer (then info shows what the driver says, nothing more). */
static json_t *vramd_device(json_t *status, int index)
{
    return status ? json_array_get(json_object_get(status, "devices"), (size_t)index) : NULL;
}

static json_t *vramd_status(int device_count)
{
    long code = 0;
    json_t *reply = NULL;
    if (cli_daemon_call("GET", "/v1/status", NULL, &code, &reply) != 0 || code != 200 ||
        (int)json_array_size(json_object_get(reply, "devices")) != device_count) {
        json_decref(reply);
        vram_clear_error();
        return NULL;
    }
    return reply;
}

static uint64_t vramd_bytes(json_t *dev, const char *key)
{
    json_t *v = json_object_get(dev, key);
    return json_is_integer(v) ? (uint64_t)json_integer_value(v) : VRAM_UNKNOWN_U64;
}

/* ---- --query: nvidia-smi --query-gpu style CSV ----------------------- */

/* X(name, unit): the fields of --query, in the order of query_value's switch. */
#define QUERY_FIELDS(X)                                                                            \
    X("index", "")                                                                                 \
    X("name", "")                                                                                  \
    X("uuid", "")                                                                                  \
    X("backend", "")                                                                               \
    X("memory.total", "MiB")                                                                       \
    X("memory.used", "MiB")                                                                        \
    X("memory.free", "MiB")                                                                        \
    X("memory.reserved", "MiB")                                                                    \
    X("memory.free_for_admission", "MiB")                                                          \
    X("utilization.gpu", "%")                                                                      \
    X("temperature.gpu", "")                                                                       \
    X("power.draw", "W")                                                                           \
    X("compute_cap", "")                                                                           \
    X("health", "")

static const struct {
    const char *name;
    const char *unit;
} qfields[] = {
#define QROW_(n, u) {n, u},
    QUERY_FIELDS(QROW_)
#undef QROW_
};
enum { NQFIELDS = sizeof qfields / sizeof qfields[0] };

static const char *query_field_names(void)
{
    static char names[512];
    if (!names[0])
        for (int i = 0, at = 0; i < NQFIELDS; i++)
            at +=
                snprintf(names + at, sizeof names - (size_t)at, i ? ",%s" : "%s", qfields[i].name);
    return names;
}

typedef struct {
    int field[32];
    int nfields;
    bool header, units;
} query_t;

static int parse_query(const char *list, const char *format, query_t *q)
{
    memset(q, 0, sizeof *q);
    q->header = q->units = true;
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", list);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        while (*tok == ' ')
            tok++;
        int found = -1;
        for (int i = 0; i < NQFIELDS; i++)
            if (!strcmp(tok, qfields[i].name)) found = i;
        if (found < 0)
            return cli_usage_error("info", "--query: unknown field \"%s\" (fields: %s)", tok,
                                   query_field_names());
        if (q->nfields == 32) return cli_usage_error("info", "--query: at most 32 fields");
        q->field[q->nfields++] = found;
    }
    if (!q->nfields) return cli_usage_error("info", "--query: no fields given");
    snprintf(buf, sizeof buf, "%s", format ? format : "csv");
    bool csv = false;
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        if (!strcmp(tok, "csv"))
            csv = true;
        else if (!strcmp(tok, "noheader"))
            q->header = false;
        else if (!strcmp(tok, "nounits"))
            q->units = false;
        else
            return cli_usage_error("info",
                                   "--format: unknown option \"%s\" (csv, noheader, nounits)", tok);
    }
    if (!csv)
        return cli_usage_error("info",
                               "--format: only csv is supported (csv[,noheader][,nounits])");
    return 0;
}

static void query_value(const query_t *q, int f, const vram_device_info_t *d, json_t *vd)
{
    const char *u = q->units ? qfields[f].unit : "";
    const char *sp = q->units && *u ? " " : "";
    uint64_t bytes = VRAM_UNKNOWN_U64;
    switch (f) {
    case 0:
        printf("%d", d->index);
        return;
    case 1:
        printf("%s", d->name);
        return;
    case 2:
        printf("%s", d->uuid);
        return;
    case 3:
        printf("%s", d->backend);
        return;
    case 4:
        bytes = d->total_bytes;
        break;
    case 5:
        bytes = d->used_bytes;
        break;
    case 6:
        bytes = d->free_bytes;
        break;
    case 7:
        bytes = vd ? vramd_bytes(vd, "reserved_bytes") : VRAM_UNKNOWN_U64;
        break;
    case 8:
        bytes = vd ? vramd_bytes(vd, "free_for_admission_bytes") : VRAM_UNKNOWN_U64;
        break;
    case 9:
        if (d->utilization_pct < 0) break;
        printf("%d%s%s", d->utilization_pct, sp, u);
        return;
    case 10:
        if (d->temperature_c < 0) break;
        printf("%d", d->temperature_c);
        return;
    case 11:
        if (d->power_w < 0) break;
        printf("%.2f%s%s", d->power_w, sp, u);
        return;
    case 12:
        if (d->cc_major < 0) break;
        printf("%d.%d", d->cc_major, d->cc_minor);
        return;
    case 13:
        printf("%s", vram_health_name(d->health));
        return;
    }
    if (bytes != VRAM_UNKNOWN_U64) /* only the memory fields get here with bytes */
        printf("%llu%s%s", (unsigned long long)(bytes >> 20), sp, u);
    else
        printf("[N/A]");
}

static void print_query(const query_t *q, const vram_device_info_t *devs, int n, json_t *status)
{
    if (q->header) {
        for (int k = 0; k < q->nfields; k++) {
            const char *u = qfields[q->field[k]].unit;
            printf("%s%s", k ? ", " : "", qfields[q->field[k]].name);
            if (q->units && *u) printf(" [%s]", u);
        }
        printf("\n");
    }
    for (int i = 0; i < n; i++) {
        for (int k = 0; k < q->nfields; k++) {
            if (k) printf(", ");
            query_value(q, q->field[k], &devs[i], vramd_device(status, devs[i].index));
        }
        printf("\n");
    }
}

/* ---- JSON ---------------------------------------------------------- */

static void add_vramd_bytes(json_t *o, json_t *vd, const char *key)
{
    uint64_t v = vramd_bytes(vd, key);
    json_object_set_new(o, key, v == VRAM_UNKNOWN_U64 ? json_null() : json_integer((json_int_t)v));
}

/* The library's device object plus vramd's view when it answered. */
static json_t *device_json(vram_ctx_t *ctx, const vram_device_info_t *d, json_t *vd)
{
    json_t *o = vram_device_to_json(ctx, d);
    if (o && vd) {
        add_vramd_bytes(o, vd, "reserved_bytes");
        add_vramd_bytes(o, vd, "free_for_admission_bytes");
    }
    return o;
}

/* ---- table --------------------------------------------------------- */

static void gib_cell(char *buf, size_t len, uint64_t v)
{
    if (v == VRAM_UNKNOWN_U64)
        snprintf(buf, len, "-");
    else
        snprintf(buf, len, "%.2f", vram_gib(v));
}

static void int_cell(char *buf, size_t len, int v, const char *unit)
{
    if (v == VRAM_UNKNOWN_INT)
        snprintf(buf, len, "-");
    else
        snprintf(buf, len, "%d%s", v, unit);
}

static void print_device_row(const vram_device_info_t *d, int name_width, json_t *vd)
{
    char total[32], used[32], freeb[32], cc[24], sms[16], util[16], temp[16], power[24];
    char resv[32] = "", adm[32] = "";
    if (vd) {
        gib_cell(resv, sizeof resv, vramd_bytes(vd, "reserved_bytes"));
        gib_cell(adm, sizeof adm, vramd_bytes(vd, "free_for_admission_bytes"));
    }
    gib_cell(total, sizeof total, d->total_bytes);
    gib_cell(used, sizeof used, d->used_bytes);
    gib_cell(freeb, sizeof freeb, d->free_bytes);
    if (d->cc_major == VRAM_UNKNOWN_INT)
        snprintf(cc, sizeof cc, "-");
    else
        snprintf(cc, sizeof cc, "%d.%d", d->cc_major, d->cc_minor);
    int_cell(sms, sizeof sms, d->multiprocessors, "");
    int_cell(util, sizeof util, d->utilization_pct, "%");
    int_cell(temp, sizeof temp, d->temperature_c, "C");
    if (d->power_w < 0)
        snprintf(power, sizeof power, "-");
    else
        snprintf(power, sizeof power, "%.0fW", d->power_w);
    printf("%3d  %-*s  %9s  %9s  %9s  ", d->index, name_width, *d->name ? d->name : "-", total,
           used, freeb);
    if (vd) printf("%9s  %9s  ", resv, adm);
    printf("%4s  %4s  %4s  %4s  %6s  %s\n", cc, sms, util, temp, power,
           vram_health_name(d->health));
}

static void print_processes(vram_ctx_t *ctx, const vram_device_info_t *devs, int n)
{
    printf("\nProcesses:\n%3s  %8s  %-10s  %-16s  %12s  %s\n", "GPU", "PID", "USER", "NAME", "USED",
           "COMMAND");
    int rows = 0;
    for (int i = 0; i < n; i++) {
        if (devs[i].health == VRAM_HEALTH_ERROR) continue;
        size_t count;
        vram_process_info_t *procs = vram_device_process_list(ctx, devs[i].index, &count);
        if (!procs) {
            printf("%3d  (not available: %s)\n", devs[i].index, vram_last_error());
            rows++;
            continue;
        }
        for (size_t k = 0; k < count; k++) {
            char used[32], user[64], cmd[256];
            vram_format_size(procs[k].used_bytes, used, sizeof used);
            vram_proc_user(procs[k].pid, user, sizeof user);
            vram_proc_command(procs[k].pid, cmd, sizeof cmd);
            printf("%3d  %8d  %-10s  %-16s  %12s  %s\n", devs[i].index, (int)procs[k].pid,
                   *user ? user : "-", *procs[k].name ? procs[k].name : "-", used,
                   *cmd ? cmd : "-");
            rows++;
        }
        free(procs);
    }
    if (!rows) printf("  (none)\n");
}

static void print_table(vram_ctx_t *ctx, const vram_device_info_t *devs, int n, json_t *status)
{
    int count = vram_ctx_device_count(ctx);
    printf("%d device%s (%s backend)%s\n\n", count, count == 1 ? "" : "s", vram_ctx_backend(ctx),
           status ? "; vramd: reserved and free for admission" : "");
    int name_width = 4;
    for (int i = 0; i < n; i++) {
        int len = (int)strlen(devs[i].name);
        if (len > name_width) name_width = len;
    }
    printf("%3s  %-*s  %9s  %9s  %9s  ", "ID", name_width, "NAME", "TOTAL GiB", "USED GiB",
           "FREE GiB");
    if (status) printf("%9s  %9s  ", "RESV GiB", "ADM GiB");
    printf("%4s  %4s  %4s  %4s  %6s  %s\n", "CC", "SMs", "UTIL", "TEMP", "POWER", "HEALTH");
    for (int i = 0; i < n; i++)
        print_device_row(&devs[i], name_width, vramd_device(status, devs[i].index));
    for (int i = 0; i < n; i++)
        if (*devs[i].error) printf("device %d: %s\n", devs[i].index, devs[i].error);
    print_processes(ctx, devs, n);
}

/* ---- command ------------------------------------------------------- */

/* One report: the devices now, as a table, JSON or query lines. */
static int report(vram_ctx_t *ctx, int first, int n, bool json, const query_t *query)
{
    int count = vram_ctx_device_count(ctx);
    vram_device_info_t *devs = calloc((size_t)n, sizeof *devs);
    if (!devs) return cli_runtime_error("info", "out of memory");
    for (int i = 0; i < n; i++) {
        if (vram_device_info(ctx, first + i, &devs[i]) != 0) {
            int rc = cli_runtime_error("info", "device %d: %s", first + i, vram_last_error());
            free(devs);
            return rc;
        }
    }
    json_t *status = vramd_status(count);
    if (query) {
        print_query(query, devs, n, status);
    } else if (json) {
        json_t *root = json_object();
        json_object_set_new(root, "backend", json_string(vram_ctx_backend(ctx)));
        json_object_set_new(root, "reason", json_string(vram_ctx_reason(ctx)));
        json_object_set_new(root, "device_count", json_integer(count));
        json_object_set_new(root, "vramd", json_boolean(status != NULL));
        json_t *list = json_array();
        for (int i = 0; i < n; i++)
            json_array_append_new(list,
                                  device_json(ctx, &devs[i], vramd_device(status, devs[i].index)));
        json_object_set_new(root, "devices", list);
        cli_print_json(root);
    } else {
        print_table(ctx, devs, n, status);
    }
    json_decref(status);
    free(devs);
    fflush(stdout);
    return CLI_OK;
}

static volatile sig_atomic_t interrupted;
static void on_interrupt(int sig)
{
    (void)sig;
    interrupted = 1;
}

int vram_cli_info(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"json", no_argument, NULL, 'j'},
        {"id", required_argument, NULL, 'i'},
        {"watch", required_argument, NULL, 'w'},
        {"query", required_argument, NULL, 'q'},
        {"format", required_argument, NULL, 'f'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    bool json = false;
    int only = -1;
    const char *only_text = NULL, *query_text = NULL, *format = NULL;
    double every = 0;
    opterr = 0;
    optind = 1;
    int c;
    while ((c = getopt_long(argc, argv, ":hi:", longopts, NULL)) != -1) {
        switch (c) {
        case 'j':
            json = true;
            break;
        case 'i':
            only_text = optarg;
            if (!parse_index(optarg, &only))
                return cli_usage_error("info", "bad device id \"%s\" (a number from 0)", optarg);
            break;
        case 'w':
            if (vram_parse_seconds(optarg, &every) != 0 || every < 0.1 || every > 86400)
                return cli_usage_error("info", "--watch: \"%s\" is not 0.1 to 86400 seconds",
                                       optarg);
            break;
        case 'q':
            query_text = optarg;
            break;
        case 'f':
            format = optarg;
            break;
        case 'h':
            usage(stdout);
            return CLI_OK;
        default:
            return cli_getopt_error("info", c, argv);
        }
    }
    if (optind < argc) return cli_usage_error("info", "unexpected argument \"%s\"", argv[optind]);
    if (format && !query_text) return cli_usage_error("info", "--format goes with --query");
    if (query_text && json) return cli_usage_error("info", "give --query or --json, not both");
    query_t query;
    int rc = query_text ? parse_query(query_text, format, &query) : 0;
    if (rc) return rc;

    vram_ctx_t *ctx;
    rc = cli_open_ctx("info", json || query_text, &ctx);
    if (rc) return rc;
    int count = vram_ctx_device_count(ctx);
    if (only >= count) {
        vram_ctx_close(ctx);
        return cli_usage_error("info", "no device %s (%d device%s: 0-%d)", only_text, count,
                               count == 1 ? "" : "s", count - 1);
    }
    int first = only >= 0 ? only : 0, n = only >= 0 ? 1 : count;
    if (every > 0) {
        /* Until Ctrl-C: a plain table redrawn in place (a CSV query appends
         * lines, like nvidia-smi -l). */
        signal(SIGINT, on_interrupt);
        signal(SIGTERM, on_interrupt);
        while (!interrupted && rc == CLI_OK) {
            if (!query_text && !json) printf("\033[H\033[2J");
            rc = report(ctx, first, n, json, query_text ? &query : NULL);
            struct timespec ts = {(time_t)every, (long)((every - floor(every)) * 1e9)};
            while (!interrupted && nanosleep(&ts, &ts) != 0) {
            }
        }
    } else {
        rc = report(ctx, first, n, json, query_text ? &query : NULL);
    }
    vram_ctx_close(ctx);
    return rc;
}
