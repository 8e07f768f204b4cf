/* One request in, one reply out: vramd's HTTP layer above its parser
 * (http_head.c) and its connections (screen.c). It decodes the target into
 * a path and query parameters, checks the Host header, decides who the
 * caller is (peer credentials on the Unix socket, the token on TCP), runs
 * the route and writes the reply. */
#include "daemon/daemon.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <zlib.h>

struct vramd_http {
    vramd_screen_t *screen;
    vramd_guard_t *guard;
    vramd_state_t *d;
    vramd_transport_t transport;
};

/* Seconds an idle connection stays open. */
#define IDLE_TIMEOUT_S 300u
/* Query parameters of one request: more is refused (400), not truncated. */
#define QUERY_MAX 32

typedef struct {
    char *key, *value;
} param_t;

typedef struct {
    param_t params[QUERY_MAX];
    int count;
} query_t;

/* Percent-decoding in place ('+' is a space in the query only). A %00
 * becomes DEL (0x7f) instead of a NUL, which would cut the string and
 * route "/v1/jobs/1%00/x" as "/v1/jobs/1"; the router refuses control
 * characters with a 400. */
static void unescape(char *s, bool plus)
{
    char *out = s;
    for (const char *p = s; *p; p++) {
        int hi, lo;
        if (*p == '%' && (hi = vramd_hex_digit(p[1])) >= 0 && (lo = vramd_hex_digit(p[2])) >= 0) {
            char b = (char)(hi * 16 + lo);
            *out++ = b ? b : 0x7f;
            p += 2;
        } else {
            *out++ = plus && *p == '+' ? ' ' : *p;
        }
    }
    *out = 0;
}

/* Splits "k=v&k2=v2" (in place) into decoded parameters; false when there
 * are more than QUERY_MAX. */
static bool parse_query(char *s, query_t *q)
{
    q->count = 0;
    for (char *p = s; p && *p;) {
        char *amp = strchr(p, '&');
        if (amp) *amp = 0;
        if (*p) {
            if (q->count == QUERY_MAX) return false;
            char *eq = strchr(p, '=');
            if (eq) *eq = 0;
            unescape(p, true);
            char *v = eq ? eq + 1 : p + strlen(p);
            unescape(v, true);
            q->params[q->count++] = (param_t){p, v};
        }
        p = amp ? amp + 1 : NULL;
    }
    return true;
}

