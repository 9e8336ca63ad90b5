"""Which configuration `grouped_mm` runs, from shapes alone (never `offs`, which may be
on the GPU): each rule beside the measurements that set it. `grouped_mm.configuration`
says what a call runs, and `grouped_mm_into(..., schedule=, tile_n=, cluster_m=,
tile_order=, mma_without_rows=)` overrides any of them.

Schedule (`pick_schedule`): ping-pong for ragged M once groups average a full 128-row
tile, where N is narrow (`PINGPONG_MAX_N`; `PINGPONG_SHORT_K_MAX_N` where K is short),
groups average fewer than `PINGPONG_ANY_N_MAX_ROWS_PER_GROUP` rows (one to four M-tiles)
but for the averages whose cooperative pairs pad no more rows than single CTAs
(`pairs_pad_no_more`), or it runs in pairs (below), and for the grouped reduction's
shorter groups; cooperative elsewhere. Tile: ping-pong 128x192 (128x128 where N <= 128);
cooperative 128x256, unless N <= 128, the last 256-wide tile would be at most half full (N
mod 256 in 1..128), or the groups that can have rows (at most min(G, T)) make no more
256-wide tiles than half the SMs (decode: 128-wide tiles put twice the CTAs to streaming
B): 128x128. Cluster (ragged rows): pairs when a group averages at least
`PAIR_ROWS_PER_GROUP` rows in the cooperative schedule, `PINGPONG_PAIR_ROWS_PER_GROUP` in
ping-pong (a group whose M-tile count is odd leaves one CTA of its last pair idle: with
about half the groups odd, that is one paired M-tile in 9 at most), or for SwiGLU's
gate-up product `SWIGLU_PAIR_ROWS_PER_GROUP` (cooperative only), or where
`pairs_pad_no_more`, and N mod tile is 0 or more than half a tile (each CTA's half of the
last B tile starts inside B), else single CTAs; the grouped reduction in pairs wherever
they fit. Tile order (ragged rows): a group's N-tiles fastest where K > N and groups
average at least `N_FASTEST_ROWS_PER_GROUP` rows, else its M-steps fastest
(`pick_tile_order`). Warpgroups without rows in a tile (ragged rows) run their WGMMAs
anyway where the plain product's groups average at least
`MMA_WITHOUT_ROWS_MIN_ROWS_PER_GROUP` rows (`pick_mma_without_rows`). SwiGLU's gate-up
product has tiles of its own (`pick_tiles`): the cooperative 128x256 where N is a multiple
of 256, else ping-pong 128x128.
"""
from __future__ import annotations

from typing import Optional, Tuple

from .grouped_cases import Problem

