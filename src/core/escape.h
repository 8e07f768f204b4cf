/* UTF-8 checks shared by the escapers of terminal text and JSON, and the
 * terminal escaper (the front ends; libvram.so does not export it). */
#ifndef VRAM_CORE_ESCAPE_H
#define VRAM_CORE_ESCAPE_H

#include <stdbool.h>
#include <stddef.h>

/* Length of the valid UTF-8 sequence at p (1-4), or 0 when it is not one.
 * Overlong forms, surrogates and code points above U+10FFFF are invalid. */
size_t vram_utf8_length(const unsigned char *p);
/* true when s is valid UTF-8 without control characters (C0, DEL, C1):
 * what a job name may hold, so that no printer has to trust it. */
bool vram_text_printable(const char *s);

/* Copies `in` into out[0..len) for printing to a terminal or a log: control
 * characters, DEL, C1 controls, backslash and bytes that are not valid UTF-8
 * become \n, \t, \\ or \xHH, so a client string cannot move the cursor,
 * change colours or forge a log line. Always NUL-terminates (when len > 0);
 * returns the length the whole escaped text needs (like snprintf). NULL in is
 * "". Thread-safe. */
size_t vram_escape_text(const char *in, char *out, size_t len);

#endif
