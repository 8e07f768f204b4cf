/* Speech models: Whisper (log-mel frames through two convolutions into an
 * encoder, a text decoder with cross-attention) and wav2vec2 (a
 * convolutional feature encoder over raw 16 kHz samples, then a BERT-like
 * encoder). Parameters follow the Hugging Face modules; activations use the
 * same terms as the text families (docs/estimation.md, "Speech"). */
#include "arch_parts.h"

#include <math.h>

/* q, k, v, o of Whisper/wav2vec2 attention: k_proj has no bias in Whisper. */
static void attention(vram_arch_params_t *p, int64_t h, bool k_bias)
{
    linear(p, h, h, true);
    linear(p, h, h, k_bias);
    linear(p, h, h, true);
    linear(p, h, h, true);
}

static void ffn(vram_arch_params_t *p, int64_t h, int64_t I)
{
    linear(p, I, h, true);
    linear(p, h, I, true);
}

static void whisper_params(const vram_model_t *m, vram_arch_params_t *p)
{
    int64_t d = m->hidden_size, I = m->intermediate_size;
    /* conv1 (mel bins -> d, kernel 3), conv2 (d -> d, kernel 3, stride 2) */
    vram_arch_add_tensor(p, (uint64_t)d, (uint64_t)m->num_mel_bins, 3);
    vram_arch_add_tensor(p, 1, (uint64_t)d, 1);
    vram_arch_add_tensor(p, (uint64_t)d, (uint64_t)d, 3);
    vram_arch_add_tensor(p, 1, (uint64_t)d, 1);
    linear(p, m->max_source_positions, d, false); /* sinusoidal, stored as a parameter */
    vram_arch_params_t layer = {0};
    attention(&layer, d, false);
    norm(&layer, d, true);
    ffn(&layer, d, I);
    norm(&layer, d, true);
    vram_arch_add_repeated(p, &layer, (uint64_t)m->num_layers);
    norm(p, d, true);
    linear(p, m->vocab_size, d, false);
    linear(p, m->max_positions, d, false);
    layer = (vram_arch_params_t){0};
    attention(&layer, d, false);
    norm(&layer, d, true);
    attention(&layer, d, false); /* cross-attention */
    norm(&layer, d, true);
    ffn(&layer, d, I);
    norm(&layer, d, true);
    vram_arch_add_repeated(p, &layer, (uint64_t)m->num_decoder_layers);
    norm(p, d, true);
}

static void wav2vec2_params(const vram_model_t *m, vram_arch_params_t *p)
{
    int64_t h = m->hidden_size, in = 1;
    for (int64_t i = 0; i < m->conv_layers; i++) {
        int64_t c = m->conv_dim[i];
        vram_arch_add_tensor(p, (uint64_t)c, (uint64_t)in, (uint64_t)m->conv_kernel[i]);
        if (m->conv_bias) vram_arch_add_tensor(p, 1, (uint64_t)c, 1);
        /* "group": one GroupNorm after the first conv; "layer": a LayerNorm after each */
        if (!m->conv_group_norm || i == 0) norm(p, c, true);
        in = c;
    }
    norm(p, in, true);                          /* feature_projection.layer_norm */
    linear(p, h, in, true);                     /* feature_projection.projection */
    vram_arch_add_tensor(p, 1, (uint64_t)h, 1); /* masked_spec_embed */
    /* positional convolution with weight norm: weight_v, weight_g, bias */
    vram_arch_add_tensor(p, (uint64_t)h, (uint64_t)(h / m->pos_conv_groups),
                         (uint64_t)m->pos_conv_kernel);
    vram_arch_add_tensor(p, 1, (uint64_t)m->pos_conv_kernel, 1);
    vram_arch_add_tensor(p, 1, (uint64_t)h, 1);
    norm(p, h, true); /* encoder.layer_norm */
    vram_arch_params_t layer = {0};
    attention(&layer, h, true);
    norm(&layer, h, true);
    ffn(&layer, h, m->intermediate_size);
    norm(&layer, h, true);
    vram_arch_add_repeated(p, &layer, (uint64_t)m->num_layers);
}

int vram_arch_audio_params(const vram_model_t *m, vram_arch_params_t *p)
{
    int rc = vram_arch_check_shape(m);
    if (rc) return rc;
    if (m->family == VRAM_FAMILY_WHISPER) {
        if (m->num_mel_bins <= 0 || m->max_source_positions <= 0 || m->max_positions <= 0)
            return vram_fail(VRAM_EINVAL,
                             "model \"%s\": mel bins, source and target positions must be "
                             "positive",
                             m->name);
        whisper_params(m, p);
        return 0;
    }
    if (m->conv_layers <= 0 || m->pos_conv_groups <= 0 || m->pos_conv_kernel <= 0 ||
        m->hidden_size % m->pos_conv_groups)
        return vram_fail(VRAM_EINVAL,
                         "model \"%s\": wav2vec2 needs conv layers and a positional conv whose "
                         "groups divide the hidden size",
                         m->name);
    wav2vec2_params(m, p);
    return 0;
}

/* Frames out of the feature encoder for `samples` raw samples (0 when the
 * input is shorter than the receptive field). */
