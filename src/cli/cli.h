/* Shared helpers of the vram command-line front end (one file per subcommand). */
#ifndef VRAM_CLI_H
#define VRAM_CLI_H

#include "vram.h"

#include <getopt.h>
#include <jansson.h>

/* Exit codes of every command (docs/cli.md). A job's own status passes
 * through unchanged; these are vram's own. */
enum {
    CLI_OK = 0,
    CLI_RUNTIME = 1,         /* vram or vramd could not do it */
    CLI_USAGE = 2,           /* bad command line (the message names the part) */
    CLI_QUEUE_TIMEOUT = 124, /* still queued after --timeout (like timeout(1)) */
    CLI_INTERRUPTED_INT = 130,
    CLI_INTERRUPTED_TERM = 143,
};

/* Subcommands: int vram_cli_<name>(int argc, char **argv), argv[0] is the name. */
typedef int (*cli_command_fn)(int argc, char **argv);

/* Global -v: say which socket or address the client used (main.c sets it). */
extern bool cli_verbose;

/* Prints "vram CMD: message" and a hint to stderr; returns CLI_USAGE. */
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prints "vram CMD: message" to stderr; returns CLI_RUNTIME. */
int cli_runtime_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Every string from vramd reaches the terminal through these (a job name or
 * an alert's subject may carry another user's escape sequences, `vram top`
 * too): raw escaped into buf[len] (vram_escape_text: control bytes and
 * invalid UTF-8 as \xNN, newlines included); a JSON object's string field
 * escaped, `none` when it is missing or not a string. Return buf. */
const char *cli_escaped(const char *raw, char *buf, size_t len);
const char *cli_field_text(json_t *obj, const char *key, const char *none, char *buf, size_t len);
/* Prints a JSON value (indented, sorted as built) to stdout and releases it. */
void cli_print_json(json_t *value);
/* Opens the device context; prints auto's reason on stderr unless quiet. */
int cli_open_ctx(const char *cmd, bool quiet, vram_ctx_t **ctx);

/* A size typed by a person for FLAG: a number with a unit ("20GiB", "512MB",
 * "64KiB", "100B"). A bare number, or a number and unit as two words, is
 * refused with "give a unit, e.g. 20GiB"; the library's vram_parse_size
 * (for programs) still takes bytes. 0 or CLI_USAGE (printed). */
int cli_parse_size(const char *cmd, const char *flag, const char *text, uint64_t *out);
/* The name in names[0..n) closest to word by edit distance, or NULL when
 * none is close enough to be a likely typo. */
const char *cli_closest(const char *word, const char *const *names, size_t n);
/* The usage error for an unknown option `arg` of a getopt_long table, with
 * "did you mean --X?" when one is close. Returns CLI_USAGE. */
int cli_unknown_option(const char *cmd, const char *arg, const struct option *longopts);
/* An integer typed for FLAG, from min to max; the error names the flag and
 * the bound. 0 or CLI_USAGE (printed). */
int cli_parse_int(const char *cmd, const char *flag, const char *text, long long min, long long max,
                  long long *out);
/* Parses a positive job id; 0 or CLI_USAGE (printed). */
int cli_parse_job_id(const char *cmd, const char *text, long long *id);

#endif
