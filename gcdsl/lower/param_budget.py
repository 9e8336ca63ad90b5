"""The kernel parameter budget: 32,764 bytes (CUDA 12.1+, Volta and newer).

Grid-constant tables and descriptor lists make it easy to cross, and past it the
failure comes late and far from the cause (ptxas or the launch). The check here
runs when the kernel is called on the host, before anything is compiled, and
sizes every argument as the CUDA ABI lays it out.
"""
from __future__ import annotations

import re
from typing import Any, Dict, List, Optional, Tuple

from cutlass.cutlass_dsl import extract_mlir_values

from ..diagnostics import Diag, GcdslError, SourceLocation

PARAM_LIMIT = 32764

_SCALAR_BYTES = {"i1": 1, "i8": 1, "i16": 2, "i32": 4, "i64": 8, "f16": 2, "bf16": 2, "f32": 4, "f64": 8}


def value_layout(mlir_type: Any) -> Optional[Tuple[int, int]]:
    """(bytes, alignment) of one kernel argument value, or None if not known."""
    text = str(mlir_type)
    if text in _SCALAR_BYTES:
        return _SCALAR_BYTES[text], _SCALAR_BYTES[text]
    if text.startswith("!cute_nvgpu.atom.") and "tma" in text:
        return 128, 64  # the atom travels as its CUtensorMap
    array = re.fullmatch(r"!llvm\.array<(\d+) x (?:vector<(\d+)xi32>|i(\d+))>", text)
    if array:
        count, lanes, bits = int(array.group(1)), array.group(2), array.group(3)
        element = int(lanes) * 4 if lanes else int(bits) // 8
        return count * element, element
    if text.startswith("!cute.memref<") or text.startswith("!cute.ptr<"):
        layout = re.search(r'"\(([^"]*)\):\(([^"]*)\)"', text)
        dynamic = 0 if layout is None else layout.group(1).count("?") * 4 + layout.group(2).count("?") * 8
        return 8 + -(-dynamic // 8) * 8, 8
    return None


def check(arguments: Dict[str, Any], *, kernel: str, location: Optional[SourceLocation]) -> None:
    """Fail before compiling if the arguments need more than PARAM_LIMIT bytes."""
    rows: List[Tuple[str, int]] = []
    offset = 0
    for name, value in arguments.items():
        try:
            values = extract_mlir_values(value)
        except Exception:  # Python-only (compile-time) arguments take no parameter space
            continue
        start = offset
        for v in values:
            layout = value_layout(v.type)
            if layout is None:
                return  # an argument we cannot size: leave the verdict to the toolchain
            size, align = layout
            offset = -(-offset // align) * align + size
        if offset > start:
            rows.append((name, offset - start))
    if offset <= PARAM_LIMIT:
        return
    listing = "\n".join(f"    {name:<24} {size:>7} B" for name, size in rows)
    raise GcdslError(
        Diag.PARAM_BUDGET,
        f"kernel `{kernel}` needs {offset} bytes of parameters; CUDA allows {PARAM_LIMIT}:\n{listing}",
        location=location,
        hint="move large tables to global memory (an ordinary cute.Tensor), split a long "
        "descriptor list across launches, or drop parameters the kernel does not read",
    )
