/* Building blocks shared by the architecture files: parameter tensors of
 * linears and norms, and the activation terms of attention (see arch.h for
 * the byte roles). Internal to src/plan. */
#ifndef VRAM_PLAN_ARCH_PARTS_H
#define VRAM_PLAN_ARCH_PARTS_H

#include "arch.h"

/* Bytes of fp32 statistics, int64 indices and dropout masks. */
#define STAT 4.0
#define IDX  8.0
#define MASK 1.0

static inline void linear(vram_arch_params_t *p, int64_t out, int64_t in, bool bias)
{
    vram_arch_add_tensor(p, 1, (uint64_t)out, (uint64_t)in);
    if (bias) vram_arch_add_tensor(p, 1, (uint64_t)out, 1);
}

static inline void norm(vram_arch_params_t *p, int64_t h, bool bias)
{
    vram_arch_add_tensor(p, 1, (uint64_t)h, 1);
    if (bias) vram_arch_add_tensor(p, 1, (uint64_t)h, 1);
}

/* L encoder layers with biases everywhere: q, k, v, o, a LayerNorm, the
 * two MLP linears, a LayerNorm (BERT, the BART encoder, DistilBERT, CLIP's
 * and SigLIP's towers: the same tensors whether the norms come first or
 * last). */
static inline void biased_encoder_layers(vram_arch_params_t *p, int64_t h, int64_t I, int64_t L)
{
    vram_arch_params_t layer = {0};
    for (int j = 0; j < 4; j++)
        linear(&layer, h, h, true);
    norm(&layer, h, true);
    linear(&layer, I, h, true);
    linear(&layer, h, I, true);
    norm(&layer, h, true);
    vram_arch_add_repeated(p, &layer, (uint64_t)L);
}

static inline int64_t kv_heads(const vram_model_t *m)
{
    return m->num_kv_heads > 0 ? m->num_kv_heads : m->num_heads;
}

static inline int64_t head_dim(const vram_model_t *m)
{
    return m->head_dim > 0 ? m->head_dim : m->hidden_size / m->num_heads;
}

typedef struct {
    double layer;   /* one layer, everything saved */
    double core;    /* its attention core (scores, softmax, dropout): selective recomputes it */
    double input;   /* its input, all that full checkpointing keeps */
    double working; /* inference: peak working set of one layer */
} layer_acts_t;

/* Bytes per element of an f32-role tensor that `n` matmuls consume: one
 * 2-byte copy per matmul under autocast, else the tensor itself once. */
static inline double fed(const vram_arch_shape_t *p, int n)
{
    return p->amp ? 2.0 * n : p->f32;
}

/* Bytes the softmax and the probabilities-times-values matmul keep. */
static inline double attention_probs(const vram_arch_shape_t *p, double scores, bool dropout)
{
    /* pure half precision with Hugging Face's fp32 softmax: the fp32
     * probabilities (softmax's output) and their half cast (the matmul's) */
    if (p->upcast && !p->amp && p->f32 == 2) return scores * (4 + 2 + (dropout ? MASK : 0));
    if (dropout) return scores * (p->f32 + MASK + fed(p, 1));
    return scores * (p->f32 + (p->amp ? 2 : 0));
}

/* The attention core over q_len x kv_len scores: the softmax output (f32
 * role; without dropout the second matmul keeps it too, as its own copy
 * under autocast); with dropout also the mask and the dropped
 * probabilities, which the second matmul keeps. Fused attention (SDPA,
 * FlashAttention) keeps no scores, only the fp32 log-sum-exp per query. */
static inline double attention_core(const vram_arch_shape_t *p, double b, double heads,
                                    double q_len, double kv_len, bool dropout)
{
    if (p->fused_attention) return 4.0 * b * heads * q_len;
    double scores = b * heads * q_len * kv_len;
    double clamp = p->clamp ? p->mm * scores : 0;
    return clamp + attention_probs(p, scores, dropout);
}

/* What a GPU's SDPA kernel keeps per token beyond q, k, v and an output
 * shared with the output projection's input (docs/estimation.md, "What
 * SDPA keeps"): a q that is a view of one fused projection keeps all of it
 * (its k and v parts: k and v themselves are the cache's copies); a q made
 * contiguous (by cat or .contiguous()) makes FlashAttention allocate its
 * output in that layout (flash_api.cpp: empty_like(q)), which the
 * transpose(1, 2).contiguous() after it copies for the projection. */
static inline double sdpa_extra(const vram_model_t *m, const vram_arch_shape_t *p, double qd,
                                double kvd)
{
    if (!p->fused_attention) return 0;
    double x = 0;
    if (m->sdpa_saves & VRAM_SDPA_QKV_VIEW) x += 2 * kvd;
    if (m->sdpa_saves & VRAM_SDPA_OUT_COPY) x += qd;
    return x * p->mm;
}

/* Inference working set of attention: q, k, v, context, scores and probs
 * (fused attention materializes no scores). */
