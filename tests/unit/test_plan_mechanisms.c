/* Mechanisms the estimate settings name: the transformers release a model
 * runs with (--transformers: OPT's eager scores clamped before 4.49, eager
 * attention by default before a type's SDPA support), torch.compile's
 * saved tensors (--compile: the min-cut partitioner's set for RMSNorm
 * decoder layers) and bitsandbytes' compute dtype (--compute-dtype). The
 * byte counts themselves are checked against
 * PyTorch by bench/estimate/compiled_layer.py (integration test
 * test_families); here the rules' scope and shape. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "vram.h"
#include "unit/estimate_fixture.h"
#include "unit/hf_fixture.h"

static void set(vram_estimate_config_t *c, const char *key, const char *value)
{
    if (vram_estimate_set(c, key, value)) fail_msg("%s=%s: %s", key, value, vram_last_error());
}

/* The defaults with "key=value" settings applied in order. */
static vram_estimate_config_t config(const char *const *settings, size_t n)
{
    vram_estimate_config_t c;
    vram_estimate_config_init(&c);
    for (size_t i = 0; i < n; i++) {
        char key[64];
        const char *eq = strchr(settings[i], '=');
        assert_non_null(eq);
        snprintf(key, sizeof key, "%.*s", (int)(eq - settings[i]), settings[i]);
        set(&c, key, eq + 1);
    }
    return c;
}
#define CONFIG(...)                                                                                \
    config((const char *const[]){__VA_ARGS__},                                                     \
           sizeof((const char *const[]){__VA_ARGS__}) / sizeof(const char *))

/* Before 4.49 OPT's eager attention kept the clamp's input: one more
 * scores-sized tensor per layer in the working dtype; 4.49 and later, SDPA,
 * and families without the clamp are unchanged. */
static void opt_clamp_by_transformers_version(void **state)
{
    (void)state;
    vram_model_t m = load("opt-125m.json");
    vram_estimate_config_t c =
        CONFIG("precision=fp16", "attention=eager", "seq_len=512", "batch_size=2");
    uint64_t now = est(&m, &c).activations;
    set(&c, "transformers", "4.49");
    assert_int_equal(est(&m, &c).activations, now);
    set(&c, "transformers", "4.45.2");
    assert_int_equal(c.transformers_version, 445);
    uint64_t old = est(&m, &c).activations;
    /* 2 bytes x batch x heads x seq^2 x layers */
    double scores = 2.0 * 2 * (double)m.num_heads * 512.0 * 512.0 * (double)m.num_layers;
    assert_int_equal(old - now, (uint64_t)scores);
    set(&c, "attention", "sdpa");
    vram_estimate_config_t fused = c;
    fused.transformers_version = 0;
    assert_int_equal(est(&m, &c).activations, est(&m, &fused).activations);
    vram_model_t llama = load("llama-3.2-3b.json");
    set(&c, "attention", "eager");
    vram_estimate_config_t latest = c;
    latest.transformers_version = 0;
    assert_int_equal(est(&llama, &c).activations, est(&llama, &latest).activations);
}

/* One layer's activations: what one more layer adds to the stack (the
 * loss's own compiled rule cancels out). */
static double layer_bytes(const vram_model_t *m, const vram_estimate_config_t *c)
{
    vram_model_t more = *m;
    more.num_layers++;
    return (double)est(&more, c).activations - (double)est(m, c).activations;
}

/* --attention auto follows the release: before a model type's SDPA
 * support (llama: 4.36, opt: 4.46) transformers ran it eager. */
static void default_attention_by_version(void **state)
{
    (void)state;
    vram_model_t llama = load("llama-3.2-3b.json"), opt = load("opt-350m.json");
    vram_estimate_config_t c = CONFIG("seq_len=512");
    assert_true(est(&llama, &c).fused_attention);
    set(&c, "transformers", "4.35");
    assert_false(est(&llama, &c).fused_attention);
    set(&c, "transformers", "4.36");
    assert_true(est(&llama, &c).fused_attention);
    set(&c, "transformers", "4.45");
    assert_false(est(&opt, &c).fused_attention);
    set(&c, "transformers", "4.46");
    assert_true(est(&opt, &c).fused_attention);
    /* an explicit choice is kept */
    set(&c, "transformers", "4.30");
    set(&c, "attention", "sdpa");
    assert_true(est(&llama, &c).fused_attention);
}

/* A compiled LLaMA layer keeps less than an eager one, every layer without
 * checkpointing and the one recomputed layer with it; autocast and
 * families outside the rule keep the eager count. */
