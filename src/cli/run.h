/* vram run and vram submit: their shared options, the request they send,
 * and (run) the supervision of COMMAND. */
#ifndef VRAM_CLI_RUN_H
#define VRAM_CLI_RUN_H

#include "cli/daemon_client.h"
#include "sched/sched.h"

typedef struct {
    const char *cmd; /* "run" or "submit" */
    json_t *request; /* POST /v1/jobs body without the batch fields */
    uint32_t batch, min_batch;
    uint64_t mem;
    /* The memory at batches up to `batch` (increasing, the last at batch:
     * mem), from --mem-at or the estimator; ntable 0 = none (the batch is
     * never lowered below a retry's cap). */
    vram_batch_bytes_t table[VRAM_JOB_MAX_BATCHES];
    int ntable;
    int retry_oom, oom_exit_code; /* oom_exit_code -1 = none */
    double grace_s;               /* SIGTERM -> SIGKILL of the job's group */
    bool quiet, parsable;
    const char *output, *error; /* submit: file patterns (%j) */
    char **command;             /* NULL-terminated, inside argv_copy */
    char **argv_copy;
} run_opts_t;

/* Parses `vram run|submit [options] -- COMMAND...` into o (cmd is "run" or
 * "submit"). Returns 0; -1 after printing --help; CLI_USAGE after printing
 * the error (unknown or misspelled flags, sizes without units, flags that
 * contradict each other or do not apply to cmd, naming both). */
int run_parse(const char *cmd, int argc, char **argv, run_opts_t *o);
void run_opts_free(run_opts_t *o);
/* The request for one attempt: cap > 0 limits the micro-batch (a retry). */
json_t *run_request(const run_opts_t *o, uint32_t cap);
/* The largest batch at most b that a retry may ask for: one of the table's
 * (0 when none is), or b itself without a table. */
uint32_t run_batch_at_most(const run_opts_t *o, uint32_t b);
/* "vram CMD: ..." on stderr unless --quiet. */
void run_say(const run_opts_t *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* How COMMAND ended. */
typedef struct {
    int code;        /* exit status, 128+signal when killed */
    const char *oom; /* the out-of-memory message seen on stderr, or NULL */
    bool oom_status; /* the status was --oom-exit-code */
    int interrupted; /* vram run got this signal (forwarded), or SIGINT from the terminal */
    bool cancelled;  /* cancelled through vramd while running */
} run_outcome_t;

/* Signals vram run handles (INT, TERM, HUP, CHLD, WINCH) go to a self-pipe. */
int run_signals_install(void);
/* The first of INT, TERM, HUP received so far, 0 if none. */
int run_signal_received(void);
/* Runs COMMAND for the running job (JSON from vramd) and supervises it. */
int run_command(const run_opts_t *o, json_t *job, run_outcome_t *out);

#endif
