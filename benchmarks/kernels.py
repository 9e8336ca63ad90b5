"""Benchmark kernels: one job per workload, one kernel per way of picking a TMA descriptor.

Each workload's staging, barriers, pipeline and epilogue are `@cute.jit` helpers that
every variant calls (`_w1_*`, `_w2_*`); a variant's kernel holds only its loop and the
lines that pick the descriptor. The selection stays in the kernel's own body because
`@gcdsl.kernel` lowers `loads[k]` there and nowhere else. The helpers inline at trace
time: the PTX of every variant is byte-identical to writing each kernel out in full
(check with `run.py --compile-check --ptx-dir` and `compare_ptx.py`).

Variants (the same job, the same bytes, the same launch shape; only the descriptor choice differs):

- ``gcdsl``: `@gcdsl.kernel`, ``loads[k]`` with a runtime ``k``; the N descriptors are N
  consecutive 128-byte grid-constant kernel parameters, picked at ``cvta.param + k * 128``;
- ``floor``: one descriptor over all sources stacked into one tensor, the source chosen by
  the TMA coordinate (no descriptor choice at all: the lower bound);
- ``chain``: plain CuTe DSL, ``for j in range_constexpr(n): if k == j: cute.copy(loads[j], ...)``;
- ``gmem``: descriptors in a global-memory table (filled once by ``fill_desc_table_kernel``),
  selected by pointer: ``fence.proxy.tensormap::generic.acquire`` then
  ``cute.copy(template, ..., tma_desc_ptr=table + k * 128)``.

W1 (latency): each CTA issues ``k_loads`` *dependent* TMA loads of a 64x64 fp16 tile into one
shared-memory buffer (one mbarrier, its phase flipping), XORs every tile into registers
and finally writes the XOR of all its tiles: bit-exact proof that every load read the
right tile of the right tensor. Load ``j`` of CTA ``b`` reads task ``tasks[b * k_loads + j]``
= ``(source << 2) | (tile_row << 1) | tile_col``, staged into shared memory up front.

W2 (bandwidth): a persistent grouped copy gmem -> smem -> gmem by TMA of N row-major
tensors of mixed row counts; CTA ``b`` copies tiles ``b, b + grid, ...`` of a global tile
list ``tasks`` (``(source << 20) | (tile_row << 8) | tile_col``) through ``W2_STAGES``
shared-memory stages, loads and stores both picked by the runtime index.

This file must stay a real .py file: `@gcdsl.kernel` re-reads the kernel source.
"""
from typing import Any, List, NamedTuple

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass.cute.nvgpu import cpasync
from cutlass.tensor_utils import TensorMapManager, TensorMapUpdateMode

import gcdsl

DTYPE = cutlass.Float16
DESC_BYTES = 128

# ---------------------------------------------------------------------------------------
# W1: dependent loads of small tiles
# ---------------------------------------------------------------------------------------
W1_TILE = (64, 64)
W1_SRC_SHAPE = (128, 128)  # 2 x 2 tiles per source; every source lives in L2
W1_THREADS = 128
W1_TILE_BYTES = W1_TILE[0] * W1_TILE[1] * DTYPE.width // 8
W1_WORDS = W1_TILE_BYTES // 4  # the tile as 2048 Int32 words
W1_MAX_LOADS = 1024  # tasks staged in shared memory: 4 KiB


def _w1_words_layout():
    """Tile words per thread: thread t owns words c * 512 + t * 4 + v (v < 4, c < 4).

    Consecutive threads read consecutive 16-byte chunks, so shared-memory reads are
    conflict-free 128-bit loads; the output uses the same map, so out[b] is the XOR
    of the tiles in plain row-major order.
    """
    return cute.make_layout(((4, 4), W1_THREADS), stride=((1, 4 * W1_THREADS), 4))


def _w1_smem_layout():
    return cute.make_layout(W1_TILE, stride=(W1_TILE[1], 1))


