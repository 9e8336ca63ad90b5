"""Grid-constant tensors: small read-only tables passed by value in parameter space.

On the host a `GridConstantTensor` holds the bytes (from a torch CPU tensor, a
NumPy array or a nested sequence) and hands them to the compiled function at
every launch, so the contents may change from launch to launch; the shape and
dtype are compile-time facts. In the kernel the table is one `.param` array of
its full size; the kernel's prologue views it as a `cute.Tensor` through a
generic pointer into parameter space,

    tasks = __gcdsl__.table_view(tasks, __gcdsl__.param_space_ptr(tasks))

so a runtime-indexed read is one constant bank load (`LDC R, c[0x0][R+...]`),
never a chain of selects.
"""
from __future__ import annotations

import ctypes
import hashlib
import math
from typing import Any, Optional, Sequence, Tuple

import numpy as np

import cutlass
import cutlass.cute as cute

from ..diagnostics import Diag, GcdslError, located_at_caller
from . import _dsl
from .carried import Carried

_NUMPY_TO_DSL = {
    np.dtype(np.int8): cutlass.Int8,
    np.dtype(np.uint8): cutlass.Uint8,
    np.dtype(np.int16): cutlass.Int16,
    np.dtype(np.uint16): cutlass.Uint16,
    np.dtype(np.int32): cutlass.Int32,
    np.dtype(np.uint32): cutlass.Uint32,
    np.dtype(np.int64): cutlass.Int64,
    np.dtype(np.uint64): cutlass.Uint64,
    np.dtype(np.float16): cutlass.Float16,
    np.dtype(np.float32): cutlass.Float32,
    np.dtype(np.float64): cutlass.Float64,
}
_DSL_TO_NUMPY = {v: k for k, v in _NUMPY_TO_DSL.items()}


