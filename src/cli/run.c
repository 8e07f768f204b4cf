/* vram run: reserve GPU memory through vramd, wait for a place, run COMMAND
 * on the granted GPUs (run_child.c), report how it ended, and retry with half
 * the batch after an out-of-memory failure when asked. The daemon also
 * watches this process, so the reservation ends however vram run ends. */
#include "cli/run.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static long long int_of(json_t *job, const char *key)
{
    return (long long)json_integer_value(json_object_get(job, key));
}

static const char *state_of(json_t *job)
{
    const char *s = json_string_value(json_object_get(job, "state"));
    return s ? s : "?";
}

/* Registers one attempt; 0 with *job, else an exit code. */
static int submit(const run_opts_t *o, uint32_t cap, json_t **job)
{
    json_t *req = run_request(o, cap), *reply = NULL;
    json_object_set_new(req, "pid", json_integer(getpid()));
    long status;
    int rc = cli_daemon_call_patiently(o->cmd, o->quiet, "POST", "/v1/jobs", req, &status, &reply);
    json_decref(req);
    if (rc) return cli_runtime_error(o->cmd, "%s", vram_last_error());
    if (status != 201) {
        fprintf(stderr, "vram %s: vramd refused the job: %s\n", o->cmd,
                cli_daemon_error_message(reply));
        rc = status == 400 || status == 422 ? CLI_USAGE : CLI_RUNTIME;
        json_decref(reply);
        return rc;
    }
    *job = reply;
    return 0;
}

static void cancel(long long id)
{
    char path[64];
    long status;
    json_t *reply = NULL;
    snprintf(path, sizeof path, "/v1/jobs/%lld", id);
    cli_daemon_call("DELETE", path, NULL, &status, &reply);
    json_decref(reply);
}

/* Exit code of a job that ended while queued. */
static int queued_end(const run_opts_t *o, json_t *job)
{
    const char *st = state_of(job), *err = json_string_value(json_object_get(job, "error"));
    fprintf(stderr, "vram %s: job %lld %s%s%s\n", o->cmd, int_of(job, "id"), st,
            err && *err ? ": " : "", err ? err : "");
    return !strcmp(st, "timeout") ? CLI_QUEUE_TIMEOUT : CLI_RUNTIME;
}

/* Waits until the job leaves the queue; 0 when running, else an exit code. */
static int wait_for_place(const run_opts_t *o, json_t **job)
{
    long long id = int_of(*job, "id"), last_pos = -1;
    char path[96];
    snprintf(path, sizeof path, "/v1/jobs/%lld?wait=1", id);
    for (;;) {
        if (!strcmp(state_of(*job), "running")) return 0;
        if (strcmp(state_of(*job), "queued")) return queued_end(o, *job);
        long long pos = int_of(*job, "queue_position");
        if (pos != last_pos) {
            char size[32];
            vram_format_size((uint64_t)int_of(*job, "mem_bytes"), size, sizeof size);
            run_say(o, "job %lld queued at position %lld (needs %s on %lld GPU(s))", id, pos, size,
                    int_of(*job, "gpus"));
            last_pos = pos;
        }
        int sig = run_signal_received();
        if (sig) {
            cancel(id);
            run_say(o, "job %lld cancelled while queued", id);
            return 128 + sig;
        }
        long status;
        json_t *reply;
        int rc = cli_daemon_call_patiently(o->cmd, o->quiet, "GET", path, NULL, &status, &reply);
        if (rc) return cli_runtime_error(o->cmd, "%s", vram_last_error());
        if (status != 200) {
            rc = cli_daemon_fail(o->cmd, 0, status, reply);
            json_decref(reply);
            return rc;
        }
        json_decref(*job);
        *job = reply;
    }
}

/* Tells vramd how COMMAND ended: interrupted or cancelled jobs are
 * `cancelled`, the others `done`/`failed` with the status; an out-of-memory
 * end says so in the fields "reason": "oom" and "retry_batch" (the watch
 * counts both from them), and in words for people in "error". */
