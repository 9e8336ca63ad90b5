"""What desugared kernels call, bound as `__gcdsl__` in the kernel's globals.

Keep this namespace small: every name here shows up in `desugared_source`.
"""
import cutlass.cute as cute

from .descriptors import prefetch_descriptor, runtime_atom
from .grid_constant import GridConstantParam, grid_constant_tensor
from .tensor_lists import TensorListParam, runtime_tensor

__all__ = [
    "GridConstantParam",
    "TensorListParam",
    "cute",
    "grid_constant_tensor",
    "prefetch_descriptor",
    "runtime_atom",
    "runtime_tensor",
]
