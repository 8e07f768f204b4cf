/* POST /v1/estimate and /v1/plan: libvram's JSON estimator and planner
 * (vram_estimate_json, vram_plan_json) for vramd's clients, with every
 * setting of the table (vram_estimate_settings). Clients are untrusted:
 * vramd reads no file and opens no device for them, so a model comes as a
 * catalog name or as the content of its config.json or profile, and a plan
 * targets "gpu_mem" or "gpu_name". */
#include "daemon/daemon.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

/* The body as a C string, or NULL with r filled. */
static char *checked_body(const vramd_request_t *q, vramd_response_t *r, bool plan)
{
    if (q->body_too_large) {
        vramd_error(r, 413, "too_large", "request body is larger than %d bytes", VRAMD_MAX_BODY);
        return NULL;
    }
    json_error_t je;
    json_t *req = json_loadb(q->body ? q->body : "", q->body_len, JSON_REJECT_DUPLICATES, &je);
    if (!json_is_object(req)) {
        json_decref(req);
        vramd_error(r, 400, "bad_json", "the body is not a JSON object: %s", je.text);
        return NULL;
    }
    const char *refused = NULL;
    if (json_is_string(json_object_get(req, "hf_config")) ||
        json_is_string(json_object_get(req, "profile")))
        refused = "vramd reads no file for a client: give \"hf_config\" or \"profile\" as the "
                  "file's JSON object";
    else if (plan && json_object_get(req, "gpu"))
        refused = "vramd plans for a size, not a device of its own: give \"gpu_mem\" or "
                  "\"gpu_name\"";
    char *text = refused ? NULL : json_dumps(req, JSON_COMPACT);
    json_decref(req);
    if (refused)
        vramd_error(r, 422, "invalid_value", "%s", refused);
    else if (!text)
        vramd_error(r, 500, "internal", "out of memory");
    return text;
}

static void answer(const vramd_request_t *q, vramd_response_t *r, bool plan)
{
    char *text = checked_body(q, r, plan);
    if (!text) return;
    char *out = NULL;
    vram_clear_error();
    int rc = plan ? vram_plan_json(text, &out) : vram_estimate_json(text, &out);
    free(text);
    if (rc == VRAM_EPARSE)
        vramd_error(r, 422, "invalid_value", "%s", vram_last_error());
    else if (rc)
        vramd_vram_error(r, rc);
    else
        vramd_reply_text(r, 200, out);
}

void vramd_estimate(vramd_state_t *d, const vramd_request_t *q, vramd_response_t *r, int64_t id)
{
    (void)d, (void)id;
    answer(q, r, false);
}

void vramd_plan(vramd_state_t *d, const vramd_request_t *q, vramd_response_t *r, int64_t id)
{
    (void)d, (void)id;
    answer(q, r, true);
}
