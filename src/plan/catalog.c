/* The built-in catalog: architecture descriptions from the published
 * configurations (Hugging Face config.json files, torchvision, PyTorch's
 * examples). Counts and shapes are computed from these, never stored. */
#include "vram.h"

#include <ctype.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#define BERT(nm, V, h, L, a, I, P, off, T)                                                         \
    {                                                                                              \
        .name = nm, .family = VRAM_FAMILY_BERT, .vocab_size = V, .hidden_size = h,                 \
        .num_layers = L, .num_heads = a, .intermediate_size = I, .max_positions = P,               \
        .position_offset = off, .type_vocab_size = T, .has_pooler = true, .default_seq_len = P     \
    }
#define GPT2(nm, h, L, a)                                                                          \
    {                                                                                              \
        .name = nm, .family = VRAM_FAMILY_GPT2, .vocab_size = 50257, .hidden_size = h,             \
        .num_layers = L, .num_heads = a, .intermediate_size = 4 * (h), .max_positions = 1024,      \
        .tied_embeddings = true, .default_seq_len = 1024                                           \
    }
#define LLAMA(nm, V, h, L, a, kv, I, P, S)                                                         \
    {                                                                                              \
        .name = nm, .family = VRAM_FAMILY_LLAMA, .vocab_size = V, .hidden_size = h,                \
        .num_layers = L, .num_heads = a, .num_kv_heads = kv, .intermediate_size = I,               \
        .max_positions = P, .gated_mlp = true, .default_seq_len = S                                \
    }
#define T5(nm, d, L, a, I)                                                                         \
    {                                                                                              \
        .name = nm, .family = VRAM_FAMILY_T5, .vocab_size = 32128, .hidden_size = d,               \
        .num_layers = L, .num_decoder_layers = L, .num_heads = a, .head_dim = 64,                  \
        .intermediate_size = I, .relative_buckets = 32, .tied_embeddings = true,                   \
        .default_seq_len = 512                                                                     \
    }
#define VIT(nm, h, L, a, I)                                                                        \
    {                                                                                              \
        .name = nm, .family = VRAM_FAMILY_VIT, .hidden_size = h, .num_layers = L, .num_heads = a,  \
        .intermediate_size = I, .image_size = 224, .patch_size = 16, .num_channels = 3,            \
        .num_classes = 1000                                                                        \
    }
#define CNN(nm, fam, var)                                                                          \
    {                                                                                              \
        .name = nm, .family = fam, .variant = var, .image_size = 224, .num_channels = 3,           \
        .num_classes = 1000                                                                        \
    }
#define RNN(nm, fam)                                                                               \
    {                                                                                              \
        .name = nm, .family = fam, .vocab_size = 33278, .embed_size = 650, .hidden_size = 650,     \
        .num_layers = 2, .tied_embeddings = true, .default_seq_len = 35                            \
    }

static const struct {
    vram_model_t model;
    const char *description;
} catalog[] = {
    {BERT("bert-base", 30522, 768, 12, 12, 3072, 512, 0, 2), "BERT base uncased (BertModel)"},
    {BERT("bert-large", 30522, 1024, 24, 16, 4096, 512, 0, 2), "BERT large uncased (BertModel)"},
    {BERT("roberta-base", 50265, 768, 12, 12, 3072, 512, 2, 1), "RoBERTa base (RobertaModel)"},
    {BERT("roberta-large", 50265, 1024, 24, 16, 4096, 512, 2, 1), "RoBERTa large"},
    {GPT2("gpt2", 768, 12, 12), "GPT-2 small, tied LM head"},
    {GPT2("gpt2-medium", 1024, 24, 16), "GPT-2 medium"},
    {GPT2("gpt2-large", 1280, 36, 20), "GPT-2 large"},
    {GPT2("gpt2-xl", 1600, 48, 25), "GPT-2 XL"},
    {T5("t5-small", 512, 6, 8, 2048), "T5 v1.0 small (T5ForConditionalGeneration)"},
    {T5("t5-base", 768, 12, 12, 3072), "T5 v1.0 base"},
    {T5("t5-large", 1024, 24, 16, 4096), "T5 v1.0 large"},
    {LLAMA("llama-2-7b", 32000, 4096, 32, 32, 32, 11008, 4096, 4096), "Llama 2 7B"},
    {LLAMA("llama-2-13b", 32000, 5120, 40, 40, 40, 13824, 4096, 4096), "Llama 2 13B"},
    {LLAMA("llama-2-70b", 32000, 8192, 80, 64, 8, 28672, 4096, 4096), "Llama 2 70B (GQA, 8 KV)"},
    {LLAMA("llama-3-8b", 128256, 4096, 32, 32, 8, 14336, 8192, 8192), "Llama 3 8B (GQA, 8 KV)"},
    {LLAMA("llama-3-70b", 128256, 8192, 80, 64, 8, 28672, 8192, 8192), "Llama 3 70B (GQA)"},
    {LLAMA("mistral-7b", 32000, 4096, 32, 32, 8, 14336, 32768, 4096), "Mistral 7B v0.1 (GQA)"},
    {VIT("vit-b-16", 768, 12, 12, 3072), "ViT-B/16 (torchvision, 224 px)"},
    {VIT("vit-l-16", 1024, 24, 16, 4096), "ViT-L/16 (torchvision, 224 px)"},
    {CNN("resnet18", VRAM_FAMILY_RESNET, 18), "ResNet-18 (torchvision)"},
    {CNN("resnet34", VRAM_FAMILY_RESNET, 34), "ResNet-34 (torchvision)"},
    {CNN("resnet50", VRAM_FAMILY_RESNET, 50), "ResNet-50 (torchvision)"},
    {CNN("resnet101", VRAM_FAMILY_RESNET, 101), "ResNet-101 (torchvision)"},
    {CNN("resnet152", VRAM_FAMILY_RESNET, 152), "ResNet-152 (torchvision)"},
    {CNN("vgg16", VRAM_FAMILY_VGG, 16), "VGG-16 without batch norm (torchvision)"},
    {CNN("mobilenet-v2", VRAM_FAMILY_MOBILENET_V2, 0), "MobileNetV2 1.0 (torchvision)"},
    {CNN("efficientnet-b0", VRAM_FAMILY_EFFICIENTNET, 0), "EfficientNet-B0 (torchvision)"},
    {RNN("lstm-lm", VRAM_FAMILY_LSTM), "2-layer LSTM LM, 650 units, tied (word_language_model)"},
    {RNN("gru-lm", VRAM_FAMILY_GRU), "2-layer GRU LM, 650 units, tied (word_language_model)"},
};