# Pairs of CTAs when a group averages at least this many rows, 4 M-tiles of 128: with
# about half the groups' last pair idle at one CTA, one paired M-tile in 9 idles, which
# pairs make up for by halving B's traffic from L2. At 512 routed rows an expert (2,048
# tokens, DeepSeek-V3 and Mixtral-8x7B; `w7_training.py --forced`, RESULTS.md "Pairs from
# 512 rows a group"), the cooperative 128 x 256 tile in pairs ran 1.02x to 1.43x its single
# CTAs' speed on 6 of the 8 forward and input-gradient GEMMs, 0.93x and 0.95x on the other 2.
PAIR_ROWS_PER_GROUP = 512
# ... and SwiGLU's gate-up product (an MoE layer's, its groups the experts) once they
# average a full M-tile: in fused_moe's two-GEMM form on the three W8 shapes, pairs were
# 1.05x to 1.23x faster at 128 to 1,024 rows an expert, level once (Mixtral-8x7B at 512
# rows; RESULTS.md, "The gate-up GEMM in pairs"). A routed expert's rows spill into a
# last M-tile that alone would load its B tiles again, which a pair loads once.
SWIGLU_PAIR_ROWS_PER_GROUP = 128
# A group's tiles N-tile fastest (its A rows shared by the CTAs at work together) where
# K > N and groups average at least this many rows; M-step fastest (its B tiles shared)
# elsewhere. Measured on the forward and input-gradient GEMMs of the W6/W7 layers at 4,096
# and 16,384 tokens (`benchmarks/w7_training.py --orders`, RESULTS.md "The tile order"):
# on an H200, with groups of about 1,024 rows or more, N-tiles fastest ran at 0.99x to
# 1.07x the M-step order's speed where K > N, and M-steps fastest at 0.97x to 1.08x the
# N-tile order's where N >= K (the largest gaps: Mixtral-8x7B's down forward at 4,096
# tokens, its gate-up forward at 16,384). Two runs of both orders on an H100 (not kept)
# split the same way, with gaps up to 1.12x (DeepSeek-V3's gate-up forward at 4,096
# tokens). Below about 1,024 rows a group (Qwen3-30B-A3B at 4,096 tokens) neither order
# led on both machines.
N_FASTEST_ROWS_PER_GROUP = 1024
# A consumer warpgroup with no rows in a tile (a pair's second CTA on an odd last M-tile,
# the second half of a tile of 64 rows or fewer) runs its WGMMAs anyway where the plain
# product's groups average at least this many rows: its tile then takes as long as the
# others, and the persistent CTAs stay in step and share their loads through L2. On an
# H100 (`benchmarks/ncu_w7.py`, `w7_training.py --mma-without-rows`, RESULTS.md
# "Warpgroups without rows running their WGMMAs") it cut DeepSeek-V3's gate-up DRAM reads
# by a quarter at 1,024 and 4,096 rows an expert. In two runs it ran its gate-up GEMMs at
# 4,096 rows an expert 1.03x to 1.09x faster and its down GEMMs at 1.00x to 1.04x; at
# 1,024 rows an expert (DeepSeek-V3, and Qwen3-30B-A3B's at 256 and 1,024) the extra
# WGMMAs of the partial tiles cost about what the L2 gave or more (0.91x to 1.06x, most
# at or below 1), as in fused_moe's two-GEMM form at 512 and 4,096 tokens (0.89x to 1.08x).
MMA_WITHOUT_ROWS_MIN_ROWS_PER_GROUP = 4096
# The ping-pong schedule (128 x 192 tiles, a consumer warpgroup on each, one's epilogue
# under the other's WGMMAs) for ragged M up to this N, once groups average a full tile
# of rows. Measured on the Qwen3-30B-A3B and DeepSeek-V3 training GEMMs at 4,096 and
# 16,384 tokens (N 768 to 7168; `benchmarks/w7_training.py --every-config`): 1.05x to
# 1.19x the cooperative schedule at N 768 and 1536, 0.96x to 1.04x at N 2048, 0.9x to
# 1.0x above it and on the grouped reduction.
PINGPONG_MAX_N = 1536
# ... and up to PINGPONG_SHORT_K_MAX_N where K <= PINGPONG_SHORT_K, since a short K makes
# each tile's epilogue a larger share of its time: Qwen3-30B-A3B's down GEMM (N 2048,
# K 768) measured 1.03x the cooperative default at 4,096 tokens and 1.20x at 16,384; at
# N 2048 with K 1536 or 7168, 0.93x to 1.03x (the same `--every-config` run).
PINGPONG_SHORT_K = 1024
PINGPONG_SHORT_K_MAX_N = 2048
# ... and at any N where groups average at least one tile of rows but fewer than this.
# Measured on an H100 (`w7_training.py --every-config`, RESULTS.md "Ping-pong where experts
# average one to four M-tiles"): on the forward and input-gradient GEMMs of the DeepSeek-V3
# and Mixtral-8x7B layers (N 2048 to 28672), ping-pong 128 x 192 ran 1.11x to 1.33x the
# cooperative 128 x 256 at 128 routed rows an expert and 1.00x to 1.34x at 256; at 512,
# 0.90x to 1.05x on the forward GEMMs. W5's S4 and S6 (groups of exactly 128 rows, and a
# fixed mix averaging 182) ran at 0.98x and 0.93x to 0.95x; S2 (exactly 256) at 0.91x, and
# at 0.86x the cooperative pairs, all full where no group spills (RESULTS.md "W5 on an H100").
# Not where the average ends in the upper half of a pair's 256-row step (`pairs_pad_no_more`).
PINGPONG_ANY_N_MAX_ROWS_PER_GROUP = 512
# ... and in pairs (B multicast, as the cooperative pairs) once groups average at least
# this many rows, at any N that suits ping-pong's pairs (`pairs_fit`: N mod 192 is 0 or
# more than 96). Measured on an H100 (the same run as PAIR_ROWS_PER_GROUP's): at 1,024
# rows an expert (Qwen3-30B-A3B at 16,384 tokens, N 768 to 2048) ping-pong 128 x 192 in
# pairs was the fastest configuration on all four forward and input-gradient GEMMs, 1.07x
# to 1.24x single ping-pong; DeepSeek-V3's down input gradient (N 2048, K 7168) 1.08x and
# 1.03x the cooperative pairs at 512 and 1,024 rows, level at 4,096; Mixtral-8x7B's (N
# 14336) level with the cooperative tiles. At 256 rows neither led (0.84x to 1.05x single
# ping-pong's speed).
PINGPONG_PAIR_ROWS_PER_GROUP = 512
# The grouped reduction (ragged K, the weight gradient): ping-pong where its groups
# average less than PINGPONG_REDUCTION_MAX_K columns and it runs in pairs (`_Launch`
# takes pairs wherever they fit), or at least PINGPONG_REDUCTION_MIN_K without them.
# Measured on the four W7 points (`w7_training.py --every-config --cases "w13 weight
# grad,w2 weight grad"`): in pairs, ping-pong 192 was 1.03x to 1.13x the cooperative 256
# at 256 and 1,024 columns a group (0.98x on DeepSeek-V3's down weights) and 0.94x to
# 0.95x at 4,096; without pairs (three runs), 1.05x on the median at 1,024 and 0.91x to
# 0.97x at 256, where a tile's 4 k-tiles are the whole ring. Pairs (B multicast) were
# 0.99x to 1.04x the single CTAs in the cooperative schedule, and in ping-pong 1.02x to
# 1.18x but for DeepSeek-V3 at 4,096 tokens' down weights (0.97x).
PINGPONG_REDUCTION_MIN_K = 512
PINGPONG_REDUCTION_MAX_K = 2048


