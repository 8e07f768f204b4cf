/* Escaping client strings for terminals and logs (vram_escape_text). */
#include "vram.h"
#include "core/escape.h"

#include <stdio.h>

size_t vram_utf8_length(const unsigned char *p)
{
    size_t n = *p < 0x80           ? 1
               : (*p >> 5) == 0x6  ? 2
               : (*p >> 4) == 0xe  ? 3
               : (*p >> 3) == 0x1e ? 4
                                   : 0;
    for (size_t k = 1; k < n; k++)
        if ((p[k] & 0xc0) != 0x80) return 0;
    if ((n == 2 && *p < 0xc2) || (n == 3 && *p == 0xe0 && p[1] < 0xa0) ||
        (n == 3 && *p == 0xed && p[1] >= 0xa0) || (n == 4 && *p == 0xf0 && p[1] < 0x90) ||
        (n == 4 && (*p > 0xf4 || (*p == 0xf4 && p[1] >= 0x90))))
        return 0;
    return n;
}

bool vram_text_printable(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        size_t n = vram_utf8_length(p);
        if (!n || *p < 0x20 || *p == 0x7f || (n == 2 && p[0] == 0xc2 && p[1] < 0xa0)) return false;
        p += n;
    }
    return true;
}

size_t vram_escape_text(const char *in, char *out, size_t len)
{
    const unsigned char *p = (const unsigned char *)(in ? in : "");
    size_t need = 0, written = 0;
    while (*p) {
        char esc[16];
        size_t n = vram_utf8_length(p), elen;
        bool c1 = n == 2 && p[0] == 0xc2 && p[1] < 0xa0; /* U+0080..U+009F, e.g. CSI */
        if (n == 1 && *p >= 0x20 && *p != 0x7f && *p != '\\') {
            esc[0] = (char)*p;
            elen = 1;
        } else if (n > 1 && !c1) {
            for (size_t k = 0; k < n; k++)
                esc[k] = (char)p[k];
            elen = n;
        } else {
            n = n ? n : 1; /* an invalid byte is escaped alone */
            elen = 0;
            for (size_t k = 0; k < n; k++) {
                unsigned char b = p[k];
                const char *named = b == '\n'   ? "\\n"
                                    : b == '\t' ? "\\t"
                                    : b == '\r' ? "\\r"
                                    : b == '\\' ? "\\\\"
                                                : NULL;
                if (named)
                    elen += (size_t)snprintf(esc + elen, sizeof esc - elen, "%s", named);
                else
                    elen += (size_t)snprintf(esc + elen, sizeof esc - elen, "\\x%02x", b);
            }
        }
        /* Whole units only: a cut never leaves half a character or escape. */
        if (need + elen < len && written == need) {
            for (size_t k = 0; k < elen; k++)
                out[written++] = esc[k];
        }
        need += elen;
        p += n;
    }
    if (len) out[written] = 0;
    return need;
}
