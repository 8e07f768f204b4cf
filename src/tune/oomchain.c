/* OOM recovery chain: strategies tried in order when a training step runs
 * out of memory. free-cache and offload free memory and the same step is
 * retried; micro-batch retries the same samples in twice as many parts
 * (gradient accumulation gives the same gradient); checkpoint saves and gives
 * up with a message saying how to resume. The chain also serves as an OOM
 * handler of a vram pool, where free-cache and offload run inside the failing
 * allocation. */
#include "vram.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ctype.h>

struct vram_oomchain {
    vram_oomchain_config_t cfg;
    vram_pool_t *pool;
    pthread_mutex_t lock; /* guards stats: the pool handler may run on any thread */
    vram_oomchain_stats_t stats;
    /* the current step (the training loop's thread only) */
    bool in_step;
    int batch, micro_batches, splits;
    int pos;                      /* next entry of cfg.order to try */
    int last;                     /* strategy applied last in this step, -1 = none */
    int known_batch, known_parts; /* the split that last worked, reused for that batch */
    int max_micro;                /* samples a part may have at most (0: any) */
};

static const char *const strategy_names[] = {"free-cache", "micro-batch", "offload", "checkpoint"};

const char *vram_oom_strategy_name(vram_oom_strategy_t s)
{
    return (unsigned)s < VRAM_OOM_STRATEGY_COUNT_ ? strategy_names[s] : "?";
}

int vram_oom_strategy_parse(const char *name, vram_oom_strategy_t *out)
{
    for (int s = 0; name && s < VRAM_OOM_STRATEGY_COUNT_; s++) {
        const char *a = name, *b = strategy_names[s];
        while (*a && *b && (tolower((unsigned char)*a) == *b || (*a == '_' && *b == '-')))
            a++, b++;
        if (!*a && !*b) {
            *out = (vram_oom_strategy_t)s;
            return 0;
        }
    }
    return vram_fail(VRAM_EINVAL,
                     "unknown OOM strategy \"%s\" (known: free-cache, micro-batch, offload, "
                     "checkpoint)",
                     name ? name : "(null)");
}

void vram_oomchain_config_init(vram_oomchain_config_t *cfg)
{
    *cfg = (vram_oomchain_config_t){
        .order = {VRAM_OOM_FREE_CACHE, VRAM_OOM_MICRO_BATCH, VRAM_OOM_OFFLOAD, VRAM_OOM_CHECKPOINT},
        .norder = VRAM_OOM_STRATEGY_COUNT_,
        .max_splits = 3,
        .min_micro_batch = 1,
    };
}

int vram_oomchain_create(const vram_oomchain_config_t *cfg, vram_oomchain_t **out)
{
    if (!cfg || !out) return vram_fail(VRAM_EINVAL, "OOM chain: NULL argument");
    if (cfg->norder < 0 || cfg->norder > VRAM_OOM_STRATEGY_COUNT_)
        return vram_fail(VRAM_EINVAL, "OOM chain: norder must be in 0..%d, not %d",
                         VRAM_OOM_STRATEGY_COUNT_, cfg->norder);
    bool seen[VRAM_OOM_STRATEGY_COUNT_] = {false};
    for (int i = 0; i < cfg->norder; i++) {
        if ((unsigned)cfg->order[i] >= VRAM_OOM_STRATEGY_COUNT_)
            return vram_fail(VRAM_EINVAL, "OOM chain: order[%d] is not a strategy (%d)", i,
                             (int)cfg->order[i]);
        if (seen[cfg->order[i]])
            return vram_fail(VRAM_EINVAL, "OOM chain: %s appears twice in the order",
                             vram_oom_strategy_name(cfg->order[i]));
        seen[cfg->order[i]] = true;
    }
    if (cfg->max_splits < 0 || cfg->max_splits > 20)
        return vram_fail(VRAM_EINVAL, "OOM chain: max_splits must be in 0..20, not %d",
                         cfg->max_splits);
    if (cfg->min_micro_batch < 1)
        return vram_fail(VRAM_EINVAL, "OOM chain: min_micro_batch must be >= 1, not %d",
                         cfg->min_micro_batch);
    vram_oomchain_t *c = calloc(1, sizeof *c);
    if (!c) return vram_fail(VRAM_ENOMEM, "OOM chain: out of memory");
    c->cfg = *cfg;
    c->last = -1;
    pthread_mutex_init(&c->lock, NULL);
    *out = c;
    return 0;
}

