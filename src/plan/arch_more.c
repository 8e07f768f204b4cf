/* Third-edition families that are not plain decoders: BART and mBART,
 * DistilBERT, DeBERTa-v2, CLIP and its vision tower, Mamba. Parameters
 * follow transformers' modeling files module by module; activations are
 * built from the same terms as BERT's and GPT-2's (docs/estimation.md,
 * "Family table", which lists how close each family is measured). */
#include "arch_parts.h"

static void attn(vram_arch_params_t *p, int64_t h)
{
    for (int j = 0; j < 4; j++)
        linear(p, h, h, true);
}

static void ffn(vram_arch_params_t *p, int64_t h, int64_t I)
{
    linear(p, I, h, true);
    linear(p, h, I, true);
}

static void bart_params(const vram_model_t *m, vram_arch_params_t *p)
{
    int64_t h = m->hidden_size, I = m->intermediate_size, P = m->max_positions + 2;
    linear(p, m->vocab_size, h, false); /* shared, both stacks' embed_tokens */
    linear(p, P, h, false);
    biased_encoder_layers(p, h, I, m->num_layers);
    norm(p, h, true); /* layernorm_embedding */
    if (m->final_norms) norm(p, h, true);
    linear(p, P, h, false);
    vram_arch_params_t layer = {0};
    attn(&layer, h);
    norm(&layer, h, true);
    attn(&layer, h);
    norm(&layer, h, true);
    ffn(&layer, h, I);
    norm(&layer, h, true);
    vram_arch_add_repeated(p, &layer, (uint64_t)m->num_decoder_layers);
    norm(p, h, true);
    if (m->final_norms) norm(p, h, true);
}

static void deberta_params(const vram_model_t *m, vram_arch_params_t *p)
{
    int64_t h = m->hidden_size;
    linear(p, m->vocab_size, h, false);
    if (m->max_positions > 0) linear(p, m->max_positions, h, false);
    if (m->type_vocab_size > 0) linear(p, m->type_vocab_size, h, false);
    norm(p, h, true);
    vram_arch_params_t layer = {0};
    attn(&layer, h); /* query_proj, key_proj, value_proj, output.dense */
    if (m->pos_key_proj) linear(&layer, h, h, true);
    if (m->pos_query_proj) linear(&layer, h, h, true);
    norm(&layer, h, true);
    ffn(&layer, h, m->intermediate_size);
    norm(&layer, h, true);
    vram_arch_add_repeated(p, &layer, (uint64_t)m->num_layers);
    if (m->position_buckets > 0) linear(p, 2 * m->position_buckets, h, false);
    if (m->rel_embed_norm) norm(p, h, true);
}

static void vision_tower(const vram_model_t *m, vram_arch_params_t *p)
{
    int64_t h = m->hidden_size, n = m->image_size / m->patch_size;
    vram_arch_add_tensor(p, 1, (uint64_t)h, 1); /* class_embedding */
    vram_arch_add_tensor(p, (uint64_t)(h * m->num_channels), (uint64_t)m->patch_size,
                         (uint64_t)m->patch_size);
    linear(p, n * n + 1, h, false);
    norm(p, h, true); /* pre_layrnorm */
    biased_encoder_layers(p, h, m->intermediate_size, m->num_layers);
    norm(p, h, true); /* post_layernorm */
}

static void mamba_params(const vram_model_t *m, vram_arch_params_t *p)
{
    int64_t h = m->hidden_size, I = m->ssm_inner, N = m->ssm_state, R = m->ssm_dt_rank;
    linear(p, m->vocab_size, h, false);
    vram_arch_params_t layer = {0};
    norm(&layer, h, false);
    vram_arch_add_tensor(&layer, 1, (uint64_t)I, (uint64_t)N); /* A_log */
    vram_arch_add_tensor(&layer, 1, (uint64_t)I, 1);           /* D */
    vram_arch_add_tensor(&layer, (uint64_t)I, 1, (uint64_t)m->ssm_conv);
    if (m->conv_bias) vram_arch_add_tensor(&layer, 1, (uint64_t)I, 1);
    linear(&layer, 2 * I, h, m->mlp_bias); /* in_proj */
    linear(&layer, R + 2 * N, I, false);   /* x_proj */
    linear(&layer, I, R, true);            /* dt_proj */
    linear(&layer, h, I, m->mlp_bias);     /* out_proj */
    vram_arch_add_repeated(p, &layer, (uint64_t)m->num_layers);
    norm(p, h, false);
}