static const char *query_value(void *arg, const char *key)
{
    const query_t *q = arg;
    for (int i = 0; i < q->count; i++)
        if (!strcmp(q->params[i].key, key)) return q->params[i].value;
    return NULL;
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

static void authorize(void *guard_ctx, const char *auth, vramd_request_t *q)
{
    q->deny_status = 403;
    if (q->transport == VRAMD_UNIX) {
        if (vramd_guard_peer_cred(guard_ctx, &q->uid, &q->peer_pid))
            q->may_mutate = true;
        else
            q->deny_reason = "cannot read the peer credentials of this connection";
        return;
    }
    const char *token = vram_option_str(VRAM_OPT_TOKEN);
    if (!*token) {
        q->deny_reason = "vramd has no token (VRAM_TOKEN or VRAM_TOKEN_FILE), so TCP serves "
                         "unidentified callers only: use the Unix socket";
    } else if (!auth) {
        q->deny_status = 401;
        q->deny_reason = "missing token: send \"Authorization: Bearer TOKEN\"";
    } else if (strncmp(auth, "Bearer ", 7) || !same_secret(auth + 7, token)) {
        q->deny_status = 401;
        q->deny_reason = "wrong token: send \"Authorization: Bearer TOKEN\"";
    } else {
        q->may_mutate = true;
    }
}

/* Whether host is name (n bytes) with the listener's port, or name itself
 * when name carries a port of its own. */
static bool host_is(const char *host, const char *name, size_t n, const char *port)
{
    size_t hl = strlen(host), pl = strlen(port);
    if (memchr(name, ':', n)) return hl == n && !strncasecmp(host, name, n);
    return hl == n + 1 + pl && !strncasecmp(host, name, n) && host[n] == ':' &&
           !strcmp(host + n + 1, port);
}

/* On TCP the Host header must name the listener (DNS rebinding: a page of
 * attacker.example resolving to 127.0.0.1 must not read vramd): the
 * listener's own address or localhost, with its port, or a name of
 * LISTEN_HOSTS (vramd behind a relay or proxy). */
static bool host_names_listener(const vramd_state_t *d, const char *host)
{
    const char *colon = strrchr(d->tcp_address, ':');
    if (!colon || !host) return false;
    const char *port = colon + 1;
    if (host_is(host, d->tcp_address, (size_t)(colon - d->tcp_address), port) ||
        host_is(host, "localhost", 9, port))
        return true;
    for (const char *p = vram_option_str(VRAM_OPT_LISTEN_HOSTS); *p;) {
        size_t n = strcspn(p, ",");
        while (n && (*p == ' ')) {
            p++;
            n--;
        }
        size_t m = n;
        while (m && p[m - 1] == ' ')
            m--;
        if (m && host_is(host, p, m, port)) return true;
        p += n;
        if (*p == ',') p++;
    }
    return false;
}

static const char *status_text(int status)
{
    switch (status) {
    case 100:
        return "Continue";
    case 200:
        return "OK";
    case 201:
        return "Created";
    case 202:
        return "Accepted";
    case 204:
        return "No Content";
    case 304:
        return "Not Modified";
    case 400:
        return "Bad Request";
    case 401:
        return "Unauthorized";
    case 403:
        return "Forbidden";
    case 404:
        return "Not Found";
    case 405:
        return "Method Not Allowed";
    case 409:
        return "Conflict";
    case 410:
        return "Gone";
    case 413:
        return "Content Too Large";
    case 417:
        return "Expectation Failed";
    case 421:
        return "Misdirected Request";
    case 422:
        return "Unprocessable Content";
    case 429:
        return "Too Many Requests";
    case 431:
        return "Request Header Fields Too Large";
    case 500:
        return "Internal Server Error";
    case 501:
        return "Not Implemented";
    case 503:
        return "Service Unavailable";
    case 504:
        return "Gateway Timeout";
    case 505:
        return "HTTP Version Not Supported";
    case 507:
        return "Insufficient Storage";
    default:
        return "Status";
    }
}

/* Replies smaller than this go out as they are: gzip's header and a
 * round of deflate would cost more than the bytes they save. */
#define GZIP_MIN 1024

/* body gzipped into a malloc'd buffer (*out_len), or NULL (then sent plain). */
static char *gzipped(const char *body, size_t len, size_t *out_len)
{
    z_stream z = {0};
    if (deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
        return NULL;
    size_t cap = deflateBound(&z, len);
    char *out = malloc(cap);
    if (out) {
        z.next_in = (Bytef *)body;
        z.avail_in = (uInt)len;
        z.next_out = (Bytef *)out;
        z.avail_out = (uInt)cap;
        if (deflate(&z, Z_FINISH) != Z_STREAM_END) {
            free(out);
            out = NULL;
        } else {
            *out_len = z.total_out;
        }
    }
    deflateEnd(&z);
    return out;
}

char *vramd_reply_bytes(const vramd_response_t *r, bool head_only, bool close, bool gzip,
                        size_t *len)
{
    size_t blen = r->body ? strlen(r->body) : 0;
    const char *body = r->body;
    char *packed = NULL;
    if (gzip && blen >= GZIP_MIN && (packed = gzipped(r->body, blen, &blen)) != NULL) body = packed;
    char head[512];
    int hl = snprintf(
        head, sizeof head,
        "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n%s%s%s%s%s%s%s%s%s"
        "\r\n",
        r->status, status_text(r->status), r->content_type ? r->content_type : "application/json",
        blen, packed ? "Content-Encoding: gzip\r\nVary: Accept-Encoding\r\n" : "",
        /* RFC 9110 §15.5.2: a 401 names its scheme (a browser asks no
         * password for Bearer) */
        r->status == 401 ? "WWW-Authenticate: Bearer realm=\"vramd\"\r\n" : "",
        r->allow ? "Allow: " : "", r->allow ? r->allow : "", r->allow ? "\r\n" : "",
        r->cache_control ? "Cache-Control: " : "", r->cache_control ? r->cache_control : "",
        r->cache_control ? "\r\n" : "", close ? "Connection: close\r\n" : "");
    char *out = NULL;
    size_t total = (size_t)hl + (head_only ? 0 : blen);
    if (hl >= 0 && (size_t)hl < sizeof head && (out = malloc(total)) != NULL) {
        memcpy(out, head, (size_t)hl);
        if (!head_only && blen) memcpy(out + hl, body, blen);
        *len = total;
    }
    free(packed);
    return out;
}

char *vramd_http_answer(vramd_http_t *h, void *guard_ctx, const char *buf, const vramd_head_t *head,
                        const char *body, size_t body_len, size_t *len, bool *close)
{
    /* Copies: the head's bytes stay the caller's. */
    char method[32] = "", host[256], auth[512], *target = NULL;
    query_t query;
    vramd_response_t r = {0};
    vramd_request_t q = {.query = query_value,
                         .query_arg = &query,
                         .body = body,
                         .body_len = body_len,
                         .transport = h->transport};
    *close = head->close;
#define COPY_SPAN(dst, span)                                                                       \
    (span.len >= 0 && (size_t)span.len < sizeof dst                                                \
         ? (memcpy(dst, buf + span.off, (size_t)span.len), dst[span.len] = 0, true)                \
         : false)
    bool have_host = COPY_SPAN(host, head->host);
    bool have_auth = COPY_SPAN(auth, head->authorization);
    if (!COPY_SPAN(method, head->method)) {
        vramd_error(&r, 501, "not_implemented", "unknown method");
        goto reply;
    }
#undef COPY_SPAN
    target = strndup(buf + head->target.off, (size_t)head->target.len);
    if (!target) {
        vramd_error(&r, 500, "internal", "out of memory");
        goto reply;
    }
    char *qs = strchr(target, '?');
    if (qs) *qs++ = 0;
    unescape(target, false);
    if (!parse_query(qs, &query)) {
        vramd_error(&r, 400, "bad_request", "more than %d query parameters", QUERY_MAX);
        goto reply;
    }
    q.method = method;
    q.path = target;
    if (h->transport == VRAMD_TCP && !host_names_listener(h->d, have_host ? host : NULL)) {
        vramd_error(&r, 421, "misdirected_request",
                    "the Host header must name this listener (%s or localhost with its port)",
                    h->d->tcp_address);
        goto reply;
    }
    authorize(guard_ctx, have_auth ? auth : NULL, &q);
    /* A raw NUL or other control byte in the request line never gets here:
     * the parser refuses it (http_head.c). */
    vramd_route(h->d, &q, &r);
    if (r.status >= 400 && strcmp(method, "GET"))
        vramd_log("debug", "%s %s -> %d", method, target, r.status);
reply:
    *close = *close || r.close;
    char *out = vramd_reply_bytes(&r, !strcmp(method, "HEAD"), *close, head->accepts_gzip, len);
    if (!out) *close = true;
    free(r.body);
    free(target);
    return out;
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
    /* Every local user reaches TCP from 127.0.0.1: a limit per address
     * would let one of them lock the others out. TCP has its own cap (the
     * listener's, screen.c) and the request deadlines; per-peer limits are
     * the Unix socket's, where the peer is a uid. */
    if (transport == VRAMD_TCP) per_peer = 0;
    if (rc == 0) rc = vramd_guard_start((unsigned)per_peer, timeout, &h->guard);
    if (rc) {
        free(h);
        return rc;
    }
    if (vramd_screen_start(fd, transport == VRAMD_TCP, h->guard, IDLE_TIMEOUT_S, h, &h->screen) !=
        0) {
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
