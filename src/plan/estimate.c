/* vram_estimate: combines the architecture's counts and activations with
 * precision, optimizer, ZeRO partitioning and overhead (docs/estimation.md). */
#include "arch_compile.h"
#include "arch_parts.h"
#include "estimate_at.h"
#include "estimate_limits.h"
#include "gpu_overhead.h"
#include "hf_version.h"
#include "lora.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void vram_estimate_config_init(vram_estimate_config_t *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->mode = VRAM_MODE_TRAIN;
    cfg->batch_size = 1;
    cfg->precision = VRAM_PREC_FP32;
    cfg->optimizer = VRAM_OPTIMIZER_ADAMW;
    cfg->checkpointing = VRAM_CKPT_NONE;
    cfg->overhead_bytes = VRAM_UNKNOWN_U64;
    cfg->attention_from_model = true;
    cfg->accumulation_steps = 1;
    cfg->double_quant = true; /* QLoRA's default; only NF4 reads it */
    cfg->optim_impl = VRAM_OPTIM_AUTO;
}

static bool is_half(vram_precision_t p)
{
    return p != VRAM_PREC_FP32;
}

static bool is_amp(vram_precision_t p)
{
    return p == VRAM_PREC_AMP_FP16 || p == VRAM_PREC_AMP_BF16;
}

/* Bytes per weight as stored on the GPU. int4 keeps one fp16 scale per
 * group of 128 weights (GPTQ/AWQ-style), int8 one per output row (ignored). */
static double weight_bytes(vram_precision_t p)
{
    switch (p) {
    case VRAM_PREC_FP32:
        return 4;
    case VRAM_PREC_INT8:
        return 1;
    case VRAM_PREC_INT4:
        return 0.5 + 2.0 / 128;
    default:
        return 2;
    }
}

static int64_t resolve_seq(const vram_model_t *m, const vram_estimate_config_t *c)
{
    if (c->seq_len > 0) return c->seq_len;
    int64_t seq = m->default_seq_len > 0 ? m->default_seq_len
                                         : (m->max_positions > 0 ? m->max_positions : 512);
    /* by default leave room for the tokens to generate */
    if (c->mode == VRAM_MODE_INFER && m->max_positions > 0 &&
        seq + c->max_new_tokens > m->max_positions && m->max_positions > c->max_new_tokens)
        seq = m->max_positions - c->max_new_tokens;
    return seq;
}

static int check_limit(const char *what, long long value, long long limit)
{
    if (value <= limit) return 0;
    return vram_fail(VRAM_EINVAL, "%s %lld is above the limit of %lld", what, value, limit);
}

/* The settings alone, before anything is computed from them. The upper
 * bounds (docs/estimation.md, "Limits") keep seq + new tokens and the
 * activation products finite and far from int64 overflow. */
static int validate_config(const vram_estimate_config_t *c)
{
    if (c->batch_size < 1)
        return vram_fail(VRAM_EINVAL, "batch size must be at least 1 (got %lld)",
                         (long long)c->batch_size);
    if (c->seq_len < 0 || c->image_size < 0 || c->max_new_tokens < 0)
        return vram_fail(VRAM_EINVAL, "sequence length, image size and new tokens cannot be "
                                      "negative");
    int rc;
    if ((rc = check_limit("batch size", c->batch_size, VRAM_MAX_BATCH)) ||
        (rc = check_limit("sequence length", c->seq_len, VRAM_MAX_SEQ)) ||
        (rc = check_limit("max new tokens", c->max_new_tokens, VRAM_MAX_SEQ)) ||
        (rc = check_limit("image size", c->image_size, VRAM_MAX_IMAGE)) ||
        (rc = check_limit("number of GPUs", c->gpus, VRAM_MAX_GPUS)))
        return rc;
    if (c->overhead_bytes != VRAM_UNKNOWN_U64 && c->overhead_bytes > (uint64_t)VRAM_MAX_BYTES)
        return vram_fail(VRAM_EINVAL, "overhead %llu bytes is above the limit of 2^60 bytes",
                         (unsigned long long)c->overhead_bytes);
    return 0;
}

