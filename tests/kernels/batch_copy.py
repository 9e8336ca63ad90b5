"""Batched TMA copy of N same-shape tensors, gmem -> smem -> gmem, one tile per CTA.

CTA `b` copies tile `b // N` of source `pick[b % N]` to the matching destination:
`pick` (an Int32 tensor in global memory) makes the descriptor index a runtime
value, so tests can drive it with `tile id mod N` or with a random permutation.

Two kernels with one job:
- `runtime_indexed_kernel` indexes the load and store atom lists with the runtime
  value: it needs `@gcdsl.kernel`;
- `constant_chain_kernel` is what CuTe DSL users write today, a compile-time
  loop of `if k == j` over every atom; it is plain CuTe DSL, so it compiles under
  either decorator (`deco.kernel`) and must give the same PTX under both.
"""
from typing import List

import cutlass
import cutlass.cute as cute
from cutlass.cute.nvgpu import cpasync

import gcdsl
from tests.kernels import deco

TILE = (64, 64)
DTYPE = cutlass.Float32
THREADS = 128


def _smem_layout():
    return cute.make_layout(TILE, stride=(TILE[1], 1))


def _tile_bytes():
    return TILE[0] * TILE[1] * DTYPE.width // 8


@gcdsl.kernel
def runtime_indexed_kernel(
    loads: List[cute.CopyAtom],
    stores: List[cute.CopyAtom],
    coords: cute.Tensor,
    pick: cute.Tensor,
    smem_layout: cute.Layout,
    n: cutlass.Constexpr,
):
    bidx, _, _ = cute.arch.block_idx()
    warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
    k = pick[bidx % n]
    tile = bidx // n
    if warp == 0:
        cpasync.prefetch_descriptor(loads[k])

    smem = cutlass.memory.SmemAllocator()
    mbar = smem.allocate_array(cutlass.Int64, 1)
    s_tile = smem.allocate_tensor(DTYPE, smem_layout, 128)
    g_tile = coords[((None, None), tile)]
    s_load, g_load = cpasync.tma_partition(
        loads[k], 0, cute.make_layout(1), cute.group_modes(s_tile, 0, 2), cute.group_modes(g_tile, 0, 2)
    )
    if warp == 0:
        with cute.arch.elect_one():
            cute.arch.mbarrier_init(mbar, 1)
            cute.arch.mbarrier_arrive_and_expect_tx(mbar, _tile_bytes())
        cute.arch.mbarrier_init_fence()
        cute.copy(loads[k], g_load, s_load, tma_bar_ptr=mbar)
    cute.arch.sync_threads()  # the barrier is initialised before anyone waits on it
    cute.arch.mbarrier_wait(mbar, 0)
    if warp == 0:
        s_store, g_store = cpasync.tma_partition(
            stores[k], 0, cute.make_layout(1), cute.group_modes(s_tile, 0, 2), cute.group_modes(g_tile, 0, 2)
        )
        with cute.arch.elect_one():  # DSL 4.8.1 issues a TMA store from every lane otherwise
            cute.copy(stores[k], s_store, g_store)
            cute.arch.cp_async_bulk_commit_group()
            cute.arch.cp_async_bulk_wait_group(0, read=True)


@deco.kernel
def constant_chain_kernel(
    loads: List[cute.CopyAtom],
    stores: List[cute.CopyAtom],
    coords: cute.Tensor,
    pick: cute.Tensor,
    smem_layout: cute.Layout,
    n: cutlass.Constexpr,
):
    bidx, _, _ = cute.arch.block_idx()
    warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
    k = pick[bidx % n]
    tile = bidx // n

    smem = cutlass.memory.SmemAllocator()
    mbar = smem.allocate_array(cutlass.Int64, 1)
    s_tile = smem.allocate_tensor(DTYPE, smem_layout, 128)
    g_tile = coords[((None, None), tile)]
    s_load, g_load = cpasync.tma_partition(
        loads[0], 0, cute.make_layout(1), cute.group_modes(s_tile, 0, 2), cute.group_modes(g_tile, 0, 2)
    )
    if warp == 0:
        with cute.arch.elect_one():
            cute.arch.mbarrier_init(mbar, 1)
            cute.arch.mbarrier_arrive_and_expect_tx(mbar, _tile_bytes())
        cute.arch.mbarrier_init_fence()
        for j in cutlass.range_constexpr(n):
            if k == j:
                cute.copy(loads[j], g_load, s_load, tma_bar_ptr=mbar)
    cute.arch.sync_threads()  # the barrier is initialised before anyone waits on it
    cute.arch.mbarrier_wait(mbar, 0)
    if warp == 0:
        s_store, g_store = cpasync.tma_partition(
            stores[0], 0, cute.make_layout(1), cute.group_modes(s_tile, 0, 2), cute.group_modes(g_tile, 0, 2)
        )
        with cute.arch.elect_one():
            for j in cutlass.range_constexpr(n):
                if k == j:
                    cute.copy(stores[j], s_store, g_store)
            cute.arch.cp_async_bulk_commit_group()
            cute.arch.cp_async_bulk_wait_group(0, read=True)


def _atoms(srcs, dsts, store_op=None):
    smem_layout = _smem_layout()
    store_op = store_op or cpasync.CopyBulkTensorTileS2GOp()
    loads = [cpasync.make_tiled_tma_atom(cpasync.CopyBulkTensorTileG2SOp(), s, smem_layout, TILE) for s in srcs]
    stores = [cpasync.make_tiled_tma_atom(store_op, d, smem_layout, TILE) for d in dsts]
    return [a for a, _ in loads], [a for a, _ in stores], cute.zipped_divide(loads[0][1], TILE)


