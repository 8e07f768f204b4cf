/* Whole-file reading for the parsers (configs, profiles, traces). */
#ifndef VRAM_CORE_FILE_H
#define VRAM_CORE_FILE_H

#include <stddef.h>

/* Reads `path` into a NUL-terminated malloc'd buffer (*len excludes the NUL).
 * EIO names the file and the system's reason; EPARSE when it is larger than
 * `limit` bytes; ENOMEM. On failure *text is untouched. */
int vram_read_file(const char *path, size_t limit, char **text, size_t *len);

#endif
