/* Family rows of the second edition: each reader takes a config.json of
 * its model_type into a vram_model_t (docs/estimation.md, "Family table").
 * The generic decoder's rows are in hf_decoder.c, the third edition's
 * encoders in hf_more.c. */
#include "hf_read.h"

#include <string.h>

/* The fields every text model has. */
static int read_text(json_t *root, const char *origin, vram_model_t *m)
{
    int rc;
    REQ(KEYS("vocab_size"), vocab_size, VRAM_MAX_VOCAB);
    REQ(vram_hf_hidden, hidden_size, VRAM_MAX_WIDTH);
    REQ(vram_hf_layers, num_layers, VRAM_MAX_LAYERS);
    REQ(vram_hf_heads, num_heads, VRAM_MAX_HEADS);
    return 0;
}

/* The KV cache of sliding-window layers holds the window, not the whole
 * sequence (transformers' DynamicSlidingWindowLayer): how many layers
 * slide comes from `layer_types` when saved, else from the family's rule
 * (`pattern`, or the config's sliding_window_pattern: every pattern-th
 * layer attends globally; 0: all slide). */
int vram_hf_read_sliding(json_t *root, const char *origin, vram_model_t *m, int64_t pattern)
{
    int rc;
    OPT(KEYS("sliding_window"), sliding_window, 0, VRAM_MAX_POSITIONS);
    if (!m->sliding_window) return 0;
    json_t *types = json_object_get(root, "layer_types");
    if (json_is_array(types)) {
        m->sliding_layers = 0;
        for (size_t i = 0; i < json_array_size(types); i++) {
            const char *t = json_string_value(json_array_get(types, i));
            if (!t)
                return vram_fail(VRAM_EPARSE, "%s: \"layer_types\"[%zu] must be a string", origin,
                                 i);
            if (!strcmp(t, "sliding_attention")) m->sliding_layers++;
        }
        return 0;
    }
    if ((rc = vram_hf_int(root, origin, KEYS("sliding_window_pattern"), false, pattern,
                          VRAM_MAX_LAYERS, &pattern)))
        return rc;
    m->sliding_layers = pattern > 0 ? m->num_layers - m->num_layers / pattern : m->num_layers;
    return 0;
}

/* LLaMA and its descendants: GQA, head_dim, SwiGLU, RMSNorm. */
static int read_llama_like(json_t *root, const char *origin, vram_model_t *m, bool tied)
{
    int rc;
    if ((rc = read_text(root, origin, m))) return rc;
    REQ(vram_hf_inter, intermediate_size, VRAM_MAX_MLP_WIDTH);
    OPT(vram_hf_positions, max_positions, 0, VRAM_MAX_POSITIONS);
    OPT(KEYS("num_key_value_heads"), num_kv_heads, m->num_heads, VRAM_MAX_HEADS);
    OPT(KEYS("head_dim"), head_dim, 0, VRAM_MAX_WIDTH);
    m->gated_mlp = true;
    m->softmax_upcast = true;
    m->sdpa_default = true;
    m->tied_embeddings = vram_hf_bool(root, "tie_word_embeddings", tied);
    return 0;
}

static int read_moe(json_t *root, const char *origin, vram_model_t *m, const char *experts_key,
                    const char *const *width_keys)
{
    int rc;
    REQ(KEYS(experts_key), num_experts, VRAM_MAX_HEADS);
    REQ(KEYS("num_experts_per_tok"), experts_per_token, VRAM_MAX_HEADS);
    if ((rc = vram_hf_int(root, origin, width_keys, true, 0, VRAM_MAX_MLP_WIDTH,
                          &m->expert_intermediate)))
        return rc;
    if (m->num_experts < 1 || m->experts_per_token < 1 || m->experts_per_token > m->num_experts)
        return vram_fail(VRAM_EPARSE, "%s: %lld experts per token out of %lld experts", origin,
                         (long long)m->experts_per_token, (long long)m->num_experts);
    return 0;
}

