/* LoRA and QLoRA: the linear layers each family has, under the names PEFT
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

int vram_lora_linears(const vram_model_t *m, vram_lora_linears_t *l)
{
    l->n = 0;
    if (!vram_arch_has_layers(m) || m->family == VRAM_FAMILY_VIT || m->num_heads <= 0)
        return vram_fail(VRAM_EINVAL,
                         "LoRA is not supported for %s models (transformer families only)",
                         vram_family_name(m->family));
    double L = (double)m->num_layers;
    int64_t h = m->hidden_size, I = m->intermediate_size, d = head_dim(m);
    int64_t q = m->num_heads * d, kv = kv_heads(m) * d;
    switch (m->family) {
    case VRAM_FAMILY_LLAMA:
    case VRAM_FAMILY_QWEN2:
    case VRAM_FAMILY_GEMMA:
    case VRAM_FAMILY_GEMMA2:
        attention(l, m, L);
        vram_lora_mlp(l, h, I, true, L);
        return 0;
    case VRAM_FAMILY_MIXTRAL:
    case VRAM_FAMILY_QWEN2_MOE:
        /* every expert's w1 (gate), w3 (up), w2 (down); the router stays frozen */
        attention(l, m, L);
        vram_lora_mlp(l, h, m->expert_intermediate, true, L * (double)m->num_experts);
        if (m->shared_intermediate > 0) vram_lora_mlp(l, h, m->shared_intermediate, true, L);
        return 0;
    case VRAM_FAMILY_PHI3: /* fused qkv_proj and gate_up_proj */
        vram_lora_add(l, QKV, h, q + 2 * kv, L);
        vram_lora_add(l, VRAM_LORA_O, q, h, L);
        vram_lora_add(l, VRAM_LORA_GATE | VRAM_LORA_UP, h, 2 * I, L);
        vram_lora_add(l, VRAM_LORA_DOWN, I, h, L);
        return 0;
    case VRAM_FAMILY_GPT2:
    case VRAM_FAMILY_GPT_BIGCODE:
    case VRAM_FAMILY_GPTNEOX: /* fused c_attn / query_key_value; c_fc, c_proj */
        vram_lora_add(l, QKV, h, q + 2 * kv, L);
        vram_lora_add(l, VRAM_LORA_O, h, h, L);
        vram_lora_mlp(l, h, I, false, L);
        return 0;
    case VRAM_FAMILY_BERT:
    case VRAM_FAMILY_OPT:
    case VRAM_FAMILY_PHI:
    case VRAM_FAMILY_WAV2VEC2:
        attention(l, m, L);
        vram_lora_mlp(l, h, I, false, L);
        return 0;
    case VRAM_FAMILY_T5: {
        double dec = (double)(m->num_decoder_layers > 0 ? m->num_decoder_layers : m->num_layers);
        attention(l, m, L + 2 * dec);
        vram_lora_mlp(l, h, I, m->gated_mlp, L + dec);
        return 0;
    }
    case VRAM_FAMILY_WHISPER: {
        double dec = (double)m->num_decoder_layers;
        attention(l, m, L + 2 * dec);
        vram_lora_mlp(l, h, I, false, L + dec);
        return 0;
    }
    default: /* the third-edition families' rows (arch_lora.c) */
        return vram_arch_lora_linears(m, l);
    }
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

double vram_lora_adapter_params(const vram_lora_linears_t *l, unsigned targets, int64_t rank)
{
    double n = 0;
    for (int i = 0; i < l->n; i++)
        if (l->items[i].roles & targets)
            n += (double)rank * (l->items[i].in + l->items[i].out) * l->items[i].count;
    return n;
}

double vram_lora_linear_params(const vram_lora_linears_t *l, double *largest)
{
    double n = 0, big = 0;
    for (int i = 0; i < l->n; i++) {
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
    for (int i = 0; i < l->n; i++)
        if (l->items[i].roles & targets) per += (double)rank * bytes * l->items[i].count;
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
