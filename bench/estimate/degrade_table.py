#!/usr/bin/env python3
"""What vramd reserves for a degraded job: the batch table against the
per-sample figures of earlier releases (issue 22).

For each case, the full estimate at every batch b in 1..B (libvram through
the Python package) is the truth the table carries. Earlier releases sent
one per-sample figure s and vramd charged mem(B) - (B - b) * s at batch b:
  - "naive" s = estimate(B) - estimate(B - 1) (the first release);
  - "safe" s = the largest figure whose charge covers every batch (the
    second), which over-reserves wherever memory is not a straight line.
Printed: the worst under- and over-reservation of each, in MiB, and where.
The table's error is 0 at every batch it lists: it holds those estimates.

    VRAM_LIBRARY=build/libvram.so PYTHONPATH=python \\
        .venv/bin/python bench/estimate/degrade_table.py
"""
import vram

MiB = 1 << 20
CASES = [
    ("resnet50 fp32", "resnet50", 1024, {}),
    ("resnet50 fp32", "resnet50", 64, {}),
    ("gpt2 fp32 s1024", "gpt2", 16, {"seq_len": 1024}),
    ("bert-base amp-bf16 s512", "bert-base-uncased", 32,
     {"seq_len": 512, "precision": "amp-bf16"}),
    ("llama-2-7b lora bf16 s2048", "llama-2-7b", 8,
     {"seq_len": 2048, "precision": "bf16", "lora_rank": 16}),
]


def worst(diffs):
    """(largest value, its batch) of {batch: value}."""
    b = max(diffs, key=lambda k: diffs[k])
    return diffs[b], b


def main():
    print("| case | B | estimate at 1 / B (GiB) | naive s: worst under-reservation | "
          "safe s: worst over-reservation | safe s: over at batch 1 |")
    print("|---|---|---|---|---|---|")
    for label, model, top, settings in CASES:
        truth = {b: vram.estimate(model, batch_size=b, **settings).total
                 for b in range(1, top + 1)}
        full = truth[top]
        naive = full - truth[top - 1]
        safe = min((full - truth[b]) // (top - b) for b in range(1, top))

        def charge(s, b):
            cut = (top - b) * s
            return s if cut >= full else full - cut  # the old clamp
        under, ub = worst({b: truth[b] - charge(naive, b) for b in truth})
        over, ob = worst({b: charge(safe, b) - truth[b] for b in truth})
        under_text = "%.0f MiB at batch %d" % (under / MiB, ub) if under > 0 else "none"
        print("| %s | %d | %.2f / %.2f | %s | %.0f MiB at batch %d | %.0f MiB |"
              % (label, top, truth[1] / 2**30, full / 2**30, under_text, over / MiB, ob,
                 (charge(safe, 1) - truth[1]) / MiB))


if __name__ == "__main__":
    main()
