/* /proc/<pid>/stat and comm readers. */
#include "core/proc.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <pwd.h>
#include <string.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

/* The command name (field 2) may hold spaces and ')', so fields are parsed
 * after the last ')': 3 (state), 4 (ppid), ..., 22 (starttime). */
static bool read_stat(pid_t pid, char *state, pid_t *ppid, uint64_t *start)
{
    char path[64], buf[1024];
    if (pid <= 0) return false;
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "re");
    if (!f) return false;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *p = strrchr(buf, ')');
    if (!p) return false;
    char s = 0;
    int pp = 0;
    unsigned long long st = 0;
    if (sscanf(p + 1,
               " %c %d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d %*d %llu",
               &s, &pp, &st) != 3)
        return false;
    if (state) *state = s;
    if (ppid) *ppid = pp;
    if (start) *start = st ? st : 1; /* 0 means "unknown" to callers */
    return true;
}

uint64_t vram_proc_start_time(pid_t pid)
{
    uint64_t st = 0;
    return read_stat(pid, NULL, NULL, &st) ? st : 0;
}

bool vram_proc_alive(pid_t pid, uint64_t start_time)
{
    if (pid <= 0) return false;
    char state = 0;
    uint64_t st = 0;
    if (!read_stat(pid, &state, NULL, &st)) {
        /* No /proc entry: gone, unless /proc itself is missing (trust kill). */
        FILE *f = fopen("/proc/self/stat", "re");
        if (f) {
            fclose(f);
            return false;
        }
        return !(kill(pid, 0) != 0 && errno == ESRCH);
    }
    if (state == 'Z' || state == 'X') return false;
    return start_time == 0 || st == start_time;
}

bool vram_proc_owner(pid_t pid, uid_t *uid, bool *kernel_thread)
{
    char path[64], line[256];
    if (pid <= 0) return false;
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "re");
    if (!f) return false;
    bool found = false;
    unsigned long u = 0;
    while (!found && fgets(line, sizeof line, f))
        found = sscanf(line, "Uid: %lu", &u) == 1;
    fclose(f);
    /* flags is field 9 of stat, after the last ')' the 7th */
    char buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    f = fopen(path, "re");
    if (!f) return false;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *p = strrchr(buf, ')');
    unsigned long flags = 0;
    if (!found || !p || sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %lu", &flags) != 1) return false;
    *uid = (uid_t)u;
    *kernel_thread = (flags & 0x00200000UL) != 0; /* PF_KTHREAD */
    return true;
}

pid_t vram_proc_parent(pid_t pid)
{
    pid_t pp = 0;
    return read_stat(pid, NULL, &pp, NULL) ? pp : 0;
}

void vram_proc_name(pid_t pid, char *buf, size_t len)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/comm", (int)pid);
    buf[0] = '\0';
    FILE *f = fopen(path, "re");
    if (!f) return;
    if (fgets(buf, (int)len, f)) buf[strcspn(buf, "\n")] = '\0';
    fclose(f);
}

void vram_proc_command(pid_t pid, char *buf, size_t len)
{
    char path[32];
    snprintf(path, sizeof path, "/proc/%d/cmdline", (int)pid);
    FILE *f = fopen(path, "re");
    size_t n = f ? fread(buf, 1, len - 1, f) : 0;
    if (f) fclose(f);
    buf[n] = 0;
    for (size_t i = 0; i + 1 < n; i++)
        if (buf[i] == 0 || buf[i] == '\n' || buf[i] == '\t') buf[i] = ' ';
}

void vram_user_name(uid_t uid, char *buf, size_t len)
{
    struct passwd pw, *res = NULL;
    char tmp[1024];
    if (uid == (uid_t)-1)
        snprintf(buf, len, "?");
    else if (getpwuid_r(uid, &pw, tmp, sizeof tmp, &res) == 0 && res)
        snprintf(buf, len, "%s", res->pw_name);
    else
        snprintf(buf, len, "%u", (unsigned)uid);
}

void vram_proc_user(pid_t pid, char *buf, size_t len)
{
    char path[32];
    struct stat st;
    snprintf(path, sizeof path, "/proc/%d", (int)pid);
    if (stat(path, &st) != 0)
        buf[0] = 0;
    else
        vram_user_name(st.st_uid, buf, len);
}

int vram_pid_open_fd(pid_t pid)
{
#ifdef SYS_pidfd_open
    long fd = syscall(SYS_pidfd_open, pid, 0);
    return fd < 0 ? -1 : (int)fd;
#else
    (void)pid;
    errno = ENOSYS;
    return -1;
#endif
}

bool vram_pid_fd_exited(int pidfd)
{
    struct pollfd p = {.fd = pidfd, .events = POLLIN};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLIN | POLLHUP | POLLERR));
}
