/* Process identity and liveness from /proc and pidfds: a job's pid is only
 * trusted together with its start time, so a reused pid is never mistaken for
 * the job's process. */
#include "sched_internal.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Reads /proc/PID/stat; the command name may hold spaces and ')', so the
 * fields are parsed after the last ')'. */
static bool read_stat(pid_t pid, char *state, pid_t *ppid, uint64_t *start)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return false;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *p = strrchr(buf, ')');
    if (!p) return false;
    int pp = 0;
    unsigned long long st = 0;
    char s = 0;
    /* fields 3 (state), 4 (ppid), then 22 (starttime) */
    if (sscanf(p + 1,
               " %c %d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d %*d %llu",
               &s, &pp, &st) != 3)
        return false;
    if (state) *state = s;
    if (ppid) *ppid = pp;
    if (start) *start = st;
    return true;
}

uint64_t vram_pid_start_time(pid_t pid)
{
    uint64_t st = 0;
    if (pid <= 0 || !read_stat(pid, NULL, NULL, &st)) return 0;
    return st ? st : 1; /* 0 means "unknown" to callers */
}

bool vram_pid_alive(pid_t pid, uint64_t start_time)
{
    char state = 0;
    uint64_t st = 0;
    if (pid <= 0 || !read_stat(pid, &state, NULL, &st)) return false;
    if (state == 'Z' || state == 'X') return false;
    if (start_time && (st ? st : 1) != start_time) return false;
    return true;
}

pid_t vram_pid_parent(pid_t pid)
{
    pid_t pp = 0;
    if (pid <= 0 || !read_stat(pid, NULL, &pp, NULL)) return 0;
    return pp;
}

int vram_pid_open_fd(pid_t pid)
{
#ifdef SYS_pidfd_open
    long fd = syscall(SYS_pidfd_open, pid, 0);
    return fd < 0 ? -1 : (int)fd;
#else
    (void)pid;
    return -1;
#endif
}

bool vram_pid_fd_exited(int pidfd)
{
    struct pollfd p = {.fd = pidfd, .events = POLLIN};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLIN | POLLHUP | POLLERR));
}
