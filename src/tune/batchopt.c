/* Dynamic batch-size optimizer: two settings (batch, lq) steered by the peak
 * memory usage of each window of adjustment_frequency iterations. Growth
 * raises lq first (it tends to improve final metrics), then the batch;
 * shrinking lowers the batch first. The model policy jumps to the largest
 * setting its fitted model predicts under the aim; the fixed-step policy is
 * the seed's (and the benchmark's baseline). */
#include "tune/batchopt_model.h"
#include "tune/tune_internal.h"

#include "vram.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Where a jump aims inside the dead band [target - margin, target]: a bit
 * above its middle, so that noise and a slightly wrong model stay inside it. */
#define BO_AIM_FRACTION 0.2
/* The fixed-step policy moves by 1/16 of each range. */
#define BO_STEPS 16
/* The smallest usage difference growth treats as a gain (fraction of the
 * device): readings are rounded, and noise is larger than this. */
#define BO_MIN_PREFERENCE 0.002
/* Batches tried past the last one at the lq cap: each costs one search
 * over lq; the finest trade-offs (one more sample for a little lq) are the
 * first ones, as a step of lq costs more memory the larger the batch. */
#define BO_SCAN 64
/* The longest wait between refinements after misses, in windows. */
#define BO_MAX_BACKOFF 1024
#define BO_SIZE_LIMIT  (1 << 20)

struct vram_batchopt {
    vram_batchopt_config_t cfg;
    bool lq_on;
    int batch, lq;                   /* current settings */
    int reported_batch, reported_lq; /* what the caller runs */
    vram_batchopt_reason_t pending;  /* why they differ */
    int cap_batch, cap_lq;           /* set_target */
    int64_t iteration, adjustments, ooms;
    int64_t grow_after; /* no growth before this iteration (OOM cooldown) */
    double win_peak, win_sum, win_sumsq;
    int win_len;
    double peak, last;
    double *hist; /* ring of history_size readings */
    int hist_len, hist_pos;
    double hist_sum;
    bo_model_t model;
    /* The last refinement: the peak it started from and the gain predicted.
     * One that gained less than half of it holds refining back for
     * refine_backoff windows, doubled at each further miss in the epoch. */
    double refine_from, refine_gain;
    double reading_sd;    /* of the readings in the last window */
    int64_t refine_after; /* no refinement before this iteration */
    int refine_backoff;   /* windows; 0: no miss yet in refine_epoch */
    int refine_epoch;     /* the model epoch refine_backoff belongs to */
    vram_batchopt_adjustment_t log[VRAM_BATCHOPT_LOG];
    int64_t nlog_total;
};

void vram_batchopt_config_init(vram_batchopt_config_t *cfg)
{
    *cfg = (vram_batchopt_config_t){
        .enabled = true,
        .target_usage = 0.85,
        .safety_margin = 0.05,
        .adjustment_frequency = 100,
        .min_batch = 2,
        .max_batch = 64,
        .history_size = 50,
        .max_adjustments = 50,
        .oom_cooldown_windows = 3,
        .policy = VRAM_BATCHOPT_MODEL,
    };
}

int vram_batchopt_config_check(const vram_batchopt_config_t *cfg)
{
    const char *key;
    return vram_batchopt_config_check_key(cfg, &key);
}

/* Fails naming `name` (the YAML key) and stores it for the config reader. */
#define BAD(name, ...) (*key = (name), vram_fail(VRAM_EINVAL, name " must be " __VA_ARGS__))

