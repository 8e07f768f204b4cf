/* Hugging Face config.json and measured-profile parsing: both naming
 * styles, grouped-query attention, tied embeddings, and errors that name the
 * line/column or the missing field. Fixtures: tests/data/hf, tests/data/profile. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "vram.h"

static const char *fixture(const char *rel)
{
    static char path[1024];
    const char *src = getenv("VRAM_SOURCE_DIR");
    snprintf(path, sizeof path, "%s/tests/data/%s", src ? src : ".", rel);
    return path;
}

static uint64_t params_of(const vram_model_t *m)
{
    uint64_t n = 0;
    assert_int_equal(vram_model_param_count(m, &n, NULL), 0);
    return n;
}

static uint64_t catalog_params(const char *name)
{
    vram_model_t m;
    assert_int_equal(vram_model_find(name, &m), 0);
    return params_of(&m);
}

static void published_configs_give_catalog_counts(void **state)
{
    (void)state;
    static const struct {
        const char *file, *catalog;
        uint64_t params;
    } cases[] = {
        /* the fixtures' "architectures" say ForMaskedLM: BertModel's
         * 109,482,240 without the pooler, with the MLM transform, its
         * LayerNorm and the decoder bias (the decoder weight is tied) */
        {"hf/bert-base-uncased.json", NULL, 109514298},
        {"hf/roberta-base.json", NULL, 124697433},
        {"hf/gpt2.json", "gpt2", 124439808},
        {"hf/llama-2-7b.json", "llama-2-7b", 6738415616},
        {"hf/mistral-7b.json", "mistral-7b", 7241732096},
        {"hf/t5-small.json", "t5-small", 60506624},
        /* ViTModel (pooler, no head): google/vit-base-patch16-224-in21k */
        {"hf/vit-base-patch16-224-in21k.json", NULL, 86389248},
        /* EleutherAI/pythia-160m: untied embed_in and embed_out */
        {"hf/pythia-160m.json", NULL, 162322944},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        vram_model_t m;
        if (vram_model_from_hf_config(fixture(cases[i].file), &m))
            fail_msg("%s: %s", cases[i].file, vram_last_error());
        uint64_t n = params_of(&m);
        if (n != cases[i].params)
            fail_msg("%s: %llu parameters, published %llu", cases[i].file, (unsigned long long)n,
                     (unsigned long long)cases[i].params);
        if (cases[i].catalog) assert_int_equal(n, catalog_params(cases[i].catalog));
    }
}

static void both_naming_styles_agree(void **state)
{
    (void)state;
    /* GPT-2's own names and the common ones describe the same model */
    const char *gpt_style = "{\"model_type\": \"gpt2\", \"vocab_size\": 50257, \"n_embd\": 768,"
                            " \"n_layer\": 12, \"n_head\": 12, \"n_positions\": 1024}";
    const char *common = "{\"model_type\": \"gpt2\", \"vocab_size\": 50257, \"hidden_size\": 768,"
                         " \"num_hidden_layers\": 12, \"num_attention_heads\": 12,"
                         " \"max_position_embeddings\": 1024, \"intermediate_size\": 3072}";
    vram_model_t a, b;
    assert_int_equal(vram_model_from_hf_json(gpt_style, "a", &a), 0);
    assert_int_equal(vram_model_from_hf_json(common, "b", &b), 0);
    assert_int_equal(params_of(&a), 124439808);
    assert_int_equal(params_of(&b), 124439808);
    assert_int_equal(a.intermediate_size, 3072); /* n_inner absent: 4 * n_embd */
    assert_int_equal(a.max_positions, 1024);
    /* T5 names: d_model, num_layers, num_heads, d_ff */
    vram_model_t t;
    assert_int_equal(vram_model_from_hf_config(fixture("hf/t5-small.json"), &t), 0);
    assert_int_equal(t.hidden_size, 512);
    assert_int_equal(t.num_layers, 6);
    assert_int_equal(t.num_decoder_layers, 6);
    assert_int_equal(t.intermediate_size, 2048);
}

