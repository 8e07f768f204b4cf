/* vram top: a live terminal view (ncurses), like nvitop: per GPU a memory bar
 * (used / reserved by vramd / free for admission) and a sparkline, the
 * processes with user, pid, memory and command, and vramd's jobs and queue.
 * Devices come from the local backend, so it works without vramd. */
#include "cli/daemon_client.h"
#include "cli/proc_text.h"
#include "core/proc.h"

#include <curses.h>
#include <getopt.h>
#include <langinfo.h>
#include <locale.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <time.h>

#define SPARK_LEN    30  /* points per sparkline */
#define SPARK_SPAN_S 300 /* with vramd: the last 5 minutes, from its history */
#define MAX_PROCS    256

typedef enum { SORT_MEMORY, SORT_PID, SORT_USER, SORT_GPU, SORT_COMMAND, SORT_COUNT_ } sort_t;
static const char *const sort_names[] = {"memory", "pid", "user", "gpu", "command"};

typedef struct {
    int device;
    pid_t pid;
    uint64_t used;
    char user[32];
    char command[256];
} proc_row_t;

typedef struct {
    vram_ctx_t *ctx;
    int ndev;
    vram_device_info_t *devs;
    double (*spark)[SPARK_LEN]; /* used fraction per device, oldest first */
    int nspark;
    bool spark_from_vramd; /* else: this view's own samples */
    proc_row_t procs[MAX_PROCS];
    size_t nprocs;
    json_t *status, *watch; /* vramd's views, NULL when it does not answer */
    char vramd_why[256];
    sort_t sort;
    int selected; /* index into the jobs of `watch` */
    char message[256];
    bool utf8;
} top_t;

static void usage(FILE *out)
{
    fprintf(out, "usage: vram top [-d|--delay SECONDS]\n\n"
                 "A live view of the GPUs (memory bar: used, reserved by vramd, free for\n"
                 "admission; a sparkline of the last 5 minutes from vramd's history, else of\n"
                 "the samples of this view), their processes and vramd's jobs.\n"
                 "Without vramd it shows the devices and processes only.\n\n"
                 "Keys: q quit, s next sort key (memory, pid, user, gpu, command), up/down or\n"
                 "j/k select a job, c cancel the selected job (asks first).\n");
}

/* ---- data --------------------------------------------------------------- */

static int compare_procs(const void *a, const void *b, void *arg)
{
    const proc_row_t *x = a, *y = b;
    switch (*(sort_t *)arg) {
    case SORT_PID:
        return (x->pid > y->pid) - (x->pid < y->pid);
    case SORT_USER:
        return strcmp(x->user, y->user);
    case SORT_GPU:
        return x->device - y->device;
    case SORT_COMMAND:
        return strcmp(x->command, y->command);
    default:
        return (x->used < y->used) - (x->used > y->used);
    }
}

/* The sparkline of device d from vramd's history: the peak of each of
 * SPARK_LEN buckets over the last SPARK_SPAN_S seconds. */
static void spark_from_history(top_t *t, int d)
{
    char path[128];
    snprintf(path, sizeof path, "/v1/history?device=%d&from=-%d&step=%d", d, SPARK_SPAN_S,
             SPARK_SPAN_S / SPARK_LEN);
    long status = 0;
    json_t *h = NULL;
    double total = (double)t->devs[d].total_bytes;
    if (cli_daemon_call("GET", path, NULL, &status, &h) != 0 || status != 200 || !(total > 0)) {
        json_decref(h);
        return;
    }
    double from = json_number_value(json_object_get(h, "from"));
    for (int i = 0; i < SPARK_LEN; i++)
        t->spark[d][i] = -1;
    size_t i;
    json_t *p;
    json_array_foreach(json_object_get(h, "points"), i, p)
    {
        int slot =
            (int)((json_number_value(json_array_get(p, 0)) - from) / (SPARK_SPAN_S / SPARK_LEN));
        if (slot >= 0 && slot < SPARK_LEN)
            t->spark[d][slot] = json_number_value(json_array_get(p, 2)) / total;
    }
    t->nspark = SPARK_LEN;
    json_decref(h);
}