int vram_batchopt_config_check_key(const vram_batchopt_config_t *c, const char **key)
{
    *key = NULL;
    if (!c) return vram_fail(VRAM_EINVAL, "batch optimizer: NULL config");
    if (!(c->target_usage > 0 && c->target_usage <= 1))
        return BAD("target_vram_usage", "in (0, 1], not %g", c->target_usage);
    if (!(c->safety_margin >= 0 && c->safety_margin < 0.5 && c->safety_margin < c->target_usage))
        return BAD("safety_margin", "in [0, 0.5) and below target_vram_usage, not %g",
                   c->safety_margin);
    if (c->adjustment_frequency < 1 || c->adjustment_frequency > 1000000)
        return BAD("adjustment_frequency", "in 1..1000000, not %d", c->adjustment_frequency);
    if (c->min_batch < 1 || c->min_batch > BO_SIZE_LIMIT)
        return BAD("min_batch_size", "in 1..%d, not %d", BO_SIZE_LIMIT, c->min_batch);
    if (c->max_batch < c->min_batch || c->max_batch > BO_SIZE_LIMIT)
        return BAD("max_batch_size", "in min_batch_size (%d)..%d, not %d", c->min_batch,
                   BO_SIZE_LIMIT, c->max_batch);
    bool lq_off = c->min_lq == 0 && c->max_lq == 0;
    if (!lq_off && (c->min_lq < 1 || c->min_lq > BO_SIZE_LIMIT))
        return BAD("min_lq_size", "in 1..%d (or both lq sizes 0), not %d", BO_SIZE_LIMIT,
                   c->min_lq);
    if (!lq_off && (c->max_lq < c->min_lq || c->max_lq > BO_SIZE_LIMIT))
        return BAD("max_lq_size", "in min_lq_size (%d)..%d, not %d", c->min_lq, BO_SIZE_LIMIT,
                   c->max_lq);
    if (c->history_size < 1 || c->history_size > 100000)
        return BAD("vram_history_size", "in 1..100000, not %d", c->history_size);
    if (c->max_adjustments < 0 || c->max_adjustments > 1000000)
        return BAD("max_adjustments", "in 0..1000000, not %d", c->max_adjustments);
    if (c->oom_cooldown_windows < 1 || c->oom_cooldown_windows > 1000)
        return BAD("oom_cooldown_windows", "in 1..1000, not %d", c->oom_cooldown_windows);
    if (c->policy != VRAM_BATCHOPT_MODEL && c->policy != VRAM_BATCHOPT_FIXED_STEP)
        return BAD("policy", "model or fixed-step, not %d", (int)c->policy);
    return 0;
}

#undef BAD

static int clamp(int v, int lo, int hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

int vram_batchopt_create(const vram_batchopt_config_t *cfg, int batch, int lq,
                         vram_batchopt_t **out)
{
    int rc = vram_batchopt_config_check(cfg);
    if (rc) return rc;
    if (!out) return vram_fail(VRAM_EINVAL, "batch optimizer: NULL out");
    vram_batchopt_t *o = calloc(1, sizeof *o);
    double *hist = calloc((size_t)cfg->history_size, sizeof *hist);
    if (!o || !hist) {
        free(o);
        free(hist);
        return vram_fail(VRAM_ENOMEM, "batch optimizer: out of memory");
    }
    o->cfg = *cfg;
    o->hist = hist;
    o->lq_on = cfg->max_lq > 0;
    o->cap_batch = cfg->max_batch;
    o->cap_lq = o->lq_on ? cfg->max_lq : 0;
    o->batch = o->reported_batch = clamp(batch, cfg->min_batch, cfg->max_batch);
    o->lq = o->reported_lq = o->lq_on ? clamp(lq, cfg->min_lq, cfg->max_lq) : 0;
    vram_bomodel_init(&o->model, o->lq_on ? cfg->max_lq : 0);
    *out = o;
    return 0;
}

void vram_batchopt_destroy(vram_batchopt_t *opt)
{
    if (!opt) return;
    free(opt->hist);
    free(opt);
}

static double aim_of(const vram_batchopt_t *o)
{
    return o->cfg.target_usage - BO_AIM_FRACTION * o->cfg.safety_margin;
}

static void start_window(vram_batchopt_t *o)
{
    o->win_peak = 0;
    o->win_sum = 0;
    o->win_sumsq = 0;
    o->win_len = 0;
}

static void log_change(vram_batchopt_t *o, int nb, int nl, double peak, vram_batchopt_reason_t why)
{
    vram_batchopt_adjustment_t *a = &o->log[o->nlog_total % VRAM_BATCHOPT_LOG];
    *a = (vram_batchopt_adjustment_t){
        .iteration = o->iteration,
        .old_batch = o->batch,
        .old_lq = o->lq,
        .new_batch = nb,
        .new_lq = nl,
        .peak_usage = peak,
        .predicted_usage =
            o->cfg.policy == VRAM_BATCHOPT_MODEL ? vram_bomodel_predict(&o->model, nb, nl) : 0,
        .reason = why,
    };
    o->nlog_total++;
    o->batch = nb;
    o->lq = nl;
    o->pending = why;
    start_window(o);
}

/* Largest v in [lo, hi] predicted under the aim, or lo - 1; predictions grow
 * with v. optimistic: by the lowest of the plausible forms, not the highest. */
static int largest_fitting(const vram_batchopt_t *o, int lo, int hi, bool vary_batch, int fixed,
                           bool optimistic)
{
    double aim = aim_of(o);
    int ok = lo - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        int b = vary_batch ? mid : fixed, l = vary_batch ? fixed : mid;
        double p = optimistic ? vram_bomodel_predict_low(&o->model, b, l)
                              : vram_bomodel_predict(&o->model, b, l);
        if (p <= aim && !vram_bomodel_dominates_failure(&o->model, b, l))
            ok = mid, lo = mid + 1;
        else
            hi = mid - 1;
    }
    return ok;
}