static void grouped_query_attention(void **state)
{
    (void)state;
    vram_model_t m;
    assert_int_equal(vram_model_from_hf_config(fixture("hf/mistral-7b.json"), &m), 0);
    assert_int_equal(m.num_kv_heads, 8);
    /* k and v projections are 4096 x 1024 instead of 4096 x 4096 */
    vram_model_t full = m;
    full.num_kv_heads = 32;
    assert_int_equal(params_of(&full) - params_of(&m), 32ull * 2 * 4096 * (4096 - 1024));
    /* and the KV cache is four times smaller */
    vram_estimate_config_t c;
    vram_estimate_config_init(&c);
    c.mode = VRAM_MODE_INFER;
    c.precision = VRAM_PREC_BF16;
    c.seq_len = 4096;
    vram_estimate_t e1, e2;
    assert_int_equal(vram_estimate(&m, &c, &e1), 0);
    assert_int_equal(vram_estimate(&full, &c, &e2), 0);
    assert_int_equal(e2.kv_cache, 4 * e1.kv_cache);
    /* missing num_key_value_heads: as many as attention heads */
    vram_model_t l;
    assert_int_equal(vram_model_from_hf_config(fixture("hf/missing-field.json"), &l), VRAM_EPARSE);
    const char *txt = "{\"model_type\": \"llama\", \"vocab_size\": 32000, \"hidden_size\": 4096,"
                      "\"intermediate_size\": 11008, \"num_hidden_layers\": 32,"
                      "\"num_attention_heads\": 32, \"max_position_embeddings\": 4096}";
    assert_int_equal(vram_model_from_hf_json(txt, "x", &l), 0);
    assert_int_equal(l.num_kv_heads, 32);
    assert_int_equal(params_of(&l), 6738415616ull);
}

static void tied_embeddings(void **state)
{
    (void)state;
    vram_model_t tied, untied;
    assert_int_equal(vram_model_from_hf_config(fixture("hf/llama-tiny-gqa.json"), &tied), 0);
    assert_true(tied.tied_embeddings);
    untied = tied;
    untied.tied_embeddings = false;
    assert_int_equal(params_of(&untied) - params_of(&tied), 4096ull * 256);
    /* GPT-2 ties by default; an explicit false adds the LM head */
    const char *gpt = "{\"model_type\": \"gpt2\", \"vocab_size\": 50257, \"n_embd\": 768,"
                      " \"n_layer\": 12, \"n_head\": 12, \"n_positions\": 1024,"
                      " \"tie_word_embeddings\": false}";
    vram_model_t g;
    assert_int_equal(vram_model_from_hf_json(gpt, "g", &g), 0);
    assert_int_equal(params_of(&g), 124439808ull + 50257ull * 768);
}

static void malformed_json_reports_line_and_column(void **state)
{
    (void)state;
    vram_model_t m;
    memset(&m, 0x7e, sizeof m);
    assert_int_equal(vram_model_from_hf_config(fixture("hf/malformed.json"), &m), VRAM_EPARSE);
    /* the missing comma after line 4: jansson stops at line 5, column 23 */
    assert_non_null(strstr(vram_last_error(), "malformed.json:5:23"));
    assert_int_equal(((unsigned char *)&m)[0], 0x7e);
    assert_int_equal(vram_model_from_hf_json("{\n\"a\": [1,\n", "t", &m), VRAM_EPARSE);
    assert_non_null(strstr(vram_last_error(), "t:3:"));
    assert_int_equal(vram_model_from_hf_json("[1, 2]", "t", &m), VRAM_EPARSE);
    assert_non_null(strstr(vram_last_error(), "object"));
}

static void missing_and_bad_fields_are_named(void **state)
{
    (void)state;
    vram_model_t m;
    assert_int_equal(vram_model_from_hf_config(fixture("hf/missing-field.json"), &m), VRAM_EPARSE);
    assert_non_null(strstr(vram_last_error(), "\"intermediate_size\""));
    assert_int_equal(vram_model_from_hf_json("{\"hidden_size\": 8}", "t", &m), VRAM_EPARSE);
    assert_non_null(strstr(vram_last_error(), "model_type"));
    assert_int_equal(vram_model_from_hf_json("{\"model_type\": \"bert\", \"vocab_size\": 10, "
                                             "\"hidden_size\": \"big\"}",
                                             "t", &m),
                     VRAM_EPARSE);
    assert_non_null(strstr(vram_last_error(), "hidden_size"));
    assert_int_equal(vram_model_from_hf_config(fixture("hf/unsupported.json"), &m), VRAM_EPARSE);
    /* an unknown type without the standard keys: the missing key is named */
    assert_non_null(strstr(vram_last_error(), "rwkv"));
    assert_non_null(strstr(vram_last_error(), "\"num_attention_heads\""));
    /* hidden size not divisible by the heads */
    assert_int_equal(vram_model_from_hf_json("{\"model_type\": \"gpt2\", \"vocab_size\": 10,"
                                             "\"n_embd\": 10, \"n_layer\": 1, \"n_head\": 3,"
                                             "\"n_positions\": 8}",
                                             "t", &m),
                     VRAM_EPARSE);
    assert_non_null(strstr(vram_last_error(), "divisible"));
    assert_int_equal(vram_model_from_hf_config("/nonexistent/config.json", &m), VRAM_EIO);
    assert_non_null(strstr(vram_last_error(), "/nonexistent/config.json"));
}

