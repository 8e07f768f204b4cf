"""Family coverage against the real transformers code (issue 22, section 4).

For every family vram reads: build the Hugging Face model from a small
config of that family (from_config, random weights, nothing downloaded),
count its parameters, and measure one training step's saved tensors on the
CPU in fp32 with eager and SDPA attention (unique storages that autograd
keeps, parameters excluded, inputs included); compare with
`vram estimate --hf-config`. Then build every published config.json in
tests/data/hf/ on the meta device and compare the parameter counts.

    python bench/estimate/families.py [--vram build/vram] [--check]

SDPA runs the kernel a GPU would pick for the call and keeps what that
kernel keeps (gpu_sdpa.py), not what the CPU's own SDPA kernels keep.

Then LoRA: vram's trainable parameters against PEFT's get_peft_model for
a few families, MoE ones included.

--check (make test, tests/integration/test_families.sh) fails on any
parameter count that is not exact (LoRA's included), and on any activation
error above 1 %,
eager or SDPA (a family without an SDPA implementation shows "-").
"""
import argparse
import copy
import glob
import json
import os
import subprocess
import sys
import tempfile
import warnings

import torch

warnings.filterwarnings("ignore")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
import transformers  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


# measure.py (the catalog bench's measurement) makes nn.Dropout keep a
# 1-byte mask as CUDA's native_dropout does, and names storages.
sys.path.insert(0, HERE)
from measure import storage_key as storage  # noqa: E402
# gpu_sdpa.py: SDPA runs the kernel a GPU would pick, keeping what it keeps.
from gpu_sdpa import use_gpu_sdpa  # noqa: E402

# Small configs, one per family: model_type, architecture, keys. wav2vec2
# trains with LayerDrop (a random layer skipped per step): off here, so the
# step measured is the peak vram estimates, every layer kept.
DEC = dict(vocab_size=256, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
           intermediate_size=96)