def pairs_pad_no_more(problem: Problem, tile_n: int) -> bool:
    """The cooperative 128 x 256 tile in pairs for ragged rows (the plain product) at an N
    past ping-pong's narrow bound, where groups average more than one M-tile and fewer
    than PINGPONG_ANY_N_MAX_ROWS_PER_GROUP rows, and that average ends in the upper half
    of a pair's 256-row step (128 to 256 rows or 384 to 512, ends excluded): there a
    group's last pair has rows for both CTAs, so pairs pad no more rows than single CTAs
    and halve B's traffic. The ends are excluded for groups of exactly 128 or 384 rows,
    which leave one CTA of every last pair idle (W5's S4, 64 groups of 128 rows, ran far
    slower in pairs). Measured on an H100 (`w7_training.py --forced "cooperative 256
    pairs,pingpong 192"`, RESULTS.md "Pairs between one and four M-tiles a group"): on the
    DeepSeek-V3 and Mixtral-8x7B forward and input-gradient GEMMs at 192, 224, 240, 384
    and 448 rows an expert, 0.92x to 1.48x single ping-pong 128 x 192's speed, faster at
    42 of 44; at 256 and 320 rows (a group just past a step leaves one CTA of its last
    pair idle) single ping-pong was faster at 18 of 20. W5's S6 (a wide spread averaging
    182 rows) ran in these pairs level with the cooperative tile's single CTAs
    (W5_h100.json), which single ping-pong trailed there (above)."""
    from .hopper_grouped_gemm import TILE_M, pairs_fit

    total, groups, step = problem.total, problem.groups, 2 * TILE_M
    return problem.ragged == "m" and problem.n > pingpong_max_n(problem.k) \
        and TILE_M * groups < total < PINGPONG_ANY_N_MAX_ROWS_PER_GROUP * groups \
        and total % (step * groups) > TILE_M * groups and tile_n == 256 and pairs_fit(problem.n, tile_n)


def pingpong_max_n(k: int) -> int:
    """The widest N that ping-pong takes at any number of rows a group (from a full tile)."""
    return PINGPONG_SHORT_K_MAX_N if k <= PINGPONG_SHORT_K else PINGPONG_MAX_N