class TableSpec:
    """The compile-time side of a table: shape, dtype and alignment."""

    def __init__(self, shape: Tuple[int, ...], dtype: Any, align: int, meta: Any = None) -> None:
        self.shape, self.dtype, self.align = shape, dtype, align
        self.meta = meta  # what the bytes mean, if more than numbers (TensorMapTable sets it)
        self.nbytes = math.prod(shape) * dtype.width // 8
        self.padded_bytes = -(-self.nbytes // align) * align

    def __str__(self) -> str:  # appears in kernel names: keep it stable and short
        meta = "" if self.meta is None else f"_{self.meta}"
        return f"GridConstant_{self.dtype.__name__}_{'x'.join(map(str, self.shape))}_a{self.align}{meta}"


def spec_fingerprint(spec: TableSpec) -> int:
    """63 bits that differ between tables a compiled function cannot take in each other's place."""
    digest = hashlib.blake2b(str(spec).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


class GridConstantTensor:
    """Host-side table for an `Annotated[cute.Tensor, gcdsl.GridConstant]` kernel parameter.

    Pass it through the `@cute.jit` host function to the kernel like a tensor. New
    contents of the same shape and dtype reuse the compiled kernel: call
    `update(data)`, or pass another `GridConstantTensor` of the same spec.
    """

    @located_at_caller
    def __init__(self, data: Any, *, dtype: Any = None, align: int = 16, meta: Any = None) -> None:
        array = _host_array(data, dtype)
        if align not in (4, 8, 16, 32, 64, 128) or align < array.itemsize:
            raise GcdslError(
                Diag.BAD_GRID_CONSTANT,
                f"alignment {align} is not supported for {array.dtype} tables",
                hint="use a power of two from the element size up to 128",
            )
        self.spec = TableSpec(tuple(array.shape), _NUMPY_TO_DSL[array.dtype], align, meta)
        # The host code of the compiled function reads the table with the alignment
        # of its parameter type, so the bytes live at that alignment here too; just
        # before them, the spec's fingerprint, which a compiled call checks.
        header = _dsl.FINGERPRINT_OFFSET
        self._storage = np.zeros(header + self.spec.padded_bytes + align, dtype=np.uint8)
        offset = header + (-(self._storage.ctypes.data + header)) % align
        self._bytes = self._storage[offset:offset + self.spec.padded_bytes]
        self._storage[offset - header:offset - header + 8] = np.frombuffer(
            np.uint64(spec_fingerprint(self.spec)).tobytes(), dtype=np.uint8)
        self.address = self._bytes.ctypes.data  # fixed for the table's life: updates are in place
        # The compiled host function takes the table's address (see `__get_mlir_types__`):
        # a launch passes a pointer to a cell holding it.
        self._address_cell = ctypes.c_void_p(self.address)
        self._c_pointers = [ctypes.c_void_p(ctypes.addressof(self._address_cell))]
        self.update(array)

    @property
    def shape(self) -> Tuple[int, ...]:
        return self.spec.shape

    @property
    def dtype(self) -> Any:
        return self.spec.dtype

    @located_at_caller
    def update(self, data: Any) -> None:
        """Replace the contents in place (same shape and dtype): no recompilation."""
        array = _host_array(data, _DSL_TO_NUMPY[self.spec.dtype])
        if tuple(array.shape) != self.spec.shape:
            raise GcdslError(
                Diag.BAD_GRID_CONSTANT,
                f"new contents have shape {tuple(array.shape)}, the table was made with {self.spec.shape}",
                hint="a grid-constant tensor's shape is compile-time; make a new table (and compile) for a new shape",
            )
        self._bytes[: self.spec.nbytes] = np.frombuffer(array.tobytes(), dtype=np.uint8)

    def numpy(self) -> np.ndarray:
        return self._bytes[: self.spec.nbytes].view(_DSL_TO_NUMPY[self.spec.dtype]).reshape(self.spec.shape)

    # The CuTe DSL's JIT-argument protocol (public: cutlass.base_dsl.typing.JitArgument).
    # Called on every launch: the pointer to the bytes is made once.
    def __c_pointers__(self) -> list:
        return self._c_pointers

    # The host function receives the table's address, not its bytes by value (see
    # _dsl.load_table): its compile time does not grow with the table.
    @staticmethod
    def __get_mlir_types__() -> list:
        return [_dsl.address_type()]

    def __new_from_mlir_values__(self, values: list) -> "GridConstantParam":
        return GridConstantParam(values[0], self.spec, host_address=True)

    # TVM-FFI (`cute.compile(..., options="--enable-tvm-ffi")`): the DSL's argument
    # converter takes a class with `_struct_type` and a class-level
    # `__get_mlir_types__` as an opaque handle, passed (like `__c_pointers__`) as a
    # pointer to the argument's value: here, the cell holding the table's address.
    _struct_type = None

    def __tvm_ffi_opaque_ptr__(self) -> int:
        return self._c_pointers[0].value

    def __repr__(self) -> str:
        # The DSL derives function names (and dump file names) from argument reprs:
        # contents must not appear here, or every new table would look like a new kernel.
        return f"gcdsl.GridConstantTensor({self.spec})"


class GridConstantParam(Carried):
    """A table inside traced code: in the host function its address, in the kernel
    one by-value parameter (what a launch passes: the bytes loaded from the address)."""

    parts = ("value",)

    def __init__(self, value: Any, spec: TableSpec, host_address: bool = False) -> None:
        self.value, self.spec = value, spec
        self.host_address = host_address  # in the host function: `value` is the table's address

    @property
    def shape(self) -> Tuple[int, ...]:
        """The table's static shape, for host code (a grid size, say)."""
        return self.spec.shape

    def __extract_mlir_values__(self) -> list:
        if self.host_address:  # passed on to a kernel: the bytes, by value
            message = (f"gcdsl: a grid-constant table passed to this compiled function is not the "
                       f"{self.spec} it was compiled for (another shape, dtype or descriptor box); "
                       f"use update() on the table it was compiled with, or compile again\n")
            return [_dsl.load_table(self.spec, self.value, spec_fingerprint(self.spec), message)]
        return super().__extract_mlir_values__()

    def __new_from_mlir_values__(self, values: list) -> "GridConstantParam":
        rebuilt = super().__new_from_mlir_values__(values)
        rebuilt.host_address = False  # rebuilt from a kernel's (or a loop's) values: the bytes
        return rebuilt

    def __get_mlir_types__(self) -> list:
        return [_dsl.table_param_type(self.spec)]

    def __extract_mlir_attributes__(self) -> list:
        return [_dsl.grid_constant_attribute()]

    def __str__(self) -> str:
        return str(self.spec)

    __repr__ = __str__


_dsl.let_size_measure(GridConstantParam, lambda table: table.spec.shape)  # cute.size(table) in host code


@located_at_caller
def grid_constant(data: Any, *, dtype: Any = None, align: int = 16) -> GridConstantTensor:
    """A grid-constant table from a torch CPU tensor, a NumPy array or a sequence."""
    return GridConstantTensor(data, dtype=dtype, align=align)


def check_grid_constant_arg(value: Any, *, param: str, location: Any) -> None:
    """On the host, when the kernel is called: the argument must be a table."""
    if not isinstance(value, GridConstantParam):
        raise GcdslError(
            Diag.BAD_GRID_CONSTANT,
            f"`{param}` is annotated grid-constant but received {type(value).__name__}",
            location=location,
            param=param,
            hint="make the table on the host with gcdsl.grid_constant(cpu_data) and pass it "
            "through the host function (annotated gcdsl.GridConstantTensor)",
        )


def param_space_ptr(table: GridConstantParam) -> Any:
    """Inside a kernel: a typed pointer to the table's bytes, through the generic address
    space into parameter space (`cvta.param`); reads go through the constant cache.

    `check_grid_constant_arg` has refused anything but a table before tracing.
    """
    base = _dsl.grid_constant_address(table.value)
    return cute.make_ptr(table.spec.dtype, base, cute.AddressSpace.generic, assumed_align=table.spec.align)


def table_view(table: GridConstantParam, ptr: Any) -> cute.Tensor:
    """Inside a kernel: the table as a read-only, row-major `cute.Tensor` at `ptr`."""
    tensor = cute.make_tensor(ptr, cute.make_layout(table.spec.shape, stride=_row_major(table.spec.shape)))
    _dsl.attach_table_spec(tensor, table.spec)  # lets tma_desc_ptr() check a template against the table
    return tensor


def _row_major(shape: Sequence[int]) -> Tuple[int, ...]:
    strides, step = [], 1
    for extent in reversed(shape):
        strides.append(step)
        step *= extent
    return tuple(reversed(strides))


def numpy_dtype(dtype: Any) -> Optional[np.dtype]:
    """A table's element type as NumPy names it, from any of the spellings users reach for:
    a `cutlass` type (`cutlass.Int32`), a torch dtype (`torch.int32`), a NumPy dtype or
    type (`np.int32`), or a string (`"int32"`); None keeps the data's own."""
    if dtype is None:
        return None
    if dtype in _DSL_TO_NUMPY:
        return _DSL_TO_NUMPY[dtype]
    if type(dtype).__module__ == "torch" and type(dtype).__name__ == "dtype":
        dtype = str(dtype).rsplit(".", 1)[-1]  # torch.int32 -> "int32", without importing torch
    try:
        found = np.dtype(dtype)
    except TypeError:
        found = None
    if found not in _NUMPY_TO_DSL:
        names = ", ".join(str(d) for d in _NUMPY_TO_DSL)
        raise GcdslError(Diag.BAD_GRID_CONSTANT, f"a grid-constant table cannot hold elements of type {dtype!r}",
                         param="dtype", hint=f"pass one of {names}, as a cutlass type (cutlass.Int32), a torch "
                         "dtype (torch.int32), a NumPy dtype (np.int32) or a string ('int32')")
    return found


def _host_array(data: Any, dtype: Any) -> np.ndarray:
    if hasattr(data, "device") and hasattr(data, "cpu"):  # torch.Tensor
        if data.device.type != "cpu":
            raise GcdslError(
                Diag.GRID_CONSTANT_ON_DEVICE,
                f"a grid-constant table was given a {data.device} tensor",
                hint="grid-constant contents travel with the launch from host memory; reading "
                "them from the GPU would cost a device-to-host copy per launch. Keep the "
                "table on the CPU (tensor.cpu() once), or pass it as an ordinary cute.Tensor",
            )
        data = data.detach().contiguous().numpy()
    np_dtype = numpy_dtype(dtype)
    try:
        array = np.ascontiguousarray(np.asarray(data, dtype=np_dtype))
    except (TypeError, ValueError) as err:
        ragged = "inhomogeneous" in str(err) or "sequence" in str(err)
        raise GcdslError(Diag.BAD_GRID_CONSTANT, f"cannot make a table of numbers from the data: {err}",
                         hint="every row of a nested sequence must have the same length (a table is a "
                         "rectangular array); pad the short rows" if ragged else
                         "pass a torch CPU tensor, a NumPy array or a nested sequence of numbers") from None
    if array.dtype not in _NUMPY_TO_DSL:
        raise GcdslError(
            Diag.BAD_GRID_CONSTANT,
            f"grid-constant tables hold integers or floats, not {array.dtype}",
            hint="convert the data, or pass dtype=cutlass.Int32 (or another numeric type)",
        )
    if array.ndim == 0 or array.size == 0:
        raise GcdslError(Diag.BAD_GRID_CONSTANT, "a grid-constant table needs at least one element")
    return array
