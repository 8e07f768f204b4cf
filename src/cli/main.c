/* vram: dispatches to one subcommand per file. */
#include "cli.h"

#include <stdio.h>
#include <string.h>

int vram_cli_info(int argc, char **argv);
int vram_cli_sim(int argc, char **argv);
int vram_cli_estimate(int argc, char **argv);
int vram_cli_plan(int argc, char **argv);
int vram_cli_run(int argc, char **argv);
int vram_cli_jobs(int argc, char **argv);
int vram_cli_status(int argc, char **argv);
int vram_cli_cancel(int argc, char **argv);
int vram_cli_serve(int argc, char **argv);
int vram_cli_replay(int argc, char **argv);
/* watch: monitoring */
int vram_cli_top(int argc, char **argv);
int vram_cli_history(int argc, char **argv);
int vram_cli_alerts(int argc, char **argv);
int vram_cli_peaks(int argc, char **argv);

static const struct {
    const char *name;
    cli_command_fn fn;
    const char *summary;
} commands[] = {
    {"info", vram_cli_info, "GPUs and their memory (--json, -i N)"},
    {"sim", vram_cli_sim, "simulated GPUs: vram sim alloc --mem 10GiB"},
    {"estimate", vram_cli_estimate,
     "memory a model needs: vram estimate --model gpt2 --batch-size 8"},
    {"plan", vram_cli_plan,
     "batch sizes that fit: vram plan --model bert-base --gpu-name A100-80GB"},
    {"run", vram_cli_run, "run a job through vramd: vram run --mem 20GiB -- python train.py"},
    {"jobs", vram_cli_jobs, "vramd's queued, running and recent jobs (--json)"},
    {"status", vram_cli_status, "vramd's memory summary per GPU (--json)"},
    {"cancel", vram_cli_cancel, "cancel a vramd job: vram cancel ID"},
    {"serve", vram_cli_serve, "run the vramd daemon (same options as vramd)"},
    {"replay", vram_cli_replay, "replay an allocation trace through the pool"},
    /* watch: monitoring */
    {"top", vram_cli_top, "live view of GPUs, processes and vramd's jobs (ncurses)"},
    {"history", vram_cli_history, "a GPU's memory over time, from vramd (--json)"},
    {"alerts", vram_cli_alerts, "vramd's firing and recent alerts (--json, --check FILE)"},
    {"peaks", vram_cli_peaks, "peak memory per GPU, process and job (--reset)"},
};

static void usage(FILE *out)
{
    fprintf(out, "usage: vram <command> [options]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(out, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fprintf(out, "\nEnvironment (VRAM_*):\n");
    for (int i = 0; i < VRAM_OPT_COUNT_; i++)
        fprintf(out, "  %-26s %s (default \"%s\")\n", vram_option_env(i), vram_option_help(i),
                vram_option_default(i));
    fprintf(out, "\n'vram <command> --help' for a command's options.\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return CLI_USAGE;
    }
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return CLI_OK;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("vram 0.1.0\n");
        return CLI_OK;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "vram: unknown command \"%s\"\n", argv[1]);
    usage(stderr);
    return CLI_USAGE;
}
