"""A small Hopper (sm_90a) GEMM in CuTe DSL: C[M,N] = A[M,K] @ B[N,K]^T.

fp16 inputs (both K-major, i.e. row-major torch tensors), fp32 accumulation and
fp32 output.  One CTA computes one 128x128 tile of C with a single warpgroup
(128 threads):

* warp 0 streams 128x64 tiles of A and B into a NUM_STAGES-deep ring of
  128B-swizzled shared-memory buffers with TMA; each stage has one "full"
  mbarrier that completes once the TMA bytes of that stage have landed;
* the whole warpgroup waits on the stage's mbarrier, issues WGMMAs straight
  from shared memory, waits for them, and only then lets warp 0 refill the
  stage with the k-tile NUM_STAGES ahead;
* the fp32 accumulators go straight from registers to global memory.

M and N must be multiples of 128 and K a multiple of 64 (the epilogue stores
without predication).
"""
import cutlass
import cutlass.cute as cute
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass.memory import SmemAllocator
from cutlass.tensor_utils import LayoutEnum
from cutlass.cute.nvgpu import cpasync, warpgroup

from tests.kernels import deco

AB_DTYPE = cutlass.Float16
ACC_DTYPE = cutlass.Float32
TILE_M, TILE_N, TILE_K = 128, 128, 64
TILE_MNK = (TILE_M, TILE_N, TILE_K)
NUM_STAGES = 4  # 4 x 32 KiB of A+B tiles in shared memory
NUM_THREADS = 128  # one warpgroup


@cute.struct
class SharedStorage:
    # One transaction mbarrier per stage: "the TMA bytes of this stage arrived".
    full_bar: cute.struct.MemRange[cutlass.Int64, NUM_STAGES]


