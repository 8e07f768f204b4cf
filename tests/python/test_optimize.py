"""vram.torch.optimize on real modules: checkpointing on a torchvision
ResNet-18 and on a small transformer lowers the activation bytes analyze()
measures and keeps outputs and gradients equal; steps that do not apply here
are refused with a reason; channels_last, int8 and pruning do what they
say."""
import copy
import sys

import pytest
import torch
import torchvision

from vram.torch.analyze import analyze
from vram.torch.optimize import kernels_run, optimize

optimize_module = sys.modules["vram.torch.optimize"]  # the name vram.torch.optimize is the function


def outputs_and_grads(model, x):
    model.train()
    torch.manual_seed(5)
    out = model(x)
    out.float().square().mean().backward()
    grads = [p.grad.clone() for p in model.parameters() if p.grad is not None]
    model.zero_grad(set_to_none=True)
    return out.detach(), grads


@pytest.mark.parametrize("kind", ["resnet18", "transformer"])
def test_checkpointing_saves_activations_and_keeps_results(kind):
    torch.manual_seed(0)
    if kind == "resnet18":
        model = torchvision.models.resnet18(num_classes=10)
        # at 2 images the peak is the gradients' (45 MB), not the activations'
        x = torch.randn(16, 3, 64, 64)
    else:
        layer = torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
        model = torch.nn.TransformerEncoder(layer, num_layers=4)
        x = torch.randn(2, 16, 32)
    before = analyze(model, x, optimizer="sgd")
    ref = outputs_and_grads(copy.deepcopy(model), x)
    keys = list(model.state_dict())
    model, report = optimize(model, checkpointing=True, channels_last=False, example_batch=x)
    # checkpointed in place: a state_dict saved now loads into the plain model
    assert list(model.state_dict()) == keys
    step = report.steps[0]
    assert step.name == "checkpointing" and step.applied, report
    after = analyze(model, x, optimizer="sgd")
    assert after.activation_bytes_at(2) < 0.8 * before.activation_bytes_at(2)
    assert step.saved_bytes > 0 and report.bytes_after < report.bytes_before
    out, grads = outputs_and_grads(model, x)
    assert torch.allclose(out, ref[0], atol=1e-5)
    assert len(grads) == len(ref[1])
    assert all(torch.allclose(g, r, atol=1e-5) for g, r in zip(grads, ref[1]))
    twin = copy.deepcopy(model)  # a copy checkpoints its own blocks, not the original's
    assert torch.allclose(outputs_and_grads(twin, x)[0], ref[0], atol=1e-5)
    assert all(q.grad is None for q in model.parameters())


def test_channels_last_on_a_convolutional_model():
    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=10).eval()
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        ref = model(x)
    model, report = optimize(model, level="none", channels_last=True, copy_model=True)
    step = report.steps[0]
    assert step.name == "channels_last" and step.applied, report
    conv = model.conv1.weight
    assert conv.is_contiguous(memory_format=torch.channels_last) and not conv.is_contiguous()
    with torch.no_grad():
        assert torch.allclose(model(x), ref, atol=1e-5)


def test_refusals_name_the_reason(monkeypatch):
    mlp = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    model, report = optimize(mlp, level="basic", precision="fp16")
    by = {s.name: s for s in report.steps}
    assert not by["checkpointing"].applied and "no repeated blocks" in by["checkpointing"].reason
    assert not by["channels_last"].applied and "Conv2d" in by["channels_last"].reason
    # fp16 is cast where PyTorch has the CPU kernels (torch 2 has; 1.13 had not)
    assert kernels_run(torch.float16, "cpu")
    assert by["precision=fp16"].applied and "float16" in str(next(mlp.parameters()).dtype)
    monkeypatch.setattr(optimize_module, "kernels_run", lambda dtype, device_type: False)
    _, report = optimize(torch.nn.Linear(2, 2), level="none", precision="fp16")
    assert not report.steps[0].applied and torch.__version__ in report.steps[0].reason
    _, report = optimize(mlp, level="none", precision="int8")
    assert "inference" in report.steps[0].reason
    with pytest.raises(ValueError, match="level"):
        optimize(mlp, level="max")


def test_int8_mixed_and_prune():
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    x = torch.randn(8, 64)
    ref = mlp(x).detach()
    q, report = optimize(mlp, level="none", precision="int8", inference=True, copy_model=True)
    if report.steps[0].applied:
        assert torch.allclose(q(x), ref, atol=0.1)
    else:  # a PyTorch without a quantized engine: said, not faked
        assert "engine" in report.steps[0].reason or "quantize" in report.steps[0].reason
    m, report = optimize(mlp, level="none", precision="mixed", copy_model=True)
    assert report.steps[0].applied and "bfloat16" in report.steps[0].reason
    assert torch.allclose(m(x).float(), ref, atol=0.1)
    p, report = optimize(mlp, level="none", prune=0.5, copy_model=True)
    assert report.steps[0].applied
    w = p[0].weight
    assert (w == 0).float().mean() >= 0.49


def test_the_report_says_what_was_measured():
    """Each applied step shows the figures analyze() measured before and after
    it (the training step's peak at the example batch), signed in words, and
    "not measured" with the reason when there was nothing to measure; never a
    bare "saved -0.0 MiB" (issue 27)."""
    from vram.torch.optimize import _measure
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 4))
    x = torch.randn(32, 256)
    m, report = optimize(mlp, level="none", precision="mixed", example_batch=x, copy_model=True)
    step = report.steps[0]
    assert step.applied and step.bytes_before > 0 and step.bytes_after > 0, report
    assert step.saved_bytes == step.bytes_before - step.bytes_after
    assert (report.bytes_before, report.bytes_after) == (step.bytes_before, step.bytes_after)
    # the figure is the measurement of the model optimize() returned
    assert step.bytes_after == _measure(m, x, None, None, 32)
    assert step.bytes_before == _measure(mlp, x, None, None, 32)
    text = str(report)
    word = "saved" if step.saved_bytes > 0 else "grew" if step.saved_bytes < 0 else "no change"
    assert "%.1f MiB -> " % (step.bytes_before / 2**20) in text and word in text, text
    assert "-0.0" not in text and "training-step peak at batch 32" in text, text
    _, report = optimize(mlp, level="none", precision="mixed", copy_model=True)
    assert report.steps[0].saved_bytes is None
    assert "not measured (no example_batch)" in str(report), str(report)
    _, report = optimize(mlp, level="none", prune=0.5, inference=True, example_batch=x,
                         copy_model=True)
    assert "not measured (inference=True" in str(report), str(report)