static int validate(const vram_model_t *m, const vram_estimate_config_t *c, int64_t seq,
                    int64_t image)
{
    int rc = check_limit("sequence length", seq, VRAM_MAX_SEQ);
    if (rc) return rc;
    if (c->zero_stage < 0 || c->zero_stage > 3)
        return vram_fail(VRAM_EINVAL, "ZeRO stage %d does not exist (use 0, 1, 2 or 3)",
                         c->zero_stage);
    if (c->gpus < 0) return vram_fail(VRAM_EINVAL, "number of GPUs cannot be negative");
    if (c->zero_stage > 0 && c->gpus < 1)
        return vram_fail(VRAM_EINVAL,
                         "ZeRO stage %d partitions states across GPUs: give the number of GPUs "
                         "(--gpus N)",
                         c->zero_stage);
    if (c->mode == VRAM_MODE_TRAIN &&
        (c->precision == VRAM_PREC_INT8 || c->precision == VRAM_PREC_INT4))
        return vram_fail(VRAM_EINVAL,
                         "precision %s is for inference only; train with fp32, fp16, bf16, "
                         "amp-fp16 or amp-bf16",
                         vram_precision_name(c->precision));
    if (c->mode != VRAM_MODE_TRAIN && c->mode != VRAM_MODE_INFER && c->mode != VRAM_MODE_LOAD)
        return vram_fail(VRAM_EINVAL, "unknown mode %d", (int)c->mode);
    if (c->lora_rank < 0 || c->lora_rank > VRAM_MAX_WIDTH)
        return vram_fail(VRAM_EINVAL, "LoRA rank %lld is out of range (1 to %lld)",
                         (long long)c->lora_rank, (long long)VRAM_MAX_WIDTH);
    if (c->quantize_base != VRAM_QUANT_NONE && c->lora_rank == 0 && c->mode == VRAM_MODE_TRAIN)
        return vram_fail(VRAM_EINVAL, "a quantized base (QLoRA) trains adapters: give a LoRA rank");
    if (c->sharding != VRAM_SHARD_DEEPSPEED && c->sharding != VRAM_SHARD_FSDP)
        return vram_fail(VRAM_EINVAL, "unknown sharding %d", (int)c->sharding);
    if (c->sharding == VRAM_SHARD_FSDP && c->zero_stage == 0 && c->mode == VRAM_MODE_TRAIN)
        /* FSDP without a stage would silently be plain data parallelism */
        return vram_fail(VRAM_EINVAL,
                         "FSDP shards with a stage: FULL_SHARD is --zero 3, SHARD_GRAD_OP "
                         "--zero 2 (with --gpus N); NO_SHARD is --zero 0 without --sharding");
    if (c->accumulation_steps < 0 || c->accumulation_steps > VRAM_MAX_ACCUMULATION)
        return vram_fail(VRAM_EINVAL, "accumulation steps %lld out of range (1 to %lld)",
                         (long long)c->accumulation_steps, (long long)VRAM_MAX_ACCUMULATION);
    if (c->num_labels < 0 || c->num_labels > VRAM_MAX_VOCAB)
        return vram_fail(VRAM_EINVAL, "number of labels %lld out of range (1 to %lld)",
                         (long long)c->num_labels, (long long)VRAM_MAX_VOCAB);
    if (c->activation_offload && c->checkpointing != VRAM_CKPT_FULL)
        return vram_fail(VRAM_EINVAL,
                         "activation offloading moves checkpointed layer inputs to the CPU: use "
                         "--checkpointing full");
    if (c->quant_compute < 0 || c->quant_compute > 3)
        return vram_fail(VRAM_EINVAL,
                         "compute dtype %d does not exist (0 auto, 1 fp32, 2 fp16, "
                         "3 bf16)",
                         (int)c->quant_compute);
    if (c->framework != VRAM_FRAMEWORK_TRANSFORMERS && c->framework != VRAM_FRAMEWORK_TORCHTUNE)
        return vram_fail(VRAM_EINVAL, "framework %d does not exist (0 transformers, 1 torchtune)",
                         (int)c->framework);
    if (c->transformers_version < 0 || c->transformers_version > 999)
        return vram_fail(VRAM_EINVAL, "transformers version %d out of range (major x 100 + minor)",
                         (int)c->transformers_version);
    if (c->gpu_cc < 0 || c->gpu_cc > 200 || c->cuda_version < 0 || c->cuda_version > 200 ||
        c->lazy_loading < 0 || c->lazy_loading > 2)
        return vram_fail(VRAM_EINVAL, "GPU generation, CUDA version or lazy loading out of range");
    if (m->family == VRAM_FAMILY_PROFILE) return 0;
    int64_t positions = seq + (c->mode == VRAM_MODE_INFER ? c->max_new_tokens : 0);
    int64_t room = m->max_positions - (c->mode == VRAM_MODE_INFER ? c->max_new_tokens : 0);
    if (!vram_arch_is_image(m) && m->max_positions > 0 && positions > m->max_positions && room < 1)
        /* no prompt length would do: the new tokens alone are too many */
        return vram_fail(VRAM_EINVAL,
                         "%lld new tokens do not fit %s's %lld positions with even one prompt "
                         "token (use --max-new-tokens %lld or less)",
                         (long long)c->max_new_tokens, m->name, (long long)m->max_positions,
                         (long long)(m->max_positions - 1));
    if (!vram_arch_is_image(m) && m->max_positions > 0 && positions > m->max_positions)
        return vram_fail(
            VRAM_EINVAL,
            "sequence length %lld%s is longer than %s's %lld positions (use "
            "--seq-len %lld or less)",
            (long long)positions,
            c->mode == VRAM_MODE_INFER && c->max_new_tokens ? " (with new tokens)" : "", m->name,
            (long long)m->max_positions,
            (long long)(m->max_positions - (c->mode == VRAM_MODE_INFER ? c->max_new_tokens : 0)));
    if (m->family == VRAM_FAMILY_VIT && image != m->image_size)
        return vram_fail(VRAM_EINVAL,
                         "%s has position embeddings for %lld px images; --image-size %lld would "
                         "need interpolated embeddings",
                         m->name, (long long)m->image_size, (long long)image);
    return 0;
}

/* Optimizer state bytes (without the fp32 master copy). */
static double optimizer_bytes(const vram_arch_params_t *p, vram_optimizer_t o, double state)
{
    double n = (double)p->params;
    switch (o) {
    case VRAM_OPTIMIZER_SGD:
        return 0;
    case VRAM_OPTIMIZER_MOMENTUM:
        return state * n;
    case VRAM_OPTIMIZER_ADAM:
    case VRAM_OPTIMIZER_ADAMW:
        /* exp_avg and exp_avg_sq, and torch's fp32 `step` tensor per parameter */
        return 2 * state * n + 4.0 * (double)p->tensors;
    case VRAM_OPTIMIZER_ADAFACTOR:
        /* no first moment (beta1=None); factored second moment */
        return 4.0 * (double)p->factored;
    case VRAM_OPTIMIZER_ADAM8BIT:
        /* two 8-bit states plus one fp32 absmax per 2048-value block each */
        return 2 * n + 2 * 4.0 * ceil(n / 2048);
    }
    return 0;
}

/* One component, rounded up to whole bytes. A value above VRAM_MAX_BYTES
 * (or not finite) is refused: converting it to uint64_t could be undefined
 * (>= 2^64) and a sum of such values could wrap below its parts. */
static int to_bytes(const vram_model_t *m, double v, const char *what, uint64_t *out)
{
    double r = ceil(v);
    if (!(r >= 0 && r <= (double)VRAM_MAX_BYTES))
        return vram_fail(VRAM_EINVAL,
                         "estimate for \"%s\": the %s (%.3g bytes) exceed the limit of 2^60 "
                         "bytes (1 EiB); lower the batch size or sequence length",
                         m->name, what, v);
    *out = (uint64_t)r;
    return 0;
}

