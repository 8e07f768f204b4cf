/* Dispatch from a model's family to its architecture code. */
#include "arch.h"
#include "lora.h"

#include <string.h>

/* Saturating arithmetic: a count that does not fit stays at UINT64_MAX,
 * which the readers and vram_estimate refuse (above VRAM_MAX_PARAMETERS),
 * instead of wrapping to a small, plausible number. */
static uint64_t sat_add(uint64_t a, uint64_t b)
{
    uint64_t r;
    return __builtin_add_overflow(a, b, &r) ? UINT64_MAX : r;
}

static uint64_t sat_mul(uint64_t a, uint64_t b)
{
    uint64_t r;
    return __builtin_mul_overflow(a, b, &r) ? UINT64_MAX : r;
}

/* Counts `count` tensors of `elems` in their size class. When the classes
 * are used up, a new size joins the nearest larger class (or the largest),
 * which can only overstate the allocator's rounding. */
static void add_size(vram_arch_params_t *p, uint64_t elems, uint64_t count)
{
    int best = -1;
    for (int i = 0; i < p->nsizes; i++) {
        if (p->sizes[i].elems == elems) {
            p->sizes[i].count = sat_add(p->sizes[i].count, count);
            return;
        }
        if (p->sizes[i].elems > elems && (best < 0 || p->sizes[i].elems < p->sizes[best].elems))
            best = i;
    }
    if (p->nsizes < VRAM_ARCH_SIZE_CLASSES) {
        p->sizes[p->nsizes].elems = elems;
        p->sizes[p->nsizes++].count = count;
        return;
    }
    if (best < 0) {
        best = 0;
        for (int i = 1; i < p->nsizes; i++)
            if (p->sizes[i].elems > p->sizes[best].elems) best = i;
        p->sizes[best].elems = elems;
    }
    p->sizes[best].count = sat_add(p->sizes[best].count, count);
}

void vram_arch_add_tensor(vram_arch_params_t *p, uint64_t lead, uint64_t rows, uint64_t cols)
{
    uint64_t elems = sat_mul(sat_mul(lead, rows), cols);
    p->params = sat_add(p->params, elems);
    if (elems > p->max_tensor) p->max_tensor = elems;
    add_size(p, elems, 1);
    p->tensors = sat_add(p->tensors, 1);
    /* Adafactor factors the last two dimensions of a matrix into a row and
     * a column vector; vectors keep a full second moment. */
    p->factored =
        sat_add(p->factored, (cols == 1 && lead == 1) ? rows : sat_mul(lead, sat_add(rows, cols)));
}

void vram_arch_add_repeated(vram_arch_params_t *p, const vram_arch_params_t *block, uint64_t n)
{
    p->params = sat_add(p->params, sat_mul(block->params, n));
    if (n > 0 && block->max_tensor > p->max_tensor) p->max_tensor = block->max_tensor;
    for (int i = 0; i < block->nsizes; i++)
        add_size(p, block->sizes[i].elems, sat_mul(block->sizes[i].count, n));
    p->tensors = sat_add(p->tensors, sat_mul(block->tensors, n));
    p->factored = sat_add(p->factored, sat_mul(block->factored, n));
    p->buffer_bytes = sat_add(p->buffer_bytes, sat_mul(block->buffer_bytes, n));
    p->buffer_i64 = sat_add(p->buffer_i64, sat_mul(block->buffer_i64, n));
}

static int profile_params(const vram_model_t *m, vram_arch_params_t *p)
{
    p->params = m->profile_parameters;
    p->tensors = 0;
    p->factored = m->profile_parameters; /* shapes unknown: no factoring */
    p->buffer_bytes = m->profile_buffers_bytes;
    return 0;
}