/* Two predicted usages closer than this are equally good, and lq decides
 * between them (lq first): the distance from the aim to the target, so the
 * choice still lands inside the band's top part. */
static double lq_preference(const vram_batchopt_t *o)
{
    double t = o->cfg.target_usage - aim_of(o);
    return t > BO_MIN_PREFERENCE ? t : BO_MIN_PREFERENCE;
}

/* The growth target: over the settings with at least the current batch and
 * any lq, the largest lq each batch allows under the aim; of those pairs, the
 * one with the highest predicted usage, except that a larger lq wins when
 * its usage is within lq_preference of the highest. lq at its cap stays there
 * unless one more sample at a slightly smaller lq comes materially closer to
 * the aim (integer batches alone may leave a whole sample's memory unused). */
static void grow_by(const vram_batchopt_t *o, bool optimistic, int *nb, int *nl)
{
    *nb = o->batch;
    *nl = o->lq;
    if (!o->lq_on || !vram_bomodel_knows_slope(&o->model)) {
        /* Without a slope the prediction is a guess: only the plain order,
         * lq to its cap, then the batch. */
        if (o->lq_on && o->lq < o->cap_lq) {
            int l = largest_fitting(o, o->lq, o->cap_lq, false, o->batch, optimistic);
            if (l >= o->lq) *nl = l;
            if (*nl < o->cap_lq) return;
        }
        int b = largest_fitting(o, o->batch, o->cap_batch, true, *nl, optimistic);
        if (b >= o->batch) *nb = b;
        return;
    }
    const vram_batchopt_config_t *c = &o->cfg;
    int cb[BO_SCAN + 2], cl[BO_SCAN + 2], n = 0;
    /* Up to b0 lq stays at its cap and usage grows with the batch: b0 is the
     * best of them. Past it, lq shrinks as the batch grows. */
    int b0 = largest_fitting(o, o->batch, o->cap_batch, true, o->cap_lq, optimistic);
    if (b0 >= o->batch) cb[n] = b0, cl[n++] = o->cap_lq;
    int b = b0 >= o->batch ? b0 + 1 : o->batch;
    for (int k = 0; k < BO_SCAN && b <= o->cap_batch; k++, b++) {
        int l = largest_fitting(o, c->min_lq, o->cap_lq, false, b, optimistic);
        if (l < c->min_lq) break; /* nothing fits at b, nor at larger batches */
        cb[n] = b, cl[n++] = l;
        if (l == c->min_lq) break; /* from here on only the batch can grow */
    }
    /* lq at its minimum: usage grows with the batch again. */
    if (n > 0 && cl[n - 1] == c->min_lq && cb[n - 1] < o->cap_batch) {
        int bt = largest_fitting(o, cb[n - 1], o->cap_batch, true, c->min_lq, optimistic);
        if (bt > cb[n - 1]) cb[n] = bt, cl[n++] = c->min_lq;
    }
    double u[BO_SCAN + 2], best = -INFINITY;
    for (int i = 0; i < n; i++) {
        u[i] = optimistic ? vram_bomodel_predict_low(&o->model, cb[i], cl[i])
                          : vram_bomodel_predict(&o->model, cb[i], cl[i]);
        if (u[i] > best) best = u[i];
    }
    for (int i = 0; i < n; i++) /* ascending batch: descending lq */
        if (u[i] >= best - lq_preference(o)) {
            *nb = cb[i];
            *nl = cl[i];
            return;
        }
}

/* The jump the forms agree on. When the cautious form forbids any growth that
 * another plausible form allows, the data cannot tell them apart: go half way
 * towards the optimistic choice, which is safe under the cautious form's
 * doubt and yields the point that decides between them. With no slope
 * learned in this epoch, one smallest step that cannot run out of memory even
 * if all memory scaled with the setting teaches the slope. */