/* Parameter memory in each training set-up (docs/estimation.md, "Bytes
 * per parameter", "ZeRO", "LoRA and QLoRA"). */
typedef struct {
    double params, grads, states, cache; /* bytes */
    double trainable;                    /* parameters that get gradients */
    double largest_trainable;            /* elements of the largest trained tensor */
    double dequant;                      /* QLoRA: one dequantized weight in flight */
    double lora_acts_per_token;
    double wb, gb, sb; /* bytes per element: weights, grads, one state */
} param_memory_t;

/* ZeRO/FSDP over `gpus`: stage 1 shards the optimizer states, 2 also the
 * gradients, 3 also the parameters, of which one unit is gathered whole
 * at a time (`gathered` bytes: FSDP's all-gather of the wrapped layer,
 * DeepSpeed's estimate_zero3_model_states_mem_needs "largest layer"). With
 * LoRA the frozen base is sharded like any parameter (FSDP shards every
 * parameter of a wrapped unit, trainable or not; QLoRA under FSDP shards
 * the quantized storage: Answer.AI's FSDP-QLoRA, bitsandbytes
 * quant_storage). */
static void shard(const vram_estimate_config_t *c, param_memory_t *pm, double gathered)
{
    double gpus = c->gpus > 0 ? c->gpus : 1;
    if (c->zero_stage >= 1) pm->states /= gpus;
    if (c->zero_stage >= 2) pm->grads /= gpus;
    if (c->zero_stage >= 3) pm->params = pm->params / gpus + gathered;
}

/* Bytes per weight of one NF4 linear in flight for its matmul: bitsandbytes'
 * MatMul4Bit dequantizes the weight to the dtype it was loaded in
 * (quant_state.dtype: the working precision) and casts it to the input's
 * dtype, which Linear4bit first sets to its compute dtype
 * (bnb_4bit_compute_dtype; transformers' BitsAndBytesConfig defaults it
 * to fp32): when the two differ both copies are live. */
static double dequantized_bytes(const vram_estimate_config_t *c, double mm)
{
    if (c->quantize_base != VRAM_QUANT_NF4 || c->quant_compute <= 0) return mm;
    vram_precision_t loaded = c->precision;
    if (loaded == VRAM_PREC_AMP_FP16) loaded = VRAM_PREC_FP16;
    if (loaded == VRAM_PREC_AMP_BF16) loaded = VRAM_PREC_BF16;
    static const vram_precision_t compute[] = {VRAM_PREC_FP32, VRAM_PREC_FP32, VRAM_PREC_FP16,
                                               VRAM_PREC_BF16};
    vram_precision_t to = compute[c->quant_compute];
    if (to == loaded) return mm;
    return mm + (to == VRAM_PREC_FP32 ? 4 : 2);
}

static int lora_memory(const vram_model_t *m, const vram_estimate_config_t *c,
                       const vram_arch_params_t *p, double mm, param_memory_t *pm)
{
    vram_lora_linears_t lin;
    int rc = vram_lora_linears(m, &lin);
    if (rc) return rc;
    unsigned targets = c->lora_targets ? c->lora_targets : (VRAM_LORA_Q | VRAM_LORA_V);
    if ((rc = vram_lora_check_targets(&lin, targets))) return rc;
    double n = (double)p->params, largest = 0;
    double A = vram_lora_adapter_params(&lin, targets, c->lora_rank);
    double Q = vram_lora_linear_params(&lin, &largest);
    bool amp = is_amp(c->precision);
    /* the frozen base in the working dtype (half under autocast, as
     * PEFT users load it); adapters in fp32 under autocast */
    double base = c->precision == VRAM_PREC_FP32 ? 4 : 2;
    double adapter = (amp || c->precision == VRAM_PREC_FP32) ? 4 : 2;
    pm->params = base * n + adapter * A;
    if (c->quantize_base != VRAM_QUANT_NONE) {
        pm->params -= base * Q;
        pm->params += vram_quant_bytes_per_weight(c->quantize_base, c->double_quant) * Q;
        pm->dequant = dequantized_bytes(c, mm) * largest;
    }
    vram_arch_params_t ap = {.params = (uint64_t)A, .tensors = 0, .factored = (uint64_t)A};
    pm->grads = adapter * A;
    pm->states = optimizer_bytes(&ap, c->optimizer, adapter);
    pm->cache = amp ? 2 * A : 0;
    pm->trainable = A;
    pm->largest_trainable = (double)c->lora_rank * (double)m->hidden_size;
    pm->lora_acts_per_token = vram_lora_adapter_acts_per_token(&lin, targets, c->lora_rank, mm);
    pm->wb = base;
    pm->gb = adapter;
    pm->sb = adapter;
    if (c->zero_stage > 0 && c->sharding == VRAM_SHARD_DEEPSPEED && is_half(c->precision) && !amp) {
        /* DeepSpeed's mixed precision over the adapters: fp32 master copies
         * and states (and from stage 2 an fp32 gradient partition) */
        pm->states = optimizer_bytes(&ap, c->optimizer, 4) + 4 * A;
        if (c->zero_stage >= 2) pm->states += 4 * A;
        pm->sb = 4;
    }
    shard(c, pm,
          (double)largest * (c->quantize_base != VRAM_QUANT_NONE
                                 ? vram_quant_bytes_per_weight(c->quantize_base, c->double_quant)
                                 : base));
    return 0;
}

