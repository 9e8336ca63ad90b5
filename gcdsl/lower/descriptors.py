"""Runtime-indexed descriptor lists: validation on the host, selection in the kernel.

A `List[cute.CopyAtom]` indexed at runtime stays the DSL's own list of atoms, so
its N descriptors are N consecutive 128-byte grid-constant parameters. Entry 0
serves as the compile-time *template* (op, dtype, box, swizzle, basis,
partitioning) and entry `i` is reached as `cvta.param(entry 0) + i * 128`.
That is only sound if every entry has the template's compile-time type, which
`check_descriptor_list` enforces before anything is traced.
"""
from __future__ import annotations

from typing import Any, Optional, Sequence

import cutlass
import cutlass.cute as cute
from cutlass.cute.nvgpu import cpasync
from cutlass.cute.typing import Integer, Pointer

from ..diagnostics import Diag, GcdslError, SourceLocation, check_constant_index
from . import _dsl


def check_descriptor_list(atoms: Any, *, param: str, location: Optional[SourceLocation]) -> None:
    """Fail unless `atoms` is a non-empty list of TMA atoms sharing one compile-time type."""
    if not isinstance(atoms, (list, tuple)):
        raise GcdslError(
            Diag.NOT_A_LIST,
            f"`{param}` is annotated List[cute.CopyAtom] but received {type(atoms).__name__}",
            location=location,
            param=param,
            hint="pass a Python list of TMA atoms made by cpasync.make_tiled_tma_atom",
        )
    if not atoms:
        raise GcdslError(
            Diag.EMPTY_LIST,
            f"`{param}` is empty: a runtime index needs at least one descriptor",
            location=location,
            param=param,
            hint="pass at least one TMA atom",
        )
    for position, atom in enumerate(atoms):
        if not _dsl.is_tma_atom(atom):
            raise GcdslError(
                Diag.NOT_A_TMA_ATOM,
                f"`{param}[{position}]` is {_describe(atom)}, not a TMA copy atom",
                location=location,
                param=param,
                hint="runtime-indexed lists hold atoms from cpasync.make_tiled_tma_atom",
            )
    template = _dsl.atom_type(atoms[0])
    for position, atom in enumerate(atoms[1:], start=1):
        if _dsl.atom_type(atom) != template:
            raise GcdslError(
                Diag.ATOM_TYPE_MISMATCH,
                f"`{param}[{position}]` differs from `{param}[0]` in its compile-time type, "
                f"so one template cannot serve both:\n"
                f"    {param}[0]: {template}\n"
                f"    {param}[{position}]: {_dsl.atom_type(atom)}",
                location=location,
                param=param,
                hint="build every atom with the same copy op, dtype, tile, swizzle and "
                "layout; atoms that must differ belong in separate lists",
            )


def runtime_atom(atoms: Sequence[cute.CopyAtom], index: Any, origin: str,
                 check_bounds: Optional[str] = None) -> cute.CopyAtom:
    """`atoms[index]` inside a kernel, for an index that may be a runtime value.

    A Python `int` (a trace-time constant) gives back `atoms[index]` itself. A
    runtime index gives the template atom bound to the descriptor at
    `cvta.param(atoms[0]) + index * 128`.
    """
    if isinstance(index, int):
        return atoms[check_constant_index(index, len(atoms), "atoms", origin)]
    if not isinstance(index, Integer):
        raise GcdslError(
            Diag.BAD_INDEX_TYPE,
            f"a list of atoms is indexed with {_describe(index)} (at {origin})",
            hint="index with an integer (cutlass.Int32) value",
        )
    if check_bounds is not None:
        # One unsigned compare covers negative indices too; a failure prints and traps.
        _dsl.trap_unless(
            cutlass.Uint32(index) < cutlass.Uint32(len(atoms)),
            f"gcdsl: index %d out of range [0, {len(atoms)}) for {check_bounds} at {origin}\n",
            index,
        )
    template = atoms[0]
    desc_ptr = _dsl.descriptor_at(_dsl.descriptor_base(template), index)
    # The DSL silently ignores a `tma_desc_ptr` that is not a Pointer: never hand it one.
    if not isinstance(desc_ptr, Pointer):
        raise TypeError(f"gcdsl internal error: descriptor pointer is {type(desc_ptr).__name__}")
    return _dsl.BoundCopyAtom(template, desc_ptr, origin)


def prefetch_descriptor(atom: cute.CopyAtom) -> None:
    """`cpasync.prefetch_descriptor`, following the pointer of a runtime-picked atom."""
    if isinstance(atom, _dsl.BoundCopyAtom):
        _dsl.prefetch_descriptor(atom.desc_ptr)
    else:
        cpasync.prefetch_descriptor(atom)


def _describe(value: Any) -> str:
    dtype = getattr(value, "dtype", None)
    return f"a {type(value).__name__}" + (f" ({dtype})" if dtype is not None else "")