static void roberta_positions_and_sequence_limit(void **state)
{
    (void)state;
    vram_model_t m;
    assert_int_equal(vram_model_from_hf_config(fixture("hf/roberta-base.json"), &m), 0);
    assert_int_equal(m.max_positions, 512); /* 514 rows, 2 reserved */
    vram_estimate_config_t c;
    vram_estimate_config_init(&c);
    c.seq_len = 513;
    vram_estimate_t e;
    assert_int_equal(vram_estimate(&m, &c, &e), VRAM_EINVAL);
    c.seq_len = 512;
    assert_int_equal(vram_estimate(&m, &c, &e), 0);
}

static void profiles(void **state)
{
    (void)state;
    vram_model_t m;
    assert_int_equal(vram_model_from_profile(fixture("profile/small.json"), &m), 0);
    assert_int_equal(m.family, VRAM_FAMILY_PROFILE);
    assert_string_equal(m.name, "my-unet");
    vram_estimate_config_t c;
    vram_estimate_config_init(&c);
    c.batch_size = 3;
    vram_estimate_t e;
    assert_int_equal(vram_estimate(&m, &c, &e), 0);
    assert_int_equal(e.parameters_count, 31000000);
    assert_int_equal(e.parameters, 4 * 31000000ull);
    assert_int_equal(e.buffers, 65536);
    assert_int_equal(e.activations, 3 * 268435456ull + 1048576);
    c.precision = VRAM_PREC_AMP_BF16; /* measured in fp32: half-precision activations */
    assert_int_equal(vram_estimate(&m, &c, &e), 0);
    assert_int_equal(e.activations, (3 * 268435456ull + 1048576) / 2);

    assert_int_equal(vram_model_from_profile_json("{\"parameters\": 5}", "p", &m), VRAM_EPARSE);
    assert_non_null(strstr(vram_last_error(), "activation_bytes_per_sample"));
    assert_int_equal(vram_model_from_profile_json("{\"activation_bytes_per_sample\": 5}", "p", &m),
                     VRAM_EPARSE);
    assert_non_null(strstr(vram_last_error(), "\"parameters\""));
    assert_int_equal(vram_model_from_profile_json("{\"parameters\": 5, "
                                                  "\"activation_bytes_per_sample\": 1, "
                                                  "\"dtype\": \"fp8\"}",
                                                  "p", &m),
                     VRAM_EPARSE);
    assert_non_null(strstr(vram_last_error(), "fp8"));
    assert_int_equal(vram_model_from_profile_json("{\"parameters\": -5, "
                                                  "\"activation_bytes_per_sample\": 1}",
                                                  "p", &m),
                     VRAM_EPARSE);
    assert_int_equal(vram_model_from_profile_json("{\"parameters\": 5,,}", "p", &m), VRAM_EPARSE);
    assert_non_null(strstr(vram_last_error(), "p:1:"));
    assert_int_equal(vram_model_from_profile_json("{\"parameters\": 5, "
                                                  "\"activation_bytes_per_sample\": 7, "
                                                  "\"dtype\": \"bf16\"}",
                                                  "p", &m),
                     0);
    assert_int_equal(m.profile_dtype_bytes, 2);

    /* backward's bytes, of which gradients: taken out when gradients are
     * kept (accumulation, zero_grad zeros), never below 0, kept otherwise */
    assert_int_equal(vram_model_from_profile_json("{\"parameters\": 1000, "
                                                  "\"activation_bytes_per_sample\": 100, "
                                                  "\"backward_bytes_per_sample\": 50, "
                                                  "\"backward_bytes_fixed\": 3000, "
                                                  "\"backward_gradient_bytes\": 2500}",
                                                  "p", &m),
                     0);
    assert_int_equal(m.profile_bwd_grads, 2500);
    vram_estimate_config_init(&c);
    c.batch_size = 4;
    assert_int_equal(vram_estimate(&m, &c, &e), 0);
    assert_int_equal(e.backward_temps, 3200);
    c.accumulation_steps = 2;
    assert_int_equal(vram_estimate(&m, &c, &e), 0);
    assert_int_equal(e.backward_temps, 700);
    c.accumulation_steps = 1;
    c.grads_kept = true;
    assert_int_equal(vram_estimate(&m, &c, &e), 0);
    assert_int_equal(e.backward_temps, 700);
    m.profile_bwd_grads = 5000; /* more than backward's bytes: nothing left, not negative */
    assert_int_equal(vram_estimate(&m, &c, &e), 0);
    assert_int_equal(e.backward_temps, 0);
}

