"""`cuTensorMapEncodeTiled` called straight from libcuda, writing into the table.

The cuda.bindings wrapper builds a Python object per dimension and returns a new
CUtensorMap that then has to be copied; here the argument arrays are allocated
once and the driver writes the 128 bytes directly at their place in the
descriptor table. What remains per descriptor is the driver's own work and one
ctypes call.
"""
from __future__ import annotations

import ctypes
from typing import Any, Callable, Optional, Tuple

from ..diagnostics import Diag, GcdslError

MAX_RANK = 5  # what cuTensorMapEncodeTiled accepts

# torch dtype name -> CUtensorMapDataType suffix
DATA_TYPES = {
    "torch.float32": "FLOAT32",
    "torch.float16": "FLOAT16",
    "torch.bfloat16": "BFLOAT16",
    "torch.float64": "FLOAT64",
    "torch.int32": "INT32",
    "torch.int64": "INT64",
    "torch.uint8": "UINT8",
    "torch.int8": "UINT8",
}
SWIZZLES = ("none", "32B", "64B", "128B")


class TiledEncoder:
    """One descriptor per call of `encode_into`; not thread-safe (shared argument arrays)."""

    def __init__(self, function: Optional[Callable[..., int]] = None) -> None:
        """`function`: the driver entry point, or a stand-in with its signature (tests)."""
        from cuda.bindings import driver  # enum values only: no call goes through it

        self._fn = function if function is not None else _driver_function()
        u32, u64 = ctypes.c_uint32, ctypes.c_uint64
        self._dims = (u64 * MAX_RANK)()
        self._strides = (u64 * MAX_RANK)()
        self._box = (u32 * MAX_RANK)()
        self._ones = (u32 * MAX_RANK)(*([1] * MAX_RANK))
        self._data_types = {name: int(getattr(driver.CUtensorMapDataType, "CU_TENSOR_MAP_DATA_TYPE_" + suffix))
                            for name, suffix in DATA_TYPES.items()}
        self._swizzles = {s: int(getattr(driver.CUtensorMapSwizzle, f"CU_TENSOR_MAP_SWIZZLE_{s.upper()}"))
                          for s in SWIZZLES}
        self._interleave = int(driver.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE)
        self._l2 = int(driver.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_128B)
        self._oob = int(driver.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)
        self._result_name = lambda code: driver.CUresult(code).name

    def encode_into(self, address: int, t: Any, box: Tuple[int, ...], swizzle: str) -> None:
        """Write the descriptor of torch tensor `t` (dims innermost first) at `address` (64-byte aligned)."""
        check_tensor(t, box)
        rank = len(box)
        esize = t.element_size()
        shape, stride = t.shape, t.stride()
        dims, strides, boxes = self._dims, self._strides, self._box
        for i in range(rank):  # tensor mode rank-1-i is TMA dimension i
            mode = rank - 1 - i
            dims[i] = shape[mode]
            boxes[i] = box[mode]
            if i:
                strides[i - 1] = stride[mode] * esize
        code = self._fn(address, self._data_types[str(t.dtype)], rank, t.data_ptr(), dims, strides, boxes,
                        self._ones, self._interleave, self._swizzles[swizzle], self._l2, self._oob)
        if code:
            raise GcdslError(Diag.BAD_GRID_CONSTANT,
                             f"cuTensorMapEncodeTiled failed ({self._result_name(code)}) for shape "
                             f"{tuple(t.shape)}, strides {tuple(t.stride())}, box {box}",
                             hint="TMA needs a 16-byte aligned base and strides, box <= 256 per mode")


def _driver_function(library: str = "libcuda.so.1") -> Callable[..., int]:
    try:
        fn = ctypes.CDLL(library).cuTensorMapEncodeTiled
    except (OSError, AttributeError) as exc:
        raise GcdslError(Diag.BAD_GRID_CONSTANT, f"cannot load cuTensorMapEncodeTiled from {library}: {exc}",
                         hint="descriptors are encoded by the CUDA driver (12.0 or later): run where it is installed") from exc
    u32, u64, enum = ctypes.c_uint32, ctypes.c_uint64, ctypes.c_int
    fn.argtypes = [ctypes.c_void_p, enum, u32, ctypes.c_void_p, ctypes.POINTER(u64), ctypes.POINTER(u64),
                   ctypes.POINTER(u32), ctypes.POINTER(u32), enum, enum, enum, enum]
    fn.restype = enum
    return fn


def check_tensor(t: Any, box: Tuple[int, ...]) -> None:
    if t.device.type != "cuda":
        raise GcdslError(Diag.BAD_GRID_CONSTANT, f"descriptors describe GPU memory; got a {t.device} tensor",
                         hint="encode descriptors for CUDA tensors")
    if len(box) != t.dim() or not 1 <= len(box) <= MAX_RANK:
        raise GcdslError(Diag.BAD_GRID_CONSTANT, f"box {box} has rank {len(box)}, tensor has rank {t.dim()}",
                         hint=f"give one box extent per tensor mode (rank 1 to {MAX_RANK})")
    if t.shape[-1] != 1 and t.stride()[-1] != 1:
        raise GcdslError(Diag.BAD_GRID_CONSTANT,
                         f"the innermost mode of a tensor of shape {tuple(t.shape)} has stride {t.stride()[-1]}",
                         hint="TMA reads the last mode contiguously: make it stride 1 (.contiguous(), or "
                         "a view that keeps the last mode contiguous)")


_ENCODER: Optional[TiledEncoder] = None


def encode_into(address: int, t: Any, box: Tuple[int, ...], swizzle: str) -> None:
    """The process's one encoder (libcuda is loaded on first use)."""
    global _ENCODER
    if _ENCODER is None:
        _ENCODER = TiledEncoder()
    _ENCODER.encode_into(address, t, box, swizzle)
