/* Model descriptions from files: Hugging Face config.json and measured
 * profiles. Parsed with jansson, whose errors carry line and column. */
#include "vram.h"
#include "core/file.h"
#include "estimate_limits.h"

#include <errno.h>
#include <stdlib.h>
#include <jansson.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

static int load(const char *text, const char *origin, json_t **root)
{
    json_error_t err;
    *root = json_loads(text, 0, &err);
    if (!*root)
        return vram_fail(VRAM_EPARSE, "%s:%d:%d: malformed JSON: %s", origin, err.line, err.column,
                         err.text);
    if (!json_is_object(*root)) {
        json_decref(*root);
        return vram_fail(VRAM_EPARSE, "%s: expected a JSON object at the top level", origin);
    }
    return 0;
}

/* The first of `keys` present in `root` as an integer in [0, max]. The
 * bounds (limits.h, docs/estimation.md "Limits") keep every product the
 * estimator forms from the fields far from overflow. */
static int get_int(json_t *root, const char *origin, const char *const *keys, bool required,
                   int64_t def, int64_t max, int64_t *out)
{
    for (const char *const *k = keys; *k; k++) {
        json_t *v = json_object_get(root, *k);
        if (!v || json_is_null(v)) continue;
        if (!json_is_integer(v))
            return vram_fail(VRAM_EPARSE, "%s: \"%s\" must be an integer", origin, *k);
        if (json_integer_value(v) < 0)
            return vram_fail(VRAM_EPARSE, "%s: \"%s\" cannot be negative", origin, *k);
        if (json_integer_value(v) > max)
            return vram_fail(VRAM_EPARSE, "%s: \"%s\" is %lld, above the limit of %lld", origin, *k,
                             (long long)json_integer_value(v), (long long)max);
        *out = json_integer_value(v);
        return 0;
    }
    if (!required) {
        *out = def;
        return 0;
    }
    char also[128] = "";
    for (const char *const *k = keys + 1; *k; k++) {
        strncat(also, k == keys + 1 ? " (or " : ", ", sizeof also - strlen(also) - 1);
        strncat(also, "\"", sizeof also - strlen(also) - 1);
        strncat(also, *k, sizeof also - strlen(also) - 1);
        strncat(also, "\"", sizeof also - strlen(also) - 1);
    }
    if (*also) strncat(also, ")", sizeof also - strlen(also) - 1);
    return vram_fail(VRAM_EPARSE, "%s: missing field \"%s\"%s", origin, keys[0], also);
}

static bool get_bool(json_t *root, const char *key, bool def)
{
    json_t *v = json_object_get(root, key);
    return json_is_boolean(v) ? json_is_true(v) : def;
}

#define KEYS(...) ((const char *const[]){__VA_ARGS__, NULL})

/* An integer array field (wav2vec2's conv_dim, conv_kernel, conv_stride). */
static int get_array(json_t *root, const char *origin, const char *key, int64_t max, int64_t *out,
                     int64_t *n)
{
    json_t *a = json_object_get(root, key);
    if (!json_is_array(a)) return vram_fail(VRAM_EPARSE, "%s: missing array \"%s\"", origin, key);
    size_t len = json_array_size(a);
    if (len == 0 || len > 8)
        return vram_fail(VRAM_EPARSE, "%s: \"%s\" has %zu entries (1 to 8 supported)", origin, key,
                         len);
    if (*n && (int64_t)len != *n)
        return vram_fail(VRAM_EPARSE, "%s: \"%s\" has %zu entries, the other conv arrays %lld",
                         origin, key, len, (long long)*n);
    for (size_t i = 0; i < len; i++) {
        json_t *v = json_array_get(a, i);
        if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > max)
            return vram_fail(VRAM_EPARSE, "%s: \"%s\"[%zu] must be an integer from 1 to %lld",
                             origin, key, i, (long long)max);
        out[i] = json_integer_value(v);
    }
    *n = (int64_t)len;
    return 0;
}

/* Fields that only some model types have: a config whose type says
 * otherwise was mislabelled (a Mixtral config saved as "mistral" would be
 * estimated as a dense model 6x too small), so it is refused. */
