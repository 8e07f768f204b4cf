/* The dynamic batch-size optimizer: growth order (lq first), shrink order
 * (batch first), cooldowns, OOM drops, limits, stats, and randomized runs
 * against simple memory models checking its invariants. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "vram.h"

/* A memory model: usage = base + other + batch * (per_sample + k * g(lq)) +
 * noise in [0, noise). */
typedef struct {
    double base, other, k, noise;
    double per_sample; /* memory per sample that lq does not change */
    bool quadratic;
    int max_lq; /* normalizes lq; 0: batch only */
    uint64_t rng;
} mem_model_t;

static double uniform(uint64_t *s) /* xorshift64*, [0, 1) */
{
    *s ^= *s >> 12, *s ^= *s << 25, *s ^= *s >> 27;
    return (double)((*s * 2685821657736338717ull) >> 11) / 9007199254740992.0;
}

static double usage_of(mem_model_t *m, int batch, int lq)
{
    double g = 1;
    if (m->max_lq) {
        g = (double)lq / m->max_lq;
        if (m->quadratic) g *= g;
    }
    return m->base + m->other + batch * (m->per_sample + m->k * g) + m->noise * uniform(&m->rng);
}

static vram_batchopt_config_t lq_config(void)
{
    vram_batchopt_config_t c;
    vram_batchopt_config_init(&c);
    c.min_lq = 32;
    c.max_lq = 256;
    return c;
}

/* Runs `iters` iterations, applying decisions; returns the adjustments. */
static int run(vram_batchopt_t *o, mem_model_t *m, int iters, int *batch, int *lq)
{
    int changes = 0;
    for (int i = 0; i < iters; i++) {
        vram_batchopt_decision_t d;
        assert_int_equal(vram_batchopt_update(o, usage_of(m, *batch, *lq), &d), 0);
        if (d.batch_delta || d.lq_delta) changes++;
        *batch += d.batch_delta;
        *lq += d.lq_delta;
        assert_int_equal(*batch, d.batch);
        assert_int_equal(*lq, d.lq);
    }
    return changes;
}

/* A controller with lq_config() started at (*batch, *lq) and run against m
 * for iters iterations; *s gets its final stats. Returns the adjustments. */
static int run_lq(mem_model_t *m, int iters, int *batch, int *lq, vram_batchopt_stats_t *s)
{
    vram_batchopt_config_t c = lq_config();
    vram_batchopt_t *o;
    assert_int_equal(vram_batchopt_create(&c, *batch, *lq, &o), 0);
    int changes = run(o, m, iters, batch, lq);
    assert_int_equal(vram_batchopt_stats(o, s), 0);
    vram_batchopt_destroy(o);
    return changes;
}

static void grows_lq_first_then_batch(void **state)
{
    (void)state;
    vram_batchopt_config_t c = lq_config();
    int batch = 4, lq = 64;
    mem_model_t m = {.base = 0.2, .k = 0.02, .max_lq = 256}; /* lq 256 at batch 4: 0.28 */
    vram_batchopt_stats_t s;
    int changes = run_lq(&m, 2000, &batch, &lq, &s);
    /* The first growth raises lq, not the batch; lq reaches its maximum
     * before the batch grows. */
    assert_true(s.nlog >= 1);
    assert_int_equal(s.log[0].reason, VRAM_BATCHOPT_GROW);
    assert_int_equal(s.log[0].new_batch, 4);
    assert_true(s.log[0].new_lq > 64);
    for (int i = 0; i < s.nlog; i++)
        if (s.log[i].new_batch > s.log[i].old_batch) assert_int_equal(s.log[i].new_lq, 256);
    assert_int_equal(lq, 256);
    double u = m.base + m.k * batch;
    assert_true(u <= c.target_usage);
    assert_true(u >= c.target_usage - c.safety_margin);
    assert_true(changes <= 3);
    assert_int_equal(s.adjustments, changes);
}

