/* Task heads from a config's `architectures` (docs/estimation.md, "Heads"):
 * their parameters, following the Hugging Face classes, and what the head
 * and its loss keep for backward. */
#include "arch_parts.h"

bool vram_arch_is_decoder(const vram_model_t *m)
{
    switch (m->family) {
    case VRAM_FAMILY_GPT2:
    case VRAM_FAMILY_GPTNEOX:
    case VRAM_FAMILY_LLAMA:
    case VRAM_FAMILY_QWEN2:
    case VRAM_FAMILY_PHI:
    case VRAM_FAMILY_PHI3:
    case VRAM_FAMILY_GEMMA:
    case VRAM_FAMILY_GEMMA2:
    case VRAM_FAMILY_OPT:
    case VRAM_FAMILY_GPT_BIGCODE:
    case VRAM_FAMILY_MIXTRAL:
    case VRAM_FAMILY_QWEN2_MOE:
        return true;
    default:
        return false;
    }
}

/* Families whose head is built here (ViT's classifier, CNNs, RNNs and
 * profiles carry their own). */
static bool has_head(const vram_model_t *m)
{
    return vram_arch_is_decoder(m) || m->family == VRAM_FAMILY_BERT ||
           m->family == VRAM_FAMILY_T5 || m->family == VRAM_FAMILY_WHISPER ||
           m->family == VRAM_FAMILY_WAV2VEC2;
}

vram_head_t vram_arch_head(const vram_model_t *m)
{
    if (!has_head(m)) return VRAM_HEAD_BASE;
    if (m->head != VRAM_HEAD_DEFAULT) return m->head;
    if (vram_arch_is_decoder(m)) return VRAM_HEAD_CAUSAL_LM;
    if (m->family == VRAM_FAMILY_T5 || m->family == VRAM_FAMILY_WHISPER) return VRAM_HEAD_COND_GEN;
    return VRAM_HEAD_BASE;
}

int64_t vram_arch_head_width(const vram_model_t *m)
{
    return m->embed_proj_dim > 0 ? m->embed_proj_dim : m->hidden_size;
}

/* wav2vec2's (and Whisper's) audio classification: projector to
 * classifier_proj_size (256, the config default), mean over frames, classifier. */
#define AUDIO_PROJ 256

/* BERT's MLM head (BertLMPredictionHead, RobertaLMHead): dense + GELU +
 * LayerNorm, then the decoder tied to the word embeddings, with its own bias. */
static bool mlm_style(const vram_model_t *m, vram_head_t head)
{
    return m->family == VRAM_FAMILY_BERT &&
           (head == VRAM_HEAD_MASKED_LM || head == VRAM_HEAD_CAUSAL_LM);
}

void vram_arch_head_params(const vram_model_t *m, vram_arch_params_t *p)
{
    vram_head_t head = vram_arch_head(m);
    int64_t h = m->hidden_size, E = vram_arch_head_width(m), V = m->vocab_size;
    int64_t n = m->num_labels > 0 ? m->num_labels : 2;
    bool audio = m->family == VRAM_FAMILY_WAV2VEC2 || m->family == VRAM_FAMILY_WHISPER;
    if (mlm_style(m, head)) {
        linear(p, h, h, true);
        norm(p, h, true);
        vram_arch_add_tensor(p, 1, (uint64_t)V, 1); /* decoder bias; weight tied */
        return;
    }
    switch (head) {
    case VRAM_HEAD_MASKED_LM:
    case VRAM_HEAD_CAUSAL_LM:
    case VRAM_HEAD_COND_GEN:
        if (!m->tied_embeddings) linear(p, V, E, false);
        if (m->lm_head_bias) vram_arch_add_tensor(p, 1, (uint64_t)V, 1);
        return;
    case VRAM_HEAD_SEQ_CLS:
        if (audio) {
            linear(p, AUDIO_PROJ, h, true);
            linear(p, n, AUDIO_PROJ, true);
        } else {
            /* BERT: classifier after the pooler; decoders: `score`, no bias */
            linear(p, n, m->family == VRAM_FAMILY_BERT ? h : E, m->family == VRAM_FAMILY_BERT);
        }
        return;
    case VRAM_HEAD_TOKEN_CLS:
        linear(p, n, h, true);
        return;
    case VRAM_HEAD_QA:
        linear(p, 2, h, true);
        return;
    case VRAM_HEAD_CTC:
        linear(p, V, h, true);
        return;
    default:
        return;
    }
}

