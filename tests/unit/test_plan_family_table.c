/* The estimator's third edition: the family table's rows read the
 * published config.json of each new family (tests/data/hf) with the
 * parameter count transformers 5 builds on the meta device
 * (bench/estimate/families.py prints both); the generic decoder row takes
 * an unknown model_type with the standard keys and says what it assumed,
 * and refuses one without them naming the key; the generation cache of
 * sliding-window, latent-attention and state-space models. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "vram.h"
#include "unit/hf_fixture.h"

static void published_counts(void **state)
{
    (void)state;
    static const struct {
        const char *file;
        vram_family_t family;
        uint64_t params;
    } cases[] = {
        {"qwen3-0.6b.json", VRAM_FAMILY_DECODER, 596049920},
        {"qwen3-8b.json", VRAM_FAMILY_DECODER, 8190735360},
        {"qwen3-30b-a3b.json", VRAM_FAMILY_DECODER, 30532122624},
        {"olmo-1b-hf.json", VRAM_FAMILY_DECODER, 1176764416},
        {"olmo-2-1124-7b.json", VRAM_FAMILY_DECODER, 7298617344},
        {"gemma-3-1b.json", VRAM_FAMILY_DECODER, 999885952},
        {"gemma-3-4b.json", VRAM_FAMILY_DECODER, 4300079472}, /* with its SigLIP tower */
        {"falcon-7b.json", VRAM_FAMILY_DECODER, 6921720704},
        {"falcon-40b.json", VRAM_FAMILY_DECODER, 41303293952},
        {"bloom-560m.json", VRAM_FAMILY_DECODER, 559214592},
        {"deepseek-v2-lite.json", VRAM_FAMILY_DECODER, 15706484224},
        {"deepseek-v3.json", VRAM_FAMILY_DECODER, 671026404352},
        {"bart-large.json", VRAM_FAMILY_BART, 406291456},
        {"mbart-large-50.json", VRAM_FAMILY_BART, 610879488},
        {"mt5-small.json", VRAM_FAMILY_T5, 172119424},
        {"umt5-small.json", VRAM_FAMILY_T5, 175333376},
        {"distilbert-base-uncased.json", VRAM_FAMILY_DISTILBERT, 66985530},
        {"deberta-v3-base.json", VRAM_FAMILY_DEBERTA_V2, 184551780},
        {"clip-vit-base-patch32.json", VRAM_FAMILY_CLIP, 151277313},
        {"mamba-130m-hf.json", VRAM_FAMILY_MAMBA, 129135360},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        vram_model_t m = load(cases[i].file);
        uint64_t n = 0;
        assert_int_equal(vram_model_param_count(&m, &n, NULL), 0);
        if (m.family != cases[i].family || n != cases[i].params)
            fail_msg("%s: family %d, %llu parameters (want %d, %llu)", cases[i].file, (int)m.family,
                     (unsigned long long)n, (int)cases[i].family,
                     (unsigned long long)cases[i].params);
        assert_string_equal(m.assumed, "");
    }
}

static int parse(const char *text, vram_model_t *m)
{
    return vram_model_from_hf_json(text, "t", m);
}

