/* The JSON writer of core/json_writer.h. */
#include "core/json_writer.h"
#include "core/escape.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool reserve(vram_jw_t *w, size_t more)
{
    if (w->failed) return false;
    if (w->len + more + 1 <= w->cap) return true;
    size_t cap = w->cap ? w->cap : 512;
    while (cap < w->len + more + 1)
        cap *= 2;
    char *b = realloc(w->buf, cap);
    if (!b) {
        w->failed = true;
        return false;
    }
    w->buf = b;
    w->cap = cap;
    return true;
}

static void put(vram_jw_t *w, const char *s, size_t n)
{
    if (!reserve(w, n)) return;
    memcpy(w->buf + w->len, s, n);
    w->len += n;
    w->buf[w->len] = 0;
}

static void put_string(vram_jw_t *w, const char *s)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *p = (const unsigned char *)s;
    put(w, "\"", 1);
    while (*p) {
        const unsigned char *run = p; /* bytes that go out as they are */
        size_t n;
        while (*p >= 0x20 && *p < 0x7f && *p != '"' && *p != '\\') /* ASCII: no call */
            p++;
        while ((n = vram_utf8_length(p)) != 0 &&
               (n > 2 || (n == 1 && *p >= 0x20 && *p != '"' && *p != '\\' && *p != 0x7f) ||
                (n == 2 && !(p[0] == 0xc2 && p[1] < 0xa0))))
            p += n;
        put(w, (const char *)run, (size_t)(p - run));
        if (!*p) break;
        char esc[8];
        unsigned cp = n == 2 ? p[1] : *p; /* C1 controls are U+0080..U+009F */
        const char *named = cp == '"'    ? "\\\""
                            : cp == '\\' ? "\\\\"
                            : cp == '\n' ? "\\n"
                            : cp == '\t' ? "\\t"
                            : cp == '\r' ? "\\r"
                            : cp == '\b' ? "\\b"
                            : cp == '\f' ? "\\f"
                                         : NULL;
        if (n == 0) named = "\\ufffd"; /* not UTF-8: one byte replaced */
        if (named) {
            put(w, named, strlen(named));
        } else {
            memcpy(esc, "\\u00", 4);
            esc[4] = hex[cp >> 4];
            esc[5] = hex[cp & 15];
            put(w, esc, 6);
        }
        p += n ? n : 1;
    }
    put(w, "\"", 1);
}

static void start_value(vram_jw_t *w, const char *key)
{
    if (w->comma) put(w, ",", 1);
    w->comma = true;
    if (key) {
        put_string(w, key);
        put(w, ":", 1);
    }
}

void vram_jw_open(vram_jw_t *w, const char *key, char bracket)
{
    start_value(w, key);
    put(w, &bracket, 1);
    w->comma = false;
}

void vram_jw_close(vram_jw_t *w, char bracket)
{
    put(w, &bracket, 1);
    w->comma = true;
}

static void put_int(vram_jw_t *w, int64_t v)
{
    char digits[24], *e = digits + sizeof digits, *p = e;
    uint64_t u = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
    do {
        *--p = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0) *--p = '-';
    put(w, p, (size_t)(e - p));
}

void vram_jw_int(vram_jw_t *w, const char *key, int64_t v)
{
    start_value(w, key);
    put_int(w, v);
}

void vram_jw_real(vram_jw_t *w, const char *key, double v)
{
    start_value(w, key);
    if (!isfinite(v)) {
        put(w, "null", 4);
        return;
    }
    if (fabs(v) < 1e16 && v == (double)(int64_t)v &&
        !signbit(v)) { /* what %.17g prints, without printf */
        put_int(w, (int64_t)v);
        put(w, ".0", 2);
        return;
    }
    char text[40];
    int n = snprintf(text, sizeof text - 2, "%.17g", v);
    if (n < 0 || (size_t)n >= sizeof text - 2) n = snprintf(text, sizeof text, "0.0");
    char *dot = strpbrk(text, ".eE,");
    if (dot && *dot == ',') *dot = '.'; /* a locale's decimal comma */
    if (!dot) {
        memcpy(text + n, ".0", 3);
        n += 2;
    }
    char *e = strchr(text, 'e'); /* "1e+300" and "1e-05" as jansson: "1e300", "1e-5" */
    if (e) {
        char *from = e + 1 + (e[1] == '-'), *to = from;
        if (*from == '+') from++;
        while (*from == '0' && from[1])
            from++;
        memmove(to, from, strlen(from) + 1);
        n = (int)strlen(text);
    }
    put(w, text, (size_t)n);
}

void vram_jw_bool(vram_jw_t *w, const char *key, bool v)
{
    start_value(w, key);
    put(w, v ? "true" : "false", v ? 4 : 5);
}

void vram_jw_null(vram_jw_t *w, const char *key)
{
    start_value(w, key);
    put(w, "null", 4);
}

void vram_jw_string(vram_jw_t *w, const char *key, const char *s)
{
    start_value(w, key);
    if (s)
        put_string(w, s);
    else
        put(w, "null", 4);
}

void vram_jw_int_array(vram_jw_t *w, const char *key, const int *v, int n)
{
    vram_jw_open(w, key, '[');
    for (int i = 0; i < n; i++)
        vram_jw_int(w, NULL, v[i]);
    vram_jw_close(w, ']');
}

char *vram_jw_finish(vram_jw_t *w)
{
    char *text = w->failed ? NULL : w->buf;
    if (w->failed) free(w->buf);
    if (text == NULL && !w->failed) text = calloc(1, 1);
    *w = (vram_jw_t){0};
    return text;
}
