/* LoRA/QLoRA helpers of the estimator (lora.c). Internal to src/plan. */
#ifndef VRAM_PLAN_LORA_H
#define VRAM_PLAN_LORA_H

#include "vram.h"

#define VRAM_LORA_MAX_LINEARS 16

/* `count` linears of in x out weights answering to the VRAM_LORA_* `roles`. */
typedef struct {
    unsigned roles;
    double in, out, count;
} vram_lora_linear_t;

typedef struct {
    vram_lora_linear_t items[VRAM_LORA_MAX_LINEARS];
    int n;
} vram_lora_linears_t;

/* Appends `count` linears of in x out answering to `roles` (dropped past
 * VRAM_LORA_MAX_LINEARS or when count <= 0). */
static inline void vram_lora_add(vram_lora_linears_t *l, unsigned roles, int64_t in, int64_t out,
                                 double count)
{
    if (l->n >= VRAM_LORA_MAX_LINEARS || count <= 0) return;
    l->items[l->n++] = (vram_lora_linear_t){roles, (double)in, (double)out, count};
}
/* A gated MLP (gate, up, down) or a two-layer one (up, down). */
static inline void vram_lora_mlp(vram_lora_linears_t *l, int64_t h, int64_t I, bool gated,
                                 double count)
{
    if (gated) vram_lora_add(l, VRAM_LORA_GATE, h, I, count);
    vram_lora_add(l, VRAM_LORA_UP, h, I, count);
    vram_lora_add(l, VRAM_LORA_DOWN, I, h, count);
}

/* The linears of the model's blocks (not embeddings or heads): what
 * PEFT's "all-linear" adapts and what QLoRA quantizes. EINVAL for a family
 * without them (CNNs, RNNs, profiles, torchvision ViT). */
int vram_lora_linears(const vram_model_t *m, vram_lora_linears_t *l);
/* The same for the third-edition families (arch_lora.c). */
int vram_arch_lora_linears(const vram_model_t *m, vram_lora_linears_t *l);
/* Parameters of rank-r adapters (A: r x in, B: out x r) on the targets. */
double vram_lora_adapter_params(const vram_lora_linears_t *l, unsigned targets, int64_t rank);
/* Weights of all the linears; *largest gets the largest one's. */
double vram_lora_linear_params(const vram_lora_linears_t *l, double *largest);
/* Activation bytes the adapters add per token (lora_A's r-wide output). */
double vram_lora_adapter_acts_per_token(const vram_lora_linears_t *l, unsigned targets,
                                        int64_t rank, double bytes);
/* Bytes per quantized weight, with the quantization constants. */
double vram_quant_bytes_per_weight(vram_quant_t q, bool double_quant);

#endif
