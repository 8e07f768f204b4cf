/* The cluster simulation's engine: one job mix (mix.c) on N nodes x 8 GPUs
 * of three sizes under one of four ways of sharing GPUs, with a simulated
 * clock and no processes:
 *
 *   whole       Slurm's default: --gres=gpu:G, whole GPUs by count;
 *   shard       Slurm shards sized to memory (one shard = SHARD_GIB), 1-GPU
 *               jobs ask ceil(estimate / shard) shards of one GPU, multi-GPU
 *               jobs whole GPUs;
 *   vram        Slurm places by a countable gres/vram (MiB per node) and each
 *               node's vramd (libvram's scheduler, one vram_sched_t per node,
 *               the code vramd runs) admits on a GPU by memory, lowering the
 *               batch with accumulation down to a quarter of it;
 *   vram+shard  Slurm shards per GPU, then that node's vramd on the GPUs
 *               Slurm gave.
 *
 * Every job's real peak is its estimate times (1 + the estimator's error);
 * a GPU whose jobs' peaks pass its memory kills the job that arrived last
 * (OOM), which its user resubmits. bench/cluster/README.md has the
 * assumptions. */
#include "cluster_sim.h"
#include "firstfit.h"

#include "vram.h"
#include "sched/sched.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NCLASS    3
#define MAX_LEVEL 8
#define NCAT      (MIX_MAX_TYPES * MAX_LEVEL)
#define GiB       (1024.0 * 1024 * 1024)

static uint64_t SHARD = 8ull << 30; /* one shard's memory */
const char *const strategy_names[NSTRATEGY] = {"whole", "shard", "vram", "vram+shard"};

void cluster_set_shard_bytes(uint64_t bytes)
{
    SHARD = bytes;
}

/* GPU sizes and their share of nodes (README.md: an 80/48/40 GiB mix). */
static const uint64_t class_bytes[NCLASS] = {80ull << 30, 48ull << 30, 40ull << 30};
static int class_of(int node)
{
    static const int pattern[4] = {0, 1, 0, 2}; /* half 80 GiB, a quarter each 48, 40 */
    return pattern[node % 4];
}

typedef struct {
    int cls;
    uint64_t cap;
    int jobs[GPUS_PER_NODE];        /* running jobs per GPU */
    uint64_t actual[GPUS_PER_NODE]; /* their real peaks */
    int shards[GPUS_PER_NODE];      /* free shards (shard) */
    int free_gpus;                  /* GPUs with no job (whole, shard) */
    int64_t free_mib;               /* gres/vram left (vram) */
    vram_sched_t *sched;            /* the node's vramd (vram) */
} node_t;

typedef enum { J_FUTURE, J_PENDING, J_VRAMD_QUEUED, J_RUNNING, J_DONE, J_DROPPED } jstate_t;

typedef struct {
    jstate_t state;
    int level;      /* resubmissions after OOM (or shrinking to fit shards) */
    uint32_t batch; /* per-GPU batch asked this time */
    double ready;   /* when this submission entered the queue */
    double start;
    int node, gpus[GPUS_PER_NODE], ngpus;
    uint64_t actual; /* real peak per GPU this run */
    uint64_t asks;   /* after an OOM seen by vram or shard users: the peak it reported */
    int64_t slurm_mib;
    int64_t vram_id;
    int next; /* next in its category's queue */
} run_t;

typedef struct {
    int head, tail, len;
} fifo_t;

typedef struct {
    double t;
    int job;
} event_t;

static struct sim {
    strategy_t strategy;
    int nnodes, ntypes, njobs;
    node_t *nodes;
    const mix_type_t *types;
    const mix_job_t *jobs;
    run_t *runs;
    fifo_t cat[NCAT];
    firstfit_t fit[NCLASS][2];
    event_t *heap;
    int nheap;
    double now, horizon;
    /* metrics */
    double last_t, util_int, idle_wait_int;
    uint64_t used_total, cap_total;
    int idle_gpus, waiting, in_vramd;
    double vramd_wait_int;
    int ooms, dropped, done, started;
    double *waits;
    int nwaits;
    double slurm_ns, vramd_ns;
    long slurm_decisions, vramd_decisions;
    int *pending_oom;
    int npending_oom;
} S;