static void full_memory(const vram_estimate_config_t *c, const vram_arch_params_t *p,
                        param_memory_t *pm)
{
    double n = (double)p->params, gpus = c->gpus > 0 ? c->gpus : 1;
    double largest = (double)p->max_tensor;
    bool amp = is_amp(c->precision), half = is_half(c->precision);
    pm->trainable = n;
    pm->largest_trainable = largest;
    if (c->zero_stage > 0 && half && c->sharding == VRAM_SHARD_DEEPSPEED) {
        /* DeepSpeed's mixed precision: fp16/bf16 weights and gradients,
         * fp32 master weights and states partitioned. Its estimators
         * (estimate_zero2_model_states_mem_needs: 4Ψ + 16Ψ/N;
         * estimate_zero3_model_states_mem_needs: 4·largest layer + 18Ψ/N) */
        double states = optimizer_bytes(p, c->optimizer, 4) + 4 * n; /* + master */
        pm->params = 2 * n;
        pm->grads = 2 * n;
        if (c->zero_stage >= 2) states += 4 * n; /* the fp32 gradient partition */
        pm->states = states / gpus;
        if (c->zero_stage >= 3) {
            pm->params = 2 * n / gpus + 2 * largest;
            pm->grads = 2 * largest;
        }
        pm->wb = pm->gb = 2;
        pm->sb = 4;
        return;
    }
    if (amp) {
        /* torch.autocast: fp32 weights, gradients and states, plus the
         * half-precision weight copies autocast caches during forward and the
         * matmuls keep for backward: 18 bytes per parameter with Adam */
        pm->params = 4 * n;
        pm->grads = 4 * n;
        pm->states = optimizer_bytes(p, c->optimizer, 4);
        pm->cache = 2 * n;
        pm->wb = pm->gb = pm->sb = 4;
    } else {
        double wb = weight_bytes(c->precision);
        pm->params = pm->grads = wb * n;
        pm->states = optimizer_bytes(p, c->optimizer, half ? 2 : 4);
        pm->wb = pm->gb = pm->sb = wb;
    }
    /* FSDP (or DeepSpeed in fp32): each tensor in its own dtype, sharded;
     * FSDP's MixedPrecision gathers the unit in the compute dtype */
    shard(c, pm,
          c->zero_stage >= 3 && c->sharding == VRAM_SHARD_FSDP ? (amp ? 2 : pm->wb) * largest : 0);
}

/* The optimizer step's intermediates: torch.optim's foreach Adam keeps one
 * parameter-sized list (sqrt of exp_avg_sq, then divided in place); the
 * fused kernel none; a per-parameter loop one tensor's worth (pytorch.org
 * tutorial "How to save memory by fusing the optimizer step into the
 * backward pass"). SGD without momentum updates in place. */
vram_optim_impl_t vram_optim_impl_of(const vram_estimate_config_t *c)
{
    if (c->optim_impl != VRAM_OPTIM_AUTO) return c->optim_impl;
    /* torchtune 0.6.1: 118 of the 123 recipe configs that build
     * torch.optim.AdamW pass fused: True (the YAML files of recipes/configs) */
    return c->framework == VRAM_FRAMEWORK_TORCHTUNE ? VRAM_OPTIM_FUSED : VRAM_OPTIM_FOREACH;
}

static double optimizer_temps(const vram_estimate_config_t *c, const param_memory_t *pm)
{
    if (c->optimizer == VRAM_OPTIMIZER_SGD || c->optimizer == VRAM_OPTIMIZER_ADAM8BIT) return 0;
    double gpus = c->gpus > 0 && c->zero_stage >= 1 ? c->gpus : 1;
    switch (vram_optim_impl_of(c)) {
    case VRAM_OPTIM_FUSED:
        return 0;
    case VRAM_OPTIM_FOR_LOOP:
        return pm->sb * pm->largest_trainable;
    default:
        return pm->sb * pm->trainable / gpus;
    }
}

/* Gradients in flight when backward is at its largest: the loss's chain
 * (the gradient of the log-probabilities and of the logits, both fp32 for
 * Hugging Face's causal LMs; one fused gradient when the loss is compiled;
 * per chunk for a chunked loss, docs/estimation.md), or one layer's (its
 * output's gradient, two MLP-wide ones, and for eager attention those of
 * the probabilities and scores). */
typedef struct {
    double layer, chain; /* one layer's gradients in flight; the loss's chain */
} backward_t;

static backward_t backward_temps(const vram_model_t *m, const vram_arch_shape_t *sh,
                                 bool grads_kept)
{
    backward_t r = {0, 0};
    if (m->family == VRAM_FAMILY_PROFILE) {
        /* measured (vram.torch.analyze): what backward holds at once beyond
         * the saved activations, in the profile's dtype, with the parameter
         * gradients absent before; kept gradients (counted whole by the
         * caller) are added into, so those it made by its peak are not
         * made again */
        double scale = m->profile_dtype_bytes > 0 ? sh->mm / m->profile_dtype_bytes : 1;
        double made = (double)m->profile_bwd_per_sample * (double)sh->batch +
                      (double)m->profile_bwd_fixed,
               grads = grads_kept ? (double)m->profile_bwd_grads : 0;
        r.chain = scale * (made > grads ? made - grads : 0);
        return r;
    }
    if (m->hidden_size <= 0 || m->family == VRAM_FAMILY_LSTM || m->family == VRAM_FAMILY_GRU ||
        vram_arch_is_image(m))
        return r;
    double b = (double)sh->batch, s = (double)sh->seq, tok = b * s, h = (double)m->hidden_size;
    if (m->family == VRAM_FAMILY_WAV2VEC2) tok = b * (double)vram_arch_wav2vec2_frames(m, sh->seq);
    double I = m->num_experts > 0 ? (double)(m->expert_intermediate * m->experts_per_token)
                                  : (double)m->intermediate_size;
    double layer = sh->mm * tok * (h + 2 * I);
    if (!sh->fused_attention) {
        double q = m->family == VRAM_FAMILY_WAV2VEC2 ? tok / b : s;
        layer += 2 * sh->f32 * b * (double)m->num_heads * q * q;
    }
    vram_head_t head = vram_arch_head(m);
    double chain = 0;
    /* logits.sum()'s gradient is an expanded scalar: no chain */
    if (!sh->sum_loss && (head == VRAM_HEAD_CAUSAL_LM || head == VRAM_HEAD_COND_GEN ||
                          head == VRAM_HEAD_MASKED_LM || head == VRAM_HEAD_CTC)) {
        double e = vram_arch_is_decoder(m) ? 4 : sh->f32, V = (double)m->vocab_size;
        chain = 2 * e * tok * V;
        if (sh->compiled_loss) chain = e * tok * V; /* one fused kernel: the input's gradient */
        if (sh->chunked_loss && sh->compiled_loss) {
            chain = sh->mm * tok * V / VRAM_LOSS_CHUNKS; /* one chunk's, in the logits' dtype */
        } else if (sh->chunked_loss) {
            /* eager: the chunks' half-precision logits stay referenced until
             * the loss returns, with one chunk's fp32 copy; later one chunk's
             * two fp32 gradients */
            double fwd = sh->mm * tok * V + 4 * tok * V / VRAM_LOSS_CHUNKS;
            chain = max2(fwd, 2 * 4 * tok * V / VRAM_LOSS_CHUNKS);
        }
    }
    r.layer = layer;
    r.chain = chain;
    return r;
}

