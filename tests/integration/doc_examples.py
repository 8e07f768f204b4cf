"""Runs the ```python blocks of a Markdown file as written, in order, in one
namespace (a document reads as one session: a later block may use what an
earlier one made), each compiled under its own FILE:LINE so a failure names
it. A block right after `<!-- not run: REASON -->` is skipped (the reason is
printed: say what it needs, e.g. a CUDA device). When the block is followed
by a plain ``` block (its output), the first line the block printed must
equal that block's first line.

usage: python3 doc_examples.py FILE.md   exit 0 every block ran or was skipped
with a reason; 1 a block failed, or the file has none"""
import contextlib
import io
import re
import sys
import traceback

FENCE = re.compile(r"^```(\w*)\s*$")
SKIP = re.compile(r"^<!-- not run: (.+) -->$")


def blocks(path):
    """(first line number, language, code, skip reason, next block's first line)."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    found, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        start, lang, body = i + 1, m.group(1), []
        i += 1
        while i < len(lines) and not FENCE.match(lines[i]):
            body.append(lines[i])
            i += 1
        if i == len(lines):
            sys.exit("%s:%d: unterminated code block" % (path, start))
        prev = start - 2
        while prev >= 0 and not lines[prev].strip():
            prev -= 1
        skip = SKIP.match(lines[prev].strip()) if prev >= 0 else None
        found.append([start, lang, "\n".join(body) + "\n", skip and skip.group(1), None])
        i += 1
    for a, b in zip(found, found[1:]):
        if a[1] == "python" and b[1] == "" and b[0] == a[0] + a[2].count("\n") + 2:
            b_first = b[2].split("\n", 1)[0]
            a[4] = b_first
    return [b for b in found if b[1] == "python"]


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    path = sys.argv[1]
    namespace = {"__name__": "__main__"}
    ran = skipped = 0
    for line, _, code, skip, expected_first in blocks(path):
        where = "%s:%d" % (path, line)
        if skip:
            print("skipped %s: %s" % (where, skip))
            skipped += 1
            continue
        print("--- %s" % where, flush=True)
        out = io.StringIO()
        try:
            with contextlib.redirect_stdout(out):
                exec(compile(code, where, "exec"), namespace)
        except BaseException:
            sys.stdout.write(out.getvalue())
            traceback.print_exc()
            sys.exit("FAIL: the example at %s raised" % where)
        sys.stdout.write(out.getvalue())
        if expected_first is not None:
            got = out.getvalue().split("\n", 1)[0]
            if got != expected_first:
                sys.exit("FAIL: the example at %s printed %r first; the document shows %r"
                         % (where, got, expected_first))
        ran += 1
    if not ran + skipped:
        sys.exit("FAIL: no ```python block in %s" % path)
    print("%s: %d Python examples ran, %d skipped (each says why)" % (path, ran, skipped))


if __name__ == "__main__":
    main()
