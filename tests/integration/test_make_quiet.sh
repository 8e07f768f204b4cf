#!/bin/bash
# What `make run` and `make build` print is what a newcomer reads: no
# "Entering/Leaving directory" line per recursive make (cmake --build runs
# make inside build/), and `make run` keeps the build's progress in a log.
# Runs `make build` on this build tree (up to date under `make test`, so
# nothing is rebuilt; ctest runs it alone, RUN_SERIAL, in case it is not)
# and `make -n run`.
set -euo pipefail
S=${VRAM_SOURCE_DIR:?} B=${VRAM_BUILD_DIR:?}
fail() { echo "FAIL: $*" >&2; exit 1; }
out=$(mktemp)
trap 'rm -f "$out"' EXIT
make -C "$S" BUILD="$B" JOBS=1 build >"$out" 2>&1 || { cat "$out"; fail "make build"; }
if grep -E "(Entering|Leaving) directory" "$out" | grep -v "^make: .*'$S'$" >/dev/null; then
    grep -cE "(Entering|Leaving) directory" "$out"
    fail "make build prints the recursive makes' directories"
fi
echo "ok - make build: no Entering/Leaving directory lines ($(wc -l <"$out") lines)"
# make run: the build's output goes to a log, the demo's to the terminal
# (-n: nothing runs, the venv step included)
make -C "$S" BUILD="$B" -n run >"$out" 2>&1 || { cat "$out"; fail "make -n run"; }
grep -q "cmake --build $B .*>$B/build.log 2>&1" "$out" ||
    fail "make run does not keep the build's output in $B/build.log: $(tail -5 "$out")"
echo "ok - make run builds into a log"
