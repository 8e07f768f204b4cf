/* Parsing of the model and estimate flags shared by several commands. */
#include "model_args.h"

#include "cli.h"
#include "plan/estimate_limits.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void cli_model_args_init(cli_model_args_t *a, const char *cmd)
{
    memset(a, 0, sizeof *a);
    a->cmd = cmd;
    vram_estimate_config_init(&a->est);
    a->accumulation_steps = 1;
}

/* "on"/"off" of a flag. */
static int on_off(const cli_model_args_t *a, const char *flag, const char *v, bool *out)
{
    if (!strcmp(v, "on") || !strcmp(v, "yes") || !strcmp(v, "true")) {
        *out = true;
        return 0;
    }
    if (!strcmp(v, "off") || !strcmp(v, "no") || !strcmp(v, "false")) {
        *out = false;
        return 0;
    }
    return cli_usage_error(a->cmd, "%s \"%s\": use on or off", flag, v);
}

/* The estimator's second-edition flags (docs/estimation.md): LoRA/QLoRA,
 * the GPU and CUDA set-up, the optimizer's implementation, offloading and
 * the chunked loss. Returns 0, CLI_USAGE, or 1 when not one of them. */
static int apply_second_edition(cli_model_args_t *a, const char *flag, const char *v)
{
    vram_estimate_config_t *e = &a->est;
    long long n;
    int rc;
    bool b;
    if (!strcmp(flag, "--lora-rank")) {
        if ((rc = cli_parse_int(a->cmd, flag, v, 1, VRAM_MAX_WIDTH, &n))) return rc;
        e->lora_rank = n;
        return 0;
    }
    if (!strcmp(flag, "--lora-alpha")) {
        char *end;
        double x = strtod(v, &end);
        if (end == v || *end || !(x > 0 && x < 1e9))
            return cli_usage_error(a->cmd, "--lora-alpha \"%s\" is not a positive number", v);
        e->lora_alpha = x;
        return 0;
    }
    if (!strcmp(flag, "--lora-targets")) {
        if (vram_lora_targets_parse(v, &e->lora_targets))
            return cli_usage_error(a->cmd, "--lora-targets: %s", vram_last_error());
        return 0;
    }
    if (!strcmp(flag, "--quantize-base")) {
        if (!strcmp(v, "nf4"))
            e->quantize_base = VRAM_QUANT_NF4;
        else if (!strcmp(v, "int8"))
            e->quantize_base = VRAM_QUANT_INT8;
        else if (!strcmp(v, "none"))
            e->quantize_base = VRAM_QUANT_NONE;
        else
            return cli_usage_error(a->cmd, "unknown --quantize-base \"%s\" (use nf4, int8 or none)",
                                   v);
        e->double_quant =
            e->quantize_base == VRAM_QUANT_NF4 && !a->double_quant_given ? true : e->double_quant;
        return 0;
    }
    if (!strcmp(flag, "--double-quant")) {
        if ((rc = on_off(a, flag, v, &e->double_quant))) return rc;
        a->double_quant_given = true;
        return 0;
    }
    if (!strcmp(flag, "--activation-offload")) {
        if ((rc = on_off(a, flag, v, &b))) return rc;
        e->activation_offload = b;
        return 0;
    }
    if (!strcmp(flag, "--head")) {
        if (vram_head_parse(v, &a->head))
            return cli_usage_error(a->cmd, "--head: %s", vram_last_error());
        return 0;
    }
    if (!strcmp(flag, "--zero-grad")) {
        /* PyTorch before 2.0 zeroed gradients in place by default: they
         * stay allocated from one step into the next */
        if (!strcmp(v, "zeros"))
            e->grads_kept = true;
        else if (strcmp(v, "none"))
            return cli_usage_error(a->cmd, "unknown --zero-grad \"%s\" (use none or zeros)", v);
        return 0;
    }
    if (!strcmp(flag, "--compile")) {
        if ((rc = on_off(a, flag, v, &b))) return rc;
        e->compiled_loss = b;
        return 0;
    }
    if (!strcmp(flag, "--lazy-loading")) {
        if ((rc = on_off(a, flag, v, &b))) return rc;
        e->lazy_loading = b ? 1 : 2;
        return 0;
    }
    if (!strcmp(flag, "--loss")) {
        if (strcmp(v, "chunked") && strcmp(v, "full") && strcmp(v, "sum"))
            return cli_usage_error(a->cmd, "unknown --loss \"%s\" (use full, chunked or sum)", v);
        e->chunked_loss = !strcmp(v, "chunked");
        e->sum_loss = !strcmp(v, "sum");
        return 0;
    }
    if (!strcmp(flag, "--optimizer-impl")) {
        if (!strcmp(v, "foreach"))
            e->optim_impl = VRAM_OPTIM_FOREACH;
        else if (!strcmp(v, "fused"))
            e->optim_impl = VRAM_OPTIM_FUSED;
        else if (!strcmp(v, "for-loop"))
            e->optim_impl = VRAM_OPTIM_FOR_LOOP;
        else
            return cli_usage_error(a->cmd,
                                   "unknown --optimizer-impl \"%s\" (use foreach, fused or "
                                   "for-loop)",
                                   v);
        return 0;
    }
    if (!strcmp(flag, "--cuda")) {
        int major, minor, len = 0;
        if (sscanf(v, "%d.%d%n", &major, &minor, &len) != 2 || v[len] || major < 9 || major > 19 ||
            minor < 0 || minor > 9)
            return cli_usage_error(a->cmd, "--cuda \"%s\": give the CUDA version as 11.8 or 12.4",
                                   v);
        e->cuda_version = major * 10 + minor;
        return 0;
    }
    if (!strcmp(flag, "--gpu-name")) {
        const vram_gpu_model_t *g = vram_gpu_model_resolve(v, &a->gpu_note);
        if (!g && strcmp(v, "list")) { /* `vram plan --gpu-name list` lists them */
            size_t count;
            const vram_gpu_model_t *all = vram_gpu_models(&count);
            char known[512] = "";
            for (size_t i = 0; i < count; i++) {
                if (i) strncat(known, ", ", sizeof known - strlen(known) - 1);
                strncat(known, all[i].name, sizeof known - strlen(known) - 1);
            }
            return cli_usage_error(a->cmd,
                                   "unknown GPU \"%s\" (known: %s; a bare H100, A100, "
                                   "V100 or H200 picks the common variant)",
                                   v, known);
        }
        if (g) e->gpu_cc = g->cc_major * 10 + g->cc_minor;
        a->gpu_name = v;
        return 0;
    }
    return 1;
}

