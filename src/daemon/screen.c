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
    char *buf = malloc(VRAMD_HEAD_MAX);
    char why[320] = "";
    int verdict = -1;
    uint64_t deadline = vram_now_ns() + (uint64_t)(s->idle_timeout_s * 1e9);
    while (buf && !s->stopping) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN | POLLRDHUP};
        int pr = poll(&pfd, 1, 200);
        if (pr < 0 && errno != EINTR) break;
        if (vram_now_ns() > deadline) break;
        if (pr <= 0) continue;
        ssize_t got = recv(fd, buf, VRAMD_HEAD_MAX, MSG_PEEK | MSG_DONTWAIT);
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
