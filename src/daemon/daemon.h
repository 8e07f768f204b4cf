/* vramd internals: the serve loop, HTTP glue and routes (shared by the vramd
 * executable and `vram serve`). */
#ifndef VRAM_DAEMON_H
#define VRAM_DAEMON_H

#include "vram.h"
#include "watch/watch.h"

#include <stdarg.h>

#define VRAMD_MAX_BODY (64 * 1024)
#define VRAMD_VERSION  VRAM_VERSION_STRING

/* Default database: VRAM_DB when set, else the state directory of the user
 * (root: /var/lib/vram). The socket: vram_endpoint(VRAM_ENDPOINT_LISTEN). */
void vramd_db_path(char *buf, size_t len);

/* Logs one line to stderr with a timestamp ("error", "warn", "info", "debug";
 * filtered by VRAM_LOG_LEVEL). Thread-safe. */
void vramd_log(const char *level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Whether lines of this level are written (to skip formatting them). */
bool vramd_log_enabled(const char *level);

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
    bool may_mutate;         /* identified: Unix-socket peer, or TCP with the token */
    const char *deny_reason; /* why not identified (may_mutate false) */
    int deny_status;         /* and the status of a refusal: 401 (token missing or
                                wrong) or 403 (no token can help) */
} vramd_request_t;

