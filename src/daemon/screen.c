/* The front door of a listener: vramd accepts each connection itself, reads
 * (without consuming) the head of its first request, and hands it to
 * libmicrohttpd only when that head is well-formed HTTP/1.x. A malformed
 * head gets a JSON error and a close from vramd: libmicrohttpd 0.9.75
 * answers such heads in HTML, and for a bad Content-Length it writes its
 * status line and headers twice. Later requests of a kept-alive connection
 * are parsed by libmicrohttpd alone (docs/daemon.md). One short-lived thread
 * per connection being screened; the guard limits them per peer and
 * enforces the request deadline while they wait. */
#include "daemon/daemon.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* libmicrohttpd's default per-connection memory (32 KiB) holds the head. */
#define HEAD_MAX (32 * 1024)
#define SCREEN_MAX 512 /* connections being screened at once, as MHD's limit */

struct vramd_screen {
    int listen_fd;
    int wake[2]; /* stop: wakes the accept loop */
    vramd_accept_fn accept_fn;
    void *accept_arg;
    vramd_guard_t *guard;
    double idle_timeout_s;
    pthread_t acceptor;
    pthread_mutex_t lock;
    pthread_cond_t idle; /* screening reached 0 */
    int fds[SCREEN_MAX]; /* being screened (-1 = free), shut down on stop */
    int screening;
    atomic_bool stopping;
};

typedef struct {
    vramd_screen_t *s;
    int slot;
    void *guard_ctx; /* the guard's record of this connection */
    struct sockaddr_storage addr;
    socklen_t addrlen;
} job_t;

static bool tchar(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           (c && strchr("!#$%&'*+-.^_`|~", c));
}

/* Length of the line at p (without its CRLF or LF), or -1 when no line end
 * comes before end. */
static long line_len(const char *p, const char *end)
{
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    if (!nl) return -1;
    return (long)(nl - p) - (nl > p && nl[-1] == '\r');
}

static int bad(char *why, size_t len, int status, const char *fmt, const char *part, int n)
{
    char shown[80]; /* vramd_error escapes it */
    snprintf(shown, sizeof shown, "%.*s", n < 60 ? n : 60, part);
    snprintf(why, len, fmt, shown);
    return status;
}

int vramd_head_check(const char *buf, size_t n, char *why, size_t whylen)
{
    const char *end = buf + n, *p = buf;
    long ll = line_len(p, end);
    if (ll < 0) return n >= HEAD_MAX ? bad(why, whylen, 431, "request line too long%s", "", 0) : -1;
    /* request-line = method SP request-target SP HTTP-version */
    const char *sp1 = memchr(p, ' ', (size_t)ll), *le = p + ll;
    const char *sp2 = sp1 ? memchr(sp1 + 1, ' ', (size_t)(le - sp1 - 1)) : NULL;
    if (!sp1 || !sp2 || sp1 == p || sp2 == sp1 + 1)
        return bad(why, whylen, 400, "malformed request line \"%s\"", p, (int)ll);
    for (const char *c = p; c < sp1; c++)
        if (!tchar((unsigned char)*c))
            return bad(why, whylen, 400, "malformed method in \"%s\"", p, (int)ll);
    for (const char *c = sp1 + 1; c < sp2; c++)
        if ((unsigned char)*c < 0x21 || *c == 0x7f)
            return bad(why, whylen, 400, "control character in the request target \"%s\"", p,
                       (int)ll);
    size_t vl = (size_t)(le - sp2 - 1);
    if (vl != 8 || memcmp(sp2 + 1, "HTTP/1.", 7) || (sp2[8] != '0' && sp2[8] != '1'))
        return bad(why, whylen, vl >= 5 && !memcmp(sp2 + 1, "HTTP/", 5) ? 505 : 400,
                   "unsupported protocol version in \"%s\" (HTTP/1.0 or HTTP/1.1)", p, (int)ll);
    /* header fields until an empty line */
    long long length = -1;
    bool chunked = false;
    for (p = le + (*le == '\r' ? 2 : 1);; p += ll + (p[ll] == '\r' ? 2 : 1)) {
        if ((ll = line_len(p, end)) < 0)
            return n >= HEAD_MAX ? bad(why, whylen, 431, "request head over 32 KiB%s", "", 0)
                                 : -1;
        if (ll == 0) break;
        const char *colon = memchr(p, ':', (size_t)ll), *v, *ve = p + ll;
        if (!colon || colon == p)
            return bad(why, whylen, 400, "malformed header line \"%s\"", p, (int)ll);
        for (const char *c = p; c < colon; c++)
            if (!tchar((unsigned char)*c))
                return bad(why, whylen, 400, "malformed header name in \"%s\"", p, (int)ll);
        for (v = colon + 1; v < ve && (*v == ' ' || *v == '\t'); v++) {
        }
        while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t'))
            ve--;
        for (const char *c = v; c < ve; c++)
            if (((unsigned char)*c < 0x20 && *c != '\t') || *c == 0x7f)
                return bad(why, whylen, 400, "control character in header \"%s\"", p, (int)ll);
        size_t nl = (size_t)(colon - p);
        if (nl == 14 && !strncasecmp(p, "Content-Length", 14)) {
            long long value = 0;
            if (v == ve) return bad(why, whylen, 400, "empty Content-Length%s", "", 0);
            for (const char *c = v; c < ve; c++) {
                if (*c < '0' || *c > '9')
                    return bad(why, whylen, 400, "Content-Length is not a number: \"%s\"", v,
                               (int)(ve - v));
                if (value > VRAMD_MAX_BODY) continue; /* already too large; no overflow */
                value = value * 10 + (*c - '0');
            }
            if (length >= 0 && length != value)
                return bad(why, whylen, 400, "two different Content-Length headers%s", "", 0);
            length = value;
        } else if (nl == 17 && !strncasecmp(p, "Transfer-Encoding", 17)) {
            if ((size_t)(ve - v) != 7 || strncasecmp(v, "chunked", 7))
                return bad(why, whylen, 400, "unsupported Transfer-Encoding \"%s\" (only chunked)",
                           v, (int)(ve - v));
            chunked = true;
        }
    }
    if (chunked && length >= 0)
        return bad(why, whylen, 400, "both Content-Length and Transfer-Encoding%s", "", 0);
    if (length > VRAMD_MAX_BODY)
        return bad(why, whylen, 413, "request body over the limit of 64 KiB%s", "", 0);
    return 0;
}

