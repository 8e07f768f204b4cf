/* The process's own figures for the standard process_* metrics (the names
 * Prometheus' client libraries export, so one dashboard fits every
 * exporter): CPU time, memory, descriptors, threads, start time. Read from
 * /proc/self (Linux). */
#include "watch_internal.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

static double boot_time(void)
{
    FILE *f = fopen("/proc/stat", "r");
    if (!f) return -1;
    char line[256];
    double btime = -1;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "btime ", 6)) btime = strtod(line + 6, NULL);
    fclose(f);
    return btime;
}

static int open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d) return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += e->d_name[0] != '.';
    closedir(d);
    return n - 1; /* opendir's own */
}

int vram_watch_self(watch_self_t *out)
{
    memset(out, 0, sizeof *out);
    FILE *f = fopen("/proc/self/stat", "r");
    if (!f) return vram_fail(VRAM_EIO, "/proc/self/stat: cannot open");
    char buf[1024];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    /* after "pid (comm) ": field 3 (state) onwards; comm may hold spaces */
    char *p = strrchr(buf, ')');
    unsigned long long utime, stime, start, vsize;
    long long rss;
    long threads;
    if (!p || sscanf(p + 2,
                     "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %*d %*d %*d %*d %ld "
                     "%*d %llu %llu %lld",
                     &utime, &stime, &threads, &start, &vsize, &rss) != 6)
        return vram_fail(VRAM_EIO, "/proc/self/stat: unexpected format");
    double tick = (double)sysconf(_SC_CLK_TCK), page = (double)sysconf(_SC_PAGESIZE);
    out->cpu_seconds = (double)(utime + stime) / tick;
    out->virtual_bytes = (double)vsize;
    out->resident_bytes = (double)rss * page;
    out->threads = (double)threads;
    double btime = boot_time();
    out->start_time_seconds = btime < 0 ? -1 : btime + (double)start / tick;
    out->open_fds = open_fds();
    struct rlimit rl;
    out->max_fds = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY
                       ? (double)rl.rlim_cur
                       : -1;
    return 0;
}
