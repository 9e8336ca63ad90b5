"""Runtime indices inside dynamic control flow, shaped like real kernels: only `@gcdsl.kernel` compiles these.

- `gather_kernel`: a tensor list read as `tensors[g]` inside a `cutlass.range` loop,
  `g` loaded from global memory on every trip;
- `guarded_kernel`: a tensor list read inside a dynamic `if` on the runtime index;
- `scatter_kernel`: a tensor list stored to as `tensors[picks[s]][i] = v` inside a
  `cutlass.range` loop;
- `task_loop_kernel`: a persistent loop over tasks (`cutlass.range`) with a nested
  loop over tiles, loading `loads[k]` and storing `stores[k]` by TMA, `k` per task;
- `prefetch_ahead_kernel`: an atom carried through a loop, starting from `loads[0]`
  and replaced by the runtime-indexed next task's atom on every trip;
- `table_loop_kernel`: a grid-constant table read inside a `cutlass.range` loop.
"""
from typing import Annotated, List

import cutlass
import cutlass.cute as cute
from cutlass.cute.nvgpu import cpasync

import gcdsl

THREADS = 128
TILE = (32, 32)
DTYPE = cutlass.Float32


@gcdsl.kernel
def gather_kernel(tensors: List[cute.Tensor], picks: cute.Tensor, out: cute.Tensor, steps: cutlass.Int32):
    """out[b, t] = sum over s < steps of tensors[picks[s]][b, t]."""
    bidx, _, _ = cute.arch.block_idx()
    tidx, _, _ = cute.arch.thread_idx()
    acc = cutlass.Float32(0)
    for s in cutlass.range(steps):
        g = picks[s]
        acc += tensors[g][bidx, tidx]
    out[bidx, tidx] = acc


@gcdsl.kernel
def guarded_kernel(tensors: List[cute.Tensor], picks: cute.Tensor, out: cute.Tensor, limit: cutlass.Int32):
    """out[b, t] = tensors[picks[b]][b, t] where picks[b] < limit, else 0."""
    bidx, _, _ = cute.arch.block_idx()
    tidx, _, _ = cute.arch.thread_idx()
    g = picks[bidx]
    value = cutlass.Float32(0)
    if g < limit:
        value = tensors[g][bidx, tidx]
    out[bidx, tidx] = value


@gcdsl.kernel
def scatter_kernel(tensors: List[cute.Tensor], picks: cute.Tensor, out: cute.Tensor, steps: cutlass.Int32):
    """tensors[picks[s]][b, t] = out[b, t] for every s < steps."""
    bidx, _, _ = cute.arch.block_idx()
    tidx, _, _ = cute.arch.thread_idx()
    for s in cutlass.range(steps):
        tensors[picks[s]][bidx, tidx] = out[bidx, tidx]


@cute.jit
def scatter(tensors: List[cute.Tensor], picks: cute.Tensor, out: cute.Tensor, steps: cutlass.Int32):
    scatter_kernel(tensors, picks, out, steps).launch(grid=(cute.size(out, mode=[0]), 1, 1), block=(THREADS, 1, 1))


@cute.jit
def gather(tensors: List[cute.Tensor], picks: cute.Tensor, out: cute.Tensor, steps: cutlass.Int32):
    gather_kernel(tensors, picks, out, steps).launch(grid=(cute.size(out, mode=[0]), 1, 1), block=(THREADS, 1, 1))


@cute.jit
def guarded(tensors: List[cute.Tensor], picks: cute.Tensor, out: cute.Tensor, limit: cutlass.Int32):
    guarded_kernel(tensors, picks, out, limit).launch(grid=(cute.size(out, mode=[0]), 1, 1), block=(THREADS, 1, 1))


def tensor_args(n: int = 4, rows: int = 16):
    fake = cute.runtime.make_fake_compact_tensor
    tensors = [fake(DTYPE, (rows, THREADS), stride_order=(1, 0), assumed_align=16) for _ in range(n)]
    return (tensors, fake(cutlass.Int32, (rows,), assumed_align=4),
            fake(DTYPE, (rows, THREADS), stride_order=(1, 0), assumed_align=16), cutlass.Int32(n))