/* One sample at lq 256 costs 5 % of the device: lq at its cap then the
 * batch would stop at 15 x 256 = 0.80, a whole sample below the aim (0.84).
 * The grid pick trades a little lq for the 16th sample instead. */
static void trades_lq_for_a_sample(void **state)
{
    (void)state;
    int batch = 8, lq = 64;
    mem_model_t m = {.base = 0.05, .k = 0.05, .max_lq = 256, .noise = 0.002, .rng = 7};
    vram_batchopt_stats_t s;
    int changes = run_lq(&m, 3000, &batch, &lq, &s);
    m.noise = 0;
    double u = usage_of(&m, batch, lq);
    assert_true(u <= 0.84 && u >= 0.83);
    assert_int_equal(batch, 16);
    assert_true(lq >= 240 && lq < 256);
    assert_true(changes <= 3);
    for (int i = 0; i < s.nlog; i++) {
        assert_int_equal(s.log[i].reason, VRAM_BATCHOPT_GROW);
        assert_true(s.log[i].new_batch >= s.log[i].old_batch);
    }
}

static void shrinks_batch_first(void **state)
{
    (void)state;
    vram_batchopt_config_t c = lq_config();
    int batch = 64, lq = 200;
    mem_model_t m = {.base = 0.3, .k = 0.016, .max_lq = 256, .quadratic = true}; /* 0.925 */
    vram_batchopt_stats_t s;
    int changes = run_lq(&m, 3000, &batch, &lq, &s);
    assert_int_equal(s.log[0].reason, VRAM_BATCHOPT_SHRINK);
    assert_int_equal(s.log[0].new_lq, 200); /* the batch went first */
    assert_true(s.log[0].new_batch < 64);
    double u = usage_of(&m, batch, lq);
    assert_true(u <= c.target_usage && u >= c.target_usage - c.safety_margin);
    assert_true(changes <= 4);
}

static void windows_and_cooldown(void **state)
{
    (void)state;
    vram_batchopt_config_t c;
    vram_batchopt_config_init(&c);
    c.adjustment_frequency = 10;
    vram_batchopt_t *o;
    assert_int_equal(vram_batchopt_create(&c, 8, 0, &o), 0);
    vram_batchopt_decision_t d;
    /* One high reading inside a window: nothing until the window ends, then
     * the window's peak (not its last reading) decides. */
    for (int i = 0; i < 9; i++) {
        assert_int_equal(vram_batchopt_update(o, i == 3 ? 0.95 : 0.5, &d), 0);
        assert_int_equal(d.batch_delta, 0);
        assert_int_equal(d.reason, VRAM_BATCHOPT_NONE);
    }
    assert_int_equal(vram_batchopt_update(o, 0.5, &d), 0);
    assert_true(d.batch_delta < 0);
    assert_int_equal(d.reason, VRAM_BATCHOPT_SHRINK);
    /* A full window at the new setting before the next decision. */
    for (int i = 0; i < 9; i++) {
        assert_int_equal(vram_batchopt_update(o, 0.99, &d), 0);
        assert_int_equal(d.batch_delta, 0);
    }
    vram_batchopt_destroy(o);
}

