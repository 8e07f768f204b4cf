/* Fuzz target: the VRAM_SIM spec parser (src/device/sim_spec.c). */
#include "fuzz.h"

#include "device/sim_spec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_cstr(data, size);
    vram_sim_spec_t *spec = malloc(sizeof *spec);
    if (!spec) abort();
    memset(spec, 0xA5, sizeof *spec); /* "untouched on failure" is checkable */
    vram_clear_error();
    int rc = vram_sim_spec_parse(text, spec);
    if (rc != 0) {
        FUZZ_CHECK(rc == VRAM_EINVAL, "vram_sim_spec_parse(\"%s\") returned %d", text, rc);
        FUZZ_CHECK_FAILED_WITH_MESSAGE(rc, "vram_sim_spec_parse");
        const unsigned char *b = (const unsigned char *)spec;
        for (size_t i = 0; i < sizeof *spec; i++)
            FUZZ_CHECK(b[i] == 0xA5, "a failing parse of \"%s\" wrote to *out", text);
        goto done;
    }
    fuzz_accepted++;
    FUZZ_CHECK(spec->count >= 1 && spec->count <= VRAM_SIM_MAX_DEVICES, "\"%s\" gave %d devices",
               text, spec->count);
    /* The canonical form 1xNAME:BYTES,... must parse back to the same devices
     * (same hash). Sizes above 2^53 are not exact through the size parser's
     * double, so those are only range-checked. */
    char canon[VRAM_SIM_MAX_DEVICES * 96] = "";
    bool exact = true;
    for (int i = 0; i < spec->count; i++) {
        const vram_sim_gpu_t *g = &spec->gpus[i];
        FUZZ_CHECK(g->name[0] && memchr(g->name, '\0', sizeof g->name),
                   "\"%s\": device %d has no name", text, i);
        FUZZ_CHECK(g->total_bytes > 0, "\"%s\": device %d has 0 bytes", text, i);
        FUZZ_CHECK(
            g->fail >= VRAM_SIM_FAIL_NONE && g->fail <= VRAM_SIM_FAIL_ALWAYS && g->fail_count >= 0,
            "\"%s\": device %d has failure hook %d/%d", text, i, (int)g->fail, g->fail_count);
        if (g->total_bytes > (1ull << 53)) exact = false;
        size_t len = strlen(canon);
        snprintf(canon + len, sizeof canon - len, "%s1x%s:%llu", i ? "," : "", g->name,
                 (unsigned long long)g->total_bytes);
    }
    if (exact) {
        vram_sim_spec_t *again = malloc(sizeof *again);
        if (!again) abort();
        int rc2 = vram_sim_spec_parse(canon, again);
        FUZZ_CHECK(rc2 == 0, "canonical form \"%s\" of \"%s\" is rejected", canon, text);
        FUZZ_CHECK(again->count == spec->count &&
                       vram_sim_spec_hash(again) == vram_sim_spec_hash(spec),
                   "canonical form \"%s\" of \"%s\" describes other devices", canon, text);
        free(again);
    }
done:
    free(spec);
    free(text);
    return 0;
}