static void unknown_types(void **state)
{
    (void)state;
    vram_model_t m;
    /* the standard keys: the generic row, which names its assumptions */
    assert_int_equal(parse("{\"model_type\":\"newlm\",\"vocab_size\":1000,\"hidden_size\":64,"
                           "\"num_hidden_layers\":2,\"num_attention_heads\":4,"
                           "\"intermediate_size\":128,\"attention_bias\":true}",
                           &m),
                     0);
    assert_int_equal(m.family, VRAM_FAMILY_DECODER);
    assert_non_null(strstr(m.assumed, "newlm"));
    assert_non_null(strstr(m.assumed, "RMSNorm"));
    assert_non_null(strstr(m.assumed, "attention biases"));
    uint64_t n = 0;
    assert_int_equal(vram_model_param_count(&m, &n, NULL), 0);
    /* embeddings, head, 2 x (q, k, v, o with biases, gate, up, down, 2 norms), norm */
    uint64_t layer = 4 * (64 * 64 + 64) + 3 * 64 * 128 + 2 * 64;
    assert_int_equal(n, 2 * 1000 * 64 + 2 * layer + 64);
    /* a key missing: refused naming it, never "fix model_type" */
    assert_int_equal(parse("{\"model_type\":\"rwkv\",\"vocab_size\":1000,\"hidden_size\":64,"
                           "\"num_hidden_layers\":2,\"intermediate_size\":128}",
                           &m),
                     VRAM_EPARSE);
    assert_non_null(strstr(vram_last_error(), "\"num_attention_heads\""));
    assert_null(strstr(vram_last_error(), "fix model_type"));
    /* experts under a dense type are refused without advice to relabel */
    assert_int_equal(parse("{\"model_type\":\"llama\",\"vocab_size\":100,\"hidden_size\":64,"
                           "\"num_hidden_layers\":2,\"num_attention_heads\":4,"
                           "\"intermediate_size\":128,\"n_routed_experts\":8}",
                           &m),
                     VRAM_EPARSE);
    assert_non_null(strstr(vram_last_error(), "n_routed_experts"));
    assert_null(strstr(vram_last_error(), "fix model_type"));
}

static uint64_t kv_bytes(const vram_model_t *m, int64_t seq, int64_t new_tokens)
{
    vram_estimate_config_t c;
    vram_estimate_config_init(&c);
    c.mode = VRAM_MODE_INFER;
    c.precision = VRAM_PREC_BF16;
    c.seq_len = seq;
    c.max_new_tokens = new_tokens;
    vram_estimate_t e;
    if (vram_estimate(m, &c, &e)) fail_msg("%s", vram_last_error());
    return e.kv_cache;
}

static void caches(void **state)
{
    (void)state;
    /* Gemma 3 1B: 26 layers, every 6th global (4 of them); sliding ones
     * keep 511 tokens; one key/value head of 256, bf16 */
    vram_model_t g = load("gemma-3-1b.json");
    assert_int_equal(g.sliding_window, 512);
    assert_int_equal(g.sliding_layers, 22);
    uint64_t per_token = 2 * 1 * 256 * 2;
    assert_int_equal(kv_bytes(&g, 4000, 96), per_token * (4 * 4096 + 22 * 511));
    assert_int_equal(kv_bytes(&g, 100, 0), per_token * 26 * 100); /* inside the window */
    /* Mistral with sliding_window: every layer capped */
    vram_model_t mi = load("mistral-7b.json");
    if (mi.sliding_window > 0) {
        assert_int_equal(mi.sliding_layers, mi.num_layers);
        uint64_t full = kv_bytes(&mi, 1024, 0);
        assert_true(kv_bytes(&mi, 8000, 0) <
                    full * 8); /* capped below the unbounded 8000-token cache */
    }
    /* DeepSeek-V2-Lite: the decompressed keys (128 + 64) and values (128) per head */
    vram_model_t d = load("deepseek-v2-lite.json");
    assert_int_equal(kv_bytes(&d, 1000, 24), 27ull * 16 * (128 + 64 + 128) * 2 * 1024);
    /* Mamba: a fixed state per layer, whatever the length */
    vram_model_t mb = load("mamba-130m-hf.json");
    uint64_t scan = 24ull * 1536 * (4 + 16) * 2;
    assert_int_equal(kv_bytes(&mb, 100, 0), scan);
    assert_int_equal(kv_bytes(&mb, 2000, 48), scan);
}