static void oom_drops_both_and_blocks_growth(void **state)
{
    (void)state;
    vram_batchopt_config_t c = lq_config();
    c.adjustment_frequency = 20;
    vram_batchopt_t *o;
    int batch = 32, lq = 128, nb, nl;
    assert_int_equal(vram_batchopt_create(&c, batch, lq, &o), 0);
    mem_model_t m = {.base = 0.1, .k = 0.01, .max_lq = 256};
    run(o, &m, 200, &batch, &lq);
    int before_b = batch, before_l = lq;
    assert_int_equal(vram_batchopt_on_oom(o, &nb, &nl), 0);
    assert_true(nb <= before_b / 2 || nb == c.min_batch);
    assert_true(nl < before_l || nl == c.min_lq);
    batch = nb, lq = nl;
    /* No growth during oom_cooldown_windows windows even though usage is low. */
    m.base = 0.01;
    for (int i = 0; i < c.oom_cooldown_windows * c.adjustment_frequency - 1; i++) {
        vram_batchopt_decision_t d;
        assert_int_equal(vram_batchopt_update(o, usage_of(&m, batch, lq), &d), 0);
        assert_true(d.batch_delta <= 0 && d.lq_delta <= 0);
    }
    vram_batchopt_stats_t s;
    assert_int_equal(vram_batchopt_stats(o, &s), 0);
    assert_int_equal(s.oom_recoveries, 1);
    assert_int_equal(s.log[s.nlog - 1].reason, VRAM_BATCHOPT_OOM);
    /* Growth resumes afterwards. */
    run(o, &m, 2 * c.adjustment_frequency, &batch, &lq);
    assert_true(batch > nb || lq > nl);
    /* At the minima there is nothing left to drop to. */
    assert_int_equal(vram_batchopt_set_current(o, c.min_batch, c.min_lq), 0);
    assert_int_equal(vram_batchopt_on_oom(o, &nb, &nl), VRAM_ESTATE);
    assert_int_equal(nb, c.min_batch);
    assert_int_equal(nl, c.min_lq);
    vram_batchopt_destroy(o);
}

static void batch_only_config(void **state)
{
    (void)state;
    vram_batchopt_config_t c;
    vram_batchopt_config_init(&c);
    vram_batchopt_t *o;
    int batch = 2, lq = 0;
    assert_int_equal(vram_batchopt_create(&c, batch, 77, &o), 0);
    mem_model_t m = {.base = 0.25, .k = 0.02};
    int changes = run(o, &m, 1500, &batch, &lq);
    assert_int_equal(lq, 0);
    assert_true(batch == 28 || batch == 29); /* 0.25 + 0.02 * 29 = 0.83 = the aim */
    assert_true(changes <= 3);
    vram_batchopt_destroy(o);
}

static void fixed_step_baseline(void **state)
{
    (void)state;
    vram_batchopt_config_t c = lq_config();
    c.policy = VRAM_BATCHOPT_FIXED_STEP;
    vram_batchopt_t *o;
    int batch = 4, lq = 64;
    assert_int_equal(vram_batchopt_create(&c, batch, lq, &o), 0);
    mem_model_t m = {.base = 0.2, .k = 0.002, .max_lq = 256};
    run(o, &m, 100, &batch, &lq);
    assert_int_equal(lq, 64 + 14); /* (256 - 32) / 16 */
    assert_int_equal(batch, 4);
    vram_batchopt_destroy(o);
}

static void targets_limits_and_stats(void **state)
{
    (void)state;
    vram_batchopt_config_t c = lq_config();
    c.adjustment_frequency = 5;
    c.max_adjustments = 2;
    c.history_size = 4;
    vram_batchopt_t *o;
    int batch = 100, lq = 1; /* clamped */
    assert_int_equal(vram_batchopt_create(&c, batch, lq, &o), 0);
    vram_batchopt_stats_t s;
    assert_int_equal(vram_batchopt_stats(o, &s), 0);
    assert_int_equal(s.batch, 64);
    assert_int_equal(s.lq, 32);
    batch = 64, lq = 32;
    /* set_target caps the settings; the drop arrives with the next update. */
    assert_int_equal(vram_batchopt_set_target(o, 16, 100), 0);
    vram_batchopt_decision_t d;
    assert_int_equal(vram_batchopt_update(o, 0.1, &d), 0);
    assert_int_equal(d.batch_delta, 16 - 64);
    assert_int_equal(d.reason, VRAM_BATCHOPT_EXTERNAL);
    batch = 16;
    mem_model_t m = {.base = 0.0, .k = 0.0001, .max_lq = 256};
    run(o, &m, 500, &batch, &lq);
    assert_true(batch <= 16 && lq <= 100);
    assert_int_equal(vram_batchopt_stats(o, &s), 0);
    assert_int_equal(s.adjustments, 2); /* max_adjustments */
    double readings[] = {0.5, 0.7, 0.1, 0.2, 0.3};
    for (int i = 0; i < 5; i++)
        assert_int_equal(vram_batchopt_update(o, readings[i], NULL), 0);
    assert_int_equal(vram_batchopt_stats(o, &s), 0);
    assert_float_equal(s.current_usage, 0.3, 1e-12);
    assert_float_equal(s.average_usage, (0.7 + 0.1 + 0.2 + 0.3) / 4, 1e-12);
    assert_float_equal(s.peak_usage, 0.7, 1e-12);
    assert_int_equal(vram_batchopt_update(o, NAN, NULL), VRAM_EINVAL);
    assert_int_equal(vram_batchopt_update(o, -1, NULL), VRAM_EINVAL);
    assert_string_equal(vram_batchopt_reason_name(VRAM_BATCHOPT_OOM), "oom");
    c.max_batch = 1;
    assert_int_equal(vram_batchopt_create(&c, 1, 1, &o), VRAM_EINVAL);
    assert_non_null(strstr(vram_last_error(), "max_batch_size"));
    vram_batchopt_destroy(NULL);
    vram_batchopt_destroy(o);
}