typedef struct {
    int status;
    char *body;                /* malloc'd JSON */
    const char *allow;         /* Allow header for 405 */
    const char *content_type;  /* NULL = application/json */
    const char *cache_control; /* NULL: none (the dashboard's static files set one) */
    char allow_buf[64];
    bool close; /* answer, then close the connection */
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
/* Answers with a malloc'd JSON body (taken over); NULL body = 500 (out of memory). */
void vramd_reply_text(vramd_response_t *r, int status, char *body);
/* estimate_routes.c: POST /v1/estimate and /v1/plan, the bodies of
 * vram_estimate_json / vram_plan_json without what would make vramd read a
 * file or a device for a client (docs/daemon.md). */
void vramd_estimate(vramd_state_t *d, const vramd_request_t *q, vramd_response_t *r, int64_t id);
void vramd_plan(vramd_state_t *d, const vramd_request_t *q, vramd_response_t *r, int64_t id);
/* Fills r with a JSON error {"error": {"code", "message"}} (the message is
 * escaped: it may quote client input). */
void vramd_error(vramd_response_t *r, int status, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Fills r with the error a libvram call returned (rc): its status and code
 * from VRAM_ERRORS (vram_err_http), the thread's last message or else the
 * code's. The one mapping of libvram errors to HTTP. */
void vramd_fail(vramd_response_t *r, int rc);

/* submit.c (vram submit): the spawn part of POST /v1/jobs checked and
 * serialized (malloc'd; NULL with resp filled when refused: TCP, another
 * uid than a non-root vramd's, bad fields); the starter thread of admitted
 * submitted jobs; the scheduler's event hook for it (admitted, cancelled);
 * GET /v1/jobs/{id}/output. */
#include <jansson.h>
char *vramd_submit_spec(const vramd_state_t *d, const vramd_request_t *req, vramd_response_t *resp,
                        json_t *spawn);
int vramd_submit_start(vram_sched_t *sched, const char *exit_dir);
void vramd_submit_stop(void);
void vramd_submit_event(const vram_job_t *job, const char *kind);
void vramd_job_output(vramd_state_t *d, const vramd_request_t *req, vramd_response_t *resp,
                      int64_t id);
/* watch_routes.c: the monitoring routes' handlers (rows of routes.c's table):
 * GET /metrics, /v1/watch, /v1/history, /v1/alerts, /v1/peaks, and
 * POST /v1/peaks/reset. */
void vramd_watch_metrics(vramd_state_t *d, const vramd_request_t *q, vramd_response_t *r,
                         int64_t id);
void vramd_watch_sample(vramd_state_t *d, const vramd_request_t *q, vramd_response_t *r,
                        int64_t id);
void vramd_watch_history(vramd_state_t *d, const vramd_request_t *q, vramd_response_t *r,
                         int64_t id);
void vramd_watch_alerts(vramd_state_t *d, const vramd_request_t *q, vramd_response_t *r,
                        int64_t id);
void vramd_watch_peaks(vramd_state_t *d, const vramd_request_t *q, vramd_response_t *r, int64_t id);
void vramd_watch_reset_peaks(vramd_state_t *d, const vramd_request_t *q, vramd_response_t *r,
                             int64_t id);
/* dashboard.c: GET of the dashboard's embedded files (rows of routes.c's
 * table): on TCP the file at the path, else 404. */
void vramd_dashboard(vramd_state_t *d, const vramd_request_t *q, vramd_response_t *r, int64_t id);
/* Opens and starts the watch on the daemon's devices, scheduler and database. */
int vramd_watch_start(vramd_state_t *d, vram_ctx_t *ctx, vram_sched_t *sched, const char *db);

/* http.c: listeners. Each takes an already listening socket. */
typedef struct vramd_http vramd_http_t;
int vramd_http_start(vramd_state_t *d, int fd, vramd_transport_t transport, vramd_http_t **out);
void vramd_http_stop(vramd_http_t *h);

/* guard.c: per-peer connection limits and request deadlines of a listener.
 * opened when vramd accepts a connection (it reads the peer there: uid and
 * pid on the Unix socket, address on TCP), closed by its relay before the
 * socket closes. answering(true) once a request has arrived in full,
 * (false) after its reply (the next request's deadline starts). per_peer 0
 * or timeout_s 0 turn either limit off. Thread-safe. */
typedef struct vramd_guard vramd_guard_t;
int vramd_guard_start(unsigned per_peer, double timeout_s, vramd_guard_t **out);
void vramd_guard_stop(vramd_guard_t *g);
void vramd_guard_opened(vramd_guard_t *g, int fd, void **socket_context);
void vramd_guard_closed(vramd_guard_t *g, void *socket_context);
void vramd_guard_answering(void *socket_context, bool answering);
/* The Unix-socket peer's credentials, read at accept: false when unknown
 * (TCP, no record). */
bool vramd_guard_peer_cred(void *socket_context, uid_t *uid, pid_t *pid);

/* http_head.c: checks the head of a request (the first len bytes received
 * so far): 0 when it is complete and well-formed HTTP/1.0 or 1.1 (head
 * filled), -1 when it is incomplete (no empty line yet, under
 * VRAMD_HEAD_MAX), else the HTTP status to answer (400, 413, 431, 505) with
 * `why` filled (431: over VRAMD_HEAD_MAX or VRAMD_FIELDS_MAX). */
/* Bounds of what vramd holds of a request: its head, its fields, a chunk
 * line and a chunked body's trailer. */
#define VRAMD_HEAD_MAX       (16 * 1024) /* a request head */
#define VRAMD_FIELDS_MAX     64          /* header fields of a head */
#define VRAMD_CHUNK_LINE_MAX 1024        /* a chunk-size line; a chunked body's trailer */
#define VRAMD_TRAILER_FIELDS 16          /* fields of that trailer */
/* A span of the buffer given to vramd_head_check: off, len (len -1: absent). */
typedef struct {
    size_t off;
    long len;
} vramd_span_t;
typedef struct {
    size_t head_len;  /* bytes of the head, the empty line that ends it included */
    long long length; /* Content-Length, -1 when absent */
    bool chunked;     /* Transfer-Encoding: chunked */
    int minor;        /* HTTP/1.<minor> */
    vramd_span_t method, target;
    vramd_span_t host, authorization; /* field values, trimmed; len -1 when absent */
    bool accepts_gzip;                /* Accept-Encoding names gzip (not with q=0) */
    bool close;                       /* Connection: close (or 1.0 without keep-alive) */
    bool expect_continue;             /* Expect: 100-continue */
} vramd_head_t;
int vramd_head_check(const char *buf, size_t len, vramd_head_t *head, char *why, size_t whylen);
/* The body that follows a checked head, scanned as it arrives: by its
 * Content-Length, or chunk by chunk (size lines of 1-15 hex digits with
 * optional extensions, data, CRLF, a last chunk, a trailer of header
 * fields). scan looks at the next n bytes of the connection: *used is how
 * many belong to the body and are well-formed (a line is used only whole);
 * returns 0 when the body ended with them, -1 when more is needed (keep the
 * unused bytes and call again with them first), else 400/413/431 with why
 * filled. A chunked body over VRAMD_MAX_BODY is 413; a chunk line over
 * VRAMD_CHUNK_LINE_MAX 400; a trailer over it or VRAMD_TRAILER_FIELDS 431. */
typedef struct {
    int state;
    unsigned long long left, total; /* of the body or the chunk; the chunks' sum */
    size_t trailer, fields;         /* trailer bytes and fields so far */
    char *data;      /* when set: the body's bytes are copied here (VRAMD_MAX_BODY room) */
    size_t data_len; /* bytes copied so far */
} vramd_body_t;
void vramd_body_start(vramd_body_t *b, const vramd_head_t *head, char *data);
int vramd_body_scan(vramd_body_t *b, const char *buf, size_t n, size_t *used, char *why,
                    size_t whylen);
/* The value of hex digit c, -1 when c is not one (chunk sizes, percent-escapes). */
int vramd_hex_digit(char c);

/* http.c: answers one complete request read by screen.c (its head in buf,
 * parsed into head; its body): decodes the target, checks the Host header
 * on TCP, authorizes, routes. Returns the reply's bytes (malloc'd, *len;
 * NULL when out of memory) and whether to close the connection after it. */
char *vramd_http_answer(vramd_http_t *h, void *guard_ctx, const char *buf, const vramd_head_t *head,
                        const char *body, size_t body_len, size_t *len, bool *close);
/* A reply's bytes: status line, headers and body in one malloc'd buffer
 * (*len; NULL when out of memory); the body left out for HEAD, gzipped when
 * the client accepts it and it is 1 KiB or more; Connection: close when
 * close. The one writer of replies (http.c). */
char *vramd_reply_bytes(const vramd_response_t *r, bool head_only, bool close, bool gzip,
                        size_t *len);

/* screen.c: accepts a listener's connections and serves each one in a
 * thread of its own: requests are read with http_head.c and answered by
 * vramd_http_answer(arg, ...) in order. A malformed request is answered
 * with one JSON 400/413/417/431/505 after the replies to the requests
 * before it, and the connection is closed. The guard counts and times
 * connections from their accept on; idle_timeout_s bounds the wait for a
 * client's next bytes; tcp: the listener is TCP (replies are sent without
 * Nagle's delay). */
typedef struct vramd_screen vramd_screen_t;
int vramd_screen_start(int listen_fd, bool tcp, vramd_guard_t *guard, double idle_timeout_s,
                       void *arg, vramd_screen_t **out);
void vramd_screen_stop(vramd_screen_t *s);

/* lock.c: takes an exclusive lock on path (created with mode, never through
 * a symlink) for the process's life and writes the pid into it; EBUSY names
 * the pid holding it and `what` it guards. lock_devices locks each device of
 * ctx (the state file of simulated ones), up to max fds. */
int vramd_lock(const char *path, const char *what, mode_t mode, int *out);
int vramd_lock_devices(vram_ctx_t *ctx, int *fds, int max, int *n);

/* serve.c: `vramd [options]` / `vram serve [options]`; returns the exit code. */
int vramd_main(int argc, char **argv, const char *prog);

#endif
