/* UTF-8 checks shared by the escapers of terminal text and JSON. */
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

#endif
