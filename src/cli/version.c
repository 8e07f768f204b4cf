/* vram --version and vram version [--json]: what is installed, and what runs. */
#include "cli/daemon_client.h"

#include <stdio.h>
#include <string.h>

int vram_cli_version_line(void)
{
    printf("vram %s (%s)\n", vram_version(), vram_build_id());
    return CLI_OK;
}

/* {"version", "socket"} of the vramd that answers, else {"error"}. */
static json_t *daemon_version(void)
{
    long status;
    json_t *reply = NULL, *out;
    int rc = cli_daemon_call("GET", "/v1/health", NULL, &status, &reply);
    if (rc)
        out = json_pack("{s:s}", "error", vram_last_error());
    else if (status != 200)
        out = json_pack("{s:s}", "error", cli_daemon_error_message(reply));
    else
        out = json_pack("{s:O?,s:O?}", "version", json_object_get(reply, "version"), "socket",
                        json_object_get(reply, "socket"));
    json_decref(reply);
    return out;
}

int vram_cli_version(int argc, char **argv)
{
    bool as_json = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json"))
            as_json = true;
        else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf(
                "usage: vram version [--json]\n\nThe versions of vram and libvram (release and C "
                "API level), the vramd HTTP API,\nthe build (git describe) and the running "
                "vramd, if one answers.\n");
            return CLI_OK;
        } else
            return cli_usage_error("version", "unknown argument \"%s\"", argv[i]);
    }
    json_t *daemon = daemon_version();
    if (as_json) {
        cli_print_json(json_pack("{s:s,s:s,s:i,s:i,s:s,s:s,s:o}", "vram", VRAM_VERSION_STRING,
                                 "library", vram_version(), "api_version", vram_api_version(),
                                 "header_api_version", VRAM_API_VERSION, "http_api", VRAM_HTTP_API,
                                 "git_describe", vram_build_id(), "daemon", daemon));
        return CLI_OK;
    }
    printf("vram      %s\n", VRAM_VERSION_STRING);
    printf("libvram   %s (C API %d)\n", vram_version(), vram_api_version());
    printf("build     %s\n", vram_build_id());
    printf("HTTP API  %s\n", VRAM_HTTP_API);
    const char *dv = json_string_value(json_object_get(daemon, "version"));
    if (dv)
        printf("vramd     %s at %s\n", dv,
               json_string_value(json_object_get(daemon, "socket"))
                   ? json_string_value(json_object_get(daemon, "socket"))
                   : "?");
    else
        printf("vramd     not reachable: %s\n",
               json_string_value(json_object_get(daemon, "error")));
    json_decref(daemon);
    return CLI_OK;
}
