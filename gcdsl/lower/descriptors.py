"""Runtime-indexed descriptor lists: checked on the host, packed, picked in the kernel.

Whether a `List[cute.CopyAtom]` is indexed at runtime is known only while the kernel
is traced. A Python `int` index (a literal, a `range_constexpr` variable, a
`Constexpr` parameter) picks the entry itself, exactly as under `@cute.kernel`, and
a list indexed only that way stays the DSL's own list of atoms. A runtime index
stops the trace (`NeedsLowering`) and the launch traces again with the list *packed*:
the kernel receives entry 0 as the compile-time *template* atom (copy op, dtype, box,
swizzle, partitioning) and all N descriptors, in order, as one by-value parameter,
`.param .align 128 .b8 [N * 128]`. A runtime index `k` then picks

    __gcdsl__.bind(loads[0], tma_desc_ptr=__gcdsl__.param_desc_ptr(loads, k))

the template, with its copies using the descriptor at `cvta.param(blob) + k * 128`.
That is sound only if the template describes every entry, which `descriptor_verdict`
decides on the host, from how each atom was built, when the kernel is called.
"""
from __future__ import annotations

from typing import Any, Optional

import cutlass
import cutlass.cute as cute
from cutlass.cute.nvgpu import cpasync
from cutlass.cute.typing import Integer, Pointer

from ..diagnostics import Diag, GcdslError, check_constant_index, describe_value
from . import _dsl
from .carried import Carried
from .launch_context import NeedsLowering, current_launch


class DslDescriptorList(list):
    """A descriptor-list parameter inside the kernel: the DSL's own list of atoms, named.
    Carried through dynamic loops as the DSL carries a list."""

    def __init__(self, atoms: Any, param: str) -> None:
        super().__init__(atoms)
        self.param = param

    def __getitem__(self, index: Any) -> Any:
        if not self:
            raise GcdslError(Diag.EMPTY_LIST, f"`{self.param}` is empty: there is no descriptor to pick",
                             param=self.param, hint="pass at least one TMA atom")
        return super().__getitem__(index)


_dsl.carry_like_a_list(DslDescriptorList)


class PackedDescriptorList(Carried):
    """A packed descriptor list, as the kernel takes it: the template atom (entry 0) as
    the DSL passes any atom, and every descriptor in one by-value blob."""

    parts = ("template", "blob")

    def __init__(self, template: cute.CopyAtom, blob: Any, count: int) -> None:
        self.template, self.blob, self.count = template, blob, count

    def __extract_mlir_attributes__(self) -> list:
        return _dsl.mlir_attributes(self.template) + [_dsl.grid_constant_attribute()]

    def __str__(self) -> str:
        # Appears in kernel names, with the template atom as the DSL names an atom argument.
        # (It also keeps the name past the length under which the host JIT expands the name's
        # copy into byte stores: ~10 ms of a first compile, `benchmarks/w4_compile.py`.)
        return f"PackedDescriptors_{self.count}_{self.template}"

    __repr__ = __str__


def pack_descriptor_list(atoms: Any) -> PackedDescriptorList:
    """On the host, for a list a runtime index reached (`descriptor_verdict` passed it)."""
    return PackedDescriptorList(atoms[0], _dsl.pack_tma_descriptors(list(atoms)), len(atoms))


class DescriptorListView(Carried):
    """A packed descriptor list inside the kernel: the template and the blob's address.

    Every entry, 0 included, is the template bound to its descriptor in the blob, so
    that any two picks have the same structure (a loop may carry one into the other).
    The blob's address is taken in the kernel's prologue, in the kernel's own body.
    """

    parts = ("template", "base")  # carried through dynamic loops like any DSL structure

    def __init__(self, template: cute.CopyAtom, base: Pointer, count: int, param: str) -> None:
        self.template, self.base, self.count, self.param = template, base, count, param

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self.count))]
        index = check_constant_index(index, self.count, "atoms")
        return _dsl.BoundCopyAtom(self.template, self.desc_ptr(index))

    def __iter__(self):
        return iter([self[i] for i in range(self.count)])

    def desc_ptr(self, index: Any) -> Pointer:
        """`cvta.param(blob) + index * 128`: descriptor `index` in parameter space."""
        return _dsl.descriptor_at(self.base, index)


def descriptor_array(atoms: Any, param: str) -> Any:
    """Kernel prologue: the packed list's blob, or the DSL's own list, named."""
    if isinstance(atoms, PackedDescriptorList):
        address = _dsl.grid_constant_address(atoms.blob)
        base = cute.make_ptr(cutlass.Uint8, address, cute.AddressSpace.generic, assumed_align=_dsl.DESCRIPTOR_BYTES)
        return DescriptorListView(atoms.template, base, atoms.count, param)
    if not isinstance(atoms, (list, tuple)):
        raise _not_a_list(atoms, param)
    return DslDescriptorList(atoms, param)


def _not_a_list(value: Any, param: str) -> GcdslError:
    return GcdslError(
        Diag.NOT_A_LIST,
        f"`{param}` is annotated List[cute.CopyAtom] but received {describe_value(value)}",
        param=param,
        hint="pass a Python list of atoms (for TMA: element [0] of each pair that "
             "cpasync.make_tiled_tma_atom returns)",
    )


