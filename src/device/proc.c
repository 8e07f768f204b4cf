/* /proc readers shared by the sim and cpu backends. */
#include "device/proc.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool vram_proc_start_time(pid_t pid, uint64_t *ticks)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "re");
    if (!f) return false;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* The command name (field 2) may contain spaces and ')': fields resume
     * after the last ')'. Field 3 follows it; skip to field 22. */
    char *p = strrchr(buf, ')');
    if (!p) return false;
    p++;
    for (int field = 3; field < 22; field++) {
        p = strchr(p + 1, ' ');
        if (!p) return false;
    }
    char *end;
    errno = 0;
    unsigned long long v = strtoull(p + 1, &end, 10);
    if (errno || end == p + 1) return false;
    *ticks = v;
    return true;
}

bool vram_proc_alive(pid_t pid, uint64_t start_time)
{
    if (pid <= 0) return false;
    if (kill(pid, 0) != 0 && errno == ESRCH) return false;
    uint64_t now;
    if (!vram_proc_start_time(pid, &now)) {
        /* No /proc entry: gone, unless /proc itself is missing (trust kill). */
        FILE *f = fopen("/proc/self/stat", "re");
        if (!f) return true;
        fclose(f);
        return false;
    }
    return start_time == 0 || now == start_time;
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
