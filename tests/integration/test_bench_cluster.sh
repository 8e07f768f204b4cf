#!/usr/bin/env bash
# The cluster simulation (bench/cluster/) on a small cluster: it runs libvram's
# scheduler on every node and checks each node's ledger and queue invariants
# itself (exit 1 if one breaks); here, in its table: every job of every
# strategy ended, and no job admitted by vramd was killed by OOM: vramd
# reserves at most 95 % of a GPU and the estimator errs by at most 5.3 %, so a
# GPU is passed only if every job on a full GPU errs by nearly the worst (the
# simulation is deterministic for a seed). No figure is judged.
set -euo pipefail
B=${VRAM_BUILD_DIR:?}
BENCH=$B/bench/cluster/bench_cluster
[ -x "$BENCH" ] || { echo "FAIL: $BENCH was not built"; exit 1; }
out=$("$BENCH" 8 6 2 3) || { echo "FAIL: bench_cluster exited $?: $out"; exit 1; }
python3 - "$out" <<'PY' || exit 1
import sys
rows = {}
for line in sys.argv[1].splitlines():
    cells = [c.strip() for c in line.strip().strip("|").split("|")]
    if len(cells) == 12 and cells[0] in ("whole", "shard", "vram", "vram+shard"):
        rows[cells[0]] = cells
assert sorted(rows) == ["shard", "vram", "vram+shard", "whole"], sys.argv[1]
for name, c in rows.items():
    done, total = c[9].split("/")
    assert int(done) + int(c[8]) == int(total) > 0, (name, c)  # ended or never fit
for name in ("vram", "vram+shard"):
    assert rows[name][7] == "0" and rows[name][8] == "0", (name, rows[name])
print("ok: bench_cluster on 8 nodes: every job of the 4 strategies ended; none admitted by vramd was OOM-killed;",
      ", ".join(f"{n} {c[9]} jobs, {c[7]} OOM" for n, c in sorted(rows.items())))
PY
