/* Exclusive locks that make vramd one per database and one per set of
 * devices: flock(2) on a lock file, held for the daemon's life (the kernel
 * drops it when the process dies, so a crash never leaves a stale lock). The
 * file holds the holder's pid, to name it to a second vramd. */
#include "daemon/daemon.h"
#include "vram_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

int vramd_lock(const char *path, const char *what, mode_t mode, int *out)
{
    *out = -1;
    int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, mode);
    if (fd < 0)
        return vram_fail(VRAM_EIO, "cannot open the lock %s of %s: %s", path, what,
                         strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int err = errno;
        char pid[32] = "";
        ssize_t n = pread(fd, pid, sizeof pid - 1, 0);
        pid[n > 0 ? n : 0] = 0;
        pid[strcspn(pid, "\n")] = 0;
        close(fd);
        if (err != EWOULDBLOCK)
            return vram_fail(VRAM_EIO, "cannot lock %s: %s", path, strerror(err));
        return vram_fail(VRAM_EBUSY, "another vramd (pid %s) holds %s (lock %s): stop it first",
                         *pid ? pid : "?", what, path);
    }
    char pid[32];
    int len = snprintf(pid, sizeof pid, "%d\n", (int)getpid());
    if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)len, 0) != len) {
        int rc = vram_fail(VRAM_EIO, "cannot write the lock %s: %s", path, strerror(errno));
        close(fd);
        return rc;
    }
    *out = fd;
    return 0;
}

int vramd_lock_devices(vram_ctx_t *ctx, int *fds, int max, int *n)
{
    *n = 0;
    int count = vram_ctx_device_count(ctx);
    /* Simulated GPUs are the machine their state file describes; real ones
     * are named by UUID in the system's lock directory. */
    if (!strcmp(vram_ctx_backend(ctx), "sim")) {
        char state[480], path[512];
        if (vram_sim_state_path(state, sizeof state) != 0) return -1;
        snprintf(path, sizeof path, "%s.vramd-lock", state);
        int rc = vramd_lock(path, "the simulated GPUs", 0600, &fds[0]);
        if (rc == 0) *n = 1;
        return rc;
    }
    for (int i = 0; i < count && *n < max; i++) {
        vram_device_info_t info;
        memset(&info, 0, sizeof info);
        if (vram_device_info(ctx, i, &info) != 0 || !*info.uuid) continue;
        char path[256], what[160];
        snprintf(path, sizeof path, "/run/lock/vram-%s.lock", info.uuid);
        snprintf(what, sizeof what, "GPU %d (%s)", i, info.uuid);
        int rc = vramd_lock(path, what, 0644, &fds[*n]);
        if (rc) return rc;
        (*n)++;
    }
    return 0;
}
