/* The estimate settings, each defined once: key, flag, type, field, names,
 * limits and help (vram.h, vram_estimate_settings). The CLI, the JSON API,
 * --help and the Slurm plugin all read this table. */
#include "estimate_limits.h"
#include "gpu_names.h"
#include "vram.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef vram_estimate_config_t cfg_t;
/* A setting whose text does more than store one value. */
typedef int (*setter_t)(cfg_t *c, const char *v);

#define NOFIELD ((size_t)-1)
#define F(name) offsetof(cfg_t, name), sizeof(((cfg_t *)0)->name)

static int set_mode(cfg_t *c, const char *v)
{
    if (!strcmp(v, "train"))
        c->mode = VRAM_MODE_TRAIN;
    else if (!strcmp(v, "infer") || !strcmp(v, "inference"))
        c->mode = VRAM_MODE_INFER;
    else if (!strcmp(v, "load"))
        c->mode = VRAM_MODE_LOAD;
    else
        return 1;
    return 0;
}

static int set_precision(cfg_t *c, const char *v)
{
    return vram_precision_parse(v, &c->precision);
}
static int set_optimizer(cfg_t *c, const char *v)
{
    return vram_optimizer_parse(v, &c->optimizer);
}
static int set_checkpointing(cfg_t *c, const char *v)
{
    return vram_checkpointing_parse(v, &c->checkpointing);
}
static int set_lora_targets(cfg_t *c, const char *v)
{
    return vram_lora_targets_parse(v, &c->lora_targets);
}
static int set_head(cfg_t *c, const char *v)
{
    return vram_head_parse(v, &c->head);
}

static int set_attention(cfg_t *c, const char *v)
{
    if (!strcmp(v, "auto")) {
        c->attention_from_model = true;
        c->fused_attention = false;
        return 0;
    }
    bool fused = !strcmp(v, "fused") || !strcmp(v, "sdpa") || !strcmp(v, "flash");
    if (!fused && strcmp(v, "eager")) return 1;
    c->attention_from_model = false;
    c->fused_attention = fused;
    return 0;
}

static int set_loss(cfg_t *c, const char *v)
{
    if (strcmp(v, "chunked") && strcmp(v, "full") && strcmp(v, "sum")) return 1;
    c->chunked_loss = !strcmp(v, "chunked");
    c->sum_loss = !strcmp(v, "sum");
    return 0;
}

/* PyTorch before 2.0 zeroed gradients in place by default: they stay
 * allocated from one step into the next. */
static int set_zero_grad(cfg_t *c, const char *v)
{
    if (strcmp(v, "zeros") && strcmp(v, "none")) return 1;
    c->grads_kept = !strcmp(v, "zeros");
    return 0;
}

static int set_cuda(cfg_t *c, const char *v)
{
    int major, minor, len = 0;
    if (sscanf(v, "%d.%d%n", &major, &minor, &len) != 2 || v[len] || major < 9 || major > 19 ||
        minor < 0 || minor > 9)
        return 1;
    c->cuda_version = major * 10 + minor;
    return 0;
}

/* "4.45" or "4.45.2": the transformers release (major x 100 + minor). */
static int set_transformers(cfg_t *c, const char *v)
{
    int major, minor, patch, len = 0, more = 0;
    if (sscanf(v, "%d.%d%n", &major, &minor, &len) != 2) return 1;
    if (v[len] == '.' && sscanf(v + len + 1, "%d%n", &patch, &more) == 1 && patch >= 0)
        len += 1 + more; /* the patch release changes nothing the estimate models */
    if (v[len] || major < 4 || major > 9 || minor < 0 || minor > 99) return 1;
    c->transformers_version = major * 100 + minor;
    return 0;
}

static int set_gpu_name(cfg_t *c, const char *v)
{
    const vram_gpu_model_t *g = vram_gpu_model_resolve(v, NULL);
    if (!g) return vram_gpu_model_unknown(v);
    c->gpu_cc = g->cc_major * 10 + g->cc_minor;
    return 0;
}

