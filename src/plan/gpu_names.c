/* GPU names as people type them ("H100", "rtx4090", "Tesla V100"): the
 * table's entry (src/core/gpu_models.c), picking the common memory variant
 * when the name has none, and saying which. */
#include "gpu_names.h"
#include "vram.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

/* Lower case without spaces, dashes, underscores and vendor words, in
 * this order ("NVIDIA RTX A6000" and "A6000" both give "a6000"). */
static void squash(const char *in, char *out, size_t len)
{
    static const char *const noise[] = {"nvidia", "tesla", "geforce", "rtx", NULL};
    size_t o = 0;
    for (size_t i = 0; in[i] && o + 1 < len; i++) {
        char c = (char)tolower((unsigned char)in[i]);
        if (c == ' ' || c == '-' || c == '_') continue;
        out[o++] = c;
    }
    out[o] = '\0';
    for (const char *const *w = noise; *w; w++) {
        size_t n = strlen(*w);
        if (!strncmp(out, *w, n)) memmove(out, out + n, strlen(out + n) + 1);
    }
}

/* The variant people mean by a bare name: the one sold and rented most
 * (the 80 GB A100 of today's clouds, the original 16 GB V100). */
static const struct {
    const char *bare, *variant, *note;
} common[] = {
    {"h100", "H100-80GB", "\"H100\" taken as the 80 GB H100 (SXM/PCIe); say H100-94GB for the NVL"},
    {"a100", "A100-80GB", "\"A100\" taken as the 80 GB A100; say A100-40GB for the 40 GB one"},
    {"v100", "V100-16GB", "\"V100\" taken as the 16 GB V100; say V100-32GB for the 32 GB one"},
    {"h200", "H200-141GB", "\"H200\" taken as the 141 GB H200"},
};

const vram_gpu_model_t *vram_gpu_model_resolve(const char *name, const char **note)
{
    if (note) *note = NULL;
    if (!name) return NULL;
    const vram_gpu_model_t *exact = vram_gpu_model_find(name);
    if (exact) return exact;
    char want[64], have[64];
    squash(name, want, sizeof want);
    size_t count;
    const vram_gpu_model_t *all = vram_gpu_models(&count);
    for (size_t i = 0; i < count; i++) {
        squash(all[i].name, have, sizeof have);
        if (!strcmp(want, have)) return &all[i];
    }
    for (size_t i = 0; i < sizeof common / sizeof common[0]; i++)
        if (!strcmp(want, common[i].bare) || !strcmp(name, common[i].bare)) {
            if (note) *note = common[i].note;
            return vram_gpu_model_find(common[i].variant);
        }
    /* a bare name with a single variant in the table ("rtx4090", "L40S"):
     * the table's name without its "-<memory>" suffix */
    const vram_gpu_model_t *only = NULL;
    for (size_t i = 0; i < count; i++) {
        char base[64];
        snprintf(base, sizeof base, "%s", all[i].name);
        char *dash = strrchr(base, '-');
        if (dash) *dash = '\0';
        squash(base, have, sizeof have);
        if (!strcmp(have, want)) {
            if (only) return NULL; /* ambiguous and not in the common list */
            only = &all[i];
        }
    }
    return only;
}

/* Other vendors' accelerators, as people write them: vram's estimates
 * model CUDA (context, cuBLAS workspaces, the caching allocator). */
static const char *const foreign[] = {"mi300",  "mi325", "mi250", "mi210", "mi100", "instinct",
                                      "radeon", "gaudi", "arc",   "amd",   "intel", NULL};

int vram_gpu_model_unknown(const char *name)
{
    char want[64];
    squash(name ? name : "", want, sizeof want);
    for (const char *const *f = foreign; *f; f++)
        if (!strncmp(want, *f, strlen(*f)))
            return vram_fail(VRAM_EINVAL,
                             "GPU \"%s\" is not supported: vram estimates NVIDIA GPUs (the CUDA "
                             "context, cuBLAS workspaces and PyTorch's CUDA allocator); for "
                             "another vendor give the capacity with --gpu-mem and the "
                             "runtime's overhead with --overhead",
                             name);
    size_t count;
    const vram_gpu_model_t *all = vram_gpu_models(&count);
    char known[512] = "";
    for (size_t i = 0; i < count; i++) {
        if (i) strncat(known, ", ", sizeof known - strlen(known) - 1);
        strncat(known, all[i].name, sizeof known - strlen(known) - 1);
    }
    return vram_fail(VRAM_EINVAL,
                     "unknown GPU \"%s\" (known: %s; a bare name such as A6000, L40S, H100 "
                     "or H200 picks its common variant)",
                     name ? name : "(null)", known);
}
