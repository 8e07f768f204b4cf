/* The estimator's breakdown: bytes per parameter for each precision and
 * optimizer, ZeRO partitioning, the KV-cache formula, activation scaling,
 * checkpointing, and refusal of impossible settings. */
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
#include "unit/estimate_fixture.h"

static uint64_t tensors_of(const vram_model_t *m)
{
    uint64_t t;
    assert_int_equal(vram_model_param_count(m, NULL, &t), 0);
    return t;
}

/* The breakdown's identities: what nvidia-smi shows is the allocator's
 * reservation plus the context; the reservation is the allocated peak plus
 * the pool model's rounding; overhead is the sum of the real-GPU lines; the
 * peak never exceeds all parts together (not all are live at once). */
static void total_is_the_sum(const vram_estimate_t *e)
{
    assert_int_equal(e->total, e->nvidia_smi);
    assert_int_equal(e->nvidia_smi, e->reserved + e->cuda_context);
    assert_int_equal(e->reserved, e->allocated_peak + e->allocator_rounding);
    assert_int_equal(e->overhead, e->autocast_cache + e->backward_temps + e->optimizer_temps +
                                      e->workspaces + e->allocator_rounding + e->cuda_context);
    uint64_t all = e->parameters + e->buffers + e->gradients + e->optimizer_states +
                   e->activations + e->kv_cache + e->autocast_cache + e->backward_temps +
                   e->optimizer_temps + e->workspaces;
    assert_true(e->allocated_peak <= all + (all >> 40) + 1); /* doubles near 2^60 */
    assert_true(e->allocated_peak >= e->parameters + e->buffers + e->optimizer_states);
}

static void fp32_adamw_is_16_bytes_per_parameter(void **state)
{
    (void)state;
    vram_model_t m = model("bert-base");
    vram_estimate_config_t c;
    vram_estimate_config_init(&c);
    vram_estimate_t e = est(&m, &c);
    uint64_t n = 109482240, t = tensors_of(&m);
    assert_int_equal(e.parameters_count, n);
    assert_int_equal(e.parameters, 4 * n);
    assert_int_equal(e.gradients, 4 * n);
    /* exp_avg + exp_avg_sq, and torch's 4-byte `step` per parameter tensor */
    assert_int_equal(e.optimizer_states, 8 * n + 4 * t);
    assert_int_equal(e.kv_cache, 0);
    total_is_the_sum(&e);
}

static void mixed_precision_adam_is_18_bytes(void **state)
{
    (void)state;
    vram_model_t m = model("gpt2");
    vram_estimate_config_t c;
    vram_estimate_config_init(&c);
    c.optimizer = VRAM_OPTIMIZER_ADAM;
    uint64_t n = 124439808, t = tensors_of(&m);
    for (int p = VRAM_PREC_AMP_FP16; p <= VRAM_PREC_AMP_BF16; p++) {
        c.precision = (vram_precision_t)p;
        vram_estimate_t e = est(&m, &c);
        /* torch.autocast: fp32 weights, gradients, momentum and variance,
         * and the cached half-precision copies (HF's and EleutherAI's 18) */
        assert_int_equal(e.parameters, 4 * n);
        assert_int_equal(e.gradients, 4 * n);
        assert_int_equal(e.optimizer_states, 8 * n + 4 * t);
        assert_int_equal(e.autocast_cache, 2 * n);
        assert_int_equal(e.parameters + e.gradients + e.optimizer_states + e.autocast_cache,
                         18 * n + 4 * t);
        /* DeepSpeed's mixed precision (ZeRO over one GPU): ZeRO's 16 */
        c.zero_stage = 1;
        c.gpus = 1;
        e = est(&m, &c);
        assert_int_equal(e.parameters + e.gradients + e.optimizer_states, 16 * n + 4 * t);
        assert_int_equal(e.autocast_cache, 0);
        c.zero_stage = 0;
        c.gpus = 0;
    }
    c.precision = VRAM_PREC_BF16; /* pure bf16: states in bf16 too */
    vram_estimate_t e = est(&m, &c);
    assert_int_equal(e.optimizer_states, 4 * n + 4 * t);
}

