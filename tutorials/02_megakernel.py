"""Tutorial 02: a persistent megakernel driven by a grid-constant task table.

One CTA per SM walks a task table that lives in the kernel's parameter space
(`Annotated[cute.Tensor, gcdsl.GridConstant]`): every task names a kind, a
tensor and a tile. Two kinds of task share the loop:

    COPY   dst[k][tile] = src[k][tile]                 (TMA load, TMA store)
    SCALE  dst[k][tile] = scale[k] * src[k][tile]      (TMA load, threads scale in smem, TMA store)

over 32+ fp32 tensors of different shapes, most not a multiple of the tile:
TMA clips every copy to its own tensor's extent. The descriptors are encoded on
the host by two `gcdsl.TensorMapTable`s (loads, stores) and travel as two more
grid-constant tables; the kernel picks one with the task's runtime tensor index
(`gcdsl.tma_desc_ptr`). The per-tensor scales are a fourth table.

Why tables and not `List[cute.CopyAtom]` built in the jit function: the jit
function takes 4 tables and one "canvas" tensor whatever N is, so the DSL
marshals and encodes nothing per tensor on a call. `TensorMapTable.encode`
re-encodes only the descriptors whose tensors changed since the last call
(here: none, after the first); checking costs a version and a pointer read per
separately allocated tensor (slices of one tensor share theirs), and no identity
test per entry, as the same tuples are passed every call. The call goes through
TVM-FFI (`gcdsl.launch.compile_tvm_ffi`): torch tensors are passed as they are and
the launch goes to torch's current stream.

On a GPU this runs, verifies bit-exactly against torch and prints timings.
Without one it compiles for sm_90a and prints the desugared kernel and the PTX
summary.

    python tutorials/02_megakernel.py [--tensors 32] [--seed 0]
"""
import argparse
import sys
from typing import Annotated

from _machine import ON_HOPPER, show_compile, time_launches  # before cutlass: it configures the DSL

import numpy as np

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass.cute.nvgpu import cpasync

import gcdsl

TILE = (64, 64)
DTYPE = cutlass.Float32
TILE_BYTES = TILE[0] * TILE[1] * DTYPE.width // 8
THREADS = 128
COPY, SCALE = 0, 1
TASK_FIELDS = 4  # kind, tensor, tile row, tile column


@gcdsl.kernel
def megakernel(
    tasks: Annotated[cute.Tensor, gcdsl.GridConstant],   # Int32 [T, 4]
    scales: Annotated[cute.Tensor, gcdsl.GridConstant],  # Float32 [N]
    loads: Annotated[cute.Tensor, gcdsl.GridConstant],   # N TMA load descriptors, host-encoded
    stores: Annotated[cute.Tensor, gcdsl.GridConstant],  # N TMA store descriptors
    load_template: cute.CopyAtom,                         # copy op, dtype, box: every load's
    store_template: cute.CopyAtom,
    tiles: cute.Tensor,                                   # TMA coordinates of every tile position
    smem_layout: cute.Layout,
):
    bidx, _, _ = cute.arch.block_idx()
    grid, _, _ = cute.arch.grid_dim()
    tidx, _, _ = cute.arch.thread_idx()
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
    for i in cutlass.range(bidx, cute.size(tasks, mode=[0]), grid):
        kind = tasks[i, 0]
        k = tasks[i, 1]                                   # runtime tensor index
        g_tile = tiles[((None, None), (tasks[i, 2], tasks[i, 3]))]
        s_in, g_in = cpasync.tma_partition(
            load_template, 0, cute.make_layout(1), cute.group_modes(s_tile, 0, 2), cute.group_modes(g_tile, 0, 2)
        )
        if warp == 0:
            with cute.arch.elect_one():
                cute.arch.mbarrier_arrive_and_expect_tx(mbar, TILE_BYTES)
            cute.copy(load_template, g_in, s_in, tma_bar_ptr=mbar,
                      tma_desc_ptr=gcdsl.tma_desc_ptr(loads, k, template=load_template))
        cute.arch.mbarrier_wait(mbar, phase)
        phase = phase ^ 1

        if kind == SCALE:
            scale = scales[k]
            for j in cutlass.range(tidx, cute.size(s_tile), THREADS):
                s_tile[j] = s_tile[j] * scale
            # generic-proxy writes to smem, read next by the TMA (async proxy)
            cute.arch.fence_proxy("async.shared", space="cta")
        cute.arch.sync_threads()

        if warp == 0:
            s_out, g_out = cpasync.tma_partition(
                store_template, 0, cute.make_layout(1), cute.group_modes(s_tile, 0, 2), cute.group_modes(g_tile, 0, 2)
            )
            # In DSL 4.8.1 a TMA store is issued by every lane that reaches it: elect one.
            with cute.arch.elect_one():
                cute.copy(store_template, s_out, g_out,
                          tma_desc_ptr=gcdsl.tma_desc_ptr(stores, k, template=store_template))
                cute.arch.cp_async_bulk_commit_group()
                cute.arch.cp_async_bulk_wait_group(0, read=True)
        cute.arch.sync_threads()  # the tile's smem is free again


