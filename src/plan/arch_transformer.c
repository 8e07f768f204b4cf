/* Transformer families: parameter counts from the layer shapes, and the
 * activations an eager PyTorch training step saves for backward, counted
 * tensor by tensor (docs/estimation.md derives every term; the counts were
 * checked against saved_tensors_hooks in bench/estimate/). */
#include "arch.h"

/* Bytes of fp32 statistics and int64 indices. */
#define STAT 4.0
#define IDX  8.0
#define MASK 1.0

static void linear(vram_arch_params_t *p, int64_t out, int64_t in, bool bias)
{
    vram_arch_add_tensor(p, 1, (uint64_t)out, (uint64_t)in);
    if (bias) vram_arch_add_tensor(p, 1, (uint64_t)out, 1);
}

static void norm(vram_arch_params_t *p, int64_t h, bool bias)
{
    vram_arch_add_tensor(p, 1, (uint64_t)h, 1);
    if (bias) vram_arch_add_tensor(p, 1, (uint64_t)h, 1);
}

static int64_t kv_heads(const vram_model_t *m)
{
    return m->num_kv_heads > 0 ? m->num_kv_heads : m->num_heads;
}

static int64_t head_dim(const vram_model_t *m)
{
    return m->head_dim > 0 ? m->head_dim : m->hidden_size / m->num_heads;
}

static int check_shape(const vram_model_t *m)
{
    if (m->hidden_size <= 0 || m->num_layers <= 0 || m->num_heads <= 0)
        return vram_fail(VRAM_EINVAL,
                         "model \"%s\": hidden size, layers and heads must be positive", m->name);
    if (m->head_dim <= 0 && m->hidden_size % m->num_heads)
        return vram_fail(VRAM_EINVAL,
                         "model \"%s\": hidden size %lld is not divisible by %lld attention heads",
                         m->name, (long long)m->hidden_size, (long long)m->num_heads);
    if (m->num_heads % kv_heads(m))
        return vram_fail(VRAM_EINVAL,
                         "model \"%s\": %lld attention heads are not a multiple of %lld key/value "
                         "heads",
                         m->name, (long long)m->num_heads, (long long)kv_heads(m));
    if (m->intermediate_size <= 0)
        return vram_fail(VRAM_EINVAL, "model \"%s\": intermediate (MLP) size must be positive",
                         m->name);
    if (m->family != VRAM_FAMILY_VIT && m->vocab_size <= 0)
        return vram_fail(VRAM_EINVAL, "model \"%s\": vocabulary size must be positive", m->name);
    if (m->family == VRAM_FAMILY_VIT &&
        (m->patch_size <= 0 || m->image_size < m->patch_size || m->num_channels <= 0))
        return vram_fail(VRAM_EINVAL,
                         "model \"%s\": image size, patch size and channels are invalid", m->name);
    return 0;
}

static void t5_attention(vram_arch_params_t *p, const vram_model_t *m, bool rel_bias)
{
    int64_t inner = m->num_heads * head_dim(m), d = m->hidden_size;
    linear(p, inner, d, false);
    linear(p, inner, d, false);
    linear(p, inner, d, false);
    linear(p, d, inner, false);
    if (rel_bias) vram_arch_add_tensor(p, 1, (uint64_t)m->relative_buckets, (uint64_t)m->num_heads);
    norm(p, d, false);
}

static void t5_ff(vram_arch_params_t *p, const vram_model_t *m)
{
    int64_t d = m->hidden_size, f = m->intermediate_size;
    linear(p, f, d, false);
    if (m->gated_mlp) linear(p, f, d, false);
    linear(p, d, f, false);
    norm(p, d, false);
}

