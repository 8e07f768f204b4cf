/* The connections of a listener: vramd accepts each one and serves it in
 * a thread of its own (long polls block only their own client), reading
 * requests with its own parser (http_head.c) and answering each through
 * http.c. Kept-alive and pipelined requests are answered in order; a
 * malformed one gets one JSON error after the replies owed to the requests
 * before it, then a close. The guard limits connections per peer and times
 * each request. One descriptor per connection: the client's socket. */
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

#define SCREEN_MAX 512 /* connections at once per listener */

struct vramd_screen {
    int listen_fd;
    int wake[2]; /* stop: wakes the accept loop */
    void *arg;   /* the listener's vramd_http_t */
    vramd_guard_t *guard;
    double idle_timeout_s;
    pthread_t acceptor;
    pthread_mutex_t lock;
    pthread_cond_t idle; /* screening reached 0 */
    int fds[SCREEN_MAX]; /* clients served (-1 = free slot), shut down on stop */
    int screening;       /* connections being served */
    bool tcp;
    atomic_bool stopping;
};

typedef struct {
    vramd_screen_t *s;
    int slot;
    int client;        /* the accepted socket */
    void *guard_ctx;   /* the guard's record of this connection */
    char *in;          /* what the client sent and is not answered yet */
    size_t len;        /* its length */
    vramd_head_t head; /* the request being read (in_body) */
    bool in_body;      /* its head is in[0..head.head_len), its body follows */
    bool continued;    /* "100 Continue" sent for it */
    vramd_body_t body; /* that body's framing; its bytes go to data */
    char data[VRAMD_MAX_BODY + 1];
} job_t;

/* The input buffer: a head of up to VRAMD_HEAD_MAX, then room to read. */
#define IN_SIZE (2 * VRAMD_HEAD_MAX)

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

/* Answers a malformed request in JSON and closes (linger: close_gently). */
static void refuse(int fd, int status, const char *code, const char *why, bool linger)
{
    vramd_response_t r = {0};
    vramd_error(&r, status, code, "%s", why);
    size_t len = 0;
    char *out = vramd_reply_bytes(&r, false, true, false, &len);
    if (out) (void)send_all(fd, out, len);
    free(out);
    free(r.body);
    close_gently(fd, false, linger);
}

/* Drops the first n bytes of the input (a request answered, or body bytes
 * copied out), keeping `keep` bytes at the start (the head being served). */
static void consume(job_t *r, size_t keep, size_t n)
{
    memmove(r->in + keep, r->in + keep + n, r->len - keep - n);
    r->len -= n;
}

/* Serves what has arrived: every complete request in order. Returns 0 when
 * it needs more bytes, 1 when the connection is to close (answered with
 * Connection: close, or the client is gone), or the status of a malformed
 * request (why filled). */
static int serve_input(job_t *r, char *why, size_t whylen)
{
    for (;;) {
        if (!r->in_body) {
            int v = vramd_head_check(r->in, r->len, &r->head, why, whylen);
            if (v) return v < 0 ? 0 : v;
            vramd_body_start(&r->body, &r->head, r->data);
            r->in_body = true;
            r->continued = false;
        }
        size_t hl = r->head.head_len, used;
        int v = vramd_body_scan(&r->body, r->in + hl, r->len - hl, &used, why, whylen);
        consume(r, hl, used);
        if (v > 0) return v;
        if (v < 0) {
            /* The client waits for a go-ahead before sending its body. */
            if (r->head.expect_continue && !r->continued) {
                static const char go[] = "HTTP/1.1 100 Continue\r\n\r\n";
                if (!send_all(r->client, go, sizeof go - 1)) return 1;
                r->continued = true;
            }
            return 0;
        }
        /* A whole request: answered now, in this thread. */
        r->data[r->body.data_len] = 0;
        vramd_guard_answering(r->guard_ctx, true);
        size_t out_len = 0;
        bool close = true;
        char *out = vramd_http_answer(r->s->arg, r->guard_ctx, r->in, &r->head, r->data,
                                      r->body.data_len, &out_len, &close);
        vramd_guard_answering(r->guard_ctx, false);
        bool sent = out && send_all(r->client, out, out_len);
        free(out);
        consume(r, 0, hl);
        r->in_body = false;
        if (!sent || close) return 1;
    }
}

/* The life of one connection: read, serve every complete request, until
 * the client closes, a reply closes, a request is malformed (answered in
 * JSON, then closed), the client idles past the timeout or vramd stops. */
static void *relay(void *arg)
{
    job_t *r = arg;
    vramd_screen_t *s = r->s;
    pthread_setname_np(pthread_self(), "vramd-conn"); /* for top -H, ps -L */
    char why[320] = "";
    int verdict = 0;
    bool client_eof = false, done = false;
    r->in = malloc(IN_SIZE);
    if (!r->in) done = true;
    while (!done && !verdict && !client_eof && !s->stopping) {
        /* Blocks until the client sends, closes, is shut down by the guard
         * or by vramd's stop, or stays idle past SO_RCVTIMEO. */
        ssize_t got = recv(r->client, r->in + r->len, IN_SIZE - r->len, 0);
        if (got > 0) {
            r->len += (size_t)got;
            verdict = serve_input(r, why, sizeof why);
            if (verdict == 1) {
                verdict = 0;
                done = true;
            }
        } else if (got < 0 && errno == EINTR) {
            continue;
        } else {
            client_eof = true; /* closed, idle too long, or shut down */
        }
    }
    pthread_mutex_lock(&s->lock);
    s->fds[r->slot] = -1;
    pthread_mutex_unlock(&s->lock);
    /* Out of the guard before the socket closes: its reaper shuts sockets
     * down by number. */
    vramd_guard_closed(s->guard, r->guard_ctx);
    if (verdict && !s->stopping) {
        vramd_log("debug", "refused a malformed request: %s", why);
        refuse(r->client, verdict, verdict == 413 ? "body_too_large" : "bad_request", why, true);
    } else {
        close_gently(r->client, client_eof || s->stopping, true);
    }
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
