/* vram top's state, shared by its data and key handling (top.c) and its
 * layout (top_draw.c). */
#ifndef VRAM_CLI_TOP_H
#define VRAM_CLI_TOP_H

#include "cli/daemon_client.h"

#include <stdbool.h>
#include <sys/types.h>

#define TOP_SPARK_LEN    30  /* points per sparkline */
#define TOP_SPARK_SPAN_S 300 /* with vramd: the last 5 minutes, from its history */
#define TOP_MAX_PROCS    256

typedef enum { SORT_MEMORY, SORT_PID, SORT_USER, SORT_GPU, SORT_COMMAND, SORT_COUNT_ } top_sort_t;
extern const char *const top_sort_names[SORT_COUNT_];

typedef struct {
    int device;
    pid_t pid;
    uint64_t used;
    char user[32];
    char command[256]; /* as read from /proc: printed only through vram_escape_text */
} top_proc_t;

typedef enum { FOCUS_JOBS, FOCUS_PROCS } top_focus_t;

typedef struct {
    vram_ctx_t *ctx;
    int ndev;
    vram_device_info_t *devs;
    double (*spark)[TOP_SPARK_LEN]; /* used fraction per device, oldest first */
    int nspark;
    bool spark_from_vramd; /* else: this view's own samples */
    top_proc_t procs[TOP_MAX_PROCS];
    size_t nprocs;
    json_t *status, *watch, *alerts; /* vramd's views, NULL when it does not answer */
    char vramd_why[256];
    top_sort_t sort;
    top_focus_t focus;
    int selected, proc_selected; /* rows of the jobs and process lists */
    int job_top, proc_top;       /* first row shown of each list (scrolling) */
    bool help;                   /* the keys overlay is open */
    char message[256];
    bool utf8;
} top_t;

/* Draws the whole screen for the terminal's current size: nothing wraps,
 * GPU rows fold to one line each when rows are short, the lists scroll to
 * keep their selection in view. */
void top_draw(top_t *t);

#endif
