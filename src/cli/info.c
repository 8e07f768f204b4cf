/* vram info: the devices and their memory, as a table or JSON
 * (schema: docs/info-json.md). */
#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *out)
{
    fprintf(out, "usage: vram info [--json] [-i|--id N]\n\n"
                 "Lists the devices of the selected backend (VRAM_BACKEND, default auto) with\n"
                 "their memory, compute capability, utilization, temperature, power, health\n"
                 "and the processes using them.\n\n"
                 "  --json       machine-readable output (docs/info-json.md)\n"
                 "  -i, --id N   only device N\n"
                 "  -h, --help   this help\n\n"
                 "Exit status: 0 ok, 1 runtime error, 2 usage error.\n");
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
static vram_process_info_t *list_processes(vram_ctx_t *ctx, int index, size_t *count, char *why,
                                           size_t why_len)
{
    size_t n = 0;
    vram_process_info_t *procs = NULL;
    for (int tries = 0; tries < 4; tries++) {
        size_t cap = n + 8;
        vram_process_info_t *bigger = realloc(procs, cap * sizeof *procs);
        if (!bigger) {
            snprintf(why, why_len, "out of memory");
            free(procs);
            return NULL;
        }
        procs = bigger;
        int rc = vram_device_processes(ctx, index, procs, cap, &n);
        if (rc) {
            snprintf(why, why_len, "%s", vram_last_error());
            free(procs);
            return NULL;
        }
        if (n <= cap) {
            *count = n;
            return procs;
        }
    }
    snprintf(why, why_len, "the process list kept growing");
    free(procs);
    return NULL;
}

/* ---- JSON ---------------------------------------------------------- */

static json_t *json_u64(uint64_t v)
{
    return v == VRAM_UNKNOWN_U64 ? json_null() : json_integer((json_int_t)v);
}

static json_t *json_small(int v)
{
    return v == VRAM_UNKNOWN_INT ? json_null() : json_integer(v);
}

static json_t *json_text(const char *s)
{
    return *s ? json_string(s) : json_null();
}

static json_t *device_json(vram_ctx_t *ctx, const vram_device_info_t *d)
{
    json_t *o = json_object();
    json_object_set_new(o, "index", json_integer(d->index));
    json_object_set_new(o, "name", json_text(d->name));
    json_object_set_new(o, "uuid", json_text(d->uuid));
    json_object_set_new(o, "backend", json_string(d->backend));
    json_object_set_new(o, "total_bytes", json_u64(d->total_bytes));
    json_object_set_new(o, "used_bytes", json_u64(d->used_bytes));
    json_object_set_new(o, "free_bytes", json_u64(d->free_bytes));
    if (d->cc_major == VRAM_UNKNOWN_INT || d->cc_minor == VRAM_UNKNOWN_INT) {
        json_object_set_new(o, "compute_capability", json_null());
    } else {
        char cc[24];
        snprintf(cc, sizeof cc, "%d.%d", d->cc_major, d->cc_minor);
        json_object_set_new(o, "compute_capability", json_string(cc));
    }
    json_object_set_new(o, "multiprocessors", json_small(d->multiprocessors));
    json_object_set_new(o, "utilization_pct", json_small(d->utilization_pct));
    json_object_set_new(o, "temperature_c", json_small(d->temperature_c));
    json_object_set_new(o, "power_w", d->power_w < 0 ? json_null() : json_real(d->power_w));
    json_object_set_new(o, "health", json_string(vram_health_name(d->health)));
    json_object_set_new(o, "error", json_text(d->error));

    json_t *list = json_null();
    if (d->health != VRAM_HEALTH_ERROR) {
        size_t n;
        char why[256];
        vram_process_info_t *procs = list_processes(ctx, d->index, &n, why, sizeof why);
        if (procs) {
            list = json_array();
            for (size_t i = 0; i < n; i++) {
                json_t *p = json_object();
                json_object_set_new(p, "pid", json_integer(procs[i].pid));
                json_object_set_new(p, "name", json_text(procs[i].name));
                json_object_set_new(p, "used_bytes", json_u64(procs[i].used_bytes));
                json_array_append_new(list, p);
            }
            free(procs);
        }
    }
    json_object_set_new(o, "processes", list);
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

static void print_device_row(const vram_device_info_t *d, int name_width)
{
    char total[32], used[32], freeb[32], cc[24], sms[16], util[16], temp[16], power[24];
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
    printf("%3d  %-*s  %9s  %9s  %9s  %4s  %4s  %4s  %4s  %6s  %s\n", d->index, name_width,
           *d->name ? d->name : "-", total, used, freeb, cc, sms, util, temp, power,
           vram_health_name(d->health));
}

static void print_processes(vram_ctx_t *ctx, const vram_device_info_t *devs, int n)
{
    printf("\nProcesses:\n%3s  %8s  %-16s  %12s\n", "GPU", "PID", "NAME", "USED");
    int rows = 0;
    for (int i = 0; i < n; i++) {
        if (devs[i].health == VRAM_HEALTH_ERROR) continue;
        size_t count;
        char why[256];
        vram_process_info_t *procs = list_processes(ctx, devs[i].index, &count, why, sizeof why);
        if (!procs) {
            printf("%3d  (not available: %s)\n", devs[i].index, why);
            rows++;
            continue;
        }
        for (size_t k = 0; k < count; k++) {
            char used[32];
            vram_format_size(procs[k].used_bytes, used, sizeof used);
            printf("%3d  %8d  %-16s  %12s\n", devs[i].index, (int)procs[k].pid,
                   *procs[k].name ? procs[k].name : "-", used);
            rows++;
        }
        free(procs);
    }
    if (!rows) printf("  (none)\n");
}

static void print_table(vram_ctx_t *ctx, const vram_device_info_t *devs, int n)
{
    int count = vram_ctx_device_count(ctx);
    printf("%d device%s (%s backend)\n\n", count, count == 1 ? "" : "s", vram_ctx_backend(ctx));
    int name_width = 4;
    for (int i = 0; i < n; i++) {
        int len = (int)strlen(devs[i].name);
        if (len > name_width) name_width = len;
    }
    printf("%3s  %-*s  %9s  %9s  %9s  %4s  %4s  %4s  %4s  %6s  %s\n", "ID", name_width, "NAME",
           "TOTAL GiB", "USED GiB", "FREE GiB", "CC", "SMs", "UTIL", "TEMP", "POWER", "HEALTH");
    for (int i = 0; i < n; i++)
        print_device_row(&devs[i], name_width);
    for (int i = 0; i < n; i++)
        if (*devs[i].error) printf("device %d: %s\n", devs[i].index, devs[i].error);
    print_processes(ctx, devs, n);
}

/* ---- command ------------------------------------------------------- */

int vram_cli_info(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"json", no_argument, NULL, 'j'},
        {"id", required_argument, NULL, 'i'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    bool json = false;
    int only = -1;
    const char *only_text = NULL;
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
        case 'h':
            usage(stdout);
            return CLI_OK;
        case ':':
            return cli_usage_error("info", "option \"%s\" needs a value", argv[optind - 1]);
        default:
            if (optopt) return cli_usage_error("info", "unknown option \"-%c\"", optopt);
            return cli_usage_error("info", "unknown option \"%s\"", argv[optind - 1]);
        }
    }
    if (optind < argc) return cli_usage_error("info", "unexpected argument \"%s\"", argv[optind]);

    vram_ctx_t *ctx;
    int rc = cli_open_ctx("info", json, &ctx);
    if (rc) return rc;
    int count = vram_ctx_device_count(ctx);
    if (only >= count) {
        vram_ctx_close(ctx);
        return cli_usage_error("info", "no device %s (%d device%s: 0-%d)", only_text, count,
                               count == 1 ? "" : "s", count - 1);
    }
    int first = only >= 0 ? only : 0, n = only >= 0 ? 1 : count;
    vram_device_info_t *devs = calloc((size_t)n, sizeof *devs);
    if (!devs) {
        vram_ctx_close(ctx);
        return cli_runtime_error("info", "out of memory");
    }
    for (int i = 0; i < n; i++) {
        if (vram_device_info(ctx, first + i, &devs[i]) != 0) {
            rc = cli_runtime_error("info", "device %d: %s", first + i, vram_last_error());
            free(devs);
            vram_ctx_close(ctx);
            return rc;
        }
    }
    if (json) {
        json_t *root = json_object();
        json_object_set_new(root, "backend", json_string(vram_ctx_backend(ctx)));
        json_object_set_new(root, "reason", json_string(vram_ctx_reason(ctx)));
        json_object_set_new(root, "device_count", json_integer(count));
        json_t *list = json_array();
        for (int i = 0; i < n; i++)
            json_array_append_new(list, device_json(ctx, &devs[i]));
        json_object_set_new(root, "devices", list);
        cli_print_json(root);
    } else {
        print_table(ctx, devs, n);
    }
    free(devs);
    vram_ctx_close(ctx);
    return CLI_OK;
}
