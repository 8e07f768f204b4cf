/* What the CLI shows about a process from /proc: its user and command line
 * (vram info, vram top). */
#ifndef VRAM_CLI_PROC_TEXT_H
#define VRAM_CLI_PROC_TEXT_H

#include <stddef.h>
#include <sys/types.h>

/* The end of every getopt_long loop: prints the usage error for a missing
 * value (c == ':') or an unknown option and returns CLI_USAGE. */
int cli_getopt_error(const char *cmd, int c, char **argv);

#endif