static void optimizer_state_bytes(void **state)
{
    (void)state;
    vram_model_t m = model("resnet50");
    vram_estimate_config_t c;
    vram_estimate_config_init(&c);
    uint64_t n = 25557032;
    c.optimizer = VRAM_OPTIMIZER_SGD;
    assert_int_equal(est(&m, &c).optimizer_states, 0);
    c.optimizer = VRAM_OPTIMIZER_MOMENTUM;
    assert_int_equal(est(&m, &c).optimizer_states, 4 * n);
    c.optimizer = VRAM_OPTIMIZER_ADAM8BIT;
    uint64_t q = est(&m, &c).optimizer_states;
    assert_true(q >= 2 * n && q < 2 * n + n / 100);
    c.optimizer = VRAM_OPTIMIZER_ADAFACTOR;
    uint64_t f = est(&m, &c).optimizer_states;
    /* convolutions factor over their kernels: 1x1 kernels store rows + columns = 2x */
    assert_true(f > 0 && f <= 8 * n);
    vram_model_t bert = model("bert-base");
    uint64_t fb = est(&bert, &c).optimizer_states;
    /* factored matrices: rows + columns, far below one full fp32 state */
    assert_true(fb > 0 && fb < 4ull * 109482240 / 10);
    /* inference keeps neither gradients nor states */
    c.mode = VRAM_MODE_INFER;
    vram_estimate_t e = est(&m, &c);
    assert_int_equal(e.gradients, 0);
    assert_int_equal(e.optimizer_states, 0);
}

static void zero_stages_partition_states_gradients_parameters(void **state)
{
    (void)state;
    vram_model_t m = model("llama-2-7b");
    vram_estimate_config_t c;
    vram_estimate_config_init(&c);
    c.precision = VRAM_PREC_AMP_BF16;
    c.seq_len = 512;
    vram_estimate_t base = est(&m, &c);
    double n = 6738415616.0, t = (double)tensors_of(&m), largest = 32000.0 * 4096;
    srand(42);
    for (int trial = 0; trial < 50; trial++) {
        int gpus = 1 + rand() % 64;
        c.gpus = gpus;
        for (int z = 1; z <= 3; z++) {
            c.zero_stage = z;
            vram_estimate_t e = est(&m, &c);
            total_is_the_sum(&e);
            /* DeepSpeed's estimators: ZeRO-1 2+2+12/N (Adam's states and the
             * fp32 master; the paper), ZeRO-2 4Ψ + 16Ψ/N
             * (estimate_zero2_model_states_mem_needs), ZeRO-3 4 x largest
             * layer + 18Ψ/N (estimate_zero3_model_states_mem_needs); plus
             * torch's 4-byte step per tensor */
            double want = z == 1   ? 4 * n + (12 * n + 4 * t) / gpus
                          : z == 2 ? 4 * n + (16 * n + 4 * t) / gpus
                                   : 4 * largest + (18 * n + 4 * t) / gpus;
            double got = (double)(e.parameters + e.gradients + e.optimizer_states);
            assert_true(got >= want - 3 && got <= want + 3);
            assert_int_equal(e.activations, base.activations);
        }
    }
}

static void kv_cache_formula(void **state)
{
    (void)state;
    vram_estimate_config_t c;
    vram_estimate_config_init(&c);
    c.mode = VRAM_MODE_INFER;
    c.precision = VRAM_PREC_FP16;
    c.batch_size = 4;
    c.seq_len = 1000;
    c.max_new_tokens = 24;
    /* 2 (k and v) * layers * kv_heads * head_dim * tokens * batch * bytes */
    vram_model_t m = model("llama-2-7b");
    assert_int_equal(est(&m, &c).kv_cache, 2ull * 32 * 32 * 128 * 1024 * 4 * 2);
    m = model("mistral-7b"); /* GQA: 8 key/value heads */
    assert_int_equal(est(&m, &c).kv_cache, 2ull * 32 * 8 * 128 * 1024 * 4 * 2);
    m = model("llama-2-70b");
    assert_int_equal(est(&m, &c).kv_cache, 2ull * 80 * 8 * 128 * 1024 * 4 * 2);
    c.precision = VRAM_PREC_FP32;
    m = model("gpt2");
    c.seq_len = 1000;
    assert_int_equal(est(&m, &c).kv_cache, 2ull * 12 * 12 * 64 * 1024 * 4 * 4);
    /* int8/int4 weights: cache stays fp16; weights shrink */
    m = model("llama-2-7b");
    c.precision = VRAM_PREC_INT8;
    vram_estimate_t e8 = est(&m, &c);
    assert_int_equal(e8.kv_cache, 2ull * 32 * 32 * 128 * 1024 * 4 * 2);
    assert_int_equal(e8.parameters, 6738415616ull);
    c.precision = VRAM_PREC_INT4;
    assert_true(est(&m, &c).parameters < e8.parameters * 6 / 10);
    /* no --seq-len: the default leaves room for the new tokens */
    m = model("gpt2");
    c.precision = VRAM_PREC_FP32;
    c.batch_size = 1;
    c.seq_len = 0;
    c.max_new_tokens = 100;
    vram_estimate_t d = est(&m, &c);
    assert_int_equal(d.seq_len, 924);
    assert_int_equal(d.kv_cache, 2ull * 12 * 12 * 64 * 1024 * 4);
    /* encoders have no cache */
    m = model("bert-base");
    c.seq_len = 256;
    c.max_new_tokens = 0;
    assert_int_equal(est(&m, &c).kv_cache, 0);
}