static int profile_acts(const vram_model_t *m, const vram_arch_shape_t *s, double *bytes)
{
    /* measured in the profile's dtype; scaled to the compute dtype */
    double scale = m->profile_dtype_bytes > 0 ? s->mm / m->profile_dtype_bytes : 1;
    double per = (double)m->profile_act_per_sample, fixed = (double)m->profile_act_fixed;
    if (s->training && s->checkpointing != VRAM_CKPT_NONE) per *= 0.5; /* no layer shapes */
    *bytes = scale * (per * (double)s->batch + fixed);
    return 0;
}

/* What a family is to the estimator: one row (docs/estimation.md, "Family
 * table"): parameters, activations, what it has, and its LoRA targets (the
 * linears PEFT adapts and QLoRA quantizes: lora.c, arch_lora.c; NULL: no
 * LoRA). The config.json readers are rows too, by model_type (hf_read.h). */
enum {
    LAYERS = 1u << 0,  /* a transformer-style layer stack: heads from arch_head.c */
    IMAGE = 1u << 1,   /* input is an image (--image-size), no sequence */
    KV = 1u << 2,      /* generation keeps a cache (arch_kv.c) */
    DECODER = 1u << 3, /* decoder-only: causal LM head by default */
};

typedef struct {
    int (*params)(const vram_model_t *m, vram_arch_params_t *p);
    int (*acts)(const vram_model_t *m, const vram_arch_shape_t *s, double *bytes);
    unsigned flags;
    void (*lora)(const vram_model_t *m, vram_lora_linears_t *l);
} family_row_t;

#define TRANSFORMER vram_arch_transformer_params, vram_arch_transformer_acts
#define DECODERS    vram_arch_decoder_params, vram_arch_decoder_acts
#define AUDIO       vram_arch_audio_params, vram_arch_audio_acts
#define MORE        vram_arch_more_params, vram_arch_more_acts
#define CNN         vram_arch_cnn_params, vram_arch_cnn_acts
#define RNN         vram_arch_rnn_params, vram_arch_rnn_acts

static const family_row_t rows[] = {
    [VRAM_FAMILY_BERT] = {TRANSFORMER, LAYERS, vram_lora_two_layer},
    [VRAM_FAMILY_GPT2] = {TRANSFORMER, LAYERS | KV | DECODER, vram_lora_fused_qkv},
    [VRAM_FAMILY_GPTNEOX] = {TRANSFORMER, LAYERS | KV | DECODER, vram_lora_fused_qkv},
    [VRAM_FAMILY_LLAMA] = {TRANSFORMER, LAYERS | KV | DECODER, vram_lora_llama},
    [VRAM_FAMILY_T5] = {TRANSFORMER, LAYERS | KV, vram_lora_t5},
    [VRAM_FAMILY_VIT] = {TRANSFORMER, LAYERS | IMAGE},
    [VRAM_FAMILY_RESNET] = {CNN, IMAGE},
    [VRAM_FAMILY_VGG] = {CNN, IMAGE},
    [VRAM_FAMILY_MOBILENET_V2] = {CNN, IMAGE},
    [VRAM_FAMILY_EFFICIENTNET] = {CNN, IMAGE},
    [VRAM_FAMILY_LSTM] = {RNN, 0},
    [VRAM_FAMILY_GRU] = {RNN, 0},
    [VRAM_FAMILY_PROFILE] = {profile_params, profile_acts, 0},
    [VRAM_FAMILY_QWEN2] = {DECODERS, LAYERS | KV | DECODER, vram_lora_llama},
    [VRAM_FAMILY_PHI] = {DECODERS, LAYERS | KV | DECODER, vram_lora_two_layer},
    [VRAM_FAMILY_PHI3] = {DECODERS, LAYERS | KV | DECODER, vram_lora_phi3},
    [VRAM_FAMILY_GEMMA] = {DECODERS, LAYERS | KV | DECODER, vram_lora_llama},
    [VRAM_FAMILY_GEMMA2] = {DECODERS, LAYERS | KV | DECODER, vram_lora_llama},
    [VRAM_FAMILY_OPT] = {DECODERS, LAYERS | KV | DECODER, vram_lora_two_layer},
    [VRAM_FAMILY_GPT_BIGCODE] = {DECODERS, LAYERS | KV | DECODER, vram_lora_fused_qkv},
    [VRAM_FAMILY_MIXTRAL] = {DECODERS, LAYERS | KV | DECODER, vram_lora_mixtral},
    [VRAM_FAMILY_QWEN2_MOE] = {DECODERS, LAYERS | KV | DECODER, vram_lora_qwen2_moe},
    [VRAM_FAMILY_WHISPER] = {AUDIO, LAYERS | KV, vram_lora_whisper},
    [VRAM_FAMILY_WAV2VEC2] = {AUDIO, LAYERS, vram_lora_two_layer},
    [VRAM_FAMILY_DECODER] = {vram_arch_generic_params, vram_arch_generic_acts,
                             LAYERS | KV | DECODER, vram_lora_decoder},
    [VRAM_FAMILY_BART] = {MORE, LAYERS | KV, vram_lora_bart},
    [VRAM_FAMILY_DISTILBERT] = {MORE, LAYERS, vram_lora_encoder},
    [VRAM_FAMILY_DEBERTA_V2] = {MORE, LAYERS, vram_lora_encoder},
    [VRAM_FAMILY_CLIP] = {MORE, LAYERS, vram_lora_clip},
    [VRAM_FAMILY_CLIP_VISION] = {MORE, LAYERS | IMAGE, vram_lora_encoder},
    [VRAM_FAMILY_MAMBA] = {MORE, LAYERS | KV, vram_lora_mamba},
};

