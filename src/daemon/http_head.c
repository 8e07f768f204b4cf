/* vramd's HTTP/1.x request parser (its only one): the head (request line,
 * header lines, Content-Length, Transfer-Encoding and the fields vramd
 * reads) and the body (its length, or its chunks and trailer), for the
 * connections of screen.c. Pure: no I/O, so the fuzzers drive it directly. */
#include "daemon/daemon.h"

#include <stdio.h>
#include <stdlib.h>
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

/* One header field line (ll bytes at p, without its line end): 0 when it is
 * "name: value" with a token name and no control byte in the value, else
 * 400 with why filled. The value (trimmed) is returned in *v / *ve. */
static int field_line(const char *p, long ll, const char **v, const char **ve, char *why,
                      size_t whylen)
{
    const char *colon = memchr(p, ':', (size_t)ll), *e = p + ll;
    if (!colon || colon == p)
        return bad(why, whylen, 400, "malformed header line \"%s\"", p, (int)ll);
    for (const char *c = p; c < colon; c++)
        if (!tchar((unsigned char)*c))
            return bad(why, whylen, 400, "malformed header name in \"%s\"", p, (int)ll);
    const char *b = colon + 1;
    while (b < e && (*b == ' ' || *b == '\t'))
        b++;
    while (e > b && (e[-1] == ' ' || e[-1] == '\t'))
        e--;
    for (const char *c = b; c < e; c++)
        if (((unsigned char)*c < 0x20 && *c != '\t') || *c == 0x7f)
            return bad(why, whylen, 400, "control character in header \"%s\"", p, (int)ll);
    *v = b;
    *ve = e;
    return 0;
}

/* Where the line at p of length ll ends, its CRLF or LF included. */
static const char *next_line(const char *p, long ll)
{
    return p + ll + (p[ll] == '\r' ? 2 : 1);
}

int vramd_head_check(const char *buf, size_t n, vramd_head_t *head, char *why, size_t whylen)
{
    if (n > VRAMD_HEAD_MAX)
        n = VRAMD_HEAD_MAX; /* all screen.c ever buffers: a verdict never
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
    bool chunked = false, keep_alive = false;
    int fields = 0;
    *head = (vramd_head_t){.minor = sp2[8] - '0',
                           .method = {0, (long)(sp1 - buf)},
                           .target = {(size_t)(sp1 + 1 - buf), (long)(sp2 - sp1 - 1)},
                           .host = {0, -1},
                           .authorization = {0, -1}};
    for (p = next_line(p, ll);; p = next_line(p, ll)) {
        if ((ll = line_len(p, end)) < 0)
            return n >= VRAMD_HEAD_MAX ? bad(why, whylen, 431, "request head over 16 KiB%s", "", 0)
                                       : -1;
        if (ll == 0) break;
        if (++fields > VRAMD_FIELDS_MAX)
            return bad(why, whylen, 431, "more than 64 header fields%s", "", 0);
        const char *v, *ve;
        int rc = field_line(p, ll, &v, &ve, why, whylen);
        if (rc) return rc;
        size_t nl = (size_t)((const char *)memchr(p, ':', (size_t)ll) - p);
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
        } else if (nl == 4 && !strncasecmp(p, "Host", 4)) {
            if (head->host.len >= 0) return bad(why, whylen, 400, "two Host headers%s", "", 0);
            head->host = (vramd_span_t){(size_t)(v - buf), (long)(ve - v)};
        } else if (nl == 13 && !strncasecmp(p, "Authorization", 13)) {
            head->authorization = (vramd_span_t){(size_t)(v - buf), (long)(ve - v)};
        } else if (nl == 10 && !strncasecmp(p, "Connection", 10)) {
            /* a list of options; only close and keep-alive matter here */
            for (const char *t = v; t < ve;) {
                const char *te = memchr(t, ',', (size_t)(ve - t));
                if (!te) te = ve;
                const char *a = t, *b = te;
                while (a < b && (*a == ' ' || *a == '\t'))
                    a++;
                while (b > a && (b[-1] == ' ' || b[-1] == '\t'))
                    b--;
                if (b - a == 5 && !strncasecmp(a, "close", 5)) head->close = true;
                if (b - a == 10 && !strncasecmp(a, "keep-alive", 10)) keep_alive = true;
                t = te < ve ? te + 1 : ve;
            }
        } else if (nl == 15 && !strncasecmp(p, "Accept-Encoding", 15)) {
            /* "gzip" among the codings, unless it is refused with q=0 */
            for (const char *t = v; t < ve;) {
                const char *te = memchr(t, ',', (size_t)(ve - t));
                if (!te) te = ve;
                while (t < te && (*t == ' ' || *t == '\t'))
                    t++;
                if (te - t >= 4 && !strncasecmp(t, "gzip", 4) &&
                    (te - t == 4 || t[4] == ';' || t[4] == ' ')) {
                    const char *q = memchr(t, '=', (size_t)(te - t));
                    head->accepts_gzip = !q || strtod(q + 1, NULL) > 0;
                }
                t = te < ve ? te + 1 : ve;
            }
        } else if (nl == 6 && !strncasecmp(p, "Expect", 6)) {
            if ((size_t)(ve - v) != 12 || strncasecmp(v, "100-continue", 12))
                return bad(why, whylen, 417, "unsupported Expect \"%s\" (only 100-continue)", v,
                           (int)(ve - v));
            head->expect_continue = head->minor == 1;
        } else if (nl == 17 && !strncasecmp(p, "Transfer-Encoding", 17)) {
            if ((size_t)(ve - v) != 7 || strncasecmp(v, "chunked", 7))
                return bad(why, whylen, 400, "unsupported Transfer-Encoding \"%s\" (only chunked)",
                           v, (int)(ve - v));
            chunked = true;
        }
    }
    if (head->minor == 1 && head->host.len < 0)
        return bad(why, whylen, 400, "HTTP/1.1 request without a Host header%s", "", 0);
    if (chunked && length >= 0)
        return bad(why, whylen, 400, "both Content-Length and Transfer-Encoding%s", "", 0);
    if (length > VRAMD_MAX_BODY)
        return bad(why, whylen, 413, "request body over the limit of 64 KiB%s", "", 0);
    head->head_len = (size_t)(next_line(p, ll) - buf);
    head->length = length;
    head->chunked = chunked;
    if (head->minor == 0 && !keep_alive) head->close = true;
    return 0;
}

