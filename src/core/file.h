/* Whole-file reading for the parsers (configs, profiles, traces). */
#ifndef VRAM_CORE_FILE_H
#define VRAM_CORE_FILE_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* Reads `path` into a NUL-terminated malloc'd buffer (*len excludes the NUL).
 * EIO names the file and the system's reason; EPARSE when it is larger than
 * `limit` bytes; ENOMEM. On failure *text is untouched. */
int vram_read_file(const char *path, size_t limit, char **text, size_t *len);

/* A directory private to this user: created with `mode` when create is set
 * and it is missing (its parent must exist), else an existing one owned by
 * the effective uid that neither group nor others can write, and not a
 * symlink. EPERM names the directory and the reason; EIO. */
int vram_private_dir(const char *dir, bool create, mode_t mode);

#endif
