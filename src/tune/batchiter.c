/* Adaptive batch iterator: the batch policy (halve above the high mark,
 * double below the low mark up to the initial batch, checked every
 * check_every samples) and the bookkeeping that hands every sample index out
 * until it is committed exactly once: indices of a failed batch go back to
 * the front of the line, never lost and never committed twice. */
#include "vram.h"

#include "core/array.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    uint64_t id;
    uint64_t *idx;
    size_t n;
} pending_t;

struct vram_batchiter {
    vram_batchiter_config_t cfg;
    uint64_t length, cursor; /* indices below cursor have been handed out at least once */
    int batch;
    uint64_t *queue; /* returned indices, handed out first, in order */
    size_t queue_len, queue_cap;
    pending_t *pending;
    size_t npending, pending_cap;
    uint64_t next_id;
    uint64_t handed_out, committed, returned, since_check, checks, nchanges;
    vram_batchiter_change_t log[VRAM_BATCHITER_LOG];
};

void vram_batchiter_config_init(vram_batchiter_config_t *cfg, int initial_batch)
{
    *cfg = (vram_batchiter_config_t){
        .initial_batch = initial_batch,
        .min_batch = 1,
        .check_every = 10,
        .high_mark = 0.85,
        .low_mark = 0.50,
    };
}

static int check_config(const vram_batchiter_config_t *c)
{
    if (c->initial_batch < 1 || c->initial_batch > (1 << 24))
        return vram_fail(VRAM_EINVAL, "batch iterator: initial_batch must be in 1..%d, not %d",
                         1 << 24, c->initial_batch);
    if (c->min_batch < 1 || c->min_batch > c->initial_batch)
        return vram_fail(VRAM_EINVAL,
                         "batch iterator: min_batch must be in 1..initial_batch (%d), not %d",
                         c->initial_batch, c->min_batch);
    if (c->check_every < 1)
        return vram_fail(VRAM_EINVAL, "batch iterator: check_every must be >= 1, not %d",
                         c->check_every);
    if (!(c->low_mark >= 0 && c->low_mark < c->high_mark && c->high_mark <= 1))
        return vram_fail(VRAM_EINVAL,
                         "batch iterator: marks must satisfy 0 <= low_mark < high_mark <= 1, not "
                         "low %g high %g",
                         c->low_mark, c->high_mark);
    return 0;
}

int vram_batchiter_create(const vram_batchiter_config_t *cfg, uint64_t length,
                          vram_batchiter_t **out)
{
    if (!cfg || !out) return vram_fail(VRAM_EINVAL, "batch iterator: NULL argument");
    int rc = check_config(cfg);
    if (rc) return rc;
    vram_batchiter_t *it = calloc(1, sizeof *it);
    if (!it) return vram_fail(VRAM_ENOMEM, "batch iterator: out of memory");
    it->cfg = *cfg;
    it->length = length;
    it->batch = cfg->initial_batch;
    it->since_check = (uint64_t)cfg->check_every; /* a reading before the first batch */
    it->next_id = 1;
    *out = it;
    return 0;
}

void vram_batchiter_destroy(vram_batchiter_t *it)
{
    if (!it) return;
    for (size_t i = 0; i < it->npending; i++)
        free(it->pending[i].idx);
    free(it->pending);
    free(it->queue);
    free(it);
}

bool vram_batchiter_check_due(const vram_batchiter_t *it)
{
    return it && it->since_check >= (uint64_t)it->cfg.check_every;
}

static void change(vram_batchiter_t *it, int to, double usage, vram_batchiter_reason_t why)
{
    if (to == it->batch) return;
    it->log[it->nchanges % VRAM_BATCHITER_LOG] = (vram_batchiter_change_t){
        .sample = it->handed_out,
        .old_batch = it->batch,
        .new_batch = to,
        .usage = usage,
        .reason = why,
    };
    it->nchanges++;
    it->batch = to;
}

static int halved(const vram_batchiter_t *it)
{
    int h = it->batch / 2;
    return h < it->cfg.min_batch ? it->cfg.min_batch : h;
}

static void apply_reading(vram_batchiter_t *it, double usage)
{
    it->checks++;
    it->since_check = 0;
    if (usage > it->cfg.high_mark) {
        change(it, halved(it), usage, VRAM_BATCHITER_HIGH);
    } else if (usage < it->cfg.low_mark) {
        int d = it->batch > it->cfg.initial_batch / 2 ? it->cfg.initial_batch : it->batch * 2;
        change(it, d, usage, VRAM_BATCHITER_LOW);
    }
}

