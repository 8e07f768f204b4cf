/* Internal interface of the estimator: what each architecture family
 * contributes. The families live in arch_transformer.c, arch_cnn.c and
 * arch_rnn.c; estimate.c combines them with precision, optimizer and ZeRO. */
#ifndef VRAM_PLAN_ARCH_H
#define VRAM_PLAN_ARCH_H

#include "vram.h"

/* Distinct tensor sizes kept for the allocator model (estimate.c). */
#define VRAM_ARCH_SIZE_CLASSES 32

/* Parameter tensors of a model, accumulated one tensor at a time. */
typedef struct {
    uint64_t params;     /* elements */
    uint64_t max_tensor; /* elements of the largest tensor */
    struct {
        uint64_t elems, count;
    } sizes[VRAM_ARCH_SIZE_CLASSES]; /* tensors by size (the last class absorbs overflow) */
    int nsizes;
    uint64_t tensors;      /* number of parameter tensors */
    uint64_t factored;     /* Adafactor second-moment elements (rows + cols per matrix) */
    uint64_t buffer_bytes; /* fp32 buffers (BatchNorm running stats), at fp32 */
    uint64_t buffer_i64;   /* int64 buffers (BatchNorm num_batches_tracked) */
} vram_arch_params_t;

/* Adds a parameter tensor of shape [lead..., rows, cols] (cols = 1 for a
 * vector) to the counts. */
void vram_arch_add_tensor(vram_arch_params_t *p, uint64_t lead, uint64_t rows, uint64_t cols);
/* Adds `n` copies of `block` (one layer's tensors), so that counting a
 * model costs the same for 2 layers as for 1000. Both saturate at
 * UINT64_MAX instead of wrapping. */
void vram_arch_add_repeated(vram_arch_params_t *p, const vram_arch_params_t *block, uint64_t n);

/* What the activation model needs to know. A saved tensor's bytes per
 * element depend on its role (docs/estimation.md, "Half precision"):
 *   mm   outputs of matmuls/convolutions and of elementwise ops on them
 *        (4 fp32, 2 half and amp);
 *   f32  outputs of ops autocast runs in fp32 (norms, softmax, pow, loss)
 *        and the residual stream that mixes them (4 fp32 and amp, 2 half);
 *   amp  autocast: a matmul that consumes an f32 tensor casts it and keeps
 *        its own 2-byte copy (one per consuming matmul).
 * Dropout masks are 1 byte, int64 indices 8, normalization statistics 4. */
typedef struct {
    bool training;
    vram_checkpointing_t checkpointing;
    int64_t batch, seq, image;
    double mm, f32;
    bool amp;
    bool fused_attention; /* SDPA/FlashAttention: no a·s² scores */
    bool upcast;          /* eager softmax in fp32 for half-precision inputs (m->softmax_upcast) */
    bool chunked_loss;    /* the loss over vocabulary chunks (torchtune) */
    bool compiled_loss;   /* torch.compile'd loss: keeps its input, fused backward */
    bool sum_loss;        /* logits.sum(): the logits kept as the output, no log-softmax */
    bool clamp;           /* eager scores clamped by torch.max, which keeps its input */
    bool kv_expanded;     /* k and v expanded to every query head before SDPA (torchtune's
                           * MultiHeadAttention): SDPA keeps them q-wide */
    bool rope_buffer;     /* rotary cos/sin read from a module buffer (torchtune's
                           * RotaryPositionalEmbeddings cache), not built per step */
    bool rms_fp32;        /* RMSNorm as F.rms_norm over an fp32 copy (torchtune's RMSNorm):
                           * the normalized tensor is kept in fp32 in every precision */
} vram_arch_shape_t;

/* Full checkpointing with the layer inputs offloaded to the CPU
 * (checkpointing field only; transformers). */
#define VRAM_CKPT_FULL_OFFLOAD ((vram_checkpointing_t)3)
/* What the head phase holds of those two, before backward reaches the
 * layers (estimate.c takes the difference: what the layer phase adds —
 * the recomputed layer and, offloaded, the inputs brought back). */