static void activations_are_affine_in_batch_and_grow_with_length(void **state)
{
    (void)state;
    const char *names[] = {"bert-base", "gpt2",  "t5-small",     "llama-3-8b",      "vit-b-16",
                           "resnet50",  "vgg16", "mobilenet-v2", "efficientnet-b0", "lstm-lm"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        vram_model_t m = model(names[i]);
        vram_estimate_config_t c;
        vram_estimate_config_init(&c);
        c.seq_len = 128;
        uint64_t a[4];
        for (int b = 1; b <= 3; b++) {
            c.batch_size = b;
            a[b] = est(&m, &c).activations;
        }
        int64_t d1 = (int64_t)(a[2] - a[1]), d2 = (int64_t)(a[3] - a[2]);
        assert_true(d1 > 0);
        assert_true(llabs(d1 - d2) <= 2);
        if (m.family == VRAM_FAMILY_VIT) continue; /* fixed image size */
        c.batch_size = 2;
        bool image = m.family >= VRAM_FAMILY_RESNET && m.family <= VRAM_FAMILY_EFFICIENTNET;
        if (image) c.image_size = 160;
        uint64_t short_ = est(&m, &c).activations;
        if (image)
            c.image_size = 320;
        else
            c.seq_len = 256;
        uint64_t long_ = est(&m, &c).activations;
        assert_true(long_ > short_ * 19 / 10); /* at least linear */
        if (m.family == VRAM_FAMILY_BERT || m.family == VRAM_FAMILY_GPT2)
            assert_true(long_ > short_ * 2); /* attention scores grow quadratically */
    }
}

/* Activation bytes that bench/estimate measured with PyTorch 1.13 on CPU
 * (saved_tensors_hooks, unique storages; one training step): the estimate
 * must stay within 0.1 % of them. */
static void activations_match_measurements(void **state)
{
    (void)state;
    static const struct {
        const char *name;
        int64_t batch, size;
        vram_precision_t precision;
        uint64_t measured;
    } cases[] = {
        {"bert-base", 1, 128, VRAM_PREC_FP32, 100007008},
        {"gpt2", 1, 128, VRAM_PREC_FP32, 182358916},
        {"resnet50", 2, 224, VRAM_PREC_FP32, 172039508},
        {"efficientnet-b0", 2, 224, VRAM_PREC_FP32, 177058268},
        /* CUDA autocast op lists emulated on CPU (bench/estimate/cuda_autocast.py) */
        {"bert-base", 2, 128, VRAM_PREC_AMP_BF16, 133166176},
        {"vit-b-16", 2, 224, VRAM_PREC_AMP_BF16, 199684164},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        vram_model_t m = model(cases[i].name);
        vram_estimate_config_t c;
        vram_estimate_config_init(&c);
        c.batch_size = cases[i].batch;
        c.precision = cases[i].precision;
        if (m.family == VRAM_FAMILY_BERT || m.family == VRAM_FAMILY_GPT2)
            c.seq_len = cases[i].size;
        else
            c.image_size = cases[i].size;
        uint64_t a = est(&m, &c).activations, want = cases[i].measured;
        if (a < want - want / 1000 || a > want + want / 1000)
            fail_msg("%s: estimate %llu, measured %llu", cases[i].name, (unsigned long long)a,
                     (unsigned long long)want);
    }
}

