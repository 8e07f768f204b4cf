/* Names of the estimator's settings, for flags, reports and JSON. */
#include "vram.h"

#include <string.h>
#include <strings.h>

static const char *const precisions[] = {"fp32",     "fp16", "bf16", "amp-fp16",
                                         "amp-bf16", "int8", "int4"};
static const char *const optimizers[] = {"sgd",   "momentum",  "adam",
                                         "adamw", "adafactor", "adam8bit"};
static const char *const checkpointings[] = {"none", "full", "selective"};
static const char *const families[] = {
    "bert",      "gpt2",         "gpt-neox",     "llama",   "t5",   "vit",         "resnet",
    "vgg",       "mobilenet-v2", "efficientnet", "lstm",    "gru",  "profile",     "qwen2",
    "phi",       "phi3",         "gemma",        "gemma2",  "opt",  "gpt-bigcode", "mixtral",
    "qwen2-moe", "whisper",      "wav2vec2",     "decoder", "bart", "distilbert",  "deberta-v2",
    "clip",      "clip-vision",  "mamba"};
static const char *const fits[] = {"fits", "tight", "will not fit"};

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

static int parse(const char *what, const char *s, const char *const *names, size_t n, int *out)
{
    for (size_t i = 0; s && i < n; i++)
        if (!strcasecmp(s, names[i])) {
            *out = (int)i;
            return 0;
        }
    char list[160] = "";
    for (size_t i = 0; i < n; i++) {
        if (i) strncat(list, ", ", sizeof list - strlen(list) - 1);
        strncat(list, names[i], sizeof list - strlen(list) - 1);
    }
    return vram_fail(VRAM_EINVAL, "unknown %s \"%s\" (use %s)", what, s ? s : "", list);
}

int vram_precision_parse(const char *s, vram_precision_t *out)
{
    int v, rc = parse("precision", s, precisions, COUNT(precisions), &v);
    if (!rc) *out = (vram_precision_t)v;
    return rc;
}

int vram_optimizer_parse(const char *s, vram_optimizer_t *out)
{
    int v, rc = parse("optimizer", s, optimizers, COUNT(optimizers), &v);
    if (!rc) *out = (vram_optimizer_t)v;
    return rc;
}

int vram_checkpointing_parse(const char *s, vram_checkpointing_t *out)
{
    int v, rc = parse("checkpointing", s, checkpointings, COUNT(checkpointings), &v);
    if (!rc) *out = (vram_checkpointing_t)v;
    return rc;
}

static const char *name_of(const char *const *names, size_t n, int v)
{
    return v >= 0 && (size_t)v < n ? names[v] : "unknown";
}

const char *vram_precision_name(vram_precision_t p)
{
    return name_of(precisions, COUNT(precisions), (int)p);
}

const char *vram_optimizer_name(vram_optimizer_t o)
{
    return name_of(optimizers, COUNT(optimizers), (int)o);
}

const char *vram_checkpointing_name(vram_checkpointing_t c)
{
    return name_of(checkpointings, COUNT(checkpointings), (int)c);
}

const char *vram_family_name(vram_family_t f)
{
    return name_of(families, COUNT(families), (int)f);
}

const char *vram_fit_name(vram_fit_t f)
{
    return name_of(fits, COUNT(fits), (int)f);
}

int vram_head_parse(const char *name, vram_head_t *out)
{
    static const struct {
        const char *suffix;
        vram_head_t head;
    } heads[] = {
        {"ForMaskedLM", VRAM_HEAD_MASKED_LM},
        {"ForCausalLM", VRAM_HEAD_CAUSAL_LM},
        {"LMHeadModel", VRAM_HEAD_CAUSAL_LM},
        {"ForSequenceClassification", VRAM_HEAD_SEQ_CLS},
        {"ForAudioClassification", VRAM_HEAD_SEQ_CLS},
        {"ForTokenClassification", VRAM_HEAD_TOKEN_CLS},
        {"ForQuestionAnswering", VRAM_HEAD_QA},
        {"ForConditionalGeneration", VRAM_HEAD_COND_GEN},
        {"ForImageClassification", VRAM_HEAD_IMAGE_CLS},
        {"ForCTC", VRAM_HEAD_CTC},
        {"ForPreTraining", VRAM_HEAD_MASKED_LM},
        {"Model", VRAM_HEAD_BASE},
    };
    size_t ln = name ? strlen(name) : 0;
    for (size_t i = 0; i < COUNT(heads); i++) {
        size_t ls = strlen(heads[i].suffix);
        if (ln >= ls && !strcmp(name + ln - ls, heads[i].suffix)) {
            *out = heads[i].head;
            return 0;
        }
    }
    return vram_fail(VRAM_EINVAL, "unknown head \"%s\" (a transformers class name ending in %s)",
                     name ? name : "", VRAM_HEAD_SUFFIXES);
}