static void refresh_data(top_t *t)
{
    t->nprocs = 0;
    for (int d = 0; d < t->ndev; d++) {
        vram_device_info_t *i = &t->devs[d];
        if (vram_device_info(t->ctx, d, i) != 0) continue;
        memmove(t->spark[d], t->spark[d] + 1, (SPARK_LEN - 1) * sizeof(double));
        t->spark[d][SPARK_LEN - 1] = i->total_bytes && i->used_bytes != VRAM_UNKNOWN_U64
                                         ? (double)i->used_bytes / (double)i->total_bytes
                                         : -1;
        vram_process_info_t p[64];
        size_t n = 0;
        if (i->health == VRAM_HEALTH_ERROR || vram_device_processes(t->ctx, d, p, 64, &n) != 0)
            continue;
        for (size_t k = 0; k < n && k < 64 && t->nprocs < MAX_PROCS; k++) {
            proc_row_t *r = &t->procs[t->nprocs++];
            r->device = d;
            r->pid = p[k].pid;
            r->used = p[k].used_bytes;
            vram_proc_user(p[k].pid, r->user, sizeof r->user);
            vram_proc_command(p[k].pid, r->command, sizeof r->command);
            if (!r->command[0]) snprintf(r->command, sizeof r->command, "%s", p[k].name);
        }
    }
    if (t->nspark < SPARK_LEN) t->nspark++;
    qsort_r(t->procs, t->nprocs, sizeof *t->procs, compare_procs, &t->sort);
    json_decref(t->status);
    json_decref(t->watch);
    t->status = t->watch = NULL;
    long st1 = 0, st2 = 0;
    json_t *a = NULL, *b = NULL;
    int rc = cli_daemon_call("GET", "/v1/status", NULL, &st1, &a);
    if (rc == 0) rc = cli_daemon_call("GET", "/v1/watch", NULL, &st2, &b);
    if (rc == 0 && st1 == 200 && st2 == 200) {
        t->status = a;
        t->watch = b;
        t->vramd_why[0] = 0;
    } else {
        snprintf(t->vramd_why, sizeof t->vramd_why, "%s",
                 rc ? vram_last_error() : "vramd answered with an error");
        json_decref(a);
        json_decref(b);
    }
    t->spark_from_vramd = t->status != NULL;
    for (int d = 0; t->status && d < t->ndev; d++)
        spark_from_history(t, d);
    size_t njobs = t->watch ? json_array_size(json_object_get(t->watch, "jobs")) : 0;
    if (t->selected >= (int)njobs) t->selected = (int)njobs - 1;
    if (t->selected < 0 && njobs) t->selected = 0;
}

/* ---- drawing ------------------------------------------------------------------- */

static double gib(uint64_t b)
{
    return b == VRAM_UNKNOWN_U64 ? 0 : vram_gib(b);
}

static json_t *status_device(top_t *t, int d)
{
    return t->status ? json_array_get(json_object_get(t->status, "devices"), (size_t)d) : NULL;
}

static uint64_t field_u64(json_t *o, const char *key)
{
    return (uint64_t)json_integer_value(json_object_get(o, key));
}

/* [|||||###...    ]: used, reserved beyond used, free for admission, rest. */
static void draw_bar(int y, int x, int width, uint64_t total, uint64_t used, uint64_t reserved,
                     uint64_t free_adm)
{
    double per = total ? (double)width / (double)total : 0;
    int u = (int)lround((double)used * per);
    int r = reserved > used ? (int)lround((double)(reserved - used) * per) : 0;
    int f = (int)lround((double)free_adm * per);
    mvaddch(y, x, '[');
    for (int i = 0; i < width; i++) {
        chtype c = i < u ? '|' : i < u + r ? '#' : i < u + r + f ? '.' : ' ';
        addch(c);
    }
    addch(']');
}

static void draw_spark(top_t *t, int d, int y, int x, int width)
{
    static const char *const blocks[] = {"\u2581", "\u2582", "\u2583", "\u2584",
                                         "\u2585", "\u2586", "\u2587", "\u2588"};
    static const char ascii[] = "_.-~=+*#";
    move(y, x);
    int from = SPARK_LEN - (width < t->nspark ? width : t->nspark);
    for (int i = from; i < SPARK_LEN; i++) {
        double v = t->spark[d][i];
        int level = (int)(v * 7.999);
        if (v < 0) /* no sample there */
            addch(' ');
        else if (t->utf8)
            addstr(blocks[level]);
        else
            addch((chtype)ascii[level]);
    }
}

static int draw_devices(top_t *t, int y, int cols)
{
    for (int d = 0; d < t->ndev; d++, y += 2) {
        const vram_device_info_t *i = &t->devs[d];
        json_t *s = status_device(t, d);
        uint64_t reserved = s ? field_u64(s, "reserved_bytes") : 0;
        uint64_t free_adm = s ? field_u64(s, "free_for_admission_bytes") : 0;
        attron(A_BOLD);
        mvprintw(y, 0, "GPU%-2d %-14.14s", d, i->name);
        attroff(A_BOLD);
        printw(" %6.1f/%.1f GiB used", gib(i->used_bytes), gib(i->total_bytes));
        if (s) printw("  %.1f reserved  %.1f free-adm", vram_gib(reserved), vram_gib(free_adm));
        printw("  %s", vram_health_name(i->health));
        if (i->utilization_pct >= 0) printw("  %d%%", i->utilization_pct);
        if (i->temperature_c >= 0) printw(" %dC", i->temperature_c);
        if (i->power_w >= 0) printw(" %.0fW", i->power_w);
        int bar = cols - 6 - 2 - 4 - SPARK_LEN - 7;
        if (bar < 10) bar = 10;
        draw_bar(y + 1, 6, bar, i->total_bytes,
                 i->used_bytes == VRAM_UNKNOWN_U64 ? 0 : i->used_bytes, reserved, free_adm);
        draw_spark(t, d, y + 1, 6 + bar + 4, SPARK_LEN);
        printw(" %s", t->spark_from_vramd ? "5 min" : "");
    }
    return y;
}