void vram_oomchain_destroy(vram_oomchain_t *chain)
{
    if (!chain) return;
    pthread_mutex_destroy(&chain->lock);
    free(chain);
}

static bool in_order(const vram_oomchain_t *c, vram_oom_strategy_t s)
{
    for (int i = 0; i < c->cfg.norder; i++)
        if (c->cfg.order[i] == s) return true;
    return false;
}

static void count(vram_oomchain_t *c, vram_oom_strategy_t s, uint64_t freed)
{
    pthread_mutex_lock(&c->lock);
    c->stats.attempts[s]++;
    c->stats.freed_bytes[s] += freed;
    pthread_mutex_unlock(&c->lock);
}

/* The hooks that free memory; 0 when the strategy has nothing to call. */
static uint64_t free_cache(vram_oomchain_t *c, bool inside_pool)
{
    if (c->cfg.free_cache) return c->cfg.free_cache(c->cfg.user);
    uint64_t released = 0;
    /* Inside an allocation the pool has already released its cache. */
    if (c->pool && !inside_pool) vram_pool_trim(c->pool, &released);
    return released;
}

static uint64_t offload(vram_oomchain_t *c, size_t request)
{
    return c->cfg.offload ? c->cfg.offload(c->cfg.user, request) : 0;
}

/* The pool's OOM handler: the strategies that can run inside an allocation. */
static int pool_handler(vram_pool_t *pool, size_t request, void *user)
{
    (void)pool;
    vram_oomchain_t *c = user;
    pthread_mutex_lock(&c->lock);
    c->stats.pool_calls++;
    pthread_mutex_unlock(&c->lock);
    for (int i = 0; i < c->cfg.norder; i++) {
        vram_oom_strategy_t s = c->cfg.order[i];
        if (s != VRAM_OOM_FREE_CACHE && s != VRAM_OOM_OFFLOAD) continue;
        if (s == VRAM_OOM_FREE_CACHE && !c->cfg.free_cache) continue;
        if (s == VRAM_OOM_OFFLOAD && !c->cfg.offload) continue;
        uint64_t freed = s == VRAM_OOM_FREE_CACHE ? free_cache(c, true) : offload(c, request);
        count(c, s, freed);
        if (freed) return 1; /* the pool retries; later strategies wait for the next refusal */
    }
    return 0;
}

int vram_oomchain_attach_pool(vram_oomchain_t *chain, vram_pool_t *pool)
{
    if (!chain || !pool) return vram_fail(VRAM_EINVAL, "OOM chain: NULL argument");
    int rc = vram_pool_add_oom_handler(pool, pool_handler, chain);
    if (!rc) chain->pool = pool;
    return rc;
}

static int parts_size(int batch, int parts)
{
    return (batch + parts - 1) / parts;
}

int vram_oomchain_begin_step(vram_oomchain_t *c, int batch, int *micro_batches)
{
    if (!c) return vram_fail(VRAM_EINVAL, "OOM chain: NULL handle");
    if (batch < 1) return vram_fail(VRAM_EINVAL, "OOM chain: batch must be >= 1, not %d", batch);
    c->in_step = true;
    c->batch = batch;
    c->micro_batches = batch == c->known_batch ? c->known_parts : 1;
    if (c->max_micro && parts_size(batch, c->micro_batches) > c->max_micro)
        c->micro_batches = parts_size(batch, c->max_micro); /* the fewest parts of <= max_micro */
    c->splits = 0;
    c->pos = 0;
    c->last = -1;
    if (micro_batches) *micro_batches = c->micro_batches;
    pthread_mutex_lock(&c->lock);
    c->stats.steps++;
    pthread_mutex_unlock(&c->lock);
    return 0;
}

int vram_oomchain_limit_micro_batch(vram_oomchain_t *c, int max_samples)
{
    if (!c) return vram_fail(VRAM_EINVAL, "OOM chain: NULL handle");
    if (max_samples < 0)
        return vram_fail(VRAM_EINVAL, "OOM chain: max_samples must be >= 0, not %d", max_samples);
    c->max_micro = max_samples;
    return 0;
}

