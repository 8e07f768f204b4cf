/* The decoder families of the second edition (Qwen2, Phi, Phi-3, Gemma,
 * Gemma 2, OPT, GPT-BigCode, Mixtral, Qwen2-MoE): parameters following the
 * Hugging Face modules, and activations built from the same terms as
 * LLaMA's and GPT-2's (docs/estimation.md, "Families"). */
#include "arch_parts.h"

static bool layer_norm_family(const vram_model_t *m)
{
    return m->family == VRAM_FAMILY_PHI || m->family == VRAM_FAMILY_OPT ||
           m->family == VRAM_FAMILY_GPT_BIGCODE;
}

static bool is_moe(const vram_model_t *m)
{
    return m->num_experts > 0;
}

/* Norms per layer: Phi's parallel block has one, Gemma 2 four (pre and
 * post attention, pre and post MLP), the rest two. */
static int norms_per_layer(const vram_model_t *m)
{
    if (m->family == VRAM_FAMILY_PHI) return 1;
    if (m->family == VRAM_FAMILY_GEMMA2) return 4;
    return 2;
}

/* A gated MLP (gate, up, down) of width `I`, or GELU/ReLU fc1, fc2. */
static void mlp(vram_arch_params_t *p, int64_t h, int64_t I, bool gated, bool bias)
{
    linear(p, I, h, bias);
    if (gated) linear(p, I, h, bias);
    linear(p, h, I, bias);
}

int vram_arch_decoder_params(const vram_model_t *m, vram_arch_params_t *p)
{
    int rc = vram_arch_check_shape(m);
    if (rc) return rc;
    int64_t h = m->hidden_size, V = m->vocab_size, L = m->num_layers, d = head_dim(m);
    int64_t E = vram_arch_head_width(m), q = m->num_heads * d, kv = kv_heads(m) * d;
    bool ln = layer_norm_family(m), bigcode = m->family == VRAM_FAMILY_GPT_BIGCODE;
    bool out_bias = m->mlp_bias || bigcode;
    linear(p, V, E, false); /* token embedding */
    if (m->family == VRAM_FAMILY_OPT || bigcode)
        linear(p, m->max_positions + m->position_offset, h, false);
    if (E != h) {
        linear(p, h, E, false); /* OPT project_in */
        linear(p, E, h, false); /* project_out */
    }
    vram_arch_params_t layer = {0};
    for (int i = 0; i < norms_per_layer(m); i++)
        norm(&layer, h, ln);
    linear(&layer, q, h, m->qkv_bias || bigcode);
    linear(&layer, kv, h, m->qkv_bias || bigcode);
    linear(&layer, kv, h, m->qkv_bias || bigcode);
    linear(&layer, h, q, out_bias);
    if (is_moe(m)) {
        linear(&layer, m->num_experts, h, false); /* router */
        vram_arch_params_t expert = {0};
        mlp(&expert, h, m->expert_intermediate, true, false);
        vram_arch_add_repeated(&layer, &expert, (uint64_t)m->num_experts);
        if (m->shared_intermediate > 0) {
            mlp(&layer, h, m->shared_intermediate, true, false);
            linear(&layer, 1, h, false); /* shared_expert_gate */
        }
    } else {
        mlp(&layer, h, m->intermediate_size, m->gated_mlp, m->mlp_bias || bigcode);
    }
    vram_arch_add_repeated(p, &layer, (uint64_t)L);
    if (!m->no_final_norm) norm(p, h, ln);
    return 0;
}

/* One layer's saved tensors, per token unless said otherwise:
 * - each norm: RMSNorm keeps its input, the square, the normalized tensor
 *   (f32 role) and 1/rms; LayerNorm its input and two statistics;
 * - the first norm's output feeds q, k and v (one fused matmul for Phi-3 and
 *   BigCode), the second's the MLP (gate and up, or fc1);
 * - q and k after rotary (f32 role under autocast's casts), v and the
 *   context (GQA's repeated k and v are full-width copies; BigCode's single
 *   key/value head is not repeated);
 * - the MLP: gated keeps gate, act(gate), up and the product (4 I); GELU
 *   its input and output (2 I); ReLU its output (I);
 * - MoE: the router's logits and probabilities (fp32), and for each of the
 *   top-k experts a token's gathered input, 4 expert-width tensors and its
 *   weighted output; the shared expert as a gated MLP plus its gate;
 * - OPT's residual dropouts: two 1-byte masks.
 * Without dropout in attention (all of these families train with 0). */
