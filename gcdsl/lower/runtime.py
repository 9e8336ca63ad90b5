"""What desugared kernels call, bound as `__gcdsl__` in the kernel's globals.

Keep this namespace small: every name here shows up in `desugared_source`.
"""
import cutlass.cute as cute

from .descriptors import bind, copy_tensormap, descriptor_array, in_bounds, param_desc_ptr, prefetch_descriptor
from .grid_constant import GridConstantParam, param_space_ptr, table_view
from .lists import static_slice
from .tensor_lists import tensor_from_table, tensor_table

__all__ = [
    "GridConstantParam",
    "bind",
    "copy_tensormap",
    "cute",
    "descriptor_array",
    "in_bounds",
    "param_desc_ptr",
    "param_space_ptr",
    "prefetch_descriptor",
    "static_slice",
    "table_view",
    "tensor_from_table",
    "tensor_table",
]
