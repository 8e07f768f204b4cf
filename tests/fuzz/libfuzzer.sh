#!/usr/bin/env bash
# Longer, coverage-guided fuzzing with libFuzzer (clang only; `make fuzz`).
#   tests/fuzz/libfuzzer.sh [BUILD_DIR] [SECONDS_PER_TARGET] [TARGET...]
# Builds fuzz_lf_<target> with ASan+UBSan into BUILD_DIR (default
# build-libfuzzer), then runs each target for SECONDS (default 60) on a
# working copy of its seed corpus. Inputs that fail land in
# BUILD_DIR/fuzz-artifacts/; the exit status is 1 when any target failed.
# By default the inputs of known, reported issues are skipped (fuzz.h), so a
# run looks for new problems; FUZZ_STRICT=ON runs them too (to check fixes).
set -u
cd "$(dirname "$0")/../.."
build=${1:-build-libfuzzer}
seconds=${2:-60}
shift $(($# > 2 ? 2 : $#))
if ! command -v clang >/dev/null; then
    echo "fuzz: clang is not installed (apt-get install clang); the gcc smoke runs in make test" >&2
    exit 2
fi
flags="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -g"
CC=clang cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Debug -DVRAM_LIBFUZZER=ON \
    -DVRAM_FUZZ_STRICT="${FUZZ_STRICT:-OFF}" -DCMAKE_C_FLAGS="$flags" >/dev/null || exit 2
cmake --build "$build" --target fuzz_targets -j "${JOBS:-2}" >/dev/null || exit 2

targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    for f in tests/fuzz/fuzz_*.c; do
        t=$(basename "$f" .c)
        t=${t#fuzz_}
        # fuzz_common.c and fuzz_daemon.c are helpers linked into targets,
        # as in tests/fuzz/CMakeLists.txt, not targets of their own.
        case $t in common | daemon) ;; *) targets+=("$t") ;; esac
    done
fi
mkdir -p "$build/fuzz-artifacts"
failed=0
for t in "${targets[@]}"; do
    bin="$build/tests/fuzz/fuzz_lf_$t"
    [ -x "$bin" ] || { echo "fuzz: no target $t" >&2; failed=1; continue; }
    work="$build/fuzz-corpus/$t"
    mkdir -p "$work"
    echo "== fuzz $t for ${seconds}s"
    # New interesting inputs go to the working corpus, never into the source tree.
    if ! "$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
        -print_final_stats=1 -artifact_prefix="$build/fuzz-artifacts/$t-" \
        "$work" "tests/fuzz/corpus/$t" 2>"$build/fuzz-artifacts/$t.log"; then
        failed=1
        echo "fuzz $t: FAILED (log: $build/fuzz-artifacts/$t.log)"
        grep -E "runtime error|ERROR: |invariant failed|^  " "$build/fuzz-artifacts/$t.log" | head -5
    else
        grep -E "stat::number_of_executed_units|cov:" "$build/fuzz-artifacts/$t.log" | tail -2
    fi
done
exit $failed
