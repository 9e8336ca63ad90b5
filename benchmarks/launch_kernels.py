"""W3 and W4 kernels: one CTA loads one tile by TMA from source `k` of N and writes it out.

The GPU work is a few microseconds, so W3 measures the host's cost of a call and W4
the compiler's; only the way the N descriptors reach the kernel differs:

- ``plain``: no descriptor at all, one tensor argument (the reference call);
- ``atoms0``: `@cute.kernel` given the N atoms the jit function builds, using atoms[0] only
  (what the DSL costs for N atom parameters, with no runtime choice);
- ``list``: `@gcdsl.kernel`, ``loads[k]`` with a runtime ``k`` over N atoms built inside the
  jit function (re-encoded by the DSL on every call);
- ``table``: `gcdsl.TensorMapTable` encoded on the host outside the jit function, one
  grid-constant parameter of N x 128 bytes, one template atom built from ``first``.

Every load reads ``TILE`` = one whole (64, 32) fp32 source; ``out`` receives it.
This file must stay a real .py file: `@gcdsl.kernel` re-reads the kernel source.
"""
from typing import Annotated, List

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass.cute.nvgpu import cpasync

import gcdsl

TILE = (64, 32)
DTYPE = cutlass.Float32
TILE_BYTES = TILE[0] * TILE[1] * DTYPE.width // 8
THREADS = 64  # one per tile row


def _smem_layout():
    return cute.make_layout(TILE, stride=(TILE[1], 1))


@cute.kernel
def plain_kernel(out: cute.Tensor):
    tidx, _, _ = cute.arch.thread_idx()
    out[tidx, 0] = DTYPE(1.0)


@gcdsl.kernel
def list_kernel(loads: List[cute.CopyAtom], coords: cute.Tensor, out: cute.Tensor, k: cutlass.Int32):
    tidx, _, _ = cute.arch.thread_idx()
    warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
    smem = cutlass.memory.SmemAllocator()
    mbar = smem.allocate_array(cutlass.Int64, 1)
    s_tile = smem.allocate_tensor(DTYPE, _smem_layout(), 128)
    s_part, g_part = cpasync.tma_partition(
        loads[0], 0, cute.make_layout(1), cute.group_modes(s_tile, 0, 2), cute.group_modes(coords, 0, 2)
    )
    if warp == 0:
        with cute.arch.elect_one():
            cute.arch.mbarrier_init(mbar, 1)
            cute.arch.mbarrier_arrive_and_expect_tx(mbar, TILE_BYTES)
        cute.arch.mbarrier_init_fence()
        cute.copy(loads[k], g_part, s_part, tma_bar_ptr=mbar)
    cute.arch.sync_threads()
    cute.arch.mbarrier_wait(mbar, 0)
    for c in cutlass.range(TILE[1]):
        out[tidx, c] = s_tile[tidx, c]


@cute.kernel
def atoms0_kernel(loads: List[cute.CopyAtom], coords: cute.Tensor, out: cute.Tensor, k: cutlass.Int32):
    tidx, _, _ = cute.arch.thread_idx()
    warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
    smem = cutlass.memory.SmemAllocator()
    mbar = smem.allocate_array(cutlass.Int64, 1)
    s_tile = smem.allocate_tensor(DTYPE, _smem_layout(), 128)
    s_part, g_part = cpasync.tma_partition(
        loads[0], 0, cute.make_layout(1), cute.group_modes(s_tile, 0, 2), cute.group_modes(coords, 0, 2)
    )
    if warp == 0:
        with cute.arch.elect_one():
            cute.arch.mbarrier_init(mbar, 1)
            cute.arch.mbarrier_arrive_and_expect_tx(mbar, TILE_BYTES)
        cute.arch.mbarrier_init_fence()
        cute.copy(loads[0], g_part, s_part, tma_bar_ptr=mbar)
    cute.arch.sync_threads()
    cute.arch.mbarrier_wait(mbar, 0)
    for c in cutlass.range(TILE[1]):
        out[tidx, c] = s_tile[tidx, c]


