#!/usr/bin/env bash
# Fails when libvram defines a global symbol without the vram_ prefix:
# the shared library's dynamic symbols and the static archives' globals
# (libvram.a, vram_core, vram_pool_tools) alike.
# Usage: check_symbols.sh LIBVRAM_SO ARCHIVE...
# (ASan builds add an __odr_asan.<name> companion for each global variable.)
set -euo pipefail
shared=$1; shift
bad=$( { nm -D --defined-only "$shared" | awk '{print $3}';
         for a in "$@"; do nm -g --defined-only "$a" 2>/dev/null | awk 'NF==3 {print $3}'; done; } |
       grep -v -E '^(vram_|VRAM_|__odr_asan\.vram_|_init$|_fini$|_edata$|_end$|__bss_start$)' | sort -u || true)
if [ -n "$bad" ]; then
  echo "symbols without the vram_ prefix:"; echo "$bad"
  echo "0 passed, 1 failed"; exit 1
fi
count=$(nm -D --defined-only "$shared" | grep -c ' vram_' || true)
echo "symbol prefix: $count exported symbols, all vram_"
