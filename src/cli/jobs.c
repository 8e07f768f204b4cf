/* vram jobs [ID] [--user U] [--state S,...] [--all] [--format F] [--json];
 * vram cancel ID... | --user U --state S. */
#include "cli/daemon_client.h"
#include "cli/jobs_view.h"
#include "sched/sched.h"

#include <errno.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *cmd;
    long long id;   /* one job, 0 = all */
    long long uid;  /* -1 = everybody */
    bool states[8]; /* by vram_job_state_t; none set = all */
    bool any_state;
    long limit;         /* ended jobs */
    const char *format; /* NULL = the table */
    bool json, header;
} jobs_opts_t;

static const char *const state_names[] = {"queued", "running",   "done",
                                          "failed", "cancelled", "timeout"};

static int parse_user(const char *cmd, const char *text, long long *uid)
{
    struct passwd pw, *res = NULL;
    char buf[1024];
    if (getpwnam_r(text, &pw, buf, sizeof buf, &res) == 0 && res) {
        *uid = pw.pw_uid;
        return 0;
    }
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (errno || end == text || *end || v < 0)
        return cli_usage_error(cmd, "--user: no user \"%s\"", text);
    *uid = v;
    return 0;
}

static int parse_states(const char *cmd, const char *text, jobs_opts_t *o)
{
    char copy[128];
    snprintf(copy, sizeof copy, "%s", text);
    for (char *save, *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        int st = vram_job_state_parse(!strcmp(t, "pending") ? "queued" : t);
        if (st < 0) {
            const char *near = cli_closest(t, state_names, 6);
            return cli_usage_error(cmd,
                                   "--state: no state \"%s\"%s%s%s (queued, running, done, "
                                   "failed, cancelled, timeout)",
                                   t, near ? "; did you mean " : "", near ? near : "",
                                   near ? "?" : "");
        }
        o->states[st] = o->any_state = true;
    }
    return 0;
}

static void jobs_usage(void)
{
    printf("usage: vram jobs [ID] [--user U] [--state S,...] [--all | --limit N]\n"
           "                 [--format FMT] [--noheader] [--json]\n\n"
           "Jobs sorted by id: queued and running ones, and the N most recent ended ones\n"
           "(default 20). With ID, that job's details and event log. USER is a name or uid;\n"
           "states: queued, running, done, failed, cancelled, timeout. '!' after MEM/GPU\n"
           "marks a job using more than it reserved; REASON says why a queued job waits.\n\n"
           "--format letters (like squeue -o; %%10j pads, %%.10j aligns right):\n%s\n"
           "Examples:\n"
           "  vram jobs --state queued,running --user $USER\n"
           "  vram jobs --format '%%i %%t %%M %%r'\n"
           "  vram jobs $id\n",
           jobs_field_help);
}

static int parse_jobs(int argc, char **argv, jobs_opts_t *o)
{
    static const struct option opts[] = {
        {"user", 1, 0, 'u'},     {"state", 1, 0, 's'},  {"all", 0, 0, 'a'},
        {"limit", 1, 0, 'l'},    {"format", 1, 0, 'f'}, {"json", 0, 0, 'j'},
        {"noheader", 0, 0, 'H'}, {"help", 0, 0, 'h'},   {0, 0, 0, 0}};
    *o = (jobs_opts_t){.cmd = "jobs", .uid = -1, .limit = 20, .header = true};
    int c, rc = 0;
    bool all = false, limit = false;
    opterr = 0;
    optind = 1;
    while (!rc && (c = getopt_long(argc, argv, ":u:s:af:jHh", opts, NULL)) != -1) {
        switch (c) {
        case 'u':
            rc = parse_user("jobs", optarg, &o->uid);
            break;
        case 's':
            rc = parse_states("jobs", optarg, o);
            break;
        case 'a':
            all = true;
            o->limit = 100000;
            break;
        case 'l': {
            char *end;
            errno = 0;
            o->limit = strtol(optarg, &end, 10);
            limit = true;
            if (errno || *end || end == optarg || o->limit < 0 || o->limit > 100000)
                rc = cli_usage_error("jobs", "--limit: \"%s\" is not a count (0-100000)", optarg);
            break;
        }
        case 'f':
            o->format = optarg;
            break;
        case 'j':
            o->json = true;
            break;
        case 'H':
            o->header = false;
            break;
        case 'h':
            jobs_usage();
            return -1;
        case ':':
            return cli_usage_error("jobs", "option \"%s\" needs a value", argv[optind - 1]);
        default:
            return cli_unknown_option("jobs", argv[optind - 1], opts);
        }
    }
    if (rc) return rc;
    if (all && limit) return cli_usage_error("jobs", "--all and --limit contradict: keep one");
    if (o->json && o->format)
        return cli_usage_error("jobs", "--json and --format contradict: keep one");
    if (optind < argc && (rc = cli_parse_job_id("jobs", argv[optind++], &o->id))) return rc;
    if (optind < argc) return cli_usage_error("jobs", "unexpected argument \"%s\"", argv[optind]);
    if (o->id && (o->uid >= 0 || o->any_state || all || limit))
        return cli_usage_error("jobs", "a job ID shows that job: --user, --state, --all and "
                                       "--limit do not apply");
    return 0;
}