def gmem_desc_ptr(table: cute.Tensor, index, space=cute.AddressSpace.generic):
    """Pointer to descriptor ``index`` of a 128-byte-strided table in global memory.

    Typed as `TensorMapManager.get_tensormap_ptr` types it: a tiled-TMA-descriptor
    pointer, 128-byte aligned; generic for `tma_desc_ptr=`, gmem for `copy_tensormap`.
    """
    address = table.iterator.toint() + cutlass.Int64(index) * DESC_BYTES
    raw = cute.make_ptr(cutlass.Int8, address, cute.AddressSpace.gmem, assumed_align=DESC_BYTES)
    return TensorMapManager(TensorMapUpdateMode.GMEM, DESC_BYTES).get_tensormap_ptr(
        raw, space
    )


class _W1Chain(NamedTuple):
    """What every W1 kernel sets up before its chain of loads, and uses in it."""

    bidx: Any
    tidx: Any
    warp: Any
    mbar: Any  # the one mbarrier; its phase flips with every load
    s_tasks: Any  # this CTA's tasks, staged in shared memory
    s_part: Any  # the shared-memory tile, as the TMA sees it
    g_part: Any  # the source tiles, as the TMA sees them: (tile, (tile row, tile col))
    s_words: Any  # the shared-memory tile as Int32 words, per thread
    acc: Any  # this thread's XOR of every tile so far


@cute.jit
def _w1_start(template: cute.CopyAtom, coords: cute.Tensor, tasks: cute.Tensor, k_loads: cutlass.Int32):
    """Shared memory, both TMA views of the tile, the staged tasks and an armed barrier.

    `template` only gives the partitioning (tile shape and layout); the variants pick
    the descriptor of each load themselves.
    """
    bidx, _, _ = cute.arch.block_idx()
    tidx, _, _ = cute.arch.thread_idx()
    warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())

    smem = cutlass.memory.SmemAllocator()
    mbar = smem.allocate_array(cutlass.Int64, 1)
    s_tile = smem.allocate_tensor(DTYPE, _w1_smem_layout(), 128)
    s_tasks = smem.allocate_tensor(cutlass.Int32, cute.make_layout(W1_MAX_LOADS), 16)
    s_part, g_part = cpasync.tma_partition(
        template, 0, cute.make_layout(1), cute.group_modes(s_tile, 0, 2), coords
    )
    s_words = cute.make_tensor(cute.recast_ptr(s_tile.iterator, dtype=cutlass.Int32), _w1_words_layout())
    acc = cute.make_rmem_tensor(cute.make_layout(((4, 4),), stride=((1, 4),)), cutlass.Int32)
    acc.fill(0)

    for i in cutlass.range(tidx, k_loads, W1_THREADS, unroll=1):
        s_tasks[i] = tasks[bidx * k_loads + i]
    if warp == 0:
        with cute.arch.elect_one():
            cute.arch.mbarrier_init(mbar, 1)
        cute.arch.mbarrier_init_fence()
    cute.arch.sync_threads()
    return _W1Chain(bidx, tidx, warp, mbar, s_tasks, s_part, g_part, s_words, acc)


def _w1_tile(task):
    """(tile row, tile col) of a packed W1 task `(source << 2) | (row << 1) | col`."""
    return (task >> 1) & 1, task & 1


@cute.jit
def _w1_expect_tile(mbar):
    """Arm the barrier for one tile's bytes (warp 0, before it issues the load)."""
    with cute.arch.elect_one():
        cute.arch.mbarrier_arrive_and_expect_tx(mbar, W1_TILE_BYTES)


@cute.jit
def _w1_consume(w: _W1Chain, phase: cutlass.Int32) -> cutlass.Int32:
    """Wait for the tile, XOR it in; every thread has read it before the next load lands."""
    cute.arch.mbarrier_wait(w.mbar, phase)
    w.acc.store(w.acc.load() ^ w.s_words[(None, w.tidx)].load())
    cute.arch.sync_threads()
    return phase ^ 1


