/* LoRA and QLoRA: the linear layers of the second-edition families (the
 * "LoRA targets" column of their rows in arch.c), under the names PEFT
 * targets (q, k, v, o, gate, up, down), the adapters' parameters and the
 * bytes of a quantized frozen base (docs/estimation.md, "LoRA and QLoRA"). */
#include "arch_parts.h"
#include "lora.h"

#include <string.h>

#define QKV (VRAM_LORA_Q | VRAM_LORA_K | VRAM_LORA_V)

/* q, k, v and o of one attention block, `count` times. */
static void attention(vram_lora_linears_t *l, const vram_model_t *m, double count)
{
    int64_t h = m->hidden_size, d = head_dim(m);
    int64_t q = m->num_heads * d, kv = kv_heads(m) * d;
    vram_lora_add(l, VRAM_LORA_Q, h, q, count);
    vram_lora_add(l, VRAM_LORA_K, h, kv, count);
    vram_lora_add(l, VRAM_LORA_V, h, kv, count);
    vram_lora_add(l, VRAM_LORA_O, q, h, count);
}

/* q, k, v, o and the MLP (gated or two-layer) of every layer */
static void blocks(const vram_model_t *m, vram_lora_linears_t *l, bool gated)
{
    attention(l, m, (double)m->num_layers);
    vram_lora_mlp(l, m->hidden_size, m->intermediate_size, gated, (double)m->num_layers);
}

/* The "LoRA targets" column of the second-edition rows (arch.c). */

void vram_lora_llama(const vram_model_t *m, vram_lora_linears_t *l)
{
    blocks(m, l, true);
}

/* transformers 5 stacks Mixtral's experts (w1 and w3 in gate_up_proj, w2
 * in down_proj) and its router is a module of its own: PEFT 0.21 reaches
 * them through target_parameters (utils/transformers_weight_conversion.py,
 * _MOE_TARGET_MODULE_MAPPING), bitsandbytes does not quantize them. */
void vram_lora_mixtral(const vram_model_t *m, vram_lora_linears_t *l)
{
    double L = (double)m->num_layers;
    attention(l, m, L);
    vram_lora_experts(l, m->hidden_size, m->expert_intermediate, m->num_experts,
                      m->experts_per_token, L);
}

/* Qwen2-MoE: PEFT 0.21 keeps gate_proj, up_proj and down_proj on the shared
 * expert's nn.Linear and never reaches the stacked experts or the router;
 * "all-linear" adds shared_expert_gate (an nn.Linear: quantized). The
 * stacked experts are neither adapted nor quantized: not listed. */
void vram_lora_qwen2_moe(const vram_model_t *m, vram_lora_linears_t *l)
{
    double L = (double)m->num_layers;
    int64_t h = m->hidden_size;
    attention(l, m, L);
    if (m->shared_intermediate > 0) {
        vram_lora_mlp(l, h, m->shared_intermediate, true, L);
        vram_lora_add(l, VRAM_LORA_ROUTER, h, 1, L);
    }
}

void vram_lora_phi3(const vram_model_t *m, vram_lora_linears_t *l)
{
    /* fused qkv_proj and gate_up_proj */
    double L = (double)m->num_layers;
    int64_t h = m->hidden_size, I = m->intermediate_size, d = head_dim(m);
    int64_t q = m->num_heads * d, kv = kv_heads(m) * d;
    vram_lora_add(l, QKV, h, q + 2 * kv, L);
    vram_lora_add(l, VRAM_LORA_O, q, h, L);
    vram_lora_add(l, VRAM_LORA_GATE | VRAM_LORA_UP, h, 2 * I, L);
    vram_lora_add(l, VRAM_LORA_DOWN, I, h, L);
}

/* GPT-2, GPTBigCode, GPT-NeoX: fused c_attn / query_key_value; c_fc, c_proj */
void vram_lora_fused_qkv(const vram_model_t *m, vram_lora_linears_t *l)
{
    double L = (double)m->num_layers;
    int64_t h = m->hidden_size, d = head_dim(m);
    int64_t q = m->num_heads * d, kv = kv_heads(m) * d;
    vram_lora_add(l, QKV, h, q + 2 * kv, L);
    vram_lora_add(l, VRAM_LORA_O, h, h, L);
    vram_lora_mlp(l, h, m->intermediate_size, false, L);
}

/* BERT, OPT, Phi, wav2vec2: q, k, v, o and a two-layer MLP */
void vram_lora_two_layer(const vram_model_t *m, vram_lora_linears_t *l)
{
    blocks(m, l, false);
}

/* encoder, decoder and cross attention */
void vram_lora_t5(const vram_model_t *m, vram_lora_linears_t *l)
{
    double L = (double)m->num_layers;
    double dec = (double)(m->num_decoder_layers > 0 ? m->num_decoder_layers : m->num_layers);
    attention(l, m, L + 2 * dec);
    vram_lora_mlp(l, m->hidden_size, m->intermediate_size, m->gated_mlp, L + dec);
}

