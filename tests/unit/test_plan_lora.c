/* LoRA/QLoRA arithmetic, the real-GPU lines, the hub-id cache look-up and
 * bare GPU names. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "vram.h"
#include "unit/estimate_fixture.h"

/* The set-up of the LoRA tests: bf16 training, 512 tokens. */
static vram_estimate_config_t bf16_512(void)
{
    vram_estimate_config_t c;
    vram_estimate_config_init(&c);
    c.seq_len = 512;
    c.precision = VRAM_PREC_BF16;
    return c;
}

/* Llama-2-7B, rank 8 on q and v: 32 layers x 2 x 8 x (4096 + 4096) =
 * 4,194,304, the figure PEFT's print_trainable_parameters() reports for
 * this set-up in its documentation. */
static void lora_adapter_counts(void **state)
{
    (void)state;
    vram_model_t m = model("llama-2-7b");
    vram_estimate_config_t c = bf16_512();
    c.lora_rank = 8;
    c.lora_targets = VRAM_LORA_Q | VRAM_LORA_V;
    vram_estimate_t e = est(&m, &c);
    assert_int_equal(e.trainable_count, 4194304);
    /* all-linear: q, k, v, o (4096 -> 4096), gate and up (4096 -> 11008),
     * down (11008 -> 4096) */
    c.lora_targets = VRAM_LORA_ALL_LINEAR;
    e = est(&m, &c);
    assert_int_equal(e.trainable_count, 32ull * 8 * (4 * 8192 + 3 * (4096 + 11008)));
    /* only the adapters get gradients and states; the base stays in bf16 */
    uint64_t A = e.trainable_count;
    assert_int_equal(e.gradients, 2 * A);
    assert_int_equal(e.optimizer_states, 4 * A); /* two bf16 states, no per-tensor steps */
    assert_int_equal(e.parameters, 2ull * 6738415616 + 2 * A);
    /* the names map per family: GPT-2's fused c_attn answers to q, k and v */
    vram_model_t g = model("gpt2");
    c.lora_targets = VRAM_LORA_Q;
    c.seq_len = 128;
    assert_int_equal(est(&g, &c).trainable_count, 12ull * 8 * (768 + 3 * 768));
    /* families without linears to adapt are refused */
    vram_model_t r = model("resnet50");
    vram_estimate_t out;
    assert_int_equal(vram_estimate(&r, &c, &out), VRAM_EINVAL);
    assert_non_null(strstr(vram_last_error(), "LoRA"));
}

/* QLoRA: NF4 is 4 bits plus an fp32 absmax per 64 weights (0.5 bits);
 * double quantization stores them in 8 bits with an fp32 constant per 256
 * (0.127 bits): Dettmers et al. 2023, section 3. */
