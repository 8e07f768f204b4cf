/* One job of vramd's JSON as the table, `--format` and detail views show it. */
#ifndef VRAM_CLI_JOBS_VIEW_H
#define VRAM_CLI_JOBS_VIEW_H

#include "cli.h"

/* What the views need besides the job: the time of the listing. (Why a
 * queued job waits comes with the job: its "reason", from the scheduler.) */
typedef struct {
    double now;
} jobs_ctx_t;

void jobs_ctx_init(jobs_ctx_t *ctx);
/* The text of field `letter` (see jobs_field_help) for one job, escaped. */
const char *jobs_field(const jobs_ctx_t *ctx, json_t *job, char letter, char *buf, size_t len);
/* Prints rows for `jobs` in the format FMT (`%i %.8u %t`: width, '.'
 * right-aligns), with a header line unless FMT is NULL-free of headers. */
int jobs_print_format(const jobs_ctx_t *ctx, json_t *jobs, const char *fmt, bool header);
/* The default table. */
void jobs_print_table(const jobs_ctx_t *ctx, json_t *jobs);
/* `vram jobs ID`: every field and the event log. */
void jobs_print_detail(const jobs_ctx_t *ctx, json_t *job, json_t *events);
/* The letters --format knows, one per line, for --help. */
extern const char jobs_field_help[];

#endif