void vram_lora_whisper(const vram_model_t *m, vram_lora_linears_t *l)
{
    double L = (double)m->num_layers, dec = (double)m->num_decoder_layers;
    attention(l, m, L + 2 * dec);
    vram_lora_mlp(l, m->hidden_size, m->intermediate_size, false, L + dec);
}

int vram_lora_check_targets(const vram_lora_linears_t *l, unsigned targets)
{
    unsigned gu = VRAM_LORA_GATE | VRAM_LORA_UP, t = targets & gu;
    for (int i = 0; i < l->n; i++)
        if (l->items[i].stacked && l->items[i].roles == gu && t && t != gu)
            return vram_fail(VRAM_EINVAL,
                             "LoRA targets: this model's experts keep gate and up in one "
                             "gate_up_proj, which PEFT adapts only when both are targeted: add %s",
                             t == VRAM_LORA_GATE ? "up" : "gate");
    return 0;
}

int vram_lora_targets_parse(const char *text, unsigned *out)
{
    static const struct {
        const char *name;
        unsigned bits;
    } names[] = {
        {"q", VRAM_LORA_Q},       {"k", VRAM_LORA_K},
        {"v", VRAM_LORA_V},       {"o", VRAM_LORA_O},
        {"gate", VRAM_LORA_GATE}, {"up", VRAM_LORA_UP},
        {"down", VRAM_LORA_DOWN}, {"all-linear", VRAM_LORA_ALL_LINEAR},
    };
    unsigned bits = 0;
    const char *s = text ? text : "";
    while (*s) {
        size_t len = strcspn(s, ",");
        size_t i = 0;
        for (; i < sizeof names / sizeof names[0]; i++)
            if (strlen(names[i].name) == len && !strncmp(names[i].name, s, len)) break;
        if (i == sizeof names / sizeof names[0])
            return vram_fail(VRAM_EINVAL,
                             "unknown LoRA target \"%.*s\" (use q, k, v, o, gate, up, down or "
                             "all-linear, separated by commas)",
                             (int)len, s);
        bits |= names[i].bits;
        s += len;
        if (*s == ',') s++;
    }
    if (!bits) return vram_fail(VRAM_EINVAL, "no LoRA targets given");
    *out = bits;
    return 0;
}

/* "all-linear" (every role) reaches the routers too, as PEFT's does */
static unsigned reach(unsigned targets)
{
    return (targets & VRAM_LORA_ALL_LINEAR) == VRAM_LORA_ALL_LINEAR ? targets | VRAM_LORA_ROUTER
                                                                    : targets;
}

double vram_lora_adapter_params(const vram_lora_linears_t *l, unsigned targets, int64_t rank)
{
    double n = 0;
    targets = reach(targets);
    for (int i = 0; i < l->n; i++)
        if (l->items[i].roles & targets)
            n += (double)rank * l->items[i].rank_mult * (l->items[i].in + l->items[i].out) *
                 l->items[i].count;
    return n;
}

double vram_lora_linear_params(const vram_lora_linears_t *l, double *largest)
{
    double n = 0, big = 0;
    for (int i = 0; i < l->n; i++) {
        if (l->items[i].stacked) continue; /* bitsandbytes replaces nn.Linear only */
        double e = l->items[i].in * l->items[i].out;
        n += e * l->items[i].count;
        if (e > big) big = e;
    }
    if (largest) *largest = big;
    return n;
}

double vram_lora_adapter_acts_per_token(const vram_lora_linears_t *l, unsigned targets,
                                        int64_t rank, double bytes)
{
    /* lora_A's output, kept by lora_B, per targeted linear and token; the
     * input x is the base linear's (already counted) */
    double per = 0;
    targets = reach(targets);
    for (int i = 0; i < l->n; i++)
        if (l->items[i].roles & targets)
            per += (double)rank * l->items[i].rank_mult * bytes * l->items[i].runs;
    return per;
}

double vram_quant_bytes_per_weight(vram_quant_t q, bool double_quant)
{
    switch (q) {
    case VRAM_QUANT_NF4:
        /* 4 bits, plus one absmax per 64 weights: fp32, or (double
         * quantization) 8 bits with one fp32 constant per 256 absmaxes
         * (Dettmers et al. 2023, QLoRA, section 3) */
        return 0.5 + (double_quant ? 1.0 / 64 + 4.0 / (64 * 256) : 4.0 / 64);
    case VRAM_QUANT_INT8:
        /* LLM.int8(): one byte per weight (the per-row fp32 scale is negligible) */
        return 1;
    default:
        return 0;
    }
}
