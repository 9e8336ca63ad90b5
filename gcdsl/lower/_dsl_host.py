"""Private CuTe DSL details of the host side of grid-constant tables (nvidia-cutlass-dsl 4.8.x).

The compiled host function takes a table as its address (an opaque `!llvm.ptr`)
and loads the bytes, by value, only where a kernel is launched with them. A
by-value array argument of the host function would cost LLVM compile time in
proportion to the table's size. Upgrading the DSL means revisiting this file
and tests/test_launch.py.
"""
from __future__ import annotations

from typing import Any

from cutlass._mlir.dialects import llvm

from . import _dsl


def address_type() -> Any:
    """The host function's parameter type for a table: an opaque pointer."""
    return llvm.PointerType.get()


def load_table(spec: Any, address: Any) -> Any:
    """The table's bytes at `address`, as the kernel parameter's by-value type."""
    return llvm.load(_dsl.table_param_type(spec), address)
