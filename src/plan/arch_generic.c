/* The generic decoder row (VRAM_FAMILY_DECODER): parameters and
 * activations from the model's knobs alone (norm kind and layout, q/k
 * norms, fused or latent attention, biases, gated MLP, experts), so that a
 * decoder family is a line of data in hf_decoder.c (docs/estimation.md,
 * "Family table"). Module names follow transformers' modeling files. */
#include "arch_parts.h"

static int norms_per_layer(const vram_model_t *m)
{
    switch ((vram_norm_layout_t)m->norm_layout) {
    case VRAM_NORMS_PARALLEL1:
        return 1;
    case VRAM_NORMS_SANDWICH:
        return 4;
    default:
        return 2;
    }
}

static void gnorm(vram_arch_params_t *p, const vram_model_t *m, int64_t width)
{
    if (m->norm_kind == VRAM_NORM_NONPARAM) return;
    norm(p, width, m->norm_kind == VRAM_NORM_LAYER);
}

static bool latent(const vram_model_t *m)
{
    return m->kv_lora_rank > 0;
}

/* Query width and key (value) width of the attention. */
static int64_t q_width(const vram_model_t *m)
{
    return m->num_heads * (latent(m) ? head_dim(m) + m->rope_head_dim : head_dim(m));
}

static int64_t kv_width(const vram_model_t *m)
{
    return kv_heads(m) * head_dim(m);
}

static void attention_params(vram_arch_params_t *p, const vram_model_t *m)
{
    int64_t h = m->hidden_size, q = q_width(m), kv = kv_width(m), a = m->num_heads;
    if (latent(m)) {
        /* q_a_proj, q_a_layernorm, q_b_proj (or q_proj); kv_a_proj_with_mqa,
         * kv_a_layernorm, kv_b_proj; o_proj from the value heads */
        if (m->q_lora_rank > 0) {
            linear(p, m->q_lora_rank, h, false);
            norm(p, m->q_lora_rank, false);
            linear(p, q, m->q_lora_rank, false);
        } else {
            linear(p, q, h, false);
        }
        linear(p, m->kv_lora_rank + m->rope_head_dim, h, false);
        norm(p, m->kv_lora_rank, false);
        linear(p, a * (head_dim(m) + m->v_head_dim), m->kv_lora_rank, false);
        linear(p, h, a * m->v_head_dim, false);
        return;
    }
    if (m->fused_qkv) {
        linear(p, q + 2 * kv, h, m->qkv_bias);
    } else {
        linear(p, q, h, m->qkv_bias);
        linear(p, kv, h, m->qkv_bias);
        linear(p, kv, h, m->qkv_bias);
    }
    linear(p, h, q, m->o_bias);
    if (m->qk_norm == 1) {
        norm(p, head_dim(m), false);
        norm(p, head_dim(m), false);
    } else if (m->qk_norm == 2) {
        norm(p, q, false);
        norm(p, kv, false);
    }
}

static void mlp(vram_arch_params_t *p, const vram_model_t *m, int64_t I, bool bias)
{
    int64_t h = m->hidden_size;
    linear(p, I, h, bias);
    if (m->gated_mlp) linear(p, I, h, bias);
    linear(p, h, I, bias);
}

/* The experts of one layer: transformers keeps them as two stacked
 * tensors (gate_up_proj [E, 2I, h], down_proj [E, h, I]); the router; the
 * shared expert(s) as one gated MLP, with Qwen2-MoE's sigmoid gate. */
static void experts(vram_arch_params_t *p, const vram_model_t *m)
{
    int64_t h = m->hidden_size, E = m->num_experts, I = m->expert_intermediate;
    linear(p, E, h, false);
    vram_arch_add_tensor(p, (uint64_t)E, (uint64_t)(2 * I), (uint64_t)h);
    vram_arch_add_tensor(p, (uint64_t)E, (uint64_t)h, (uint64_t)I);
    if (m->shared_intermediate > 0) mlp(p, m, m->shared_intermediate, false);
    if (m->shared_expert_gate) linear(p, 1, h, false);
}

/* Gemma 3's SigLIP vision tower (SiglipVisionTransformer: biased patch
 * conv, one position per patch, pre-LN layers with biases, post_layernorm,
 * the optional attention-pooling head) and its projector into the text
 * width with an RMSNorm. */
