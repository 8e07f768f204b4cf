/* vram_plan: batch-size recommendations from the estimate, which is affine
 * in the batch size (model memory + batch * per-sample memory). */
#include "vram.h"
#include "estimate_limits.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define MAX_BATCH VRAM_MAX_BATCH /* vram_estimate refuses larger batches */

void vram_plan_config_init(vram_plan_config_t *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->target = 0.70;
    cfg->power_of_two = true;
}

static int estimate_at(const vram_model_t *m, const vram_estimate_config_t *base, int64_t batch,
                       vram_estimate_t *out)
{
    vram_estimate_config_t c = *base;
    c.batch_size = batch;
    return vram_estimate(m, &c, out);
}

static int64_t floor_pow2(int64_t v)
{
    if (v < 1) return 0;
    int64_t p = 1;
    while (p <= v / 2)
        p *= 2;
    return p;
}

/* Whether the estimate at `batch` fits; a refused estimate does not. */
static bool fits_at(const vram_model_t *m, const vram_estimate_config_t *c, int64_t batch,
                    uint64_t budget)
{
    vram_estimate_t e;
    return estimate_at(m, c, batch, &e) == 0 && e.total <= budget;
}

/* Largest batch whose estimate fits the budget (0: not even one). */
static int max_batch(const vram_model_t *m, const vram_estimate_config_t *c, uint64_t budget,
                     uint64_t model_bytes, uint64_t per_sample, int64_t *out)
{
    /* an estimate above VRAM_MAX_BYTES is refused, so the search never
     * needs to look beyond it (the sums below cannot wrap: each is at most
     * 7 * 2^60) */
    if (budget > (uint64_t)VRAM_MAX_BYTES) budget = (uint64_t)VRAM_MAX_BYTES;
    if (model_bytes + per_sample > budget) {
        *out = 0;
        return 0;
    }
    int64_t b = per_sample ? (int64_t)((budget - model_bytes) / per_sample) : MAX_BATCH;
    if (b > MAX_BATCH) b = MAX_BATCH;
    if (b < 1) b = 1;
    /* the estimate grows with the batch but is not exactly affine (the
     * allocator's rounding, the peak's phase): bracket the boundary around
     * the affine guess by doubling steps, then bisect */
    int64_t lo = 0, hi = MAX_BATCH + 1; /* fits(lo) (or lo = 0), !fits(hi) */
    int64_t step = 1;
    if (fits_at(m, c, b, budget)) {
        lo = b;
        while (lo < MAX_BATCH) {
            int64_t next = lo + step > MAX_BATCH ? MAX_BATCH : lo + step;
            if (!fits_at(m, c, next, budget)) {
                hi = next;
                break;
            }
            lo = next;
            step *= 2;
        }
        if (lo == MAX_BATCH) hi = MAX_BATCH + 1;
    } else {
        hi = b;
        while (hi > 1) {
            int64_t next = hi - step < 1 ? 1 : hi - step;
            if (fits_at(m, c, next, budget)) {
                lo = next;
                break;
            }
            hi = next;
            step *= 2;
        }
    }
    while (hi - lo > 1) {
        int64_t mid = lo + (hi - lo) / 2;
        if (fits_at(m, c, mid, budget))
            lo = mid;
        else
            hi = mid;
    }
    b = lo;
    *out = b;
    return 0;
}

static void suggest(vram_plan_t *p, const char *name, const char *desc, uint64_t base_total,
                    const vram_estimate_t *alt, uint64_t budget)
{
    if (p->nsuggestions >= VRAM_PLAN_MAX_SUGGESTIONS || alt->total >= base_total) return;
    vram_plan_suggestion_t *s = &p->suggestions[p->nsuggestions++];
    snprintf(s->name, sizeof s->name, "%s", name);
    snprintf(s->description, sizeof s->description, "%s", desc);
    s->saving_bytes = base_total - alt->total;
    s->fits = alt->total <= budget;
}

/* Estimates the changed settings `v` and suggests them if they save memory. */
static void suggest_variant(vram_plan_t *p, const vram_model_t *m, const vram_estimate_config_t *v,
                            const char *name, const char *desc, uint64_t base_total,
                            uint64_t budget)
{
    vram_estimate_t alt;
    if (!vram_estimate(m, v, &alt)) suggest(p, name, desc, base_total, &alt, budget);
}

