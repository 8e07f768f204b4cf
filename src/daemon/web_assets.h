/* The dashboard's files, embedded at build time (cmake/embed_assets.cmake). */
#ifndef VRAM_DAEMON_WEB_ASSETS_H
#define VRAM_DAEMON_WEB_ASSETS_H

#include <stddef.h>

typedef struct {
    const char *url;           /* "/", "/static/dygraph.min.js" */
    const char *content_type;  /* "text/html; charset=utf-8" */
    const unsigned char *data; /* NUL-terminated */
    size_t size;               /* without the NUL */
} vramd_asset_t;

extern const vramd_asset_t vramd_assets[];
extern const size_t vramd_nassets;

#endif
