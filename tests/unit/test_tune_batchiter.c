/* The adaptive batch iterator: its policy (checks every N samples, halve
 * above the high mark, double below the low mark up to the initial batch)
 * and its bookkeeping: for several memory traces, with failed batches and
 * batches completed out of order, every sample is committed exactly once. */
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

static uint64_t idx[4096];

static void policy(void **state)
{
    (void)state;
    vram_batchiter_config_t c;
    vram_batchiter_config_init(&c, 32);
    assert_int_equal(c.check_every, 10);
    assert_float_equal(c.high_mark, 0.85, 1e-12);
    assert_float_equal(c.low_mark, 0.50, 1e-12);
    vram_batchiter_t *it;
    assert_int_equal(vram_batchiter_create(&c, 10000, &it), 0);
    size_t n;
    uint64_t id;
    assert_true(vram_batchiter_check_due(it)); /* before the first batch */
    assert_int_equal(vram_batchiter_next(it, 0.9, idx, 4096, &n, &id), 0);
    assert_int_equal(n, 16); /* 0.9 > 0.85: halved */
    assert_int_equal(idx[0], 0);
    assert_int_equal(vram_batchiter_done(it, id), 0);
    assert_true(vram_batchiter_check_due(it)); /* 16 samples >= 10 */
    assert_int_equal(vram_batchiter_next(it, 0.7, idx, 4096, &n, &id), 0);
    assert_int_equal(n, 16); /* between the marks: unchanged */
    assert_int_equal(idx[0], 16);
    assert_int_equal(vram_batchiter_done(it, id), 0);
    assert_int_equal(vram_batchiter_next(it, 0.2, idx, 4096, &n, &id), 0);
    assert_int_equal(n, 32); /* doubled */
    assert_int_equal(vram_batchiter_done(it, id), 0);
    assert_int_equal(vram_batchiter_next(it, 0.1, idx, 4096, &n, &id), 0);
    assert_int_equal(n, 32); /* never above the initial batch */
    assert_int_equal(vram_batchiter_done(it, id), 0);
    for (int i = 0; i < 20; i++) {
        assert_int_equal(vram_batchiter_next(it, 0.99, idx, 4096, &n, &id), 0);
        assert_int_equal(vram_batchiter_done(it, id), 0);
    }
    vram_batchiter_stats_t s;
    assert_int_equal(vram_batchiter_stats(it, &s), 0);
    assert_int_equal(s.batch, 1); /* min_batch */
    assert_int_equal(s.log[0].reason, VRAM_BATCHITER_HIGH);
    assert_int_equal(s.log[0].old_batch, 32);
    assert_int_equal(s.log[0].new_batch, 16);
    assert_int_equal(s.log[1].reason, VRAM_BATCHITER_LOW);
    /* with a batch of 1 the check comes every 10 samples, not every batch */
    uint64_t checks = s.checks;
    for (int i = 0; i < 9; i++) {
        assert_int_equal(vram_batchiter_next(it, 0.99, idx, 4096, &n, &id), 0);
        assert_int_equal(vram_batchiter_done(it, id), 0);
    }
    assert_int_equal(vram_batchiter_stats(it, &s), 0);
    assert_true(s.checks - checks <= 1);
    assert_int_equal(vram_batchiter_check(it), 0);
    assert_int_equal(vram_batchiter_set_batch(it, 1000), 0); /* clamped to the initial */
    assert_int_equal(vram_batchiter_stats(it, &s), 0);
    assert_int_equal(s.batch, 32);
    assert_int_equal(s.log[s.nlog - 1].reason, VRAM_BATCHITER_SET);
    assert_string_equal(vram_batchiter_reason_name(VRAM_BATCHITER_SET), "set");
    assert_int_equal(vram_batchiter_next(it, 0.5, idx, 8, &n, &id), VRAM_EINVAL); /* cap < 32 */
    assert_int_equal(vram_batchiter_done(it, 12345), VRAM_ENOENT);
    vram_batchiter_destroy(it);
    c.low_mark = 0.9;
    assert_int_equal(vram_batchiter_create(&c, 10, &it), VRAM_EINVAL);
    assert_non_null(strstr(vram_last_error(), "low_mark"));
}