static inline double attention_working(const vram_arch_shape_t *p, double b, double s, double h,
                                       double kvd, double heads, double kv_len)
{
    double scores = p->fused_attention ? 0 : heads * s * kv_len;
    /* the scores and probabilities; Hugging Face's fp32 softmax in half
     * precision adds the fp32 probabilities before their cast */
    double per_score = 2 * p->mm + (p->upcast && p->mm == 2 && !p->fused_attention ? 4 : 0);
    return b * (p->mm * (s * (2 * h) + 2 * kv_len * kvd) + per_score * scores);
}

/* Bytes transformers' RMSNorm (LlamaRMSNorm and its copies) keeps per
 * token over `width`: the input upcast to fp32 (kept by pow and by the
 * multiply; the input itself in fp32 and amp), 1/rms, and the normalized
 * tensor the weight multiplies (fp32; in pure half precision its cast). */
static inline double rms_norm(const vram_arch_shape_t *p, double width)
{
    return (4 + (p->rms_fp32 ? 4 : p->f32)) * width + 4;
}

/* Gemma's extras: eager soft-capped scores keep tanh's output (one more
 * score-sized tensor); RMSNorm's (1 + weight) is an fp32 vector per norm. */
static inline double softcap_scores(const vram_model_t *m, const vram_arch_shape_t *p, double b,
                                    double a, double s)
{
    return m->attn_softcap && !p->fused_attention ? p->mm * b * a * s * s : 0;
}

static inline double norm_weights(const vram_model_t *m, double norms, double h)
{
    return m->norm_plus_one ? 4.0 * norms * h : 0;
}

/* Bytes per MLP element kept by the activation between the two linears.
 * The fused GELU keeps its input and output (2 mm). GPT-2's gelu_new, which
 * Hugging Face writes out in Python, keeps x³'s input, tanh, 0.5·x, 1 + tanh
 * and the product (five tensors in fp32, measured); under autocast pow and
 * the arithmetic after it run in fp32 and the product is cast for the
 * second linear (three fp32 and two 2-byte tensors, measured). */
static inline double gelu_new_bytes(const vram_arch_shape_t *p)
{
    if (!p->amp) return 5 * p->mm;
    return 3 * p->f32 + p->mm + 2; /* measured: three fp32, the input, the product's copy */
}

static inline double max2(double a, double b)
{
    return a > b ? a : b;
}

static inline double stack(const layer_acts_t *l, double layers, vram_checkpointing_t ck)
{
    if ((int)ck == (int)VRAM_CKPT_FULL_OFFLOAD)
        /* inputs on the CPU: the one being copied and the one recomputed */
        return 2 * l->input + l->layer;
    if ((int)ck == (int)VRAM_CKPT_FULL_INPUTS) return layers * l->input;
    /* before backward reaches the layers every offloaded input is on the
     * CPU (the forward's stash then holds the head's own tensors) */
    if ((int)ck == (int)VRAM_CKPT_OFFLOAD_INPUTS) return 0;
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

/* log_softmax of the loss keeps its output (fp32 under autocast), the loss
 * the int64 targets. */
static inline double logits(const vram_arch_shape_t *p, double tok, double V)
{
    return p->f32 * tok * V + IDX * tok;
}

/* BERT/RoBERTa (post-LN) and GPT-2 (pre-LN): two LayerNorm inputs on the
 * residual stream (f32) and two LayerNorm outputs consumed by matmuls (in
 * BERT the layer input feeds the separate q, k and v projections: three
 * autocast copies); q, k, v and the context (mm); the MLP activation's
 * I-wide tensors; two dropout masks; the attention core; LayerNorm mean and
 * rstd (fp32). `qkv_consumers` is 3 for BERT, 1 for GPT-2's fused c_attn;
 * `streams` is 1 for GPT-NeoX's parallel residual, where both LayerNorms
 * read the same layer input (NeoX is not measured: see docs).
 * With 2-byte activations, I = 4h and the fused GELU this is Korthikanti et
 * al.'s 34·sbh + 5·as²b. */
static inline layer_acts_t classic_layer(const vram_arch_shape_t *p, double b, double s, double h,
                                         double I, double a, bool dropout, int qkv_consumers,
                                         double mlp_bytes, int streams)
{
    layer_acts_t l;
    double tok = b * s;
    l.core = attention_core(p, b, a, s, s, dropout);
    double per_tok = h * (streams * p->f32 + fed(p, qkv_consumers) + fed(p, 1) + 4 * p->mm) +
                     I * mlp_bytes + (dropout ? MASK * 2 * h : 0) + 2 * 2 * STAT;
    l.layer = tok * per_tok + l.core;
    l.input = p->f32 * tok * h;
    l.working = p->mm * tok * h + max2(attention_working(p, b, s, h, h, a, s), p->mm * tok * 2 * I);
    return l;
}

#endif