int vram_arch_more_params(const vram_model_t *m, vram_arch_params_t *p)
{
    int rc = vram_arch_check_shape(m);
    if (rc) return rc;
    int64_t h = m->hidden_size;
    switch (m->family) {
    case VRAM_FAMILY_BART:
        bart_params(m, p);
        return 0;
    case VRAM_FAMILY_DISTILBERT:
        linear(p, m->vocab_size, h, false);
        linear(p, m->max_positions, h, false);
        norm(p, h, true);
        biased_encoder_layers(p, h, m->intermediate_size, m->num_layers);
        return 0;
    case VRAM_FAMILY_DEBERTA_V2:
        deberta_params(m, p);
        return 0;
    case VRAM_FAMILY_CLIP_VISION:
        vision_tower(m, p);
        return 0;
    case VRAM_FAMILY_CLIP: {
        int64_t t = m->text_hidden;
        linear(p, m->vocab_size, t, false);
        linear(p, m->text_positions, t, false);
        biased_encoder_layers(p, t, m->text_intermediate, m->text_layers);
        norm(p, t, true);
        vision_tower(m, p);
        linear(p, m->projection_dim, h, false);
        linear(p, m->projection_dim, t, false);
        vram_arch_add_tensor(p, 1, 1, 1); /* logit_scale */
        return 0;
    }
    case VRAM_FAMILY_MAMBA:
        mamba_params(m, p);
        return 0;
    default:
        return vram_fail(VRAM_EINVAL, "model \"%s\": not a third-edition family", m->name);
    }
}

/* ---------------------------------------------------------------------- */
/* Activations                                                              */
/* ---------------------------------------------------------------------- */

/* A CLIP tower (pre-LN, quick_gelu MLP: its input, the sigmoid and the
 * product) over `s` positions. */
static layer_acts_t clip_layer(const vram_arch_shape_t *p, double b, double s, double h, double I,
                               double a)
{
    return classic_layer(p, b, s, h, I, a, false, 3, 3 * p->mm, 2);
}

/* CLIP's towers: the vision tower keeps the pixels (patch conv), its
 * pre_layrnorm over every position, the layers, and post_layernorm over the
 * class token only; the text tower the ids (positions are a buffer), the
 * layers, final_layer_norm over every token and the eos positions
 * (argmax). Each pooled output feeds its projection. */
static int clip_acts(const vram_model_t *m, const vram_arch_shape_t *sh, double *bytes)
{
    double b = (double)sh->batch, img = (double)sh->image, h = (double)m->hidden_size;
    double n = (double)((sh->image / m->patch_size) * (sh->image / m->patch_size)) + 1;
    double pixels = (double)m->num_channels * img * img, ln = sh->f32 * h + 2 * STAT;
    layer_acts_t v = clip_layer(sh, b, n, h, (double)m->intermediate_size, (double)m->num_heads);
    /* post_layernorm reads the class token as a view: it keeps the whole
     * last hidden state's storage */
    double vision = fed(sh, 1) * b * pixels + b * n * ln +
                    stack(&v, (double)m->num_layers, sh->checkpointing) + sh->f32 * b * n * h +
                    2 * STAT * b;
    if (m->family == VRAM_FAMILY_CLIP_VISION) {
        *bytes = sh->training ? vision : sh->mm * b * pixels + v.working;
        return 0;
    }
    double s = (double)sh->seq, t = (double)m->text_hidden, pd = (double)m->projection_dim;
    layer_acts_t tl = clip_layer(sh, b, s, t, (double)m->text_intermediate, (double)m->text_heads);
    if (!sh->training) {
        *bytes = max2(sh->mm * b * pixels + v.working, tl.working);
        return 0;
    }
    double text = IDX * b * s + stack(&tl, (double)m->text_layers, sh->checkpointing) +
                  b * s * (sh->f32 * t + 2 * STAT) + IDX * b;
    /* the pooled outputs into the projections, the normalized embeddings,
     * the b x b similarity logits and both cross-entropies */
    double head = fed(sh, 1) * b * (h + t) + 2 * b * pd * (3 * sh->f32) + 2 * logits(sh, b, b);
    *bytes = vision + text + head;
    return 0;
}

/* Mamba as transformers runs it without the mamba-ssm kernels (its torch
 * path: causal_conv1d_fn and mamba_selective_scan), per token and layer:
 * the RMSNorm and its output into in_proj; the conv's input and output;
 * x_proj's, dt_proj's and out_proj's inputs; the scan's dt (softplus and
 * its two uses), the discretized A and B·u (inner x state each), the state
 * after every step (inner x state), its two inner-wide outputs and the
 * gate's SiLU; per layer exp(A) twice and the initial state. */
