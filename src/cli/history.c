/* vram history: one GPU's memory, utilization and temperature over time, from
 * vramd (GET /v1/history). */
#include "cli/daemon_client.h"
#include "cli/proc_text.h"

#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void usage(FILE *out)
{
    fprintf(out, "usage: vram history [-i|--id N] [--since DURATION] [--step SECONDS] [--json]\n\n"
                 "GPU N's history as vramd sampled it: full rate for the last hour, then\n"
                 "per-minute mean and max (kept VRAM_WATCH_RETENTION).\n\n"
                 "  -i, --id N        device (default 0)\n"
                 "  --since DURATION  how far back, e.g. 90s, 10m, 24h (default 10m)\n"
                 "  --step SECONDS    one row per step (default: about 1000 rows)\n"
                 "  --json            the /v1/history document (docs/monitoring.md)\n");
}

static json_t *col(json_t *p, size_t i)
{
    return json_array_get(p, i);
}

static void cell(char *buf, size_t len, json_t *v, double scale, const char *fmt)
{
    if (!v || json_is_null(v))
        snprintf(buf, len, "-");
    else
        snprintf(buf, len, fmt, json_number_value(v) / scale);
}

int vram_cli_history(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"id", required_argument, NULL, 'i'},   {"since", required_argument, NULL, 's'},
        {"step", required_argument, NULL, 't'}, {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},       {NULL, 0, NULL, 0}};
    long long device = 0;
    double since = 600, step = 0;
    bool json = false;
    char *end;
    int c;
    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, ":hi:", longopts, NULL)) != -1) {
        switch (c) {
        case 'i':
            if (cli_parse_int("history", "--id", optarg, 0, 1023, &device)) return CLI_USAGE;
            break;
        case 's':
            if (vram_parse_seconds(optarg, &since) != 0 || since <= 0)
                return cli_usage_error("history", "--since: \"%s\" is not a duration like 10m",
                                       optarg);
            break;
        case 't':
            step = strtod(optarg, &end);
            if (end == optarg || *end || !isfinite(step) || step <= 0)
                return cli_usage_error("history", "--step: \"%s\" is not a positive number",
                                       optarg);
            break;
        case 'j':
            json = true;
            break;
        case 'h':
            usage(stdout);
            return CLI_OK;
        default:
            return cli_getopt_error("history", c, argv);
        }
    }
    if (optind < argc)
        return cli_usage_error("history", "unexpected argument \"%s\"", argv[optind]);
    char path[160];
    snprintf(path, sizeof path, "/v1/history?device=%lld&from=-%.3f&step=%.3f", device, since,
             step);
    json_t *reply;
    int rc = cli_daemon_request("history", "GET", path, &reply);
    if (rc) return rc;
    if (json) {
        cli_print_json(reply);
        return CLI_OK;
    }
    json_t *points = json_object_get(reply, "points");
    char resolution[64];
    printf("GPU %lld, %s resolution, step %g s, %zu rows\n", device,
           cli_field_text(reply, "resolution", "", resolution, sizeof resolution),
           json_number_value(json_object_get(reply, "step")), json_array_size(points));
    printf("%-8s  %9s  %9s  %9s  %9s  %4s  %4s  %6s\n", "TIME", "USED GiB", "MAX GiB", "FREE GiB",
           "RESV GiB", "UTIL", "TEMP", "POWER");
    size_t i;
    json_t *p;
    json_array_foreach(points, i, p)
    {
        time_t t = (time_t)json_number_value(col(p, 0));
        char when[16], c1[16], c2[16], c3[16], c4[16], c5[16], c6[16], c7[16];
        strftime(when, sizeof when, "%H:%M:%S", localtime(&t));
        cell(c1, sizeof c1, col(p, 1), 1 << 30, "%.2f");
        cell(c2, sizeof c2, col(p, 2), 1 << 30, "%.2f");
        cell(c3, sizeof c3, col(p, 3), 1 << 30, "%.2f");
        cell(c4, sizeof c4, col(p, 4), 1 << 30, "%.2f");
        cell(c5, sizeof c5, col(p, 5), 1, "%.0f%%");
        cell(c6, sizeof c6, col(p, 6), 1, "%.0fC");
        cell(c7, sizeof c7, col(p, 7), 1, "%.0fW");
        printf("%-8s  %9s  %9s  %9s  %9s  %4s  %4s  %6s\n", when, c1, c2, c3, c4, c5, c6, c7);
    }
    json_t *j;
    json_array_foreach(json_object_get(reply, "jobs"), i, j)
    {
        json_t *last = json_array_get(json_object_get(j, "points"),
                                      json_array_size(json_object_get(j, "points")) - 1);
        char name[256];
        printf("job %lld \"%s\": %zu rows, last %.2f GiB used of %.2f GiB reserved\n",
               (long long)json_integer_value(json_object_get(j, "id")),
               cli_field_text(j, "name", "", name, sizeof name),
               json_array_size(json_object_get(j, "points")),
               json_number_value(col(last, 1)) / (1 << 30),
               json_number_value(col(last, 3)) / (1 << 30));
    }
    json_decref(reply);
    return CLI_OK;
}
