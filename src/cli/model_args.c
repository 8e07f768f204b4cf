/* Parsing of the model and estimate flags shared by several commands. */
#include "model_args.h"

#include "cli.h"
#include "plan/estimate_limits.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void cli_model_args_init(cli_model_args_t *a, const char *cmd)
{
    memset(a, 0, sizeof *a);
    a->cmd = cmd;
    vram_estimate_config_init(&a->est);
    a->accumulation_steps = 1;
}

static int parse_int(const cli_model_args_t *a, const char *flag, const char *v, int64_t min,
                     int64_t max, int64_t *out)
{
    char *end;
    errno = 0;
    long long n = strtoll(v, &end, 10);
    if (errno || end == v || *end)
        return cli_usage_error(a->cmd, "%s \"%s\" is not an integer", flag, v);
    if (n < min)
        return cli_usage_error(a->cmd, "%s must be at least %lld (got %lld)", flag, (long long)min,
                               n);
    if (n > max)
        return cli_usage_error(a->cmd, "%s must be at most %lld (got %lld)", flag, (long long)max,
                               n);
    *out = n;
    return 0;
}

/* One flag with its value; returns 0, CLI_USAGE, or 1 when not ours. */
static int apply(cli_model_args_t *a, const char *flag, const char *v)
{
    vram_estimate_config_t *e = &a->est;
    int64_t n = 0;
    int rc;
    if (!strcmp(flag, "--model") || !strcmp(flag, "--hf-config") || !strcmp(flag, "--profile")) {
        if (a->has_model)
            return cli_usage_error(a->cmd, "give only one of --model, --hf-config, --profile");
        a->has_model = true;
        if (!strcmp(flag, "--model"))
            a->model_name = v;
        else if (!strcmp(flag, "--hf-config"))
            a->hf_config = v;
        else
            a->profile = v;
        return 0;
    }
    if (!strcmp(flag, "--mode")) {
        if (!strcmp(v, "train"))
            e->mode = VRAM_MODE_TRAIN;
        else if (!strcmp(v, "infer") || !strcmp(v, "inference"))
            e->mode = VRAM_MODE_INFER;
        else
            return cli_usage_error(a->cmd, "unknown --mode \"%s\" (use train or infer)", v);
        return 0;
    }
    if (!strcmp(flag, "--attention")) {
        if (!strcmp(v, "eager"))
            e->fused_attention = false;
        else if (!strcmp(v, "fused") || !strcmp(v, "sdpa") || !strcmp(v, "flash"))
            e->fused_attention = true;
        else
            return cli_usage_error(a->cmd, "unknown --attention \"%s\" (use eager or fused)", v);
        return 0;
    }
    if (!strcmp(flag, "--precision")) {
        if (vram_precision_parse(v, &e->precision))
            return cli_usage_error(a->cmd, "--precision: %s", vram_last_error());
        return 0;
    }
    if (!strcmp(flag, "--optimizer")) {
        if (vram_optimizer_parse(v, &e->optimizer))
            return cli_usage_error(a->cmd, "--optimizer: %s", vram_last_error());
        return 0;
    }
    if (!strcmp(flag, "--checkpointing")) {
        if (vram_checkpointing_parse(v, &e->checkpointing))
            return cli_usage_error(a->cmd, "--checkpointing: %s", vram_last_error());
        return 0;
    }
    if (!strcmp(flag, "--overhead")) {
        if (cli_parse_size(a->cmd, "--overhead", v, &e->overhead_bytes)) return CLI_USAGE;
        if (e->overhead_bytes > (uint64_t)VRAM_MAX_BYTES)
            return cli_usage_error(a->cmd, "--overhead must be at most 1EiB (2^60 bytes)");
        return 0;
    }
    /* The upper bounds are vram_estimate's (docs/estimation.md, "Limits"):
     * checked here too so the message names the flag. */
    static const struct {
        const char *flag;
        int64_t min, max;
    } ints[] = {{"--batch-size", 1, VRAM_MAX_BATCH},
                {"--seq-len", 1, VRAM_MAX_SEQ},
                {"--image-size", 1, VRAM_MAX_IMAGE},
                {"--zero", 0, INT64_MAX}, /* range checked below, naming the stages */
                {"--gpus", 1, VRAM_MAX_GPUS},
                {"--max-new-tokens", 0, VRAM_MAX_SEQ},
                {"--accumulation-steps", 1, VRAM_MAX_ACCUMULATION}};
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        if (strcmp(flag, ints[i].flag)) continue;
        if ((rc = parse_int(a, flag, v, ints[i].min, ints[i].max, &n))) return rc;
        if (i == 0) {
            e->batch_size = n;
            a->batch_given = true;
        }
        if (i == 1) e->seq_len = n;
        if (i == 2) e->image_size = n;
        if (i == 3) {
            if (n > 3)
                return cli_usage_error(a->cmd, "--zero must be 0, 1, 2 or 3 (got %lld)",
                                       (long long)n);
            e->zero_stage = (int)n;
        }
        if (i == 4) e->gpus = (int)n;
        if (i == 5) e->max_new_tokens = n;
        if (i == 6) a->accumulation_steps = n;
        return 0;
    }
    return 1;
}

