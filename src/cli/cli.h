/* Shared helpers of the vram command-line front end (one file per subcommand). */
#ifndef VRAM_CLI_H
#define VRAM_CLI_H

#include "vram.h"

#include <jansson.h>

/* Exit codes of every command. */
enum { CLI_OK = 0, CLI_RUNTIME = 1, CLI_USAGE = 2 };

/* Subcommands: int vram_cli_<name>(int argc, char **argv), argv[0] is the name. */
typedef int (*cli_command_fn)(int argc, char **argv);

/* Prints "vram CMD: message" and a hint to stderr; returns CLI_USAGE. */
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prints "vram CMD: message" to stderr; returns CLI_RUNTIME. */
int cli_runtime_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prints a JSON value (indented, sorted as built) to stdout and releases it. */
void cli_print_json(json_t *value);
/* Opens the device context; prints auto's reason on stderr unless quiet. */
int cli_open_ctx(const char *cmd, bool quiet, vram_ctx_t **ctx);

#endif
