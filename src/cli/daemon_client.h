/* The CLI's side of the vramd API: HTTP/JSON over the Unix socket (libcurl). */
#ifndef VRAM_CLI_DAEMON_CLIENT_H
#define VRAM_CLI_DAEMON_CLIENT_H

#include "cli.h"

/* --token-file FILE (main.c): the token for VRAM_URL, read from a 0600 file. */
extern const char *cli_token_file;

/* Sends METHOD PATH (e.g. "/v1/jobs") with an optional JSON body (borrowed)
 * to vramd: over TCP to VRAM_URL (token from --token-file, VRAM_TOKEN_FILE
 * or VRAM_TOKEN), else to the first socket of VRAM_SOCKET,
 * $XDG_RUNTIME_DIR/vram/vramd.sock, /run/vram/vramd.sock (-v names it).
 * Returns 0 with the HTTP status and the parsed reply (caller decrefs), or
 * VRAM_ECONN when vramd does not answer ("vramd is not running at ..."),
 * VRAM_EPERM for a socket this user may not open ("permission denied on
 * SOCKET: ask the administrator to add you to group vram") or a bad token
 * file, VRAM_EIO for other transport errors. One connection per thread. */
int cli_daemon_call(const char *method, const char *path, json_t *body, long *status,
                    json_t **reply);
/* cli_daemon_call that rides out a vramd that refuses connections (not
 * running yet, restarting) with backoff for about 30 s, saying so once on
 * stderr unless quiet; also a connection cut mid-request, except for
 * POST /v1/jobs (it may have been registered). */
int cli_daemon_call_patiently(const char *cmd, bool quiet, const char *method, const char *path,
                              json_t *body, long *status, json_t **reply);
/* The message of an {"error": {...}} reply, or a generic one. */
const char *cli_daemon_error_message(json_t *reply);
/* Prints the failure of a call for command `cmd`; returns CLI_RUNTIME. */
int cli_daemon_fail(const char *cmd, int rc, long status, json_t *reply);
/* cli_daemon_call that expects status 200: CLI_OK with *reply (caller
 * decrefs), or the failure printed for `cmd` and CLI_RUNTIME (*reply NULL). */
int cli_daemon_request(const char *cmd, const char *method, const char *path, json_t **reply);

#endif