static const char *reason(int status)
{
    switch (status) {
    case 400:
        return "Bad Request";
    case 413:
        return "Content Too Large";
    case 431:
        return "Request Header Fields Too Large";
    case 505:
        return "HTTP Version Not Supported";
    default:
        return "Service Unavailable";
    }
}

/* Answers a refused head in JSON, then reads what the client still sends
 * (up to a second) before closing, so that TCP does not reset the answer
 * away. */
static void refuse(int fd, int status, const char *code, const char *why)
{
    vramd_response_t r = {0};
    vramd_error(&r, status, code, "%s", why);
    char head[256];
    size_t blen = r.body ? strlen(r.body) : 0;
    int hl = snprintf(head, sizeof head,
                      "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\n"
                      "Content-Length: %zu\r\nConnection: close\r\n\r\n",
                      r.status, reason(r.status), blen);
    if (send(fd, head, (size_t)hl, MSG_NOSIGNAL) == hl && blen)
        (void)send(fd, r.body, blen, MSG_NOSIGNAL);
    free(r.body);
    shutdown(fd, SHUT_WR);
    uint64_t until = vram_now_ns() + 1000000000ULL;
    char sink[4096];
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    while (vram_now_ns() < until && poll(&pfd, 1, 100) >= 0) {
        if (pfd.revents && recv(fd, sink, sizeof sink, MSG_DONTWAIT) <= 0) break;
    }
    close(fd);
}

/* Closes a connection dropped while screened: what it sent is read first,
 * since closing a socket with unread bytes resets it (ECONNRESET) instead of
 * ending it. */
static void drop(int fd)
{
    char sink[4096];
    for (int i = 0; i < 64 && recv(fd, sink, sizeof sink, MSG_DONTWAIT) > 0; i++) {
    }
    close(fd);
}

/* Waits for the head of the first request, looking without consuming. */
static void *screen_one(void *arg)
{
    job_t *job = arg;
    vramd_screen_t *s = job->s;
    int fd = s->fds[job->slot];
    char *buf = malloc(HEAD_MAX);
    char why[320] = "";
    int verdict = -1;
    uint64_t deadline = vram_now_ns() + (uint64_t)(s->idle_timeout_s * 1e9);
    while (buf && !s->stopping) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN | POLLRDHUP};
        int pr = poll(&pfd, 1, 200);
        if (pr < 0 && errno != EINTR) break;
        if (vram_now_ns() > deadline) break;
        if (pr <= 0) continue;
        ssize_t got = recv(fd, buf, HEAD_MAX, MSG_PEEK | MSG_DONTWAIT);
        if (got <= 0) {
            if (got < 0 && (errno == EAGAIN || errno == EINTR)) continue;
            break; /* closed, or shut down by the guard */
        }
        verdict = vramd_head_check(buf, (size_t)got, why, sizeof why);
        if (verdict != -1) break;
        /* Part of a head and the client has stopped sending (or the guard
         * shut the connection): it can never complete. */
        if (pfd.revents & (POLLRDHUP | POLLHUP | POLLERR)) break;
        /* Part of a head: poll would report the same bytes again at once. */
        nanosleep(&(struct timespec){.tv_nsec = 5000000}, NULL);
    }
    free(buf);
    pthread_mutex_lock(&s->lock);
    s->fds[job->slot] = -1;
    pthread_mutex_unlock(&s->lock);
    if (verdict == 0 && !s->stopping) {
        s->accept_fn(s->accept_arg, fd, (struct sockaddr *)&job->addr, job->addrlen,
                     job->guard_ctx);
    } else {
        vramd_guard_closed(s->guard, job->guard_ctx);
        if (verdict > 0) {
            vramd_log("debug", "refused a malformed request head: %s", why);
            refuse(fd, verdict, verdict == 413 ? "body_too_large" : "bad_request", why);
        } else {
            drop(fd);
        }
    }
    free(job);
    pthread_mutex_lock(&s->lock);
    if (--s->screening == 0) pthread_cond_broadcast(&s->idle);
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