static const family_row_t *row(const vram_model_t *m)
{
    size_t f = (size_t)m->family;
    return f < sizeof rows / sizeof *rows && rows[f].params ? &rows[f] : NULL;
}

static bool has(const vram_model_t *m, unsigned flag)
{
    const family_row_t *r = row(m);
    return r && (r->flags & flag);
}

bool vram_arch_is_image(const vram_model_t *m)
{
    return has(m, IMAGE);
}

/* A generation cache: keys and values, or Mamba's scan state. */
bool vram_arch_has_kv_cache(const vram_model_t *m)
{
    return has(m, KV);
}

bool vram_arch_is_decoder(const vram_model_t *m)
{
    return has(m, DECODER);
}

bool vram_arch_has_layers(const vram_model_t *m)
{
    return has(m, LAYERS);
}

static int unknown(const vram_model_t *m)
{
    return vram_fail(VRAM_EINVAL, "model \"%s\" has an unknown family %d", m->name, (int)m->family);
}

/* The base model's parameters, then its head's. */
int vram_arch_params(const vram_model_t *m, vram_arch_params_t *p)
{
    *p = (vram_arch_params_t){0};
    const family_row_t *r = row(m);
    if (!r) return unknown(m);
    int rc = r->params(m, p);
    if (!rc && (r->flags & LAYERS)) vram_arch_head_params(m, p);
    return rc;
}

/* Output positions the head sees: wav2vec2's frames, else the tokens. */
static double head_tokens(const vram_model_t *m, const vram_arch_shape_t *s)
{
    double b = (double)s->batch;
    if (m->family == VRAM_FAMILY_WAV2VEC2) return b * (double)vram_arch_wav2vec2_frames(m, s->seq);
    return b * (double)s->seq;
}

int vram_lora_linears(const vram_model_t *m, vram_lora_linears_t *l)
{
    const family_row_t *r = row(m);
    l->n = 0;
    if (!r || !r->lora || m->num_heads <= 0)
        return vram_fail(VRAM_EINVAL,
                         "LoRA is not supported for %s models (transformer families only)",
                         vram_family_name(m->family));
    r->lora(m, l);
    return 0;
}

int vram_arch_acts(const vram_model_t *m, const vram_arch_shape_t *s, double *bytes)
{
    const family_row_t *r = row(m);
    if (!r) return unknown(m);
    int rc = r->acts(m, s, bytes);
    if (!rc && (r->flags & LAYERS)) *bytes += vram_arch_head_acts(m, s, head_tokens(m, s));
    return rc;
}
