/* Parsing of the model and estimate flags shared by several commands. */
#include "model_args.h"

#include "cli.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void cli_model_args_init(cli_model_args_t *a, const char *cmd)
{
    memset(a, 0, sizeof *a);
    a->cmd = cmd;
    vram_estimate_config_init(&a->est);
}

/* One flag with its value; returns 0, CLI_USAGE, or 1 when not ours. The
 * estimate settings come from libvram's table (vram_estimate_settings). */
static int apply(cli_model_args_t *a, const char *flag, const char *v)
{
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
    if (!vram_estimate_setting_find(flag)) return 1;
    if (!strcmp(flag, "--gpu-name")) {
        a->gpu_name = v;
        if (!strcmp(v, "list")) return 0; /* `vram plan --gpu-name list` lists them */
        vram_gpu_model_resolve(v, &a->gpu_note);
    }
    if (vram_estimate_set(&a->est, flag, v))
        return cli_usage_error(a->cmd, "%s", vram_last_error());
    if (!strcmp(flag, "--batch-size")) a->batch_given = true;
    return 0;
}

/* A flag of ours: the model's, or an estimate setting's. */
static bool is_ours(const char *flag)
{
    if (!strcmp(flag, "--model") || !strcmp(flag, "--hf-config") || !strcmp(flag, "--profile"))
        return true;
    return !strncmp(flag, "--", 2) && vram_estimate_setting_find(flag) != NULL;
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
        char flag[64];
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
    /* the head and labels (--head, --num-labels) are estimate settings:
     * vram_estimate puts them on the model */
    int rc = build(a, model);
    if (rc) return rc;
    /* a flag the model's kind has no use for is said, not silently dropped
     * (whether it applies is libvram's to say) */
    const struct {
        const char *flag, *key;
        int64_t value;
    } given[] = {{"--seq-len", "seq_len", a->est.seq_len},
                 {"--image-size", "image_size", a->est.image_size}};
    for (size_t i = 0; i < sizeof given / sizeof given[0]; i++)
        if (given[i].value > 0 && vram_estimate_setting_applies(model, given[i].key) == 0)
            fprintf(stderr, "vram %s: %s %lld does not apply to %s, %s; ignored\n", a->cmd,
                    given[i].flag, (long long)given[i].value, model->name,
                    model->family == VRAM_FAMILY_PROFILE ? "a profile measured at one input shape"
                    : !strcmp(given[i].key, "seq_len")
                        ? "an image model (its input is --image-size)"
                        : "which takes sequences (--seq-len), not images");
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

/* The lines of one setting: the flag and its metavar, then its help (and
 * a NAME's accepted names) wrapped to 80 columns. */
static void help_setting(FILE *out, const vram_estimate_setting_t *st)
{
    char head[48], text[512];
    snprintf(head, sizeof head, "%s %s", st->flag, st->metavar);
    snprintf(text, sizeof text, "%s%s%s%s", st->help, st->names ? " (" : "",
             st->names ? st->names : "", st->names ? ")" : "");
    for (char *c = text; *c; c++)
        if (*c == '\n') *c = ' ';
    enum { INDENT = 25, WIDTH = 80 - INDENT };
    if (strlen(head) > INDENT - 3)
        fprintf(out, "  %s\n%*s", head, INDENT, "");
    else
        fprintf(out, "  %-*s", INDENT - 2, head);
    const char *p = text;
    while (*p) {
        size_t len = strlen(p);
        if (len > WIDTH) { /* break at the last space that fits */
            len = WIDTH;
            while (len > 0 && p[len] != ' ')
                len--;
            if (len == 0) len = WIDTH;
        }
        fprintf(out, "%.*s\n", (int)len, p);
        p += len;
        while (*p == ' ')
            p++;
        if (*p) fprintf(out, "%*s", INDENT, "");
    }
}

void cli_model_args_help(FILE *out)
{
    fprintf(out,
            "Model (one of):\n"
            "  --model NAME           catalog model ('vram estimate --list')\n"
            "  --hf-config FILE|ID    Hugging Face config.json, or a hub id (org/name) read\n"
            "                         from the local cache (HF_HUB_CACHE, HF_HOME); model_type:\n");
    /* the family table's own list, wrapped */
    int col = 0;
    for (const char *t = vram_hf_model_types(); *t;) {
        size_t n = strcspn(t, ",");
        if (col == 0 || col + (int)n + 2 > 79) {
            fprintf(out, "%s%25s", col ? ",\n" : "", "");
            col = 25;
        } else {
            col += fprintf(out, ", ");
        }
        col += fprintf(out, "%.*s", (int)n, t);
        t += n + (t[n] == ',');
    }
    fprintf(out,
            ";\n%25sother decoders by their standard keys\n"
            "  --profile FILE         measured profile JSON (parameters, buffers_bytes,\n"
            "                         activation_bytes_per_sample, activation_bytes_fixed, "
            "dtype)\n",
            "");
    size_t n;
    const vram_estimate_setting_t *all = vram_estimate_settings(&n);
    const char *group = NULL;
    for (size_t i = 0; i < n; i++) {
        if (!group || strcmp(group, all[i].group)) {
            group = all[i].group;
            fprintf(out, "%s:\n", group);
        }
        help_setting(out, &all[i]);
    }
}