static void qlora_base_bytes(void **state)
{
    (void)state;
    vram_model_t m = model("llama-2-7b");
    vram_estimate_config_t c = bf16_512();
    c.lora_rank = 16;
    uint64_t lora = est(&m, &c).parameters;
    c.quantize_base = VRAM_QUANT_NF4;
    c.double_quant = false; /* on by default, as QLoRA trains */
    uint64_t nf4 = est(&m, &c).parameters;
    c.double_quant = true;
    uint64_t dq = est(&m, &c).parameters;
    /* the linears of the 32 blocks: 4 x 4096^2 + 3 x 4096 x 11008 each */
    double Q = 32.0 * (4.0 * 4096 * 4096 + 3.0 * 4096 * 11008);
    double want_nf4 = (double)lora - 2 * Q + (0.5 + 4.0 / 64) * Q;
    double want_dq = (double)lora - 2 * Q + (0.5 + 1.0 / 64 + 4.0 / (64 * 256)) * Q;
    assert_true((double)nf4 > want_nf4 - 2 && (double)nf4 < want_nf4 + 2);
    assert_true((double)dq > want_dq - 2 && (double)dq < want_dq + 2);
    /* bits per weight of the constants: 0.5 and 0.127 */
    assert_true(((double)nf4 - (double)dq) / Q * 8 > 0.37 &&
                ((double)nf4 - (double)dq) / Q * 8 < 0.38);
    /* int8 base: one byte per weight */
    c.quantize_base = VRAM_QUANT_INT8;
    double want8 = (double)lora - Q;
    assert_true(fabs((double)est(&m, &c).parameters - want8) < 2);
    /* training a quantized base without adapters is refused */
    c.lora_rank = 0;
    vram_estimate_t e;
    assert_int_equal(vram_estimate(&m, &c, &e), VRAM_EINVAL);
    /* inference on it (bitsandbytes' load_in_4bit) is not: the block
     * linears in 4 bits, the rest in bf16, and one linear dequantized for
     * its matmul at the peak; loading alone runs no matmul */
    c.quantize_base = VRAM_QUANT_NF4;
    c.double_quant = false;
    c.mode = VRAM_MODE_INFER;
    e = est(&m, &c);
    double n = 6738415616.0; /* Llama-2-7B */
    assert_true(fabs((double)e.parameters - (2 * (n - Q) + (0.5 + 4.0 / 64) * Q)) < 2);
    double largest = 4096.0 * 11008 * 2;
    assert_true((double)e.allocated_peak >= (double)e.parameters + largest);
    c.mode = VRAM_MODE_LOAD;
    vram_estimate_t load = est(&m, &c);
    assert_true((double)load.allocated_peak < (double)load.parameters + largest);
}

/* Frozen layers still pass gradients back: activations are kept, and the
 * adapters add theirs. */
static void lora_keeps_activations(void **state)
{
    (void)state;
    vram_model_t m = model("llama-2-7b");
    vram_estimate_config_t c = bf16_512();
    uint64_t full = est(&m, &c).activations;
    c.lora_rank = 8;
    uint64_t lora = est(&m, &c).activations;
    assert_true(lora > full);
    assert_int_equal(lora - full, 512ull * 32 * 2 * 8 * 2); /* q, v: lora_A's output, bf16 */
}

static void targets_parse(void **state)
{
    (void)state;
    unsigned t;
    assert_int_equal(vram_lora_targets_parse("q,v", &t), 0);
    assert_int_equal(t, VRAM_LORA_Q | VRAM_LORA_V);
    assert_int_equal(vram_lora_targets_parse("all-linear", &t), 0);
    assert_int_equal(t, VRAM_LORA_ALL_LINEAR);
    assert_int_equal(vram_lora_targets_parse("q,qq", &t), VRAM_EINVAL);
    assert_non_null(strstr(vram_last_error(), "\"qq\""));
    assert_int_equal(vram_lora_targets_parse("", &t), VRAM_EINVAL);
}

