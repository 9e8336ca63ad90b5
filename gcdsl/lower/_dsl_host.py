"""Private CuTe DSL details of the host side of grid-constant tables (nvidia-cutlass-dsl 4.8.x).

The compiled host function takes a table as its address (an opaque `!llvm.ptr`)
and loads the bytes, by value, only where a kernel is launched with them. A
by-value array argument of the host function would cost LLVM compile time in
proportion to the table's size. Upgrading the DSL means revisiting this file
and tests/test_launch.py.
"""
from __future__ import annotations

from typing import Any

import cutlass.cute as cute
from cutlass._mlir import ir
from cutlass._mlir.dialects import arith, cuda, llvm, scf

from . import _dsl


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
    return llvm.load(_dsl.table_param_type(spec), address)


FINGERPRINT_OFFSET = 16  # the spec's fingerprint sits this many bytes before a table's data
_CUDA_ERROR_NOT_SUPPORTED = 801
