"""A persistent, warp-specialized Hopper (sm_90a) grouped GEMM whose groups live on the device.

    out[rows of group g, :] = a[rows of group g, :] @ b[g].T      for g in 0 .. G-1

`a` is (M, K) with the rows of the G groups stacked, `b` is (G, N, K) (K
contiguous), `out` is (M, N). Group g's rows are `offs[g-1]:offs[g]`, and `offs`
is read by the kernel from global memory: nothing on the host depends on it, so a
call needs no device-to-host copy and can be captured in a CUDA graph. One CTA
per SM walks the tiles of all groups.

Descriptors: three (four, A' below), in the kernel's grid-constant parameter space, none of them
depending on `offs` (they depend on the addresses, M, N, K and G only)
    A   one descriptor over the whole (M, K) tensor; a tile of group g starts at
        row `start[g] + 128 * m_tile`. A tile that runs past the group's last
        row reads the next group's rows (or TMA's zero fill past M): those rows
        only reach accumulator rows that the clipped store below discards.
        With A M-major that row is a coordinate of the contiguous mode, which TMA
        takes only 16-byte aligned: the schedule traps at a group with rows that
        starts elsewhere (`schedule.UNALIGNED_GROUP_MESSAGE`).
    A'  with A K-major, a second descriptor over the same tensor in boxes of
        A_SHORT_BOX_ROWS rows: a group's last, partial M-tile loads only the boxes
        that cover its rows (at decode, one box of 16 rows instead of 128), each
        into the same rows of the stage as the whole tile's box would.
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
a descriptor whose base lies in unmapped memory faults.) An operand with T
contiguous (K-major) has no such view, a stride of one element being no TMA
stride: it is read through its plain (M, T) view, every group starting and ending
on 16 bytes (the schedule traps otherwise), and the consumers zero the columns of
a group's first k-tile that lie before the group (`GemmConfig.zero_fill`). A
batch has 3-D views with the group as the third coordinate, and no schedule.

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
within a group, M-step fastest (`GemmConfig.tile_order` "m"), so that the CTAs working
at the same time on a group share its B tiles through L2, or N-tile fastest ("n"), so
that they share its A rows. Cluster c takes cluster tiles c, c + clusters,
c + 2 clusters, ... and finds their group by walking the table forward. A group's last,
partial M-tile costs less than a full one (below), so over a long GEMM the clusters
drift apart, and the order decides which of the two sharings survives the drift
(`grouped_mm_rules.pick_tile_order`). With claimed tiles (`GemmConfig.claimed_tiles`,
`claims.py`) a cluster instead claims each tile after its first from a counter in
global memory, so that the tiles at work at once stay consecutive however they drift.

Roles (384 threads, three warpgroups; a module each, mixed into `HopperGroupedGemm`:
`schedule.py`, `producer.py`, `consumers.py`, `epilogue.py`; the sizes in `config.py`;
`experts.py` runs two of these GEMMs, an MoE layer's, one after the other in one kernel)
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
N <= 1536, groups of one to four M-tiles, or in pairs from four, and for ragged K with
short groups, `grouped_mm_rules.pick_schedule`): tiles of 128 x 128 or 128 x 192, and
the consumer warpgroups take the CTA's tiles in turn (`consume_pingpong`), each waiting
for and releasing only its own tiles' stages, storing through its own sub-tile buffers
with its own named barrier, so that one warpgroup's epilogue runs while the other's
WGMMAs do. Pairs too: both CTAs of a pair walk the same tiles, so the same warpgroup of
each takes a tile and releases its stages.

SwiGLU (`GemmConfig.activation="swiglu"`, ragged M): B's N viewed as (row, half,
tile), so one TMA box brings a tile's gate rows and the matching up rows; the epilogue
pairs each gate accumulator with its up accumulator (same thread, tile_n / 2 columns
on) and stores silu(gate) * up, half the tile's columns. In a pair (below) the B tile's
first half is its gate rows and its second their up rows: one CTA loads each.

Pairs (`cluster_m=2`, a 2x1 cluster): the two CTAs of a cluster take two
consecutive M-tiles of one group and the same B tile; each loads half of the B
tile and multicasts it to both, halving B's traffic from L2. A group with an odd
number of M-tiles leaves the second CTA of its last pair without rows: it takes
part in the loads (its half of B serves its peer), skips its WGMMAs and its epilogue.
No TMA load box lies wholly outside its tensor: such a CTA loads its group's first
A tile, and the host uses pairs only when the last N-tile's second half of B starts
inside B (`pairs_fit`). With ragged K every group has the same M-tiles, and pairs need
an even number of them: both CTAs of a pair always have rows. There an N-major B is
split along K instead: at a group's first k-tile one CTA's half may lie wholly before
the group, at negative coordinates of the T-strided view, which TMA fills with zeros
(and counts in the stage's bytes) like the rest of that k-tile's columns before the group.
"""
from __future__ import annotations