static void model_grow(const vram_batchopt_t *o, int *nb, int *nl)
{
    double now = vram_bomodel_predict(&o->model, o->batch, o->lq);
    grow_by(o, false, nb, nl);
    if (vram_bomodel_predict(&o->model, *nb, *nl) > now) return;
    *nb = o->batch;
    *nl = o->lq;
    int ob, ol;
    grow_by(o, true, &ob, &ol);
    if (ol > o->lq)
        *nl = o->lq + (ol - o->lq + 1) / 2;
    else if (ob > o->batch)
        *nb = o->batch + (ob - o->batch + 1) / 2;
    if (*nb != o->batch || *nl != o->lq || vram_bomodel_has_slope(&o->model)) return;
    int sb = o->batch, sl = o->lq;
    if (o->lq_on && sl < o->cap_lq)
        sl++;
    else if (sb < o->cap_batch)
        sb++;
    if (vram_bomodel_scaled(&o->model, sb, sl) < 1.0 &&
        !vram_bomodel_dominates_failure(&o->model, sb, sl))
        *nb = sb, *nl = sl;
}

/* Inside the band: a jump's landing (or a shrink by whole samples) can sit
 * well below the aim. Once a slope is known (this epoch's or the last), move to the
 * growth target if the model expects it to gain more than lq_preference; the
 * latest point anchors the model, so this short move is its most accurate
 * prediction. */
static void model_refine(vram_batchopt_t *o, int *nb, int *nl)
{
    *nb = o->batch;
    *nl = o->lq;
    bool slope = vram_bomodel_has_slope(&o->model) || o->model.have_prior;
    if (!slope || o->iteration < o->refine_after) return;
    double now = vram_bomodel_predict(&o->model, o->batch, o->lq);
    int b, l;
    grow_by(o, false, &b, &l);
    /* A gain within twice the readings' own spread is not worth a move:
     * the next window's peak could not even tell it from noise. */
    double gain = vram_bomodel_predict(&o->model, b, l) - now;
    if (gain <= lq_preference(o) || gain <= 2 * o->reading_sd) return;
    *nb = b, *nl = l;
    o->refine_from = o->win_peak;
    o->refine_gain = gain;
}

/* The first window after a refinement: when it gained less than half of
 * what the model promised, the model is wrong at this scale (memory in
 * steps, a term the forms lack), or the surroundings changed under it
 * without the model noticing yet. Further small moves would be guesses, so
 * refining waits, longer at each miss (an OOM's cooldown, then doubled):
 * the wasted moves stay few, and a run whose surroundings did change is not
 * held below its target for good. */
static void check_refinement(vram_batchopt_t *o)
{
    if (o->refine_gain > 0 && o->win_peak - o->refine_from < o->refine_gain / 2) {
        if (o->refine_epoch != o->model.epoch) o->refine_backoff = 0;
        o->refine_epoch = o->model.epoch;
        o->refine_backoff = o->refine_backoff ? 2 * o->refine_backoff : o->cfg.oom_cooldown_windows;
        if (o->refine_backoff > BO_MAX_BACKOFF) o->refine_backoff = BO_MAX_BACKOFF;
        o->refine_after = o->iteration + (int64_t)o->refine_backoff * o->cfg.adjustment_frequency;
    }
    o->refine_gain = 0;
}

static void model_shrink(const vram_batchopt_t *o, int *nb, int *nl)
{
    const vram_batchopt_config_t *c = &o->cfg;
    *nl = o->lq;
    int b = largest_fitting(o, c->min_batch, o->batch, true, o->lq, false);
    *nb = b >= c->min_batch ? b : c->min_batch;
    if (b >= c->min_batch || !o->lq_on) return;
    int l = largest_fitting(o, c->min_lq, o->lq, false, c->min_batch, false);
    *nl = l >= c->min_lq ? l : c->min_lq;
}

static int step_of(int lo, int hi)
{
    int s = (hi - lo + BO_STEPS - 1) / BO_STEPS;
    return s < 1 ? 1 : s;
}

static void fixed_grow(const vram_batchopt_t *o, int *nb, int *nl)
{
    const vram_batchopt_config_t *c = &o->cfg;
    *nb = o->batch;
    *nl = o->lq;
    if (o->lq_on && o->lq < o->cap_lq)
        *nl = clamp(o->lq + step_of(c->min_lq, c->max_lq), o->lq, o->cap_lq);
    else if (o->batch < o->cap_batch)
        *nb = clamp(o->batch + step_of(c->min_batch, c->max_batch), o->batch, o->cap_batch);
}