@cute.jit
def run(tasks: gcdsl.GridConstantTensor, scales: gcdsl.GridConstantTensor,
        loads: gcdsl.GridConstantTensor, stores: gcdsl.GridConstantTensor,
        canvas: cute.Tensor, ctas: cutlass.Constexpr, stream: cuda.CUstream):
    """`canvas`: any fp32 tensor at least as large as every tensor in both modes. Its
    atoms give the compile-time template (its own descriptor is never used) and its
    coordinate tensor the TMA coordinates of every tile position; each tensor's
    extent lives in its own descriptor, where TMA clips against it."""
    smem_layout = cute.make_layout(TILE, stride=(TILE[1], 1))
    g2s, s2g = cpasync.CopyBulkTensorTileG2SOp(), cpasync.CopyBulkTensorTileS2GOp()
    load_template, coords = cpasync.make_tiled_tma_atom(g2s, canvas, smem_layout, TILE)
    store_template, _ = cpasync.make_tiled_tma_atom(s2g, canvas, smem_layout, TILE)
    tiles = cute.zipped_divide(coords, TILE)
    megakernel(tasks, scales, loads, stores, load_template, store_template, tiles, smem_layout).launch(
        grid=(ctas, 1, 1), block=(THREADS, 1, 1), stream=stream
    )


