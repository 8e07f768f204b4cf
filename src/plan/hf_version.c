/* Modeling-code changes between transformers releases that change the
 * tensors autograd keeps, one row per change: the family and the first
 * release without the old behaviour (docs/estimation.md, "transformers
 * versions"). The family readers describe transformers 5; a user on an
 * older release names it with --transformers X.Y. */
#include "hf_version.h"

#include <stddef.h>
#include <string.h>

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

/* The first release whose modeling file sets `_supports_sdpa = True` for
 * the model type: from 4.36 on, from_pretrained picks SDPA for such a
 * model (with PyTorch >= 2.1.1) unless attn_implementation says
 * otherwise; before it the model ran eager attention. Read in the
 * transformers 4.35.0 ... 4.49.0 wheels from PyPI (docs/estimation.md,
 * "transformers versions"). Types added with SDPA from their first release
 * need no row. */
static const struct {
    const char *model_type;
    int first; /* major x 100 + minor */
} sdpa_since[] = {
    {"llama", 436},    {"gpt_bigcode", 436}, {"whisper", 436},     {"bart", 436},
    {"falcon", 436},   {"mistral", 437},     {"qwen2", 437},       {"mixtral", 437},
    {"gemma", 438},    {"phi", 439},         {"qwen2_moe", 440},   {"olmo", 440},
    {"bert", 441},     {"vit", 441},         {"wav2vec2", 441},    {"gpt2", 442},
    {"gpt_neox", 442}, {"roberta", 445},     {"xlm-roberta", 445}, {"phi3", 445},
    {"mbart", 445},    {"opt", 446},         {"distilbert", 446},
};

bool vram_hf_eager_by_default(const vram_model_t *m, int version)
{
    if (version <= 0) return false;
    for (size_t i = 0; i < sizeof sdpa_since / sizeof sdpa_since[0]; i++)
        if (!strcmp(m->model_type, sdpa_since[i].model_type)) return version < sdpa_since[i].first;
    return false;
}