/* The real-GPU lines follow the documented sources. */
static void context_and_workspaces(void **state)
{
    (void)state;
    vram_model_t m = model("bert-base");
    vram_estimate_config_t c;
    vram_estimate_config_init(&c);
    c.seq_len = 128;
    c.gpu_cc = 70;
    c.cuda_version = 113; /* before lazy loading: every kernel loaded */
    assert_int_equal(est(&m, &c).cuda_context, 1343ull << 20);
    c.cuda_version = 121;
    assert_int_equal(est(&m, &c).cuda_context, 400000000ull);
    c.lazy_loading = 2;
    assert_int_equal(est(&m, &c).cuda_context, 1343ull << 20);
    c.lazy_loading = 0;
    /* two cuBLAS workspaces in training, 32 MiB each on Hopper */
    assert_int_equal(est(&m, &c).workspaces, 2 * ((8ull << 20) + (128 << 10)));
    c.gpu_cc = 90;
    assert_int_equal(est(&m, &c).workspaces, 2 * (32ull << 20));
    /* weights only: no workspace, no activations */
    c.mode = VRAM_MODE_LOAD;
    vram_estimate_t e = est(&m, &c);
    assert_int_equal(e.workspaces + e.activations + e.gradients, 0);
    assert_true(e.allocated_peak >= e.parameters && e.allocated_peak < e.parameters + (4 << 20));
    /* foreach Adam's step keeps one parameter-sized list; fused none */
    c.mode = VRAM_MODE_TRAIN;
    assert_int_equal(est(&m, &c).optimizer_temps, 4ull * 109482240);
    c.optim_impl = VRAM_OPTIM_FUSED;
    assert_int_equal(est(&m, &c).optimizer_temps, 0);
    c.optim_impl = VRAM_OPTIM_FOR_LOOP; /* the largest tensor: the word embeddings */
    assert_int_equal(est(&m, &c).optimizer_temps, 4ull * 30522 * 768);
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* --hf-config org/name: the cache's layout, refs/main, and the environment
 * variables' order. */
static void hub_cache_lookup(void **state)
{
    (void)state;
    char root[] = "/tmp/vram-hub-XXXXXX";
    assert_non_null(mkdtemp(root));
    char dir[512], path[600];
    snprintf(dir, sizeof dir, "%s/hub/models--org--tiny/snapshots/abc", root);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' '%s/hub/models--org--tiny/refs'", dir, root);
    assert_int_equal(system(cmd), 0);
    snprintf(path, sizeof path, "%s/config.json", dir);
    write_file(path, "{\"model_type\":\"gpt2\",\"vocab_size\":100,\"n_embd\":64,\"n_layer\":2,"
                     "\"n_head\":4,\"n_positions\":128}");
    snprintf(path, sizeof path, "%s/hub/models--org--tiny/refs/main", root);
    write_file(path, "abc\n");
    char hub[600], found[4096];
    snprintf(hub, sizeof hub, "%s/hub", root);
    unsetenv("HF_HUB_CACHE");
    setenv("HF_HOME", root, 1); /* $HF_HOME/hub */
    assert_int_equal(vram_hf_cache_config("org/tiny", found, sizeof found), 0);
    assert_non_null(strstr(found, "/snapshots/abc/config.json"));
    vram_model_t m;
    assert_int_equal(vram_model_from_hf_config(found, &m), 0);
    assert_int_equal(m.family, VRAM_FAMILY_GPT2);
    setenv("HF_HUB_CACHE", hub, 1); /* wins over HF_HOME */
    setenv("HF_HOME", "/nonexistent", 1);
    assert_int_equal(vram_hf_cache_config("org/tiny", found, sizeof found), 0);
    /* not cached: a clear error that says how to get it */
    assert_int_equal(vram_hf_cache_config("org/absent", found, sizeof found), VRAM_ENOENT);
    assert_non_null(strstr(vram_last_error(), "org/absent"));
    assert_non_null(strstr(vram_last_error(), "not in the local Hugging Face cache"));
    /* not an id: no path tricks */
    assert_int_equal(vram_hf_cache_config("../etc", found, sizeof found), VRAM_EINVAL);
    assert_int_equal(vram_hf_cache_config("a/b/c", found, sizeof found), VRAM_EINVAL);
    unsetenv("HF_HUB_CACHE");
    unsetenv("HF_HOME");
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    assert_int_equal(system(cmd), 0);
}

static void bare_gpu_names(void **state)
{
    (void)state;
    const char *note;
    const vram_gpu_model_t *g = vram_gpu_model_resolve("H100", &note);
    assert_non_null(g);
    assert_string_equal(g->name, "H100-80GB");
    assert_non_null(note);
    assert_non_null(strstr(note, "80 GB"));
    g = vram_gpu_model_resolve("rtx4090", &note);
    assert_non_null(g);
    assert_string_equal(g->name, "RTX4090-24GB");
    g = vram_gpu_model_resolve("Tesla V100-32GB", &note);
    assert_non_null(g);
    assert_string_equal(g->name, "V100-32GB");
    assert_null(note);
    g = vram_gpu_model_resolve("A100", &note);
    assert_string_equal(g->name, "A100-80GB");
    assert_null(vram_gpu_model_resolve("Voodoo2", &note));
}

/* What --compile saves in one decoder layer (the min-cut partitioner's set
 * against eager's, test_plan_mechanisms): the difference one more layer
 * makes, eager minus compiled, without checkpointing. */
static double compiled_layer_saving(const vram_model_t *m, vram_estimate_config_t c)
{
    c.checkpointing = VRAM_CKPT_NONE;
    c.activation_offload = false;
    vram_model_t more = *m;
    more.num_layers++;
    c.compiled_loss = false;
    double eager = (double)est(&more, &c).activations - (double)est(m, &c).activations;
    c.compiled_loss = true;
    return eager - ((double)est(&more, &c).activations - (double)est(m, &c).activations);
}

/* torchtune's loss on Llama-2-7B (bf16, 2 x 2048 tokens, LoRA, full
 * checkpointing with offloading): eager, each chunk's log_softmax keeps
 * its fp32 output (4 bytes per logit); compiled, the chunk keeps its
 * bf16 input (2) and a log-sum-exp per token; the recomputed layer is
 * compiled too (torchtune compile=True compiles every layer). */
static void chunked_loss_and_compile(void **state)
{
    (void)state;
    vram_model_t m = model("llama-2-7b");
    vram_estimate_config_t c = bf16_512();
    c.batch_size = 2;
    c.seq_len = 2048;
    c.lora_rank = 8;
    c.checkpointing = VRAM_CKPT_FULL;
    c.activation_offload = true;
    c.chunked_loss = true;
    c.overhead_bytes = 0;
    c.attention_from_model = false;
    c.fused_attention = true; /* torchtune's SDPA: no score gradients in backward */
    double tok = 2.0 * 2048, logits = tok * 32000;
    vram_estimate_t eager = est(&m, &c);
    c.compiled_loss = true;
    vram_estimate_t comp = est(&m, &c);
    double diff = (double)eager.activations - (double)comp.activations;
    /* the loss's, and the one recomputed layer's as compiled */
    double layer = compiled_layer_saving(&m, c);
    assert_true(layer > 0);
    assert_true(fabs(diff - (2 * logits - 4 * tok + layer)) <= 2);
    /* the logits are live at the peak: eager with the bf16 logits still
     * referenced at the end of the loss */
    double fixed = (double)(comp.parameters + comp.optimizer_states);
    assert_true((double)comp.allocated_peak > fixed + 2 * logits);
    assert_true((double)eager.allocated_peak > fixed + 6 * logits);
    /* the recomputed layer is not live with the head's tensors */
    assert_true(comp.allocated_peak < comp.parameters + comp.optimizer_states + comp.activations);
    /* a compiled loss without chunks keeps its fp32 input, as eager keeps
     * the fp32 log-probabilities, but its backward is one fused kernel */
    c.chunked_loss = false;
    vram_estimate_t whole = est(&m, &c);
    c.compiled_loss = false;
    vram_estimate_t whole_eager = est(&m, &c);
    assert_true(fabs((double)whole_eager.activations - (double)whole.activations - layer) <= 2);
    double saved = (double)whole_eager.allocated_peak - (double)whole.allocated_peak;
    assert_true(saved >= 4 * logits - 2 && saved <= 4 * logits + layer + 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(lora_adapter_counts),    cmocka_unit_test(qlora_base_bytes),
        cmocka_unit_test(lora_keeps_activations), cmocka_unit_test(targets_parse),
        cmocka_unit_test(context_and_workspaces), cmocka_unit_test(hub_cache_lookup),
        cmocka_unit_test(bare_gpu_names),         cmocka_unit_test(chunked_loss_and_compile),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
