"""vram.estimate() and vram.plan() take every setting of libvram's table
(issue 22): the same bytes as `vram estimate` for the same settings, and
memory at a batch from full estimates."""
import os
import re
import subprocess

import pytest

from conftest import BUILD, ROOT, cli

import vram

LLAMA = os.path.join(ROOT, "tests", "data", "hf", "llama-3.2-3b.json")


@pytest.mark.parametrize("kw,flags", [
    # QLoRA over FSDP (torchtune, Answer.AI's FSDP-QLoRA)
    (dict(lora_rank=64, quantize_base="nf4", zero=3, gpus=4, precision="bf16", sharding="fsdp",
          seq_len=2048, lora_targets="all-linear", checkpointing="full"),
     ["--lora-rank", "64", "--quantize-base", "nf4", "--zero", "3", "--gpus", "4",
      "--precision", "bf16", "--sharding", "fsdp", "--seq-len", "2048",
      "--lora-targets", "all-linear", "--checkpointing", "full"]),
    # LoRA under DeepSpeed ZeRO-2, JSON key spelling
    (dict(lora_rank=16, zero_stage=2, gpus=8, precision="bf16", seq_len=1024),
     ["--lora-rank", "16", "--zero", "2", "--gpus", "8", "--precision", "bf16",
      "--seq-len", "1024"]),
    # the real-GPU settings
    (dict(gpu_name="L40S", cuda="12.4", optimizer_impl="fused", loss="chunked", compile=True,
          activation_offload=True, checkpointing="full", double_quant=False,
          accumulation_steps=4, zero_grad="zeros", seq_len=512, head="ForSequenceClassification",
          num_labels=3),
     ["--gpu-name", "L40S", "--cuda", "12.4", "--optimizer-impl", "fused", "--loss", "chunked",
      "--compile", "on", "--activation-offload", "on", "--checkpointing", "full",
      "--double-quant", "off", "--accumulation-steps", "4", "--zero-grad", "zeros",
      "--seq-len", "512", "--head", "ForSequenceClassification", "--num-labels", "3"]),
])
def test_same_bytes_as_the_cli(kw, flags):
    e = vram.estimate(hf_config=LLAMA, **kw)
    ref = cli("estimate", "--hf-config", LLAMA, "--json", *flags)
    assert e.raw["bytes"] == ref["bytes"] and e.raw["at_peak"] == ref["at_peak"]
    assert sum(e.at_peak.values()) == e.total and e.at_peak == e.raw["at_peak"]


def test_every_flag_is_a_keyword():
    """Each flag `vram estimate --help` lists (but the model's) is accepted
    by vram.estimate() under its name: an unknown keyword is refused."""
    out = subprocess.run([os.path.join(BUILD, "vram"), "estimate", "--help"],
                         capture_output=True, text=True, check=True).stdout
    flags = set(re.findall(r"^  (--[a-z-]+)", out, re.M)) - {"--model", "--hf-config", "--profile"}
    assert len(flags) >= 29
    for flag in flags:
        with pytest.raises(vram.Error) as err:
            vram.estimate("gpt2", **{flag[2:].replace("-", "_"): "\x01"})
        assert "unknown key" not in str(err.value), flag
    with pytest.raises(vram.InvalidArgumentError, match="unknown key \"lora_rnak\""):
        vram.estimate("gpt2", lora_rnak=8)
    with pytest.raises(vram.InvalidArgumentError, match="same setting"):
        vram.estimate("gpt2", zero=1, zero_stage=1, gpus=2)


def test_bytes_at_is_the_full_estimate():
    """resnet50 at batch 1024: the optimizer step is the peak at batch 1
    and 2, so their difference says nothing about batch 1024."""
    p = vram.plan("resnet50", gpu_name="A100-80GB", batch_size=1024)
    full = vram.estimate("resnet50", batch_size=1024).total
    assert p.bytes_at(1024) == full == p.current_bytes == p.shown_bytes
    assert p.bytes_at(p.largest_fitting) <= p.budget_bytes < p.bytes_at(p.largest_fitting + 1)
    assert not hasattr(p, "per_sample_bytes")
