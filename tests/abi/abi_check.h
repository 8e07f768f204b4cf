/* Compile-time comparisons of vram's driver declarations (renamed ours_* by
 * ours_header.py) with NVIDIA's headers, for tests/abi/cuda_abi.c and
 * nvml_abi.c. Each expands to a _Static_assert, so a difference stops the
 * compile with the name in the message. */
#ifndef VRAM_ABI_CHECK_H
#define VRAM_ABI_CHECK_H

#include <stddef.h>

/* An enumerator or macro: the same value. */
#define SAME_VALUE(name)                                                                           \
    _Static_assert((long long)(ours_##name) == (long long)(name), #name " differs from NVIDIA's")

/* A type: the same size and alignment (for integers, enums and handles). */
#define SAME_SIZE(type)                                                                            \
    _Static_assert(sizeof(ours_##type) == sizeof(type) && _Alignof(ours_##type) == _Alignof(type), \
                   #type ": size or alignment differs from NVIDIA's")

/* A struct field: the same offset and size. */
#define SAME_FIELD(type, field)                                                                    \
    _Static_assert(offsetof(ours_##type, field) == offsetof(type, field) &&                        \
                       sizeof(((ours_##type *)0)->field) == sizeof(((type *)0)->field),            \
                   #type "." #field ": offset or size differs from NVIDIA's")

/* A function-pointer typedef of ours (proto_*: written in NVIDIA's types) against the
 * real prototype of the exported symbol vram looks up by that name. */
#define SAME_PROTOTYPE(fn_type, symbol)                                                            \
    _Static_assert(__builtin_types_compatible_p(proto_##fn_type, __typeof__(&symbol)),             \
                   #fn_type " does not match NVIDIA's prototype of " #symbol)

#endif