/* A JSON config of `type` with the fields of `body` (no braces). */
static int from_fields(const char *type, const char *body, vram_model_t *m)
{
    char text[1024];
    snprintf(text, sizeof text, "{\"model_type\": \"%s\", %s}", type, body);
    return vram_model_from_hf_json(text, "cfg.json", m);
}

static void expect_refused(int rc, const char *field, const char *bound)
{
    assert_int_equal(rc, VRAM_EPARSE);
    const char *msg = vram_last_error();
    if (strncmp(msg, "cfg.json", 8) || !strstr(msg, field) || !strstr(msg, bound))
        fail_msg("message \"%s\" should name cfg.json, %s and the bound %s", msg, field, bound);
}

#define LLAMA_REST                                                                                 \
    "\"hidden_size\": 64, \"intermediate_size\": 172, \"num_attention_heads\": 4, "                \
    "\"max_position_embeddings\": 128, \"vocab_size\": 1000"

/* The fuzz findings F3 (docs/fuzzing.md): each of these used to hang or
 * overflow; now the field and its bound are named. */
static void fuzz_f3_inputs_are_refused_naming_field_and_bound(void **state)
{
    (void)state;
    vram_model_t m;
    expect_refused(
        from_fields("llama", "\"num_hidden_layers\": 9223372036854775807, " LLAMA_REST, &m),
        "\"num_hidden_layers\"", "limit of 1000");
    expect_refused(from_fields("gpt2",
                               "\"vocab_size\": 50257, \"n_embd\": 4611686018427387904, "
                               "\"n_layer\": 2, \"n_head\": 2, \"n_positions\": 64",
                               &m),
                   "\"n_embd\"", "limit of 1048576");
    expect_refused(from_fields("roberta",
                               "\"vocab_size\": 100, \"hidden_size\": 8, \"num_hidden_layers\": 1, "
                               "\"num_attention_heads\": 2, \"intermediate_size\": 8, "
                               "\"max_position_embeddings\": 64, "
                               "\"pad_token_id\": 9223372036854775807",
                               &m),
                   "\"pad_token_id\"", "limit of 16777216");
    expect_refused(from_fields("vit",
                               "\"hidden_size\": 8, \"num_hidden_layers\": 1, "
                               "\"num_attention_heads\": 2, \"intermediate_size\": 8, "
                               "\"image_size\": 9223372036854775807, \"patch_size\": 1",
                               &m),
                   "\"image_size\"", "limit of 65536");
}

/* Every bounded field: the limit itself is accepted by the field check
 * (the model may still be refused for another reason, never naming this
 * field's bound) and one more is refused with the field and the bound. */
