/* The estimate at one batch with every other setting kept: what
 * vram_estimate_at_batch answers in bytes, whole, for the planner (which
 * shows the breakdown at the judged batch). */
#ifndef VRAM_PLAN_ESTIMATE_AT_H
#define VRAM_PLAN_ESTIMATE_AT_H

#include "vram.h"

/* vram_estimate with cfg at `batch`. Errors as vram_estimate. */
int vram_estimate_whole_at(const vram_model_t *m, const vram_estimate_config_t *cfg, int64_t batch,
                           vram_estimate_t *out);

#endif
