/* Owners of sim allocations: verified once, then watched by pidfd. */
#include "device/sim_owners.h"

#include "core/array.h"
#include "core/proc.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <unistd.h>

#define MAX_BUDGET 65536

void vram_sim_owners_init(sim_owners_t *o)
{
    memset(o, 0, sizeof *o);
    o->epoll_fd = -1;
    /* A quarter of the descriptor limit: the process needs the rest. */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0)
        o->budget = rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur / 4 > MAX_BUDGET
                        ? MAX_BUDGET
                        : (size_t)(rl.rlim_cur / 4);
}

void vram_sim_owners_clear(sim_owners_t *o)
{
    for (size_t i = 0; i < o->count; i++)
        if (o->list[i].pidfd >= 0) close(o->list[i].pidfd);
    if (o->epoll_fd >= 0) close(o->epoll_fd);
    free(o->list);
    vram_map_clear(&o->by_pid);
    size_t budget = o->budget;
    bool no_pidfd = o->no_pidfd;
    vram_sim_owners_init(o);
    o->budget = budget;
    o->no_pidfd = no_pidfd;
}

/* A pidfd for pid, in the epoll set; -1 when none (budget, kernel, gone). */
static int watch(sim_owners_t *o, pid_t pid)
{
    if (o->no_pidfd || o->pidfds >= o->budget) return -1;
    if (o->epoll_fd < 0 && (o->epoll_fd = epoll_create1(EPOLL_CLOEXEC)) < 0) return -1;
    int fd = vram_pid_open_fd(pid);
    if (fd < 0) {
        if (errno == ENOSYS || errno == EPERM) o->no_pidfd = true; /* old kernel, seccomp */
        return -1;
    }
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = (uint64_t)pid};
    if (epoll_ctl(o->epoll_fd, EPOLL_CTL_ADD, fd, &ev) != 0) {
        close(fd);
        return -1;
    }
    o->pidfds++;
    return fd;
}

static void unwatch(sim_owners_t *o, sim_owner_t *e)
{
    if (e->pidfd < 0) return;
    /* Explicitly: a forked child may hold a copy of the pidfd, and then
     * closing ours would not drop the registration. */
    epoll_ctl(o->epoll_fd, EPOLL_CTL_DEL, e->pidfd, NULL);
    close(e->pidfd);
    e->pidfd = -1;
    o->pidfds--;
}

bool vram_sim_owners_died(sim_owners_t *o)
{
    bool died = false;
    if (o->pidfds) {
        struct epoll_event ev[64];
        int n;
        /* Level-triggered: a dead owner keeps reporting until swept, so
         * one full batch means there may be more. */
        do {
            n = epoll_wait(o->epoll_fd, ev, 64, 0);
            for (int i = 0; i < n; i++) {
                uint64_t index;
                if (!vram_map_get(&o->by_pid, ev[i].data.u64, &index)) continue;
                sim_owner_t *e = &o->list[index];
                if (e->alive) died = true;
                e->alive = false;
                unwatch(o, e);
            }
        } while (n == 64);
    }
    if (o->pidfds < o->count) {
        for (size_t i = 0; i < o->count; i++) {
            sim_owner_t *e = &o->list[i];
            if (e->pidfd >= 0 || !e->alive || e->self) continue;
            if (!vram_proc_alive(e->pid, e->start_time)) {
                e->alive = false;
                died = true;
            }
        }
    }
    return died;
}

sim_owner_t *vram_sim_owners_get(sim_owners_t *o, pid_t pid, uint64_t start_time, bool self)
{
    uint64_t index;
    if (pid <= 0) return NULL;
    if (vram_map_get(&o->by_pid, (uint64_t)pid, &index)) {
        sim_owner_t *e = &o->list[index];
        if (e->start_time != start_time) return NULL;
        e->seen = true;
        return e;
    }
    if (o->count == o->cap) {
        sim_owner_t *bigger = vram_array_grow(o->list, &o->cap, sizeof *bigger, 64);
        if (!bigger) return NULL;
        o->list = bigger;
    }
    if (!vram_map_put(&o->by_pid, (uint64_t)pid, o->count)) return NULL;
    sim_owner_t *e = &o->list[o->count++];
    *e = (sim_owner_t){
        .pid = pid, .start_time = start_time, .pidfd = -1, .alive = true, .seen = true};
    e->self = self;
    if (self) return e;
    /* pidfd first, then /proc: if the pid was reused in between, the pidfd
     * names a process that has exited, which the check below sees. */
    int fd = watch(o, pid);
    e->alive = vram_proc_alive(pid, start_time);
    e->pidfd = fd;
    if (fd >= 0 && (!e->alive || vram_pid_fd_exited(fd))) unwatch(o, e);
    return e;
}

void vram_sim_owners_unmark(sim_owners_t *o)
{
    for (size_t i = 0; i < o->count; i++)
        o->list[i].seen = false;
}

void vram_sim_owners_sweep(sim_owners_t *o)
{
    size_t kept = 0;
    for (size_t i = 0; i < o->count; i++) {
        sim_owner_t *e = &o->list[i];
        if (!e->seen || !e->alive) {
            unwatch(o, e);
            vram_map_take(&o->by_pid, (uint64_t)e->pid, NULL);
            continue;
        }
        if (kept != i) {
            o->list[kept] = *e;
            /* Replaces an existing key after a take: cannot fail. */
            vram_map_put(&o->by_pid, (uint64_t)e->pid, kept);
        }
        kept++;
    }
    o->count = kept;
}

void vram_sim_owners_name(sim_owners_t *o, pid_t pid, char *buf, size_t len)
{
    uint64_t index;
    if (!vram_map_get(&o->by_pid, (uint64_t)pid, &index)) {
        vram_proc_name(pid, buf, len);
        return;
    }
    sim_owner_t *e = &o->list[index];
    if (!e->named) {
        vram_proc_name(pid, e->name, sizeof e->name);
        e->named = true;
    }
    snprintf(buf, len, "%s", e->name);
}