enum { BODY_DONE, BODY_LENGTH, CHUNK_SIZE, CHUNK_DATA, CHUNK_END, CHUNK_TRAILER };

void vramd_body_start(vramd_body_t *b, const vramd_head_t *head, char *data)
{
    *b = (vramd_body_t){.data = data,
                        .state = head->chunked      ? CHUNK_SIZE
                                 : head->length > 0 ? BODY_LENGTH
                                                    : BODY_DONE,
                        .left = head->length > 0 ? (unsigned long long)head->length : 0};
}

int vramd_hex_digit(char c)
{
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

/* A chunk-size line: 1 to 15 hex digits (a bound on the line: a size within
 * the 64 KiB body needs 5), then end of line or ";" extensions without
 * control bytes (skipped); nothing else, not even a space. */
static int chunk_size_line(vramd_body_t *b, const char *p, long ll, char *why, size_t whylen)
{
    unsigned long long size = 0;
    long i = 0;
    for (; i < ll && vramd_hex_digit(p[i]) >= 0; i++)
        if (size <= VRAMD_MAX_BODY) size = size * 16 + (unsigned)vramd_hex_digit(p[i]);
    if (i == 0 || i > 15 || (i < ll && p[i] != ';'))
        return bad(why, whylen, 400, "malformed chunk size line \"%s\"", p, (int)ll);
    for (long k = i; k < ll; k++)
        if (((unsigned char)p[k] < 0x20 && p[k] != '\t') || p[k] == 0x7f)
            return bad(why, whylen, 400, "control character in the chunk extension \"%s\"", p,
                       (int)ll);
    if (b->total + size > VRAMD_MAX_BODY)
        return bad(why, whylen, 413, "request body over the limit of 64 KiB%s", "", 0);
    b->total += size;
    b->left = size;
    b->state = size ? CHUNK_DATA : CHUNK_TRAILER;
    return 0;
}

int vramd_body_scan(vramd_body_t *b, const char *buf, size_t n, size_t *used, char *why,
                    size_t whylen)
{
    const char *p = buf, *end = buf + n;
    int rc = -1;
    while (rc == -1) {
        if (b->state == BODY_DONE) {
            rc = 0;
        } else if (b->state == BODY_LENGTH || b->state == CHUNK_DATA) {
            size_t take = (size_t)(end - p) < b->left ? (size_t)(end - p) : (size_t)b->left;
            if (b->data) { /* within VRAMD_MAX_BODY: the head and chunk checks bound it */
                memcpy(b->data + b->data_len, p, take);
                b->data_len += take;
            }
            p += take;
            b->left -= take;
            if (b->left) break; /* needs more */
            b->state = b->state == BODY_LENGTH ? BODY_DONE : CHUNK_END;
        } else {
            long ll = line_len(p, end);
            const char *nl = ll < 0 ? end : memchr(p, '\n', (size_t)(end - p));
            if (nl - p > VRAMD_CHUNK_LINE_MAX) { /* the same verdict, whole or not */
                rc = bad(why, whylen, 400, "chunk line over 1 KiB%s", "", 0);
                break;
            }
            if (ll < 0) break;
            if (b->state == CHUNK_END) {
                if (ll)
                    rc = bad(why, whylen, 400, "chunk data longer than its size: \"%s\"", p,
                             (int)ll);
                else
                    b->state = CHUNK_SIZE;
            } else if (b->state == CHUNK_SIZE) {
                rc = chunk_size_line(b, p, ll, why, whylen);
                if (rc == 0) rc = -1;
            } else if (ll == 0) { /* the empty line that ends the trailer */
                b->state = BODY_DONE;
            } else if ((b->trailer += (size_t)ll) > VRAMD_CHUNK_LINE_MAX ||
                       ++b->fields > VRAMD_TRAILER_FIELDS) {
                rc = bad(why, whylen, 431, "chunked trailer over 1 KiB or 16 fields%s", "", 0);
            } else {
                const char *v, *ve;
                rc = field_line(p, ll, &v, &ve, why, whylen);
                if (rc == 0) rc = -1;
            }
            if (rc <= 0) p = next_line(p, ll);
        }
    }
    *used = (size_t)(p - buf);
    return rc;
}
