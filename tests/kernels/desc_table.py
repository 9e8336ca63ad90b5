"""A TMA load whose descriptor comes from a host-encoded table in parameter space.

CTA b loads tile b // n of tensor pick[b % n] through descriptor pick[b % n] of the
table and writes the tile to out[b] with ordinary stores.
"""
from typing import Annotated

import cutlass
import cutlass.cute as cute
from cutlass.cute.nvgpu import cpasync

import gcdsl

TILE = (64, 32)
DTYPE = cutlass.Float32


@gcdsl.kernel
def table_load_kernel(
    descs: Annotated[cute.Tensor, gcdsl.GridConstant],
    template: cute.CopyAtom,
    coords: cute.Tensor,
    pick: cute.Tensor,
    out: cute.Tensor,
    smem_layout: cute.Layout,
    n: cutlass.Constexpr,
):
    bidx, _, _ = cute.arch.block_idx()
    tidx, _, _ = cute.arch.thread_idx()
    warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
    k = pick[bidx % n]

    smem = cutlass.memory.SmemAllocator()
    mbar = smem.allocate_array(cutlass.Int64, 1)
    s_tile = smem.allocate_tensor(DTYPE, smem_layout, 128)
    g_tile = coords[((None, None), bidx // n)]
    s_part, g_part = cpasync.tma_partition(
        template, 0, cute.make_layout(1), cute.group_modes(s_tile, 0, 2), cute.group_modes(g_tile, 0, 2)
    )
    if warp == 0:
        with cute.arch.elect_one():
            cute.arch.mbarrier_init(mbar, 1)
            cute.arch.mbarrier_arrive_and_expect_tx(mbar, TILE[0] * TILE[1] * DTYPE.width // 8)
        cute.arch.mbarrier_init_fence()
        cute.copy(template, g_part, s_part, tma_bar_ptr=mbar,
                  tma_desc_ptr=gcdsl.tma_desc_ptr(descs, k, template=template))
    cute.arch.sync_threads()
    cute.arch.mbarrier_wait(mbar, 0)
    for c in cutlass.range(TILE[1]):
        out[bidx, tidx, c] = s_tile[tidx, c]


@cute.jit
def table_load(descs: gcdsl.GridConstantTensor, first: cute.Tensor, pick: cute.Tensor, out: cute.Tensor):
    smem_layout = cute.make_layout(TILE, stride=(TILE[1], 1))
    template, coords = cpasync.make_tiled_tma_atom(cpasync.CopyBulkTensorTileG2SOp(), first, smem_layout, TILE)
    n = cute.size(pick)
    table_load_kernel(descs, template, cute.zipped_divide(coords, TILE), pick, out, smem_layout, n).launch(
        grid=(cute.size(out, mode=[0]), 1, 1), block=(TILE[0], 1, 1)
    )