static void each_field_has_a_documented_bound(void **state)
{
    (void)state;
    static const struct {
        const char *type, *field, *rest;
        long long limit;
    } cases[] = {
        {"llama", "num_hidden_layers", LLAMA_REST, 1000},
        {"llama", "num_attention_heads",
         "\"hidden_size\": 4096, \"intermediate_size\": 8, \"num_hidden_layers\": 1, "
         "\"num_key_value_heads\": 1, \"max_position_embeddings\": 8, \"vocab_size\": 8",
         4096},
        {"llama", "num_key_value_heads",
         "\"hidden_size\": 4096, \"intermediate_size\": 8, \"num_hidden_layers\": 1, "
         "\"num_attention_heads\": 4096, \"max_position_embeddings\": 8, \"vocab_size\": 8",
         4096},
        {"llama", "hidden_size",
         "\"intermediate_size\": 8, \"num_hidden_layers\": 1, \"num_attention_heads\": 1, "
         "\"max_position_embeddings\": 8, \"vocab_size\": 8",
         1048576},
        {"llama", "head_dim", LLAMA_REST ", \"num_hidden_layers\": 1", 1048576},
        {"llama", "intermediate_size",
         "\"hidden_size\": 8, \"num_hidden_layers\": 1, \"num_attention_heads\": 1, "
         "\"max_position_embeddings\": 8, \"vocab_size\": 8",
         4194304},
        {"llama", "vocab_size",
         "\"hidden_size\": 8, \"intermediate_size\": 8, \"num_hidden_layers\": 1, "
         "\"num_attention_heads\": 1, \"max_position_embeddings\": 8",
         16777216},
        {"llama", "max_position_embeddings",
         "\"hidden_size\": 8, \"intermediate_size\": 8, \"num_hidden_layers\": 1, "
         "\"num_attention_heads\": 1, \"vocab_size\": 8",
         16777216},
        {"bert", "type_vocab_size",
         "\"vocab_size\": 8, \"hidden_size\": 8, \"num_hidden_layers\": 1, "
         "\"num_attention_heads\": 1, \"intermediate_size\": 8, \"max_position_embeddings\": 8",
         16777216},
        {"t5", "num_decoder_layers",
         "\"vocab_size\": 8, \"d_model\": 8, \"num_layers\": 1, \"num_heads\": 1, \"d_ff\": 8, "
         "\"d_kv\": 8",
         1000},
        {"t5", "relative_attention_num_buckets",
         "\"vocab_size\": 8, \"d_model\": 8, \"num_layers\": 1, \"num_heads\": 1, \"d_ff\": 8, "
         "\"d_kv\": 8",
         16777216},
        {"t5", "d_kv",
         "\"vocab_size\": 8, \"d_model\": 8, \"num_layers\": 1, \"num_heads\": 1, \"d_ff\": 8",
         1048576},
        {"vit", "patch_size",
         "\"hidden_size\": 8, \"num_hidden_layers\": 1, \"num_attention_heads\": 1, "
         "\"intermediate_size\": 8, \"image_size\": 65536",
         65536},
        {"vit", "num_channels",
         "\"hidden_size\": 8, \"num_hidden_layers\": 1, \"num_attention_heads\": 1, "
         "\"intermediate_size\": 8, \"image_size\": 64, \"patch_size\": 16",
         65536},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char body[768], bound[64];
        vram_model_t m;
        snprintf(bound, sizeof bound, "limit of %lld", cases[i].limit);
        snprintf(body, sizeof body, "\"%s\": %lld, %s", cases[i].field, cases[i].limit,
                 cases[i].rest);
        if (from_fields(cases[i].type, body, &m) && strstr(vram_last_error(), cases[i].field) &&
            strstr(vram_last_error(), bound))
            fail_msg("%s %s = limit refused: %s", cases[i].type, cases[i].field, vram_last_error());
        snprintf(body, sizeof body, "\"%s\": %lld, %s", cases[i].field, cases[i].limit + 1,
                 cases[i].rest);
        char quoted[80];
        snprintf(quoted, sizeof quoted, "\"%s\"", cases[i].field);
        expect_refused(from_fields(cases[i].type, body, &m), quoted, bound);
    }
}

/* The layers are counted once and multiplied: 1000 layers (the limit)
 * give exactly the affine count of 1 and 2 layers, and take no longer. */
