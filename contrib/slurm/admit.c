/* The step's side of vramd: estimate, register, wait, report, finish. */
#include "spank_vram.h"

#include "cli/daemon_client.h"
#include "sched/sched.h" /* VRAM_JOB_MAX_BATCHES: the table vramd accepts */
#include "vram.h"
#include "vram_int.h" /* vram_batch_bytes_to_json: the table as vramd reads it */

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <wordexp.h>

/* How long a waiting step keeps trying to reach a restarting vramd. */
#define RESTART_GRACE_S 30.0

static int say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int say(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("vram: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return -1;
}

/* The estimate settings of --vram-estimate-args ("--flag value" or
 * "--flag=value", the flags of `vram estimate`) applied to cfg through
 * libvram's settings table, in this process. */
static int estimate_settings(const spank_vram_step_t *step, vram_estimate_config_t *cfg)
{
    const char *args = step->opt[SPANK_VRAM_OPT_ESTIMATE_ARGS];
    if (!args) return 0;
    wordexp_t words = {0};
    if (wordexp(args, &words, WRDE_NOCMD | WRDE_UNDEF) != 0)
        return say("--vram-estimate-args \"%s\": not a list of flags (no $(...) or undefined "
                   "variables)",
                   args);
    int rc = 0;
    for (size_t i = 0; i < words.we_wordc && !rc; i++) {
        char flag[64];
        const char *w = words.we_wordv[i], *eq = strchr(w, '='), *value;
        size_t len = eq ? (size_t)(eq - w) : strlen(w);
        if (len >= sizeof flag) len = sizeof flag - 1;
        memcpy(flag, w, len);
        flag[len] = '\0';
        if (eq)
            value = eq + 1;
        else if (i + 1 < words.we_wordc)
            value = words.we_wordv[++i];
        else {
            rc = say("--vram-estimate-args: %s needs a value", flag);
            break;
        }
        if (vram_estimate_set(cfg, flag, value) != 0)
            rc = say("--vram-estimate-args: %s", vram_last_error());
    }
    wordfree(&words);
    return rc;
}

/* mem_bytes, and the batch fields when the step may degrade: full
 * estimates of --vram-model with those settings at the batch and at each
 * smaller one it accepts (vram_estimate_batch_table). */
static int memory_fields(const spank_vram_step_t *step, json_t *req, long long *batch)
{
    *batch = 0;
    if (step->opt[SPANK_VRAM_OPT_MEM]) {
        uint64_t mem;
        if (vram_parse_size(step->opt[SPANK_VRAM_OPT_MEM], &mem) != 0 || mem == 0)
            return say("--vram-mem \"%s\": give a size with a unit, e.g. 60GiB",
                       step->opt[SPANK_VRAM_OPT_MEM]);
        json_object_set_new(req, "mem_bytes", json_integer((json_int_t)mem));
        return 0;
    }
    vram_model_t model;
    vram_estimate_config_t cfg;
    vram_estimate_config_init(&cfg);
    if (vram_model_find(step->opt[SPANK_VRAM_OPT_MODEL], &model) != 0)
        return say("--vram-model: %s", vram_last_error());
    if (estimate_settings(step, &cfg) != 0) return -1;
    uint64_t mem;
    long long b = cfg.batch_size;
    if (vram_estimate_at_batch(&model, &cfg, b, &mem) != 0)
        return say("the estimate of --vram-model %s: %s", step->opt[SPANK_VRAM_OPT_MODEL],
                   vram_last_error());
    json_object_set_new(req, "mem_bytes", json_integer((json_int_t)mem));
    *batch = b;
    const char *min = step->opt[SPANK_VRAM_OPT_MIN_BATCH];
    if (!min || b <= 1) return 0;
    long long lo = atoll(min);
    vram_batch_bytes_t table[VRAM_JOB_MAX_BATCHES];
    int n = 0;
    if (lo > b) lo = b; /* a minimum above the batch: the batch alone */
    if (vram_estimate_batch_table(&model, &cfg, lo, table, VRAM_JOB_MAX_BATCHES, &n) != 0)
        return say("the estimate of --vram-model %s: %s", step->opt[SPANK_VRAM_OPT_MODEL],
                   vram_last_error());
    json_object_set_new(req, "batch_size", json_integer(b));
    json_object_set_new(req, "min_batch_size", json_integer(lo));
    json_object_set_new(req, "batch_bytes", vram_batch_bytes_to_json(table, n));
    return 0;
}

static json_t *request(const spank_vram_step_t *step, long long *batch)
{
    json_t *req =
        json_pack("{s:i,s:s,s:s}", "pid", step->pid, "name", step->name, "command", step->command);
    if (memory_fields(step, req, batch) != 0) {
        json_decref(req);
        return NULL;
    }
    if (step->nstep_gpus > 0 && step->opt[SPANK_VRAM_OPT_GPUS]) {
        json_decref(req);
        say("--vram-gpus is for steps Slurm gave no GPUs; this one has %d (its --gres decides)",
            step->nstep_gpus);
        return NULL;
    }
    if (step->nstep_gpus > 0) {
        json_t *devices = json_array();
        for (int i = 0; i < step->nstep_gpus; i++)
            json_array_append_new(devices, json_integer(step->step_gpus[i]));
        json_object_set_new(req, "devices", devices);
    } else if (step->opt[SPANK_VRAM_OPT_GPUS]) {
        json_object_set_new(req, "gpus", json_integer(atoi(step->opt[SPANK_VRAM_OPT_GPUS])));
    }
    /* The Slurm ids as job labels: metrics show them as label_slurm_job_id
     * and label_slurm_step_id (docs/slurm.md). */
    char job_id[16], step_id[16];
    snprintf(job_id, sizeof job_id, "%u", step->slurm_job_id);
    snprintf(step_id, sizeof step_id, "%u", step->slurm_step_id);
    json_object_set_new(req, "labels",
                        json_pack("{s:s,s:s}", "slurm_job_id", job_id, "slurm_step_id", step_id));
    double timeout;
    if (step->opt[SPANK_VRAM_OPT_TIMEOUT] &&
        vram_parse_seconds(step->opt[SPANK_VRAM_OPT_TIMEOUT], &timeout) == 0)
        json_object_set_new(req, "timeout_s", json_real(timeout));
    return req;
}

static const char *state_of(json_t *job)
{
    const char *s = json_string_value(json_object_get(job, "state"));
    return s ? s : "";
}

/* CUDA_VISIBLE_DEVICES for the devices vramd granted: the step's own entry
 * for each (Slurm may have renumbered them), else the device index. */
static void visible_devices(const spank_vram_step_t *step, json_t *job, char *buf, size_t len)
{
    size_t at = 0, i;
    json_t *d;
    buf[0] = 0;
    json_array_foreach(json_object_get(job, "devices"), i, d)
    {
        int dev = (int)json_integer_value(d);
        char entry[64];
        snprintf(entry, sizeof entry, "%d", dev);
        for (int k = 0; k < step->nstep_gpus; k++)
            if (step->step_gpus[k] == dev) snprintf(entry, sizeof entry, "%s", step->step_cvd[k]);
        at += (size_t)snprintf(buf + at, at < len ? len - at : 0, "%s%s", i ? "," : "", entry);
    }
}

static void report(const spank_vram_step_t *step, json_t *job, const spank_vram_grant_t *g,
                   double waited)
{
    char size[32];
    vram_format_size((uint64_t)json_integer_value(json_object_get(job, "reserved_bytes")), size,
                     sizeof size);
    fprintf(
        stderr, "vram: step %u.%u admitted as vramd job %lld after %.1f s: %s per GPU on GPU %s",
        step->slurm_job_id, step->slurm_step_id, g->job_id, waited, size, g->cuda_visible_devices);
    if (json_is_true(json_object_get(job, "degraded")))
        fprintf(stderr, ", batch %lld with %lld accumulation steps (asked %lld)", g->batch_size,
                g->grad_accum, (long long)json_integer_value(json_object_get(job, "batch_size")));
    fputc('\n', stderr);
    const char *path = step->opt[SPANK_VRAM_OPT_REPORT];
    if (!path) return;
    json_t *r = json_pack("{s:I,s:I,s:I,s:s,s:O,s:O,s:O,s:O,s:O,s:f}", "vram_job_id",
                          (json_int_t)g->job_id, "slurm_job_id", (json_int_t)step->slurm_job_id,
                          "slurm_step_id", (json_int_t)step->slurm_step_id, "cuda_visible_devices",
                          g->cuda_visible_devices, "devices", json_object_get(job, "devices"),
                          "reserved_bytes", json_object_get(job, "reserved_bytes"), "batch_size",
                          json_object_get(job, "batch_size"), "granted_batch_size",
                          json_object_get(job, "granted_batch_size"), "grad_accum",
                          json_object_get(job, "grad_accum"), "waited_s", waited);
    if (!r || json_dump_file(r, path, JSON_INDENT(2)) != 0)
        say("cannot write --vram-report %s: %s", path, strerror(errno));
    json_decref(r);
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Waits while the job is queued (long polls), telling the user once. */
static int wait_queued(const spank_vram_step_t *step, json_t **job)
{
    if (strcmp(state_of(*job), "queued") != 0) return 0;
    long long id = json_integer_value(json_object_get(*job, "id"));
    char size[32], path[96];
    vram_format_size((uint64_t)json_integer_value(json_object_get(*job, "mem_bytes")), size,
                     sizeof size);
    fprintf(stderr,
            "vram: step %u.%u waits in vramd's queue for %s per GPU (vramd job %lld, "
            "position %lld)\n",
            step->slurm_job_id, step->slurm_step_id, size, id,
            (long long)json_integer_value(json_object_get(*job, "queue_position")));
    snprintf(path, sizeof path, "/v1/jobs/%lld?wait=30", id);
    double lost_since = 0, pause = 0.1;
    while (!strcmp(state_of(*job), "queued")) {
        long status;
        json_t *next;
        int rc = cli_daemon_call("GET", path, NULL, &status, &next);
        if (rc) { /* ride out a restart of vramd, as `vram run` does */
            if (!lost_since) lost_since = now();
            if (now() - lost_since > RESTART_GRACE_S)
                return say("lost vramd while waiting: %s", vram_last_error());
            struct timespec ts = {0, (long)(pause * 1e9)};
            nanosleep(&ts, NULL);
            pause = pause < 1 ? pause * 2 : 1;
            continue;
        }
        lost_since = 0;
        if (status != 200) {
            say("vramd: %s", cli_daemon_error_message(next));
            json_decref(next);
            return -1;
        }
        json_decref(*job);
        *job = next;
    }
    return 0;
}

int spank_vram_admit(const spank_vram_step_t *step, spank_vram_grant_t *g)
{
    memset(g, 0, sizeof *g);
    if (step->socket) vram_option_set(VRAM_OPT_SOCKET, step->socket);
    long long batch;
    json_t *req = request(step, &batch), *job = NULL;
    if (!req) return -1;
    double started = now();
    long status;
    int rc = cli_daemon_call("POST", "/v1/jobs", req, &status, &job);
    json_decref(req);
    if (rc == VRAM_ECONN && step->opt[SPANK_VRAM_OPT_OPTIONAL]) {
        say("warning: %s; step %u.%u runs WITHOUT a memory reservation (--vram-optional)",
            vram_last_error(), step->slurm_job_id, step->slurm_step_id);
        return 0;
    }
    if (rc) {
        rc = say("%s; step %u.%u not started", vram_last_error(), step->slurm_job_id,
                 step->slurm_step_id);
        goto out;
    }
    if (status != 201) {
        rc = say("vramd refused step %u.%u: %s", step->slurm_job_id, step->slurm_step_id,
                 cli_daemon_error_message(job));
        goto out;
    }
    if ((rc = wait_queued(step, &job)) != 0) goto out;
    if (strcmp(state_of(job), "running") != 0) {
        const char *error = json_string_value(json_object_get(job, "error"));
        rc = say("step %u.%u not started: vramd job %lld ended %s%s%s", step->slurm_job_id,
                 step->slurm_step_id, (long long)json_integer_value(json_object_get(job, "id")),
                 state_of(job), error && *error ? ": " : "", error ? error : "");
        goto out;
    }
    g->admitted = true;
    g->job_id = json_integer_value(json_object_get(job, "id"));
    visible_devices(step, job, g->cuda_visible_devices, sizeof g->cuda_visible_devices);
    if (batch > 0) {
        json_int_t granted = json_integer_value(json_object_get(job, "granted_batch_size"));
        json_int_t accum = json_integer_value(json_object_get(job, "grad_accum"));
        g->batch_size = granted > 0 ? granted : batch;
        g->grad_accum = accum > 0 ? accum : 1;
    }
    report(step, job, g, now() - started);
out:
    json_decref(job);
    return rc;
}

void spank_vram_finish(const char *socket, long long job_id, int status)
{
    char path[64];
    long http;
    json_t *reply = NULL, *body = json_pack("{s:i}", "exit_status", status);
    if (socket) vram_option_set(VRAM_OPT_SOCKET, socket);
    snprintf(path, sizeof path, "/v1/jobs/%lld/finish", job_id);
    cli_daemon_call("POST", path, body, &http, &reply); /* 409: it already ended */
    json_decref(body);
    json_decref(reply);
}