from typing import Optional, Tuple

import cuda.bindings.driver as cuda

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
import cutlass.utils.hopper_helpers as sm90
from cutlass.cute.nvgpu import cpasync
from cutlass.memory import SmemAllocator, get_smem_capacity_in_bytes
from cutlass.tensor_utils import LayoutEnum

import gcdsl

from .config import (
    GemmConfig, pairs_fit, reduction_pairs_fit, TILE_M, TILE_K, TILE_NS, EPI_TILE,
    SCHEDULES, PINGPONG_TILE_M, PINGPONG_TILE_NS, THREADS, PRODUCER_REGS, CONSUMER_REGS,
    CONSUMER_WARPS, SCHEDULE_WARP, FIRST_CONSUMER_WARP, EPILOGUE_BARRIER, FIRST_TURN_BARRIER, MAX_STAGES,
    A_SHORT_BOX_ROWS, HEADER_ALIGN, AB_DTYPES, ACTIVATIONS, RAGGED_MODES, TILE_ORDERS, M_BLOCK_STEPS, A_MAJORS,
    B_MAJORS, C_DTYPES, L2_POLICIES, PHASES, STAMP_SLOTS, CLAIM_SLOTS, groups_per_lane, header_bytes,
)
from .claims import TileClaims
from .consumers import Consumers
from .epilogue import Epilogue
from .producer import Producer
from .schedule import Schedule

# `hopper_grouped_gemm.X` for every name of the configuration, and the kernel class
__all__ = [
    "HopperGroupedGemm", "GemmConfig", "pairs_fit", "reduction_pairs_fit", "TILE_M", "TILE_K", "TILE_NS",
    "EPI_TILE", "SCHEDULES",
    "PINGPONG_TILE_M", "PINGPONG_TILE_NS", "THREADS", "PRODUCER_REGS", "CONSUMER_REGS", "CONSUMER_WARPS",
    "SCHEDULE_WARP", "FIRST_CONSUMER_WARP", "EPILOGUE_BARRIER", "FIRST_TURN_BARRIER", "MAX_STAGES",
    "A_SHORT_BOX_ROWS", "HEADER_ALIGN", "AB_DTYPES", "ACTIVATIONS", "RAGGED_MODES", "TILE_ORDERS", "M_BLOCK_STEPS",
    "A_MAJORS", "B_MAJORS", "C_DTYPES", "L2_POLICIES",
    "PHASES", "STAMP_SLOTS", "CLAIM_SLOTS", "groups_per_lane", "header_bytes",
]