static void failed_batches_come_back_first(void **state)
{
    (void)state;
    vram_batchiter_config_t c;
    vram_batchiter_config_init(&c, 8);
    vram_batchiter_t *it;
    assert_int_equal(vram_batchiter_create(&c, 20, &it), 0);
    size_t n;
    uint64_t id;
    assert_int_equal(vram_batchiter_next(it, 0.6, idx, 64, &n, &id), 0);
    assert_int_equal(n, 8);
    assert_int_equal(vram_batchiter_failed(it, id), 0);
    assert_int_equal(vram_batchiter_failed(it, id), VRAM_ENOENT);
    assert_int_equal(vram_batchiter_next(it, 0.6, idx, 64, &n, &id), 0);
    assert_int_equal(n, 4); /* halved */
    for (size_t i = 0; i < 4; i++)
        assert_int_equal(idx[i], i); /* the same samples, in order */
    assert_int_equal(vram_batchiter_done(it, id), 0);
    assert_int_equal(vram_batchiter_check(it), 0);
    vram_batchiter_destroy(it);
}

static void unknown_length(void **state)
{
    (void)state;
    vram_batchiter_config_t c;
    vram_batchiter_config_init(&c, 8);
    vram_batchiter_t *it;
    assert_int_equal(vram_batchiter_create(&c, UINT64_MAX, &it), 0);
    size_t n;
    uint64_t id;
    assert_int_equal(vram_batchiter_next(it, 0.6, idx, 64, &n, &id), 0);
    assert_int_equal(vram_batchiter_done(it, id), 0);
    assert_int_equal(vram_batchiter_next(it, 0.6, idx, 64, &n, &id), 0); /* 8..15 */
    assert_false(vram_batchiter_finished(it));
    assert_int_equal(vram_batchiter_set_length(it, 11), 0); /* the iterable had 11 */
    vram_batchiter_stats_t s;
    assert_int_equal(vram_batchiter_stats(it, &s), 0);
    assert_int_equal(s.pending, 3);
    assert_int_equal(vram_batchiter_done(it, id), 0);
    assert_int_equal(vram_batchiter_next(it, 0.6, idx, 64, &n, &id), 0);
    assert_int_equal(n, 0);
    assert_true(vram_batchiter_finished(it));
    assert_int_equal(vram_batchiter_check(it), 0);
    assert_int_equal(vram_batchiter_set_length(it, 12), VRAM_EINVAL);
    vram_batchiter_destroy(it);
}

static double uniform(uint64_t *s)
{
    *s ^= *s >> 12, *s ^= *s << 25, *s ^= *s >> 27;
    return (double)((*s * 2685821657736338717ull) >> 11) / 9007199254740992.0;
}

/* Memory traces: what the device reads at step t, given the current batch. */
static double trace(int kind, int t, int batch, int initial, uint64_t *rng)
{
    double per = 0.6 / initial;
    switch (kind) {
    case 0:
        return 0.3 + per * batch; /* steady: 0.9 at the initial batch */
    case 1:
        return 0.4 + 0.35 * sin(t / 7.0) + per * batch / 2; /* oscillating neighbour */
    case 2:
        return t % 50 < 25 ? 0.95 : 0.1; /* bursts */
    case 3:
        return uniform(rng); /* random */
    default:
        return 0.2; /* always low */
    }
}