static int mamba_acts(const vram_model_t *m, const vram_arch_shape_t *sh, double *bytes)
{
    double b = (double)sh->batch, s = (double)sh->seq, tok = b * s, h = (double)m->hidden_size;
    double I = (double)m->ssm_inner, N = (double)m->ssm_state, R = (double)m->ssm_dt_rank;
    layer_acts_t l;
    l.core = 0;
    l.layer = tok * (rms_norm(sh, h) + h * fed(sh, 1) + sh->mm * (10 * I + R + 3 * I * N)) +
              sh->mm * (2 * I * N + b * I * N);
    l.input = sh->f32 * tok * h;
    l.working = sh->mm * tok * (h + 4 * I + 2 * I * N);
    if (!sh->training) {
        *bytes = l.working;
        return 0;
    }
    *bytes =
        IDX * tok + stack(&l, (double)m->num_layers, sh->checkpointing) + tok * rms_norm(sh, h);
    return 0;
}

/* DeBERTa-v2's disentangled attention (DisentangledSelfAttention), per
 * layer beyond BERT's: the padding mask (1 byte per score); the relative
 * embeddings' dropout mask and their projection input (2k x h, 2k = twice
 * the position buckets); for each of c2p and p2c the projected positions
 * (per batch and head, 2k x head_dim), the scores against them (q_len x 2k)
 * and the gather's int64 index (s x s, shared by the batch); p2c also a
 * contiguous copy of the keys. */
static double deberta_extra(const vram_model_t *m, const vram_arch_shape_t *p, double b, double s)
{
    double h = (double)m->hidden_size, a = (double)m->num_heads, d = h / a;
    double k2 = 2 * (double)(m->position_buckets > 0 ? m->position_buckets : m->max_positions);
    double x = MASK * b * s * s + k2 * h * (MASK + p->f32);
    for (int dir = 0; dir < 2; dir++) {
        if (!(m->rel_att_types & (1 << dir))) continue;
        x += p->mm * b * a * k2 * (d + s) + IDX * s * s;
        if (dir == 1) x += p->mm * b * s * h;
    }
    return x;
}

int vram_arch_more_acts(const vram_model_t *m, const vram_arch_shape_t *sh, double *bytes)
{
    int rc = vram_arch_check_shape(m);
    if (rc) return rc;
    double b = (double)sh->batch, s = (double)sh->seq, tok = b * s;
    double h = (double)m->hidden_size, I = (double)m->intermediate_size, a = (double)m->num_heads;
    double L = (double)m->num_layers;
    if (m->family == VRAM_FAMILY_CLIP || m->family == VRAM_FAMILY_CLIP_VISION)
        return clip_acts(m, sh, bytes);
    if (m->family == VRAM_FAMILY_MAMBA) return mamba_acts(m, sh, bytes);
    /* encoders: BERT's layer (residual dropout, GELU); DeBERTa's
     * disentangled attention adds its c2p and p2c scores. BART trains
     * without attention dropout (attention_dropout 0): only its two
     * residual dropout masks */
    bool bart = m->family == VRAM_FAMILY_BART;
    layer_acts_t l = classic_layer(sh, b, s, h, I, a, !bart, 3, 2 * sh->mm, 2);
    if (bart) l.layer += MASK * 2 * tok * h;
    /* DistilBERT drops out only after the MLP (no dropout after out_lin) */
    if (m->family == VRAM_FAMILY_DISTILBERT) l.layer -= MASK * tok * h;
    if (m->family == VRAM_FAMILY_DEBERTA_V2) l.layer += deberta_extra(m, sh, b, s);
    if (!sh->training) {
        *bytes = l.working;
        return 0;
    }
    /* ids (and position ids where they are not a buffer), the embedding
     * LayerNorm and dropout */
    double ids = m->family == VRAM_FAMILY_DISTILBERT ? IDX * tok : IDX * (tok + s);
    double total = ids + tok * (sh->f32 * h + 2 * STAT + MASK * h);
    total += stack(&l, L, sh->checkpointing);
    /* the encoders' last hidden state, which the head consumes */
    if (!bart) total += fed(sh, 1) * tok * h;
    if (m->family == VRAM_FAMILY_BART) {
        /* the decoder: self-attention, cross-attention over the encoder
         * output (whose k and v every layer keeps), the MLP */
        layer_acts_t d = classic_layer(sh, b, s, h, I, a, false, 3, 2 * sh->mm, 2);
        d.layer += tok * (sh->f32 * h + 2 * STAT + fed(sh, 1) * h + 2 * sh->mm * h + 3 * MASK * h) +
                   attention_core(sh, b, a, s, s, false) + sh->mm * tok * 2 * h;
        double D = (double)m->num_decoder_layers;
        total += IDX * (tok + s) + tok * (sh->f32 * h + 2 * STAT + MASK * h);
        total += fed(sh, 2 * (int)D) * tok * h + stack(&d, D, sh->checkpointing);
        /* mBART: a LayerNorm after each stack */
        if (m->final_norms) total += 2 * tok * (sh->f32 * h + 2 * STAT);
    }
    *bytes = total;
    return 0;
}