static int by_id(const void *a, const void *b)
{
    json_int_t x = json_integer_value(json_object_get(*(json_t *const *)a, "id"));
    json_int_t y = json_integer_value(json_object_get(*(json_t *const *)b, "id"));
    return x < y ? -1 : x > y;
}

/* The jobs that pass the filters, sorted by id (a new array). */
static json_t *select_jobs(json_t *all, const jobs_opts_t *o)
{
    size_t n = json_array_size(all), k = 0;
    json_t **v = calloc(n + 1, sizeof *v), *out = json_array();
    for (size_t i = 0; v && i < n; i++) {
        json_t *j = json_array_get(all, i);
        int st = vram_job_state_parse(json_string_value(json_object_get(j, "state")));
        if (o->uid >= 0 && json_integer_value(json_object_get(j, "owner_uid")) != o->uid) continue;
        if (o->any_state && (st < 0 || !o->states[st])) continue;
        v[k++] = j;
    }
    if (v) qsort(v, k, sizeof *v, by_id);
    for (size_t i = 0; i < k; i++)
        json_array_append(out, v[i]);
    free(v);
    return out;
}

static void fetch_ctx(jobs_ctx_t *ctx)
{
    jobs_ctx_init(ctx);
}

/* All jobs (active and `limit` ended ones) and, with ctx, the context. */
static int fetch(const char *cmd, long limit, json_t **jobs, jobs_ctx_t *ctx)
{
    char path[64];
    snprintf(path, sizeof path, "/v1/jobs?limit=%ld", limit);
    int rc = cli_daemon_request(cmd, "GET", path, jobs);
    if (!rc && ctx) fetch_ctx(ctx);
    return rc;
}

static int show_one(const jobs_opts_t *o)
{
    char path[96];
    json_t *job = NULL, *events = NULL;
    snprintf(path, sizeof path, "/v1/jobs/%lld", o->id);
    int rc = cli_daemon_request("jobs", "GET", path, &job);
    if (rc) return rc;
    snprintf(path, sizeof path, "/v1/jobs/%lld/events", o->id);
    if ((rc = cli_daemon_request("jobs", "GET", path, &events))) goto out;
    jobs_ctx_t ctx;
    fetch_ctx(&ctx);
    if (o->json) {
        json_object_set(job, "events", json_object_get(events, "events"));
        cli_print_json(json_incref(job));
    } else if (o->format) {
        json_t *one = json_pack("[O]", job);
        rc = jobs_print_format(&ctx, one, o->format, o->header)
                 ? cli_usage_error("jobs", "--format: unknown field in \"%s\"", o->format)
                 : 0;
        json_decref(one);
    } else {
        jobs_print_detail(&ctx, job, events);
    }
out:
    json_decref(job);
    json_decref(events);
    return rc;
}

int vram_cli_jobs(int argc, char **argv)
{
    jobs_opts_t o;
    int rc = parse_jobs(argc, argv, &o);
    if (rc) return rc < 0 ? CLI_OK : rc;
    if (o.id) return show_one(&o);
    json_t *reply = NULL;
    jobs_ctx_t ctx;
    if ((rc = fetch("jobs", o.limit, &reply, &ctx))) return rc;
    json_t *jobs = select_jobs(json_object_get(reply, "jobs"), &o);
    if (o.json)
        cli_print_json(json_pack("{s:O}", "jobs", jobs));
    else if (o.format && jobs_print_format(&ctx, jobs, o.format, o.header) != 0)
        rc = cli_usage_error("jobs", "--format: unknown field in \"%s\" (see vram jobs --help)",
                             o.format);
    else if (!o.format)
        jobs_print_table(&ctx, jobs);
    json_decref(jobs);
    json_decref(reply);
    return rc;
}