static void compiled_layers(void **state)
{
    (void)state;
    vram_model_t m = load("llama-3.2-3b.json");
    vram_estimate_config_t c = CONFIG("precision=bf16", "attention=sdpa", "seq_len=1024");
    vram_estimate_config_t on = c;
    set(&on, "compile", "on");
    double eager_layer = layer_bytes(&m, &c), compiled_layer = layer_bytes(&m, &on);
    assert_true(compiled_layer > 0 && compiled_layer < eager_layer);
    assert_true(est(&m, &on).compiled_layers);
    assert_false(est(&m, &c).compiled_layers);
    /* one token of one layer: h + 2h + q + 2kv + 2q + h + 3I elements of 2
     * bytes, 1/rms per norm, one fp32 log-sum-exp per head */
    double h = (double)m.hidden_size, q = (double)(m.num_heads * m.head_dim);
    double kv = (double)(m.num_kv_heads * m.head_dim), I = (double)m.intermediate_size;
    double per = 2 * (4 * h + 3 * q + 2 * kv + 3 * I) + 2 * 4 + 4.0 * (double)m.num_heads;
    assert_int_equal((uint64_t)compiled_layer, (uint64_t)(per * 1024));

    /* full checkpointing: only the recomputed layer is compiled away */
    vram_estimate_config_t ck = c, ck_on = on;
    set(&ck, "checkpointing", "full");
    set(&ck_on, "checkpointing", "full");
    double drop = (double)est(&m, &ck).activations - (double)est(&m, &ck_on).activations;
    double loss_only = ((double)est(&m, &c).activations - (double)est(&m, &on).activations) -
                       (double)m.num_layers * (eager_layer - compiled_layer);
    assert_true(fabs(drop - (loss_only + eager_layer - compiled_layer)) < 2);

    /* outside the rule: the eager count */
    vram_estimate_config_t amp = c, amp_on = on;
    set(&amp, "precision", "amp-bf16");
    set(&amp_on, "precision", "amp-bf16");
    assert_true(fabs(layer_bytes(&m, &amp_on) - layer_bytes(&m, &amp)) < 2);
    vram_model_t opt = load("opt-125m.json");
    assert_true(fabs(layer_bytes(&opt, &on) - layer_bytes(&opt, &c)) < 2);
    assert_false(est(&opt, &on).compiled_layers);
}

/* bitsandbytes' 4-bit matmul dequantizes a weight to the dtype it was
 * loaded in and casts it to its compute dtype: one more copy of the
 * largest quantized linear when the two differ (BitsAndBytesConfig's
 * default compute dtype is fp32), none when they are the same. */
static void nf4_compute_dtype(void **state)
{
    (void)state;
    vram_model_t m = load("llama-3.2-3b.json");
    vram_estimate_config_t c = CONFIG("mode=infer", "precision=fp16", "quantize_base=nf4",
                                      "seq_len=20", "max_new_tokens=60");
    vram_estimate_t same = est(&m, &c);
    set(&c, "compute_dtype", "fp16");
    assert_int_equal(est(&m, &c).allocated_peak, same.allocated_peak);
    set(&c, "compute_dtype", "fp32");
    double largest = (double)m.intermediate_size * (double)m.hidden_size;
    assert_int_equal(est(&m, &c).allocated_peak - same.allocated_peak, (uint64_t)(4 * largest));
    set(&c, "compute_dtype", "bf16");
    assert_int_equal(est(&m, &c).allocated_peak - same.allocated_peak, (uint64_t)(2 * largest));
    /* no quantized base: nothing is dequantized */
    set(&c, "quantize_base", "none");
    vram_estimate_config_t plain = c;
    plain.quant_compute = 0;
    assert_int_equal(est(&m, &c).allocated_peak, est(&m, &plain).allocated_peak);
    /* a struct caller's impossible value is refused, not reinterpreted */
    vram_estimate_t e;
    plain.quant_compute = 4;
    assert_int_equal(vram_estimate(&m, &plain, &e), VRAM_EINVAL);
    plain.quant_compute = 0;
    plain.transformers_version = -1;
    assert_int_equal(vram_estimate(&m, &plain, &e), VRAM_EINVAL);
}

/* A bad version is refused with the setting's name and leaves the
 * settings alone. */
/* torchtune's modules (--framework torchtune; byte counts measured
 * against torchtune 0.6.1 by bench/estimate/torchtune_llama.py): its
 * MultiHeadAttention expands k and v to every query head before SDPA, so
 * SDPA keeps them q-wide, eager or compiled; its RMSNorm runs F.rms_norm
 * on an fp32 copy, keeping the normalized tensor in fp32 in bf16 too; its
 * rotary tables are a buffer. Per token of one layer against transformers'. */