static void vision_tower(vram_arch_params_t *p, const vram_model_t *m)
{
    int64_t h = m->vision_hidden, I = m->vision_intermediate, n = m->image_size / m->patch_size;
    vram_arch_add_tensor(p, (uint64_t)(h * m->num_channels), (uint64_t)m->patch_size,
                         (uint64_t)m->patch_size);
    vram_arch_add_tensor(p, 1, (uint64_t)h, 1);
    linear(p, n * n, h, false);
    biased_encoder_layers(p, h, I, m->vision_layers);
    norm(p, h, true);
    if (m->vision_pool_head) {
        vram_arch_add_tensor(p, 1, 1, (uint64_t)h); /* probe */
        linear(p, 3 * h, h, true);
        linear(p, h, h, true);
        norm(p, h, true);
        linear(p, I, h, true);
        linear(p, h, I, true);
    }
    linear(p, h, m->hidden_size, false); /* mm_input_projection_weight */
    norm(p, h, false);                   /* mm_soft_emb_norm */
}

int vram_arch_generic_params(const vram_model_t *m, vram_arch_params_t *p)
{
    int rc = vram_arch_check_shape(m);
    if (rc) return rc;
    int64_t h = m->hidden_size, L = m->num_layers;
    linear(p, m->vocab_size, h, false);
    if (m->embed_norm) gnorm(p, m, h);
    vram_arch_params_t layer = {0};
    for (int i = 0; i < norms_per_layer(m); i++)
        gnorm(&layer, m, h);
    attention_params(&layer, m);
    vram_arch_params_t dense = layer, sparse = layer;
    mlp(&dense, m, m->intermediate_size, m->mlp_bias);
    int64_t nd = L;
    if (m->num_experts > 0) {
        experts(&sparse, m);
        nd = m->dense_layers;
        vram_arch_add_repeated(p, &sparse, (uint64_t)(L - nd));
    }
    vram_arch_add_repeated(p, &dense, (uint64_t)nd);
    gnorm(p, m, h);
    if (m->vision_layers > 0) vision_tower(p, m);
    return 0;
}

/* Bytes a norm keeps per token: RMSNorm its input, the square, the
 * normalized tensor (f32 role) and 1/rms; LayerNorm its input and two
 * statistics. */
static double norm_bytes(const vram_model_t *m, const vram_arch_shape_t *p, double width)
{
    if (m->norm_kind == VRAM_NORM_RMS) return rms_norm(p, width);
    return width * p->f32 + 2 * STAT;
}

/* One layer's saved tensors per token (the terms of arch_decoder.c's
 * decoder_layer, with the knobs in place of the family). */
