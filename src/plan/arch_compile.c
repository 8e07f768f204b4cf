/* torch.compile's saved tensors for a decoder layer (docs/estimation.md,
 * "torch.compile"). AOTAutograd traces forward and backward into one joint
 * graph and inductor splits it with the min-cut partitioner
 * (torch/_functorch/partitioners.py, min_cut_rematerialization_partition):
 * the forward hands backward the cheapest set of tensors from which backward
 * can recompute the rest. Pointwise ops (casts, RMSNorm's square, mean and
 * scaling, rotary's multiply-adds, SiLU, residual adds) are fused and
 * recomputed; matmuls and attention are never recomputed, so what is kept is
 * what those need and cannot be rebuilt from cheaper tensors:
 *   - the layer input and each norm's fp32 1/rms (norms are rebuilt from
 *     them, no fp32 copy of the hidden state is kept);
 *   - the input of every matmul: each norm's output (feeding q/k/v, and
 *     gate/up), the attention output's contiguous copy (feeding o_proj) and
 *     the gated product (feeding down);
 *   - the outputs of the matmuls that feed pointwise chains: o_proj's
 *     (the residual sum and the second norm are rebuilt from it), gate's
 *     and up's (SiLU and the product are rebuilt from them);
 *   - attention's own: q and k after rotary, v, its output and the fp32
 *     log-sum-exp per query and head.
 * Measured with PyTorch's partitioner on transformers 5's LlamaDecoderLayer
 * (bench/estimate/compiled_layer.py: the compiled backward graph's inputs),
 * exact for bf16 and fp32 (LLaMA, Mistral, Qwen2, Gemma, Phi-3, and the
 * generic row's Qwen 3 and OLMo 2). Covered: two RMSNorms per layer,
 * before or after attention and the MLP, optional q/k norms, gated MLP,
 * SDPA, one precision; eager attention, autocast, LayerNorm (OLMo's keeps
 * q_proj's and k_proj's outputs too), sandwich norms and experts stay
 * counted as eager, an upper bound. */
#include "arch_compile.h"
#include "arch_parts.h"

/* Two RMSNorms per layer (before attention and the MLP, or after them as
 * OLMo 2 places them), a gated MLP, no experts: the layouts measured. */
static bool covered(const vram_model_t *m)
{
    if (m->num_experts > 0) return false;
    switch (m->family) {
    case VRAM_FAMILY_LLAMA:
    case VRAM_FAMILY_QWEN2:
    case VRAM_FAMILY_GEMMA:
    case VRAM_FAMILY_PHI3: /* fused qkv and gate_up: the same tensors, in one matmul each */
        return true;
    case VRAM_FAMILY_DECODER:
        return m->norm_kind == VRAM_NORM_RMS && m->gated_mlp && !m->fused_qkv &&
               (m->norm_layout == VRAM_NORMS_PRE || m->norm_layout == VRAM_NORMS_POST);
    default:
        return false;
    }
}

bool vram_arch_compiled_layer(const vram_model_t *m, const vram_arch_shape_t *s, double *bytes)
{
    if (!covered(m) || !s->fused_attention || s->amp || !s->training) return false;
    double e = s->mm, h = (double)m->hidden_size, a = (double)m->num_heads;
    double q = a * (double)head_dim(m), kv = (double)kv_heads(m) * (double)head_dim(m);
    /* torchtune's expanded keys and values are SDPA's inputs: kept q-wide
     * (measured, bench/estimate/torchtune_llama.py) */
    if (s->kv_expanded) kv = q;
    double I = (double)m->intermediate_size;
    double norms = 2;                      /* before (after) attention, before (after) the MLP */
    double kept = h                        /* the layer input */
                  + norms * h              /* the norms' outputs (post-norm: o_proj's and down's
                                            * outputs, the MLP's input) */
                  + q + 2 * kv             /* attention's q, k (after rotary) and v */
                  + 2 * q                  /* attention's output and o_proj's contiguous input */
                  + h                      /* o_proj's output */
                  + 3 * I;                 /* gate's and up's outputs, their product */
    double stats = norms * STAT + 4.0 * a; /* 1/rms per norm, log-sum-exp per head */
    if (m->qk_norm) {
        /* q_proj's and k_proj's outputs feed the q/k norms and are kept;
         * 1/rms per head (Qwen 3) or per token over the projection (OLMo 2) */
        kept += q + kv;
        stats += m->qk_norm == 1 ? STAT * (a + (double)kv_heads(m)) : 2 * STAT;
    }
    *bytes = e * kept + stats;
    return true;
}
