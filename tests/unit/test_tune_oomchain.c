/* The OOM recovery chain with a real pool on a simulated GPU: a step that
 * does not fit is retried as micro-batches and gives the same samples and the
 * same gradient; offload runs inside a failing pool allocation; when nothing
 * helps, the checkpoint hook runs and the error says how to resume. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "vram.h"
#include "unit/pool_sim.h"

#define MiB ((size_t)1 << 20)

static pool_sim_t sim;

static int setup(void **state)
{
    (void)state;
    return pool_sim_open(&sim, "1xoomchain:1GiB");
}

static int teardown(void **state)
{
    (void)state;
    pool_sim_close(&sim);
    return 0;
}

/* A training step: each part allocates its activations (per_sample bytes a
 * sample) and adds its samples' gradient contributions; a part that cannot
 * allocate fails the whole attempt, which keeps nothing. */
typedef struct {
    vram_pool_t *pool;
    size_t per_sample;
    int seen[64];
    double grad;
} trainer_t;

static double contribution(int sample)
{
    return sin(sample * 0.7) / 3.0 + 1e-3 * sample;
}

static int run_step(trainer_t *t, int first, int batch, int parts)
{
    int size = (batch + parts - 1) / parts, seen[64] = {0};
    double grad = 0;
    for (int start = 0; start < batch; start += size) {
        int n = start + size <= batch ? size : batch - start;
        void *act;
        int rc = vram_pool_alloc(t->pool, (size_t)n * t->per_sample, NULL, &act);
        if (rc) return rc; /* the attempt is discarded: no sample counted */
        double part = 0;
        for (int i = 0; i < n; i++) {
            part += contribution(first + start + i);
            seen[start + i]++;
        }
        grad += part / batch; /* accumulation: the mean over the whole batch */
        vram_pool_free(t->pool, act);
    }
    for (int i = 0; i < batch; i++)
        t->seen[i] += seen[i];
    t->grad = grad;
    return 0;
}

static void micro_batches_keep_samples_and_gradient(void **state)
{
    (void)state;
    vram_pool_config_t pc = {.strategy = VRAM_POOL_GREEDY};
    vram_pool_t *pool;
    assert_int_equal(vram_pool_create(sim.ctx, 0, &pc, &pool), 0);
    void *weights, *cached;
    assert_int_equal(vram_pool_alloc(pool, 400 * MiB, NULL, &weights), 0);
    assert_int_equal(vram_pool_alloc(pool, 100 * MiB, NULL, &cached), 0);
    assert_int_equal(vram_pool_free(pool, cached), 0); /* cached by the pool */

    vram_oomchain_config_t cc;
    vram_oomchain_config_init(&cc);
    vram_oomchain_t *chain;
    assert_int_equal(vram_oomchain_create(&cc, &chain), 0);
    assert_int_equal(vram_oomchain_attach_pool(chain, pool), 0);

    trainer_t t = {.pool = pool, .per_sample = 48 * MiB};
    int batch = 16, parts; /* 768 MiB at once: more than the 624 MiB left */
    assert_int_equal(vram_oomchain_begin_step(chain, batch, &parts), 0);
    assert_int_equal(parts, 1);
    vram_oom_action_t a;
    int rc, tries = 0;
    while ((rc = run_step(&t, 0, batch, parts)) == VRAM_ENOMEM) {
        assert_int_equal(vram_oomchain_on_oom(chain, &a), 0);
        assert_true(a.retry);
        parts = a.micro_batches;
        assert_true(++tries < 10);
    }
    assert_int_equal(rc, 0);
    assert_int_equal(vram_oomchain_end_step(chain), 0);
    assert_int_equal(a.strategy, VRAM_OOM_MICRO_BATCH);
    assert_int_equal(parts, 2);
    assert_int_equal(a.micro_batch_size, 8);
    /* the same samples, once each, and the same gradient as the whole batch */
    double whole = 0;
    for (int i = 0; i < batch; i++) {
        assert_int_equal(t.seen[i], 1);
        whole += contribution(i);
    }
    assert_true(fabs(t.grad - whole / batch) < 1e-12);

    vram_oomchain_stats_t s;
    assert_int_equal(vram_oomchain_stats(chain, &s), 0);
    /* free-cache ran first: the pool had released its cache inside the
     * allocation already, so it freed nothing and the split followed */
    assert_int_equal(s.attempts[VRAM_OOM_FREE_CACHE], 1);
    assert_int_equal(s.freed_bytes[VRAM_OOM_FREE_CACHE], 0);
    assert_int_equal(s.attempts[VRAM_OOM_MICRO_BATCH], 1);
    assert_int_equal(s.recovered[VRAM_OOM_MICRO_BATCH], 1);
    assert_int_equal(s.ooms, 1);
    assert_int_equal(s.steps, 1);
    /* the next step of that batch starts split: no OOM to rediscover it */
    assert_int_equal(vram_oomchain_begin_step(chain, batch, &parts), 0);
    assert_int_equal(parts, 2);
    assert_int_equal(run_step(&t, 16, batch, parts), 0);
    assert_int_equal(vram_oomchain_end_step(chain), 0);
    assert_int_equal(vram_oomchain_begin_step(chain, 8, &parts), 0);
    assert_int_equal(parts, 1);
    assert_int_equal(vram_oomchain_end_step(chain), 0);
    vram_pool_free(pool, weights);
    vram_pool_destroy(pool);
    vram_oomchain_destroy(chain);
}

