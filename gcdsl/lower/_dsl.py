"""Every use of private CuTe DSL internals, in one place (nvidia-cutlass-dsl 4.8.x).

The public DSL has no way to name the parameter-space address of a TMA atom's
descriptor, nor an atom that carries a `tma_desc_ptr` of its own, nor a TMA load
issued by each thread that runs it; gcdsl also reads the ops that built atoms,
printed MLIR types, the DSL's kernel-trace state and error objects, and registers
containers with its pytree machinery. All of it is here,
beside `SUPPORTED_DSL_VERSIONS`. The one exception is the `_struct_type` marker on
`GridConstantTensor` (a class attribute the TVM-FFI argument converter looks for).
Upgrading the DSL means revisiting this file; tests/test_dsl_assumptions.py pins
each assumption, and tests/test_lowering_ptx.py and tests/test_param_layout.py hold
the results against the PTX.
"""
from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import re
import sys
from typing import Any, Callable, Dict, Iterator, Optional, Tuple

import cutlass
import cutlass.cute as cute
from cutlass._mlir import ir
from cutlass._mlir.dialects import cute as _cute_ir
from cutlass._mlir.dialects import cute_nvgpu as _cute_nvgpu_ir
from cutlass._mlir.dialects import arith, cuda, llvm, nvvm, scf
from cutlass._mlir_helpers import op as _dsl_ops
from cutlass._mlir_helpers.op import loc_transform
from cutlass.cute import core as _cute_core
from cutlass.cute.typing import AddressSpace, Pointer
from cutlass.base_dsl.common import DSLBaseError
from cutlass.cutlass_dsl import extract_mlir_values, new_from_mlir_values

from ..abi import DESCRIPTOR_ALIGN, DESCRIPTOR_BYTES
from ..diagnostics import Diag, GcdslError, caller_location

# The DSL versions whose internals this module is written against (pyproject.toml
# requires the same range; tests/test_dsl_assumptions.py pins every assumption).
SUPPORTED_DSL_VERSIONS = ">=4.8.1,<4.9"


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


def tma_load_2d_by_this_thread(atom: cute.CopyAtom, dst: Pointer, mbarrier: Pointer, column: Any, row: Any) -> None:
    """A TMA load of `atom`'s box at (column, row) (innermost coordinate first) into
    shared memory at `dst`, its bytes counted on `mbarrier`: issued by every thread
    that runs it. `cute.copy` issues a TMA load from one elected lane of the warp, so
    32 boxes cost it 32 turns of the warp; here each lane issues its own."""
    llvm.inline_asm(
        None,
        [dst.toint().ir_value(), descriptor_base(atom).toint().ir_value(), cutlass.Int32(column).ir_value(),
         cutlass.Int32(row).ir_value(), mbarrier.toint().ir_value()],
        "cp.async.bulk.tensor.2d.shared::cta.global.tile.mbarrier::complete_tx::bytes [$0], [$1, {$2, $3}], [$4];",
        "r,l,r,r,r", has_side_effects=True)


class BoundCopyAtom(cute.CopyAtom):
    """A TMA atom whose copies use the descriptor at `desc_ptr`, not the template's own.

    It *is* the template atom for everything compile-time (partitioning, layouts);
    only `_unpack`, where `cute.copy` turns an atom into an executable one, differs.
    """

    def __init__(self, template: cute.CopyAtom, desc_ptr: Pointer) -> None:
        super().__init__(template.op, template._trait)
        self.desc_ptr = desc_ptr

    def _unpack(self, *, loc=None, ip=None, **kwargs):
        _check_no_desc_ptr(kwargs)
        return self._trait.unpack(loc=loc, ip=ip, tma_desc_ptr=self.desc_ptr, **kwargs)

    def with_(self, *, loc=None, ip=None, **kwargs):
        _check_no_desc_ptr(kwargs)
        return cute.CopyAtom(self.op, self._trait.with_(loc=loc, ip=ip, tma_desc_ptr=self.desc_ptr, **kwargs))

    # The pointer travels with the atom's own values, so an atom rebound in a
    # dynamic branch or loop keeps the descriptor chosen on that path.
    def __extract_mlir_values__(self):
        return super().__extract_mlir_values__() + extract_mlir_values(self.desc_ptr)

    def __new_from_mlir_values__(self, values):
        template = cute.CopyAtom(self.op, self._trait)
        n = len(extract_mlir_values(template))
        template = template.__new_from_mlir_values__(values[:n])
        return BoundCopyAtom(template, new_from_mlir_values(self.desc_ptr, values[n:]))


