/* The LoRA target linears of the third-edition families, the "LoRA
 * targets" column of their rows (docs/estimation.md, "Family table"), under
 * PEFT's roles: q, k, v, o for attention, gate, up, down for the MLP.
 * transformers 5 keeps MoE experts as stacked parameters, not nn.Linear:
 * PEFT's target_modules (and bitsandbytes) do not reach them, so only the
 * attention, the dense MLPs and the shared experts are listed. Mamba's
 * in_proj answers to "up", out_proj to "down", x_proj and dt_proj to
 * "gate". */
#include "arch_parts.h"
#include "lora.h"

#define QKV (VRAM_LORA_Q | VRAM_LORA_K | VRAM_LORA_V)

static void attn(vram_lora_linears_t *l, int64_t h, double count)
{
    vram_lora_add(l, VRAM_LORA_Q, h, h, count);
    vram_lora_add(l, VRAM_LORA_K, h, h, count);
    vram_lora_add(l, VRAM_LORA_V, h, h, count);
    vram_lora_add(l, VRAM_LORA_O, h, h, count);
}

static void decoder(const vram_model_t *m, vram_lora_linears_t *l)
{
    double L = (double)m->num_layers;
    int64_t h = m->hidden_size, d = head_dim(m), a = m->num_heads;
    int64_t q = a * d, kv = kv_heads(m) * d;
    if (m->kv_lora_rank > 0) {
        int64_t qd = a * (d + m->rope_head_dim), r = m->kv_lora_rank;
        if (m->q_lora_rank > 0) {
            vram_lora_add(l, VRAM_LORA_Q, h, m->q_lora_rank, L);
            vram_lora_add(l, VRAM_LORA_Q, m->q_lora_rank, qd, L);
        } else {
            vram_lora_add(l, VRAM_LORA_Q, h, qd, L);
        }
        vram_lora_add(l, VRAM_LORA_K | VRAM_LORA_V, h, r + m->rope_head_dim, L);
        vram_lora_add(l, VRAM_LORA_K | VRAM_LORA_V, r, a * (d + m->v_head_dim), L);
        vram_lora_add(l, VRAM_LORA_O, a * m->v_head_dim, h, L);
    } else if (m->fused_qkv) {
        vram_lora_add(l, QKV, h, q + 2 * kv, L);
        vram_lora_add(l, VRAM_LORA_O, q, h, L);
    } else {
        vram_lora_add(l, VRAM_LORA_Q, h, q, L);
        vram_lora_add(l, VRAM_LORA_K, h, kv, L);
        vram_lora_add(l, VRAM_LORA_V, h, kv, L);
        vram_lora_add(l, VRAM_LORA_O, q, h, L);
    }
    double dense = m->num_experts > 0 ? (double)m->dense_layers : L;
    vram_lora_mlp(l, h, m->intermediate_size, m->gated_mlp, dense);
    if (m->num_experts > 0 && m->shared_intermediate > 0)
        vram_lora_mlp(l, h, m->shared_intermediate, m->gated_mlp, L - dense);
}

int vram_arch_lora_linears(const vram_model_t *m, vram_lora_linears_t *l)
{
    double L = (double)m->num_layers, D = (double)m->num_decoder_layers;
    int64_t h = m->hidden_size, I = m->intermediate_size;
    switch (m->family) {
    case VRAM_FAMILY_DECODER:
        decoder(m, l);
        return 0;
    case VRAM_FAMILY_BART:
        attn(l, h, L + 2 * D);
        vram_lora_mlp(l, h, I, false, L + D);
        return 0;
    case VRAM_FAMILY_DISTILBERT:
    case VRAM_FAMILY_DEBERTA_V2:
    case VRAM_FAMILY_CLIP_VISION:
        attn(l, h, L);
        vram_lora_mlp(l, h, I, false, L);
        return 0;
    case VRAM_FAMILY_CLIP:
        attn(l, h, L);
        vram_lora_mlp(l, h, I, false, L);
        attn(l, m->text_hidden, (double)m->text_layers);
        vram_lora_mlp(l, m->text_hidden, m->text_intermediate, false, (double)m->text_layers);
        return 0;
    case VRAM_FAMILY_MAMBA: {
        int64_t in = m->ssm_inner, n = m->ssm_state, r = m->ssm_dt_rank;
        vram_lora_add(l, VRAM_LORA_UP, h, 2 * in, L);
        vram_lora_add(l, VRAM_LORA_GATE, in, r + 2 * n, L);
        vram_lora_add(l, VRAM_LORA_GATE, r, in, L);
        vram_lora_add(l, VRAM_LORA_DOWN, in, h, L);
        return 0;
    }
    default:
        return vram_fail(VRAM_EINVAL,
                         "LoRA is not supported for %s models (transformer families only)",
                         vram_family_name(m->family));
    }
}
