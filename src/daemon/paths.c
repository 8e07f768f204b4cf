/* Where vramd keeps its database by default (its socket: vram_endpoint). */
#include "daemon/daemon.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

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