SMALL = [
    ("bert", "BertForMaskedLM", dict(DEC, max_position_embeddings=64)),
    ("roberta", "RobertaForMaskedLM", dict(DEC, max_position_embeddings=66)),
    ("gpt2", "GPT2LMHeadModel", dict(vocab_size=256, n_embd=64, n_layer=2, n_head=4,
                                     n_positions=64)),
    ("gpt_neox", "GPTNeoXForCausalLM", dict(DEC, max_position_embeddings=64)),
    ("llama", "LlamaForCausalLM", dict(DEC, num_key_value_heads=2)),
    ("mistral", "MistralForCausalLM", dict(DEC, num_key_value_heads=2, sliding_window=None)),
    ("qwen2", "Qwen2ForCausalLM", dict(DEC, num_key_value_heads=2)),
    ("qwen3", "Qwen3ForCausalLM", dict(DEC, num_key_value_heads=2, head_dim=16)),
    ("qwen3_moe", "Qwen3MoeForCausalLM", dict(DEC, num_key_value_heads=2, head_dim=16,
                                              num_experts=4, num_experts_per_tok=2,
                                              moe_intermediate_size=32)),
    ("qwen2_moe", "Qwen2MoeForCausalLM", dict(DEC, num_key_value_heads=2, num_experts=4,
                                              num_experts_per_tok=2, moe_intermediate_size=32,
                                              shared_expert_intermediate_size=48)),
    ("mixtral", "MixtralForCausalLM", dict(DEC, num_key_value_heads=2, num_local_experts=4,
                                           num_experts_per_tok=2)),
    ("phi", "PhiForCausalLM", dict(DEC, max_position_embeddings=64)),
    ("phi3", "Phi3ForCausalLM", dict(DEC, pad_token_id=0)),
    ("gemma", "GemmaForCausalLM", dict(DEC, head_dim=16, num_key_value_heads=2)),
    ("gemma2", "Gemma2ForCausalLM", dict(DEC, head_dim=16)),
    ("gemma3_text", "Gemma3ForCausalLM", dict(DEC, head_dim=16)),
    ("gemma3", "Gemma3ForConditionalGeneration",
     dict(text_config=dict(vocab_size=256, hidden_size=64, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                           intermediate_size=96),
          vision_config=dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                             intermediate_size=48, image_size=32, patch_size=8),
          mm_tokens_per_image=4)),
    ("olmo", "OlmoForCausalLM", dict(DEC, pad_token_id=0, eos_token_id=1)),
    ("olmo2", "Olmo2ForCausalLM", dict(DEC, pad_token_id=0, eos_token_id=1)),
    ("falcon", "FalconForCausalLM", dict(vocab_size=256, hidden_size=64, num_hidden_layers=2,
                                         num_attention_heads=4)),
    ("falcon", "FalconForCausalLM", dict(vocab_size=256, hidden_size=64, num_hidden_layers=2,
                                         num_attention_heads=4, new_decoder_architecture=True,
                                         num_kv_heads=2)),
    ("bloom", "BloomForCausalLM", dict(vocab_size=256, hidden_size=64, n_layer=2, n_head=4)),
    ("opt", "OPTForCausalLM", dict(vocab_size=256, hidden_size=64, num_hidden_layers=2,
                                   num_attention_heads=4, ffn_dim=96, max_position_embeddings=64,
                                   word_embed_proj_dim=64)),
    ("gpt_bigcode", "GPTBigCodeForCausalLM", dict(vocab_size=256, n_embd=64, n_layer=2, n_head=4,
                                                  n_positions=64)),
    ("deepseek_v2", "DeepseekV2ForCausalLM", dict(DEC, num_hidden_layers=3, num_key_value_heads=4,
                                                  moe_intermediate_size=32,
                                                  n_routed_experts=4, num_experts_per_tok=2,
                                                  n_shared_experts=2, first_k_dense_replace=1,
                                                  q_lora_rank=None, kv_lora_rank=16,
                                                  qk_rope_head_dim=8, qk_nope_head_dim=8,
                                                  v_head_dim=8)),
    ("deepseek_v3", "DeepseekV3ForCausalLM", dict(DEC, num_hidden_layers=3, num_key_value_heads=4,
                                                  moe_intermediate_size=32,
                                                  n_routed_experts=4, num_experts_per_tok=2,
                                                  n_shared_experts=1, first_k_dense_replace=1,
                                                  n_group=1, topk_group=1,
                                                  q_lora_rank=24, kv_lora_rank=16,
                                                  qk_rope_head_dim=8, qk_nope_head_dim=8,
                                                  v_head_dim=8)),
    ("t5", "T5ForConditionalGeneration", dict(vocab_size=256, d_model=64, num_layers=2,
                                              num_heads=4, d_kv=16, d_ff=96,
                                              decoder_start_token_id=0)),
    ("mt5", "MT5ForConditionalGeneration", dict(vocab_size=256, d_model=64, num_layers=2,
                                                num_heads=4, d_kv=16, d_ff=96)),
    ("umt5", "UMT5ForConditionalGeneration", dict(vocab_size=256, d_model=64, num_layers=2,
                                                  num_heads=4, d_kv=16, d_ff=96)),
    ("bart", "BartForConditionalGeneration", dict(vocab_size=256, d_model=64, encoder_layers=2,
                                                  decoder_layers=2, encoder_attention_heads=4,
                                                  decoder_attention_heads=4, encoder_ffn_dim=96,
                                                  decoder_ffn_dim=96, max_position_embeddings=64)),
    ("mbart", "MBartForConditionalGeneration", dict(vocab_size=256, d_model=64, encoder_layers=2,
                                                    decoder_layers=2, encoder_attention_heads=4,
                                                    decoder_attention_heads=4, encoder_ffn_dim=96,
                                                    decoder_ffn_dim=96,
                                                    max_position_embeddings=64)),
    ("distilbert", "DistilBertForMaskedLM", dict(vocab_size=256, dim=64, n_layers=2, n_heads=4,
                                                 hidden_dim=96, max_position_embeddings=64)),
    ("deberta-v2", "DebertaV2ForMaskedLM", dict(DEC, max_position_embeddings=64,
                                                relative_attention=True, position_buckets=16,
                                                pos_att_type=["p2c", "c2p"],
                                                norm_rel_ebd="layer_norm",
                                                position_biased_input=False)),
    ("vit", "ViTModel", dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                             intermediate_size=96, image_size=32, patch_size=8)),
    ("clip", "CLIPModel", dict(text_config=dict(hidden_size=32, num_hidden_layers=2,
                                                num_attention_heads=4, intermediate_size=48,
                                                vocab_size=256, max_position_embeddings=16),
                               vision_config=dict(hidden_size=32, num_hidden_layers=2,
                                                  num_attention_heads=4, intermediate_size=48,
                                                  image_size=32, patch_size=8),
                               projection_dim=24)),
    ("clip_vision_model", "CLIPVisionModel", dict(hidden_size=32, num_hidden_layers=2,
                                                  num_attention_heads=4, intermediate_size=48,
                                                  image_size=32, patch_size=8)),
    ("mamba", "MambaForCausalLM", dict(vocab_size=256, hidden_size=64, num_hidden_layers=2,
                                       state_size=8, expand=2, conv_kernel=4)),
    ("whisper", "WhisperForConditionalGeneration", dict(vocab_size=256, d_model=64,
                                                        encoder_layers=2, decoder_layers=2,
                                                        encoder_attention_heads=4,
                                                        decoder_attention_heads=4,
                                                        encoder_ffn_dim=96, decoder_ffn_dim=96,
                                                        num_mel_bins=16, max_source_positions=32,
                                                        max_target_positions=64,
                                                        pad_token_id=0, bos_token_id=1,
                                                        eos_token_id=2,
                                                        decoder_start_token_id=1)),
    ("wav2vec2", "Wav2Vec2ForCTC", dict(vocab_size=32, hidden_size=64, num_hidden_layers=2,
                                        num_attention_heads=4, intermediate_size=96,
                                        conv_dim=[32, 32], conv_kernel=[10, 3],
                                        conv_stride=[5, 2], num_conv_pos_embeddings=16,
                                        num_conv_pos_embedding_groups=4, layerdrop=0.0)),
    ("wav2vec2", "Wav2Vec2ForPreTraining", dict(vocab_size=32, hidden_size=64,
                                                num_hidden_layers=2, num_attention_heads=4,
                                                intermediate_size=96, conv_dim=[32, 32],
                                                conv_kernel=[10, 3], conv_stride=[5, 2],
                                                num_conv_pos_embeddings=16,
                                                num_conv_pos_embedding_groups=4,
                                                codevector_dim=32, proj_codevector_dim=16,
                                                num_codevectors_per_group=8,
                                                layerdrop=0.0)),
]

