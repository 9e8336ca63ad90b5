"""Each CTA b loads the first (64, 32) tile of tensor b through descriptor b of a
host-encoded table and writes it to out[b]; TMA fills what lies outside the
tensor with zeros. The launch tests change the tensors between calls."""
from typing import Annotated

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass.cute.nvgpu import cpasync

import gcdsl

TILE = (64, 32)
DTYPE = cutlass.Float32


@gcdsl.kernel
def first_tiles_kernel(
    descs: Annotated[cute.Tensor, gcdsl.GridConstant],
    template: cute.CopyAtom,
    coords: cute.Tensor,
    out: cute.Tensor,
    smem_layout: cute.Layout,
):
    bidx, _, _ = cute.arch.block_idx()
    tidx, _, _ = cute.arch.thread_idx()
    warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
    smem = cutlass.memory.SmemAllocator()
    mbar = smem.allocate_array(cutlass.Int64, 1)
    s_tile = smem.allocate_tensor(DTYPE, smem_layout, 128)
    s_part, g_part = cpasync.tma_partition(
        template, 0, cute.make_layout(1), cute.group_modes(s_tile, 0, 2), cute.group_modes(coords, 0, 2)
    )
    if warp == 0:
        with cute.arch.elect_one():
            cute.arch.mbarrier_init(mbar, 1)
            cute.arch.mbarrier_arrive_and_expect_tx(mbar, TILE[0] * TILE[1] * DTYPE.width // 8)
        cute.arch.mbarrier_init_fence()
        cute.copy(template, g_part, s_part, tma_bar_ptr=mbar,
                  tma_desc_ptr=gcdsl.tma_desc_ptr(descs, bidx, template=template))
    cute.arch.sync_threads()
    cute.arch.mbarrier_wait(mbar, 0)
    for c in cutlass.range(TILE[1]):
        out[bidx, tidx, c] = s_tile[tidx, c]


@cute.jit
def first_tiles(descs: gcdsl.GridConstantTensor, first: cute.Tensor, out: cute.Tensor, stream: cuda.CUstream):
    smem_layout = cute.make_layout(TILE, stride=(TILE[1], 1))
    template, coords = cpasync.make_tiled_tma_atom(cpasync.CopyBulkTensorTileG2SOp(), first, smem_layout, TILE)
    tile0 = cute.zipped_divide(coords, TILE)[((None, None), 0)]
    first_tiles_kernel(descs, template, tile0, out, smem_layout).launch(
        grid=(cute.size(out, mode=[0]), 1, 1), block=(TILE[0], 1, 1), stream=stream
    )


def fake_args(n: int, *, tvm_ffi: bool = False):
    """Compile-time arguments for N descriptors (no GPU needed)."""
    from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream

    return (gcdsl.TensorMapTable(box=TILE).placeholder(n, DTYPE),
            make_fake_compact_tensor(DTYPE, TILE, stride_order=(1, 0), assumed_align=16),
            make_fake_compact_tensor(DTYPE, (n, *TILE), stride_order=(2, 1, 0), assumed_align=16),
            make_fake_stream(use_tvm_ffi_env_stream=tvm_ffi))


def expected(t):
    """What CTA b writes for tensor t: its first tile, zero outside its extent."""
    import torch

    want = torch.zeros(TILE, dtype=t.dtype, device=t.device)
    rows, cols = min(TILE[0], t.shape[0]), min(TILE[1], t.shape[1])
    want[:rows, :cols] = t[:rows, :cols]
    return want
