/* vramd: the GPU memory admission daemon (see docs/daemon.md). */
#include "daemon/daemon.h"

int main(int argc, char **argv)
{
    return vramd_main(argc, argv, "vramd");
}
