/* What changed between transformers releases in what a model keeps for
 * backward (hf_version.c). Internal to src/plan. */
#ifndef VRAM_PLAN_HF_VERSION_H
#define VRAM_PLAN_HF_VERSION_H

#include "vram.h"

/* Whether m's eager attention clamps its scores with torch.max (which
 * keeps its input) in transformers `version` (major x 100 + minor; 0 =
 * 5.x, the release the family readers follow). */
bool vram_hf_scores_clamped(const vram_model_t *m, int version);
/* Whether transformers `version` still ran m's model_type with eager
 * attention by default (its SDPA support came in a later release). */
bool vram_hf_eager_by_default(const vram_model_t *m, int version);

#endif
