/* LD_PRELOAD'ed by tests: a machine without libyaml. dlopen of any name
 * holding "libyaml" fails as it would there (NULL, dlerror() says why); every
 * other library loads as usual. libvram's YAML config reader loads libyaml
 * with dlopen on first use (src/tune/batchopt_config.c), so a test can check
 * that the process runs and the reader answers with a clear error. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* RTLD_NEXT */
#endif
#include <dlfcn.h>
#include <string.h>

void *dlopen(const char *file, int mode)
{
    static void *(*real)(const char *, int);
    if (!real) {
        void *sym = dlsym(RTLD_NEXT, "dlopen");
        memcpy(&real, &sym, sizeof real); /* ISO C has no object-to-function cast */
    }
    if (file && strstr(file, "libyaml")) return NULL;
    return real(file, mode);
}
