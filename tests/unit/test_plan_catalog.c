/* Every catalog model's parameter count equals the published number, and
 * unknown names get the closest catalog names. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "vram.h"

/* Published parameter counts. Sources: Hugging Face model cards / configs
 * (num_parameters() of BertModel, RobertaModel, GPT2LMHeadModel,
 * T5ForConditionalGeneration, LlamaForCausalLM, MistralForCausalLM), the
 * Llama 2/3 and Mistral papers' configs, torchvision's weight tables
 * (num_params of each *_Weights.IMAGENET1K_V1), and for the LSTM/GRU language
 * models PyTorch's nn.LSTM/nn.GRU with examples/word_language_model's
 * "--emsize 650 --nhid 650 --nlayers 2 --tied" on Wikitext-2 (33,278 words).
 * Every number was also reproduced by bench/estimate/check_params.py with the
 * reference PyTorch models. */
static const struct {
    const char *name;
    uint64_t params;
    const char *source;
} published[] = {
    {"bert-base", 109482240, "bert-base-uncased (BertModel)"},
    {"bert-large", 335141888, "bert-large-uncased (BertModel)"},
    {"roberta-base", 124645632, "roberta-base (RobertaModel)"},
    {"roberta-large", 355359744, "roberta-large (RobertaModel)"},
    {"gpt2", 124439808, "gpt2"},
    {"gpt2-medium", 354823168, "gpt2-medium"},
    {"gpt2-large", 774030080, "gpt2-large"},
    {"gpt2-xl", 1557611200, "gpt2-xl"},
    {"t5-small", 60506624, "t5-small"},
    {"t5-base", 222903552, "t5-base"},
    {"t5-large", 737668096, "t5-large"},
    {"llama-2-7b", 6738415616, "meta-llama/Llama-2-7b-hf"},
    {"llama-2-13b", 13015864320, "meta-llama/Llama-2-13b-hf"},
    {"llama-2-70b", 68976648192, "meta-llama/Llama-2-70b-hf"},
    {"llama-3-8b", 8030261248, "meta-llama/Meta-Llama-3-8B"},
    {"llama-3-70b", 70553706496, "meta-llama/Meta-Llama-3-70B"},
    {"mistral-7b", 7241732096, "mistralai/Mistral-7B-v0.1"},
    {"vit-b-16", 86567656, "torchvision ViT_B_16_Weights"},
    {"vit-l-16", 304326632, "torchvision ViT_L_16_Weights"},
    {"resnet18", 11689512, "torchvision ResNet18_Weights"},
    {"resnet34", 21797672, "torchvision ResNet34_Weights"},
    {"resnet50", 25557032, "torchvision ResNet50_Weights"},
    {"resnet101", 44549160, "torchvision ResNet101_Weights"},
    {"resnet152", 60192808, "torchvision ResNet152_Weights"},
    {"vgg16", 138357544, "torchvision VGG16_Weights"},
    {"mobilenet-v2", 3504872, "torchvision MobileNet_V2_Weights"},
    {"efficientnet-b0", 5288548, "torchvision EfficientNet_B0_Weights"},
    {"lstm-lm", 28434378, "nn.LSTM word_language_model, 650x2 tied"},
    {"gru-lm", 26741778, "nn.GRU word_language_model, 650x2 tied"},
};

static void every_catalog_model_matches_published_count(void **state)
{
    (void)state;
    size_t n;
    const char *const *names = vram_model_names(&n);
    assert_int_equal(n, sizeof published / sizeof published[0]);
    for (size_t i = 0; i < n; i++) {
        size_t j = 0;
        while (j < n && strcmp(published[j].name, names[i]))
            j++;
        if (j == n) fail_msg("catalog model %s has no published count in this test", names[i]);
        vram_model_t m;
        assert_int_equal(vram_model_find(names[i], &m), 0);
        uint64_t params = 0, tensors = 0;
        assert_int_equal(vram_model_param_count(&m, &params, &tensors), 0);
        if (params != published[j].params)
            fail_msg("%s: computed %llu parameters, published %llu (%s)", names[i],
                     (unsigned long long)params, (unsigned long long)published[j].params,
                     published[j].source);
        assert_true(tensors > 0);
        assert_string_not_equal(vram_model_description(names[i]), "");
    }
}

