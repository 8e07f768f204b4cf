/* vramd: the GPU memory admission daemon (see docs/daemon.md). */
#include "daemon/daemon.h"

#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--version")) {
            printf("vramd %s (%s)\n", vram_version(), vram_build_id());
            return 0;
        }
    return vramd_main(argc, argv, "vramd");
}
