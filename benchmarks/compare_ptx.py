"""Compare two directories of PTX files, kernel names aside.

    python benchmarks/run.py --compile-check --ptx-dir /tmp/before    # on the old code
    python benchmarks/run.py --compile-check --ptx-dir /tmp/after     # on the new code
    python benchmarks/compare_ptx.py /tmp/before /tmp/after

A kernel's PTX name is derived from its Python name and its arguments' types, so a
refactor that renames or merges kernels changes every name (and the parameter names
built from it) without changing one instruction. Each `.entry` name is replaced by
`KERNEL<i>`, in order of appearance, before comparing. Exit status 1 if any file
differs or is missing on one side.
"""
from __future__ import annotations

import difflib
import os
import re
import sys
from typing import List

_ENTRY = re.compile(r"\.entry\s+(\w+)")


def normalize(ptx: str) -> str:
    """`ptx` with kernel names replaced by `KERNEL0`, `KERNEL1`, ... and no compiler banner."""
    names: List[str] = []
    for name in _ENTRY.findall(ptx):
        if name not in names:
            names.append(name)
    for i, name in sorted(enumerate(names), key=lambda item: -len(item[1])):  # longest first: no prefix clash
        ptx = re.sub(rf"\b{re.escape(name)}(?=\b|_param_)", f"KERNEL{i}", ptx)
    return "\n".join(line for line in ptx.splitlines() if not line.startswith("//"))


def compare(before: str, after: str) -> int:
    names = sorted(set(os.listdir(before)) | set(os.listdir(after)))
    differing = 0
    for name in names:
        paths = [os.path.join(d, name) for d in (before, after)]
        if not all(os.path.exists(p) for p in paths):
            print(f"MISSING    {name} (only in {before if os.path.exists(paths[0]) else after})")
            differing += 1
            continue
        texts = []
        for p in paths:
            with open(p) as f:
                texts.append(normalize(f.read()))
        if texts[0] == texts[1]:
            print(f"identical  {name}")
            continue
        differing += 1
        diff = list(difflib.unified_diff(texts[0].splitlines(), texts[1].splitlines(), "before", "after",
                                         lineterm="", n=2))
        print(f"DIFFERS    {name}: {sum(1 for d in diff if d[:1] in '+-') - 2} changed lines")
        print("\n".join(diff[:40]))
    print(f"{len(names) - differing} of {len(names)} identical after normalising kernel names")
    return 1 if differing else 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    sys.exit(compare(sys.argv[1], sys.argv[2]))