static void report_end(const run_opts_t *o, long long id, const run_outcome_t *r, uint32_t retry)
{
    if (r->interrupted || r->cancelled) {
        if (!r->cancelled) cancel(id);
        return;
    }
    char path[80], why[160] = "", note[48] = "";
    snprintf(path, sizeof path, "/v1/jobs/%lld/finish", id);
    if (retry) snprintf(note, sizeof note, "; retrying with batch %u", retry);
    /* The message may be cut, the note never. */
    int room = (int)(sizeof why - strlen(note));
    if (r->oom)
        snprintf(why, (size_t)room, "out of memory: %s", r->oom);
    else if (r->oom_status)
        snprintf(why, (size_t)room, "out of memory: exit status %d (--oom-exit-code)", r->code);
    if (*why) strcat(why, note);
    bool oom = r->oom || r->oom_status;
    json_t *body = json_pack("{s:i,s:s,s:s,s:i}", "exit_status", r->code, "error", why, "reason",
                             oom ? "oom" : "exit", "retry_batch", oom ? (int)retry : 0),
           *reply = NULL;
    long status;
    /* 409: the daemon already ended it (it saw this process die) */
    if (cli_daemon_call_patiently(o->cmd, o->quiet, "POST", path, body, &status, &reply))
        run_say(o, "could not report the end of job %lld: %s", id, vram_last_error());
    json_decref(body);
    json_decref(reply);
}

/* The micro-batch for the next attempt after an out-of-memory end, 0 = stop. */
static uint32_t next_cap(const run_opts_t *o, json_t *job, const run_outcome_t *r, int attempt)
{
    if (!(r->oom || r->oom_status) || r->code == 0) return 0;
    uint32_t had = (uint32_t)int_of(job, "granted_batch_size");
    if (!had) had = o->batch;
    if (attempt >= o->retry_oom || r->interrupted || r->cancelled) {
        run_say(o, "COMMAND ran out of memory (exit status %d)", r->code);
        return 0;
    }
    uint32_t lowest = o->min_batch ? o->min_batch : 1;
    /* half of it, or the largest batch below that the table knows */
    uint32_t next = run_batch_at_most(o, had / 2);
    if (next < lowest) {
        run_say(o, "COMMAND ran out of memory with batch %u; half of it is below %u", had, lowest);
        return 0;
    }
    run_say(o, "out of memory (%s): retrying with batch %u (retry %d of %d)",
            r->oom ? r->oom : "exit status", next, attempt + 1, o->retry_oom);
    return next;
}

static int exit_code(const run_outcome_t *r)
{
    return r->interrupted ? 128 + r->interrupted : r->code;
}

/* One attempt: submit, queue, run, report. *cap is the next attempt's. */
static int attempt(const run_opts_t *o, int n, uint32_t *cap)
{
    json_t *job = NULL;
    int rc = submit(o, *cap, &job);
    if (!rc) rc = wait_for_place(o, &job);
    if (rc) {
        *cap = 0;
        goto out;
    }
    int sig = run_signal_received();
    if (sig) { /* interrupted between admission and start: nothing to run */
        cancel(int_of(job, "id"));
        *cap = 0;
        rc = 128 + sig;
        goto out;
    }
    run_outcome_t r;
    if ((rc = run_command(o, job, &r))) {
        cancel(int_of(job, "id"));
        *cap = 0;
        goto out;
    }
    *cap = next_cap(o, job, &r, n);
    report_end(o, int_of(job, "id"), &r, *cap);
    rc = exit_code(&r);
out:
    json_decref(job);
    return rc;
}

int vram_cli_run(int argc, char **argv)
{
    run_opts_t o;
    int code = run_parse("run", argc, argv, &o);
    if (code) goto out;
    if (run_signals_install() != 0) {
        code = cli_runtime_error("run", "cannot set up signals");
        goto out;
    }
    uint32_t cap = 0;
    for (int n = 0;; n++) {
        code = attempt(&o, n, &cap);
        if (!cap) break;
    }
out:
    run_opts_free(&o);
    return code < 0 ? CLI_OK : code; /* -1: --help was printed */
}
