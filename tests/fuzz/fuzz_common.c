/* Helpers shared by the fuzz targets (see fuzz.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* memfd_create; the build defines it too */
#endif
#include "fuzz.h"

#include <sys/mman.h>
#include <unistd.h>

unsigned long fuzz_accepted, fuzz_known_skipped;

const char *fuzz_memfile(const uint8_t *data, size_t size)
{
    static int fd = -1;
    static char path[64];
    if (fd < 0) {
        /* memfd: no file system litter, nothing to clean up, parallel-safe. */
        fd = memfd_create("vram-fuzz-input", 0);
        if (fd < 0) {
            perror("memfd_create");
            abort();
        }
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    }
    if (ftruncate(fd, 0) != 0) abort();
    size_t done = 0;
    while (done < size) {
        ssize_t n = pwrite(fd, data + done, size - done, (off_t)done);
        if (n <= 0) abort();
        done += (size_t)n;
    }
    return path;
}