static int contradiction(json_t *root, const char *origin, const char *t, bool moe)
{
    static const char *const moe_keys[] = {"num_local_experts", "num_experts",
                                           "num_experts_per_tok", "moe_intermediate_size", NULL};
    for (const char *const *k = moe_keys; *k && !moe; k++) {
        json_t *v = json_object_get(root, *k);
        if (v && !json_is_null(v) && !(json_is_integer(v) && json_integer_value(v) == 0))
            return vram_fail(
                VRAM_EPARSE,
                "%s: \"%s\" describes a mixture-of-experts model but model_type \"%s\" "
                "is dense; fix model_type (mixtral, qwen2_moe)",
                origin, *k, t);
    }
    static const char *const audio_keys[] = {"num_mel_bins", "conv_dim", NULL};
    bool audio = !strcmp(t, "whisper") || !strcmp(t, "wav2vec2");
    for (const char *const *k = audio_keys; *k && !audio; k++)
        if (json_object_get(root, *k))
            return vram_fail(VRAM_EPARSE,
                             "%s: \"%s\" belongs to an audio model but model_type is \"%s\"",
                             origin, *k, t);
    return 0;
}

/* The head from `architectures` ("BertForSequenceClassification"), by
 * suffix; the first entry is the one Hugging Face instantiates. */
static int read_head(json_t *root, const char *origin, vram_model_t *m)
{
    json_t *arch = json_object_get(root, "architectures");
    if (!arch || json_is_null(arch)) return 0;
    if (!json_is_array(arch) || json_array_size(arch) == 0 ||
        !json_is_string(json_array_get(arch, 0)))
        return vram_fail(VRAM_EPARSE, "%s: \"architectures\" must be a list of class names",
                         origin);
    const char *a = json_string_value(json_array_get(arch, 0));
    if (vram_head_parse(a, &m->head))
        return vram_fail(VRAM_EPARSE, "%s: architecture \"%s\" has a head vram does not know (%s)",
                         origin, a, VRAM_HEAD_SUFFIXES);
    /* num_labels is not saved by Hugging Face; id2label is (2 by default) */
    json_t *labels = json_object_get(root, "id2label");
    int rc;
    if ((rc = get_int(root, origin, KEYS("num_labels"), false, 0, VRAM_MAX_VOCAB, &m->num_labels)))
        return rc;
    if (!m->num_labels)
        m->num_labels = json_is_object(labels) ? (int64_t)json_object_size(labels) : 2;
    if (m->head == VRAM_HEAD_QA) m->num_labels = 2; /* start and end logits */
    return 0;
}

#define REQ(keys, field, max)                                                                      \
    if ((rc = get_int(root, origin, keys, true, 0, max, &m->field))) return rc
#define OPT(keys, field, def, max)                                                                 \
    if ((rc = get_int(root, origin, keys, false, def, max, &m->field))) return rc

static const char *const hidden[] = {"hidden_size", "n_embd", "d_model", NULL};
static const char *const layers[] = {"num_hidden_layers", "n_layer", "num_layers", NULL};
static const char *const heads[] = {"num_attention_heads", "n_head", "num_heads", NULL};
static const char *const inter[] = {"intermediate_size", "n_inner", "d_ff", "ffn_dim", NULL};
static const char *const positions[] = {"max_position_embeddings", "n_positions", "n_ctx", NULL};

/* The fields every decoder-style text model has. */
static int read_text(json_t *root, const char *origin, vram_model_t *m)
{
    int rc;
    REQ(KEYS("vocab_size"), vocab_size, VRAM_MAX_VOCAB);
    REQ(hidden, hidden_size, VRAM_MAX_WIDTH);
    REQ(layers, num_layers, VRAM_MAX_LAYERS);
    REQ(heads, num_heads, VRAM_MAX_HEADS);
    return 0;
}

