/* vramd internals: the serve loop, HTTP glue and routes (shared by the vramd
 * executable and `vram serve`). */
#ifndef VRAM_DAEMON_H
#define VRAM_DAEMON_H

#include "vram.h"

#include <stdarg.h>

#define VRAMD_MAX_BODY (64 * 1024)
#define VRAMD_VERSION  VRAM_VERSION_STRING

/* Default paths: VRAM_SOCKET / VRAM_DB when set, else the runtime or state
 * directory of the user (root: /run/vram, /var/lib/vram). */
void vramd_socket_path(char *buf, size_t len);
void vramd_db_path(char *buf, size_t len);

/* Logs one line to stderr with a timestamp ("error", "warn", "info", "debug";
 * filtered by VRAM_LOG_LEVEL). Thread-safe. */
void vramd_log(const char *level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

typedef enum { VRAMD_UNIX, VRAMD_TCP } vramd_transport_t;

/* One parsed request, as the routes see it. */
typedef struct {
    const char *method;
    const char *path;                                 /* without the query */
    const char *(*query)(void *arg, const char *key); /* NULL when absent */
    void *query_arg;
    const char *body;
    size_t body_len;
    bool body_too_large;
    vramd_transport_t transport;
    uid_t uid;               /* peer uid (Unix socket) */
    pid_t peer_pid;          /* peer pid (Unix socket), 0 = unknown */
    bool may_mutate;         /* Unix socket, or TCP with the token */
    const char *deny_reason; /* why mutations are refused (TCP) */
} vramd_request_t;

typedef struct {
    int status;
    char *body;        /* malloc'd JSON */
    const char *allow; /* Allow header for 405 */
    const char *content_type; /* NULL = application/json */
} vramd_response_t;

typedef struct {
    vram_sched_t *sched;
    double started_at;
    char socket_path[512];
    char tcp_address[96]; /* "127.0.0.1:7878", "" when none */
    uid_t daemon_uid;
    vram_watch_t *watch; /* monitoring (watch_routes.c); NULL until started */
} vramd_state_t;

/* routes.c: answers one request; always fills resp (status and body). */
void vramd_route(vramd_state_t *d, const vramd_request_t *req, vramd_response_t *resp);

/* submit.c (vram submit): the spawn part of POST /v1/jobs checked and
 * serialized (malloc'd; NULL with resp filled when refused: TCP, another
 * uid than a non-root vramd's, bad fields); the starter thread of admitted
 * submitted jobs; the scheduler's event hook for it (admitted, cancelled);
 * GET /v1/jobs/{id}/output. */
#include <jansson.h>
char *vramd_submit_spec(const vramd_state_t *d, const vramd_request_t *req,
                        vramd_response_t *resp, json_t *spawn);
int vramd_submit_start(vram_sched_t *sched);
void vramd_submit_stop(void);
void vramd_submit_event(const vram_job_t *job, const char *kind);
void vramd_job_output(vramd_state_t *d, const vramd_request_t *req, vramd_response_t *resp,
                      int64_t id);
/* watch_routes.c, dashboard.c: monitoring routes (/metrics, /v1/history,
 * /v1/alerts, /v1/peaks, /v1/watch, the dashboard). true when the request was
 * theirs and resp is filled. */
bool vramd_watch_route(vramd_state_t *d, const vramd_request_t *req, vramd_response_t *resp);
bool vramd_dashboard_route(vramd_state_t *d, const vramd_request_t *req, vramd_response_t *resp);
/* Opens and starts the watch on the daemon's devices, scheduler and database. */
int vramd_watch_start(vramd_state_t *d, vram_ctx_t *ctx, vram_sched_t *sched, const char *db);

/* http.c: listeners. Each takes an already listening socket. */
typedef struct vramd_http vramd_http_t;
int vramd_http_start(vramd_state_t *d, int fd, vramd_transport_t transport, vramd_http_t **out);
void vramd_http_stop(vramd_http_t *h);

/* serve.c: `vramd [options]` / `vram serve [options]`; returns the exit code. */
int vramd_main(int argc, char **argv, const char *prog);

#endif