def _check_no_desc_ptr(kwargs: dict) -> None:
    """Refuse a second descriptor pointer; drop an explicit `tma_desc_ptr=None` (no pointer)."""
    if kwargs.pop("tma_desc_ptr", None) is not None:
        raise GcdslError(
            Diag.DESC_PTR_CONFLICT,
            "an atom picked by a runtime index already carries its descriptor pointer; "
            "`tma_desc_ptr=` would silently replace it",
            hint="drop `tma_desc_ptr=`, or index the list with a constant",
        )


def tma_atom_signature(atom: cute.CopyAtom) -> Optional[Dict[str, str]]:
    """On the host: what a TMA atom's descriptor is made of, property by property, or
    None if the atom was not built by a `make_*tma*` op in the traced host function.

    The printed atom type leaves out the shared-memory layout (and so the swizzle);
    the op that built the atom has it as an operand. Everything that op was given
    except the global tensor's address, extents and strides must match for one
    template to describe two descriptors.
    """
    op = getattr(atom._trait.value, "owner", None)
    name = getattr(op, "name", None)
    if not isinstance(name, str) or "tma" not in name:
        return None
    types = [operand.type for operand in op.operands]  # one pass: each access walks the bindings
    gmem = str(types[0])
    signature = {
        "copy op": name,
        "element type": _memref_element(gmem),
        "rank": str(_memref_rank(gmem)),
    }
    for position, operand_type in enumerate(types[1:], start=1):
        what = {1: "shared-memory layout (swizzle included)", 2: "CTA tile (TMA basis)"}.get(position, f"operand {position}")
        signature[what] = str(operand_type)
    signature["op attributes"] = ", ".join(sorted(f"{name} = {op.attributes[name]}" for name in op.attributes))
    signature["atom type"] = str(atom._trait.value.type)
    return signature


def swizzle_of_layout(layout_type: str) -> str:
    """The TMA swizzle ("none", "32B", "64B", "128B") of a printed shared-memory layout
    type: `S<B,M,S> o ...` swizzles 2^B units of 2^M bytes."""
    found = re.search(r"S<(\d+),(\d+),(\d+)>", layout_type)
    if not found or int(found.group(1)) == 0:
        return "none"
    return f"{(1 << int(found.group(1))) * (1 << int(found.group(2)))}B"


def _memref_element(text: str) -> str:
    match = re.match(r"!cute\.memref<([^,]+),", text)
    return match.group(1) if match else text


def _memref_rank(text: str) -> int:
    match = re.search(r'"\(([^)"]*)\):', text)
    return match.group(1).count(",") + 1 if match else -1


def attach_table_spec(tensor: Any, spec: Any) -> None:
    """Remember, on a DSL tensor viewing a grid-constant table, the table's host-side spec."""
    tensor._gcdsl_spec = spec


def table_spec(tensor: Any) -> Any:
    """The spec `attach_table_spec` left on `tensor`, or None."""
    return getattr(tensor, "_gcdsl_spec", None)


# ---- grid-constant tables on the host --------------------------------------------
# The compiled host function takes a table as its address (an opaque `!llvm.ptr`)
# and loads the bytes, by value, only where a kernel is launched with them: a
# by-value array argument of the host function would cost LLVM compile time in
# proportion to the table's size.

def address_type() -> Any:
    """The host function's parameter type for a table: an opaque pointer."""
    return llvm.PointerType.get()


