/* The head of an HTTP/1.x request checked before libmicrohttpd parses it
 * (screen.c): request line, header lines, Content-Length and
 * Transfer-Encoding. Pure: no I/O, so the fuzzers drive it directly. */
#include "daemon/daemon.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

static bool tchar(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           (c && strchr("!#$%&'*+-.^_`|~", c));
}

/* Length of the line at p (without its CRLF or LF), or -1 when no line end
 * comes before end. */
static long line_len(const char *p, const char *end)
{
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    if (!nl) return -1;
    return (long)(nl - p) - (nl > p && nl[-1] == '\r');
}

static int bad(char *why, size_t len, int status, const char *fmt, const char *part, int n)
{
    char shown[80]; /* vramd_error escapes it */
    snprintf(shown, sizeof shown, "%.*s", n < 60 ? n : 60, part);
    snprintf(why, len, fmt, shown);
    return status;
}

int vramd_head_check(const char *buf, size_t n, char *why, size_t whylen)
{
    if (n > VRAMD_HEAD_MAX)
        n = VRAMD_HEAD_MAX; /* all screen.c ever peeks: a verdict never
                              depends on bytes past it */
    const char *end = buf + n, *p = buf;
    long ll = line_len(p, end);
    if (ll < 0)
        return n >= VRAMD_HEAD_MAX ? bad(why, whylen, 431, "request line too long%s", "", 0) : -1;
    /* request-line = method SP request-target SP HTTP-version */
    const char *sp1 = memchr(p, ' ', (size_t)ll), *le = p + ll;
    const char *sp2 = sp1 ? memchr(sp1 + 1, ' ', (size_t)(le - sp1 - 1)) : NULL;
    if (!sp1 || !sp2 || sp1 == p || sp2 == sp1 + 1)
        return bad(why, whylen, 400, "malformed request line \"%s\"", p, (int)ll);
    for (const char *c = p; c < sp1; c++)
        if (!tchar((unsigned char)*c))
            return bad(why, whylen, 400, "malformed method in \"%s\"", p, (int)ll);
    for (const char *c = sp1 + 1; c < sp2; c++)
        if ((unsigned char)*c < 0x21 || *c == 0x7f)
            return bad(why, whylen, 400, "control character in the request target \"%s\"", p,
                       (int)ll);
    size_t vl = (size_t)(le - sp2 - 1);
    if (vl != 8 || memcmp(sp2 + 1, "HTTP/1.", 7) || (sp2[8] != '0' && sp2[8] != '1'))
        return bad(why, whylen, vl >= 5 && !memcmp(sp2 + 1, "HTTP/", 5) ? 505 : 400,
                   "unsupported protocol version in \"%s\" (HTTP/1.0 or HTTP/1.1)", p, (int)ll);
    /* header fields until an empty line */
    long long length = -1;
    bool chunked = false;
    for (p = le + (*le == '\r' ? 2 : 1);; p += ll + (p[ll] == '\r' ? 2 : 1)) {
        if ((ll = line_len(p, end)) < 0)
            return n >= VRAMD_HEAD_MAX ? bad(why, whylen, 431, "request head over 32 KiB%s", "", 0)
                                       : -1;
        if (ll == 0) break;
        const char *colon = memchr(p, ':', (size_t)ll), *v, *ve = p + ll;
        if (!colon || colon == p)
            return bad(why, whylen, 400, "malformed header line \"%s\"", p, (int)ll);
        for (const char *c = p; c < colon; c++)
            if (!tchar((unsigned char)*c))
                return bad(why, whylen, 400, "malformed header name in \"%s\"", p, (int)ll);
        for (v = colon + 1; v < ve && (*v == ' ' || *v == '\t'); v++) {
        }
        while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t'))
            ve--;
        for (const char *c = v; c < ve; c++)
            if (((unsigned char)*c < 0x20 && *c != '\t') || *c == 0x7f)
                return bad(why, whylen, 400, "control character in header \"%s\"", p, (int)ll);
        size_t nl = (size_t)(colon - p);
        if (nl == 14 && !strncasecmp(p, "Content-Length", 14)) {
            long long value = 0;
            if (v == ve) return bad(why, whylen, 400, "empty Content-Length%s", "", 0);
            for (const char *c = v; c < ve; c++) {
                if (*c < '0' || *c > '9')
                    return bad(why, whylen, 400, "Content-Length is not a number: \"%s\"", v,
                               (int)(ve - v));
                if (value > VRAMD_MAX_BODY) continue; /* already too large; no overflow */
                value = value * 10 + (*c - '0');
            }
            if (length >= 0 && length != value)
                return bad(why, whylen, 400, "two different Content-Length headers%s", "", 0);
            length = value;
        } else if (nl == 17 && !strncasecmp(p, "Transfer-Encoding", 17)) {
            if ((size_t)(ve - v) != 7 || strncasecmp(v, "chunked", 7))
                return bad(why, whylen, 400, "unsupported Transfer-Encoding \"%s\" (only chunked)",
                           v, (int)(ve - v));
            chunked = true;
        }
    }
    if (chunked && length >= 0)
        return bad(why, whylen, 400, "both Content-Length and Transfer-Encoding%s", "", 0);
    if (length > VRAMD_MAX_BODY)
        return bad(why, whylen, 413, "request body over the limit of 64 KiB%s", "", 0);
    return 0;
}
