/* The front door of a listener: vramd accepts each connection itself and
 * relays it to its own libmicrohttpd (http.c) through a socket pair,
 * forwarding only well-formed HTTP/1.x framing (http_head.c): each
 * request's head, then its body by Content-Length or chunk by chunk.
 * libmicrohttpd 0.9.75 answers a malformed request in HTML, and for a bad
 * Content-Length writes its status line and headers twice; here every
 * request of a kept-alive or pipelining connection is checked, and a
 * malformed one gets one JSON error after the replies owed to the requests
 * before it, then a close. One thread per connection, which also runs that
 * connection's libmicrohttpd, so a request costs no switch between threads;
 * the guard limits connections per peer and times each request.
 * libmicrohttpd sees only the socket pair: the peer's credentials are read
 * at accept (guard.c). */
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
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/time.h>

#define SCREEN_MAX 512         /* connections at once, as libmicrohttpd's limit */
#define RELAY_OUT  (16 * 1024) /* replies are copied in pieces of this size */

struct vramd_screen {
    int listen_fd;
    int wake[2]; /* stop: wakes the accept loop */
    void *arg;   /* for vramd_engine_open */
    vramd_guard_t *guard;
    double idle_timeout_s;
    pthread_t acceptor;
    pthread_mutex_t lock;
    pthread_cond_t idle; /* screening reached 0 */
    int fds[SCREEN_MAX]; /* clients relayed (-1 = free slot), shut down on stop */
    int screening;       /* relays running */
    bool tcp;
    atomic_bool stopping;
};

typedef struct {
    vramd_screen_t *s;
    int slot;
    int client; /* the accepted socket */
    int mhd;    /* our end of libmicrohttpd's socket pair; -1 before the first request */
    vramd_engine_t *engine; /* its libmicrohttpd */
    unsigned long requests; /* complete requests checked */
    void *guard_ctx;        /* the guard's record of this connection */
    char *in;               /* what the client sent that is not forwarded yet */
    size_t len, ok;         /* its length; its first ok bytes are checked */
    bool in_body;           /* the bytes after ok continue a request's body */
    vramd_body_t body;      /* that body's framing */
} job_t;

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

/* Closes a connection without losing what was sent to it: closing a socket
 * with unread bytes resets it (ECONNRESET), which can destroy the last
 * reply on its way. Our side is shut first, then what the client still
 * sends is read until it closes: for up to a second (`linger`, in a
 * connection's own thread), or only what has already arrived (in the
 * accepting thread, which must not wait on one client). */
static void close_gently(int fd, bool peer_done, bool linger)
{
    if (!peer_done) {
        shutdown(fd, SHUT_WR);
        char sink[4096];
        if (linger) {
            uint64_t until = vram_now_ns() + 1000000000ULL;
            struct pollfd pfd = {.fd = fd, .events = POLLIN};
            while (vram_now_ns() < until && poll(&pfd, 1, 100) >= 0)
                if (pfd.revents && recv(fd, sink, sizeof sink, MSG_DONTWAIT) <= 0) break;
        } else { /* what has arrived, up to 64 KiB */
            for (int i = 0; i < 16 && recv(fd, sink, sizeof sink, MSG_DONTWAIT) > 0; i++)
                continue;
        }
    }
    close(fd);
}

/* Answers a malformed request in JSON and closes (linger: close_gently). */
static void refuse(int fd, int status, const char *code, const char *why, bool linger)
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
    close_gently(fd, false, linger);
}

static bool send_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return false;
        p += w;
        n -= (size_t)w;
    }
    return true;
}

/* Checks the framing of what the client sent (in[0..len)) from where the
 * last call stopped: *ok grows by the bytes that complete well-formed
 * requests or parts of them (a head only whole). Returns 0, or the status
 * of a malformed request (why filled). */
static int check_framing(job_t *r, char *why, size_t whylen)
{
    int v = 0;
    while (r->ok < r->len) {
        const char *p = r->in + r->ok;
        size_t n = r->len - r->ok, used;
        if (!r->in_body) {
            vramd_head_t head;
            v = vramd_head_check(p, n, &head, why, whylen);
            if (v) break;
            r->ok += head.head_len;
            vramd_body_start(&r->body, &head);
            r->in_body = true;
            p += head.head_len;
            n -= head.head_len;
        }
        v = vramd_body_scan(&r->body, p, n, &used, why, whylen);
        r->ok += used;
        if (v) break;
        r->in_body = false;
        r->requests++;
    }
    return v > 0 ? v : 0;
}

/* Hands libmicrohttpd what was checked and lets it answer, copying its
 * replies to the client, until it has answered every complete request it
 * was given (at a request boundary) or, inside a body, until it has nothing
 * more to say (a "100 Continue"). Its socket pair and engine are made with
 * the first request. False when the connection is over (libmicrohttpd
 * closed it, or the client is gone). */