BATCH, SEQ, IMAGE = 2, 32, 32


def vram_estimate(vram, config, extra=()):
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(config, f)
        path = f.name
    try:
        r = subprocess.run([vram, "estimate", "--hf-config", path, "--json", *extra],
                           capture_output=True, text=True)
    finally:
        os.unlink(path)
    if r.returncode:
        return None, r.stderr.strip()
    return json.loads(r.stdout), None


def hf_config(model_type, arch, keys):
    cfg = transformers.AutoConfig.for_model(model_type, **keys)
    cfg.architectures = [arch]
    return cfg


# Class names older checkpoints saved that transformers has since renamed.
RENAMED = {"T5WithLMHeadModel": "T5ForConditionalGeneration"}


def build(cfg, arch, attn, meta=False):
    cls = getattr(transformers, RENAMED.get(arch, arch))
    if meta:
        with torch.device("meta"):
            return cls(cfg)
    torch.manual_seed(0)
    try:
        return cls._from_config(cfg, attn_implementation=attn)
    except (ValueError, TypeError):
        return None  # the family has no such attention implementation


def inputs(model_type, model, arch):
    g = torch.Generator().manual_seed(0)
    cfg = model.config
    if model_type in ("vit", "clip_vision_model"):
        return dict(pixel_values=torch.randn(BATCH, 3, IMAGE, IMAGE, generator=g)), "sum"
    if model_type == "clip":
        v = cfg.text_config.vocab_size
        return dict(input_ids=torch.randint(0, v, (BATCH, 16), generator=g),
                    pixel_values=torch.randn(BATCH, 3, IMAGE, IMAGE, generator=g),
                    return_loss=True), "loss"
    if model_type == "whisper":
        feats = torch.randn(BATCH, cfg.num_mel_bins, 2 * cfg.max_source_positions, generator=g)
        labels = torch.randint(0, cfg.vocab_size, (BATCH, SEQ), generator=g)
        return dict(input_features=feats, labels=labels), "loss"
    if model_type == "wav2vec2":
        audio = torch.randn(BATCH, 800, generator=g)
        if arch.endswith("ForPreTraining"):
            # the contrastive loss needs masked frames and sampled negatives
            from transformers.models.wav2vec2 import modeling_wav2vec2 as w2v
            frames = int(model._get_feat_extract_output_lengths(torch.tensor(800)))
            np_rng = __import__("numpy").random.default_rng(0)
            w2v.np.random.seed(0)
            mask = w2v._compute_mask_indices((BATCH, frames), mask_prob=0.5, mask_length=2)
            neg = w2v._sample_negative_indices((BATCH, frames), cfg.num_negatives, mask)
            del np_rng
            return dict(input_values=audio, mask_time_indices=torch.tensor(mask),
                        sampled_negative_indices=torch.tensor(neg)), "loss"
        labels = torch.randint(1, cfg.vocab_size, (BATCH, 8), generator=g)
        return dict(input_values=audio, labels=labels), "loss"
    ids = torch.randint(2, cfg.get_text_config().vocab_size, (BATCH, SEQ), generator=g)
    kw = dict(input_ids=ids, labels=ids.clone())
    if model_type in ("bert", "roberta"):
        kw["token_type_ids"] = torch.zeros_like(ids)  # what a tokenizer passes
    return kw, "loss"


