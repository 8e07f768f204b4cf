/* Shared between the tune module's files. */
#ifndef VRAM_TUNE_INTERNAL_H
#define VRAM_TUNE_INTERNAL_H

#include "vram.h"

/* vram_batchopt_config_check that also names the YAML key at fault. */
int vram_batchopt_config_check_key(const vram_batchopt_config_t *cfg, const char **key);

#endif
