#!/usr/bin/env bash
# vram estimate / vram plan through the real CLI: text and --json output,
# exit codes (0 ok, 1 bad file, 2 bad flags/settings), and plan against a
# simulated GPU with memory in use.
set -uo pipefail
VRAM=${VRAM_BIN:?VRAM_BIN is not set}
SRC=${VRAM_SOURCE_DIR:?VRAM_SOURCE_DIR is not set}
DATA=$SRC/tests/data
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export VRAM_SIM_STATE=$tmp/sim.state
unset VRAM_SIM VRAM_BACKEND
pass=0 failn=0
ok() { pass=$((pass + 1)); }
bad() { failn=$((failn + 1)); echo "FAIL: $*"; }

# expect CODE CMD...: runs CMD, stdout in $tmp/out, stderr in $tmp/err
expect() {
  local want=$1; shift
  "$@" >"$tmp/out" 2>"$tmp/err"
  local got=$?
  if [ "$got" = "$want" ]; then ok; else bad "exit $got (want $want): $*"; cat "$tmp/err"; fi
}
has() { if grep -q -- "$1" "$2"; then ok; else bad "\"$1\" not in $2:"; cat "$2"; fi; }
json() { python3 -c "import json,sys; d=json.load(open('$tmp/out')); print($1)"; }
eq() { if [ "$1" = "$2" ]; then ok; else bad "$3: got '$1', want '$2'"; fi; }

# --- estimate: text report
expect 0 "$VRAM" estimate --model gpt2 --batch-size 4 --seq-len 512
for row in Parameters Buffers Gradients "Optimizer states" Activations "KV cache" "Autocast cache" \
  "Backward temps" "Optimizer temps" "cuBLAS workspaces" "Allocator rounding" "CUDA context" \
  "Allocated at peak" "Reserved" "nvidia-smi"; do
  has "$row" "$tmp/out"
done
has "124,439,808 parameters" "$tmp/out"
has "GiB" "$tmp/out"

# --- a flag the model's kind has no use for is said on stderr, naming it
expect 0 "$VRAM" estimate --model gpt2 --image-size 512
has "vram estimate: --image-size 512 does not apply to gpt2" "$tmp/err"
expect 0 "$VRAM" plan --model resnet50 --seq-len 128 --gpu-name A100-40GB
has "vram plan: --seq-len 128 does not apply to resnet50, an image model" "$tmp/err"
expect 0 "$VRAM" estimate --model gpt2 --seq-len 128
eq "$(cat "$tmp/err")" "" "a flag that applies: nothing on stderr"

# --- estimate: JSON, components add up, exact parameter bytes
expect 0 "$VRAM" estimate --model bert-base --batch-size 2 --seq-len 128 --json
eq "$(json 'd["parameters_count"]')" 109482240 "bert-base parameters_count"
eq "$(json 'd["bytes"]["parameters"]')" $((109482240 * 4)) "fp32 parameter bytes"
b='d["bytes"]'
eq "$(json "$b['nvidia_smi'] == $b['reserved'] + $b['cuda_context'] == $b['total']")" True "nvidia-smi = reserved + context"
eq "$(json "$b['reserved'] == $b['allocated_peak'] + $b['allocator_rounding']")" True "reserved = peak + rounding"
eq "$(json "$b['overhead'] == sum($b[k] for k in ('autocast_cache', 'backward_temps', 'optimizer_temps', 'workspaces', 'allocator_rounding', 'cuda_context'))")" True "overhead is the real-GPU lines"
eq "$(json 'd["peak_phase"] in ("backward", "optimizer step")')" True "peak phase"

# mixed precision Adam: torch.autocast's 18 bytes per parameter (+4 bytes step per tensor)
expect 0 "$VRAM" estimate --model llama-2-7b --precision amp-bf16 --optimizer adam --seq-len 256 --json
eq "$(json '(d["bytes"]["parameters"] + d["bytes"]["gradients"] + d["bytes"]["optimizer_states"] + d["bytes"]["autocast_cache"]) // d["parameters_count"]')" 18 "amp adam bytes/param"

# ZeRO-3 over 8 GPUs: DeepSpeed's 4 x largest layer + 18 bytes/param / 8
expect 0 "$VRAM" estimate --model llama-2-7b --precision amp-bf16 --optimizer adam --seq-len 256 --zero 3 --gpus 8 --json
eq "$(json 'abs(d["bytes"]["parameters"] + d["bytes"]["gradients"] + d["bytes"]["optimizer_states"] - (4 * 32000 * 4096 + 18 * 6738415616 // 8)) < 4096')" True "ZeRO-3 DeepSpeed formula"

