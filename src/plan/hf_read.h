/* Reading Hugging Face config.json fields (hf_config.c) for the family
 * rows (hf_families.c, hf_decoder.c, hf_more.c). Internal to src/plan. */
#ifndef VRAM_PLAN_HF_READ_H
#define VRAM_PLAN_HF_READ_H

#include "vram.h"
#include "estimate_limits.h"

#include <jansson.h>
#include <stdbool.h>

/* The first of `keys` (NULL-terminated) present in `root` as an integer in
 * [0, max], else `def` when not required; EPARSE names the key. */
int vram_hf_int(json_t *root, const char *origin, const char *const *keys, bool required,
                int64_t def, int64_t max, int64_t *out);
bool vram_hf_bool(json_t *root, const char *key, bool def);
/* An integer array field of 1 to 8 entries, each in [1, max]; *n (when
 * non-zero) is the length the other arrays have. */
int vram_hf_array(json_t *root, const char *origin, const char *key, int64_t max, int64_t *out,
                  int64_t *n);
/* A string field, or NULL. */
const char *vram_hf_str(json_t *root, const char *key);
/* Whether a key is present and not null. */
bool vram_hf_has(json_t *root, const char *key);

/* One family: the model_type values it reads, and its reader. `moe` and
 * `audio` say which type-specific keys a config of this type may carry
 * (a dense type with expert keys is refused: hf_config.c). */
typedef struct {
    const char *types; /* comma-separated model_type values */
    int (*read)(json_t *root, const char *origin, const char *type, vram_model_t *m);
    bool moe, audio;
} vram_hf_family_t;

/* The rows, in hf_families.c (second edition), hf_decoder.c (the generic
 * decoder's data rows) and hf_more.c (third-edition encoders and others). */
extern const vram_hf_family_t vram_hf_families[];
extern const vram_hf_family_t vram_hf_decoder_families[];
extern const vram_hf_family_t vram_hf_more_families[];
/* sliding_window and which layers slide (layer_types, else every
 * pattern-th layer global; 0: all slide) into m. */
int vram_hf_read_sliding(json_t *root, const char *origin, vram_model_t *m, int64_t pattern);
/* Encoder-decoder keys of Whisper and BART (d_model, encoder_layers,
 * decoder_layers, encoder_attention_heads, encoder_ffn_dim; the decoder's
 * heads and width must equal the encoder's). */
int vram_hf_read_seq2seq(json_t *root, const char *origin, const char *type, vram_model_t *m);
/* Unknown model_type with the standard decoder keys: the generic row,
 * noting its assumptions in m->assumed; EPARSE names the missing key. */
int vram_hf_read_generic(json_t *root, const char *origin, const char *type, vram_model_t *m);

#define VRAM_HF_KEYS(...) ((const char *const[]){__VA_ARGS__, NULL})
#define REQ(keys, field, max)                                                                      \
    if ((rc = vram_hf_int(root, origin, keys, true, 0, max, &m->field))) return rc
#define OPT(keys, field, def, max)                                                                 \
    if ((rc = vram_hf_int(root, origin, keys, false, def, max, &m->field))) return rc
#define KEYS VRAM_HF_KEYS

extern const char *const vram_hf_hidden[], *const vram_hf_layers[], *const vram_hf_heads[];
extern const char *const vram_hf_inter[], *const vram_hf_positions[];

#endif
