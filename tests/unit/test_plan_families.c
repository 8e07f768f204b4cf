/* The estimator's second-edition families and heads: parameter counts of
 * published checkpoints (config.json fixtures in tests/data/hf), the heads
 * read from "architectures", and configs whose fields contradict their
 * model_type. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "vram.h"
#include "unit/hf_fixture.h"

static uint64_t params(const vram_model_t *m)
{
    uint64_t n = 0;
    assert_int_equal(vram_model_param_count(m, &n, NULL), 0);
    return n;
}

/* Parameter counts published on each checkpoint's Hugging Face model page
 * (the safetensors "Model size" / num_parameters() of the class named in
 * the config's "architectures"); docs/estimation.md, "Families", lists them. */
static void published_counts(void **state)
{
    (void)state;
    static const struct {
        const char *file;
        vram_family_t family;
        uint64_t params;
    } cases[] = {
        {"qwen2-0.5b.json", VRAM_FAMILY_QWEN2, 494032768},              /* Qwen/Qwen2-0.5B (tied) */
        {"qwen2-7b.json", VRAM_FAMILY_QWEN2, 7615616512},               /* Qwen/Qwen2-7B */
        {"phi-2.json", VRAM_FAMILY_PHI, 2779683840},                    /* microsoft/phi-2 */
        {"phi-3-mini.json", VRAM_FAMILY_PHI3, 3821079552},              /* Phi-3-mini-4k-instruct */
        {"gemma-2b.json", VRAM_FAMILY_GEMMA, 2506172416},               /* google/gemma-2b */
        {"gemma-7b.json", VRAM_FAMILY_GEMMA, 8537680896},               /* google/gemma-7b */
        {"gemma-2-2b.json", VRAM_FAMILY_GEMMA2, 2614341888},            /* google/gemma-2-2b */
        {"gemma-2-9b.json", VRAM_FAMILY_GEMMA2, 9241705984},            /* google/gemma-2-9b */
        {"opt-125m.json", VRAM_FAMILY_OPT, 125239296},                  /* facebook/opt-125m */
        {"opt-350m.json", VRAM_FAMILY_OPT, 331196416},                  /* facebook/opt-350m */
        {"mixtral-8x7b.json", VRAM_FAMILY_MIXTRAL, 46702792704},        /* Mixtral-8x7B-v0.1 */
        {"qwen1.5-moe-a2.7b.json", VRAM_FAMILY_QWEN2_MOE, 14315784192}, /* Qwen1.5-MoE-A2.7B */
        {"whisper-tiny.json", VRAM_FAMILY_WHISPER, 37760640},           /* openai/whisper-tiny */
        {"whisper-large-v3.json", VRAM_FAMILY_WHISPER, 1543490560}, /* openai/whisper-large-v3 */
        {"w2v-base-960h.json", VRAM_FAMILY_WAV2VEC2, 94396320},     /* wav2vec2-base-960h (CTC) */
        {"llama-3.2-3b.json", VRAM_FAMILY_LLAMA, 3212749824},       /* Llama-3.2-3B (tied) */
        /* heads: BertForSequenceClassification (2 labels) on bert-large
         * (BertModel 335,141,888 + 1024 x 2 + 2); BertForMaskedLM on
         * bert-base (109,514,298); ViTForImageClassification with 3 labels
         * (google/vit-base-patch16-224 has 86,567,656 with 1000: 997 x 769 more) */
        {"bert-large-cls.json", VRAM_FAMILY_BERT, 335143938},
        {"bert-base-uncased.json", VRAM_FAMILY_BERT, 109514298},
        {"vit-base-cls.json", VRAM_FAMILY_VIT, 86567656 - 997 * 769},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        vram_model_t m = load(cases[i].file);
        assert_int_equal(m.family, cases[i].family);
        uint64_t n = params(&m);
        if (n != cases[i].params)
            fail_msg("%s: %llu parameters, published %llu", cases[i].file, (unsigned long long)n,
                     (unsigned long long)cases[i].params);
    }
}

/* The same base model under each head: the difference is the head's
 * parameters as Hugging Face builds them. */