# inference KV cache: 2 * 32 layers * 8 kv heads * 128 * (1000 + 24) * 2 batch * 2 bytes
expect 0 "$VRAM" estimate --model mistral-7b --mode infer --precision bf16 --batch-size 2 --seq-len 1000 --max-new-tokens 24 --json
eq "$(json 'd["bytes"]["kv_cache"]')" $((2 * 32 * 8 * 128 * 1024 * 2 * 2)) "mistral KV cache"
eq "$(json 'd["bytes"]["gradients"] + d["bytes"]["optimizer_states"]')" 0 "inference has no gradients"

# image model, checkpointing lowers activations, --overhead is honoured
expect 0 "$VRAM" estimate --model resnet50 --batch-size 32 --image-size 224 --overhead 1GiB --json
full=$(json 'd["bytes"]["activations"]')
eq "$(json 'd["bytes"]["cuda_context"] == 1 << 30 and d["bytes"]["workspaces"] == 0')" True "--overhead"
expect 0 "$VRAM" estimate --model resnet50 --batch-size 32 --checkpointing full --json
ck=$(json 'd["bytes"]["activations"]')
[ "$ck" -lt "$full" ] && ok || bad "checkpointing did not lower activations ($ck >= $full)"

# hf-config and profile
expect 0 "$VRAM" estimate --hf-config "$DATA/hf/mistral-7b.json" --seq-len 1024 --json
eq "$(json 'd["parameters_count"]')" 7241732096 "mistral from config.json"
expect 0 "$VRAM" estimate --profile "$DATA/profile/small.json" --batch-size 2 --json
eq "$(json 'd["bytes"]["activations"]')" $((2 * 268435456 + 1048576)) "profile activations"

# --flag=value form
expect 0 "$VRAM" estimate --model=gpt2 --batch-size=3 --seq-len=64 --json
eq "$(json 'd["batch_size"] * 1000 + d["seq_len"]')" 3064 "--flag=value"

# mixed precision: autocast keeps fp32 norms/softmax, so between bf16 and fp32
for p in fp32 amp-bf16 bf16; do
  "$VRAM" estimate --model bert-base --batch-size 4 --seq-len 128 --precision $p --json >"$tmp/$p.json"
done
act() { python3 -c "import json; print(json.load(open('$tmp/$1.json'))['bytes']['activations'])"; }
[ "$(act bf16)" -lt "$(act amp-bf16)" ] && [ "$(act amp-bf16)" -lt "$(act fp32)" ] && ok || bad "amp activations not between bf16 and fp32"

# fused attention keeps no attention scores
"$VRAM" estimate --model gpt2 --seq-len 1024 --json >"$tmp/eager.json"
expect 0 "$VRAM" estimate --model gpt2 --seq-len 1024 --attention fused --json
[ "$(json 'd["bytes"]["activations"]')" -lt "$(python3 -c "import json; print(json.load(open('$tmp/eager.json'))['bytes']['activations'])")" ] && ok || bad "--attention fused did not lower activations"
expect 2 "$VRAM" estimate --model gpt2 --attention magic

# --list, text and JSON
expect 0 "$VRAM" estimate --list
has "llama-3-70b" "$tmp/out"
has "efficientnet-b0" "$tmp/out"
expect 0 "$VRAM" estimate --list --json
eq "$(json 'len(d) >= 29 and all(m["parameters_count"] > 0 for m in d)')" True "--list --json"

# --- bad input: exit 2 for flags and settings, 1 for files
expect 2 "$VRAM" estimate --model bert-bsae
has 'did you mean bert-base' "$tmp/err"
expect 2 "$VRAM" estimate --model gpt2 --batch-size 0
has "batch-size" "$tmp/err"
expect 2 "$VRAM" estimate --model bert-base --seq-len 1024
has "512 positions" "$tmp/err"
expect 2 "$VRAM" estimate --model gpt2 --zero 2
has "\-\-gpus" "$tmp/err"
expect 2 "$VRAM" estimate --model gpt2 --precision fp8
has "amp-bf16" "$tmp/err"
expect 2 "$VRAM" estimate --model gpt2 --precision int8
has "inference only" "$tmp/err"
expect 2 "$VRAM" estimate --model gpt2 --profile "$DATA/profile/small.json"
expect 2 "$VRAM" estimate
expect 2 "$VRAM" estimate --model gpt2 --bogus
expect 2 "$VRAM" estimate --model gpt2 --batch-size
expect 1 "$VRAM" estimate --hf-config "$DATA/hf/malformed.json"
has "malformed.json:5:23" "$tmp/err"
expect 1 "$VRAM" estimate --hf-config "$DATA/hf/missing-field.json"
has '"intermediate_size"' "$tmp/err"
expect 1 "$VRAM" estimate --hf-config "$tmp/does-not-exist.json"
expect 0 "$VRAM" estimate --help
has "\-\-hf-config" "$tmp/out"

