/* A context seen as a scheduler/watch device source (vram_sched_devices_t),
 * for the modules that accept either. */
#ifndef VRAM_SCHED_DEVICE_SOURCE_H
#define VRAM_SCHED_DEVICE_SOURCE_H

#include "sched/sched.h"

/* Callbacks over vram_ctx_device_count/vram_device_info/
 * vram_device_processes of ctx (borrowed). */
vram_sched_devices_t vram_ctx_device_source(vram_ctx_t *ctx);

#endif