static int read_bert(json_t *root, const char *origin, const char *t, vram_model_t *m)
{
    int rc;
    m->family = VRAM_FAMILY_BERT;
    if ((rc = read_text(root, origin, m))) return rc;
    REQ(vram_hf_inter, intermediate_size, VRAM_MAX_MLP_WIDTH);
    REQ(vram_hf_positions, max_positions, VRAM_MAX_POSITIONS);
    OPT(KEYS("type_vocab_size"), type_vocab_size, 2, VRAM_MAX_VOCAB);
    if (strcmp(t, "bert")) {
        /* RoBERTa numbers positions from padding_idx + 1 */
        OPT(KEYS("pad_token_id"), position_offset, 1, VRAM_MAX_VOCAB);
        m->position_offset += 1;
        if (m->max_positions <= m->position_offset)
            return vram_fail(VRAM_EPARSE, "%s: max_position_embeddings %lld is too small", origin,
                             (long long)m->max_positions);
        m->max_positions -= m->position_offset;
    }
    m->has_pooler = true;
    m->sdpa_default = true;
    return 0;
}

static int read_gpt2(json_t *root, const char *origin, const char *t, vram_model_t *m)
{
    int rc;
    bool bigcode = !strcmp(t, "gpt_bigcode");
    m->family = bigcode ? VRAM_FAMILY_GPT_BIGCODE : VRAM_FAMILY_GPT2;
    if ((rc = read_text(root, origin, m))) return rc;
    OPT(vram_hf_inter, intermediate_size, 4 * m->hidden_size, VRAM_MAX_MLP_WIDTH);
    REQ(vram_hf_positions, max_positions, VRAM_MAX_POSITIONS);
    m->tied_embeddings = vram_hf_bool(root, "tie_word_embeddings", true);
    if (bigcode) {
        /* multi-query attention: one key/value head (StarCoder) */
        m->num_kv_heads = vram_hf_bool(root, "multi_query", true) ? 1 : m->num_heads;
        m->softmax_upcast = vram_hf_bool(root, "attention_softmax_in_fp32", true);
    }
    m->sdpa_default = true;
    /* q is a view of c_attn's output; k and v are the cache's copies */
    m->sdpa_saves = VRAM_SDPA_QKV_VIEW;
    return 0;
}

static int read_neox(json_t *root, const char *origin, const char *t, vram_model_t *m)
{
    (void)t;
    int rc;
    m->family = VRAM_FAMILY_GPTNEOX;
    if ((rc = read_text(root, origin, m))) return rc;
    REQ(vram_hf_inter, intermediate_size, VRAM_MAX_MLP_WIDTH);
    REQ(vram_hf_positions, max_positions, VRAM_MAX_POSITIONS);
    m->tied_embeddings = vram_hf_bool(root, "tie_word_embeddings", false);
    m->softmax_upcast = true;
    m->sdpa_default = true;
    m->sdpa_saves = VRAM_SDPA_OUT_COPY; /* partial rotary rebuilds q by cat */
    return 0;
}

static int read_llama(json_t *root, const char *origin, const char *t, vram_model_t *m)
{
    int rc;
    m->family = VRAM_FAMILY_LLAMA;
    if ((rc = read_llama_like(root, origin, m, false))) return rc;
    /* Mistral: every layer slides when sliding_window is set */
    return strcmp(t, "mistral") ? 0 : vram_hf_read_sliding(root, origin, m, 0);
}

static int read_qwen2(json_t *root, const char *origin, const char *t, vram_model_t *m)
{
    (void)t;
    int rc;
    m->family = VRAM_FAMILY_QWEN2;
    if ((rc = read_llama_like(root, origin, m, false))) return rc;
    m->qkv_bias = true;
    return 0;
}

static int read_phi3(json_t *root, const char *origin, const char *t, vram_model_t *m)
{
    (void)t;
    m->family = VRAM_FAMILY_PHI3;
    /* apply_rotary_pos_emb rebuilds q by cat (partial rotary) */
    m->sdpa_saves = VRAM_SDPA_OUT_COPY;
    return read_llama_like(root, origin, m, false);
}

static int read_gemma(json_t *root, const char *origin, const char *t, vram_model_t *m)
{
    int rc;
    bool gemma2 = !strcmp(t, "gemma2");
    m->family = gemma2 ? VRAM_FAMILY_GEMMA2 : VRAM_FAMILY_GEMMA;
    if ((rc = read_llama_like(root, origin, m, true))) return rc;
    /* gemma2's soft-capped attention is eager in Hugging Face */
    m->sdpa_default = !gemma2;
    m->norm_plus_one = true;
    /* Gemma2Config's soft-capping defaults (50 and 30) unless saved as null */
    json_t *cap = json_object_get(root, "attn_logit_softcapping");
    m->attn_softcap = gemma2 && (!cap || !json_is_null(cap));
    cap = json_object_get(root, "final_logit_softcapping");
    m->logit_softcap = gemma2 && (!cap || !json_is_null(cap));
    /* Gemma 2: every other layer slides, starting with the first */
    return gemma2 ? vram_hf_read_sliding(root, origin, m, 2) : 0;
}

