/* GPU names as people type them (gpu_names.c). */
#ifndef VRAM_PLAN_GPU_NAMES_H
#define VRAM_PLAN_GPU_NAMES_H

/* EINVAL for a name vram_gpu_model_resolve does not know: a GPU of another
 * vendor (AMD Instinct, Intel) is refused as unsupported; otherwise the
 * message lists the table's names. Always returns VRAM_EINVAL. */
int vram_gpu_model_unknown(const char *name);

#endif