def load_table(spec: Any, address: Any, fingerprint: int, mismatch_message: str) -> Any:
    """The table's bytes at `address`, as the kernel parameter's by-value type.

    First the 8 bytes just before them, the fingerprint of the table's spec, are
    compared with the one the function was compiled for: a table of another shape
    or dtype would be read past its end or in part. On a mismatch the compiled call
    prints `mismatch_message` and returns cudaErrorNotSupported before launching,
    which the DSL raises as an error (cudaErrorInvalidValue would read as a bad
    launch configuration in the DSL's message).
    """
    i32, i64 = ir.IntegerType.get_signless(32), ir.IntegerType.get_signless(64)
    header = arith.subi(llvm.ptrtoint(i64, address), arith.constant(i64, FINGERPRINT_OFFSET))
    stored = llvm.load(i64, llvm.inttoptr(llvm.PointerType.get(), header), alignment=1)
    differs = arith.cmpi(arith.CmpIPredicate.ne, stored, arith.constant(i64, fingerprint))
    branch = scf.IfOp(differs)
    with ir.InsertionPoint(branch.then_block):
        cute.printf(mismatch_message)
        scf.YieldOp([])
    error = arith.select(differs, arith.constant(i32, _CUDA_ERROR_NOT_SUPPORTED), arith.constant(i32, 0))
    cuda.return_if_error([error])
    return llvm.load(table_param_type(spec), address)


FINGERPRINT_OFFSET = 16  # the spec's fingerprint sits this many bytes before a table's data
_CUDA_ERROR_NOT_SUPPORTED = 801


def int64_table(fields: list) -> Any:
    """On the host: `!llvm.array<len x i64>` holding `fields` (Python ints or DSL integers)."""
    table = llvm.mlir_undef(int64_table_type(len(fields)))
    for position, value in enumerate(fields):
        table = llvm.insertvalue(table, cutlass.Int64(value).ir_value(), [position])
    return table


def int64_table_type(count: int) -> Any:
    return llvm.ArrayType.get(ir.IntegerType.get_signless(64), max(1, count))


def tensor_kind(t: Any) -> str:
    """"memref" (a global-memory tensor), "coord" (a TMA coordinate tensor) or ""."""
    text = str(getattr(t, "type", ""))
    if text.startswith("!cute.coord_tensor"):
        return "coord"
    if text.startswith("!cute.memref") and "gmem" in text:
        return "memref"
    return ""


def tma_atom_element(atom: cute.CopyAtom) -> Optional[str]:
    """The element type a TMA atom's printed type names (`f32`, `bf16`), or None."""
    match = re.search(r"<sm_\d+a?, (\w+),", str(atom_type(atom)))
    return match.group(1) if match else None


def tma_atom_box(atom: cute.CopyAtom) -> Optional[Tuple[int, ...]]:
    """A TMA atom's box in tensor-mode order, read off its TMA basis, or None.

    The basis lists TMA modes innermost first: extent `e` of TMA mode i runs along
    tensor mode `m` (`e:1@m`).
    """
    basis = re.search(r'tma_gbasis = <"\(([\d,]+)\):\(([^)]*)\)">', str(atom_type(atom)))
    if not basis:
        return None
    extents = [int(e) for e in basis.group(1).split(",")]
    modes = [int(m.split("@")[1]) for m in basis.group(2).split(",")]
    box = [0] * len(extents)
    for extent, mode in zip(extents, modes):
        box[mode] = extent
    return tuple(box)


def mlir_attributes(value: Any) -> list:
    """The kernel-argument attributes of a DSL value (a TMA atom's `grid_constant`)."""
    from cutlass.base_dsl.utils.mlir_value_tree import extract_mlir_attributes

    return extract_mlir_attributes(value)


# ---- kernel parameter layout -------------------------------------------------------

_SCALAR_BYTES = {"i1": 1, "i8": 1, "i16": 2, "i32": 4, "i64": 8, "f16": 2, "bf16": 2, "f32": 4, "f64": 8}
_MMA_WITH_ACCUMULATE_FLAG = ("!cute_nvgpu.sm90.mma<",)
_DYNAMIC_LEAF = re.compile(r"\?(\{[^}]*\})?")


