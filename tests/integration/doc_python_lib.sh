# Sourced by test_cli_help.sh and test_doc_python.sh (after daemon_lib.sh):
# the Python that the docs' examples run on, as a user would have it.

# install_package_for_examples: $T/bin/python3 runs the project's interpreter
# (VRAM_PYTHON: torch 2.x, transformers; else /usr/bin/python3), and the
# package is installed with pip, offline, into $T/site (on PYTHONPATH),
# loading the libvram it carries (VRAM_LIBRARY unset).
install_package_for_examples() {
    local py=${VRAM_PYTHON:-/usr/bin/python3}
    mkdir -p "$T/bin"
    printf '#!/bin/sh\nexec %q "$@"\n' "$py" >"$T/bin/python3" && chmod +x "$T/bin/python3"
    "$py" -m pip install -q --no-index --disable-pip-version-check --target "$T/site" \
        "$VRAM_SOURCE_DIR/python" || fail "pip install --no-index ./python"
    [ -f "$T/site/vram/libvram.so" ] || fail "the installed package has no libvram.so"
    unset VRAM_LIBRARY
    export PYTHONPATH=$T/site OMP_NUM_THREADS=1
}