static layer_acts_t decoder_layer(const vram_model_t *m, const vram_arch_shape_t *p, double b,
                                  double s)
{
    layer_acts_t l;
    double h = (double)m->hidden_size, tok = b * s, a = (double)m->num_heads;
    double d = (double)head_dim(m), qd = a * d;
    bool bigcode = m->family == VRAM_FAMILY_GPT_BIGCODE;
    /* GQA's keys and values: eager repeats them to every head, SDPA without
     * a padding mask takes them as they are (transformers' use_gqa_in_sdpa) */
    double kvd = bigcode || (p->fused_attention && !p->kv_expanded) ? (double)kv_heads(m) * d : qd;
    double norm_b = layer_norm_family(m) ? h * p->f32 + 2 * STAT : rms_norm(p, h);
    int fused_qkv = (m->family == VRAM_FAMILY_PHI3 || bigcode) ? 1 : 3;
    double per = norms_per_layer(m) * norm_b + h * fed(p, fused_qkv);
    per += qd * fed(p, 1) + kvd * fed(p, 1) + kvd * p->mm + qd * p->mm;
    if (m->family != VRAM_FAMILY_PHI) per += h * fed(p, m->gated_mlp || is_moe(m) ? 2 : 1);
    if (is_moe(m)) {
        double E = (double)m->num_experts, k = (double)m->experts_per_token;
        double Ie = (double)m->expert_intermediate;
        per += 2 * 4.0 * E + IDX * k + k * (2 * h * p->mm + 4 * Ie * p->mm) +
               k * (3 * IDX + 4.0);     /* grouped_mm's sort, permutation, expert ids, weights */
        if (m->shared_intermediate > 0) /* the gate's sigmoid and the shared output it scales */
            per += 4 * (double)m->shared_intermediate * p->mm + (h + 1) * p->mm;
    } else {
        double I = (double)m->intermediate_size;
        /* Phi's gelu_new is written out in Python (arch_parts.h) */
        if (m->gated_mlp)
            per += 4 * I * p->mm;
        else if (m->family == VRAM_FAMILY_PHI)
            per += I * gelu_new_bytes(p);
        else
            per += (m->family == VRAM_FAMILY_OPT ? I : 2 * I) * p->mm;
    }
    if (m->family == VRAM_FAMILY_OPT) per += 2 * MASK * h;
    per += sdpa_extra(m, p, qd, kvd);
    l.core = attention_core(p, b, a, s, s, false) + softcap_scores(m, p, b, a, s);
    l.layer = tok * per + l.core;
    l.input = p->f32 * tok * h;
    double I = is_moe(m) ? (double)m->expert_intermediate * (double)m->experts_per_token
                         : (double)m->intermediate_size;
    l.working =
        p->mm * tok * h + max2(attention_working(p, b, s, h, kvd, a, s), p->mm * tok * 3 * I);
    if (bigcode) {
        /* GPTBigCode trains with GPT-2's dropouts (attn_pdrop, resid_pdrop
         * 0.1) and, in transformers 5, expands its single key/value head to
         * every head before attention: GPT-2's layer with a fused GELU */
        layer_acts_t g = classic_layer(p, b, s, h, I, a, true, 1, 2 * p->mm, 2);
        l.core = g.core;
        /* SDPA takes the single key/value head as it is (enable_gqa), where
         * the classic layer counts k and v expanded */
        l.layer = g.layer + tok * (p->fused_attention ? -2 * (h - kvd) * p->mm : 0) +
                  tok * sdpa_extra(m, p, qd, kvd);
    }
    return l;
}

int vram_arch_decoder_acts(const vram_model_t *m, const vram_arch_shape_t *sh, double *bytes)
{
    int rc = vram_arch_check_shape(m);
    if (rc) return rc;
    double b = (double)sh->batch, s = (double)sh->seq, tok = b * s, h = (double)m->hidden_size;
    layer_acts_t l = decoder_layer(m, sh, b, s);
    if (!sh->training) {
        *bytes = l.working;
        return 0;
    }
    /* token ids (and OPT/BigCode position ids, else rotary cos/sin tables) */
    double total = IDX * tok;
    if (m->family == VRAM_FAMILY_OPT || m->family == VRAM_FAMILY_GPT_BIGCODE)
        total += IDX * s + (m->family == VRAM_FAMILY_GPT_BIGCODE ? MASK * tok * h : 0);
    else if (!sh->rope_buffer)
        total += 2 * 4.0 * s * (double)head_dim(m);
    total += stack(&l, (double)m->num_layers, sh->checkpointing);
    total += norm_weights(m, (double)(norms_per_layer(m) * m->num_layers + 1), h);
    if (!m->no_final_norm)
        total += tok * (layer_norm_family(m) ? h * sh->f32 + 2 * STAT : rms_norm(sh, h));
    *bytes = total;
    return 0;
}