# --- issue 22: the breakdown's lines are the parts live at the peak and add
# up to the total (llama-2-7b's summed to 138 % before)
expect 0 "$VRAM" estimate --model llama-2-7b --json
eq "$(json "sum(d['at_peak'].values()) == d['bytes']['total']")" True "live parts add up to the total"
expect 0 "$VRAM" estimate --model llama-2-7b
eq "$(python3 -c "
import re
rows = open('$tmp/out').read().split('Memory per GPU at the peak')[1].split('----------')
parts = sum(float(x) for x in re.findall(r'([0-9.]+) GiB', rows[0]))
total = float(re.search(r'nvidia-smi \(total\) +([0-9.]+) GiB', rows[1]).group(1))
print(abs(parts - total) <= 0.07)")" True "text lines add up to the total"
# --- issue 22: 'Estimated usage at batch N' is the full estimate, the verdict's figure
expect 0 "$VRAM" plan --model resnet50 --batch-size 1024 --gpu-name A100-80GB
eq "$(python3 -c "
import re
t = open('$tmp/out').read()
block = t.split('Estimated usage at batch 1024')[1].split('Batch size recommendations')[0]
shown = re.search(r'Total +([0-9.]+) GiB', block).group(1)
verdict = re.search(r'Batch 1024: will not fit \(([0-9.]+) GiB\)', t).group(1)
print(shown == verdict and float(shown) > 40)")" True "resnet50 at 1024: block agrees with the verdict"
# --- issue 22: every setting is a flag, LoRA with ZeRO, GPU names, no negative advice
expect 0 "$VRAM" estimate --model llama-2-7b --precision bf16 --lora-rank 16 --quantize-base nf4 --zero 3 --gpus 4 --sharding fsdp --json
eq "$(json 'd["zero_stage"], d["sharding"], d["lora"]["quantize_base"]' | tr -d "(),'")" "3 fsdp nf4" "QLoRA with FSDP"
for g in A6000 L4 L40S H200 B200; do expect 0 "$VRAM" estimate --model gpt2 --gpu-name "$g"; done
expect 2 "$VRAM" estimate --model gpt2 --gpu-name MI300X
has "not supported" "$tmp/err"
expect 2 "$VRAM" estimate --model gpt2 --mode infer --max-new-tokens 100000
has "max-new-tokens 1023 or less" "$tmp/err"
expect 0 "$VRAM" estimate --help
for flag in --lora-rank --quantize-base --sharding --zero-grad --optimizer-impl --num-labels; do
  has "\\$flag" "$tmp/out"
done

# --- plan on a named GPU and on a size
expect 0 "$VRAM" plan --model bert-base --gpu-name A100-80GB --seq-len 128
for row in "GPU memory" "Total" "Free" "Weights, gradients, states" "Activations, KV, temps" "Estimated usage at batch" "Remaining" "Maximum within the 70% budget" "Recommended" "Safe"; do
  has "$row" "$tmp/out"
done
expect 0 "$VRAM" plan --model bert-base --gpu-name a100-80gb --seq-len 128 --json
max=$(json 'd["recommendations"]["maximum"]'); rec=$(json 'd["recommendations"]["recommended"]')
safe=$(json 'd["recommendations"]["safe"]'); raw=$(json 'd["recommendations"]["largest_fitting"]')
eq "$(python3 -c "m=$max; print(m > 0 and m & (m - 1) == 0 and $safe <= $rec <= $max <= $raw)")" True "powers of two, ordered"
# the estimate at the largest fitting batch is within 70% of 80 GiB, one more is not
"$VRAM" estimate --model bert-base --seq-len 128 --batch-size "$raw" --json >"$tmp/e1"
"$VRAM" estimate --model bert-base --seq-len 128 --batch-size $((raw + 1)) --json >"$tmp/e2"
t1=$(python3 -c "import json; print(json.load(open('$tmp/e1'))['bytes']['total'])")
t2=$(python3 -c "import json; print(json.load(open('$tmp/e2'))['bytes']['total'])")
budget=$(python3 -c "print(int(0.7 * 80 * 2**30))")
[ "$t1" -le "$budget" ] && [ "$t2" -gt "$budget" ] && ok || bad "largest fitting $raw: $t1 / $t2 vs $budget"
expect 0 "$VRAM" plan --model bert-base --gpu-mem 80GiB --seq-len 128 --no-power-of-two --json
eq "$(json 'd["recommendations"]["maximum"]')" "$raw" "--no-power-of-two maximum"