int vram_arch_transformer_params(const vram_model_t *m, vram_arch_params_t *p)
{
    int rc = check_shape(m);
    if (rc) return rc;
    int64_t h = m->hidden_size, I = m->intermediate_size, V = m->vocab_size, L = m->num_layers;
    int64_t inner = m->num_heads * head_dim(m), kv = kv_heads(m) * head_dim(m);
    switch (m->family) {
    case VRAM_FAMILY_BERT:
        linear(p, V, h, false);
        linear(p, m->max_positions + m->position_offset, h, false);
        linear(p, m->type_vocab_size, h, false);
        norm(p, h, true);
        for (int64_t i = 0; i < L; i++) {
            for (int j = 0; j < 4; j++)
                linear(p, h, h, true);
            norm(p, h, true);
            linear(p, I, h, true);
            linear(p, h, I, true);
            norm(p, h, true);
        }
        if (m->has_pooler) linear(p, h, h, true);
        return 0;
    case VRAM_FAMILY_GPT2:
    case VRAM_FAMILY_GPTNEOX:
        linear(p, V, h, false);
        if (m->family == VRAM_FAMILY_GPT2) linear(p, m->max_positions, h, false);
        for (int64_t i = 0; i < L; i++) {
            norm(p, h, true);
            linear(p, 3 * h, h, true);
            linear(p, h, h, true);
            norm(p, h, true);
            linear(p, I, h, true);
            linear(p, h, I, true);
        }
        norm(p, h, true);
        if (!m->tied_embeddings) linear(p, V, h, false);
        return 0;
    case VRAM_FAMILY_LLAMA:
        linear(p, V, h, false);
        for (int64_t i = 0; i < L; i++) {
            norm(p, h, false);
            linear(p, inner, h, false);
            linear(p, kv, h, false);
            linear(p, kv, h, false);
            linear(p, h, inner, false);
            norm(p, h, false);
            linear(p, I, h, false);
            linear(p, I, h, false);
            linear(p, h, I, false);
        }
        norm(p, h, false);
        if (!m->tied_embeddings) linear(p, V, h, false);
        return 0;
    case VRAM_FAMILY_T5: {
        int64_t dec = m->num_decoder_layers > 0 ? m->num_decoder_layers : L;
        linear(p, V, h, false);
        for (int64_t i = 0; i < L; i++) {
            t5_attention(p, m, i == 0);
            t5_ff(p, m);
        }
        norm(p, h, false);
        for (int64_t i = 0; i < dec; i++) {
            t5_attention(p, m, i == 0);
            t5_attention(p, m, false);
            t5_ff(p, m);
        }
        norm(p, h, false);
        if (!m->tied_embeddings) linear(p, V, h, false);
        return 0;
    }
    case VRAM_FAMILY_VIT: {
        int64_t n = (m->image_size / m->patch_size) * (m->image_size / m->patch_size);
        vram_arch_add_tensor(p, (uint64_t)(h * m->num_channels), (uint64_t)m->patch_size,
                             (uint64_t)m->patch_size);
        vram_arch_add_tensor(p, 1, (uint64_t)h, 1); /* conv bias */
        vram_arch_add_tensor(p, 1, 1, (uint64_t)h); /* class token */
        vram_arch_add_tensor(p, 1, (uint64_t)(n + 1), (uint64_t)h);
        for (int64_t i = 0; i < L; i++) {
            norm(p, h, true);
            linear(p, 3 * h, h, true);
            linear(p, h, h, true);
            norm(p, h, true);
            linear(p, I, h, true);
            linear(p, h, I, true);
        }
        norm(p, h, true);
        if (m->has_pooler) linear(p, h, h, true);
        if (m->num_classes > 0) linear(p, m->num_classes, h, true);
        return 0;
    }
    default:
        return vram_fail(VRAM_EINVAL, "model \"%s\" is not a transformer", m->name);
    }
}

/* ---------------------------------------------------------------------- */
/* Activations. Per layer, `unit(x)` is a float tensor of x elements per    */
/* token; masks are torch.bool; LayerNorm keeps mean and rstd in fp32.      */
/* ---------------------------------------------------------------------- */

typedef struct {
    double layer;   /* one layer, everything saved */
    double core;    /* its attention core (scores, softmax, dropout): selective recomputes it */
    double input;   /* its input, all that full checkpointing keeps */
    double working; /* inference: peak working set of one layer */
} layer_acts_t;

/* Self- or cross-attention over q_len queries and kv_len keys, with dropout
 * probability > 0 when `dropout`. Returns the bytes of the attention core. */
static double attention_core(double e, double b, double heads, double q_len, double kv_len,
                             bool dropout)
{
    double scores = b * heads * q_len * kv_len;
    /* softmax output (kept by softmax and by probs @ V); with dropout also
     * the mask and the dropped probabilities that probs @ V keeps instead */
    return dropout ? scores * (2 * e + MASK) : scores * e;
}

/* Inference working set of attention: q, k, v, context, scores and probs. */
static double attention_working(double e, double b, double s, double h, double kvd, double heads,
                                double kv_len)
{
    return e * b * (s * (2 * h) + 2 * kv_len * kvd + 2 * heads * s * kv_len);
}

static double max2(double a, double b)
{
    return a > b ? a : b;
}

