/* Fuzz target: the Hugging Face config.json reader (src/plan/hf_config.c),
 * both from memory and from a file; an accepted model then goes through the
 * estimator and the planner. */
#include "fuzz.h"
#include "fuzz_model_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_cstr(data, size);
    vram_model_t m;
    vram_clear_error();
    int rc = vram_model_from_hf_json(text, "fuzz.json", &m);
    if (rc != 0) {
        FUZZ_CHECK(rc == VRAM_EPARSE, "vram_model_from_hf_json returned %d", rc);
        FUZZ_CHECK(!strncmp(vram_last_error(), "fuzz.json", 9),
                   "message \"%s\" does not name the file", vram_last_error());
    }

    /* The file reader must agree with the in-memory one. */
    vram_model_t from_file;
    const char *path = fuzz_memfile(data, size);
    int frc = vram_model_from_hf_config(path, &from_file);
    FUZZ_CHECK(frc == rc, "file reader returned %d, memory reader %d", frc, rc);
    if (rc == 0) {
        fuzz_accepted++;
        FUZZ_CHECK(fuzz_models_equal(&m, &from_file), "file and memory readers disagree");
        uint64_t params = 0, tensors = 0;
        FUZZ_CHECK(vram_model_param_count(&m, &params, &tensors) == 0,
                   "accepted model has no parameter count");
        FUZZ_CHECK(params > 0, "accepted model \"%s\" has 0 parameters", m.name);
        fuzz_check_estimate(&m, VRAM_MODE_TRAIN);
        fuzz_check_estimate(&m, VRAM_MODE_INFER);
    }
    free(text);
    return 0;
}