int vram_batchiter_next(vram_batchiter_t *it, double usage, uint64_t *idx, size_t cap, size_t *n,
                        uint64_t *batch_id)
{
    if (!it || !idx || !n || !batch_id)
        return vram_fail(VRAM_EINVAL, "batch iterator: NULL argument");
    if (cap < (size_t)it->cfg.initial_batch)
        return vram_fail(VRAM_EINVAL, "batch iterator: room for %zu indices, need %d", cap,
                         it->cfg.initial_batch);
    if (vram_batchiter_check_due(it) && usage >= 0 && isfinite(usage)) apply_reading(it, usage);
    if (it->npending == it->pending_cap) {
        pending_t *p = vram_array_grow(it->pending, &it->pending_cap, sizeof *p, 4);
        if (!p) return vram_fail(VRAM_ENOMEM, "batch iterator: out of memory");
        it->pending = p;
    }
    size_t want = (size_t)it->batch, got = 0;
    while (got < want && got < it->queue_len)
        idx[got] = it->queue[got], got++;
    size_t from_queue = got;
    while (got < want && it->cursor + (got - from_queue) < it->length)
        idx[got] = it->cursor + (got - from_queue), got++;
    *n = got;
    *batch_id = 0;
    if (got == 0) return 0;
    uint64_t *copy = malloc(got * sizeof *copy);
    if (!copy) return vram_fail(VRAM_ENOMEM, "batch iterator: out of memory");
    memcpy(copy, idx, got * sizeof *copy);
    /* committed from here on: nothing below can fail */
    if (from_queue) {
        memmove(it->queue, it->queue + from_queue,
                (it->queue_len - from_queue) * sizeof *it->queue);
        it->queue_len -= from_queue;
    }
    it->cursor += got - from_queue;
    it->pending[it->npending++] = (pending_t){it->next_id, copy, got};
    *batch_id = it->next_id++;
    it->handed_out += got;
    it->since_check += got;
    return 0;
}

/* The pending batch `id`, or NULL with ENOENT recorded (or EINVAL). */
static pending_t *find(vram_batchiter_t *it, uint64_t id, size_t *pos)
{
    if (!it) {
        vram_fail(VRAM_EINVAL, "batch iterator: NULL handle");
        return NULL;
    }
    for (size_t i = 0; i < it->npending; i++)
        if (it->pending[i].id == id) {
            *pos = i;
            return &it->pending[i];
        }
    vram_fail(VRAM_ENOENT, "batch iterator: no pending batch %llu", (unsigned long long)id);
    return NULL;
}

static void drop_pending(vram_batchiter_t *it, size_t pos)
{
    free(it->pending[pos].idx);
    memmove(&it->pending[pos], &it->pending[pos + 1],
            (it->npending - pos - 1) * sizeof it->pending[0]);
    it->npending--;
}

int vram_batchiter_done(vram_batchiter_t *it, uint64_t batch_id)
{
    size_t pos;
    pending_t *p = find(it, batch_id, &pos);
    if (!p) return it ? VRAM_ENOENT : VRAM_EINVAL;
    it->committed += p->n;
    drop_pending(it, pos);
    return 0;
}

int vram_batchiter_failed(vram_batchiter_t *it, uint64_t batch_id)
{
    size_t pos;
    pending_t *p = find(it, batch_id, &pos);
    if (!p) return it ? VRAM_ENOENT : VRAM_EINVAL;
    if (it->queue_len + p->n > it->queue_cap) {
        size_t c = it->queue_cap ? it->queue_cap : 16;
        while (c < it->queue_len + p->n)
            c *= 2;
        uint64_t *q = realloc(it->queue, c * sizeof *q);
        if (!q) return vram_fail(VRAM_ENOMEM, "batch iterator: out of memory");
        it->queue = q;
        it->queue_cap = c;
    }
    /* to the front, in their order: the retry sees the same samples first */
    if (it->queue_len) memmove(it->queue + p->n, it->queue, it->queue_len * sizeof *it->queue);
    memcpy(it->queue, p->idx, p->n * sizeof *it->queue);
    it->queue_len += p->n;
    it->returned += p->n;
    drop_pending(it, pos);
    change(it, halved(it), 0, VRAM_BATCHITER_FAIL);
    return 0;
}

int vram_batchiter_set_batch(vram_batchiter_t *it, int batch)
{
    if (!it) return vram_fail(VRAM_EINVAL, "batch iterator: NULL handle");
    int b = batch < it->cfg.min_batch       ? it->cfg.min_batch
            : batch > it->cfg.initial_batch ? it->cfg.initial_batch
                                            : batch;
    change(it, b, 0, VRAM_BATCHITER_SET);
    return 0;
}

