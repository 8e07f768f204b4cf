/* Model descriptions from files: Hugging Face config.json and measured
 * profiles. Parsed with jansson, whose errors carry line and column. */
#include "vram.h"
#include "core/file.h"
#include "estimate_limits.h"

#include <errno.h>
#include <stdlib.h>
#include <jansson.h>
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

    static const char *const hidden[] = {"hidden_size", "n_embd", "d_model", NULL};
    static const char *const layers[] = {"num_hidden_layers", "n_layer", "num_layers", NULL};
    static const char *const heads[] = {"num_attention_heads", "n_head", "num_heads", NULL};
    static const char *const inter[] = {"intermediate_size", "n_inner", "d_ff", NULL};
    static const char *const positions[] = {"max_position_embeddings", "n_positions", "n_ctx",
                                            NULL};
    int rc;
#define REQ(keys, field, max)                                                                      \
    if ((rc = get_int(root, origin, keys, true, 0, max, &m->field))) return rc
#define OPT(keys, field, def, max)                                                                 \
    if ((rc = get_int(root, origin, keys, false, def, max, &m->field))) return rc

    bool vit = !strcmp(t, "vit");
    if (!vit) REQ(KEYS("vocab_size"), vocab_size, VRAM_MAX_VOCAB);
    REQ(hidden, hidden_size, VRAM_MAX_WIDTH);
    REQ(layers, num_layers, VRAM_MAX_LAYERS);
    REQ(heads, num_heads, VRAM_MAX_HEADS);

    if (!strcmp(t, "bert") || !strcmp(t, "roberta") || !strcmp(t, "xlm-roberta")) {
        m->family = VRAM_FAMILY_BERT;
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
    } else if (!strcmp(t, "gpt2")) {
        m->family = VRAM_FAMILY_GPT2;
        OPT(inter, intermediate_size, 4 * m->hidden_size, VRAM_MAX_MLP_WIDTH);
        REQ(positions, max_positions, VRAM_MAX_POSITIONS);
        m->tied_embeddings = get_bool(root, "tie_word_embeddings", true);
    } else if (!strcmp(t, "gpt_neox")) {
        m->family = VRAM_FAMILY_GPTNEOX;
        REQ(inter, intermediate_size, VRAM_MAX_MLP_WIDTH);
        REQ(positions, max_positions, VRAM_MAX_POSITIONS);
        m->tied_embeddings = get_bool(root, "tie_word_embeddings", false);
    } else if (!strcmp(t, "llama") || !strcmp(t, "mistral")) {
        m->family = VRAM_FAMILY_LLAMA;
        REQ(inter, intermediate_size, VRAM_MAX_MLP_WIDTH);
        REQ(positions, max_positions, VRAM_MAX_POSITIONS);
        OPT(KEYS("num_key_value_heads"), num_kv_heads, m->num_heads, VRAM_MAX_HEADS);
        OPT(KEYS("head_dim"), head_dim, 0, VRAM_MAX_WIDTH);
        m->gated_mlp = true;
        m->tied_embeddings = get_bool(root, "tie_word_embeddings", false);
    } else if (!strcmp(t, "t5")) {
        m->family = VRAM_FAMILY_T5;
        REQ(inter, intermediate_size, VRAM_MAX_MLP_WIDTH);
        REQ(KEYS("d_kv"), head_dim, VRAM_MAX_WIDTH);
        OPT(KEYS("num_decoder_layers"), num_decoder_layers, m->num_layers, VRAM_MAX_LAYERS);
        OPT(KEYS("relative_attention_num_buckets"), relative_buckets, 32, VRAM_MAX_POSITIONS);
        json_t *ff = json_object_get(root, "feed_forward_proj");
        m->gated_mlp = json_is_string(ff) && !strncmp(json_string_value(ff), "gated-", 6);
        m->tied_embeddings = get_bool(root, "tie_word_embeddings", true);
    } else if (vit) {
        m->family = VRAM_FAMILY_VIT;
        REQ(inter, intermediate_size, VRAM_MAX_MLP_WIDTH);
        REQ(KEYS("image_size"), image_size, VRAM_MAX_IMAGE);
        REQ(KEYS("patch_size"), patch_size, VRAM_MAX_IMAGE);
        OPT(KEYS("num_channels"), num_channels, 3, VRAM_MAX_IMAGE);
        m->has_pooler = true; /* ViTModel: pooler, no classification head */
    } else {
        return vram_fail(VRAM_EPARSE,
                         "%s: model_type \"%s\" is not supported (bert, roberta, gpt2, gpt_neox, "
                         "llama, mistral, t5, vit); describe it with --profile",
                         origin, t);
    }
#undef REQ
#undef OPT
    if (m->family != VRAM_FAMILY_VIT)
        m->default_seq_len = m->max_positions ? m->max_positions : 512;
    if (m->family == VRAM_FAMILY_LLAMA && m->default_seq_len > 4096) m->default_seq_len = 4096;
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

static int read_profile(json_t *root, const char *origin, vram_model_t *m)
{
    memset(m, 0, sizeof *m);
    m->family = VRAM_FAMILY_PROFILE;
    json_t *name = json_object_get(root, "name");
    snprintf(m->name, sizeof m->name, "%s",
             json_is_string(name) ? json_string_value(name) : "profile");
    int64_t v;
    int rc;
    if ((rc = get_int(root, origin, KEYS("parameters"), true, 0, VRAM_MAX_PARAMETERS, &v)))
        return rc;
    m->profile_parameters = (uint64_t)v;
    if ((rc = get_int(root, origin, KEYS("activation_bytes_per_sample"), true, 0, VRAM_MAX_BYTES,
                      &v)))
        return rc;
    m->profile_act_per_sample = (uint64_t)v;
    if ((rc = get_int(root, origin, KEYS("activation_bytes_fixed"), false, 0, VRAM_MAX_BYTES, &v)))
        return rc;
    m->profile_act_fixed = (uint64_t)v;
    if ((rc = get_int(root, origin, KEYS("buffers_bytes"), false, 0, VRAM_MAX_BYTES, &v)))
        return rc;
    m->profile_buffers_bytes = (uint64_t)v;
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