/* The table: X(key, flag, type, names, min, max, group, metavar, help,
 * field, setter). field is F(name) for a value stored as its type says, or
 * NOF with a setter for a setting whose text does more. */
#define W   "Workload"
#define L   "LoRA / QLoRA"
#define G   "Real GPU"
#define NOF NOFIELD, 0
#define SETTINGS(X)                                                                                \
    X("mode", "--mode", NAME, "train, infer, load", 0, 0, W, "M",                                  \
      "train (default), infer, or load (the weights on the GPU, nothing run yet)", NOF, set_mode)  \
    X("batch_size", "--batch-size", INT, NULL, 1, VRAM_MAX_BATCH, W, "B", "per GPU, default 1",    \
      F(batch_size), NULL)                                                                         \
    X("seq_len", "--seq-len", INT, NULL, 1, VRAM_MAX_SEQ, W, "S",                                  \
      "tokens per sample (default: the model's)", F(seq_len), NULL)                                \
    X("image_size", "--image-size", INT, NULL, 1, VRAM_MAX_IMAGE, W, "N",                          \
      "pixels per side (default: the model's, 224)", F(image_size), NULL)                          \
    X("precision", "--precision", NAME, "fp32, fp16, bf16, amp-fp16, amp-bf16, int8, int4", 0, 0,  \
      W, "P",                                                                                      \
      "fp16/bf16: every tensor in half precision; amp-*: autocast over fp32\n"                     \
      "weights; int8, int4: inference only; default fp32",                                         \
      NOF, set_precision)                                                                          \
    X("optimizer", "--optimizer", NAME, "sgd, momentum, adam, adamw, adafactor, adam8bit", 0, 0,   \
      W, "O", "default adamw", NOF, set_optimizer)                                                 \
    X("checkpointing", "--checkpointing", NAME, "none, full, selective", 0, 0, W, "C",             \
      "activation checkpointing (default none)", NOF, set_checkpointing)                           \
    X("attention", "--attention", NAME, "auto, eager, fused, sdpa, flash", 0, 0, W, "A",           \
      "auto (default: Hugging Face's choice for the family, eager for the\n"                       \
      "catalog), eager (keeps the attention scores), fused (SDPA/Flash)",                          \
      NOF, set_attention)                                                                          \
    X("zero_stage", "--zero", INT, NULL, 0, 3, W, "Z",                                             \
      "ZeRO/FSDP stage 0-3: shard optimizer states (1), gradients (2),\n"                          \
      "parameters (3) over --gpus; with LoRA, the adapters' and the base's",                       \
      F(zero_stage), NULL)                                                                         \
    X("sharding", "--sharding", NAME, "deepspeed, fsdp", 0, 0, W, "S",                             \
      "deepspeed (default): half weights and gradients, fp32 master weights\n"                     \
      "and states; fsdp: every tensor in --precision (pure bf16 FSDP)",                            \
      F(sharding), NULL)                                                                           \
    X("gpus", "--gpus", INT, NULL, 1, VRAM_MAX_GPUS, W, "N",                                       \
      "data-parallel GPUs the states are sharded over", F(gpus), NULL)                             \
    X("max_new_tokens", "--max-new-tokens", INT, NULL, 0, VRAM_MAX_SEQ, W, "T",                    \
      "inference: generated tokens held in the KV cache", F(max_new_tokens), NULL)                 \
    X("overhead_bytes", "--overhead", SIZE, NULL, 0, VRAM_MAX_BYTES, W, "SIZE",                    \
      "CUDA context + workspaces (default: by GPU and CUDA version)", F(overhead_bytes), NULL)     \
    X("accumulation_steps", "--accumulation-steps", INT, NULL, 1, VRAM_MAX_ACCUMULATION, W, "N",   \
      "gradient accumulation (effective batch B*N; gradients stay\n"                               \
      "allocated between micro-batches)",                                                          \
      F(accumulation_steps), NULL)                                                                 \
    X("head", "--head", TEXT, NULL, 0, 0, W, "CLASS",                                              \
      "the class the model is loaded with, over the config's architectures\n"                      \
      "(BertForSequenceClassification or ForSequenceClassification; Model)",                       \
      NOF, set_head)                                                                               \
    X("num_labels", "--num-labels", INT, NULL, 1, VRAM_MAX_VOCAB, W, "N",                          \
      "labels of a classification head", F(num_labels), NULL)                                      \
    X("lora_rank", "--lora-rank", INT, NULL, 1, VRAM_MAX_WIDTH, L, "R",                            \
      "train rank-R adapters; the base is frozen", F(lora_rank), NULL)                             \
    X("lora_alpha", "--lora-alpha", NUMBER, NULL, 0, 1000000000, L, "A",                           \
      "scaling (reported; no memory effect)", F(lora_alpha), NULL)                                 \
    X("lora_targets", "--lora-targets", TEXT, NULL, 0, 0, L, "T",                                  \
      "q,k,v,o,gate,up,down or all-linear (default q,v)", NOF, set_lora_targets)                   \
    X("quantize_base", "--quantize-base", NAME, "none, nf4, int8", 0, 0, L, "Q",                   \
      "nf4 or int8 frozen base (QLoRA)", F(quantize_base), NULL)                                   \
    X("double_quant", "--double-quant", BOOL, NULL, 0, 0, L, "on|off",                             \
      "quantize the NF4 constants too (default on)", F(double_quant), NULL)                        \
    X("gpu_name", "--gpu-name", TEXT, NULL, 0, 0, G, "NAME",                                       \
      "GPU (H100, A100-40GB, L40S, rtx4090): context and workspaces", NOF, set_gpu_name)           \
    X("cuda", "--cuda", TEXT, NULL, 0, 0, G, "X.Y",                                                \
      "CUDA version as 11.8 or 12.4 (default 12.x); before 11.7 no lazy loading", NOF, set_cuda)   \
    X("lazy_loading", "--lazy-loading", BOOL, NULL, 0, 0, G, "on|off",                             \
      "CUDA_MODULE_LOADING=LAZY (default: by CUDA version)", F(lazy_loading), NULL)                \
    X("optimizer_impl", "--optimizer-impl", NAME, "foreach, fused, for-loop, auto", 0, 0, G, "I",  \
      "how torch.optim steps: foreach, fused, for-loop; auto (default): the\n"                     \
      "framework's (torchtune's configs: fused; otherwise foreach)",                               \
      F(optim_impl), NULL)                                                                         \
    X("activation_offload", "--activation-offload", BOOL, NULL, 0, 0, G, "on|off",                 \
      "checkpointed layer inputs on the CPU (needs --checkpointing full)", F(activation_offload),  \
      NULL)                                                                                        \
    X("loss", "--loss", NAME, "full, chunked, sum", 0, 0, G, "L",                                  \
      "full (cross-entropy), chunked (torchtune's CEWithChunkedOutputLoss),\n"                     \
      "sum (benchmarks' logits.sum())",                                                            \
      NOF, set_loss)                                                                               \
    X("zero_grad", "--zero-grad", NAME, "none, zeros", 0, 0, G, "Z",                               \
      "zero_grad(set_to_none=...): zeros (PyTorch < 2.0's default) keeps\n"                        \
      "gradients allocated between steps",                                                         \
      NOF, set_zero_grad)                                                                          \
    X("compile", "--compile", BOOL, NULL, 0, 0, G, "on|off",                                       \
      "torch.compile over the layers and the loss (torchtune compile=True):\n"                     \
      "inductor's partitioner recomputes pointwise ops instead of saving them",                    \
      F(compiled_loss), NULL)                                                                      \
    X("compute_dtype", "--compute-dtype", NAME, "auto, fp32, fp16, bf16", 0, 0, L, "D",            \
      "NF4 base: the dtype bitsandbytes computes in (bnb_4bit_compute_dtype;\n"                    \
      "transformers' default fp32); auto = --precision",                                           \
      F(quant_compute), NULL)                                                                      \
    X("transformers", "--transformers", TEXT, NULL, 0, 0, G, "X.Y",                                \
      "the transformers release the model runs with (default 5.x); older\n"                        \
      "code keeps other tensors (eager attention before a model's SDPA)",                          \
      NOF, set_transformers)                                                                       \
    X("framework", "--framework", NAME, "transformers, torchtune", 0, 0, G, "F",                   \
      "whose modules build the model: transformers (default) or torchtune\n"                       \
      "(k and v expanded to every query head, RMSNorm over an fp32 copy)",                         \
      F(framework), NULL)

