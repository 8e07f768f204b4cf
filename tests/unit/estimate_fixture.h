/* Catalog models and estimates for the estimator's unit tests, failing the
 * test with libvram's message; include after cmocka.h and vram.h. */
#ifndef VRAM_TESTS_ESTIMATE_FIXTURE_H
#define VRAM_TESTS_ESTIMATE_FIXTURE_H

static inline vram_model_t model(const char *name)
{
    vram_model_t m;
    if (vram_model_find(name, &m)) fail_msg("%s: %s", name, vram_last_error());
    return m;
}

static inline vram_estimate_t est(const vram_model_t *m, const vram_estimate_config_t *c)
{
    vram_estimate_t e;
    if (vram_estimate(m, c, &e)) fail_msg("%s: %s", m->name, vram_last_error());
    return e;
}

#endif
