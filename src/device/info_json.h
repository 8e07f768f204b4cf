/* One device as `vram info --json` shows it (docs/info-json.md), shared by
 * vram_info_json() and the CLI (which adds vramd's view). */
#ifndef VRAM_DEVICE_INFO_JSON_H
#define VRAM_DEVICE_INFO_JSON_H

#include <jansson.h>

#include "vram.h"

/* The processes on device `index`, malloc'd (*n entries; the caller frees);
 * NULL with vram_last_error() set when the driver cannot list them. */
vram_process_info_t *vram_device_process_list(vram_ctx_t *ctx, int index, size_t *n);
/* The device's object, processes with user and command line; NULL when out
 * of memory. */
json_t *vram_device_to_json(vram_ctx_t *ctx, const vram_device_info_t *d);

#endif
