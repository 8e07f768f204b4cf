/* Run-time loading of driver libraries for the backends. */
#include "device/driver_util.h"

#include "vram.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int vram_driver_path_trusted(const char *path)
{
    char real[PATH_MAX], dir[PATH_MAX];
    if (!realpath(path, real))
        return vram_fail(VRAM_ENOLIB, "no NVIDIA driver: %s not found", path);
    snprintf(dir, sizeof dir, "%s", real);
    char *slash = strrchr(dir, '/');
    if (slash == dir)
        dir[1] = 0; /* a library in / */
    else if (slash)
        *slash = 0;
    const char *checked[] = {real, dir};
    for (int i = 0; i < 2; i++) {
        struct stat st;
        if (stat(checked[i], &st) != 0)
            return vram_fail(VRAM_ENOLIB, "%s: %s", checked[i], strerror(errno));
        if (st.st_uid != 0 || (st.st_mode & 022))
            return vram_fail(VRAM_EPERM,
                             "refusing to load %s as root: %s is owned by uid %u with mode %03o "
                             "(it must be root's and writable by nobody else)",
                             path, checked[i], (unsigned)st.st_uid, (unsigned)(st.st_mode & 0777));
    }
    return 0;
}

int vram_driver_dlopen(const char *path, void **lib)
{
    *lib = NULL;
    if (!path || !*path) return vram_fail(VRAM_ENOLIB, "no driver library configured (empty name)");
    /* As root, a library named by a path (VRAM_NVML_LIBRARY, VRAM_CUDA_LIBRARY)
     * runs with root's rights: it and its directory must be root's alone. */
    if (geteuid() == 0 && strchr(path, '/')) {
        int rc = vram_driver_path_trusted(path);
        if (rc) return rc;
    }
    /* RTLD_LOCAL: the driver's symbols must not leak into the global namespace
     * (a fake and a real libcuda may coexist in tests); RTLD_NOW: a broken
     * library fails here, not at the first call. */
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *why = dlerror();
        if (!why) why = "unknown dlopen error";
        if (strstr(why, "No such file"))
            return vram_fail(VRAM_ENOLIB, "no NVIDIA driver: %s not found", path);
        return vram_fail(VRAM_ENOLIB, "no NVIDIA driver: cannot load %s: %s", path, why);
    }
    *lib = h;
    return 0;
}

void vram_driver_dlclose(void *lib)
{
    if (lib) dlclose(lib);
}

void *vram_driver_sym(void *lib, const char *name)
{
    return lib ? dlsym(lib, name) : NULL;
}
