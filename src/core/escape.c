/* Escaping of client strings before they reach a terminal, a log or JSON
 * (stored as given, printed safely). */
#include "vram.h"

#include <stdio.h>
#include <string.h>

const char *vram_escape_text(const char *in, char *out, size_t len)
{
    size_t at = 0;
    if (!len) return out;
    for (const unsigned char *p = (const unsigned char *)(in ? in : ""); *p; p++) {
        char piece[8];
        size_t n;
        /* C0 controls, DEL and the C1 range's lead byte of ESC-like CSI (0x9b
         * arrives as the UTF-8 pair c2 9b): escaped; other UTF-8 passes. */
        if (*p < 0x20 || *p == 0x7f)
            n = (size_t)snprintf(piece, sizeof piece, "\\x%02x", *p);
        else if (*p == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f)
            n = (size_t)snprintf(piece, sizeof piece, "\\x%02x", *++p);
        else if (*p == '\\')
            n = (size_t)snprintf(piece, sizeof piece, "\\\\");
        else {
            piece[0] = (char)*p;
            n = 1;
        }
        if (at + n >= len) break;
        memcpy(out + at, piece, n);
        at += n;
    }
    out[at] = 0;
    return out;
}
