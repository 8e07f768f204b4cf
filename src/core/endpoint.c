/* Where vramd's Unix socket is, for the daemon and for every client: one
 * order, so a client finds the vramd its user would start. */
#include "vram.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

/* The socket a vramd of this user listens on when VRAM_SOCKET is unset. */
static int own_socket(char *buf, size_t len, const char **why)
{
    const char *rt = getenv("XDG_RUNTIME_DIR");
    int n;
    if (geteuid() == 0) {
        n = snprintf(buf, len, "%s", VRAM_SYSTEM_SOCKET);
        *why = "the system vramd";
    } else if (rt && *rt) {
        n = snprintf(buf, len, "%s/vram/vramd.sock", rt);
        *why = "your own vramd, $XDG_RUNTIME_DIR";
    } else {
        n = snprintf(buf, len, "/tmp/vram-%u/vramd.sock", (unsigned)geteuid());
        *why = "your own vramd, /tmp";
    }
    return n < 0 || (size_t)n >= len ? vram_fail(VRAM_EINVAL, "socket path is too long") : 0;
}

/* A socket exists when lstat finds it, or when its directory hides it
 * (a system install: /run/vram is root:vram 0750). */
static bool exists(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0 || errno == EACCES;
}

int vram_endpoint(vram_endpoint_use_t use, char *buf, size_t len, const char **why)
{
    const char *ignored;
    if (!why) why = &ignored;
    if (!buf || len == 0) return vram_fail(VRAM_EINVAL, "NULL buffer");
    const char *opt = vram_option_str(VRAM_OPT_SOCKET);
    if (*opt) {
        *why = "VRAM_SOCKET";
        int n = snprintf(buf, len, "%s", opt);
        return n < 0 || (size_t)n >= len ? vram_fail(VRAM_EINVAL, "VRAM_SOCKET is too long") : 0;
    }
    int rc = own_socket(buf, len, why);
    if (rc || use == VRAM_ENDPOINT_LISTEN || exists(buf)) return rc;
    if (exists(VRAM_SYSTEM_SOCKET)) {
        *why = "the system vramd";
        return snprintf(buf, len, "%s", VRAM_SYSTEM_SOCKET) >= (int)len
                   ? vram_fail(VRAM_EINVAL, "socket path is too long")
                   : 0;
    }
    if (geteuid() == 0) return vram_fail(VRAM_ECONN, "no socket at %s", VRAM_SYSTEM_SOCKET);
    return vram_fail(VRAM_ECONN, "no socket at %s or %s", buf, VRAM_SYSTEM_SOCKET);
}