#define PUB(key, flag, type, names, lo, hi, group, metavar, help, field, set)                      \
    {key, flag, VRAM_SETTING_##type, names, lo, hi, group, metavar, help},
static const vram_estimate_setting_t pub[] = {SETTINGS(PUB)};
#undef PUB

/* How each setting is stored: its field, or a setter. */
static const struct impl {
    size_t offset, size; /* the field, for INT/NUMBER/BOOL/SIZE/plain NAME */
    setter_t set;        /* or a setter */
} impl[] = {
#define IMPL(key, flag, type, names, lo, hi, group, metavar, help, field, set) {field, set},
    SETTINGS(IMPL)
#undef IMPL
};
#undef W
#undef L
#undef G

#define NROWS (sizeof pub / sizeof pub[0])
_Static_assert(NROWS <= VRAM_MAX_SETTINGS, "plan_json.c tracks at most VRAM_MAX_SETTINGS keys");

_Static_assert(sizeof impl / sizeof impl[0] == NROWS, "one storage row per setting");

const vram_estimate_setting_t *vram_estimate_settings(size_t *count)
{
    if (count) *count = NROWS;
    return pub;
}

/* k is the flag's name without "--", '_' for '-' ("zero", "optimizer_impl"):
 * the spelling of keyword arguments that follow the flags. */
static bool is_flag_name(const char *k, const char *flag)
{
    flag += 2;
    for (; *k && *flag; k++, flag++)
        if (*k != *flag && !(*k == '_' && *flag == '-')) return false;
    return !*k && !*flag;
}

const vram_estimate_setting_t *vram_estimate_setting_find(const char *k)
{
    if (!k) return NULL;
    for (size_t i = 0; i < NROWS; i++)
        if (!strcmp(k, pub[i].key) || !strcmp(k, pub[i].flag)) return &pub[i];
    for (size_t i = 0; i < NROWS; i++)
        if (is_flag_name(k, pub[i].flag)) return &pub[i];
    return NULL;
}

/* The index of v in ", "-separated names; -1 if absent. */
static int name_index(const char *names, const char *v)
{
    int i = 0;
    size_t n = strlen(v);
    for (const char *p = names; *p; i++) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == n && !strncmp(p, v, n)) return i;
        if (!end) break;
        p = end + 2;
    }
    return -1;
}

