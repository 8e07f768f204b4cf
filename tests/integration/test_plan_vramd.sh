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

# --- vramd's estimator and planner (issue 22): every setting of the table,
# the same bytes as the CLI; no file or device read for a client
hf=$(cat "$VRAM_SOURCE_DIR/tests/data/hf/llama-3.2-3b.json")
body="{\"hf_config\": $hf, \"lora_rank\": 64, \"quantize_base\": \"nf4\", \"zero\": 3, \"gpus\": 4, \"precision\": \"bf16\", \"sharding\": \"fsdp\", \"seq_len\": 2048, \"gpu_name\": \"H100\"}"
e=$(api POST /v1/estimate "$body")
[ "$(status)" = 200 ] || fail "estimate: $(status) $e"
ref=$("$VRAM" estimate --hf-config "$VRAM_SOURCE_DIR/tests/data/hf/llama-3.2-3b.json" --lora-rank 64 \
    --quantize-base nf4 --zero 3 --gpus 4 --precision bf16 --sharding fsdp --seq-len 2048 --gpu-name H100 --json)
[ "$(field "$e" 'd["bytes"]')" = "$(field "$ref" 'd["bytes"]')" ] || fail "vramd $e vs CLI $ref"
pass "POST /v1/estimate: QLoRA over FSDP, the CLI's bytes"
p=$(api POST /v1/plan '{"model": "resnet50", "batch_size": 1024, "gpu_name": "A100-80GB"}')
[ "$(status)" = 200 ] || fail "plan: $(status) $p"
[ "$(field "$p" 'd["shown"]["total_bytes"] == d["current"]["total_bytes"]')" = True ] || fail "plan: $p"
pass "POST /v1/plan: the shown batch is the verdict's estimate"
for bad in '{"hf_config": "/etc/passwd"}' '{"model": "gpt2", "lora_rnak": 8}' '{"model": "gpt2", "gpu_name": "MI300X"}' '[1]'; do
    out=$(api POST /v1/estimate "$bad")
    case "$(status)" in 400|422) ;; *) fail "$bad: $(status) $out" ;; esac
done
out=$(api POST /v1/plan '{"model": "gpt2", "gpu": 0}')
[ "$(status)" = 422 ] || fail "plan on vramd's device: $(status) $out"
pass "POST /v1/estimate and /v1/plan refuse file paths, device indexes, unknown keys and other vendors"