static void fixed_shrink(const vram_batchopt_t *o, int *nb, int *nl)
{
    const vram_batchopt_config_t *c = &o->cfg;
    *nb = o->batch;
    *nl = o->lq;
    if (o->batch > c->min_batch)
        *nb = clamp(o->batch - step_of(c->min_batch, c->max_batch), c->min_batch, o->batch);
    else if (o->lq_on && o->lq > c->min_lq)
        *nl = clamp(o->lq - step_of(c->min_lq, c->max_lq), c->min_lq, o->lq);
}

static bool may_adjust(const vram_batchopt_t *o)
{
    return o->cfg.max_adjustments == 0 || o->adjustments < o->cfg.max_adjustments;
}

/* A window peak this far from the last one at the same setting means the
 * surroundings changed, not noise: half the dead band, at least 1 %. */
static double shift_tolerance(const vram_batchopt_config_t *c)
{
    return c->safety_margin / 2 > 0.01 ? c->safety_margin / 2 : 0.01;
}

/* End of a window: decide from its peak. */
static void decide(vram_batchopt_t *o)
{
    const vram_batchopt_config_t *c = &o->cfg;
    double peak = o->win_peak;
    bool model = c->policy == VRAM_BATCHOPT_MODEL;
    if (model) {
        check_refinement(o);
        double n = o->win_len, mean = o->win_sum / n;
        double var = n > 1 ? (o->win_sumsq - n * mean * mean) / (n - 1) : 0;
        double se = var > 0 ? sqrt(var / n) : 0;
        o->reading_sd = var > 0 ? sqrt(var) : 0;
        vram_bomodel_add(&o->model, o->batch, o->lq, peak, mean, se, shift_tolerance(c));
    }
    bool over = peak > c->target_usage;
    bool under = peak < c->target_usage - c->safety_margin;
    if (model && over)
        vram_bomodel_over(&o->model, o->batch, o->lq, peak);
    else if (model)
        vram_bomodel_fine(&o->model, o->batch, o->lq);
    int nb = o->batch, nl = o->lq;
    vram_batchopt_reason_t why = VRAM_BATCHOPT_NONE;
    if (may_adjust(o) && over) {
        why = VRAM_BATCHOPT_SHRINK;
        (model ? model_shrink : fixed_shrink)(o, &nb, &nl);
    } else if (may_adjust(o) && o->iteration >= o->grow_after && (under || model)) {
        why = VRAM_BATCHOPT_GROW;
        if (!model)
            fixed_grow(o, &nb, &nl);
        else if (under)
            model_grow(o, &nb, &nl);
        else
            model_refine(o, &nb, &nl);
    }
    if (nb == o->batch && nl == o->lq) {
        start_window(o);
        return;
    }
    o->adjustments++;
    log_change(o, nb, nl, peak, why);
}

static void report(vram_batchopt_t *o, vram_batchopt_decision_t *out)
{
    vram_batchopt_decision_t d = {
        .batch_delta = o->batch - o->reported_batch,
        .lq_delta = o->lq - o->reported_lq,
        .batch = o->batch,
        .lq = o->lq,
        .reason = o->batch != o->reported_batch || o->lq != o->reported_lq ? o->pending
                                                                           : VRAM_BATCHOPT_NONE,
    };
    o->reported_batch = o->batch;
    o->reported_lq = o->lq;
    if (out) *out = d;
}

int vram_batchopt_update(vram_batchopt_t *o, double usage, vram_batchopt_decision_t *out)
{
    if (!o) return vram_fail(VRAM_EINVAL, "batch optimizer: NULL handle");
    if (!isfinite(usage) || usage < 0)
        return vram_fail(VRAM_EINVAL,
                         "batch optimizer: usage must be a finite fraction >= 0, not %g", usage);
    o->iteration++;
    o->last = usage;
    if (usage > o->peak) o->peak = usage;
    if (o->hist_len == o->cfg.history_size)
        o->hist_sum -= o->hist[o->hist_pos];
    else
        o->hist_len++;
    o->hist[o->hist_pos] = usage;
    o->hist_sum += usage;
    o->hist_pos = (o->hist_pos + 1) % o->cfg.history_size;
    if (o->cfg.enabled) {
        if (usage > o->win_peak) o->win_peak = usage;
        o->win_sum += usage;
        o->win_sumsq += usage * usage;
        if (++o->win_len >= o->cfg.adjustment_frequency) decide(o);
    }
    report(o, out);
    return 0;
}