static void learns_the_form_of_g(void **state)
{
    (void)state;
    for (int quad = 0; quad < 2; quad++) {
        vram_batchopt_config_t c = lq_config();
        c.adjustment_frequency = 10;
        vram_batchopt_t *o;
        int batch = 2, lq = 32;
        assert_int_equal(vram_batchopt_create(&c, batch, lq, &o), 0);
        mem_model_t m = {.base = 0.2, .k = 0.012, .max_lq = 256, .quadratic = quad};
        run(o, &m, 400, &batch, &lq);
        /* a set of distinct points, then an honest fit */
        int settings[][2] = {{8, 64}, {8, 128}, {16, 96}, {4, 200}};
        for (int i = 0; i < 4; i++) {
            assert_int_equal(vram_batchopt_set_current(o, settings[i][0], settings[i][1]), 0);
            batch = settings[i][0], lq = settings[i][1];
            for (int j = 0; j < 10; j++)
                assert_int_equal(vram_batchopt_update(o, usage_of(&m, batch, lq), NULL), 0);
        }
        vram_batchopt_stats_t s;
        assert_int_equal(vram_batchopt_stats(o, &s), 0);
        assert_int_equal(s.model_quadratic, quad);
        vram_batchopt_destroy(o);
    }
}

/* ---- randomized runs against memory models --------------------------- */

/* The highest noise-free usage at or under `aim` over every setting in the
 * limits (usage grows with lq: a bisection per batch). */
static double best_under(mem_model_t *m, const vram_batchopt_config_t *c, double aim)
{
    double best = 0;
    for (int b = c->min_batch; b <= c->max_batch; b++) {
        int lo = c->min_lq, hi = c->max_lq, ok = -1;
        while (lo <= hi) {
            int mid = lo + (hi - lo) / 2;
            if (usage_of(m, b, mid) <= aim)
                ok = mid, lo = mid + 1;
            else
                hi = mid - 1;
        }
        if (ok >= 0 && usage_of(m, b, ok) > best) best = usage_of(m, b, ok);
    }
    return best;
}

