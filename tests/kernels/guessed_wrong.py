"""A list whose non-literal index reads like a runtime value but is a Python int at
trace time: the analysis lowers it on a guess, the trace refutes the guess
(tests/test_speculation.py)."""
from typing import List

import cutlass
import cutlass.cute as cute
from cutlass.cute.nvgpu import cpasync

import gcdsl
from benchmarks import launch_kernels as L


@gcdsl.kernel
def kernel(loads: List[cute.CopyAtom], coords: cute.Tensor, out: cute.Tensor):
    tidx, _, _ = cute.arch.thread_idx()
    smem = cutlass.memory.SmemAllocator()
    mbar = smem.allocate_array(cutlass.Int64, 1)
    s_tile = smem.allocate_tensor(L.DTYPE, L._smem_layout(), 128)
    s_part, g_part = cpasync.tma_partition(
        loads[0], 0, cute.make_layout(1), cute.group_modes(s_tile, 0, 2), cute.group_modes(coords, 0, 2)
    )
    j = 1  # a Python int: the pick is made at trace time, as `loads[1]` would be
    if tidx == 0:
        cute.arch.mbarrier_init(mbar, 1)
        cute.arch.mbarrier_arrive_and_expect_tx(mbar, L.TILE_BYTES)
        cute.copy(loads[j], g_part, s_part, tma_bar_ptr=mbar)
    cute.arch.sync_threads()
    cute.arch.mbarrier_wait(mbar, 0)
    out[tidx, 0] = s_tile[tidx, 0]


@cute.jit
def load(srcs: List[cute.Tensor], out: cute.Tensor):
    atoms = [L._atom(s) for s in srcs]
    kernel([a for a, _ in atoms], atoms[0][1], out).launch(grid=(1, 1, 1), block=(L.THREADS, 1, 1))


def fake_args(n: int):
    return load, ([L.fake_source() for _ in range(n)], L.fake_source())


@gcdsl.kernel
def tensor_kernel(srcs: List[cute.Tensor], out: cute.Tensor):
    tidx, _, _ = cute.arch.thread_idx()
    j = 1  # a Python int, as above
    out[tidx] = srcs[j][tidx]


@cute.jit
def read(srcs: List[cute.Tensor], out: cute.Tensor):
    tensor_kernel(srcs, out).launch(grid=(1, 1, 1), block=(32, 1, 1))


def fake_tensor_args(n: int):
    def vector():
        return cute.runtime.make_fake_compact_tensor(cutlass.Float32, (32,), assumed_align=16)

    return read, ([vector() for _ in range(n)], vector())