def saved_bytes(model, step):
    """Bytes of the tensors autograd saves while `step()` runs the forward
    (each storage once, parameters and buffers left out); SDPA runs what a
    GPU would run (gpu_sdpa.py). Inputs kept by the model (ids, pixels)
    count as activations."""
    params = {storage(p)[0] for p in list(model.parameters()) + list(model.buffers())}
    saved = {}

    def pack(t):
        ptr, n = storage(t)
        if ptr not in params and n:
            saved[ptr] = max(saved.get(ptr, 0), n)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), use_gpu_sdpa():
        step()
    return sum(saved.values())


def measure(model, model_type, arch):
    model.train()
    kw, how = inputs(model_type, model, arch)
    if kw is None:
        return None

    def step():
        out = model(**kw)
        return out.loss if how == "loss" else out.last_hidden_state.sum()
    return saved_bytes(model, step)


def vram_flags(model_type, attn):
    flags = ["--batch-size", str(BATCH), "--precision", "fp32", "--attention",
             "eager" if attn == "eager" else "fused"]
    if model_type in ("vit", "clip_vision_model", "clip"):
        flags += ["--image-size", str(IMAGE)]
    if model_type == "clip":
        flags += ["--seq-len", "16"]
    elif model_type == "wav2vec2":
        flags += ["--seq-len", "800"]
    elif model_type not in ("vit", "clip_vision_model"):
        flags += ["--seq-len", str(SEQ)]
    return flags


def small_rows(vram, with_acts=True):
    for model_type, arch, keys in SMALL:
        try:
            yield small_row(vram, with_acts, model_type, arch, keys)
        except Exception as exc:  # noqa: BLE001 - reported as a failure
            yield dict(family=model_type, arch=arch, accepted=False, hf_params=0,
                       vram_params=None, acts={}, error=f"{type(exc).__name__}: {exc}"[:200])