def descriptor_verdict(atoms: Any, *, param: str) -> Optional[GcdslError]:
    """On the host, when the kernel is called: the error a runtime pick from `atoms`
    must raise, or None if one template describes every entry.

    Entries are compared by how they were built (copy op, multicast, element type, box,
    shared-memory layout with its swizzle, TMA basis), not by their printed type, which
    leaves the swizzle out. The error is raised only if the kernel really indexes the
    list at runtime: a list picked from by constants only may hold anything.
    """
    if not isinstance(atoms, (list, tuple)):
        return _not_a_list(atoms, param)  # the kernel's prologue raises it too, at the parameter
    if not atoms:
        return GcdslError(Diag.EMPTY_LIST, f"`{param}` is empty: a runtime index needs at least one descriptor",
                          param=param, hint="pass at least one TMA atom")
    signatures = []
    for position, atom in enumerate(atoms):
        if not _dsl.is_tma_atom(atom):
            return GcdslError(
                Diag.NOT_A_TMA_ATOM,
                f"`{param}[{position}]` is {describe_value(atom)}, not a TMA copy atom",
                param=param,
                hint="a runtime-indexed list holds TMA atoms: take element [0] of the "
                     "`(atom, coords)` pair that cpasync.make_tiled_tma_atom returns",
            )
        signature = _dsl.tma_atom_signature(atom)
        if signature is None:
            return GcdslError(
                Diag.ATOM_TYPE_MISMATCH,
                f"`{param}[{position}]` was not made by cpasync.make_tiled_tma_atom in this host "
                "function, so gcdsl cannot check that the template describes its descriptor",
                param=param,
                hint="build every atom of a runtime-indexed list with make_tiled_tma_atom "
                     "in the @cute.jit function that launches the kernel",
            )
        signatures.append(signature)
    for position, signature in enumerate(signatures[1:], start=1):
        for prop, template_value in signatures[0].items():
            if signature.get(prop) != template_value:
                return GcdslError(
                    Diag.ATOM_TYPE_MISMATCH,
                    f"`{param}[{position}]` and `{param}[0]` differ in {prop}, so one template "
                    f"cannot serve both:\n"
                    f"    {param}[0]: {template_value}\n"
                    f"    {param}[{position}]: {signature.get(prop)}",
                    param=param,
                    hint="build every atom of a runtime-indexed list with the same copy op, "
                         "dtype, tile and shared-memory layout (swizzle included); atoms that "
                         "must differ belong in separate lists",
                )
    return None


class _Entry:
    """What `param_desc_ptr` gives for a trace-time `int` index: the entry itself."""

    def __init__(self, atom: Any) -> None:
        self.atom = atom


def param_desc_ptr(atoms: Any, index: Any) -> Any:
    """The descriptor of `atoms[index]` in parameter space: `cvta.param(blob) + index * 128`.

    A Python `int` index is a compile-time pick and stands for the entry itself.
    """
    if isinstance(index, int):
        return _Entry(atoms[check_constant_index(index, len(atoms), "atoms")])
    if not isinstance(index, Integer):
        raise GcdslError(Diag.BAD_INDEX_TYPE, f"a list of atoms is indexed with {describe_value(index)}",
                         param=getattr(atoms, "param", None),
                         hint="index with an integer (cutlass.Int32) value")
    if isinstance(atoms, DescriptorListView):
        current_launch().saw_runtime_index(atoms.param)
        desc_ptr = atoms.desc_ptr(index)
        # The DSL silently ignores a `tma_desc_ptr` that is not a Pointer: never hand it one.
        if not isinstance(desc_ptr, Pointer):
            raise TypeError(f"gcdsl internal error: descriptor pointer is {type(desc_ptr).__name__}")
        return desc_ptr
    if not isinstance(atoms, DslDescriptorList):
        raise TypeError(f"gcdsl internal error: runtime pick from {type(atoms).__name__}")
    verdict = current_launch().descriptor_verdict(atoms.param)
    if verdict is not None:
        raise verdict
    raise NeedsLowering(atoms.param)


def bind(template: cute.CopyAtom, *, tma_desc_ptr: Any) -> cute.CopyAtom:
    """`template`, with its copies using the descriptor at `tma_desc_ptr`."""
    if isinstance(tma_desc_ptr, _Entry):
        return tma_desc_ptr.atom
    return _dsl.BoundCopyAtom(template, tma_desc_ptr)


def in_bounds(index: Any, count: int, what: str) -> Any:
    """`index`, checked against `[0, count)`: at trace time for an `int`, else on the device,
    where a failure prints `what` and the index, then traps."""
    if isinstance(index, int):
        return check_constant_index(index, count, "entries")
    # One unsigned compare covers negative indices too.
    _dsl.trap_unless(
        cutlass.Uint32(index) < cutlass.Uint32(count),
        f"gcdsl: index %d out of range [0, {count}) for {what}\n",
        index,
    )
    return index


def prefetch_descriptor(atom: cute.CopyAtom) -> None:
    """`cpasync.prefetch_descriptor`, following the pointer of a runtime-picked atom."""
    if isinstance(atom, _dsl.BoundCopyAtom):
        _dsl.prefetch_descriptor(atom.desc_ptr)
    else:
        cpasync.prefetch_descriptor(atom)


def copy_tensormap(atom: cute.CopyAtom, tensormap_ptr: Any) -> None:
    """`cpasync.copy_tensormap`, refused for a runtime-picked atom (it would copy the template's)."""
    if isinstance(atom, _dsl.BoundCopyAtom):
        raise GcdslError(
            Diag.DESC_PTR_CONFLICT,
            "cpasync.copy_tensormap of an atom picked by a runtime index would copy the "
            "template's descriptor, not the picked one",
            hint="copy the 128 bytes at __gcdsl__.param_desc_ptr(list, index) yourself, or index "
                 "the list with a constant",
        )
    cpasync.copy_tensormap(atom, tensormap_ptr)
