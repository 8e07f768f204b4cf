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
        {"hf/bert-base-uncased.json", "bert-base", 109482240},
        {"hf/roberta-base.json", "roberta-base", 124645632},
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
    assert_non_null(strstr(vram_last_error(), "mamba"));
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
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