def param_layout(mlir_type: Any) -> Optional[Tuple[int, int]]:
    """(bytes, alignment) that one kernel-argument value takes in the parameter buffer,
    as the DSL lowers it; None for a type whose lowering is not known here.

    Layout-algebra values travel as a struct of their dynamic leaves only (`?` is an
    i32, `?{i64...}` an i64); a memref or pointer adds its 64-bit address first; a TMA
    atom is its 128-byte descriptor; a Hopper WGMMA its accumulate flag; other atoms
    and fully static values take nothing.
    tests/test_param_layout.py holds these rules against the PTX of every compiled case.
    """
    text = str(mlir_type)
    if text in _SCALAR_BYTES:
        return _SCALAR_BYTES[text], _SCALAR_BYTES[text]
    array = re.fullmatch(r"!llvm\.array<(\d+) x (?:vector<(\d+)xi32>|i(\d+))>", text)
    if array:
        count, lanes, bits = int(array.group(1)), array.group(2), array.group(3)
        element = int(lanes) * 4 if lanes else int(bits) // 8
        return count * element, element
    if re.fullmatch(r"!llvm\.ptr(<\d+>)?", text):
        return 8, 8  # a raw pointer (`cute.Pointer` arguments, `cutlass.Array`)
    if text.startswith("!cute_nvgpu.atom."):
        return (DESCRIPTOR_BYTES, DESCRIPTOR_ALIGN) if "tma" in text else (0, 1)
    if any(marker in text for marker in _MMA_WITH_ACCUMULATE_FLAG):
        return 1, 1  # the MMA's runtime "accumulate" flag, an i1
    if text.startswith(("!cute.", "!cute_nvgpu.")):
        fields = [8] if text.startswith(("!cute.memref<", "!cute.ptr<")) else []
        fields += [8 if (m.group(1) or "").startswith("{i64") else 4 for m in _DYNAMIC_LEAF.finditer(text)]
        return _struct_layout(fields)
    return None