int64_t vram_arch_wav2vec2_frames(const vram_model_t *m, int64_t samples)
{
    int64_t len = samples;
    for (int64_t i = 0; i < m->conv_layers && len > 0; i++)
        len = len < m->conv_kernel[i] ? 0 : (len - m->conv_kernel[i]) / m->conv_stride[i] + 1;
    return len;
}

/* Cross-attention of a decoder layer: norm, its output into q, q and the
 * context, the core over the encoder frames, and the encoder output's k
 * and v for this layer. */
static double cross_attention(const vram_arch_shape_t *p, double b, double sd, double frames,
                              double h, double a)
{
    double tokd = b * sd;
    return tokd * (p->f32 * h + 2 * STAT + fed(p, 1) * h + 2 * p->mm * h) +
           attention_core(p, b, a, sd, frames, false) + p->mm * b * frames * 2 * h;
}

static int whisper_acts(const vram_model_t *m, const vram_arch_shape_t *sh, double *bytes)
{
    double b = (double)sh->batch, h = (double)m->hidden_size, I = (double)m->intermediate_size;
    double a = (double)m->num_heads, frames = (double)m->max_source_positions;
    double mel = (double)m->num_mel_bins, sd = (double)sh->seq;
    layer_acts_t enc = classic_layer(sh, b, frames, h, I, a, false, 3, 2 * sh->mm, 2);
    layer_acts_t dec = classic_layer(sh, b, sd, h, I, a, false, 3, 2 * sh->mm, 2);
    double cross = cross_attention(sh, b, sd, frames, h, a);
    dec.layer += cross;
    /* SDPA: q made contiguous, its output copied (encoder, decoder, cross) */
    enc.layer += b * frames * sdpa_extra(m, sh, h, h);
    dec.layer += 2 * b * sd * sdpa_extra(m, sh, h, h);
    if (!sh->training) {
        *bytes = max2(enc.working, dec.working) + sh->mm * b * mel * 2 * frames;
        return 0;
    }
    /* the log-mel input (30 s = 2 x frames) kept by conv1; conv1's output
     * (GELU's input) and GELU's output (conv2's input) over 2 x frames;
     * conv2's output (GELU's input; its output is only added to the
     * positions, which keeps nothing) */
    double total = fed(sh, 1) * b * mel * 2 * frames + sh->mm * b * h * 5 * frames;
    total += stack(&enc, (double)m->num_layers, sh->checkpointing);
    /* final encoder LayerNorm; its output feeds every layer's k and v */
    total += b * frames * (sh->f32 * h + 2 * STAT + fed(sh, 2 * (int)m->num_decoder_layers) * h);
    total += IDX * b * sd + stack(&dec, (double)m->num_decoder_layers, sh->checkpointing);
    total += b * sd * (sh->f32 * h + 2 * STAT);
    *bytes = total;
    return 0;
}

static int wav2vec2_acts(const vram_model_t *m, const vram_arch_shape_t *sh, double *bytes)
{
    double b = (double)sh->batch, h = (double)m->hidden_size, I = (double)m->intermediate_size;
    double a = (double)m->num_heads;
    int64_t frames = vram_arch_wav2vec2_frames(m, sh->seq);
    if (frames < 1)
        return vram_fail(VRAM_EINVAL,
                         "model \"%s\": %lld samples are shorter than the feature encoder's "
                         "receptive field (use --seq-len in samples, 16000 per second)",
                         m->name, (long long)sh->seq);
    double T = (double)frames;
    layer_acts_t l = classic_layer(sh, b, T, h, I, a, true, 3, 2 * sh->mm, 2);
    /* feature encoder: each conv keeps its input, GELU its input and output */
    double conv = 0, peak = 0, len = (double)sh->seq, in_ch = 1, total = 0;
    for (int64_t i = 0; i < m->conv_layers; i++) {
        double out_len = floor((len - (double)m->conv_kernel[i]) / (double)m->conv_stride[i]) + 1;
        double out = b * (double)m->conv_dim[i] * out_len;
        double in = b * in_ch * len;
        conv += (i == 0 ? fed(sh, 1) * in : 0) + 2 * sh->mm * out;
        if (i == 0 || !m->conv_group_norm) conv += sh->f32 * out + 2 * STAT * b * out_len;
        peak = max2(peak, sh->mm * (in + 2 * out));
        len = out_len;
        in_ch = (double)m->conv_dim[i];
    }
    if (!sh->training) {
        *bytes = max2(peak, l.working);
        return 0;
    }
    total = conv;
    /* projection LayerNorm, projection, positional conv (input, output,
     * GELU output), encoder LayerNorm, dropout */
    total += b * T * (in_ch * sh->f32 + 2 * STAT + fed(sh, 1) * in_ch);
    total += b * T * h * (fed(sh, 1) + 3 * sh->mm + sh->f32) + 2 * STAT * b * T + MASK * b * T * h;
    total += stack(&l, (double)m->num_layers, sh->checkpointing);
    *bytes = total;
    return 0;
}

int vram_arch_audio_acts(const vram_model_t *m, const vram_arch_shape_t *sh, double *bytes)
{
    int rc = vram_arch_check_shape(m);
    if (rc) return rc;
    return m->family == VRAM_FAMILY_WHISPER ? whisper_acts(m, sh, bytes)
                                            : wav2vec2_acts(m, sh, bytes);
}
