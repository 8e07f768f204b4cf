/* Common GPU models: nominal memory, compute capability, SM count, power limit.
 * Figures from the vendors' published specifications (docs/gpu-models.md). */
#include "vram.h"

#include <strings.h>

#define GIB (1ull << 30)

static const vram_gpu_model_t models[] = {
    {"H100-80GB", 80 * GIB, 9, 0, 132, 700},     {"H100-94GB", 94 * GIB, 9, 0, 132, 700},
    {"H200-141GB", 141 * GIB, 9, 0, 132, 700},   {"A100-80GB", 80 * GIB, 8, 0, 108, 400},
    {"A100-40GB", 40 * GIB, 8, 0, 108, 400},     {"A10-24GB", 24 * GIB, 8, 6, 72, 150},
    {"A40-48GB", 48 * GIB, 8, 6, 84, 300},       {"L4-24GB", 24 * GIB, 8, 9, 58, 72},
    {"L40S-48GB", 48 * GIB, 8, 9, 142, 350},     {"V100-16GB", 16 * GIB, 7, 0, 80, 300},
    {"V100-32GB", 32 * GIB, 7, 0, 80, 300},      {"T4-16GB", 16 * GIB, 7, 5, 40, 70},
    {"RTX3060-12GB", 12 * GIB, 8, 6, 28, 170},   {"RTX3090-24GB", 24 * GIB, 8, 6, 82, 350},
    {"RTX4090-24GB", 24 * GIB, 8, 9, 128, 450},  {"RTXA6000-48GB", 48 * GIB, 8, 6, 84, 300},
    {"B200-180GB", 180 * GIB, 10, 0, 148, 1000},
};

const vram_gpu_model_t *vram_gpu_model_find(const char *name)
{
    if (!name) return NULL;
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++)
        if (!strcasecmp(models[i].name, name)) return &models[i];
    return NULL;
}

const vram_gpu_model_t *vram_gpu_models(size_t *count)
{
    *count = sizeof models / sizeof models[0];
    return models;
}
