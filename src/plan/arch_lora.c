/* The LoRA target linears of the third-edition families, the "LoRA
 * targets" column of their rows (arch.c; docs/estimation.md, "LoRA and
 * QLoRA"), under PEFT's roles: q, k, v, o for attention, gate, up, down
 * for the MLP. transformers 5 keeps MoE experts as stacked parameters, not
 * nn.Linear: bitsandbytes does not quantize them, and PEFT 0.21 reaches
 * them only through its conversion of gate/up/down into target_parameters,
 * which then leaves the dense MLPs and shared experts (nn.Linear, so
 * quantized) without adapters. Mamba's in_proj answers to "up", out_proj
 * to "down", x_proj and dt_proj to "gate". */
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

/* A gated MLP quantized but not adapted (roles 0): see the top of the file */
static void frozen_mlp(vram_lora_linears_t *l, int64_t h, int64_t I, double count)
{
    for (int i = 0; i < 3; i++)
        vram_lora_add(l, 0, i < 2 ? h : I, i < 2 ? I : h, I > 0 ? count : 0);
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
    if (m->num_experts <= 0) {
        vram_lora_mlp(l, h, m->intermediate_size, m->gated_mlp, L);
        return;
    }
    double dense = (double)m->dense_layers;
    frozen_mlp(l, h, m->intermediate_size, dense);
    frozen_mlp(l, h, m->shared_intermediate, L - dense);
    vram_lora_experts(l, h, m->expert_intermediate, m->num_experts, m->experts_per_token,
                      L - dense);
}

void vram_lora_decoder(const vram_model_t *m, vram_lora_linears_t *l)
{
    decoder(m, l);
}

/* encoder, decoder and cross attention, fc1/fc2 */
void vram_lora_bart(const vram_model_t *m, vram_lora_linears_t *l)
{
    double L = (double)m->num_layers, D = (double)m->num_decoder_layers;
    attn(l, m->hidden_size, L + 2 * D);
    vram_lora_mlp(l, m->hidden_size, m->intermediate_size, false, L + D);
}

/* DistilBERT, DeBERTa-v2, CLIP's vision tower */
void vram_lora_encoder(const vram_model_t *m, vram_lora_linears_t *l)
{
    double L = (double)m->num_layers;
    attn(l, m->hidden_size, L);
    vram_lora_mlp(l, m->hidden_size, m->intermediate_size, false, L);
}

void vram_lora_clip(const vram_model_t *m, vram_lora_linears_t *l)
{
    vram_lora_encoder(m, l);
    attn(l, m->text_hidden, (double)m->text_layers);
    vram_lora_mlp(l, m->text_hidden, m->text_intermediate, false, (double)m->text_layers);
}

void vram_lora_mamba(const vram_model_t *m, vram_lora_linears_t *l)
{
    double L = (double)m->num_layers;
    int64_t h = m->hidden_size, in = m->ssm_inner, n = m->ssm_state, r = m->ssm_dt_rank;
    vram_lora_add(l, VRAM_LORA_UP, h, 2 * in, L);
    vram_lora_add(l, VRAM_LORA_GATE, in, r + 2 * n, L);
    vram_lora_add(l, VRAM_LORA_GATE, r, in, L);
    vram_lora_add(l, VRAM_LORA_DOWN, in, h, L);
}