/* One flag with its value; returns 0, CLI_USAGE, or 1 when not ours. */
static int apply(cli_model_args_t *a, const char *flag, const char *v)
{
    vram_estimate_config_t *e = &a->est;
    long long n = 0;
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
        else if (!strcmp(v, "load"))
            e->mode = VRAM_MODE_LOAD;
        else
            return cli_usage_error(a->cmd, "unknown --mode \"%s\" (use train, infer or load)", v);
        return 0;
    }
    if (!strcmp(flag, "--attention")) {
        e->attention_from_model = false;
        if (!strcmp(v, "eager"))
            e->fused_attention = false;
        else if (!strcmp(v, "fused") || !strcmp(v, "sdpa") || !strcmp(v, "flash"))
            e->fused_attention = true;
        else if (!strcmp(v, "auto"))
            e->attention_from_model = true, e->fused_attention = false;
        else
            return cli_usage_error(a->cmd, "unknown --attention \"%s\" (use auto, eager or fused)",
                                   v);
        return 0;
    }
    if ((rc = apply_second_edition(a, flag, v)) != 1) return rc;
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
                {"--accumulation-steps", 1, VRAM_MAX_ACCUMULATION},
                {"--num-labels", 1, VRAM_MAX_VOCAB}};
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        if (strcmp(flag, ints[i].flag)) continue;
        if ((rc = cli_parse_int(a->cmd, flag, v, ints[i].min, ints[i].max, &n))) return rc;
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
        if (i == 7) a->num_labels = n;
        if (i == 6) {
            a->accumulation_steps = n;
            if (n > 1) e->grads_kept = true; /* gradients accumulate across micro-batches */
        }
        return 0;
    }
    return 1;
}

static bool is_ours(const char *flag)
{
    static const char *const flags[] = {"--model",          "--attention",
                                        "--hf-config",      "--profile",
                                        "--mode",           "--precision",
                                        "--optimizer",      "--checkpointing",
                                        "--overhead",       "--batch-size",
                                        "--seq-len",        "--image-size",
                                        "--zero",           "--gpus",
                                        "--max-new-tokens", "--accumulation-steps",
                                        "--lora-rank",      "--lora-alpha",
                                        "--lora-targets",   "--quantize-base",
                                        "--double-quant",   "--activation-offload",
                                        "--lazy-loading",   "--loss",
                                        "--optimizer-impl", "--cuda",
                                        "--gpu-name",       "--compile",
                                        "--zero-grad",      "--head",
                                        "--num-labels"};
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
        if (!strcmp(flag, "--gpu-name")) { /* `vram plan` reads it too */
            argv[kept++] = arg;
            if (!eq) argv[kept++] = (char *)value;
        }
    }
    argv[kept] = NULL;
    *argc = kept;
    return 0;
}