#define CATALOG_LEN (sizeof catalog / sizeof catalog[0])

/* Other spellings people use for the same models. */
static const struct {
    const char *alias, *name;
} aliases[] = {
    {"bert-base-uncased", "bert-base"},
    {"bert-large-uncased", "bert-large"},
    {"gpt2-small", "gpt2"},
    {"t5-v1.0-small", "t5-small"},
    {"llama2-7b", "llama-2-7b"},
    {"llama2-13b", "llama-2-13b"},
    {"llama2-70b", "llama-2-70b"},
    {"llama3-8b", "llama-3-8b"},
    {"llama3-70b", "llama-3-70b"},
    {"mistral-7b-v0.1", "mistral-7b"},
    {"vit-b16", "vit-b-16"},
    {"vit-l16", "vit-l-16"},
    {"mobilenetv2", "mobilenet-v2"},
    {"efficientnetb0", "efficientnet-b0"},
};

/* Lower case, '_' and ' ' as '-'. */
static void normalize(const char *in, char *out, size_t len)
{
    size_t i = 0;
    for (; in[i] && i + 1 < len; i++) {
        char c = (char)tolower((unsigned char)in[i]);
        out[i] = (c == '_' || c == ' ') ? '-' : c;
    }
    out[i] = '\0';
}

int vram_model_find(const char *name, vram_model_t *out)
{
    if (!name || !*name) return vram_fail(VRAM_EINVAL, "empty model name");
    char key[64];
    normalize(name, key, sizeof key);
    for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
        if (!strcmp(key, aliases[i].alias)) snprintf(key, sizeof key, "%s", aliases[i].name);
    for (size_t i = 0; i < CATALOG_LEN; i++)
        if (!strcmp(key, catalog[i].model.name)) {
            *out = catalog[i].model;
            return 0;
        }
    /* the three closest names */
    size_t best[3] = {0, 0, 0}, dist[3] = {SIZE_MAX, SIZE_MAX, SIZE_MAX};
    for (size_t i = 0; i < CATALOG_LEN; i++) {
        size_t d = vram_edit_distance(key, catalog[i].model.name);
        for (int k = 0; k < 3; k++)
            if (d < dist[k]) {
                for (int j = 2; j > k; j--) {
                    dist[j] = dist[j - 1];
                    best[j] = best[j - 1];
                }
                dist[k] = d;
                best[k] = i;
                break;
            }
    }
    return vram_fail(VRAM_ENOENT,
                     "unknown model \"%s\"; did you mean %s, %s or %s? ('vram estimate --list' "
                     "shows the catalog; --hf-config or --profile describe other models)",
                     name, catalog[best[0]].model.name, catalog[best[1]].model.name,
                     catalog[best[2]].model.name);
}

static const char *names[CATALOG_LEN];
static pthread_once_t names_once = PTHREAD_ONCE_INIT;

static void fill_names(void)
{
    for (size_t i = 0; i < CATALOG_LEN; i++)
        names[i] = catalog[i].model.name;
}

const char *const *vram_model_names(size_t *count)
{
    pthread_once(&names_once, fill_names);
    *count = CATALOG_LEN;
    return names;
}

const char *vram_model_description(const char *name)
{
    for (size_t i = 0; name && i < CATALOG_LEN; i++)
        if (!strcmp(name, catalog[i].model.name)) return catalog[i].description;
    return "";
}
