"""Host functions that hand `batch_copy`'s runtime-indexed kernel bad descriptor lists."""
from typing import List

import cutlass
import cutlass.cute as cute
from cutlass.cute.nvgpu import cpasync

from tests.kernels import batch_copy as bc


@cute.jit
def mixed_tiles(srcs: List[cute.Tensor], pick: cute.Tensor):
    """Entry 2 is built with a different box: same op and dtype, different compile-time type."""
    smem = bc._smem_layout()
    loads = [cpasync.make_tiled_tma_atom(cpasync.CopyBulkTensorTileG2SOp(), s, smem, bc.TILE)[0] for s in srcs]
    loads[2] = cpasync.make_tiled_tma_atom(
        cpasync.CopyBulkTensorTileG2SOp(), srcs[2], cute.make_layout((32, 64), stride=(64, 1)), (32, 64)
    )[0]
    _, coords = cpasync.make_tiled_tma_atom(cpasync.CopyBulkTensorTileG2SOp(), srcs[0], smem, bc.TILE)
    bc.runtime_indexed_kernel(loads, loads, cute.zipped_divide(coords, bc.TILE), pick, smem, len(srcs)).launch(
        grid=(1, 1, 1), block=(bc.THREADS, 1, 1)
    )


@cute.jit
def empty_list(srcs: List[cute.Tensor], pick: cute.Tensor):
    smem = bc._smem_layout()
    _, coords = cpasync.make_tiled_tma_atom(cpasync.CopyBulkTensorTileG2SOp(), srcs[0], smem, bc.TILE)
    bc.runtime_indexed_kernel([], [], cute.zipped_divide(coords, bc.TILE), pick, smem, 1).launch(
        grid=(1, 1, 1), block=(bc.THREADS, 1, 1)
    )


def fake_sources(n=3):
    fake = cute.runtime.make_fake_compact_tensor
    srcs = [fake(bc.DTYPE, (256, 128), stride_order=(1, 0), assumed_align=16) for _ in range(n)]
    return srcs, fake(cutlass.Int32, (n,), assumed_align=4)


@cute.jit
def single_atom(srcs: List[cute.Tensor], pick: cute.Tensor):
    """One atom where the kernel wants a list."""
    smem = bc._smem_layout()
    atom, coords = cpasync.make_tiled_tma_atom(cpasync.CopyBulkTensorTileG2SOp(), srcs[0], smem, bc.TILE)
    bc.runtime_indexed_kernel(atom, [atom], cute.zipped_divide(coords, bc.TILE), pick, smem, 1).launch(
        grid=(1, 1, 1), block=(bc.THREADS, 1, 1)
    )


@cute.jit
def tensors_for_atoms(srcs: List[cute.Tensor], pick: cute.Tensor):
    """Tensors where the kernel wants TMA atoms."""
    smem = bc._smem_layout()
    atom, coords = cpasync.make_tiled_tma_atom(cpasync.CopyBulkTensorTileG2SOp(), srcs[0], smem, bc.TILE)
    bc.runtime_indexed_kernel([atom, srcs[1]], [atom, atom], cute.zipped_divide(coords, bc.TILE), pick, smem, 2).launch(
        grid=(1, 1, 1), block=(bc.THREADS, 1, 1)
    )