static void store_int(void *field, size_t size, int64_t v)
{
    if (size == sizeof(int64_t))
        *(int64_t *)field = v;
    else if (size == sizeof(int))
        *(int *)field = (int)v;
}

static int parse_bool(const char *v, bool *out)
{
    if (!strcmp(v, "on") || !strcmp(v, "yes") || !strcmp(v, "true"))
        *out = true;
    else if (!strcmp(v, "off") || !strcmp(v, "no") || !strcmp(v, "false"))
        *out = false;
    else
        return 1;
    return 0;
}

/* Parses v into *c by the setting's type; nonzero (message not set) when
 * bad. */
static int apply(const vram_estimate_setting_t *s, cfg_t *c, const char *v)
{
    const struct impl *r = &impl[s - pub];
    if (r->set) return r->set(c, v);
    char *field = (char *)c + r->offset;
    switch (s->type) {
    case VRAM_SETTING_INT: {
        char *end;
        long long n = strtoll(v, &end, 10);
        if (end == v || *end || n < s->min || n > s->max) return 1;
        store_int(field, r->size, n);
        return 0;
    }
    case VRAM_SETTING_NUMBER: {
        char *end;
        double x = strtod(v, &end);
        if (end == v || *end || !(x > (double)s->min && x < (double)s->max)) return 1;
        *(double *)field = x;
        return 0;
    }
    case VRAM_SETTING_BOOL: {
        bool b;
        if (parse_bool(v, &b)) return 1;
        if (r->offset == offsetof(cfg_t, lazy_loading))
            c->lazy_loading = b ? 1 : 2; /* 0 is "by CUDA version" */
        else
            *(bool *)field = b;
        return 0;
    }
    case VRAM_SETTING_SIZE: {
        uint64_t bytes;
        if (vram_parse_size(v, &bytes) || bytes > (uint64_t)s->max) return 1;
        *(uint64_t *)field = bytes;
        return 0;
    }
    case VRAM_SETTING_NAME: {
        int i = name_index(s->names, v);
        if (i < 0) return 1;
        *(int *)field = i; /* the enums' values are the names' order */
        return 0;
    }
    case VRAM_SETTING_TEXT:
        return 1;
    }
    return 1;
}

