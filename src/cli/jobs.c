/* vram jobs: the queue and recent jobs; vram cancel ID. */
#include "cli/daemon_client.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void print_devices(json_t *devs, char *buf, size_t len)
{
    size_t at = 0, i;
    json_t *d;
    buf[0] = 0;
    json_array_foreach(devs, i, d)
    {
        if (at < len)
            at += (size_t)snprintf(buf + at, len - at, i ? ",%lld" : "%lld",
                                   (long long)json_integer_value(d));
    }
    if (!at) snprintf(buf, len, "-");
}

/* One table row per job, like `nvidia-smi`: sizes in GiB. */
static void print_jobs(json_t *jobs)
{
    printf("%6s  %-10s %-16s %6s %5s %10s %5s %8s %-8s %s\n", "ID", "STATE", "NAME", "UID", "GPUS",
           "MEM/GPU", "PRIO", "BATCH", "DEVICES", "INFO");
    size_t i;
    json_t *j;
    json_array_foreach(jobs, i, j)
    {
        char devs[64], mem[32], batch[32] = "-", info[300] = "";
        print_devices(json_object_get(j, "devices"), devs, sizeof devs);
        json_int_t reserved = json_integer_value(json_object_get(j, "reserved_bytes"));
        json_int_t asked = json_integer_value(json_object_get(j, "mem_bytes"));
        vram_format_size((uint64_t)(reserved ? reserved : asked), mem, sizeof mem);
        json_int_t gb = json_integer_value(json_object_get(j, "granted_batch_size"));
        json_int_t acc = json_integer_value(json_object_get(j, "grad_accum"));
        if (gb) snprintf(batch, sizeof batch, "%lldx%lld", (long long)gb, (long long)acc);
        const char *state = json_string_value(json_object_get(j, "state"));
        json_int_t pos = json_integer_value(json_object_get(j, "queue_position"));
        const char *err = json_string_value(json_object_get(j, "error"));
        if (pos)
            snprintf(info, sizeof info, "queue position %lld", (long long)pos);
        else if (err && *err)
            snprintf(info, sizeof info, "%s", err);
        printf("%6lld  %-10s %-16.16s %6lld %5lld %10s %5lld %8s %-8s %s\n",
               (long long)json_integer_value(json_object_get(j, "id")), state ? state : "?",
               json_string_value(json_object_get(j, "name")),
               (long long)json_integer_value(json_object_get(j, "owner_uid")),
               (long long)json_integer_value(json_object_get(j, "gpus")), mem,
               (long long)json_integer_value(json_object_get(j, "priority")), batch, devs, info);
    }
    if (json_array_size(jobs) == 0) printf("(no jobs)\n");
}

int vram_cli_jobs(int argc, char **argv)
{
    bool as_json = false;
    long limit = 20;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json"))
            as_json = true;
        else if (!strcmp(argv[i], "--all"))
            limit = 100000;
        else if (!strcmp(argv[i], "--limit") && i + 1 < argc) {
            char *end;
            errno = 0;
            limit = strtol(argv[++i], &end, 10);
            if (errno || *end || limit < 0 || limit > 100000)
                return cli_usage_error("jobs", "--limit: \"%s\" is not a count", argv[i]);
        } else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: vram jobs [--json] [--all | --limit N]\n\n"
                   "Queued and running jobs, then the N most recent ended ones (default 20).\n");
            return CLI_OK;
        } else
            return cli_usage_error("jobs", "unknown argument \"%s\"", argv[i]);
    }
    char path[64];
    snprintf(path, sizeof path, "/v1/jobs?limit=%ld", limit);
    json_t *reply;
    int rc = cli_daemon_request("jobs", "GET", path, &reply);
    if (rc) return rc;
    if (as_json) {
        cli_print_json(reply);
        return CLI_OK;
    }
    print_jobs(json_object_get(reply, "jobs"));
    json_decref(reply);
    return CLI_OK;
}

int vram_cli_cancel(int argc, char **argv)
{
    bool as_json = false;
    const char *id = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json"))
            as_json = true;
        else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: vram cancel [--json] ID\n\n"
                   "Cancels a queued or running job (its owner or root only).\n");
            return CLI_OK;
        } else if (!id && argv[i][0] != '-')
            id = argv[i];
        else
            return cli_usage_error("cancel", "unexpected argument \"%s\"", argv[i]);
    }
    if (!id) return cli_usage_error("cancel", "which job? give its ID (see `vram jobs`)");
    char *end;
    errno = 0;
    long long n = strtoll(id, &end, 10);
    if (errno || *end || n <= 0) return cli_usage_error("cancel", "bad job id \"%s\"", id);
    char path[64];
    snprintf(path, sizeof path, "/v1/jobs/%lld", n);
    json_t *reply;
    int rc = cli_daemon_request("cancel", "DELETE", path, &reply);
    if (rc) return rc;
    if (as_json)
        cli_print_json(reply);
    else {
        printf("job %lld cancelled\n", n);
        json_decref(reply);
    }
    return CLI_OK;
}
