/* The model and estimate flags shared by `vram estimate`, `vram plan` and
 * `vram run`: --model/--hf-config/--profile, and every estimate setting of
 * libvram's table (vram_estimate_settings: --batch-size, --lora-rank, ...).
 *
 * Usage:
 *     cli_model_args_t ma;
 *     cli_model_args_init(&ma, "run");
 *     if ((rc = cli_model_args_parse(&argc, argv, &ma))) return rc;   // argv keeps the rest
 *     vram_model_t model;
 *     if (ma.has_model && (rc = cli_model_args_build(&ma, &model))) return rc;
 *     vram_estimate(&model, &ma.est, &estimate);
 */
#ifndef VRAM_CLI_MODEL_ARGS_H
#define VRAM_CLI_MODEL_ARGS_H

#include "vram.h"

#include <stdio.h>

typedef struct {
    const char *cmd;        /* command name for error messages */
    const char *model_name; /* --model NAME (borrowed from argv) */
    const char *hf_config;  /* --hf-config FILE */
    const char *profile;    /* --profile FILE */
    bool has_model;         /* exactly one of the three was given */
    vram_estimate_config_t est;
    bool batch_given;     /* --batch-size was on the command line */
    const char *gpu_name; /* --gpu-name NAME (left in argv for `vram plan`) */
    const char *gpu_note; /* which variant a bare GPU name was taken as, or NULL */
} cli_model_args_t;

/* Defaults (vram_estimate_config_init). cmd is borrowed. */
void cli_model_args_init(cli_model_args_t *a, const char *cmd);

/* Removes the flags above ("--flag value" or "--flag=value") from argv,
 * keeping the other arguments in order and argv[*argc] == NULL; *argc gets
 * the new count. argv[0] is skipped. Returns 0, or CLI_USAGE after printing
 * "vram CMD: ..." naming the bad flag or value (unknown names list the
 * accepted ones; two of --model/--hf-config/--profile conflict). */
int cli_model_args_parse(int *argc, char **argv, cli_model_args_t *out);

/* Builds the model from whichever of --model/--hf-config/--profile was
 * given. Returns 0; CLI_USAGE for an unknown catalog name (with the closest
 * names) or no model flag; CLI_RUNTIME for an unreadable or malformed file
 * (line and column) or a missing field (named). Prints the error. */
int cli_model_args_build(const cli_model_args_t *a, vram_model_t *model);

/* The flags' help lines, for `--help`. */
void cli_model_args_help(FILE *out);

#endif
