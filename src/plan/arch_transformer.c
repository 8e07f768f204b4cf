/* Transformer families: parameter counts from the layer shapes, and the
 * activations an eager PyTorch training step saves for backward, counted
 * tensor by tensor (docs/estimation.md derives every term; the counts were
 * checked against saved_tensors_hooks in bench/estimate/). */
#include "arch_parts.h"
#include "estimate_limits.h"

/* Bytes of fp32 statistics and int64 indices. */

/* L pre-norm layers with biases (GPT-2, GPT-NeoX, ViT): LayerNorm, fused QKV,
 * output projection, LayerNorm, two-layer MLP. Counted once, then repeated. */
static void prenorm_layers(vram_arch_params_t *p, int64_t h, int64_t I, int64_t L)
{
    vram_arch_params_t layer = {0};
    norm(&layer, h, true);
    linear(&layer, 3 * h, h, true);
    linear(&layer, h, h, true);
    norm(&layer, h, true);
    linear(&layer, I, h, true);
    linear(&layer, h, I, true);
    vram_arch_add_repeated(p, &layer, (uint64_t)L);
}

/* A field outside [0, max]: models built by hand through the API get the
 * bounds the file readers apply (estimate_limits.h), so the shape
 * arithmetic below (int64) cannot overflow. */
static int out_of_range(const vram_model_t *m, const char *what, int64_t v, int64_t max)
{
    if (v >= 0 && v <= max) return 0;
    return vram_fail(VRAM_EINVAL, "model \"%s\": %s %lld is out of range (0 to %lld)", m->name,
                     what, (long long)v, (long long)max);
}

static int check_limits(const vram_model_t *m)
{
    int rc;
    if ((rc = out_of_range(m, "hidden size", m->hidden_size, VRAM_MAX_WIDTH)) ||
        (rc = out_of_range(m, "layers", m->num_layers, VRAM_MAX_LAYERS)) ||
        (rc = out_of_range(m, "decoder layers", m->num_decoder_layers, VRAM_MAX_LAYERS)) ||
        (rc = out_of_range(m, "attention heads", m->num_heads, VRAM_MAX_HEADS)) ||
        (rc = out_of_range(m, "key/value heads", m->num_kv_heads, VRAM_MAX_HEADS)) ||
        (rc = out_of_range(m, "head dimension", m->head_dim, VRAM_MAX_WIDTH)) ||
        (rc = out_of_range(m, "intermediate size", m->intermediate_size, VRAM_MAX_MLP_WIDTH)) ||
        (rc = out_of_range(m, "vocabulary size", m->vocab_size, VRAM_MAX_VOCAB)) ||
        (rc = out_of_range(m, "token type vocabulary", m->type_vocab_size, VRAM_MAX_VOCAB)) ||
        (rc = out_of_range(m, "position offset", m->position_offset, VRAM_MAX_VOCAB + 1)) ||
        (rc = out_of_range(m, "positions", m->max_positions, VRAM_MAX_POSITIONS)) ||
        (rc = out_of_range(m, "default sequence length", m->default_seq_len, VRAM_MAX_SEQ)) ||
        (rc = out_of_range(m, "relative buckets", m->relative_buckets, VRAM_MAX_POSITIONS)) ||
        (rc = out_of_range(m, "image size", m->image_size, VRAM_MAX_IMAGE)) ||
        (rc = out_of_range(m, "patch size", m->patch_size, VRAM_MAX_IMAGE)) ||
        (rc = out_of_range(m, "channels", m->num_channels, VRAM_MAX_IMAGE)) ||
        (rc = out_of_range(m, "classes", m->num_classes, VRAM_MAX_VOCAB)) ||
        (rc = out_of_range(m, "labels", m->num_labels, VRAM_MAX_VOCAB)) ||
        (rc = out_of_range(m, "embedding projection", m->embed_proj_dim, VRAM_MAX_WIDTH)) ||
        (rc = out_of_range(m, "experts", m->num_experts, VRAM_MAX_HEADS)) ||
        (rc = out_of_range(m, "experts per token", m->experts_per_token, m->num_experts)) ||
        (rc = out_of_range(m, "expert width", m->expert_intermediate, VRAM_MAX_MLP_WIDTH)) ||
        (rc = out_of_range(m, "shared expert width", m->shared_intermediate, VRAM_MAX_MLP_WIDTH)) ||
        (rc = out_of_range(m, "mel bins", m->num_mel_bins, VRAM_MAX_IMAGE)) ||
        (rc = out_of_range(m, "source positions", m->max_source_positions, VRAM_MAX_POSITIONS)) ||
        (rc = out_of_range(m, "conv layers", m->conv_layers, 8)) ||
        (rc = out_of_range(m, "positional conv kernel", m->pos_conv_kernel, VRAM_MAX_IMAGE)) ||
        (rc = out_of_range(m, "positional conv groups", m->pos_conv_groups, VRAM_MAX_HEADS)))
        return rc;
    return 0;
}

