/* Whole-file reading for the parsers. */
#include "core/file.h"

#include "vram.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int vram_read_file(const char *path, size_t limit, char **text, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return vram_fail(VRAM_EIO, "cannot read \"%s\": %s", path, strerror(errno));
    size_t cap = 4096, used = 0;
    char *buf = malloc(cap);
    int rc = 0;
    while (buf && rc == 0) {
        used += fread(buf + used, 1, cap - used - 1, f);
        if (used + 1 < cap) break; /* short read: end of file or error */
        if (used > limit) {
            rc = vram_fail(VRAM_EPARSE, "\"%s\" is larger than %zu bytes", path, limit);
            break;
        }
        char *bigger = realloc(buf, cap * 2);
        if (!bigger) break;
        buf = bigger;
        cap *= 2;
    }
    if (rc == 0 && ferror(f))
        rc = vram_fail(VRAM_EIO, "cannot read \"%s\": %s", path, strerror(errno));
    else if (rc == 0 && used > limit)
        rc = vram_fail(VRAM_EPARSE, "\"%s\" is larger than %zu bytes", path, limit);
    else if (rc == 0 && (!buf || used + 1 >= cap))
        rc = vram_fail(VRAM_ENOMEM, "out of memory reading \"%s\"", path);
    fclose(f);
    if (rc) {
        free(buf);
        return rc;
    }
    buf[used] = '\0';
    *text = buf;
    *len = used;
    return 0;
}

int vram_private_dir(const char *dir, bool create, mode_t mode)
{
    if (create && mkdir(dir, mode) != 0 && errno != EEXIST)
        return vram_fail(VRAM_EIO, "cannot create directory %s: %s", dir, strerror(errno));
    struct stat st;
    if (lstat(dir, &st) != 0) return vram_fail(VRAM_EIO, "directory %s: %s", dir, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return vram_fail(VRAM_EPERM, "%s is not a directory (or is a symlink)", dir);
    if (st.st_uid != geteuid())
        return vram_fail(VRAM_EPERM, "directory %s belongs to uid %u, not to this uid %u", dir,
                         (unsigned)st.st_uid, (unsigned)geteuid());
    if (st.st_mode & 022)
        return vram_fail(VRAM_EPERM, "directory %s is writable by %s (mode %03o): refused", dir,
                         st.st_mode & 002 ? "others" : "its group", (unsigned)(st.st_mode & 0777));
    return 0;
}