/* What a bad value of `s` should have been; `name` is the key or flag the
 * caller gave. */
static int refuse(const vram_estimate_setting_t *s, const char *name, const char *v)
{
    const char *last = *vram_last_error() ? vram_last_error() : "not a valid value";
    switch (s->type) {
    case VRAM_SETTING_INT:
        return vram_fail(VRAM_EINVAL, "%s \"%s\": give an integer from %lld to %lld", name, v,
                         (long long)s->min, (long long)s->max);
    case VRAM_SETTING_NUMBER:
        return vram_fail(VRAM_EINVAL, "%s \"%s\": give a number above %lld and below %lld", name, v,
                         (long long)s->min, (long long)s->max);
    case VRAM_SETTING_BOOL:
        return vram_fail(VRAM_EINVAL, "%s \"%s\": use on or off", name, v);
    case VRAM_SETTING_SIZE:
        return vram_fail(VRAM_EINVAL, "%s \"%s\": give a size such as 512MiB, at most 1EiB", name,
                         v);
    case VRAM_SETTING_NAME:
        return vram_fail(VRAM_EINVAL, "unknown %s \"%s\" (use %s)", name, v, s->names);
    case VRAM_SETTING_TEXT:
        break;
    }
    if (!strcmp(s->key, "cuda"))
        return vram_fail(VRAM_EINVAL, "%s \"%s\": give the CUDA version as 11.8 or 12.4", name, v);
    if (!strcmp(s->key, "transformers"))
        return vram_fail(VRAM_EINVAL, "%s \"%s\": give the transformers version as 4.45 or 5.0",
                         name, v);
    char copy[512];
    snprintf(copy, sizeof copy, "%s", last);
    return vram_fail(VRAM_EINVAL, "%s: %s", name, copy);
}

int vram_estimate_set(cfg_t *c, const char *key, const char *value)
{
    if (!c || !key || !value) return vram_fail(VRAM_EINVAL, "vram_estimate_set: NULL argument");
    const vram_estimate_setting_t *st = vram_estimate_setting_find(key);
    if (!st) {
        char known[1024] = "";
        for (size_t i = 0; i < NROWS; i++) {
            if (i) strncat(known, ", ", sizeof known - strlen(known) - 1);
            strncat(known, pub[i].key, sizeof known - strlen(known) - 1);
        }
        return vram_fail(VRAM_EINVAL, "unknown estimate setting \"%s\" (known: %s)", key, known);
    }
    cfg_t copy = *c;
    vram_clear_error(); /* a setter's parser may say what was wrong */
    if (apply(st, &copy, value)) return refuse(st, key, value);
    *c = copy;
    return 0;
}