int vram_batchiter_set_length(vram_batchiter_t *it, uint64_t length)
{
    if (!it) return vram_fail(VRAM_EINVAL, "batch iterator: NULL handle");
    if (length > it->cursor) {
        if (it->length != UINT64_MAX && length != it->length)
            return vram_fail(VRAM_EINVAL, "batch iterator: length is already %llu",
                             (unsigned long long)it->length);
        it->length = length;
        return 0;
    }
    /* The iterable ended inside what was handed out: indices from `length`
     * on never existed. Only fresh indices can be past it (returned ones were
     * real samples), so they are dropped from the pending batches. */
    for (size_t i = 0; i < it->queue_len; i++)
        if (it->queue[i] >= length)
            return vram_fail(VRAM_EINVAL, "batch iterator: sample %llu was already returned",
                             (unsigned long long)it->queue[i]);
    for (size_t i = it->npending; i-- > 0;) {
        pending_t *p = &it->pending[i];
        size_t kept = 0;
        for (size_t j = 0; j < p->n; j++)
            if (p->idx[j] < length) p->idx[kept++] = p->idx[j];
        it->handed_out -= p->n - kept;
        p->n = kept;
        if (kept == 0) drop_pending(it, i); /* nothing real was in it: closed */
    }
    it->cursor = length;
    it->length = length;
    return 0;
}

bool vram_batchiter_finished(const vram_batchiter_t *it)
{
    return it && it->length != UINT64_MAX && it->cursor == it->length && it->queue_len == 0 &&
           it->npending == 0;
}

int vram_batchiter_stats(const vram_batchiter_t *it, vram_batchiter_stats_t *out)
{
    if (!it || !out) return vram_fail(VRAM_EINVAL, "batch iterator: NULL argument");
    memset(out, 0, sizeof *out);
    out->batch = it->batch;
    out->handed_out = it->handed_out;
    out->committed = it->committed;
    out->returned = it->returned;
    for (size_t i = 0; i < it->npending; i++)
        out->pending += it->pending[i].n;
    out->checks = it->checks;
    out->nchanges = it->nchanges;
    uint64_t first = it->nchanges > VRAM_BATCHITER_LOG ? it->nchanges - VRAM_BATCHITER_LOG : 0;
    for (uint64_t i = first; i < it->nchanges; i++)
        out->log[out->nlog++] = it->log[i % VRAM_BATCHITER_LOG];
    return 0;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

int vram_batchiter_check(const vram_batchiter_t *it)
{
    if (!it) return vram_fail(VRAM_EINVAL, "batch iterator: NULL handle");
    uint64_t pending = 0;
    for (size_t i = 0; i < it->npending; i++)
        pending += it->pending[i].n;
    if (it->handed_out != it->committed + it->returned + pending)
        return vram_fail(VRAM_ESTATE,
                         "batch iterator: handed out %llu != committed %llu + returned "
                         "%llu + pending %llu",
                         (unsigned long long)it->handed_out, (unsigned long long)it->committed,
                         (unsigned long long)it->returned, (unsigned long long)pending);
    if (it->committed + pending + it->queue_len != it->cursor)
        return vram_fail(VRAM_ESTATE,
                         "batch iterator: %llu indices handed out but %llu accounted for",
                         (unsigned long long)it->cursor,
                         (unsigned long long)(it->committed + pending + it->queue_len));
    if (it->batch < it->cfg.min_batch || it->batch > it->cfg.initial_batch)
        return vram_fail(VRAM_ESTATE, "batch iterator: batch %d outside %d..%d", it->batch,
                         it->cfg.min_batch, it->cfg.initial_batch);
    /* no index twice among the pending and queued ones, all below the cursor */
    size_t n = (size_t)(pending + it->queue_len);
    uint64_t *all = malloc((n ? n : 1) * sizeof *all);
    if (!all) return vram_fail(VRAM_ENOMEM, "batch iterator: out of memory");
    size_t k = 0;
    for (size_t i = 0; i < it->npending; i++)
        for (size_t j = 0; j < it->pending[i].n; j++)
            all[k++] = it->pending[i].idx[j];
    for (size_t i = 0; i < it->queue_len; i++)
        all[k++] = it->queue[i];
    int rc = 0;
    for (size_t i = 0; i < n && !rc; i++) {
        if (all[i] >= it->cursor)
            rc = vram_fail(VRAM_ESTATE, "batch iterator: index %llu at or past the cursor %llu",
                           (unsigned long long)all[i], (unsigned long long)it->cursor);
    }
    if (!rc && n > 1) {
        qsort(all, n, sizeof *all, cmp_u64);
        for (size_t i = 1; i < n && !rc; i++)
            if (all[i] == all[i - 1])
                rc = vram_fail(VRAM_ESTATE,
                               "batch iterator: index %llu both pending or queued twice",
                               (unsigned long long)all[i]);
    }
    free(all);
    return rc;
}

const char *vram_batchiter_reason_name(vram_batchiter_reason_t r)
{
    static const char *const names[] = {"high", "low", "fail", "set"};
    return (unsigned)r < sizeof names / sizeof names[0] ? names[r] : "?";
}