static bool pump(job_t *r, char *out)
{
    vramd_screen_t *s = r->s;
    if (!r->engine) {
        int pair[2];
        if (!r->ok) return true;
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) return false;
        r->mhd = pair[0];
        r->engine = vramd_engine_open(s->arg, pair[1], r->guard_ctx);
        if (!r->engine) return false;
    }
    int wait_ms = 0;
    for (;;) {
        bool moved = false;
        /* Stop: libmicrohttpd's run below waits at most 10 ms, and stop
         * shuts the client's socket down (a blocked send returns). */
        if (s->stopping) return false;
        while (r->ok) {
            ssize_t w = send(r->mhd, r->in, r->ok, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (w < 0 && errno == EINTR) continue;
            if (w < 0 && errno == EAGAIN) break; /* full: it reads, then we go on */
            if (w <= 0) return false;
            memmove(r->in, r->in + w, r->len - (size_t)w);
            r->len -= (size_t)w;
            r->ok -= (size_t)w;
            moved = true;
        }
        long answered = vramd_engine_run(r->engine, wait_ms);
        /* Replies written before answered was counted are all in the
         * socket: a short read took everything there was. */
        ssize_t got;
        while ((got = recv(r->mhd, out, RELAY_OUT, MSG_DONTWAIT)) > 0) {
            if (!send_all(r->client, out, (size_t)got)) return false;
            moved = true;
            if (got < RELAY_OUT) break;
        }
        if (answered < 0) return false;
        if (!r->ok && (unsigned long)answered == r->requests && (!r->in_body || !moved))
            return true;
        /* Still owed a reply but nothing moved: let it wait for its socket
         * instead of spinning (it cannot be waiting for anything else). */
        wait_ms = moved ? 0 : 10;
    }
}

/* The life of one connection: requests go from the client to its
 * libmicrohttpd once checked, replies come back as they are. A malformed
 * request stops the forwarding: the replies owed to the requests before it
 * are copied, then vramd answers it in JSON and closes. */
static void *relay(void *arg)
{
    job_t *r = arg;
    vramd_screen_t *s = r->s;
    pthread_setname_np(pthread_self(), "vramd-conn"); /* for top -H, ps -L */
    char why[320] = "";
    int verdict = 0;
    bool open = true, client_eof = false;
    r->in = malloc(VRAMD_HEAD_MAX);
    char *out = malloc(RELAY_OUT);
    if (!r->in || !out) open = false;
    while (open && !verdict && !client_eof && !s->stopping) {
        /* Blocks until the client sends, closes, is shut down by the guard
         * or by vramd's stop, or stays idle past SO_RCVTIMEO. */
        ssize_t got = recv(r->client, r->in + r->len, VRAMD_HEAD_MAX - r->len, 0);
        if (got > 0) {
            r->len += (size_t)got;
            verdict = check_framing(r, why, sizeof why);
        } else if (got < 0 && errno == EINTR) {
            continue;
        } else {
            client_eof = true; /* closed, idle too long, or shut down */
        }
        open = pump(r, out); /* what is owed, even after the client's end */
    }
    pthread_mutex_lock(&s->lock);
    s->fds[r->slot] = -1;
    pthread_mutex_unlock(&s->lock);
    vramd_engine_close(r->engine);
    if (r->mhd >= 0) close(r->mhd);
    /* Out of the guard before the socket closes: its reaper shuts sockets
     * down by number. */
    vramd_guard_closed(s->guard, r->guard_ctx);
    if (verdict && open && !s->stopping) {
        vramd_log("debug", "refused a malformed request: %s", why);
        refuse(r->client, verdict, verdict == 413 ? "body_too_large" : "bad_request", why, true);
    } else {
        close_gently(r->client, client_eof || s->stopping, true);
    }
    free(out);
    free(r->in);
    free(r);
    pthread_mutex_lock(&s->lock);
    if (--s->screening == 0) pthread_cond_broadcast(&s->idle);
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

static void *acceptor(void *arg)
{
    vramd_screen_t *s = arg;
    while (!s->stopping) {
        pthread_setname_np(pthread_self(), "vramd-accept"); /* for top -H, ps -L */
        struct pollfd pfd[2] = {{.fd = s->listen_fd, .events = POLLIN},
                                {.fd = s->wake[0], .events = POLLIN}};
        if (poll(pfd, 2, -1) < 0 && errno != EINTR) break;
        if (s->stopping) break;
        if (!(pfd[0].revents & POLLIN)) continue;
        job_t *job = calloc(1, sizeof *job);
        if (!job) continue;
        int fd = accept4(s->listen_fd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) {
            free(job);
            if (errno == EMFILE || errno == ENFILE) /* do not spin on a full table */
                nanosleep(&(struct timespec){.tv_nsec = 50000000}, NULL);
            continue;
        }
        job->s = s;
        job->client = fd;
        job->mhd = -1;
        if (s->tcp) /* replies go out whole: no need to wait for more */
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &(int){1}, sizeof(int));
        /* A client that stops reading or sending cannot hold its relay
         * forever (the guard's deadlines, when set, are shorter). */
        struct timeval idle = {.tv_sec = (time_t)s->idle_timeout_s};
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &idle, sizeof idle);
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &idle, sizeof idle);
        /* Counted here, in the order of arrival, so that a peer's N+1th
         * connection is the one refused; the record (with the peer's
         * credentials) lives as long as the relay. */
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
            refuse(fd, 503, "busy", "too many connections at once; retry", false);
            free(job);
        } else if (pthread_create(&t, &attr, relay, job) != 0) {
            pthread_mutex_lock(&s->lock);
            s->fds[job->slot] = -1;
            if (--s->screening == 0) pthread_cond_broadcast(&s->idle);
            pthread_mutex_unlock(&s->lock);
            vramd_guard_closed(s->guard, job->guard_ctx);
            close(fd);
            free(job);
        }
        pthread_attr_destroy(&attr);
    }
    return NULL;
}

int vramd_screen_start(int listen_fd, bool tcp, vramd_guard_t *guard, double idle_timeout_s,
                       void *arg, vramd_screen_t **out)
{
    *out = NULL;
    vramd_screen_t *s = calloc(1, sizeof *s);
    if (!s) return vram_fail(VRAM_ENOMEM, "out of memory");
    s->listen_fd = listen_fd;
    s->guard = guard;
    s->idle_timeout_s = idle_timeout_s;
    s->arg = arg;
    s->tcp = tcp;
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