static double stack(const layer_acts_t *l, double layers, vram_checkpointing_t ck)
{
    switch (ck) {
    case VRAM_CKPT_FULL:
        /* layer inputs, plus one layer recomputed during backward */
        return layers * l->input + l->layer;
    case VRAM_CKPT_SELECTIVE:
        return layers * (l->layer - l->core) + l->core;
    default:
        return layers * l->layer;
    }
}

/* BERT/RoBERTa (post-LN) and GPT-2 (pre-LN) layers save the same tensors:
 * layer input, q, k, v, context, the attention output's LayerNorm input
 * and output (or in GPT-2: ln_1 output and ln_2 input/output), MLP input of
 * the activation and its output; two dropout masks; softmax, its dropout
 * mask and output. */
static layer_acts_t classic_layer(double e, double b, double s, double h, double I, double a,
                                  bool dropout, double mlp_tensors)
{
    layer_acts_t l;
    double tok = b * s;
    l.core = attention_core(e, b, a, s, s, dropout);
    l.layer = e * tok * (8 * h + mlp_tensors * I) + (dropout ? MASK * tok * 2 * h : 0) +
              2 * 2 * STAT * tok + l.core;
    l.input = e * tok * h;
    l.working = e * tok * h + max2(attention_working(e, b, s, h, h, a, s), e * tok * 2 * I);
    return l;
}

/* LLaMA: RMSNorm keeps its input, its square (pow keeps its result), 1/rms,
 * the normalized tensor and its output; rotary keeps q and k rotated; k and v (repeated for GQA: a
 * copy of the full width); SwiGLU keeps gate, silu(gate), up and their product. */
static layer_acts_t llama_layer(double e, double b, double s, double h, double I, double a)
{
    layer_acts_t l;
    double tok = b * s;
    l.core = attention_core(e, b, a, s, s, false);
    l.layer = e * tok * (12 * h + 4 * I + 2) + l.core;
    l.input = e * tok * h;
    l.working = e * tok * h + max2(attention_working(e, b, s, h, h, a, s), e * tok * 3 * I);
    return l;
}

/* torchvision ViT: nn.MultiheadAttention keeps a copy of its input, the
 * scaled q, contiguous copies of k and v and the context; no dropout. */
static layer_acts_t vit_layer(double e, double b, double s, double h, double I, double a)
{
    layer_acts_t l;
    double tok = b * s;
    l.core = attention_core(e, b, a, s, s, false);
    l.layer = e * tok * (8 * h + 2 * I) + 2 * 2 * STAT * tok + l.core;
    l.input = e * tok * h;
    l.working = e * tok * h + max2(attention_working(e, b, s, h, h, a, s), e * tok * 2 * I);
    return l;
}

/* T5: RMS norms (input, its square, 1/rms, normalized, output), q, k, v, context, one
 * mask per dropout; the feed-forward keeps relu's output, its mask and the
 * dropped output (gated: gelu input and output, the linear branch, the
 * product). kv_len and `cross` describe the attention in the decoder. */
static double t5_norm(double e, double tok, double h)
{
    return e * tok * (4 * h + 1);
}

static double t5_ff_acts(double e, double tok, double h, double f, bool gated)
{
    double ff =
        gated ? e * tok * 4 * f + MASK * tok * f + e * tok * f : e * tok * 2 * f + MASK * tok * f;
    return t5_norm(e, tok, h) + ff + MASK * tok * h;
}

/* q, context (h each) and, for self-attention, k and v. */
static double t5_attention_acts(double e, double b, double q_len, double h, double a, double kv_len,
                                bool self)
{
    double tok = b * q_len;
    return t5_norm(e, tok, h) + e * tok * 2 * h + (self ? e * b * kv_len * 2 * h : 0) +
           MASK * tok * h + attention_core(e, b, a, q_len, kv_len, true);
}

static double logits(double e, double tok, double V)
{
    /* log_softmax keeps its output; the loss keeps the int64 targets */
    return e * tok * V + IDX * tok;
}