/* LLaMA and its descendants: GQA, head_dim, SwiGLU, RMSNorm. */
static int read_llama_like(json_t *root, const char *origin, vram_model_t *m, bool tied)
{
    int rc;
    if ((rc = read_text(root, origin, m))) return rc;
    REQ(inter, intermediate_size, VRAM_MAX_MLP_WIDTH);
    OPT(positions, max_positions, 0, VRAM_MAX_POSITIONS);
    OPT(KEYS("num_key_value_heads"), num_kv_heads, m->num_heads, VRAM_MAX_HEADS);
    OPT(KEYS("head_dim"), head_dim, 0, VRAM_MAX_WIDTH);
    m->gated_mlp = true;
    m->softmax_upcast = true;
    m->sdpa_default = true;
    m->tied_embeddings = get_bool(root, "tie_word_embeddings", tied);
    return 0;
}

static int read_moe(json_t *root, const char *origin, vram_model_t *m, const char *experts_key,
                    const char *const *width_keys)
{
    int rc;
    REQ(KEYS(experts_key), num_experts, VRAM_MAX_HEADS);
    REQ(KEYS("num_experts_per_tok"), experts_per_token, VRAM_MAX_HEADS);
    if ((rc = get_int(root, origin, width_keys, true, 0, VRAM_MAX_MLP_WIDTH,
                      &m->expert_intermediate)))
        return rc;
    if (m->num_experts < 1 || m->experts_per_token < 1 || m->experts_per_token > m->num_experts)
        return vram_fail(VRAM_EPARSE, "%s: %lld experts per token out of %lld experts", origin,
                         (long long)m->experts_per_token, (long long)m->num_experts);
    return 0;
}

