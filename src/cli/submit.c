/* vram submit (a detached job vramd starts), vram wait ID..., vram attach ID. */
#include "cli/run.h"
#include "sched/sched.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern char **environ;

static long long int_of(json_t *job, const char *key)
{
    return (long long)json_integer_value(json_object_get(job, key));
}

static const char *state_of(json_t *job)
{
    const char *s = json_string_value(json_object_get(job, "state"));
    return s ? s : "?";
}

/* An absolute path for a file name given relative to cwd. */
static char *absolute(const char *cwd, const char *name)
{
    char *out = NULL;
    if (name[0] == '/') return strdup(name);
    return asprintf(&out, "%s/%s", cwd, name) < 0 ? NULL : out;
}

/* The spawn part of the request: argv, directory, environment, files. */
static json_t *spawn_spec(const run_opts_t *o)
{
    char cwd[PATH_MAX];
    if (!getcwd(cwd, sizeof cwd)) return NULL;
    json_t *argv = json_array(), *env = json_object();
    for (char **a = o->command; *a; a++)
        json_array_append_new(argv, json_string(*a));
    for (char **e = environ; *e; e++) {
        const char *eq = strchr(*e, '=');
        if (!eq) continue;
        char name[128];
        snprintf(name, sizeof name, "%.*s", (int)(eq - *e), *e);
        if (vram_spawn_env_allowed(name)) json_object_set_new(env, name, json_string(eq + 1));
    }
    char *out = absolute(cwd, o->output ? o->output : "vram-%j.out");
    char *err = o->error ? absolute(cwd, o->error) : strdup("");
    json_t *spec = json_pack("{s:o,s:s,s:o,s:s?,s:s?}", "argv", argv, "cwd", cwd, "env", env,
                             "output", out, "error", err);
    free(out);
    free(err);
    return spec;
}

int vram_cli_submit(int argc, char **argv)
{
    run_opts_t o;
    int code = run_parse("submit", argc, argv, &o);
    json_t *req = NULL, *reply = NULL, *spec = NULL;
    if (code) goto out;
    req = run_request(&o, 0);
    if (!(spec = spawn_spec(&o))) {
        code = cli_runtime_error("submit", "cannot describe the job: %s", strerror(errno));
        goto out;
    }
    json_object_set(req, "spawn", spec);
    long status;
    if (cli_daemon_call_patiently("submit", o.quiet, "POST", "/v1/jobs", req, &status, &reply)) {
        code = cli_runtime_error("submit", "%s", vram_last_error());
        goto out;
    }
    if (status != 201) {
        fprintf(stderr, "vram submit: vramd refused the job: %s\n",
                cli_daemon_error_message(reply));
        code = status == 400 || status == 422 ? CLI_USAGE : CLI_RUNTIME;
        goto out;
    }
    long long id = int_of(reply, "id");
    if (o.parsable) {
        printf("%lld\n", id);
    } else {
        char path[PATH_MAX + 32];
        vram_spawn_expand_path(json_string_value(json_object_get(spec, "output")), id, path,
                               sizeof path);
        printf("submitted job %lld (%s); output in %s\n", id, state_of(reply), path);
    }
out:
    json_decref(req);
    json_decref(spec);
    json_decref(reply);
    run_opts_free(&o);
    return code < 0 ? CLI_OK : code;
}

/* ---- vram wait / attach -------------------------------------------------------- */

static bool ended(json_t *job)
{
    const char *s = state_of(job);
    return strcmp(s, "queued") && strcmp(s, "running");
}

/* The exit code a finished job stands for (docs/cli.md). */
static int job_code(json_t *job)
{
    const char *s = state_of(job);
    json_t *status = json_object_get(job, "exit_status");
    if (!strcmp(s, "done")) return CLI_OK;
    if (!strcmp(s, "timeout")) return CLI_QUEUE_TIMEOUT;
    if (!strcmp(s, "cancelled")) return CLI_INTERRUPTED_TERM;
    return json_is_integer(status) && json_integer_value(status) > 0
               ? (int)json_integer_value(status)
               : CLI_RUNTIME;
}

/* One long poll: the job once it ended, or after at most `seconds`. */
static int poll_job(const char *cmd, long long id, double seconds, json_t **job)
{
    char path[96];
    snprintf(path, sizeof path, "/v1/jobs/%lld?wait=%g&until=end", id, seconds);
    json_decref(*job);
    *job = NULL;
    long status;
    /* a vramd restarting under a long wait is waited for too */
    int rc = cli_daemon_call_patiently(cmd, false, "GET", path, NULL, &status, job);
    if (!rc && status == 200) return CLI_OK;
    rc = cli_daemon_fail(cmd, rc, status, *job);
    json_decref(*job);
    *job = NULL;
    return rc;
}