def small_row(vram, with_acts, model_type, arch, keys):
    if True:
        cfg = hf_config(model_type, arch, keys)
        d = cfg.to_dict()
        d["model_type"] = model_type
        d["architectures"] = [arch]
        est, err = vram_estimate(vram, d)
        meta = build(cfg, arch, None, meta=True)
        hf_params = sum(p.numel() for p in meta.parameters())
        row = dict(family=model_type, arch=arch, accepted=est is not None, error=err,
                   hf_params=hf_params, vram_params=est and est["parameters_count"],
                   acts={})
        if est is not None and with_acts:
            for attn in ("eager", "sdpa"):
                try:
                    model = build(cfg, arch, attn)
                except Exception as exc:  # noqa: BLE001 - the row reports it
                    row["acts"][attn] = (0, None, f"{type(exc).__name__}")
                    continue
                if model is None:
                    continue
                try:
                    got = measure(model, model_type, arch)
                except Exception as exc:  # noqa: BLE001 - the row reports it
                    row["acts"][attn] = (0, None, f"{type(exc).__name__}: {exc}"[:80])
                    continue
                if got is None:
                    continue
                e, err = vram_estimate(vram, d, vram_flags(model_type, attn))
                if e is None:
                    row["acts"][attn] = (got, None, err)
                else:
                    row["acts"][attn] = (got, e["bytes"]["activations"], None)
        return row


def published_rows(vram):
    rows = []
    for path in sorted(glob.glob(os.path.join(ROOT, "tests", "data", "hf", "*.json"))):
        try:
            with open(path) as f:
                d = json.load(f)
        except ValueError:
            continue  # the malformed-JSON fixture
        if os.path.basename(path) in REFUSED:
            continue
        if not isinstance(d, dict) or "architectures" not in d:
            continue
        est, err = vram_estimate(vram, d)
        arch = d["architectures"][0]
        try:
            cfg = transformers.AutoConfig.for_model(d["model_type"], **{
                k: v for k, v in d.items() if k not in ("model_type", "architectures")})
            meta = build(cfg, arch, None, meta=True)
            hf = sum(p.numel() for p in meta.parameters())
        except Exception as exc:  # noqa: BLE001 - reported, not hidden
            hf, err = None, f"transformers: {type(exc).__name__}: {exc}"[:160]
        rows.append(dict(file=os.path.basename(path), family=d["model_type"], arch=arch,
                         hf_params=hf, vram_params=est and est["parameters_count"],
                         error=err))
    return rows


# LoRA: vram's trainable-parameter count against PEFT's get_peft_model on
# the same small configs, rank 8: (family, vram's --lora-targets, PEFT's
# target_modules under the family's own names). MoE families included:
# transformers 5 stacks their experts, which PEFT reaches through
# target_parameters (gate and up fused at rank 2r), or not (Qwen2-MoE).
_QV = ["q_proj", "v_proj"]
_GUD = ["gate_proj", "up_proj", "down_proj"]
LORA_CASES = [
    ("llama", "q,v", _QV), ("llama", "all-linear", "all-linear"),
    ("gpt2", "q,v", ["c_attn"]), ("gpt2", "all-linear", "all-linear"),
    ("phi3", "q,v", ["qkv_proj"]), ("phi3", "all-linear", "all-linear"),
    ("t5", "q,v", ["q", "v"]), ("t5", "all-linear", "all-linear"),
    ("bart", "q,v", _QV), ("bart", "all-linear", "all-linear"),
    ("mixtral", "q,v", _QV), ("mixtral", "gate,up,down", ["w1", "w3", "w2"]),
    ("mixtral", "all-linear", "all-linear"),
    ("qwen2_moe", "gate,up,down", _GUD), ("qwen2_moe", "all-linear", "all-linear"),
    ("qwen3_moe", "gate,up,down", _GUD), ("qwen3_moe", "all-linear", "all-linear"),
    ("deepseek_v2", "gate,up,down", _GUD), ("deepseek_v2", "all-linear", "all-linear"),
]
LORA_RANK = 8