static int draw_jobs(top_t *t, int y, int cols)
{
    if (!t->watch) {
        attron(A_BOLD);
        mvprintw(y++, 0, "vramd: not running - devices only (%.*s)", cols - 40, t->vramd_why);
        attroff(A_BOLD);
        return y + 1;
    }
    json_t *jobs = json_object_get(t->watch, "jobs");
    attron(A_REVERSE);
    mvprintw(y++, 0, "%-6s %-20s %-10s %-8s %-6s %10s %10s %-*s", "JOB", "NAME", "USER", "STATE",
             "GPUS", "RESERVED", "USED", cols > 80 ? cols - 80 : 0, "");
    attroff(A_REVERSE);
    size_t i;
    json_t *j;
    double now = (double)time(NULL);
    json_array_foreach(jobs, i, j)
    {
        char gpus[32] = "", *p = gpus;
        size_t k;
        json_t *g;
        json_array_foreach(json_object_get(j, "devices"), k, g) p +=
            snprintf(p, (size_t)(gpus + sizeof gpus - p), k ? ",%lld" : "%lld",
                     (long long)json_integer_value(g));
        const char *state = json_string_value(json_object_get(j, "state"));
        if ((int)i == t->selected) attron(A_STANDOUT);
        mvprintw(y++, 0, "%-6lld %-20.20s %-10.10s %-8s %-6s %6.2f GiB %6.2f GiB",
                 (long long)json_integer_value(json_object_get(j, "id")),
                 json_string_value(json_object_get(j, "name")),
                 json_string_value(json_object_get(j, "user")), state, *gpus ? gpus : "-",
                 vram_gib(field_u64(j, "reserved_bytes")), vram_gib(field_u64(j, "used_bytes")));
        if (!strcmp(state, "queued"))
            printw("  waiting %.0f s", now - json_number_value(json_object_get(j, "submitted_at")));
        if ((int)i == t->selected) attroff(A_STANDOUT);
    }
    if (!json_array_size(jobs)) mvprintw(y++, 0, "(no queued or running jobs)");
    return y + 1;
}

static void draw_procs(top_t *t, int y, int rows, int cols)
{
    attron(A_REVERSE);
    mvprintw(y++, 0, "%-4s %8s %-10s %10s  %-*s", "GPU", "PID", "USER", "MEMORY",
             cols > 38 ? cols - 38 : 0, "COMMAND");
    attroff(A_REVERSE);
    for (size_t i = 0; i < t->nprocs && y < rows - 2; i++) {
        const proc_row_t *p = &t->procs[i];
        mvprintw(y++, 0, "%-4d %8d %-10.10s %6.2f GiB  %.*s", p->device, (int)p->pid, p->user,
                 gib(p->used), cols > 38 ? cols - 38 : 1, p->command);
    }
    if (!t->nprocs) mvprintw(y, 0, "(no processes on the GPUs)");
}

static void draw(top_t *t)
{
    int rows, cols;
    getmaxyx(stdscr, rows, cols);
    erase();
    time_t now = time(NULL);
    char when[16];
    strftime(when, sizeof when, "%H:%M:%S", localtime(&now));
    attron(A_BOLD);
    mvprintw(0, 0, "vram top - %d GPU(s), %s backend - vramd %s - %s", t->ndev,
             vram_ctx_backend(t->ctx), t->watch ? "connected" : "not running", when);
    attroff(A_BOLD);
    int y = draw_devices(t, 2, cols);
    y = draw_jobs(t, y + 1, cols);
    draw_procs(t, y, rows, cols);
    attron(A_REVERSE);
    mvprintw(rows - 1, 0, "q quit  s sort: %s  up/down select job  c cancel job  %-*.*s",
             sort_names[t->sort], cols > 60 ? cols - 60 : 0, cols > 60 ? cols - 60 : 0, t->message);
    attroff(A_REVERSE);
    refresh();
}

