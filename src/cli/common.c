/* Error reporting, size and id parsing, and "did you mean" shared by the subcommands. */
#include "cli.h"
#include "vram_int.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool cli_verbose;

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
    /* Which backend auto chose and why is a note (-v/--verbose, or
     * VRAM_LOG_LEVEL=debug; `vram info --json` has it as "reason"): stderr is
     * for what the user must act on. Falling back to host memory is said
     * always: what follows is not a GPU's memory. */
    bool note = cli_verbose || !strcmp(vram_option_str(VRAM_OPT_LOG_LEVEL), "debug");
    bool host = !strcmp(vram_ctx_backend(*ctx), "cpu");
    if (!quiet && *vram_ctx_reason(*ctx) && (note || host))
        fprintf(stderr, "vram: %s\n", vram_ctx_reason(*ctx));
    return 0;
}

int cli_parse_size(const char *cmd, const char *flag, const char *text, uint64_t *out)
{
    /* People mean gigabytes far more often than bytes: a unit is required,
     * and "20 GB" (two words, or one with a space) would otherwise leave
     * "GB" behind as the command. */
    size_t number = strspn(text, "0123456789.");
    bool has_space = false;
    for (const char *p = text; *p; p++)
        if (isspace((unsigned char)*p)) has_space = true;
    if (number > 0 && (!text[number] || has_space))
        return cli_usage_error(cmd, "%s: \"%s\" has no unit; give a unit, e.g. 20GiB", flag, text);
    if (vram_parse_size(text, out) != 0)
        return cli_usage_error(cmd, "%s: %s; give a unit, e.g. 20GiB", flag, vram_last_error());
    return 0;
}

const char *cli_closest(const char *word, const char *const *names, size_t n)
{
    const char *best = NULL;
    size_t best_d = (size_t)-1;
    for (size_t i = 0; i < n; i++) {
        size_t d = vram_edit_distance(word, names[i]);
        if (d < best_d) {
            best_d = d;
            best = names[i];
        }
    }
    /* a third of the word, at least 2 (a swap) and at most 3 edits */
    size_t limit = strlen(word) / 3;
    limit = limit < 2 ? 2 : limit > 3 ? 3 : limit;
    return best_d <= limit ? best : NULL;
}

int cli_unknown_option(const char *cmd, const char *arg, const struct option *longopts)
{
    const char *names[64];
    size_t n = 0;
    for (; longopts[n].name && n < 64; n++)
        names[n] = longopts[n].name;
    char word[64];
    const char *bare = arg;
    while (*bare == '-')
        bare++;
    snprintf(word, sizeof word, "%.*s", (int)strcspn(bare, "="), bare);
    const char *near = cli_closest(word, names, n);
    if (near) return cli_usage_error(cmd, "unknown option \"%s\"; did you mean --%s?", arg, near);
    return cli_usage_error(cmd, "unknown option \"%s\"", arg);
}

int cli_parse_int(const char *cmd, const char *flag, const char *text, long long min, long long max,
                  long long *out)
{
    char *end;
    errno = 0;
    long long n = strtoll(text, &end, 10);
    if (errno || end == text || *end)
        return cli_usage_error(cmd, "%s \"%s\" is not an integer", flag, text);
    if (n < min) return cli_usage_error(cmd, "%s must be at least %lld (got %lld)", flag, min, n);
    if (n > max) return cli_usage_error(cmd, "%s must be at most %lld (got %lld)", flag, max, n);
    *out = n;
    return 0;
}

int cli_parse_job_id(const char *cmd, const char *text, long long *id)
{
    char *end;
    errno = 0;
    long long n = strtoll(text, &end, 10);
    if (errno || end == text || *end || n <= 0)
        return cli_usage_error(cmd, "\"%s\" is not a job id (a positive number, see `vram jobs`)",
                               text);
    *id = n;
    return 0;
}

const char *cli_escaped(const char *raw, char *buf, size_t len)
{
    vram_escape_text(raw, buf, len);
    return buf;
}

const char *cli_field_text(json_t *obj, const char *key, const char *none, char *buf, size_t len)
{
    const char *v = json_string_value(json_object_get(obj, key));
    return cli_escaped(v ? v : none, buf, len);
}