/* What is live in one phase of a step beyond the weights and states. */
typedef struct {
    bool train, grads;
    double acts, temps, kv;
} phase_t;

/* Saved activations as this many equal tensors per layer: fixed, so the
 * carved reservation grows with the batch like the activations do. */
#define ACT_TENSORS_PER_LAYER 16

/* Reserved bytes for one phase: every parameter-shaped tensor by size
 * class (weights, gradients when live, each optimizer state), the
 * activations in equal pieces, the temporaries and the KV cache per layer. */
static double carve_phase(const vram_model_t *m, const vram_arch_params_t *p,
                          const param_memory_t *pm, const vram_estimate_config_t *c, double fixed,
                          const phase_t *ph)
{
    vram_carve_t k;
    vram_carve_init(&k);
    double n = p->params > 0 ? (double)p->params : 1;
    bool full = ph->train && c->lora_rank == 0;
    /* per element: the weights, and in full training the gradients and
     * each optimizer state tensor (state bytes per element / tensor size) */
    bool adam = c->optimizer == VRAM_OPTIMIZER_ADAM || c->optimizer == VRAM_OPTIMIZER_ADAMW;
    double gpus = c->zero_stage >= 1 && c->gpus > 0 ? c->gpus : 1;
    double steps = full && adam ? (double)p->tensors / gpus : 0; /* torch's 4-byte `step` */
    double states_per_elem = full ? (pm->states - 4 * steps) / n : 0;
    vram_carve_add(&k, 4, steps);
    double state_tensors = states_per_elem > pm->sb * 1.5 ? 2 : 1;
    for (int i = 0; i < p->nsizes; i++) {
        double e = (double)p->sizes[i].elems, cnt = (double)p->sizes[i].count;
        vram_carve_add(&k, e * pm->params / n, cnt);
        if (full && ph->grads) vram_carve_add(&k, e * pm->grads / n, cnt);
        if (states_per_elem > 0)
            vram_carve_add(&k, e * states_per_elem / state_tensors, cnt * state_tensors);
    }
    if (p->nsizes == 0) vram_carve_add(&k, pm->params, 1);
    if (ph->train && !full) vram_carve_add(&k, (ph->grads ? pm->grads : 0) + pm->states, 1);
    vram_carve_add(&k, fixed, 1);
    /* what each step allocates anew gets segments of its own: the
     * persistent tensors' were carved when the model was loaded */
    vram_carve_t step;
    vram_carve_init(&step);
    double layers = m->num_layers > 0 ? (double)m->num_layers : 1;
    vram_carve_add(&step, ph->acts / (layers * ACT_TENSORS_PER_LAYER),
                   layers * ACT_TENSORS_PER_LAYER);
    vram_carve_add(&step, ph->temps, 1);
    vram_carve_add(&step, ph->kv / layers, layers);
    return vram_carve_reserved(&k) + vram_carve_reserved(&step);
}

int vram_estimate_setting_applies(const vram_model_t *m, const char *key)
{
    if (!m || !key) return vram_fail(VRAM_EINVAL, "vram_estimate_setting_applies: NULL argument");
    /* a profile's activations were measured at one input shape */
    bool measured = m->family == VRAM_FAMILY_PROFILE;
    if (!strcmp(key, "seq_len")) return !measured && !vram_arch_is_image(m);
    if (!strcmp(key, "image_size")) return !measured && vram_arch_is_image(m);
    return 1;
}

/* What torch.compile's partitioner saves over eager in the layers kept at
 * once (every layer, or with full checkpointing the one recomputed):
 * eager's layer is the difference one more layer makes to the stack
 * (arch_compile.c). 0 where the compiled layer is not modelled. */
static double compiled_savings(const vram_model_t *m, const vram_arch_shape_t *sh)
{
    double compiled;
    if (!vram_arch_compiled_layer(m, sh, &compiled)) return 0;
    if (sh->checkpointing != VRAM_CKPT_NONE && sh->checkpointing != VRAM_CKPT_FULL &&
        sh->checkpointing != VRAM_CKPT_FULL_OFFLOAD)
        return 0; /* selective: the kept part is not one whole layer */
    vram_arch_shape_t plain = *sh;
    plain.checkpointing = VRAM_CKPT_NONE;
    vram_model_t more = *m;
    more.num_layers = m->num_layers + 1;
    double with = 0, without = 0;
    if (vram_arch_acts(m, &plain, &without) || vram_arch_acts(&more, &plain, &with)) return 0;
    double tokens = (double)sh->batch * (double)sh->seq;
    double saved = (with - without) - compiled * tokens;
    if (saved <= 0) return 0;
    return sh->checkpointing == VRAM_CKPT_NONE ? saved * (double)m->num_layers : saved;
}

static int estimate(const vram_model_t *m, const vram_estimate_config_t *c, vram_estimate_t *out);

int vram_estimate(const vram_model_t *m, const vram_estimate_config_t *c, vram_estimate_t *out)
{
    if (!m || !c || !out) return vram_fail(VRAM_EINVAL, "vram_estimate: NULL argument");
    if (c->head == VRAM_HEAD_DEFAULT && c->num_labels == 0) return estimate(m, c, out);
    /* the head and labels the model is loaded with, over its config's */
    vram_model_t with_head = *m;
    vram_model_set_head(&with_head, c->head != VRAM_HEAD_DEFAULT ? c->head : m->head,
                        c->num_labels);
    return estimate(&with_head, c, out);
}

