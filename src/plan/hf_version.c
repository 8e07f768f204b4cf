/* Modeling-code changes between transformers releases that change the
 * tensors autograd keeps, one row per change: the family and the first
 * release without the old behaviour (docs/estimation.md, "transformers
 * versions"). The family readers describe transformers 5; a user on an
 * older release names it with --transformers X.Y. */
#include "hf_version.h"

#include <stddef.h>

static const struct {
    vram_family_t family;
    int fixed_in; /* first release without the clamp, major x 100 + minor */
} clamps[] = {
    /* OPTAttention through 4.48 added the causal mask and then clamped the
     * scores, torch.max(attn_weights, finfo(dtype).min), on every eager
     * forward (the mask is always built); `maximum`'s backward keeps its
     * input, one scores-sized tensor in the working dtype. 4.49.0's OPT
     * uses eager_attention_forward, which does not clamp. */
    {VRAM_FAMILY_OPT, 449},
};

bool vram_hf_scores_clamped(const vram_model_t *m, int version)
{
    if (m->score_clamp) return true;
    if (version <= 0) return false;
    for (size_t i = 0; i < sizeof clamps / sizeof clamps[0]; i++)
        if (clamps[i].family == m->family && version < clamps[i].fixed_in) return true;
    return false;
}
