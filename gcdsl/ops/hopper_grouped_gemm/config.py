"""What one compiled grouped GEMM is specialised for (`GemmConfig`, with its one validity
check), and the kernel's fixed sizes: tiles, threads, registers, barriers, stages."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import cutlass
import cutlass.pipeline as pipeline
from ..grouped_cases import MAX_GROUPS  # a lane of the schedule warp holds G / 32 groups in registers
from ..grouped_cases import t_contiguous_reduction

TILE_M = 128
TILE_K = 64
# Cooperative: both warpgroups' accumulators hold one tile. 64 for decode: twice the
# tiles of 128 over a weight, so that more SMs stream it when a few experts have rows.
TILE_NS = (64, 128, 256)
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
PINGPONG_TILE_NS = (64, 128, 192)

THREADS = 384
PRODUCER_REGS, CONSUMER_REGS = 40, 232  # 128 x 40 + 256 x 232 <= 64K registers
CONSUMER_WARPS = 8
SCHEDULE_WARP = 1  # builds the schedule from offs while warp 0 prefetches descriptors
FIRST_CONSUMER_WARP = 4
EPILOGUE_BARRIER = pipeline.NamedBarrier(barrier_id=1, num_threads=256)
# Ping-pong: ids 1 and 2 are the warpgroups' epilogue barriers; 3 and 4 (3 + the
# warpgroup's turn) hand the mainloop from one warpgroup to the other (`consume_pingpong`).
FIRST_TURN_BARRIER = 3
# Ragged K with T contiguous in an operand: the barrier after the consumers zero the
# columns of a group's first k-tile that lie before the group (5, or 5 + the warpgroup's
# turn with ping-pong; `Consumers.zero_columns_before_group`).
ZERO_FILL_BARRIER = 5
# The expert layer's down tiles (`experts.py`) hand their output sub-tiles to store warps,
# warps 1 to 3 (the producer warpgroup's idle ones, once the schedule is built), which
# issue the TMA stores, count the tiles' tokens and sum the tokens they complete, while
# the consumers go on with the next tile's WGMMAs. The sub-tile buffers are a ring of
# their own between the two (`Epilogue.make_hand_off`); the store warps' combine has a
# barrier of theirs.
FIRST_STORE_WARP, STORE_WARPS = 1, 3
STORE_WARPS_BARRIER = pipeline.NamedBarrier(barrier_id=7, num_threads=32 * STORE_WARPS)
MAX_STAGES = 8
# A partial M-tile (a group's last, of fewer than TILE_M rows) loads its A rows in boxes of
# this many rows, as many as cover them, not in one box of the whole tile: at decode a
# 128-row box for a handful of rows costs the TMA unit about as much as the stage's weight
# box (`benchmarks/w8_stream.py` streams weights with and without one beside them), and
# every row past the group is discarded anyway.
A_SHORT_BOX_ROWS = 16
# What each of a CTA's phase stamps marks in the expert layer's kernel with `trace`
# (`experts.py`), in slot order, and the slots a CTA has.
PHASES = ("start", "schedule built", "gate-up loads issued", "down loads issued", "gate-up tiles stored",
          "down tiles done", "first down tile's wait over")
STAMP_SLOTS = 8
HEADER_ALIGN = 1024  # the mbarriers and the schedule share the first aligned block(s)
# Claimed tiles (`GemmConfig.claimed_tiles`): the claims in flight between the warp that
# claims a cluster's next tile and the warps that read it (`claims.TileClaims`). The
# producer claims up to four tiles ahead of the slowest reader, and waits there: only
# where a tile has fewer k-tiles than the ring has stages would it run further.
CLAIM_SLOTS = 4
CLAIM_READERS = 1 + CONSUMER_WARPS  # warps of a CTA that read every claim: the producer's and the consumers'

AB_DTYPES = (cutlass.Float16, cutlass.BFloat16)
# What the epilogue applies: nothing, or SwiGLU over B's two halves (B's rows [0, N/2)
# the gate, [N/2, N) the up projection: an MoE's w13 as models store it). With "swiglu"
# each tile holds tile_n/2 gate and the matching tile_n/2 up columns, and stores
# silu(gate) * up: tile_n/2 columns of an (M, N/2) output.
ACTIVATIONS = ("none", "swiglu")
# What is grouped: the rows of A and of the output ("m", ragged by `offs`), the
# reduction ("k", ragged by `offs`, a 3-D output), or nothing ("batch", G equal problems).
RAGGED_MODES = ("m", "k", "batch")
# The order of a ragged-M group's cluster tiles (`Schedule.locate`): "m", M-step fastest,
# so that the CTAs at work together on a group share its B tiles through L2; "n", N-tile
# fastest, so that they share its A rows; or "m_partial_last", M-step fastest over the
# group's full M-steps, then its partial last M-step's N-tiles as one run, so that the
# cheaper partial tiles are taken together instead of one in every N column; or
# "m_blocks", M-step fastest within blocks of M_BLOCK_STEPS M-steps, the blocks one after
# another (the grouped rasterization of CUTLASS's and Triton's schedulers), so that in a
# group whose A rows or B tiles outgrow L2 the CTAs at work together hold a block of its
# A rows and a band of its B tiles rather than all of either (`grouped_mm_rules.pick_tile_order`
# picks).
TILE_ORDERS = ("m", "n", "m_partial_last", "m_blocks")
M_BLOCK_STEPS = 8  # cluster M-steps: 1,024 rows of single CTAs, 2,048 of pairs
# The L2 eviction priority the kernel's TMA copies ask for, as PTX `createpolicy` values
# (CUTLASS's CacheHintSm90): its loads of A and B (`GemmConfig.load_policy`) and its
# stores of the output (`GemmConfig.store_policy`). "default" passes none to `cute.copy`,
# which then issues each copy's `.L2::cache_hint` with a policy of 0; CUTLASS's C++
# kernels pass EVICT_NORMAL to their loads and no hint to their stores. On the DeepSeek-V3
# gate-up GEMMs with routed groups this kernel read 1.7x to 2.1x the DRAM bytes of torch's
# CUTLASS kernel in the same cycles; neither EVICT_NORMAL nor EVICT_LAST loads nor
# EVICT_FIRST stores changed that or its time (benchmarks/RESULTS.md, "DRAM traffic
# against torch's kernel" and "The L2 policy of loads and stores"), so the defaults stay;
# `w7_training.py --load-policies` and `--store-policies` time them.
L2_POLICIES = {"default": None, "evict_normal": 0x1000000000000000, "evict_first": 0x12F0000000000000,
               "evict_last": 0x14F0000000000000}


def l2_policy(name: str) -> Optional[cutlass.Int64]:
    """The `cache_policy` of a `cute.copy` for policy `name` (`L2_POLICIES`); None leaves it to `cute.copy`."""
    value = L2_POLICIES[name]
    return None if value is None else cutlass.Int64(value)


A_MAJORS = ("k", "m")  # which of A's (M, K) modes is contiguous
B_MAJORS = ("k", "n")  # which of B's (N, K) modes is contiguous
C_DTYPES = (cutlass.Float16, cutlass.BFloat16, cutlass.Float32)


def pairs_fit(n: int, tile_n: int) -> bool:
    """Whether, in a pair, each CTA's half of every B tile starts inside B's N rows."""
    return n % tile_n == 0 or n % tile_n > tile_n // 2


def reduction_pairs_fit(m: int, n: int, tile_m: int, tile_n: int) -> bool:
    """Whether the grouped reduction (ragged K, M fixed) can run in pairs: N suits them
    (`pairs_fit`) and M makes an even number of M-tiles, so both CTAs of a pair have rows."""
    return pairs_fit(n, tile_n) and -(-m // tile_m) % 2 == 0


def groups_per_lane(groups: int) -> int:
    """Groups each lane of the schedule warp reads: consecutive ones, G / 32 rounded up."""
    return -(-groups // 32)


def header_bytes(groups: int, claimed_tiles: bool = False) -> int:
    """Shared memory before the A/B ring: mbarriers, then the schedule's two Int32 columns,
    and with claimed tiles their ring (two mbarriers and an Int32 a slot)."""
    schedule = 4 * (2 * 32 * groups_per_lane(groups) + 1)  # tile_end, and row_end after a leading 0
    claims = CLAIM_SLOTS * (2 * 8 + 4) if claimed_tiles else 0
    return -(-(MAX_STAGES * 2 * 8 + schedule + claims) // HEADER_ALIGN) * HEADER_ALIGN


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
    # Ragged M; ragged K (M fixed, an even number of M-tiles). Both schedules.
    cluster_m: int = 1
    ragged: str = "m"
    a_major: str = "k"
    b_major: str = "k"
    m: int = 0  # M when K is ragged (then M is fixed and K the runtime extent)
    schedule: str = "cooperative"
    activation: str = "none"
    # K cut into this many ranges of k-tiles, a tile each, their products added into the
    # output by TMA reduce-add stores (the output zeroed first): more CTAs streaming B
    # where a few groups make few tiles (an expert layer's down GEMM at decode).
    split_k: int = 1
    tile_order: str = "m"  # (TILE_ORDERS)
    load_policy: str = "default"  # (L2_POLICIES) the TMA loads of A and B
    store_policy: str = "default"  # (L2_POLICIES) the TMA stores of the output
    # Ragged M: whether a consumer warpgroup whose rows of a tile all lie past its group (a
    # pair's second CTA on an odd last M-tile; with the cooperative schedule, the second
    # half of a tile of 64 rows or fewer) runs its WGMMAs anyway, on rows it never stores,
    # as CUTLASS's kernels do. Then every tile takes the same time and the persistent CTAs
    # stay in step, sharing what they load through L2; without, such a tile ends early and
    # its CTA runs ahead of the others (benchmarks/RESULTS.md, "DRAM traffic against
    # torch's kernel").
    mma_without_rows: bool = False
    # Ragged M, cooperative: whether a cluster claims each tile after its first from a
    # counter in global memory (zeroed by the host before the launch), one atomic add a
    # tile, rather than taking every clusters-th tile of the schedule. The tiles at work at
    # once then stay a run of consecutive tiles of the schedule however long each one takes,
    # so that the CTAs keep sharing their groups' A rows and B tiles through L2 while tiles
    # of different cost let them drift apart (`claims.py`).
    claimed_tiles: bool = False

    @property
    def tile_m(self) -> int:
        return PINGPONG_TILE_M if self.schedule == "pingpong" else TILE_M

    @property
    def epi_stages(self) -> int:
        """Output sub-tiles in flight: four of 8 KiB for 16-bit outputs, two of 16 KiB for
        fp32 (with ping-pong, half as many for each warpgroup), and never more than a tile
        has (a 64-wide tile has two, one with SwiGLU)."""
        full = (4 if self.c_dtype.width == 16 else 2) // (2 if self.schedule == "pingpong" else 1)
        return max(1, min(full, self.out_tile_n // EPI_TILE[1]))

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
        elif self.cluster_m == 2 and self.ragged == "batch":
            problems.append("pairs are built for ragged M and ragged K only")
        elif self.cluster_m == 2 and self.ragged == "k" and not reduction_pairs_fit(self.m, self.n, self.tile_m,
                                                                                   self.tile_n):
            # (a pair's second CTA past M would load a box wholly outside A)
            problems.append(f"pairs with ragged K need an even number of M-tiles; M = {self.m} makes "
                            f"{-(-self.m // self.tile_m)} of {self.tile_m} rows")
        if self.schedule not in SCHEDULES:
            problems.append(f"schedule {self.schedule!r} is not one of {SCHEDULES}")
        if self.ragged not in RAGGED_MODES or self.a_major not in A_MAJORS or self.b_major not in B_MAJORS:
            problems.append(f"ragged {self.ragged!r}, A {self.a_major!r}-major, B {self.b_major!r}-major: "
                            f"expected one of {RAGGED_MODES}, {A_MAJORS}, {B_MAJORS}")
        elif self.ragged == "k":
            if self.m < 1 or self.k != 0:
                problems.append(f"ragged K has a fixed M and a runtime K; got m = {self.m}, k = {self.k}")
        elif self.k < 1 or self.m != 0:
            problems.append(f"ragged {self.ragged!r} has a fixed K and a runtime M; got m = {self.m}, k = {self.k}")
        if self.activation not in ACTIVATIONS:
            problems.append(f"activation {self.activation!r} is not one of {ACTIVATIONS}")
        elif self.activation == "swiglu":
            if (self.ragged, self.b_major) != ("m", "k"):
                problems.append("SwiGLU is built for ragged M, B K-major")
            if self.n % self.tile_n:
                problems.append(f"SwiGLU reads a tile's gate and up halves from B's two halves: N / 2 = "
                                f"{self.n // 2} must be a multiple of tile_n / 2 = {self.tile_n // 2}")
        if self.tile_order not in TILE_ORDERS:
            problems.append(f"tile order {self.tile_order!r} is not one of {TILE_ORDERS}")
        elif self.tile_order != "m" and self.ragged != "m":
            problems.append("the tile orders are built for ragged M (ragged K and a batch have their own)")
        for copies, policy in (("load", self.load_policy), ("store", self.store_policy)):
            if policy not in L2_POLICIES:
                problems.append(f"{copies} policy {policy!r} is not one of {tuple(L2_POLICIES)}")
        if self.mma_without_rows and self.ragged != "m":
            problems.append("mma_without_rows is built for ragged M (a group without K must store zeros)")
        if self.claimed_tiles and (self.ragged, self.schedule, self.split_k) != ("m", "cooperative", 1):
            problems.append("claimed tiles are built for ragged M, the cooperative schedule, no K splits")
        if self.split_k < 1:
            problems.append(f"split_k = {self.split_k} is not a positive number of K ranges")
        elif self.split_k > 1:
            if (self.ragged, self.schedule, self.cluster_m, self.activation) != ("m", "cooperative", 1, "none"):
                problems.append("K splits are built for ragged M, the cooperative schedule, no pairs, no activation")
            if self.split_k > -(-self.k // TILE_K):
                problems.append(f"split_k = {self.split_k} is more than K = {self.k}'s {-(-self.k // TILE_K)} k-tiles")
        if self.c_dtype in C_DTYPES and (self.out_tile_n // EPI_TILE[1]) % self.epi_stages:
            problems.append(f"a tile's {self.out_tile_n // EPI_TILE[1]} output sub-tiles do not cycle through "
                            f"{self.epi_stages} buffers")
        if problems:
            raise ValueError("unsupported grouped GEMM configuration: " + "; ".join(problems))

    @property
    def short_a_boxes(self) -> bool:
        """Whether a partial M-tile loads A in A_SHORT_BOX_ROWS-row boxes: ragged M with A
        K-major (an M-major A's rows are its contiguous mode, a box per 64 of them)."""
        return self.ragged == "m" and self.a_major == "k"

    @property
    def zero_fill(self) -> bool:
        """Ragged K with T, the reduction, the contiguous mode of A or B (K-major): TMA
        cannot clip such an operand at the group's start (see `HopperGroupedGemm.operands`),
        so the consumers zero what a group's first k-tile holds from before the group."""
        return t_contiguous_reduction(self.ragged, self.a_major, self.b_major)

    @property
    def pairs_fit(self) -> bool:
        return pairs_fit(self.n, self.tile_n)
