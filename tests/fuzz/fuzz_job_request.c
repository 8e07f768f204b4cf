/* Fuzz target: the body of POST /v1/jobs, through the daemon's router
 * (src/daemon/routes.c: vramd_route, which decodes it with libvram's
 * vram_job_request_decode, the decoder the CLI uses too) into
 * a real scheduler on an in-memory store with two fake devices. Whatever the
 * body, the answer is 201 or a 4xx JSON error naming the problem, and the
 * ledger invariants hold afterwards. */
#include "fuzz.h"

#include "fuzz_daemon.h"
#include "sched/sched.h"

#include <jansson.h>
#include <unistd.h>

static vramd_state_t daemon_state;

/* An accepted job holds what the body asked for. */
static void check_job_matches_body(const uint8_t *data, size_t size, json_t *job)
{
    json_t *body = json_loadb((const char *)data, size, 0, NULL);
    FUZZ_CHECK(json_is_object(body), "201 for a body that is not a JSON object");
    json_t *mem = json_object_get(body, "mem_bytes");
    uint64_t want = 0;
    if (json_is_string(mem))
        FUZZ_CHECK(vram_parse_size(json_string_value(mem), &want) == 0,
                   "201 for a bad mem_bytes size");
    else
        want = (uint64_t)json_integer_value(mem);
    json_t *got = json_object_get(job, "mem_bytes");
    FUZZ_CHECK(json_is_integer(got) && (uint64_t)json_integer_value(got) == want,
               "job holds mem_bytes %lld, the body asked for %llu",
               (long long)json_integer_value(got), (unsigned long long)want);
    static const char *const ints[] = {"priority", "batch_size", "min_batch_size", "pid"};
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        json_t *asked = json_object_get(body, ints[i]);
        if (!json_is_integer(asked)) continue;
        FUZZ_CHECK(json_integer_value(asked) == json_integer_value(json_object_get(job, ints[i])),
                   "job holds a different %s than the body asked for", ints[i]);
    }
    /* the batch table as asked, and one vramd may trust: batches
     * increasing, bytes non-decreasing and never above mem_bytes */
    json_t *asked = json_object_get(body, "batch_bytes"),
           *table = json_object_get(job, "batch_bytes");
    FUZZ_CHECK(json_is_array(table), "job without a batch_bytes array");
    FUZZ_CHECK(json_array_size(table) == (json_is_array(asked) ? json_array_size(asked) : 0),
               "job holds %zu batch_bytes entries, the body asked for another count",
               json_array_size(table));
    for (size_t i = 0; i < json_array_size(table); i++) {
        json_t *e = json_array_get(table, i), *prev = i ? json_array_get(table, i - 1) : NULL;
        json_int_t b = json_integer_value(json_object_get(e, "batch"));
        json_int_t n = json_integer_value(json_object_get(e, "bytes"));
        FUZZ_CHECK(b >= 1 && n >= 1 && (uint64_t)n <= want,
                   "batch_bytes[%zu] accepted out of range", i);
        FUZZ_CHECK(!prev || (b > json_integer_value(json_object_get(prev, "batch")) &&
                             n >= json_integer_value(json_object_get(prev, "bytes"))),
                   "batch_bytes[%zu] accepted out of order", i);
    }
    json_t *name = json_object_get(body, "name");
    if (json_is_string(name))
        FUZZ_CHECK(json_equal(name, json_object_get(job, "name")),
                   "job holds a different name than the body asked for");
    json_decref(body);
}

/* Checks the response's shape; *id gets the new job's id on a 201. */
static void check_response(const vramd_response_t *r, const uint8_t *data, size_t size, int64_t *id)
{
    *id = 0;
    FUZZ_CHECK(r->body, "status %d without a body", r->status);
    json_error_t e;
    json_t *v = json_loads(r->body, 0, &e);
    FUZZ_CHECK(json_is_object(v), "response body is not a JSON object: %s", r->body);
    if (r->status == 201) {
        json_t *jid = json_object_get(v, "id");
        FUZZ_CHECK(json_is_integer(jid) && json_integer_value(jid) > 0, "201 without an id: %s",
                   r->body);
        *id = json_integer_value(jid);
        check_job_matches_body(data, size, v);
    } else {
        FUZZ_CHECK(r->status == 400 || r->status == 413 || r->status == 422,
                   "a request body got status %d: %s", r->status, r->body);
        json_t *err = json_object_get(v, "error");
        const char *code = json_string_value(json_object_get(err, "code"));
        const char *msg = json_string_value(json_object_get(err, "message"));
        FUZZ_CHECK(code && *code && msg && *msg, "error without code or message: %s", r->body);
    }
    json_decref(v);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!daemon_state.sched) {
        fuzz_daemon_open(&daemon_state);
        fuzz_daemon_resident(&daemon_state, 0);
    }
    vramd_request_t q = {
        .method = "POST",
        .path = "/v1/jobs",
        .body = (const char *)data,
        .body_len = size,
        .body_too_large = size > VRAMD_MAX_BODY, /* as the HTTP layer decides */
        .transport = VRAMD_UNIX,
        .uid = getuid(),
        .may_mutate = true,
    };
    vramd_response_t r;
    vramd_route(&daemon_state, &q, &r);
    static int verbose = -1;
    if (verbose < 0) verbose = getenv("FUZZ_VERBOSE") != NULL;
    if (verbose) printf("%d %s\n", r.status, r.body ? r.body : "(no body)");
    int64_t id;
    check_response(&r, data, size, &id);
    FUZZ_CHECK(vram_sched_check(daemon_state.sched) == 0, "ledger broken after: %s", r.body);
    if (id > 0) {
        fuzz_accepted++;
        /* Keep the scheduler small: end the job the input created. */
        int rc = vram_sched_cancel(daemon_state.sched, id, 0);
        FUZZ_CHECK(rc == 0 || rc == VRAM_ESTATE, "cannot cancel job %lld: %d", (long long)id, rc);
        FUZZ_CHECK(vram_sched_check(daemon_state.sched) == 0, "ledger broken after cancel");
    }
    free(r.body);
    return 0;
}