int vram_arch_check_shape(const vram_model_t *m)
{
    int rc = check_limits(m);
    if (rc) return rc;
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
    if (m->num_experts > 0 && (m->experts_per_token <= 0 || m->expert_intermediate <= 0))
        return vram_fail(VRAM_EINVAL,
                         "model \"%s\": a mixture of experts needs experts per token and an "
                         "expert width",
                         m->name);
    for (int64_t i = 0; i < m->conv_layers; i++)
        if (m->conv_dim[i] <= 0 || m->conv_kernel[i] <= 0 || m->conv_stride[i] <= 0 ||
            m->conv_dim[i] > VRAM_MAX_WIDTH || m->conv_kernel[i] > VRAM_MAX_IMAGE ||
            m->conv_stride[i] > VRAM_MAX_IMAGE)
            return vram_fail(VRAM_EINVAL, "model \"%s\": conv layer %lld has an invalid shape",
                             m->name, (long long)i);
    if (!vram_arch_is_image(m) && m->vocab_size <= 0)
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
    int rc = vram_arch_check_shape(m);
    if (rc) return rc;
    int64_t h = m->hidden_size, I = m->intermediate_size, V = m->vocab_size, L = m->num_layers;
    int64_t inner = m->num_heads * head_dim(m), kv = kv_heads(m) * head_dim(m);
    vram_arch_params_t layer; /* one layer, added L times */
    switch (m->family) {
    case VRAM_FAMILY_BERT:
        linear(p, V, h, false);
        linear(p, m->max_positions + m->position_offset, h, false);
        linear(p, m->type_vocab_size, h, false);
        norm(p, h, true);
        biased_encoder_layers(p, h, I, L);
        if (m->has_pooler) linear(p, h, h, true);
        return 0;
    case VRAM_FAMILY_GPT2:
    case VRAM_FAMILY_GPTNEOX:
        linear(p, V, h, false);
        if (m->family == VRAM_FAMILY_GPT2) linear(p, m->max_positions, h, false);
        prenorm_layers(p, h, I, L);
        norm(p, h, true);
        return 0;
    case VRAM_FAMILY_LLAMA:
        linear(p, V, h, false);
        layer = (vram_arch_params_t){0};
        norm(&layer, h, false);
        linear(&layer, inner, h, false);
        linear(&layer, kv, h, false);
        linear(&layer, kv, h, false);
        linear(&layer, h, inner, false);
        norm(&layer, h, false);
        linear(&layer, I, h, false);
        linear(&layer, I, h, false);
        linear(&layer, h, I, false);
        vram_arch_add_repeated(p, &layer, (uint64_t)L);
        norm(p, h, false);
        return 0;
    case VRAM_FAMILY_T5: {
        int64_t dec = m->num_decoder_layers > 0 ? m->num_decoder_layers : L;
        linear(p, V, h, false);
        /* only the first layer of each stack holds the relative bias */
        /* UMT5: every layer's self-attention has its own */
        bool every = m->relative_bias_all;
        layer = (vram_arch_params_t){0};
        t5_attention(&layer, m, every);
        t5_ff(&layer, m);
        vram_arch_add_repeated(p, &layer, (uint64_t)L);
        if (!every)
            vram_arch_add_tensor(p, 1, (uint64_t)m->relative_buckets, (uint64_t)m->num_heads);
        norm(p, h, false);
        layer = (vram_arch_params_t){0};
        t5_attention(&layer, m, every);
        t5_attention(&layer, m, false);
        t5_ff(&layer, m);
        vram_arch_add_repeated(p, &layer, (uint64_t)dec);
        if (dec > 0 && !every)
            vram_arch_add_tensor(p, 1, (uint64_t)m->relative_buckets, (uint64_t)m->num_heads);
        norm(p, h, false);
        return 0;
    }
    case VRAM_FAMILY_VIT: {
        int64_t n = (m->image_size / m->patch_size) * (m->image_size / m->patch_size);
        vram_arch_add_tensor(p, (uint64_t)(h * m->num_channels), (uint64_t)m->patch_size,
                             (uint64_t)m->patch_size);
        vram_arch_add_tensor(p, 1, (uint64_t)h, 1); /* conv bias */
        vram_arch_add_tensor(p, 1, 1, (uint64_t)h); /* class token */
        vram_arch_add_tensor(p, 1, (uint64_t)(n + 1), (uint64_t)h);
        prenorm_layers(p, h, I, L);
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
/* Activations: what autograd keeps, tensor by tensor, per token unless     */
/* said otherwise. Roles and byte sizes: see vram_arch_shape_t.            */
/* ---------------------------------------------------------------------- */

/* LLaMA: each RMSNorm keeps its input, its square (pow keeps its result),
 * the normalized tensor (f32) and 1/rms per token, and its output feeds the
 * q, k, v (or gate and up) projections; after rotary q and k feed the
 * score matmul; v (repeated for GQA: a full-width copy) and the context are
 * matmul outputs; SwiGLU keeps gate, silu(gate), up and their product. */
static layer_acts_t llama_layer(const vram_arch_shape_t *p, double b, double s, double h, double I,
                                double a, double kvd)
{
    layer_acts_t l;
    double tok = b * s;
    l.core = attention_core(p, b, a, s, s, false);
    double norms = 2 * rms_norm(p, h) + h * (fed(p, 3) + fed(p, 2));
    /* SDPA without a padding mask takes the grouped keys and values as they
     * are (transformers' use_gqa_in_sdpa: enable_gqa), eager repeats them;
     * torchtune expands them before SDPA */
    double kv = p->fused_attention && !p->kv_expanded ? kvd : h;
    double attn = h * (fed(p, 1) + p->mm) + kv * (fed(p, 1) + p->mm);
    l.layer = tok * (norms + attn + 4 * I * p->mm) + l.core;
    l.input = p->f32 * tok * h;
    l.working = p->mm * tok * h + max2(attention_working(p, b, s, h, h, a, s), p->mm * tok * 3 * I);
    return l;
}

/* torchvision ViT: LayerNorm inputs on the stream; nn.MultiheadAttention
 * keeps its (cast or reshaped) input, the scaled q, contiguous k and v, and
 * the context; the MLP keeps GELU's input and output; no dropout. */
static layer_acts_t vit_layer(const vram_arch_shape_t *p, double b, double s, double h, double I,
                              double a)
{
    layer_acts_t l;
    double tok = b * s;
    l.core = attention_core(p, b, a, s, s, false);
    l.layer = tok * (h * (2 * p->f32 + 2 * fed(p, 1) + 4 * p->mm) + 2 * I * p->mm + 2 * 2 * STAT) +
              l.core;
    l.input = p->f32 * tok * h;
    l.working = p->mm * tok * h + max2(attention_working(p, b, s, h, h, a, s), p->mm * tok * 2 * I);
    return l;
}

/* T5's RMS norm (T5LayerNorm): pow keeps the input upcast to fp32, the
 * multiply by 1/rms the input as it is and 1/rms, the weight the
 * normalized tensor (fp32, or its half cast): 8 bytes per element in every
 * precision; its output is counted by whoever consumes it. */
static double t5_norm(const vram_arch_shape_t *p, double tok, double h)
{
    (void)p;
    return tok * (8 * h + 4);
}

/* Feed-forward sublayer: norm, its output into wi; relu keeps its output
 * (gated: gelu_new's tensors, the linear branch), its dropout mask and the
 * dropped output for wo; the residual dropout mask. */
static double t5_ff_acts(const vram_arch_shape_t *p, double tok, double h, double f, bool gated)
{
    /* gated-gelu is gelu_new (NewGELUActivation) on wi_0, times wi_1's output */
    double ff =
        gated ? tok * f * (gelu_new_bytes(p) + 2 * p->mm + MASK) : tok * f * (2 * p->mm + MASK);
    return t5_norm(p, tok, h) + fed(p, gated ? 2 : 1) * tok * h + ff + MASK * tok * h;
}

/* Attention sublayer: norm and its output (into q, k, v for
 * self-attention, into q for cross-attention); q, context and, for
 * self-attention, k and v; the residual dropout mask; the core. */
static double t5_attention_acts(const vram_arch_shape_t *p, double b, double q_len, double h,
                                double a, double kv_len, bool self)
{
    double tok = b * q_len;
    return t5_norm(p, tok, h) + fed(p, self ? 3 : 1) * tok * h + p->mm * tok * 2 * h +
           (self ? p->mm * b * kv_len * 2 * h : 0) + MASK * tok * h +
           attention_core(p, b, a, q_len, kv_len, true);
}

int vram_arch_transformer_acts(const vram_model_t *m, const vram_arch_shape_t *sh, double *bytes)
{
    int rc = vram_arch_check_shape(m);
    if (rc) return rc;
    double b = (double)sh->batch, s = (double)sh->seq;
    double h = (double)m->hidden_size, I = (double)m->intermediate_size;
    double a = (double)m->num_heads, L = (double)m->num_layers;
    double tok = b * s, total = 0;
    layer_acts_t l;
    switch (m->family) {
    case VRAM_FAMILY_BERT:
        l = classic_layer(sh, b, s, h, I, a, true, 3, 2 * sh->mm, 2);
        if (!sh->training) {
            *bytes = l.working;
            return 0;
        }
        /* ids, token types, positions; embedding LayerNorm and its dropout */
        total = IDX * (2 * tok + s) + sh->f32 * tok * h + 2 * STAT * tok + MASK * tok * h;
        total += stack(&l, L, sh->checkpointing);
        /* the last hidden state, of which the pooler takes the first token
         * (autocast copies just that slice), and the pooled output */
        total += sh->amp ? 2 * b * h : sh->f32 * tok * h;
        if (m->has_pooler) total += sh->mm * b * h;
        break;
    case VRAM_FAMILY_GPT2:
    case VRAM_FAMILY_GPTNEOX: {
        bool gpt2 = m->family == VRAM_FAMILY_GPT2;
        l = classic_layer(sh, b, s, h, I, a, gpt2, 1, gpt2 ? gelu_new_bytes(sh) : 2 * sh->mm,
                          gpt2 ? 2 : 1);
        l.layer += tok * sdpa_extra(m, sh, h, h);
        if (!sh->training) {
            *bytes = l.working;
            return 0;
        }
        total = IDX * (tok + s) + (gpt2 ? MASK * tok * h : 0);
        total += stack(&l, L, sh->checkpointing);
        /* final LayerNorm input (its output belongs to the head) */
        total += sh->f32 * tok * h + 2 * STAT * tok;
        break;
    }
    case VRAM_FAMILY_LLAMA:
        l = llama_layer(sh, b, s, h, I, a, (double)(kv_heads(m) * head_dim(m)));
        if (!sh->training) {
            *bytes = l.working;
            return 0;
        }
        /* token ids; the rotary cos and sin tables (fp32) */
        total = IDX * tok + stack(&l, L, sh->checkpointing);
        if (!sh->rope_buffer) total += 2 * 4.0 * s * (double)head_dim(m);
        total += tok * rms_norm(sh, h); /* final norm */
        break;
    case VRAM_FAMILY_VIT: {
        double img = (double)sh->image, pixels = (double)m->num_channels * img * img;
        double n = (double)((sh->image / m->patch_size) * (sh->image / m->patch_size)) + 1;
        tok = b * n;
        l = vit_layer(sh, b, n, h, I, a);
        if (!sh->training) {
            *bytes = sh->mm * b * pixels + l.working;
            return 0;
        }
        /* the image (or its cast), kept by the patch convolution */
        total = fed(sh, 1) * b * pixels + stack(&l, L, sh->checkpointing);
        /* final LayerNorm input; the head takes the class token of its output */
        total += sh->f32 * tok * h + 2 * STAT * tok + (sh->amp ? 2 * b * h : sh->f32 * tok * h);
        if (m->has_pooler) total += sh->mm * b * h;
        if (m->num_classes > 0) total += logits(sh, b, (double)m->num_classes);
        break;
    }
    case VRAM_FAMILY_T5: {
        double dec = (double)(m->num_decoder_layers > 0 ? m->num_decoder_layers : m->num_layers);
        double sd = s; /* decoder (target) length: the same as the input's */
        double tokd = b * sd;
        layer_acts_t enc_l, dec_l;
        enc_l.core = attention_core(sh, b, a, s, s, true);
        enc_l.layer =
            t5_attention_acts(sh, b, s, h, a, s, true) + t5_ff_acts(sh, tok, h, I, m->gated_mlp);
        enc_l.input = sh->f32 * tok * h;
        dec_l.core = attention_core(sh, b, a, sd, sd, true) + attention_core(sh, b, a, sd, s, true);
        dec_l.layer = t5_attention_acts(sh, b, sd, h, a, sd, true) +
                      t5_attention_acts(sh, b, sd, h, a, s, false) +
                      t5_ff_acts(sh, tokd, h, I, m->gated_mlp);
        dec_l.input = sh->f32 * tokd * h;
        if (!sh->training) {
            l = classic_layer(sh, b, s, h, I, a, false, 1, 2 * sh->mm, 2);
            *bytes = l.working;
            return 0;
        }
        /* relative-position bucket indices (batch independent) */
        total = IDX * (s * s + sd * sd);
        if (m->relative_bias_all) /* UMT5: every layer buckets its own */
            total = IDX * ((double)m->num_layers * s * s + dec * sd * sd);
        total += IDX * tok + MASK * tok * h + stack(&enc_l, L, sh->checkpointing);
        /* final encoder norm and dropout; its output feeds the k and v
         * projections of every cross-attention, which keep their outputs */
        total += t5_norm(sh, tok, h) + MASK * tok * h + fed(sh, 2 * (int)dec) * tok * h;
        total += dec * sh->mm * tok * 2 * h;
        total += IDX * tokd + MASK * tokd * h + stack(&dec_l, dec, sh->checkpointing);
        if (sh->fused_attention) {
            /* the position bias is SDPA's float mask, so the memory-efficient
             * kernel runs and keeps it (batch 1; f32 role, an embedding's
             * output): create_position_bias_mask's .contiguous() copy of the
             * permuted bias in each encoder layer, each decoder layer's
             * torch.where with the causal mask (and where's boolean
             * condition), the cross-attention's zeros (shared; UMT5: per
             * layer); no scores */
            double bias = sh->f32 * a * s * sd;
            double cross = m->relative_bias_all ? dec : 1;
            total += bias * (L + dec + cross) + dec * MASK * sd * sd;
        }
        /* final decoder norm and dropout (the rescaled output is the head's) */
        total += t5_norm(sh, tokd, h) + MASK * tokd * h;
        break;
    }
    default:
        return vram_fail(VRAM_EINVAL, "model \"%s\" is not a transformer", m->name);
    }
    *bytes = total;
    return 0;
}
