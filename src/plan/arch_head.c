/* Task heads from a config's `architectures` (docs/estimation.md, "Heads"):
 * their parameters, following the Hugging Face classes, and what the head
 * and its loss keep for backward. */
#include "arch_parts.h"

/* Families whose head is built here (ViT's classifier, CNNs, RNNs and
 * profiles carry their own). */
static bool has_head(const vram_model_t *m)
{
    switch (m->family) {
    case VRAM_FAMILY_BERT:
    case VRAM_FAMILY_T5:
    case VRAM_FAMILY_WHISPER:
    case VRAM_FAMILY_WAV2VEC2:
    case VRAM_FAMILY_BART:
    case VRAM_FAMILY_DISTILBERT:
    case VRAM_FAMILY_DEBERTA_V2:
    case VRAM_FAMILY_MAMBA:
        return true;
    default:
        return vram_arch_is_decoder(m);
    }
}

vram_head_t vram_arch_head(const vram_model_t *m)
{
    if (!has_head(m)) return VRAM_HEAD_BASE;
    if (m->head != VRAM_HEAD_DEFAULT) return m->head;
    if (vram_arch_is_decoder(m) || m->family == VRAM_FAMILY_MAMBA) return VRAM_HEAD_CAUSAL_LM;
    if (m->family == VRAM_FAMILY_T5 || m->family == VRAM_FAMILY_WHISPER ||
        m->family == VRAM_FAMILY_BART)
        return VRAM_HEAD_COND_GEN;
    return VRAM_HEAD_BASE;
}

int64_t vram_arch_head_width(const vram_model_t *m)
{
    return m->embed_proj_dim > 0 ? m->embed_proj_dim : m->hidden_size;
}

/* wav2vec2's (and Whisper's) audio classification: projector to
 * classifier_proj_size (256, the config default), mean over frames, classifier. */
#define AUDIO_PROJ 256

/* BERT's MLM head (BertLMPredictionHead, RobertaLMHead, DistilBERT's
 * vocab_transform/vocab_layer_norm/vocab_projector, DeBERTa-v2's
 * cls.predictions): dense + GELU + LayerNorm, then the decoder tied to the
 * word embeddings, with its own bias. */
static bool bert_like(const vram_model_t *m)
{
    return m->family == VRAM_FAMILY_BERT || m->family == VRAM_FAMILY_DISTILBERT ||
           m->family == VRAM_FAMILY_DEBERTA_V2;
}

static bool mlm_style(const vram_model_t *m, vram_head_t head)
{
    return bert_like(m) && (head == VRAM_HEAD_MASKED_LM || head == VRAM_HEAD_CAUSAL_LM);
}

/* wav2vec2 ForPreTraining (Wav2Vec2ForPreTraining): the Gumbel quantizer's
 * codevectors [1, G*V, d/G] and weight_proj from the last conv's channels,
 * project_hid (hidden -> proj_codevector_dim) and project_q (codevector_dim
 * -> proj_codevector_dim), all with biases. */
static void wav2vec2_pretraining(const vram_model_t *m, vram_arch_params_t *p)
{
    int64_t gv = m->codevector_groups * m->codevectors_per_group;
    int64_t conv = m->conv_layers > 0 ? m->conv_dim[m->conv_layers - 1] : m->hidden_size;
    vram_arch_add_tensor(p, 1, (uint64_t)gv, (uint64_t)(m->codevector_dim / m->codevector_groups));
    linear(p, gv, conv, true);
    linear(p, m->proj_codevector_dim, m->hidden_size, true);
    linear(p, m->proj_codevector_dim, m->codevector_dim, true);
}

void vram_arch_head_params(const vram_model_t *m, vram_arch_params_t *p)
{
    vram_head_t head = vram_arch_head(m);
    int64_t h = m->hidden_size, E = vram_arch_head_width(m), V = m->vocab_size;
    int64_t n = m->num_labels > 0 ? m->num_labels : 2;
    bool audio = m->family == VRAM_FAMILY_WAV2VEC2 || m->family == VRAM_FAMILY_WHISPER;
    if (m->family == VRAM_FAMILY_WAV2VEC2 && m->pretraining_head) {
        wav2vec2_pretraining(m, p);
        return;
    }
    if (mlm_style(m, head)) {
        linear(p, h, h, true);
        norm(p, h, true);
        vram_arch_add_tensor(p, 1, (uint64_t)V, 1); /* decoder bias; weight tied */
        if (m->family == VRAM_FAMILY_BERT && m->pretraining_head)
            linear(p, 2, h, true); /* BertForPreTraining's next-sentence head */
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
        } else if (m->family == VRAM_FAMILY_DISTILBERT || m->family == VRAM_FAMILY_DEBERTA_V2) {
            /* pre_classifier (DeBERTa: ContextPooler's dense), then classifier */
            linear(p, h, h, true);
            linear(p, n, h, true);
        } else if (m->family == VRAM_FAMILY_BART) {
            /* BartClassificationHead: dense, out_proj */
            linear(p, h, h, true);
            linear(p, n, h, true);
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
        if (vram_arch_is_decoder(m) || head == VRAM_HEAD_COND_GEN || m->family == VRAM_FAMILY_MAMBA)
            return b * V * (s->mm + 4);
        return s->mm * tokens * V;
    }
    if (m->family == VRAM_FAMILY_WAV2VEC2 && m->pretraining_head) {
        /* Wav2Vec2ForPreTraining per frame: the Gumbel quantizer (its soft
         * one-hot in fp32, the argmax indices, the probabilities and the
         * codevector weights, G x V each), project_q's and project_hid's
         * inputs; the contrastive logits over the target and K negatives:
         * three (K + 1) x proj tensors, one proj-wide one, four norms per
         * candidate, the negatives' int64 indices and 1-byte masks, the
         * loss's log-probabilities and targets; the time mask per frame. */
        double gv = (double)(m->codevector_groups * m->codevectors_per_group);
        double K = (double)m->num_negatives, P = (double)m->proj_codevector_dim;
        return tokens *
               (gv * (4 + 2 * s->mm) + (double)m->codevector_groups * IDX +
                (double)m->codevector_dim * s->mm + h * s->mm + (3 * (K + 1) + 1) * P * s->mm +
                4 * (K + 1) * 4.0 + K * (IDX + MASK) + (K + 1) * 4.0 + IDX + MASK);
    }
    if (mlm_style(m, head))
        /* dense output (GELU's input, mm), GELU's output as the LayerNorm
         * keeps it (f32) and stats, the LayerNorm output into the decoder,
         * then the loss */
        return tokens * (s->mm * h + s->f32 * h + 2 * STAT + fed(s, 1) * h) + logits(s, tokens, V);
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
        if (vram_arch_is_decoder(m)) /* Gemma 2's soft-capped logits keep tanh's output */
            return fed(s, 1) * tokens * E + (4.0 + IDX / V) * tokens * V +
                   (m->logit_softcap ? s->mm * tokens * V : 0);
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