static void lora_on_new_families(void **state)
{
    (void)state;
    vram_model_t q = load("qwen3-8b.json");
    vram_estimate_config_t c;
    vram_estimate_config_init(&c);
    c.lora_rank = 16;
    c.lora_targets = VRAM_LORA_ALL_LINEAR;
    c.precision = VRAM_PREC_BF16;
    c.seq_len = 512;
    vram_estimate_t e;
    assert_int_equal(vram_estimate(&q, &c, &e), 0);
    /* per layer: r x (in + out) for q, k, v, o, gate, up, down */
    uint64_t layer =
        16ull * ((4096 + 4096) + 2 * (4096 + 1024) + (4096 + 4096) + 3 * (4096 + 12288));
    assert_int_equal(e.trainable_count, 36 * layer);

    /* Mixtral-8x7B: transformers 5 stacks the experts, PEFT 0.21 adapts
     * them as parameters (gate_up_proj [8, 2 x 14336, 4096] at rank 2r,
     * down_proj at r, per expert) and, with all-linear, the router
     * [8, 4096]; bitsandbytes quantizes only the attention's nn.Linear */
    vram_model_t x = load("mixtral-8x7b.json");
    assert_int_equal(vram_estimate(&x, &c, &e), 0);
    uint64_t attn = (4096 + 4096) + 2 * (4096 + 1024) + (4096 + 4096);
    uint64_t experts = 8 * (2 * (4096 + 2 * 14336) + (14336 + 4096));
    assert_int_equal(e.trainable_count, 32 * 16 * (attn + experts + (4096 + 8)));
    c.quantize_base = VRAM_QUANT_NF4;
    c.double_quant = true;
    vram_estimate_t q4;
    assert_int_equal(vram_estimate(&x, &c, &q4), 0);
    double quantized = 32.0 * (2 * 4096.0 * 4096 + 2 * 4096.0 * 1024);
    double saved = quantized * (2 - (0.5 + 1.0 / 64 + 4.0 / (64 * 256)));
    assert_true(fabs((double)e.parameters - (double)q4.parameters - saved) < 64);
    /* PEFT refuses gate without up there: they are one gate_up_proj */
    c.lora_targets = VRAM_LORA_GATE;
    assert_int_equal(vram_estimate(&x, &c, &e), VRAM_EINVAL);
    assert_non_null(strstr(vram_last_error(), "gate_up_proj"));
}

/* --help's list comes from the table: every type in it has a row of its own
 * (a config naming it is read by that row, never the generic one), and it
 * holds the families issue 22 asked for. */
static void model_types_listed(void **state)
{
    (void)state;
    const char *list = vram_hf_model_types();
    assert_true(strlen(list) > 100);
    const char *wanted[] = {"qwen3",  "qwen3_moe",   "olmo",        "olmo2", "falcon",
                            "bloom",  "bart",        "mbart",       "t5",    "mt5",
                            "umt5",   "distilbert",  "deberta-v2",  "clip",  "mamba",
                            "gemma3", "deepseek_v2", "deepseek_v3", "llama", "whisper"};
    for (size_t i = 0; i < sizeof wanted / sizeof *wanted; i++) {
        char needle[64];
        snprintf(needle, sizeof needle, ",%s,", wanted[i]);
        char padded[2100];
        snprintf(padded, sizeof padded, ",%s,", list);
        if (!strstr(padded, needle)) fail_msg("%s is not in \"%s\"", wanted[i], list);
    }
    for (const char *t = list; *t;) {
        size_t n = strcspn(t, ",");
        char json[160];
        snprintf(json, sizeof json, "{\"model_type\": \"%.*s\"}", (int)n, t);
        vram_model_t m;
        /* read by a row of its own: refused for a missing key, or read with
         * the config class's defaults, but never as an unknown type */
        if (vram_model_from_hf_json(json, "t.json", &m) == 0)
            assert_string_equal(m.assumed, "");
        else if (strstr(vram_last_error(), "is not one vram knows"))
            fail_msg("%.*s: %s", (int)n, t, vram_last_error());
        t += n + (t[n] == ',');
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(published_counts),
        cmocka_unit_test(unknown_types),
        cmocka_unit_test(caches),
        cmocka_unit_test(lora_on_new_families),
        cmocka_unit_test(model_types_listed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
