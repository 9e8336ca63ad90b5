"""Host-encoded TMA descriptor tables, passed as grid-constant tensors.

    table = gcdsl.TensorMapTable(box=(64, 64))
    descs = table.encode(tensors)          # N x 128 bytes, one CUtensorMap per tensor
    compiled(descs, ...)                   # Annotated[cute.Tensor, gcdsl.GridConstant] in the kernel

and in the kernel:

    cute.copy(template, g, s, tma_bar_ptr=mbar,
              tma_desc_ptr=gcdsl.tma_desc_ptr(descs, k, template=template))

`encode` re-encodes an entry only when its tensor's pointer, shape, strides or
dtype changed; the table's bytes are updated in place, so the compiled kernel is
reused. The template atom (made on the host from any tensor of the same dtype,
rank and box) supplies the copy op and partitioning; `tma_desc_ptr` checks it
against the table's dtype, rank and box at trace time.
"""
from __future__ import annotations

import operator
from typing import Any, List, Optional, Sequence, Tuple

import numpy as np

import cutlass
import cutlass.cute as cute

from ..abi import DESCRIPTOR_BYTES
from ..diagnostics import Diag, GcdslError, located_at_caller
from . import _dsl
from . import tensor_map_encoder as encoder
from .grid_constant import GridConstantTensor, TableSpec
from .tensor_map_encoder import DATA_TYPES, SWIZZLES



class DescriptorMeta:
    """What every descriptor of a table shares: element type, box (tensor order), swizzle."""

    def __init__(self, dtype: Any, box: Tuple[int, ...], swizzle: str) -> None:
        self.dtype, self.box, self.swizzle = dtype, tuple(box), swizzle

    def key(self) -> tuple:
        return (self.dtype, self.box, self.swizzle)

    def __str__(self) -> str:
        return f"{self.dtype.__name__}_box{'x'.join(map(str, self.box))}_{self.swizzle}"


