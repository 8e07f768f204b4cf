/* The CLI's side of the vramd API: HTTP/JSON over the Unix socket (libcurl). */
#ifndef VRAM_CLI_DAEMON_CLIENT_H
#define VRAM_CLI_DAEMON_CLIENT_H

#include "cli.h"

/* Sends METHOD PATH (e.g. "/v1/jobs") with an optional JSON body (borrowed).
 * Returns 0 with the HTTP status and the parsed reply (caller decrefs), or
 * VRAM_ECONN when vramd does not answer at the socket (message in
 * vram_last_error(): "vramd is not running at SOCKET; start it with ..."),
 * VRAM_EIO for other transport errors. Reuses one connection per thread. */
int cli_daemon_call(const char *method, const char *path, json_t *body, long *status,
                    json_t **reply);
/* The message of an {"error": {...}} reply, or a generic one. */
const char *cli_daemon_error_message(json_t *reply);
/* Prints the failure of a call for command `cmd`; returns CLI_RUNTIME. */
int cli_daemon_fail(const char *cmd, int rc, long status, json_t *reply);
/* cli_daemon_call that expects status 200: CLI_OK with *reply (caller
 * decrefs), or the failure printed for `cmd` and CLI_RUNTIME (*reply NULL). */
int cli_daemon_request(const char *cmd, const char *method, const char *path, json_t **reply);

#endif
