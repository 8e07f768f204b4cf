/* LoRA/QLoRA helpers of the estimator (lora.c). Internal to src/plan. */
#ifndef VRAM_PLAN_LORA_H
#define VRAM_PLAN_LORA_H

#include "vram.h"

#define VRAM_LORA_MAX_LINEARS 16

/* The router of a mixture of experts: PEFT's "all-linear" adapts it, no
 * role name does (an internal bit beside the public VRAM_LORA_*). */
#define VRAM_LORA_ROUTER (1u << 7)

/* `count` linears of in x out weights answering to the VRAM_LORA_* `roles`
 * (0: never adapted, still quantized by QLoRA). An adapter has rank
 * `rank_mult` x r (PEFT gives a stacked gate_up_proj rank 2r: gate and up
 * fused) and runs `runs` times per token (a routed expert: top-k of the
 * experts). `stacked`: an nn.Parameter, not an nn.Linear, which
 * bitsandbytes does not quantize. */
typedef struct {
    unsigned roles;
    double in, out, count;
    double rank_mult, runs;
    bool stacked;
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
    l->items[l->n++] = (vram_lora_linear_t){roles, (double)in, (double)out, count, 1, count, false};
}
/* Experts stacked as transformers 5 stores them (gate_up_proj [E, 2I, h],
 * down_proj [E, h, I]) in `layers` layers, with their router [E, h], as
 * PEFT reaches them (its transformers-v5 conversion of gate/up/down into
 * target_parameters). */
static inline void vram_lora_experts(vram_lora_linears_t *l, int64_t h, int64_t I, int64_t E,
                                     int64_t k, double layers)
{
    if (l->n + 3 > VRAM_LORA_MAX_LINEARS || layers <= 0) return;
    double e = (double)E * layers, runs = (double)k * layers;
    l->items[l->n++] = (vram_lora_linear_t){
        VRAM_LORA_GATE | VRAM_LORA_UP, (double)h, 2.0 * (double)I, e, 2, runs, true};
    l->items[l->n++] = (vram_lora_linear_t){VRAM_LORA_DOWN, (double)I, (double)h, e, 1, runs, true};
    l->items[l->n++] =
        (vram_lora_linear_t){VRAM_LORA_ROUTER, (double)h, (double)E, layers, 1, layers, true};
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
 * PEFT's "all-linear" adapts and what QLoRA quantizes; the "LoRA targets"
 * column of the family's row (arch.c). EINVAL for a family without them
 * (CNNs, RNNs, profiles, torchvision ViT). */
int vram_lora_linears(const vram_model_t *m, vram_lora_linears_t *l);
/* The column's entries: lora.c (second-edition families) ... */
void vram_lora_llama(const vram_model_t *m, vram_lora_linears_t *l);
void vram_lora_mixtral(const vram_model_t *m, vram_lora_linears_t *l);
void vram_lora_qwen2_moe(const vram_model_t *m, vram_lora_linears_t *l);
void vram_lora_phi3(const vram_model_t *m, vram_lora_linears_t *l);
void vram_lora_fused_qkv(const vram_model_t *m, vram_lora_linears_t *l);
void vram_lora_two_layer(const vram_model_t *m, vram_lora_linears_t *l);
void vram_lora_t5(const vram_model_t *m, vram_lora_linears_t *l);
void vram_lora_whisper(const vram_model_t *m, vram_lora_linears_t *l);
/* ... and arch_lora.c (third edition). */
void vram_lora_decoder(const vram_model_t *m, vram_lora_linears_t *l);
void vram_lora_bart(const vram_model_t *m, vram_lora_linears_t *l);
void vram_lora_encoder(const vram_model_t *m, vram_lora_linears_t *l);
void vram_lora_clip(const vram_model_t *m, vram_lora_linears_t *l);
void vram_lora_mamba(const vram_model_t *m, vram_lora_linears_t *l);
/* EINVAL when `targets` name gate or up but not both on a model whose
 * experts PEFT reaches (it refuses: they are fused in gate_up_proj). */
int vram_lora_check_targets(const vram_lora_linears_t *l, unsigned targets);
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