@deco.kernel
def gemm_kernel(
    tiled_mma: cute.TiledMma,
    tma_atom_a: cute.CopyAtom,
    mA: cute.Tensor,  # TMA coordinate tensor over A, (M, K)
    tma_atom_b: cute.CopyAtom,
    mB: cute.Tensor,  # TMA coordinate tensor over B, (N, K)
    mC: cute.Tensor,  # (M, N), plain global tensor
    sA_layout: cute.ComposedLayout,  # (TILE_M, TILE_K, NUM_STAGES), swizzled
    sB_layout: cute.ComposedLayout,  # (TILE_N, TILE_K, NUM_STAGES), swizzled
):
    tidx, _, _ = cute.arch.thread_idx()
    bidx, bidy, _ = cute.arch.block_idx()
    warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())

    if warp_idx == 0:
        cpasync.prefetch_descriptor(tma_atom_a)
        cpasync.prefetch_descriptor(tma_atom_b)

    # Shared memory: barriers, then the A/B rings.  128B swizzle needs the
    # buffers 1024-byte aligned.
    smem = SmemAllocator()
    storage = smem.allocate(SharedStorage)
    full_bar = storage.full_bar.data_ptr()
    sA = smem.allocate_tensor(
        AB_DTYPE, sA_layout.outer, byte_alignment=1024, swizzle=sA_layout.inner
    )
    sB = smem.allocate_tensor(
        AB_DTYPE, sB_layout.outer, byte_alignment=1024, swizzle=sB_layout.inner
    )

    # Arrival count 1: the single arrive comes with expect_tx from warp 0.
    if warp_idx == 0:
        with cute.arch.elect_one():
            for s in cutlass.range_constexpr(NUM_STAGES):
                cute.arch.mbarrier_init(full_bar + s, 1)
    cute.arch.mbarrier_init_fence()
    cute.arch.sync_threads()  # every thread must see initialised barriers

    # This CTA's tiles: (TILE_M, TILE_K, k_tiles), (TILE_N, TILE_K, k_tiles),
    # (TILE_M, TILE_N).
    tile_coord = (bidx, bidy, None)
    gA = cute.local_tile(mA, TILE_MNK, tile_coord, proj=(1, None, 1))
    gB = cute.local_tile(mB, TILE_MNK, tile_coord, proj=(None, 1, 1))
    gC = cute.local_tile(mC, TILE_MNK, tile_coord, proj=(1, 1, None))
    k_tiles = cute.size(gA, mode=[2])

    # TMA views: one whole (TILE, TILE_K) tile is one TMA "atom"; rest modes are
    # the stage (smem) and the k-tile (gmem).  No cluster, so CTA coord 0 of 1.
    tAsA, tAgA = cpasync.tma_partition(
        tma_atom_a, 0, cute.make_layout(1),
        cute.group_modes(sA, 0, 2), cute.group_modes(gA, 0, 2),
    )
    tBsB, tBgB = cpasync.tma_partition(
        tma_atom_b, 0, cute.make_layout(1),
        cute.group_modes(sB, 0, 2), cute.group_modes(gB, 0, 2),
    )
    # Exact bytes one stage receives (both operands); mbarrier tx accounting.
    tma_bytes = cute.size_in_bytes(
        AB_DTYPE, cute.slice_(sA_layout, (None, None, 0))
    ) + cute.size_in_bytes(AB_DTYPE, cute.slice_(sB_layout, (None, None, 0)))

    # MMA views.  WGMMA reads A/B from smem through descriptors (same for
    # every thread of the warpgroup); the accumulator is per thread.
    thr_mma = tiled_mma.get_slice(tidx)
    tCsA = thr_mma.partition_A(sA)  # (MMA, MMA_M, MMA_K, NUM_STAGES)
    tCsB = thr_mma.partition_B(sB)  # (MMA, MMA_N, MMA_K, NUM_STAGES)
    tCrA = tiled_mma.make_fragment_A(tCsA)  # smem descriptors
    tCrB = tiled_mma.make_fragment_B(tCsB)
    tCgC = thr_mma.partition_C(gC)  # (MMA, MMA_M, MMA_N)
    acc = cute.make_rmem_tensor(tCgC.shape, ACC_DTYPE)
    acc.fill(0.0)  # belt and braces; the first WGMMA also runs with scale-d = 0
    num_k_blocks = cute.size(tCrA, mode=[2])  # TILE_K / 16

    # Prologue: fill the ring.  expect_tx comes before the copies so the
    # barrier cannot complete early; TMA copies elect their own issuing lane.
    if warp_idx == 0:
        for s in cutlass.range_constexpr(NUM_STAGES):
            if s < k_tiles:
                with cute.arch.elect_one():
                    cute.arch.mbarrier_arrive_and_expect_tx(full_bar + s, tma_bytes)
                cute.copy(tma_atom_a, tAgA[(None, s)], tAsA[(None, s)], tma_bar_ptr=full_bar + s)
                cute.copy(tma_atom_b, tBgB[(None, s)], tBsB[(None, s)], tma_bar_ptr=full_bar + s)

    # The first WGMMA overwrites the accumulator, every later one adds to it.
    tiled_mma.set(warpgroup.Field.ACCUMULATE, False)
    for k in cutlass.range(k_tiles, unroll=1):
        stage = k % NUM_STAGES
        # Stage `stage` is filled once per trip round the ring: phase parity
        # of the trip.
        cute.arch.mbarrier_wait(full_bar + stage, (k // NUM_STAGES) % 2)

        warpgroup.fence()  # order earlier register writes before the WGMMAs
        for kb in cutlass.range_constexpr(num_k_blocks):
            cute.gemm(
                tiled_mma, acc,
                tCrA[(None, None, kb, stage)], tCrB[(None, None, kb, stage)],
                acc,
            )
            tiled_mma.set(warpgroup.Field.ACCUMULATE, True)
        warpgroup.commit_group()
        # Wait for this k-tile's WGMMAs: their smem reads must be over before
        # the stage is refilled (conservative; costs MMA/MMA overlap).
        warpgroup.wait_group(0)
        cute.arch.sync_threads()  # ... in all four warps

        # Refill this stage with the k-tile NUM_STAGES ahead.
        next_k = k + NUM_STAGES
        if warp_idx == 0 and next_k < k_tiles:
            with cute.arch.elect_one():
                cute.arch.mbarrier_arrive_and_expect_tx(full_bar + stage, tma_bytes)
            cute.copy(tma_atom_a, tAgA[(None, next_k)], tAsA[(None, stage)], tma_bar_ptr=full_bar + stage)
            cute.copy(tma_atom_b, tBgB[(None, next_k)], tBsB[(None, stage)], tma_bar_ptr=full_bar + stage)

    # Epilogue: registers -> global, converting to C's element type.
    tCrC = cute.make_rmem_tensor(tCgC.shape, mC.element_type)
    tCrC.store(acc.load().to(mC.element_type))
    cute.autovec_copy(tCrC, tCgC)


@cute.jit
def gemm(a: cute.Tensor, b: cute.Tensor, c: cute.Tensor):
    """C = A @ B^T; A (M, K), B (N, K) fp16 row-major, C (M, N) row-major."""
    if cutlass.const_expr(a.element_type != AB_DTYPE or b.element_type != AB_DTYPE):
        raise TypeError(f"A and B must be {AB_DTYPE}")

    k_major = cute.nvgpu.OperandMajorMode.K
    # One warpgroup; a 64x128x16 WGMMA atom, repeated twice along M.
    tiled_mma = sm90_utils.make_trivial_tiled_mma(
        AB_DTYPE, AB_DTYPE, k_major, k_major, ACC_DTYPE, (1, 1, 1),
        tiler_mn=(64, TILE_N),
    )
    # K-major, 64 fp16 = 128 B per row: the helpers pick the K_SW128 atom.
    sA_layout = sm90_utils.make_smem_layout_a(
        LayoutEnum.ROW_MAJOR, TILE_MNK, AB_DTYPE, NUM_STAGES
    )
    sB_layout = sm90_utils.make_smem_layout_b(
        LayoutEnum.ROW_MAJOR, TILE_MNK, AB_DTYPE, NUM_STAGES
    )
    # One TMA box = one stage of one operand.
    tma_atom_a, tma_a = cpasync.make_tiled_tma_atom(
        cpasync.CopyBulkTensorTileG2SOp(), a,
        cute.slice_(sA_layout, (None, None, 0)), (TILE_M, TILE_K),
    )
    tma_atom_b, tma_b = cpasync.make_tiled_tma_atom(
        cpasync.CopyBulkTensorTileG2SOp(), b,
        cute.slice_(sB_layout, (None, None, 0)), (TILE_N, TILE_K),
    )

    grid = cute.ceil_div((*c.layout.shape, 1), (TILE_M, TILE_N))
    gemm_kernel(
        tiled_mma, tma_atom_a, tma_a, tma_atom_b, tma_b, c, sA_layout, sB_layout
    ).launch(grid=grid, block=(NUM_THREADS, 1, 1))


def fake_args(m: int = 512, n: int = 512, k: int = 256):
    """Compile-only stand-ins for (A, B, C); stride_order (1, 0) = row-major."""
    make = cute.runtime.make_fake_compact_tensor
    a = make(AB_DTYPE, (m, k), stride_order=(1, 0), assumed_align=16)
    b = make(AB_DTYPE, (n, k), stride_order=(1, 0), assumed_align=16)
    c = make(ACC_DTYPE, (m, n), stride_order=(1, 0), assumed_align=16)
    return a, b, c


def run_on_gpu() -> bool:
    import torch
    from cutlass.cute.runtime import from_dlpack

    # Non-square, more k-tiles than stages: catches transposes and phase bugs.
    m, n, k = 384, 256, 1024
    torch.manual_seed(0)
    a = torch.randn(m, k, device="cuda", dtype=torch.float16)
    b = torch.randn(n, k, device="cuda", dtype=torch.float16)
    c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float32)

    args = [from_dlpack(t, assumed_align=16) for t in (a, b, c)]
    compiled = cute.compile(gemm, *args)
    compiled(*args)
    torch.cuda.synchronize()

    ref = a.float() @ b.float().T
    err = (c - ref).abs().max().item()  # NaN left anywhere propagates here
    # fp16 inputs are exact in fp32; only the summation order differs.
    ok = bool(torch.allclose(c, ref, atol=1e-2, rtol=1e-3))
    print(f"wgmma_gemm {m}x{n}x{k}: {'PASS' if ok else 'FAIL'} max_abs_err={err:.3e}")
    return ok


if __name__ == "__main__":
    import torch

    if torch.cuda.is_available():
        raise SystemExit(0 if run_on_gpu() else 1)
    # __ptx__ is kept when CUTE_DSL_KEEP includes "ptx" (it is also dumped to
    # CUTE_DSL_DUMP_DIR).
    ptx = cute.compile(gemm, *fake_args()).__ptx__
    if ptx is None:
        raise SystemExit("no PTX kept: set CUTE_DSL_KEEP=ptx,ir")
    print(f"wgmma.mma_async: {ptx.count('wgmma.mma_async')}  "
          f"cp.async.bulk.tensor: {ptx.count('cp.async.bulk.tensor')}")
