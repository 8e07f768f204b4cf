/* The generation cache of each family (docs/estimation.md, "KV cache"):
 * keys and values per attention layer (transformers' DynamicCache), of
 * which sliding-window layers keep only the last window - 1 tokens
 * (DynamicSlidingWindowLayer); encoder-decoders add the cross-attention
 * keys and values of the encoded input; DeepSeek's latent attention caches
 * the decompressed keys (non-rotary + rotary part) and values per head;
 * Mamba keeps no keys at all but a convolution and a scan state per layer
 * (MambaCache), whatever the length. */
#include "arch_parts.h"

/* Key plus value elements per token and layer. */
static double kv_per_token(const vram_model_t *m)
{
    if (m->kv_lora_rank > 0)
        return (double)m->num_heads *
               ((double)head_dim(m) + (double)m->rope_head_dim + (double)m->v_head_dim);
    return 2.0 * (double)kv_heads(m) * (double)head_dim(m);
}

/* Tokens held over `layers` layers after `tokens` tokens went through. */
static double held(const vram_model_t *m, double layers, double tokens)
{
    double sliding = (double)m->sliding_layers, w = (double)m->sliding_window;
    if (w <= 0 || sliding <= 0) return layers * tokens;
    if (sliding > layers) sliding = layers;
    double kept = tokens < w - 1 ? tokens : w - 1;
    return (layers - sliding) * tokens + sliding * kept;
}

void vram_arch_cache_bytes(const vram_model_t *m, double b, double prompt, double new_tokens,
                           double elem, double *prompt_bytes, double *full_bytes)
{
    double full = prompt + new_tokens;
    if (m->family == VRAM_FAMILY_MAMBA) {
        /* conv_states [b, inner, conv_kernel] and ssm_states [b, inner, state] */
        double state = (double)m->num_layers * b * (double)m->ssm_inner *
                       (double)(m->ssm_conv + m->ssm_state) * elem;
        *prompt_bytes = *full_bytes = state;
        return;
    }
    double per = kv_per_token(m) * b * elem;
    if (m->family == VRAM_FAMILY_T5 || m->family == VRAM_FAMILY_WHISPER ||
        m->family == VRAM_FAMILY_BART) {
        /* the decoder's self-attention over its own tokens, and the
         * cross-attention keys and values of the encoded input; Whisper's
         * decoder prompt (the start, language and task tokens) is `prompt`,
         * its encoder always 1500 frames */
        double dec = (double)(m->num_decoder_layers > 0 ? m->num_decoder_layers : m->num_layers);
        double src = m->family == VRAM_FAMILY_WHISPER ? (double)m->max_source_positions : prompt;
        double self_prompt = m->family == VRAM_FAMILY_WHISPER ? prompt : 0;
        *prompt_bytes = dec * per * (src + self_prompt);
        *full_bytes = dec * per * (src + self_prompt + new_tokens);
        return;
    }
    double layers = (double)m->num_layers;
    *prompt_bytes = per * held(m, layers, prompt);
    *full_bytes = per * held(m, layers, full);
}
