"""A compile-time index past the end of a descriptor list (a Constexpr parameter)."""
from typing import List

import cutlass
import cutlass.cute as cute
from cutlass.cute.nvgpu import cpasync

import gcdsl
from tests.kernels import batch_copy as bc


@gcdsl.kernel
def prefetch_one(loads: List[cute.CopyAtom], which: cutlass.Constexpr):
    cpasync.prefetch_descriptor(loads[which])


@cute.jit
def prefetch(srcs: List[cute.Tensor], which: cutlass.Constexpr):
    loads = [cpasync.make_tiled_tma_atom(cpasync.CopyBulkTensorTileG2SOp(), s, bc._smem_layout(), bc.TILE)[0]
             for s in srcs]
    prefetch_one(loads, which).launch(grid=(1, 1, 1), block=(32, 1, 1))
