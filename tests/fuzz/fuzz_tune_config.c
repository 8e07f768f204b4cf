/* Fuzz target: the training_automations YAML reader (src/tune/
 * batchopt_config.c), from memory and from a file; an accepted configuration
 * passes its own range check and drives an optimizer for a few windows. */
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_cstr(data, size);
    vram_batchopt_config_t cfg, from_file;
    vram_batchopt_config_init(&cfg);
    from_file = cfg;
    vram_clear_error();
    int rc = vram_batchopt_config_parse(text, "fuzz.yaml", &cfg);
    if (rc != 0) {
        FUZZ_CHECK(rc == VRAM_EPARSE, "vram_batchopt_config_parse returned %d", rc);
        FUZZ_CHECK(!strncmp(vram_last_error(), "fuzz.yaml", 9),
                   "message \"%s\" does not name the file", vram_last_error());
    }
    /* the file reader stops at a NUL byte with its own error */
    if (strlen(text) == size) {
        int frc = vram_batchopt_config_load(fuzz_memfile(data, size), &from_file);
        FUZZ_CHECK(frc == rc, "file reader returned %d, memory reader %d", frc, rc);
        if (rc == 0) FUZZ_CHECK(!memcmp(&cfg, &from_file, sizeof cfg), "readers disagree");
    }
    if (rc == 0) {
        fuzz_accepted++;
        FUZZ_CHECK(vram_batchopt_config_check(&cfg) == 0, "accepted config fails its check");
        cfg.adjustment_frequency = cfg.adjustment_frequency > 50 ? 50 : cfg.adjustment_frequency;
        vram_batchopt_t *o;
        FUZZ_CHECK(vram_batchopt_create(&cfg, cfg.max_batch, cfg.max_lq, &o) == 0,
                   "accepted config refused by create");
        int batch = cfg.max_batch, lq = cfg.max_lq;
        for (int i = 0; i < 200; i++) {
            vram_batchopt_decision_t d;
            FUZZ_CHECK(vram_batchopt_update(o, (i % 7) * 0.15, &d) == 0, "update failed");
            batch += d.batch_delta, lq += d.lq_delta;
            FUZZ_CHECK(batch >= cfg.min_batch && batch <= cfg.max_batch, "batch %d out of range",
                       batch);
        }
        vram_batchopt_destroy(o);
    }
    free(text);
    return 0;
}
