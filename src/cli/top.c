/* vram top: a live terminal view (ncurses), like nvitop: per GPU a memory bar
 * (used / reserved by vramd / free for admission) and a sparkline, firing
 * alerts, vramd's jobs and queue, the processes with user, pid, memory and
 * command. Devices come from the local backend, so it works without vramd.
 * This file: data and keys; top_draw.c lays the screen out. */
#include "cli/top.h"
#include "cli/proc_text.h"
#include "vram_int.h"

#include <curses.h>
#include <getopt.h>
#include <langinfo.h>
#include <locale.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const char *const top_sort_names[SORT_COUNT_] = {"memory", "pid", "user", "gpu", "command"};

static void usage(FILE *out)
{
    fprintf(out, "usage: vram top [-d|--delay SECONDS]\n\n"
                 "A live view of the GPUs (memory bar: used, reserved by vramd, free for\n"
                 "admission; a sparkline of the last 5 minutes from vramd's history, else of\n"
                 "the samples of this view), their processes and vramd's jobs.\n"
                 "Without vramd it shows the devices and processes only.\n\n"
                 "Keys: q quit, ? help, s next sort key (memory, pid, user, gpu, command),\n"
                 "Tab switch between the jobs and the processes, up/down or j/k move (the\n"
                 "lists scroll), PgUp/PgDn/Home/End, c cancel the selected job (asks first).\n");
}

/* ---- data --------------------------------------------------------------- */

static int compare_procs(const void *a, const void *b, void *arg)
{
    const top_proc_t *x = a, *y = b;
    switch (*(top_sort_t *)arg) {
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
 * TOP_SPARK_LEN buckets over the last TOP_SPARK_SPAN_S seconds. */
static void spark_from_history(top_t *t, int d)
{
    char path[128];
    snprintf(path, sizeof path, "/v1/history?device=%d&from=-%d&step=%d", d, TOP_SPARK_SPAN_S,
             TOP_SPARK_SPAN_S / TOP_SPARK_LEN);
    long status = 0;
    json_t *h = NULL;
    double total = (double)t->devs[d].total_bytes;
    if (cli_daemon_call("GET", path, NULL, &status, &h) != 0 || status != 200 || !(total > 0)) {
        json_decref(h);
        return;
    }
    double from = json_number_value(json_object_get(h, "from"));
    for (int i = 0; i < TOP_SPARK_LEN; i++)
        t->spark[d][i] = -1;
    size_t i;
    json_t *p;
    json_array_foreach(json_object_get(h, "points"), i, p)
    {
        int slot = (int)((json_number_value(json_array_get(p, 0)) - from) /
                         (TOP_SPARK_SPAN_S / TOP_SPARK_LEN));
        if (slot >= 0 && slot < TOP_SPARK_LEN)
            t->spark[d][slot] = json_number_value(json_array_get(p, 2)) / total;
    }
    t->nspark = TOP_SPARK_LEN;
    json_decref(h);
}

static void refresh_data(top_t *t)
{
    t->nprocs = 0;
    for (int d = 0; d < t->ndev; d++) {
        vram_device_info_t *i = &t->devs[d];
        if (vram_device_info(t->ctx, d, i) != 0) continue;
        memmove(t->spark[d], t->spark[d] + 1, (TOP_SPARK_LEN - 1) * sizeof(double));
        t->spark[d][TOP_SPARK_LEN - 1] = i->total_bytes && i->used_bytes != VRAM_UNKNOWN_U64
                                             ? (double)i->used_bytes / (double)i->total_bytes
                                             : -1;
        vram_process_info_t p[64];
        size_t n = 0;
        if (i->health == VRAM_HEALTH_ERROR || vram_device_processes(t->ctx, d, p, 64, &n) != 0)
            continue;
        for (size_t k = 0; k < n && k < 64 && t->nprocs < TOP_MAX_PROCS; k++) {
            top_proc_t *r = &t->procs[t->nprocs++];
            r->device = d;
            r->pid = p[k].pid;
            r->used = p[k].used_bytes;
            vram_proc_user(p[k].pid, r->user, sizeof r->user);
            vram_proc_command(p[k].pid, r->command, sizeof r->command);
            if (!r->command[0]) snprintf(r->command, sizeof r->command, "%s", p[k].name);
        }
    }
    if (t->nspark < TOP_SPARK_LEN) t->nspark++;
    qsort_r(t->procs, t->nprocs, sizeof *t->procs, compare_procs, &t->sort);
    json_decref(t->status);
    json_decref(t->watch);
    json_decref(t->alerts);
    t->status = t->watch = t->alerts = NULL;
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
    long st3 = 0;
    json_t *al = NULL;
    if (t->status && cli_daemon_call("GET", "/v1/alerts?limit=0", NULL, &st3, &al) == 0 &&
        st3 == 200)
        t->alerts = al;
    else
        json_decref(al);
    t->spark_from_vramd = t->status != NULL;
    for (int d = 0; t->status && d < t->ndev; d++)
        spark_from_history(t, d);
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
    char q[160], name[64];
    vram_escape_text(json_string_value(json_object_get(j, "name")), name, sizeof name);
    snprintf(q, sizeof q, "Cancel job %lld \"%s\"?", id, name);
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
        for (int i = 0; i < TOP_SPARK_LEN; i++)
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
        top_draw(&t);
        int key = getch();
        if (t.help && key != ERR) { /* any key closes the help */
            t.help = false;
            continue;
        }
        int rows = getmaxy(stdscr), page = rows > 8 ? rows / 3 : 1;
        int *sel = t.focus == FOCUS_JOBS ? &t.selected : &t.proc_selected;
        switch (key) {
        case 'q':
        case 'Q':
            quit = true;
            break;
        case '?':
        case 'h':
            t.help = true;
            break;
        case 's':
            t.sort = (top_sort_t)((t.sort + 1) % SORT_COUNT_);
            snprintf(t.message, sizeof t.message, "sorted by %s", top_sort_names[t.sort]);
            break;
        case '\t':
            t.focus = t.focus == FOCUS_JOBS ? FOCUS_PROCS : FOCUS_JOBS;
            break;
        case KEY_UP:
        case 'k':
            (*sel)--; /* top_draw keeps it in range */
            break;
        case KEY_DOWN:
        case 'j':
            (*sel)++;
            break;
        case KEY_PPAGE:
            *sel -= page;
            break;
        case KEY_NPAGE:
            *sel += page;
            break;
        case KEY_HOME:
            *sel = 0;
            break;
        case KEY_END:
            *sel = 1 << 30;
            break;
        case 'c':
            if (t.focus == FOCUS_JOBS)
                cancel_selected(&t, delay_ms);
            else
                snprintf(t.message, sizeof t.message, "Tab to the jobs to cancel one");
            break;
        default:
            break;
        }
    }
    endwin();
    json_decref(t.status);
    json_decref(t.watch);
    json_decref(t.alerts);
    free(t.devs);
    free(t.spark);
    vram_ctx_close(t.ctx);
    return CLI_OK;
}