double vram_arch_head_acts(const vram_model_t *m, const vram_arch_shape_t *s, double tokens)
{
    vram_head_t head = vram_arch_head(m);
    double h = (double)m->hidden_size, E = (double)vram_arch_head_width(m);
    double V = (double)m->vocab_size, n = (double)(m->num_labels > 0 ? m->num_labels : 2);
    double b = (double)s->batch;
    bool lm = head == VRAM_HEAD_CAUSAL_LM || head == VRAM_HEAD_COND_GEN ||
              head == VRAM_HEAD_MASKED_LM || head == VRAM_HEAD_CTC;
    if (!s->training) {
        /* generation keeps the last position's logits, and Hugging Face's
         * generate() their fp32 copy; encoders and classifiers all positions */
        if (!lm) return 0;
        if (vram_arch_is_decoder(m) || head == VRAM_HEAD_COND_GEN) return b * V * (s->mm + 4);
        return s->mm * tokens * V;
    }
    if (mlm_style(m, head))
        /* dense output and GELU (mm), LayerNorm input (f32) and stats, the
         * LayerNorm output into the decoder, then the loss */
        return tokens * (2 * s->mm * h + s->f32 * h + 2 * STAT + fed(s, 1) * h) +
               logits(s, tokens, V);
    switch (head) {
    case VRAM_HEAD_MASKED_LM:
    case VRAM_HEAD_CAUSAL_LM:
    case VRAM_HEAD_COND_GEN:
    case VRAM_HEAD_CTC:
        /* the head's input, then the loss over every position's logits;
         * Hugging Face's causal LMs upcast the logits to fp32 for the loss */
        if (s->sum_loss) /* logits.sum(): the logits stay referenced by the model's output */
            return fed(s, 1) * tokens * E + s->mm * tokens * V;
        if (s->chunked_loss && s->compiled_loss)
            /* the compiled chunk keeps its input (the half-precision logits)
             * and a log-sum-exp per token */
            return fed(s, 1) * tokens * E + s->mm * tokens * V + (4 + IDX) * tokens;
        if (s->chunked_loss) /* eager: each chunk's log_softmax keeps its fp32 output */
            return fed(s, 1) * tokens * E + (4.0 + IDX / V) * tokens * V;
        if (vram_arch_is_decoder(m)) return fed(s, 1) * tokens * E + (4.0 + IDX / V) * tokens * V;
        return fed(s, 1) * tokens * E + logits(s, tokens, V);
    case VRAM_HEAD_SEQ_CLS:
        if (m->family == VRAM_FAMILY_WAV2VEC2 || m->family == VRAM_FAMILY_WHISPER)
            return fed(s, 1) * tokens * h + s->mm * tokens * AUDIO_PROJ + logits(s, b, n);
        if (m->family == VRAM_FAMILY_BERT) return s->mm * b * h + logits(s, b, n);
        /* decoders score every position and pool the last */
        return fed(s, 1) * tokens * E + s->mm * tokens * n + logits(s, b, n);
    case VRAM_HEAD_TOKEN_CLS:
        return fed(s, 1) * tokens * h + logits(s, tokens, n);
    case VRAM_HEAD_QA:
        return fed(s, 1) * tokens * h + 2 * logits(s, b, tokens);
    default:
        return 0;
    }
}

void vram_model_set_head(vram_model_t *m, vram_head_t head, int64_t num_labels)
{
    if (!m) return;
    m->head = head;
    if (num_labels > 0) m->num_labels = num_labels;
    if (head == VRAM_HEAD_QA) m->num_labels = 2; /* start and end logits */
    if (m->family == VRAM_FAMILY_VIT) {
        /* ViTModel has a pooler, ViTForImageClassification a classifier instead */
        m->has_pooler = head != VRAM_HEAD_IMAGE_CLS;
        if (head == VRAM_HEAD_IMAGE_CLS && m->num_labels > 0) m->num_classes = m->num_labels;
    }
    if (m->family == VRAM_FAMILY_BERT) /* add_pooling_layer=False for the MLM, token and QA heads */
        m->has_pooler =
            head == VRAM_HEAD_DEFAULT || head == VRAM_HEAD_BASE || head == VRAM_HEAD_SEQ_CLS;
}
