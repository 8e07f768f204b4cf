/* The web dashboard: GET /, /index.html and /static/... on the TCP listener
 * (rows of routes.c's table), from the files embedded at build time (web/,
 * and dygraphs from Debian's libjs-dygraphs). The files hold no data: the
 * page reads the JSON API of the same listener with the token. */
#include "daemon/daemon.h"
#include "daemon/web_assets.h"

#include <stdlib.h>
#include <string.h>

void vramd_dashboard(vramd_state_t *d, const vramd_request_t *q, vramd_response_t *r, int64_t id)
{
    (void)d;
    (void)id;
    const char *path = !strcmp(q->path, "/index.html") ? "/" : q->path;
    for (size_t i = 0; q->transport == VRAMD_TCP && i < vramd_nassets; i++) {
        const vramd_asset_t *a = &vramd_assets[i];
        if (strcmp(a->url, path)) continue;
        char *body = malloc(a->size + 1);
        if (body) memcpy(body, a->data, a->size + 1);
        vramd_reply_text(r, 200, body);
        if (!body) return;
        r->content_type = a->content_type;
        /* The page itself is checked on every load; the script, the style
         * and dygraphs are kept 10 minutes (a new vramd's are picked up
         * within that), so a reload moves only the page and the data. */
        r->cache_control = strncmp(a->url, "/static/", 8) ? "no-cache" : "max-age=600";
        return;
    }
    vramd_error(r, 404, "not_found", "no file %s%s", q->path,
                q->transport == VRAMD_TCP ? "" : " (the dashboard is served on TCP)");
}
