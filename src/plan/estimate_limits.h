/* Upper bounds on every number the estimator reads from a config.json, a
 * measured profile or the command line (docs/estimation.md, "Limits").
 * They are far above any published model (the largest have ~130 layers,
 * hidden size 16384, 128 heads, vocabularies of 256k and ~2e12 parameters)
 * and low enough that no product the estimator forms can overflow: with
 * every input in range, each component stays below 2^60 bytes or the
 * estimate is refused, so a total (eight components) never wraps. */
#ifndef VRAM_PLAN_ESTIMATE_LIMITS_H
#define VRAM_PLAN_ESTIMATE_LIMITS_H

/* config.json fields */
#define VRAM_MAX_LAYERS     1000ll               /* num_hidden_layers, num_decoder_layers */
#define VRAM_MAX_WIDTH      (1ll << 20)          /* hidden size, head_dim: 1,048,576 */
#define VRAM_MAX_MLP_WIDTH  (4 * VRAM_MAX_WIDTH) /* intermediate_size (GPT-2 default 4h) */
#define VRAM_MAX_HEADS      4096ll               /* attention and key/value heads */
#define VRAM_MAX_VOCAB      (1ll << 24)          /* vocab_size, type_vocab_size, token ids */
#define VRAM_MAX_POSITIONS  (1ll << 24)          /* positions, relative buckets: 16,777,216 */
#define VRAM_MAX_IMAGE      (1ll << 16)          /* image_size, patch_size, num_channels */
#define VRAM_MAX_PARAMETERS 10000000000000ll     /* 10^13 parameters (counted or measured) */
#define VRAM_MAX_BYTES      (1ll << 60)          /* profile byte counts; each estimate component */

/* estimate settings (API and CLI) */
#define VRAM_MAX_BATCH        (1ll << 24)        /* batch size per GPU: 16,777,216 */
#define VRAM_MAX_SEQ          VRAM_MAX_POSITIONS /* seq_len and max_new_tokens */
#define VRAM_MAX_GPUS         (1 << 20)          /* data-parallel GPUs: 1,048,576 */
#define VRAM_MAX_ACCUMULATION (1ll << 24)        /* --accumulation-steps */
#define VRAM_MAX_SETTINGS     64                 /* rows of the settings table (settings.c) */

#endif
