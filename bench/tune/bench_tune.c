/* bench_tune: the dynamic batch/lq optimizer against the seed's fixed-step
 * policy in a simulated training run. Each scenario is a memory model
 * (usage = a + batch * (c0 + k1 * u + k1.5 * u^1.5 + k2 * u^2), u = lq/L,
 * L = max_lq, optionally rounded like PyTorch's allocator), Gaussian noise on
 * every reading, and a second job that takes part of the device half way
 * through (at once or growing over some windows). An iteration whose usage
 * exceeds the device is an OOM: on_oom() gives the settings to continue with.
 *
 * Figures per policy: adjustments in each phase (before and after the second
 * job; the count is complete once the run has settled), OOMs, the share of
 * iterations above target, how far the settled window peaks stay below
 * target (percent of target) at the end of each phase, and the same for the
 * best setting reachable with whole batch and lq (searched over the whole
 * grid), so that a target no setting can reach is measured fairly.
 *
 *   build/bench/tune/bench_tune [seeds]     (default 7 seeds per scenario)
 *   build/bench/tune/bench_tune --trace N [SEED]   (the adjustments of scenario N) */
#include "vram.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *name;
    /* usage at (batch, lq): a + batch * (c0 + k1 * u + k15 * u^1.5 + k2 * u^2), u = lq / max_lq */
    double a, c0, k1, k15, k2;
    bool lq_on;
    double other;     /* fraction the second job takes */
    int rounding;     /* > 0: the activations are 16 tensors, each rounded up like PyTorch's
                       * roundup_power2_divisions with this many divisions */
    double noise;     /* sd of a reading; 0: NOISE_SD */
    int ramp_windows; /* > 0: the second job grows to `other` over this many windows */
    bool unseen;      /* added after the controller was tuned (generalization check) */
} scenario_t;

static const scenario_t scenarios[] = {
    {"linear in lq", 0.20, 0, 0.025, 0, 0, true, 0.20, 0, 0, 0, false},
    {"quadratic in lq", 0.15, 0, 0, 0, 0.030, true, 0.20, 0, 0, 0, false},
    {"activation-heavy", 0.05, 0, 0.050, 0, 0, true, 0.25, 0, 0, 0, false},
    {"weights-heavy", 0.55, 0, 0.006, 0, 0, true, 0.15, 0, 0, 0, false},
    {"mixed lq + lq^2", 0.20, 0, 0.012, 0, 0.012, true, 0.20, 0, 0, 0, false},
    {"batch only", 0.30, 0, 0.020, 0, 0, false, 0.20, 0, 0, 0, false},
    {"room to spare", 0.10, 0, 0.005, 0, 0, true, 0.20, 0, 0, 0, false},
    /* never used while developing the controller */
    {"lq^1.5 (attention)", 0.12, 0, 0, 0.037, 0, true, 0.20, 0, 0, 0, true},
    {"per-sample + lq", 0.10, 0.012, 0.022, 0, 0, true, 0.22, 0, 0, 0, true},
    {"allocator rounding", 0.18, 0, 0.028, 0, 0, true, 0.20, 4, 0, 0, true},
    {"noisy, job ramps up", 0.20, 0, 0.018, 0, 0.008, true, 0.25, 0, 0.012, 8, true},
};

#define WINDOWS_PER_PHASE 60
#define NOISE_SD          0.004
#define WINDOW            100 /* iterations per window (the default adjustment_frequency) */

typedef struct {
    uint64_t s;
} rng_t;

static double uniform(rng_t *r)
{
    r->s ^= r->s >> 12, r->s ^= r->s << 25, r->s ^= r->s >> 27;
    return ((double)((r->s * 2685821657736338717ull) >> 11) + 0.5) / 9007199254740992.0;
}

static double gaussian(rng_t *r)
{
    return sqrt(-2 * log(uniform(r))) * cos(2 * M_PI * uniform(r));
}

/* PyTorch's roundup_power2_divisions: a size between two powers of two is
 * rounded up to the next of `div` equal steps between them. */
static double round_up_pow2_div(double size, int div)
{
    if (size <= 0) return 0;
    double p = pow(2, floor(log2(size))), step = p / div;
    return ceil(size / step - 1e-9) * step;
}

/* Noise-free usage at a setting (without the second job). */
static double usage_of(const scenario_t *sc, int batch, int lq, int max_lq)
{
    double u = sc->lq_on ? (double)lq / max_lq : 1.0;
    double act = batch * (sc->c0 + sc->k1 * u + sc->k15 * pow(u, 1.5) + sc->k2 * u * u);
    if (sc->rounding) act = 16 * round_up_pow2_div(act / 16, sc->rounding);
    return sc->a + act;
}

static double noise_of(const scenario_t *sc)
{
    return sc->noise > 0 ? sc->noise : NOISE_SD;
}

