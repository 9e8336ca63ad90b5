"""A kernel taking one argument of every kind the parameter budget sizes."""
from typing import List

import cutlass
import cutlass.cute as cute
from cutlass.cute.nvgpu import cpasync

import gcdsl
from tests.kernels import deco


@deco.kernel
def every_kind(static: cute.Tensor, dynamic: cute.Tensor, layout: cute.Layout, dynamic_layout: cute.Layout,
               coords: cute.Tensor, dynamic_coords: cute.Tensor, i32: cutlass.Int32, f32: cutlass.Float32,
               i64: cutlass.Int64, flag: cutlass.Boolean, shape: cute.Shape, atom: cute.CopyAtom,
               simt: cute.CopyAtom, f16: cutlass.Float16, i8: cutlass.Int8, atoms: List[cute.CopyAtom]):
    tidx, _, _ = cute.arch.thread_idx()
    if tidx == 0:
        cute.printf("%d %d %d %d", cute.size(dynamic_layout), cute.size(dynamic_coords), shape[0], dynamic[0, 0])


@cute.jit
def launch_every_kind(static: cute.Tensor, dynamic: cute.Tensor, n: cutlass.Int32):
    smem = cute.make_layout((64, 64), stride=(64, 1))
    atom, coords = cpasync.make_tiled_tma_atom(cpasync.CopyBulkTensorTileG2SOp(), static, smem, (64, 64))
    _, dynamic_coords = cpasync.make_tiled_tma_atom(cpasync.CopyBulkTensorTileG2SOp(), dynamic, smem, (64, 64))
    every_kind(static, dynamic, cute.make_layout((4, 8), stride=(8, 1)), cute.make_layout((n, 8), stride=(8, 1)),
               coords, dynamic_coords, n, cutlass.Float32(1.0), cutlass.Int64(n), cutlass.Boolean(True), (n, 4),
               atom, cute.make_copy_atom(cute.nvgpu.CopyUniversalOp(), cutlass.Float32), cutlass.Float16(1.0),
               cutlass.Int8(1), [atom, atom]).launch(grid=(1, 1, 1), block=(32, 1, 1))


def fake_args():
    fake = cute.runtime
    static = fake.make_fake_compact_tensor(cutlass.Float32, (256, 128), stride_order=(1, 0), assumed_align=16)
    dynamic = fake.make_fake_tensor(cutlass.Float32, (cute.sym_int(), cute.sym_int()),
                                    (cute.sym_int(width=64), 1), assumed_align=16)
    return static, dynamic, cutlass.Int32(3)
