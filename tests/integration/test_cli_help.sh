#!/bin/bash
# Help that can be trusted: `vram help CMD` is CMD's own help, mistyped
# commands get "did you mean", and every shell example ("$ " lines) of the
# README and docs/*.md and of the --help of run, submit, wait, attach, jobs
# and cancel runs (exit 0) against a live vramd with simulated GPUs, in
# order, in one shell. The Python blocks: test_doc_python.sh.
source "$(dirname "$0")/daemon_lib.sh"
cd "$T"
run_rc() { local __v=$1 __rc=0; shift; "$@" || __rc=$?; printf -v "$__v" %s "$__rc"; }
mkdir bin && ln -s "$VRAM" bin/vram && ln -s "$VRAMD" bin/vramd
# the Python examples: the project's interpreter (VRAM_PYTHON: torch 2.x,
# transformers) with the package installed as a user installs it (pip,
# offline, into a directory of its own), loading the libvram it carries;
# the ```python blocks run in test_doc_python.sh
source "$(dirname "$0")/doc_python_lib.sh"
install_package_for_examples
export PATH=$T/bin:$PATH USER=${USER:-$(id -un)}
# as on a user's machine: sim state files by spec, under the runtime directory
unset VRAM_SIM_STATE
mkdir -m 700 "$T/xdg" && export XDG_RUNTIME_DIR=$T/xdg

# ---- vram help CMD, did you mean -------------------------------------------------
for cmd in info run submit wait attach jobs cancel status; do
    [ "$(vram help "$cmd")" = "$(vram "$cmd" --help)" ] || fail "vram help $cmd differs from vram $cmd --help"
done
vram help | grep -q '^usage: vram ' || fail "vram help"
run_rc rc vram stauts 2>"$T/err"
[ "$rc" = 2 ] && grep -q 'unknown command "stauts"; did you mean "status"?' "$T/err" || fail "$(cat "$T/err")"
run_rc rc vram help jbos 2>"$T/err"
[ "$rc" = 2 ] && grep -q 'did you mean "jobs"?' "$T/err" || fail "$(cat "$T/err")"
run_rc rc vram jobs --stae queued 2>"$T/err"
[ "$rc" = 2 ] && grep -q 'did you mean --state?' "$T/err" || fail "$(cat "$T/err")"
pass "vram help CMD is CMD --help; did you mean for commands and flags"

# ---- what the examples need: a training script; the tree's traces ------------------------------
cat >train.py <<'PY'
import os
print("train.py on GPU", os.environ.get("CUDA_VISIBLE_DEVICES"), "batch", os.environ.get("VRAM_BATCH_SIZE"))
PY
printf '#!/bin/sh\necho train.sh on GPU "$CUDA_VISIBLE_DEVICES"\n' >train.sh
chmod +x train.sh
# (the replay example names a trace the tree ships: bench/pool/traces/)
ln -s "$VRAM_SOURCE_DIR/bench" bench

# run_examples NAME: runs stdin's lines one by one in this shell (so $id
# carries over); each must exit 0.
run_examples() {
    local name=$1 line n=0
    while IFS= read -r line; do
        [ -n "$line" ] || continue
        case $line in *"# interactive"*) continue ;; esac # needs a person at a terminal
        n=$((n + 1))
        set +e
        eval "$line" </dev/null >"$T/ex.out" 2>&1 # examples must not eat the list
        local rc=$?
        set -e
        [ $rc = 0 ] || { cat "$T/ex.out" >&2; fail "$name example exited $rc: $line"; }
        # a daemon started by an example: wait until it answers. Its pid is
        # $! (eval ran in this shell), never a search by name: that finds
        # the newest vramd of any test running beside this one.
        if [[ "$line" == *vramd*"&"* ]]; then
            DAEMON_PID=$!
            for _ in $(seq 600); do
                curl -sf --unix-socket "$VRAM_SOCKET" http://x/v1/health >/dev/null && break
                kill -0 "$DAEMON_PID" 2>/dev/null || fail "vramd from \"$line\" exited: $(cat "$T/ex.out")"
                sleep 0.05
            done
            [ "$(field "$(api GET /v1/health)" 'd["pid"]')" = "$DAEMON_PID" ] \
                || fail "the vramd answering on $VRAM_SOCKET is not the one \"$line\" started"
        fi
    done
    [ $n -gt 0 ] || fail "no examples found in $name"
    echo "$n" >"$T/count"
}

# README: every "$ " line of its code blocks, in order (it starts vramd itself)
sed -n 's/^\$ //p' "$VRAM_SOURCE_DIR/README.md" >"$T/readme-examples"
run_examples README <"$T/readme-examples"
pass "README: $(cat "$T/count") examples ran"

# docs/*.md: every indented "$ " line, in page order
for doc in "$VRAM_SOURCE_DIR"/docs/*.md; do
    sed -n 's/^    \$ //p' "$doc" >"$T/doc-examples"
    [ -s "$T/doc-examples" ] || continue
    run_examples "$(basename "$doc")" <"$T/doc-examples"
    pass "$(basename "$doc"): $(cat "$T/count") examples ran"
done

# the --help examples of the job commands, in an order where $id makes sense
for cmd in run submit wait attach jobs cancel; do
    vram "$cmd" --help | sed -n '/^Examples*:$/,/^$/p' | sed -n 's/^  //p'
done >"$T/help-examples"
run_examples "--help" <"$T/help-examples"
pass "--help of run, submit, wait, attach, jobs, cancel: $(cat "$T/count") examples ran"
grep -q "train.sh on GPU" run-*.log || fail "submit example's output file"

# docs/cli.md documents every command of `vram --help` and every long flag of
# each command's own --help
doc=$VRAM_SOURCE_DIR/docs/cli.md
cmds=$(vram --help | sed -n '/^commands:$/,/^$/s/^  \([a-z][a-z-]*\) .*/\1/p')
[ -n "$cmds" ] || fail "no commands in vram --help"
for cmd in $cmds; do
    grep -q "^## vram $cmd\$" "$doc" || fail "docs/cli.md has no section \"## vram $cmd\""
    for flag in $(vram "$cmd" --help 2>&1 | grep -oE -- '--[a-z][a-z0-9-]+' | sort -u); do
        [ "$flag" = --help ] || grep -q -- "$flag" "$doc" || fail "docs/cli.md does not mention vram $cmd $flag"
    done
done
pass "docs/cli.md: a section for each of $(wc -w <<<"$cmds") commands, every flag of their --help"