static void heads_add_their_parameters(void **state)
{
    (void)state;
    static const char *const fmt =
        "{\"model_type\":\"bert\",\"architectures\":[\"%s\"],\"vocab_size\":30522,"
        "\"hidden_size\":768,\"num_hidden_layers\":12,\"num_attention_heads\":12,"
        "\"intermediate_size\":3072,\"max_position_embeddings\":512%s}";
    static const struct {
        const char *arch, *extra;
        int64_t delta; /* parameters beyond BertModel's 109,482,240 */
    } cases[] = {
        {"BertModel", "", 0},
        {"BertForSequenceClassification", "", 768 * 2 + 2},
        {"BertForSequenceClassification", ",\"id2label\":{\"0\":\"a\",\"1\":\"b\",\"2\":\"c\"}",
         768 * 3 + 3},
        {"BertForSequenceClassification", ",\"num_labels\":5", 768 * 5 + 5},
        /* no pooler (768 x 768 + 768), a classifier per token */
        {"BertForTokenClassification", ",\"num_labels\":9", -590592 + 768 * 9 + 9},
        {"BertForQuestionAnswering", "", -590592 + 768 * 2 + 2},
        {"BertForMaskedLM", "", 1536 + 30522},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[1024];
        snprintf(text, sizeof text, fmt, cases[i].arch, cases[i].extra);
        vram_model_t m;
        if (vram_model_from_hf_json(text, "t.json", &m)) fail_msg("%s", vram_last_error());
        assert_int_equal((int64_t)params(&m), 109482240 + cases[i].delta);
    }
    /* decoders: the LM head unless tied; a sequence classifier instead */
    vram_model_t m = load("qwen2-7b.json");
    uint64_t lm = params(&m);
    m.head = VRAM_HEAD_SEQ_CLS;
    m.num_labels = 2;
    assert_int_equal(params(&m), lm - 152064ull * 3584 + 2 * 3584);
    m.head = VRAM_HEAD_BASE;
    assert_int_equal(params(&m), lm - 152064ull * 3584);
    /* an unknown head is refused, naming it */
    vram_model_t x;
    assert_int_equal(vram_model_from_hf_json("{\"model_type\":\"bert\",\"architectures\":"
                                             "[\"BertForPanini\"],\"vocab_size\":3,"
                                             "\"hidden_size\":8,\"num_hidden_layers\":1,"
                                             "\"num_attention_heads\":1,\"intermediate_size\":8,"
                                             "\"max_position_embeddings\":8}",
                                             "t.json", &x),
                     VRAM_EPARSE);
    assert_non_null(strstr(vram_last_error(), "BertForPanini"));
}

/* Heads change the training activations: the MLM logits and their loss. */
static void heads_add_their_activations(void **state)
{
    (void)state;
    vram_model_t base = load("bert-base-uncased.json"), mlm = base;
    base.head = VRAM_HEAD_BASE;
    base.has_pooler = true;
    vram_estimate_config_t c;
    vram_estimate_config_init(&c);
    c.seq_len = 128;
    c.batch_size = 4;
    c.overhead_bytes = 0;
    vram_estimate_t a, b;
    assert_int_equal(vram_estimate(&base, &c, &a), 0);
    assert_int_equal(vram_estimate(&mlm, &c, &b), 0);
    /* at least the fp32 log-softmax over 30522 classes for 512 tokens */
    assert_true(b.activations > a.activations + 4ull * 512 * 30522);
}

static int parse(const char *text)
{
    vram_model_t m;
    vram_clear_error();
    return vram_model_from_hf_json(text, "c.json", &m);
}

static void contradictions_are_refused(void **state)
{
    (void)state;
    /* a Mixtral config saved with model_type "mistral" */
    assert_int_equal(parse("{\"model_type\":\"mistral\",\"vocab_size\":32000,\"hidden_size\":"
                           "4096,\"num_hidden_layers\":32,\"num_attention_heads\":32,"
                           "\"intermediate_size\":14336,\"num_local_experts\":8,"
                           "\"num_experts_per_tok\":2}"),
                     VRAM_EPARSE);
    assert_non_null(strstr(vram_last_error(), "num_local_experts"));
    assert_non_null(strstr(vram_last_error(), "mixtral"));
    /* audio fields on a text type */
    assert_int_equal(parse("{\"model_type\":\"llama\",\"num_mel_bins\":80}"), VRAM_EPARSE);
    assert_non_null(strstr(vram_last_error(), "num_mel_bins"));
    /* Whisper's own field names: no "missing num_attention_heads" */
    assert_int_equal(parse("{\"model_type\":\"whisper\",\"vocab_size\":51865,\"d_model\":384,"
                           "\"encoder_layers\":4,\"decoder_layers\":4}"),
                     VRAM_EPARSE);
    assert_non_null(strstr(vram_last_error(), "encoder_attention_heads"));
    assert_null(strstr(vram_last_error(), "num_attention_heads"));
    /* more experts per token than experts */
    assert_int_equal(parse("{\"model_type\":\"mixtral\",\"vocab_size\":100,\"hidden_size\":64,"
                           "\"num_hidden_layers\":2,\"num_attention_heads\":4,"
                           "\"intermediate_size\":128,\"num_local_experts\":2,"
                           "\"num_experts_per_tok\":3}"),
                     VRAM_EPARSE);
    assert_non_null(strstr(vram_last_error(), "experts per token"));
    /* a MoE type without its expert fields */
    assert_int_equal(parse("{\"model_type\":\"mixtral\",\"vocab_size\":100,\"hidden_size\":64,"
                           "\"num_hidden_layers\":2,\"num_attention_heads\":4,"
                           "\"intermediate_size\":128}"),
                     VRAM_EPARSE);
    assert_non_null(strstr(vram_last_error(), "num_local_experts"));
    /* wav2vec2 conv arrays of different lengths */
    assert_int_equal(parse("{\"model_type\":\"wav2vec2\",\"hidden_size\":64,"
                           "\"num_hidden_layers\":2,\"num_attention_heads\":4,"
                           "\"intermediate_size\":128,\"conv_dim\":[8,8],\"conv_kernel\":[3],"
                           "\"conv_stride\":[2,2]}"),
                     VRAM_EPARSE);
    assert_non_null(strstr(vram_last_error(), "conv_kernel"));
}