/* What the second job holds at iteration i: nothing in the first phase. */
static double second_job(const scenario_t *sc, int i, int per_phase, int window)
{
    if (i < per_phase) return 0;
    if (sc->ramp_windows <= 0) return sc->other;
    double f = (double)((i - per_phase) / window + 1) / sc->ramp_windows;
    return sc->other * (f < 1 ? f : 1);
}

/* Expected peak of a window of WINDOW readings in units of the noise's sd
 * (the mean of the largest of WINDOW standard normals), by simulation. */
static double expected_window_max(void)
{
    static double m;
    if (m > 0) return m;
    rng_t r = {0x2545f4914f6cdd1dull};
    int trials = 20000;
    double sum = 0;
    for (int t = 0; t < trials; t++) {
        double mx = -INFINITY;
        for (int i = 0; i < WINDOW; i++) {
            double g = gaussian(&r);
            if (g > mx) mx = g;
        }
        sum += mx;
    }
    return m = sum / trials;
}

/* The best any controller could settle at: the highest expected window peak
 * over every (batch, lq) in the limits that stays at or under target. */
static double best_reachable(const scenario_t *sc, const vram_batchopt_config_t *c, double other)
{
    double best = 0, excess = noise_of(sc) * expected_window_max();
    int lo = sc->lq_on ? c->min_lq : 0, hi = sc->lq_on ? c->max_lq : 0;
    for (int b = c->min_batch; b <= c->max_batch; b++)
        for (int l = lo; l <= hi; l++) {
            double p = usage_of(sc, b, l, c->max_lq) + other + excess;
            if (p <= c->target_usage && p > best) best = p;
        }
    return best;
}

typedef struct {
    int adjustments[2]; /* per phase */
    int ooms, ooms_after_first;
    double over_share;   /* iterations with usage above target */
    double shortfall[2]; /* (target - settled peak) / target, percent */
    double best[2];      /* (target - best reachable peak) / target, percent */
    double gap[2];       /* (best reachable - settled peak) / target, percent */
} result_t;

#define SETTLED_WINDOWS 10 /* the settled peak: mean of the last window peaks of a phase */