@cute.jit
def batch_copy(srcs: List[cute.Tensor], dsts: List[cute.Tensor], pick: cute.Tensor):
    loads, stores, coords = _atoms(srcs, dsts)
    n = len(srcs)
    tiles = cute.size(coords, mode=[1])
    runtime_indexed_kernel(loads, stores, coords, pick, _smem_layout(), n).launch(
        grid=(tiles * n, 1, 1), block=(THREADS, 1, 1)
    )


@cute.jit
def batch_add(srcs: List[cute.Tensor], dsts: List[cute.Tensor], pick: cute.Tensor):
    """dst += src through TMA reduce-add stores: the same kernel, another store op."""
    loads, stores, coords = _atoms(srcs, dsts, cpasync.CopyReduceBulkTensorTileS2GOp())
    n = len(srcs)
    tiles = cute.size(coords, mode=[1])
    runtime_indexed_kernel(loads, stores, coords, pick, _smem_layout(), n).launch(
        grid=(tiles * n, 1, 1), block=(THREADS, 1, 1)
    )


@cute.jit
def batch_copy_constant_chain(srcs: List[cute.Tensor], dsts: List[cute.Tensor], pick: cute.Tensor):
    loads, stores, coords = _atoms(srcs, dsts)
    n = len(srcs)
    tiles = cute.size(coords, mode=[1])
    constant_chain_kernel(loads, stores, coords, pick, _smem_layout(), n).launch(
        grid=(tiles * n, 1, 1), block=(THREADS, 1, 1)
    )


def fake_args(n: int, shape=(256, 128)):
    fake = cute.runtime.make_fake_compact_tensor
    srcs = [fake(DTYPE, shape, stride_order=(1, 0), assumed_align=16) for _ in range(n)]
    dsts = [fake(DTYPE, shape, stride_order=(1, 0), assumed_align=16) for _ in range(n)]
    pick = fake(cutlass.Int32, (n,), assumed_align=4)
    return srcs, dsts, pick


@gcdsl.kernel(check_bounds=True)
def checked_kernel(loads: List[cute.CopyAtom], out: cute.Tensor, pick: cute.Tensor, smem_layout: cute.Layout):
    """A TMA load whose runtime index is range-checked on the device."""
    bidx, _, _ = cute.arch.block_idx()
    warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
    k = pick[bidx]
    smem = cutlass.memory.SmemAllocator()
    mbar = smem.allocate_array(cutlass.Int64, 1)
    if warp == 0:
        cpasync.prefetch_descriptor(loads[k])
        with cute.arch.elect_one():
            cute.arch.mbarrier_init(mbar, 1)
        cute.arch.mbarrier_init_fence()
    cute.arch.sync_threads()
    out[bidx] = k


@cute.jit
def checked(srcs: List[cute.Tensor], out: cute.Tensor, pick: cute.Tensor):
    smem_layout = _smem_layout()
    loads = [cpasync.make_tiled_tma_atom(cpasync.CopyBulkTensorTileG2SOp(), s, smem_layout, TILE)[0] for s in srcs]
    checked_kernel(loads, out, pick, smem_layout).launch(grid=(cute.size(pick), 1, 1), block=(THREADS, 1, 1))


@gcdsl.kernel
def crossed_kernel(
    loads: List[cute.CopyAtom],
    stores: List[cute.CopyAtom],
    coords: cute.Tensor,
    load_pick: cute.Tensor,
    store_pick: cute.Tensor,
    smem_layout: cute.Layout,
    n: cutlass.Constexpr,
):
    """CTA b copies tile b // n of source `load_pick[b % n]` to the same tile of destination
    `store_pick[b % n]`: loads and stores picked by different runtime indices, so a
    lowering that mixed up lists, entries or indices shows in the output."""
    bidx, _, _ = cute.arch.block_idx()
    warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
    load_k = load_pick[bidx % n]
    store_k = store_pick[bidx % n]
    tile = bidx // n

    smem = cutlass.memory.SmemAllocator()
    mbar = smem.allocate_array(cutlass.Int64, 1)
    s_tile = smem.allocate_tensor(DTYPE, smem_layout, 128)
    g_tile = coords[((None, None), tile)]
    s_load, g_load = cpasync.tma_partition(
        loads[load_k], 0, cute.make_layout(1), cute.group_modes(s_tile, 0, 2), cute.group_modes(g_tile, 0, 2)
    )
    if warp == 0:
        with cute.arch.elect_one():
            cute.arch.mbarrier_init(mbar, 1)
            cute.arch.mbarrier_arrive_and_expect_tx(mbar, _tile_bytes())
        cute.arch.mbarrier_init_fence()
        cute.copy(loads[load_k], g_load, s_load, tma_bar_ptr=mbar)
    cute.arch.sync_threads()
    cute.arch.mbarrier_wait(mbar, 0)
    if warp == 0:
        s_store, g_store = cpasync.tma_partition(
            stores[store_k], 0, cute.make_layout(1), cute.group_modes(s_tile, 0, 2), cute.group_modes(g_tile, 0, 2)
        )
        with cute.arch.elect_one():
            cute.copy(stores[store_k], s_store, g_store)
            cute.arch.cp_async_bulk_commit_group()
            cute.arch.cp_async_bulk_wait_group(0, read=True)


@cute.jit
def crossed_copy(srcs: List[cute.Tensor], dsts: List[cute.Tensor], load_pick: cute.Tensor, store_pick: cute.Tensor):
    loads, stores, coords = _atoms(srcs, dsts)
    n = len(srcs)
    tiles = cute.size(coords, mode=[1])
    crossed_kernel(loads, stores, coords, load_pick, store_pick, _smem_layout(), n).launch(
        grid=(tiles * n, 1, 1), block=(THREADS, 1, 1)
    )
