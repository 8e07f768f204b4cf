/* Model descriptions from files: Hugging Face config.json and measured
 * profiles. Parsed with jansson, whose errors carry line and column. */
#include "hf_read.h"
#include "core/file.h"

#include <errno.h>
#include <pthread.h>
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
int vram_hf_int(json_t *root, const char *origin, const char *const *keys, bool required,
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

bool vram_hf_bool(json_t *root, const char *key, bool def)
{
    json_t *v = json_object_get(root, key);
    return json_is_boolean(v) ? json_is_true(v) : def;
}

const char *vram_hf_str(json_t *root, const char *key)
{
    return json_string_value(json_object_get(root, key));
}

bool vram_hf_has(json_t *root, const char *key)
{
    json_t *v = json_object_get(root, key);
    return v && !json_is_null(v);
}

/* An integer array field (wav2vec2's conv_dim, conv_kernel, conv_stride). */
int vram_hf_array(json_t *root, const char *origin, const char *key, int64_t max, int64_t *out,
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
 * estimated as a dense model 6x too small), so it is refused rather than
 * estimated without its experts. */
static int contradiction(json_t *root, const char *origin, const char *t, bool moe, bool audio)
{
    static const char *const moe_keys[] = {"num_local_experts",     "num_experts",
                                           "n_routed_experts",      "num_experts_per_tok",
                                           "moe_intermediate_size", NULL};
    for (const char *const *k = moe_keys; *k && !moe; k++) {
        json_t *v = json_object_get(root, *k);
        if (v && !json_is_null(v) && !(json_is_integer(v) && json_integer_value(v) == 0))
            return vram_fail(VRAM_EPARSE,
                             "%s: \"%s\" describes a mixture-of-experts model but model_type "
                             "\"%s\" is dense in transformers; vram does not estimate it without "
                             "its experts (mixture-of-experts types: mixtral, qwen2_moe, "
                             "qwen3_moe, deepseek_v2, deepseek_v3)",
                             origin, *k, t);
    }
    static const char *const audio_keys[] = {"num_mel_bins", "conv_dim", NULL};
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
    size_t la = strlen(a);
    m->pretraining_head = la >= 14 && !strcmp(a + la - 14, "ForPreTraining");
    /* num_labels is not saved by Hugging Face; id2label is (2 by default) */
    json_t *labels = json_object_get(root, "id2label");
    int rc;
    if ((rc = vram_hf_int(root, origin, KEYS("num_labels"), false, 0, VRAM_MAX_VOCAB,
                          &m->num_labels)))
        return rc;
    if (!m->num_labels)
        m->num_labels = json_is_object(labels) ? (int64_t)json_object_size(labels) : 2;
    if (m->head == VRAM_HEAD_QA) m->num_labels = 2; /* start and end logits */
    return 0;
}

const char *const vram_hf_hidden[] = {"hidden_size", "n_embd", "d_model", "n_embed", NULL};
const char *const vram_hf_layers[] = {"num_hidden_layers", "n_layer", "num_layers", NULL};
const char *const vram_hf_heads[] = {"num_attention_heads", "n_head", "num_heads", NULL};
const char *const vram_hf_inter[] = {"intermediate_size", "n_inner", "d_ff", "ffn_dim", NULL};
const char *const vram_hf_positions[] = {"max_position_embeddings", "n_positions", "n_ctx", NULL};

/* Whether `t` is one of the comma-separated `types`. */
static bool type_in(const char *types, const char *t)
{
    size_t n = strlen(t);
    for (const char *s = types; *s;) {
        size_t len = strcspn(s, ",");
        if (len == n && !strncmp(s, t, n)) return true;
        s += len + (s[len] == ',');
    }
    return false;
}

/* The family rows, in the order they are tried. */
static const vram_hf_family_t *const tables[] = {vram_hf_families, vram_hf_decoder_families,
                                                 vram_hf_more_families};

static char model_types[2048];

static void list_model_types(void)
{
    size_t at = 0;
    for (size_t i = 0; i < sizeof tables / sizeof *tables; i++)
        for (const vram_hf_family_t *r = tables[i]; r->types; r++) {
            int n = snprintf(model_types + at, sizeof model_types - at, "%s%s", at ? "," : "",
                             r->types);
            if (n < 0 || (size_t)n >= sizeof model_types - at) return; /* cut at a row */
            at += (size_t)n;
        }
}

const char *vram_hf_model_types(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, list_model_types);
    return model_types;
}

static const vram_hf_family_t *find_row(const char *t)
{
    for (size_t i = 0; i < sizeof tables / sizeof *tables; i++)
        for (const vram_hf_family_t *r = tables[i]; r->types; r++)
            if (type_in(r->types, t)) return r;
    return NULL;
}

static int read_family(json_t *root, const char *origin, const char *t, vram_model_t *m)
{
    int rc;
    const vram_hf_family_t *row = find_row(t);
    if ((rc = contradiction(root, origin, t, row ? row->moe : true, row ? row->audio : false)))
        return rc;
    /* the type decides which fields exist: checked before any field is read */
    return row ? row->read(root, origin, t, m) : vram_hf_read_generic(root, origin, t, m);
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
    snprintf(m->model_type, sizeof m->model_type, "%s", t);
    int rc;
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
    {"backward_gradient_bytes", false, VRAM_MAX_BYTES, offsetof(vram_model_t, profile_bwd_grads)},
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
        if ((rc = vram_hf_int(root, origin, KEYS(f->key), f->required, 0, f->max, &v))) return rc;
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