def lora_rows(vram):
    import peft
    configs = {}
    for model_type, arch, keys in SMALL:
        configs.setdefault(model_type, (arch, keys))
    for model_type, vram_targets, targets in LORA_CASES:
        arch, keys = configs[model_type]
        cfg = hf_config(model_type, arch, keys)
        d = cfg.to_dict()
        d["model_type"] = model_type
        d["architectures"] = [arch]
        wrapped = peft.get_peft_model(build(cfg, arch, None, meta=True),
                                      peft.LoraConfig(r=LORA_RANK, target_modules=targets))
        want = sum(p.numel() for p in wrapped.parameters() if p.requires_grad)
        est, err = vram_estimate(vram, d, ["--lora-rank", str(LORA_RANK), "--lora-targets",
                                           vram_targets])
        yield model_type, vram_targets, want, est and est["trainable_count"], err


# Fixtures that exist to be refused (tests/unit/test_plan_hfconfig.c).
REFUSED = {"unsupported.json", "missing-field.json"}


def pct(got, want):
    return 100.0 * (want - got) / got if got else float("nan")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vram", default=os.path.join(ROOT, "build", "vram"))
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--no-acts", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(1)
    failures = []
    sys.stdout.reconfigure(line_buffering=True)
    print(f"transformers {transformers.__version__}, torch {torch.__version__}; "
          f"small configs: batch {BATCH}, seq {SEQ}, fp32, one training step on the CPU\n")
    print(f"{'family':<18} {'architecture':<32} {'accepted':<8} {'params (HF)':>12} "
          f"{'exact':<5} {'acts eager':>10} {'acts sdpa':>10}")
    for r in small_rows(a.vram, not a.no_acts):
        exact = r["accepted"] and r["vram_params"] == r["hf_params"]
        cells = []
        for attn in ("eager", "sdpa"):
            got = r["acts"].get(attn)
            if not got:
                cells.append("-")
            elif got[1] is None:
                cells.append("failed" if got[0] == 0 else "refused")
            else:
                err = pct(got[0], got[1])
                cells.append(f"{err:+.1f}%")
                if a.check and abs(err) > 1.0:
                    failures.append(f"{r['family']} {attn}: activations {err:+.2f}% "
                                    f"(measured {got[0]}, vram {got[1]})")
        print(f"{r['family']:<18} {r['arch']:<32} {'yes' if r['accepted'] else 'NO':<8} "
              f"{r['hf_params']:>12} {'yes' if exact else 'NO':<5} {cells[0]:>10} {cells[1]:>10}"
              f"{'  ' + r['error'] if r['error'] and not exact else ''}")
        if not exact:
            failures.append(f"{r['family']} ({r['arch']}): vram {r['vram_params']}, "
                            f"transformers {r['hf_params']} {r['error'] or ''}")
    import peft
    print(f"\nLoRA r{LORA_RANK} trainable parameters: PEFT {peft.__version__} get_peft_model "
          f"against vram")
    print(f"{'family':<14} {'targets':<13} {'PEFT':>10} {'vram':>10} exact")
    for family, targets, want, got, err in lora_rows(a.vram):
        exact = got == want
        print(f"{family:<14} {targets:<13} {want:>10} {str(got):>10} {'yes' if exact else 'NO'}")
        if not exact:
            failures.append(f"LoRA {family} {targets}: vram {got}, PEFT {want} {err or ''}")
    print(f"\npublished configs (tests/data/hf/), parameters on the meta device")
    print(f"{'file':<34} {'family':<14} {'transformers':>14} {'vram':>14} exact")
    for r in published_rows(a.vram):
        exact = r["hf_params"] is not None and r["vram_params"] == r["hf_params"]
        print(f"{r['file']:<34} {r['family']:<14} {str(r['hf_params']):>14} "
              f"{str(r['vram_params']):>14} {'yes' if exact else 'NO'}"
              f"{'  ' + r['error'] if r['error'] and not exact else ''}")
        if not exact:
            failures.append(f"{r['file']}: vram {r['vram_params']}, transformers "
                            f"{r['hf_params']} {r['error'] or ''}")
    if failures:
        print("\nmismatches:\n  " + "\n  ".join(failures))
    if a.check and failures:
        sys.exit(1)


if __name__ == "__main__":
    main()
