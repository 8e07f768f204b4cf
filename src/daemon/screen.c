/* The front door of a listener: vramd accepts each connection itself and
 * relays it to libmicrohttpd through a socket pair, forwarding only what is
 * well-formed HTTP/1.x framing (http_head.c): each request's head, then its
 * body by Content-Length or chunk by chunk. libmicrohttpd 0.9.75 answers a
 * malformed request in HTML, and for a bad Content-Length writes its status
 * line and headers twice; here every request of a kept-alive or pipelining
 * connection is checked, and a malformed one gets one JSON error after the
 * replies to the requests before it, then a close. One thread per
 * connection (libmicrohttpd has another); the guard limits them per peer
 * and times each request. libmicrohttpd sees the client's address but a
 * socket pair, so the peer's credentials are read here, at accept (guard.c). */
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

#define SCREEN_MAX  512         /* connections at once, as libmicrohttpd's limit */
#define RELAY_OUT   (16 * 1024) /* replies are copied in pieces of this size */
#define RELAY_STACK (256 * 1024)

struct vramd_screen {
    int listen_fd;
    int wake[2]; /* stop: wakes the accept loop */
    vramd_accept_fn accept_fn;
    void *accept_arg;
    vramd_guard_t *guard;
    double idle_timeout_s;
    pthread_t acceptor;
    pthread_mutex_t lock;
    pthread_cond_t idle;   /* screening reached 0 */
    int fds[SCREEN_MAX];   /* clients relayed (-1 = free slot), shut down on stop */
    int pairs[SCREEN_MAX]; /* their ends of the socket pairs (-1 = none yet) */
    int screening;         /* relays running */
    bool tcp;
    atomic_bool stopping;
};

typedef struct {
    vramd_screen_t *s;
    int slot;
    int client;      /* the accepted socket */
    int mhd;         /* our end of libmicrohttpd's socket pair; -1 before the first request */
    void *guard_ctx; /* the guard's record of this connection */
    struct sockaddr_storage addr;
    socklen_t addrlen;
    char *in;          /* what the client sent that is not forwarded yet */
    size_t len, ok;    /* its length; its first ok bytes are checked */
    bool in_body;      /* the bytes after ok continue a request's body */
    vramd_body_t body; /* that body's framing */
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

/* Closes a connection without losing what was sent to it: closing a socket
 * with unread bytes resets it (ECONNRESET), which can destroy the last
 * reply on its way. Our side is shut first, then what the client still
 * sends is read (up to a second) until it closes. */
static void close_gently(int fd, bool peer_done)
{
    if (!peer_done) {
        shutdown(fd, SHUT_WR);
        uint64_t until = vram_now_ns() + 1000000000ULL;
        char sink[4096];
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        while (vram_now_ns() < until && poll(&pfd, 1, 100) >= 0)
            if (pfd.revents && recv(fd, sink, sizeof sink, MSG_DONTWAIT) <= 0) break;
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
    }
    return v > 0 ? v : 0;
}

/* Sends libmicrohttpd what was checked, as far as its socket takes it
 * without waiting (it may be busy answering, with its buffer full); the
 * rest waits for POLLOUT, and nothing more is read from the client
 * meanwhile. The pair is made, and handed over, with the first request. */
static bool forward(job_t *r)
{
    vramd_screen_t *s = r->s;
    if (r->mhd < 0) {
        int pair[2];
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) return false;
        pthread_mutex_lock(&s->lock);
        s->pairs[r->slot] = pair[0];
        pthread_mutex_unlock(&s->lock);
        r->mhd = pair[0];
        s->accept_fn(s->accept_arg, pair[1], (struct sockaddr *)&r->addr, r->addrlen, r->guard_ctx);
    }
    while (r->ok) {
        ssize_t w = send(r->mhd, r->in, r->ok, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0 && errno == EAGAIN) return true;
        if (w <= 0) return false;
        memmove(r->in, r->in + w, r->len - (size_t)w);
        r->len -= (size_t)w;
        r->ok -= (size_t)w;
    }
    return true;
}

/* The life of one connection: requests go from the client to
 * libmicrohttpd once checked, replies come back as they are. A malformed
 * request stops the forwarding: libmicrohttpd's side is shut, the replies
 * to the requests before it are copied, then vramd answers it in JSON and
 * closes. */
