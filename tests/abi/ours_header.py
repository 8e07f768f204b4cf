#!/usr/bin/env python3
"""Writes a copy of one of vram's driver headers (src/device/*_api.h) that can
sit in one translation unit beside NVIDIA's own header, for the ABI checks.

  ours_header.py all IN OUT        every NVIDIA-style name (CU*, cu_*, CUDA_*,
                                   nvml*, NVML_*) prefixed with ours_: our
                                   constants and layouts, beside NVIDIA's
  ours_header.py functions IN OUT  only the function-pointer typedefs, their
                                   own names prefixed with proto_: our
                                   prototypes written in NVIDIA's types, to
                                   compare with the real prototypes
"""
import re
import sys

NAME = re.compile(r"(?<![A-Za-z0-9_])((?:CU|cu_|CUDA_|nvml|NVML_)[A-Za-z0-9_]*)")
FN_TYPEDEF = re.compile(r"typedef[^;]*?\(\s*\*\s*([A-Za-z0-9_]+)\s*\)[^;]*;", re.S)
COMMENT = re.compile(r"/\*.*?\*/", re.S)


def main(argv):
    if len(argv) != 4 or argv[1] not in ("all", "functions"):
        sys.exit(__doc__)
    mode, src, out = argv[1:]
    text = COMMENT.sub(" ", open(src).read())
    guard = "VRAM_ABI_OURS_" + re.sub(r"\W", "_", out.rsplit("/", 1)[-1]).upper()
    if mode == "all":
        body = NAME.sub(r"ours_\1", text)
    else:
        body = "\n".join(FN_TYPEDEF.sub(lambda m: m.group(0).replace(
            "(*" + m.group(1), "(*proto_" + m.group(1)), m.group(0))
            for m in FN_TYPEDEF.finditer(text))
        if "(*proto_" not in body:
            sys.exit(f"{src}: no function-pointer typedef found")
    with open(out, "w") as f:
        f.write(f"/* Generated from {src} by {argv[0]}; do not edit. */\n")
        f.write(f"#ifndef {guard}\n#define {guard}\n{body}\n#endif\n")


if __name__ == "__main__":
    main(sys.argv)