static int build(const cli_model_args_t *a, vram_model_t *model);

int cli_model_args_build(const cli_model_args_t *a, vram_model_t *model)
{
    int rc = build(a, model);
    if (rc) return rc;
    /* the head and labels the user loads the model with, over the config's */
    if (a->head != VRAM_HEAD_DEFAULT || a->num_labels > 0)
        vram_model_set_head(model, a->head != VRAM_HEAD_DEFAULT ? a->head : model->head,
                            a->num_labels);
    return 0;
}

static int build(const cli_model_args_t *a, vram_model_t *model)
{
    int rc;
    if (a->model_name) {
        rc = vram_model_find(a->model_name, model);
        if (rc) return cli_usage_error(a->cmd, "%s", vram_last_error());
        return 0;
    }
    if (a->hf_config) {
        /* a path, or a hub id looked up in the local cache */
        const char *file = a->hf_config;
        char cached[4096];
        if (access(file, F_OK) != 0 && !strchr(file, '\\') && strstr(file, ".json") == NULL) {
            if (vram_hf_cache_config(file, cached, sizeof cached))
                return cli_runtime_error(a->cmd, "%s", vram_last_error());
            file = cached;
        }
        rc = vram_model_from_hf_config(file, model);
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
            "  --hf-config FILE|ID   Hugging Face config.json, or a hub id (org/name) read\n"
            "                        from the local cache (HF_HUB_CACHE, HF_HOME); families:\n"
            "                        bert, roberta, gpt2, gpt_neox, llama, mistral, qwen2,\n"
            "                        phi, phi3, gemma, gemma2, opt, gpt_bigcode, mixtral,\n"
            "                        qwen2_moe, t5, mt5, umt5, vit, whisper, wav2vec2,\n"
            "                        qwen3, qwen3_moe, olmo, olmo2, gemma3_text, falcon,\n"
            "                        bloom, deepseek_v2, deepseek_v3, bart, mbart,\n"
            "                        distilbert, deberta-v2, clip, clip_vision_model,\n"
            "                        mamba; other decoders by their standard keys\n"
            "  --head CLASS          the class the model is loaded with, over the config's\n"
            "                        architectures (BertForSequenceClassification, or just\n"
            "                        ForSequenceClassification; Model for none)\n"
            "  --num-labels N        labels of a classification head\n"
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
            "  --attention A         auto (default: what Hugging Face uses for the family;\n"
            "                        eager for the catalog), eager (keeps the attention\n"
            "                        scores) or fused (SDPA/FlashAttention)\n"
            "  --zero Z --gpus N     ZeRO stage 0-3 partitioning over N data-parallel GPUs\n"
            "  --max-new-tokens T    inference: generated tokens held in the KV cache\n"
            "  --overhead SIZE       CUDA context + workspaces (default: by GPU and CUDA)\n"
            "  --accumulation-steps N  gradient accumulation (effective batch B*N; gradients\n"
            "                        stay allocated between micro-batches)\n"
            "  --mode load           weights on the GPU, nothing run yet\n"
            "LoRA / QLoRA:\n"
            "  --lora-rank R         train rank-R adapters; the base is frozen\n"
            "  --lora-alpha A        scaling (reported; no memory effect)\n"
            "  --lora-targets T      q,k,v,o,gate,up,down or all-linear (default q,v)\n"
            "  --quantize-base Q     nf4 or int8 frozen base (QLoRA)\n"
            "  --double-quant on|off quantize the NF4 constants too (default on)\n"
            "Real GPU:\n"
            "  --gpu-name NAME       GPU (H100, A100-40GB, rtx4090): context and workspaces\n"
            "  --cuda X.Y            CUDA version (default 12.x); before 11.7 no lazy loading\n"
            "  --lazy-loading on|off CUDA_MODULE_LOADING=LAZY (default: by CUDA version)\n"
            "  --optimizer-impl I    foreach (default), fused, for-loop\n"
            "  --activation-offload on|off  checkpointed layer inputs on the CPU\n"
            "  --loss L              full (cross-entropy), chunked (logits per vocabulary\n"
            "                        chunk, torchtune's CEWithChunkedOutputLoss), sum\n"
            "                        (benchmarks' logits.sum())\n"
            "  --zero-grad none|zeros  zero_grad(set_to_none=...): zeros (PyTorch < 2.0's\n"
            "                        default) keeps gradients allocated between steps\n"
            "  --compile on|off      the loss runs under torch.compile (torchtune compile=True):\n"
            "                        it keeps its input, not fp32 log-probabilities\n");
}
