/* Error codes, names and the per-thread detailed message. */
#include "vram.h"

#include <stdarg.h>
#include <stdio.h>

static _Thread_local char last_error[512];

const char *vram_strerror(int err)
{
    switch (err) {
#define VRAM_ERR_MSG_(name, value, msg)                                                            \
    case value:                                                                                    \
        return msg;
        VRAM_ERRORS(VRAM_ERR_MSG_)
#undef VRAM_ERR_MSG_
    }
    return "unknown error";
}

const char *vram_err_name(int err)
{
    switch (err) {
#define VRAM_ERR_NAME_(name, value, msg)                                                           \
    case value:                                                                                    \
        return "VRAM_" #name;
        VRAM_ERRORS(VRAM_ERR_NAME_)
#undef VRAM_ERR_NAME_
    }
    return "VRAM_EUNKNOWN";
}

const char *vram_last_error(void)
{
    return last_error;
}

void vram_clear_error(void)
{
    last_error[0] = '\0';
}

int vram_fail(int err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return err;
}