static int read_mixtral(json_t *root, const char *origin, const char *t, vram_model_t *m)
{
    (void)t;
    int rc;
    m->family = VRAM_FAMILY_MIXTRAL;
    if ((rc = read_llama_like(root, origin, m, false)) ||
        (rc = read_moe(root, origin, m, "num_local_experts", vram_hf_inter)))
        return rc;
    return vram_hf_read_sliding(root, origin, m, 0);
}

static int read_qwen2_moe(json_t *root, const char *origin, const char *t, vram_model_t *m)
{
    (void)t;
    int rc;
    m->family = VRAM_FAMILY_QWEN2_MOE;
    if ((rc = read_llama_like(root, origin, m, false)) ||
        (rc = read_moe(root, origin, m, "num_experts", KEYS("moe_intermediate_size"))))
        return rc;
    OPT(KEYS("shared_expert_intermediate_size"), shared_intermediate, 0, VRAM_MAX_MLP_WIDTH);
    int64_t step, only = 0;
    if ((rc = vram_hf_int(root, origin, KEYS("decoder_sparse_step"), false, 1, VRAM_MAX_LAYERS,
                          &step)))
        return rc;
    json_t *dense = json_object_get(root, "mlp_only_layers");
    if (json_is_array(dense)) only = (int64_t)json_array_size(dense);
    if (step != 1 || only)
        return vram_fail(VRAM_EPARSE,
                         "%s: qwen2_moe with dense layers (decoder_sparse_step %lld, %lld "
                         "mlp_only_layers) is not supported",
                         origin, (long long)step, (long long)only);
    m->qkv_bias = true;
    m->shared_expert_gate = true;
    return 0;
}

static int read_phi(json_t *root, const char *origin, const char *t, vram_model_t *m)
{
    (void)t;
    int rc;
    m->family = VRAM_FAMILY_PHI;
    if ((rc = read_text(root, origin, m))) return rc;
    REQ(vram_hf_inter, intermediate_size, VRAM_MAX_MLP_WIDTH);
    OPT(vram_hf_positions, max_positions, 0, VRAM_MAX_POSITIONS);
    OPT(KEYS("num_key_value_heads"), num_kv_heads, m->num_heads, VRAM_MAX_HEADS);
    m->qkv_bias = m->mlp_bias = m->lm_head_bias = true;
    m->tied_embeddings = vram_hf_bool(root, "tie_word_embeddings", false);
    m->softmax_upcast = true;
    m->sdpa_default = true;
    m->sdpa_saves = VRAM_SDPA_OUT_COPY; /* partial rotary rebuilds q by cat */
    return 0;
}

static int read_opt(json_t *root, const char *origin, const char *t, vram_model_t *m)
{
    (void)t;
    int rc;
    m->family = VRAM_FAMILY_OPT;
    /* transformers 5's eager_attention_forward no longer clamps the scores
     * with torch.max (which kept its input): score_clamp stays off */
    if ((rc = read_text(root, origin, m))) return rc;
    REQ(vram_hf_inter, intermediate_size, VRAM_MAX_MLP_WIDTH);
    REQ(vram_hf_positions, max_positions, VRAM_MAX_POSITIONS);
    OPT(KEYS("word_embed_proj_dim"), embed_proj_dim, m->hidden_size, VRAM_MAX_WIDTH);
    m->position_offset = 2; /* OPTLearnedPositionalEmbedding's offset */
    m->qkv_bias = m->mlp_bias = vram_hf_bool(root, "enable_bias", true);
    bool before = vram_hf_bool(root, "do_layer_norm_before", true);
    m->post_norm = !before;
    m->no_final_norm = !before || vram_hf_bool(root, "_remove_final_layer_norm", false);
    m->tied_embeddings = vram_hf_bool(root, "tie_word_embeddings", true);
    m->softmax_upcast = true;
    m->sdpa_default = true;
    return 0;
}

