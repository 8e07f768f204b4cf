/* Dispatch from a model's family to its architecture code. */
#include "arch.h"

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

static bool is_transformer(vram_family_t f)
{
    return f == VRAM_FAMILY_BERT || f == VRAM_FAMILY_GPT2 || f == VRAM_FAMILY_GPTNEOX ||
           f == VRAM_FAMILY_LLAMA || f == VRAM_FAMILY_T5 || f == VRAM_FAMILY_VIT;
}

static bool is_cnn(vram_family_t f)
{
    return f == VRAM_FAMILY_RESNET || f == VRAM_FAMILY_VGG || f == VRAM_FAMILY_MOBILENET_V2 ||
           f == VRAM_FAMILY_EFFICIENTNET;
}

/* Third-edition families other than the generic decoder (arch_more.c). */
static bool is_more(vram_family_t f)
{
    return f == VRAM_FAMILY_BART || f == VRAM_FAMILY_DISTILBERT || f == VRAM_FAMILY_DEBERTA_V2 ||
           f == VRAM_FAMILY_CLIP || f == VRAM_FAMILY_CLIP_VISION || f == VRAM_FAMILY_MAMBA;
}

bool vram_arch_is_image(const vram_model_t *m)
{
    return m->family == VRAM_FAMILY_VIT || m->family == VRAM_FAMILY_CLIP_VISION ||
           is_cnn(m->family);
}

/* A generation cache: keys and values, or Mamba's scan state. */
bool vram_arch_has_kv_cache(const vram_model_t *m)
{
    return vram_arch_is_decoder(m) || m->family == VRAM_FAMILY_T5 ||
           m->family == VRAM_FAMILY_WHISPER || m->family == VRAM_FAMILY_BART ||
           m->family == VRAM_FAMILY_MAMBA;
}

static bool is_audio(vram_family_t f)
{
    return f == VRAM_FAMILY_WHISPER || f == VRAM_FAMILY_WAV2VEC2;
}

bool vram_arch_has_layers(const vram_model_t *m)
{
    return is_transformer(m->family) || vram_arch_is_decoder(m) || is_audio(m->family) ||
           is_more(m->family);
}

/* The base model's parameters, then its head's. */
static int base_params(const vram_model_t *m, vram_arch_params_t *p)
{
    if (is_audio(m->family)) return vram_arch_audio_params(m, p);
    if (m->family == VRAM_FAMILY_DECODER) return vram_arch_generic_params(m, p);
    if (is_more(m->family)) return vram_arch_more_params(m, p);
    if (vram_arch_is_decoder(m) && !is_transformer(m->family))
        return vram_arch_decoder_params(m, p);
    return vram_arch_transformer_params(m, p);
}

int vram_arch_params(const vram_model_t *m, vram_arch_params_t *p)
{
    *p = (vram_arch_params_t){0};
    if (vram_arch_has_layers(m)) {
        int rc = base_params(m, p);
        if (!rc) vram_arch_head_params(m, p);
        return rc;
    }
    if (is_cnn(m->family)) return vram_arch_cnn_params(m, p);
    if (m->family == VRAM_FAMILY_LSTM || m->family == VRAM_FAMILY_GRU)
        return vram_arch_rnn_params(m, p);
    if (m->family == VRAM_FAMILY_PROFILE) {
        p->params = m->profile_parameters;
        p->tensors = 0;
        p->factored = m->profile_parameters; /* shapes unknown: no factoring */
        p->buffer_bytes = m->profile_buffers_bytes;
        return 0;
    }
    return vram_fail(VRAM_EINVAL, "model \"%s\" has an unknown family %d", m->name, (int)m->family);
}

/* Output positions the head sees: wav2vec2's frames, else the tokens. */
static double head_tokens(const vram_model_t *m, const vram_arch_shape_t *s)
{
    double b = (double)s->batch;
    if (m->family == VRAM_FAMILY_WAV2VEC2) return b * (double)vram_arch_wav2vec2_frames(m, s->seq);
    return b * (double)s->seq;
}

int vram_arch_acts(const vram_model_t *m, const vram_arch_shape_t *s, double *bytes)
{
    if (vram_arch_has_layers(m)) {
        int rc;
        if (is_audio(m->family))
            rc = vram_arch_audio_acts(m, s, bytes);
        else if (m->family == VRAM_FAMILY_DECODER)
            rc = vram_arch_generic_acts(m, s, bytes);
        else if (is_more(m->family))
            rc = vram_arch_more_acts(m, s, bytes);
        else if (is_transformer(m->family))
            rc = vram_arch_transformer_acts(m, s, bytes);
        else
            rc = vram_arch_decoder_acts(m, s, bytes);
        if (!rc) *bytes += vram_arch_head_acts(m, s, head_tokens(m, s));
        return rc;
    }
    if (is_cnn(m->family)) return vram_arch_cnn_acts(m, s, bytes);
    if (m->family == VRAM_FAMILY_LSTM || m->family == VRAM_FAMILY_GRU)
        return vram_arch_rnn_acts(m, s, bytes);
    if (m->family == VRAM_FAMILY_PROFILE) {
        /* measured in the profile's dtype; scaled to the compute dtype */
        double scale = m->profile_dtype_bytes > 0 ? s->mm / m->profile_dtype_bytes : 1;
        double per = (double)m->profile_act_per_sample, fixed = (double)m->profile_act_fixed;
        if (s->training && s->checkpointing != VRAM_CKPT_NONE) per *= 0.5; /* no layer shapes */
        *bytes = scale * (per * (double)s->batch + fixed);
        return 0;
    }
    return vram_fail(VRAM_EINVAL, "model \"%s\" has an unknown family %d", m->name, (int)m->family);
}
