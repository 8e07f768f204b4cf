/* Process facts for tables (user, command line) and the getopt error tail. */
#include "cli/proc_text.h"
#include "cli.h"

#include <getopt.h>
#include <pwd.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

void cli_process_user(pid_t pid, char *buf, size_t len)
{
    char path[32], tmp[1024];
    struct stat st;
    struct passwd pw, *res = NULL;
    snprintf(path, sizeof path, "/proc/%d", (int)pid);
    if (stat(path, &st) != 0)
        buf[0] = 0;
    else if (getpwuid_r(st.st_uid, &pw, tmp, sizeof tmp, &res) == 0 && res)
        snprintf(buf, len, "%s", res->pw_name);
    else
        snprintf(buf, len, "%u", (unsigned)st.st_uid);
}

void cli_process_command(pid_t pid, char *buf, size_t len)
{
    char path[32];
    snprintf(path, sizeof path, "/proc/%d/cmdline", (int)pid);
    FILE *f = fopen(path, "re");
    size_t n = f ? fread(buf, 1, len - 1, f) : 0;
    if (f) fclose(f);
    buf[n] = 0;
    for (size_t i = 0; i + 1 < n; i++)
        if (buf[i] == 0 || buf[i] == '\n' || buf[i] == '\t') buf[i] = ' ';
}

int cli_getopt_error(const char *cmd, int c, char **argv)
{
    if (c == ':') return cli_usage_error(cmd, "option \"%s\" needs a value", argv[optind - 1]);
    if (optopt) return cli_usage_error(cmd, "unknown option \"-%c\"", optopt);
    return cli_usage_error(cmd, "unknown option \"%s\"", argv[optind - 1]);
}
