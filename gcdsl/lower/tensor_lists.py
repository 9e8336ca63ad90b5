"""Runtime-indexed `List[cute.Tensor]`: one template layout, per-entry extents in parameter space.

Entries share rank, element type and kind (global-memory tensors, or the TMA
coordinate tensors `make_tiled_tma_atom` returns) but may differ in shape and
stride. On the host the list becomes one grid-constant table of Int64 fields per
entry (base address, then each mode's extent and stride; coordinate tensors need
extents only). A mode that is static and equal in every entry stays static in the
template. In the kernel, `tensors[g]` reads entry g's fields and rebuilds the
tensor: no branch over the entries.

A list is lowered only once a runtime index reaches it while the kernel is traced
(`NeedsLowering`): a list indexed by constants alone keeps the DSL's own form, and
nothing is demanded of its entries.
"""
from __future__ import annotations

from typing import Any, List, Optional

import cutlass
import cutlass.cute as cute

from cutlass.cute.typing import Integer

from ..diagnostics import Diag, GcdslError, check_constant_index, describe_value
from . import _dsl
from .carried import Carried
from .launch_context import NeedsLowering, current_launch


class TensorListSpec:
    """Compile-time facts of a lowered list: what is shared, and where each field lives."""

    def __init__(self, kind: str, count: int, rank: int, dtype: Any, align: int,
                 shape: List[Optional[int]], stride: List[Any]) -> None:
        self.kind, self.count, self.rank, self.dtype, self.align = kind, count, rank, dtype, align
        self.shape = shape    # per mode: the shared static extent, or None (read from the table)
        self.stride = stride  # per mode: shared static stride (or basis), or None (read from the table)
        self.fields = (1 if kind == "memref" else 0) + rank + (rank if kind == "memref" else 0)

    def __str__(self) -> str:  # appears in kernel names
        dims = "x".join("?" if s is None else str(s) for s in self.shape)
        return f"TensorList_{self.kind}_{getattr(self.dtype, '__name__', 'coord')}_{self.count}x{dims}"


class PackedTensorList(Carried):
    """A lowered `List[cute.Tensor]` inside traced code: one by-value Int64 table."""

    parts = ("value",)

    def __init__(self, value: Any, spec: TensorListSpec) -> None:
        self.value, self.spec = value, spec

    def __get_mlir_types__(self) -> list:
        return [_dsl.int64_table_type(self.spec.count * self.spec.fields)]

    def __extract_mlir_attributes__(self) -> list:
        return [_dsl.grid_constant_attribute()]

    def __str__(self) -> str:
        return str(self.spec)

    __repr__ = __str__


def lower_tensor_list(tensors: Any, *, param: str) -> PackedTensorList:
    """On the host (while the jit function is traced): pack the entries into one table."""

    def fail(message: str, hint: str) -> GcdslError:
        return GcdslError(Diag.TENSOR_LIST_MISMATCH, message, param=param, hint=hint)

    if not isinstance(tensors, (list, tuple)) or not tensors:
        raise fail(f"`{param}` is annotated List[cute.Tensor] but received "
                   f"{'an empty list' if isinstance(tensors, (list, tuple)) else type(tensors).__name__}",
                   "pass a non-empty Python list of tensors")
    first = tensors[0]
    kind = _dsl.tensor_kind(first)
    if not kind:
        raise fail(f"`{param}[0]` is {first.type if hasattr(first, 'type') else type(first).__name__}: "
                   "runtime-indexed tensor lists hold global-memory tensors or TMA coordinate tensors",
                   "pass cute.Tensor values in global memory, or the tensors make_tiled_tma_atom returns")
    rank = cute.rank(first)
    dtype = first.element_type if kind == "memref" else None
    align = first.iterator.alignment if kind == "memref" else 1
    for i, t in enumerate(tensors):
        problems = []
        if _dsl.tensor_kind(t) != kind:
            problems.append(f"kind: {kind} vs {_dsl.tensor_kind(t) or type(t).__name__}")
        elif cute.rank(t) != rank:
            problems.append(f"rank: {rank} vs {cute.rank(t)}")
        elif kind == "memref" and t.element_type is not dtype:
            problems.append(f"dtype: {dtype} vs {t.element_type}")
        elif any(not _flat(m) for m in tuple(t.shape)):
            problems.append("a hierarchical mode (only flat layouts are supported)")
        elif kind == "coord" and [str(s) for s in t.stride] != [str(s) for s in first.stride]:
            problems.append(f"coordinate basis: {first.stride} vs {t.stride}")
        if problems:
            raise fail(f"`{param}[{i}]` and `{param}[0]` differ in a static property, so a runtime "
                       f"index cannot pick between them: {problems[0]}",
                       "entries may differ only in extents and strides; group other tensors in another list")
        if kind == "memref":
            align = min(align, t.iterator.alignment)

    def shared(values: List[Any]) -> Optional[Any]:
        return values[0] if all(isinstance(v, int) for v in values) and len(set(values)) == 1 else None

    shapes = [list(t.shape) for t in tensors]
    shape = [shared([s[m] for s in shapes]) for m in range(rank)]
    if kind == "memref":
        strides = [list(t.stride) for t in tensors]
        stride = [shared([s[m] for s in strides]) for m in range(rank)]
    else:
        stride = list(first.stride)  # the TMA basis, checked equal above
    spec = TensorListSpec(kind, len(tensors), rank, dtype, align, shape, stride)

    fields: List[Any] = []
    for i, t in enumerate(tensors):
        if kind == "memref":
            fields.append(t.iterator.toint())
        fields.extend(t.shape)
        if kind == "memref":
            fields.extend(t.stride)
    return PackedTensorList(_dsl.int64_table(fields), spec)