static void half_precision_halves_activations(void **state)
{
    (void)state;
    const char *names[] = {"gpt2", "bert-base", "llama-3-8b", "t5-small", "resnet50"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        vram_model_t m = model(names[i]);
        vram_estimate_config_t c;
        vram_estimate_config_init(&c);
        c.seq_len = 256;
        c.batch_size = 4;
        uint64_t full = est(&m, &c).activations;
        c.precision = VRAM_PREC_BF16;
        uint64_t half = est(&m, &c).activations;
        /* masks, indices and statistics keep their size: a little over half
         * (causal LMs keep their loss's fp32 logits: more) */
        assert_true(half > full / 2);
        bool lm = m.family == VRAM_FAMILY_LLAMA || m.family == VRAM_FAMILY_GPT2;
        /* T5LayerNorm upcasts its input to fp32 and keeps the copy, 8 bytes
         * per element in every precision */
        int pct = lm ? 70 : m.family == VRAM_FAMILY_T5 ? 62 : 56;
        assert_true(half < full * pct / 100);
        /* autocast keeps the residual stream, norms and softmax in fp32 and
         * adds 2-byte copies for the matmuls: in between */
        c.precision = VRAM_PREC_AMP_FP16;
        uint64_t amp = est(&m, &c).activations;
        assert_true(amp > half);
        if (m.family == VRAM_FAMILY_BERT) assert_true(amp < full);
    }
}

static void fused_attention_drops_the_quadratic_term(void **state)
{
    (void)state;
    const char *names[] = {"bert-base", "gpt2", "llama-2-7b", "t5-small"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        vram_model_t m = model(names[i]);
        vram_estimate_config_t c;
        vram_estimate_config_init(&c);
        c.fused_attention = true;
        c.seq_len = 256;
        uint64_t a1 = est(&m, &c).activations;
        c.seq_len = 512;
        uint64_t a2 = est(&m, &c).activations;
        /* linear in the sequence length; only T5's batch-independent
         * position terms grow faster: the int64 bucket indices and, as
         * SDPA's float mask, the fp32 position bias per layer and the
         * decoder's boolean causal masks (docs/estimation.md) */
        double quad = 2 * 8;
        if (m.family == VRAM_FAMILY_T5) {
            double dec = (double)(m.num_decoder_layers ? m.num_decoder_layers : m.num_layers);
            quad += 4.0 * (double)m.num_heads * ((double)m.num_layers + 2 * dec) + dec;
        }
        assert_true(a2 <= 2 * a1 + quad * 512 * 512);
        assert_true(a2 >= 2 * a1 - 2 * 8 * 256 * 256);
        c.fused_attention = false;
        assert_true(est(&m, &c).activations > a2);
    }
    /* CNNs have no attention */
    vram_model_t r = model("resnet50");
    vram_estimate_config_t c;
    vram_estimate_config_init(&c);
    uint64_t eager = est(&r, &c).activations;
    c.fused_attention = true;
    assert_int_equal(est(&r, &c).activations, eager);
}

static void checkpointing_reduces_activations(void **state)
{
    (void)state;
    const char *names[] = {"bert-base",       "gpt2",     "llama-2-7b",
                           "t5-base",         "vit-b-16", "resnet50",
                           "efficientnet-b0", "vgg16",    "lstm-lm"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        vram_model_t m = model(names[i]);
        vram_estimate_config_t c;
        vram_estimate_config_init(&c);
        c.batch_size = 8;
        c.seq_len = m.family == VRAM_FAMILY_LSTM ? 35 : 512;
        uint64_t none = est(&m, &c).activations;
        c.checkpointing = VRAM_CKPT_SELECTIVE;
        uint64_t sel = est(&m, &c).activations;
        c.checkpointing = VRAM_CKPT_FULL;
        vram_estimate_t full = est(&m, &c);
        if (!(full.activations < none)) fail_msg("%s: full checkpointing does not help", names[i]);
        assert_true(sel <= none);
        assert_true(full.activations <= sel);
        if (m.family == VRAM_FAMILY_GPT2 || m.family == VRAM_FAMILY_LLAMA)
            assert_true(sel < none); /* attention scores are recomputed */
        c.checkpointing = VRAM_CKPT_NONE;
        assert_int_equal(est(&m, &c).parameters, full.parameters);
    }
}

