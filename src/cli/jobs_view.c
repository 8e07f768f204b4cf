/* Views of vramd's jobs: fields by letter (like squeue -o), the table, the
 * detail of one job. Every string from the daemon is escaped before it
 * reaches the terminal (names and commands are whatever a client sent). */
#include "cli/jobs_view.h"
#include "vram_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

const char jobs_field_help[] = "  %i id          %u user        %t state       %j name\n"
                               "  %g GPUs        %m mem/GPU     %b batch x accumulation\n"
                               "  %V submitted   %S started     %e ended       %M elapsed\n"
                               "  %D devices     %p priority    %r reason or error\n"
                               "  %c command     %%%% a percent sign\n";

static long long int_of(json_t *job, const char *key)
{
    return (long long)json_integer_value(json_object_get(job, key));
}

static const char *str_of(json_t *job, const char *key)
{
    const char *s = json_string_value(json_object_get(job, key));
    return s ? s : "";
}

void jobs_ctx_init(jobs_ctx_t *ctx)
{
    memset(ctx, 0, sizeof *ctx);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ctx->now = (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void user_name(json_t *job, char *buf, size_t len)
{
    vram_user_name((uid_t)int_of(job, "owner_uid"), buf, len);
}

/* Local time: "14:03:12" today, "11-21 14:03" on other days, "-" for none. */
static void clock_text(json_t *t, double now, char *buf, size_t len)
{
    if (!json_is_number(t)) {
        snprintf(buf, len, "-");
        return;
    }
    time_t at = (time_t)json_number_value(t), today = (time_t)now;
    struct tm a, b;
    localtime_r(&at, &a);
    localtime_r(&today, &b);
    strftime(buf, len,
             a.tm_yday == b.tm_yday && a.tm_year == b.tm_year ? "%H:%M:%S" : "%m-%d %H:%M", &a);
}

/* Like squeue: "M:SS", "H:MM:SS", "D-HH:MM:SS". Queued jobs count their wait. */
static void elapsed_text(json_t *job, double now, char *buf, size_t len)
{
    json_t *start = json_object_get(job, "started_at"), *end = json_object_get(job, "ended_at");
    double from = json_is_number(start) ? json_number_value(start)
                                        : json_number_value(json_object_get(job, "submitted_at"));
    double to = json_is_number(end) ? json_number_value(end) : now;
    long s = to > from ? (long)(to - from) : 0;
    if (s >= 86400)
        snprintf(buf, len, "%ld-%02ld:%02ld:%02ld", s / 86400, s / 3600 % 24, s / 60 % 60, s % 60);
    else if (s >= 3600)
        snprintf(buf, len, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
    else
        snprintf(buf, len, "%ld:%02ld", s / 60, s % 60);
}

static void int_list(json_t *a, char *buf, size_t len)
{
    size_t at = 0, i;
    json_t *v;
    buf[0] = 0;
    json_array_foreach(a, i, v)
    {
        if (at < len)
            at += (size_t)snprintf(buf + at, len - at, i ? ",%lld" : "%lld",
                                   (long long)json_integer_value(v));
    }
    if (!at) snprintf(buf, len, "-");
}

static void reason(const jobs_ctx_t *ctx, json_t *job, char *buf, size_t len)
{
    (void)ctx;
    if (!strcmp(str_of(job, "state"), "queued")) {
        snprintf(buf, len, "%s", str_of(job, "reason"));
    } else if (json_is_true(json_object_get(job, "over_reservation"))) {
        char used[32];
        snprintf(buf, len, "uses %s, above its reservation",
                 vram_format_size((uint64_t)int_of(job, "used_bytes"), used, sizeof used));
    } else {
        snprintf(buf, len, "%s", str_of(job, "error"));
    }
}

const char *jobs_field(const jobs_ctx_t *ctx, json_t *job, char letter, char *buf, size_t len)
{
    char raw[600];
    json_int_t reserved = int_of(job, "reserved_bytes"), asked = int_of(job, "mem_bytes");
    raw[0] = 0;
    switch (letter) {
    case 'i':
        snprintf(raw, sizeof raw, "%lld", int_of(job, "id"));
        break;
    case 'u':
        user_name(job, raw, sizeof raw);
        break;
    case 't':
        snprintf(raw, sizeof raw, "%s", str_of(job, "state"));
        break;
    case 'j':
        snprintf(raw, sizeof raw, "%s", str_of(job, "name"));
        break;
    case 'c':
        snprintf(raw, sizeof raw, "%s", str_of(job, "command"));
        break;
    case 'g':
        snprintf(raw, sizeof raw, "%lld", int_of(job, "gpus"));
        break;
    case 'm': /* '!' marks a job using more than it reserved */
        vram_format_size((uint64_t)(reserved ? reserved : asked), raw, sizeof raw);
        if (json_is_true(json_object_get(job, "over_reservation"))) strcat(raw, "!");
        break;
    case 'b':
        if (int_of(job, "granted_batch_size"))
            snprintf(raw, sizeof raw, "%lldx%lld", int_of(job, "granted_batch_size"),
                     int_of(job, "grad_accum"));
        else
            snprintf(raw, sizeof raw, "-");
        break;
    case 'V':
        clock_text(json_object_get(job, "submitted_at"), ctx->now, raw, sizeof raw);
        break;
    case 'S':
        clock_text(json_object_get(job, "started_at"), ctx->now, raw, sizeof raw);
        break;
    case 'e':
        clock_text(json_object_get(job, "ended_at"), ctx->now, raw, sizeof raw);
        break;
    case 'M':
        elapsed_text(job, ctx->now, raw, sizeof raw);
        break;
    case 'D':
        int_list(json_object_get(job, "devices"), raw, sizeof raw);
        break;
    case 'p':
        snprintf(raw, sizeof raw, "%lld", int_of(job, "priority"));
        break;
    case 'r':
        reason(ctx, job, raw, sizeof raw);
        break;
    default:
        snprintf(raw, sizeof raw, "?");
    }
    return cli_escaped(raw, buf, len);
}

static const struct {
    char letter;
    const char *header;
} headers[] = {{'i', "ID"},        {'u', "USER"},    {'t', "STATE"},   {'j', "NAME"},
               {'c', "COMMAND"},   {'g', "GPUS"},    {'m', "MEM/GPU"}, {'b', "BATCH"},
               {'V', "SUBMITTED"}, {'S', "STARTED"}, {'e', "ENDED"},   {'M', "ELAPSED"},
               {'D', "DEVICES"},   {'p', "PRIO"},    {'r', "REASON"}};

static const char *header_of(char letter)
{
    for (size_t i = 0; i < sizeof headers / sizeof headers[0]; i++)
        if (headers[i].letter == letter) return headers[i].header;
    return NULL;
}

/* Prints one line: the job's fields, or the headers when job is NULL. */
static int format_line(const jobs_ctx_t *ctx, json_t *job, const char *fmt)
{
    for (const char *f = fmt; *f; f++) {
        if (*f != '%') {
            putchar(*f);
            continue;
        }
        if (f[1] == '%') {
            putchar('%');
            f++;
            continue;
        }
        bool right = f[1] == '.';
        const char *p = f + 1 + right;
        if (*p == '-') p++; /* left is the default */
        int width = (int)strtol(p, (char **)&p, 10);
        if (!*p || !header_of(*p)) return -1;
        char buf[700];
        const char *text = job ? jobs_field(ctx, job, *p, buf, sizeof buf) : header_of(*p);
        printf(right ? "%*.*s" : "%-*.*s", width, width ? width : (int)strlen(text), text);
        f = p;
    }
    putchar('\n');
    return 0;
}

/* Every %X names a field (checked before anything is printed). */
static bool format_valid(const char *fmt)
{
    for (const char *f = strchr(fmt, '%'); f; f = strchr(f + 1, '%')) {
        if (f[1] == '%') {
            f++;
            continue;
        }
        const char *p = f + 1 + (f[1] == '.');
        if (*p == '-') p++;
        p += strspn(p, "0123456789");
        if (!header_of(*p)) return false;
        f = p;
    }
    return true;
}

int jobs_print_format(const jobs_ctx_t *ctx, json_t *jobs, const char *fmt, bool header)
{
    if (!format_valid(fmt)) return -1;
    if (header && format_line(ctx, NULL, fmt) != 0) return -1;
    size_t i;
    json_t *j;
    json_array_foreach(jobs, i, j)
    {
        if (format_line(ctx, j, fmt) != 0) return -1;
    }
    return 0;
}

void jobs_print_table(const jobs_ctx_t *ctx, json_t *jobs)
{
    jobs_print_format(ctx, jobs,
                      "%.6i  %-10u %-9t %-16j %.4g %.10m %.7b  %-11V %-11S %.10M  %-7D %r", true);
    if (json_array_size(jobs) == 0) printf("(no jobs)\n");
}

void jobs_print_detail(const jobs_ctx_t *ctx, json_t *job, json_t *events)
{
    static const struct {
        char letter;
        const char *label;
    } lines[] = {{'i', "id"},          {'j', "name"},   {'c', "command"},  {'u', "user"},
                 {'t', "state"},       {'r', "reason"}, {'g', "gpus"},     {'D', "devices"},
                 {'m', "mem per GPU"}, {'b', "batch"},  {'p', "priority"}, {'V', "submitted"},
                 {'S', "started"},     {'e', "ended"},  {'M', "elapsed"}};
    char buf[700];
    for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++)
        printf("%-12s %s\n", lines[i].label,
               jobs_field(ctx, job, lines[i].letter, buf, sizeof buf));
    json_t *status = json_object_get(job, "exit_status");
    if (json_is_integer(status))
        printf("%-12s %lld\n", "exit status", (long long)json_integer_value(status));
    printf("\nevents:\n");
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(events, "events"), i, e)
    {
        char when[32], kind[64], msg[600];
        clock_text(json_object_get(e, "at"), ctx->now, when, sizeof when);
        printf("  %-14s %-16s %s\n", when, cli_escaped(str_of(e, "kind"), kind, sizeof kind),
               cli_escaped(str_of(e, "message"), msg, sizeof msg));
    }
}
