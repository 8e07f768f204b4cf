/* vram alerts: what vramd's alert rules found (GET /v1/alerts), or a check of
 * a rules file before vramd is pointed at it. */
#include "cli/daemon_client.h"
#include "cli/proc_text.h"
#include "watch/watch.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void usage(FILE *out)
{
    fprintf(out, "usage: vram alerts [--all] [--limit N] [--json]\n"
                 "       vram alerts --check FILE\n\n"
                 "Firing and pending alerts of vramd (and with --all the last resolved ones).\n\n"
                 "  --all         also resolved alerts (the last N, default 20)\n"
                 "  --limit N     how many resolved alerts with --all\n"
                 "  --check FILE  validate an alert rules file (VRAM_ALERT_RULES) and list it\n"
                 "  --json        the /v1/alerts document (docs/monitoring.md)\n");
}

static void print_alert(json_t *a)
{
    char when[32] = "-";
    json_t *at = json_object_get(a, "fired_at");
    if (json_is_null(at)) at = json_object_get(a, "pending_since");
    time_t t = (time_t)json_number_value(at);
    strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", localtime(&t));
    const char *msg = json_string_value(json_object_get(a, "message"));
    char state[64], level[64], rule[256], subject[256], text[1024];
    printf("%-9s %-9s %-19s %-24s %-8s %s\n", cli_field_text(a, "state", "", state, sizeof state),
           cli_field_text(a, "level", "", level, sizeof level), when,
           cli_field_text(a, "rule", "", rule, sizeof rule),
           cli_field_text(a, "subject", "", subject, sizeof subject),
           cli_escaped(msg && *msg ? msg : "-", text, sizeof text));
}

int vram_cli_alerts(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"all", no_argument, NULL, 'a'},         {"limit", required_argument, NULL, 'l'},
        {"check", required_argument, NULL, 'c'}, {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},        {NULL, 0, NULL, 0}};
    bool all = false, json = false;
    long long limit = 20;
    const char *check = NULL;
    int c;
    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
        switch (c) {
        case 'a':
            all = true;
            break;
        case 'l':
            if (cli_parse_int("alerts", "--limit", optarg, 0, 10000, &limit)) return CLI_USAGE;
            break;
        case 'c':
            check = optarg;
            break;
        case 'j':
            json = true;
            break;
        case 'h':
            usage(stdout);
            return CLI_OK;
        default:
            return cli_getopt_error("alerts", c, argv);
        }
    }
    if (optind < argc) return cli_usage_error("alerts", "unexpected argument \"%s\"", argv[optind]);
    if (check) {
        char *text = NULL;
        if (vram_watch_check_rules(check, &text) != 0)
            return cli_runtime_error("alerts", "%s", vram_last_error());
        printf("%s: ok\n%s", check, text);
        free(text);
        return CLI_OK;
    }
    char path[64];
    snprintf(path, sizeof path, "/v1/alerts?limit=%lld", all ? limit : 0LL);
    json_t *reply;
    int rc = cli_daemon_request("alerts", "GET", path, &reply);
    if (rc) return rc;
    if (json) {
        cli_print_json(reply);
        return CLI_OK;
    }
    size_t n = 0, i;
    json_t *a;
    printf("%-9s %-9s %-19s %-24s %-8s %s\n", "STATE", "LEVEL", "SINCE", "RULE", "SUBJECT",
           "MESSAGE");
    const char *groups[] = {"firing", "pending", "resolved"};
    for (int g = 0; g < 3; g++)
        json_array_foreach(json_object_get(reply, groups[g]), i, a)
        {
            print_alert(a);
            n++;
        }
    if (!n) printf("(no alerts)\n");
    json_decref(reply);
    return CLI_OK;
}