/* The arguments of wait and attach: job ids (at most max), --quiet where
 * allowed, --help (printed: returns -1). */
typedef struct {
    const char *cmd, *line, *help;
    bool allow_quiet, quiet;
    long long ids[256];
    int n, max;
} id_args_t;

static int parse_id_args(id_args_t *a, int argc, char **argv)
{
    static const struct option with_quiet[] = {{"quiet", 0, 0, 'q'}, {"help", 0, 0, 'h'}, {0}};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: vram %s %s\n\n%s\n", a->cmd, a->line, a->help);
            return -1;
        }
        if (a->allow_quiet && (!strcmp(argv[i], "--quiet") || !strcmp(argv[i], "-q"))) {
            a->quiet = true;
            continue;
        }
        if (argv[i][0] == '-')
            return cli_unknown_option(a->cmd, argv[i], with_quiet + !a->allow_quiet);
        if (a->n == a->max)
            return cli_usage_error(a->cmd, "at most %d job id(s) at once (\"%s\")", a->max,
                                   argv[i]);
        int rc = cli_parse_job_id(a->cmd, argv[i], &a->ids[a->n]);
        if (rc) return rc;
        a->n++;
    }
    return a->n ? 0 : cli_usage_error(a->cmd, "which job? give its ID (see `vram jobs`)");
}

int vram_cli_wait(int argc, char **argv)
{
    id_args_t a = {.cmd = "wait",
                   .line = "[--quiet] ID...",
                   .help = "Waits until every job has ended; prints how each ended. Exit: the "
                           "job's status\n(one job), else the last non-zero: 0 done, its exit "
                           "status when failed, 124\nqueue timeout, 143 cancelled, 1 other "
                           "failures.\n\nExample:\n  vram wait $id",
                   .allow_quiet = true,
                   .max = 256};
    int code = parse_id_args(&a, argc, argv);
    if (code) return code < 0 ? CLI_OK : code;
    long long *ids = a.ids;
    int nids = a.n;
    bool quiet = a.quiet;
    for (int i = 0; i < nids; i++) {
        json_t *job = NULL;
        int rc;
        do
            rc = poll_job("wait", ids[i], 30, &job);
        while (!rc && !ended(job));
        if (rc) return rc;
        int c = job_code(job);
        const char *err = json_string_value(json_object_get(job, "error"));
        if (!quiet)
            printf("job %lld %s%s%s\n", ids[i], state_of(job), err && *err ? ": " : "",
                   err ? err : "");
        if (c) code = c;
        json_decref(job);
    }
    return code;
}

/* Copies what was appended to a file since *at to `to`. */
static void follow(const char *path, long *at, FILE *to)
{
    FILE *f = fopen(path, "r");
    if (!f) return;
    if (fseek(f, *at, SEEK_SET) == 0) {
        char buf[8192];
        size_t n;
        while ((n = fread(buf, 1, sizeof buf, f)) > 0) {
            fwrite(buf, 1, n, to);
            *at += (long)n;
        }
        fflush(to);
    }
    fclose(f);
}

int vram_cli_attach(int argc, char **argv)
{
    id_args_t a = {.cmd = "attach",
                   .line = "ID",
                   .help = "Prints a submitted job's output (its stderr file on stderr when it has "
                           "one)\nas it is written, until the job ends; exits like `vram wait`. "
                           "Ctrl-C\ndetaches; the job goes on.\n\nExample:\n  vram attach $id",
                   .max = 1};
    int code = parse_id_args(&a, argc, argv);
    if (code) return code < 0 ? CLI_OK : code;
    long long id = a.ids[0];
    char path[96];
    snprintf(path, sizeof path, "/v1/jobs/%lld/output", id);
    json_t *files = NULL, *job = NULL;
    int rc = cli_daemon_request("attach", "GET", path, &files);
    if (rc) return rc;
    const char *out = json_string_value(json_object_get(files, "output"));
    const char *err = json_string_value(json_object_get(files, "error"));
    bool two = out && err && strcmp(out, err);
    long at_out = 0, at_err = 0;
    for (;;) {
        /* the long poll paces the loop: it returns at the end, or after 0.2 s */
        rc = poll_job("attach", id, 0.2, &job);
        if (out) follow(out, &at_out, stdout);
        if (two) follow(err, &at_err, stderr);
        if (rc || ended(job)) break;
    }
    if (!rc) rc = job_code(job);
    json_decref(job);
    json_decref(files);
    return rc;
}