static void impossible_settings_are_refused(void **state)
{
    (void)state;
    vram_model_t m = model("bert-base");
    vram_estimate_config_t c;
    vram_estimate_t e;
    memset(&e, 0x33, sizeof e);
    vram_estimate_config_init(&c);
    c.batch_size = 0;
    assert_int_equal(vram_estimate(&m, &c, &e), VRAM_EINVAL);
    assert_non_null(strstr(vram_last_error(), "batch size"));
    assert_int_equal(((unsigned char *)&e)[0], 0x33);

    vram_estimate_config_init(&c);
    c.seq_len = 1024;
    assert_int_equal(vram_estimate(&m, &c, &e), VRAM_EINVAL);
    assert_non_null(strstr(vram_last_error(), "512 positions"));

    vram_estimate_config_init(&c);
    c.zero_stage = 2;
    assert_int_equal(vram_estimate(&m, &c, &e), VRAM_EINVAL);
    assert_non_null(strstr(vram_last_error(), "--gpus"));
    c.zero_stage = 4;
    c.gpus = 2;
    assert_int_equal(vram_estimate(&m, &c, &e), VRAM_EINVAL);

    vram_estimate_config_init(&c);
    c.precision = VRAM_PREC_INT8;
    assert_int_equal(vram_estimate(&m, &c, &e), VRAM_EINVAL);
    assert_non_null(strstr(vram_last_error(), "inference only"));

    m = model("gpt2");
    vram_estimate_config_init(&c);
    c.mode = VRAM_MODE_INFER;
    c.seq_len = 1000;
    c.max_new_tokens = 100; /* 1100 > 1024 positions */
    assert_int_equal(vram_estimate(&m, &c, &e), VRAM_EINVAL);
    assert_non_null(strstr(vram_last_error(), "1024"));

    m = model("vit-b-16");
    vram_estimate_config_init(&c);
    c.image_size = 384;
    assert_int_equal(vram_estimate(&m, &c, &e), VRAM_EINVAL);
    m = model("resnet18");
    c.image_size = 16;
    assert_int_equal(vram_estimate(&m, &c, &e), VRAM_EINVAL);
    assert_int_equal(vram_estimate(NULL, &c, &e), VRAM_EINVAL);
}

static void randomized_invariants(void **state)
{
    (void)state;
    size_t n;
    const char *const *names = vram_model_names(&n);
    srand(7);
    for (int trial = 0; trial < 400; trial++) {
        vram_model_t m = model(names[rand() % n]);
        vram_estimate_config_t c;
        vram_estimate_config_init(&c);
        c.mode = rand() % 3 ? VRAM_MODE_TRAIN : VRAM_MODE_INFER;
        c.batch_size = 1 + rand() % 64;
        c.seq_len = 1 + rand() % 512;
        c.precision = (vram_precision_t)(rand() % (c.mode == VRAM_MODE_TRAIN ? 5 : 7));
        c.optimizer = (vram_optimizer_t)(rand() % 6);
        c.checkpointing = (vram_checkpointing_t)(rand() % 3);
        c.gpus = rand() % 9;
        c.zero_stage = c.gpus ? rand() % 4 : 0;
        c.max_new_tokens = rand() % 256;
        if (c.mode == VRAM_MODE_INFER && m.max_positions &&
            c.seq_len + c.max_new_tokens > m.max_positions)
            c.max_new_tokens = 0;
        vram_estimate_t e = est(&m, &c);
        total_is_the_sum(&e);
        assert_true(e.parameters > 0 && e.activations > 0);
        assert_true(e.cuda_context >= 300000000ull && e.overhead >= e.cuda_context);
        if (c.mode == VRAM_MODE_INFER) assert_int_equal(e.gradients + e.optimizer_states, 0);
        /* one more sample never costs less (up to the allocator's carving,
         * which can repack the activations' segments a little better) */
        c.batch_size++;
        if (est(&m, &c).total + e.total / 100 < e.total)
            fail_msg("%s mode %d batch %lld prec %d opt %d ck %d zero %d/%d: %llu -> %llu", m.name,
                     c.mode, (long long)c.batch_size, c.precision, c.optimizer, c.checkpointing,
                     c.zero_stage, c.gpus, (unsigned long long)e.total,
                     (unsigned long long)est(&m, &c).total);
        c.overhead_bytes = 0;
        assert_int_equal(est(&m, &c).cuda_context + est(&m, &c).workspaces, 0);
    }
}

static void names_round_trip(void **state)
{
    (void)state;
    for (int p = 0; p <= VRAM_PREC_INT4; p++) {
        vram_precision_t out;
        assert_int_equal(vram_precision_parse(vram_precision_name((vram_precision_t)p), &out), 0);
        assert_int_equal(out, p);
    }
    for (int o = 0; o <= VRAM_OPTIMIZER_ADAM8BIT; o++) {
        vram_optimizer_t out;
        assert_int_equal(vram_optimizer_parse(vram_optimizer_name((vram_optimizer_t)o), &out), 0);
        assert_int_equal(out, o);
    }
    vram_checkpointing_t ck;
    assert_int_equal(vram_checkpointing_parse("selective", &ck), 0);
    assert_int_equal(ck, VRAM_CKPT_SELECTIVE);
    vram_precision_t p;
    assert_int_equal(vram_precision_parse("fp8", &p), VRAM_EINVAL);
    assert_non_null(strstr(vram_last_error(), "amp-bf16")); /* lists the accepted names */
}

