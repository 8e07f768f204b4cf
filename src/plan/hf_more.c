/* Family rows of the third edition that are not plain decoders: BART and
 * mBART, DistilBERT, DeBERTa-v2, CLIP (the dual encoder and its vision
 * tower) and Mamba (docs/estimation.md, "Family table"). */
#include "hf_read.h"

#include <string.h>

/* Encoder and decoder stacks of the same width (BART, mBART). */
static int read_bart(json_t *root, const char *origin, const char *t, vram_model_t *m)
{
    int rc;
    m->family = VRAM_FAMILY_BART;
    if ((rc = vram_hf_read_seq2seq(root, origin, t, m))) return rc;
    REQ(vram_hf_positions, max_positions, VRAM_MAX_POSITIONS);
    m->position_offset = 2; /* BartLearnedPositionalEmbedding's offset */
    m->final_norms = !strcmp(t, "mbart");
    m->tied_embeddings = vram_hf_bool(root, "tie_word_embeddings", true);
    m->gelu_mlp = true;
    return 0;
}

static int read_distilbert(json_t *root, const char *origin, const char *t, vram_model_t *m)
{
    (void)t;
    int rc;
    m->family = VRAM_FAMILY_DISTILBERT;
    REQ(KEYS("vocab_size"), vocab_size, VRAM_MAX_VOCAB);
    REQ(KEYS("dim", "hidden_size"), hidden_size, VRAM_MAX_WIDTH);
    REQ(KEYS("n_layers", "num_hidden_layers"), num_layers, VRAM_MAX_LAYERS);
    REQ(KEYS("n_heads", "num_attention_heads"), num_heads, VRAM_MAX_HEADS);
    REQ(KEYS("hidden_dim", "intermediate_size"), intermediate_size, VRAM_MAX_MLP_WIDTH);
    REQ(vram_hf_positions, max_positions, VRAM_MAX_POSITIONS);
    m->tied_embeddings = true;
    m->gelu_mlp = true;
    m->sdpa_default = true;
    return 0;
}

static int read_deberta(json_t *root, const char *origin, const char *t, vram_model_t *m)
{
    (void)t;
    int rc;
    m->family = VRAM_FAMILY_DEBERTA_V2;
    REQ(KEYS("vocab_size"), vocab_size, VRAM_MAX_VOCAB);
    REQ(vram_hf_hidden, hidden_size, VRAM_MAX_WIDTH);
    REQ(vram_hf_layers, num_layers, VRAM_MAX_LAYERS);
    REQ(vram_hf_heads, num_heads, VRAM_MAX_HEADS);
    REQ(vram_hf_inter, intermediate_size, VRAM_MAX_MLP_WIDTH);
    REQ(vram_hf_positions, max_positions, VRAM_MAX_POSITIONS);
    OPT(KEYS("type_vocab_size"), type_vocab_size, 0, VRAM_MAX_VOCAB);
    int64_t embedding, conv, max_rel;
    if ((rc = vram_hf_int(root, origin, KEYS("embedding_size"), false, m->hidden_size,
                          VRAM_MAX_WIDTH, &embedding)) ||
        (rc = vram_hf_int(root, origin, KEYS("conv_kernel_size"), false, 0, VRAM_MAX_IMAGE, &conv)))
        return rc;
    if (embedding != m->hidden_size || conv)
        return vram_fail(VRAM_EPARSE,
                         "%s: deberta-v2 with embedding_size != hidden_size or a convolution "
                         "layer (conv_kernel_size) is not supported",
                         origin);
    /* absolute positions only with position_biased_input (v2: true, v3: false) */
    if (!vram_hf_bool(root, "position_biased_input", true)) m->max_positions = 0;
    if (vram_hf_bool(root, "relative_attention", false)) {
        /* rel_embeddings: 2 x position_buckets rows, else 2 x max_relative_positions */
        json_t *mr = json_object_get(root, "max_relative_positions");
        max_rel = json_is_integer(mr) && json_integer_value(mr) >= 1 ? json_integer_value(mr) : 0;
        OPT(KEYS("position_buckets"), position_buckets, 0, VRAM_MAX_POSITIONS);
        if (m->position_buckets <= 0) {
            int64_t p;
            if ((rc =
                     vram_hf_int(root, origin, vram_hf_positions, true, 0, VRAM_MAX_POSITIONS, &p)))
                return rc;
            m->position_buckets = max_rel > 0 ? max_rel : p;
        }
        const char *n = vram_hf_str(root, "norm_rel_ebd");
        m->rel_embed_norm = n && strstr(n, "layer_norm");
        /* pos_att_type: a list, or "p2c|c2p" in older configs */
        json_t *types = json_object_get(root, "pos_att_type");
        for (size_t i = 0; i < (json_is_array(types) ? json_array_size(types) : 1); i++) {
            const char *s = json_is_array(types) ? json_string_value(json_array_get(types, i))
                                                 : json_string_value(types);
            if (s && strstr(s, "c2p")) m->rel_att_types |= 1;
            if (s && strstr(s, "p2c")) m->rel_att_types |= 2;
        }
        /* share_att_key false: pos_key_proj (c2p) and pos_query_proj (p2c) per layer */
        if (!vram_hf_bool(root, "share_att_key", false)) {
            m->pos_key_proj = m->rel_att_types & 1;
            m->pos_query_proj = m->rel_att_types & 2;
        }
    }
    if (m->max_positions == 0 && !m->position_buckets)
        return vram_fail(VRAM_EPARSE, "%s: deberta-v2 without absolute or relative positions",
                         origin);
    return 0;
}

