#!/usr/bin/env bash
# The front ends (src/cli, src/daemon, contrib/slurm) include only vram.h,
# vram_int.h (libvram's interface for them), the interfaces of the static
# libraries built for them (sched/sched.h, watch/watch.h, pool/tools/replay.h)
# and their own headers: never a module's private header (docs/design.md,
# "Libraries and headers"). Usage: check_front_includes.sh SOURCE_DIR
set -euo pipefail
src=${1:?source dir}
cd "$src"
allowed='^(vram\.h|vram_int\.h|sched/sched\.h|watch/watch\.h|pool/tools/replay\.h)$'
bad=""
check() { # DIR OWN_PREFIX_REGEX: own headers are DIR/... or bare names in DIR
    local dir=$1 own=$2 f inc
    for f in "$dir"/*.c "$dir"/*.h; do
        [ -e "$f" ] || continue
        while IFS= read -r inc; do
            [[ $inc =~ $allowed || $inc =~ $own ]] && continue
            [[ $inc != */* && -e $dir/$inc ]] && continue
            bad+="$f: #include \"$inc\""$'\n'
        done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f")
    done
}
check src/cli '^cli/|^daemon/daemon\.h$'   # `vram serve` runs vramd's front end
check src/daemon '^daemon/'
check contrib/slurm '^cli/daemon_client\.h$' # the plugin is a client of vramd like the CLI
if [ -n "$bad" ]; then
    printf 'front ends include private headers of modules:\n%s' "$bad"
    echo "0 passed, 1 failed"; exit 1
fi
echo "ok: src/cli, src/daemon and contrib/slurm include only public and front-end headers"
echo "1 passed, 0 failed"
