/* What a real GPU adds to the tensors (docs/estimation.md, "What a real GPU
 * adds"): the CUDA context, cuBLAS workspaces, and the caching allocator's
 * rounding, modelled with the project's own pool rules (src/pool). */
#include "gpu_overhead.h"
#include "pool/pool_internal.h"

#include <math.h>

#define MIB (1024.0 * 1024.0)

/* Lazy module loading: introduced in CUDA 11.7, set by PyTorch >= 1.13
 * (CUDA_MODULE_LOADING=LAZY unless the user set it), the Linux default from
 * CUDA 12.2. Older CUDA loads every kernel of every library at start-up. */
bool vram_gpu_lazy_loading(const vram_estimate_config_t *c)
{
    if (c->lazy_loading == 1) return true;
    if (c->lazy_loading == 2) return false;
    return c->cuda_version == 0 || c->cuda_version >= 117;
}

double vram_gpu_context_bytes(const vram_estimate_config_t *c)
{
    int cc = c->gpu_cc > 0 ? c->gpu_cc : 80;
    if (vram_gpu_lazy_loading(c)) {
        /* Ada (RTX 6000 Ada, PyTorch 2.10, CUDA 13): 426 MiB measured in
         * unsloth-zoo PR #1053; otherwise "around 400MB" with lazy loading
         * (ptrblck, pytorch/pytorch#109888) */
        return cc == 89 ? 426 * MIB : 400e6;
    }
    /* Eager: Volta measured at 1343 MiB after the first CUDA tensor (Hugging
     * Face, perf_train_gpu_one); newer GPUs "took >1000MB" (ptrblck,
     * pytorch/pytorch#107667): 1000 MB as the documented floor */
    return cc < 80 ? 1343 * MIB : 1000e6;
}

double vram_gpu_workspace_bytes(const vram_estimate_config_t *c)
{
    if (c->mode == VRAM_MODE_LOAD) return 0; /* no matmul has run */
    int cc = c->gpu_cc > 0 ? c->gpu_cc : 80;
    /* PyTorch's default CUBLAS_WORKSPACE_CONFIG per handle and stream:
     * ":4096:2:16:8" (8 MiB + 128 KiB) before Hopper, ":4096:8" (32 MiB) on
     * Hopper (aten/src/ATen/cuda/CublasHandlePool.cpp, following cuBLAS's
     * cublasSetWorkspace advice). Training has two handles: the forward
     * thread's and the autograd engine's device thread. */
    double one = cc >= 90 ? 32 * MIB : 8 * MIB + 128 * 1024;
    return c->mode == VRAM_MODE_TRAIN ? 2 * one : one;
}

void vram_carve_init(vram_carve_t *k)
{
    *k = (vram_carve_t){0};
}

/* Requests are rounded as the pool rounds them (512 B); small ones (<= 1
 * MiB) share 2 MiB segments; 1-10 MiB ones are carved from mid segments
 * holding whole copies; larger ones get a segment of their own rounded to
 * 2 MiB (vram_pool_round, vram_pool_segment_size: BALANCED, the pool's
 * default and the closest to PyTorch's caching allocator). */
void vram_carve_add(vram_carve_t *k, double bytes, double count)
{
    if (bytes <= 0 || count <= 0) return;
    k->allocated += bytes * count;
    if (bytes > 0x1p50) { /* beyond any segment rule: 2 MiB granules */
        k->reserved += ceil(bytes / (2 * MIB)) * 2 * MIB * ceil(count);
        return;
    }
    size_t r = vram_pool_round(VRAM_POOL_BALANCED, (size_t)ceil(bytes));
    if (r <= VRAM_POOL_SMALL_MAX) {
        k->small += (double)r * ceil(count);
        return;
    }
    size_t seg = vram_pool_segment_size(VRAM_POOL_BALANCED, VRAM_POOL_KIND_LARGE, r);
    double left = ceil(count), rr = (double)r;
    if (r < VRAM_POOL_LARGE_MIN) {
        /* a mid request is carved from what the open mid segment has left
         * (the pool splits free blocks for any size), then from new ones */
        double fit = floor(k->mid_left / rr);
        if (fit > left) fit = left;
        k->mid_left -= fit * rr;
        left -= fit;
    }
    if (left <= 0) return;
    double per = floor((double)seg / rr);
    if (per < 1) per = 1;
    double segs = ceil(left / per);
    k->reserved += segs * (double)seg;
    if (r < VRAM_POOL_LARGE_MIN) k->mid_left = (double)seg - (left - (segs - 1) * per) * rr;
}

double vram_carve_reserved(const vram_carve_t *k)
{
    double small = ceil(k->small / (double)VRAM_POOL_SMALL_SEG) * (double)VRAM_POOL_SMALL_SEG;
    double r = k->reserved + small;
    return r > k->allocated ? r : k->allocated;
}
