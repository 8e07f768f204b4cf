/* vram status: the daemon's memory summary per GPU; --cluster: the same
 * for several vramds (one per node), with their running jobs. */
#include "cli/daemon_client.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static double gib_of(json_t *o, const char *key)
{
    return vram_gib((uint64_t)json_integer_value(json_object_get(o, key)));
}

/* One node of --cluster: NAME=URL, or URL (named after its host). */
typedef struct {
    char name[64], url[512];
} node_t;

/* 0 with *count nodes, or CLI_USAGE (printed). */
static int parse_nodes(const char *list, node_t *nodes, int cap, int *count)
{
    int n = 0;
    for (const char *p = list; *p;) {
        size_t len = strcspn(p, ",");
        if (n == cap) return cli_usage_error("status", "--cluster: more than %d nodes", cap);
        char entry[600];
        snprintf(entry, sizeof entry, "%.*s", (int)(len < 599 ? len : 599), p);
        char *eq = strchr(entry, '='), *url = eq ? eq + 1 : entry;
        if (strncmp(url, "http://", 7) != 0 || !url[7])
            return cli_usage_error("status",
                                   "--cluster: \"%s\" is not [NAME=]http://HOST:PORT (a vramd's "
                                   "TCP address)",
                                   entry);
        if (strlen(url) >= sizeof nodes[n].url ||
            (eq && (size_t)(eq - entry) >= sizeof nodes[n].name))
            return cli_usage_error("status", "--cluster: \"%s\" is too long", entry);
        snprintf(nodes[n].url, sizeof nodes[n].url, "%.511s", url);
        if (eq) {
            *eq = 0;
            if (!*entry)
                return cli_usage_error("status", "--cluster: empty node name in \"%.*s\"", (int)len,
                                       p);
            snprintf(nodes[n].name, sizeof nodes[n].name, "%.63s", entry);
        } else {
            snprintf(nodes[n].name, sizeof nodes[n].name, "%.*s", (int)strcspn(url + 7, ":/"),
                     url + 7);
        }
        n++;
        p += len + (p[len] == ',');
    }
    if (n == 0) return cli_usage_error("status", "--cluster: no node given");
    *count = n;
    return 0;
}

/* GET path from one node's vramd (VRAM_URL is how the client finds it). */
static int node_get(const node_t *node, const char *path, json_t **reply, char *why, size_t len)
{
    long status;
    setenv("VRAM_URL", node->url, 1);
    int rc = cli_daemon_call("GET", path, NULL, &status, reply);
    if (rc) {
        snprintf(why, len, "%s", vram_last_error());
        return -1;
    }
    if (status != 200) {
        snprintf(why, len, "HTTP %ld: %s", status, cli_daemon_error_message(*reply));
        json_decref(*reply);
        *reply = NULL;
        return -1;
    }
    return 0;
}