class TensorMapTable:
    """Encodes and caches CUtensorMaps for a list of torch CUDA tensors.

    `encode(tensors)` returns the same `GridConstantTensor` every time (updated in
    place), so a compiled kernel is reused. It re-encodes an entry only when its
    tensor's pointer, shape, strides or dtype changed.

    The check for unchanged inputs reads no shape or stride. The entries are the
    tensor objects encoded last time (one identity test each, none when the same
    tuple is passed again: a tuple cannot change), and the version
    counter and data pointer of each *root* have not moved. A root is a tensor
    the entries are views of (`tensor._base`, sharing its storage), or an entry
    that is no view. A view shares its base's version counter, which torch bumps
    on `set_`, `resize_`, `as_strided_`, `t_` and every other in-place operation
    on the base or any of its views; and a view moves with its base's storage.
    So a tuple of per-group slices of one tensor checks one counter and one
    pointer whatever its length, and a table of separate tensors checks each.
    Any difference sends the table to the exact check, entry by entry. The table
    holds the tensors it describes, so their memory (and their `id`) outlives
    the descriptors that point there.

    One change torch makes without a version bump: `tensor.data = other`. Call
    `invalidate()` after assigning `.data` of an entry or of the tensor entries
    are views of. Inference-mode tensors have no version counter; a table
    holding one checks every entry exactly.
    """

    SWIZZLES = SWIZZLES

    @located_at_caller
    def __init__(self, box: Sequence[int], *, swizzle: str = "none") -> None:
        if swizzle not in self.SWIZZLES:
            raise GcdslError(Diag.BAD_GRID_CONSTANT, f"unknown swizzle {swizzle!r}",
                             hint=f"use one of {', '.join(self.SWIZZLES)}")
        self.box = tuple(int(b) for b in box)
        self.swizzle = swizzle
        self._table: Optional[GridConstantTensor] = None
        self._held: Tuple[Any, ...] = ()  # the tensors encoded, entry by entry
        self._roots: Tuple[Any, ...] = ()  # whose counters and pointers cover every entry
        self._versions: Tuple[int, ...] = ()  # of the roots
        self._pointers: Tuple[int, ...] = ()  # of the roots
        self._keys: List[Optional[tuple]] = []  # exact (pointer, shape, strides, dtype) per entry
        self._data_ptr = _data_ptr_reader()
        self.encodes = 0  # descriptors encoded so far: what the cache saves shows here

    @located_at_caller
    def placeholder(self, count: int, dtype: Any) -> GridConstantTensor:
        """A zero-filled table of the right spec: enough to compile ahead of time,
        without GPU tensors. Never launch with it."""
        return GridConstantTensor(np.zeros((count, DESCRIPTOR_BYTES), dtype=np.uint8), align=128,
                                  meta=DescriptorMeta(dtype, self.box, self.swizzle))

    def encode(self, tensors: Sequence[Any]) -> GridConstantTensor:
        """The table for `tensors`, re-encoding only entries whose tensor changed."""
        held = self._held
        if held and (tensors is held or _same_entries(tensors, held)):
            try:
                roots = self._roots
                if (tuple(map(_version, roots)) == self._versions
                        and tuple(map(self._data_ptr, roots)) == self._pointers):
                    return self._table
            except RuntimeError:  # an inference tensor: no version counter
                pass
        return self._encode_changed(tensors)

    def invalidate(self) -> None:
        """Check every entry exactly on the next `encode` (after `tensor.data = ...`).

        The table then holds none of the tensors it describes, so their memory can go
        back to the allocator."""
        self._held = self._roots = ()

    @located_at_caller  # here, not on `encode`: the check for unchanged tensors raises nothing
    def _encode_changed(self, tensors: Sequence[Any]) -> GridConstantTensor:
        if not len(tensors):
            raise GcdslError(Diag.EMPTY_LIST, "a descriptor table needs at least one tensor")
        self._held = ()  # if anything below fails, no later call may take the fast path
        dtype = _dsl_dtype(tensors[0])
        meta = DescriptorMeta(dtype, self.box, self.swizzle)
        if self._table is None or self._table.shape[0] != len(tensors) or self._table.spec.meta.key() != meta.key():
            self._table = self.placeholder(len(tensors), dtype)
            self._keys = [None] * len(tensors)
        keys, first_dtype, base = self._keys, tensors[0].dtype, self._table.address
        for i, t in enumerate(tensors):
            key = (t.data_ptr(), t.shape, t.stride(), t.dtype)
            if keys[i] == key:
                continue
            if t.dtype != first_dtype:
                raise GcdslError(Diag.BAD_GRID_CONSTANT,
                                 f"tensor {i} is {t.dtype}, tensor 0 is {first_dtype}",
                                 hint="one table holds descriptors of one element type")
            keys[i] = None  # stays None if encoding fails
            encoder.encode_into(base + i * DESCRIPTOR_BYTES, t, self.box, self.swizzle)
            keys[i] = key
            self.encodes += 1
        self._roots = _roots(tensors)
        self._pointers = tuple(map(self._data_ptr, self._roots))
        try:
            self._versions = tuple(map(_version, self._roots))
        except RuntimeError:  # inference tensors: no fast path for this table
            return self._table
        self._held = tuple(tensors)  # a tuple passed in is kept as it is: see `tensors is held`
        return self._table


def tma_desc_ptr(table: Any, index: Any, *, template: Optional[cute.CopyAtom] = None) -> Any:
    """Inside a kernel: a descriptor pointer into a grid-constant descriptor table.

    With `template`, the table's dtype, rank and box are checked against the atom's (the
    swizzle, which the atom's type leaves out, by `check_template_swizzle` on the host).
    """
    spec: Optional[TableSpec] = _dsl.table_spec(table)
    if spec is None or spec.dtype is not cutlass.Uint8 or spec.shape[1:] != (DESCRIPTOR_BYTES,):
        raise GcdslError(
            Diag.BAD_GRID_CONSTANT,
            "tma_desc_ptr() takes a grid-constant parameter holding a TensorMapTable",
            hint="annotate the parameter Annotated[cute.Tensor, gcdsl.GridConstant] and pass "
            "TensorMapTable.encode(tensors); use it directly, not through another name",
        )
    meta = getattr(spec, "meta", None)
    if template is not None and meta is not None:
        _check_template(template, meta)
    return _dsl.descriptor_at(table.iterator, index)