def _flat(mode: Any) -> bool:
    return isinstance(mode, int) or hasattr(mode, "ir_value")


class DslTensorList(list):
    """A tensor-list parameter in the DSL's own form inside the kernel, named. Carried
    through dynamic loops as the DSL carries a list."""

    def __init__(self, tensors: Any, param: str) -> None:
        super().__init__(tensors)
        self.param = param


_dsl.carry_like_a_list(DslTensorList)


class TensorListView(Carried):
    """A lowered tensor list inside the kernel: its table in parameter space, viewed as
    an Int64 tensor of one row of fields per entry.

    The view is made in the kernel's prologue, in the kernel's own body: the DSL can
    take a grid-constant parameter's address only there, not inside a loop or branch.
    """

    parts = ("fields",)  # carried through dynamic loops by its view's values

    def __init__(self, spec: TensorListSpec, param: str, fields: Any) -> None:
        self.spec, self.param, self.fields = spec, param, fields

    def __len__(self) -> int:
        return self.spec.count

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self.spec.count))]
        return self.entry(index)

    def __iter__(self):
        return iter([self.entry(i) for i in range(self.spec.count)])

    def entry(self, index: Any) -> Any:
        """Entry `index` rebuilt from its fields: address, then extents and strides."""
        spec, table = self.spec, self.fields
        if isinstance(index, int):
            index = check_constant_index(index, spec.count, "tensors")
        at, address = 0, None
        if spec.kind == "memref":
            address, at = table[index, 0], 1
        shape = tuple(s if s is not None else cutlass.Int32(table[index, at + m]) for m, s in enumerate(spec.shape))
        at += spec.rank
        if spec.kind == "coord":
            return cute.make_tensor(cute.make_identity_tensor(shape).iterator,
                                    cute.make_layout(shape, stride=tuple(spec.stride)))
        stride = tuple(s if s is not None else table[index, at + m] for m, s in enumerate(spec.stride))
        ptr = cute.make_ptr(spec.dtype, address, cute.AddressSpace.gmem, assumed_align=spec.align)
        return cute.make_tensor(ptr, cute.make_layout(shape, stride=stride))


def tensor_table(tensors: Any, param: str) -> Any:
    """Kernel prologue: the parameter-space table of a lowered list, or the DSL's own list, named."""
    if isinstance(tensors, PackedTensorList):
        spec = tensors.spec
        base = _dsl.grid_constant_address(tensors.value)
        fields = cute.make_tensor(cute.make_ptr(cutlass.Int64, base, cute.AddressSpace.generic, assumed_align=8),
                                  cute.make_layout((spec.count, spec.fields), stride=(spec.fields, 1)))
        return TensorListView(spec, param, fields)
    if not isinstance(tensors, (list, tuple)):
        raise GcdslError(Diag.TENSOR_LIST_MISMATCH,
                         f"`{param}` is annotated List[cute.Tensor] but received {describe_value(tensors)}",
                         param=param, hint="pass a Python list of tensors")
    return DslTensorList(tensors, param)


def tensor_from_table(tensors: Any, index: Any) -> Any:
    """`tensors[index]` inside a kernel: rebuilt from the table for a runtime index."""
    if not isinstance(index, (int, Integer)):
        raise GcdslError(Diag.BAD_INDEX_TYPE, f"a list of tensors is indexed with {describe_value(index)}",
                         param=getattr(tensors, "param", None), hint="index with an integer (cutlass.Int32) value")
    if isinstance(tensors, TensorListView):
        if not isinstance(index, int):
            current_launch().saw_runtime_index(tensors.param)
        return tensors.entry(index)
    if isinstance(index, int):
        return tensors[check_constant_index(index, len(tensors), "tensors")]
    if isinstance(tensors, DslTensorList):
        raise NeedsLowering(tensors.param)
    return tensors[index]
