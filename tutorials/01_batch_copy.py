"""Tutorial 01: a batched TMA copy whose descriptors are picked by a runtime index.

N tensors are copied gmem -> smem -> gmem, one 128x64 tile per CTA. Each CTA
reads which tensor it serves from a task table in global memory, so the index
into the lists of TMA atoms is a *runtime* value:

    cute.copy(loads[k], g_src, s_tile, tma_bar_ptr=mbar)     # k = task[bidx]

Plain CuTe DSL rejects `loads[k]` for a runtime `k`. Under `@gcdsl.kernel` the
list's descriptors travel packed in one grid-constant parameter (N x 128 bytes,
beside the template atom, entry 0) and `loads[k]` reads descriptor `k` straight
from there.

On a GPU this runs, verifies bit-exactly and prints the bandwidth; `--sweep`
does so for several tensor counts and plots bandwidth against N (a PNG, where
matplotlib is installed). Without a GPU it compiles for sm_90a and prints the
desugared kernel and what the PTX shows.

    python tutorials/01_batch_copy.py [--tensors 16] [--rows 4096] [--cols 2048]
    python tutorials/01_batch_copy.py --sweep 1,4,16,64 [--plot batch_copy_bandwidth.png]
"""
import argparse
import sys
from typing import List

from _machine import ON_HOPPER, plot, show_compile, time_launches  # before cutlass: it configures the DSL

import cutlass
import cutlass.cute as cute
from cutlass.cute.nvgpu import cpasync

import gcdsl

TILE = (128, 64)
DTYPE = cutlass.Float32
TILE_BYTES = TILE[0] * TILE[1] * DTYPE.width // 8


@gcdsl.kernel
def batch_copy_kernel(
    loads: List[cute.CopyAtom],   # one TMA load atom per source tensor
    stores: List[cute.CopyAtom],  # one TMA store atom per destination tensor
    coords: cute.Tensor,          # tiled TMA coordinates, shared by all same-shape tensors
    tasks: cute.Tensor,           # Int32 [grid]: which tensor each CTA copies
    smem_layout: cute.Layout,
):
    bidx, _, _ = cute.arch.block_idx()
    warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
    k = tasks[bidx]                           # a runtime value
    tile = bidx % cute.size(coords, mode=[1])

    smem = cutlass.memory.SmemAllocator()
    mbar = smem.allocate_array(cutlass.Int64, 1)
    s_tile = smem.allocate_tensor(DTYPE, smem_layout, 128)
    g_tile = coords[((None, None), tile)]
    s_part, g_part = cpasync.tma_partition(
        loads[k], 0, cute.make_layout(1), cute.group_modes(s_tile, 0, 2), cute.group_modes(g_tile, 0, 2)
    )
    if warp == 0:
        with cute.arch.elect_one():
            cute.arch.mbarrier_init(mbar, 1)
            cute.arch.mbarrier_arrive_and_expect_tx(mbar, TILE_BYTES)
        cute.arch.mbarrier_init_fence()
        cute.copy(loads[k], g_part, s_part, tma_bar_ptr=mbar)
    cute.arch.sync_threads()  # the barrier is initialised before anyone waits on it
    cute.arch.mbarrier_wait(mbar, 0)
    if warp == 0:
        s_out, g_out = cpasync.tma_partition(
            stores[k], 0, cute.make_layout(1), cute.group_modes(s_tile, 0, 2), cute.group_modes(g_tile, 0, 2)
        )
        # In DSL 4.8.1 a TMA store is issued by every lane that reaches it: elect one.
        with cute.arch.elect_one():
            cute.copy(stores[k], s_out, g_out)
            cute.arch.cp_async_bulk_commit_group()
            cute.arch.cp_async_bulk_wait_group(0, read=True)


@cute.jit
def batch_copy(srcs: List[cute.Tensor], dsts: List[cute.Tensor], tasks: cute.Tensor):
    smem_layout = cute.make_layout(TILE, stride=(TILE[1], 1))
    g2s, s2g = cpasync.CopyBulkTensorTileG2SOp(), cpasync.CopyBulkTensorTileS2GOp()
    loads = [cpasync.make_tiled_tma_atom(g2s, s, smem_layout, TILE) for s in srcs]
    stores = [cpasync.make_tiled_tma_atom(s2g, d, smem_layout, TILE)[0] for d in dsts]
    coords = cute.zipped_divide(loads[0][1], TILE)
    batch_copy_kernel([a for a, _ in loads], stores, coords, tasks, smem_layout).launch(
        grid=(cute.size(tasks), 1, 1), block=(128, 1, 1)
    )


