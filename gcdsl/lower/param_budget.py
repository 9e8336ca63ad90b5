"""The kernel parameter budget: 32,764 bytes (CUDA 12.1+, Volta and newer).

Grid-constant tables and descriptor lists make it easy to cross, and past it the
failure comes late and far from the cause (NVVM's "Formal parameter space
overflowed", or the launch). The check here runs when the kernel is called on the
host, before anything is compiled, and sizes every argument as the CUDA ABI lays it
out. It fails closed: an argument it cannot size is an error too, never a pass.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from cutlass.cutlass_dsl import extract_mlir_values

from ..abi import PARAM_LIMIT
from ..diagnostics import Diag, GcdslError, SourceLocation
from . import _dsl



def layout(arguments: Dict[str, Any]) -> Tuple[List[Tuple[str, int]], int]:
    """Bytes taken by each argument that takes any, and the end of the parameter buffer."""
    spans, end = argument_spans(arguments)
    rows, previous = [], 0
    for name, _, stop in spans:
        rows.append((name, stop - previous))  # alignment padding counts to the argument after it
        previous = stop
    return rows, end


def argument_spans(arguments: Dict[str, Any]) -> Tuple[List[Tuple[str, int, int]], int]:
    """(argument, first byte, end) of each argument that takes parameter space, as the
    CUDA ABI lays them out, and the end of the parameter buffer."""
    spans: List[Tuple[str, int, int]] = []
    offset = 0
    for name, value in arguments.items():
        try:
            values = extract_mlir_values(value)
        except Exception:  # Python-only (compile-time) arguments take no parameter space
            continue
        first = None
        for v in values:
            size_align = _dsl.param_layout(v.type)
            if size_align is None:
                raise GcdslError(
                    Diag.PARAM_BUDGET,
                    f"cannot size kernel argument `{name}` (a value of type {v.type}) in the "
                    "parameter buffer, so the 32,764-byte budget cannot be checked",
                    param=name,
                    hint="this is a gap in gcdsl: please report it with the argument's type",
                )
            size, align = size_align
            if size:
                offset = -(-offset // align) * align
                first = offset if first is None else first
                offset += size
        if first is not None:
            spans.append((name, first, offset))
    return spans, offset


def check(arguments: Dict[str, Any], *, kernel: str,
          location: Optional[SourceLocation]) -> List[Tuple[str, int, int]]:
    """Fail before compiling if the arguments need more than PARAM_LIMIT bytes; else each
    argument's span in the parameter buffer (`argument_spans`)."""
    spans, total = argument_spans(arguments)
    if total <= PARAM_LIMIT:
        return spans
    rows, _ = layout(arguments)
    listing = "\n".join(f"    {name:<24} {size:>7} B" for name, size in rows)
    raise GcdslError(
        Diag.PARAM_BUDGET,
        f"kernel `{kernel}` needs {total} bytes of parameters; CUDA allows {PARAM_LIMIT}:\n{listing}",
        location=location,
        hint="move large tables to global memory (an ordinary cute.Tensor), split a long "
        "descriptor list across launches, or drop parameters the kernel does not read",
    )
