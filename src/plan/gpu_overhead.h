/* CUDA context, workspaces and the allocator model (gpu_overhead.c).
 * Internal to src/plan. */
#ifndef VRAM_PLAN_GPU_OVERHEAD_H
#define VRAM_PLAN_GPU_OVERHEAD_H

#include "vram.h"

bool vram_gpu_lazy_loading(const vram_estimate_config_t *c);
/* Bytes of the CUDA context and loaded kernels (outside the allocator). */
double vram_gpu_context_bytes(const vram_estimate_config_t *c);
/* Bytes of cuBLAS workspaces (allocated through the caching allocator). */
double vram_gpu_workspace_bytes(const vram_estimate_config_t *c);

/* The live tensors at the peak, carved into segments like the pool does. */
typedef struct {
    double allocated; /* exact bytes requested */
    double reserved;  /* segments for the mid and large requests */
    double small;     /* rounded small requests (share 2 MiB segments) */
    double mid_left;  /* bytes left in the last mid segment */
} vram_carve_t;

void vram_carve_init(vram_carve_t *k);
/* `count` live tensors of `bytes` each. */
void vram_carve_add(vram_carve_t *k, double bytes, double count);
/* Reserved bytes: segments holding everything added (>= allocated). */
double vram_carve_reserved(const vram_carve_t *k);

#endif
