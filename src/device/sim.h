/* The sim backend's extras for `vram sim` (internal). */
#ifndef VRAM_DEVICE_SIM_H
#define VRAM_DEVICE_SIM_H

#include <stddef.h>

/* The state file the sim backend uses for the current VRAM_SIM and
 * VRAM_SIM_STATE. EINVAL for a bad spec. */
int vram_sim_state_path(char *buf, size_t len);
/* Drops every allocation recorded in the state file (of live processes too);
 * *freed gets their number. Their owners' later frees are accepted silently. */
int vram_sim_free_all(size_t *freed);

#endif
