/* The job mix: real model/batch combinations estimated by libvram, heavy-tailed
 * run times, bursty arrivals with sweeps. Assumptions and their sources are
 * in bench/cluster/README.md; the numbers below are those assumptions. */
#include "mix.h"

#include "vram.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SIGMA_DURATION 1.3 /* lognormal spread of run times (p99 ~ 20x the median) */
#define MAX_DURATION   (7 * 86400.0)
#define ERROR_SIGMA    0.034 /* estimator error: median |error| 2.3% (bench/RESULTS.md) */
#define ERROR_CLIP     0.053 /* its worst measured case */

/* One estimate request: a catalog model and the flags `vram estimate` would get. */
typedef struct {
    const char *label, *model;
    vram_mode_t mode;
    vram_precision_t precision;
    vram_optimizer_t optimizer;
    vram_checkpointing_t ckpt;
    int64_t seq, image, new_tokens;
    uint32_t batch;
    int lora_rank;
    vram_quant_t quant;
    int gpus, zero;
    double weight, median_minutes;
    int sweep;
} recipe_t;

/* Recipes after public reference scripts (README.md names each source). */
static const recipe_t recipes[] = {
    {"resnet18 train amp bs256 (sweep)", "resnet18", VRAM_MODE_TRAIN, VRAM_PREC_AMP_FP16,
     VRAM_OPTIMIZER_MOMENTUM, VRAM_CKPT_NONE, 0, 224, 0, 256, 0, VRAM_QUANT_NONE, 1, 0, 0.15, 20,
     1},
    {"resnet50 train fp32 bs64", "resnet50", VRAM_MODE_TRAIN, VRAM_PREC_FP32,
     VRAM_OPTIMIZER_MOMENTUM, VRAM_CKPT_NONE, 0, 224, 0, 64, 0, VRAM_QUANT_NONE, 1, 0, 0.08, 90, 0},
    {"resnet50 train fp32 bs32 x8", "resnet50", VRAM_MODE_TRAIN, VRAM_PREC_FP32,
     VRAM_OPTIMIZER_MOMENTUM, VRAM_CKPT_NONE, 0, 224, 0, 32, 0, VRAM_QUANT_NONE, 8, 0, 0.03, 240,
     0},
    {"vit-b-16 train amp bs128 x4", "vit-b-16", VRAM_MODE_TRAIN, VRAM_PREC_AMP_BF16,
     VRAM_OPTIMIZER_ADAMW, VRAM_CKPT_NONE, 0, 224, 0, 128, 0, VRAM_QUANT_NONE, 4, 0, 0.05, 180, 0},
    {"bert-base finetune s128 bs32 (sweep)", "bert-base-uncased", VRAM_MODE_TRAIN, VRAM_PREC_FP32,
     VRAM_OPTIMIZER_ADAMW, VRAM_CKPT_NONE, 128, 0, 0, 32, 0, VRAM_QUANT_NONE, 1, 0, 0.15, 15, 1},
    {"bert-large amp s512 bs8", "bert-large-uncased", VRAM_MODE_TRAIN, VRAM_PREC_AMP_FP16,
     VRAM_OPTIMIZER_ADAMW, VRAM_CKPT_NONE, 512, 0, 0, 8, 0, VRAM_QUANT_NONE, 1, 0, 0.06, 60, 0},
    {"gpt2 train amp s1024 bs12", "gpt2", VRAM_MODE_TRAIN, VRAM_PREC_AMP_BF16, VRAM_OPTIMIZER_ADAMW,
     VRAM_CKPT_NONE, 1024, 0, 0, 12, 0, VRAM_QUANT_NONE, 1, 0, 0.05, 120, 0},
    {"gpt2-medium train amp s1024 bs16", "gpt2-medium", VRAM_MODE_TRAIN, VRAM_PREC_AMP_BF16,
     VRAM_OPTIMIZER_ADAMW, VRAM_CKPT_NONE, 1024, 0, 0, 16, 0, VRAM_QUANT_NONE, 1, 0, 0.05, 180, 0},
    {"llama-2-7b lora bf16 s2048 bs4", "llama-2-7b", VRAM_MODE_TRAIN, VRAM_PREC_BF16,
     VRAM_OPTIMIZER_ADAMW, VRAM_CKPT_FULL, 2048, 0, 0, 4, 16, VRAM_QUANT_NONE, 1, 0, 0.08, 120, 0},
    {"llama-2-13b qlora s2048 bs4", "llama-2-13b", VRAM_MODE_TRAIN, VRAM_PREC_BF16,
     VRAM_OPTIMIZER_ADAMW, VRAM_CKPT_FULL, 2048, 0, 0, 4, 64, VRAM_QUANT_NF4, 1, 0, 0.04, 180, 0},
    {"llama-3-8b infer bf16 s2048+512 bs16", "llama-3-8b", VRAM_MODE_INFER, VRAM_PREC_BF16,
     VRAM_OPTIMIZER_ADAMW, VRAM_CKPT_NONE, 2048, 0, 512, 16, 0, VRAM_QUANT_NONE, 1, 0, 0.12, 30, 0},
    {"llama-2-7b full bf16 zero3 s2048 bs4 x8", "llama-2-7b", VRAM_MODE_TRAIN, VRAM_PREC_BF16,
     VRAM_OPTIMIZER_ADAMW, VRAM_CKPT_FULL, 2048, 0, 0, 4, 0, VRAM_QUANT_NONE, 8, 3, 0.02, 600, 0},
    {"gpt2-xl train amp s1024 bs8 x4", "gpt2-xl", VRAM_MODE_TRAIN, VRAM_PREC_AMP_BF16,
     VRAM_OPTIMIZER_ADAMW, VRAM_CKPT_NONE, 1024, 0, 0, 8, 0, VRAM_QUANT_NONE, 4, 0, 0.04, 300, 0},
};

