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

import ctypes
import re
from typing import Any, List, Optional, Sequence, Tuple

import numpy as np

import cutlass
import cutlass.cute as cute

from ..diagnostics import Diag, GcdslError, located_at_caller
from . import _dsl
from .grid_constant import GridConstantTensor, TableSpec

DESCRIPTOR_BYTES = 128


class DescriptorMeta:
    """What every descriptor of a table shares: element type, box (tensor order), swizzle."""

    def __init__(self, dtype: Any, box: Tuple[int, ...], swizzle: str) -> None:
        self.dtype, self.box, self.swizzle = dtype, tuple(box), swizzle

    def key(self) -> tuple:
        return (self.dtype, self.box, self.swizzle)

    def __str__(self) -> str:
        return f"{self.dtype.__name__}_box{'x'.join(map(str, self.box))}_{self.swizzle}"


class TensorMapTable:
    """Encodes and caches CUtensorMaps for a list of torch CUDA tensors."""

    SWIZZLES = ("none", "32B", "64B", "128B")

    @located_at_caller
    def __init__(self, box: Sequence[int], *, swizzle: str = "none") -> None:
        if swizzle not in self.SWIZZLES:
            raise GcdslError(Diag.BAD_GRID_CONSTANT, f"unknown swizzle {swizzle!r}",
                             hint=f"use one of {', '.join(self.SWIZZLES)}")
        self.box = tuple(int(b) for b in box)
        self.swizzle = swizzle
        self._cache: List[Optional[tuple]] = []
        self._table: Optional[GridConstantTensor] = None
        self.encodes = 0  # descriptors encoded so far: what the cache saves shows here

    @located_at_caller
    def placeholder(self, count: int, dtype: Any) -> GridConstantTensor:
        """A zero-filled table of the right spec: enough to compile ahead of time,
        without GPU tensors. Never launch with it."""
        table = GridConstantTensor(np.zeros((count, DESCRIPTOR_BYTES), dtype=np.uint8), align=128)
        table.spec.meta = DescriptorMeta(dtype, self.box, self.swizzle)
        return table

    @located_at_caller
    def encode(self, tensors: Sequence[Any]) -> GridConstantTensor:
        """The table for `tensors`, re-encoding only entries whose tensor changed."""
        if not tensors:
            raise GcdslError(Diag.EMPTY_LIST, "a descriptor table needs at least one tensor")
        dtype = _dsl_dtype(tensors[0])
        meta = DescriptorMeta(dtype, self.box, self.swizzle)
        if self._table is None or self._table.shape[0] != len(tensors) or self._table.spec.meta.key() != meta.key():
            self._table = self.placeholder(len(tensors), dtype)
            self._cache = [None] * len(tensors)
        rows = self._table._bytes.reshape(len(tensors), DESCRIPTOR_BYTES)
        for i, t in enumerate(tensors):
            key = (t.data_ptr(), tuple(t.shape), tuple(t.stride()), t.dtype)
            if self._cache[i] == key:
                continue
            if _dsl_dtype(t) is not dtype:
                raise GcdslError(Diag.BAD_GRID_CONSTANT,
                                 f"tensor {i} is {t.dtype}, tensor 0 is {tensors[0].dtype}",
                                 hint="one table holds descriptors of one element type")
            rows[i] = np.frombuffer(_encode_tiled(t, self.box, self.swizzle), dtype=np.uint8)
            self._cache[i] = key
            self.encodes += 1
        return self._table