/* free-cache at step level: a cached segment that an earlier OOM left */
typedef struct {
    vram_pool_t *pool;
    void *activations; /* offloaded (freed here) on demand */
    size_t size;
    int offloads;
} holder_t;

static uint64_t offload_hook(void *user, size_t request)
{
    (void)request;
    holder_t *h = user;
    if (!h->activations) return 0;
    assert_int_equal(vram_pool_free(h->pool, h->activations), 0); /* "moved to host" */
    h->activations = NULL;
    h->offloads++;
    return h->size;
}

static void offload_inside_the_pool(void **state)
{
    (void)state;
    vram_pool_config_t pc = {.strategy = VRAM_POOL_CONSOLIDATED};
    vram_pool_t *pool;
    assert_int_equal(vram_pool_create(sim.ctx, 0, &pc, &pool), 0);
    holder_t h = {.pool = pool, .size = 300 * MiB};
    void *weights, *big;
    assert_int_equal(vram_pool_alloc(pool, 500 * MiB, NULL, &weights), 0);
    assert_int_equal(vram_pool_alloc(pool, h.size, NULL, &h.activations), 0);

    vram_oomchain_config_t cc;
    vram_oomchain_config_init(&cc);
    cc.offload = offload_hook;
    cc.user = &h;
    vram_oomchain_t *chain;
    assert_int_equal(vram_oomchain_create(&cc, &chain), 0);
    assert_int_equal(vram_oomchain_attach_pool(chain, pool), 0);
    /* 400 MiB with 224 MiB free: the pool calls the chain, which offloads */
    int rc = vram_pool_alloc(pool, 400 * MiB, NULL, &big);
    if (rc) fail_msg("%s", vram_last_error());
    assert_int_equal(h.offloads, 1);
    vram_oomchain_stats_t s;
    assert_int_equal(vram_oomchain_stats(chain, &s), 0);
    assert_int_equal(s.pool_calls, 1);
    assert_int_equal(s.attempts[VRAM_OOM_OFFLOAD], 1);
    assert_int_equal(s.freed_bytes[VRAM_OOM_OFFLOAD], 300 * MiB);
    /* nothing left to offload: the next refusal is an OOM */
    void *more;
    assert_int_equal(vram_pool_alloc(pool, 400 * MiB, NULL, &more), VRAM_ENOMEM);
    assert_int_equal(vram_oomchain_stats(chain, &s), 0);
    assert_int_equal(s.pool_calls, 2);
    assert_int_equal(s.freed_bytes[VRAM_OOM_OFFLOAD], 300 * MiB);
    vram_pool_free(pool, big);
    vram_pool_free(pool, weights);
    vram_pool_destroy(pool);
    vram_oomchain_destroy(chain);
}

static int checkpoint_hook(void *user, char *msg, size_t cap)
{
    (*(int *)user)++;
    snprintf(msg, cap, "/tmp/run/ckpt-step-7.pt");
    return 0;
}

