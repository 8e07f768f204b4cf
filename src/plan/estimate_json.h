/* One JSON form of an estimate and of a plan, shared by `vram estimate
 * --json` / `vram plan --json` and vram_estimate_json() / vram_plan_json()
 * (the Python package), so the two cannot drift apart. */
#ifndef VRAM_PLAN_ESTIMATE_JSON_H
#define VRAM_PLAN_ESTIMATE_JSON_H

#include <jansson.h>

#include "vram.h"

/* The object documented in docs/estimation.md: model, settings, "bytes" (the
 * breakdown with the real-GPU lines and allocated_peak / reserved /
 * nvidia_smi), "at_peak" (the parts live at the peak, adding up to the
 * total), peak phase, attention, trainable count and LoRA settings.
 * NULL when out of memory. */
json_t *vram_estimate_to_json(const vram_model_t *m, const vram_estimate_config_t *c,
                              const vram_estimate_t *e);

/* The object of `vram plan --json`: the GPU (labelled gpu_label), budget,
 * model_bytes, the full estimate at the shown batch, recommendations, the verdict on pc->batch_size
 * when given, and the suggestions. NULL when out of memory. */
json_t *vram_plan_to_json(const vram_model_t *m, const vram_estimate_config_t *est,
                          const vram_plan_config_t *pc, const vram_plan_t *p,
                          const char *gpu_label);

/* A batch table's JSON form, [{"batch": B, "bytes": N}, ...] of t[0..n):
 * the "batch_bytes" of vram_batch_table_json and of the job requests that
 * vram run, vram submit and the Slurm plugin send vramd. NULL when out of
 * memory. */
json_t *vram_batch_bytes_to_json(const vram_batch_bytes_t *t, int n);

#endif
