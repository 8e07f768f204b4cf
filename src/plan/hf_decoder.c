/* The generic decoder row (VRAM_FAMILY_DECODER): decoder-only families
 * that differ only in hyper-parameters, each a line of data, read through
 * the standard config keys (docs/estimation.md, "Family table"). A config
 * whose model_type vram does not know but whose keys are the standard ones
 * is read the same way, and m->assumed says what was assumed. */
#include "hf_read.h"

#include <stdio.h>
#include <string.h>

/* What a family fixes; the config's keys give the rest. */
typedef struct {
    const char *types;
    vram_norm_kind_t norm;
    vram_norm_layout_t layout;
    uint8_t qk_norm;     /* 1 per head, 2 over the projection */
    bool gated;          /* gated MLP (SwiGLU, GeGLU) */
    bool tied;           /* tie_word_embeddings' default in the family's config class */
    bool sdpa;           /* Hugging Face's default attention is SDPA */
    uint8_t sdpa_saves;  /* VRAM_SDPA_* (vram.h): how the family calls SDPA */
    int64_t sliding_pat; /* every n-th layer global (0: all slide when a window is set) */
} decoder_row_t;

static const decoder_row_t rows[] = {
    /* types            norm                   layout               qk gated tied  sdpa saves
     * pattern (Falcon materializes a boolean causal mask: allow_is_causal_skip=False) */
    {"qwen3,qwen3_moe", VRAM_NORM_RMS, VRAM_NORMS_PRE, 1, true, false, true, 0, 0},
    {"olmo", VRAM_NORM_NONPARAM, VRAM_NORMS_PRE, 0, true, false, true, 0, 0},
    {"olmo2", VRAM_NORM_RMS, VRAM_NORMS_POST, 2, true, false, true, 0, 0},
    {"gemma3_text", VRAM_NORM_RMS, VRAM_NORMS_SANDWICH, 1, true, true, true, 0, 6},
    {"falcon", VRAM_NORM_LAYER, VRAM_NORMS_PARALLEL1, 0, false, true, true, VRAM_SDPA_MASK, 0},
    {"bloom", VRAM_NORM_LAYER, VRAM_NORMS_PRE, 0, false, true, false, 0, 0},
    {"deepseek_v2,deepseek_v3", VRAM_NORM_RMS, VRAM_NORMS_PRE, 0, true, false, true, 0, 0},
};

static const decoder_row_t *row_of(const char *t)
{
    for (size_t i = 0; i < sizeof rows / sizeof *rows; i++) {
        size_t n = strlen(t);
        for (const char *s = rows[i].types; *s;) {
            size_t len = strcspn(s, ",");
            if (len == n && !strncmp(s, t, n)) return &rows[i];
            s += len + (s[len] == ',');
        }
    }
    return NULL;
}

/* Qwen's sliding layers: those from max_window_layers on, when enabled. */
static int qwen_sliding(json_t *root, const char *origin, vram_model_t *m)
{
    int rc;
    if (!vram_hf_bool(root, "use_sliding_window", false)) return 0;
    OPT(KEYS("sliding_window"), sliding_window, 0, VRAM_MAX_POSITIONS);
    int64_t from;
    if ((rc = vram_hf_int(root, origin, KEYS("max_window_layers"), false, 28, VRAM_MAX_LAYERS,
                          &from)))
        return rc;
    m->sliding_layers = m->sliding_window && from < m->num_layers ? m->num_layers - from : 0;
    return 0;
}

/* Mixture of experts: Qwen3-MoE (num_experts, decoder_sparse_step,
 * mlp_only_layers) and DeepSeek (n_routed_experts, n_shared_experts,
 * first_k_dense_replace, moe_layer_freq). Counts the dense layers. */