static int estimate(const recipe_t *r, mix_type_t *t)
{
    vram_model_t m;
    vram_estimate_config_t cfg;
    if (vram_model_find(r->model, &m) != 0) return -1;
    vram_estimate_config_init(&cfg);
    cfg.mode = r->mode;
    cfg.precision = r->precision;
    cfg.optimizer = r->optimizer;
    cfg.checkpointing = r->ckpt;
    cfg.seq_len = r->seq;
    cfg.image_size = r->image;
    cfg.max_new_tokens = r->new_tokens;
    cfg.batch_size = r->batch;
    cfg.lora_rank = r->lora_rank;
    cfg.quantize_base = r->quant;
    cfg.gpus = r->gpus;
    cfg.zero_stage = r->zero;
    if (vram_estimate_batch_table(&m, &cfg, 1, t->table, VRAM_JOB_MAX_BATCHES, &t->ntable) != 0)
        return -1;
    t->mem = t->table[t->ntable - 1].bytes;
    return 0;
}

int mix_types(mix_type_t *types)
{
    int n = 0;
    for (size_t i = 0; i < sizeof recipes / sizeof recipes[0] && n < MIX_MAX_TYPES; i++) {
        const recipe_t *r = &recipes[i];
        mix_type_t *t = &types[n];
        *t = (mix_type_t){.label = r->label,
                          .batch = r->batch,
                          .gpus = r->gpus,
                          .weight = r->weight,
                          .median_minutes = r->median_minutes,
                          .sweep = r->sweep};
        if (estimate(r, t)) {
            fprintf(stderr, "estimate of %s failed: %s\n", r->label, vram_last_error());
            return -1;
        }
        n++;
    }
    return n;
}

uint64_t mix_mem_at(const mix_type_t *t, uint32_t b)
{
    for (int i = 0; i < t->ntable; i++)
        if (t->table[i].batch >= b) return t->table[i].bytes;
    return t->mem;
}

double mix_uniform(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return ((double)(*s >> 11) + 0.5) / 9007199254740992.0;
}

double mix_normal(uint64_t *s)
{
    return sqrt(-2 * log(mix_uniform(s))) * cos(2 * M_PI * mix_uniform(s));
}

static int pick_type(const mix_type_t *types, int n, uint64_t *rng)
{
    double sum = 0, x;
    for (int i = 0; i < n; i++)
        sum += types[i].weight;
    x = mix_uniform(rng) * sum;
    for (int i = 0; i < n; i++)
        if ((x -= types[i].weight) <= 0) return i;
    return n - 1;
}

/* Sweeps submit 8..32 copies at once (hyperparameter searches, array jobs). */
static double copies_of(const mix_type_t *t)
{
    return t->sweep ? 20.0 : 1.0;
}

int mix_jobs(const mix_type_t *types, int ntypes, int gpus, double hours, double load,
             unsigned seed, mix_job_t **out)
{
    uint64_t rng = 0x9e3779b97f4a7c15ull ^ ((uint64_t)seed * 0xbf58476d1ce4e5b9ull);
    /* GPU-seconds asked per submission event, on average. */
    double wsum = 0, per_event = 0;
    for (int i = 0; i < ntypes; i++)
        wsum += types[i].weight;
    for (int i = 0; i < ntypes; i++)
        per_event += types[i].weight / wsum * copies_of(&types[i]) * types[i].gpus *
                     types[i].median_minutes * 60 * exp(SIGMA_DURATION * SIGMA_DURATION / 2);
    double horizon = hours * 3600, rate = load * gpus * horizon / per_event / horizon;
    /* Bursts: a two-state modulated Poisson process, busy a third of the
     * time at twice the mean rate, quiet otherwise at half (mean 1). */
    size_t cap = 1024, n = 0;
    mix_job_t *jobs = malloc(cap * sizeof *jobs);
    if (!jobs) return -1;
    double t = 0, switch_at = 0;
    bool busy = false;
    for (;;) {
        t += -log(mix_uniform(&rng)) / (2 * rate);
        while (t >= switch_at) {
            busy = !busy;
            switch_at += -log(mix_uniform(&rng)) * (busy ? 2 : 4) * 3600;
        }
        if (t >= horizon) break;
        if (mix_uniform(&rng) > (busy ? 1.0 : 0.25)) continue; /* thinning */
        int type = pick_type(types, ntypes, &rng);
        int copies = types[type].sweep ? 8 + (int)(mix_uniform(&rng) * 25) : 1;
        for (int c = 0; c < copies; c++) {
            if (n == cap) {
                mix_job_t *more = realloc(jobs, (cap *= 2) * sizeof *jobs);
                if (!more) {
                    free(jobs);
                    return -1;
                }
                jobs = more;
            }
            double d = types[type].median_minutes * 60 * exp(SIGMA_DURATION * mix_normal(&rng));
            double e = ERROR_SIGMA * mix_normal(&rng);
            jobs[n++] = (mix_job_t){t, fmin(fmax(d, 60), MAX_DURATION), type,
                                    fmax(-ERROR_CLIP, fmin(ERROR_CLIP, e))};
        }
    }
    *out = jobs;
    return (int)n;
}
