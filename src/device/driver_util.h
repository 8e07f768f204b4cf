/* Helpers shared by the real-driver backends (nvml.c, cuda.c): loading a
 * driver library at run time. */
#ifndef VRAM_DEVICE_DRIVER_UTIL_H
#define VRAM_DEVICE_DRIVER_UTIL_H

#include <stddef.h>
#include <string.h>

/* A library path root may load: the file (after symlinks) and its directory
 * belong to root and are writable by nobody else. EPERM names the culprit. */
int vram_driver_path_trusted(const char *path);
/* dlopen()s `path` (a file name searched like the dynamic linker does, or a
 * path). ENOLIB with "no NVIDIA driver: <path> not found" when it is absent,
 * ENOLIB naming dlerror() when it exists but cannot be loaded. */
int vram_driver_dlopen(const char *path, void **lib);
void vram_driver_dlclose(void *lib);

/* Looks up a symbol; NULL when the library lacks it. */
void *vram_driver_sym(void *lib, const char *name);

/* Stores the function `name` of `lib` into the function pointer `fp` (NULL if
 * absent). ISO C has no conversion from object to function pointers, so the
 * address is copied bytewise, as POSIX guarantees dlsym results allow. */
#define VRAM_DRIVER_LOAD(lib, fp, name)                                                            \
    do {                                                                                           \
        void *sym_ = vram_driver_sym((lib), (name));                                               \
        _Static_assert(sizeof(fp) == sizeof sym_, "function pointer size");                        \
        memcpy(&(fp), &sym_, sizeof(fp));                                                          \
    } while (0)

#endif