static int read_family(json_t *root, const char *origin, const char *t, vram_model_t *m)
{
    int rc;
    bool moe = !strcmp(t, "mixtral") || !strcmp(t, "qwen2_moe");
    if ((rc = contradiction(root, origin, t, moe))) return rc;
    if (!strcmp(t, "bert") || !strcmp(t, "roberta") || !strcmp(t, "xlm-roberta")) {
        m->family = VRAM_FAMILY_BERT;
        if ((rc = read_text(root, origin, m))) return rc;
        REQ(inter, intermediate_size, VRAM_MAX_MLP_WIDTH);
        REQ(positions, max_positions, VRAM_MAX_POSITIONS);
        OPT(KEYS("type_vocab_size"), type_vocab_size, 2, VRAM_MAX_VOCAB);
        if (strcmp(t, "bert")) {
            /* RoBERTa numbers positions from padding_idx + 1 */
            int64_t pad;
            OPT(KEYS("pad_token_id"), position_offset, 1, VRAM_MAX_VOCAB);
            pad = m->position_offset;
            m->position_offset = pad + 1;
            if (m->max_positions <= m->position_offset)
                return vram_fail(VRAM_EPARSE, "%s: max_position_embeddings %lld is too small",
                                 origin, (long long)m->max_positions);
            m->max_positions -= m->position_offset;
        }
        m->has_pooler = true;
        m->sdpa_default = true;
    } else if (!strcmp(t, "gpt2") || !strcmp(t, "gpt_bigcode")) {
        bool bigcode = !strcmp(t, "gpt_bigcode");
        m->family = bigcode ? VRAM_FAMILY_GPT_BIGCODE : VRAM_FAMILY_GPT2;
        if ((rc = read_text(root, origin, m))) return rc;
        OPT(inter, intermediate_size, 4 * m->hidden_size, VRAM_MAX_MLP_WIDTH);
        REQ(positions, max_positions, VRAM_MAX_POSITIONS);
        m->tied_embeddings = get_bool(root, "tie_word_embeddings", true);
        if (bigcode) {
            /* multi-query attention: one key/value head (StarCoder) */
            m->num_kv_heads = get_bool(root, "multi_query", true) ? 1 : m->num_heads;
            m->softmax_upcast = get_bool(root, "attention_softmax_in_fp32", true);
        }
        m->sdpa_default = true;
    } else if (!strcmp(t, "gpt_neox")) {
        m->family = VRAM_FAMILY_GPTNEOX;
        if ((rc = read_text(root, origin, m))) return rc;
        REQ(inter, intermediate_size, VRAM_MAX_MLP_WIDTH);
        REQ(positions, max_positions, VRAM_MAX_POSITIONS);
        m->tied_embeddings = get_bool(root, "tie_word_embeddings", false);
        m->softmax_upcast = true;
        m->sdpa_default = true;
    } else if (!strcmp(t, "llama") || !strcmp(t, "mistral")) {
        m->family = VRAM_FAMILY_LLAMA;
        if ((rc = read_llama_like(root, origin, m, false))) return rc;
    } else if (!strcmp(t, "qwen2")) {
        m->family = VRAM_FAMILY_QWEN2;
        if ((rc = read_llama_like(root, origin, m, false))) return rc;
        m->qkv_bias = true;
    } else if (!strcmp(t, "phi3")) {
        m->family = VRAM_FAMILY_PHI3;
        if ((rc = read_llama_like(root, origin, m, false))) return rc;
    } else if (!strcmp(t, "gemma") || !strcmp(t, "gemma2")) {
        m->family = strcmp(t, "gemma") ? VRAM_FAMILY_GEMMA2 : VRAM_FAMILY_GEMMA;
        if ((rc = read_llama_like(root, origin, m, true))) return rc;
        /* gemma2's soft-capped attention is eager in Hugging Face */
        m->sdpa_default = m->family == VRAM_FAMILY_GEMMA;
    } else if (!strcmp(t, "mixtral")) {
        m->family = VRAM_FAMILY_MIXTRAL;
        if ((rc = read_llama_like(root, origin, m, false)) ||
            (rc = read_moe(root, origin, m, "num_local_experts", inter)))
            return rc;
    } else if (!strcmp(t, "qwen2_moe")) {
        m->family = VRAM_FAMILY_QWEN2_MOE;
        if ((rc = read_llama_like(root, origin, m, false)) ||
            (rc = read_moe(root, origin, m, "num_experts", KEYS("moe_intermediate_size"))))
            return rc;
        OPT(KEYS("shared_expert_intermediate_size"), shared_intermediate, 0, VRAM_MAX_MLP_WIDTH);
        int64_t step, only = 0;
        if ((rc = get_int(root, origin, KEYS("decoder_sparse_step"), false, 1, VRAM_MAX_LAYERS,
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
    } else if (!strcmp(t, "phi")) {
        m->family = VRAM_FAMILY_PHI;
        if ((rc = read_text(root, origin, m))) return rc;
        REQ(inter, intermediate_size, VRAM_MAX_MLP_WIDTH);
        OPT(positions, max_positions, 0, VRAM_MAX_POSITIONS);
        OPT(KEYS("num_key_value_heads"), num_kv_heads, m->num_heads, VRAM_MAX_HEADS);
        m->qkv_bias = m->mlp_bias = m->lm_head_bias = true;
        m->tied_embeddings = get_bool(root, "tie_word_embeddings", false);
        m->softmax_upcast = true;
        m->sdpa_default = true;
    } else if (!strcmp(t, "opt")) {
        m->family = VRAM_FAMILY_OPT;
        m->score_clamp = true; /* torch.max(scores, finfo.min) in OPTAttention */
        if ((rc = read_text(root, origin, m))) return rc;
        REQ(inter, intermediate_size, VRAM_MAX_MLP_WIDTH);
        REQ(positions, max_positions, VRAM_MAX_POSITIONS);
        OPT(KEYS("word_embed_proj_dim"), embed_proj_dim, m->hidden_size, VRAM_MAX_WIDTH);
        m->position_offset = 2; /* OPTLearnedPositionalEmbedding's offset */
        m->qkv_bias = m->mlp_bias = get_bool(root, "enable_bias", true);
        bool before = get_bool(root, "do_layer_norm_before", true);
        m->post_norm = !before;
        m->no_final_norm = !before || get_bool(root, "_remove_final_layer_norm", false);
        m->tied_embeddings = get_bool(root, "tie_word_embeddings", true);
        m->softmax_upcast = true;
        m->sdpa_default = true;
    } else if (!strcmp(t, "whisper")) {
        m->family = VRAM_FAMILY_WHISPER;
        int64_t dec_heads, dec_ffn;
        REQ(KEYS("vocab_size"), vocab_size, VRAM_MAX_VOCAB);
        REQ(hidden, hidden_size, VRAM_MAX_WIDTH);
        REQ(KEYS("encoder_layers"), num_layers, VRAM_MAX_LAYERS);
        REQ(KEYS("decoder_layers"), num_decoder_layers, VRAM_MAX_LAYERS);
        REQ(KEYS("encoder_attention_heads"), num_heads, VRAM_MAX_HEADS);
        REQ(KEYS("encoder_ffn_dim"), intermediate_size, VRAM_MAX_MLP_WIDTH);
        if ((rc = get_int(root, origin, KEYS("decoder_attention_heads"), false, m->num_heads,
                          VRAM_MAX_HEADS, &dec_heads)) ||
            (rc = get_int(root, origin, KEYS("decoder_ffn_dim"), false, m->intermediate_size,
                          VRAM_MAX_MLP_WIDTH, &dec_ffn)))
            return rc;
        if (dec_heads != m->num_heads || dec_ffn != m->intermediate_size)
            return vram_fail(VRAM_EPARSE,
                             "%s: whisper with different encoder and decoder heads or widths is "
                             "not supported",
                             origin);
        OPT(KEYS("num_mel_bins"), num_mel_bins, 80, VRAM_MAX_IMAGE);
        OPT(KEYS("max_source_positions"), max_source_positions, 1500, VRAM_MAX_POSITIONS);
        OPT(KEYS("max_target_positions"), max_positions, 448, VRAM_MAX_POSITIONS);
        m->tied_embeddings = true;
        m->sdpa_default = true;
        m->head = VRAM_HEAD_COND_GEN;
    } else if (!strcmp(t, "wav2vec2")) {
        m->family = VRAM_FAMILY_WAV2VEC2;
        REQ(hidden, hidden_size, VRAM_MAX_WIDTH);
        REQ(layers, num_layers, VRAM_MAX_LAYERS);
        REQ(heads, num_heads, VRAM_MAX_HEADS);
        REQ(inter, intermediate_size, VRAM_MAX_MLP_WIDTH);
        OPT(KEYS("vocab_size"), vocab_size, 32, VRAM_MAX_VOCAB);
        if ((rc = get_array(root, origin, "conv_dim", VRAM_MAX_WIDTH, m->conv_dim,
                            &m->conv_layers)) ||
            (rc = get_array(root, origin, "conv_kernel", VRAM_MAX_IMAGE, m->conv_kernel,
                            &m->conv_layers)) ||
            (rc = get_array(root, origin, "conv_stride", VRAM_MAX_IMAGE, m->conv_stride,
                            &m->conv_layers)))
            return rc;
        OPT(KEYS("num_conv_pos_embeddings"), pos_conv_kernel, 128, VRAM_MAX_IMAGE);
        OPT(KEYS("num_conv_pos_embedding_groups"), pos_conv_groups, 16, VRAM_MAX_HEADS);
        m->conv_bias = get_bool(root, "conv_bias", false);
        json_t *norm = json_object_get(root, "feat_extract_norm");
        m->conv_group_norm = !json_is_string(norm) || !strcmp(json_string_value(norm), "group");
        m->post_norm = !get_bool(root, "do_stable_layer_norm", false);
        m->sdpa_default = true;
        if (m->pos_conv_groups < 1 || m->hidden_size % m->pos_conv_groups)
            return vram_fail(VRAM_EPARSE,
                             "%s: hidden_size %lld is not divisible by %lld positional conv "
                             "groups",
                             origin, (long long)m->hidden_size, (long long)m->pos_conv_groups);
    } else if (!strcmp(t, "t5")) {
        m->family = VRAM_FAMILY_T5;
        if ((rc = read_text(root, origin, m))) return rc;
        REQ(inter, intermediate_size, VRAM_MAX_MLP_WIDTH);
        REQ(KEYS("d_kv"), head_dim, VRAM_MAX_WIDTH);
        OPT(KEYS("num_decoder_layers"), num_decoder_layers, m->num_layers, VRAM_MAX_LAYERS);
        OPT(KEYS("relative_attention_num_buckets"), relative_buckets, 32, VRAM_MAX_POSITIONS);
        json_t *ff = json_object_get(root, "feed_forward_proj");
        m->gated_mlp = json_is_string(ff) && !strncmp(json_string_value(ff), "gated-", 6);
        m->tied_embeddings = get_bool(root, "tie_word_embeddings", true);
        m->softmax_upcast = true;
    } else if (!strcmp(t, "vit")) {
        m->family = VRAM_FAMILY_VIT;
        REQ(hidden, hidden_size, VRAM_MAX_WIDTH);
        REQ(layers, num_layers, VRAM_MAX_LAYERS);
        REQ(heads, num_heads, VRAM_MAX_HEADS);
        REQ(inter, intermediate_size, VRAM_MAX_MLP_WIDTH);
        REQ(KEYS("image_size"), image_size, VRAM_MAX_IMAGE);
        REQ(KEYS("patch_size"), patch_size, VRAM_MAX_IMAGE);
        OPT(KEYS("num_channels"), num_channels, 3, VRAM_MAX_IMAGE);
        m->has_pooler = true; /* ViTModel: pooler, no classification head */
        m->sdpa_default = true;
    } else {
        return vram_fail(VRAM_EPARSE,
                         "%s: model_type \"%s\" is not supported (bert, roberta, gpt2, gpt_neox, "
                         "llama, mistral, qwen2, phi, phi3, gemma, gemma2, opt, gpt_bigcode, "
                         "mixtral, qwen2_moe, t5, vit, whisper, wav2vec2); describe it with "
                         "--profile",
                         origin, t);
    }
    return 0;
}

static int read_hf(json_t *root, const char *origin, vram_model_t *m)
{
    json_t *type = json_object_get(root, "model_type");
    if (!json_is_string(type))
        return vram_fail(VRAM_EPARSE, "%s: missing field \"model_type\"", origin);
    const char *t = json_string_value(type);
    memset(m, 0, sizeof *m);
    json_t *name = json_object_get(root, "_name_or_path");
    snprintf(m->name, sizeof m->name, "%s",
             json_is_string(name) && *json_string_value(name) ? json_string_value(name) : t);
    int rc;
    /* the type decides which fields exist: checked before any field is read */
    if ((rc = read_family(root, origin, t, m))) return rc;
    vram_head_t family_head = m->head;
    if ((rc = read_head(root, origin, m))) return rc;
    if (family_head == VRAM_HEAD_COND_GEN && m->head == VRAM_HEAD_BASE) m->tied_embeddings = false;
    vram_model_set_head(m, m->head, 0);
    if (m->family != VRAM_FAMILY_VIT && m->family != VRAM_FAMILY_WAV2VEC2)
        m->default_seq_len = m->max_positions ? m->max_positions : 512;
    if (m->family == VRAM_FAMILY_WAV2VEC2) m->default_seq_len = 16000 * 10; /* 10 s at 16 kHz */
    if (m->default_seq_len > 4096 && m->family != VRAM_FAMILY_WAV2VEC2) m->default_seq_len = 4096;
    if (m->family == VRAM_FAMILY_BERT || m->family == VRAM_FAMILY_GPT2 ||
        m->family == VRAM_FAMILY_T5 || m->family == VRAM_FAMILY_OPT ||
        m->family == VRAM_FAMILY_GPTNEOX)
        m->default_seq_len = m->max_positions ? m->max_positions : 512;
    if (m->num_layers == 0 || m->num_heads == 0 || m->hidden_size == 0)
        return vram_fail(VRAM_EPARSE, "%s: hidden size, layers and heads must be positive", origin);
    uint64_t params;
    if ((rc = vram_model_param_count(m, &params, NULL)))
        return vram_fail(VRAM_EPARSE, "%s: %s", origin, vram_last_error());
    if (params > (uint64_t)VRAM_MAX_PARAMETERS)
        return vram_fail(VRAM_EPARSE,
                         "%s: the model has %s%llu parameters, above the limit of %lld", origin,
                         params == UINT64_MAX ? "more than " : "", (unsigned long long)params,
                         (long long)VRAM_MAX_PARAMETERS);
    return 0;
}
#undef REQ
#undef OPT

int vram_model_from_hf_json(const char *text, const char *origin, vram_model_t *out)
{
    if (!text || !out) return vram_fail(VRAM_EINVAL, "vram_model_from_hf_json: NULL argument");
    json_t *root;
    int rc = load(text, origin ? origin : "config", &root);
    if (rc) return rc;
    vram_model_t m;
    rc = read_hf(root, origin ? origin : "config", &m);
    json_decref(root);
    if (!rc) *out = m;
    return rc;
}

int vram_model_from_hf_config(const char *path, vram_model_t *out)
{
    if (!path || !out) return vram_fail(VRAM_EINVAL, "vram_model_from_hf_config: NULL argument");
    char *text;
    size_t len;
    int rc = vram_read_file(path, 16u << 20, &text, &len);
    if (rc) return rc;
    rc = vram_model_from_hf_json(text, path, out);
    free(text);
    return rc;
}

/* ------------------------------------------------------------ profiles */

/* A profile's byte counts (python's vram.analyze writes them): key,
 * required, bound, field. */
typedef struct {
    const char *key;
    bool required;
    int64_t max;
    size_t at;
} profile_field_t;

static const profile_field_t profile_fields[] = {
    {"parameters", true, VRAM_MAX_PARAMETERS, offsetof(vram_model_t, profile_parameters)},
    {"activation_bytes_per_sample", true, VRAM_MAX_BYTES,
     offsetof(vram_model_t, profile_act_per_sample)},
    {"activation_bytes_fixed", false, VRAM_MAX_BYTES, offsetof(vram_model_t, profile_act_fixed)},
    {"buffers_bytes", false, VRAM_MAX_BYTES, offsetof(vram_model_t, profile_buffers_bytes)},
    {"backward_bytes_per_sample", false, VRAM_MAX_BYTES,
     offsetof(vram_model_t, profile_bwd_per_sample)},
    {"backward_bytes_fixed", false, VRAM_MAX_BYTES, offsetof(vram_model_t, profile_bwd_fixed)},
};

static int read_profile(json_t *root, const char *origin, vram_model_t *m)
{
    memset(m, 0, sizeof *m);
    m->family = VRAM_FAMILY_PROFILE;
    json_t *name = json_object_get(root, "name");
    snprintf(m->name, sizeof m->name, "%s",
             json_is_string(name) ? json_string_value(name) : "profile");
    int64_t v;
    int rc;
    for (size_t i = 0; i < sizeof profile_fields / sizeof *profile_fields; i++) {
        const profile_field_t *f = &profile_fields[i];
        if ((rc = get_int(root, origin, KEYS(f->key), f->required, 0, f->max, &v))) return rc;
        *(uint64_t *)((char *)m + f->at) = (uint64_t)v;
    }
    json_t *dt = json_object_get(root, "dtype");
    const char *d = json_is_string(dt) ? json_string_value(dt) : "fp32";
    if (dt && !json_is_string(dt))
        return vram_fail(VRAM_EPARSE, "%s: \"dtype\" must be a string", origin);
    if (!strcmp(d, "fp32") || !strcmp(d, "float32"))
        m->profile_dtype_bytes = 4;
    else if (!strcmp(d, "fp16") || !strcmp(d, "float16") || !strcmp(d, "bf16") ||
             !strcmp(d, "bfloat16"))
        m->profile_dtype_bytes = 2;
    else
        return vram_fail(VRAM_EPARSE, "%s: unknown dtype \"%s\" (use fp32, fp16 or bf16)", origin,
                         d);
    return 0;
}

int vram_model_from_profile_json(const char *text, const char *origin, vram_model_t *out)
{
    if (!text || !out) return vram_fail(VRAM_EINVAL, "vram_model_from_profile_json: NULL argument");
    json_t *root;
    int rc = load(text, origin ? origin : "profile", &root);
    if (rc) return rc;
    vram_model_t m;
    rc = read_profile(root, origin ? origin : "profile", &m);
    json_decref(root);
    if (!rc) *out = m;
    return rc;
}

int vram_model_from_profile(const char *path, vram_model_t *out)
{
    if (!path || !out) return vram_fail(VRAM_EINVAL, "vram_model_from_profile: NULL argument");
    char *text;
    size_t len;
    int rc = vram_read_file(path, 16u << 20, &text, &len);
    if (rc) return rc;
    rc = vram_model_from_profile_json(text, path, out);
    free(text);
    return rc;
}