static int cluster_status(const char *list, bool as_json)
{
    node_t nodes[256];
    int n = 0, rc = parse_nodes(list, nodes, 256, &n);
    if (rc) return rc;
    json_t *all = json_array();
    int unreachable = 0;
    for (int i = 0; i < n; i++) {
        json_t *status = NULL, *jobs = NULL,
               *row = json_pack("{s:s,s:s}", "name", nodes[i].name, "url", nodes[i].url);
        char why[512];
        if (node_get(&nodes[i], "/v1/status", &status, why, sizeof why) != 0 ||
            node_get(&nodes[i], "/v1/jobs?limit=1000", &jobs, why, sizeof why) != 0) {
            json_decref(status);
            json_object_set_new(row, "error", json_string(why));
            unreachable++;
        } else {
            json_t *running = json_array(), *j;
            size_t k;
            json_array_foreach(json_object_get(jobs, "jobs"), k, j)
            {
                const char *st = json_string_value(json_object_get(j, "state"));
                if (st && (!strcmp(st, "running") || !strcmp(st, "queued")))
                    json_array_append(running, j);
            }
            json_decref(jobs);
            json_object_set_new(row, "status", status);
            json_object_set_new(row, "jobs", running);
        }
        json_array_append_new(all, row);
    }
    unsetenv("VRAM_URL");
    if (as_json) {
        json_t *out = json_pack("{s:o}", "nodes", all);
        cli_print_json(out);
        json_decref(out);
        return unreachable ? CLI_RUNTIME : CLI_OK;
    }
    printf("%-12s %3s  %-16s %10s %10s %10s %10s %10s %5s\n", "NODE", "GPU", "NAME", "TOTAL",
           "USED", "OUTSIDE", "RESERVED", "FREE-ADM", "JOBS");
    size_t i, k;
    json_t *row, *d, *j;
    json_array_foreach(all, i, row)
    {
        const char *name = json_string_value(json_object_get(row, "name"));
        if (json_object_get(row, "error")) {
            printf("%-12s unreachable: %s\n", name,
                   json_string_value(json_object_get(row, "error")));
            continue;
        }
        json_array_foreach(json_object_get(json_object_get(row, "status"), "devices"), k, d) printf(
            "%-12.12s %3lld  %-16.16s %7.2f GiB %6.2f GiB %6.2f GiB %6.2f GiB %6.2f GiB %5lld\n",
            name, (long long)json_integer_value(json_object_get(d, "index")),
            json_string_value(json_object_get(d, "name")), gib_of(d, "total_bytes"),
            gib_of(d, "used_bytes"), gib_of(d, "unmanaged_bytes"), gib_of(d, "reserved_bytes"),
            gib_of(d, "free_for_admission_bytes"),
            (long long)json_integer_value(json_object_get(d, "running_jobs")));
    }
    printf("\n%-12s %6s  %-8s %-10s %10s  %s\n", "NODE", "JOB", "STATE", "GPUS", "RESERVED",
           "NAME");
    json_array_foreach(all, i, row)
    {
        json_array_foreach(json_object_get(row, "jobs"), k, j)
        {
            char gpus[64] = "-";
            size_t g, at = 0;
            json_t *dev;
            json_array_foreach(json_object_get(j, "devices"), g, dev) at +=
                (size_t)snprintf(gpus + at, at < sizeof gpus ? sizeof gpus - at : 0, "%s%lld",
                                 g ? "," : "", (long long)json_integer_value(dev));
            printf("%-12.12s %6lld  %-8s %-10s %6.2f GiB  %s\n",
                   json_string_value(json_object_get(row, "name")),
                   (long long)json_integer_value(json_object_get(j, "id")),
                   json_string_value(json_object_get(j, "state")), gpus,
                   gib_of(j, json_object_get(j, "reserved_bytes") &&
                                     json_integer_value(json_object_get(j, "reserved_bytes"))
                                 ? "reserved_bytes"
                                 : "mem_bytes"),
                   json_string_value(json_object_get(j, "name")));
        }
    }
    json_decref(all);
    return unreachable ? CLI_RUNTIME : CLI_OK;
}

int vram_cli_status(int argc, char **argv)
{
    bool as_json = false;
    const char *cluster = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json"))
            as_json = true;
        else if (!strcmp(argv[i], "--cluster")) {
            if (++i == argc) return cli_usage_error("status", "--cluster needs [NAME=]URL[,...]");
            cluster = argv[i];
        } else if (!strncmp(argv[i], "--cluster=", 10))
            cluster = argv[i] + 10;
        else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: vram status [--json] [--cluster [NAME=]URL[,...]]\n\nPer GPU: total, "
                   "used, reserved by vramd, free for admission; running and queued jobs.\n"
                   "--cluster: the same for several vramds (one per node, each by its TCP "
                   "address,\ne.g. node1=http://10.0.0.11:7878), with their running and queued "
                   "jobs.\n");
            return CLI_OK;
        } else
            return cli_usage_error("status", "unknown argument \"%s\"", argv[i]);
    }
    if (cluster) return cluster_status(cluster, as_json);
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
        printf("%3lld  %-16.16s %7.2f GiB %6.2f GiB %6.2f GiB %6.2f GiB %6.2f GiB %5lld\n",
               (long long)json_integer_value(json_object_get(d, "index")),
               json_string_value(json_object_get(d, "name")), gib_of(d, "total_bytes"),
               gib_of(d, "used_bytes"), gib_of(d, "unmanaged_bytes"), gib_of(d, "reserved_bytes"),
               gib_of(d, "free_for_admission_bytes"),
               (long long)json_integer_value(json_object_get(d, "running_jobs")));
    }
    printf("\nrunning jobs: %lld   queued jobs: %lld   reserved: %.2f GiB   pending: %.2f GiB\n",
           (long long)json_integer_value(json_object_get(reply, "active_jobs")),
           (long long)json_integer_value(json_object_get(reply, "pending_jobs")),
           gib_of(reply, "total_reserved_bytes"), gib_of(reply, "pending_bytes"));
    json_decref(reply);
    return CLI_OK;
}