static void random_traces(void **state)
{
    (void)state;
    uint64_t rng = 42;
    for (int run = 0; run < 300; run++) {
        int kind = run % 5;
        vram_batchiter_config_t c;
        vram_batchiter_config_init(&c, 1 + (int)(uniform(&rng) * 64));
        c.check_every = 1 + (int)(uniform(&rng) * 20);
        c.min_batch = 1 + (int)(uniform(&rng) * c.initial_batch / 4);
        uint64_t length = 1 + (uint64_t)(uniform(&rng) * 3000);
        bool known = run % 3 != 0;
        vram_batchiter_t *it;
        assert_int_equal(vram_batchiter_create(&c, known ? length : UINT64_MAX, &it), 0);
        uint8_t *seen = calloc(length, 1);
        uint64_t ids[4];
        size_t nids = 0, committed = 0;
        uint64_t *held[4];
        size_t held_n[4];
        int t = 0, prev_batch = c.initial_batch;
        for (int guard = 0; guard < 1000000 && !vram_batchiter_finished(it); guard++, t++) {
            vram_batchiter_stats_t s;
            assert_int_equal(vram_batchiter_stats(it, &s), 0);
            double u = trace(kind, t, s.batch, c.initial_batch, &rng);
            bool due = vram_batchiter_check_due(it);
            size_t n = 0;
            uint64_t id = 0;
            /* up to three batches in flight (a prefetching loader) */
            if (nids < 3) {
                assert_int_equal(vram_batchiter_next(it, due ? u : -1, idx, 4096, &n, &id), 0);
                assert_int_equal(vram_batchiter_stats(it, &s), 0);
                assert_true(s.batch >= c.min_batch && s.batch <= c.initial_batch);
                if (!due)
                    assert_int_equal(s.batch, prev_batch); /* changes only at checks */
                else if (u > c.high_mark)
                    assert_int_equal(s.batch,
                                     prev_batch / 2 > c.min_batch ? prev_batch / 2 : c.min_batch);
                if (!known) {
                    /* the iterable runs dry inside this batch */
                    size_t real = 0;
                    while (real < n && idx[real] < length)
                        real++;
                    if (real < n) {
                        assert_int_equal(vram_batchiter_set_length(it, length), 0);
                        n = real;
                        known = true;
                    }
                }
                if (n > 0) {
                    assert_true(n <= (size_t)s.batch ||
                                s.log[s.nlog ? s.nlog - 1 : 0].reason == VRAM_BATCHITER_FAIL);
                    held[nids] = malloc(n * sizeof **held);
                    memcpy(held[nids], idx, n * sizeof **held);
                    held_n[nids] = n;
                    ids[nids++] = id;
                }
                prev_batch = s.batch;
            }
            if (nids > 0 && (n == 0 || uniform(&rng) < 0.5)) {
                size_t k = (size_t)(uniform(&rng) * nids); /* out of order */
                bool oom = u > 0.9 && uniform(&rng) < 0.5;
                if (oom) {
                    assert_int_equal(vram_batchiter_failed(it, ids[k]), 0);
                } else {
                    assert_int_equal(vram_batchiter_done(it, ids[k]), 0);
                    for (size_t j = 0; j < held_n[k]; j++) {
                        assert_true(held[k][j] < length);
                        assert_int_equal(seen[held[k][j]], 0); /* never twice */
                        seen[held[k][j]] = 1;
                        committed++;
                    }
                }
                free(held[k]);
                held[k] = held[nids - 1], held_n[k] = held_n[nids - 1], ids[k] = ids[nids - 1];
                nids--;
                assert_int_equal(vram_batchiter_stats(it, &s), 0);
                prev_batch = s.batch;
            }
            if (t % 17 == 0) assert_int_equal(vram_batchiter_check(it), 0);
        }
        assert_true(vram_batchiter_finished(it));
        assert_int_equal(committed, length); /* the multiset equals the dataset */
        for (uint64_t i = 0; i < length; i++)
            assert_int_equal(seen[i], 1);
        assert_int_equal(vram_batchiter_check(it), 0);
        free(seen);
        vram_batchiter_destroy(it);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(policy),
        cmocka_unit_test(failed_batches_come_back_first),
        cmocka_unit_test(unknown_length),
        cmocka_unit_test(random_traces),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
