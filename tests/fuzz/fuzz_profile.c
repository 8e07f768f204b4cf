/* Fuzz target: the measured-profile reader (src/plan/hf_config.c), from
 * memory and from a file; an accepted profile then goes through the
 * estimator and the planner. */
#include "fuzz.h"
#include "fuzz_model_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_cstr(data, size);
    vram_model_t m;
    vram_clear_error();
    int rc = vram_model_from_profile_json(text, "fuzz.json", &m);
    if (rc != 0) {
        FUZZ_CHECK(rc == VRAM_EPARSE, "vram_model_from_profile_json returned %d", rc);
        FUZZ_CHECK(!strncmp(vram_last_error(), "fuzz.json", 9),
                   "message \"%s\" does not name the file", vram_last_error());
    }
    vram_model_t from_file;
    int frc = vram_model_from_profile(fuzz_memfile(data, size), &from_file);
    FUZZ_CHECK(frc == rc, "file reader returned %d, memory reader %d", frc, rc);
    if (rc == 0) {
        fuzz_accepted++;
        FUZZ_CHECK(fuzz_models_equal(&m, &from_file), "file and memory readers disagree");
        FUZZ_CHECK(m.family == VRAM_FAMILY_PROFILE && m.profile_dtype_bytes > 0,
                   "profile parsed to family %d, dtype bytes %d", (int)m.family,
                   m.profile_dtype_bytes);
        fuzz_check_estimate(&m, VRAM_MODE_TRAIN);
        fuzz_check_estimate(&m, VRAM_MODE_INFER);
    }
    free(text);
    return 0;
}