int vram_estimate_whole_at(const vram_model_t *m, const vram_estimate_config_t *cfg, int64_t batch,
                           vram_estimate_t *out)
{
    if (!cfg) return vram_fail(VRAM_EINVAL, "vram_estimate_at_batch: NULL argument");
    vram_estimate_config_t c = *cfg;
    c.batch_size = batch;
    return vram_estimate(m, &c, out);
}

int vram_estimate_at_batch(const vram_model_t *m, const vram_estimate_config_t *cfg, int64_t batch,
                           uint64_t *bytes)
{
    if (!cfg || !bytes) return vram_fail(VRAM_EINVAL, "vram_estimate_at_batch: NULL argument");
    vram_estimate_t e;
    int rc = vram_estimate_whole_at(m, cfg, batch, &e);
    if (!rc) *bytes = e.total;
    return rc;
}

/* The batches worth granting, largest first: ceil(top/k) for k = 1, 2, ...
 * down to lo, each once. Calls fn(i, batch) for every one, i from 0, and
 * returns how many there are (about 2*sqrt(top) at most). */
static int64_t each_candidate(int64_t top, int64_t lo, void (*fn)(void *, int64_t, int64_t),
                              void *arg)
{
    int64_t i = 0;
    for (int64_t b = top; b >= lo;) {
        if (fn) fn(arg, i, b);
        i++;
        if (b == 1) break;
        /* the next k whose ceil(top/k) is below b */
        int64_t k = (top + b - 2) / (b - 1);
        b = (top + k - 1) / k;
    }
    return i;
}

typedef struct {
    int64_t count, keep_all, slots, next_slot;
    int64_t *chosen;
    int nchosen;
} pick_t;

/* Keeps the first keep_all candidates, then `slots` more spread evenly over
 * the rest, the last (smallest batch) always among them. */
static void pick(void *arg, int64_t i, int64_t batch)
{
    pick_t *p = arg;
    bool take = i < p->keep_all;
    int64_t rest = p->count - p->keep_all;
    if (!take && p->next_slot < p->slots) {
        int64_t target = p->slots == 1 ? rest - 1 : p->next_slot * (rest - 1) / (p->slots - 1);
        if (i - p->keep_all == target) {
            take = true;
            p->next_slot++;
        }
    }
    if (take) p->chosen[p->nchosen++] = batch;
}

int vram_estimate_batch_table(const vram_model_t *m, const vram_estimate_config_t *cfg, int64_t lo,
                              vram_batch_bytes_t *out, int cap, int *n)
{
    if (!m || !cfg || !out || !n)
        return vram_fail(VRAM_EINVAL, "vram_estimate_batch_table: NULL argument");
    int64_t top = cfg->batch_size;
    if (cap < 1 || lo < 1 || lo > top || top > UINT32_MAX)
        return vram_fail(VRAM_EINVAL,
                         "batches %lld to %lld in at most %d entries: give 1 <= low <= batch "
                         "(at most %u) and at least one entry",
                         (long long)lo, (long long)top, cap, UINT32_MAX);
    int64_t count = each_candidate(top, lo, NULL, NULL);
    pick_t p = {.count = count, .keep_all = count <= cap ? count : (cap > 1 ? cap / 2 : 1)};
    p.slots = count <= cap ? 0 : cap - p.keep_all;
    p.chosen = calloc((size_t)(count <= cap ? count : cap), sizeof *p.chosen);
    if (!p.chosen) return vram_fail(VRAM_ENOMEM, "out of memory");
    each_candidate(top, lo, pick, &p);
    /* smallest batch first; a running maximum keeps the table monotone even
     * where the estimate would dip (what vramd reserves never falls short) */
    uint64_t most = 0;
    for (int i = 0; i < p.nchosen; i++) {
        uint64_t at;
        int64_t b = p.chosen[p.nchosen - 1 - i];
        int rc = vram_estimate_at_batch(m, cfg, b, &at);
        if (rc) {
            free(p.chosen);
            return rc;
        }
        if (at > most) most = at;
        out[i] = (vram_batch_bytes_t){(uint32_t)b, most};
    }
    *n = p.nchosen;
    free(p.chosen);
    return 0;
}