def pick_tile_n(n: int, m: Optional[int] = None, groups: Optional[int] = None, sms: int = 132) -> int:
    """128x256 tiles unless a 256-wide last tile would be at most half full, or (given M
    and G) the groups that can have rows, at most min(G, M), make no more 256-wide tiles
    than half the SMs: at decode, 128-wide tiles put twice the CTAs to streaming B."""
    if n <= 128 or 0 < n % 256 <= 128:
        return 128
    if m is not None and groups is not None and min(groups, m) * -(-n // 256) <= sms // 2:
        return 128
    return 256


def pick_schedule(problem: Problem, tile_n: Optional[int] = None, cluster_m: Optional[int] = None,
                  sms: int = 132) -> str:
    """"pingpong" for ragged M with groups that average a full tile of rows and either
    N <= PINGPONG_MAX_N (PINGPONG_SHORT_K_MAX_N where K <= PINGPONG_SHORT_K), fewer
    than PINGPONG_ANY_N_MAX_ROWS_PER_GROUP rows (unless `pairs_pad_no_more` with the
    cooperative tile for `sms` SMs, and `cluster_m` allows pairs), or at least
    PINGPONG_PAIR_ROWS_PER_GROUP rows at an N that suits ping-pong's pairs (unless `cluster_m` is 1), and for ragged K
    with groups that average less than PINGPONG_REDUCTION_MAX_K columns, in pairs or at
    least PINGPONG_REDUCTION_MIN_K; unless `tile_n` asks for what only "cooperative" has,
    or `cluster_m` for pairs that ping-pong's tile does not fit (`pairs_fit`)."""
    from .hopper_grouped_gemm import PINGPONG_TILE_M, PINGPONG_TILE_NS, TILE_NS, pairs_fit

    if tile_n in PINGPONG_TILE_NS and tile_n not in TILE_NS:
        return "pingpong"
    pingpong_tile = tile_n or pingpong_tile_n(problem.n)
    fits = tile_n in (None, *PINGPONG_TILE_NS) and (
        cluster_m in (None, 1) or problem.ragged == "k" or pairs_fit(problem.n, pingpong_tile))
    in_pairs = cluster_m != 1 and pick_cluster_m(problem.total, problem.groups, problem.n, pingpong_tile,
                                                  PINGPONG_PAIR_ROWS_PER_GROUP) == 2
    few_tiles = problem.total < PINGPONG_ANY_N_MAX_ROWS_PER_GROUP * problem.groups and not (
        tile_n is None and cluster_m != 1
        and pairs_pad_no_more(problem, pick_tile_n(problem.n, problem.total, problem.groups, sms)))
    if fits and problem.ragged == "m" and problem.total >= PINGPONG_TILE_M * problem.groups \
            and (problem.n <= pingpong_max_n(problem.k) or few_tiles or in_pairs):
        return "pingpong"
    if fits and problem.ragged == "k" and problem.total < PINGPONG_REDUCTION_MAX_K * problem.groups:
        reduction_in_pairs = cluster_m != 1 and pick_reduction_cluster_m(problem, PINGPONG_TILE_M, pingpong_tile) == 2
        if reduction_in_pairs or problem.total >= PINGPONG_REDUCTION_MIN_K * problem.groups:
            return "pingpong"
    return "cooperative"


def pingpong_tile_n(n: int) -> int:
    """The ping-pong schedule's default tile width."""
    return 128 if n <= 128 else 192


def default_cluster_m(problem: Problem, schedule: str, tile_m: int, tile_n: int) -> int:
    """Pairs where the measured GEMMs gained from them: ragged rows in the cooperative
    schedule and in ping-pong (`pick_cluster_m`, from PAIR_ROWS_PER_GROUP and
    PINGPONG_PAIR_ROWS_PER_GROUP rows a group; SwiGLU's product in ping-pong never; in
    the cooperative schedule also where `pairs_pad_no_more`), and the grouped reduction
    wherever they fit."""
    if problem.ragged == "k":
        return pick_reduction_cluster_m(problem, tile_m, tile_n)
    if problem.ragged == "m" and schedule == "cooperative":
        if problem.activation == "none" and pairs_pad_no_more(problem, tile_n):
            return 2
        rows = SWIGLU_PAIR_ROWS_PER_GROUP if problem.activation == "swiglu" else PAIR_ROWS_PER_GROUP
        return pick_cluster_m(problem.total, problem.groups, problem.n, tile_n, rows)
    if problem.ragged == "m" and problem.activation == "none":
        return pick_cluster_m(problem.total, problem.groups, problem.n, tile_n, PINGPONG_PAIR_ROWS_PER_GROUP)
    return 1


def pick_tile_order(problem: Problem) -> str:
    """"n" (a group's N-tiles fastest) for the plain product with ragged rows where K > N
    and groups average at least N_FASTEST_ROWS_PER_GROUP rows; else "m" (M-steps fastest,
    the only order of ragged K and of a batch). SwiGLU's gate-up product keeps "m"."""
    if problem.ragged == "m" and problem.activation == "none" and problem.k > problem.n \
            and problem.total >= N_FASTEST_ROWS_PER_GROUP * problem.groups:
        return "n"
    return "m"


def pick_mma_without_rows(problem: Problem) -> bool:
    """Whether warpgroups without rows in a tile run their WGMMAs (`GemmConfig.mma_without_rows`):
    for the plain product with ragged rows where groups average at least
    MMA_WITHOUT_ROWS_MIN_ROWS_PER_GROUP rows."""
    return problem.ragged == "m" and problem.activation == "none" \
        and problem.total >= MMA_WITHOUT_ROWS_MIN_ROWS_PER_GROUP * problem.groups


def pick_claimed_tiles(problem: Problem) -> bool:
    """Whether the clusters of the cooperative schedule claim their tiles from a counter
    (`GemmConfig.claimed_tiles`) rather than take every clusters-th one: not by default
    until a measurement shows where it pays; `forcing(..., claimed_tiles=True)` and
    `grouped_mm_into(..., claimed_tiles=True)` run it."""
    return False


def pick_reduction_cluster_m(problem: Problem, tile_m: int, tile_n: int) -> int:
    """The grouped reduction: pairs wherever they fit (`reduction_pairs_fit`), in either schedule."""
    from .hopper_grouped_gemm import reduction_pairs_fit

    return 2 if reduction_pairs_fit(problem.m, problem.n, tile_m, tile_n) else 1


def pick_tiles(problem: Problem, schedule: Optional[str], tile_n: Optional[int], cluster_m: Optional[int],
               sms: int) -> Tuple[str, int]:
    """(schedule, tile_n) for `problem`, each picked where the caller left it None."""
    if problem.activation == "swiglu" and schedule is None and tile_n is None:
        # the tiles whose output sub-tiles fill the epilogue's buffers: 128 x 256, or
        # ping-pong 128 x 128 (`GemmConfig`'s check)
        return ("cooperative", 256) if problem.n % 256 == 0 else ("pingpong", 128)
    schedule = schedule or pick_schedule(problem, tile_n, cluster_m, sms)
    if tile_n:
        return schedule, tile_n
    if schedule == "pingpong":
        return schedule, pingpong_tile_n(problem.n)
    if problem.ragged == "m":
        return schedule, pick_tile_n(problem.n, problem.total, problem.groups, sms)
    tiles = fixed_m_tiles(problem)  # every group has the same M-tiles: count them as groups of one tile each
    return schedule, pick_tile_n(problem.n, tiles, tiles, sms)


def pick_cluster_m(m: int, groups: int, n: int, tile_n: int, rows_per_group: int = PAIR_ROWS_PER_GROUP) -> int:
    """2 (pairs of CTAs on two M-tiles of a group, sharing each B tile by multicast) when
    groups average at least `rows_per_group` rows and N suits pairs (`pairs_fit`); else 1.
    From shapes alone: `offs` may be on the device. Both kernels are compiled together.
    """
    from .hopper_grouped_gemm import pairs_fit

    return 2 if m >= rows_per_group * groups and pairs_fit(n, tile_n) else 1


def cluster_tile_bound(m: int, groups: int, n: int, tile_n: int, cluster_m: int, tile_m: Optional[int] = None) -> int:
    """The most cluster tiles any `offs` can make: each group of rows r takes ceil(r / T)
    M-steps of T = tile_m (128) x cluster_m rows, at most (M + min(G, M) (T - 1)) / T in all."""
    from .hopper_grouped_gemm import TILE_M

    step = (tile_m or TILE_M) * cluster_m
    return (m + min(groups, m) * (step - 1)) // step * -(-n // tile_n)


def fixed_m_tiles(problem: Problem, tile_m: Optional[int] = None) -> int:
    """M-tiles of all groups when every group has the same M (ragged K, a batch)."""
    from .hopper_grouped_gemm import TILE_M

    rows = problem.m if problem.ragged == "k" else problem.total
    return problem.groups * -(-rows // (tile_m or TILE_M))