def make_problem(n_tensors: int, seed: int):
    """Ragged shapes, a shuffled task table over every tile, and scales."""
    rng = np.random.default_rng(seed)
    shapes = [(int(rng.integers(1, 321)), int(rng.integers(1, 65)) * 4) for _ in range(n_tensors)]
    rows = []
    for k, (r, c) in enumerate(shapes):
        for tr in range(-(-r // TILE[0])):
            for tc in range(-(-c // TILE[1])):
                rows.append((int(rng.integers(0, 2)), k, tr, tc))
    tasks = np.array(rows, dtype=np.int32)[rng.permutation(len(rows))]
    scales = rng.uniform(0.5, 2.0, size=n_tensors).astype(np.float32)
    return shapes, tasks, scales


def canvas_shape(shapes):
    return max(r for r, _ in shapes), max(c for _, c in shapes)


def compile_megakernel(shapes, task_table, scale_table, loads, stores, ctas: int):
    """`run` compiled for TVM-FFI: called with torch tensors, on torch's current stream.

    A fake canvas stands for the real one (only its dtype, rank and alignment matter
    to the compiled code), so the same compile serves a GPU-less machine.
    """
    from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream

    import gcdsl.launch

    canvas = make_fake_compact_tensor(DTYPE, canvas_shape(shapes), stride_order=(1, 0), assumed_align=16)
    return gcdsl.launch.compile_tvm_ffi(run, task_table, scale_table, loads, stores, canvas, ctas,
                                        make_fake_stream(use_tvm_ffi_env_stream=True))


def run_on_gpu(args) -> bool:
    import time

    import torch

    shapes, tasks, scales = make_problem(args.tensors, args.seed)
    # Tuples: passed again to `encode`, a tuple needs no identity test per entry.
    srcs = tuple(torch.randn(s, device="cuda") for s in shapes)
    dsts = tuple(torch.full(s, float("nan"), device="cuda") for s in shapes)  # poisoned
    ctas = torch.cuda.get_device_properties(0).multi_processor_count
    load_maps, store_maps = gcdsl.TensorMapTable(box=TILE), gcdsl.TensorMapTable(box=TILE)
    task_table, scale_table = gcdsl.grid_constant(tasks), gcdsl.grid_constant(scales)
    canvas = torch.empty(canvas_shape(shapes), device="cuda")

    def launch():  # the tables are checked on every call; unchanged descriptors are not re-encoded
        compiled(task_table, scale_table, load_maps.encode(srcs), store_maps.encode(dsts), canvas)

    compiled = compile_megakernel(shapes, task_table, scale_table, load_maps.encode(srcs),
                                  store_maps.encode(dsts), ctas)
    launch()
    torch.cuda.synchronize()

    kinds = {k: set() for k in range(len(shapes))}
    for kind, k, _, _ in tasks:
        kinds[int(k)].add(int(kind))
    bad = []
    for k, (src, dst) in enumerate(zip(srcs, dsts)):
        # a tensor's tiles may mix both kinds: check tile by tile
        expect = src.clone()
        for kind, kk, tr, tc in tasks[tasks[:, 1] == k]:
            if kind == SCALE:
                sl = (slice(tr * TILE[0], (tr + 1) * TILE[0]), slice(tc * TILE[1], (tc + 1) * TILE[1]))
                expect[sl] = src[sl] * float(scales[k])
        if not torch.equal(dst, expect):
            bad.append(k)
    print(f"verify: {len(tasks)} tasks ({int((tasks[:, 0] == SCALE).sum())} scale, "
          f"{int((tasks[:, 0] == COPY).sum())} copy) over {len(shapes)} tensors on {ctas} CTAs: "
          f"{'bit-exact' if not bad else f'MISMATCH in tensors {bad}'}")
    print(f"parameter space: {tasks.nbytes} B task table + {scales.nbytes} B scales + "
          f"{2 * len(shapes) * 128} B descriptors (two tables) + 2 x 128 B template descriptors")

    median, low, high = time_launches(launch, args.reps)
    print(f"time: median {median:.1f} us (min {low:.1f}, max {high:.1f}, {args.reps} launches)")
    calls = 200
    t0 = time.perf_counter()
    for _ in range(calls):
        launch()
    host_us = (time.perf_counter() - t0) / calls * 1e6
    torch.cuda.synchronize()
    print(f"host: {host_us:.1f} us per call ({calls} calls, both descriptor tables checked and cached; "
          f"{load_maps.encodes + store_maps.encodes} descriptors encoded in all)")
    return not bad


def compile_only(args) -> bool:
    shapes, tasks, scales = make_problem(args.tensors, args.seed)
    maps = gcdsl.TensorMapTable(box=TILE)  # placeholders: no GPU tensors to encode here
    compile_megakernel(shapes, gcdsl.grid_constant(tasks), gcdsl.grid_constant(scales),
                       maps.placeholder(len(shapes), DTYPE), maps.placeholder(len(shapes), DTYPE), 132)
    show_compile(megakernel)
    print(f"  task table {tasks.shape[0]} x {TASK_FIELDS} Int32 = {tasks.nbytes} B, "
          f"{len(scales)} scales and 2 x {len(shapes)} x 128 B descriptor tables in parameter space")
    return True


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tensors", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--reps", type=int, default=20)
    args = parser.parse_args()
    ok = run_on_gpu(args) if ON_HOPPER else compile_only(args)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