# a batch that does not fit: micro-batch x steps keep it
expect 0 "$VRAM" plan --model gpt2 --gpu-mem 16GiB --seq-len 1024 --batch-size 64 --json
eq "$(json 'd["current"]["fits"]')" False "batch 64 does not fit"
eq "$(json 'd["current"]["micro_batch_size"] * d["current"]["accumulation_steps"] >= 64 > d["current"]["micro_batch_size"] * (d["current"]["accumulation_steps"] - 1)')" True "accumulation keeps batch 64"
eq "$(json 'd["current"]["micro_batch_size"] <= d["recommendations"]["largest_fitting"]')" True "micro-batch fits"
expect 0 "$VRAM" plan --model gpt2 --gpu-mem 16GiB --seq-len 1024 --batch-size 64
has "gradient-accumulation steps" "$tmp/out"
# nothing fits: suggestions
expect 0 "$VRAM" plan --model llama-2-13b --gpu-name RTX4090-24GB --seq-len 2048 --json
eq "$(json 'd["recommendations"]["maximum"]')" 0 "13B fp32 on 24 GB"
eq "$(json '{"all-of-the-above", "optimizer=adam8bit", "lora=r16,all-linear", "qlora=nf4,r16"} <= {s["change"] for s in d["suggestions"]}')" True "suggestions"
eq "$(json '[s["saving_bytes"] for s in d["suggestions"] if s["change"] == "qlora=nf4,r16"] > [s["saving_bytes"] for s in d["suggestions"] if s["change"] == "lora=r16,all-linear"]')" True "QLoRA saves more than LoRA"
eq "$(json 'all(s["saving_bytes"] > 0 for s in d["suggestions"])')" True "suggestions save memory"

# plan errors
expect 2 "$VRAM" plan --model gpt2
has "gpu" "$tmp/err"
expect 2 "$VRAM" plan --model gpt2 --gpu-name B300-999GB
has "A100-80GB" "$tmp/err"
expect 2 "$VRAM" plan --model gpt2 --gpu-mem lots
expect 2 "$VRAM" plan --model gpt2 --gpu-mem 16GiB --target 1.5
expect 2 "$VRAM" plan --model gpt2 --gpu-mem 16GiB --gpu-name A100-80GB

# plan on a simulated GPU with 30 GiB in use: free memory is the base
if VRAM_SIM=1xA100-40GB "$VRAM" info >/dev/null 2>&1; then
  export VRAM_SIM=1xA100-40GB
  expect 0 "$VRAM" plan --model resnet50 --gpu 0 --json
  eq "$(json 'd["gpu"]["free_bytes"] == 40 * 2**30')" True "sim GPU free"
  idle=$(json 'd["recommendations"]["largest_fitting"]')
  {
    "$VRAM" sim alloc --mem 30GiB --seconds 30 >/dev/null 2>&1 &
    holder=$!
    for _ in $(seq 50); do
      "$VRAM" plan --model resnet50 --gpu 0 --json >"$tmp/out" 2>/dev/null
      [ "$(json 'd["gpu"]["used_bytes"] >= 30 * 2**30')" = True ] && break
      sleep 0.1
    done
    eq "$(json 'd["gpu"]["used_bytes"] >= 30 * 2**30')" True "sim GPU shows the held memory"
    busy=$(json 'd["recommendations"]["largest_fitting"]')
    [ "$busy" -lt "$idle" ] && ok || bad "busy GPU allows $busy >= idle $idle"
    kill "$holder" 2>/dev/null; wait "$holder" 2>/dev/null
  }
  expect 2 "$VRAM" plan --model resnet50 --gpu 7
  unset VRAM_SIM
else
  echo "note: sim backend unavailable; --gpu N not exercised"
fi