int vram_hf_read_seq2seq(json_t *root, const char *origin, const char *t, vram_model_t *m)
{
    int rc;
    int64_t dec_heads, dec_ffn;
    REQ(KEYS("vocab_size"), vocab_size, VRAM_MAX_VOCAB);
    REQ(vram_hf_hidden, hidden_size, VRAM_MAX_WIDTH);
    REQ(KEYS("encoder_layers"), num_layers, VRAM_MAX_LAYERS);
    REQ(KEYS("decoder_layers"), num_decoder_layers, VRAM_MAX_LAYERS);
    REQ(KEYS("encoder_attention_heads"), num_heads, VRAM_MAX_HEADS);
    REQ(KEYS("encoder_ffn_dim"), intermediate_size, VRAM_MAX_MLP_WIDTH);
    if ((rc = vram_hf_int(root, origin, KEYS("decoder_attention_heads"), false, m->num_heads,
                          VRAM_MAX_HEADS, &dec_heads)) ||
        (rc = vram_hf_int(root, origin, KEYS("decoder_ffn_dim"), false, m->intermediate_size,
                          VRAM_MAX_MLP_WIDTH, &dec_ffn)))
        return rc;
    if (dec_heads != m->num_heads || dec_ffn != m->intermediate_size)
        return vram_fail(VRAM_EPARSE,
                         "%s: %s with different encoder and decoder heads or widths is not "
                         "supported",
                         origin, t);
    m->sdpa_default = true;
    m->head = VRAM_HEAD_COND_GEN;
    return 0;
}

static int read_whisper(json_t *root, const char *origin, const char *t, vram_model_t *m)
{
    int rc;
    m->family = VRAM_FAMILY_WHISPER;
    if ((rc = vram_hf_read_seq2seq(root, origin, t, m))) return rc;
    OPT(KEYS("num_mel_bins"), num_mel_bins, 80, VRAM_MAX_IMAGE);
    OPT(KEYS("max_source_positions"), max_source_positions, 1500, VRAM_MAX_POSITIONS);
    OPT(KEYS("max_target_positions"), max_positions, 448, VRAM_MAX_POSITIONS);
    m->tied_embeddings = true;
    m->sdpa_saves = VRAM_SDPA_OUT_COPY; /* q, k, v made .contiguous() */
    return 0;
}

static int read_wav2vec2(json_t *root, const char *origin, const char *t, vram_model_t *m)
{
    (void)t;
    int rc;
    m->family = VRAM_FAMILY_WAV2VEC2;
    REQ(vram_hf_hidden, hidden_size, VRAM_MAX_WIDTH);
    REQ(vram_hf_layers, num_layers, VRAM_MAX_LAYERS);
    REQ(vram_hf_heads, num_heads, VRAM_MAX_HEADS);
    REQ(vram_hf_inter, intermediate_size, VRAM_MAX_MLP_WIDTH);
    OPT(KEYS("vocab_size"), vocab_size, 32, VRAM_MAX_VOCAB);
    if ((rc = vram_hf_array(root, origin, "conv_dim", VRAM_MAX_WIDTH, m->conv_dim,
                            &m->conv_layers)) ||
        (rc = vram_hf_array(root, origin, "conv_kernel", VRAM_MAX_IMAGE, m->conv_kernel,
                            &m->conv_layers)) ||
        (rc = vram_hf_array(root, origin, "conv_stride", VRAM_MAX_IMAGE, m->conv_stride,
                            &m->conv_layers)))
        return rc;
    OPT(KEYS("num_conv_pos_embeddings"), pos_conv_kernel, 128, VRAM_MAX_IMAGE);
    OPT(KEYS("num_conv_pos_embedding_groups"), pos_conv_groups, 16, VRAM_MAX_HEADS);
    /* ForPreTraining's quantizer and projections (Wav2Vec2GumbelVectorQuantizer) */
    OPT(KEYS("codevector_dim"), codevector_dim, 256, VRAM_MAX_WIDTH);
    OPT(KEYS("num_codevector_groups"), codevector_groups, 2, VRAM_MAX_HEADS);
    OPT(KEYS("num_codevectors_per_group"), codevectors_per_group, 320, VRAM_MAX_VOCAB);
    OPT(KEYS("proj_codevector_dim"), proj_codevector_dim, 256, VRAM_MAX_WIDTH);
    OPT(KEYS("num_negatives"), num_negatives, 100, VRAM_MAX_HEADS);
    if (m->codevector_groups < 1 || m->codevector_dim % m->codevector_groups)
        return vram_fail(VRAM_EPARSE,
                         "%s: codevector_dim %lld is not divisible by %lld codevector groups",
                         origin, (long long)m->codevector_dim, (long long)m->codevector_groups);
    m->conv_bias = vram_hf_bool(root, "conv_bias", false);
    const char *norm = vram_hf_str(root, "feat_extract_norm");
    m->conv_group_norm = !norm || !strcmp(norm, "group");
    m->post_norm = !vram_hf_bool(root, "do_stable_layer_norm", false);
    m->sdpa_default = true;
    if (m->pos_conv_groups < 1 || m->hidden_size % m->pos_conv_groups)
        return vram_fail(VRAM_EPARSE,
                         "%s: hidden_size %lld is not divisible by %lld positional conv groups",
                         origin, (long long)m->hidden_size, (long long)m->pos_conv_groups);
    return 0;
}

