"""Every use of private CuTe DSL internals, in one place (nvidia-cutlass-dsl 4.8.x).

The public DSL has no way to name the parameter-space address of a TMA atom's
descriptor, nor an atom that carries a `tma_desc_ptr` of its own. Upgrading
the DSL means revisiting this file and its tests (tests/test_lowering_ptx.py),
nothing else.
"""
from __future__ import annotations

from typing import Any

import cutlass
import cutlass.cute as cute
from cutlass._mlir import ir
from cutlass._mlir.dialects import cute as _cute_ir
from cutlass._mlir.dialects import cute_nvgpu as _cute_nvgpu_ir
from cutlass._mlir.dialects import llvm, scf
from cutlass.cute import core as _cute_core
from cutlass.cute.typing import AddressSpace, Pointer
from cutlass.cutlass_dsl import extract_mlir_values, new_from_mlir_values

from ..diagnostics import Diag, GcdslError

# A CUtensorMap is 128 bytes; the TMA unit needs it 64-byte aligned. The DSL declares
# each TMA atom's descriptor as `.param .align 64 .b8 [128]`, so the descriptors of
# consecutive list entries sit at a 128-byte stride in parameter space.
DESCRIPTOR_BYTES = 128
DESCRIPTOR_ALIGN = 64


def _descriptor_pointer_type() -> Any:
    return _cute_ir.PtrType.get(
        _cute_nvgpu_ir.TmaDescriptorTiledType.get(), AddressSpace.generic, DESCRIPTOR_ALIGN
    )


def atom_type(atom: cute.CopyAtom) -> Any:
    """The compile-time type of an atom: op, dtype, box, swizzle, basis, multicast."""
    return atom.type


def is_tma_atom(atom: Any) -> bool:
    return isinstance(atom, cute.CopyAtom) and "tma" in str(atom.type)


def descriptor_base(atom: cute.CopyAtom) -> Pointer:
    """Generic address of `atom`'s descriptor in grid-constant parameter space.

    Inside a kernel a TMA atom argument *is* its descriptor parameter;
    `get_tma_desc_addr` lowers to `cvta.param` of it.
    """
    value = atom._trait.value
    if "non_exec" in str(value.type):
        value = _cute_nvgpu_ir.atom_make_exec_tma(value)
    return _cute_nvgpu_ir.get_tma_desc_addr(_descriptor_pointer_type(), value)


def descriptor_at(base: Pointer, index: Any) -> Pointer:
    """`base + index * 128` as a typed, 64-byte-aligned descriptor pointer."""
    offset = cutlass.Int64(index) * DESCRIPTOR_BYTES
    address = base.toint() + offset
    aligned = _cute_ir.assume(
        _cute_ir.ConstrainedIntType.get(DESCRIPTOR_ALIGN, 64), address.ir_value()
    )
    return _cute_ir.inttoptr(_descriptor_pointer_type(), aligned)


def prefetch_descriptor(desc_ptr: Pointer) -> None:
    _cute_nvgpu_ir.arch_prefetch_tma_desc(desc_ptr.value)


class BoundCopyAtom(cute.CopyAtom):
    """A TMA atom whose copies use the descriptor at `desc_ptr`, not the template's own.

    It *is* the template atom for everything compile-time (partitioning, layouts);
    only `_unpack`, where `cute.copy` turns an atom into an executable one, differs.
    """

    def __init__(self, template: cute.CopyAtom, desc_ptr: Pointer, origin: str = "") -> None:
        super().__init__(template.op, template._trait)
        self.desc_ptr = desc_ptr
        self.origin = origin

    def _unpack(self, *, loc=None, ip=None, **kwargs):
        _check_no_desc_ptr(kwargs, self.origin)
        return self._trait.unpack(loc=loc, ip=ip, tma_desc_ptr=self.desc_ptr, **kwargs)

    def with_(self, *, loc=None, ip=None, **kwargs):
        _check_no_desc_ptr(kwargs, self.origin)
        return cute.CopyAtom(self.op, self._trait.with_(loc=loc, ip=ip, tma_desc_ptr=self.desc_ptr, **kwargs))

    # The pointer travels with the atom's own values, so an atom rebound in a
    # dynamic branch or loop keeps the descriptor chosen on that path.
    def __extract_mlir_values__(self):
        return super().__extract_mlir_values__() + extract_mlir_values(self.desc_ptr)

    def __new_from_mlir_values__(self, values):
        template = cute.CopyAtom(self.op, self._trait)
        n = len(extract_mlir_values(template))
        template = template.__new_from_mlir_values__(values[:n])
        return BoundCopyAtom(template, new_from_mlir_values(self.desc_ptr, values[n:]), self.origin)


