/* libmicrohttpd glue: one thread per connection (long polls block only their
 * own client), bodies gathered up to 64 KiB, peer credentials from the Unix
 * socket (read at accept: libmicrohttpd's end is a socket pair to the relay
 * in screen.c), and the token rule for TCP. */
#include "daemon/daemon.h"

#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

struct vramd_http {
    vramd_screen_t *screen;
    vramd_guard_t *guard;
    vramd_state_t *d;
    vramd_transport_t transport;
};

/* One connection's libmicrohttpd: a daemon of its own without threads,
 * run by the connection's relay thread (screen.c) whenever it has handed
 * over bytes, so a request costs no thread switch beyond the relay's own. */
struct vramd_engine {
    vramd_http_t *h;
    struct MHD_Daemon *mhd;
    void *guard_ctx;         /* the guard's record of the connection (the relay's) */
    unsigned long completed; /* requests answered in full */
    bool closed;             /* libmicrohttpd closed the connection */
};

/* Seconds an idle connection stays open (libmicrohttpd's timeout). */
#define MHD_IDLE_TIMEOUT_S 300u

typedef struct {
    char *buf;
    size_t len;
    bool too_large;
} body_t;

/* libmicrohttpd's own messages (a client that closed early, a malformed
 * request) go to vramd's log at debug level, escaped like every line. */
static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    /* Connections added by vramd are not known to be Unix-domain, so 0.9.75
     * reports a failed TCP_NODELAY/TCP_CORK on every reply: not formatted
     * unless someone reads debug lines. */
    if (!vramd_log_enabled("debug")) return;
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    msg[strcspn(msg, "\n")] = 0;
    vramd_log("debug", "libmicrohttpd: %s", msg);
}

/* Percent-decoding of the path and query values in place. A %00 becomes DEL
 * (0x7f) instead of a NUL, which would cut the string and route
 * "/v1/jobs/1%00/x" as "/v1/jobs/1"; the router refuses control characters
 * with a 400. */
static size_t unescape(void *cls, struct MHD_Connection *c, char *s)
{
    (void)cls;
    (void)c;
    char *out = s;
    for (const char *p = s; *p; p++) {
        int hi, lo;
        if (*p == '%' && (hi = vramd_hex_digit(p[1])) >= 0 && (lo = vramd_hex_digit(p[2])) >= 0) {
            char b = (char)(hi * 16 + lo);
            *out++ = b ? b : 0x7f;
            p += 2;
        } else {
            *out++ = *p;
        }
    }
    *out = 0;
    return (size_t)(out - s);
}

static const char *query_value(void *arg, const char *key)
{
    return MHD_lookup_connection_value(arg, MHD_GET_ARGUMENT_KIND, key);
}

/* Constant-time comparison, so the token cannot be guessed byte by byte. */
static bool same_secret(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    unsigned char diff = (unsigned char)(la != lb);
    for (size_t i = 0; i < la; i++)
        diff |= (unsigned char)(a[i] ^ b[i % (lb ? lb : 1)]);
    return diff == 0;
}

static void authorize(vramd_engine_t *e, struct MHD_Connection *c, vramd_request_t *q)
{
    if (q->transport == VRAMD_UNIX) {
        if (vramd_guard_peer_cred(e->guard_ctx, &q->uid, &q->peer_pid))
            q->may_mutate = true;
        else
            q->deny_reason = "cannot read the peer credentials of this connection";
        return;
    }
    const char *token = vram_option_str(VRAM_OPT_TOKEN);
    const char *auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (!*token) {
        q->deny_reason = "TCP is read-only: use the Unix socket, or start vramd with VRAM_TOKEN "
                         "and send \"Authorization: Bearer TOKEN\"";
    } else if (!auth || strncmp(auth, "Bearer ", 7) || !same_secret(auth + 7, token)) {
        q->deny_reason = "wrong or missing token: send \"Authorization: Bearer TOKEN\"";
    } else {
        q->may_mutate = true;
    }
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_size, void **con_cls)
{
    vramd_engine_t *e = cls;
    vramd_http_t *h = e->h;
    (void)version; /* HTTP/1.0 and 1.1 alike; the screen refused others */
    body_t *b = *con_cls;
    if (!b) {
        b = calloc(1, sizeof *b);
        if (!b) return MHD_NO;
        *con_cls = b; /* a declared length over the limit never gets here (the screen's 413) */
        return MHD_YES;
    }
    if (*upload_size) {
        /* Over the limit while streaming (the screen bounds bodies first;
         * this is the last line): keep reading (and dropping) so the 413
         * reaches the client. */
        if (!b->too_large && b->len + *upload_size <= VRAMD_MAX_BODY) {
            char *nb = realloc(b->buf, b->len + *upload_size + 1);
            if (!nb) return MHD_NO;
            memcpy(nb + b->len, upload_data, *upload_size);
            b->buf = nb;
            b->len += *upload_size;
        } else {
            b->too_large = true;
        }
        *upload_size = 0;
        return MHD_YES;
    }
    vramd_request_t q = {
        .method = method,
        .path = url,
        .query = query_value,
        .query_arg = c,
        .body = b->buf,
        .body_len = b->len,
        .body_too_large = b->too_large,
        .transport = h->transport,
    };
    authorize(e, c, &q);
    vramd_guard_answering(e->guard_ctx, true);
    vramd_response_t r = {0};
    /* A raw NUL or other control byte in the request line never gets here:
     * the screen refuses it (http_head.c). */
    vramd_route(h->d, &q, &r);
    size_t len = strlen(r.body);
    struct MHD_Response *resp = MHD_create_response_from_buffer(len, r.body, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(r.body);
        return MHD_NO;
    }
    MHD_add_response_header(resp, "Content-Type",
                            r.content_type ? r.content_type : "application/json");
    if (r.allow) MHD_add_response_header(resp, "Allow", r.allow);
    if (r.cache_control) MHD_add_response_header(resp, "Cache-Control", r.cache_control);
    if (r.close) MHD_add_response_header(resp, "Connection", "close");
    if (r.status >= 400 && strcmp(method, "GET"))
        vramd_log("debug", "%s %s -> %d", method, url, r.status);
    enum MHD_Result ret = MHD_queue_response(c, (unsigned)r.status, resp);
    MHD_destroy_response(resp);
    return ret;
}