class HopperGroupedGemm(Schedule, Producer, Consumers, Epilogue):
    """One compiled configuration (`GemmConfig`): dtypes, G, N, K, tile N, CTAs per cluster.

    `__call__` is the host function to `cute.compile`:
        (a_ptr, b_ptr, c_ptr, offs_ptr, total, num_ctas, stream)
    with `c_ptr` the output's address moved back by M x N elements (the base of
    the ragged store descriptor) and `offs_ptr` the (G,) Int32 group ends on the device.
    """

    def __init__(self, config: GemmConfig, stages: Optional[int] = None) -> None:
        """`stages`: the ring's depth, where a kernel holding this GEMM and another
        (`experts.py`) shares one ring between them; else as many as shared memory holds."""
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
        self.fixed_m_steps = self.m_tiles // self.cluster_m  # ... and its cluster tiles' M-steps (pairs: an even count)
        self.table_groups = config.groups if config.ragged != "batch" else 1  # a batch needs no schedule
        self.lane_groups = groups_per_lane(self.table_groups)
        self.swiglu = config.activation == "swiglu"
        self.split_k = config.split_k
        self.out_tile_n = config.out_tile_n
        self.epi_stages = config.epi_stages
        self.epi_buffers = self.epi_stages * (2 if self.pingpong else 1)
        self.epi_bytes = self.epi_tile[0] * self.epi_tile[1] * config.c_dtype.width // 8 * self.epi_buffers
        # Bytes TMA writes into one stage (A tile + B tile), and those the full barrier expects
        # at the producer's arrive: with short A boxes only B's, the producer adding each
        # stage's A bytes as it issues them (`Producer.produce`).
        self.stage_bytes = (self.tile_m + config.tile_n) * TILE_K * config.ab_dtype.width // 8
        self.a_tile_bytes = self.tile_m * TILE_K * config.ab_dtype.width // 8
        self.a_short_box_bytes = A_SHORT_BOX_ROWS * TILE_K * config.ab_dtype.width // 8
        self.a_row_bytes = TILE_K * config.ab_dtype.width // 8  # a row of A gathered alone
        self.short_a_boxes = config.short_a_boxes
        self.arrive_bytes = self.stage_bytes - (self.a_tile_bytes if self.short_a_boxes else 0)
        self.claimed_tiles = config.claimed_tiles
        self.header_bytes = header_bytes(self.table_groups, self.claimed_tiles)
        budget = get_smem_capacity_in_bytes("sm_90") - self.epi_bytes - self.header_bytes
        self.stages = stages or min(MAX_STAGES, budget // self.stage_bytes)

    @property
    def stage_consumer_warps(self) -> int:
        """Warps that read each stage and release it (the empty barrier's arrivals per CTA)."""
        return CONSUMER_WARPS // 2 if self.pingpong else CONSUMER_WARPS

    def trace_args(self) -> Tuple:
        """Arguments to compile `__call__` with (`cute.compile`, TVM-FFI): pointers of the
        operands' types and alignments at address 0, T = 1, one cluster, a fake stream.
        Only their types matter: every one is a runtime value of the compiled function."""
        def ptr(dtype, align=16):
            return cute.runtime.make_ptr(dtype, 0, cute.AddressSpace.gmem, assumed_align=align)

        counter = (ptr(cutlass.Int32, 4),) if self.claimed_tiles else ()
        return (ptr(self.ab_dtype), ptr(self.ab_dtype), ptr(self.c_dtype), ptr(cutlass.Int32, 4), cutlass.Int32(1),
                cutlass.Int32(self.cluster_m), cute.runtime.make_fake_stream(), *counter)

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
        counter_ptr: cute.Pointer = None,  # claimed tiles: the zeroed Int32 counter (`claims.py`)
    ):
        groups = self.groups
        a, b, c = self.operands(a_ptr, b_ptr, c_ptr, total)
        offs = cute.make_tensor(offs_ptr, cute.make_layout(groups))

        tiled_mma, a_smem, b_smem, c_smem = self.mma_and_smem_layouts()
        tma_a, tma_coords_a, tma_b, tma_coords_b, tma_c, tma_coords_c = self.tma_atoms(a, b, c, a_smem, b_smem, c_smem)
        tma_a_short, tma_coords_a_short = self.tma_atom_a_short(a)

        self.shared_storage = self.shared_storage_struct(a_smem, b_smem, c_smem)

        self.kernel(
            tiled_mma, tma_a, tma_coords_a, tma_b, tma_coords_b, tma_c, tma_coords_c,
            offs, total, a_smem, b_smem, c_smem, tma_a_short, tma_coords_a_short, counter_ptr,
        ).launch(grid=(num_ctas, 1, 1), block=(THREADS, 1, 1), cluster=(self.cluster_m, 1, 1),
                 min_blocks_per_mp=1, stream=stream)

    def shared_storage_struct(self, a_smem, b_smem, c_smem):
        """The CTA's shared memory as a `cute.struct`: the ring's mbarriers, the schedule, with
        claimed tiles their ring (`claims.py`), then the A/B ring and the output sub-tiles."""
        table = 32 * self.lane_groups
        fields = {
            "mainloop_barriers": cute.struct.MemRange[cutlass.Int64, self.stages * 2],
            "tile_end": cute.struct.MemRange[cutlass.Int32, table],
            "row_end": cute.struct.MemRange[cutlass.Int32, table + 1],  # entry 0 is 0: group g's start is row_end[g]
        }
        if self.claimed_tiles:
            fields["claim_barriers"] = cute.struct.Align[cute.struct.MemRange[cutlass.Int64, 2 * CLAIM_SLOTS], 8]
            fields["claimed"] = cute.struct.MemRange[cutlass.Int32, CLAIM_SLOTS]
        fields["sA"] = cute.struct.Align[cute.struct.MemRange[self.ab_dtype, cute.cosize(a_smem)], HEADER_ALIGN]
        fields["sB"] = cute.struct.Align[cute.struct.MemRange[self.ab_dtype, cute.cosize(b_smem)], 1024]
        fields["sC"] = cute.struct.Align[cute.struct.MemRange[self.c_dtype, cute.cosize(c_smem)], 1024]
        return cute.struct(type("SharedStorage", (), {"__annotations__": fields}))

    def mma_and_smem_layouts(self) -> Tuple:
        """(tiled MMA, A ring, B ring, output sub-tiles): a 64 x tile_n WGMMA per consumer
        warpgroup, stacked along M in one tile (cooperative) or repeated down a warpgroup's
        own tile (ping-pong), and the shared-memory layouts it reads and the epilogue
        writes. Traced in the host function."""
        a_layout = LayoutEnum.ROW_MAJOR if self.config.a_major == "k" else LayoutEnum.COL_MAJOR
        b_layout = LayoutEnum.ROW_MAJOR if self.config.b_major == "k" else LayoutEnum.COL_MAJOR
        tiled_mma = sm90.make_trivial_tiled_mma(
            self.ab_dtype, self.ab_dtype, a_layout.sm90_mma_major_mode(), b_layout.sm90_mma_major_mode(),
            self.acc_dtype, (1, 1, 1) if self.pingpong else (2, 1, 1), tiler_mn=(64, self.tile_mnk[1])
        )
        a_smem = sm90.make_smem_layout_a(a_layout, self.tile_mnk, self.ab_dtype, self.stages)
        b_smem = sm90.make_smem_layout_b(b_layout, self.tile_mnk, self.ab_dtype, self.stages)
        c_smem = sm90.make_smem_layout_epi(self.c_dtype, LayoutEnum.ROW_MAJOR, self.epi_tile, self.epi_buffers)
        return tiled_mma, a_smem, b_smem, c_smem

    def tma_atoms(self, a: cute.Tensor, b: cute.Tensor, c: cute.Tensor, a_smem, b_smem, c_smem) -> Tuple:
        """(atom, TMA coordinates) of A, B (multicast to a pair) and the output, in that
        order, flattened: the views of `operands` into the layouts of `mma_and_smem_layouts`
        (A's None where `a` is)."""
        tile_m, tile_n, tile_k = self.tile_mnk
        tma_a, tma_coords_a = None, None  # (no A: one whose rows are gathered, `tma_atom_a_rows`)
        if cutlass.const_expr(a is not None):
            tma_a, tma_coords_a = cpasync.make_tiled_tma_atom(
                cpasync.CopyBulkTensorTileG2SOp(), a, cute.slice_(a_smem, (None, None, 0)), (tile_m, tile_k)
            )
        b_op = cpasync.CopyBulkTensorTileG2SMulticastOp() if self.cluster_m > 1 else cpasync.CopyBulkTensorTileG2SOp()
        tma_b, tma_coords_b = cpasync.make_tiled_tma_atom(
            b_op, b, cute.slice_(b_smem, (None, None, 0)), (tile_n, tile_k), num_multicast=self.cluster_m
        )
        # K splits add their products into the output (zeroed by the host) rather than store them
        c_op = (cpasync.CopyReduceBulkTensorTileS2GOp(cute.ReductionKind.ADD) if self.split_k > 1
                else cpasync.CopyBulkTensorTileS2GOp())
        tma_c, tma_coords_c = cpasync.make_tiled_tma_atom(c_op, c, cute.slice_(c_smem, (None, None, 0)), self.epi_tile)
        return tma_a, tma_coords_a, tma_b, tma_coords_b, tma_c, tma_coords_c

    def tma_atom_a_short(self, a: cute.Tensor) -> Tuple:
        """(atom, TMA coordinates) of A in boxes of A_SHORT_BOX_ROWS rows, for partial
        M-tiles (`GemmConfig.short_a_boxes`); (None, None) where A has none."""
        if not self.short_a_boxes:
            return None, None
        short = sm90.make_smem_layout_a(LayoutEnum.ROW_MAJOR, (A_SHORT_BOX_ROWS, *self.tile_mnk[1:]), self.ab_dtype, 1)
        return cpasync.make_tiled_tma_atom(cpasync.CopyBulkTensorTileG2SOp(), a, cute.slice_(short, (None, None, 0)),
                                           (A_SHORT_BOX_ROWS, TILE_K))

    def tma_atom_a_rows(self, x: cute.Tensor, a_smem) -> cute.CopyAtom:
        """The atom of A gathered row by row from `x` (rows, K, K contiguous): a box of one
        row and one k-tile, into a row of the stage's A tile, at TMA coordinates (column,
        row). The box keeps the tile's swizzle, which TMA applies by shared-memory address,
        so a row lands where the whole tile's box would have put it (`Producer.produce`,
        `a_rows`)."""
        row = cute.make_composed_layout(a_smem.inner, 0, cute.make_layout((1, TILE_K), stride=(TILE_K, 1)))
        return cpasync.make_tiled_tma_atom(cpasync.CopyBulkTensorTileG2SOp(), x, row, (1, TILE_K))[0]

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
            # a is (M, K) stacked by rows; only M is a runtime extent (None: rows gathered
            # from another tensor, `tma_atom_a_rows`).
            a = None if cutlass.const_expr(a_ptr is None) else cute.make_tensor(
                a_ptr, cute.make_layout((total, k), stride=(k, 1) if a_k_major else (1, total)))
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
            # a is (M, K) and b (N, K) with K stacked. Where K is strided, a second K mode
            # of the same stride, whose coordinate is the group's start: the first mode
            # then counts from the group's start, and a group's first k-tile reads zeros
            # before it (a negative coordinate) instead of the previous group. Where K is
            # contiguous, a second mode of stride 1 is no TMA stride (16-byte multiples):
            # the plain (M, K) view, whose first k-tile the consumers clip in shared memory.
            a = cute.make_tensor(a_ptr, cute.make_layout((m, total), stride=(total, 1)) if a_k_major
                                 else cute.make_layout((m, total, total), stride=(1, m, m)))
            b = cute.make_tensor(b_ptr, cute.make_layout((n, total), stride=(total, 1)) if b_k_major
                                 else cute.make_layout((n, total, total), stride=(1, n, n)))
            c = cute.make_tensor(c_ptr, cute.make_layout((m, n, groups), stride=(n, 1, m * n)))
        else:
            a = cute.make_tensor(a_ptr, cute.make_layout(
                (total, k, groups), stride=(k, 1, total * k) if a_k_major else (1, total, total * k)))
            b = cute.make_tensor(b_ptr, cute.make_layout((n, k, groups), stride=b_stride))
            c = cute.make_tensor(c_ptr, cute.make_layout((total, n, groups), stride=(n, 1, total * n)))
        return a, b, c

    def make_mainloop(self, barriers: cute.Pointer):
        """The ring's pipeline, on the mbarriers at `barriers` (traced in the kernel).
        Full barrier: one arrive with expect_tx (the producer) + the TMA bytes (the A
        tile and all of the B tile, half of it from the peer CTA in a pair).
        Empty barrier: one arrive per consumer warp of every CTA that writes into this
        CTA's stage (both CTAs of a pair multicast into it)."""
        return pipeline.PipelineTmaAsync.create(
            barrier_storage=barriers,
            num_stages=self.stages,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
            consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, self.stage_consumer_warps * self.cluster_m),
            tx_count=self.arrive_bytes,
            cta_layout_vmnk=cute.make_layout((1, self.cluster_m, 1, 1)),
            defer_sync=True,
        )

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
        tma_a_short,  # A in short boxes, for partial M-tiles (`tma_atom_a_short`); None where A has none
        mA_short,
        counter: cute.Pointer,  # claimed tiles: the launch's counter (`claims.py`); else None
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
        tile_m = self.tile_mnk[0]

        if warp == 0:
            cpasync.prefetch_descriptor(tma_a)
            cpasync.prefetch_descriptor(tma_b)
            cpasync.prefetch_descriptor(tma_c)
            if cutlass.const_expr(tma_a_short is not None):
                cpasync.prefetch_descriptor(tma_a_short)

        smem = SmemAllocator()
        storage = smem.allocate(self.shared_storage)
        mainloop = self.make_mainloop(storage.mainloop_barriers.data_ptr())
        claims = None
        if cutlass.const_expr(self.claimed_tiles):
            if warp == 0:
                with cute.arch.elect_one():
                    TileClaims.init_barriers(storage.claim_barriers.data_ptr(), cluster_m)
            claims = TileClaims.make(storage.claimed.get_tensor(cute.make_layout(CLAIM_SLOTS)),
                                     storage.claim_barriers.data_ptr(), counter, cluster_m, num_clusters)
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

        tBsB, tBgB = self.b_boxes(tma_b, mB, sB, rank)  # partitioned once
        pipeline.pipeline_init_wait(cluster_shape_mn=(cluster_m, 1))  # barriers ready in every CTA
        if cutlass.const_expr(cluster_m > 1):
            cute.arch.sync_threads()  # the cluster wait above follows a relaxed arrive: order the schedule's writes
        if cutlass.const_expr(self.ragged == "m"):
            total_tiles = tile_end[table - 1]  # in units of cluster tiles (entries past G add none)
        elif cutlass.const_expr(self.ragged == "k"):
            # in units of cluster tiles; empty groups store zeros
            total_tiles = cutlass.Int32(self.groups * self.fixed_m_steps * self.n_tiles)
        else:
            total_tiles = (total + tile_m - 1) // tile_m * self.n_tiles * self.groups

        if warpgroup_idx == 0:
            cute.arch.setmaxregister_decrease(PRODUCER_REGS)
            if warp == 0:
                self.produce(mainloop, tma_a, mA, tma_b, mB, tBgB, tBsB, sA, sB, tile_end, row_end, total,
                             total_tiles, cluster_idx, num_clusters, rank, a_short=(tma_a_short, mA_short),
                             claims=claims)
        else:
            cute.arch.setmaxregister_increase(CONSUMER_REGS)
            if cutlass.const_expr(self.pingpong):
                self.consume_pingpong(mainloop, tiled_mma, tma_c, mC, total, sA, sB, sC, tile_end, row_end,
                                      total_tiles, cluster_idx, num_clusters, rank, tidx, warp, warpgroup_idx)
            else:
                self.consume(mainloop, tiled_mma, tma_c, mC, total, sA, sB, sC, tile_end, row_end, total_tiles,
                             cluster_idx, num_clusters, rank, tidx, warp, warpgroup_idx, claims=claims)
