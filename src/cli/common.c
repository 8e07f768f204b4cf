/* Error reporting and output helpers shared by the subcommands. */
#include "cli.h"

#include <stdarg.h>
#include <stdio.h>

int cli_usage_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "vram %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\nTry 'vram %s --help'.\n", cmd);
    va_end(ap);
    return CLI_USAGE;
}

int cli_runtime_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "vram %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return CLI_RUNTIME;
}

void cli_print_json(json_t *value)
{
    json_dumpf(value, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(10));
    fputc('\n', stdout);
    json_decref(value);
}

int cli_open_ctx(const char *cmd, bool quiet, vram_ctx_t **ctx)
{
    int rc = vram_ctx_open(ctx);
    if (rc) {
        /* A bad VRAM_SIM or VRAM_BACKEND is the user's input: a usage error. */
        if (rc == VRAM_EINVAL) return cli_usage_error(cmd, "%s", vram_last_error());
        return cli_runtime_error(cmd, "%s", vram_last_error());
    }
    if (!quiet && *vram_ctx_reason(*ctx)) fprintf(stderr, "vram: %s\n", vram_ctx_reason(*ctx));
    return 0;
}
