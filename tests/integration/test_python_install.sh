#!/bin/bash
# `pip install ./python` as on a fresh machine without a network: Debian's
# python3 and pip (a venv with --system-site-packages and no pip of its own),
# pip's index disabled (--no-index), build isolation on (pip's default). The
# installed package carries libvram.so and imports from outside the source
# tree with neither VRAM_LIBRARY nor VRAM_BUILD_DIR. The same with a wheel
# built by `pip wheel` and installed into a second venv, and with
# --no-build-isolation. Without a library to carry, the build fails and says
# how to give it one.
set -euo pipefail
S=${VRAM_SOURCE_DIR:?} B=${VRAM_BUILD_DIR:?}
VRAM=${VRAM_BIN:-$B/vram}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
passed=0
fail() { echo "FAIL: $*" >&2; echo "$passed passed, 1 failed"; exit 1; }
ok() { passed=$((passed + 1)); echo "ok: $*"; }

PY=/usr/bin/python3
"$PY" -m pip --version >/dev/null 2>&1 || fail "Debian's pip is missing (apt-get install python3-pip; make deps)"
# no user or site pip configuration, no cache: what a fresh machine has
export PIP_CONFIG_FILE=/dev/null PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1
export VRAM_BUILD_DIR=$B
unset VRAM_LIBRARY
# the build tree's libvram, for the source checkout the test runs from
# (pip install ./python finds build/ beside python/, or VRAM_BUILD_DIR)

newvenv() {
    "$PY" -m venv --system-site-packages --without-pip "$1"
    [ "$("$1/bin/python" -m pip --version | awk '{print $4}')" = /usr/lib/python3/dist-packages/pip ] ||
        fail "the venv's pip is not Debian's: $("$1/bin/python" -m pip --version)"
}

# check_import VENV: from outside the tree, no VRAM_LIBRARY nor build tree;
# the estimate equals the CLI's
expected=$("$VRAM" estimate --model gpt2 --json | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["bytes"]["total"])')
check_import() {
    local site out
    site=$("$1/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["platlib"])')
    [ -f "$site/vram/libvram.so" ] || fail "$site/vram/libvram.so was not installed"
    mkdir -p "$T/elsewhere"
    out=$(cd "$T/elsewhere" && env -u VRAM_LIBRARY -u VRAM_BUILD_DIR -u PYTHONPATH VRAM_BACKEND=cpu \
        "$1/bin/python" -c '
import vram, sys
print(vram.library_path, vram.__file__, vram.estimate("gpt2").total)
') || fail "import vram from the installed package: $out"
    read -r lib file total <<<"$out"
    [ "$lib" = "$site/vram/libvram.so" ] || fail "vram.library_path is $lib, not the installed $site/vram/libvram.so"
    [ "$file" = "$site/vram/__init__.py" ] || fail "vram was imported from $file"
    [ "$total" = "$expected" ] || fail "vram.estimate('gpt2').total is $total, vram estimate says $expected"
}

# --- 1. pip install --no-index ./python, build isolation on
newvenv "$T/v1"
(cd "$S" && "$T/v1/bin/python" -m pip install --no-index ./python) >"$T/pip1.log" 2>&1 ||
    fail "pip install --no-index ./python: $(tail -20 "$T/pip1.log")"
check_import "$T/v1"
ok "pip install --no-index ./python with Debian's pip: the package carries libvram.so and imports from elsewhere"

# --- 2. a wheel, installed into another venv
newvenv "$T/v2"
(cd "$S" && "$T/v1/bin/python" -m pip wheel --no-index --no-deps -w "$T/dist" ./python) >"$T/pip2.log" 2>&1 ||
    fail "pip wheel: $(tail -20 "$T/pip2.log")"
wheel=$(ls "$T"/dist/vram-*.whl)
case $wheel in *-py3-none-linux_*.whl) ;; *) fail "the wheel is not a platform wheel: $wheel" ;; esac
"$PY" -m zipfile -l "$wheel" >"$T/wheel.list"
grep -q '^vram/libvram.so ' "$T/wheel.list" || fail "the wheel has no vram/libvram.so: $(cat "$T/wheel.list")"
"$T/v2/bin/python" -m pip install --no-index "$wheel" >"$T/pip3.log" 2>&1 || fail "pip install WHEEL: $(tail -20 "$T/pip3.log")"
check_import "$T/v2"
ok "pip wheel --no-index ./python, installed in a fresh venv: $(basename "$wheel")"

# --- 3. --no-build-isolation (the backend needs nothing installed)
newvenv "$T/v3"
(cd "$S" && "$T/v3/bin/python" -m pip install --no-index --no-build-isolation ./python) >"$T/pip4.log" 2>&1 ||
    fail "pip install --no-index --no-build-isolation ./python: $(tail -20 "$T/pip4.log")"
check_import "$T/v3"
ok "pip install --no-index --no-build-isolation ./python"

# --- 4. nothing to carry: a copy of python/ away from any build tree
cp -r "$S/python" "$T/src"
rm -rf "$T/src/vram/libvram.so"* "$T/src/build"
newvenv "$T/v4"
rc=0
(cd "$T" && env -u VRAM_BUILD_DIR "$T/v4/bin/python" -m pip install --no-index ./src) >"$T/pip5.log" 2>&1 || rc=$?
[ $rc != 0 ] || fail "pip install of a tree without libvram.so succeeded"
grep -q 'no libvram.so to put in the wheel; tried .*VRAM_LIBRARY=PATH pip install' "$T/pip5.log" ||
    fail "the failure does not say how to give the library: $(tail -20 "$T/pip5.log")"
# and named: VRAM_LIBRARY at build time
(cd "$T" && env -u VRAM_BUILD_DIR VRAM_LIBRARY="$B/libvram.so" "$T/v4/bin/python" -m pip install --no-index ./src) \
    >"$T/pip6.log" 2>&1 || fail "VRAM_LIBRARY=... pip install: $(tail -20 "$T/pip6.log")"
check_import "$T/v4"
ok "without a library the build fails naming VRAM_LIBRARY; with VRAM_LIBRARY it carries that one"

echo "$passed passed, 0 failed"