static int experts(json_t *root, const char *origin, vram_model_t *m, bool deepseek)
{
    int rc;
    /* transformers 5 saves Qwen3-MoE's num_experts as num_local_experts */
    const char *const *keys =
        deepseek ? KEYS("n_routed_experts") : KEYS("num_experts", "num_local_experts");
    if (!vram_hf_has(root, keys[0]) && !(keys[1] && vram_hf_has(root, keys[1]))) return 0;
    REQ(keys, num_experts, VRAM_MAX_HEADS);
    if (!m->num_experts) return 0;
    REQ(KEYS("num_experts_per_tok"), experts_per_token, VRAM_MAX_HEADS);
    REQ(KEYS("moe_intermediate_size"), expert_intermediate, VRAM_MAX_MLP_WIDTH);
    if (m->experts_per_token < 1 || m->experts_per_token > m->num_experts)
        return vram_fail(VRAM_EPARSE, "%s: %lld experts per token out of %lld experts", origin,
                         (long long)m->experts_per_token, (long long)m->num_experts);
    int64_t a, b, moe = 0;
    if (deepseek) {
        int64_t shared;
        if ((rc = vram_hf_int(root, origin, KEYS("n_shared_experts"), false, 0, VRAM_MAX_HEADS,
                              &shared)) ||
            (rc = vram_hf_int(root, origin, KEYS("first_k_dense_replace"), false, 0,
                              VRAM_MAX_LAYERS, &a)) ||
            (rc = vram_hf_int(root, origin, KEYS("moe_layer_freq"), false, 1, VRAM_MAX_LAYERS, &b)))
            return rc;
        m->shared_intermediate = shared * m->expert_intermediate;
        for (int64_t i = 0; i < m->num_layers; i++)
            moe += i >= a && b > 0 && i % b == 0;
    } else {
        if ((rc = vram_hf_int(root, origin, KEYS("decoder_sparse_step"), false, 1, VRAM_MAX_LAYERS,
                              &b)))
            return rc;
        /* layers listed in mlp_only_layers stay dense (one pass over the
         * list: num_layers is at most VRAM_MAX_LAYERS) */
        bool dense[VRAM_MAX_LAYERS] = {false};
        json_t *only = json_object_get(root, "mlp_only_layers");
        for (size_t j = 0; json_is_array(only) && j < json_array_size(only); j++) {
            json_int_t i = json_integer_value(json_array_get(only, j));
            if (i >= 0 && i < m->num_layers) dense[i] = true;
        }
        for (int64_t i = 0; i < m->num_layers; i++)
            moe += !dense[i] && b >= 1 && (i + 1) % b == 0;
    }
    m->dense_layers = m->num_layers - moe;
    return 0;
}

/* Multi-head latent attention (DeepSeek-V2/V3): q through an optional
 * low-rank q_a/q_b, keys and values through a compressed kv_a of rank
 * kv_lora_rank plus a shared rotary key; head_dim holds the non-rotary part. */
static int latent_attention(json_t *root, const char *origin, vram_model_t *m)
{
    int rc;
    REQ(KEYS("kv_lora_rank"), kv_lora_rank, VRAM_MAX_WIDTH);
    OPT(KEYS("q_lora_rank"), q_lora_rank, 0, VRAM_MAX_WIDTH);
    REQ(KEYS("qk_rope_head_dim"), rope_head_dim, VRAM_MAX_WIDTH);
    REQ(KEYS("qk_nope_head_dim"), head_dim, VRAM_MAX_WIDTH);
    REQ(KEYS("v_head_dim"), v_head_dim, VRAM_MAX_WIDTH);
    if (!m->kv_lora_rank || !m->head_dim || !m->v_head_dim)
        return vram_fail(VRAM_EPARSE,
                         "%s: latent attention needs positive kv_lora_rank, "
                         "qk_nope_head_dim and v_head_dim",
                         origin);
    m->num_kv_heads = m->num_heads;
    return 0;
}

/* Falcon: multi-query or grouped (new_decoder_architecture) attention in one
 * query_key_value projection, one or two norms feeding parallel attention
 * and MLP, or sequential layers (falcon-rw); `bias` for every linear. */
static int falcon(json_t *root, const char *origin, vram_model_t *m)
{
    int rc;
    bool bias = vram_hf_bool(root, "bias", false);
    m->qkv_bias = m->o_bias = m->mlp_bias = bias;
    m->fused_qkv = true;
    m->gelu_mlp = true;
    OPT(KEYS("ffn_hidden_size"), intermediate_size, 4 * m->hidden_size, VRAM_MAX_MLP_WIDTH);
    if (vram_hf_bool(root, "new_decoder_architecture", false)) {
        OPT(KEYS("num_kv_heads"), num_kv_heads, m->num_heads, VRAM_MAX_HEADS);
        /* _split_heads gives keys and values every query head */
        m->sdpa_saves |= VRAM_SDPA_KV_FULL;
        int64_t lns;
        if ((rc = vram_hf_int(root, origin, KEYS("num_ln_in_parallel_attn"), false, 2, 2, &lns)))
            return rc;
        m->norm_layout = lns == 1 ? VRAM_NORMS_PARALLEL1 : VRAM_NORMS_PARALLEL2;
    } else {
        m->num_kv_heads = vram_hf_bool(root, "multi_query", true) ? 1 : m->num_heads;
        m->norm_layout =
            vram_hf_bool(root, "parallel_attn", true) ? VRAM_NORMS_PARALLEL1 : VRAM_NORMS_PRE;
    }
    return 0;
}

