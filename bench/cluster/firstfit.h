/* First fit over nodes in index order, as Slurm's node selection does with
 * equal node weights: the lowest-numbered node whose free amount is at least
 * the demand, in O(log nodes) through a max segment tree. */
#ifndef BENCH_CLUSTER_FIRSTFIT_H
#define BENCH_CLUSTER_FIRSTFIT_H

#include <stdint.h>

typedef struct {
    int size; /* leaves, a power of two >= nodes */
    int64_t *max;
} firstfit_t;

int firstfit_init(firstfit_t *f, int nodes); /* every node at -1 (never fits) */
void firstfit_free(firstfit_t *f);
void firstfit_set(firstfit_t *f, int node, int64_t free_amount);
/* The lowest node with free >= demand, or -1. */
int firstfit_find(const firstfit_t *f, int64_t demand);

#endif