static void *relay(void *arg)
{
    job_t *r = arg;
    vramd_screen_t *s = r->s;
    char why[320] = "";
    int verdict = 0;
    bool client_eof = false, mhd_eof = false, client_gone = false, shut = false;
    uint64_t deadline = vram_now_ns() + (uint64_t)(s->idle_timeout_s * 1e9);
    r->in = malloc(VRAMD_HEAD_MAX);
    char *out = malloc(RELAY_OUT);
    if (!r->in || !out) client_gone = true;
    while (!client_gone && !mhd_eof && !s->stopping) {
        bool reading = !verdict && !client_eof && r->ok == 0;
        if (r->mhd < 0 && !reading) break; /* libmicrohttpd never had it */
        struct pollfd pfd[2] = {{.fd = reading ? r->client : -1, .events = POLLIN},
                                {.fd = r->mhd, .events = POLLIN | (r->ok ? POLLOUT : 0)}};
        int timeout = -1; /* libmicrohttpd times out idle connections */
        if (r->mhd < 0) {
            uint64_t now = vram_now_ns();
            if (now >= deadline) break;
            timeout = (int)((deadline - now) / 1000000) + 1;
        }
        if (poll(pfd, 2, timeout) < 0 && errno != EINTR) break;
        if (pfd[1].revents) {
            if (pfd[1].revents & ~POLLOUT) {
                ssize_t got = recv(r->mhd, out, RELAY_OUT, MSG_DONTWAIT);
                if (got > 0)
                    client_gone = !send_all(r->client, out, (size_t)got);
                else if (got == 0 || (errno != EAGAIN && errno != EINTR))
                    mhd_eof = true;
            }
            if (r->ok && !mhd_eof && !forward(r)) mhd_eof = true;
        }
        if (pfd[0].revents) {
            ssize_t got = recv(r->client, r->in + r->len, VRAMD_HEAD_MAX - r->len, MSG_DONTWAIT);
            if (got > 0) {
                r->len += (size_t)got;
                verdict = check_framing(r, why, sizeof why);
                if (r->ok && !forward(r)) mhd_eof = true;
            } else if (got == 0 || (errno != EAGAIN && errno != EINTR)) {
                client_eof = true;
            }
        }
        /* Nothing more comes for libmicrohttpd: it answers what it has,
         * then sees the end and closes its side. */
        if ((client_eof || verdict) && r->mhd >= 0 && !r->ok && !shut) {
            shutdown(r->mhd, SHUT_WR);
            shut = true;
        }
    }
    pthread_mutex_lock(&s->lock);
    s->fds[r->slot] = s->pairs[r->slot] = -1;
    pthread_mutex_unlock(&s->lock);
    /* Taken out of the guard before the socket closes: its reaper shuts
     * sockets down by number. */
    vramd_guard_closed(s->guard, r->guard_ctx);
    if (r->mhd >= 0) close(r->mhd);
    if (verdict && !client_gone && !s->stopping) {
        vramd_log("debug", "refused a malformed request: %s", why);
        refuse(r->client, verdict, verdict == 413 ? "body_too_large" : "bad_request", why);
    } else {
        close_gently(r->client, client_eof || client_gone || s->stopping);
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
        struct pollfd pfd[2] = {{.fd = s->listen_fd, .events = POLLIN},
                                {.fd = s->wake[0], .events = POLLIN}};
        if (poll(pfd, 2, -1) < 0 && errno != EINTR) break;
        if (s->stopping) break;
        if (!(pfd[0].revents & POLLIN)) continue;
        job_t *job = calloc(1, sizeof *job);
        if (!job) continue;
        job->addrlen = sizeof job->addr;
        int fd = accept4(s->listen_fd, (struct sockaddr *)&job->addr, &job->addrlen, SOCK_CLOEXEC);
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
        /* A client that stops reading cannot hold its relay forever. */
        struct timeval snd = {.tv_sec = (time_t)s->idle_timeout_s};
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &snd, sizeof snd);
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
        pthread_attr_setstacksize(&attr, RELAY_STACK);
        if (job->slot < 0) {
            vramd_guard_closed(s->guard, job->guard_ctx);
            refuse(fd, 503, "busy", "too many connections are opening at once; retry");
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
        s->fds[i] = s->pairs[i] = -1;
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    s->tcp = getsockname(listen_fd, (struct sockaddr *)&ss, &sl) == 0 && ss.ss_family != AF_UNIX;
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
    for (int i = 0; i < SCREEN_MAX; i++) {
        if (s->fds[i] >= 0) shutdown(s->fds[i], SHUT_RDWR);
        if (s->pairs[i] >= 0) shutdown(s->pairs[i], SHUT_RDWR);
    }
    while (s->screening > 0)
        pthread_cond_wait(&s->idle, &s->lock);
    pthread_mutex_unlock(&s->lock);
    close(s->wake[0]);
    close(s->wake[1]);
    pthread_cond_destroy(&s->idle);
    pthread_mutex_destroy(&s->lock);
    free(s);
}