static void layer_count_is_affine_up_to_the_limit(void **state)
{
    (void)state;
    static const char *const types[] = {"llama", "gpt2", "gpt_neox", "bert", "t5", "vit"};
    static const char *const rests[] = {
        LLAMA_REST ", \"num_key_value_heads\": 2",
        "\"vocab_size\": 1000, \"n_embd\": 64, \"n_head\": 4, \"n_positions\": 128",
        "\"vocab_size\": 1000, \"hidden_size\": 64, \"num_attention_heads\": 4, "
        "\"intermediate_size\": 256, \"max_position_embeddings\": 128",
        "\"vocab_size\": 1000, \"hidden_size\": 64, \"num_attention_heads\": 4, "
        "\"intermediate_size\": 256, \"max_position_embeddings\": 128",
        "\"vocab_size\": 1000, \"d_model\": 64, \"num_heads\": 4, \"d_ff\": 256, \"d_kv\": 16",
        "\"hidden_size\": 64, \"num_attention_heads\": 4, \"intermediate_size\": 256, "
        "\"image_size\": 32, \"patch_size\": 8",
    };
    static const char *const layer_key[] = {"num_hidden_layers", "n_layer",    "num_hidden_layers",
                                            "num_hidden_layers", "num_layers", "num_hidden_layers"};
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        uint64_t count[3], tensors[3];
        const long long layers[3] = {1, 2, 1000};
        for (int k = 0; k < 3; k++) {
            char body[512];
            vram_model_t m;
            snprintf(body, sizeof body, "\"%s\": %lld, %s", layer_key[t], layers[k], rests[t]);
            if (from_fields(types[t], body, &m))
                fail_msg("%s with %lld layers: %s", types[t], layers[k], vram_last_error());
            assert_int_equal(vram_model_param_count(&m, &count[k], &tensors[k]), 0);
        }
        uint64_t per_layer = count[1] - count[0], per_layer_tensors = tensors[1] - tensors[0];
        assert_true(per_layer > 0);
        assert_int_equal(count[2], count[0] + 999 * per_layer);
        assert_int_equal(tensors[2], tensors[0] + 999 * per_layer_tensors);
    }
}

/* Fields within their bounds can still describe more than 10^13
 * parameters: the count saturates instead of wrapping and is refused. */
static void parameter_count_is_bounded(void **state)
{
    (void)state;
    vram_model_t m;
    expect_refused(from_fields("llama",
                               "\"hidden_size\": 1048576, \"intermediate_size\": 4194304, "
                               "\"num_attention_heads\": 4096, \"num_hidden_layers\": 1000, "
                               "\"max_position_embeddings\": 8, \"vocab_size\": 16777216",
                               &m),
                   "parameters", "limit of 10000000000000");
    /* conv weight h x channels x patch^2 = 2^20 * 2^16 * 2^32 overflows uint64 */
    expect_refused(from_fields("vit",
                               "\"hidden_size\": 1048576, \"num_hidden_layers\": 1, "
                               "\"num_attention_heads\": 1, \"intermediate_size\": 8, "
                               "\"image_size\": 65536, \"patch_size\": 65536, "
                               "\"num_channels\": 65536",
                               &m),
                   "more than 18446744073709551615 parameters", "limit of 10000000000000");
}

/* Profiles: parameters at most 10^13, byte counts at most 2^60. */
static void profile_values_are_bounded(void **state)
{
    (void)state;
    static const struct {
        const char *field;
        long long limit;
    } cases[] = {
        {"parameters", 10000000000000ll},       {"activation_bytes_per_sample", 1ll << 60},
        {"activation_bytes_fixed", 1ll << 60},  {"buffers_bytes", 1ll << 60},
        {"backward_gradient_bytes", 1ll << 60},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        for (int over = 0; over <= 1; over++) {
            char text[512], quoted[64], bound[64];
            /* the field first: jansson keeps the last of duplicate keys */
            snprintf(text, sizeof text,
                     "{\"parameters\": 5, \"activation_bytes_per_sample\": 7, \"%s\": %lld}",
                     cases[i].field, cases[i].limit + over);
            vram_model_t m;
            int rc = vram_model_from_profile_json(text, "cfg.json", &m);
            if (!over) {
                if (rc) fail_msg("%s at the limit: %s", cases[i].field, vram_last_error());
                continue;
            }
            snprintf(quoted, sizeof quoted, "\"%s\"", cases[i].field);
            snprintf(bound, sizeof bound, "limit of %lld", cases[i].limit);
            expect_refused(rc, quoted, bound);
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(published_configs_give_catalog_counts),
        cmocka_unit_test(both_naming_styles_agree),
        cmocka_unit_test(grouped_query_attention),
        cmocka_unit_test(tied_embeddings),
        cmocka_unit_test(malformed_json_reports_line_and_column),
        cmocka_unit_test(missing_and_bad_fields_are_named),
        cmocka_unit_test(roberta_positions_and_sequence_limit),
        cmocka_unit_test(profiles),
        cmocka_unit_test(fuzz_f3_inputs_are_refused_naming_field_and_bound),
        cmocka_unit_test(each_field_has_a_documented_bound),
        cmocka_unit_test(layer_count_is_affine_up_to_the_limit),
        cmocka_unit_test(parameter_count_is_bounded),
        cmocka_unit_test(profile_values_are_bounded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