static bool is_ours(const char *flag)
{
    static const char *const flags[] = {
        "--model",    "--attention",  "--hf-config",      "--profile",
        "--mode",     "--precision",  "--optimizer",      "--checkpointing",
        "--overhead", "--batch-size", "--seq-len",        "--image-size",
        "--zero",     "--gpus",       "--max-new-tokens", "--accumulation-steps"};
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++)
        if (!strcmp(flag, flags[i])) return true;
    return false;
}

int cli_model_args_parse(int *argc, char **argv, cli_model_args_t *out)
{
    int kept = 1;
    for (int i = 1; i < *argc; i++) {
        char *arg = argv[i];
        if (!strcmp(arg, "--")) { /* the rest belongs to someone else */
            while (i < *argc)
                argv[kept++] = argv[i++];
            break;
        }
        char flag[32];
        const char *value = NULL;
        const char *eq = strchr(arg, '=');
        size_t flen = eq ? (size_t)(eq - arg) : strlen(arg);
        if (strncmp(arg, "--", 2) || flen >= sizeof flag) {
            argv[kept++] = arg;
            continue;
        }
        memcpy(flag, arg, flen);
        flag[flen] = '\0';
        if (!is_ours(flag)) {
            argv[kept++] = arg;
            continue;
        }
        if (eq) {
            value = eq + 1;
        } else {
            if (i + 1 >= *argc) return cli_usage_error(out->cmd, "%s needs a value", flag);
            value = argv[++i];
        }
        int rc = apply(out, flag, value);
        if (rc) return rc;
    }
    argv[kept] = NULL;
    *argc = kept;
    return 0;
}

int cli_model_args_build(const cli_model_args_t *a, vram_model_t *model)
{
    int rc;
    if (a->model_name) {
        rc = vram_model_find(a->model_name, model);
        if (rc) return cli_usage_error(a->cmd, "%s", vram_last_error());
        return 0;
    }
    if (a->hf_config) {
        rc = vram_model_from_hf_config(a->hf_config, model);
        if (rc) return cli_runtime_error(a->cmd, "%s", vram_last_error());
        return 0;
    }
    if (a->profile) {
        rc = vram_model_from_profile(a->profile, model);
        if (rc) return cli_runtime_error(a->cmd, "%s", vram_last_error());
        return 0;
    }
    return cli_usage_error(a->cmd, "no model: give --model NAME, --hf-config FILE or --profile "
                                   "FILE");
}

void cli_model_args_help(FILE *out)
{
    fprintf(out,
            "Model (one of):\n"
            "  --model NAME          catalog model ('vram estimate --list')\n"
            "  --hf-config FILE      Hugging Face config.json (bert, roberta, gpt2, gpt_neox,\n"
            "                        llama, mistral, t5, vit)\n"
            "  --profile FILE        measured profile JSON (parameters, buffers_bytes,\n"
            "                        activation_bytes_per_sample, activation_bytes_fixed, dtype)\n"
            "Workload:\n"
            "  --mode train|infer    default train\n"
            "  --batch-size B        per GPU, default 1\n"
            "  --seq-len S           tokens per sample (default: the model's)\n"
            "  --image-size N        pixels per side (default: the model's, 224)\n"
            "  --precision P         fp32, fp16, bf16, amp-fp16, amp-bf16 (train and infer),\n"
            "                        int8, int4 (infer); default fp32\n"
            "  --optimizer O         sgd, momentum, adam, adamw, adafactor, adam8bit (adamw)\n"
            "  --checkpointing C     none, full, selective (none)\n"
            "  --attention A         eager (default: keeps the attention scores) or fused\n"
            "                        (SDPA/FlashAttention: no scores kept)\n"
            "  --zero Z --gpus N     ZeRO stage 0-3 partitioning over N data-parallel GPUs\n"
            "  --max-new-tokens T    inference: generated tokens held in the KV cache\n"
            "  --overhead SIZE       CUDA context + workspaces (default 512MiB)\n"
            "  --accumulation-steps N  gradient accumulation (effective batch B*N)\n");
}
