/* Hugging Face config.json fixtures (tests/data/hf) for the estimator's
 * unit tests; include after cmocka.h and vram.h. */
#ifndef VRAM_TESTS_HF_FIXTURE_H
#define VRAM_TESTS_HF_FIXTURE_H

static const char *fixture(const char *rel)
{
    static char path[1024];
    const char *src = getenv("VRAM_SOURCE_DIR");
    snprintf(path, sizeof path, "%s/tests/data/hf/%s", src ? src : ".", rel);
    return path;
}

static vram_model_t load(const char *file)
{
    vram_model_t m;
    if (vram_model_from_hf_config(fixture(file), &m)) fail_msg("%s: %s", file, vram_last_error());
    return m;
}

#endif
