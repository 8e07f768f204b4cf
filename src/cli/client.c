/* HTTP/JSON client of vramd over its Unix socket. */
#include "cli/daemon_client.h"
#include "daemon/daemon.h"

#include <curl/curl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    char *data;
    size_t len;
} buffer_t;

static size_t on_data(char *ptr, size_t size, size_t n, void *arg)
{
    buffer_t *b = arg;
    size_t add = size * n;
    char *nd = realloc(b->data, b->len + add + 1);
    if (!nd) return 0;
    memcpy(nd + b->len, ptr, add);
    b->data = nd;
    b->len += add;
    b->data[b->len] = 0;
    return add;
}

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static void curl_init(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
}

static __thread CURL *handle;

int cli_daemon_call(const char *method, const char *path, json_t *body, long *status,
                    json_t **reply)
{
    *reply = NULL;
    *status = 0;
    pthread_once(&curl_once, curl_init);
    if (!handle && !(handle = curl_easy_init())) return vram_fail(VRAM_ENOMEM, "curl init failed");
    char sock[512], url[1024];
    vramd_socket_path(sock, sizeof sock);
    snprintf(url, sizeof url, "http://localhost%s", path);
    char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
    buffer_t b = {0};
    struct curl_slist *hdr = curl_slist_append(NULL, "Content-Type: application/json");
    curl_easy_reset(handle);
    curl_easy_setopt(handle, CURLOPT_UNIX_SOCKET_PATH, sock);
    curl_easy_setopt(handle, CURLOPT_URL, url);
    curl_easy_setopt(handle, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(handle, CURLOPT_HTTPHEADER, hdr);
    curl_easy_setopt(handle, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(handle, CURLOPT_TIMEOUT, 120L);
    curl_easy_setopt(handle, CURLOPT_CONNECTTIMEOUT, 5L);
    curl_easy_setopt(handle, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(handle, CURLOPT_WRITEDATA, &b);
    if (text) {
        curl_easy_setopt(handle, CURLOPT_POSTFIELDS, text);
        curl_easy_setopt(handle, CURLOPT_POSTFIELDSIZE, (long)strlen(text));
    } else if (!strcmp(method, "POST")) {
        curl_easy_setopt(handle, CURLOPT_POSTFIELDS, "");
        curl_easy_setopt(handle, CURLOPT_POSTFIELDSIZE, 0L);
    }
    CURLcode cc = curl_easy_perform(handle);
    curl_slist_free_all(hdr);
    free(text);
    int rc = 0;
    if (cc == CURLE_COULDNT_CONNECT || cc == CURLE_COULDNT_RESOLVE_HOST) {
        rc = vram_fail(VRAM_ECONN,
                       "vramd is not running at %s; start it with `vramd` or `vram serve` "
                       "(or set VRAM_SOCKET)",
                       sock);
    } else if (cc != CURLE_OK) {
        rc = vram_fail(VRAM_EIO, "request to vramd at %s failed: %s", sock, curl_easy_strerror(cc));
    } else {
        curl_easy_getinfo(handle, CURLINFO_RESPONSE_CODE, status);
        json_error_t e;
        *reply = b.data ? json_loads(b.data, 0, &e) : NULL;
        if (!*reply)
            rc = vram_fail(VRAM_EPARSE, "vramd answered %ld with a body that is not JSON", *status);
    }
    free(b.data);
    return rc;
}

const char *cli_daemon_error_message(json_t *reply)
{
    const char *msg =
        json_string_value(json_object_get(json_object_get(reply, "error"), "message"));
    return msg ? msg : "unexpected reply from vramd";
}

int cli_daemon_fail(const char *cmd, int rc, long status, json_t *reply)
{
    if (rc) return cli_runtime_error(cmd, "%s", vram_last_error());
    (void)status;
    return cli_runtime_error(cmd, "%s", cli_daemon_error_message(reply));
}

int cli_daemon_request(const char *cmd, const char *method, const char *path, json_t **reply)
{
    long status;
    int rc = cli_daemon_call(method, path, NULL, &status, reply);
    if (!rc && status == 200) return CLI_OK;
    rc = cli_daemon_fail(cmd, rc, status, *reply);
    json_decref(*reply);
    *reply = NULL;
    return rc;
}