static double now_fn(void)
{
    return S.now;
}

/* Slurm places by shards of one GPU (shard, vram+shard). */
static bool sharded(void)
{
    return S.strategy == SHARD_S || S.strategy == VRAM_SHARD;
}

/* Each node's vramd admits what Slurm placed (vram, vram+shard). */
static bool with_vramd(void)
{
    return S.strategy == VRAM || S.strategy == VRAM_SHARD;
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- events ------------------------------------------------------------- */

static void heap_push(double t, int job)
{
    int i = S.nheap++;
    while (i > 0 && S.heap[(i - 1) / 2].t > t) {
        S.heap[i] = S.heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    S.heap[i] = (event_t){t, job};
}

static event_t heap_pop(void)
{
    event_t top = S.heap[0], last = S.heap[--S.nheap];
    int i = 0;
    for (;;) {
        int c = 2 * i + 1;
        if (c >= S.nheap) break;
        if (c + 1 < S.nheap && S.heap[c + 1].t < S.heap[c].t) c++;
        if (S.heap[c].t >= last.t) break;
        S.heap[i] = S.heap[c];
        i = c;
    }
    S.heap[i] = last;
    return top;
}

/* Integrates the metrics up to t (the arrival window only). */
static void advance(double t)
{
    double a = fmin(S.last_t, S.horizon), b = fmin(t, S.horizon);
    if (b > a) {
        S.util_int += (double)S.used_total * (b - a);
        if (S.waiting > 0) S.idle_wait_int += S.idle_gpus * (b - a);
        if (S.in_vramd > 0) S.vramd_wait_int += S.idle_gpus * (b - a);
    }
    S.last_t = t;
    S.now = t;
}

/* ---- the demand of a queued submission ---------------------------------- */

static int cat_of(const run_t *r, int job)
{
    return S.jobs[job].type * MAX_LEVEL + r->level;
}

static const mix_type_t *type_of(int job)
{
    return &S.types[S.jobs[job].type];
}

static uint32_t min_batch(const mix_type_t *t);

static uint64_t need(int job)
{
    return S.runs[job].asks ? S.runs[job].asks : mix_mem_at(type_of(job), S.runs[job].batch);
}

/* The least memory per GPU the job can start with. */
static uint64_t least(int job)
{
    const mix_type_t *t = type_of(job);
    return S.runs[job].asks ? S.runs[job].asks : mix_mem_at(t, min_batch(t));
}

/* The smallest batch vram may lower to: a quarter of the asked one. */
static uint32_t min_batch(const mix_type_t *t)
{
    return t->batch >= 4 ? t->batch / 4 : 1;
}

static int full_shards(uint64_t cap);

static int shards_of(int job)
{
    int n = (int)((need(job) + SHARD - 1) / SHARD);
    /* vram+shard: a job bigger than any GPU asks the largest whole; vramd lowers its batch */
    if (S.strategy == VRAM_SHARD && n > full_shards(class_bytes[0]))
        n = full_shards(class_bytes[0]);
    return n;
}

static int64_t mib_of(int job)
{
    uint64_t usable_max = (uint64_t)(0.95 * (double)class_bytes[0]);
    uint64_t per = need(job) < usable_max ? need(job) : usable_max;
    return (int64_t)(per >> 20) * type_of(job)->gpus;
}

/* Does a job of category a need at least what one of category b needs, so
 * that b not fitting anywhere means a does not either? */
static bool dominates(int a_job, int b_job)
{
    const mix_type_t *a = type_of(a_job), *b = type_of(b_job);
    switch (S.strategy) {
    case WHOLE:
        return a->gpus >= b->gpus;
    case SHARD_S:
    case VRAM_SHARD:
        if ((a->gpus > 1) != (b->gpus > 1)) return false;
        return a->gpus > 1 ? a->gpus >= b->gpus : shards_of(a_job) >= shards_of(b_job);
    case VRAM:
        (void)a, (void)b;
        return mib_of(a_job) >= mib_of(b_job) && least(a_job) >= least(b_job);
    case NSTRATEGY:
        break;
    }
    return false;
}

/* ---- nodes: what Slurm's select sees ------------------------------------- */

/* A GPU's shards: its memory, or under vram+shard what vramd hands out
 * (less its 5% margin), as gres/vram counts. */
static int full_shards(uint64_t cap)
{
    uint64_t mem = S.strategy == VRAM_SHARD ? (uint64_t)(0.95 * (double)cap) : cap;
    return (int)(mem / SHARD);
}

static void refresh(int n)
{
    node_t *nd = &S.nodes[n];
    int64_t best_shards = 0;
    for (int g = 0; g < GPUS_PER_NODE; g++)
        if (nd->shards[g] > best_shards) best_shards = nd->shards[g];
    int64_t metric0 = S.strategy == WHOLE  ? nd->free_gpus
                      : S.strategy == VRAM ? nd->free_mib
                                           : best_shards;
    firstfit_set(&S.fit[nd->cls][0], n, metric0);
    if (sharded()) firstfit_set(&S.fit[nd->cls][1], n, nd->free_gpus);
}

/* The lowest-numbered node that can take the job now, or -1. */
static int select_node(int job)
{
    const mix_type_t *t = type_of(job);
    int best = -1;
    for (int c = 0; c < NCLASS; c++) {
        int64_t demand;
        int tree = 0;
        if (S.strategy == WHOLE) {
            demand = t->gpus;
        } else if (sharded()) {
            if (t->gpus > 1) {
                /* vram+shard: --constraint keeps whole-GPU jobs off GPUs they never fit */
                if (S.strategy == VRAM_SHARD &&
                    least(job) > (uint64_t)(0.95 * (double)class_bytes[c]))
                    continue;
                demand = t->gpus;
                tree = 1;
            } else {
                demand = shards_of(job);
                if (demand > full_shards(class_bytes[c])) continue;
            }
        } else {
            /* --constraint on GPU size: the smallest batch must fit a GPU. */
            if (least(job) > (uint64_t)(0.95 * (double)class_bytes[c])) continue;
            demand = mib_of(job);
        }
        int n = firstfit_find(&S.fit[c][tree], demand);
        if (n >= 0 && (best < 0 || n < best)) best = n;
    }
    return best;
}

/* ---- running and ending ------------------------------------------------- */

static void occupy(int job, int node, const int *gpus, int ngpus, uint64_t per_gpu_estimate)
{
    run_t *r = &S.runs[job];
    node_t *nd = &S.nodes[node];
    r->node = node;
    r->ngpus = ngpus;
    r->actual = (uint64_t)((double)per_gpu_estimate * (1 + S.jobs[job].error));
    r->start = S.now;
    r->state = J_RUNNING;
    S.started++;
    for (int k = 0; k < ngpus; k++) {
        int g = r->gpus[k] = gpus[k];
        if (nd->jobs[g]++ == 0) S.idle_gpus--;
        nd->actual[g] += r->actual;
        S.used_total += r->actual;
    }
}

static void vacate(int job)
{
    run_t *r = &S.runs[job];
    node_t *nd = &S.nodes[r->node];
    for (int k = 0; k < r->ngpus; k++) {
        int g = r->gpus[k];
        if (--nd->jobs[g] == 0) S.idle_gpus++;
        nd->actual[g] -= r->actual;
        S.used_total -= r->actual;
    }
}

static bool over_memory(int job)
{
    const run_t *r = &S.runs[job];
    const node_t *nd = &S.nodes[r->node];
    for (int k = 0; k < r->ngpus; k++)
        if (nd->actual[r->gpus[k]] > nd->cap) return true;
    return false;
}

static void enqueue(int job)
{
    run_t *r = &S.runs[job];
    fifo_t *q = &S.cat[cat_of(r, job)];
    r->next = -1;
    r->state = J_PENDING;
    r->ready = S.now;
    if (q->len++ == 0)
        q->head = job;
    else
        S.runs[q->tail].next = job;
    q->tail = job;
    S.waiting++;
}

static int dequeue(int cat)
{
    fifo_t *q = &S.cat[cat];
    int job = q->head;
    q->head = S.runs[job].next;
    q->len--;
    S.waiting--;
    return job;
}

/* A submission with a smaller batch: after OOM, or to fit shards at all. */
static void shrink_and_requeue(int job, uint32_t from_batch)
{
    run_t *r = &S.runs[job];
    if (from_batch <= 1 || r->level + 1 >= MAX_LEVEL) {
        r->state = J_DROPPED;
        S.dropped++;
        return;
    }
    r->level++;
    r->batch = from_batch / 2;
    enqueue(job);
}

/* After an OOM: a job that was alone on its GPUs was too big for them, and
 * its user halves the batch; one that shared a GPU (shard, vram) is
 * resubmitted asking for the peak it reached (the job's own report). */
static void retry(int job, uint32_t batch)
{
    run_t *r = &S.runs[job];
    bool alone = true;
    for (int k = 0; k < r->ngpus; k++)
        if (S.nodes[r->node].actual[r->gpus[k]] > 0) alone = false;
    if (alone || S.strategy == WHOLE || r->actual <= need(job)) {
        shrink_and_requeue(job, batch);
        return;
    }
    r->asks = r->actual;
    r->level = r->level + 1 < MAX_LEVEL ? r->level + 1 : r->level;
    enqueue(job);
}

/* Slurm frees what the job held. */
static void release_slurm(int job)
{
    run_t *r = &S.runs[job];
    node_t *nd = &S.nodes[r->node];
    if (S.strategy == VRAM) {
        nd->free_mib += r->slurm_mib;
    } else if (sharded() && type_of(job)->gpus == 1) {
        nd->shards[r->gpus[0]] += shards_of(job);
        if (nd->shards[r->gpus[0]] == full_shards(nd->cap)) nd->free_gpus++;
    } else {
        for (int k = 0; k < r->ngpus; k++) {
            nd->free_gpus++;
            if (sharded()) nd->shards[r->gpus[k]] = full_shards(nd->cap);
        }
    }
    refresh(r->node);
}

static void record_start(int job)
{
    S.waits[S.nwaits++] = S.now - S.jobs[job].arrival;
    heap_push(S.now + S.jobs[job].duration, job);
}

static void submit_vramd(int job, int node, const int *pinned, int npinned);

/* whole and shard: Slurm's choice is the GPU; the job runs at once. */
static void start_direct(int job, int node)
{
    run_t *r = &S.runs[job];
    node_t *nd = &S.nodes[node];
    const mix_type_t *t = type_of(job);
    int gpus[GPUS_PER_NODE], n = 0;
    if (sharded() && t->gpus == 1) {
        int want = shards_of(job), g_best = -1;
        for (int g = 0; g < GPUS_PER_NODE; g++) /* the first GPU with the shards */
            if (nd->shards[g] >= want) {
                g_best = g;
                break;
            }
        if (nd->shards[g_best] == full_shards(nd->cap)) nd->free_gpus--;
        nd->shards[g_best] -= want;
        gpus[n++] = g_best;
    } else {
        for (int g = 0; g < GPUS_PER_NODE && n < t->gpus; g++)
            if (S.strategy == WHOLE ? nd->jobs[g] == 0 : nd->shards[g] == full_shards(nd->cap)) {
                gpus[n++] = g;
                if (sharded()) nd->shards[g] = 0;
            }
        nd->free_gpus -= n;
    }
    refresh(node);
    if (S.strategy == VRAM_SHARD) { /* vramd admits on the GPUs Slurm gave */
        submit_vramd(job, node, gpus, n);
        return;
    }
    occupy(job, node, gpus, n, need(job));
    if (over_memory(job)) { /* dies at its first step */
        S.ooms++;
        vacate(job);
        release_slurm(job);
        retry(job, r->batch);
        return;
    }
    record_start(job);
}

/* vram: vramd's admissions arrive here (after each vram_sched_* call). */
static void on_event(void *arg, const vram_job_t *job, const char *kind, const char *message)
{
    (void)arg, (void)message;
    if (strcmp(kind, "admitted") != 0) return;
    int i = atoi(job->req.name);
    run_t *r = &S.runs[i];
    if (r->state == J_VRAMD_QUEUED) S.waiting--, S.in_vramd--;
    r->vram_id = job->id;
    occupy(i, r->node, job->devices, job->ndevices, job->reserved_bytes);
    if (over_memory(i)) /* ended after the call that admitted it returns */
        S.pending_oom[S.npending_oom++] = i;
    else
        record_start(i);
}

static void vramd_finish(int node, int64_t id, int status)
{
    uint64_t t0 = now_ns();
    if (vram_sched_finish(S.nodes[node].sched, id, 0, status, NULL) != 0) {
        fprintf(stderr, "vram_sched_finish: %s\n", vram_last_error());
        exit(1);
    }
    S.vramd_ns += (double)(now_ns() - t0);
    S.vramd_decisions++;
}

static void handle_vram_ooms(void)
{
    while (S.npending_oom > 0) {
        int job = S.pending_oom[--S.npending_oom];
        run_t *r = &S.runs[job];
        S.ooms++;
        vacate(job);
        release_slurm(job);
        uint32_t granted = r->batch; /* what vramd granted is in its record */
        vram_job_t vj;
        if (vram_sched_job(S.nodes[r->node].sched, r->vram_id, &vj) == 0 && vj.granted_batch)
            granted = vj.granted_batch;
        vramd_finish(r->node, r->vram_id, 137);
        retry(job, granted);
    }
}

/* The step's registration with the node's vramd: pinned to the GPUs Slurm
 * gave (npinned > 0), else vramd chooses. */
static void submit_vramd(int job, int node, const int *pinned, int npinned)
{
    run_t *r = &S.runs[job];
    node_t *nd = &S.nodes[node];
    const mix_type_t *t = type_of(job);
    r->node = node;
    vram_job_request_t req;
    memset(&req, 0, sizeof req);
    snprintf(req.name, sizeof req.name, "%d", job);
    req.mem_bytes = r->asks ? r->asks : t->mem;
    req.gpus = t->gpus;
    req.npinned = npinned;
    for (int k = 0; k < npinned; k++)
        req.pinned[k] = pinned[k];
    req.timeout_s = 0;
    req.batch_size = r->asks ? 0 : t->batch;
    req.min_batch_size = r->asks ? 0 : min_batch(t);
    for (int i = 0; !r->asks && i < t->ntable; i++)
        if (t->table[i].batch >= req.min_batch_size)
            req.batch_bytes[req.nbatch_bytes++] = t->table[i];
    if (!r->asks && r->batch < t->batch)
        req.max_batch_size = r->batch > req.min_batch_size ? r->batch : req.min_batch_size;
    r->state = J_VRAMD_QUEUED; /* until on_event says admitted */
    S.waiting++;
    S.in_vramd++;
    vram_job_t out;
    uint64_t t0 = now_ns();
    int rc = vram_sched_submit(nd->sched, &req, &out);
    S.vramd_ns += (double)(now_ns() - t0);
    S.vramd_decisions++;
    if (rc != 0) {
        fprintf(stderr, "vramd of node %d refused job %d (%s): %s\n", node, job, t->label,
                vram_last_error());
        exit(1);
    }
    handle_vram_ooms();
}

static void start_vram(int job, int node)
{
    S.runs[job].slurm_mib = mib_of(job);
    S.nodes[node].free_mib -= S.runs[job].slurm_mib;
    refresh(node);
    submit_vramd(job, node, NULL, 0);
}

/* ---- Slurm's pass: FIFO by submission, any job that fits starts ---------- */

static void slurm_pass(void)
{
    bool failed[NCAT] = {false};
    for (;;) {
        int best = -1;
        for (int c = 0; c < NCAT; c++) {
            if (!S.cat[c].len || failed[c]) continue;
            int head = S.cat[c].head;
            bool blocked = false;
            for (int f = 0; f < NCAT && !blocked; f++)
                if (failed[f] && S.cat[f].len && dominates(head, S.cat[f].head)) blocked = true;
            if (blocked) {
                failed[c] = true;
                continue;
            }
            if (best < 0 || S.runs[head].ready < S.runs[S.cat[best].head].ready) best = c;
        }
        if (best < 0) return;
        int job = S.cat[best].head;
        uint64_t t0 = now_ns();
        int node = select_node(job);
        S.slurm_ns += (double)(now_ns() - t0);
        S.slurm_decisions++;
        if (node < 0) {
            failed[best] = true;
            continue;
        }
        dequeue(best);
        if (S.strategy == VRAM)
            start_vram(job, node);
        else
            start_direct(job, node);
    }
}

static void job_ended(int job)
{
    run_t *r = &S.runs[job];
    if (r->state != J_RUNNING) return;
    vacate(job);
    release_slurm(job);
    r->state = J_DONE;
    S.done++;
    if (with_vramd()) {
        vramd_finish(r->node, r->vram_id, 0);
        handle_vram_ooms();
    }
}

/* Under a shard split the user sizes the request: a job bigger than any GPU
 * is resubmitted at half the batch until it fits (not an OOM). */
static void arrive(int job)
{
    run_t *r = &S.runs[job];
    r->batch = type_of(job)->batch;
    r->level = 0;
    while (S.strategy == SHARD_S && type_of(job)->gpus == 1 && need(job) > class_bytes[0] &&
           r->batch > 1 && r->level + 1 < MAX_LEVEL) {
        r->batch /= 2;
        r->level++;
    }
    enqueue(job);
}

/* ---- one run ---------------------------------------------------------- */

static int dev_count(void *arg)
{
    (void)arg;
    return GPUS_PER_NODE;
}

static int dev_info(void *arg, int i, vram_device_info_t *o)
{
    const node_t *nd = arg;
    snprintf(o->name, sizeof o->name, "sim-%.0fGiB-%d", (double)nd->cap / GiB, i);
    o->total_bytes = nd->cap;
    o->used_bytes = 0; /* every byte in use belongs to a job vramd admitted */
    o->free_bytes = nd->cap;
    o->health = VRAM_HEALTH_AVAILABLE;
    return 0;
}

static int by_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double quantile(double *v, int n, double q)
{
    if (n == 0) return 0;
    int i = (int)ceil(q * n) - 1;
    return v[i < 0 ? 0 : i];
}

int cluster_run(strategy_t strategy, int nnodes, const mix_type_t *types, int ntypes,
                const mix_job_t *jobs, int njobs, double hours, result_t *res)
{
    memset(&S, 0, sizeof S);
    S.strategy = strategy;
    S.nnodes = nnodes;
    S.types = types;
    S.ntypes = ntypes;
    S.jobs = jobs;
    S.njobs = njobs;
    S.horizon = hours * 3600;
    S.nodes = calloc((size_t)nnodes, sizeof *S.nodes);
    S.runs = calloc((size_t)njobs, sizeof *S.runs);
    S.heap = malloc((size_t)njobs * sizeof *S.heap);
    S.waits = malloc((size_t)njobs * sizeof *S.waits);
    S.pending_oom = malloc((size_t)njobs * sizeof *S.pending_oom);
    if (!S.nodes || !S.runs || !S.heap || !S.waits || !S.pending_oom) return -1;
    for (int c = 0; c < NCLASS; c++)
        for (int k = 0; k < 2; k++)
            if (firstfit_init(&S.fit[c][k], nnodes) != 0) return -1;
    vram_sched_devices_t *sources = calloc((size_t)nnodes, sizeof *sources);
    if (!sources) return -1;
    for (int n = 0; n < nnodes; n++) {
        node_t *nd = &S.nodes[n];
        nd->cls = class_of(n);
        nd->cap = class_bytes[nd->cls];
        nd->free_gpus = GPUS_PER_NODE;
        /* the node's Gres=vram: what vramd can hand out (total less its 5% margin) */
        nd->free_mib = (int64_t)((uint64_t)(0.95 * (double)nd->cap) >> 20) * GPUS_PER_NODE;
        for (int g = 0; g < GPUS_PER_NODE; g++)
            nd->shards[g] = full_shards(nd->cap);
        S.cap_total += nd->cap * GPUS_PER_NODE;
        S.idle_gpus += GPUS_PER_NODE;
        if (strategy == VRAM || strategy == VRAM_SHARD) {
            sources[n] = (vram_sched_devices_t){dev_count, dev_info, NULL, nd};
            vram_sched_config_t cfg;
            memset(&cfg, 0, sizeof cfg);
            cfg.devices = &sources[n];
            cfg.db_path = ":memory:";
            snprintf(cfg.safety_margin, sizeof cfg.safety_margin, "0.05"); /* vramd's default */
            cfg.placement = VRAM_PLACE_BEST_FIT;
            cfg.backfill = true;
            cfg.clock = now_fn;
            cfg.kill_grace_s = -1;
            cfg.on_event = on_event;
            if (vram_sched_open(&cfg, &nd->sched) != 0) {
                fprintf(stderr, "vram_sched_open (node %d): %s\n", n, vram_last_error());
                return -1;
            }
        }
        refresh(n);
    }
    int next = 0;
    while (next < njobs || S.nheap > 0) {
        double t = next < njobs ? jobs[next].arrival : INFINITY;
        if (S.nheap > 0 && S.heap[0].t < t) t = S.heap[0].t;
        advance(t);
        while (S.nheap > 0 && S.heap[0].t <= t)
            job_ended(heap_pop().job);
        while (next < njobs && jobs[next].arrival <= t)
            arrive(next++);
        slurm_pass();
    }
    qsort(S.waits, (size_t)S.nwaits, sizeof *S.waits, by_double);
    double sum = 0;
    for (int i = 0; i < S.nwaits; i++)
        sum += S.waits[i];
    *res = (result_t){
        .util = S.util_int / ((double)S.cap_total * S.horizon),
        .idle_wait = S.idle_wait_int / ((double)nnodes * GPUS_PER_NODE * S.horizon),
        .idle_vramd_wait = S.vramd_wait_int / ((double)nnodes * GPUS_PER_NODE * S.horizon),
        .wait_p50 = quantile(S.waits, S.nwaits, 0.5),
        .wait_p99 = quantile(S.waits, S.nwaits, 0.99),
        .wait_mean = S.nwaits ? sum / S.nwaits : 0,
        .ooms = S.ooms,
        .dropped = S.dropped,
        .done = S.done,
        .started = S.nwaits,
        .unstarted = njobs - S.done - S.dropped,
        .slurm_us = S.slurm_decisions ? S.slurm_ns / S.slurm_decisions / 1e3 : 0,
        .vramd_us = S.vramd_decisions ? S.vramd_ns / S.vramd_decisions / 1e3 : 0,
    };
    for (int n = 0; n < nnodes; n++) {
        if (S.nodes[n].sched && vram_sched_check(S.nodes[n].sched) != 0) {
            fprintf(stderr, "node %d: ledger invariant broken: %s\n", n, vram_last_error());
            return -1;
        }
        vram_sched_close(S.nodes[n].sched);
    }
    for (int c = 0; c < NCLASS; c++)
        for (int k = 0; k < 2; k++)
            firstfit_free(&S.fit[c][k]);
    free(sources);
    free(S.nodes);
    free(S.runs);
    free(S.heap);
    free(S.waits);
    free(S.pending_oom);
    return 0;
}