@gcdsl.kernel
def table_kernel(
    descs: Annotated[cute.Tensor, gcdsl.GridConstant],
    template: cute.CopyAtom,
    coords: cute.Tensor,
    out: cute.Tensor,
    k: cutlass.Int32,
):
    tidx, _, _ = cute.arch.thread_idx()
    warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
    smem = cutlass.memory.SmemAllocator()
    mbar = smem.allocate_array(cutlass.Int64, 1)
    s_tile = smem.allocate_tensor(DTYPE, _smem_layout(), 128)
    s_part, g_part = cpasync.tma_partition(
        template, 0, cute.make_layout(1), cute.group_modes(s_tile, 0, 2), cute.group_modes(coords, 0, 2)
    )
    if warp == 0:
        with cute.arch.elect_one():
            cute.arch.mbarrier_init(mbar, 1)
            cute.arch.mbarrier_arrive_and_expect_tx(mbar, TILE_BYTES)
        cute.arch.mbarrier_init_fence()
        cute.copy(template, g_part, s_part, tma_bar_ptr=mbar,
                  tma_desc_ptr=gcdsl.tma_desc_ptr(descs, k, template=template))
    cute.arch.sync_threads()
    cute.arch.mbarrier_wait(mbar, 0)
    for c in cutlass.range(TILE[1]):
        out[tidx, c] = s_tile[tidx, c]


def _atom(src):
    """(atom, the tile's TMA coordinates) for one source."""
    atom, coords = cpasync.make_tiled_tma_atom(cpasync.CopyBulkTensorTileG2SOp(), src, _smem_layout(), TILE)
    return atom, cute.zipped_divide(coords, TILE)[((None, None), 0)]


def _launch(kernel, stream):
    kernel.launch(grid=(1, 1, 1), block=(THREADS, 1, 1), stream=stream)


@cute.jit
def plain(out: cute.Tensor, stream: cuda.CUstream):
    _launch(plain_kernel(out), stream)


@cute.jit
def list_load(srcs: List[cute.Tensor], out: cute.Tensor, k: cutlass.Int32, stream: cuda.CUstream):
    atoms = [_atom(s) for s in srcs]
    _launch(list_kernel([a for a, _ in atoms], atoms[0][1], out, k), stream)


@cute.jit
def atoms0_load(srcs: List[cute.Tensor], out: cute.Tensor, k: cutlass.Int32, stream: cuda.CUstream):
    atoms = [_atom(s) for s in srcs]
    _launch(atoms0_kernel([a for a, _ in atoms], atoms[0][1], out, k), stream)


@cute.jit
def table_load(descs: gcdsl.GridConstantTensor, first: cute.Tensor, out: cute.Tensor, k: cutlass.Int32,
               stream: cuda.CUstream):
    template, coords = _atom(first)
    _launch(table_kernel(descs, template, coords, out, k), stream)


# ---------------------------------------------------------------------------------------
# Compile-time arguments (fake tensors: no GPU needed)
# ---------------------------------------------------------------------------------------
def fake_source():
    return cute.runtime.make_fake_compact_tensor(DTYPE, TILE, stride_order=(1, 0), assumed_align=16)


def fake_args(variant: str, n: int, *, tvm_ffi: bool = False):
    """(jit function, compile arguments) of `variant` with N descriptors."""
    from cutlass.cute.runtime import make_fake_stream

    stream = make_fake_stream(use_tvm_ffi_env_stream=tvm_ffi)
    out, k = fake_source(), cutlass.Int32(0)
    if variant == "plain":
        return plain, (out, stream)
    if variant in ("list", "atoms0"):
        return (list_load if variant == "list" else atoms0_load), ([fake_source() for _ in range(n)], out, k, stream)
    if variant == "table":
        return table_load, (gcdsl.TensorMapTable(box=TILE).placeholder(n, DTYPE), fake_source(), out, k, stream)
    raise ValueError(variant)