static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe)
{
    vramd_engine_t *e = cls;
    (void)c;
    (void)socket_context;
    if (toe == MHD_CONNECTION_NOTIFY_CLOSED) e->closed = true;
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    vramd_engine_t *e = cls;
    (void)c;
    if (toe == MHD_REQUEST_TERMINATED_COMPLETED_OK) e->completed++;
    vramd_guard_answering(e->guard_ctx, false);
    body_t *b = *con_cls;
    if (b) {
        free(b->buf);
        free(b);
    }
    *con_cls = NULL;
}

vramd_engine_t *vramd_engine_open(void *arg, int fd, void *guard_ctx)
{
    vramd_engine_t *e = calloc(1, sizeof *e);
    if (!e) goto fail;
    e->h = arg;
    e->guard_ctx = guard_ctx;
    /* No listening socket, no thread: the relay runs it (vramd_engine_run). */
    unsigned flags = MHD_USE_NO_LISTEN_SOCKET | MHD_USE_EPOLL | MHD_USE_ERROR_LOG;
    e->mhd = MHD_start_daemon(flags, 0, NULL, NULL, on_request, e,               //
                              MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,         //
                              MHD_OPTION_NOTIFY_COMPLETED, on_completed, e,      //
                              MHD_OPTION_NOTIFY_CONNECTION, on_connection, e,    //
                              MHD_OPTION_UNESCAPE_CALLBACK, unescape, NULL,      //
                              MHD_OPTION_CONNECTION_TIMEOUT, MHD_IDLE_TIMEOUT_S, //
                              MHD_OPTION_END);
    if (!e->mhd) goto fail;
    /* libmicrohttpd's peer is the relay, whatever the client: vramd reads
     * the client from the guard's record, never from libmicrohttpd. */
    struct sockaddr_un un = {.sun_family = AF_UNIX};
    if (MHD_add_connection(e->mhd, fd, (struct sockaddr *)&un, sizeof un) != MHD_YES) {
        vramd_log("warn", "libmicrohttpd refused a connection: %s", strerror(errno));
        MHD_stop_daemon(e->mhd); /* fd was closed by libmicrohttpd */
        free(e);
        return NULL;
    }
    return e;
fail:
    vramd_log("warn", "cannot start libmicrohttpd for a connection");
    free(e);
    close(fd);
    return NULL;
}

long vramd_engine_run(vramd_engine_t *e, int wait_ms)
{
    if (MHD_run_wait(e->mhd, wait_ms) != MHD_YES || e->closed) return -1;
    return (long)e->completed;
}

void vramd_engine_close(vramd_engine_t *e)
{
    if (!e) return;
    MHD_stop_daemon(e->mhd); /* closes its socket; a request it held is dropped */
    free(e);
}

int vramd_http_start(vramd_state_t *d, int fd, vramd_transport_t transport, vramd_http_t **out)
{
    *out = NULL;
    vramd_http_t *h = calloc(1, sizeof *h);
    if (!h) return vram_fail(VRAM_ENOMEM, "out of memory");
    h->d = d;
    h->transport = transport;
    long long per_peer = 0;
    double timeout = 0;
    int rc = vram_option_int(VRAM_OPT_MAX_CONNECTIONS_PER_PEER, &per_peer);
    if (rc == 0) rc = vram_option_double(VRAM_OPT_REQUEST_TIMEOUT, &timeout);
    if (rc == 0 && (per_peer < 0 || per_peer > 100000 || timeout < 0))
        rc = vram_fail(VRAM_EINVAL,
                       "VRAM_MAX_CONNECTIONS_PER_PEER / VRAM_REQUEST_TIMEOUT out of range");
    if (rc == 0) rc = vramd_guard_start((unsigned)per_peer, timeout, &h->guard);
    if (rc) {
        free(h);
        return rc;
    }
    /* vramd accepts and relays (screen.c); each connection has its own
     * libmicrohttpd (vramd_engine_open). */
    if (vramd_screen_start(fd, transport == VRAMD_TCP, h->guard, MHD_IDLE_TIMEOUT_S, h,
                           &h->screen) != 0) {
        vramd_guard_stop(h->guard);
        free(h);
        return VRAM_EIO;
    }
    *out = h;
    return 0;
}

void vramd_http_stop(vramd_http_t *h)
{
    if (!h) return;
    vramd_screen_stop(h->screen);
    vramd_guard_stop(h->guard);
    free(h);
}