/* Asks on the bottom line; true for y. */
static bool confirm(const char *question)
{
    int rows, cols;
    getmaxyx(stdscr, rows, cols);
    (void)cols;
    move(rows - 1, 0);
    clrtoeol();
    attron(A_BOLD);
    mvprintw(rows - 1, 0, "%s [y/N] ", question);
    attroff(A_BOLD);
    refresh();
    timeout(-1);
    int c = getch();
    return c == 'y' || c == 'Y';
}

static void cancel_selected(top_t *t, int delay_ms)
{
    json_t *j =
        t->watch ? json_array_get(json_object_get(t->watch, "jobs"), (size_t)t->selected) : NULL;
    if (!j) {
        snprintf(t->message, sizeof t->message, "no job selected");
        return;
    }
    long long id = (long long)json_integer_value(json_object_get(j, "id"));
    char q[160];
    snprintf(q, sizeof q, "Cancel job %lld \"%.60s\"?", id,
             json_string_value(json_object_get(j, "name")));
    bool yes = confirm(q);
    timeout(delay_ms);
    if (!yes) {
        snprintf(t->message, sizeof t->message, "not cancelled");
        return;
    }
    char path[64];
    snprintf(path, sizeof path, "/v1/jobs/%lld", id);
    long status = 0;
    json_t *reply = NULL;
    int rc = cli_daemon_call("DELETE", path, NULL, &status, &reply);
    if (rc == 0 && status == 200)
        snprintf(t->message, sizeof t->message, "job %lld cancelled", id);
    else
        snprintf(t->message, sizeof t->message, "cancel failed: %.200s",
                 rc ? vram_last_error() : cli_daemon_error_message(reply));
    json_decref(reply);
}

int vram_cli_top(int argc, char **argv)
{
    static const struct option longopts[] = {{"delay", required_argument, NULL, 'd'},
                                             {"help", no_argument, NULL, 'h'},
                                             {NULL, 0, NULL, 0}};
    double delay = 1;
    int c;
    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, ":hd:", longopts, NULL)) != -1) {
        switch (c) {
        case 'd':
            if (vram_parse_seconds(optarg, &delay) != 0 || delay < 0.1 || delay > 3600)
                return cli_usage_error("top", "--delay: \"%s\" is not 0.1 to 3600 seconds", optarg);
            break;
        case 'h':
            usage(stdout);
            return CLI_OK;
        default:
            return cli_getopt_error("top", c, argv);
        }
    }
    if (optind < argc) return cli_usage_error("top", "unexpected argument \"%s\"", argv[optind]);
    /* a live view needs a terminal to draw on and read keys from */
    if (!isatty(STDIN_FILENO) || !isatty(STDOUT_FILENO))
        return cli_runtime_error("top",
                                 "needs a terminal; for a refreshing table in a pipe or a log "
                                 "use `vram info --watch SECONDS`");
    top_t t;
    memset(&t, 0, sizeof t);
    int rc = cli_open_ctx("top", true, &t.ctx);
    if (rc) return rc;
    t.ndev = vram_ctx_device_count(t.ctx);
    t.devs = calloc((size_t)t.ndev + 1, sizeof *t.devs);
    t.spark = calloc((size_t)t.ndev + 1, sizeof *t.spark);
    if (!t.devs || !t.spark) {
        free(t.devs);
        free(t.spark);
        vram_ctx_close(t.ctx);
        return cli_runtime_error("top", "out of memory");
    }
    for (int d = 0; d < t.ndev; d++)
        for (int i = 0; i < SPARK_LEN; i++)
            t.spark[d][i] = -1;
    setlocale(LC_ALL, "");
    t.utf8 = !strcmp(nl_langinfo(CODESET), "UTF-8");
    initscr();
    cbreak();
    noecho();
    keypad(stdscr, TRUE);
    curs_set(0);
    int delay_ms = (int)(delay * 1000);
    timeout(delay_ms);
    for (bool quit = false; !quit;) {
        refresh_data(&t);
        draw(&t);
        int key = getch();
        size_t njobs = t.watch ? json_array_size(json_object_get(t.watch, "jobs")) : 0;
        switch (key) {
        case 'q':
        case 'Q':
            quit = true;
            break;
        case 's':
            t.sort = (sort_t)((t.sort + 1) % SORT_COUNT_);
            snprintf(t.message, sizeof t.message, "sorted by %s", sort_names[t.sort]);
            break;
        case KEY_UP:
        case 'k':
            if (t.selected > 0) t.selected--;
            break;
        case KEY_DOWN:
        case 'j':
            if (t.selected + 1 < (int)njobs) t.selected++;
            break;
        case 'c':
            cancel_selected(&t, delay_ms);
            break;
        default:
            break;
        }
    }
    endwin();
    json_decref(t.status);
    json_decref(t.watch);
    free(t.devs);
    free(t.spark);
    vram_ctx_close(t.ctx);
    return CLI_OK;
}