@cute.jit
def _w1_finish(w: _W1Chain, out: cute.Tensor):
    """out[b] = the XOR of every tile CTA b loaded, in the tile's row-major order."""
    g_words = cute.make_tensor(out.iterator + w.bidx * W1_WORDS, _w1_words_layout())
    g_words[(None, w.tidx)].store(w.acc.load())


# The four W1 kernels differ only in how load j picks its descriptor (the lines under
# `if w.warp == 0:`); the rest is the helpers above.
@gcdsl.kernel
def w1_gcdsl_kernel(
    loads: List[cute.CopyAtom],
    coords: cute.Tensor,  # ((64, 64), (2, 2)) TMA coordinates of one source
    tasks: cute.Tensor,  # Int32 [grid * k_loads]
    out: cute.Tensor,  # Int32 [grid * 2048]
    k_loads: cutlass.Int32,
):
    w = _w1_start(loads[0], coords, tasks, k_loads)
    phase = cutlass.Int32(0)
    for j in cutlass.range(k_loads, unroll=1):
        task = w.s_tasks[j]
        k = task >> 2
        if w.warp == 0:
            _w1_expect_tile(w.mbar)
            cute.copy(loads[k], w.g_part[(None, _w1_tile(task))], w.s_part, tma_bar_ptr=w.mbar)
        phase = _w1_consume(w, phase)
    _w1_finish(w, out)


@cute.kernel
def w1_floor_kernel(
    load: cute.CopyAtom,  # one descriptor over all sources stacked: (n * 128, 128)
    coords: cute.Tensor,  # ((64, 64), (2 * n, 2))
    tasks: cute.Tensor,
    out: cute.Tensor,
    k_loads: cutlass.Int32,
):
    w = _w1_start(load, coords, tasks, k_loads)
    phase = cutlass.Int32(0)
    for j in cutlass.range(k_loads, unroll=1):
        task = w.s_tasks[j]
        k = task >> 2
        if w.warp == 0:
            _w1_expect_tile(w.mbar)
            row, col = _w1_tile(task)
            cute.copy(load, w.g_part[(None, (k * 2 + row, col))], w.s_part, tma_bar_ptr=w.mbar)  # source k's rows
        phase = _w1_consume(w, phase)
    _w1_finish(w, out)


@cute.kernel
def w1_chain_kernel(
    loads: List[cute.CopyAtom],
    coords: cute.Tensor,
    tasks: cute.Tensor,
    out: cute.Tensor,
    k_loads: cutlass.Int32,
    n: cutlass.Constexpr,
):
    w = _w1_start(loads[0], coords, tasks, k_loads)
    phase = cutlass.Int32(0)
    for j in cutlass.range(k_loads, unroll=1):
        task = w.s_tasks[j]
        k = task >> 2
        if w.warp == 0:
            _w1_expect_tile(w.mbar)
            g_tile = w.g_part[(None, _w1_tile(task))]
            for jj in cutlass.range_constexpr(n):
                if k == jj:
                    cute.copy(loads[jj], g_tile, w.s_part, tma_bar_ptr=w.mbar)
        phase = _w1_consume(w, phase)
    _w1_finish(w, out)


@cute.kernel
def w1_gmem_kernel(
    template: cute.CopyAtom,  # compile-time type only; its own descriptor is never used
    table: cute.Tensor,  # Uint8 [n * 128]: the descriptors, in global memory
    coords: cute.Tensor,
    tasks: cute.Tensor,
    out: cute.Tensor,
    k_loads: cutlass.Int32,
):
    w = _w1_start(template, coords, tasks, k_loads)
    phase = cutlass.Int32(0)
    for j in cutlass.range(k_loads, unroll=1):
        task = w.s_tasks[j]
        k = task >> 2
        if w.warp == 0:
            desc = gmem_desc_ptr(table, k)
            cpasync.fence_tma_desc_acquire(desc)
            _w1_expect_tile(w.mbar)
            cute.copy(template, w.g_part[(None, _w1_tile(task))], w.s_part, tma_bar_ptr=w.mbar, tma_desc_ptr=desc)
        phase = _w1_consume(w, phase)
    _w1_finish(w, out)