static result_t run(const scenario_t *sc, vram_batchopt_policy_t policy, uint64_t seed, bool trace)
{
    vram_batchopt_config_t c;
    vram_batchopt_config_init(&c);
    c.policy = policy;
    c.max_adjustments = 0;
    c.adjustment_frequency = WINDOW;
    if (sc->lq_on) c.min_lq = 32, c.max_lq = 256;
    int batch = 8, lq = sc->lq_on ? 64 : 0;
    vram_batchopt_t *o;
    if (vram_batchopt_create(&c, batch, lq, &o)) {
        fprintf(stderr, "bench_tune: %s\n", vram_last_error());
        exit(1);
    }
    rng_t r = {seed * 0x9e3779b97f4a7c15ull + 1};
    result_t res = {0};
    int per_phase = WINDOWS_PER_PHASE * WINDOW, over = 0;
    double settled[2] = {0, 0}, wpeak = 0;
    for (int i = 0; i < 2 * per_phase; i++) {
        int phase = i >= per_phase, in_phase = i % per_phase;
        double u = usage_of(sc, batch, lq, c.max_lq) + second_job(sc, i, per_phase, WINDOW) +
                   noise_of(sc) * gaussian(&r);
        if (u > c.target_usage) over++;
        /* window peaks by the bench's own clock (adjustments restart the
         * controller's windows; a few iterations of the old settings may
         * count, which only matters when the run is still moving) */
        if (u > wpeak) wpeak = u;
        if ((in_phase + 1) % WINDOW == 0) {
            if (in_phase >= per_phase - SETTLED_WINDOWS * WINDOW)
                settled[phase] += wpeak / SETTLED_WINDOWS;
            wpeak = 0;
        }
        if (u > 1.0) {
            res.ooms++;
            if (res.ooms > 1) res.ooms_after_first++;
            vram_batchopt_on_oom(o, &batch, &lq);
            res.adjustments[phase]++;
            continue;
        }
        vram_batchopt_decision_t d;
        vram_batchopt_update(o, u, &d);
        if (d.batch_delta || d.lq_delta) res.adjustments[phase]++;
        batch = d.batch;
        lq = d.lq;
    }
    res.over_share = 100.0 * over / (2 * per_phase);
    if (trace) {
        vram_batchopt_stats_t st;
        vram_batchopt_stats(o, &st);
        for (int k = 0; k < st.nlog; k++) {
            const vram_batchopt_adjustment_t *a = &st.log[k];
            printf("  %6lld %-6s batch %2d lq %3d -> batch %2d lq %3d  peak %.3f predicted %.3f "
                   "actual %.3f\n",
                   (long long)a->iteration, vram_batchopt_reason_name(a->reason), a->old_batch,
                   a->old_lq, a->new_batch, a->new_lq, a->peak_usage, a->predicted_usage,
                   usage_of(sc, a->new_batch, a->new_lq, c.max_lq) +
                       second_job(sc, (int)a->iteration, per_phase, WINDOW));
        }
    }
    for (int p = 0; p < 2; p++) {
        double best = best_reachable(sc, &c, p ? sc->other : 0);
        res.shortfall[p] = 100 * (c.target_usage - settled[p]) / c.target_usage;
        res.best[p] = 100 * (c.target_usage - best) / c.target_usage;
        res.gap[p] = 100 * (best - settled[p]) / c.target_usage;
    }
    vram_batchopt_destroy(o);
    return res;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

#define NSCEN   (sizeof scenarios / sizeof scenarios[0])
#define NFIELDS 9
#define MAXSEED 1000

int main(int argc, char **argv)
{
    if (argc > 2 && !strcmp(argv[1], "--trace")) {
        size_t n = (size_t)atoi(argv[2]);
        if (n >= NSCEN) return 2;
        uint64_t seed = argc > 3 ? (uint64_t)atoi(argv[3]) : 1;
        for (int p = 0; p < 2; p++) {
            printf("%s, %s:\n", scenarios[n].name, p ? "fixed-step" : "model");
            run(&scenarios[n], p ? VRAM_BATCHOPT_FIXED_STEP : VRAM_BATCHOPT_MODEL, seed, true);
        }
        return 0;
    }
    int seeds = argc > 1 ? atoi(argv[1]) : 7;
    if (seeds < 1 || seeds > MAXSEED) {
        fprintf(stderr, "usage: bench_tune [seeds 1..%d] | --trace SCENARIO [SEED]\n", MAXSEED);
        return 2;
    }
    printf("bench_tune: %d seeds per scenario, %d windows of %d iterations per phase, noise sd "
           "%.3f unless noted, target 0.85, margin 0.05, start batch 8 lq 64 (2..64, 32..256)\n",
           seeds, WINDOWS_PER_PHASE, WINDOW, NOISE_SD);
    printf("medians over seeds [worst]; adj = adjustments incl. OOM drops; short = %% of target "
           "the settled window peak lies below target; best = the same for the best reachable "
           "setting (integer batch and lq); gap = short - best; * = scenario added after the "
           "controller was tuned\n");
    printf("%-21s %-10s %9s %9s %4s %9s %6s %5s %12s %6s %5s %12s\n", "scenario", "policy",
           "adj bef.", "adj aft.", "OOM", "OOM>1st", "%over", "best", "short bef.", "gap", "best",
           "short aft.");
    printf("%-21s %-10s %9s %9s %4s %9s %6s %5s %12s %6s %5s %12s\n", "", "", "", "", "", "", "",
           "bef.", "", "bef.", "aft.", "");
    static double v[NFIELDS][MAXSEED];
    for (size_t s = 0; s < NSCEN; s++)
        for (int p = 0; p < 2; p++) {
            for (int k = 0; k < seeds; k++) {
                result_t r = run(&scenarios[s], p ? VRAM_BATCHOPT_FIXED_STEP : VRAM_BATCHOPT_MODEL,
                                 (uint64_t)k + 1, false);
                double row[NFIELDS] = {r.adjustments[0],   r.adjustments[1], r.ooms,
                                       r.ooms_after_first, r.over_share,     r.shortfall[0],
                                       r.shortfall[1],     r.gap[0],         r.gap[1]};
                for (int j = 0; j < NFIELDS; j++)
                    v[j][k] = row[j];
                if (k == 0) { /* the same for every seed */
                    v[NFIELDS - 1][MAXSEED - 1] = r.best[0];
                    v[NFIELDS - 2][MAXSEED - 1] = r.best[1];
                }
            }
            double bestb = v[NFIELDS - 1][MAXSEED - 1], besta = v[NFIELDS - 2][MAXSEED - 1];
            double med[NFIELDS], mx[NFIELDS];
            for (int j = 0; j < NFIELDS; j++) {
                mx[j] = -INFINITY;
                for (int k = 0; k < seeds; k++)
                    mx[j] = v[j][k] > mx[j] ? v[j][k] : mx[j];
                med[j] = median(v[j], seeds);
            }
            char name[32];
            snprintf(name, sizeof name, "%s%s", scenarios[s].name, scenarios[s].unseen ? " *" : "");
            printf("%-21s %-10s %3.0f [%3.0f] %3.0f [%3.0f] %4.0f %3.0f [%3.0f] %6.2f %5.1f "
                   "%5.1f [%4.1f] %6.1f %5.1f %5.1f [%4.1f] gap aft. %4.1f [%4.1f]\n",
                   name, p ? "fixed-step" : "model", med[0], mx[0], med[1], mx[1], med[2], med[3],
                   mx[3], med[4], bestb, med[5], mx[5], med[7], besta, med[6], mx[6], med[8],
                   mx[8]);
        }
    return 0;
}
