/* vram_estimate: combines the architecture's counts and activations with
 * precision, optimizer, ZeRO partitioning and overhead (docs/estimation.md). */
#include "arch.h"
#include "estimate_limits.h"

#include <math.h>
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
    if (c->mode != VRAM_MODE_TRAIN && c->mode != VRAM_MODE_INFER)
        return vram_fail(VRAM_EINVAL, "unknown mode %d", (int)c->mode);
    if (m->family == VRAM_FAMILY_PROFILE) return 0;
    int64_t positions = seq + (c->mode == VRAM_MODE_INFER ? c->max_new_tokens : 0);
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

int vram_estimate(const vram_model_t *m, const vram_estimate_config_t *c, vram_estimate_t *out)
{
    if (!m || !c || !out) return vram_fail(VRAM_EINVAL, "vram_estimate: NULL argument");
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

    bool train = c->mode == VRAM_MODE_TRAIN;
    double gpus = c->gpus > 0 ? c->gpus : 1;
    double n = (double)p.params;
    double wb = weight_bytes(c->precision);
    double params = wb * n, grads = 0, states = 0;
    if (train) {
        bool amp = is_amp(c->precision);
        /* pure half precision keeps the optimizer states in half too */
        double state = (is_half(c->precision) && !amp) ? 2 : 4;
        grads = wb * n;
        states = optimizer_bytes(&p, c->optimizer, state);
        if (amp) states += 4 * n; /* fp32 master weights (ZeRO's 16 bytes/param) */
        if (c->zero_stage >= 1) states /= gpus;
        if (c->zero_stage >= 2) grads /= gpus;
        if (c->zero_stage >= 3) params /= gpus;
    }

    vram_arch_shape_t shape = {
        .training = train,
        .checkpointing = c->checkpointing,
        .batch = c->batch_size,
        .seq = seq,
        .image = image,
        .mm = is_half(c->precision) ? 2 : 4,
        .f32 = (c->precision == VRAM_PREC_FP32 || is_amp(c->precision)) ? 4 : 2,
        .amp = is_amp(c->precision) && train,
        .fused_attention = c->fused_attention,
    };
    double acts = 0;
    rc = vram_arch_acts(m, &shape, &acts);
    if (rc) return rc;

    double kv = 0;
    if (!train && vram_arch_has_kv_cache(m)) {
        double kvd = (double)(m->num_kv_heads > 0 ? m->num_kv_heads : m->num_heads) *
                     (double)(m->head_dim > 0 ? m->head_dim : m->hidden_size / m->num_heads);
        double b = (double)c->batch_size, tokens = (double)(seq + c->max_new_tokens);
        if (m->family == VRAM_FAMILY_T5) {
            /* decoder self-attention over the generated tokens, and the
             * cross-attention keys/values of the encoded input */
            double layers =
                (double)(m->num_decoder_layers > 0 ? m->num_decoder_layers : m->num_layers);
            kv = 2 * layers * kvd * b * shape.mm * ((double)c->max_new_tokens + (double)seq);
        } else {
            kv = 2 * (double)m->num_layers * kvd * tokens * b * shape.mm;
        }
    }

    double overhead = (double)(c->overhead_bytes == VRAM_UNKNOWN_U64 ? VRAM_DEFAULT_OVERHEAD_BYTES
                                                                     : c->overhead_bytes);
    /* the caching allocator rounds every block up to 512 bytes: half a
     * block lost per persistent tensor on average */
    double per_param_tensors =
        1 + (train ? 1 : 0) + (train && c->optimizer != VRAM_OPTIMIZER_SGD ? 2 : 0);
    overhead += 256.0 * per_param_tensors * (double)p.tensors;

    vram_estimate_t e = {0};
    e.parameters_count = p.params;
    /* buffers are exact byte counts: kept in integers (a double would
     * round a measured profile's figure above 2^53) */
    const uint64_t max_bytes = (uint64_t)VRAM_MAX_BYTES;
    if (p.buffer_i64 > max_bytes / 8 || p.buffer_bytes > max_bytes - 8 * p.buffer_i64)
        return vram_fail(VRAM_EINVAL,
                         "estimate for \"%s\": the buffers exceed the limit of 2^60 bytes (1 EiB)",
                         m->name);
    e.buffers = p.buffer_bytes + 8 * p.buffer_i64;
    if ((rc = to_bytes(m, params, "parameters", &e.parameters)) ||
        (rc = to_bytes(m, grads, "gradients", &e.gradients)) ||
        (rc = to_bytes(m, states, "optimizer states", &e.optimizer_states)) ||
        (rc = to_bytes(m, acts, "activations", &e.activations)) ||
        (rc = to_bytes(m, kv, "KV cache", &e.kv_cache)) ||
        (rc = to_bytes(m, overhead, "overhead", &e.overhead)))
        return rc;
    /* seven components of at most 2^60 bytes each: the sum cannot wrap */
    e.total = e.parameters + e.buffers + e.gradients + e.optimizer_states + e.activations +
              e.kv_cache + e.overhead;
    e.seq_len = vram_arch_is_image(m) ? 0 : seq;
    e.image_size = vram_arch_is_image(m) ? image : 0;
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