/* T5 v1.0/v1.1, mT5 (untied head) and UMT5 (a relative bias in every layer). */
static int read_t5(json_t *root, const char *origin, const char *t, vram_model_t *m)
{
    int rc;
    m->family = VRAM_FAMILY_T5;
    if ((rc = read_text(root, origin, m))) return rc;
    REQ(vram_hf_inter, intermediate_size, VRAM_MAX_MLP_WIDTH);
    REQ(KEYS("d_kv"), head_dim, VRAM_MAX_WIDTH);
    OPT(KEYS("num_decoder_layers"), num_decoder_layers, m->num_layers, VRAM_MAX_LAYERS);
    OPT(KEYS("relative_attention_num_buckets"), relative_buckets, 32, VRAM_MAX_POSITIONS);
    const char *ff = vram_hf_str(root, "feed_forward_proj");
    m->gated_mlp = ff && !strncmp(ff, "gated-", 6);
    /* transformers 5 ties mT5's and UMT5's head whatever the config says
     * (MT5Config/UMT5Config pop tie_word_embeddings) */
    bool forced = !strcmp(t, "mt5") || !strcmp(t, "umt5");
    m->tied_embeddings = forced || vram_hf_bool(root, "tie_word_embeddings", true);
    m->relative_bias_all = !strcmp(t, "umt5");
    m->softmax_upcast = true;
    return 0;
}

static int read_vit(json_t *root, const char *origin, const char *t, vram_model_t *m)
{
    (void)t;
    int rc;
    m->family = VRAM_FAMILY_VIT;
    REQ(vram_hf_hidden, hidden_size, VRAM_MAX_WIDTH);
    REQ(vram_hf_layers, num_layers, VRAM_MAX_LAYERS);
    REQ(vram_hf_heads, num_heads, VRAM_MAX_HEADS);
    REQ(vram_hf_inter, intermediate_size, VRAM_MAX_MLP_WIDTH);
    REQ(KEYS("image_size"), image_size, VRAM_MAX_IMAGE);
    REQ(KEYS("patch_size"), patch_size, VRAM_MAX_IMAGE);
    OPT(KEYS("num_channels"), num_channels, 3, VRAM_MAX_IMAGE);
    m->has_pooler = true; /* ViTModel: pooler, no classification head */
    m->sdpa_default = true;
    return 0;
}

const vram_hf_family_t vram_hf_families[] = {
    {"bert,roberta,xlm-roberta", read_bert, false, false},
    {"gpt2,gpt_bigcode", read_gpt2, false, false},
    {"gpt_neox", read_neox, false, false},
    {"llama,mistral", read_llama, false, false},
    {"qwen2", read_qwen2, false, false},
    {"phi3", read_phi3, false, false},
    {"gemma,gemma2", read_gemma, false, false},
    {"mixtral", read_mixtral, true, false},
    {"qwen2_moe", read_qwen2_moe, true, false},
    {"phi", read_phi, false, false},
    {"opt", read_opt, false, false},
    {"whisper", read_whisper, false, true},
    {"wav2vec2", read_wav2vec2, false, true},
    {"t5,mt5,umt5", read_t5, false, false},
    {"vit", read_vit, false, false},
    {NULL, NULL, false, false},
};
