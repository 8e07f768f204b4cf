/* The library's version and the build it came from. */
#include "vram.h"

#include "vram_build_id.h" /* generated at every build: cmake/build_id.cmake */

VRAM_API const char *vram_version(void)
{
    return VRAM_VERSION_STRING;
}

VRAM_API int vram_api_version(void)
{
    return VRAM_API_VERSION;
}

VRAM_API const char *vram_build_id(void)
{
    return VRAM_BUILD_ID;
}
