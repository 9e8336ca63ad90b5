"""Plain CuTe DSL in the shapes upstream code takes: `@gcdsl.kernel` must be a drop-in for `@cute.kernel`.

Every kernel here is decorated with `@deco.kernel` (either decorator, see
`tests/kernels/__init__.py`) and uses no gcdsl feature, so it must compile to
the same PTX under both:

- `ScaledCopy`: a kernel that is a method, `self.kernel(...)`, launched from the
  class's `@cute.jit __call__`, with a defaulted argument after Constexpr ones;
  `KeywordCopy` calls it with keyword arguments (the DSL names kernels after the
  positional ones, so they must stay keywords);
- `Fills`: `@staticmethod` and `@classmethod` above the kernel decorator (the
  order `@cute.kernel` supports: below them it fails under the DSL itself);
- `named_fill`: `set_name_prefix` called on the decorated kernel;
- TMA loads through a `List[cute.CopyAtom]` of *mixed* atoms (other dtype, other
  tile) indexed only by compile-time values: a `range_constexpr` loop variable, a
  Constexpr parameter, `cutlass.const_expr(...)`, a module-level int, a closure int;
- `List[cute.Tensor]` parameters (zipped-divided tensors, TMA coordinate tensors)
  indexed the same ways: they must keep the DSL's own form.

`tests/kernels/dropin_runtime.py` has the runtime-indexed counterparts, which
only `@gcdsl.kernel` compiles.
"""
from typing import List

import cutlass
import cutlass.cute as cute
from cutlass.cute.nvgpu import cpasync

from tests.kernels import deco

THREADS = 128
SCALE_ATOM = 1  # a module-level index into the mixed atom list

# The mixed atom list: a half-precision 64x64 tile and a single-precision 32x32 tile.
SPECS = ((cutlass.Float16, (64, 64)), (cutlass.Float32, (32, 32)))


# ---------------------------------------------------------------- a kernel that is a method


class ScaledCopy:
    """dst = src * scale, one tile of `TILER` per CTA: the layout of upstream's kernel classes."""

    TILER = (4, THREADS)

    def __init__(self, threads: int = THREADS) -> None:
        self.threads = threads

    @deco.kernel
    def kernel(self, src: cute.Tensor, dst: cute.Tensor, tiler: cutlass.Constexpr, rows: cutlass.Constexpr,
               scale: cutlass.Float32 = 2.0, offset: cutlass.Constexpr = 1):
        bidx, _, _ = cute.arch.block_idx()
        tidx, _, _ = cute.arch.thread_idx()
        g_src = cute.zipped_divide(src, tiler)[((None, None), bidx)]
        g_dst = cute.zipped_divide(dst, tiler)[((None, None), bidx)]
        for r in cutlass.range_constexpr(rows):
            g_dst[(r, tidx)] = g_src[(r, tidx)] * scale + offset

    @cute.jit
    def __call__(self, src: cute.Tensor, dst: cute.Tensor):
        tiles = cute.size(cute.zipped_divide(src, self.TILER), mode=[1])
        self.kernel(src, dst, self.TILER, self.TILER[0]).launch(grid=(tiles, 1, 1), block=(self.threads, 1, 1))


class KeywordCopy(ScaledCopy):
    """`ScaledCopy`'s kernel called the way some upstream kernels are: by keyword."""

    @cute.jit
    def __call__(self, src: cute.Tensor, dst: cute.Tensor):
        tiles = cute.size(cute.zipped_divide(src, self.TILER), mode=[1])
        self.kernel(src=src, dst=dst, tiler=self.TILER, rows=self.TILER[0], scale=3.0).launch(
            grid=(tiles, 1, 1), block=(self.threads, 1, 1))


# ---------------------------------------------------------------- static and class methods


class Fills:
    """Kernels under `@staticmethod` and `@classmethod`, launched through the instance."""

    BASE = 3

    @staticmethod
    @deco.kernel
    def fill_static(out: cute.Tensor, value: cutlass.Constexpr):
        tidx, _, _ = cute.arch.thread_idx()
        out[tidx] = cutlass.Float32(value)

    @classmethod
    @deco.kernel
    def fill_class(cls, out: cute.Tensor, value: cutlass.Constexpr):
        tidx, _, _ = cute.arch.thread_idx()
        out[tidx] = cutlass.Float32(value + cls.BASE)

    @cute.jit
    def static(self, out: cute.Tensor):
        self.fill_static(out, 5).launch(grid=(1, 1, 1), block=(THREADS, 1, 1))

    @cute.jit
    def klass(self, out: cute.Tensor):
        self.fill_class(out, 5).launch(grid=(1, 1, 1), block=(THREADS, 1, 1))


# ---------------------------------------------------------------- set_name_prefix

PREFIX = "dropin_named"