/* The keys every decoder has, and those a row leaves to the config. */
static int standard(json_t *root, const char *origin, vram_model_t *m, bool need_inter)
{
    int rc;
    REQ(KEYS("vocab_size"), vocab_size, VRAM_MAX_VOCAB);
    REQ(vram_hf_hidden, hidden_size, VRAM_MAX_WIDTH);
    REQ(vram_hf_layers, num_layers, VRAM_MAX_LAYERS);
    REQ(vram_hf_heads, num_heads, VRAM_MAX_HEADS);
    if (need_inter) REQ(vram_hf_inter, intermediate_size, VRAM_MAX_MLP_WIDTH);
    OPT(vram_hf_positions, max_positions, 0, VRAM_MAX_POSITIONS);
    OPT(KEYS("num_key_value_heads"), num_kv_heads, m->num_heads, VRAM_MAX_HEADS);
    OPT(KEYS("head_dim"), head_dim, 0, VRAM_MAX_WIDTH);
    m->qkv_bias = m->o_bias = vram_hf_bool(root, "attention_bias", false);
    m->mlp_bias = vram_hf_bool(root, "mlp_bias", false);
    return 0;
}

static int read_row(json_t *root, const char *origin, const char *t, vram_model_t *m)
{
    const decoder_row_t *r = row_of(t);
    int rc;
    bool falcon_like = !strcmp(t, "falcon"), bloom = !strcmp(t, "bloom");
    bool deepseek = !strncmp(t, "deepseek_v", 10);
    m->family = VRAM_FAMILY_DECODER;
    if ((rc = standard(root, origin, m, !falcon_like && !bloom))) return rc;
    m->norm_kind = (uint8_t)r->norm;
    m->norm_layout = (uint8_t)r->layout;
    m->qk_norm = r->qk_norm;
    m->gated_mlp = r->gated;
    m->sdpa_default = r->sdpa;
    m->sdpa_saves = r->sdpa_saves;
    m->softmax_upcast = true;
    m->tied_embeddings = vram_hf_bool(root, "tie_word_embeddings", r->tied);
    if (falcon_like && (rc = falcon(root, origin, m))) return rc;
    if (bloom) {
        /* alibi positions, fused biased qkv, biases everywhere, 4h GELU MLP */
        m->fused_qkv = m->embed_norm = m->gelu_mlp = true;
        m->qkv_bias = m->o_bias = m->mlp_bias = true;
        m->intermediate_size = 4 * m->hidden_size;
    }
    if (!strcmp(t, "gemma3_text")) {
        m->gelu_mlp = m->norm_plus_one = true;
        /* Gemma3TextConfig: soft-capping off unless given */
        m->attn_softcap = vram_hf_has(root, "attn_logit_softcapping");
        m->logit_softcap = vram_hf_has(root, "final_logit_softcapping");
        OPT(KEYS("head_dim"), head_dim, 256, VRAM_MAX_WIDTH);
    }
    if (deepseek) {
        if ((rc = latent_attention(root, origin, m))) return rc;
        m->qkv_bias = m->o_bias =
            false; /* attention_bias: q_a, kv_a and o only; off when published */
        if (vram_hf_bool(root, "attention_bias", false))
            return vram_fail(VRAM_EPARSE, "%s: deepseek with attention_bias is not supported",
                             origin);
    }
    if ((rc = experts(root, origin, m, deepseek))) return rc;
    if (!strncmp(t, "qwen3", 5)) return qwen_sliding(root, origin, m);
    return vram_hf_read_sliding(root, origin, m, r->sliding_pat);
}

int vram_hf_read_generic(json_t *root, const char *origin, const char *t, vram_model_t *m)
{
    int rc;
    /* an unknown type is described only by the standard keys, all of them */
    const char *const *required[] = {KEYS("vocab_size"), vram_hf_hidden, vram_hf_layers,
                                     vram_hf_heads, vram_hf_inter};
    for (size_t i = 0; i < sizeof required / sizeof *required; i++) {
        int64_t v;
        if ((rc = vram_hf_int(root, origin, required[i], true, 0, INT64_MAX, &v)))
            return vram_fail(VRAM_EPARSE,
                             "%s: model_type \"%s\" is not one vram knows, and its config lacks "
                             "the standard decoder key \"%s\" that would describe it; describe "
                             "it with --profile",
                             origin, t, required[i][0]);
    }
    if (vram_hf_has(root, "num_local_experts") || vram_hf_has(root, "num_experts") ||
        vram_hf_has(root, "n_routed_experts"))
        return vram_fail(VRAM_EPARSE,
                         "%s: model_type \"%s\" is not one vram knows and has experts; their "
                         "routing and shared experts cannot be read from standard keys (missing "
                         "a known model_type); describe it with --profile",
                         origin, t);
    m->family = VRAM_FAMILY_DECODER;
    if ((rc = standard(root, origin, m, true))) return rc;
    m->norm_kind = VRAM_NORM_RMS;
    m->norm_layout = VRAM_NORMS_PRE;
    m->gated_mlp = true;
    m->softmax_upcast = true;
    m->sdpa_default = true;
    m->tied_embeddings = vram_hf_bool(root, "tie_word_embeddings", false);
    if ((rc = vram_hf_read_sliding(root, origin, m, 0))) return rc;
    snprintf(m->assumed, sizeof m->assumed,
             "unknown model_type \"%s\": estimated as a LLaMA-style decoder (RMSNorm before "
             "attention and MLP, gated MLP, rotary positions, %s%s%s)",
             t, m->qkv_bias ? "attention biases" : "no attention biases",
             m->mlp_bias ? ", MLP biases" : "", m->tied_embeddings ? ", tied head" : "");
    return 0;
}