def _w1_load_atoms(srcs):
    g2s = cpasync.CopyBulkTensorTileG2SOp()
    return [cpasync.make_tiled_tma_atom(g2s, s, _w1_smem_layout(), W1_TILE) for s in srcs]


def _w1_launch(kernel, tasks: cute.Tensor, k_loads: cutlass.Int32, stream):
    kernel.launch(grid=(cute.size(tasks) // k_loads, 1, 1), block=(W1_THREADS, 1, 1), stream=stream)


@cute.jit
def w1_gcdsl(srcs: List[cute.Tensor], tasks: cute.Tensor, out: cute.Tensor, k_loads: cutlass.Int32,
             stream: cuda.CUstream):
    atoms = _w1_load_atoms(srcs)
    coords = cute.zipped_divide(atoms[0][1], W1_TILE)
    _w1_launch(w1_gcdsl_kernel([a for a, _ in atoms], coords, tasks, out, k_loads), tasks, k_loads, stream)


@cute.jit
def w1_chain(srcs: List[cute.Tensor], tasks: cute.Tensor, out: cute.Tensor, k_loads: cutlass.Int32,
             stream: cuda.CUstream):
    atoms = _w1_load_atoms(srcs)
    coords = cute.zipped_divide(atoms[0][1], W1_TILE)
    kernel = w1_chain_kernel([a for a, _ in atoms], coords, tasks, out, k_loads, len(srcs))
    _w1_launch(kernel, tasks, k_loads, stream)


@cute.jit
def w1_floor(stacked: cute.Tensor, tasks: cute.Tensor, out: cute.Tensor, k_loads: cutlass.Int32,
             stream: cuda.CUstream):
    (atom, tma_tensor), = _w1_load_atoms([stacked])
    coords = cute.zipped_divide(tma_tensor, W1_TILE)
    _w1_launch(w1_floor_kernel(atom, coords, tasks, out, k_loads), tasks, k_loads, stream)


@cute.jit
def w1_gmem(src0: cute.Tensor, table: cute.Tensor, tasks: cute.Tensor, out: cute.Tensor,
            k_loads: cutlass.Int32, stream: cuda.CUstream):
    (template, tma_tensor), = _w1_load_atoms([src0])
    coords = cute.zipped_divide(tma_tensor, W1_TILE)
    _w1_launch(w1_gmem_kernel(template, table, coords, tasks, out, k_loads), tasks, k_loads, stream)


# ---------------------------------------------------------------------------------------
# Descriptor table in global memory (the `gmem` variant), filled once, outside the timing
# ---------------------------------------------------------------------------------------
@cute.kernel
def fill_desc_table_kernel(atoms: List[cute.CopyAtom], table: cute.Tensor):
    tidx, _, _ = cute.arch.thread_idx()
    if tidx == 0:
        for j in cutlass.range_constexpr(len(atoms)):
            cpasync.copy_tensormap(atoms[j], gmem_desc_ptr(table, j, cute.AddressSpace.gmem))
        cpasync.fence_tma_desc_release()


def _fill(atoms, table: cute.Tensor, stream):
    fill_desc_table_kernel(atoms, table).launch(grid=(1, 1, 1), block=(32, 1, 1), stream=stream)


@cute.jit
def fill_w1_load_table(srcs: List[cute.Tensor], table: cute.Tensor, stream: cuda.CUstream):
    """table[j * 128 : (j + 1) * 128] = the W1 load descriptor the DSL builds for srcs[j]."""
    _fill([a for a, _ in _w1_load_atoms(srcs)], table, stream)


@cute.jit
def fill_w2_load_table(srcs: List[cute.Tensor], table: cute.Tensor, stream: cuda.CUstream):
    _fill([a for a, _ in _w2_atoms(srcs, cpasync.CopyBulkTensorTileG2SOp())], table, stream)


@cute.jit
def fill_w2_store_table(dsts: List[cute.Tensor], table: cute.Tensor, stream: cuda.CUstream):
    _fill([a for a, _ in _w2_atoms(dsts, cpasync.CopyBulkTensorTileS2GOp())], table, stream)


# ---------------------------------------------------------------------------------------
# W2: persistent grouped copy gmem -> smem -> gmem
# ---------------------------------------------------------------------------------------
W2_TILE = (128, 128)  # 32 KiB of fp16 per stage
W2_STAGES = 6  # 192 KiB of shared memory: one CTA per SM, up to 5 loads in flight
W2_THREADS = 32  # one warp drives the pipeline
W2_TILE_BYTES = W2_TILE[0] * W2_TILE[1] * DTYPE.width // 8
W2_MAX_N = 126  # loads + stores = 2N descriptors; 2 * 126 * 128 = 32,256 of 32,764 parameter bytes


def _w2_smem_layout():
    """(128, 128, stages), row-major tiles, 128-byte-aligned, no swizzle (a plain copy)."""
    return cute.make_layout((*W2_TILE, W2_STAGES), stride=(W2_TILE[1], 1, W2_TILE[0] * W2_TILE[1]))


def _w2_atoms(tensors, op):
    one_stage = cute.make_layout(W2_TILE, stride=(W2_TILE[1], 1))
    return [cpasync.make_tiled_tma_atom(op, t, one_stage, W2_TILE) for t in tensors]


def _w2_unpack(task):
    """(source, tile row, tile col) of a packed W2 task."""
    return task >> 20, (task >> 8) & 0xFFF, task & 0xFF


class _W2Pipeline(NamedTuple):
    """What every W2 kernel sets up before its pipeline, and uses in it."""

    bidx: Any
    grid: Any
    full: Any  # one mbarrier per stage: the stage's tile has landed
    s_load: Any  # the stages, as TMA loads see them: (tile, stage)
    g_load: Any  # the source tiles, as TMA loads see them: (tile, (tile row, tile col))
    s_store: Any  # the same for the stores
    g_store: Any
    mine: Any  # how many tiles this CTA copies: bidx, bidx + grid, ...


@cute.jit
def _w2_start(template_load: cute.CopyAtom, template_store: cute.CopyAtom, coords: cute.Tensor,
              tasks: cute.Tensor, smem_layout: cute.Layout):
    """Shared memory, both partitions, this CTA's tile count and initialised barriers.

    The templates only give the partitioning; the variants pick each copy's descriptor.
    """
    bidx, _, _ = cute.arch.block_idx()
    grid, _, _ = cute.arch.grid_dim()
    smem = cutlass.memory.SmemAllocator()
    full = smem.allocate_array(cutlass.Int64, W2_STAGES)
    s_buf = smem.allocate_tensor(DTYPE, smem_layout, 1024)
    s_load, g_load = cpasync.tma_partition(
        template_load, 0, cute.make_layout(1), cute.group_modes(s_buf, 0, 2), coords
    )
    s_store, g_store = cpasync.tma_partition(
        template_store, 0, cute.make_layout(1), cute.group_modes(s_buf, 0, 2), coords
    )
    n_tiles = cute.size(tasks)
    mine = (n_tiles - bidx + grid - 1) // grid  # tiles bidx, bidx + grid, ...
    with cute.arch.elect_one():
        for s in cutlass.range_constexpr(W2_STAGES):
            cute.arch.mbarrier_init(full + s, 1)
    cute.arch.mbarrier_init_fence()
    cute.arch.sync_warp()
    return _W2Pipeline(bidx, grid, full, s_load, g_load, s_store, g_store, mine)


@cute.jit
def _w2_expect_tile(full, stage):
    """Arm stage `stage`'s barrier for one tile's bytes, before its load is issued."""
    with cute.arch.elect_one():
        cute.arch.mbarrier_arrive_and_expect_tx(full + stage, W2_TILE_BYTES)


@cute.jit
def _w2_landed(p: _W2Pipeline, tasks: cute.Tensor, t):
    """Tile t of this CTA has landed: its stage, its task, and the task that refills the stage.

    Returns (stage, (source, tile row, tile col), refill, ahead): `refill` is the tile
    that goes where tile t - 1 was, `ahead` its packed task.
    """
    refill = t + W2_STAGES - 1
    ahead = tasks[p.bidx + cutlass.min(refill, p.mine - 1) * p.grid]
    stage = t % W2_STAGES
    task = _w2_unpack(tasks[p.bidx + t * p.grid])
    cute.arch.mbarrier_wait(p.full + stage, (t // W2_STAGES) % 2)
    return stage, task, refill, ahead


@cute.jit
def _w2_free_for_refill(ahead, refill):
    """Wait until the store of tile t - 1 has left shared memory: (source, row, col, stage) to load next."""
    cute.arch.cp_async_bulk_wait_group(1, read=True)
    k2, r2, c2 = _w2_unpack(ahead)
    return k2, r2, c2, refill % W2_STAGES


# The four W2 kernels share the pipeline above and differ only in how each load and
# store picks its descriptor: the `cute.copy` lines and what precedes them.
@gcdsl.kernel
def w2_gcdsl_kernel(
    loads: List[cute.CopyAtom],
    stores: List[cute.CopyAtom],
    coords: cute.Tensor,  # ((128, 128), (row tiles, col tiles)) of the largest tensor
    tasks: cute.Tensor,  # Int32 [tiles]
    smem_layout: cute.Layout,
):
    p = _w2_start(loads[0], stores[0], coords, tasks, smem_layout)
    for t in cutlass.range(cutlass.min(p.mine, W2_STAGES), unroll=1):  # prologue: fill every stage
        k, r, c = _w2_unpack(tasks[p.bidx + t * p.grid])
        _w2_expect_tile(p.full, t)
        cute.copy(loads[k], p.g_load[(None, (r, c))], p.s_load[(None, t)], tma_bar_ptr=p.full + t)

    for t in cutlass.range(p.mine, unroll=1):
        stage, (k, r, c), refill, ahead = _w2_landed(p, tasks, t)
        with cute.arch.elect_one():  # a TMA store is issued by every thread that reaches it
            cute.copy(stores[k], p.s_store[(None, stage)], p.g_store[(None, (r, c))])
        cute.arch.cp_async_bulk_commit_group()
        if t >= 1 and refill < p.mine:
            k2, r2, c2, s2 = _w2_free_for_refill(ahead, refill)
            _w2_expect_tile(p.full, s2)
            cute.copy(loads[k2], p.g_load[(None, (r2, c2))], p.s_load[(None, s2)], tma_bar_ptr=p.full + s2)
    cute.arch.cp_async_bulk_wait_group(0, read=True)


@cute.kernel
def w2_floor_kernel(
    load: cute.CopyAtom,  # over the stacked sources: (total rows, cols)
    store: cute.CopyAtom,  # over the stacked destinations
    coords: cute.Tensor,
    tasks: cute.Tensor,  # source field 0, tile row counted in the stack
    smem_layout: cute.Layout,
):
    p = _w2_start(load, store, coords, tasks, smem_layout)
    for t in cutlass.range(cutlass.min(p.mine, W2_STAGES), unroll=1):
        _, r, c = _w2_unpack(tasks[p.bidx + t * p.grid])
        _w2_expect_tile(p.full, t)
        cute.copy(load, p.g_load[(None, (r, c))], p.s_load[(None, t)], tma_bar_ptr=p.full + t)

    for t in cutlass.range(p.mine, unroll=1):
        stage, (_, r, c), refill, ahead = _w2_landed(p, tasks, t)
        with cute.arch.elect_one():
            cute.copy(store, p.s_store[(None, stage)], p.g_store[(None, (r, c))])
        cute.arch.cp_async_bulk_commit_group()
        if t >= 1 and refill < p.mine:
            _, r2, c2, s2 = _w2_free_for_refill(ahead, refill)
            _w2_expect_tile(p.full, s2)
            cute.copy(load, p.g_load[(None, (r2, c2))], p.s_load[(None, s2)], tma_bar_ptr=p.full + s2)
    cute.arch.cp_async_bulk_wait_group(0, read=True)


@cute.kernel
def w2_chain_kernel(
    loads: List[cute.CopyAtom],
    stores: List[cute.CopyAtom],
    coords: cute.Tensor,
    tasks: cute.Tensor,
    smem_layout: cute.Layout,
    n: cutlass.Constexpr,
):
    p = _w2_start(loads[0], stores[0], coords, tasks, smem_layout)
    for t in cutlass.range(cutlass.min(p.mine, W2_STAGES), unroll=1):
        k, r, c = _w2_unpack(tasks[p.bidx + t * p.grid])
        _w2_expect_tile(p.full, t)
        g_tile = p.g_load[(None, (r, c))]
        s_tile = p.s_load[(None, t)]
        for j in cutlass.range_constexpr(n):
            if k == j:
                cute.copy(loads[j], g_tile, s_tile, tma_bar_ptr=p.full + t)

    for t in cutlass.range(p.mine, unroll=1):
        stage, (k, r, c), refill, ahead = _w2_landed(p, tasks, t)
        s_tile = p.s_store[(None, stage)]
        g_tile = p.g_store[(None, (r, c))]
        with cute.arch.elect_one():
            for j in cutlass.range_constexpr(n):
                if k == j:
                    cute.copy(stores[j], s_tile, g_tile)
        cute.arch.cp_async_bulk_commit_group()
        if t >= 1 and refill < p.mine:
            k2, r2, c2, s2 = _w2_free_for_refill(ahead, refill)
            _w2_expect_tile(p.full, s2)
            g_next = p.g_load[(None, (r2, c2))]
            s_next = p.s_load[(None, s2)]
            for j in cutlass.range_constexpr(n):
                if k2 == j:
                    cute.copy(loads[j], g_next, s_next, tma_bar_ptr=p.full + s2)
    cute.arch.cp_async_bulk_wait_group(0, read=True)


@cute.kernel
def w2_gmem_kernel(
    template_load: cute.CopyAtom,
    template_store: cute.CopyAtom,
    load_table: cute.Tensor,  # Uint8 [n * 128]
    store_table: cute.Tensor,
    coords: cute.Tensor,
    tasks: cute.Tensor,
    smem_layout: cute.Layout,
):
    p = _w2_start(template_load, template_store, coords, tasks, smem_layout)
    for t in cutlass.range(cutlass.min(p.mine, W2_STAGES), unroll=1):
        k, r, c = _w2_unpack(tasks[p.bidx + t * p.grid])
        desc = gmem_desc_ptr(load_table, k)
        cpasync.fence_tma_desc_acquire(desc)
        _w2_expect_tile(p.full, t)
        cute.copy(template_load, p.g_load[(None, (r, c))], p.s_load[(None, t)], tma_bar_ptr=p.full + t,
                  tma_desc_ptr=desc)

    for t in cutlass.range(p.mine, unroll=1):
        stage, (k, r, c), refill, ahead = _w2_landed(p, tasks, t)
        out_desc = gmem_desc_ptr(store_table, k)
        cpasync.fence_tma_desc_acquire(out_desc)
        with cute.arch.elect_one():
            cute.copy(template_store, p.s_store[(None, stage)], p.g_store[(None, (r, c))], tma_desc_ptr=out_desc)
        cute.arch.cp_async_bulk_commit_group()
        if t >= 1 and refill < p.mine:
            k2, r2, c2, s2 = _w2_free_for_refill(ahead, refill)
            desc = gmem_desc_ptr(load_table, k2)
            cpasync.fence_tma_desc_acquire(desc)
            _w2_expect_tile(p.full, s2)
            cute.copy(template_load, p.g_load[(None, (r2, c2))], p.s_load[(None, s2)], tma_bar_ptr=p.full + s2,
                      tma_desc_ptr=desc)
    cute.arch.cp_async_bulk_wait_group(0, read=True)


def _largest(tensors) -> int:
    """Index of the tensor with the most rows (shapes are static here), for the coordinate tensor."""
    rows = [t.shape[0] for t in tensors]
    if all(isinstance(r, int) for r in rows):
        return max(range(len(rows)), key=rows.__getitem__)
    return 0


@cute.jit
def w2_gcdsl(srcs: List[cute.Tensor], dsts: List[cute.Tensor], tasks: cute.Tensor, grid: cutlass.Int32,
             stream: cuda.CUstream):
    loads = _w2_atoms(srcs, cpasync.CopyBulkTensorTileG2SOp())
    stores = _w2_atoms(dsts, cpasync.CopyBulkTensorTileS2GOp())
    coords = cute.zipped_divide(loads[_largest(srcs)][1], W2_TILE)
    w2_gcdsl_kernel([a for a, _ in loads], [a for a, _ in stores], coords, tasks, _w2_smem_layout()).launch(
        grid=(grid, 1, 1), block=(W2_THREADS, 1, 1), stream=stream
    )


@cute.jit
def w2_chain(srcs: List[cute.Tensor], dsts: List[cute.Tensor], tasks: cute.Tensor, grid: cutlass.Int32,
             stream: cuda.CUstream):
    loads = _w2_atoms(srcs, cpasync.CopyBulkTensorTileG2SOp())
    stores = _w2_atoms(dsts, cpasync.CopyBulkTensorTileS2GOp())
    coords = cute.zipped_divide(loads[_largest(srcs)][1], W2_TILE)
    kernel = w2_chain_kernel(
        [a for a, _ in loads], [a for a, _ in stores], coords, tasks, _w2_smem_layout(), len(srcs)
    )
    kernel.launch(grid=(grid, 1, 1), block=(W2_THREADS, 1, 1), stream=stream)


@cute.jit
def w2_floor(src: cute.Tensor, dst: cute.Tensor, tasks: cute.Tensor, grid: cutlass.Int32,
             stream: cuda.CUstream):
    (load, tma_tensor), = _w2_atoms([src], cpasync.CopyBulkTensorTileG2SOp())
    (store, _), = _w2_atoms([dst], cpasync.CopyBulkTensorTileS2GOp())
    coords = cute.zipped_divide(tma_tensor, W2_TILE)
    w2_floor_kernel(load, store, coords, tasks, _w2_smem_layout()).launch(
        grid=(grid, 1, 1), block=(W2_THREADS, 1, 1), stream=stream
    )


@cute.jit
def w2_gmem(src_big: cute.Tensor, dst_big: cute.Tensor, load_table: cute.Tensor, store_table: cute.Tensor,
            tasks: cute.Tensor, grid: cutlass.Int32, stream: cuda.CUstream):
    """`src_big`/`dst_big`: the largest pair, for the template atoms and the coordinate tensor."""
    (load, tma_tensor), = _w2_atoms([src_big], cpasync.CopyBulkTensorTileG2SOp())
    (store, _), = _w2_atoms([dst_big], cpasync.CopyBulkTensorTileS2GOp())
    coords = cute.zipped_divide(tma_tensor, W2_TILE)
    w2_gmem_kernel(load, store, load_table, store_table, coords, tasks, _w2_smem_layout()).launch(
        grid=(grid, 1, 1), block=(W2_THREADS, 1, 1), stream=stream
    )