@gcdsl.kernel
def task_loop_kernel(loads: List[cute.CopyAtom], stores: List[cute.CopyAtom], coords: cute.Tensor,
                     tasks: cute.Tensor, smem_layout: cute.Layout, cols: cutlass.Int32):
    """CTA b runs tasks b, b + grid, ...; task t copies the first `cols` tiles of row tasks[t, 1]
    of tensor tasks[t, 0]."""
    bidx, _, _ = cute.arch.block_idx()
    grid, _, _ = cute.arch.grid_dim()
    warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
    smem = cutlass.memory.SmemAllocator()
    mbar = smem.allocate_array(cutlass.Int64, 1)
    s_tile = smem.allocate_tensor(DTYPE, smem_layout, 128)
    if warp == 0:
        with cute.arch.elect_one():
            cute.arch.mbarrier_init(mbar, 1)
        cute.arch.mbarrier_init_fence()
    cute.arch.sync_threads()
    phase = cutlass.Int32(0)
    for t in cutlass.range(bidx, cute.size(tasks, mode=[0]), grid):
        k = tasks[t, 0]
        row = tasks[t, 1]
        if warp == 0:
            cpasync.prefetch_descriptor(loads[k])
        for col in cutlass.range(cols, unroll=1):
            g_tile = coords[((None, None), (row, col))]
            s_load, g_load = cpasync.tma_partition(loads[k], 0, cute.make_layout(1), cute.group_modes(s_tile, 0, 2),
                                                   cute.group_modes(g_tile, 0, 2))
            if warp == 0:
                with cute.arch.elect_one():
                    cute.arch.mbarrier_arrive_and_expect_tx(mbar, TILE[0] * TILE[1] * DTYPE.width // 8)
                cute.copy(loads[k], g_load, s_load, tma_bar_ptr=mbar)
            cute.arch.mbarrier_wait(mbar, phase)
            phase = phase ^ 1
            if warp == 0:
                s_store, g_store = cpasync.tma_partition(stores[k], 0, cute.make_layout(1),
                                                         cute.group_modes(s_tile, 0, 2), cute.group_modes(g_tile, 0, 2))
                with cute.arch.elect_one():
                    cute.copy(stores[k], s_store, g_store)
                    cute.arch.cp_async_bulk_commit_group()
                    cute.arch.cp_async_bulk_wait_group(0, read=True)
            cute.arch.sync_threads()


@cute.jit
def task_loop(srcs: List[cute.Tensor], dsts: List[cute.Tensor], tasks: cute.Tensor, cols: cutlass.Int32):
    smem_layout = cute.make_layout(TILE, stride=(TILE[1], 1))
    loads = [cpasync.make_tiled_tma_atom(cpasync.CopyBulkTensorTileG2SOp(), s, smem_layout, TILE) for s in srcs]
    stores = [cpasync.make_tiled_tma_atom(cpasync.CopyBulkTensorTileS2GOp(), d, smem_layout, TILE)[0] for d in dsts]
    coords = cute.zipped_divide(loads[0][1], TILE)
    task_loop_kernel([a for a, _ in loads], stores, coords, tasks, smem_layout, cols).launch(
        grid=(8, 1, 1), block=(THREADS, 1, 1))


def task_loop_args(n: int = 6):
    fake = cute.runtime.make_fake_compact_tensor
    srcs = [fake(DTYPE, (128, 256), stride_order=(1, 0), assumed_align=16) for _ in range(n)]
    dsts = [fake(DTYPE, (128, 256), stride_order=(1, 0), assumed_align=16) for _ in range(n)]
    return srcs, dsts, fake(cutlass.Int32, (32, 2), stride_order=(1, 0), assumed_align=4), cutlass.Int32(8)


@gcdsl.kernel
def prefetch_ahead_kernel(loads: List[cute.CopyAtom], tasks: cute.Tensor, steps: cutlass.Int32):
    """Prefetch each task's descriptor one trip ahead: the atom lives across iterations."""
    warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
    following = loads[0]
    for t in cutlass.range(steps, unroll=1):
        if warp == 0:
            cpasync.prefetch_descriptor(following)
        following = loads[tasks[t + 1, 0]]


@cute.jit
def prefetch_ahead(srcs: List[cute.Tensor], tasks: cute.Tensor, steps: cutlass.Int32):
    smem_layout = cute.make_layout(TILE, stride=(TILE[1], 1))
    loads = [cpasync.make_tiled_tma_atom(cpasync.CopyBulkTensorTileG2SOp(), s, smem_layout, TILE)[0] for s in srcs]
    prefetch_ahead_kernel(loads, tasks, steps).launch(grid=(1, 1, 1), block=(THREADS, 1, 1))


def prefetch_ahead_args(n: int = 6):
    srcs, _, tasks, _ = task_loop_args(n)
    return srcs, tasks, cutlass.Int32(16)


@gcdsl.kernel
def table_loop_kernel(table: Annotated[cute.Tensor, gcdsl.GridConstant], out: cute.Tensor, steps: cutlass.Int32):
    """out[t] = sum over s < steps of table[s % rows, t % cols]: a table walked by a dynamic loop."""
    tidx, _, _ = cute.arch.thread_idx()
    rows = cute.size(table, mode=[0])
    cols = cute.size(table, mode=[1])
    acc = cutlass.Int32(0)
    for s in cutlass.range(steps):
        acc += table[s % rows, tidx % cols]
    out[tidx] = acc


@cute.jit
def table_loop(table: gcdsl.GridConstantTensor, out: cute.Tensor, steps: cutlass.Int32):
    table_loop_kernel(table, out, steps).launch(grid=(1, 1, 1), block=(THREADS, 1, 1))


def table_loop_args():
    import numpy as np

    fake = cute.runtime.make_fake_compact_tensor
    table = gcdsl.grid_constant(np.arange(48, dtype=np.int32).reshape(12, 4))
    return table, fake(cutlass.Int32, (THREADS,), assumed_align=4), cutlass.Int32(40)
