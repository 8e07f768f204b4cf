/* UTF-8 checks shared by the escapers of terminal text and JSON. */
#ifndef VRAM_CORE_ESCAPE_H
#define VRAM_CORE_ESCAPE_H

#include <stddef.h>

/* Length of the valid UTF-8 sequence at p (1-4), or 0 when it is not one.
 * Overlong forms, surrogates and code points above U+10FFFF are invalid. */
size_t vram_utf8_length(const unsigned char *p);

#endif