/* What each memory-saving change would save at `batch`. */
static void suggestions(const vram_model_t *m, const vram_estimate_config_t *c, int64_t batch,
                        uint64_t budget, vram_plan_t *p)
{
    vram_estimate_t base, combined = {0};
    if (estimate_at(m, c, batch, &base)) return;
    vram_estimate_config_t at = *c, v; /* the settings at `batch`, and a variant */
    at.batch_size = batch;
    if (c->precision == VRAM_PREC_FP32 && c->mode == VRAM_MODE_TRAIN) {
        v = at;
        v.precision = VRAM_PREC_AMP_BF16;
        suggest_variant(p, m, &v, "precision=amp-bf16",
                        "mixed precision (autocast, fp32 master weights)", base.total, budget);
    }
    if (c->precision == VRAM_PREC_FP32 ||
        (c->mode == VRAM_MODE_TRAIN && c->precision != VRAM_PREC_BF16 &&
         c->precision != VRAM_PREC_FP16)) {
        v = at;
        v.precision = VRAM_PREC_BF16;
        suggest_variant(p, m, &v, "precision=bf16",
                        "bf16 weights, gradients, states and activations", base.total, budget);
    }
    if (c->mode == VRAM_MODE_INFER) {
        v = at;
        v.precision = c->precision == VRAM_PREC_INT8 ? VRAM_PREC_INT4 : VRAM_PREC_INT8;
        if (c->precision != VRAM_PREC_INT4)
            suggest_variant(p, m, &v,
                            v.precision == VRAM_PREC_INT8 ? "precision=int8" : "precision=int4",
                            "quantized weights", base.total, budget);
        return;
    }
    if (!c->fused_attention) {
        v = at;
        v.fused_attention = true;
        suggest_variant(p, m, &v, "attention=fused",
                        "fused attention (SDPA/FlashAttention) keeps no scores", base.total,
                        budget);
    }
    if (c->checkpointing != VRAM_CKPT_FULL) {
        v = at;
        v.checkpointing = VRAM_CKPT_FULL;
        suggest_variant(p, m, &v, "checkpointing=full",
                        "activation checkpointing: recompute layers in backward (about 30% "
                        "slower)",
                        base.total, budget);
    }
    bool adam = c->optimizer == VRAM_OPTIMIZER_ADAM || c->optimizer == VRAM_OPTIMIZER_ADAMW;
    if (adam) {
        v = at;
        v.optimizer = VRAM_OPTIMIZER_ADAM8BIT;
        suggest_variant(p, m, &v, "optimizer=adam8bit", "8-bit Adam states (bitsandbytes)",
                        base.total, budget);
    }
    if (c->lora_rank == 0 && c->zero_stage == 0) {
        /* LoRA on every linear, then QLoRA's NF4 base with bf16 compute
         * (Dettmers et al. 2023), when the family has LoRA targets */
        v = at;
        v.lora_rank = 16;
        v.lora_alpha = 32;
        v.lora_targets = VRAM_LORA_ALL_LINEAR;
        suggest_variant(p, m, &v, "lora=r16,all-linear",
                        "LoRA adapters (rank 16, all linear layers); the base is frozen",
                        base.total, budget);
        v.quantize_base = VRAM_QUANT_NF4;
        v.double_quant = true;
        if (v.precision == VRAM_PREC_FP32) v.precision = VRAM_PREC_AMP_BF16;
        suggest_variant(p, m, &v, "qlora=nf4,r16",
                        "QLoRA: NF4 base with double quantization, bf16 compute, rank-16 "
                        "adapters",
                        base.total, budget);
    }
    int zero_gpus = c->gpus > 1 ? c->gpus : 8;
    /* all of them together, for when no single change is enough */
    v = at;
    if (c->precision == VRAM_PREC_FP32) v.precision = VRAM_PREC_AMP_BF16;
    v.checkpointing = VRAM_CKPT_FULL;
    v.fused_attention = true;
    if (adam) v.optimizer = VRAM_OPTIMIZER_ADAM8BIT;
    v.zero_stage = 3;
    v.gpus = zero_gpus;
    if (vram_estimate(m, &v, &combined)) combined.total = 0;
    if (c->zero_stage < 3) {
        v = at;
        v.zero_stage = 3;
        v.gpus = zero_gpus;
        char desc[128];
        snprintf(desc, sizeof desc,
                 "ZeRO-3: partition parameters, gradients and optimizer states over %d GPUs",
                 v.gpus);
        suggest_variant(p, m, &v, c->gpus > 1 ? "zero=3" : "zero=3,gpus=8", desc, base.total,
                        budget);
    }
    if (combined.total)
        suggest(p, "all-of-the-above", "every change above together", base.total, &combined,
                budget);
}