/* ---- vram cancel ----------------------------------------------------------------- */

static int cancel_one(long long id, bool as_json)
{
    char path[64];
    snprintf(path, sizeof path, "/v1/jobs/%lld", id);
    json_t *reply;
    int rc = cli_daemon_request("cancel", "DELETE", path, &reply);
    if (rc) return rc;
    if (as_json)
        cli_print_json(reply);
    else {
        printf("job %lld cancelled\n", id);
        json_decref(reply);
    }
    return CLI_OK;
}

int vram_cli_cancel(int argc, char **argv)
{
    static const struct option opts[] = {{"user", 1, 0, 'u'},
                                         {"state", 1, 0, 's'},
                                         {"json", 0, 0, 'j'},
                                         {"help", 0, 0, 'h'},
                                         {0, 0, 0, 0}};
    jobs_opts_t o = {.cmd = "cancel", .uid = -1};
    int c, rc = 0;
    opterr = 0;
    optind = 1;
    while (!rc && (c = getopt_long(argc, argv, ":u:s:jh", opts, NULL)) != -1) {
        if (c == 'u')
            rc = parse_user("cancel", optarg, &o.uid);
        else if (c == 's')
            rc = parse_states("cancel", optarg, &o);
        else if (c == 'j')
            o.json = true;
        else if (c == 'h') {
            printf("usage: vram cancel [--json] ID...\n"
                   "       vram cancel [--user U] [--state queued|running]\n\n"
                   "Cancels jobs (their owner or root only). A running job's processes get\n"
                   "SIGTERM, then SIGKILL after a grace period. With --user/--state, every\n"
                   "queued or running job that matches.\n\n"
                   "Examples:\n"
                   "  id=$(vram submit --parsable --mem 4GiB -- sleep 600)\n"
                   "  vram cancel $id\n"
                   "  vram cancel --user $USER --state queued\n");
            return CLI_OK;
        } else if (c == ':')
            return cli_usage_error("cancel", "option \"%s\" needs a value", argv[optind - 1]);
        else
            return cli_unknown_option("cancel", argv[optind - 1], opts);
    }
    if (rc) return rc;
    for (int st = VRAM_JOB_DONE; st <= VRAM_JOB_TIMEOUT; st++)
        if (o.states[st])
            return cli_usage_error("cancel",
                                   "--state %s: only queued and running jobs can be "
                                   "cancelled",
                                   state_names[st]);
    bool filter = o.uid >= 0 || o.any_state;
    if (filter && optind < argc)
        return cli_usage_error("cancel", "give job IDs or --user/--state, not both");
    if (!filter && optind >= argc)
        return cli_usage_error("cancel", "which jobs? give IDs, or --user U and/or --state S");
    int code = CLI_OK;
    for (int i = optind; i < argc; i++) {
        long long id;
        if ((rc = cli_parse_job_id("cancel", argv[i], &id))) return rc;
    }
    for (int i = optind; i < argc; i++) {
        long long id = strtoll(argv[i], NULL, 10);
        if ((rc = cancel_one(id, o.json))) code = rc;
    }
    if (!filter) return code;
    json_t *reply = NULL;
    if ((rc = fetch("cancel", 0, &reply, NULL))) return rc;
    if (!o.any_state) o.states[VRAM_JOB_QUEUED] = o.states[VRAM_JOB_RUNNING] = o.any_state = true;
    json_t *jobs = select_jobs(json_object_get(reply, "jobs"), &o);
    size_t i;
    json_t *j;
    json_array_foreach(jobs, i, j)
    {
        if ((rc = cancel_one(json_integer_value(json_object_get(j, "id")), o.json))) code = rc;
    }
    if (!json_array_size(jobs) && !o.json) printf("no job matches\n");
    json_decref(jobs);
    json_decref(reply);
    return code;
}
