#!/bin/bash
# The ```python blocks of the README and the docs run as written (each
# document as one session, in order: doc_examples.py) from a package
# installed with pip --no-index, on the project's interpreter, outside the
# source tree, against a live vramd on simulated GPUs: the README's on the
# simulated A100-40GB its text names, the docs' on 2xH100-80GB. A block that
# cannot run here is marked `<!-- not run: why -->` in the document.
source "$(dirname "$0")/daemon_lib.sh"
source "$(dirname "$0")/doc_python_lib.sh"
cd "$T"
# as on a user's machine: sim state files by spec, under the runtime directory
unset VRAM_SIM_STATE
mkdir -m 700 "$T/xdg" && export XDG_RUNTIME_DIR=$T/xdg
install_package_for_examples
export PATH=$T/bin:$PATH
python3 -c 'import vram, sys; assert vram.library_path == sys.argv[1], vram.library_path' \
    "$T/site/vram/libvram.so" || fail "the examples would not use the installed package's libvram"
pass "pip install --no-index ./python: the examples load $T/site/vram/libvram.so"
start_daemon
for doc in README.md docs/python.md docs/pool.md docs/runtime.md; do
    case $doc in README.md) sim=A100-40GB ;; *) sim=2xH100-80GB ;; esac
    VRAM_SIM=$sim python3 "$VRAM_SOURCE_DIR/tests/integration/doc_examples.py" "$VRAM_SOURCE_DIR/$doc" \
        >"$T/py.out" 2>&1 || { cat "$T/py.out" >&2; fail "$doc: a Python example failed"; }
    pass "$(tail -1 "$T/py.out")"
done