static void random_runs(void **state)
{
    (void)state;
    uint64_t rng = 0x9e3779b97f4a7c15ull;
    int far_from_best = 0, model_runs = 0;
    for (int run_i = 0; run_i < 2000; run_i++) {
        vram_batchopt_config_t c;
        vram_batchopt_config_init(&c);
        bool lq_on = uniform(&rng) < 0.7;
        c.min_batch = 1 + (int)(uniform(&rng) * 8);
        c.max_batch = c.min_batch + (int)(uniform(&rng) * 120);
        if (lq_on) {
            c.min_lq = 8 + (int)(uniform(&rng) * 64);
            c.max_lq = c.min_lq + (int)(uniform(&rng) * 512);
        }
        c.adjustment_frequency = 5 + (int)(uniform(&rng) * 30);
        c.target_usage = 0.6 + uniform(&rng) * 0.35;
        c.safety_margin = 0.03 + uniform(&rng) * 0.05;
        c.max_adjustments = 0;
        c.policy = run_i % 4 == 3 ? VRAM_BATCHOPT_FIXED_STEP : VRAM_BATCHOPT_MODEL;
        mem_model_t m = {.base = 0.02 + uniform(&rng) * 0.4,
                         .noise = uniform(&rng) * 0.01,
                         .quadratic = uniform(&rng) < 0.5,
                         .max_lq = lq_on ? c.max_lq : 0,
                         .rng = rng | 1};
        /* usage at the maxima between 0.5x and 4x the room above base; in a
         * third of the lq runs part of it per sample, whatever lq */
        m.k = (c.target_usage - m.base) * (0.5 + 3.5 * uniform(&rng)) / c.max_batch;
        if (lq_on && uniform(&rng) < 0.33) {
            double share = 0.1 + 0.5 * uniform(&rng);
            m.per_sample = m.k * share;
            m.k -= m.per_sample;
        }
        double noise_at_start = m.noise;
        int batch = c.min_batch + (int)(uniform(&rng) * (c.max_batch - c.min_batch + 1));
        int lq = lq_on ? c.min_lq + (int)(uniform(&rng) * (c.max_lq - c.min_lq + 1)) : 0;
        vram_batchopt_t *o;
        assert_int_equal(vram_batchopt_create(&c, batch, lq, &o), 0);
        int windows = 120, iters = windows * c.adjustment_frequency;
        int other_at = (int)(uniform(&rng) * iters / 3), other_until = other_at + iters / 3;
        double other = uniform(&rng) * 0.3;
        int64_t no_growth_until = -1;
        int last_change = 0;
        for (int i = 0; i < iters; i++) {
            m.other = i >= other_at && i < other_until ? other : 0;
            double u = usage_of(&m, batch, lq);
            if (u > 1.0) { /* out of memory: the step fails */
                int nb, nl;
                int rc = vram_batchopt_on_oom(o, &nb, &nl);
                assert_true(rc == 0 || rc == VRAM_ESTATE);
                assert_true(nb <= batch && nl <= lq);
                if (rc == 0) assert_true(nb < batch || nl < lq);
                batch = nb, lq = nl;
                no_growth_until = i + (int64_t)c.oom_cooldown_windows * c.adjustment_frequency;
                last_change = i;
                continue;
            }
            vram_batchopt_decision_t d;
            assert_int_equal(vram_batchopt_update(o, u, &d), 0);
            if (i < no_growth_until) assert_true(d.batch_delta <= 0 && d.lq_delta <= 0);
            if (d.batch_delta || d.lq_delta) {
                assert_true(i - last_change >= c.adjustment_frequency - 1); /* cooldown */
                last_change = i;
                /* Growth never lowers the batch; it lowers lq only to
                 * trade it for one more sample's worth of memory. */
                if (d.reason == VRAM_BATCHOPT_GROW)
                    assert_true(d.batch_delta >= 0 && (d.lq_delta >= 0 || d.batch_delta > 0));
                if (d.reason == VRAM_BATCHOPT_SHRINK)
                    assert_true(d.batch_delta <= 0 && d.lq_delta <= 0);
                /* batch first when shrinking */
                if (d.reason == VRAM_BATCHOPT_SHRINK && d.lq_delta < 0)
                    assert_int_equal(batch + d.batch_delta, c.min_batch);
            }
            batch += d.batch_delta;
            lq += d.lq_delta;
            assert_true(batch >= c.min_batch && batch <= c.max_batch);
            if (lq_on)
                assert_true(lq >= c.min_lq && lq <= c.max_lq);
            else
                assert_int_equal(lq, 0);
        }
        /* The model policy has converged after the second job left: the last
         * window's usage is under target, and inside the band unless a limit
         * (or the step between two settings) stops it. */
        if (c.policy == VRAM_BATCHOPT_MODEL) {
            double noise = m.noise; /* window peaks reach up to + noise */
            m.noise = 0;
            double u = usage_of(&m, batch, lq);
            bool at_max = batch == c.max_batch && (!lq_on || lq == c.max_lq);
            bool at_min = batch == c.min_batch && (!lq_on || lq == c.min_lq);
            if (!at_min && u > c.target_usage)
                fail_msg("run %d: over target at batch %d lq %d: %.4f > %.3f", run_i, batch, lq, u,
                         c.target_usage);
            if (!at_max) {
                double next = lq_on && lq < c.max_lq ? usage_of(&m, batch, lq + 1)
                                                     : usage_of(&m, batch + 1, lq);
                /* one more step would not fit under the dead band's top */
                /* With one setting seen, the controller may not risk a step
                 * that could need the whole device if nothing were fixed. */
                bool lq_step = lq_on && lq < c.max_lq;
                double worst = lq_step ? (double)(lq + 1) * (lq + 1) / ((double)lq * lq)
                                       : (double)(batch + 1) / batch;
                if (u + noise < c.target_usage - c.safety_margin && (u + noise) * worst < 1.0 &&
                    next + noise <= c.target_usage - 0.2 * c.safety_margin - 0.02)
                    fail_msg("run %d: stuck at batch %d lq %d usage %.4f (next %.4f), target %.3f "
                             "margin %.3f, base %.3f k %.5f quad %d noise %.4f",
                             run_i, batch, lq, u, next, c.target_usage, c.safety_margin, m.base,
                             m.k, m.quadratic, m.noise);
            }
        }
        if (c.policy == VRAM_BATCHOPT_MODEL) {
            /* Close to the best setting reachable with whole numbers: within
             * twice the lq preference (0.2 margin) of it, plus the noise.
             * Settings within a hair of the aim count as out of reach. */
            double noise = noise_at_start;
            m.noise = 0;
            double u = usage_of(&m, batch, lq), aim = c.target_usage - 0.2 * c.safety_margin;
            double best = best_under(&m, &c, aim - noise - 0.005);
            if (u < best - 0.4 * c.safety_margin - noise)
                if (u < best - 0.4 * c.safety_margin - noise) {
                    far_from_best++;
                    print_message(
                        "run %d: settled at batch %d lq %d usage %.4f, best reachable %.4f "
                        "(aim %.3f, margin %.3f, base %.3f k %.5f per sample %.5f quad %d "
                        "noise %.4f)\n",
                        run_i, batch, lq, u, best, aim, c.safety_margin, m.base, m.k, m.per_sample,
                        m.quadratic, noise);
                }
            model_runs++;
        }
        vram_batchopt_destroy(o);
    }
    /* Misses are rare (0, 2, 1 and 4 of 1,500 with four seeds during
     * development); those traced were a jump landing over target when the
     * model lacked a term, after which the steepened slope keeps the run a
     * sample or two below its best (still inside the band). */
    print_message("%d of %d model runs settled farther from the best reachable setting\n",
                  far_from_best, model_runs);
    assert_true(far_from_best * 100 <= model_runs);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(grows_lq_first_then_batch),
        cmocka_unit_test(trades_lq_for_a_sample),
        cmocka_unit_test(shrinks_batch_first),
        cmocka_unit_test(windows_and_cooldown),
        cmocka_unit_test(oom_drops_both_and_blocks_growth),
        cmocka_unit_test(batch_only_config),
        cmocka_unit_test(fixed_step_baseline),
        cmocka_unit_test(targets_limits_and_stats),
        cmocka_unit_test(learns_the_form_of_g),
        cmocka_unit_test(random_runs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
