"""Kernels that read grid-constant tables with runtime indices.

`gather` writes out[b, t] = table[(b * 7 + t) % rows, t % cols] for a 2-D table,
so every thread reads an entry chosen at runtime.
"""
from typing import Annotated

import cutlass
import cutlass.cute as cute

import gcdsl

THREADS = 64

@gcdsl.kernel
def gather_kernel(table: Annotated[cute.Tensor, gcdsl.GridConstant], out: cute.Tensor):
    bidx, _, _ = cute.arch.block_idx()
    tidx, _, _ = cute.arch.thread_idx()
    rows, cols = table.shape
    out[bidx, tidx] = table[(bidx * 7 + tidx) % rows, tidx % cols]


@cute.jit
def gather(table: gcdsl.GridConstantTensor, out: cute.Tensor):
    gather_kernel(table, out).launch(grid=(cute.size(out, mode=[0]), 1, 1), block=(THREADS, 1, 1))


@gcdsl.kernel
def gather_cutlass_marker(table: cutlass.GridConstant[cute.Tensor], out: cute.Tensor):
    """The same, with cutlass's own spelling of the marker."""
    bidx, _, _ = cute.arch.block_idx()
    tidx, _, _ = cute.arch.thread_idx()
    out[bidx, tidx] = table[(bidx + tidx) % cute.size(table)]


@cute.jit
def gather_1d(table: gcdsl.GridConstantTensor, out: cute.Tensor):
    gather_cutlass_marker(table, out).launch(grid=(cute.size(out, mode=[0]), 1, 1), block=(THREADS, 1, 1))


def reference(table, blocks: int):
    """What `gather` writes, computed with NumPy."""
    import numpy as np

    rows, cols = table.shape
    b = np.arange(blocks)[:, None]
    t = np.arange(THREADS)[None, :]
    return table[(b * 7 + t) % rows, t % cols]


@cute.jit
def gather_from_global(table: cute.Tensor, out: cute.Tensor):
    """A global-memory tensor where the kernel wants a grid-constant table."""
    gather_kernel(table, out).launch(grid=(1, 1, 1), block=(THREADS, 1, 1))