/* A measured profile built by hand (the reader's bounds bypassed). */
static vram_model_t profile(uint64_t params, uint64_t per_sample, uint64_t fixed, uint64_t buffers,
                            int dtype_bytes)
{
    vram_model_t m;
    memset(&m, 0, sizeof m);
    strcpy(m.name, "prof");
    m.family = VRAM_FAMILY_PROFILE;
    m.profile_parameters = params;
    m.profile_act_per_sample = per_sample;
    m.profile_act_fixed = fixed;
    m.profile_buffers_bytes = buffers;
    m.profile_dtype_bytes = dtype_bytes;
    return m;
}

static void expect_einval(const vram_model_t *m, const vram_estimate_config_t *c, const char *part1,
                          const char *part2)
{
    vram_estimate_t e;
    memset(&e, 0xab, sizeof e);
    vram_estimate_t before = e;
    int rc = vram_estimate(m, c, &e);
    if (rc != VRAM_EINVAL) fail_msg("%s: expected EINVAL, got %d", m->name, rc);
    const char *msg = vram_last_error();
    if (!strstr(msg, part1) || !strstr(msg, part2))
        fail_msg("message \"%s\" should contain \"%s\" and \"%s\"", msg, part1, part2);
    assert_memory_equal(&e, &before, sizeof e); /* untouched on failure */
}

/* Batch, sequence, new tokens, image size, GPUs and overhead have upper
 * bounds (docs/estimation.md, "Limits"): the limit is accepted, one more is
 * refused naming the setting and the bound. */
static void settings_have_upper_bounds(void **state)
{
    (void)state;
    vram_model_t m = profile(1000, 1000, 0, 0, 4);
    static const struct {
        const char *name;
        long long limit;
    } cases[] = {{"batch size", 1ll << 24},
                 {"sequence length", 1ll << 24},
                 {"max new tokens", 1ll << 24},
                 {"image size", 1ll << 16},
                 {"number of GPUs", 1ll << 20}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        for (long long over = 0; over <= 1; over++) {
            vram_estimate_config_t c;
            vram_estimate_config_init(&c);
            long long v = cases[i].limit + over;
            if (i == 0) c.batch_size = v;
            if (i == 1) c.seq_len = v;
            if (i == 2) c.max_new_tokens = v, c.mode = VRAM_MODE_INFER;
            if (i == 3) c.image_size = v;
            if (i == 4) c.gpus = (int)v, c.zero_stage = 3;
            if (!over) {
                vram_estimate_t e = est(&m, &c);
                total_is_the_sum(&e);
                continue;
            }
            char bound[64];
            snprintf(bound, sizeof bound, "%lld is above the limit of %lld", v, cases[i].limit);
            expect_einval(&m, &c, cases[i].name, bound);
        }
    }
    vram_estimate_config_t c;
    vram_estimate_config_init(&c);
    c.overhead_bytes = 1ull << 60;
    assert_int_equal(est(&m, &c).cuda_context, 1ull << 60) /* replaces context and workspaces */;
    c.overhead_bytes = (1ull << 60) + 1;
    expect_einval(&m, &c, "overhead", "2^60");
    /* the default sequence length plus new tokens cannot overflow either */
    vram_estimate_config_init(&c);
    c.mode = VRAM_MODE_INFER;
    c.max_new_tokens = INT64_MAX;
    expect_einval(&m, &c, "max new tokens", "limit");
}

/* Fuzz finding F4 (docs/fuzzing.md): profile values near 2^63 made the
 * estimator convert doubles >= 2^64 to uint64_t and the total wrap. */
static void fuzz_f4_huge_profiles_are_refused(void **state)
{
    (void)state;
    vram_estimate_config_t c;
    vram_estimate_config_init(&c);
    vram_model_t m = profile(INT64_MAX, 1, 0, 0, 4);
    expect_einval(&m, &c, "parameters", "limit of 10000000000000");
    m = profile(1000, INT64_MAX, 0, 0, 4);
    expect_einval(&m, &c, "activations", "2^60");
    m = profile(1000, 1, INT64_MAX, 0, 4);
    expect_einval(&m, &c, "activations", "2^60");
    m = profile(1000, 1, 0, INT64_MAX, 4);
    expect_einval(&m, &c, "buffers", "2^60");
    /* at the reader's bounds one sample fits, 2^24 do not */
    m = profile(10000000000000ull, 1ull << 60, 0, 1ull << 60, 4);
    vram_estimate_t e = est(&m, &c);
    total_is_the_sum(&e);
    assert_int_equal(e.activations, 1ull << 60);
    assert_int_equal(e.parameters, 4 * 10000000000000ull);
    assert_true(e.total > e.activations && e.total > e.buffers);
    c.batch_size = 1 << 24;
    expect_einval(&m, &c, "activations", "2^60");
}

