/* HTTP/JSON client of vramd: finds the daemon (VRAM_URL over TCP with a
 * token file, else the socket vram_endpoint names), tells a socket it may
 * not open from a daemon that is not running, and retries refused
 * connections with backoff where asked. */
#include "cli/daemon_client.h"

#include <curl/curl.h>
#include <errno.h>
#include <grp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

const char *cli_token_file; /* --token-file (main.c) */

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

typedef struct {
    bool tcp;
    char where[600]; /* socket path or base URL */
    const char *why; /* how it was chosen, for -v */
    char auth[300];  /* "Authorization: Bearer ..." or "" */
} endpoint_t;

/* The token for TCP: never from the command line (ps shows it). */
static int read_token(char *auth, size_t len)
{
    const char *file = cli_token_file ? cli_token_file : getenv("VRAM_TOKEN_FILE");
    const char *env = getenv("VRAM_TOKEN");
    char token[256] = "";
    if (file && *file) {
        struct stat st;
        FILE *f = NULL;
        if (stat(file, &st) != 0 || !(f = fopen(file, "r")))
            return vram_fail(VRAM_EINVAL, "token file %s: %s", file, strerror(errno));
        int rc = 0;
        if (st.st_uid != getuid() || (st.st_mode & 077))
            rc = vram_fail(VRAM_EPERM, "token file %s must be yours and mode 0600 (chmod 600 %s)",
                           file, file);
        else if (!fgets(token, sizeof token, f))
            rc = vram_fail(VRAM_EINVAL, "token file %s is empty", file);
        fclose(f);
        if (rc) return rc;
        token[strcspn(token, "\r\n")] = 0;
    } else if (env) {
        snprintf(token, sizeof token, "%s", env);
    }
    auth[0] = 0;
    if (*token) snprintf(auth, len, "Authorization: Bearer %s", token);
    return 0;
}

/* The group to ask for: the socket's, or its directory's when the directory
 * hides it (a system install: /run/vram is root:vram 0750). */
static const char *group_of(const char *path)
{
    static char name[64];
    char dir[1024];
    struct stat st;
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash && slash != dir) *slash = 0;
    struct group *g = stat(path, &st) == 0 || stat(dir, &st) == 0 ? getgrgid(st.st_gid) : NULL;
    snprintf(name, sizeof name, "%s", g && st.st_gid != 0 ? g->gr_name : "vram");
    return name;
}

static int find_endpoint(endpoint_t *e)
{
    const char *url = getenv("VRAM_URL");
    memset(e, 0, sizeof *e);
    if (url && *url) {
        e->tcp = true;
        snprintf(e->where, sizeof e->where, "%s", url);
        e->why = "VRAM_URL";
        return read_token(e->auth, sizeof e->auth);
    }
    int rc = vram_endpoint(VRAM_ENDPOINT_CONNECT, e->where, sizeof e->where, &e->why);
    if (rc == VRAM_ECONN) {
        char why[400];
        snprintf(why, sizeof why, "%s", vram_last_error());
        return vram_fail(VRAM_ECONN,
                         "vramd is not running: %s; start it with `vramd` or `vram serve` (or "
                         "set VRAM_SOCKET)",
                         why);
    }
    if (rc) return rc;
    struct stat st;
    int err = lstat(e->where, &st) == 0 ? 0 : errno;
    if (err == EACCES || (err == 0 && access(e->where, R_OK | W_OK) != 0 && errno == EACCES))
        return vram_fail(VRAM_EPERM,
                         "permission denied on %s: ask the administrator to add you to group %s",
                         e->where, group_of(e->where));
    if (err == ENOENT)
        return vram_fail(VRAM_ECONN,
                         "vramd is not running at %s (%s); start it with `vramd` or `vram serve`",
                         e->where, e->why);
    return 0;
}

static void say_endpoint(const endpoint_t *e)
{
    static bool said;
    if (!cli_verbose || said) return;
    said = true;
    fprintf(stderr, "vram: using %s %s (%s)%s\n", e->tcp ? "address" : "socket", e->where, e->why,
            e->tcp && *e->auth ? " with a token" : "");
}

int cli_daemon_call(const char *method, const char *path, json_t *body, long *status,
                    json_t **reply)
{
    *reply = NULL;
    *status = 0;
    endpoint_t e;
    int rc = find_endpoint(&e);
    if (rc) return rc;
    say_endpoint(&e);
    pthread_once(&curl_once, curl_init);
    if (!handle && !(handle = curl_easy_init())) return vram_fail(VRAM_ENOMEM, "curl init failed");
    char url[1200];
    snprintf(url, sizeof url, "%s%s", e.tcp ? e.where : "http://localhost", path);
    char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
    buffer_t b = {0};
    struct curl_slist *hdr = curl_slist_append(NULL, "Content-Type: application/json");
    if (*e.auth) hdr = curl_slist_append(hdr, e.auth);
    curl_easy_reset(handle);
    if (!e.tcp) curl_easy_setopt(handle, CURLOPT_UNIX_SOCKET_PATH, e.where);
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
    long os_errno = 0;
    curl_easy_getinfo(handle, CURLINFO_OS_ERRNO, &os_errno);
    if ((cc == CURLE_COULDNT_CONNECT || cc == CURLE_COULDNT_RESOLVE_HOST) &&
        (os_errno == 0 || os_errno == ECONNREFUSED || os_errno == ENOENT)) {
        rc = vram_fail(VRAM_ECONN,
                       "vramd is not running at %s (%s); start it with `vramd` or `vram serve`",
                       e.where, e.why);
    } else if (cc == CURLE_COULDNT_CONNECT) {
        /* Something listens but would not take the connection (EAGAIN: a
         * Unix socket's accept queue is full): not "not running". */
        rc = vram_fail(VRAM_ECONN, "cannot connect to vramd at %s (%s): %s", e.where, e.why,
                       strerror((int)os_errno));
    } else if (cc != CURLE_OK) {
        rc = vram_fail(VRAM_EIO, "request to vramd at %s failed: %s", e.where,
                       curl_easy_strerror(cc));
    } else {
        curl_easy_getinfo(handle, CURLINFO_RESPONSE_CODE, status);
        json_error_t je;
        *reply = b.data ? json_loads(b.data, 0, &je) : NULL;
        if (!*reply)
            rc = vram_fail(VRAM_EPARSE, "vramd answered %ld with a body that is not JSON", *status);
    }
    free(b.data);
    return rc;
}

int cli_daemon_call_patiently(const char *cmd, bool quiet, const char *method, const char *path,
                              json_t *body, long *status, json_t **reply)
{
    /* 0.1 s doubling to 2 s, for about 30 s: a restarting vramd is back by
     * then. A connection cut during the request (vramd killed while it
     * answered) is retried too, except for a submission, which might have
     * been registered: submitting it again could make two jobs. */
    bool may_resend = strcmp(method, "POST") || strcmp(path, "/v1/jobs");
    double waited = 0, step = 0.1;
    bool warned = false;
    for (;;) {
        int rc = cli_daemon_call(method, path, body, status, reply);
        bool again = rc == VRAM_ECONN || (rc == VRAM_EIO && may_resend);
        if (!again || waited >= 30) return rc;
        if (!warned && !quiet)
            fprintf(stderr, "vram %s: %s; retrying for 30 s\n", cmd, vram_last_error());
        warned = true;
        usleep((useconds_t)(step * 1e6));
        waited += step;
        step = step * 2 > 2 ? 2 : step * 2;
    }
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
