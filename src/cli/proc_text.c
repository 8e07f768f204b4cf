/* The getopt error tail shared by every command. */
#include "cli/proc_text.h"
#include "cli.h"

#include <getopt.h>

int cli_getopt_error(const char *cmd, int c, char **argv)
{
    if (c == ':') return cli_usage_error(cmd, "option \"%s\" needs a value", argv[optind - 1]);
    if (optopt) return cli_usage_error(cmd, "unknown option \"-%c\"", optopt);
    return cli_usage_error(cmd, "unknown option \"%s\"", argv[optind - 1]);
}
