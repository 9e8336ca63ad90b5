"""Kernels and host functions that exercise gcdsl's safety nets (compiled, never run)."""
from typing import List

import cutlass
import cutlass.cute as cute
from cutlass.cute.nvgpu import cpasync

import gcdsl
from tests.kernels import batch_copy as bc


@cute.jit
def swizzle_differs(srcs: List[cute.Tensor], pick: cute.Tensor):
    """Entry 1 uses a 128-byte swizzle: its printed atom type equals entry 0's."""
    plain = bc._smem_layout()
    swizzled = cute.make_composed_layout(cute.make_swizzle(3, 4, 3), 0, plain)
    loads = [cpasync.make_tiled_tma_atom(cpasync.CopyBulkTensorTileG2SOp(), s, plain, bc.TILE)[0] for s in srcs]
    loads[1] = cpasync.make_tiled_tma_atom(cpasync.CopyBulkTensorTileG2SOp(), srcs[1], swizzled, bc.TILE)[0]
    _, coords = cpasync.make_tiled_tma_atom(cpasync.CopyBulkTensorTileG2SOp(), srcs[0], plain, bc.TILE)
    bc.runtime_indexed_kernel(loads, loads, cute.zipped_divide(coords, bc.TILE), pick, plain, len(srcs)).launch(
        grid=(1, 1, 1), block=(bc.THREADS, 1, 1)
    )


@gcdsl.kernel
def literal_past_the_end(loads: List[cute.CopyAtom]):
    cpasync.prefetch_descriptor(loads[-5])


@gcdsl.kernel
def runtime_slice(loads: List[cute.CopyAtom], pick: cute.Tensor):
    start = pick[0]
    for atom in loads[start:]:
        cpasync.prefetch_descriptor(atom)


@gcdsl.kernel
def early_exit_in_a_dynamic_loop(loads: List[cute.CopyAtom], pick: cute.Tensor):
    for i in cutlass.range(4):
        if pick[i] == 0:
            return
        cpasync.prefetch_descriptor(loads[pick[i]])


@cute.jit
def launch_with_loads(kernel: cutlass.Constexpr, srcs: List[cute.Tensor], pick: cute.Tensor):
    loads = [cpasync.make_tiled_tma_atom(cpasync.CopyBulkTensorTileG2SOp(), s, bc._smem_layout(), bc.TILE)[0]
             for s in srcs]
    args = (loads, pick) if kernel is not literal_past_the_end else (loads,)
    kernel(*args).launch(grid=(1, 1, 1), block=(32, 1, 1))


def decorate_a_class():
    @gcdsl.kernel
    class NotAKernel:
        pass


def unknown_option():
    @gcdsl.kernel(check_bound=True)
    def k(x: cute.Tensor):
        pass


@gcdsl.kernel(preprocess=True)
def with_dsl_option(x: cute.Tensor):
    tidx, _, _ = cute.arch.thread_idx()
    x[tidx] = 1.0


@cute.jit
def launch_with_dsl_option(x: cute.Tensor):
    with_dsl_option(x).launch(grid=(1, 1, 1), block=(32, 1, 1))


@gcdsl.kernel
def load_with_explicit_none(loads: List[cute.CopyAtom], coords: cute.Tensor, pick: cute.Tensor):
    """`tma_desc_ptr=None` passed with a runtime-picked atom, as generic helpers pass it."""
    smem = cutlass.memory.SmemAllocator()
    mbar = smem.allocate_array(cutlass.Int64, 1)
    s_tile = smem.allocate_tensor(bc.DTYPE, bc._smem_layout(), 128)
    atom = loads[pick[0]]
    s_part, g_part = cpasync.tma_partition(atom, 0, cute.make_layout(1), cute.group_modes(s_tile, 0, 2),
                                           cute.group_modes(coords[((None, None), 0)], 0, 2))
    with cute.arch.elect_one():
        cute.arch.mbarrier_init(mbar, 1)
        cute.copy(atom, g_part, s_part, tma_bar_ptr=mbar, tma_desc_ptr=None)


@cute.jit
def launch_with_explicit_none(srcs: List[cute.Tensor], pick: cute.Tensor):
    pairs = [cpasync.make_tiled_tma_atom(cpasync.CopyBulkTensorTileG2SOp(), s, bc._smem_layout(), bc.TILE)
             for s in srcs]
    coords = cute.zipped_divide(pairs[0][1], bc.TILE)
    load_with_explicit_none([a for a, _ in pairs], coords, pick).launch(grid=(1, 1, 1), block=(32, 1, 1))