static void torchtune_modules(void **state)
{
    (void)state;
    vram_model_t m = load("llama-3.2-3b.json");
    double h = (double)m.hidden_size, q = (double)(m.num_heads * m.head_dim);
    double kv = (double)(m.num_kv_heads * m.head_dim), tok = 1024;
    vram_estimate_config_t c = CONFIG("precision=bf16", "attention=sdpa", "seq_len=1024");
    vram_estimate_config_t tt = c;
    set(&tt, "framework", "torchtune");
    /* k and v: 2 (q - kv) more bf16 elements; two norms 2 bytes more each */
    double per = 2 * 2 * (q - kv) + 2 * 2 * h;
    assert_int_equal((uint64_t)(layer_bytes(&m, &tt) - layer_bytes(&m, &c)), (uint64_t)(per * tok));
    /* compiled: only the expanded k and v differ (norms are recomputed) */
    vram_estimate_config_t on = c, tt_on = tt;
    set(&on, "compile", "on");
    set(&tt_on, "compile", "on");
    assert_int_equal((uint64_t)(layer_bytes(&m, &tt_on) - layer_bytes(&m, &on)),
                     (uint64_t)(2 * 2 * (q - kv) * tok));
    /* eager attention repeats k and v in both */
    vram_estimate_config_t eager = c, tt_eager = tt;
    set(&eager, "attention", "eager");
    set(&tt_eager, "attention", "eager");
    assert_int_equal((uint64_t)(layer_bytes(&m, &tt_eager) - layer_bytes(&m, &eager)),
                     (uint64_t)(2 * 2 * h * tok));
    /* the name is checked, the config untouched on a bad one */
    vram_estimate_config_t before = c;
    assert_int_equal(vram_estimate_set(&c, "framework", "tt"), VRAM_EINVAL);
    assert_non_null(strstr(vram_last_error(), "transformers, torchtune"));
    assert_memory_equal(&c, &before, sizeof c);
}

/* The optimizer step's implementation when unstated (auto) is the
 * framework's: torchtune's recipe configs build AdamW with fused=True (no
 * parameter-sized temporary), anything else torch.optim's foreach; a stated
 * one wins under either framework. */
static void optimizer_impl_by_framework(void **state)
{
    (void)state;
    vram_model_t m = load("llama-3.2-3b.json");
    vram_estimate_config_t c = CONFIG("precision=bf16", "seq_len=256");
    assert_int_equal(c.optim_impl, VRAM_OPTIM_AUTO);
    assert_int_equal(vram_optim_impl_of(&c), VRAM_OPTIM_FOREACH);
    vram_estimate_config_t tt = c, tt_foreach, foreach = c, fused = c;
    set(&tt, "framework", "torchtune");
    assert_int_equal(vram_optim_impl_of(&tt), VRAM_OPTIM_FUSED);
    tt_foreach = tt;
    set(&tt_foreach, "optimizer_impl", "foreach");
    assert_int_equal(vram_optim_impl_of(&tt_foreach), VRAM_OPTIM_FOREACH);
    set(&foreach, "optimizer_impl", "foreach");
    set(&fused, "optimizer_impl", "fused");
    vram_estimate_t a, b, e_auto, e_tt, e_ttf;
    assert_int_equal(vram_estimate(&m, &foreach, &a), 0);
    assert_int_equal(vram_estimate(&m, &fused, &b), 0);
    assert_int_equal(vram_estimate(&m, &c, &e_auto), 0);
    assert_int_equal(e_auto.total, a.total); /* transformers: auto is foreach */
    assert_true(a.total > b.total);          /* foreach keeps a temporary */
    assert_int_equal(vram_estimate(&m, &tt, &e_tt), 0);
    assert_int_equal(vram_estimate(&m, &tt_foreach, &e_ttf), 0);
    assert_true(e_ttf.total > e_tt.total); /* torchtune's auto is fused */
    /* a struct zeroed by an older caller still means foreach */
    vram_estimate_config_t zeroed = c;
    zeroed.optim_impl = 0;
    assert_int_equal(vram_optim_impl_of(&zeroed), VRAM_OPTIM_FOREACH);
}

static void bad_versions(void **state)
{
    (void)state;
    static const char *const bad[] = {"4", "4.x", "3.9", "4.45.", "4.45.2.1", "v4.45", "4.100"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        vram_estimate_config_t c, before;
        vram_estimate_config_init(&c);
        before = c;
        if (vram_estimate_set(&c, "--transformers", bad[i]) != VRAM_EINVAL ||
            !strstr(vram_last_error(), "--transformers"))
            fail_msg("%s: \"%s\"", bad[i], vram_last_error());
        assert_memory_equal(&c, &before, sizeof c);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(opt_clamp_by_transformers_version),
        cmocka_unit_test(default_attention_by_version),
        cmocka_unit_test(compiled_layers),
        cmocka_unit_test(nf4_compute_dtype),
        cmocka_unit_test(torchtune_modules),
        cmocka_unit_test(optimizer_impl_by_framework),
        cmocka_unit_test(bad_versions),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