/* Missing keys of a nested config take its config class's defaults. */
static void defaults(json_t *o, const char *const *kv, const int64_t *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!vram_hf_has(o, kv[i])) json_object_set_new(o, kv[i], json_integer(v[i]));
}

/* Gemma 3 with images (Gemma3ForConditionalGeneration): the gemma3_text
 * decoder from text_config, a SigLIP vision tower from vision_config, and
 * the projector (mm_input_projection_weight, mm_soft_emb_norm). Keys a
 * published config leaves out take Gemma3TextConfig's and
 * SiglipVisionConfig's defaults. */
static int read_gemma3(json_t *root, const char *origin, const char *t, vram_model_t *m)
{
    (void)t;
    json_t *tc = json_object_get(root, "text_config"), *vc = json_object_get(root, "vision_config");
    if ((tc && !json_is_object(tc)) || (vc && !json_is_object(vc)))
        return vram_fail(VRAM_EPARSE, "%s: \"text_config\" and \"vision_config\" must be objects",
                         origin);
    json_t *text = tc ? json_deep_copy(tc) : json_object();
    json_t *vision = vc ? json_deep_copy(vc) : json_object();
    static const char *const tk[] = {
        "vocab_size",          "hidden_size",         "intermediate_size", "num_hidden_layers",
        "num_attention_heads", "num_key_value_heads", "head_dim",          "sliding_window"};
    static const int64_t tv[] = {262208, 2304, 9216, 26, 8, 4, 256, 4096};
    static const char *const vk[] = {
        "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
        "image_size",  "patch_size",        "num_channels"};
    static const int64_t vv[] = {768, 3072, 12, 12, 224, 16, 3};
    defaults(text, tk, tv, sizeof tv / sizeof *tv);
    defaults(vision, vk, vv, sizeof vv / sizeof *vv);
    if (!vram_hf_has(text, "tie_word_embeddings") && vram_hf_has(root, "tie_word_embeddings"))
        json_object_set(text, "tie_word_embeddings", json_object_get(root, "tie_word_embeddings"));
    int rc = read_row(text, origin, "gemma3_text", m);
    if (!rc)
        rc =
            vram_hf_int(vision, origin, vram_hf_hidden, true, 0, VRAM_MAX_WIDTH, &m->vision_hidden);
    if (!rc)
        rc = vram_hf_int(vision, origin, vram_hf_layers, true, 0, VRAM_MAX_LAYERS,
                         &m->vision_layers);
    if (!rc)
        rc = vram_hf_int(vision, origin, vram_hf_heads, true, 0, VRAM_MAX_HEADS, &m->vision_heads);
    if (!rc)
        rc = vram_hf_int(vision, origin, vram_hf_inter, true, 0, VRAM_MAX_MLP_WIDTH,
                         &m->vision_intermediate);
    if (!rc)
        rc = vram_hf_int(vision, origin, KEYS("image_size"), true, 0, VRAM_MAX_IMAGE,
                         &m->image_size);
    if (!rc)
        rc = vram_hf_int(vision, origin, KEYS("patch_size"), true, 0, VRAM_MAX_IMAGE,
                         &m->patch_size);
    if (!rc)
        rc = vram_hf_int(vision, origin, KEYS("num_channels"), true, 0, VRAM_MAX_IMAGE,
                         &m->num_channels);
    m->vision_pool_head = vram_hf_bool(vision, "vision_use_head", true);
    json_decref(text);
    json_decref(vision);
    if (!rc && (m->patch_size < 1 || m->image_size < m->patch_size || m->vision_layers < 1 ||
                m->vision_hidden < 1))
        return vram_fail(VRAM_EPARSE,
                         "%s: vision_config's image_size, patch_size, layers or "
                         "hidden_size is invalid",
                         origin);
    return rc;
}

const vram_hf_family_t vram_hf_decoder_families[] = {
    {"gemma3", read_gemma3, false, false},
    {"qwen3,olmo,olmo2,gemma3_text,falcon,bloom", read_row, false, false},
    {"qwen3_moe,deepseek_v2,deepseek_v3", read_row, true, false},
    {NULL, NULL, false, false},
};