static void *acceptor(void *arg)
{
    vramd_screen_t *s = arg;
    while (!s->stopping) {
        struct pollfd pfd[2] = {{.fd = s->listen_fd, .events = POLLIN},
                                {.fd = s->wake[0], .events = POLLIN}};
        if (poll(pfd, 2, -1) < 0 && errno != EINTR) break;
        if (s->stopping) break;
        if (!(pfd[0].revents & POLLIN)) continue;
        job_t *job = calloc(1, sizeof *job);
        if (!job) continue;
        job->addrlen = sizeof job->addr;
        int fd = accept4(s->listen_fd, (struct sockaddr *)&job->addr, &job->addrlen,
                         SOCK_CLOEXEC);
        if (fd < 0) {
            free(job);
            if (errno == EMFILE || errno == ENFILE) /* do not spin on a full table */
                nanosleep(&(struct timespec){.tv_nsec = 50000000}, NULL);
            continue;
        }
        job->s = s;
        /* Counted here, in the order of arrival, so that a peer's N+1th
         * connection is the one refused; the record follows the connection
         * into libmicrohttpd. */
        vramd_guard_opened(s->guard, fd, &job->guard_ctx);
        pthread_mutex_lock(&s->lock);
        job->slot = -1;
        for (int i = 0; i < SCREEN_MAX && job->slot < 0; i++)
            if (s->fds[i] < 0) job->slot = i;
        if (job->slot >= 0) {
            s->fds[job->slot] = fd;
            s->screening++;
        }
        pthread_mutex_unlock(&s->lock);
        pthread_t t;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        if (job->slot < 0) {
            vramd_guard_closed(s->guard, job->guard_ctx);
            refuse(fd, 503, "busy", "too many connections are opening at once; retry");
            free(job);
        } else if (pthread_create(&t, &attr, screen_one, job) != 0) {
            pthread_mutex_lock(&s->lock);
            s->fds[job->slot] = -1;
            if (--s->screening == 0) pthread_cond_broadcast(&s->idle);
            pthread_mutex_unlock(&s->lock);
            vramd_guard_closed(s->guard, job->guard_ctx);
            drop(fd);
            free(job);
        }
        pthread_attr_destroy(&attr);
    }
    return NULL;
}

int vramd_screen_start(int listen_fd, vramd_guard_t *guard, double idle_timeout_s,
                       vramd_accept_fn fn, void *arg, vramd_screen_t **out)
{
    *out = NULL;
    vramd_screen_t *s = calloc(1, sizeof *s);
    if (!s) return vram_fail(VRAM_ENOMEM, "out of memory");
    s->listen_fd = listen_fd;
    s->guard = guard;
    s->idle_timeout_s = idle_timeout_s;
    s->accept_fn = fn;
    s->accept_arg = arg;
    for (int i = 0; i < SCREEN_MAX; i++)
        s->fds[i] = -1;
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->idle, NULL);
    if (pipe2(s->wake, O_CLOEXEC) != 0) {
        free(s);
        return vram_fail(VRAM_EIO, "pipe: %s", strerror(errno));
    }
    if (pthread_create(&s->acceptor, NULL, acceptor, s) != 0) {
        close(s->wake[0]);
        close(s->wake[1]);
        free(s);
        return vram_fail(VRAM_EIO, "cannot start the accepting thread");
    }
    *out = s;
    return 0;
}

void vramd_screen_stop(vramd_screen_t *s)
{
    if (!s) return;
    s->stopping = true;
    ssize_t w = write(s->wake[1], "s", 1);
    (void)w;
    pthread_join(s->acceptor, NULL);
    pthread_mutex_lock(&s->lock);
    for (int i = 0; i < SCREEN_MAX; i++)
        if (s->fds[i] >= 0) shutdown(s->fds[i], SHUT_RDWR);
    while (s->screening > 0)
        pthread_cond_wait(&s->idle, &s->lock);
    pthread_mutex_unlock(&s->lock);
    close(s->wake[0]);
    close(s->wake[1]);
    pthread_cond_destroy(&s->idle);
    pthread_mutex_destroy(&s->lock);
    free(s);
}
