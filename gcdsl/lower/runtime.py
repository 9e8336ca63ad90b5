"""What desugared kernels call, bound as `__gcdsl__` in the kernel's globals.

Keep this namespace small: every name here shows up in `desugared_source`.
"""
import types

import cutlass.cute

# The DSL's own decorator, taken when gcdsl is imported: the desugared text's
# `@__gcdsl__.cute.kernel` reaches it even where a program has replaced
# `cute.kernel` with `gcdsl.kernel` (the DSL recognises the decorator by its name).
cute = types.SimpleNamespace(kernel=cutlass.cute.kernel)

from .descriptors import bind, copy_tensormap, descriptor_array, in_bounds, param_desc_ptr, prefetch_descriptor
from .grid_constant import GridConstantParam, param_space_ptr, table_view
from .launch_context import end_of_trace
from .lists import static_slice
from .tensor_lists import tensor_from_table, tensor_table

__all__ = [
    "GridConstantParam",
    "bind",
    "copy_tensormap",
    "cute",
    "descriptor_array",
    "end_of_trace",
    "in_bounds",
    "param_desc_ptr",
    "param_space_ptr",
    "prefetch_descriptor",
    "static_slice",
    "table_view",
    "tensor_from_table",
    "tensor_table",
]
