/* A JSON text written straight into one growing buffer, for replies sent on
 * every request (a job): several times cheaper than building a jansson tree
 * and dumping it. Strings are escaped so that any bytes give valid JSON:
 * quotes, backslashes and control characters (C0, DEL, C1) as escapes, and a
 * byte that is not UTF-8 as U+FFFD. A writer is zeroed to start; keys may be
 * NULL inside arrays. Out of memory is remembered and reported by finish.
 * Not thread-safe: one writer per thread. */
#ifndef VRAM_CORE_JSON_WRITER_H
#define VRAM_CORE_JSON_WRITER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    char *buf;
    size_t len, cap;
    bool failed; /* out of memory: finish returns NULL */
    bool comma;  /* a value precedes in the current object or array */
} vram_jw_t;

/* Starts an object ('{') or array ('[') as the value of key. */
void vram_jw_open(vram_jw_t *w, const char *key, char bracket);
/* Ends it with '}' or ']'. */
void vram_jw_close(vram_jw_t *w, char bracket);
void vram_jw_int(vram_jw_t *w, const char *key, int64_t v);
/* A real as jansson writes one (17 digits, ".0" on integers); null if not finite. */
void vram_jw_real(vram_jw_t *w, const char *key, double v);
void vram_jw_bool(vram_jw_t *w, const char *key, bool v);
void vram_jw_null(vram_jw_t *w, const char *key);
/* s NULL writes null. */
void vram_jw_string(vram_jw_t *w, const char *key, const char *s);
void vram_jw_int_array(vram_jw_t *w, const char *key, const int *v, int n);
/* The NUL-terminated text (the caller frees it), or NULL when out of memory
 * (the buffer is freed). The writer is zeroed either way. */
char *vram_jw_finish(vram_jw_t *w);

#endif
