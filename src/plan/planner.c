/* vram_plan: batch-size recommendations from full estimates at each batch
 * tried (the peak can move between phases as the batch grows, so no slope
 * between two batches predicts a third). */
#include "vram.h"
#include "estimate_at.h"
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

static int64_t floor_pow2(int64_t v)
{
    if (v < 1) return 0;
    int64_t p = 1;
    while (p <= v / 2)
        p *= 2;
    return p;
}

/* The bytes a batch is judged by: on a GPU everything nvidia-smi shows
 * (the caching allocator's reservation, the context); in host memory what
 * the tensors hold at once (no caching allocator, no context). */
static uint64_t judged_bytes(const vram_estimate_t *e, bool host)
{
    return host ? e->allocated_peak : e->total;
}

/* Whether the estimate at `batch` fits; a refused estimate does not. */
static bool fits_at(const vram_model_t *m, const vram_estimate_config_t *c, int64_t batch,
                    uint64_t budget, bool host)
{
    vram_estimate_t e;
    return vram_estimate_whole_at(m, c, batch, &e) == 0 && judged_bytes(&e, host) <= budget;
}

/* Largest batch whose estimate fits the budget (0: not even one). The
 * estimate grows with the batch: double until one does not fit, then
 * bisect. */
static int64_t max_batch(const vram_model_t *m, const vram_estimate_config_t *c, uint64_t budget,
                         bool host)
{
    if (!fits_at(m, c, 1, budget, host)) return 0;
    int64_t lo = 1, hi = MAX_BATCH + 1; /* fits(lo), !fits(hi) */
    while (lo < MAX_BATCH) {
        int64_t next = lo > MAX_BATCH / 2 ? MAX_BATCH : 2 * lo;
        if (!fits_at(m, c, next, budget, host)) {
            hi = next;
            break;
        }
        lo = next;
    }
    while (hi - lo > 1) {
        int64_t mid = lo + (hi - lo) / 2;
        if (fits_at(m, c, mid, budget, host))
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

/* One memory-saving change. Changes of the same group exclude each other
 * (one precision; LoRA or QLoRA; ZeRO's partitioned fp32 states or
 * bitsandbytes' 8-bit states, which ZeRO does not partition): "all of the
 * above" takes the one of each group that saves most. */
typedef enum { G_PRECISION, G_ATTENTION, G_CHECKPOINTING, G_STATES, G_ADAPTERS, G_COUNT } group_t;

typedef struct {
    group_t group;
    char name[32], desc[128];
    vram_estimate_config_t cfg; /* the settings with this change alone */
} change_t;

static void set_precision(vram_estimate_config_t *v, vram_precision_t p)
{
    v->precision = p;
}

/* The changes that apply to `at` (the settings at the judged batch). */
static int changes(const vram_estimate_config_t *at, change_t *out)
{
    int n = 0;
    change_t *ch;
#define ADD(g, nm, ds)                                                                             \
    (ch = &out[n++], ch->group = (g), ch->cfg = *at,                                               \
     snprintf(ch->name, sizeof ch->name, "%s", (nm)),                                              \
     snprintf(ch->desc, sizeof ch->desc, "%s", (ds)), &ch->cfg)
    bool train = at->mode == VRAM_MODE_TRAIN;
    if (at->precision == VRAM_PREC_FP32 && train)
        set_precision(ADD(G_PRECISION, "precision=amp-bf16",
                          "mixed precision (autocast, fp32 master weights)"),
                      VRAM_PREC_AMP_BF16);
    if (at->precision == VRAM_PREC_FP32 ||
        (train && at->precision != VRAM_PREC_BF16 && at->precision != VRAM_PREC_FP16))
        set_precision(
            ADD(G_PRECISION, "precision=bf16", "bf16 weights, gradients, states and activations"),
            VRAM_PREC_BF16);
    if (!train) {
        if (at->precision != VRAM_PREC_INT4) {
            bool to8 = at->precision != VRAM_PREC_INT8;
            set_precision(
                ADD(G_PRECISION, to8 ? "precision=int8" : "precision=int4", "quantized weights"),
                to8 ? VRAM_PREC_INT8 : VRAM_PREC_INT4);
        }
        return n;
    }
    vram_estimate_config_t *v;
    if (!at->fused_attention) {
        v = ADD(G_ATTENTION, "attention=fused",
                "fused attention (SDPA/FlashAttention) keeps no scores");
        v->fused_attention = true;
        v->attention_from_model = false;
    }
    if (at->checkpointing != VRAM_CKPT_FULL) {
        v = ADD(G_CHECKPOINTING, "checkpointing=full",
                "activation checkpointing: recompute layers in backward (about 30% slower)");
        v->checkpointing = VRAM_CKPT_FULL;
    }
    bool adam = at->optimizer == VRAM_OPTIMIZER_ADAM || at->optimizer == VRAM_OPTIMIZER_ADAMW;
    if (adam && at->zero_stage == 0) {
        v = ADD(G_STATES, "optimizer=adam8bit", "8-bit Adam states (bitsandbytes)");
        v->optimizer = VRAM_OPTIMIZER_ADAM8BIT;
    }
    if (at->zero_stage < 3 && at->optimizer != VRAM_OPTIMIZER_ADAM8BIT) {
        int gpus = at->gpus > 1 ? at->gpus : 8;
        char desc[128];
        snprintf(desc, sizeof desc,
                 "ZeRO-3: partition parameters, gradients and optimizer states over %d GPUs", gpus);
        v = ADD(G_STATES, at->gpus > 1 ? "zero=3" : "zero=3,gpus=8", desc);
        v->zero_stage = 3;
        v->gpus = gpus;
    }
    if (at->lora_rank == 0) {
        /* LoRA on every linear, then QLoRA's NF4 base with bf16 compute
         * (Dettmers et al. 2023), when the family has LoRA targets */
        v = ADD(G_ADAPTERS, "lora=r16,all-linear",
                "LoRA adapters (rank 16, all linear layers); the base is frozen");
        v->lora_rank = 16;
        v->lora_alpha = 32;
        v->lora_targets = VRAM_LORA_ALL_LINEAR;
        vram_estimate_config_t lora = *v;
        v = ADD(G_ADAPTERS, "qlora=nf4,r16",
                "QLoRA: NF4 base with double quantization, bf16 compute, rank-16 adapters");
        *v = lora;
        v->quantize_base = VRAM_QUANT_NF4;
        v->double_quant = true;
        if (v->precision == VRAM_PREC_FP32) v->precision = VRAM_PREC_AMP_BF16;
    }
#undef ADD
    return n;
}

/* Applies what change `c` changed from `at` onto `dst`. */
static void combine(vram_estimate_config_t *dst, const vram_estimate_config_t *at,
                    const change_t *c)
{
    const vram_estimate_config_t *v = &c->cfg;
    if (v->precision != at->precision) dst->precision = v->precision;
    if (v->fused_attention != at->fused_attention) {
        dst->fused_attention = v->fused_attention;
        dst->attention_from_model = v->attention_from_model;
    }
    if (v->checkpointing != at->checkpointing) dst->checkpointing = v->checkpointing;
    if (v->optimizer != at->optimizer) dst->optimizer = v->optimizer;
    if (v->zero_stage != at->zero_stage) dst->zero_stage = v->zero_stage, dst->gpus = v->gpus;
    if (v->lora_rank != at->lora_rank) {
        dst->lora_rank = v->lora_rank;
        dst->lora_alpha = v->lora_alpha;
        dst->lora_targets = v->lora_targets;
        dst->quantize_base = v->quantize_base;
        dst->double_quant = v->double_quant;
        /* QLoRA computes in bf16: only over fp32, never over a choice made */
        if (dst->precision == VRAM_PREC_FP32) dst->precision = v->precision;
    }
}

/* What each memory-saving change would save at `batch`, and the best one
 * of each group together. */
static void suggestions(const vram_model_t *m, const vram_estimate_config_t *c, int64_t batch,
                        uint64_t budget, bool host, vram_plan_t *p)
{
    vram_estimate_t base;
    if (vram_estimate_whole_at(m, c, batch, &base)) return;
    vram_estimate_config_t at = *c;
    at.batch_size = batch;
    change_t all[12];
    int n = changes(&at, all);
    int best[G_COUNT];
    uint64_t best_saving[G_COUNT] = {0};
    for (int g = 0; g < G_COUNT; g++)
        best[g] = -1;
    for (int i = 0; i < n && p->nsuggestions < VRAM_PLAN_MAX_SUGGESTIONS - 1; i++) {
        vram_estimate_t alt;
        if (vram_estimate(m, &all[i].cfg, &alt) || alt.total >= base.total) continue;
        vram_plan_suggestion_t *s = &p->suggestions[p->nsuggestions++];
        snprintf(s->name, sizeof s->name, "%s", all[i].name);
        snprintf(s->description, sizeof s->description, "%s", all[i].desc);
        s->saving_bytes = base.total - alt.total;
        s->fits = judged_bytes(&alt, host) <= budget;
        if (s->saving_bytes > best_saving[all[i].group]) {
            best_saving[all[i].group] = s->saving_bytes;
            best[all[i].group] = i;
        }
    }
    vram_estimate_config_t v = at;
    char desc[128] = "together:";
    int picked = 0;
    for (int g = 0; g < G_COUNT; g++) {
        if (best[g] < 0) continue;
        combine(&v, &at, &all[best[g]]);
        size_t len = strlen(desc);
        snprintf(desc + len, sizeof desc - len, "%s %s", picked ? "," : "", all[best[g]].name);
        picked++;
    }
    vram_estimate_t combined;
    if (picked < 2 || vram_estimate(m, &v, &combined) || combined.total >= base.total) return;
    vram_plan_suggestion_t *s = &p->suggestions[p->nsuggestions++];
    snprintf(s->name, sizeof s->name, "%s", "all-of-the-above");
    snprintf(s->description, sizeof s->description, "%s", desc);
    s->saving_bytes = base.total - combined.total;
    s->fits = judged_bytes(&combined, host) <= budget;
}

static int plan(const vram_model_t *m, const vram_estimate_config_t *est,
                const vram_plan_config_t *dev, bool host, vram_plan_t *out)
{
    if (!m || !est || !dev || !out) return vram_fail(VRAM_EINVAL, "vram_plan: NULL argument");
    if (!(dev->target > 0 && dev->target <= 1))
        return vram_fail(VRAM_EINVAL, "target %g is not a fraction in (0, 1]", dev->target);
    if (dev->batch_size < 0) return vram_fail(VRAM_EINVAL, "batch size cannot be negative");
    vram_estimate_t one, current;
    int rc = vram_estimate_whole_at(m, est, 1, &one);
    if (!rc && dev->batch_size > 0) rc = vram_estimate_whole_at(m, est, dev->batch_size, &current);
    if (rc) return rc;

    vram_plan_t p = {0};
    const vram_estimate_live_t *l = &one.live;
    p.model_bytes = one.total - l->activations - l->kv_cache - l->backward_temps;
    /* (double)UINT64_MAX rounds up to 2^64, which does not convert back */
    double budget = floor(dev->target * (double)dev->free_bytes);
    p.budget_bytes = budget >= 0x1p64 ? UINT64_MAX : (uint64_t)budget;
    /* an estimate above VRAM_MAX_BYTES is refused: no need to look beyond */
    uint64_t search =
        p.budget_bytes > (uint64_t)VRAM_MAX_BYTES ? (uint64_t)VRAM_MAX_BYTES : p.budget_bytes;
    p.max_batch_raw = max_batch(m, est, search, host);
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
        p.current = current;
        uint64_t t = judged_bytes(&p.current, host);
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
    p.shown_batch = dev->batch_size > 0 ? dev->batch_size : (p.recommended ? p.recommended : 1);
    if (dev->batch_size > 0)
        p.shown = p.current;
    else if ((rc = vram_estimate_whole_at(m, est, p.shown_batch, &p.shown)))
        return rc;
    bool judged_fits = dev->batch_size > 0 ? p.fit == VRAM_FIT_YES : raw >= 1;
    if (!judged_fits) suggestions(m, est, judged, p.budget_bytes, host, &p);
    *out = p;
    return 0;
}

int vram_plan(const vram_model_t *m, const vram_estimate_config_t *est,
              const vram_plan_config_t *dev, vram_plan_t *out)
{
    return plan(m, est, dev, false, out);
}

int vram_plan_host(const vram_model_t *m, const vram_estimate_config_t *est,
                   const vram_plan_config_t *dev, vram_plan_t *out)
{
    return plan(m, est, dev, true, out);
}