/* Random profiles anywhere in the reader's ranges (log-uniform), random
 * settings: the estimate either matches the profile formula exactly and its
 * total is the sum of its parts, or it is refused exactly when the
 * activations exceed 2^60 bytes (nothing else can, at these bounds). */
static void extreme_profiles_never_wrap(void **state)
{
    (void)state;
    srand(11);
    for (int trial = 0; trial < 3000; trial++) {
        uint64_t v[4];
        const int bits[4] = {43, 60, 60, 60}; /* 10^13 < 2^44 */
        for (int k = 0; k < 4; k++) {
            int b = rand() % (bits[k] + 1);
            v[k] = b ? ((1ull << (b - 1)) | ((uint64_t)rand() << 31 ^ (uint64_t)rand())) &
                           ((1ull << b) - 1)
                     : 0;
        }
        if (v[0] > 10000000000000ull) v[0] = 10000000000000ull;
        int dtype = rand() % 2 ? 4 : 2;
        vram_model_t m = profile(v[0], v[1], v[2], v[3], dtype);
        vram_estimate_config_t c;
        vram_estimate_config_init(&c);
        c.mode = rand() % 2 ? VRAM_MODE_TRAIN : VRAM_MODE_INFER;
        c.precision = (vram_precision_t)(rand() % (c.mode == VRAM_MODE_TRAIN ? 5 : 7));
        c.optimizer = (vram_optimizer_t)(rand() % 6);
        c.checkpointing = (vram_checkpointing_t)(rand() % 3);
        c.batch_size =
            1 + (int64_t)(((uint64_t)rand() << 8 ^ (uint64_t)rand()) % (1ull << (rand() % 25)));
        /* the profile formula (arch.c), in the same order of operations */
        double mm = c.precision == VRAM_PREC_FP32 ? 4 : 2;
        double per = (double)v[1];
        if (c.mode == VRAM_MODE_TRAIN && c.checkpointing != VRAM_CKPT_NONE) per *= 0.5;
        double acts = mm / dtype * (per * (double)c.batch_size + (double)v[2]);
        vram_estimate_t e;
        int rc = vram_estimate(&m, &c, &e);
        if (ceil(acts) > 0x1p60) {
            if (rc != VRAM_EINVAL || !strstr(vram_last_error(), "activations"))
                fail_msg("trial %d: %g bytes of activations accepted (rc %d)", trial, acts, rc);
            continue;
        }
        if (rc) fail_msg("trial %d: %s", trial, vram_last_error());
        total_is_the_sum(&e);
        assert_int_equal(e.activations, (uint64_t)ceil(acts));
        assert_int_equal(e.buffers, v[3]);
        uint64_t parts[] = {e.parameters,  e.buffers,  e.gradients, e.optimizer_states,
                            e.activations, e.kv_cache, e.overhead};
        for (size_t k = 0; k < sizeof parts / sizeof parts[0]; k++) {
            assert_true(parts[k] <= 1ull << 60);
            assert_true(e.total >= parts[k]);
        }
    }
}

/* Models built by hand through the API get the readers' bounds: no hang on
 * 2^63 layers, no signed overflow in the shapes. */
static void hand_built_models_are_bounded(void **state)
{
    (void)state;
    vram_estimate_config_t c;
    vram_estimate_config_init(&c);
    vram_model_t m = model("llama-2-7b");
    m.num_layers = INT64_MAX;
    expect_einval(&m, &c, "layers", "out of range (0 to 1000)");
    uint64_t n;
    assert_int_equal(vram_model_param_count(&m, &n, NULL), VRAM_EINVAL);
    m = model("gpt2");
    m.hidden_size = 1ll << 62;
    expect_einval(&m, &c, "hidden size", "1048576");
    m = model("vit-b-16");
    m.image_size = INT64_MAX;
    expect_einval(&m, &c, "image size", "65536");
    /* in range, but the activations of 2^24 sequences of 2^24 tokens with
     * eager attention do not fit 2^60 bytes: refused, not wrapped */
    m = model("llama-2-7b");
    m.max_positions = 1 << 24;
    c.seq_len = 1 << 24;
    c.batch_size = 1 << 24;
    expect_einval(&m, &c, "activations", "2^60");
}