int vram_arch_transformer_acts(const vram_model_t *m, const vram_arch_shape_t *sh, double *bytes)
{
    int rc = check_shape(m);
    if (rc) return rc;
    double e = sh->elem, b = (double)sh->batch, s = (double)sh->seq;
    double h = (double)m->hidden_size, I = (double)m->intermediate_size;
    double a = (double)m->num_heads, V = (double)m->vocab_size, L = (double)m->num_layers;
    double tok = b * s, total = 0;
    layer_acts_t l;
    switch (m->family) {
    case VRAM_FAMILY_BERT:
        l = classic_layer(e, b, s, h, I, a, true, 2);
        if (!sh->training) {
            *bytes = l.working;
            return 0;
        }
        /* ids, token types, positions; embedding LayerNorm and its dropout */
        total = IDX * (2 * tok + s) + e * tok * h + 2 * STAT * tok + MASK * tok * h;
        total += stack(&l, L, sh->checkpointing);
        /* last hidden state (kept by the pooler / a head), pooled output */
        total += e * tok * h + (m->has_pooler ? e * b * h : 0);
        break;
    case VRAM_FAMILY_GPT2:
    case VRAM_FAMILY_GPTNEOX:
        l = classic_layer(e, b, s, h, I, a, m->family == VRAM_FAMILY_GPT2,
                          m->family == VRAM_FAMILY_GPT2 ? 5 : 2);
        if (!sh->training) {
            *bytes = l.working + e * tok * V;
            return 0;
        }
        total = IDX * (tok + s) + (m->family == VRAM_FAMILY_GPT2 ? MASK * tok * h : 0);
        total += stack(&l, L, sh->checkpointing);
        /* final LayerNorm input and output, logits */
        total += 2 * e * tok * h + 2 * STAT * tok + logits(e, tok, V);
        break;
    case VRAM_FAMILY_LLAMA:
        l = llama_layer(e, b, s, h, I, a);
        if (!sh->training) {
            *bytes = l.working + e * tok * V;
            return 0;
        }
        /* token ids; the rotary cos and sin tables that q and k are scaled by */
        total = IDX * tok + 2 * e * s * (double)head_dim(m) + stack(&l, L, sh->checkpointing);
        total += e * tok * (4 * h + 1) + logits(e, tok, V);
        break;
    case VRAM_FAMILY_VIT: {
        double img = (double)sh->image;
        double n = (double)((sh->image / m->patch_size) * (sh->image / m->patch_size)) + 1;
        tok = b * n;
        l = vit_layer(e, b, n, h, I, a);
        if (!sh->training) {
            *bytes = e * b * m->num_channels * img * img + l.working;
            return 0;
        }
        /* the image (kept by the patch convolution) */
        total = e * b * (double)m->num_channels * img * img + stack(&l, L, sh->checkpointing);
        /* final LayerNorm input and output (the head keeps a view of it) */
        total += 2 * e * tok * h + 2 * STAT * tok;
        if (m->has_pooler) total += e * b * h;
        if (m->num_classes > 0) total += logits(e, b, (double)m->num_classes);
        break;
    }
    case VRAM_FAMILY_T5: {
        double dec = (double)(m->num_decoder_layers > 0 ? m->num_decoder_layers : m->num_layers);
        double sd = s; /* decoder (target) length: the same as the input's */
        double tokd = b * sd;
        layer_acts_t enc_l, dec_l;
        enc_l.core = attention_core(e, b, a, s, s, true);
        enc_l.layer =
            t5_attention_acts(e, b, s, h, a, s, true) + t5_ff_acts(e, tok, h, I, m->gated_mlp);
        enc_l.input = e * tok * h;
        dec_l.core = attention_core(e, b, a, sd, sd, true) + attention_core(e, b, a, sd, s, true);
        dec_l.layer = t5_attention_acts(e, b, sd, h, a, sd, true) +
                      t5_attention_acts(e, b, sd, h, a, s, false) +
                      t5_ff_acts(e, tokd, h, I, m->gated_mlp);
        dec_l.input = e * tokd * h;
        if (!sh->training) {
            l = classic_layer(e, b, s, h, I, a, false, 2);
            *bytes = l.working + e * tokd * V;
            return 0;
        }
        /* relative-position bucket indices (batch independent) */
        total = IDX * (s * s + sd * sd);
        total += IDX * tok + MASK * tok * h + stack(&enc_l, L, sh->checkpointing);
        /* final encoder norm, its dropout; the output is kept by every
         * cross-attention's k and v projections (once) */
        total += t5_norm(e, tok, h) - e * tok * h + MASK * tok * h + e * tok * h;
        /* cross-attention k and v: b * s * h each per decoder layer */
        total += dec * e * tok * 2 * h;
        total += IDX * tokd + MASK * tokd * h + stack(&dec_l, dec, sh->checkpointing);
        total += t5_norm(e, tokd, h) - e * tokd * h + MASK * tokd * h + e * tokd * h;
        total += logits(e, tokd, V);
        break;
    }
    default:
        return vram_fail(VRAM_EINVAL, "model \"%s\" is not a transformer", m->name);
    }
    *bytes = total;
    return 0;
}
