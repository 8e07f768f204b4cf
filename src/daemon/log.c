/* Log lines to stderr: "2026-01-01T12:00:00.123Z vramd info: message". */
#include "daemon/daemon.h"
#include "vram_int.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>

static int level_rank(const char *level)
{
    static const char *const names[] = {"error", "warn", "info", "debug"};
    for (int i = 0; i < 4; i++)
        if (!strcasecmp(level, names[i])) return i;
    return 2;
}

bool vramd_log_enabled(const char *level)
{
    return level_rank(level) <= level_rank(vram_option_str(VRAM_OPT_LOG_LEVEL));
}

void vramd_log(const char *level, const char *fmt, ...)
{
    if (!vramd_log_enabled(level)) return;
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char when[32];
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", &tm);
    /* Messages quote client strings (names, paths, errors): escaped, one
     * line each, so none can forge a log line or drive a terminal. */
    char msg[2048], safe[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    vram_escape_text(msg, safe, sizeof safe);
    pthread_mutex_lock(&lock);
    fprintf(stderr, "%s.%03ldZ vramd %s: %s\n", when, ts.tv_nsec / 1000000, level, safe);
    fflush(stderr);
    pthread_mutex_unlock(&lock);
}