/* Applies strategy s; true when the step should be retried. */
static bool apply(vram_oomchain_t *c, vram_oom_strategy_t s, vram_oom_action_t *a)
{
    switch (s) {
    case VRAM_OOM_FREE_CACHE:
    case VRAM_OOM_OFFLOAD: {
        if (s == VRAM_OOM_FREE_CACHE ? !c->cfg.free_cache && !c->pool : !c->cfg.offload)
            return false;
        uint64_t freed = s == VRAM_OOM_FREE_CACHE ? free_cache(c, false) : offload(c, 0);
        count(c, s, freed);
        a->freed_bytes = freed;
        snprintf(a->message, sizeof a->message, "%s freed %llu bytes; retrying the step",
                 vram_oom_strategy_name(s), (unsigned long long)freed);
        return freed > 0;
    }
    case VRAM_OOM_MICRO_BATCH: {
        int parts = c->micro_batches * 2;
        if (c->splits >= c->cfg.max_splits || parts > c->batch ||
            parts_size(c->batch, parts) < c->cfg.min_micro_batch)
            return false;
        c->micro_batches = parts;
        c->splits++;
        count(c, s, 0);
        snprintf(a->message, sizeof a->message,
                 "retrying the %d samples as %d micro-batches of up to %d with gradient "
                 "accumulation",
                 c->batch, parts, parts_size(c->batch, parts));
        return true;
    }
    default:
        return false;
    }
}

int vram_oomchain_on_oom(vram_oomchain_t *c, vram_oom_action_t *a)
{
    if (!c || !a) return vram_fail(VRAM_EINVAL, "OOM chain: NULL argument");
    if (!c->in_step) return vram_fail(VRAM_ESTATE, "OOM chain: on_oom outside a step");
    memset(a, 0, sizeof *a);
    pthread_mutex_lock(&c->lock);
    c->stats.ooms++;
    pthread_mutex_unlock(&c->lock);
    for (; c->pos < c->cfg.norder; c->pos++) {
        vram_oom_strategy_t s = c->cfg.order[c->pos];
        if (s == VRAM_OOM_CHECKPOINT) break;
        if (apply(c, s, a)) {
            a->strategy = s;
            a->retry = true;
            a->micro_batches = c->micro_batches;
            a->micro_batch_size = parts_size(c->batch, c->micro_batches);
            c->last = (int)s;
            /* micro-batch may apply again on the next OOM; the others once */
            if (s != VRAM_OOM_MICRO_BATCH) c->pos++;
            return 0;
        }
    }
    /* exhausted: checkpoint (when in the chain and possible) and give up */
    c->in_step = false;
    pthread_mutex_lock(&c->lock);
    c->stats.failures++;
    pthread_mutex_unlock(&c->lock);
    a->retry = false;
    a->micro_batches = c->micro_batches;
    a->micro_batch_size = parts_size(c->batch, c->micro_batches);
    char saved[160] = "";
    int rc = -1;
    if (in_order(c, VRAM_OOM_CHECKPOINT) && c->cfg.checkpoint) {
        a->strategy = VRAM_OOM_CHECKPOINT;
        rc = c->cfg.checkpoint(c->cfg.user, saved, sizeof saved);
        count(c, VRAM_OOM_CHECKPOINT, 0);
    }
    if (rc == 0)
        snprintf(a->message, sizeof a->message,
                 "out of memory at batch %d even as %d micro-batches of %d; checkpoint saved "
                 "(%s): resume from it with a smaller batch or on a device with more free memory",
                 c->batch, a->micro_batches, a->micro_batch_size, saved);
    else
        snprintf(a->message, sizeof a->message,
                 "out of memory at batch %d even as %d micro-batches of %d; no checkpoint %s: "
                 "lower the batch size or free device memory",
                 c->batch, a->micro_batches, a->micro_batch_size,
                 rc > 0 || (rc < 0 && c->cfg.checkpoint && in_order(c, VRAM_OOM_CHECKPOINT))
                     ? "could be saved"
                     : "configured");
    return vram_fail(VRAM_ENOMEM, "%s", a->message);
}

int vram_oomchain_end_step(vram_oomchain_t *c)
{
    if (!c) return vram_fail(VRAM_EINVAL, "OOM chain: NULL handle");
    if (!c->in_step) return vram_fail(VRAM_ESTATE, "OOM chain: end_step outside a step");
    c->in_step = false;
    c->known_batch = c->batch;
    c->known_parts = c->micro_batches;
    if (c->last >= 0) {
        pthread_mutex_lock(&c->lock);
        c->stats.recovered[c->last]++;
        pthread_mutex_unlock(&c->lock);
    }
    return 0;
}

int vram_oomchain_stats(vram_oomchain_t *c, vram_oomchain_stats_t *out)
{
    if (!c || !out) return vram_fail(VRAM_EINVAL, "OOM chain: NULL argument");
    pthread_mutex_lock(&c->lock);
    *out = c->stats;
    pthread_mutex_unlock(&c->lock);
    return 0;
}
