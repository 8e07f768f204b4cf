#!/usr/bin/env python3
"""Published GPU memory measurements against `vram estimate`.

Reads ../shared/estimation/gpu-measurements.json at run time (or the file
named by $VRAM_GPU_MEASUREMENTS / --cases), turns each case's stated set-up
into `vram estimate` flags, and prints the measured figure, the comparable
estimate (allocated at peak, reserved, or what nvidia-smi shows, as the case
says it measured) and the error. The flags come from the case's own fields
and notes only; nothing here is tuned per case. Hub ids are looked up the
way users do: a local Hugging Face cache (a temporary one built from
tests/data/hf, since this machine has no network), through --hf-config ID.

bench/estimate/heldout-measurements.json (same schema) holds published
rows the shared file does not ship, as a held-out check.

Usage: bench/estimate/gpu_cases.py [--vram build/vram] [--cases FILE]... [--json]
(without --cases: the shared file and the held-out file, each with its own
median and worst error)
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# hub id -> config.json fixture (the published config.json files, in
# tests/data/hf); instruct/chat variants share their base model's config.
# The head a case loads the model with comes from its description
# (--head), never from the fixture. Ids without a fixture are looked up in
# the user's own Hugging Face cache.
CONFIGS = {
    "bert-large-uncased": "bert-large-uncased.json",
    "bert-base-uncased": "bert-base-uncased.json",
    "roberta-base": "roberta-base.json",
    "gpt2": "gpt2.json",
    "t5-small": "t5-small.json",
    "bigcode/octocoder": "octocoder.json",
    "meta-llama/Llama-3.2-3B": "llama-3.2-3b.json",
    "meta-llama/Llama-2-7b": "llama-2-7b.json",
    "mistralai/Mistral-7B-v0.1": "mistral-7b.json",
    "mistralai/Mixtral-8x7B-v0.1": "mixtral-8x7b.json",
    "google/gemma-2b": "gemma-2b.json",
    "google/gemma-7b": "gemma-7b.json",
    "google/gemma-2-2b": "gemma-2-2b.json",
    "google/gemma-2-9b": "gemma-2-9b.json",
    "microsoft/phi-2": "phi-2.json",
    "microsoft/Phi-3-mini-4k": "phi-3-mini.json",
    "Qwen/Qwen2-0.5B": "qwen2-0.5b.json",
    "Qwen/Qwen2-7B": "qwen2-7b.json",
    "Qwen/Qwen1.5-MoE-A2.7B": "qwen1.5-moe-a2.7b.json",
    "facebook/opt-125m": "opt-125m.json",
    "facebook/opt-350m": "opt-350m.json",
    "EleutherAI/pythia-160m": "pythia-160m.json",
    "openai/whisper-tiny": "whisper-tiny.json",
    "openai/whisper-large-v3": "whisper-large-v3.json",
    "facebook/wav2vec2-base-960h": "w2v-base-960h.json",
    "google/vit-base-patch16-224-in21k": "vit-base-patch16-224-in21k.json",
}
VARIANT = re.compile(r"-(instruct|chat|it|hf|v0\.1|v0\.2)$", re.I)


def base_id(hub_id):
    """The id without its organisation's legacy prefix and variant suffixes
    ("google-bert/bert-large-uncased", "Llama-2-7b-chat-hf" -> "Llama-2-7b")."""
    name = hub_id.lower()
    for legacy in ("google-bert/", "openai-community/", "google-t5/", "facebookai/"):
        name = name.replace(legacy, "")
    while VARIANT.search(name):
        name = VARIANT.sub("", name)
    return name


def fixture_for(hub_id):
    table = {base_id(k): v for k, v in CONFIGS.items()}
    return table.get(base_id(hub_id))


# torchvision models without a hub id -> catalog names
CATALOG = {"vit_l_16": "vit-l-16", "vit-l/16": "vit-l-16", "vit-b/16": "vit-b-16",
           "resnet50": "resnet50"}


# the head a case's description says the model was loaded with
HEADS = [
    (r"sequence[- ]?classification", "ForSequenceClassification"),
    (r"token[- ]?classification", "ForTokenClassification"),
    (r"question[- ]?answering", "ForQuestionAnswering"),
    (r"masked[- ]?lm\b|formaskedlm", "ForMaskedLM"),
    (r"image[- ]?classification", "ForImageClassification"),
]


def find_cases(explicit):
    for path in [explicit, os.environ.get("VRAM_GPU_MEASUREMENTS"),
                 os.path.join(ROOT, "..", "shared", "estimation", "gpu-measurements.json"),
                 os.path.join(ROOT, "..", "..", "shared", "estimation", "gpu-measurements.json")]:
        if path and os.path.exists(path):
            return path
    sys.exit("gpu-measurements.json not found: give --cases FILE or set VRAM_GPU_MEASUREMENTS")


def hub_cache(tmp, hub_ids):
    """A Hugging Face hub cache holding the fixtures of `hub_ids`, laid out
    as the hub does."""
    hub = os.path.join(tmp, "hub")
    for hub_id in hub_ids:
        fixture = fixture_for(hub_id)
        repo = os.path.join(hub, "models--" + hub_id.replace("/", "--"))
        snap = os.path.join(repo, "snapshots", "0" * 40)
        os.makedirs(snap)
        os.makedirs(os.path.join(repo, "refs"))
        with open(os.path.join(repo, "refs", "main"), "w") as f:
            f.write("0" * 40)
        shutil.copy(os.path.join(ROOT, "tests", "data", "hf", fixture),
                    os.path.join(snap, "config.json"))
    return hub


def text(case):
    return " ".join(str(case.get(k) or "") for k in
                    ("model", "mode", "precision", "optimizer", "attention", "peft", "notes",
                     "gpu_model", "measured_what")).lower()


def framework_flags(case, t):
    """--framework torchtune when the case ran torchtune's own modules: its
    source is torchtune's, or its text names one of torchtune's recipes or
    modules (docs/estimation.md, "torchtune's modules")."""
    src = str(case.get("source") or "").lower()
    if "torchtune" in src or re.search(r"torchtune|_finetune_single_device|_finetune_distributed", t):
        return ["--framework", "torchtune"]
    return []


NEGATION = r"(?:\bno|\bwithout|\bnon|\bnot)[- ](?:[\w.]+[- ]){0,2}"


def stated(t, key, term=None):
    """True when the case says it used a technique (regex `term`, default
    `key`), False when it says it did not: "no KEY", "non-KEY", "without
    KEY" win over any other mention, as notes also quote other runs'
    commands; None when it does not say."""
    if re.search(NEGATION + "(?:" + key + ")", t):
        return False
    return True if re.search(term or key, t) else None


def zeroes_grads(t):
    """zero_grad() kept zero-filled gradients before PyTorch 2.0
    (pytorch/pytorch#92731); transformers' Trainer passes set_to_none=True
    on every PyTorch since 4.28 (huggingface/transformers#22136, March 2023)."""
    pv = re.search(r"pytorch (\d+)\.(\d+)", t)
    if pv:
        return int(pv.group(1)) < 2
    tv = re.search(r"transformers ~?v?4\.(\d+)", t)
    if tv and "trainer" in t:
        return int(tv.group(1)) < 28
    return False


# PyTorch release -> the newest transformers release out when it shipped
# (PyPI release dates): what a run that names only its PyTorch used
TRANSFORMERS_AT_PYTORCH = {(2, 0): "4.27", (2, 1): "4.34", (2, 2): "4.37", (2, 3): "4.40",
                           (2, 4): "4.43", (2, 5): "4.45", (2, 6): "4.48", (2, 7): "4.51"}


def transformers_flags(t):
    """--transformers X.Y: the release the text names, else the one current
    when the PyTorch it names came out (modeling code changes between
    releases: OPT clamped its scores before 4.49, models ran eager attention
    before their SDPA support, docs/estimation.md)."""
    tv = re.search(r"transformers ~?v?(\d+)\.(\d+)", t)
    if tv:
        return ["--transformers", f"{tv.group(1)}.{tv.group(2)}"]
    pv = re.search(r"pytorch (\d+)\.(\d+)", t)
    if pv and (int(pv.group(1)), int(pv.group(2))) in TRANSFORMERS_AT_PYTORCH:
        return ["--transformers", TRANSFORMERS_AT_PYTORCH[(int(pv.group(1)), int(pv.group(2)))]]
    return []


def sharding_flags(case, t):
    """--zero/--gpus/--sharding from the case's `zero` field (a stage, or
    text such as "ZeRO-3", "FSDP FULL_SHARD", "SHARD_GRAD_OP") and its
    text: FSDP keeps every tensor in the dtype it was given (pure bf16 in
    torchtune), DeepSpeed adds fp32 master weights (docs/estimation.md)."""
    z = str(case.get("zero") or "").lower()
    fsdp = "fsdp" in z or "full_shard" in z or "shard_grad_op" in z or (
        not z and stated(t, r"fsdp", r"\bfsdp|fully_shard|fullyshardeddataparallel") is True)
    if not z and not fsdp:
        return []
    if "shard_grad_op" in z or "zero-2" in z or "stage 2" in z or z.strip() == "2":
        stage = "2"
    elif "zero-1" in z or "stage 1" in z or z.strip() == "1":
        stage = "1"
    elif fsdp or "full_shard" in z or "zero-3" in z or "stage 3" in z or z.strip() == "3":
        stage = "3"
    else:
        stage = (re.findall(r"\d", z) or ["3"])[0]
    return ["--zero", stage, "--gpus", str(case.get("gpus") or 1)] + (
        ["--sharding", "fsdp"] if fsdp else [])


def compute_dtype(t):
    """The 4-bit compute dtype the text states (bnb_4bit_compute_dtype=...,
    "compute dtype bf16"), or None."""
    cd = re.search(r"compute[_ ]dtype\W{0,3}(?:torch\.)?(bfloat16|bf16|float16|fp16|half|"
                   r"float32|fp32)", t)
    names = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float32": "fp32"}
    return names.get(cd.group(1), cd.group(1)) if cd else None


def flags_for(case):
    """The `vram estimate` flags that describe the case, from its fields."""
    t = text(case)
    f = []
    hub = case.get("hf_model_id")
    if hub:
        f += ["--hf-config", hub]
    else:
        name = next((v for k, v in CATALOG.items() if k in t.replace(" ", "_") or k in t), None)
        if not name:
            return None, "no model description"
        f += ["--model", name]
    head = next((h for pattern, h in HEADS if re.search(pattern, t)), None)
    if head:
        f += ["--head", head]
        labels = re.search(r"\((\d+) labels?\)|num_labels\s*=\s*(\d+)", t)
        if labels:
            f += ["--num-labels", labels.group(1) or labels.group(2)]
    mode = (case.get("mode") or "").lower()
    seq = case.get("seq_len")
    if "no forward" in mode or "weights loaded" in mode:
        f += ["--mode", "load"]
    elif mode.startswith("inference"):
        f += ["--mode", "infer"]
        nums = [int(x) for x in re.findall(r"\d+", str(seq or ""))]
        if "max_new_tokens" in str(seq) and len(nums) >= 2:
            f += ["--seq-len", str(nums[0]), "--max-new-tokens", str(nums[-1])]
        elif nums:
            f += ["--seq-len", str(nums[0])]
    else:
        f += ["--mode", "train"]
        if isinstance(seq, int):
            f += ["--seq-len", str(seq)]
    if case.get("batch_size"):
        f += ["--batch-size", str(case["batch_size"])]
    if case.get("image_size"):
        f += ["--image-size", str(re.findall(r"\d+", str(case["image_size"]))[0])]
    prec = (case.get("precision") or "").lower()
    if "load_in_4bit" in prec or "bitsandbytes" in prec:
        # transformers loads the rest of a bitsandbytes model in fp16 unless
        # told otherwise; 4-bit blocks of 64 with an fp32 absmax each, double
        # quantization only when asked (BitsAndBytesConfig defaults)
        f += ["--precision", "bf16" if "bf16" in prec or "bfloat16" in prec else "fp16",
              "--quantize-base", "int8" if "8bit" in prec or "8-bit" in prec else "nf4",
              "--double-quant", "on" if "double" in prec else "off"]
        if "8bit" not in prec and "8-bit" not in prec:
            # bnb_4bit_compute_dtype as stated, else BitsAndBytesConfig's fp32
            f += ["--compute-dtype", compute_dtype(t) or "fp32"]
    elif "amp" in prec or "mixed" in prec or "autocast" in prec:
        f += ["--precision", "amp-bf16" if "bf16" in prec else "amp-fp16"]
    elif "bf16" in prec:
        f += ["--precision", "bf16"]
    elif "fp16" in prec:
        f += ["--precision", "fp16"]
    elif "4-bit" in prec or "int4" in prec:
        f += ["--precision", "int4"]
    else:
        f += ["--precision", "fp32"]
    opt = (case.get("optimizer") or "none").lower()
    if "training" in mode:
        if opt.startswith("none"):
            f += ["--optimizer", "sgd"]
        elif ("8-bit" in opt or "8bit" in opt) and "non-8-bit" not in opt:
            f += ["--optimizer", "adam8bit"]
        elif "adafactor" in opt:
            f += ["--optimizer", "adafactor"]
        elif "adamw" in opt:
            f += ["--optimizer", "adamw"]
        elif "adam" in opt:
            f += ["--optimizer", "adam"]
        elif "sgd" in opt:
            f += ["--optimizer", "momentum" if "momentum" in opt else "sgd"]
        if "adamw_hf" in opt or "for-loop" in opt or "foreach=false" in opt:
            f += ["--optimizer-impl", "for-loop"]  # transformers' own AdamW: one tensor at a time
        elif "fused=true" in opt or "adamw_torch_fused" in opt or re.search(r"fused adam", opt):
            f += ["--optimizer-impl", "fused"]
        if case.get("checkpointing"):
            f += ["--checkpointing", "full"]
        if zeroes_grads(t):
            f += ["--zero-grad", "zeros"]
        ga = re.search(r"gradient_accumulation_steps=(\d+)", t)
        if ga:
            f += ["--accumulation-steps", ga.group(1)]
        if stated(t, r"offload") and case.get("checkpointing"):
            f += ["--activation-offload", "on"]
        if stated(t, r"chunked", r"chunked[- ](?:ce|cross[- ]entropy)|cewithchunkedoutputloss"):
            f += ["--loss", "chunked"]
        elif re.search(r"loss\s*=\s*(outputs\.)?logits\.sum\(\)", t):
            f += ["--loss", "sum"]
        if stated(t, r"compile", r"torch\.compile|\bcompile\b"):
            f += ["--compile", "on"]
    att = (case.get("attention") or "").lower()
    if "eager" in att:
        f += ["--attention", "eager"]
    elif "sdpa" in att or "flash" in att:
        f += ["--attention", "fused"]
    peft = (case.get("peft") or "").lower()
    if peft:
        r = re.search(r"(?:rank|\br|lora_r|lora_rank)[ =:]*(\d+)", peft)
        a = re.search(r"alpha[ =:]*(\d+)", peft)
        if r:
            f += ["--lora-rank", r.group(1)]
        if a:
            f += ["--lora-alpha", a.group(1)]
        targets = []
        for name, role in (("q_proj", "q"), ("k_proj", "k"), ("v_proj", "v"),
                           ("output_proj", "o"), ("o_proj", "o")):
            if name in peft and role not in targets:
                targets.append(role)
        if "apply_lora_to_mlp=true" in peft.replace(" ", ""):
            targets += ["gate", "up", "down"]
        if "all-linear" in peft:
            targets = ["all-linear"]
        if targets:
            f += ["--lora-targets", ",".join(targets)]
        if "qlora" in peft or "nf4" in peft:
            f += ["--quantize-base", "nf4"]
            if compute_dtype(t):
                f += ["--compute-dtype", compute_dtype(t)]
    f += sharding_flags(case, t)
    f += framework_flags(case, t) or transformers_flags(t)
    gpu = re.sub(r"\brtx ", "rtx", (case.get("gpu_model") or "").lower().replace("-", " "))
    for name in ("h200", "h100", "b200", "a100", "v100", "l40s", "l4", "a6000", "a40", "a10",
                 "t4", "rtx4090", "rtx3090"):
        if re.search(r"\b" + name + r"\b", gpu):
            f += ["--gpu-name", name.upper()]
            break
    # PyTorch before 1.13 (transformers before ~4.24, 2022) loads every kernel eagerly
    tv = re.search(r"transformers ~?v?4\.(\d+)", t)
    pv = re.search(r"pytorch (\d+)\.(\d+)", t)
    if pv:
        f += ["--lazy-loading", "on" if (int(pv.group(1)), int(pv.group(2))) >= (1, 13) else "off"]
    elif tv and int(tv.group(1)) < 24:
        f += ["--lazy-loading", "off"]
    else:
        year = re.search(r"transformers[^;)]*?\b(20\d\d)\b", t)
        if year and int(year.group(1)) <= 2022:
            f += ["--lazy-loading", "off"]
    return f, None


def measured_key(case):
    w = (case.get("measured_what") or "").lower()
    if "nvidia-smi" in w or "nvml" in w:
        return "nvidia_smi"
    if "reserved" in w:
        return "reserved"
    return "allocated_peak"  # max_memory_allocated, peak active, snapshot peak allocated


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vram", default=os.path.join(ROOT, "build", "vram"))
    ap.add_argument("--cases", action="append",
                    help="a case file (repeat for several; default: the shared file and "
                         "bench/estimate/heldout-measurements.json)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    files = args.cases or [find_cases(None), os.path.join(ROOT, "bench", "estimate",
                                                          "heldout-measurements.json")]
    results = {path: run_set(args, json.load(open(path))) for path in files}
    if args.json:
        print(json.dumps({path: {"rows": rows, "summary": summary}
                          for path, (rows, summary) in results.items()}, indent=1))
        return
    for path, (rows, summary) in results.items():
        print(f"== {path}")
        print_set(rows, summary)


def run_set(args, cases):
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        ids = {c["hf_model_id"] for c in cases if c.get("hf_model_id") and fixture_for(c["hf_model_id"])}
        fixtures = dict(os.environ, HF_HUB_CACHE=hub_cache(tmp, ids))
        for case in cases:
            env = fixtures if case.get("hf_model_id") in ids else os.environ
            flags, why = flags_for(case)
            row = {"id": case["id"], "measured_mib": case["measured_mib"],
                   "compare": measured_key(case)}
            if flags is None:
                row["error"] = why
                rows.append(row)
                continue
            row["flags"] = " ".join(flags)
            p = subprocess.run([args.vram, "estimate", *flags, "--json"], env=env,
                               capture_output=True, text=True)
            if p.returncode:
                row["error"] = p.stderr.strip()
            else:
                d = json.loads(p.stdout)
                est = d["bytes"][row["compare"]] / 2**20
                row["estimate_mib"] = round(est, 1)
                row["error_pct"] = round(100 * (est - case["measured_mib"]) / case["measured_mib"], 1)
            rows.append(row)
    errs = [abs(r["error_pct"]) for r in rows if "error_pct" in r]
    summary = {"cases": len(rows), "estimable": len(errs),
               "median_abs_error_pct": round(statistics.median(errs), 1) if errs else None,
               "worst_abs_error_pct": round(max(errs), 1) if errs else None}
    return rows, summary


def print_set(rows, summary):
    print(f"{'case':52} {'compare':>14} {'measured':>10} {'estimate':>10} {'error':>7}")
    for r in rows:
        if "error_pct" in r:
            print(f"{r['id']:52} {r['compare']:>14} {r['measured_mib']:>10.0f} "
                  f"{r['estimate_mib']:>10.0f} {r['error_pct']:>+6.1f}%")
        else:
            print(f"{r['id']:52} not estimable: {r['error']}")
    for r in rows:
        if "flags" in r:
            print(f"  {r['id']}: vram estimate {r['flags']}")
    print(f"median |error| {summary['median_abs_error_pct']} %, worst {summary['worst_abs_error_pct']} %, "
          f"{summary['estimable']}/{summary['cases']} estimable")


if __name__ == "__main__":
    main()