#define VRAM_CKPT_FULL_INPUTS    ((vram_checkpointing_t)4)
#define VRAM_CKPT_OFFLOAD_INPUTS ((vram_checkpointing_t)5)
/* Chunks of a chunked loss (torchtune's CEWithChunkedOutputLoss default). */
#define VRAM_LOSS_CHUNKS 8

/* The *_acts functions return activation bytes: for training, what autograd
 * saves for backward during one step (unique storages, inputs included); for
 * inference, the peak working set of one forward pass. */
int vram_arch_transformer_params(const vram_model_t *m, vram_arch_params_t *p);
int vram_arch_transformer_acts(const vram_model_t *m, const vram_arch_shape_t *s, double *bytes);
int vram_arch_cnn_params(const vram_model_t *m, vram_arch_params_t *p);
int vram_arch_cnn_acts(const vram_model_t *m, const vram_arch_shape_t *s, double *bytes);
int vram_arch_rnn_params(const vram_model_t *m, vram_arch_params_t *p);
int vram_arch_rnn_acts(const vram_model_t *m, const vram_arch_shape_t *s, double *bytes);

/* Second-edition families (arch_decoder.c, arch_audio.c) and the task
 * heads on top of every family (arch_head.c). */
int vram_arch_decoder_params(const vram_model_t *m, vram_arch_params_t *p);
int vram_arch_decoder_acts(const vram_model_t *m, const vram_arch_shape_t *s, double *bytes);
int vram_arch_audio_params(const vram_model_t *m, vram_arch_params_t *p);
int vram_arch_audio_acts(const vram_model_t *m, const vram_arch_shape_t *s, double *bytes);
/* Third edition: the generic decoder row (arch_generic.c), the other new
 * families (arch_more.c), and the inference cache of every family
 * (arch_kv.c). */
int vram_arch_generic_params(const vram_model_t *m, vram_arch_params_t *p);
int vram_arch_generic_acts(const vram_model_t *m, const vram_arch_shape_t *s, double *bytes);
int vram_arch_more_params(const vram_model_t *m, vram_arch_params_t *p);
int vram_arch_more_acts(const vram_model_t *m, const vram_arch_shape_t *s, double *bytes);
/* Bytes of the generation cache (KV cache, Mamba's scan state) for batch
 * `b` after a prompt of `prompt` tokens (*prompt_bytes) and after `new`
 * more (*full_bytes); `elem` bytes per element. */
void vram_arch_cache_bytes(const vram_model_t *m, double b, double prompt, double new_tokens,
                           double elem, double *prompt_bytes, double *full_bytes);
/* The head a model has (VRAM_HEAD_DEFAULT resolved per family). */
vram_head_t vram_arch_head(const vram_model_t *m);
void vram_arch_head_params(const vram_model_t *m, vram_arch_params_t *p);
/* Training: what the head and its loss keep over `tokens` output positions
 * (`in_bytes`: bytes per element of the head's input as stored). Inference:
 * the logits kept (generation: the last position only). */
double vram_arch_head_acts(const vram_model_t *m, const vram_arch_shape_t *s, double tokens);
/* Width of what the model feeds its head (OPT's projection, else hidden). */
int64_t vram_arch_head_width(const vram_model_t *m);
/* Shared shape checks (limits, divisibility); 0 or EINVAL naming the field. */
int vram_arch_check_shape(const vram_model_t *m);
bool vram_arch_is_decoder(const vram_model_t *m);
/* Transformer families (layer stacks the activation model knows). */
bool vram_arch_has_layers(const vram_model_t *m);
/* wav2vec2: frames out of the feature encoder for `samples` raw samples. */
int64_t vram_arch_wav2vec2_frames(const vram_model_t *m, int64_t samples);

/* Dispatches on the family. */
int vram_arch_params(const vram_model_t *m, vram_arch_params_t *p);
int vram_arch_acts(const vram_model_t *m, const vram_arch_shape_t *s, double *bytes);
bool vram_arch_is_image(const vram_model_t *m);
bool vram_arch_has_kv_cache(const vram_model_t *m);

#endif
