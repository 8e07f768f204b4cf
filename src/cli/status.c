/* vram status: the daemon's memory summary per GPU. */
#include "cli/daemon_client.h"

#include <stdio.h>
#include <string.h>

static double gib_of(json_t *o, const char *key)
{
    return vram_gib((uint64_t)json_integer_value(json_object_get(o, key)));
}

/* A device's figure in a 10-column cell: "-" where vramd has none (the
 * device does not answer). */
static const char *gib_cell(json_t *o, const char *key, char *buf, size_t len)
{
    json_t *v = json_object_get(o, key);
    if (!json_is_integer(v)) return "-";
    snprintf(buf, len, "%.2f GiB", vram_gib((uint64_t)json_integer_value(v)));
    return buf;
}

int vram_cli_status(int argc, char **argv)
{
    bool as_json = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json"))
            as_json = true;
        else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: vram status [--json]\n\nPer GPU: total, used, reserved by vramd, "
                   "free for admission; running and queued jobs.\n");
            return CLI_OK;
        } else
            return cli_usage_error("status", "unknown argument \"%s\"", argv[i]);
    }
    json_t *reply;
    int rc = cli_daemon_request("status", "GET", "/v1/status", &reply);
    if (rc) return rc;
    if (as_json) {
        cli_print_json(reply);
        return CLI_OK;
    }
    printf("%3s  %-16s %10s %10s %10s %10s %10s %5s\n", "GPU", "NAME", "TOTAL", "USED", "OUTSIDE",
           "RESERVED", "FREE-ADM", "JOBS");
    size_t i;
    json_t *d;
    json_array_foreach(json_object_get(reply, "devices"), i, d)
    {
        char c[5][24];
        const char *name = json_string_value(json_object_get(d, "name"));
        printf("%3lld  %-16.16s %10s %10s %10s %10s %10s %5lld\n",
               (long long)json_integer_value(json_object_get(d, "index")),
               name ? name : "(unavailable)", gib_cell(d, "total_bytes", c[0], sizeof c[0]),
               gib_cell(d, "used_bytes", c[1], sizeof c[1]),
               gib_cell(d, "unmanaged_bytes", c[2], sizeof c[2]),
               gib_cell(d, "reserved_bytes", c[3], sizeof c[3]),
               gib_cell(d, "free_for_admission_bytes", c[4], sizeof c[4]),
               (long long)json_integer_value(json_object_get(d, "running_jobs")));
    }
    printf("\nrunning jobs: %lld   queued jobs: %lld   reserved: %.2f GiB   pending: %.2f GiB\n",
           (long long)json_integer_value(json_object_get(reply, "active_jobs")),
           (long long)json_integer_value(json_object_get(reply, "pending_jobs")),
           gib_of(reply, "total_reserved_bytes"), gib_of(reply, "pending_bytes"));
    json_decref(reply);
    return CLI_OK;
}