int vram_batchopt_set_current(vram_batchopt_t *o, int batch, int lq)
{
    if (!o) return vram_fail(VRAM_EINVAL, "batch optimizer: NULL handle");
    const vram_batchopt_config_t *c = &o->cfg;
    o->batch = o->reported_batch = clamp(batch, c->min_batch, c->max_batch);
    o->lq = o->reported_lq = o->lq_on ? clamp(lq, c->min_lq, c->max_lq) : 0;
    o->refine_gain = 0;
    start_window(o);
    return 0;
}

int vram_batchopt_set_target(vram_batchopt_t *o, int batch, int lq)
{
    if (!o) return vram_fail(VRAM_EINVAL, "batch optimizer: NULL handle");
    const vram_batchopt_config_t *c = &o->cfg;
    o->cap_batch = clamp(batch, c->min_batch, c->max_batch);
    o->cap_lq = o->lq_on ? clamp(lq, c->min_lq, c->max_lq) : 0;
    int nb = o->batch < o->cap_batch ? o->batch : o->cap_batch;
    int nl = o->lq < o->cap_lq ? o->lq : o->cap_lq;
    if (nb != o->batch || nl != o->lq) log_change(o, nb, nl, o->last, VRAM_BATCHOPT_EXTERNAL);
    return 0;
}

int vram_batchopt_on_oom(vram_batchopt_t *o, int *new_batch, int *new_lq)
{
    if (!o) return vram_fail(VRAM_EINVAL, "batch optimizer: NULL handle");
    const vram_batchopt_config_t *c = &o->cfg;
    o->ooms++;
    o->refine_gain = 0;
    int rc = 0;
    /* Both settings drop at least this far whatever the model says: the
     * failure proves the model (or the surroundings) wrong. */
    int nb = clamp(o->batch / 2, c->min_batch, o->batch);
    int nl = o->lq_on ? clamp(o->lq - o->lq / 4, c->min_lq, o->lq) : 0;
    if (c->policy == VRAM_BATCHOPT_MODEL) vram_bomodel_failed(&o->model, o->batch, o->lq);
    if (c->policy == VRAM_BATCHOPT_MODEL && o->model.fitted) {
        vram_batchopt_t probe = *o; /* shrink from the conservative drop */
        probe.batch = nb;
        probe.lq = nl;
        if (vram_bomodel_predict(&o->model, nb, nl) > aim_of(o)) model_shrink(&probe, &nb, &nl);
        vram_bomodel_new_epoch(&o->model);
    }
    if (nb == o->batch && nl == o->lq)
        rc = vram_fail(VRAM_ESTATE,
                       "batch optimizer: out of memory at the smallest settings "
                       "(batch %d, lq %d)",
                       nb, nl);
    else
        log_change(o, nb, nl, o->last, VRAM_BATCHOPT_OOM);
    o->reported_batch = o->batch;
    o->reported_lq = o->lq;
    o->grow_after = o->iteration + (int64_t)c->oom_cooldown_windows * c->adjustment_frequency;
    if (new_batch) *new_batch = o->batch;
    if (new_lq) *new_lq = o->lq;
    return rc;
}

int vram_batchopt_stats(const vram_batchopt_t *o, vram_batchopt_stats_t *out)
{
    if (!o || !out) return vram_fail(VRAM_EINVAL, "batch optimizer: NULL argument");
    memset(out, 0, sizeof *out);
    out->peak_usage = o->peak;
    out->average_usage = o->hist_len ? o->hist_sum / o->hist_len : 0;
    out->current_usage = o->last;
    out->batch = o->batch;
    out->lq = o->lq;
    out->iterations = o->iteration;
    out->adjustments = o->adjustments;
    out->oom_recoveries = o->ooms;
    out->model_quadratic = vram_bomodel_quadratic(&o->model);
    int f = vram_bomodel_best_form(&o->model);
    out->model_a = f >= 0 ? o->model.a[f] : 0;
    out->model_b = f >= 0 ? o->model.b[f] : 0;
    int64_t first = o->nlog_total > VRAM_BATCHOPT_LOG ? o->nlog_total - VRAM_BATCHOPT_LOG : 0;
    for (int64_t i = first; i < o->nlog_total; i++)
        out->log[out->nlog++] = o->log[i % VRAM_BATCHOPT_LOG];
    return 0;
}

const char *vram_batchopt_reason_name(vram_batchopt_reason_t r)
{
    static const char *const names[] = {"none", "grow", "shrink", "oom", "external"};
    return (unsigned)r < sizeof names / sizeof names[0] ? names[r] : "?";
}