/* A CLIP tower's keys, with the config classes' defaults (CLIPTextConfig,
 * CLIPVisionConfig) for those a published config leaves out. */
static int tower(json_t *cfg, const char *origin, bool text, vram_model_t *m)
{
    int rc;
    json_t *root = cfg ? cfg : json_object();
    if (text) {
        rc = vram_hf_int(root, origin, KEYS("vocab_size"), false, 49408, VRAM_MAX_VOCAB,
                         &m->vocab_size);
        if (!rc)
            rc = vram_hf_int(root, origin, vram_hf_hidden, false, 512, VRAM_MAX_WIDTH,
                             &m->text_hidden);
        if (!rc)
            rc = vram_hf_int(root, origin, vram_hf_layers, false, 12, VRAM_MAX_LAYERS,
                             &m->text_layers);
        if (!rc)
            rc = vram_hf_int(root, origin, vram_hf_heads, false, 8, VRAM_MAX_HEADS, &m->text_heads);
        if (!rc)
            rc = vram_hf_int(root, origin, vram_hf_inter, false, 2048, VRAM_MAX_MLP_WIDTH,
                             &m->text_intermediate);
        if (!rc)
            rc = vram_hf_int(root, origin, vram_hf_positions, false, 77, VRAM_MAX_POSITIONS,
                             &m->text_positions);
    } else {
        rc = vram_hf_int(root, origin, vram_hf_hidden, false, 768, VRAM_MAX_WIDTH, &m->hidden_size);
        if (!rc)
            rc = vram_hf_int(root, origin, vram_hf_layers, false, 12, VRAM_MAX_LAYERS,
                             &m->num_layers);
        if (!rc)
            rc = vram_hf_int(root, origin, vram_hf_heads, false, 12, VRAM_MAX_HEADS, &m->num_heads);
        if (!rc)
            rc = vram_hf_int(root, origin, vram_hf_inter, false, 3072, VRAM_MAX_MLP_WIDTH,
                             &m->intermediate_size);
        if (!rc)
            rc = vram_hf_int(root, origin, KEYS("image_size"), false, 224, VRAM_MAX_IMAGE,
                             &m->image_size);
        if (!rc)
            rc = vram_hf_int(root, origin, KEYS("patch_size"), false, 32, VRAM_MAX_IMAGE,
                             &m->patch_size);
        if (!rc)
            rc = vram_hf_int(root, origin, KEYS("num_channels"), false, 3, VRAM_MAX_IMAGE,
                             &m->num_channels);
    }
    if (!cfg) json_decref(root);
    return rc;
}