def _struct_layout(fields: list) -> Tuple[int, int]:
    if not fields:
        return 0, 1
    offset = 0
    for size in fields:
        offset = -(-offset // size) * size + size
    align = max(fields)
    return -(-offset // align) * align, align


def carry_like_a_list(cls: type) -> None:
    """Let the DSL carry instances of `cls`, a `list` subclass with a `param` name,
    through dynamic loops and branches exactly as it carries a list (the DSL looks a
    container's type up exactly, so a subclass needs its own entry)."""
    from types import SimpleNamespace

    from cutlass.base_dsl.utils.tree_utils import register_pytree_node

    register_pytree_node(cls, lambda items: (SimpleNamespace(length=len(items), param=items.param), list(items)),
                         lambda meta, items: cls(items, meta.param))


_SIZED: Dict[type, Callable[[Any], Tuple[int, ...]]] = {}  # class: its instances' static shape


def let_size_measure(cls: type, static_shape: Callable[[Any], Tuple[int, ...]]) -> None:
    """`cute.size(x)` and `cute.size(x, mode=[i])` for instances of `cls`, from the
    static shape `static_shape(x)`: a grid-constant table in a host function is an
    address, not a layout, and the DSL's `size` takes only IntTuples, layouts and
    tensors. Every other argument goes to the DSL's own `size` unchanged."""
    _SIZED[cls] = static_shape
    dsl_size = _cute_core.size.func  # the function behind the `cute.size` ModeOp
    if getattr(dsl_size, "measures_gcdsl_objects", False):
        return  # wrapped already

    def size(a: Any, mode: list = [], **kwargs: Any) -> Any:  # noqa: B006  (the DSL's own signature)
        shape_of = _SIZED.get(type(a))
        if shape_of is not None:
            return _static_size(shape_of(a), list(mode))
        if kwargs.get("loc") is None:
            # The DSL locates an op at the first frame outside its package, which
            # would be this one: locate it at the user's call, as the DSL would have.
            kwargs["loc"] = _user_location(sys._getframe(1))
        return dsl_size(a, mode=mode, **kwargs)

    size.__wrapped__, size.__doc__, size.measures_gcdsl_objects = dsl_size, dsl_size.__doc__, True
    _cute_core.size.func = size


def _user_location(frame: Any) -> Any:
    """The MLIR location the DSL's `dsl_user_op` gives an op called from `frame`'s line
    (None where it would compute none: no context, or frame filtering off)."""
    if ir.Context.current is None or not _dsl_ops._ENABLE_FRAME_FILTERING:
        return None
    found = _dsl_ops._find_user_frame(frame)
    return _dsl_ops._get_location_from_frame_info(_dsl_ops._fast_frameinfo(found)) if found is not None else None


def _static_size(shape: Tuple[int, ...], mode: list) -> int:
    if not mode:
        return math.prod(shape)
    if len(mode) != 1 or not 0 <= mode[0] < len(shape):
        raise GcdslError(Diag.BAD_GRID_CONSTANT, f"cute.size(..., mode={mode}) of a table of shape {shape}",
                         location=caller_location(also_skip=(os.path.dirname(cutlass.__file__) + os.sep,)),
                         hint=f"a table's modes are flat: pass mode=[i] with 0 <= i < {len(shape)}, or no mode "
                         "for the element count")
    return shape[mode[0]]


# ---- the architecture the DSL compiles for ------------------------------------------

def compile_target_problem() -> Optional[str]:
    """Why the DSL may be compiling for another GPU than the user means, or None.

    The DSL reads CUTE_DSL_ARCH once, when `cutlass` is imported (`envar._arch`),
    and otherwise asks the driver on its first compile, falling back to sm_100a
    where there is no GPU.
    """
    wanted = os.environ.get("CUTE_DSL_ARCH")
    read = _dsl_instance().envar._arch
    if wanted and wanted != read:
        return (f"CUTE_DSL_ARCH={wanted} was set after `import cutlass`; the DSL read it at import "
                f"({'unset' if read is None else read}) and ignores the change")
    if not wanted and not _has_gpu():
        return "no GPU here and CUTE_DSL_ARCH is unset: the DSL compiles for sm_100a (Blackwell)"
    return None


def _has_gpu() -> bool:
    import cuda.bindings.driver as driver

    try:
        (err,) = driver.cuInit(0)
    except Exception:  # no driver library at all (a machine without an NVIDIA driver)
        return False
    if err != driver.CUresult.CUDA_SUCCESS:
        return False
    err, count = driver.cuDeviceGetCount()
    return err == driver.CUresult.CUDA_SUCCESS and count > 0


# ---- abandoning a kernel trace ----------------------------------------------------

def _dsl_instance() -> Any:
    from cutlass.cutlass_dsl import CuTeDSL

    return CuTeDSL._get_dsl()


def trace_snapshot() -> Tuple[int, int]:
    """The state a kernel trace adds to: kernels in the GPU module, the DSL's kernel counter."""
    dsl = _dsl_instance()
    module = getattr(dsl, "gpu_module", None)
    ops = len(list(module.bodyRegion.blocks[0].operations)) if module is not None else 0
    return ops, dsl.num_kernels


def abandon_trace(snapshot: Tuple[int, int], launcher: Any) -> None:
    """Undo a kernel trace that raised part-way: erase the half-built kernel, forget its
    launcher (the DSL refuses launchers never launched) and its number."""
    dsl = _dsl_instance()
    ops_before, kernels_before = snapshot
    module = getattr(dsl, "gpu_module", None)
    if module is not None:
        for op in list(module.bodyRegion.blocks[0].operations)[ops_before:]:
            op.operation.erase()
    pending = getattr(dsl, "_pending_launches", None)
    if pending is not None and any(p is launcher for p in pending):
        pending[:] = [p for p in pending if p is not launcher]
    dsl.num_kernels = kernels_before


def locations_at(place: Callable[[str, int], Optional[Tuple[str, int]]]) -> Any:
    """A context for a trace: each location the DSL records (with line info on, those
    become PTX `.loc` lines) at a file and line that `place` maps is recorded at the
    place it gives instead: the user's file and line. Through the DSL's own scoped hook
    for front ends (`loc_transform`)."""

    def moved_file(loc: Any) -> Optional[Any]:
        target = place(loc.filename, loc.start_line)
        return None if target is None else ir.Location.file(target[0], target[1], 0, context=loc.context)

    def transform(loc: Any) -> Any:
        if loc is None:  # no location tracking
            return None
        if loc.is_a_name() and loc.child_loc.is_a_file():
            moved = moved_file(loc.child_loc)
            return loc if moved is None else ir.Location.name(loc.name_str, childLoc=moved, context=loc.context)
        if loc.is_a_file():
            return moved_file(loc) or loc
        return loc

    return loc_transform(transform)


def locate_kernel_at(dsl_kernel: Any, filename: str, line: int) -> bool:
    """The location the DSL gives a kernel's own function (its `.loc` at the entry):
    recorded where `@cute.kernel` was applied, which for a desugared kernel is the
    desugared text; moved to the user's `def`. False where the DSL kept none (line
    info only: tests/test_dsl_assumptions.py pins that it keeps one)."""
    func = getattr(dsl_kernel, "__wrapped__", None)
    location = getattr(func, "_decorator_location", None)
    if location is None:
        return False
    func._decorator_location = dataclasses.replace(location, filename=filename, lineno=line, col_offset=0)
    return True


def relocate_dsl_error(err: BaseException, where: Callable[[str, int], Optional[Tuple[str, int]]]) -> bool:
    """Point a DSL error raised in desugared code at the user's file and line.

    `where(filename, line)` maps a place in the desugared text to the user's, or
    gives None. The error is re-rendered in place, so its type stays the DSL's.
    """
    if not isinstance(err, DSLBaseError) or not err.filename or not err.line:
        return False
    place = where(err.filename, err.line)
    if place is None:
        return False
    err.filename, err.line = place
    if hasattr(err, "col"):
        err.col = err.end_col = None
    err.args = (err._format_message(),)
    return True


# ---- packed descriptor lists ------------------------------------------------------

def descriptor_blob_type(count: int) -> Any:
    """`!llvm.array<count x vector<32xi32>>`: `count` descriptors by value, 128-byte aligned,
    so the kernel parameter is `.param .align 128 .b8 [count * 128]`."""
    lane = ir.VectorType.get([DESCRIPTOR_BYTES // 4], ir.IntegerType.get_signless(32))
    return llvm.ArrayType.get(lane, count)


def pack_tma_descriptors(atoms: list) -> Any:
    """In the host function: the descriptors of `atoms`, in order, as one by-value blob.

    Each atom's descriptor is encoded by the host code the DSL generates for it;
    `copy_tma_desc` copies it into a 128-byte stack slot of its own, loaded as one
    element of the kernel argument's value. (Slots carved from one N x 128-byte
    buffer made the same bytes but compiled slower: W4's `list` against `atoms0`.)
    """
    i32, i64 = ir.IntegerType.get_signless(32), ir.IntegerType.get_signless(64)
    lane = ir.VectorType.get([DESCRIPTOR_BYTES // 4], i32)
    slot_type = _cute_ir.PtrType.get(_cute_nvgpu_ir.TmaDescriptorTiledType.get(), AddressSpace.gmem, DESCRIPTOR_ALIGN)
    blob = llvm.mlir_undef(descriptor_blob_type(len(atoms)))
    for position, atom in enumerate(atoms):
        slot = llvm.alloca(llvm.PointerType.get(), arith.constant(i32, 1), lane, alignment=DESCRIPTOR_BYTES)
        aligned = _cute_ir.assume(_cute_ir.ConstrainedIntType.get(DESCRIPTOR_ALIGN, 64), llvm.ptrtoint(i64, slot))
        _cute_nvgpu_ir.copy_tma_desc(atom._trait.value, _cute_ir.inttoptr(slot_type, aligned).value)
        blob = llvm.insertvalue(blob, llvm.load(lane, slot, alignment=DESCRIPTOR_BYTES), [position])
    return blob


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


@contextlib.contextmanager
def at_kernel_body_level() -> Iterator[None]:
    """Emit ops directly in the kernel's body: here if tracing is there, else just
    before the statement of the body (a loop, a branch) that encloses this point.

    The DSL can only take a grid-constant parameter's address in the kernel's own
    body (`get_grid_constant_pointer` wants a function as its parent), and a value
    made there serves every later use, inside or after the region.
    """
    op = ir.InsertionPoint.current.block.owner.operation
    enclosing = None
    while op.parent is not None and op.parent.name not in _MODULE_OPS:
        enclosing, op = op, op.parent
    if enclosing is None:
        yield
        return
    with ir.InsertionPoint(enclosing):
        yield


_MODULE_OPS = ("gpu.module", "builtin.module")


def compiled_function_count() -> int:
    """Entries in the DSL's in-memory JIT cache: one per distinct compiled module.

    A direct call of a `@cute.jit` function re-runs its Python to produce IR and
    looks the result up by the IR's hash, so a new entry here means a compilation.
    """
    from cutlass.cutlass_dsl import CuTeDSL

    return len(CuTeDSL._get_dsl().jit_cache)


def prefetch_to_l2_evict_last(line: Pointer) -> None:
    """`prefetch.global.L2::evict_last` of the line at `line`: brought into L2 ahead of
    its use and kept there over lines read once (`cute.arch.prefetch` takes no priority
    by name)."""
    cute.arch.prefetch(line.llvm_ptr, cache_level="L2", evict_priority=nvvm.CacheEvictionPriority.EvictLast)


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
