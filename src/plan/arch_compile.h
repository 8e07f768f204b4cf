/* What a torch.compile'd decoder layer keeps for backward (arch_compile.c).
 * Internal to src/plan. */
#ifndef VRAM_PLAN_ARCH_COMPILE_H
#define VRAM_PLAN_ARCH_COMPILE_H

#include "arch.h"

/* Bytes per token one compiled layer of m keeps, in *bytes; false when
 * the rule does not cover m or the shape (then the layer counts as eager). */
bool vram_arch_compiled_layer(const vram_model_t *m, const vram_arch_shape_t *s, double *bytes);

#endif
