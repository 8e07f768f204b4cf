#!/usr/bin/env bash
# libvram.so is what every training process loads (import vram, the PyTorch
# allocator): it carries device, pool, plan, tune and the JSON API, and
# neither vramd's core nor its dependencies (docs/design.md, "Libraries and
# headers").
#   check_libvram.sh api LIBVRAM_SO HEADER CC
#     no symbol libvram.so exports and no name vram.h declares belongs to the
#     scheduler, the watch, spawning, the job decoders or the front ends'
#     text helpers; vram.h compiles on its own (C11, warnings as errors)
#   check_libvram.sh needed LIBVRAM_SO
#     no NEEDED entry of libvram.so is SQLite, libcurl or libyaml
set -euo pipefail
mode=${1:?mode: api or needed} lib=${2:?libvram.so}
fail() { echo "FAIL: $*"; echo "0 passed, 1 failed"; exit 1; }
# vramd's core: what src/sched/sched.h and src/watch/watch.h declare
inner='vram_(sched|watch|spawn|job|oom_scan|oom_message|escape_text|alert|end_reason|request_error)[a-z0-9_]*'
case $mode in
api)
    header=${3:?header} cc=${4:?compiler}
    exported=$(nm -D --defined-only "$lib" | awk '{print $3}' | grep -E "^$inner$" | sort -u || true)
    [ -z "$exported" ] || fail "libvram.so exports vramd's core:"$'\n'"$exported"
    t=$(mktemp -d)
    trap 'rm -rf "$t"' EXIT
    printf '#include "vram.h"\nint main(void) { return vram_api_version() > 0 ? 0 : 1; }\n' >"$t/only.c"
    "$cc" -std=c11 -Wall -Wextra -Wpedantic -Werror -fsyntax-only -I"$(dirname "$header")" "$t/only.c" \
        2>"$t/cc.err" || fail "vram.h does not compile on its own: $(cat "$t/cc.err")"
    declared=$("$cc" -std=c11 -E -P "$header" | grep -oE "\b$inner\b" | sort -u || true)
    [ -z "$declared" ] || fail "vram.h declares vramd's core:"$'\n'"$declared"
    n=$(nm -D --defined-only "$lib" | grep -c ' vram_' || true)
    echo "ok: libvram.so exports $n vram_ symbols, none of vramd's core; vram.h declares none"
    ;;
needed)
    needed=$(readelf -d "$lib" | awk '/\(NEEDED\)/ {gsub(/[][]/, "", $5); print $5}')
    [ -n "$needed" ] || fail "readelf -d $lib shows no NEEDED entry (not a shared library?)"
    bad=$(grep -E '^lib(sqlite3|curl|yaml)' <<<"$needed" || true)
    [ -z "$bad" ] || fail "libvram.so needs vramd's dependencies: $(echo $bad)"
    echo "ok: libvram.so needs only: $(echo $needed)"
    ;;
*) fail "unknown mode $mode" ;;
esac
echo "1 passed, 0 failed"