static void checkpoint_and_give_up(void **state)
{
    (void)state;
    int saves = 0;
    vram_oomchain_config_t cc;
    vram_oomchain_config_init(&cc);
    cc.checkpoint = checkpoint_hook;
    cc.user = &saves;
    cc.max_splits = 2;
    vram_oomchain_t *chain;
    assert_int_equal(vram_oomchain_create(&cc, &chain), 0);
    vram_oom_action_t a;
    assert_int_equal(vram_oomchain_on_oom(chain, &a), VRAM_ESTATE); /* outside a step */
    assert_int_equal(vram_oomchain_begin_step(chain, 8, NULL), 0);
    /* no pool, no free_cache hook, no offload: two splits, then the end */
    assert_int_equal(vram_oomchain_on_oom(chain, &a), 0);
    assert_int_equal(a.micro_batches, 2);
    assert_int_equal(vram_oomchain_on_oom(chain, &a), 0);
    assert_int_equal(a.micro_batches, 4);
    assert_int_equal(vram_oomchain_on_oom(chain, &a), VRAM_ENOMEM);
    assert_false(a.retry);
    assert_int_equal(a.strategy, VRAM_OOM_CHECKPOINT);
    assert_int_equal(saves, 1);
    assert_non_null(strstr(a.message, "/tmp/run/ckpt-step-7.pt"));
    assert_non_null(strstr(a.message, "resume"));
    assert_non_null(strstr(vram_last_error(), "resume"));
    assert_int_equal(vram_oomchain_end_step(chain), VRAM_ESTATE); /* the step is over */
    vram_oomchain_stats_t s;
    assert_int_equal(vram_oomchain_stats(chain, &s), 0);
    assert_int_equal(s.failures, 1);
    assert_int_equal(s.attempts[VRAM_OOM_CHECKPOINT], 1);
    assert_int_equal(s.attempts[VRAM_OOM_MICRO_BATCH], 2);
    vram_oomchain_destroy(chain);

    /* a chain of micro-batch only, min_micro_batch 3: one split of 8 */
    vram_oomchain_config_init(&cc);
    cc.order[0] = VRAM_OOM_MICRO_BATCH;
    cc.norder = 1;
    cc.min_micro_batch = 3;
    assert_int_equal(vram_oomchain_create(&cc, &chain), 0);
    assert_int_equal(vram_oomchain_begin_step(chain, 8, NULL), 0);
    assert_int_equal(vram_oomchain_on_oom(chain, &a), 0);
    assert_int_equal(a.micro_batch_size, 4);
    assert_int_equal(vram_oomchain_on_oom(chain, &a), VRAM_ENOMEM);
    assert_non_null(strstr(a.message, "no checkpoint configured"));
    vram_oomchain_destroy(chain);
}

/* The pool's handler runs on whichever thread's allocation fails, while the
 * training thread reads the statistics (run under TSan by `make tsan`). */
typedef struct {
    vram_pool_t *pool;
    atomic_int offloads;
} shared_t;

static uint64_t counting_offload(void *user, size_t request)
{
    (void)request;
    atomic_fetch_add(&((shared_t *)user)->offloads, 1);
    return 0; /* frees nothing: the allocation fails, the chain was asked */
}

static void *allocator_thread(void *arg)
{
    shared_t *sh = arg;
    for (int i = 0; i < 50; i++) {
        void *p = NULL;
        /* more than the whole free device: refused after the handlers ran */
        if (vram_pool_alloc(sh->pool, 600 * MiB, NULL, &p) == 0) vram_pool_free(sh->pool, p);
    }
    return NULL;
}

static void handler_from_many_threads(void **state)
{
    (void)state;
    vram_pool_config_t pc = {.strategy = VRAM_POOL_BALANCED};
    vram_pool_t *pool;
    assert_int_equal(vram_pool_create(sim.ctx, 0, &pc, &pool), 0);
    void *ballast;
    assert_int_equal(vram_pool_alloc(pool, 600 * MiB, NULL, &ballast), 0);
    shared_t sh = {.pool = pool};
    vram_oomchain_config_t cc;
    vram_oomchain_config_init(&cc);
    cc.offload = counting_offload;
    cc.user = &sh;
    vram_oomchain_t *chain;
    assert_int_equal(vram_oomchain_create(&cc, &chain), 0);
    assert_int_equal(vram_oomchain_attach_pool(chain, pool), 0);
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        assert_int_equal(pthread_create(&t[i], NULL, allocator_thread, &sh), 0);
    vram_oomchain_stats_t s;
    for (int i = 0; i < 100; i++)
        assert_int_equal(vram_oomchain_stats(chain, &s), 0);
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    assert_int_equal(vram_oomchain_stats(chain, &s), 0);
    assert_int_equal(s.pool_calls, 200);
    assert_int_equal(s.attempts[VRAM_OOM_OFFLOAD], 200);
    assert_int_equal(atomic_load(&sh.offloads), 200);
    vram_pool_free(pool, ballast);
    vram_pool_destroy(pool);
    vram_oomchain_destroy(chain);
}