# --- second edition: heads, families, LoRA, hub ids, GPU names, weights only
expect 0 "$VRAM" estimate --hf-config "$DATA/hf/bert-large-cls.json" --json
eq "$(json 'd["parameters_count"]')" 335143938 "BertForSequenceClassification (2 labels)"
expect 0 "$VRAM" estimate --hf-config "$DATA/hf/whisper-tiny.json" --json
eq "$(json 'd["family"] + str(d["parameters_count"])')" whisper37760640 "whisper-tiny"
printf '{"model_type":"whisper","vocab_size":51865,"d_model":384,"encoder_layers":4,"decoder_layers":4}' >"$tmp/w.json"
expect 1 "$VRAM" estimate --hf-config "$tmp/w.json"
has "encoder_attention_heads" "$tmp/err"
printf '{"model_type":"mistral","vocab_size":32000,"hidden_size":4096,"num_hidden_layers":32,"num_attention_heads":32,"intermediate_size":14336,"num_local_experts":8,"num_experts_per_tok":2}' >"$tmp/m.json"
expect 1 "$VRAM" estimate --hf-config "$tmp/m.json"
has "num_local_experts" "$tmp/err"
expect 0 "$VRAM" estimate --model llama-2-7b --precision bf16 --seq-len 512 --lora-rank 8 --lora-targets q,v --json
eq "$(json 'd["bytes"]["trainable_count"] if "trainable_count" in d["bytes"] else d["trainable_count"]')" 4194304 "LoRA r8 q,v trainable"
expect 0 "$VRAM" estimate --model llama-2-7b --precision bf16 --seq-len 512 --lora-rank 16 --quantize-base nf4 --json
eq "$(json 'd["bytes"]["parameters"] < 5 * 2**30')" True "QLoRA NF4 base under 5 GiB"
expect 2 "$VRAM" estimate --model llama-2-7b --lora-targets q,zz
has "zz" "$tmp/err"
expect 2 "$VRAM" estimate --model gpt2 --gpu-name Voodoo2
has "unknown GPU" "$tmp/err"
expect 0 "$VRAM" estimate --model gpt2 --gpu-name H100 --json
eq "$(json 'd["bytes"]["workspaces"]')" $((2 * 32 * 1024 * 1024)) "Hopper workspaces"
has "80 GB H100" "$tmp/out"
expect 0 "$VRAM" estimate --model bert-large --mode load --gpu-name V100 --cuda 11.3 --json
eq "$(json 'd["bytes"]["cuda_context"] == 1343 << 20 and d["bytes"]["activations"] == 0')" True "weights only, eager context"
mkdir -p "$tmp/hub/models--org--gpt/snapshots/r1"
cp "$DATA/hf/gpt2.json" "$tmp/hub/models--org--gpt/snapshots/r1/config.json"
expect 0 env HF_HUB_CACHE="$tmp/hub" "$VRAM" estimate --hf-config org/gpt --json
eq "$(json 'd["parameters_count"]')" 124439808 "hub id from the cache"
expect 1 env HF_HUB_CACHE="$tmp/hub" "$VRAM" estimate --hf-config org/absent
has "not in the local Hugging Face cache" "$tmp/err"

# --- the class a checkpoint is loaded with, over its config's architectures
expect 0 "$VRAM" estimate --hf-config "$DATA/hf/bert-large-uncased.json" --head ForSequenceClassification --num-labels 2 --json
eq "$(json 'd["parameters_count"]')" 335143938 "--head ForSequenceClassification on a BertForMaskedLM config"
expect 2 "$VRAM" estimate --model bert-large --head BertForNothing
has "ForSequenceClassification" "$tmp/err"

# --- torchtune's loss: eager chunks keep fp32 log-probs, a compiled chunk its bf16 input
tt=(--hf-config "$DATA/hf/llama-3.2-3b.json" --precision bf16 --seq-len 2048 --batch-size 2 --lora-rank 8 --checkpointing full --activation-offload on --loss chunked --attention fused)
expect 0 "$VRAM" estimate "${tt[@]}" --compile off --json
eager=$(json 'd["bytes"]["allocated_peak"]')
expect 0 "$VRAM" estimate "${tt[@]}" --compile on --json
eq "$(json "d['bytes']['allocated_peak'] < $eager and d['compiled_loss'] and d['loss'] == 'chunked'")" True "compiled chunked loss below eager"
expect 2 "$VRAM" estimate --model gpt2 --compile maybe
has "--compile" "$tmp/err"

# --- zero_grad keeping zeroed gradients (PyTorch < 2.0) adds them at the start of backward
expect 0 "$VRAM" estimate --model bert-base --batch-size 8 --seq-len 512 --json
none=$(json 'd["bytes"]["allocated_peak"]')
expect 0 "$VRAM" estimate --model bert-base --batch-size 8 --seq-len 512 --zero-grad zeros --json
eq "$(json "d['bytes']['allocated_peak'] > $none")" True "--zero-grad zeros keeps gradients"
expect 2 "$VRAM" estimate --model gpt2 --zero-grad sometimes
has "zero-grad" "$tmp/err"

echo "$pass passed, $failn failed"
[ "$failn" -eq 0 ]
