"""PTX normalised for comparison across decorators: only what may legitimately differ goes.

- comments (the generator banner, `// begin inline asm`, `// .globl`) and blank lines;
- debug info: `.file`, `.loc` and `.section .debug_*` blocks;
- the names of entries and functions, which the DSL derives from the Python function
  (its qualified name, the repr of a bound `self` with an address, argument types):
  each becomes `__entry<i>` / `__func<i>` in order of appearance, everywhere it is used
  (parameter names are `<entry>_param_<n>`).
Everything else, the `.version`/`.target` lines included, must match.
"""
from __future__ import annotations

import re
from typing import Dict, List

_DECL = re.compile(r"^\s*(?:\.visible\s+|\.weak\s+|\.extern\s+)*\.(entry|func)\s+(?:\([^)]*\)\s*)?([A-Za-z_$][\w$]*)", re.M)


def normalize(ptx: str) -> str:
    text = _drop_debug_sections(ptx)
    lines: List[str] = []
    for line in text.splitlines():
        line = re.sub(r"//.*$", "", line).rstrip()
        if not line.strip() or re.match(r"\s*\.(file|loc)\b", line):
            continue
        lines.append(line)
    text = "\n".join(lines) + "\n"
    return _rename_symbols(text)


def symbol_names(ptx: str) -> List[str]:
    """The entries' and functions' names, in order of declaration."""
    return [name for _, name in _DECL.findall(ptx)]


def _drop_debug_sections(text: str) -> str:
    return re.sub(r"^\s*\.section\s+\.debug_\w+\s*\{.*?^\s*\}\s*$", "", text, flags=re.M | re.S)


def _rename_symbols(text: str) -> str:
    names: Dict[str, str] = {}
    counts = {"entry": 0, "func": 0}
    for kind, name in _DECL.findall(text):
        if name not in names:
            names[name] = f"__{kind}{counts[kind]}"
            counts[kind] += 1
    # Longest first: a name may be a prefix of another (or of its own parameters' names).
    for name in sorted(names, key=len, reverse=True):
        text = re.sub(rf"(?<![\w$]){re.escape(name)}", names[name], text)
    return text


def first_difference(a: str, b: str, context: int = 2) -> str:
    """The first differing line of two normalised texts, with a little context, for reports."""
    la, lb = a.splitlines(), b.splitlines()
    for i, (x, y) in enumerate(zip(la, lb)):
        if x != y:
            lo = max(0, i - context)
            return "\n".join([f"line {i + 1}:"] + [f"  cute : {s}" for s in la[lo:i + 1]] + [f"  gcdsl: {y}"])
    if len(la) != len(lb):
        return f"cute has {len(la)} lines, gcdsl {len(lb)}"
    return ""
