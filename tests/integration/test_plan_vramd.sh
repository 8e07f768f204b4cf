#!/usr/bin/env bash
# `vram plan --gpu N` plans with what vramd has not promised to other jobs:
# the smaller of the driver's free memory and vramd's free-for-admission,
# and says so; without vramd it plans with the driver's figure.
source "$(dirname "$0")/daemon_lib.sh"

plan() { "$VRAM" plan --model gpt2 --seq-len 512 --gpu "${1:-0}" --json; }
free_of() { field "$1" 'd["gpu"]["free_bytes"]'; }

# no daemon: the device's own free memory, no vramd note
out=$(VRAM_SOCKET=$T/none.sock plan) || fail "plan without vramd: $out"
[ "$(free_of "$out")" = $((80 * GiB)) ] || fail "free without vramd: $out"
grep -q vramd <<<"$out" && fail "vramd named without a daemon: $out"
pass "without vramd: the driver's free memory"

start_daemon --safety-margin 4GiB
j=$(api POST /v1/jobs '{"name":"holder","mem_bytes":"30GiB"}')
[ "$(status)" = 201 ] || fail "submit: $(status) $j"
[ "$(field "$j" 'd["state"]')" = running ] || fail "not admitted: $j"
gpu=$(field "$(api GET /v1/status)" '[x["index"] for x in d["devices"] if x["reserved_bytes"] > 0][0]')
out=$(plan "$gpu") || fail "plan with vramd: $out"
# 80 GiB - 4 GiB margin - 30 GiB reserved = 46 GiB free for admission
[ "$(free_of "$out")" = $((46 * GiB)) ] || fail "free with vramd: $out"
field "$out" 'd["gpu"]["name"]' | grep -q "vramd reserves 30.00 GiB" || fail "no note: $out"
pass "with vramd: its 30 GiB reservation and 4 GiB margin are not planned with"