int vram_plan(const vram_model_t *m, const vram_estimate_config_t *est,
              const vram_plan_config_t *dev, vram_plan_t *out)
{
    if (!m || !est || !dev || !out) return vram_fail(VRAM_EINVAL, "vram_plan: NULL argument");
    if (!(dev->target > 0 && dev->target <= 1))
        return vram_fail(VRAM_EINVAL, "target %g is not a fraction in (0, 1]", dev->target);
    if (dev->batch_size < 0) return vram_fail(VRAM_EINVAL, "batch size cannot be negative");
    vram_estimate_t one, two;
    int rc = estimate_at(m, est, 1, &one);
    if (!rc) rc = estimate_at(m, est, 2, &two);
    if (!rc && dev->batch_size > 0) rc = estimate_at(m, est, dev->batch_size, &out->current);
    if (rc) return rc;

    vram_plan_t p = {0};
    p.per_sample_bytes = two.total - one.total;
    p.model_bytes = one.total - p.per_sample_bytes;
    /* (double)UINT64_MAX rounds up to 2^64, which does not convert back */
    double budget = floor(dev->target * (double)dev->free_bytes);
    p.budget_bytes = budget >= 0x1p64 ? UINT64_MAX : (uint64_t)budget;
    if ((rc = max_batch(m, est, p.budget_bytes, p.model_bytes, p.per_sample_bytes,
                        &p.max_batch_raw)))
        return rc;
    int64_t raw = p.max_batch_raw;
    /* Recommended and safe are 60 % and 40 % of the maximum people see, so
     * with power-of-two rounding they come out as half and a quarter of it. */
    p.maximum = dev->power_of_two ? floor_pow2(raw) : raw;
    int64_t rec = (int64_t)floor(0.6 * (double)p.maximum),
            safe = (int64_t)floor(0.4 * (double)p.maximum);
    if (raw >= 1 && rec < 1) rec = 1;
    if (raw >= 1 && safe < 1) safe = 1;
    p.recommended = dev->power_of_two ? floor_pow2(rec) : rec;
    p.safe = dev->power_of_two ? floor_pow2(safe) : safe;

    int64_t judged = dev->batch_size > 0 ? dev->batch_size : 1;
    if (dev->batch_size > 0) {
        p.current = out->current;
        uint64_t t = p.current.total;
        p.fit = t <= p.budget_bytes ? VRAM_FIT_YES
                                    : (t <= dev->free_bytes ? VRAM_FIT_TIGHT : VRAM_FIT_NO);
        if (p.fit == VRAM_FIT_YES) {
            p.micro_batch_size = dev->batch_size;
            p.accumulation_steps = 1;
        } else if (raw >= 1) {
            /* Fewest steps whose micro-batch fits. Up to twice that many steps,
             * prefer a count that divides B, so every step has the same batch
             * and the effective batch is exactly B (256 = 8 x 32, not 7 x 37). */
            int64_t b = dev->batch_size, fewest = (b + raw - 1) / raw, steps = fewest;
            for (int64_t k = fewest; k <= 2 * fewest && k <= b; k++) {
                if (b % k == 0) {
                    steps = k;
                    break;
                }
            }
            p.accumulation_steps = steps;
            p.micro_batch_size = (b + steps - 1) / steps;
        }
    }
    bool judged_fits = dev->batch_size > 0 ? p.fit == VRAM_FIT_YES : raw >= 1;
    if (!judged_fits) suggestions(m, est, judged, p.budget_bytes, &p);
    *out = p;
    return 0;
}