static void required_families_are_present(void **state)
{
    (void)state;
    static const char *required[] = {
        "bert-base",    "bert-large",      "roberta-base", "roberta-large", "gpt2",
        "gpt2-medium",  "gpt2-large",      "gpt2-xl",      "t5-small",      "t5-base",
        "t5-large",     "llama-2-7b",      "llama-2-13b",  "llama-2-70b",   "llama-3-8b",
        "llama-3-70b",  "mistral-7b",      "vit-b-16",     "vit-l-16",      "resnet18",
        "resnet34",     "resnet50",        "resnet101",    "resnet152",     "vgg16",
        "mobilenet-v2", "efficientnet-b0", "lstm-lm",      "gru-lm"};
    for (size_t i = 0; i < sizeof required / sizeof required[0]; i++) {
        vram_model_t m;
        if (vram_model_find(required[i], &m)) fail_msg("%s missing", required[i]);
        assert_string_equal(m.name, required[i]);
    }
}

static void names_are_normalized_and_aliases_resolve(void **state)
{
    (void)state;
    vram_model_t m;
    assert_int_equal(vram_model_find("MobileNet_V2", &m), 0);
    assert_string_equal(m.name, "mobilenet-v2");
    assert_int_equal(vram_model_find("bert-base-uncased", &m), 0);
    assert_string_equal(m.name, "bert-base");
    assert_int_equal(vram_model_find("LLAMA-2-7B", &m), 0);
    assert_int_equal(m.family, VRAM_FAMILY_LLAMA);
}

static void unknown_model_suggests_closest_names(void **state)
{
    (void)state;
    vram_model_t m;
    memset(&m, 0x5a, sizeof m);
    assert_int_equal(vram_model_find("bert-bsae", &m), VRAM_ENOENT);
    const char *msg = vram_last_error();
    assert_non_null(strstr(msg, "bert-bsae"));
    /* "bert-base" is one transposition away: the first suggestion */
    const char *mean = strstr(msg, "did you mean ");
    assert_non_null(mean);
    assert_memory_equal(mean + strlen("did you mean "), "bert-base,", 10);
    assert_int_equal(((unsigned char *)&m)[0], 0x5a); /* untouched */

    assert_int_equal(vram_model_find("resnet-50", &m), VRAM_ENOENT);
    assert_non_null(strstr(vram_last_error(), "resnet50"));
    assert_int_equal(vram_model_find("lama-2-7b", &m), VRAM_ENOENT);
    assert_non_null(strstr(vram_last_error(), "llama-2-7b"));
    assert_int_equal(vram_model_find("", &m), VRAM_EINVAL);
    assert_int_equal(vram_model_find(NULL, &m), VRAM_EINVAL);
}

static void inconsistent_description_is_refused(void **state)
{
    (void)state;
    vram_model_t m;
    assert_int_equal(vram_model_find("gpt2", &m), 0);
    m.num_heads = 7; /* 768 is not divisible by 7 */
    uint64_t p;
    assert_int_equal(vram_model_param_count(&m, &p, NULL), VRAM_EINVAL);
    assert_non_null(strstr(vram_last_error(), "divisible"));
    assert_int_equal(vram_model_find("llama-2-70b", &m), 0);
    m.num_kv_heads = 3; /* 64 heads are not a multiple of 3 */
    assert_int_equal(vram_model_param_count(&m, &p, NULL), VRAM_EINVAL);
    assert_int_equal(vram_model_find("resnet50", &m), 0);
    m.variant = 42;
    assert_int_equal(vram_model_param_count(&m, &p, NULL), VRAM_EINVAL);
    assert_non_null(strstr(vram_last_error(), "42"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_catalog_model_matches_published_count),
        cmocka_unit_test(required_families_are_present),
        cmocka_unit_test(names_are_normalized_and_aliases_resolve),
        cmocka_unit_test(unknown_model_suggests_closest_names),
        cmocka_unit_test(inconsistent_description_is_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
