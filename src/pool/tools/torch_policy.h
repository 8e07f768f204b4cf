/* A re-implementation of PyTorch's default CUDA caching-allocator policy
 * (and of its expandable-segments mode), for `vram replay --baseline torch`
 * and the benchmarks: what a PyTorch user gets today, side by side with the
 * pool. Written from PyTorch's documentation and the rules in
 * c10/cuda/CUDACachingAllocator.cpp (cited in docs/pool.md, "Baselines");
 * the code is ours. Thread-safe with `locked` (the two locks PyTorch
 * takes per call, torch_policy.c), else for one thread only. */
#ifndef VRAM_POOL_TOOLS_TORCH_POLICY_H
#define VRAM_POOL_TOOLS_TORCH_POLICY_H

#include "pool/pool_internal.h"

typedef struct vram_torch_policy vram_torch_policy_t;

typedef struct {
    uint64_t reserved_bytes, peak_reserved_bytes; /* segments, or mapped bytes when expandable */
    uint64_t device_allocs, device_frees;         /* cudaMalloc / cudaFree */
    uint64_t maps,
        unmaps; /* expandable: cuMemCreate+cuMemMap+cuMemSetAccess of one unit, and back */
    uint64_t ooms, retries;
} vram_torch_policy_stats_t;

/* Segments come from `src` (copied); with `expandable`, address space is
 * reserved virtually (never from src) and physical memory is counted in
 * units of 2 MiB (small pool) or 20 MiB (large pool), limited by src's
 * total memory. */
int vram_torch_policy_create(const vram_pool_source_t *src, bool expandable, bool locked,
                             vram_torch_policy_t **out);
int vram_torch_policy_alloc(vram_torch_policy_t *p, size_t size, uintptr_t stream, void **ptr);
int vram_torch_policy_free(vram_torch_policy_t *p, void *ptr);
void vram_torch_policy_stats(vram_torch_policy_t *p, vram_torch_policy_stats_t *out);
/* Releases every segment (to src) and the policy. */
void vram_torch_policy_destroy(vram_torch_policy_t *p);

#endif