def compile_batch_copy(n_tensors: int, shape):
    """`batch_copy` for `n_tensors` fp32 tensors of `shape`, compiled for TVM-FFI.

    Compiled from fake tensors (no GPU needed) and called with torch tensors as
    they are: TVM-FFI converts the arguments in C, where the DSL's own call
    marshals each one in Python (`gcdsl.launch`).
    """
    import gcdsl.launch

    fake = cute.runtime.make_fake_compact_tensor
    srcs = [fake(DTYPE, shape, stride_order=(1, 0), assumed_align=16) for _ in range(n_tensors)]
    dsts = [fake(DTYPE, shape, stride_order=(1, 0), assumed_align=16) for _ in range(n_tensors)]
    tasks = fake(cutlass.Int32, (cute.sym_int(),), assumed_align=4)
    return gcdsl.launch.compile_tvm_ffi(batch_copy, srcs, dsts, tasks)


def run_on_gpu(n_tensors: int, args):
    """Copy `n_tensors` tensors, verify, time: (bit-exact, GB/s, median us)."""
    import torch

    shape = (args.rows, args.cols)
    tiles = (shape[0] // TILE[0]) * (shape[1] // TILE[1])
    srcs = [torch.randn(shape, device="cuda") for _ in range(n_tensors)]
    dsts = [torch.full(shape, float("nan"), device="cuda") for _ in range(n_tensors)]  # poisoned
    # CTA b copies tile (b % tiles) of tensor tasks[b]: every (tensor, tile) exactly once,
    # the tensors in a random order so that the index really is a runtime value.
    perm = torch.randperm(n_tensors, dtype=torch.int32)
    tasks = perm.repeat_interleave(tiles).cuda()
    compiled = compile_batch_copy(n_tensors, shape)
    compiled(srcs, dsts, tasks)
    torch.cuda.synchronize()
    bad = [i for i in range(n_tensors) if not torch.equal(srcs[i], dsts[i])]
    print(f"verify: {n_tensors} tensors of {shape[0]}x{shape[1]} fp32, "
          f"{'bit-exact' if not bad else f'MISMATCH in tensors {bad}'}")

    median, _, _ = time_launches(lambda: compiled(srcs, dsts, tasks), args.reps)
    moved = 2 * sum(t.numel() * t.element_size() for t in srcs)
    gbps = moved / median / 1e3
    print(f"bandwidth: {gbps:.0f} GB/s (read + write, median of {args.reps}, "
          f"{median:.0f} us for {moved / 1e9:.2f} GB)")
    return not bad, gbps, median


def sweep_on_gpu(args) -> bool:
    """Bandwidth against the number of tensors: a table, and a PNG of it."""
    counts = [int(n) for n in args.sweep.split(",")]
    rows = [(n, *run_on_gpu(n, args)) for n in counts]
    print(f"\n{'tensors':>8} {'GB/s':>8} {'us':>9}  verified")
    for n, ok, gbps, us in rows:
        print(f"{n:>8} {gbps:>8.0f} {us:>9.1f}  {'bit-exact' if ok else 'MISMATCH'}")
    plot(args.plot, f"Tutorial 01: batched TMA copy, {args.rows}x{args.cols} fp32 per tensor",
         "tensors (descriptors per list)", "GB/s (read + write)", {n: gbps for n, _, gbps, _ in rows})
    return all(ok for _, ok, _, _ in rows)


def compile_only(args) -> bool:
    compile_batch_copy(args.tensors, (args.rows, args.cols))
    show_compile(batch_copy_kernel)
    print(f"  ({args.tensors} loads + {args.tensors} stores = {2 * args.tensors} descriptors packed in two "
          f"parameters, beside the two template atoms: {2 * (args.tensors + 1) * 128} bytes of grid-constant "
          "parameters)")
    return True


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tensors", type=int, default=16)
    parser.add_argument("--rows", type=int, default=4096)
    parser.add_argument("--cols", type=int, default=2048)
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--sweep", metavar="N,N,...",
                        help="tensor counts to run one after another (GPU): bandwidth against N")
    parser.add_argument("--plot", default="batch_copy_bandwidth.png", help="where --sweep writes its PNG")
    args = parser.parse_args()
    if not ON_HOPPER:
        if args.sweep:
            print("--sweep needs a GPU: compiling once instead.\n")
        return 0 if compile_only(args) else 1
    ok = sweep_on_gpu(args) if args.sweep else run_on_gpu(args.tensors, args)[0]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
