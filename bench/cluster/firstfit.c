#include "firstfit.h"

#include <stdlib.h>

int firstfit_init(firstfit_t *f, int nodes)
{
    f->size = 1;
    while (f->size < nodes)
        f->size *= 2;
    f->max = malloc(2 * (size_t)f->size * sizeof *f->max);
    if (!f->max) return -1;
    for (int i = 0; i < 2 * f->size; i++)
        f->max[i] = -1;
    return 0;
}

void firstfit_free(firstfit_t *f)
{
    free(f->max);
    f->max = NULL;
}

void firstfit_set(firstfit_t *f, int node, int64_t free_amount)
{
    int i = f->size + node;
    f->max[i] = free_amount;
    for (i /= 2; i >= 1; i /= 2)
        f->max[i] = f->max[2 * i] > f->max[2 * i + 1] ? f->max[2 * i] : f->max[2 * i + 1];
}

int firstfit_find(const firstfit_t *f, int64_t demand)
{
    if (f->max[1] < demand) return -1;
    int i = 1;
    while (i < f->size)
        i = f->max[2 * i] >= demand ? 2 * i : 2 * i + 1;
    return i - f->size;
}
