"""A persistent, warp-specialized Hopper (sm_90a) grouped GEMM whose groups live on the device.

    out[rows of group g, :] = a[rows of group g, :] @ b[g].T      for g in 0 .. G-1

`a` is (M, K) with the rows of the G groups stacked, `b` is (G, N, K) (K
contiguous), `out` is (M, N). Group g's rows are `offs[g-1]:offs[g]`, and `offs`
is read by the kernel from global memory: nothing on the host depends on it, so a
call needs no device-to-host copy and can be captured in a CUDA graph. One CTA
per SM walks the tiles of all groups.

Descriptors: three, in the kernel's grid-constant parameter space, none of them
depending on `offs` (they depend on the addresses, M, N, K and G only)
    A   one descriptor over the whole (M, K) tensor; a tile of group g starts at
        row `start[g] + 128 * m_tile`. A tile that runs past the group's last
        row reads the next group's rows (or TMA's zero fill past M): those rows
        only reach accumulator rows that the clipped store below discards.
    B   one 3-D descriptor over (N, K, G); the group is a TMA coordinate.
    C   one "ragged" 3-D descriptor over the output, (M, N, M + 1) with strides
        (N, 1, N) from the base `out - M * N`: row coordinate `M - rows + r` and
        third coordinate `start + rows` address row `start + r` of `out`, and
        TMA drops every row r >= rows of a box, since its row coordinate is then
        past the extent M. So each group's store clips exactly at its own last
        row, through one descriptor encoded from the output's address alone.
    Nothing is written to a descriptor in the kernel: no `tensormap.replace`, no
    proxy fence, no workspace.

The other cases (`GemmConfig.ragged`): with K grouped (the weight gradient), A
(M, T) and B (N, T) each get a 3-D view (M, T, T) with strides (1, M, M) from the
tensor itself: third coordinate the group's start, second the column within the
group. A group's k-tiles end at its end, so its first k-tile starts up to 63
columns before the group, at negative coordinates that TMA fills with zeros. (A
load does not use the store's base moved back before the tensor: a TMA load from
a descriptor whose base lies in unmapped memory faults.) A batch has 3-D views
with the group as the third coordinate, and no schedule.

Scheduler: at the start every CTA reads `offs` (one warp, G / 32 values a lane,
all loads in flight at once) and builds a table in shared memory:
    tile_end[g]   cumulative count of cluster tiles (cluster_m M-tiles x one
                  N-tile) up to and including group g
    row_end[g+1]  the group's clamped end row, after row_end[0] = 0: group g's
                  rows are row_end[g]:row_end[g+1]
`offs` is clamped as it is read: each end to the largest end before it (so rows
never go negative) and to M (so no row past `a` and `out` is touched). A valid
`offs` is unchanged by this; an invalid one computes garbage in the rows it
names but never writes outside `out[:M]`. Tiles are numbered group by group and,
within a group, M-tile fastest, so the CTAs working at the same time on a group
share the same B tile through L2. Cluster c takes cluster tiles c, c + clusters,
c + 2 clusters, ... and finds their group by walking the table forward.

Roles (384 threads, three warpgroups)
    warpgroup 0   warp 0 issues the TMA loads of A and B into a ring of
                  `stages` shared-memory buffers (`cutlass.pipeline.PipelineTmaAsync`:
                  a full and an empty mbarrier per stage); warp 1 builds the
                  schedule before the roles split; warps 1-3 idle after it.
    warpgroups 1-2  the consumers: each runs WGMMAs for 64 rows of the 128-row tile
                  (fp32 accumulators in registers), then both convert their
                  accumulators to the output type, stage them in shared memory in
                  128x32 sub-tiles and warp 4 stores each sub-tile with TMA.
    A consumer warpgroup whose 64 rows all lie past the group's end skips its
    WGMMAs (it still waits for and releases every stage): a group of 64 rows
    costs half a tile of tensor-core time.

Ping-pong (`GemmConfig.schedule="pingpong"`; the host picks it for ragged M with
N <= 1536): tiles of 128 x 128 or 128 x 192, and the consumer warpgroups take the CTA's
tiles in turn (`consume_pingpong`), each waiting for and releasing only its own tiles'
stages, storing through its own sub-tile buffers with its own named barrier, so that
one warpgroup's epilogue runs while the other's WGMMAs do. No pairs.

SwiGLU (`GemmConfig.activation="swiglu"`, ragged M): B's N viewed as (row, half,
tile), so one TMA box brings a tile's gate rows and the matching up rows; the epilogue
pairs each gate accumulator with its up accumulator (same thread, tile_n / 2 columns
on) and stores silu(gate) * up, half the tile's columns.

Pairs (`cluster_m=2`, a 2x1 cluster): the two CTAs of a cluster take two
consecutive M-tiles of one group and the same B tile; each loads half of the B
tile and multicasts it to both, halving B's traffic from L2. A group with an odd
number of M-tiles leaves the second CTA of its last pair without rows: it takes
part in the loads (its half of B serves its peer), skips its WGMMAs and its epilogue.
No TMA load box lies wholly outside its tensor: such a CTA loads its group's first
A tile, and the host uses pairs only when the last N-tile's second half of B starts
inside B (`pairs_fit`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Tuple

import cuda.bindings.driver as cuda

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
import cutlass.utils.hopper_helpers as sm90
from cutlass.cute.nvgpu import cpasync, warpgroup
from cutlass.memory import SmemAllocator, get_smem_capacity_in_bytes
from cutlass.tensor_utils import LayoutEnum

import gcdsl

from .grouped_cases import MAX_GROUPS  # a lane of the schedule warp holds G / 32 groups in registers

TILE_M = 128
TILE_K = 64
TILE_NS = (128, 256)  # cooperative: both warpgroups' accumulators hold one tile
EPI_TILE = (TILE_M, 32)  # one TMA store: 128 rows x 32 columns of the output tile
# How the two consumer warpgroups share the work (`GemmConfig.schedule`):
#   "cooperative"  both on each 128-row tile, 64 rows each, and both on its epilogue;
#   "pingpong"     each on every other tile of the CTA, so that one's epilogue runs
#                  while the other's WGMMAs do (the tensor cores idle through the
#                  epilogues otherwise). A warpgroup's accumulators hold its whole
#                  128-row tile, so N stops at 192 (192 of its threads' registers).
#                  Its own sub-tile buffers and barrier each.
SCHEDULES = ("cooperative", "pingpong")
PINGPONG_TILE_M = 128
PINGPONG_TILE_NS = (128, 192)

THREADS = 384
PRODUCER_REGS, CONSUMER_REGS = 40, 232  # 128 x 40 + 256 x 232 <= 64K registers
CONSUMER_WARPS = 8
SCHEDULE_WARP = 1  # builds the schedule from offs while warp 0 prefetches descriptors
FIRST_CONSUMER_WARP = 4
EPILOGUE_BARRIER = pipeline.NamedBarrier(barrier_id=1, num_threads=256)
# Ping-pong: ids 1 and 2 are the warpgroups' epilogue barriers; 3 and 4 (3 + the
# warpgroup's turn) hand the mainloop from one warpgroup to the other (`consume_pingpong`).
FIRST_TURN_BARRIER = 3
MAX_STAGES = 8
HEADER_ALIGN = 1024  # the mbarriers and the schedule share the first aligned block(s)

AB_DTYPES = (cutlass.Float16, cutlass.BFloat16)
# What the epilogue applies: nothing, or SwiGLU over B's two halves (B's rows [0, N/2)
# the gate, [N/2, N) the up projection: an MoE's w13 as models store it). With "swiglu"
# each tile holds tile_n/2 gate and the matching tile_n/2 up columns, and stores
# silu(gate) * up: tile_n/2 columns of an (M, N/2) output.
ACTIVATIONS = ("none", "swiglu")
# What is grouped: the rows of A and of the output ("m", ragged by `offs`), the
# reduction ("k", ragged by `offs`, a 3-D output), or nothing ("batch", G equal problems).
RAGGED_MODES = ("m", "k", "batch")
A_MAJORS = ("k", "m")  # which of A's (M, K) modes is contiguous
B_MAJORS = ("k", "n")  # which of B's (N, K) modes is contiguous
C_DTYPES = (cutlass.Float16, cutlass.BFloat16, cutlass.Float32)


def pairs_fit(n: int, tile_n: int) -> bool:
    """Whether, in a pair, each CTA's half of every B tile starts inside B's N rows."""
    return n % tile_n == 0 or n % tile_n > tile_n // 2


def groups_per_lane(groups: int) -> int:
    """Groups each lane of the schedule warp reads: consecutive ones, G / 32 rounded up."""
    return -(-groups // 32)


def header_bytes(groups: int) -> int:
    """Shared memory before the A/B ring: mbarriers, then the schedule's two Int32 columns."""
    schedule = 4 * (2 * 32 * groups_per_lane(groups) + 1)  # tile_end, and row_end after a leading 0
    return -(-(MAX_STAGES * 2 * 8 + schedule) // HEADER_ALIGN) * HEADER_ALIGN


@dataclass(frozen=True)
class GemmConfig:
    """What one compiled kernel is specialised for. `__post_init__` is its one validity check."""

    ab_dtype: Any
    c_dtype: Any
    groups: int
    n: int
    k: int  # 0 when K is ragged (a runtime extent)
    tile_n: int
    # CTAs per cluster along M: a pair works on two consecutive M-tiles of one group
    # and the same B tile, each loading half of it and multicasting it to both.
    cluster_m: int = 1
    ragged: str = "m"
    a_major: str = "k"
    b_major: str = "k"
    m: int = 0  # M when K is ragged (then M is fixed and K the runtime extent)
    schedule: str = "cooperative"
    activation: str = "none"

    @property
    def tile_m(self) -> int:
        return PINGPONG_TILE_M if self.schedule == "pingpong" else TILE_M

    @property
    def epi_stages(self) -> int:
        """Output sub-tiles in flight: four of 8 KiB for 16-bit outputs, two of 16 KiB for
        fp32 (with ping-pong, half as many for each warpgroup)."""
        return (4 if self.c_dtype.width == 16 else 2) // (2 if self.schedule == "pingpong" else 1)

    @property
    def out_tile_n(self) -> int:
        """Output columns of one tile: SwiGLU halves them."""
        return self.tile_n // 2 if self.activation == "swiglu" else self.tile_n

    def __post_init__(self) -> None:
        problems = []
        if self.ab_dtype not in AB_DTYPES:
            problems.append(f"A and B are {self.ab_dtype}, not Float16 or BFloat16")
        if self.c_dtype not in C_DTYPES:
            problems.append(f"the output is {self.c_dtype}, not Float16, BFloat16 or Float32")
        if not 1 <= self.groups <= (MAX_GROUPS if self.ragged != "batch" else 2**31 - 1):
            problems.append(f"G = {self.groups} is outside 1 to {MAX_GROUPS}")
        tile_ns = PINGPONG_TILE_NS if self.schedule == "pingpong" else TILE_NS
        if self.tile_n not in tile_ns:
            problems.append(f"tile_n = {self.tile_n} is not one of {tile_ns} ({self.schedule} schedule)")
        if self.cluster_m not in (1, 2):
            problems.append(f"cluster_m = {self.cluster_m} is not 1 or 2")
        elif self.cluster_m == 2 and not self.pairs_fit:
            problems.append(f"pairs need N mod {self.tile_n} to be 0 or above {self.tile_n // 2}; N = {self.n}")
        elif self.cluster_m == 2 and self.ragged != "m":
            problems.append("pairs are built for ragged M only")
        elif self.cluster_m == 2 and self.schedule != "cooperative":
            problems.append("pairs are built for the cooperative schedule only")
        if self.schedule not in SCHEDULES:
            problems.append(f"schedule {self.schedule!r} is not one of {SCHEDULES}")
        if self.ragged not in RAGGED_MODES or self.a_major not in A_MAJORS or self.b_major not in B_MAJORS:
            problems.append(f"ragged {self.ragged!r}, A {self.a_major!r}-major, B {self.b_major!r}-major: "
                            f"expected one of {RAGGED_MODES}, {A_MAJORS}, {B_MAJORS}")
        elif self.ragged == "k":
            # The ragged K mode is read through a second descriptor mode of K's stride,
            # and TMA strides are 16-byte multiples: K must not be the contiguous mode.
            if (self.a_major, self.b_major) != ("m", "n"):
                problems.append("ragged K needs A M-major and B N-major (K is clipped through a strided mode)")
            if self.m < 1 or self.k != 0:
                problems.append(f"ragged K has a fixed M and a runtime K; got m = {self.m}, k = {self.k}")
        elif self.k < 1 or self.m != 0:
            problems.append(f"ragged {self.ragged!r} has a fixed K and a runtime M; got m = {self.m}, k = {self.k}")
        if self.activation not in ACTIVATIONS:
            problems.append(f"activation {self.activation!r} is not one of {ACTIVATIONS}")
        elif self.activation == "swiglu":
            if (self.ragged, self.b_major, self.cluster_m) != ("m", "k", 1):
                problems.append("SwiGLU is built for ragged M, B K-major, no pairs")
            if self.n % self.tile_n:
                problems.append(f"SwiGLU reads a tile's gate and up halves from B's two halves: N / 2 = "
                                f"{self.n // 2} must be a multiple of tile_n / 2 = {self.tile_n // 2}")
        if self.c_dtype in C_DTYPES and (self.out_tile_n // EPI_TILE[1]) % self.epi_stages:
            problems.append(f"a tile's {self.out_tile_n // EPI_TILE[1]} output sub-tiles do not cycle through "
                            f"{self.epi_stages} buffers")
        if problems:
            raise ValueError("unsupported grouped GEMM configuration: " + "; ".join(problems))

    @property
    def pairs_fit(self) -> bool:
        return pairs_fit(self.n, self.tile_n)


class HopperGroupedGemm:
    """One compiled configuration (`GemmConfig`): dtypes, G, N, K, tile N, CTAs per cluster.

    `__call__` is the host function to `cute.compile`:
        (a_ptr, b_ptr, c_ptr, offs_ptr, total, num_ctas, stream)
    with `c_ptr` the output's address moved back by M x N elements (the base of
    the ragged store descriptor) and `offs_ptr` the (G,) Int32 group ends on the device.
    """

    def __init__(self, config: GemmConfig) -> None:
        self.config = config
        self.ab_dtype, self.c_dtype, self.acc_dtype = config.ab_dtype, config.c_dtype, cutlass.Float32
        self.groups, self.n, self.k, self.m = config.groups, config.n, config.k, config.m
        self.ragged = config.ragged
        self.pingpong = config.schedule == "pingpong"
        self.tile_m = config.tile_m
        self.tile_mnk = (self.tile_m, config.tile_n, TILE_K)
        self.epi_tile = (self.tile_m, EPI_TILE[1])
        self.cluster_m = config.cluster_m
        self.n_tiles = -(-config.n // config.tile_n)
        self.k_tiles = -(-config.k // TILE_K)  # per tile when K is fixed
        self.m_tiles = -(-config.m // self.tile_m)  # per group when M is fixed (ragged K)
        self.table_groups = config.groups if config.ragged != "batch" else 1  # a batch needs no schedule
        self.lane_groups = groups_per_lane(self.table_groups)
        self.swiglu = config.activation == "swiglu"
        self.out_tile_n = config.out_tile_n
        self.epi_stages = config.epi_stages
        self.epi_buffers = self.epi_stages * (2 if self.pingpong else 1)
        self.epi_bytes = self.epi_tile[0] * self.epi_tile[1] * config.c_dtype.width // 8 * self.epi_buffers
        # Bytes TMA writes into one stage (A tile + B tile): the full barrier's transaction count.
        self.stage_bytes = (self.tile_m + config.tile_n) * TILE_K * config.ab_dtype.width // 8
        self.header_bytes = header_bytes(self.table_groups)
        budget = get_smem_capacity_in_bytes("sm_90") - self.epi_bytes - self.header_bytes
        self.stages = min(MAX_STAGES, budget // self.stage_bytes)

    @property
    def stage_consumer_warps(self) -> int:
        """Warps that read each stage and release it (the empty barrier's arrivals per CTA)."""
        return CONSUMER_WARPS // 2 if self.pingpong else CONSUMER_WARPS

    @property
    def smem_bytes(self) -> int:
        """Shared memory of one CTA: barriers and schedule, the A/B ring, the output sub-tiles."""
        return self.header_bytes + self.stages * self.stage_bytes + self.epi_bytes

    @cute.jit
    def __call__(
        self,
        a_ptr: cute.Pointer,
        b_ptr: cute.Pointer,
        c_ptr: cute.Pointer,
        offs_ptr: cute.Pointer,
        total: cutlass.Int32,
        num_ctas: cutlass.Int32,
        stream: cuda.CUstream,
    ):
        groups = self.groups
        tile_m, tile_n, tile_k = self.tile_mnk
        a, b, c = self.operands(a_ptr, b_ptr, c_ptr, total)
        offs = cute.make_tensor(offs_ptr, cute.make_layout(groups))

        # A 64 x tile_n WGMMA per consumer warpgroup: stacked along M in one tile
        # (cooperative), or repeated down a warpgroup's own tile (ping-pong).
        a_layout = LayoutEnum.ROW_MAJOR if self.config.a_major == "k" else LayoutEnum.COL_MAJOR
        b_layout = LayoutEnum.ROW_MAJOR if self.config.b_major == "k" else LayoutEnum.COL_MAJOR
        tiled_mma = sm90.make_trivial_tiled_mma(
            self.ab_dtype, self.ab_dtype, a_layout.sm90_mma_major_mode(), b_layout.sm90_mma_major_mode(),
            self.acc_dtype, (1, 1, 1) if self.pingpong else (2, 1, 1), tiler_mn=(64, tile_n)
        )
        a_smem = sm90.make_smem_layout_a(a_layout, self.tile_mnk, self.ab_dtype, self.stages)
        b_smem = sm90.make_smem_layout_b(b_layout, self.tile_mnk, self.ab_dtype, self.stages)
        c_smem = sm90.make_smem_layout_epi(self.c_dtype, LayoutEnum.ROW_MAJOR, self.epi_tile, self.epi_buffers)

        tma_a, tma_coords_a = cpasync.make_tiled_tma_atom(
            cpasync.CopyBulkTensorTileG2SOp(), a, cute.slice_(a_smem, (None, None, 0)), (tile_m, tile_k)
        )
        b_op = cpasync.CopyBulkTensorTileG2SMulticastOp() if self.cluster_m > 1 else cpasync.CopyBulkTensorTileG2SOp()
        tma_b, tma_coords_b = cpasync.make_tiled_tma_atom(
            b_op, b, cute.slice_(b_smem, (None, None, 0)), (tile_n, tile_k), num_multicast=self.cluster_m
        )
        tma_c, tma_coords_c = cpasync.make_tiled_tma_atom(
            cpasync.CopyBulkTensorTileS2GOp(), c, cute.slice_(c_smem, (None, None, 0)), self.epi_tile
        )

        table = 32 * self.lane_groups

        @cute.struct
        class SharedStorage:
            mainloop_barriers: cute.struct.MemRange[cutlass.Int64, self.stages * 2]
            tile_end: cute.struct.MemRange[cutlass.Int32, table]
            row_end: cute.struct.MemRange[cutlass.Int32, table + 1]  # entry 0 is 0: group g's start is row_end[g]
            sA: cute.struct.Align[cute.struct.MemRange[self.ab_dtype, cute.cosize(a_smem)], HEADER_ALIGN]
            sB: cute.struct.Align[cute.struct.MemRange[self.ab_dtype, cute.cosize(b_smem)], 1024]
            sC: cute.struct.Align[cute.struct.MemRange[self.c_dtype, cute.cosize(c_smem)], 1024]

        self.shared_storage = SharedStorage

        self.kernel(
            tiled_mma, tma_a, tma_coords_a, tma_b, tma_coords_b, tma_c, tma_coords_c,
            offs, total, a_smem, b_smem, c_smem,
        ).launch(grid=(num_ctas, 1, 1), block=(THREADS, 1, 1), cluster=(self.cluster_m, 1, 1),
                 min_blocks_per_mp=1, stream=stream)

    @cute.jit
    def operands(self, a_ptr: cute.Pointer, b_ptr: cute.Pointer, c_ptr: cute.Pointer, total: cutlass.Int32):
        """A (M, K, ...), B (N, K, ...) and the output (M, N, ...) as the descriptors see them.

        `total` is the runtime extent: the stacked rows (ragged M, and M of a batch) or
        the stacked reduction (ragged K). A ragged mode gets a third mode of the same
        stride: the output's rows, from `total` rows before the output (the ragged view
        of the module docstring; the host moves the pointer back), or the operands' K,
        from the tensors themselves (a load's descriptor must start inside mapped
        memory, which a pointer moved back before a tensor need not be).
        """
        n, k, m, groups = self.n, self.k, self.m, self.groups
        a_k_major, b_k_major = self.config.a_major == "k", self.config.b_major == "k"
        b_stride = (k, 1, n * k) if b_k_major else (1, n, n * k)  # (N, K, G), the group a TMA coordinate
        if cutlass.const_expr(self.ragged == "m"):
            # a is (M, K) stacked by rows; only M is a runtime extent.
            a = cute.make_tensor(a_ptr, cute.make_layout((total, k), stride=(k, 1) if a_k_major else (1, total)))
            b = cute.make_tensor(b_ptr, cute.make_layout((n, k, groups), stride=b_stride))
            out_n = n
            if cutlass.const_expr(self.swiglu):
                # N as (row in a half tile, half, tile): N-tile j holds gate rows j h ... j h + h - 1
                # and the up rows N/2 apart, h = tile_n / 2; one TMA box of tile_n rows loads both.
                half = self.config.tile_n // 2
                b = cute.make_tensor(b_ptr, cute.make_layout(((half, 2, n // self.config.tile_n), k, groups),
                                                             stride=((k, n // 2 * k, half * k), 1, n * k)))
                out_n = n // 2
            # The ragged view of the output (see the module docstring): rows, columns and a
            # third mode whose stride is also one row, from M rows before the output.
            c = cute.make_tensor(c_ptr, cute.make_layout((total, out_n, total + 1), stride=(out_n, 1, out_n)))
        elif cutlass.const_expr(self.ragged == "k"):
            # a is (M, K) and b (N, K) with K stacked and never contiguous. Both get a
            # second K mode of the same stride, whose coordinate is the group's start: the
            # first mode then counts from the group's start, and a group's first k-tile
            # reads zeros before it (a negative coordinate) instead of the previous group.
            a = cute.make_tensor(a_ptr, cute.make_layout((m, total, total), stride=(1, m, m)))
            b = cute.make_tensor(b_ptr, cute.make_layout((n, total, total), stride=(1, n, n)))
            c = cute.make_tensor(c_ptr, cute.make_layout((m, n, groups), stride=(n, 1, m * n)))
        else:
            a = cute.make_tensor(a_ptr, cute.make_layout(
                (total, k, groups), stride=(k, 1, total * k) if a_k_major else (1, total, total * k)))
            b = cute.make_tensor(b_ptr, cute.make_layout((n, k, groups), stride=b_stride))
            c = cute.make_tensor(c_ptr, cute.make_layout((total, n, groups), stride=(n, 1, total * n)))
        return a, b, c

    @gcdsl.kernel
    def kernel(
        self,
        tiled_mma: cute.TiledMma,
        tma_a: cute.CopyAtom,
        mA: cute.Tensor,  # TMA coordinates over a: (M, K)
        tma_b: cute.CopyAtom,
        mB: cute.Tensor,  # TMA coordinates over b: (N, K, G)
        tma_c: cute.CopyAtom,
        mC: cute.Tensor,  # TMA coordinates over the ragged output: (M, N, M + 1)
        offs: cute.Tensor,  # (G,) Int32 group ends, in global memory
        total: cutlass.Int32,
        a_smem: cute.ComposedLayout,
        b_smem: cute.ComposedLayout,
        c_smem: cute.ComposedLayout,
    ):
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        num_ctas, _, _ = cute.arch.grid_dim()
        cluster_m = self.cluster_m
        cluster_idx, num_clusters = bidx // cluster_m, num_ctas // cluster_m
        rank = cutlass.Int32(0)  # this CTA's place in its cluster: which M-tile of the pair
        if cutlass.const_expr(cluster_m > 1):
            rank = cute.arch.make_warp_uniform(cute.arch.block_idx_in_cluster())
        warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        warpgroup_idx = cute.arch.make_warp_uniform(tidx // 128)
        tile_m, tile_n, tile_k = self.tile_mnk

        if warp == 0:
            cpasync.prefetch_descriptor(tma_a)
            cpasync.prefetch_descriptor(tma_b)
            cpasync.prefetch_descriptor(tma_c)

        smem = SmemAllocator()
        storage = smem.allocate(self.shared_storage)
        # Full barrier: one arrive with expect_tx (the producer) + the TMA bytes (the A
        # tile and all of the B tile, half of it from the peer CTA in a pair).
        # Empty barrier: one arrive per consumer warp of every CTA that writes into this
        # CTA's stage (both CTAs of a pair multicast into it).
        mainloop = pipeline.PipelineTmaAsync.create(
            barrier_storage=storage.mainloop_barriers.data_ptr(),
            num_stages=self.stages,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
            consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, self.stage_consumer_warps * cluster_m),
            tx_count=self.stage_bytes,
            cta_layout_vmnk=cute.make_layout((1, cluster_m, 1, 1)),
            defer_sync=True,
        )
        pipeline.pipeline_init_arrive(cluster_shape_mn=(cluster_m, 1), is_relaxed=True)

        table = 32 * self.lane_groups
        tile_end = storage.tile_end.get_tensor(cute.make_layout(table))
        row_end = storage.row_end.get_tensor(cute.make_layout(table + 1))
        if cutlass.const_expr(self.ragged != "batch"):
            if warp == SCHEDULE_WARP:
                self.build_schedule(offs, total, tile_end, row_end)

        sA = storage.sA.get_tensor(a_smem.outer, swizzle=a_smem.inner)
        sB = storage.sB.get_tensor(b_smem.outer, swizzle=b_smem.inner)
        sC = storage.sC.get_tensor(c_smem.outer, swizzle=c_smem.inner)

        # B tiles: (TMA, n_tile, k_tile, group), partitioned once; in a pair, each CTA
        # loads its half of every B tile and multicasts it to both.
        gB = cute.local_tile(mB, (tile_n, tile_k), (None, None, None))
        tBsB, tBgB = cpasync.tma_partition(
            tma_b, rank, cute.make_layout(cluster_m), cute.group_modes(sB, 0, 2), cute.group_modes(gB, 0, 2)
        )
        pipeline.pipeline_init_wait(cluster_shape_mn=(cluster_m, 1))  # barriers ready in every CTA
        if cutlass.const_expr(cluster_m > 1):
            cute.arch.sync_threads()  # the cluster wait above follows a relaxed arrive: order the schedule's writes
        if cutlass.const_expr(self.ragged == "m"):
            total_tiles = tile_end[table - 1]  # in units of cluster tiles (entries past G add none)
        elif cutlass.const_expr(self.ragged == "k"):
            total_tiles = cutlass.Int32(self.groups * self.m_tiles * self.n_tiles)  # empty groups store zeros
        else:
            total_tiles = (total + tile_m - 1) // tile_m * self.n_tiles * self.groups

        if warpgroup_idx == 0:
            cute.arch.setmaxregister_decrease(PRODUCER_REGS)
            if warp == 0:
                self.produce(mainloop, tma_a, mA, tma_b, mB, tBgB, tBsB, sA, sB, tile_end, row_end, total,
                             total_tiles, cluster_idx, num_clusters, rank)
        else:
            cute.arch.setmaxregister_increase(CONSUMER_REGS)
            if cutlass.const_expr(self.pingpong):
                self.consume_pingpong(mainloop, tiled_mma, tma_c, mC, total, sA, sB, sC, tile_end, row_end,
                                      total_tiles, cluster_idx, num_clusters, tidx, warp, warpgroup_idx)
            else:
                self.consume(mainloop, tiled_mma, tma_c, mC, total, sA, sB, sC, tile_end, row_end, total_tiles,
                             cluster_idx, num_clusters, rank, tidx, warp, warpgroup_idx)

    @cute.jit
    def produce(self, mainloop, tma_a: cute.CopyAtom, mA: cute.Tensor, tma_b: cute.CopyAtom, mB: cute.Tensor,
                tBgB: cute.Tensor, tBsB: cute.Tensor, sA: cute.Tensor, sB: cute.Tensor, tile_end: cute.Tensor,
                row_end: cute.Tensor, total: cutlass.Int32, total_tiles: cutlass.Int32, cluster_idx: cutlass.Int32,
                num_clusters: cutlass.Int32, rank: cutlass.Int32):
        """The producer warp: TMA loads of A and B into the ring, one k-tile per stage."""
        tile_m, tile_n, tile_k = self.tile_mnk
        cluster_m = self.cluster_m
        both_ctas = cutlass.Int16((1 << cluster_m) - 1)  # multicast to every CTA of the pair
        state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, self.stages)
        tile = cluster_idx
        group = cutlass.Int32(0)
        while tile < total_tiles:
            group, m_step, n_tile, rows, start, length = self.locate(tile_end, row_end, tile, group, total)
            m_tile = m_step * cluster_m + rank
            k_tiles = self.k_tiles
            if cutlass.const_expr(self.ragged == "m"):
                # A rows from the group's first row: not a multiple of the tile. A CTA
                # without rows (second of a pair) loads the group's first tile instead:
                # its data is never used, and no TMA box lies wholly outside `a`.
                first_row = start
                if m_tile * tile_m < rows:
                    first_row += m_tile * tile_m
                gA = cute.local_tile(cute.domain_offset((first_row, 0), mA), (tile_m, tile_k), (0, None))
                tBgB_tile = tBgB[(None, n_tile, None, group)]
            elif cutlass.const_expr(self.ragged == "k"):
                # The group's K range through the views of `operands`: third coordinate
                # start, k coordinate kk from the group's start. The k-tiles end at the
                # group's end, so only the first one starts before the group (at
                # k_first <= 0), and TMA fills its negative columns with zeros.
                k_tiles = (length + tile_k - 1) // tile_k
                k_first = length - k_tiles * tile_k
                gA = cute.local_tile(cute.domain_offset((0, k_first), mA[(None, None, start)]),
                                     (tile_m, tile_k), (m_tile, None))
                gB = cute.local_tile(cute.domain_offset((0, k_first), mB[(None, None, start)]),
                                     (tile_n, tile_k), (n_tile, None))
                _, tBgB_tile = cpasync.tma_partition(
                    tma_b, 0, cute.make_layout(1), cute.group_modes(sB, 0, 2), cute.group_modes(gB, 0, 2)
                )
            else:
                gA = cute.local_tile(mA[(None, None, group)], (tile_m, tile_k), (m_tile, None))
                tBgB_tile = tBgB[(None, n_tile, None, group)]
            tAsA, tAgA = cpasync.tma_partition(
                tma_a, 0, cute.make_layout(1), cute.group_modes(sA, 0, 2), cute.group_modes(gA, 0, 2)
            )
            for k in cutlass.range(k_tiles, unroll=1):
                mainloop.producer_acquire(state)  # waits for an empty stage, arms expect_tx
                full = mainloop.producer_get_barrier(state)
                cute.copy(tma_a, tAgA[(None, k)], tAsA[(None, state.index)], tma_bar_ptr=full)
                if cutlass.const_expr(cluster_m > 1):
                    cute.copy(tma_b, tBgB_tile[(None, k)], tBsB[(None, state.index)], tma_bar_ptr=full,
                              mcast_mask=both_ctas)
                else:
                    cute.copy(tma_b, tBgB_tile[(None, k)], tBsB[(None, state.index)], tma_bar_ptr=full)
                state.advance()
            tile += num_clusters
        mainloop.producer_tail(state)  # every stage released before the CTA exits

    @cute.jit
    def consume(self, mainloop, tiled_mma: cute.TiledMma, tma_c: cute.CopyAtom, mC: cute.Tensor,
                total: cutlass.Int32, sA: cute.Tensor, sB: cute.Tensor, sC: cute.Tensor, tile_end: cute.Tensor,
                row_end: cute.Tensor, total_tiles: cutlass.Int32, cluster_idx: cutlass.Int32,
                num_clusters: cutlass.Int32, rank: cutlass.Int32, tidx: cutlass.Int32, warp: cutlass.Int32,
                warpgroup_idx: cutlass.Int32):
        """The two consumer warpgroups: the WGMMA mainloop of each tile, then its store."""
        tile_m, tile_n, tile_k = self.tile_mnk
        cluster_m = self.cluster_m
        consumer_tidx = tidx - 128
        half = warpgroup_idx - 1  # which 64 rows of the tile this warpgroup computes
        tCrA, tCrB, acc, (tiled_r2s, tRS_sC, tRS_acc, sub_acc, sub_out, accumulators) = self.consumer_views(
            tiled_mma, sA, sB, sC, consumer_tidx)

        read = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.stages)
        release = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.stages)
        tiled_mma.set(warpgroup.Field.ACCUMULATE, True)
        tile = cluster_idx
        group = cutlass.Int32(0)
        while tile < total_tiles:
            group, m_step, n_tile, rows, start, length = self.locate(tile_end, row_end, tile, group, total)
            m_tile = m_step * cluster_m + rank  # past the group's rows for the second CTA
            # of a pair on an odd last M-tile: it only keeps the pipeline moving
            rows_here = rows - m_tile * tile_m - half * 64
            k_tiles = self.k_tiles
            if cutlass.const_expr(self.ragged == "k"):
                k_tiles = (length + tile_k - 1) // tile_k
                # A group without K stores zeros (the weight gradient of an expert no
                # token reached): accumulators cleared, no k-tile to wait for.
                acc.fill(0.0)
                rows_here = rows_here * cutlass.min(k_tiles, 1)
            read, release = self.mma_tile(mainloop, tiled_mma, acc, tCrA, tCrB, read, release, k_tiles, rows_here)

            # (no store for the second CTA of a pair that has no rows: the whole CTA skips it)
            if rows > m_tile * tile_m:
                self.store_tile(tma_c, mC, total, sC, tiled_r2s, tRS_sC, tRS_acc, sub_acc, sub_out, accumulators,
                                group, start, rows, m_tile, n_tile, warp, EPILOGUE_BARRIER, FIRST_CONSUMER_WARP, 0)
            tile += num_clusters

        if warp == FIRST_CONSUMER_WARP:
            with cute.arch.elect_one():
                cute.arch.cp_async_bulk_wait_group(0, read=True)

    @cute.jit
    def consume_pingpong(self, mainloop, tiled_mma: cute.TiledMma, tma_c: cute.CopyAtom, mC: cute.Tensor,
                         total: cutlass.Int32, sA: cute.Tensor, sB: cute.Tensor, sC: cute.Tensor,
                         tile_end: cute.Tensor, row_end: cute.Tensor, total_tiles: cutlass.Int32,
                         cluster_idx: cutlass.Int32, num_clusters: cutlass.Int32, tidx: cutlass.Int32,
                         warp: cutlass.Int32, warpgroup_idx: cutlass.Int32):
        """The two consumer warpgroups, a whole tile each in turn: the CTA's tiles 0, 2,
        4, ... go to warpgroup 1 and 1, 3, 5, ... to warpgroup 2. Each waits for and
        releases only its own tiles' stages, and steps its pipeline states over the
        other's; each stores its own tiles through its own sub-tile buffers, barrier and
        storing warp, while the other's WGMMAs run.

        The mainloops take turns too (`FIRST_TURN_BARRIER`): a warpgroup waits on its
        tile's first stage only once the other has waited on the previous tile's last.
        Otherwise it would wait k-tiles ahead of the ring, where an mbarrier's phase
        parity no longer says which fill of a stage it sees."""
        tile_m, tile_n, tile_k = self.tile_mnk
        turn_of = warpgroup_idx - 1  # this warpgroup's tiles: those with turn == turn_of
        consumer_tidx = tidx - 128 * warpgroup_idx
        tCrA, tCrB, acc, (tiled_r2s, tRS_sC, tRS_acc, sub_acc, sub_out, accumulators) = self.consumer_views(
            tiled_mma, sA, sB, sC, consumer_tidx)
        epilogue_barrier = pipeline.NamedBarrier(barrier_id=1 + turn_of, num_threads=128)
        my_turn_done = pipeline.NamedBarrier(barrier_id=FIRST_TURN_BARRIER + turn_of, num_threads=256)
        other_turn_done = pipeline.NamedBarrier(barrier_id=FIRST_TURN_BARRIER + 1 - turn_of, num_threads=256)
        store_warp = FIRST_CONSUMER_WARP + 4 * turn_of
        first_buffer = turn_of * self.epi_stages

        read = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.stages)
        release = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.stages)
        tiled_mma.set(warpgroup.Field.ACCUMULATE, True)
        tile = cluster_idx
        turn = cutlass.Int32(0)
        group = cutlass.Int32(0)
        while tile < total_tiles:
            group, m_tile, n_tile, rows, start, length = self.locate(tile_end, row_end, tile, group, total)
            rows_here = rows - m_tile * tile_m
            k_tiles = self.k_tiles
            if cutlass.const_expr(self.ragged == "k"):
                k_tiles = (length + tile_k - 1) // tile_k
            if turn == turn_of:
                if cutlass.const_expr(self.ragged == "k"):
                    # A group without K stores zeros (see `consume`).
                    acc.fill(0.0)
                    rows_here = rows_here * cutlass.min(k_tiles, 1)
                if tile != cluster_idx:
                    other_turn_done.arrive_and_wait()  # the previous tile's mainloop has its stages
                read, release = self.mma_tile(mainloop, tiled_mma, acc, tCrA, tCrB, read, release, k_tiles,
                                              rows_here, my_turn_done, tile + num_clusters < total_tiles)
                if rows > m_tile * tile_m:
                    self.store_tile(tma_c, mC, total, sC, tiled_r2s, tRS_sC, tRS_acc, sub_acc, sub_out, accumulators,
                                    group, start, rows, m_tile, n_tile, warp, epilogue_barrier, store_warp, first_buffer)
            else:
                for k in cutlass.range(k_tiles, unroll=1):  # the other warpgroup's stages
                    read.advance()
                    release.advance()
            tile += num_clusters
            turn = 1 - turn

        if warp == store_warp:
            with cute.arch.elect_one():
                cute.arch.cp_async_bulk_wait_group(0, read=True)

    @cute.jit
    def mma_tile(self, mainloop, tiled_mma: cute.TiledMma, acc: cute.Tensor, tCrA: cute.Tensor, tCrB: cute.Tensor,
                 read, release, k_tiles: cutlass.Int32, rows_here: cutlass.Int32,
                 turn_done: Optional[pipeline.NamedBarrier] = None, next_turn: cutlass.Boolean = False) -> Tuple:
        """One tile's k-tiles for a consumer warpgroup: its WGMMAs into `acc`, each stage
        released once its WGMMAs have read it. With no rows here (past the group's end,
        or a group without K) no WGMMA runs, and the stages are only waited for and
        released, to keep the pipeline moving. Returns the pipeline states, advanced.

        With `turn_done` (ping-pong), once the last stage is waited for, arrives on it
        when `next_turn` (the other warpgroup has a next tile waiting on it)."""
        k_blocks = cute.size(tCrA, mode=[2])
        if rows_here > 0:
            acc.fill(0.0)
            warpgroup.fence()
            # k-tile 0: issue its WGMMAs, keep them in flight
            mainloop.consumer_wait(read)
            for kb in cutlass.range_constexpr(k_blocks):
                cute.gemm(tiled_mma, acc, tCrA[(None, None, kb, read.index)],
                          tCrB[(None, None, kb, read.index)], acc)
            warpgroup.commit_group()
            read.advance()
            for k in cutlass.range(1, k_tiles, unroll=1):
                mainloop.consumer_wait(read)
                for kb in cutlass.range_constexpr(k_blocks):
                    cute.gemm(tiled_mma, acc, tCrA[(None, None, kb, read.index)],
                              tCrB[(None, None, kb, read.index)], acc)
                warpgroup.commit_group()
                # k-tile k-1's WGMMAs are done reading their stage: release it
                warpgroup.wait_group(1)
                mainloop.consumer_release(release)
                release.advance()
                read.advance()
            self.hand_over_turn(turn_done, next_turn)
            warpgroup.wait_group(0)
            mainloop.consumer_release(release)
            release.advance()
        else:
            for k in cutlass.range(k_tiles, unroll=1):
                mainloop.consumer_wait(read)
                mainloop.consumer_release(release)
                release.advance()
                read.advance()
            self.hand_over_turn(turn_done, next_turn)
        return read, release

    @cute.jit
    def hand_over_turn(self, turn_done: Optional[pipeline.NamedBarrier], next_turn: cutlass.Boolean):
        """Ping-pong: lets the other warpgroup's mainloop start (see `consume_pingpong`)."""
        if cutlass.const_expr(turn_done is not None):
            if next_turn:
                turn_done.arrive()

    @cute.jit
    def consumer_views(self, tiled_mma: cute.TiledMma, sA: cute.Tensor, sB: cute.Tensor, sC: cute.Tensor,
                       consumer_tidx: cutlass.Int32) -> Tuple:
        """A consumer thread's WGMMA operands (shared-memory descriptors), its accumulators
        and its epilogue views (`epilogue_partitions`)."""
        tile_m, tile_n, _ = self.tile_mnk
        thr_mma = tiled_mma.get_slice(consumer_tidx)
        tCrA = tiled_mma.make_fragment_A(thr_mma.partition_A(sA))
        tCrB = tiled_mma.make_fragment_B(thr_mma.partition_B(sB))
        acc_shape = thr_mma.partition_C(cute.make_identity_tensor((tile_m, tile_n))).shape
        acc = cute.make_rmem_tensor(acc_shape, self.acc_dtype)
        return tCrA, tCrB, acc, self.epilogue_partitions(tiled_mma, sC, acc, consumer_tidx)

    @cute.jit
    def epilogue_partitions(self, tiled_mma: cute.TiledMma, sC: cute.Tensor, acc: cute.Tensor,
                            consumer_tidx: cutlass.Int32) -> Tuple:
        """Accumulators -> output type -> shared memory (stmatrix for 16-bit outputs): the
        copy, its shared-memory and accumulator views, one sub-tile's registers, and which
        accumulators feed each sub-tile (`sub_tile_accumulators`)."""
        r2s_atom = sm90.get_smem_store_op(LayoutEnum.ROW_MAJOR, self.c_dtype, self.acc_dtype)
        tiled_r2s = cute.make_tiled_copy_S(
            r2s_atom,
            cute.make_tiled_copy_C_atom(
                cute.make_copy_atom(cute.nvgpu.warp.StMatrix8x8x16bOp(False, 4), self.c_dtype), tiled_mma
            ),
        )
        thr_r2s = tiled_r2s.get_slice(consumer_tidx)
        tRS_sC = thr_r2s.partition_D(sC)  # (R2S, R2S_M, R2S_N, epi buffer)
        tRS_acc = tiled_r2s.retile(acc)
        sub_shape = cute.shape(thr_r2s.partition_S(sC))[:3]
        sub_acc = cute.make_rmem_tensor(sub_shape, self.acc_dtype)
        sub_out = cute.make_rmem_tensor(sub_shape, self.c_dtype)
        return tiled_r2s, tRS_sC, tRS_acc, sub_acc, sub_out, self.sub_tile_accumulators(tiled_mma, tiled_r2s)

    def sub_tile_accumulators(self, tiled_mma: cute.TiledMma, tiled_r2s) -> Tuple[Tuple[Any, ...], ...]:
        """For each output sub-tile, the accumulator (flat index into the retiled
        accumulators) behind each of its values (flat index into a sub-tile's registers);
        with SwiGLU a pair for each value: its gate's and its up projection's (tile_n / 2
        columns further on, in the same thread).
        Read off thread 0's coordinates at trace time: the order is the same in every
        thread, but not contiguous per sub-tile when a warpgroup repeats its WGMMA down M
        (ping-pong). `tests/test_grouped_mm_host.py` checks it for other threads."""
        tile_m, tile_n, _ = self.tile_mnk
        acc = tiled_r2s.retile(tiled_mma.get_slice(0).partition_C(cute.make_identity_tensor((tile_m, tile_n))))
        index_of = {tuple(acc[i]): i for i in range(cute.size(acc))}
        sub = tiled_r2s.get_slice(0).partition_S(cute.make_identity_tensor((*self.epi_tile, 1)))[(None, None, None, 0)]

        def feeding(row: int, column: int) -> Any:
            if self.swiglu:
                return index_of[(row, column)], index_of[(row, column + tile_n // 2)]
            return index_of[(row, column)]

        return tuple(tuple(feeding(sub[v][0], sub[v][1] + self.epi_tile[1] * s) for v in range(cute.size(sub)))
                     for s in range(self.out_tile_n // self.epi_tile[1]))

    @cute.jit
    def store_tile(self, tma_c: cute.CopyAtom, mC: cute.Tensor, total: cutlass.Int32, sC: cute.Tensor,
                   tiled_r2s, tRS_sC: cute.Tensor, tRS_acc: cute.Tensor, sub_acc: cute.Tensor, sub_out: cute.Tensor,
                   accumulators: Tuple[Tuple[int, ...], ...], group: cutlass.Int32, start: cutlass.Int32, rows: cutlass.Int32, m_tile: cutlass.Int32,
                   n_tile: cutlass.Int32, warp: cutlass.Int32, epilogue_barrier: pipeline.NamedBarrier,
                   store_warp: cutlass.Int32, first_buffer: cutlass.Int32):
        """The epilogue of one tile: sub-tiles of tile_m x 32 through shared memory, one TMA
        store each, in the sub-tile buffers from `first_buffer` on; `store_warp` issues
        the stores, and `epilogue_barrier` spans the warps that share them."""
        tile_m = self.tile_m
        sub_size = cute.size(sub_acc)
        sub_tiles = self.out_tile_n // self.epi_tile[1]
        if cutlass.const_expr(self.ragged == "m"):
            # The group's rows through the ragged descriptor: row coordinate
            # total - rows + r, third coordinate start + rows; rows r >= rows clip.
            mC_group = cute.domain_offset((total - rows, 0), mC[(None, None, start + rows)])
        else:
            mC_group = mC[(None, None, group)]  # (M, N) of the group; TMA clips at M and N
        gC = cute.zipped_divide(cute.local_tile(mC_group, (tile_m, self.out_tile_n), (m_tile, n_tile)), self.epi_tile)
        bSG_sC, bSG_gC = cpasync.tma_partition(
            tma_c, 0, cute.make_layout(1), cute.group_modes(sC, 0, 2), gC
        )
        for sub in cutlass.range_constexpr(sub_tiles):
            buffer = first_buffer + sub % self.epi_stages  # sub_tiles is a multiple of epi_stages
            for v in cutlass.range_constexpr(sub_size):
                if cutlass.const_expr(self.swiglu):
                    gate, up = tRS_acc[accumulators[sub][v][0]], tRS_acc[accumulators[sub][v][1]]
                    # silu(gate) * up = gate * up / (1 + e^-gate): ex2 and rcp, approximate (MUFU)
                    sub_acc[v] = gate * up * cute.arch.rcp_approx(1.0 + cute.math.exp(-gate, fastmath=True))
                else:
                    sub_acc[v] = tRS_acc[accumulators[sub][v]]
            sub_out.store(sub_acc.load().to(self.c_dtype))
            cute.copy(tiled_r2s, sub_out, tRS_sC[(None, None, None, buffer)])
            # make the generic-proxy smem writes visible to TMA, then to the storing warp
            cute.arch.fence_proxy("async.shared", space="cta")
            epilogue_barrier.arrive_and_wait()
            if warp == store_warp:
                with cute.arch.elect_one():
                    cute.copy(tma_c, bSG_sC[(None, buffer)], bSG_gC[(None, (0, sub))])
                    cute.arch.cp_async_bulk_commit_group()
                    # the store issued epi_stages sub-tiles ago has read its buffer
                    cute.arch.cp_async_bulk_wait_group(self.epi_stages - 1, read=True)
            epilogue_barrier.arrive_and_wait()  # nobody refills a buffer still being read

    @cute.jit
    def build_schedule(self, offs: cute.Tensor, total: cutlass.Int32, tile_end: cute.Tensor,
                       row_end: cute.Tensor):
        """One warp: the clamped group ends and cumulative cluster tiles, from `offs`, into shared memory.

        Lane l owns groups l * c .. l * c + c - 1 (c = `lane_groups`); groups past G
        read offs[G - 1] again, so they end where the last group ends and add no tile.
        Each lane scans its own groups in registers; two warp scans (a running max of
        the ends, a sum of the tiles) give it what the lanes before it hold.
        """
        c = self.lane_groups
        lane = cute.arch.lane_idx()
        ends = cute.make_rmem_tensor((c,), cutlass.Int32)
        tiles = cute.make_rmem_tensor((c,), cutlass.Int32)
        lane_max = cutlass.Int32(0)
        for j in cutlass.range_constexpr(c):  # every load in flight before the first use
            ends[j] = offs[cutlass.min(lane * c + j, self.groups - 1)]
        for j in cutlass.range_constexpr(c):
            lane_max = cutlass.max(lane_max, ends[j])
        # the largest end of the lanes before this one: where its first group starts
        run = lane_max
        for step in cutlass.range_constexpr(5):
            run = cutlass.max(run, cute.arch.shuffle_sync_up(run, 1 << step))  # lanes < step keep their own
        before = cute.arch.shuffle_sync_up(run, 1)
        if lane == 0:
            before = cutlass.Int32(0)
        rows_per_step = self.tile_m * self.cluster_m
        previous = cutlass.min(before, total)
        lane_tiles = cutlass.Int32(0)
        for j in cutlass.range_constexpr(c):
            before = cutlass.max(before, ends[j])
            end = cutlass.min(before, total)
            lane_tiles += (end - previous + rows_per_step - 1) // rows_per_step * self.n_tiles
            ends[j] = end
            tiles[j] = lane_tiles
            previous = end
        total = lane_tiles
        for step in cutlass.range_constexpr(5):
            other = cute.arch.shuffle_sync_up(total, 1 << step)
            if lane >= (1 << step):
                total += other
        tiles_before = total - lane_tiles
        for j in cutlass.range_constexpr(c):
            tile_end[lane * c + j] = tiles_before + tiles[j]
            row_end[lane * c + j + 1] = ends[j]
        if lane == 0:
            row_end[0] = cutlass.Int32(0)

    @cute.jit
    def locate(self, tile_end: cute.Tensor, row_end: cute.Tensor, tile: cutlass.Int32,
               group: cutlass.Int32, total: cutlass.Int32) -> Tuple:
        """(group, m_step, n_tile, rows, start, length) of cluster tile `tile`.

        `rows` is the group's M extent; `start` and `length` its range along the ragged
        mode (rows for ragged M, the reduction for ragged K). A cluster tile spans
        `cluster_m` M-tiles: its CTAs take M-tiles `m_step * cluster_m + rank`.
        With ragged M the search walks forward from `group`, stepping over groups of
        0 rows (they end where they start); every other group has the same tiles.
        """
        tile_m = self.tile_m
        if cutlass.const_expr(self.ragged == "batch"):
            # N-tile fastest, then the group, then the M-tile: the CTAs at work together
            # share A's row panel, and every divisor is a compile-time constant (a runtime
            # divisor here made ptxas predicate an R2UR, the hazard the SASS test guards).
            rest = tile // self.n_tiles
            return (rest % self.groups, rest // self.groups, tile % self.n_tiles, total, cutlass.Int32(0),
                    cutlass.Int32(self.k))
        if cutlass.const_expr(self.ragged == "k"):
            group = tile // (self.m_tiles * self.n_tiles)
            local = tile - group * (self.m_tiles * self.n_tiles)
            start = row_end[group]
            length = row_end[group + 1] - start
            return group, local % self.m_tiles, local // self.m_tiles, cutlass.Int32(self.m), start, length
        while tile >= tile_end[group]:
            group += 1
        start = row_end[group]
        length = row_end[group + 1] - start
        rows_per_step = tile_m * self.cluster_m
        m_steps = (length + rows_per_step - 1) // rows_per_step
        local = tile - (tile_end[group] - m_steps * self.n_tiles)
        return group, local % m_steps, local // m_steps, length, start, length