/* Mixture of experts: all experts resident, only the top-k's activations. */
static void moe_counts_every_expert_but_k_activations(void **state)
{
    (void)state;
    vram_model_t m = load("mixtral-8x7b.json"), top1 = m;
    top1.experts_per_token = 1;
    assert_int_equal(params(&m), params(&top1));
    vram_estimate_config_t c;
    vram_estimate_config_init(&c);
    c.seq_len = 512;
    c.precision = VRAM_PREC_BF16;
    vram_estimate_t a, b;
    assert_int_equal(vram_estimate(&m, &c, &a), 0);
    assert_int_equal(vram_estimate(&top1, &c, &b), 0);
    /* the second expert adds its 4 expert-width tensors and two h-wide per token and layer */
    double per = 512.0 * 32 * (4 * 14336 + 2 * 4096) * 2;
    assert_true((double)(a.activations - b.activations) > 0.99 * per);
    assert_true((double)(a.activations - b.activations) < 1.01 * per);
}

static void audio_models_estimate(void **state)
{
    (void)state;
    vram_model_t w = load("whisper-tiny.json"), v = load("w2v-base-960h.json");
    vram_estimate_config_t c;
    vram_estimate_config_init(&c);
    vram_estimate_t e;
    assert_int_equal(vram_estimate(&w, &c, &e), 0);
    assert_int_equal(e.seq_len, 448); /* decoder tokens: max_target_positions */
    /* wav2vec2: --seq-len counts raw samples; 1 s = 49 frames */
    c.seq_len = 16000;
    assert_int_equal(vram_estimate(&v, &c, &e), 0);
    vram_estimate_t two;
    c.seq_len = 32000;
    assert_int_equal(vram_estimate(&v, &c, &two), 0);
    assert_true(two.activations > e.activations);
    c.seq_len = 100; /* shorter than the receptive field (400 samples) */
    assert_int_equal(vram_estimate(&v, &c, &e), VRAM_EINVAL);
    assert_non_null(strstr(vram_last_error(), "receptive field"));
}

/* --head: the class a checkpoint is loaded with, over its config's
 * architectures (bert-large-uncased's hub config says BertForMaskedLM; the
 * HF guide loads it with AutoModelForSequenceClassification). */
static void head_override(void **state)
{
    (void)state;
    vram_head_t h = VRAM_HEAD_DEFAULT;
    assert_int_equal(vram_head_parse("BertForSequenceClassification", &h), 0);
    assert_int_equal(h, VRAM_HEAD_SEQ_CLS);
    assert_int_equal(vram_head_parse("ForQuestionAnswering", &h), 0);
    assert_int_equal(h, VRAM_HEAD_QA);
    assert_int_equal(vram_head_parse("BertModel", &h), 0);
    assert_int_equal(h, VRAM_HEAD_BASE);
    assert_int_equal(vram_head_parse("BertForNothing", &h), VRAM_EINVAL);
    assert_int_equal(vram_head_parse(NULL, &h), VRAM_EINVAL);
    vram_model_t mlm = load("bert-large-uncased.json"), cls = load("bert-large-cls.json");
    /* BertModel without its pooler, then the MLM transform (dense h x h,
     * LayerNorm) and the decoder's bias; the decoder weight is tied */
    assert_int_equal(params(&mlm), 335141888 - 1025 * 1024 + 1025 * 1024 + 2 * 1024 + 30522);
    vram_model_set_head(&mlm, VRAM_HEAD_SEQ_CLS, 2);
    assert_int_equal(params(&mlm), params(&cls)); /* the pooler comes back with the head */
    vram_model_set_head(&mlm, VRAM_HEAD_QA, 7);
    assert_int_equal(mlm.num_labels, 2);
    assert_false(mlm.has_pooler);
    vram_model_set_head(NULL, VRAM_HEAD_QA, 2); /* no crash */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(published_counts),
        cmocka_unit_test(head_override),
        cmocka_unit_test(heads_add_their_parameters),
        cmocka_unit_test(heads_add_their_activations),
        cmocka_unit_test(contradictions_are_refused),
        cmocka_unit_test(moe_counts_every_expert_but_k_activations),
        cmocka_unit_test(audio_models_estimate),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