def check_template_swizzle(template: Any, table: Any, *, template_param: str, table_param: str,
                           location: Any) -> None:
    """On the host, when the kernel is called: the template's shared-memory swizzle against
    the one the table's descriptors were encoded with (the kernel's trace cannot see it:
    an atom's type leaves the swizzle out)."""
    meta = getattr(getattr(table, "spec", None), "meta", None)
    layout = (_dsl.tma_atom_signature(template) or {}).get("shared-memory layout (swizzle included)")
    if not isinstance(meta, DescriptorMeta) or layout is None:
        return  # not a TensorMapTable, or an atom whose build the host did not see: the trace checks the rest
    swizzle = _dsl.swizzle_of_layout(layout)
    if swizzle != meta.swizzle:
        raise GcdslError(
            Diag.ATOM_TYPE_MISMATCH,
            f"`{template_param}` stages tiles in shared memory with swizzle {swizzle}, but the descriptors "
            f"of `{table_param}` were encoded with swizzle {meta.swizzle}: TMA would scramble every tile",
            location=location, param=table_param,
            hint=f"encode the table with TensorMapTable(box, swizzle={swizzle!r}), or build the template's "
            f"shared-memory layout with the table's swizzle ({meta.swizzle})",
        )


def _check_template(template: cute.CopyAtom, meta: DescriptorMeta) -> None:
    element, box = _dsl.tma_atom_element(template), _dsl.tma_atom_box(template)
    problems = []
    expected_elem = _MLIR_ELEMENT.get(meta.dtype)
    if element and expected_elem and element != expected_elem:
        problems.append(f"dtype: template {element}, table {expected_elem}")
    if box is not None and len(box) != len(meta.box):
        problems.append(f"rank: template {len(box)}, table {len(meta.box)}")
    elif box is not None and box != meta.box:
        problems.append(f"box: template {box}, table {meta.box}")
    if problems:
        raise GcdslError(
            Diag.ATOM_TYPE_MISMATCH,
            "the template atom does not describe the table's descriptors: " + "; ".join(problems),
            hint="build the template with the table's dtype and box (cpasync.make_tiled_tma_atom "
            "with the same tile) or encode the table with the template's box",
        )


# torch dtype -> (DSL element type, element name in an atom's MLIR type); the
# CUtensorMapDataType of each is in tensor_map_encoder.DATA_TYPES
_ELEMENTS = {
    "torch.float32": (cutlass.Float32, "f32"),
    "torch.float16": (cutlass.Float16, "f16"),
    "torch.bfloat16": (cutlass.BFloat16, "bf16"),
    "torch.float64": (cutlass.Float64, "f64"),
    "torch.int32": (cutlass.Int32, "i32"),
    "torch.int64": (cutlass.Int64, "i64"),
    "torch.uint8": (cutlass.Uint8, "ui8"),
    "torch.int8": (cutlass.Int8, "i8"),
}
assert set(_ELEMENTS) == set(DATA_TYPES)
_MLIR_ELEMENT = dict(_ELEMENTS.values())

# Read through C-level `map` in the fast path: no Python frame per tensor.
_version = operator.attrgetter("_version")


def _same_entries(tensors: Sequence[Any], held: Tuple[Any, ...]) -> bool:
    """Entry by entry, the very tensor objects encoded last time (C-level `map`: no
    Python frame per entry). Skipped when the caller passes the same tuple again:
    a tuple cannot have changed."""
    return len(tensors) == len(held) and all(map(operator.is_, tensors, held))


def _roots(tensors: Sequence[Any]) -> Tuple[Any, ...]:
    """The distinct tensors whose version counters and data pointers cover `tensors`.

    A view's root is its base when both use the same storage (then they share one
    version counter, and the storage's address moves both); anything else is its
    own root.
    """
    roots = {}
    for t in tensors:
        base = t._base
        root = base if base is not None and _storage_address(base) == _storage_address(t) else t
        roots.setdefault(id(root), root)
    return tuple(roots.values())


def _storage_address(t: Any) -> int:
    return t.untyped_storage().data_ptr()


def _data_ptr_reader():
    """`torch.Tensor.data_ptr`, unbound: cheaper per call than a method lookup."""
    import torch

    return torch.Tensor.data_ptr


def _dsl_dtype(t: Any) -> Any:
    if not hasattr(t, "data_ptr") or not hasattr(t, "dtype"):
        raise GcdslError(Diag.BAD_GRID_CONSTANT, f"TensorMapTable.encode takes torch tensors, got {type(t).__name__}",
                         hint="pass the torch CUDA tensors themselves, not cute tensors made from them")
    if str(t.dtype) not in _ELEMENTS:
        raise GcdslError(Diag.BAD_GRID_CONSTANT, f"no TMA element type for {t.dtype}")
    return _ELEMENTS[str(t.dtype)][0]
