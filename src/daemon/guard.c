/* The connection guard of one listener: at most N open connections per peer
 * (uid on the Unix socket; off on TCP, where every local user is 127.0.0.1),
 * and a deadline for each request to arrive in full (headers and body), so
 * slow or idle clients cannot hold the daemon's connection threads. A
 * connection over either limit is shut down; its thread (screen.c) then
 * closes it. The peer is read at accept, from the client's own socket. */
#include "daemon/daemon.h"

#include <arpa/inet.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

typedef struct conn {
    struct conn *prev, *next;
    int fd;         /* the client's socket */
    bool have_cred; /* Unix socket: uid and pid read */
    uid_t uid;
    pid_t pid;
    char peer[64]; /* "uid 1000" or "127.0.0.1" */
    /* Start of the request being received; 0 once it has arrived and its
     * handler runs (long polls are not cut). Atomic: set by the
     * connection's thread twice a request without the guard's lock. */
    _Atomic uint64_t since_ns;
} conn_t;

struct vramd_guard {
    pthread_mutex_t lock;
    pthread_cond_t stop_cv;
    pthread_t reaper;
    bool stopping, started;
    conn_t *conns;
    unsigned per_peer;
    uint64_t timeout_ns;
    unsigned long refused, timed_out;
};

static void read_peer(conn_t *c, size_t len)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    struct ucred cred;
    socklen_t cl = sizeof cred;
    char *buf = c->peer;
    int fd = c->fd;
    snprintf(buf, len, "?");
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) != 0) return;
    if (ss.ss_family == AF_UNIX) {
        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) == 0) {
            snprintf(buf, len, "uid %u", (unsigned)cred.uid);
            c->uid = cred.uid;
            c->pid = cred.pid;
            c->have_cred = true;
        }
        return;
    }
    sl = sizeof ss;
    if (getpeername(fd, (struct sockaddr *)&ss, &sl) != 0) return;
    if (ss.ss_family == AF_INET)
        inet_ntop(AF_INET, &((struct sockaddr_in *)&ss)->sin_addr, buf, (socklen_t)len);
    else if (ss.ss_family == AF_INET6)
        inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&ss)->sin6_addr, buf, (socklen_t)len);
}

/* Shuts down connections whose request did not arrive in time. */
static void *reaper(void *arg)
{
    vramd_guard_t *g = arg;
    pthread_mutex_lock(&g->lock);
    pthread_setname_np(pthread_self(), "vramd-reaper"); /* for top -H, ps -L */
    while (!g->stopping) {
        uint64_t now = vram_now_ns();
        for (conn_t *c = g->conns; c; c = c->next) {
            uint64_t since = c->since_ns;
            /* once, and not if the request arrived meanwhile */
            if (since && now - since > g->timeout_ns &&
                atomic_compare_exchange_strong(&c->since_ns, &since, 0)) {
                shutdown(c->fd, SHUT_RDWR);
                g->timed_out++;
            }
        }
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_nsec += 200000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&g->stop_cv, &g->lock, &ts);
    }
    pthread_mutex_unlock(&g->lock);
    return NULL;
}

int vramd_guard_start(unsigned per_peer, double timeout_s, vramd_guard_t **out)
{
    *out = NULL;
    vramd_guard_t *g = calloc(1, sizeof *g);
    if (!g) return vram_fail(VRAM_ENOMEM, "out of memory");
    g->per_peer = per_peer;
    g->timeout_ns = (uint64_t)(timeout_s * 1e9);
    pthread_mutex_init(&g->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&g->stop_cv, &ca);
    pthread_condattr_destroy(&ca);
    if (g->timeout_ns && pthread_create(&g->reaper, NULL, reaper, g) != 0) {
        vramd_guard_stop(g);
        return vram_fail(VRAM_EIO, "cannot start the connection reaper");
    }
    g->started = g->timeout_ns != 0;
    *out = g;
    return 0;
}

void vramd_guard_stop(vramd_guard_t *g)
{
    if (!g) return;
    pthread_mutex_lock(&g->lock);
    g->stopping = true;
    pthread_cond_broadcast(&g->stop_cv);
    pthread_mutex_unlock(&g->lock);
    if (g->started) pthread_join(g->reaper, NULL);
    while (g->conns) { /* the relays have closed them all by now */
        conn_t *c = g->conns;
        g->conns = c->next;
        free(c);
    }
    pthread_cond_destroy(&g->stop_cv);
    pthread_mutex_destroy(&g->lock);
    free(g);
}

void vramd_guard_opened(vramd_guard_t *g, int fd, void **socket_context)
{
    conn_t *c = calloc(1, sizeof *c);
    *socket_context = c;
    if (!c) {
        shutdown(fd, SHUT_RDWR);
        return;
    }
    c->fd = fd;
    read_peer(c, sizeof c->peer);
    c->since_ns = vram_now_ns();
    unsigned same = 0;
    pthread_mutex_lock(&g->lock);
    for (conn_t *o = g->conns; o; o = o->next)
        same += !strcmp(o->peer, c->peer);
    bool over = g->per_peer && same >= g->per_peer;
    if (over) g->refused++;
    unsigned long refused = g->refused;
    c->next = g->conns;
    if (g->conns) g->conns->prev = c;
    g->conns = c;
    pthread_mutex_unlock(&g->lock);
    if (over) {
        shutdown(fd, SHUT_RDWR);
        /* at most one line a second for a flood of refusals */
        static _Atomic uint64_t last_log;
        uint64_t now = vram_now_ns();
        if (now - last_log > 1000000000ULL) {
            last_log = now;
            vramd_log("warn", "%s has %u connections open (the limit): refused (%lu so far)",
                      c->peer, same, refused);
        }
    }
}

void vramd_guard_closed(vramd_guard_t *g, void *socket_context)
{
    conn_t *c = socket_context;
    if (!c) return;
    pthread_mutex_lock(&g->lock);
    if (c->prev)
        c->prev->next = c->next;
    else
        g->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    pthread_mutex_unlock(&g->lock);
    free(c);
}

bool vramd_guard_peer_cred(void *socket_context, uid_t *uid, pid_t *pid)
{
    const conn_t *c = socket_context; /* set at accept, never changed */
    if (!c || !c->have_cred) return false;
    *uid = c->uid;
    *pid = c->pid;
    return true;
}

void vramd_guard_answering(void *socket_context, bool answering)
{
    conn_t *c = socket_context;
    /* the next request's deadline starts when this one is answered */
    if (c) c->since_ns = answering ? 0 : vram_now_ns();
}
