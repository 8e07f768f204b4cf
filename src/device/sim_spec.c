/* VRAM_SIM parsing: "2xH100-80GB", "A100-40GB,RTX3060-12GB", "mygpu:24GiB". */
#include "device/sim_spec.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Copies [begin, end) without surrounding spaces into buf (NUL-terminated). */
static void copy_trimmed(const char *begin, const char *end, char *buf, size_t len)
{
    while (begin < end && isspace((unsigned char)*begin))
        begin++;
    while (end > begin && isspace((unsigned char)end[-1]))
        end--;
    size_t n = (size_t)(end - begin);
    if (n >= len) n = len - 1;
    memcpy(buf, begin, n);
    buf[n] = '\0';
}

/* Starting with a letter keeps "2x4xgpu:1GiB" from reading as two GPUs named
 * "4xgpu". */
static bool valid_custom_name(const char *name)
{
    if (!isalpha((unsigned char)*name)) return false;
    for (const char *p = name; *p; p++)
        if (!isalnum((unsigned char)*p) && !strchr("-_.+", *p)) return false;
    return true;
}

/* "fail" or "flaky=N" after '@'. */
static int parse_fail_hook(const char *hook, const char *item, vram_sim_gpu_t *gpu)
{
    if (!strcmp(hook, "fail")) {
        gpu->fail = VRAM_SIM_FAIL_ALWAYS;
        return 0;
    }
    if (!strncmp(hook, "flaky=", 6)) {
        char *end;
        errno = 0;
        long n = strtol(hook + 6, &end, 10);
        if (!errno && end != hook + 6 && !*end && n >= 0 && n <= 1000000) {
            gpu->fail = VRAM_SIM_FAIL_FLAKY;
            gpu->fail_count = (int)n;
            return 0;
        }
    }
    return vram_fail(VRAM_EINVAL,
                     "VRAM_SIM: bad failure hook \"%s\" in \"%s\" (use @fail or @flaky=N)", hook,
                     item);
}

/* MODEL: a table name or NAME:SIZE. */
static int parse_model(const char *model, const char *item, vram_sim_gpu_t *gpu)
{
    const char *colon = strchr(model, ':');
    if (!colon) {
        const vram_gpu_model_t *m = vram_gpu_model_find(model);
        if (!m)
            return vram_fail(VRAM_EINVAL,
                             "VRAM_SIM: unknown GPU model \"%s\" (use a known model such as "
                             "H100-80GB, A100-40GB, RTX3060-12GB, or NAME:SIZE such as "
                             "mygpu:24GiB)",
                             model);
        snprintf(gpu->name, sizeof gpu->name, "%s", m->name);
        gpu->total_bytes = m->total_bytes;
        gpu->cc_major = m->cc_major;
        gpu->cc_minor = m->cc_minor;
        gpu->multiprocessors = m->multiprocessors;
        gpu->power_limit_w = m->power_limit_w;
        return 0;
    }
    char name[64], size_text[64];
    copy_trimmed(model, colon, name, sizeof name);
    copy_trimmed(colon + 1, colon + strlen(colon), size_text, sizeof size_text);
    if ((size_t)(colon - model) >= sizeof name || !valid_custom_name(name))
        return vram_fail(
            VRAM_EINVAL,
            "VRAM_SIM: bad GPU name \"%s\" in \"%s\" (a letter, then letters, digits, - _ . "
            "+; at most 63)",
            name, item);
    uint64_t bytes;
    if (vram_parse_size(size_text, &bytes) || bytes == 0)
        return vram_fail(VRAM_EINVAL, "VRAM_SIM: bad memory size \"%s\" in \"%s\" (e.g. 24GiB)",
                         size_text, item);
    snprintf(gpu->name, sizeof gpu->name, "%s", name);
    gpu->total_bytes = bytes;
    gpu->cc_major = gpu->cc_minor = gpu->multiprocessors = VRAM_UNKNOWN_INT;
    gpu->power_limit_w = -1;
    return 0;
}

/* ITEM = [Nx]MODEL[@FAIL]; appends N devices to spec. */
static int parse_item(const char *item, vram_sim_spec_t *spec)
{
    if (!*item) return vram_fail(VRAM_EINVAL, "VRAM_SIM: empty GPU entry (check the commas)");
    long repeat = 1;
    const char *model = item;
    const char *p = item;
    while (isdigit((unsigned char)*p))
        p++;
    if (p > item && (*p == 'x' || *p == 'X')) {
        char *end;
        errno = 0;
        repeat = strtol(item, &end, 10);
        if (errno || repeat < 1 || repeat > VRAM_SIM_MAX_DEVICES)
            return vram_fail(VRAM_EINVAL, "VRAM_SIM: bad count in \"%s\" (1 to %d)", item,
                             VRAM_SIM_MAX_DEVICES);
        model = p + 1;
    }
    char model_text[160], hook[64] = "";
    const char *at = strchr(model, '@');
    copy_trimmed(model, at ? at : model + strlen(model), model_text, sizeof model_text);
    if (at) copy_trimmed(at + 1, at + strlen(at), hook, sizeof hook);
    if (!*model_text) return vram_fail(VRAM_EINVAL, "VRAM_SIM: GPU model missing in \"%s\"", item);
    vram_sim_gpu_t gpu = {.fail = VRAM_SIM_FAIL_NONE};
    int rc = parse_model(model_text, item, &gpu);
    if (!rc && at) rc = parse_fail_hook(hook, item, &gpu);
    if (rc) return rc;
    if (spec->count + repeat > VRAM_SIM_MAX_DEVICES)
        return vram_fail(VRAM_EINVAL, "VRAM_SIM: more than %d GPUs at \"%s\"", VRAM_SIM_MAX_DEVICES,
                         item);
    for (long i = 0; i < repeat; i++)
        spec->gpus[spec->count++] = gpu;
    return 0;
}

int vram_sim_spec_parse(const char *text, vram_sim_spec_t *out)
{
    if (!text) return vram_fail(VRAM_EINVAL, "VRAM_SIM is not set");
    if (!text[strspn(text, " \t")])
        return vram_fail(VRAM_EINVAL, "VRAM_SIM is empty (e.g. VRAM_SIM=2xH100-80GB)");
    vram_sim_spec_t *spec = calloc(1, sizeof *spec);
    if (!spec) return vram_fail(VRAM_ENOMEM, "out of memory");
    int rc = 0;
    const char *begin = text;
    for (;;) {
        const char *comma = strchr(begin, ',');
        const char *end = comma ? comma : begin + strlen(begin);
        char item[256];
        if ((size_t)(end - begin) >= sizeof item) {
            rc = vram_fail(VRAM_EINVAL, "VRAM_SIM: entry \"%.40s...\" is too long", begin);
            break;
        }
        copy_trimmed(begin, end, item, sizeof item);
        rc = parse_item(item, spec);
        if (rc || !comma) break;
        begin = comma + 1;
    }
    if (!rc) *out = *spec;
    free(spec);
    return rc;
}

uint64_t vram_sim_spec_hash(const vram_sim_spec_t *spec)
{
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < spec->count; i++) {
        char line[96];
        int n = snprintf(line, sizeof line, "%s:%llu;", spec->gpus[i].name,
                         (unsigned long long)spec->gpus[i].total_bytes);
        for (int k = 0; k < n && k < (int)sizeof line; k++) {
            h ^= (unsigned char)tolower((unsigned char)line[k]);
            h *= 1099511628211ull;
        }
    }
    return h;
}