def tma_desc_ptr(table: Any, index: Any, *, template: Optional[cute.CopyAtom] = None) -> Any:
    """Inside a kernel: a descriptor pointer into a grid-constant descriptor table.

    With `template`, the table's dtype, rank and box are checked against the atom's.
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


def _check_template(template: cute.CopyAtom, meta: DescriptorMeta) -> None:
    text = str(_dsl.atom_type(template))
    element = re.search(r"<sm_\d+a?, (\w+),", text)
    basis = re.search(r'tma_gbasis = <"\(([\d,]+)\):\(([^)]*)\)">', text)
    problems = []
    expected_elem = _MLIR_ELEMENT.get(meta.dtype)
    if element and expected_elem and element.group(1) != expected_elem:
        problems.append(f"dtype: template {element.group(1)}, table {expected_elem}")
    if basis:
        # TMA modes, innermost first: extent `e` of TMA mode i runs along tensor mode `m` (e:1@m)
        extents = [int(e) for e in basis.group(1).split(",")]
        modes = [int(m.split("@")[1]) for m in basis.group(2).split(",")]
        box = [0] * len(extents)
        for extent, mode in zip(extents, modes):
            box[mode] = extent
        if len(box) != len(meta.box):
            problems.append(f"rank: template {len(box)}, table {len(meta.box)}")
        elif tuple(box) != meta.box:
            problems.append(f"box: template {tuple(box)}, table {meta.box}")
    if problems:
        raise GcdslError(
            Diag.ATOM_TYPE_MISMATCH,
            "the template atom does not describe the table's descriptors: " + "; ".join(problems),
            hint="build the template with the table's dtype and box (cpasync.make_tiled_tma_atom "
            "with the same tile) or encode the table with the template's box",
        )


# torch dtype -> (DSL element type, CUtensorMapDataType suffix, element name in an atom's MLIR type)
_ELEMENTS = {
    "torch.float32": (cutlass.Float32, "FLOAT32", "f32"),
    "torch.float16": (cutlass.Float16, "FLOAT16", "f16"),
    "torch.bfloat16": (cutlass.BFloat16, "BFLOAT16", "bf16"),
    "torch.float64": (cutlass.Float64, "FLOAT64", "f64"),
    "torch.int32": (cutlass.Int32, "INT32", "i32"),
    "torch.int64": (cutlass.Int64, "INT64", "i64"),
    "torch.uint8": (cutlass.Uint8, "UINT8", "ui8"),
    "torch.int8": (cutlass.Int8, "UINT8", "i8"),
}
_MLIR_ELEMENT = {dsl: mlir for dsl, _, mlir in _ELEMENTS.values()}


def _dsl_dtype(t: Any) -> Any:
    if str(t.dtype) not in _ELEMENTS:
        raise GcdslError(Diag.BAD_GRID_CONSTANT, f"no TMA element type for {t.dtype}")
    if t.device.type != "cuda":
        raise GcdslError(Diag.BAD_GRID_CONSTANT, f"descriptors describe GPU memory; got a {t.device} tensor",
                         hint="encode descriptors for CUDA tensors")
    return _ELEMENTS[str(t.dtype)][0]


def _encode_tiled(t: Any, box: Tuple[int, ...], swizzle: str) -> bytes:
    """cuTensorMapEncodeTiled for a row-major-ish torch tensor; dims innermost first."""
    from cuda.bindings import driver

    if len(box) != t.dim():
        raise GcdslError(Diag.BAD_GRID_CONSTANT, f"box {box} has rank {len(box)}, tensor has rank {t.dim()}")
    data_type = getattr(driver.CUtensorMapDataType, "CU_TENSOR_MAP_DATA_TYPE_" + _ELEMENTS[str(t.dtype)][1])
    swizzles = {
        "none": driver.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_NONE,
        "32B": driver.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_32B,
        "64B": driver.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_64B,
        "128B": driver.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B,
    }
    rank = t.dim()
    esize = t.element_size()
    dims = [driver.cuuint64_t(int(d)) for d in reversed(t.shape)]
    strides = [driver.cuuint64_t(int(s) * esize) for s in reversed(t.stride())][1:]
    boxes = [driver.cuuint32_t(int(b)) for b in reversed(box)]
    ones = [driver.cuuint32_t(1)] * rank
    err, tensor_map = driver.cuTensorMapEncodeTiled(
        data_type, rank, t.data_ptr(), dims, strides, boxes, ones,
        driver.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE, swizzles[swizzle],
        driver.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
        driver.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
    )
    if err != driver.CUresult.CUDA_SUCCESS:
        raise GcdslError(Diag.BAD_GRID_CONSTANT,
                         f"cuTensorMapEncodeTiled failed ({err.name}) for shape {tuple(t.shape)}, "
                         f"strides {tuple(t.stride())}, box {box}",
                         hint="TMA needs 16-byte aligned base and strides, box <= 256 per mode")
    return ctypes.string_at(tensor_map.getPtr(), DESCRIPTOR_BYTES)
