#!/bin/bash
# Checks one of vram's driver headers against NVIDIA's at compile time
# (tests/abi/README.md):
#   abi_test.sh cuda|nvml CC PYTHON INCLUDE_DIR SOURCE_DIR WORK_DIR
# 1. every name the header declares, and every symbol the backend looks up,
#    is checked in tests/abi/<which>_abi.c (coverage);
# 2. that file compiles beside NVIDIA's header: values, layouts, prototypes;
# 3. it stops compiling, naming what differs, when a value, a layout or a
#    prototype of ours is changed (the check can fail).
# Exits 77 (ctest: skipped) when NVIDIA's header is absent: never a pass.
set -uo pipefail
which=$1 CC=$2 PY=$3 INC=$4 SRC=$5 WORK=$6
header=$SRC/src/device/${which}_api.h backend=$SRC/src/device/$which.c
check=$SRC/tests/abi/${which}_abi.c nv=$([ "$which" = cuda ] && echo cuda.h || echo nvml.h)
if [ -z "$INC" ] || [ ! -f "$INC/$nv" ]; then
    echo "SKIP: NVIDIA's $nv not found (INCLUDE_DIR='$INC'): cuda.h comes with the CUDA" \
         "toolkit, nvml.h with PyPI's nvidia-nvml-dev in the venv (make deps); nothing was checked"
    exit 77
fi
fail() { echo "FAIL: $*" >&2; exit 1; }
mkdir -p "$WORK" || fail "cannot create $WORK"

# 1. Coverage: enumerators, macros and typedef names of the header, and the
# symbols the backend loads, each named in the check file.
words=$(grep -oE '\b[A-Za-z_][A-Za-z0-9_]*\b' "$check" | sed -E 's/^(ours|proto)_//' | sort -u)
decls=$(sed 's,/\*.*\*/,,' "$header")
names=$({
    grep -oE '^\s+(CU|CUDA_|NVML_)[A-Z0-9_]+ *=' <<<"$decls"    # enumerators
    grep -oE '^#define +(CU|CUDA_|NVML_|nvml)[A-Za-z0-9_]+' <<<"$decls" | sed 's/#define//'
    grep -E '^typedef [^(]*;' <<<"$decls" | grep -oE '[A-Za-z0-9_]+;' # typedef names
    grep -oE '\}\s*[A-Za-z0-9_]+;' <<<"$decls"                       # struct typedefs
    grep -oE '\(\*[a-z0-9_]+_fn\)' <<<"$decls"                      # function types
} | grep -oE '[A-Za-z_][A-Za-z0-9_]*' | sort -u)
symbols=$(grep -oE 'VRAM_DRIVER_LOAD\([^"]*"[A-Za-z0-9_]+"' "$backend" | grep -oE '"[A-Za-z0-9_]+"' | tr -d '"' | sort -u)
[ -n "$names" ] && [ -n "$symbols" ] || fail "found no names in $header or no symbols in $backend"
missing=$(comm -23 <(printf '%s\n' $names $symbols | sort -u) <(printf '%s\n' $words))
[ -z "$missing" ] || fail "not checked in $check: $(echo $missing)"
echo "coverage: $(echo $names | wc -w) names of ${which}_api.h, $(echo $symbols | wc -w) symbols of $which.c"

# 2. The check itself.
compile() { # DIR: compiles the check with the generated headers in DIR
    "$CC" -std=c11 -Wall -Wextra -Werror -fsyntax-only -isystem "$INC" -I"$1" \
        -I"$SRC/tests/abi" "$check" 2>&1
}
gen() { # DIR HEADER
    mkdir -p "$1" && "$PY" "$SRC/tests/abi/ours_header.py" all "$2" "$1/ours_${which}_api.h" &&
        "$PY" "$SRC/tests/abi/ours_header.py" functions "$2" "$1/ours_${which}_fns.h"
}
gen "$WORK/real" "$header" || fail "ours_header.py failed"
out=$(compile "$WORK/real") || fail "${which}_api.h differs from NVIDIA's $nv:"$'\n'"$out"
echo "${which}_api.h matches $INC/$nv"

# 3. Mutants: each must be refused, with the assertion naming it.
mutant() { # NAME SED-SCRIPT FILE-TO-MUTATE EXPECTED-MESSAGE
    local dir=$WORK/mutant_$1
    gen "$dir" "$header" || fail "ours_header.py failed"
    sed -i -E "$2" "$dir/$3"
    cmp -s "$dir/$3" "$WORK/real/$3" && fail "mutant $1 changed nothing"
    out=$(compile "$dir") && fail "mutant $1 (${3}: $2) still compiles: the check cannot fail"
    grep -q "$4" <<<"$out" || fail "mutant $1 refused for another reason:"$'\n'"$out"
    echo "mutant $1: refused"
}
mutant value '0,/^( +[A-Za-z0-9_]+ = )([0-9]+),/s//\1\2 + 1000,/' "ours_${which}_api.h" "differs from NVIDIA"
mutant layout '0,/^typedef struct \{/s//typedef struct { char vram_abi_mutant;/' "ours_${which}_api.h" \
    "differs from NVIDIA"
mutant prototype '0,/^typedef [A-Za-z_]+ \(\*/s//typedef long (*/' "ours_${which}_fns.h" \
    "does not match NVIDIA"
echo "PASS: ${which}_api.h checked against NVIDIA's $nv"