static int read_clip(json_t *root, const char *origin, const char *t, vram_model_t *m)
{
    int rc;
    if (!strcmp(t, "clip_vision_model")) {
        m->family = VRAM_FAMILY_CLIP_VISION;
        if ((rc = tower(root, origin, false, m))) return rc;
    } else {
        m->family = VRAM_FAMILY_CLIP;
        json_t *tc = json_object_get(root, "text_config"),
               *vc = json_object_get(root, "vision_config");
        if ((tc && !json_is_object(tc)) || (vc && !json_is_object(vc)))
            return vram_fail(VRAM_EPARSE,
                             "%s: \"text_config\" and \"vision_config\" must be "
                             "objects",
                             origin);
        if ((rc = tower(tc, origin, true, m)) || (rc = tower(vc, origin, false, m))) return rc;
        OPT(KEYS("projection_dim"), projection_dim, 512, VRAM_MAX_WIDTH);
        if (m->text_heads <= 0 || m->text_hidden % m->text_heads)
            return vram_fail(VRAM_EPARSE,
                             "%s: text hidden size %lld is not divisible by %lld "
                             "heads",
                             origin, (long long)m->text_hidden, (long long)m->text_heads);
        m->max_positions = m->text_positions;
    }
    if (m->patch_size <= 0 || m->image_size < m->patch_size)
        return vram_fail(VRAM_EPARSE, "%s: image_size %lld and patch_size %lld are invalid", origin,
                         (long long)m->image_size, (long long)m->patch_size);
    m->sdpa_default = true;
    return 0;
}

static int read_mamba(json_t *root, const char *origin, const char *t, vram_model_t *m)
{
    (void)t;
    int rc;
    m->family = VRAM_FAMILY_MAMBA;
    REQ(KEYS("vocab_size"), vocab_size, VRAM_MAX_VOCAB);
    REQ(vram_hf_hidden, hidden_size, VRAM_MAX_WIDTH);
    REQ(vram_hf_layers, num_layers, VRAM_MAX_LAYERS);
    OPT(KEYS("state_size"), ssm_state, 16, VRAM_MAX_WIDTH);
    OPT(KEYS("conv_kernel"), ssm_conv, 4, VRAM_MAX_IMAGE);
    int64_t expand;
    if ((rc = vram_hf_int(root, origin, KEYS("expand"), false, 2, 64, &expand))) return rc;
    m->ssm_inner = expand * m->hidden_size;
    /* time_step_rank: an integer, or "auto" = ceil(hidden / 16) */
    json_t *r = json_object_get(root, "time_step_rank");
    if (json_is_string(r) && !strcmp(json_string_value(r), "auto"))
        m->ssm_dt_rank = (m->hidden_size + 15) / 16;
    else if ((rc = vram_hf_int(root, origin, KEYS("time_step_rank"), false,
                               (m->hidden_size + 15) / 16, VRAM_MAX_WIDTH, &m->ssm_dt_rank)))
        return rc;
    if (m->ssm_state < 1 || m->ssm_conv < 1 || m->ssm_inner < 1 || m->ssm_dt_rank < 1)
        return vram_fail(VRAM_EPARSE,
                         "%s: state_size, conv_kernel, expand and time_step_rank must be positive",
                         origin);
    m->mlp_bias = vram_hf_bool(root, "use_bias", false);
    m->conv_bias = vram_hf_bool(root, "use_conv_bias", true);
    m->tied_embeddings = vram_hf_bool(root, "tie_word_embeddings", true);
    /* no attention: one "head" so the shared shape checks pass */
    m->num_heads = 1;
    m->intermediate_size = m->ssm_inner;
    return 0;
}

const vram_hf_family_t vram_hf_more_families[] = {
    {"bart,mbart", read_bart, false, false},    {"distilbert", read_distilbert, false, false},
    {"deberta-v2", read_deberta, false, false}, {"clip,clip_vision_model", read_clip, false, false},
    {"mamba", read_mamba, false, false},        {NULL, NULL, false, false},
};
