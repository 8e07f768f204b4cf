/* vram top's screen, laid out for the terminal it gets: every line is cut
 * at the right edge (nothing wraps), GPU rows fold from two lines to one
 * when rows are short, the job and process lists share what is left and
 * scroll, firing alerts sit under the title. Text from vramd or /proc (job
 * names, users, command lines, alert messages) goes through
 * vram_escape_text: a newline in a name cannot move the cursor. */
#include "cli/top.h"
#include "vram_int.h"

#include <curses.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

/* text at (y, x), at most w columns: one per code point (escaped text has
 * no control characters left) */
static void put(int y, int x, int w, const char *text)
{
    const unsigned char *p = (const unsigned char *)text;
    size_t bytes = 0;
    for (int c = 0; p[bytes] && c < w; c++) {
        size_t n = vram_utf8_length(p + bytes);
        bytes += n ? n : 1;
    }
    if (bytes) mvaddnstr(y, x, text, (int)bytes);
}

static void putf(int y, int x, int w, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void putf(int y, int x, int w, const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    put(y, x, w, line);
}

static const char *esc(const char *in, char *buf, size_t len)
{
    vram_escape_text(in, buf, len);
    return buf;
}

static double gib(uint64_t b)
{
    return b == VRAM_UNKNOWN_U64 ? 0 : vram_gib(b);
}

static uint64_t field_u64(json_t *o, const char *key)
{
    return (uint64_t)json_integer_value(json_object_get(o, key));
}

static json_t *status_device(top_t *t, int d)
{
    return t->status ? json_array_get(json_object_get(t->status, "devices"), (size_t)d) : NULL;
}

/* Appends seg to line when it still fits in cols; a segment that does not
 * fit is left out, later (shorter) ones may still fit. */
static void append(char *line, size_t cap, int cols, const char *seg)
{
    size_t n = strlen(line), s = strlen(seg);
    if ((int)(n + s) <= cols && n + s < cap) memcpy(line + n, seg, s + 1);
}

/* [|||||###...    ]: used, reserved beyond used, free for admission, rest. */
static void draw_bar(int y, int x, int width, uint64_t total, uint64_t used, uint64_t reserved,
                     uint64_t free_adm)
{
    if (width < 1) return;
    double per = total && total != VRAM_UNKNOWN_U64 ? (double)width / (double)total : 0;
    int u = (int)lround((double)used * per);
    int r = reserved > used ? (int)lround((double)(reserved - used) * per) : 0;
    int f = (int)lround((double)free_adm * per);
    mvaddch(y, x, '[');
    for (int i = 0; i < width; i++)
        addch(i < u ? '|' : i < u + r ? '#' : i < u + r + f ? '.' : ' ');
    addch(']');
}

static void draw_spark(top_t *t, int d, int y, int x, int width)
{
    static const char *const blocks[] = {"\u2581", "\u2582", "\u2583", "\u2584",
                                         "\u2585", "\u2586", "\u2587", "\u2588"};
    static const char ascii[] = "_.-~=+*#";
    move(y, x);
    int n = width < t->nspark ? width : t->nspark;
    for (int i = TOP_SPARK_LEN - n; i < TOP_SPARK_LEN; i++) {
        double v = t->spark[d][i];
        int level = (int)(v * 7.999);
        if (v < 0)
            addch(' ');
        else if (t->utf8)
            addstr(blocks[level]);
        else
            addch((chtype)ascii[level]);
    }
}

/* The figures of a GPU after its name, as many as fit in cols. */
static void gpu_figures(top_t *t, int d, char *line, size_t cap, int cols, bool compact)
{
    const vram_device_info_t *i = &t->devs[d];
    json_t *s = status_device(t, d);
    char seg[64];
    snprintf(seg, sizeof seg, compact ? " %5.1f/%.0fG" : " %6.1f/%.1f GiB used", gib(i->used_bytes),
             gib(i->total_bytes));
    append(line, cap, cols, seg);
    snprintf(seg, sizeof seg, "  %s", vram_health_name(i->health));
    append(line, cap, cols, seg);
    if (s) {
        snprintf(seg, sizeof seg, compact ? "  rsv %.1f" : "  %.1f reserved",
                 vram_gib(field_u64(s, "reserved_bytes")));
        append(line, cap, cols, seg);
        snprintf(seg, sizeof seg, compact ? "  adm %.1f" : "  %.1f free-adm",
                 vram_gib(field_u64(s, "free_for_admission_bytes")));
        append(line, cap, cols, seg);
    }
    if (i->utilization_pct >= 0) {
        snprintf(seg, sizeof seg, "  %d%%", i->utilization_pct);
        append(line, cap, cols, seg);
    }
    if (i->temperature_c >= 0) {
        snprintf(seg, sizeof seg, " %dC", i->temperature_c);
        append(line, cap, cols, seg);
    }
    if (i->power_w >= 0) {
        snprintf(seg, sizeof seg, " %.0fW", i->power_w);
        append(line, cap, cols, seg);
    }
}

static void bar_of(top_t *t, int d, int y, int x, int width)
{
    const vram_device_info_t *i = &t->devs[d];
    json_t *s = status_device(t, d);
    draw_bar(y, x, width, i->total_bytes, i->used_bytes == VRAM_UNKNOWN_U64 ? 0 : i->used_bytes,
             s ? field_u64(s, "reserved_bytes") : 0,
             s ? field_u64(s, "free_for_admission_bytes") : 0);
}

/* Two lines: name and figures; bar and sparkline. */
static void gpu_full(top_t *t, int d, int y, int cols)
{
    char name[64], line[512];
    snprintf(line, sizeof line, "GPU%-2d %-14.14s", d, esc(t->devs[d].name, name, sizeof name));
    gpu_figures(t, d, line, sizeof line, cols, false);
    attron(A_BOLD);
    put(y, 0, 20, line);
    attroff(A_BOLD);
    put(y, 20, cols - 20, line + 20);
    int spark = cols >= 110 ? TOP_SPARK_LEN : cols >= 90 ? 20 : 12;
    int bar = cols - 6 - 2 - 1 - spark - 6;
    if (bar < 10) { /* too narrow for a sparkline */
        spark = 0;
        bar = cols - 6 - 2;
    }
    bar_of(t, d, y + 1, 6, bar);
    if (spark) {
        draw_spark(t, d, y + 1, 6 + bar + 3, spark);
        put(y + 1, 6 + bar + 3 + spark, cols - (6 + bar + 3 + spark),
            t->spark_from_vramd ? " 5min" : "");
    }
}

/* One line: name, a short bar, the figures that fit. */
static void gpu_compact(top_t *t, int d, int y, int cols)
{
    char name[64], line[512] = "";
    int bar = cols >= 140 ? 40 : cols - 17 - 2 - 42;
    if (bar < 8) bar = 8;
    attron(A_BOLD);
    putf(y, 0, cols, "GPU%-2d %-10.10s", d, esc(t->devs[d].name, name, sizeof name));
    attroff(A_BOLD);
    bar_of(t, d, y, 17, bar);
    gpu_figures(t, d, line, sizeof line, cols - (17 + bar + 2), true);
    put(y, 17 + bar + 2, cols - (17 + bar + 2), line);
}

/* Keeps *sel within [0, n) and *top so that *sel is among the `shown` rows. */
static void scroll_to(int *sel, int *top, int n, int shown)
{
    if (*sel >= n) *sel = n - 1;
    if (*sel < 0) *sel = 0;
    if (shown < 1) shown = 1;
    if (*sel < *top) *top = *sel;
    if (*sel >= *top + shown) *top = *sel - shown + 1;
    if (*top > n - shown) *top = n - shown;
    if (*top < 0) *top = 0;
}

/* "  3-7 of 12" when a list does not fit */
static void range_note(char *buf, size_t len, int top, int shown, int n)
{
    buf[0] = 0;
    if (n > shown) snprintf(buf, len, " %d-%d of %d", top + 1, top + shown, n);
}

static void header(int y, int cols, const char *text, const char *note, bool focused)
{
    attron(A_REVERSE);
    char line[512];
    snprintf(line, sizeof line, "%-*s", cols, text);
    put(y, 0, cols, line);
    if (*note) put(y, cols - (int)strlen(note) - 1, (int)strlen(note), note);
    if (focused) put(y, cols - 1, 1, "*");
    attroff(A_REVERSE);
}

static void draw_jobs(top_t *t, int y, int lines, int cols)
{
    if (!t->watch) {
        char why[200];
        attron(A_BOLD);
        putf(y, 0, cols, "vramd: not running - devices only (%s)",
             esc(t->vramd_why, why, sizeof why));
        attroff(A_BOLD);
        return;
    }
    json_t *jobs = json_object_get(t->watch, "jobs");
    int n = (int)json_array_size(jobs), shown = lines - 1;
    bool wide = cols >= 88;
    scroll_to(&t->selected, &t->job_top, n, shown);
    char note[48], head[256];
    range_note(note, sizeof note, t->job_top, shown, n);
    snprintf(head, sizeof head, "%-6s %-20s %-10s %-8s %-6s %10s %10s%s", "JOB", "NAME", "USER",
             "STATE", "ON GPU", "RESERVED", "USED", wide ? "  TIME" : "");
    header(y++, cols, head, note, t->focus == FOCUS_JOBS);
    if (!n) put(y, 0, cols, "(no queued or running jobs)");
    double now = (double)time(NULL);
    for (int r = 0; r < shown && t->job_top + r < n; r++) {
        int i = t->job_top + r;
        json_t *j = json_array_get(jobs, (size_t)i);
        char gpus[32] = "", *p = gpus, name[256], user[64], when[32] = "";
        size_t k;
        json_t *g;
        json_array_foreach(json_object_get(j, "devices"), k, g) p +=
            snprintf(p, (size_t)(gpus + sizeof gpus - p), k ? ",%lld" : "%lld",
                     (long long)json_integer_value(g));
        const char *state = json_string_value(json_object_get(j, "state"));
        bool queued = state && !strcmp(state, "queued");
        if (queued) /* where it will run is not known yet: how many it wants */
            snprintf(gpus, sizeof gpus, "want %lld",
                     (long long)json_integer_value(json_object_get(j, "gpus")));
        double since =
            json_number_value(json_object_get(j, queued ? "submitted_at" : "started_at"));
        if (wide && since > 0)
            snprintf(when, sizeof when, "  %s%.0f s", queued ? "waited " : "", now - since);
        char used[16];
        snprintf(used, sizeof used, "%6.2f GiB", vram_gib(field_u64(j, "used_bytes")));
        if (i == t->selected && t->focus == FOCUS_JOBS) attron(A_STANDOUT);
        putf(y + r, 0, cols, "%-6lld %-20.20s %-10.10s %-8.8s %-6.6s %6.2f GiB %10s%s",
             (long long)json_integer_value(json_object_get(j, "id")),
             esc(json_string_value(json_object_get(j, "name")), name, sizeof name),
             esc(json_string_value(json_object_get(j, "user")), user, sizeof user),
             state ? state : "?", *gpus ? gpus : "-", vram_gib(field_u64(j, "reserved_bytes")),
             queued ? "-" : used, when);
        if (i == t->selected && t->focus == FOCUS_JOBS) attroff(A_STANDOUT);
    }
}

static void draw_procs(top_t *t, int y, int lines, int cols)
{
    int n = (int)t->nprocs, shown = lines - 1;
    scroll_to(&t->proc_selected, &t->proc_top, n, shown);
    char note[48], head[256];
    range_note(note, sizeof note, t->proc_top, shown, n);
    snprintf(head, sizeof head, "%-4s %8s %-10s %10s  COMMAND (sort: %s)", "GPU", "PID", "USER",
             "MEMORY", top_sort_names[t->sort]);
    header(y++, cols, head, note, t->focus == FOCUS_PROCS);
    if (!n) put(y, 0, cols, "(no processes on the GPUs)");
    for (int r = 0; r < shown && t->proc_top + r < n; r++) {
        int i = t->proc_top + r;
        const top_proc_t *p = &t->procs[i];
        char user[64], cmd[512];
        if (i == t->proc_selected && t->focus == FOCUS_PROCS) attron(A_STANDOUT);
        putf(y + r, 0, cols, "%-4d %8d %-10.10s %6.2f GiB  %s", p->device, (int)p->pid,
             esc(p->user, user, sizeof user), gib(p->used), esc(p->command, cmd, sizeof cmd));
        if (i == t->proc_selected && t->focus == FOCUS_PROCS) attroff(A_STANDOUT);
    }
}

/* Firing alerts under the title: up to `max` lines. Returns lines used. */
static int draw_alerts(top_t *t, int y, int max, int cols)
{
    json_t *firing = t->alerts ? json_object_get(t->alerts, "firing") : NULL;
    int n = (int)json_array_size(firing), used = 0;
    for (int i = 0; i < n && used < max; i++, used++) {
        json_t *a = json_array_get(firing, (size_t)i);
        if (used == max - 1 && n > max) {
            putf(y + used, 0, cols, "ALERT ... and %d more firing (vram alerts)", n - used);
            return used + 1;
        }
        char msg[512], rule[128];
        const char *level = json_string_value(json_object_get(a, "level"));
        attron(level && strcmp(level, "info") ? A_BOLD : A_NORMAL);
        putf(y + used, 0, cols, "ALERT %-8s %s: %s", level ? level : "?",
             esc(json_string_value(json_object_get(a, "rule")), rule, sizeof rule),
             esc(json_string_value(json_object_get(a, "message")), msg, sizeof msg));
        attroff(A_BOLD);
    }
    return used;
}

static void draw_help(int rows, int cols)
{
    static const char *const lines[] = {
        "vram top - keys",
        "",
        "q          quit",
        "?          this help (any key closes it)",
        "s          next sort of the processes",
        "Tab        switch between jobs and processes",
        "up/down j/k  move in the list (it scrolls)",
        "PgUp/PgDn  a page up or down",
        "Home/End   first or last row",
        "c          cancel the selected job (asks first)",
        "",
        "bar: | used  # reserved by vramd  . free for admission",
    };
    int n = (int)(sizeof lines / sizeof lines[0]), w = 58;
    if (w > cols - 2) w = cols - 2;
    int y0 = rows > n + 2 ? (rows - n - 2) / 2 : 0, x0 = (cols - w - 2) / 2;
    if (x0 < 0) x0 = 0;
    for (int i = 0; i < n + 2 && y0 + i < rows; i++) {
        attron(A_REVERSE);
        putf(y0 + i, x0, w + 2, " %-*s ", w, i == 0 || i == n + 1 ? "" : lines[i - 1]);
        attroff(A_REVERSE);
    }
}

void top_draw(top_t *t)
{
    int rows, cols;
    getmaxyx(stdscr, rows, cols);
    erase();
    time_t now = time(NULL);
    char when[16];
    strftime(when, sizeof when, "%H:%M:%S", localtime(&now));
    attron(A_BOLD);
    putf(0, 0, cols, "vram top - %d GPU(s), %s backend - vramd %s - %s", t->ndev,
         vram_ctx_backend(t->ctx), t->watch ? "connected" : "not running", when);
    attroff(A_BOLD);
    int y = 1 + draw_alerts(t, 1, rows >= 30 ? 3 : 1, cols);
    int njobs = t->watch ? (int)json_array_size(json_object_get(t->watch, "jobs")) : 0;
    int nprocs = (int)t->nprocs;
    /* each list: a header and at least two rows (or its "none" line) */
    int jobs_min = 1 + (njobs < 2 ? 1 : 2), procs_min = 1 + (nprocs < 2 ? 1 : 2);
    int avail = rows - y - 1 - 3; /* the status line; blank lines around the GPUs and lists */
    bool compact = 2 * t->ndev + jobs_min + procs_min > avail;
    int gpu_lines = compact ? t->ndev : 2 * t->ndev;
    int hidden = 0;
    if (gpu_lines + jobs_min + procs_min > avail) { /* even one line each is too much */
        gpu_lines = avail - jobs_min - procs_min;
        if (gpu_lines < 1) gpu_lines = 1;
        hidden = t->ndev - (gpu_lines - 1);
    }
    y++;
    for (int d = 0; d < t->ndev; d++) {
        if (hidden > 0 && d == t->ndev - hidden) {
            putf(y++, 0, cols, "  ... %d more GPU(s): a taller terminal shows them", hidden);
            break;
        }
        if (compact)
            gpu_compact(t, d, y++, cols);
        else {
            gpu_full(t, d, y, cols);
            y += 2;
        }
    }
    y++;
    int left = rows - 1 - y - 1; /* lists and the blank line between them */
    int want_jobs = 1 + (njobs ? njobs : 1), jobs_lines = left / 2;
    if (jobs_lines > want_jobs) jobs_lines = want_jobs;
    if (jobs_lines < jobs_min) jobs_lines = jobs_min;
    if (!t->watch) jobs_lines = 1;
    draw_jobs(t, y, jobs_lines, cols);
    y += jobs_lines + 1;
    draw_procs(t, y, rows - 1 - y, cols);
    attron(A_REVERSE);
    char msg[256], line[512];
    snprintf(line, sizeof line, "q quit  ? help  s sort  Tab %s  c cancel  %s",
             t->focus == FOCUS_JOBS ? "jobs*" : "procs*", esc(t->message, msg, sizeof msg));
    char padded[600];
    snprintf(padded, sizeof padded, "%-*s", cols, line);
    put(rows - 1, 0, cols, padded);
    attroff(A_REVERSE);
    if (t->help) draw_help(rows, cols);
    refresh();
}
