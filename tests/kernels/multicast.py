"""A runtime-indexed TMA multicast load: two CTAs of a cluster share each tile.

Each CTA writes the whole tile it received to `out[cta]`. Compiled in the PTX tests
(the multicast atom's descriptor, picked at runtime, must reach
`cp.async.bulk.tensor ... multicast::cluster` from parameter space) and run in the
GPU tests.
"""
from typing import List

import cutlass
import cutlass.cute as cute
from cutlass.cute.nvgpu import cpasync

import gcdsl

TILE = (64, 64)
DTYPE = cutlass.Float32
CLUSTER = 2


@gcdsl.kernel
def multicast_kernel(loads: List[cute.CopyAtom], coords: cute.Tensor, pick: cute.Tensor,
                     out: cute.Tensor, smem_layout: cute.Layout):
    bidx, _, _ = cute.arch.block_idx()
    tidx, _, _ = cute.arch.thread_idx()
    warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
    rank = cute.arch.make_warp_uniform(cute.arch.block_idx_in_cluster())
    k = pick[bidx // CLUSTER]

    smem = cutlass.memory.SmemAllocator()
    mbar = smem.allocate_array(cutlass.Int64, 1)
    s_tile = smem.allocate_tensor(DTYPE, smem_layout, 128)
    g_tile = coords[((None, None), bidx // CLUSTER)]
    s_part, g_part = cpasync.tma_partition(
        loads[k], rank, cute.make_layout(CLUSTER), cute.group_modes(s_tile, 0, 2), cute.group_modes(g_tile, 0, 2)
    )
    if warp == 0:
        with cute.arch.elect_one():
            cute.arch.mbarrier_init(mbar, 1)
            cute.arch.mbarrier_arrive_and_expect_tx(mbar, TILE[0] * TILE[1] * DTYPE.width // 8)
        cute.arch.mbarrier_init_fence()
    cute.arch.cluster_arrive()
    cute.arch.cluster_wait()
    if warp == 0:
        cute.copy(loads[k], g_part, s_part, tma_bar_ptr=mbar, mcast_mask=cutlass.Int16((1 << CLUSTER) - 1))
    cute.arch.mbarrier_wait(mbar, 0)
    for i in cutlass.range_constexpr(TILE[0] * TILE[1] // 128):  # the whole tile, 128 threads
        e = tidx + i * 128
        out[bidx, e % TILE[0], e // TILE[0]] = s_tile[e % TILE[0], e // TILE[0]]
    cute.arch.cluster_arrive()
    cute.arch.cluster_wait()


@cute.jit
def multicast(srcs: List[cute.Tensor], pick: cute.Tensor, out: cute.Tensor):
    smem_layout = cute.make_layout(TILE, stride=(TILE[1], 1))
    op = cpasync.CopyBulkTensorTileG2SMulticastOp()
    atoms = [cpasync.make_tiled_tma_atom(op, s, smem_layout, TILE, num_multicast=CLUSTER) for s in srcs]
    coords = cute.zipped_divide(atoms[0][1], TILE)
    multicast_kernel([a for a, _ in atoms], coords, pick, out, smem_layout).launch(
        grid=(cute.size(out, mode=[0]), 1, 1), block=(128, 1, 1), cluster=(CLUSTER, 1, 1)
    )
