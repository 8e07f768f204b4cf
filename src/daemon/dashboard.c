/* The web dashboard: GET / and /static/... on the TCP listener, from the
 * files embedded at build time (web/, and dygraphs from Debian's
 * libjs-dygraphs). The page reads the JSON API of the same listener. */
#include "daemon/daemon.h"
#include "daemon/web_assets.h"

#include <stdlib.h>
#include <string.h>

bool vramd_dashboard_route(vramd_state_t *d, const vramd_request_t *q, vramd_response_t *r)
{
    (void)d;
    if (q->transport != VRAMD_TCP) return false;
    const char *path = !strcmp(q->path, "/index.html") ? "/" : q->path;
    for (size_t i = 0; i < vramd_nassets; i++) {
        const vramd_asset_t *a = &vramd_assets[i];
        if (strcmp(a->url, path)) continue;
        if (strcmp(q->method, "GET") && strcmp(q->method, "HEAD")) {
            r->status = 405;
            r->allow = "GET";
            r->body = strdup("{\"error\":{\"code\":\"method_not_allowed\",\"message\":\"GET "
                             "only\"}}");
            return true;
        }
        r->body = malloc(a->size + 1);
        if (!r->body) return false;
        memcpy(r->body, a->data, a->size + 1);
        r->status = 200;
        r->content_type = a->content_type;
        /* The page itself is checked on every load; the script, the style
         * and dygraphs are kept 10 minutes (a new vramd's are picked up
         * within that), so a reload moves only the page and the data. */
        r->cache_control = strncmp(a->url, "/static/", 8) ? "no-cache" : "max-age=600";
        return true;
    }
    return false;
}