def _check_no_desc_ptr(kwargs: dict, origin: str) -> None:
    if kwargs.get("tma_desc_ptr") is not None:
        raise GcdslError(
            Diag.DESC_PTR_CONFLICT,
            f"an atom picked by a runtime index (at {origin}) already carries its "
            "descriptor pointer; `tma_desc_ptr=` would silently replace it",
            hint="drop `tma_desc_ptr=`, or index the list with a constant",
        )


# ---- grid-constant tables ------------------------------------------------------

def table_param_type(spec: Any) -> Any:
    """`!llvm.array<K x T>` whose element type T carries the table's alignment.

    NVPTX aligns a by-value parameter to its type, so T is i32 (4), i64 (8) or a
    vector of i32 as wide as the alignment (16..128): `.param .align A .b8 [bytes]`.
    """
    i32 = ir.IntegerType.get_signless(32)
    if spec.align == 4:
        element = i32
    elif spec.align == 8:
        element = ir.IntegerType.get_signless(64)
    else:
        element = ir.VectorType.get([spec.align // 4], i32)
    return llvm.ArrayType.get(element, spec.padded_bytes // spec.align)


def grid_constant_attribute() -> Any:
    """Marks a kernel argument `__grid_constant__`, so its address may be taken."""
    return ir.DictAttr.get({"cute_nvgpu.grid_constant": ir.UnitAttr.get()})


def grid_constant_address(value: Any) -> Any:
    """Generic address (Int64) of a grid-constant kernel argument (`cvta.param`).

    `get_grid_constant_pointer` types its result as a pointer to the argument's
    type; the DSL's pointer wrapper knows no `!llvm.array`, so the result is taken
    raw and turned into an integer before anything wraps it.
    """
    ptr_typeid = _cute_ir.PtrType.get_static_typeid()
    ir.register_value_caster(ptr_typeid, replace=True)(lambda raw: raw)
    try:
        raw = _cute_nvgpu_ir.get_grid_constant_pointer(value)
        address = _cute_ir.ptrtoint(ir.IntegerType.get_signless(64), raw)
    finally:
        ir.register_value_caster(ptr_typeid, replace=True)(_cute_core._Pointer)
    return cutlass.Int64(address)


def compiled_function_count() -> int:
    """Entries in the DSL's in-memory JIT cache: one per distinct compiled module.

    A direct call of a `@cute.jit` function re-runs its Python to produce IR and
    looks the result up by the IR's hash, so a new entry here means a compilation.
    """
    from cutlass.cutlass_dsl import CuTeDSL

    return len(CuTeDSL._get_dsl().jit_cache)


def trap_unless(condition: Any, message: str, *values: Any) -> None:
    """On the device: unless `condition`, print `message` (printf format) and trap.

    Built directly as `scf.if` + printf + `trap;` because the DSL's own assertion
    (`cf.assert`) is dropped unless the whole compile enables assertions.
    """
    failed = cutlass.Boolean(condition) == cutlass.Boolean(False)
    branch = scf.IfOp(failed.ir_value())
    with ir.InsertionPoint(branch.then_block):
        cute.printf(message, *values)
        llvm.inline_asm(None, [], "trap;", "", has_side_effects=True)
        scf.YieldOp([])
