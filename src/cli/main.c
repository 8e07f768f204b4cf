/* vram: dispatches to one subcommand per file. */
#include "cli.h"
#include "cli/daemon_client.h"

#include <stdio.h>
#include <string.h>

int vram_cli_info(int argc, char **argv);
int vram_cli_sim(int argc, char **argv);
int vram_cli_estimate(int argc, char **argv);
int vram_cli_plan(int argc, char **argv);
int vram_cli_run(int argc, char **argv);
int vram_cli_submit(int argc, char **argv);
int vram_cli_wait(int argc, char **argv);
int vram_cli_attach(int argc, char **argv);
int vram_cli_jobs(int argc, char **argv);
int vram_cli_status(int argc, char **argv);
int vram_cli_cancel(int argc, char **argv);
int vram_cli_serve(int argc, char **argv);
int vram_cli_replay(int argc, char **argv);
int vram_cli_version(int argc, char **argv);
int vram_cli_version_line(void);
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
    {"submit", vram_cli_submit,
     "queue a job vramd starts later: vram submit --mem 20GiB -- python train.py"},
    {"wait", vram_cli_wait, "wait for jobs to end: vram wait ID..."},
    {"attach", vram_cli_attach, "follow a submitted job's output: vram attach ID"},
    {"jobs", vram_cli_jobs, "vramd's jobs: vram jobs [ID] [--user U] [--state S] [--json]"},
    {"status", vram_cli_status, "vramd's memory summary per GPU (--json)"},
    {"cancel", vram_cli_cancel, "cancel jobs: vram cancel ID... | --user U --state queued"},
    {"serve", vram_cli_serve, "run the vramd daemon (same options as vramd)"},
    {"replay", vram_cli_replay, "replay an allocation trace through the pool"},
    {"version", vram_cli_version, "versions of vram, libvram, the API and the running vramd"},
    /* watch: monitoring */
    {"top", vram_cli_top, "live view of GPUs, processes and vramd's jobs (ncurses)"},
    {"history", vram_cli_history, "a GPU's memory over time, from vramd (--json)"},
    {"alerts", vram_cli_alerts, "vramd's firing and recent alerts (--json, --check FILE)"},
    {"peaks", vram_cli_peaks, "peak memory per GPU, process and job (--reset)"},
};
enum { N_COMMANDS = sizeof commands / sizeof commands[0] };

static void usage(FILE *out)
{
    fprintf(out, "usage: vram [-v] [--token-file FILE] <command> [options]\n\ncommands:\n");
    for (size_t i = 0; i < N_COMMANDS; i++)
        fprintf(out, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fprintf(out, "\n  -v                  say which vramd socket or address is used\n"
                 "  --token-file FILE   token for VRAM_URL (TCP), a file of mode 0600\n");
    fprintf(out, "\nEnvironment (VRAM_*):\n");
    for (int i = 0; i < VRAM_OPT_COUNT_; i++)
        fprintf(out, "  %-26s %s (default \"%s\")\n", vram_option_env(i), vram_option_help(i),
                vram_option_default(i));
    fprintf(out, "  %-26s %s\n", "VRAM_URL", "talk to vramd over TCP, e.g. http://127.0.0.1:7878");
    fprintf(out, "  %-26s %s\n", "VRAM_TOKEN_FILE", "file holding the token for VRAM_URL");
    fprintf(out, "\n'vram help <command>' or 'vram <command> --help' for a command's options.\n"
                 "Exit codes: the job's own status (run), 0 ok, 1 error, 2 usage, 124 queue "
                 "timeout, 130/143 interrupted.\n");
}

static int find_command(const char *name)
{
    for (size_t i = 0; i < N_COMMANDS; i++)
        if (!strcmp(name, commands[i].name)) return (int)i;
    return -1;
}

static int unknown_command(const char *name)
{
    const char *names[N_COMMANDS + 1];
    for (size_t i = 0; i < N_COMMANDS; i++)
        names[i] = commands[i].name;
    names[N_COMMANDS] = "help";
    const char *near = cli_closest(name, names, N_COMMANDS + 1);
    if (near)
        fprintf(stderr, "vram: unknown command \"%s\"; did you mean \"%s\"?\n", name, near);
    else
        fprintf(stderr, "vram: unknown command \"%s\"\n", name);
    fprintf(stderr, "'vram --help' lists the commands.\n");
    return CLI_USAGE;
}

/* vram help [CMD]: the general help, or CMD's own --help. */
static int help(int argc, char **argv)
{
    if (argc < 2) {
        usage(stdout);
        return CLI_OK;
    }
    int i = find_command(argv[1]);
    if (i < 0) return unknown_command(argv[1]);
    char *sub[] = {argv[1], "--help", NULL};
    return commands[i].fn(2, sub);
}

int main(int argc, char **argv)
{
    int first = 1;
    /* global flags before the command */
    while (first < argc && argv[first][0] == '-') {
        if (!strcmp(argv[first], "-v") || !strcmp(argv[first], "--verbose")) {
            cli_verbose = true;
            first++;
        } else if (!strcmp(argv[first], "--token-file") && first + 1 < argc) {
            cli_token_file = argv[first + 1];
            first += 2;
        } else {
            break;
        }
    }
    if (first >= argc) {
        usage(stderr);
        return CLI_USAGE;
    }
    const char *name = argv[first];
    if (!strcmp(name, "-h") || !strcmp(name, "--help")) {
        usage(stdout);
        return CLI_OK;
    }
    if (!strcmp(name, "--version")) return vram_cli_version_line();
    if (!strcmp(name, "help")) return help(argc - first, argv + first);
    int i = find_command(name);
    if (i < 0) return unknown_command(name);
    return commands[i].fn(argc - first, argv + first);
}
