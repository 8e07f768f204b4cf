/* Run-time loading of driver libraries for the backends. */
#include "device/driver_util.h"

#include "vram.h"

#include <dlfcn.h>
#include <string.h>

int vram_driver_dlopen(const char *path, void **lib)
{
    *lib = NULL;
    if (!path || !*path) return vram_fail(VRAM_ENOLIB, "no driver library configured (empty name)");
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
