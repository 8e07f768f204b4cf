/* The estimate settings table (src/plan/settings.c) and what the third
 * edition fixed: LoRA with ZeRO/FSDP, pure-precision FSDP, the live parts
 * of the peak, memory at a batch from full estimates, GPU names, messages
 * and suggestions that never propose the impossible. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "vram.h"
#include "unit/estimate_fixture.h"

static void set(vram_estimate_config_t *c, const char *key, const char *value)
{
    if (vram_estimate_set(c, key, value)) fail_msg("%s=%s: %s", key, value, vram_last_error());
}

/* Every row is complete and unique, and every name a NAME row lists is
 * accepted by the setter, under its key and its flag. */
static void table_is_complete(void **state)
{
    (void)state;
    size_t n;
    const vram_estimate_setting_t *all = vram_estimate_settings(&n);
    assert_true(n >= 29);
    for (size_t i = 0; i < n; i++) {
        const vram_estimate_setting_t *s = &all[i];
        assert_non_null(s->key);
        assert_true(!strncmp(s->flag, "--", 2));
        assert_true(s->help && *s->help && s->metavar && s->group);
        assert_ptr_equal(vram_estimate_setting_find(s->key), s);
        assert_ptr_equal(vram_estimate_setting_find(s->flag), s);
        for (size_t j = 0; j < i; j++) {
            assert_string_not_equal(all[j].key, s->key);
            assert_string_not_equal(all[j].flag, s->flag);
        }
        if (s->type != VRAM_SETTING_NAME) continue;
        char names[256];
        snprintf(names, sizeof names, "%s", s->names);
        for (char *save = NULL, *tok = strtok_r(names, ", ", &save); tok;
             tok = strtok_r(NULL, ", ", &save)) {
            vram_estimate_config_t c;
            vram_estimate_config_init(&c);
            set(&c, s->key, tok);
            set(&c, s->flag, tok);
        }
    }
    /* the settings the CLI had before the table, each by its key */
    static const char *const keys[] = {"mode",
                                       "batch_size",
                                       "seq_len",
                                       "image_size",
                                       "precision",
                                       "optimizer",
                                       "checkpointing",
                                       "attention",
                                       "zero_stage",
                                       "gpus",
                                       "max_new_tokens",
                                       "overhead_bytes",
                                       "accumulation_steps",
                                       "head",
                                       "num_labels",
                                       "lora_rank",
                                       "lora_alpha",
                                       "lora_targets",
                                       "quantize_base",
                                       "double_quant",
                                       "gpu_name",
                                       "cuda",
                                       "lazy_loading",
                                       "optimizer_impl",
                                       "activation_offload",
                                       "loss",
                                       "zero_grad",
                                       "compile",
                                       "sharding"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (!vram_estimate_setting_find(keys[i])) fail_msg("no setting \"%s\"", keys[i]);
}

/* A bad value names the setting as given and leaves the settings alone. */
static void bad_values_are_named(void **state)
{
    (void)state;
    static const struct {
        const char *key, *value, *needle;
    } cases[] = {
        {"--lora-rank", "0", "--lora-rank \"0\""},
        {"lora_rank", "x", "lora_rank \"x\""},
        {"--zero", "4", "from 0 to 3"},
        {"--precision", "fp8", "fp8"},
        {"--quantize-base", "fp4", "use none, nf4, int8"},
        {"--double-quant", "maybe", "use on or off"},
        {"--cuda", "12", "11.8 or 12.4"},
        {"--overhead", "lots", "512MiB"},
        {"--lora-targets", "qq", "qq"},
        {"--head", "ForNothing", "ForNothing"},
        {"--sharding", "megatron", "deepspeed, fsdp"},
        {"--no-such-flag", "1", "known: mode"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        vram_estimate_config_t c, before;
        vram_estimate_config_init(&c);
        before = c;
        if (vram_estimate_set(&c, cases[i].key, cases[i].value) != VRAM_EINVAL ||
            !strstr(vram_last_error(), cases[i].needle))
            fail_msg("%s %s: \"%s\"", cases[i].key, cases[i].value, vram_last_error());
        assert_memory_equal(&c, &before, sizeof c);
    }
}

/* The JSON API knows every key of the table, and a LoRA + ZeRO request
 * gives the bytes of the struct API with the same settings. */
static void json_accepts_every_setting(void **state)
{
    (void)state;
    size_t n;
    const vram_estimate_setting_t *all = vram_estimate_settings(&n);
    for (size_t i = 0; i < n; i++) {
        char req[256];
        const char *value = all[i].type == VRAM_SETTING_INT      ? "1"
                            : all[i].type == VRAM_SETTING_BOOL   ? "true"
                            : all[i].type == VRAM_SETTING_NUMBER ? "2.5"
                            : all[i].type == VRAM_SETTING_SIZE   ? "\"64MiB\""
                                                                 : "\"?\"";
        snprintf(req, sizeof req, "{\"model\": \"gpt2\", \"%s\": %s}", all[i].key, value);
        char *out = NULL;
        if (vram_estimate_json(req, &out) && strstr(vram_last_error(), "unknown key"))
            fail_msg("%s: %s", req, vram_last_error());
        vram_json_free(out);
    }
    char *out = NULL;
    assert_int_equal(vram_estimate_json("{\"model\": \"llama-2-7b\", \"lora_rank\": 16, "
                                        "\"quantize_base\": \"nf4\", \"zero_stage\": 3, "
                                        "\"gpus\": 4, \"precision\": \"bf16\", \"sharding\": "
                                        "\"fsdp\", \"lora_targets\": \"all-linear\", "
                                        "\"seq_len\": 1024, \"gpu_name\": \"L40S\"}",
                                        &out),
                     0);
    vram_model_t m = model("llama-2-7b");
    vram_estimate_config_t c;
    vram_estimate_config_init(&c);
    c.lora_rank = 16;
    c.quantize_base = VRAM_QUANT_NF4;
    c.zero_stage = 3;
    c.gpus = 4;
    c.precision = VRAM_PREC_BF16;
    c.sharding = VRAM_SHARD_FSDP;
    c.lora_targets = VRAM_LORA_ALL_LINEAR;
    c.seq_len = 1024;
    c.gpu_cc = 89;
    char want[64];
    snprintf(want, sizeof want, "\"total\":%llu", (unsigned long long)est(&m, &c).total);
    if (!strstr(out, want)) fail_msg("%s not in %s", want, out);
    vram_json_free(out);
}

/* LoRA and QLoRA under ZeRO/FSDP: the adapters' states, gradients and
 * (stage 3) the frozen base are sharded over the GPUs. */
static void lora_with_zero_is_sharded(void **state)
{
    (void)state;
    vram_model_t m = model("llama-2-7b");
    vram_estimate_config_t c;
    vram_estimate_config_init(&c);
    c.precision = VRAM_PREC_BF16;
    c.seq_len = 512;
    c.lora_rank = 16;
    c.lora_targets = VRAM_LORA_ALL_LINEAR;
    vram_estimate_t one = est(&m, &c);
    c.sharding = VRAM_SHARD_FSDP;
    c.gpus = 8;
    c.zero_stage = 1;
    vram_estimate_t z1 = est(&m, &c);
    assert_true(z1.optimizer_states <= one.optimizer_states / 8 + 1);
    assert_int_equal(z1.gradients, one.gradients);
    c.zero_stage = 2;
    vram_estimate_t z2 = est(&m, &c);
    assert_true(z2.gradients <= one.gradients / 8 + 1);
    c.zero_stage = 3;
    vram_estimate_t z3 = est(&m, &c);
    /* an eighth of the base, plus the largest block linear gathered */
    uint64_t gathered = 2ull * 4096 * 11008;
    assert_true(z3.parameters >= one.parameters / 8 + gathered - 8 &&
                z3.parameters <= one.parameters / 8 + gathered + 8);
    assert_int_equal(z3.activations, one.activations); /* not sharded */
    assert_true(z3.total < z2.total);
    /* QLoRA: the quantized storage is what is sharded */
    c.quantize_base = VRAM_QUANT_NF4;
    vram_estimate_t q3 = est(&m, &c);
    c.zero_stage = 0;
    c.sharding = VRAM_SHARD_DEEPSPEED;
    vram_estimate_t q0 = est(&m, &c);
    c.sharding = VRAM_SHARD_FSDP;
    assert_true(q3.parameters < q0.parameters / 4);
    /* DeepSpeed's mixed precision keeps fp32 masters of the adapters */
    c.quantize_base = VRAM_QUANT_NONE;
    c.zero_stage = 3;
    c.sharding = VRAM_SHARD_DEEPSPEED;
    vram_estimate_t ds = est(&m, &c);
    assert_true(ds.optimizer_states > z3.optimizer_states);
}

/* Pure-bf16 FSDP (torchtune): weights, gradients and AdamW's two states in
 * bf16, sharded; no fp32 master copy. DeepSpeed's mixed precision keeps 16
 * bytes per parameter; FSDP's pure bf16 8. */
static void fsdp_pure_bf16(void **state)
{
    (void)state;
    vram_model_t m = model("llama-2-7b");
    uint64_t n, tensors;
    assert_int_equal(vram_model_param_count(&m, &n, &tensors), 0);
    vram_estimate_config_t c;
    vram_estimate_config_init(&c);
    c.precision = VRAM_PREC_BF16;
    c.seq_len = 512;
    c.zero_stage = 3;
    c.gpus = 8;
    c.sharding = VRAM_SHARD_FSDP;
    vram_estimate_t f = est(&m, &c);
    uint64_t largest = 32000ull * 4096; /* the embedding, gathered whole */
    assert_true(f.parameters >= 2 * n / 8 + 2 * largest - 8 &&
                f.parameters <= 2 * n / 8 + 2 * largest + 8);
    assert_true(f.gradients >= 2 * n / 8 - 8 && f.gradients <= 2 * n / 8 + 8);
    uint64_t states = (4 * n + 4 * tensors) / 8;
    assert_true(f.optimizer_states >= states - 8 && f.optimizer_states <= states + 8);
    c.sharding = VRAM_SHARD_DEEPSPEED;
    vram_estimate_t d = est(&m, &c);
    /* FSDP without a stage is refused, naming the stages */
    vram_estimate_config_t none = c;
    none.sharding = VRAM_SHARD_FSDP;
    none.zero_stage = 0;
    vram_estimate_t e;
    assert_int_equal(vram_estimate(&m, &none, &e), VRAM_EINVAL);
    assert_non_null(strstr(vram_last_error(), "FULL_SHARD is --zero 3"));
    assert_true(d.optimizer_states > 3 * f.optimizer_states); /* 16 vs 4 bytes per parameter */
    assert_true(d.total > f.total);
}

static uint64_t live_sum(const vram_estimate_t *e)
{
    const vram_estimate_live_t *l = &e->live;
    return l->parameters + l->buffers + l->gradients + l->optimizer_states + l->activations +
           l->kv_cache + l->autocast_cache + l->backward_temps + l->optimizer_temps +
           l->workspaces + l->allocator_rounding + l->cuda_context;
}

/* The parts live at the peak add up to the total, each at most its line. */
static void live_parts_add_up(void **state)
{
    (void)state;
    static const struct {
        const char *model, *settings[8];
    } cases[] = {
        {"llama-2-7b", {"seq_len", "512", NULL}},
        {"llama-2-7b", {"precision", "amp-bf16", "checkpointing", "full", NULL}},
        {"llama-2-7b", {"precision", "bf16", "lora_rank", "16", "quantize_base", "nf4", NULL}},
        {"llama-2-7b", {"mode", "infer", "max_new_tokens", "256", NULL}},
        {"llama-2-7b", {"mode", "load", NULL}},
        {"resnet50", {"batch_size", "1024", NULL}},
        {"bert-base", {"accumulation_steps", "4", "batch_size", "8", NULL}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        vram_model_t m = model(cases[i].model);
        vram_estimate_config_t c;
        vram_estimate_config_init(&c);
        for (int k = 0; cases[i].settings[k]; k += 2)
            set(&c, cases[i].settings[k], cases[i].settings[k + 1]);
        vram_estimate_t e = est(&m, &c);
        if (live_sum(&e) != e.total)
            fail_msg("%s case %zu: parts %llu, total %llu", cases[i].model, i,
                     (unsigned long long)live_sum(&e), (unsigned long long)e.total);
        const vram_estimate_live_t *l = &e.live;
        assert_true(l->gradients <= e.gradients && l->activations <= e.activations &&
                    l->backward_temps <= e.backward_temps &&
                    l->optimizer_temps <= e.optimizer_temps && l->kv_cache <= e.kv_cache);
        assert_int_equal(e.allocated_peak, e.total - l->allocator_rounding - l->cuda_context);
    }
}

#define TABLE_CAP 64 /* vramd's VRAM_JOB_MAX_BATCHES */

/* Memory at a batch is the full estimate there; the table vramd degrades
 * with holds the full estimate at each batch worth granting. */
static void memory_at_batch_from_full_estimates(void **state)
{
    (void)state;
    vram_model_t m = model("resnet50");
    vram_estimate_config_t c;
    vram_estimate_config_init(&c);
    uint64_t at;
    assert_int_equal(vram_estimate_at_batch(&m, &c, 1024, &at), 0);
    c.batch_size = 1024;
    assert_int_equal(at, est(&m, &c).total);
    vram_batch_bytes_t t[TABLE_CAP];
    int n = 0;
    assert_int_equal(vram_estimate_batch_table(&m, &c, 1, t, TABLE_CAP, &n), 0);
    /* ceil(1024/k) for every k: 63 distinct batches, all kept, 1024 last */
    assert_int_equal(n, 63);
    assert_int_equal(t[n - 1].batch, 1024);
    assert_int_equal(t[n - 1].bytes, at);
    assert_int_equal(t[0].batch, 1);
    for (int i = 0; i < n; i++) {
        uint64_t e;
        assert_int_equal(vram_estimate_at_batch(&m, &c, t[i].batch, &e), 0);
        assert_int_equal(t[i].bytes, e);
        if (i) assert_true(t[i].batch > t[i - 1].batch && t[i].bytes >= t[i - 1].bytes);
        /* the smallest batch for its accumulation steps */
        uint32_t k = (1024 + t[i].batch - 1) / t[i].batch;
        assert_int_equal(t[i].batch, (1024 + k - 1) / k);
    }
    /* halving a listed batch (a retry) lands on a listed batch: 512, 256 */
    assert_int_equal(t[n - 2].batch, 512);
    /* the memory is not linear in the batch: halving it from 1024 saves far
     * less than half of the difference to batch 1 would say */
    uint64_t half = t[n - 2].bytes, one = t[0].bytes;
    assert_true(at - half != (at - one) * 512 / 1023);
    /* a long range is thinned to the cap, keeping the smallest and largest */
    c.batch_size = 100000;
    assert_int_equal(vram_estimate_batch_table(&m, &c, 3, t, 20, &n), 0);
    assert_int_equal(n, 20);
    assert_int_equal(t[19].batch, 100000);
    assert_int_equal(t[18].batch, 50000);
    assert_int_equal(t[0].batch, 3);
    for (int i = 1; i < n; i++)
        assert_true(t[i].batch > t[i - 1].batch && t[i].bytes >= t[i - 1].bytes);
    /* any range and cap: increasing batches, all worth granting, the
     * largest cap/2 of them all kept, the batch and (cap > 1) the smallest
     * one >= lo always there */
    srand(22);
    for (int round = 0; round < 300; round++) {
        int64_t top = 1 + rand() % (round < 150 ? 200 : 5000), lo = 1 + rand() % top;
        int cap = 1 + rand() % TABLE_CAP;
        c.batch_size = top;
        assert_int_equal(vram_estimate_batch_table(&m, &c, lo, t, cap, &n), 0);
        int64_t all[200], count = 0; /* ceil(top/k) >= lo, largest first */
        for (int64_t k = 1; k <= top && count < 200; k++) {
            int64_t b = (top + k - 1) / k;
            if (b < lo) break;
            if (!count || all[count - 1] != b) all[count++] = b;
        }
        if (count == 200) continue; /* longer than the reference keeps */
        assert_int_equal(n, count < cap ? count : cap);
        assert_int_equal(t[n - 1].batch, top);
        if (cap > 1 || count == 1) assert_int_equal(t[0].batch, all[count - 1]);
        for (int i = 0; i < n; i++) {
            bool listed = false;
            for (int64_t k = 0; k < count; k++)
                listed |= all[k] == t[i].batch;
            assert_true(listed);
            if (i) assert_true(t[i].batch > t[i - 1].batch && t[i].bytes >= t[i - 1].bytes);
        }
        for (int k = 0; k < (count <= cap ? count : (cap > 1 ? cap / 2 : 1)); k++)
            assert_int_equal(t[n - 1 - k].batch, all[k]);
    }
    assert_int_equal(vram_estimate_batch_table(&m, &c, 0, t, 20, &n), VRAM_EINVAL);
    assert_int_equal(vram_estimate_batch_table(&m, &c, 100001, t, 20, &n), VRAM_EINVAL);
}

/* GPU names as people type them; other vendors refused as unsupported. */
static void gpu_names(void **state)
{
    (void)state;
    static const struct {
        const char *typed, *table;
    } names[] = {
        {"A6000", "RTXA6000-48GB"},   {"RTX A6000", "RTXA6000-48GB"}, {"L4", "L4-24GB"},
        {"L40S", "L40S-48GB"},        {"H200", "H200-141GB"},         {"B200", "B200-180GB"},
        {"nvidia h100", "H100-80GB"}, {"rtx4090", "RTX4090-24GB"}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const vram_gpu_model_t *g = vram_gpu_model_resolve(names[i].typed, NULL);
        if (!g || strcmp(g->name, names[i].table))
            fail_msg("%s: %s", names[i].typed, g ? g->name : "unknown");
        vram_estimate_config_t c;
        vram_estimate_config_init(&c);
        set(&c, "gpu_name", names[i].typed);
        assert_int_equal(c.gpu_cc, g->cc_major * 10 + g->cc_minor);
    }
    vram_estimate_config_t c;
    vram_estimate_config_init(&c);
    assert_int_equal(vram_estimate_set(&c, "--gpu-name", "MI300X"), VRAM_EINVAL);
    assert_non_null(strstr(vram_last_error(), "not supported"));
    assert_int_equal(vram_estimate_set(&c, "--gpu-name", "Z9000"), VRAM_EINVAL);
    assert_non_null(strstr(vram_last_error(), "unknown GPU \"Z9000\""));
}

/* Too many new tokens: the message proposes a number of tokens that fits,
 * never a negative sequence length. */
static void messages_never_propose_negative_values(void **state)
{
    (void)state;
    vram_model_t m = model("gpt2");
    vram_estimate_config_t c;
    vram_estimate_config_init(&c);
    c.mode = VRAM_MODE_INFER;
    c.max_new_tokens = 100000;
    vram_estimate_t e;
    assert_int_equal(vram_estimate(&m, &c, &e), VRAM_EINVAL);
    assert_non_null(strstr(vram_last_error(), "--max-new-tokens 1023 or less"));
    assert_null(strstr(vram_last_error(), "--seq-len -"));
    c.max_new_tokens = 24;
    c.seq_len = 1010;
    assert_int_equal(vram_estimate(&m, &c, &e), VRAM_EINVAL);
    assert_non_null(strstr(vram_last_error(), "--seq-len 1000 or less"));
}

/* "all of the above" takes one change per exclusive group and names them. */
static void all_of_the_above_is_consistent(void **state)
{
    (void)state;
    vram_model_t m = model("llama-2-7b");
    vram_estimate_config_t c;
    vram_estimate_config_init(&c);
    c.seq_len = 2048;
    vram_plan_config_t pc;
    vram_plan_config_init(&pc);
    pc.total_bytes = pc.free_bytes = 24ull << 30;
    pc.batch_size = 4;
    vram_plan_t p;
    assert_int_equal(vram_plan(&m, &c, &pc, &p), 0);
    const vram_plan_suggestion_t *all = NULL;
    uint64_t best = 0;
    for (int i = 0; i < p.nsuggestions; i++) {
        if (!strcmp(p.suggestions[i].name, "all-of-the-above"))
            all = &p.suggestions[i];
        else if (p.suggestions[i].saving_bytes > best)
            best = p.suggestions[i].saving_bytes;
    }
    assert_non_null(all);
    const char *d = all->description;
    assert_false(strstr(d, "precision=amp-bf16") && strstr(d, "precision=bf16"));
    assert_false(strstr(d, "lora=r16") && strstr(d, "qlora="));
    assert_false(strstr(d, "zero=") && strstr(d, "adam8bit"));
    assert_true(all->saving_bytes >= best);
    /* each change it names is one of the suggestions listed */
    for (int i = 0; i < p.nsuggestions; i++)
        if (strstr(d, p.suggestions[i].name)) best = 0;
    assert_int_equal(best, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(table_is_complete),
        cmocka_unit_test(bad_values_are_named),
        cmocka_unit_test(json_accepts_every_setting),
        cmocka_unit_test(lora_with_zero_is_sharded),
        cmocka_unit_test(fsdp_pure_bf16),
        cmocka_unit_test(live_parts_add_up),
        cmocka_unit_test(memory_at_batch_from_full_estimates),
        cmocka_unit_test(gpu_names),
        cmocka_unit_test(messages_never_propose_negative_values),
        cmocka_unit_test(all_of_the_above_is_consistent),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
