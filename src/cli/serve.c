/* vram serve: runs vramd in this process (same options as the vramd binary). */
#include "cli.h"
#include "daemon/daemon.h"

int vram_cli_serve(int argc, char **argv)
{
    return vramd_main(argc, argv, "vram serve");
}