static layer_acts_t generic_layer(const vram_model_t *m, const vram_arch_shape_t *p, double b,
                                  double s)
{
    layer_acts_t l;
    double h = (double)m->hidden_size, tok = b * s, a = (double)m->num_heads;
    /* GQA's keys and values: eager repeats them to every head, SDPA without
     * a padding mask takes them as they are (transformers' use_gqa_in_sdpa) */
    double qd = (double)q_width(m);
    /* Falcon's materialized mask refuses flash; the memory-efficient
     * kernel keeps it as a float mask, or, with fewer key/value heads than
     * query heads (which it cannot take), math runs and keeps the scores as
     * eager does */
    bool mask = p->fused_attention && (m->sdpa_saves & VRAM_SDPA_MASK);
    bool kv_full = (m->sdpa_saves & VRAM_SDPA_KV_FULL) || p->kv_expanded;
    vram_arch_shape_t math;
    if (mask && !kv_full && kv_heads(m) < m->num_heads) {
        math = *p;
        math.fused_attention = false;
        p = &math;
        mask = false;
    }
    double kvd = p->fused_attention && !latent(m) && !kv_full ? (double)kv_width(m) : qd;
    double vd = latent(m) ? a * (double)m->v_head_dim : kvd;
    bool gated = m->gated_mlp, moe = m->num_experts > 0;
    int n = norms_per_layer(m);
    double per = n * norm_bytes(m, p, h);
    /* Falcon-40B's two norms read the same layer input, kept once */
    if (m->norm_layout == VRAM_NORMS_PARALLEL2) per -= p->f32 * h;
    /* the attention input into q, k, v (one fused matmul; MLA: q and kv_a) */
    int qkv_in = m->fused_qkv ? 1 : latent(m) ? 2 : 3;
    int mlp_in = gated || moe ? 2 : 1;
    if (m->norm_layout == VRAM_NORMS_PARALLEL1)
        per += h * fed(p, qkv_in + mlp_in);
    else
        per += h * (fed(p, qkv_in) + fed(p, mlp_in));
    if (latent(m)) {
        double r = (double)m->kv_lora_rank, qr = (double)m->q_lora_rank;
        if (qr > 0) per += norm_bytes(m, p, qr) + qr * fed(p, 1);
        /* kv_a_layernorm reads the compressed part of kv_a's output as a
         * view: in fp32 and amp it keeps that whole output (rank + rotary
         * width); its output feeds kv_b. The keys are rebuilt by cat, so
         * kv_b's output is not kept apart from k and v. */
        per += norm_bytes(m, p, r) + (p->f32 == 4 ? 4.0 * (double)m->rope_head_dim : 0) +
               r * fed(p, 1);
    }
    if (m->qk_norm == 1)
        per += norm_bytes(m, p, qd) + norm_bytes(m, p, (double)kv_width(m)) - 2 * p->f32 +
               (a + (double)kv_heads(m)) * p->f32;
    else if (m->qk_norm == 2)
        per += norm_bytes(m, p, qd) + norm_bytes(m, p, (double)kv_width(m));
    /* q and k after rotary, v and the context */
    /* MLA under SDPA: v goes in as a view of kv_b's output, keeping all
     * of it (the non-rotary keys' part too); eager's matmul copies it */
    double v_kept =
        latent(m) && p->fused_attention ? a * (double)(m->head_dim + m->v_head_dim) : vd;
    per += qd * fed(p, 1) + kvd * fed(p, 1) + v_kept * p->mm + (latent(m) ? vd : qd) * p->mm;
    per += sdpa_extra(m, p, qd, kvd);
    double I = (double)m->intermediate_size;
    double dense_mlp = gated ? 4 * I * p->mm : (m->gelu_mlp ? 2 : 1) * I * p->mm;
    double sparse_mlp = 0;
    if (moe) {
        double E = (double)m->num_experts, k = (double)m->experts_per_token;
        double Ie = (double)m->expert_intermediate;
        sparse_mlp = 2 * 4.0 * E + IDX * k + k * (2 * h * p->mm + 4 * Ie * p->mm) +
                     k * (3 * IDX + 4.0); /* grouped_mm's sort, permutation, expert ids, weights */
        if (m->shared_intermediate > 0) sparse_mlp += 4 * (double)m->shared_intermediate * p->mm;
        /* the gate's sigmoid and the shared output it scales */
        if (m->shared_expert_gate) sparse_mlp += (h + 1) * p->mm;
    }
    double L = (double)m->num_layers, nd = moe ? (double)m->dense_layers : L;
    per += (nd * dense_mlp + (L - nd) * sparse_mlp) / L; /* the layers' mean */
    l.core = attention_core(p, b, a, s, s, false) + softcap_scores(m, p, b, a, s);
    if (mask) l.core += p->mm * b * s * s; /* convert_boolean_attn_mask's float mask */
    l.layer = tok * per + l.core;
    l.input = p->f32 * tok * h;
    double work_I = moe ? (double)m->expert_intermediate * (double)m->experts_per_token : I;
    l.working =
        p->mm * tok * h + max2(attention_working(p, b, s, h, kvd, a, s), p->mm * tok * 3 * work_I);
    return l;
}

int vram_arch_generic_acts(const vram_model_t *m, const vram_arch_shape_t *sh, double *bytes)
{
    int rc = vram_arch_check_shape(m);
    if (rc) return rc;
    double b = (double)sh->batch, s = (double)sh->seq, tok = b * s, h = (double)m->hidden_size;
    layer_acts_t l = generic_layer(m, sh, b, s);
    if (!sh->training) {
        *bytes = l.working;
        return 0;
    }
    /* token ids, the rotary cos and sin tables (fp32), the embedding norm */
    double rope = latent(m) ? (double)m->rope_head_dim : (double)head_dim(m);
    double total = IDX * tok + (sh->rope_buffer ? 0 : 2 * 4.0 * s * rope);
    if (m->embed_norm) total += tok * norm_bytes(m, sh, h);
    total += stack(&l, (double)m->num_layers, sh->checkpointing);
    total += norm_weights(m, (double)(norms_per_layer(m) * m->num_layers + 1), h);
    total += tok * norm_bytes(m, sh, h); /* final norm */
    *bytes = total;
    return 0;
}
