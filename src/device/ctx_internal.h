/* Device-context seams for tests (internal). */
#ifndef VRAM_DEVICE_CTX_INTERNAL_H
#define VRAM_DEVICE_CTX_INTERNAL_H

#include "device/backend.h"

/* Opens a context on an explicit backend table (tests pass their own to
 * script driver failures). Same contract as vram_ctx_open_backend. */
int vram_ctx_open_ops(const vram_backend_ops_t *ops, vram_ctx_t **out);

#endif
