/* vram peaks: the most memory seen per GPU, process and job since the last
 * reset (GET /v1/peaks, POST /v1/peaks/reset). */
#include "cli/daemon_client.h"
#include "cli/proc_text.h"
#include "vram_int.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *out)
{
    fprintf(out, "usage: vram peaks [--reset [-i|--id N | --job ID]] [--json]\n\n"
                 "Peak memory per GPU, process and job since vramd started or the last reset,\n"
                 "largest first; a process that has exited keeps its peak and its name.\n\n"
                 "  --reset       reset the peaks: all (root or vramd's user), one GPU (-i N)\n"
                 "                or one of your jobs (--job ID)\n"
                 "  --json        the /v1/peaks document (docs/monitoring.md)\n");
}

static double gib(json_t *o, const char *key)
{
    return vram_gib((uint64_t)json_integer_value(json_object_get(o, key)));
}

static int by_peak_desc(const void *a, const void *b)
{
    json_int_t x = json_integer_value(json_object_get(*(json_t *const *)a, "peak_used_bytes"));
    json_int_t y = json_integer_value(json_object_get(*(json_t *const *)b, "peak_used_bytes"));
    return (x < y) - (x > y);
}

/* A new array of the same objects, largest peak first. */
static json_t *sorted_by_peak(json_t *list)
{
    size_t n = json_array_size(list);
    json_t **items = calloc(n + 1, sizeof *items);
    json_t *out = json_array();
    if (!items) return out;
    for (size_t i = 0; i < n; i++)
        items[i] = json_array_get(list, i);
    qsort(items, n, sizeof *items, by_peak_desc);
    for (size_t i = 0; i < n; i++)
        json_array_append(out, items[i]);
    free(items);
    return out;
}

int vram_cli_peaks(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"reset", no_argument, NULL, 'r'},     {"id", required_argument, NULL, 'i'},
        {"job", required_argument, NULL, 'J'}, {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},      {NULL, 0, NULL, 0}};
    bool reset = false, json = false;
    long long device = -1, job = 0;
    int c;
    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, ":hi:", longopts, NULL)) != -1) {
        switch (c) {
        case 'r':
            reset = true;
            break;
        case 'i':
            if (cli_parse_int("peaks", "--id", optarg, 0, 1023, &device)) return CLI_USAGE;
            break;
        case 'J':
            if (cli_parse_job_id("peaks", optarg, &job)) return CLI_USAGE;
            break;
        case 'j':
            json = true;
            break;
        case 'h':
            usage(stdout);
            return CLI_OK;
        default:
            return cli_getopt_error("peaks", c, argv);
        }
    }
    if (optind < argc) return cli_usage_error("peaks", "unexpected argument \"%s\"", argv[optind]);
    if ((device >= 0 || job) && !reset)
        return cli_usage_error("peaks", "-i and --job choose what --reset resets");
    if (device >= 0 && job) return cli_usage_error("peaks", "give -i or --job, not both");
    json_t *reply = NULL;
    long status = 0;
    int rc;
    if (reset) {
        json_t *body = device >= 0 ? json_pack("{s:I}", "device", (json_int_t)device)
                       : job       ? json_pack("{s:I}", "job", (json_int_t)job)
                                   : json_object();
        rc = cli_daemon_call("POST", "/v1/peaks/reset", body, &status, &reply);
        json_decref(body);
        if (rc || status != 200) {
            rc = cli_daemon_fail("peaks", rc, status, reply);
            json_decref(reply);
            return rc;
        }
    } else if ((rc = cli_daemon_request("peaks", "GET", "/v1/peaks", &reply)) != 0) {
        return rc;
    }
    if (json) {
        cli_print_json(reply);
        return CLI_OK;
    }
    size_t i;
    json_t *o;
    printf("%-8s %10s\n", "GPU", "PEAK GiB");
    json_array_foreach(json_object_get(reply, "devices"), i, o)
        printf("%-8lld %10.2f\n", (long long)json_integer_value(json_object_get(o, "index")),
               gib(o, "peak_used_bytes"));
    json_t *jobs = sorted_by_peak(json_object_get(reply, "jobs"));
    printf("\n%-8s %10s\n", "JOB", "PEAK GiB");
    json_array_foreach(jobs, i, o)
        printf("%-8lld %10.2f\n", (long long)json_integer_value(json_object_get(o, "id")),
               gib(o, "peak_used_bytes"));
    json_t *procs = sorted_by_peak(json_object_get(reply, "processes"));
    printf("\n%-4s %8s %10s  %-8s %s\n", "GPU", "PID", "PEAK GiB", "STATE", "NAME");
    json_array_foreach(procs, i, o)
    {
        char name[200];
        vram_escape_text(json_string_value(json_object_get(o, "name")), name, sizeof name);
        printf("%-4lld %8lld %10.2f  %-8s %s\n",
               (long long)json_integer_value(json_object_get(o, "device")),
               (long long)json_integer_value(json_object_get(o, "pid")), gib(o, "peak_used_bytes"),
               json_is_false(json_object_get(o, "running")) ? "exited" : "running", name);
    }
    json_decref(jobs);
    json_decref(procs);
    if (reset) printf("\n(peaks reset)\n");
    json_decref(reply);
    return CLI_OK;
}