/* A batch vramd granted below the step's batch: every step starts split to
 * parts of at most that many samples; an OOM doubles from there; a split
 * learnt finer than the limit is kept; 0 lifts the limit. No pool needed:
 * the chain only counts. */
static void a_granted_batch_limits_each_part(void **state)
{
    (void)state;
    vram_oomchain_config_t cc;
    vram_oomchain_config_init(&cc);
    cc.order[0] = VRAM_OOM_MICRO_BATCH;
    cc.norder = 1;
    vram_oomchain_t *chain;
    assert_int_equal(vram_oomchain_create(&cc, &chain), 0);
    assert_int_equal(vram_oomchain_limit_micro_batch(chain, -1), VRAM_EINVAL);
    assert_non_null(strstr(vram_last_error(), "max_samples"));
    assert_int_equal(vram_oomchain_limit_micro_batch(chain, 5), 0);
    int parts;
    for (int batch = 1; batch <= 40; batch++) {
        assert_int_equal(vram_oomchain_begin_step(chain, batch, &parts), 0);
        assert_int_equal(parts, (batch + 4) / 5); /* the fewest parts of <= 5 */
        assert_true((batch + parts - 1) / parts <= 5);
        assert_int_equal(vram_oomchain_end_step(chain), 0);
    }
    assert_int_equal(vram_oomchain_begin_step(chain, 16, &parts), 0);
    assert_int_equal(parts, 4);
    vram_oom_action_t a;
    assert_int_equal(vram_oomchain_on_oom(chain, &a), 0);
    assert_int_equal(a.micro_batches, 8);
    assert_int_equal(a.micro_batch_size, 2);
    assert_int_equal(vram_oomchain_end_step(chain), 0);
    assert_int_equal(vram_oomchain_begin_step(chain, 16, &parts), 0);
    assert_int_equal(parts, 8); /* learnt, and finer than the limit asks */
    assert_int_equal(vram_oomchain_end_step(chain), 0);
    assert_int_equal(vram_oomchain_limit_micro_batch(chain, 0), 0);
    assert_int_equal(vram_oomchain_begin_step(chain, 12, &parts), 0);
    assert_int_equal(parts, 1);
    assert_int_equal(vram_oomchain_end_step(chain), 0);
    vram_oomchain_destroy(chain);
}

static void config_and_names(void **state)
{
    (void)state;
    vram_oomchain_config_t cc;
    vram_oomchain_config_init(&cc);
    vram_oomchain_t *chain;
    cc.order[1] = VRAM_OOM_FREE_CACHE;
    assert_int_equal(vram_oomchain_create(&cc, &chain), VRAM_EINVAL);
    assert_non_null(strstr(vram_last_error(), "free-cache appears twice"));
    vram_oomchain_config_init(&cc);
    cc.max_splits = 99;
    assert_int_equal(vram_oomchain_create(&cc, &chain), VRAM_EINVAL);
    assert_non_null(strstr(vram_last_error(), "max_splits"));
    vram_oom_strategy_t s;
    assert_int_equal(vram_oom_strategy_parse("Micro_Batch", &s), 0);
    assert_int_equal(s, VRAM_OOM_MICRO_BATCH);
    assert_int_equal(vram_oom_strategy_parse("swap", &s), VRAM_EINVAL);
    assert_non_null(strstr(vram_last_error(), "checkpoint"));
    assert_string_equal(vram_oom_strategy_name(VRAM_OOM_OFFLOAD), "offload");
    vram_oomchain_destroy(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(micro_batches_keep_samples_and_gradient),
        cmocka_unit_test(offload_inside_the_pool),
        cmocka_unit_test(checkpoint_and_give_up),
        cmocka_unit_test(handler_from_many_threads),
        cmocka_unit_test(a_granted_batch_limits_each_part),
        cmocka_unit_test(config_and_names),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
