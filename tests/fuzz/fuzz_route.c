/* Fuzz target: the daemon's router as a whole (src/daemon/routes.c:
 * vramd_route): method, path (job ids), query (limit, wait) and body of
 * every /v1 route, on a real scheduler with an in-memory store. The input is
 *
 *   METHOD PATH[?QUERY] [tcp]\n
 *   BODY
 *
 * ("tcp": a TCP client without the token, so mutations must be refused).
 * Whatever the request, the answer is a JSON document with a status the API
 * documents, never a 5xx, and the ledger invariants hold afterwards. */
#include "fuzz.h"

#include "fuzz_daemon.h"

#include <jansson.h>
#include <unistd.h>

static vramd_state_t daemon_state;
static int64_t resident_id; /* a running job, so job routes find something */

/* Query values, unparsed: "limit=5&wait=0" (no percent-decoding; the HTTP
 * layer would have done it). */
typedef struct {
    const char *text;
    char value[256];
} query_t;

static const char *query_get(void *arg, const char *key)
{
    query_t *q = arg;
    size_t klen = strlen(key);
    for (const char *p = q->text; p && *p;) {
        const char *amp = strchr(p, '&');
        size_t len = amp ? (size_t)(amp - p) : strlen(p);
        if (len > klen && !strncmp(p, key, klen) && p[klen] == '=') {
            snprintf(q->value, sizeof q->value, "%.*s", (int)(len - klen - 1), p + klen + 1);
            return q->value;
        }
        p = amp ? amp + 1 : NULL;
    }
    return NULL;
}

static bool is_documented_status(int status)
{
    static const int known[] = {200, 201, 400, 401, 403, 404, 405, 409, 413, 422, 429};
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (status == known[i]) return true;
    return false;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_daemon_open(&daemon_state);
    resident_id = fuzz_daemon_resident(&daemon_state, resident_id);
    const uint8_t *nl = memchr(data, '\n', size);
    size_t head_len = nl ? (size_t)(nl - data) : size;
    char *head = fuzz_cstr(data, head_len);
    const char *body = nl ? (const char *)nl + 1 : "";
    size_t body_len = nl ? size - head_len - 1 : 0;

    /* "METHOD PATH[?QUERY] [tcp]" */
    char *method = head, *path = strchr(head, ' ');
    if (path)
        *path++ = '\0';
    else
        path = head + strlen(head);
    char *flag = strchr(path, ' ');
    bool tcp = false;
    if (flag) {
        *flag++ = '\0';
        tcp = !strcmp(flag, "tcp");
    }
    query_t query = {.text = NULL};
    char *mark = strchr(path, '?');
    if (mark) {
        *mark = '\0';
        query.text = mark + 1;
    }
    vramd_request_t q = {
        .method = method,
        .path = path,
        .query = query_get,
        .query_arg = &query,
        .body = body,
        .body_len = body_len,
        .transport = tcp ? VRAMD_TCP : VRAMD_UNIX,
        .uid = getuid(),
        .may_mutate = !tcp,
        .deny_reason = tcp ? "mutations over TCP need the token" : NULL,
    };
    /* GET /v1/jobs/ID?wait=S blocks while the job is queued: keep it short. */
    const char *wait = query.text ? strstr(query.text, "wait=") : NULL;
    if (wait && strtod(wait + 5, NULL) > 0.05) query.text = NULL;

    vramd_response_t r;
    vramd_route(&daemon_state, &q, &r);
    FUZZ_CHECK(r.body, "%s %s: status %d without a body", method, path, r.status);
    static int verbose = -1;
    if (verbose < 0) verbose = getenv("FUZZ_VERBOSE") != NULL;
    if (verbose) printf("%s %s -> %d %s\n", method, path, r.status, r.body);
    FUZZ_CHECK(is_documented_status(r.status), "%s %s: status %d: %s", method, path, r.status,
               r.body);
    json_t *v = json_loads(r.body, 0, NULL);
    FUZZ_CHECK(json_is_object(v) || json_is_array(v), "%s %s: body is not JSON: %s", method, path,
               r.body);
    if (r.status >= 400) {
        json_t *err = json_object_get(v, "error");
        const char *code = json_string_value(json_object_get(err, "code"));
        const char *msg = json_string_value(json_object_get(err, "message"));
        FUZZ_CHECK(code && *code && msg && *msg, "error without code or message: %s", r.body);
    }
    if (r.status == 405) FUZZ_CHECK(r.allow && *r.allow, "405 without an Allow header");
    if (tcp && !strcmp(method, "POST") && !strcmp(path, "/v1/jobs"))
        FUZZ_CHECK(r.status != 201, "a TCP client without the token created a job");
    if (r.status == 201) {
        int64_t id = json_integer_value(json_object_get(v, "id"));
        FUZZ_CHECK(id > 0, "201 without an id: %s", r.body);
        fuzz_accepted++;
        int rc = vram_sched_cancel(daemon_state.sched, id, 0); /* keep the scheduler small */
        FUZZ_CHECK(rc == 0 || rc == VRAM_ESTATE, "cannot cancel job %lld: %d", (long long)id, rc);
    }
    json_decref(v);
    FUZZ_CHECK(vram_sched_check(daemon_state.sched) == 0, "ledger broken after %s %s: %s", method,
               path, r.body);
    free(r.body);
    free(head);
    return 0;
}