/* The planner on a device with 2^64 - 1 free bytes: the budget does not
 * overflow, the search stays within the estimator's limits. */
static void planner_on_an_enormous_device(void **state)
{
    (void)state;
    vram_model_t models[] = {model("gpt2"), profile(1000, 1ull << 59, 0, 0, 4)};
    for (size_t i = 0; i < 2; i++) {
        vram_estimate_config_t c;
        vram_estimate_config_init(&c);
        vram_plan_config_t dev;
        vram_plan_config_init(&dev);
        dev.total_bytes = dev.free_bytes = UINT64_MAX;
        dev.target = 1.0;
        vram_plan_t p;
        if (vram_plan(&models[i], &c, &dev, &p)) fail_msg("%s", vram_last_error());
        assert_int_equal(p.budget_bytes, UINT64_MAX);
        assert_true(p.max_batch_raw >= 1 && p.max_batch_raw <= 1 << 24);
        c.batch_size = p.max_batch_raw;
        vram_estimate_t e = est(&models[i], &c);
        assert_true(e.total <= 1ull << 60 || i == 0);
        /* one more sample would be refused or exceed the search's 2^60 cap */
        c.batch_size++;
        vram_estimate_t more;
        if (c.batch_size <= 1 << 24 && !vram_estimate(&models[i], &c, &more))
            assert_true(more.total > 1ull << 60);
    }
}

/* seq_len shapes text models only, image_size image models only, neither a
 * measured profile; an estimate reports 0 for the one that does not apply, and
 * setting it changes nothing. */
static void settings_apply_by_model_kind(void **state)
{
    (void)state;
    const struct {
        const char *name;
        int seq, image;
    } cases[] = {{"gpt2", 1, 0}, {"bert-base", 1, 0}, {"resnet50", 0, 1}, {"vit-b-16", 0, 1}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        vram_model_t m = model(cases[i].name);
        assert_int_equal(vram_estimate_setting_applies(&m, "seq_len"), cases[i].seq);
        assert_int_equal(vram_estimate_setting_applies(&m, "image_size"), cases[i].image);
        assert_int_equal(vram_estimate_setting_applies(&m, "batch_size"), 1);
        vram_estimate_config_t c;
        vram_estimate_config_init(&c);
        vram_estimate_t plain, other;
        assert_int_equal(vram_estimate(&m, &c, &plain), 0);
        assert_true(cases[i].seq ? plain.seq_len > 0 : plain.seq_len == 0);
        assert_true(cases[i].image ? plain.image_size > 0 : plain.image_size == 0);
        /* the setting that does not apply is ignored */
        if (cases[i].seq)
            c.image_size = 384;
        else
            c.seq_len = 77;
        assert_int_equal(vram_estimate(&m, &c, &other), 0);
        assert_int_equal(other.total, plain.total);
    }
    vram_model_t p = model("gpt2");
    p.family = VRAM_FAMILY_PROFILE;
    assert_int_equal(vram_estimate_setting_applies(&p, "seq_len"), 0);
    assert_int_equal(vram_estimate_setting_applies(&p, "image_size"), 0);
    assert_int_equal(vram_estimate_setting_applies(NULL, "seq_len"), VRAM_EINVAL);
    assert_int_equal(vram_estimate_setting_applies(&p, NULL), VRAM_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(settings_apply_by_model_kind),
        cmocka_unit_test(fp32_adamw_is_16_bytes_per_parameter),
        cmocka_unit_test(mixed_precision_adam_is_18_bytes),
        cmocka_unit_test(optimizer_state_bytes),
        cmocka_unit_test(zero_stages_partition_states_gradients_parameters),
        cmocka_unit_test(kv_cache_formula),
        cmocka_unit_test(activations_are_affine_in_batch_and_grow_with_length),
        cmocka_unit_test(activations_match_measurements),
        cmocka_unit_test(half_precision_halves_activations),
        cmocka_unit_test(fused_attention_drops_the_quadratic_term),
        cmocka_unit_test(checkpointing_reduces_activations),
        cmocka_unit_test(impossible_settings_are_refused),
        cmocka_unit_test(randomized_invariants),
        cmocka_unit_test(names_round_trip),
        cmocka_unit_test(settings_have_upper_bounds),
        cmocka_unit_test(fuzz_f4_huge_profiles_are_refused),
        cmocka_unit_test(extreme_profiles_never_wrap),
        cmocka_unit_test(hand_built_models_are_bounded),
        cmocka_unit_test(planner_on_an_enormous_device),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
