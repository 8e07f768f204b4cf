/* Where vramd listens and keeps its database by default. */
#include "daemon/daemon.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

void vramd_socket_path(char *buf, size_t len)
{
    const char *opt = vram_option_str(VRAM_OPT_SOCKET);
    const char *rt = getenv("XDG_RUNTIME_DIR");
    if (*opt)
        snprintf(buf, len, "%s", opt);
    else if (geteuid() == 0)
        snprintf(buf, len, "/run/vram/vramd.sock");
    else if (rt && *rt)
        snprintf(buf, len, "%s/vram/vramd.sock", rt);
    else
        snprintf(buf, len, "/tmp/vram-%u/vramd.sock", (unsigned)geteuid());
}

void vramd_db_path(char *buf, size_t len)
{
    const char *opt = vram_option_str(VRAM_OPT_DB);
    const char *state = getenv("XDG_STATE_HOME"), *home = getenv("HOME");
    if (*opt)
        snprintf(buf, len, "%s", opt);
    else if (state && *state)
        snprintf(buf, len, "%s/vram/vramd.db", state);
    else if (geteuid() == 0)
        snprintf(buf, len, "/var/lib/vram/vramd.db");
    else if (home && *home)
        snprintf(buf, len, "%s/.local/state/vram/vramd.db", home);
    else
        snprintf(buf, len, "/tmp/vram-%u/vramd.db", (unsigned)geteuid());
}
