"""A grouped copy over tensors of different shapes: runtime-indexed atoms *and* tensor lists.

CTA b serves task b of a grid-constant table (group, tile row, tile column): it loads
that tile of source `group` by TMA through the group's own coordinate tensor
(`coords[g]`, a `List[cute.Tensor]` entry with the group's extent) and writes it
to `outs[g]` (a global-memory tensor list) with ordinary stores, clipped to the
group's extent, which is mostly not a multiple of the tile.
"""
from typing import Annotated, List

import cutlass
import cutlass.cute as cute
from cutlass.cute.nvgpu import cpasync

import gcdsl

TILE = (64, 64)
DTYPE = cutlass.Float32


@gcdsl.kernel
def grouped_kernel(
    tasks: Annotated[cute.Tensor, gcdsl.GridConstant],
    loads: List[cute.CopyAtom],
    coords: List[cute.Tensor],
    outs: List[cute.Tensor],
    smem_layout: cute.Layout,
):
    bidx, _, _ = cute.arch.block_idx()
    tidx, _, _ = cute.arch.thread_idx()
    warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
    g = tasks[bidx, 0]
    tile_r = tasks[bidx, 1]
    tile_c = tasks[bidx, 2]

    smem = cutlass.memory.SmemAllocator()
    mbar = smem.allocate_array(cutlass.Int64, 1)
    s_tile = smem.allocate_tensor(DTYPE, smem_layout, 128)
    g_tile = cute.zipped_divide(coords[g], TILE)[((None, None), (tile_r, tile_c))]
    s_part, g_part = cpasync.tma_partition(
        loads[g], 0, cute.make_layout(1), cute.group_modes(s_tile, 0, 2), cute.group_modes(g_tile, 0, 2)
    )
    if warp == 0:
        with cute.arch.elect_one():
            cute.arch.mbarrier_init(mbar, 1)
            cute.arch.mbarrier_arrive_and_expect_tx(mbar, TILE[0] * TILE[1] * DTYPE.width // 8)
        cute.arch.mbarrier_init_fence()
        cute.copy(loads[g], g_part, s_part, tma_bar_ptr=mbar)
    cute.arch.sync_threads()
    cute.arch.mbarrier_wait(mbar, 0)

    out = outs[g]
    rows = cute.size(out, mode=[0])
    cols = cute.size(out, mode=[1])
    row = tile_r * TILE[0] + tidx
    if row < rows:
        for c in cutlass.range(TILE[1]):
            col = tile_c * TILE[1] + c
            if col < cols:
                out[row, col] = s_tile[tidx, c]


@cute.jit
def grouped(tasks: gcdsl.GridConstantTensor, srcs: List[cute.Tensor], outs: List[cute.Tensor]):
    smem_layout = cute.make_layout(TILE, stride=(TILE[1], 1))
    atoms = [cpasync.make_tiled_tma_atom(cpasync.CopyBulkTensorTileG2SOp(), s, smem_layout, TILE) for s in srcs]
    grouped_kernel(tasks, [a for a, _ in atoms], [c for _, c in atoms], outs, smem_layout).launch(
        grid=(tasks.shape[0], 1, 1), block=(TILE[0], 1, 1)
    )


def make_problem(groups: int, seed: int = 0):
    """Shapes mostly not multiples of the tile, and the task table covering every tile."""
    import numpy as np

    rng = np.random.default_rng(seed)
    shapes = [(int(rng.integers(1, 300)), int(rng.integers(1, 40)) * 4) for _ in range(groups)]
    tasks = [(g, r, c) for g, (rows, cols) in enumerate(shapes)
             for r in range(-(-rows // TILE[0])) for c in range(-(-cols // TILE[1]))]
    return shapes, np.array(tasks, dtype=np.int32)
