/* bench_tune: the dynamic batch/lq optimizer against the seed's fixed-step
 * policy in a simulated training run. Each scenario is a memory model
 * (usage = a + batch * (k1 * lq/L + k2 * (lq/L)^2), L = max_lq), Gaussian
 * noise on every reading, and a second job that takes part of the device
 * half way through. An iteration whose usage exceeds the device is an OOM:
 * on_oom() gives the settings to continue with.
 *
 * Figures per policy: adjustments in each phase (before and after the second
 * job; the count is complete once the run has settled), OOMs, the share of
 * iterations above target, and how far the settled window peaks stay below
 * target (percent of target) at the end of each phase.
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
    double a, k1, k2; /* usage at (batch, lq): a + batch * (k1 * u + k2 * u^2), u = lq / max_lq */
    bool lq_on;
    double other; /* fraction the second job takes */
} scenario_t;

static const scenario_t scenarios[] = {
    {"linear in lq", 0.20, 0.025, 0, true, 0.20},
    {"quadratic in lq", 0.15, 0, 0.030, true, 0.20},
    {"activation-heavy", 0.05, 0.050, 0, true, 0.25},
    {"weights-heavy", 0.55, 0.006, 0, true, 0.15},
    {"mixed lq + lq^2", 0.20, 0.012, 0.012, true, 0.20},
    {"batch only", 0.30, 0.020, 0, false, 0.20},
    {"room to spare", 0.10, 0.005, 0, true, 0.20},
};

#define WINDOWS_PER_PHASE 60
#define NOISE_SD          0.004

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

typedef struct {
    int adjustments[2]; /* per phase */
    int ooms, ooms_after_first;
    double over_share;   /* iterations with usage above target */
    double shortfall[2]; /* (target - settled peak) / target, percent */
} result_t;

static double usage_of(const scenario_t *sc, int batch, int lq, int max_lq)
{
    double u = sc->lq_on ? (double)lq / max_lq : 1.0;
    return sc->a + batch * (sc->k1 * u + sc->k2 * u * u);
}

static result_t run(const scenario_t *sc, vram_batchopt_policy_t policy, uint64_t seed, bool trace)
{
    vram_batchopt_config_t c;
    vram_batchopt_config_init(&c);
    c.policy = policy;
    c.max_adjustments = 0;
    if (sc->lq_on) c.min_lq = 32, c.max_lq = 256;
    int batch = 8, lq = sc->lq_on ? 64 : 0;
    vram_batchopt_t *o;
    if (vram_batchopt_create(&c, batch, lq, &o)) {
        fprintf(stderr, "bench_tune: %s\n", vram_last_error());
        exit(1);
    }
    rng_t r = {seed * 0x9e3779b97f4a7c15ull + 1};
    result_t res = {0};
    int per_phase = WINDOWS_PER_PHASE * c.adjustment_frequency, over = 0;
    double peaks[2] = {0, 0};
    int npeaks[2] = {0, 0};
    for (int i = 0; i < 2 * per_phase; i++) {
        int phase = i >= per_phase;
        double u =
            usage_of(sc, batch, lq, c.max_lq) + (phase ? sc->other : 0) + NOISE_SD * gaussian(&r);
        if (u > c.target_usage) over++;
        /* settled peak: the last 10 windows of the phase */
        if (i % per_phase >= per_phase - 10 * c.adjustment_frequency) {
            int w = (i % per_phase) / c.adjustment_frequency;
            static double wpeak;
            static int wcur = -1;
            if (w != wcur) {
                if (wcur >= 0 && npeaks[phase] < 10 && i % per_phase)
                    peaks[phase] += wpeak, npeaks[phase]++;
                wcur = w, wpeak = 0;
            }
            if (u > wpeak) wpeak = u;
            if ((i + 1) % per_phase == 0) peaks[phase] += wpeak, npeaks[phase]++, wcur = -1;
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
                       (a->iteration >= per_phase ? sc->other : 0));
        }
    }
    for (int p = 0; p < 2; p++)
        res.shortfall[p] = 100 * (c.target_usage - peaks[p] / npeaks[p]) / c.target_usage;
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

int main(int argc, char **argv)
{
    if (argc > 2 && !strcmp(argv[1], "--trace")) {
        size_t n = (size_t)atoi(argv[2]);
        if (n >= sizeof scenarios / sizeof scenarios[0]) return 2;
        uint64_t seed = argc > 3 ? (uint64_t)atoi(argv[3]) : 1;
        for (int p = 0; p < 2; p++) {
            printf("%s, %s:\n", scenarios[n].name, p ? "fixed-step" : "model");
            run(&scenarios[n], p ? VRAM_BATCHOPT_FIXED_STEP : VRAM_BATCHOPT_MODEL, seed, true);
        }
        return 0;
    }
    int seeds = argc > 1 ? atoi(argv[1]) : 7;
    if (seeds < 1 || seeds > 1000) {
        fprintf(stderr, "usage: bench_tune [seeds 1..1000]\n");
        return 2;
    }
    printf("bench_tune: %d seeds per scenario, %d windows of 100 iterations per phase, noise sd "
           "%.3f, target 0.85, margin 0.05, start batch 8 lq 64 (2..64, 32..256)\n",
           seeds, WINDOWS_PER_PHASE, NOISE_SD);
    printf("medians over seeds (max in brackets); adj = adjustments incl. OOM drops; short = %% "
           "below target when settled\n");
    printf("step = what one more sample adds at the largest lq, %% of target: a settled peak can "
           "sit up to one step below the aim (0.84)\n");
    printf("%-18s %5s %-10s %11s %11s %6s %11s %8s %12s %12s\n", "scenario", "step", "policy",
           "adj before", "adj after", "OOMs", "OOMs>first", "%over", "short before", "short after");
    for (size_t s = 0; s < sizeof scenarios / sizeof scenarios[0]; s++)
        for (int p = 0; p < 2; p++) {
            double v[7][1000];
            for (int k = 0; k < seeds; k++) {
                result_t r = run(&scenarios[s], p ? VRAM_BATCHOPT_FIXED_STEP : VRAM_BATCHOPT_MODEL,
                                 (uint64_t)k + 1, false);
                double row[7] = {r.adjustments[0],   r.adjustments[1], r.ooms,
                                 r.ooms_after_first, r.over_share,     r.shortfall[0],
                                 r.shortfall[1]};
                for (int j = 0; j < 7; j++)
                    v[j][k] = row[j];
            }
            double med[7], mx[7];
            for (int j = 0; j < 7; j++) {
                mx[j] = -INFINITY;
                for (int k = 0; k < seeds; k++)
                    mx[j] = v[j][k] > mx[j] ? v[j][k] : mx[j];
                med[j] = median(v[j], seeds);
            }
            printf("%-18s %5.1f %-10s %5.0f [%3.0f] %5.0f [%3.0f] %6.0f %5.0f [%3.0f] %8.2f %6.1f "
                   "[%4.1f] "
                   "%6.1f [%4.1f]\n",
                   scenarios[s].name, 100 * (scenarios[s].k1 + scenarios[s].k2) / 0.85,
                   p ? "fixed-step" : "model", med[0], mx[0], med[1], mx[1], med[2], med[3], mx[3],
                   med[4], med[5], mx[5], med[6], mx[6]);
        }
    return 0;
}