@deco.kernel
def named_fill_kernel(out: cute.Tensor):
    tidx, _, _ = cute.arch.thread_idx()
    out[tidx] = cutlass.Float32(7)


@cute.jit
def named_fill(out: cute.Tensor):
    named_fill_kernel.set_name_prefix(PREFIX)  # where upstream calls it: in the host function
    named_fill_kernel(out).launch(grid=(1, 1, 1), block=(THREADS, 1, 1))


# ---------------------------------------------------------------- mixed atoms, compile-time indices


@cute.jit
def _load(atom: cute.CopyAtom, coords: cute.Tensor, dtype: cutlass.Constexpr, tile: cutlass.Constexpr,
          smem: cutlass.Constexpr, mbar: cute.Pointer):
    """TMA-load tile 0 of `coords` through `atom` into new shared memory (one warp issues it)."""
    s_tile = smem.allocate_tensor(dtype, cute.make_layout(tile, stride=(tile[1], 1)), 128)
    g_tile = cute.zipped_divide(coords, tile)[((None, None), 0)]
    s_part, g_part = cpasync.tma_partition(atom, 0, cute.make_layout(1), cute.group_modes(s_tile, 0, 2),
                                           cute.group_modes(g_tile, 0, 2))
    warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
    if warp == 0:
        cpasync.prefetch_descriptor(atom)
        with cute.arch.elect_one():
            cute.arch.mbarrier_arrive_and_expect_tx(mbar, tile[0] * tile[1] * dtype.width // 8)
        cute.copy(atom, g_part, s_part, tma_bar_ptr=mbar)


@cute.jit
def _barrier(smem: cutlass.Constexpr):
    mbar = smem.allocate_array(cutlass.Int64, 1)
    warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
    if warp == 0:
        with cute.arch.elect_one():
            cute.arch.mbarrier_init(mbar, 1)
        cute.arch.mbarrier_init_fence()
    cute.arch.sync_threads()
    return mbar


@deco.kernel
def load_all_kernel(atoms: List[cute.CopyAtom], coords: List[cute.Tensor], specs: cutlass.Constexpr):
    """Every atom in turn: the index is a `range_constexpr` loop variable."""
    smem = cutlass.memory.SmemAllocator()
    mbar = _barrier(smem)
    for i in cutlass.range_constexpr(len(specs)):
        _load(atoms[i], coords[i], specs[i][0], specs[i][1], smem, mbar)
        cute.arch.mbarrier_wait(mbar, i % 2)


@deco.kernel
def load_one_kernel(atoms: List[cute.CopyAtom], coords: List[cute.Tensor], specs: cutlass.Constexpr,
                    which: cutlass.Constexpr):
    """One atom, picked by a Constexpr parameter."""
    smem = cutlass.memory.SmemAllocator()
    mbar = _barrier(smem)
    _load(atoms[which], coords[which], specs[which][0], specs[which][1], smem, mbar)
    cute.arch.mbarrier_wait(mbar, 0)


@deco.kernel
def load_last_kernel(atoms: List[cute.CopyAtom], coords: List[cute.Tensor], specs: cutlass.Constexpr):
    """The last atom, picked by `cutlass.const_expr(...)`."""
    smem = cutlass.memory.SmemAllocator()
    mbar = _barrier(smem)
    _load(atoms[cutlass.const_expr(len(specs) - 1)], coords[cutlass.const_expr(len(specs) - 1)],
          specs[-1][0], specs[-1][1], smem, mbar)
    cute.arch.mbarrier_wait(mbar, 0)


@deco.kernel
def load_global_index_kernel(atoms: List[cute.CopyAtom], coords: List[cute.Tensor], specs: cutlass.Constexpr):
    """One atom, picked by a module-level int."""
    smem = cutlass.memory.SmemAllocator()
    mbar = _barrier(smem)
    _load(atoms[SCALE_ATOM], coords[SCALE_ATOM], specs[SCALE_ATOM][0], specs[SCALE_ATOM][1], smem, mbar)
    cute.arch.mbarrier_wait(mbar, 0)


def make_load_closure_kernel(which: int):
    """One atom, picked by an int the kernel closes over."""

    @deco.kernel
    def load_closure_kernel(atoms: List[cute.CopyAtom], coords: List[cute.Tensor], specs: cutlass.Constexpr):
        smem = cutlass.memory.SmemAllocator()
        mbar = _barrier(smem)
        _load(atoms[which], coords[which], specs[which][0], specs[which][1], smem, mbar)
        cute.arch.mbarrier_wait(mbar, 0)

    return load_closure_kernel


def _atoms(srcs, specs):
    pairs = [cpasync.make_tiled_tma_atom(cpasync.CopyBulkTensorTileG2SOp(), src,
                                         cute.make_layout(tile, stride=(tile[1], 1)), tile)
             for src, (_, tile) in zip(srcs, specs)]
    return [atom for atom, _ in pairs], [coords for _, coords in pairs]


def atom_load(kernel, *extra, specs=SPECS):
    """A host function launching `kernel(atoms, coords, specs, *extra)`, one TMA atom per source."""

    @cute.jit
    def host(srcs: List[cute.Tensor]):
        atoms, coords = _atoms(srcs, specs)
        kernel(atoms, coords, specs, *extra).launch(grid=(1, 1, 1), block=(THREADS, 1, 1))

    return host


def atom_sources(specs=SPECS):
    fake = cute.runtime.make_fake_compact_tensor
    return [fake(dtype, (256, 128), stride_order=(1, 0), assumed_align=16) for dtype, _ in specs]


# Atoms of one type: nothing for gcdsl to refuse, and still nothing for it to change.
UNIFORM_SPECS = ((cutlass.Float32, (32, 32)),) * 3


# ---------------------------------------------------------------- tensor lists, compile-time indices

TILE = (8, THREADS)


@deco.kernel
def sum_tiles_kernel(tiled: List[cute.Tensor], out: cute.Tensor, n: cutlass.Constexpr):
    """out = sum of the n zipped-divided inputs' tiles: `tiled[i]` with a `range_constexpr` i."""
    bidx, _, _ = cute.arch.block_idx()
    tidx, _, _ = cute.arch.thread_idx()
    g_out = cute.zipped_divide(out, TILE)[((None, None), bidx)]
    for r in cutlass.range_constexpr(TILE[0]):
        acc = cutlass.Float32(0)
        for i in cutlass.range_constexpr(n):
            acc += tiled[i][((r, tidx), bidx)]
        g_out[(r, tidx)] = acc


@deco.kernel
def pick_tile_kernel(tiled: List[cute.Tensor], out: cute.Tensor, which: cutlass.Constexpr):
    """out = input `which`: `tiled[which]` with a Constexpr `which`, and `tiled[SCALE_ATOM]`."""
    bidx, _, _ = cute.arch.block_idx()
    tidx, _, _ = cute.arch.thread_idx()
    g_out = cute.zipped_divide(out, TILE)[((None, None), bidx)]
    for r in cutlass.range_constexpr(TILE[0]):
        g_out[(r, tidx)] = tiled[which][((r, tidx), bidx)] + tiled[SCALE_ATOM][((r, tidx), bidx)]


@deco.kernel
def sum_rows_kernel(srcs: List[cute.Tensor], out: cute.Tensor, n: cutlass.Constexpr):
    """out[row] = sum of the n plain (flat) global tensors' rows: `srcs[i]` with a `range_constexpr` i."""
    bidx, _, _ = cute.arch.block_idx()
    tidx, _, _ = cute.arch.thread_idx()
    acc = cutlass.Float32(0)
    for i in cutlass.range_constexpr(n):
        acc += srcs[i][bidx, tidx]
    out[bidx, tidx] = acc


@cute.jit
def sum_rows(srcs: List[cute.Tensor], out: cute.Tensor):
    sum_rows_kernel(srcs, out, len(srcs)).launch(grid=(cute.size(out, mode=[0]), 1, 1), block=(THREADS, 1, 1))


@deco.kernel
def spread_rows_kernel(dsts: List[cute.Tensor], src: cute.Tensor, steps: cutlass.Int32):
    """dsts[i][row] = src[row] + s for each s < steps: stores through `dsts[i]` inside a `cutlass.range` loop."""
    bidx, _, _ = cute.arch.block_idx()
    tidx, _, _ = cute.arch.thread_idx()
    for s in cutlass.range(steps):
        for i in cutlass.range_constexpr(len(dsts)):
            dsts[i][bidx, tidx] = src[bidx, tidx] + cutlass.Float32(s)


@cute.jit
def spread_rows(dsts: List[cute.Tensor], src: cute.Tensor, steps: cutlass.Int32):
    spread_rows_kernel(dsts, src, steps).launch(grid=(cute.size(src, mode=[0]), 1, 1), block=(THREADS, 1, 1))


def tiles_host(kernel, *extra):
    @cute.jit
    def host(srcs: List[cute.Tensor], out: cute.Tensor):
        tiled = [cute.zipped_divide(s, TILE) for s in srcs]
        kernel(tiled, out, *extra).launch(grid=(cute.size(tiled[0], mode=[1]), 1, 1), block=(THREADS, 1, 1))

    return host


def tile_sources(n: int = 3, shape=(64, 256)):
    fake = cute.runtime.make_fake_compact_tensor
    return ([fake(cutlass.Float32, shape, stride_order=(1, 0), assumed_align=16) for _ in range(n)],
            fake(cutlass.Float32, shape, stride_order=(1, 0), assumed_align=16))