static int estimate(const vram_model_t *m, const vram_estimate_config_t *c, vram_estimate_t *out)
{
    int rc = validate_config(c);
    if (rc) return rc;
    int64_t seq = resolve_seq(m, c);
    int64_t image = c->image_size > 0 ? c->image_size : (m->image_size > 0 ? m->image_size : 224);
    rc = validate(m, c, seq, image);
    if (rc) return rc;
    vram_arch_params_t p;
    rc = vram_arch_params(m, &p);
    if (rc) return rc;
    if (p.params > (uint64_t)VRAM_MAX_PARAMETERS)
        return vram_fail(VRAM_EINVAL, "model \"%s\": %s%llu parameters, above the limit of %lld",
                         m->name, p.params == UINT64_MAX ? "more than " : "",
                         (unsigned long long)p.params, (long long)VRAM_MAX_PARAMETERS);

    bool train = c->mode == VRAM_MODE_TRAIN, load = c->mode == VRAM_MODE_LOAD;
    /* fused when asked, or by the family's Hugging Face default */
    bool fused = c->fused_attention || (c->attention_from_model && m->sdpa_default &&
                                        !vram_hf_eager_by_default(m, c->transformers_version));
    double n = (double)p.params;
    double mm = is_half(c->precision) ? 2 : 4;
    param_memory_t pm = {0};
    pm.wb = weight_bytes(c->precision);
    pm.params = pm.wb * n;
    if (train && c->lora_rank > 0) {
        if ((rc = lora_memory(m, c, &p, mm, &pm))) return rc;
    } else if (train) {
        full_memory(c, &p, &pm);
    } else if (c->quantize_base != VRAM_QUANT_NONE) {
        /* inference on a quantized base (bitsandbytes' load_in_4bit/8bit),
         * with its adapters if any */
        if ((rc = lora_memory(m, c, &p, mm, &pm))) return rc;
        pm.grads = pm.states = pm.cache = 0;
    }

    vram_arch_shape_t shape = {
        .training = train,
        .checkpointing = c->checkpointing,
        .batch = c->batch_size,
        .seq = seq,
        .image = image,
        .mm = mm,
        .f32 = (c->precision == VRAM_PREC_FP32 || is_amp(c->precision)) ? 4 : 2,
        .amp = is_amp(c->precision) && train,
        .fused_attention = fused,
        .upcast = m->softmax_upcast,
        .chunked_loss = c->chunked_loss,
        .compiled_loss = c->compiled_loss,
        .sum_loss = c->sum_loss,
        .clamp = vram_hf_scores_clamped(m, c->transformers_version),
        .kv_expanded = c->framework == VRAM_FRAMEWORK_TORCHTUNE,
        .rope_buffer = c->framework == VRAM_FRAMEWORK_TORCHTUNE,
        .rms_fp32 = c->framework == VRAM_FRAMEWORK_TORCHTUNE,
    };
    if (c->activation_offload) {
        if (!vram_arch_has_layers(m))
            return vram_fail(VRAM_EINVAL, "activation offloading is modelled for transformers");
        shape.checkpointing = VRAM_CKPT_FULL_OFFLOAD;
    }
    double acts = 0, kv = 0;
    if (!load) {
        rc = vram_arch_acts(m, &shape, &acts);
        if (rc) return rc;
    }
    double compiled = train && c->compiled_loss ? compiled_savings(m, &shape) : 0;
    acts -= compiled;
    if (train && c->lora_rank > 0) {
        double tok = (double)c->batch_size * (double)seq;
        if (m->family == VRAM_FAMILY_WAV2VEC2)
            tok = (double)c->batch_size * (double)vram_arch_wav2vec2_frames(m, seq);
        double per = pm.lora_acts_per_token;
        /* with checkpointing the adapters' tensors of one layer at a time */
        if (c->checkpointing != VRAM_CKPT_NONE) per /= (double)m->num_layers;
        acts += per * tok;
    }

    if (c->mode == VRAM_MODE_INFER && vram_arch_has_kv_cache(m)) {
        /* the cache after prefill and at the last decode step; the peak is
         * the larger of prefill (its working set) and the last step (one
         * token's working set over the full cache) */
        double b = (double)c->batch_size, T = (double)c->max_new_tokens, prompt_kv, full_kv;
        vram_arch_cache_bytes(m, b, (double)seq, T, mm, &prompt_kv, &full_kv);
        kv = full_kv;
        if (T > 0) {
            vram_arch_shape_t one = shape;
            one.seq = 1;
            double step = 0;
            if ((rc = vram_arch_acts(m, &one, &step))) return rc;
            double prefill = acts + prompt_kv - full_kv;
            acts = prefill > step ? prefill : step;
        }
    }

    /* what a real GPU adds */
    double context = vram_gpu_context_bytes(c), work = vram_gpu_workspace_bytes(c);
    if (c->overhead_bytes != VRAM_UNKNOWN_U64) {
        context = (double)c->overhead_bytes; /* the user's figure replaces both */
        work = 0;
    }
    /* Backward runs the head first: its chain is in flight while every
     * activation is kept (but no layer is recomputed yet); by the time a
     * layer's gradients are in flight the head's tensors are freed (except
     * logits a benchmark's output still references), and with
     * checkpointing that layer's recomputed activations exist. */
    bool grads_kept = c->grads_kept || c->accumulation_steps > 1;
    backward_t bt = {0, 0};
    double recompute = 0, head = 0;
    if (train) {
        bt = backward_temps(m, &shape, grads_kept);
        if (vram_arch_has_layers(m)) {
            double tokens = (double)c->batch_size * (double)seq;
            if (m->family == VRAM_FAMILY_WAV2VEC2)
                tokens = (double)c->batch_size * (double)vram_arch_wav2vec2_frames(m, seq);
            vram_arch_shape_t bare = shape;
            bare.sum_loss = false;
            head = shape.sum_loss ? 0 : vram_arch_head_acts(m, &bare, tokens);
            if (shape.checkpointing == VRAM_CKPT_FULL ||
                shape.checkpointing == VRAM_CKPT_FULL_OFFLOAD) {
                vram_arch_shape_t inputs = shape;
                inputs.checkpointing = shape.checkpointing == VRAM_CKPT_FULL
                                           ? VRAM_CKPT_FULL_INPUTS
                                           : VRAM_CKPT_OFFLOAD_INPUTS;
                double without = 0;
                if ((rc = vram_arch_acts(m, &inputs, &without))) return rc;
                recompute = acts - without;
            }
        }
    }
    double at_head = acts - recompute + bt.chain, at_layer = acts - head + bt.layer;
    double acts_peak = train ? max2(at_head, at_layer) : acts;
    /* the recomputed layer and the head's tensors are never live together:
     * with checkpointing the backward peak can hold less than `acts`, which
     * counts both */
    double live_acts = acts_peak < acts ? acts_peak : acts;
    double bwd = acts_peak - live_acts + pm.dequant;
    double opt = train ? optimizer_temps(c, &pm) : 0;
    double buffers = (double)p.buffer_bytes + 8.0 * (double)p.buffer_i64;
    /* Training peaks at the start of backward (all activations, the loss's
     * gradient chain; gradients only when kept from an earlier
     * micro-batch), at its end (every gradient, one layer's chain) or in the
     * optimizer step (gradients, states, the step's intermediates). */
    double fixed = pm.params + buffers + pm.states + work;
    double at_bwd = fixed + pm.cache + live_acts + bwd + (grads_kept ? pm.grads : 0);
    double at_end = fixed + pm.cache + pm.grads + bt.layer + pm.dequant;
    double at_step = fixed + pm.grads + opt;
    /* the parts live at the peak, phase by phase (they add up to it) */
    double lv_grads = grads_kept ? pm.grads : 0, lv_cache = pm.cache, lv_acts = live_acts,
           lv_bwd = bwd, lv_opt = 0, lv_kv = 0;
    double peak = at_bwd;
    if (train && at_end > peak) {
        peak = at_end;
        lv_grads = pm.grads, lv_acts = 0, lv_bwd = bt.layer + pm.dequant;
    }
    bool in_step = train && at_step > peak;
    if (in_step) {
        peak = at_step;
        lv_grads = pm.grads, lv_cache = 0, lv_acts = 0, lv_bwd = 0, lv_opt = opt;
    }
    /* a quantized base dequantizes one linear at a time for its matmul */
    if (!train) {
        peak = fixed + acts + kv + (load ? 0 : pm.dequant);
        lv_grads = 0, lv_cache = 0, lv_acts = acts, lv_kv = kv, lv_bwd = load ? 0 : pm.dequant;
    }

    /* the live tensors of each phase carved into segments as the pool does;
     * the process keeps the largest reservation */
    phase_t phases[3] = {
        {true, grads_kept, live_acts, bwd + pm.cache, 0},
        {true, true, 0, bt.layer + pm.dequant + pm.cache, 0},
        {true, true, 0, opt, 0},
    };
    int nphases = train ? 3 : 1;
    if (!train) phases[0] = (phase_t){false, false, acts, load ? 0 : pm.dequant, kv};
    double reserved = 0;
    for (int i = 0; i < nphases; i++) {
        double r = carve_phase(m, &p, &pm, c, buffers + work, &phases[i]);
        if (r > reserved) reserved = r;
    }
    double rounding = reserved - peak;
    if (rounding < 0) rounding = 0;

    vram_estimate_t e = {0};
    e.parameters_count = p.params;
    e.trainable_count = train ? (uint64_t)pm.trainable : 0;
    /* buffers are exact byte counts: kept in integers (a double would
     * round a measured profile's figure above 2^53) */
    const uint64_t max_bytes = (uint64_t)VRAM_MAX_BYTES;
    if (p.buffer_i64 > max_bytes / 8 || p.buffer_bytes > max_bytes - 8 * p.buffer_i64)
        return vram_fail(VRAM_EINVAL,
                         "estimate for \"%s\": the buffers exceed the limit of 2^60 bytes (1 EiB)",
                         m->name);
    e.buffers = p.buffer_bytes + 8 * p.buffer_i64;
    if ((rc = to_bytes(m, pm.params, "parameters", &e.parameters)) ||
        (rc = to_bytes(m, pm.grads, "gradients", &e.gradients)) ||
        (rc = to_bytes(m, pm.states, "optimizer states", &e.optimizer_states)) ||
        (rc = to_bytes(m, acts, "activations", &e.activations)) ||
        (rc = to_bytes(m, kv, "KV cache", &e.kv_cache)) ||
        (rc = to_bytes(m, pm.cache, "autocast cache", &e.autocast_cache)) ||
        (rc = to_bytes(m, bwd, "backward temporaries", &e.backward_temps)) ||
        (rc = to_bytes(m, opt, "optimizer temporaries", &e.optimizer_temps)) ||
        (rc = to_bytes(m, work, "workspaces", &e.workspaces)) ||
        (rc = to_bytes(m, context, "CUDA context", &e.cuda_context)) ||
        (rc = to_bytes(m, rounding, "allocator rounding", &e.allocator_rounding)))
        return rc;
    /* the live parts, each at most its component (checked above) */
    vram_estimate_live_t *lv = &e.live;
    lv->parameters = e.parameters;
    lv->buffers = e.buffers;
    lv->optimizer_states = e.optimizer_states;
    lv->workspaces = e.workspaces;
    lv->cuda_context = e.cuda_context;
    lv->allocator_rounding = e.allocator_rounding;
    if ((rc = to_bytes(m, lv_grads, "gradients", &lv->gradients)) ||
        (rc = to_bytes(m, lv_acts, "activations", &lv->activations)) ||
        (rc = to_bytes(m, lv_kv, "KV cache", &lv->kv_cache)) ||
        (rc = to_bytes(m, lv_cache, "autocast cache", &lv->autocast_cache)) ||
        (rc = to_bytes(m, lv_bwd, "backward temporaries", &lv->backward_temps)) ||
        (rc = to_bytes(m, lv_opt, "optimizer temporaries", &lv->optimizer_temps)))
        return rc;
    /* the peak is the sum of its live parts: ten parts of at most 2^60
     * bytes each cannot wrap */
    e.allocated_peak = lv->parameters + lv->buffers + lv->gradients + lv->optimizer_states +
                       lv->activations + lv->kv_cache + lv->autocast_cache + lv->backward_temps +
                       lv->optimizer_temps + lv->workspaces;
    /* each part is at most 2^60 bytes: these sums cannot wrap */
    e.reserved = e.allocated_peak + e.allocator_rounding;
    e.nvidia_smi = e.reserved + e.cuda_context;
    e.total = e.nvidia_smi;
    e.overhead = e.autocast_cache + e.backward_temps + e.optimizer_temps + e.workspaces +
                 e.allocator_rounding + e.cuda_context;
    e.peak_in_optimizer_step = in_step;
    e.fused_attention = fused;
    e.compiled_layers = compiled > 0;
    e.seq_len = vram_estimate_setting_applies(m, "seq_len") ? seq : 0;
    e.image_size = vram_estimate_setting_applies(m, "image_size") ? image : 0;
    *out = e;
    return 0;
}

int vram_model_param_count(const vram_model_t *m, uint64_t *params, uint64_t *tensors)
{
    if (!m) return vram_fail(VRAM_EINVAL, "vram_model_param_count: NULL model");
    vram_arch_params_t p;
    int rc = vram_arch_params(m, &p);
    if (rc) return rc;
    if (params) *params = p.params;
    if (tensors) *tensors = p.tensors;
    return 0;
}
